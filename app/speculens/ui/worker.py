"""The one worker thread that owns the models (DESIGN.md §3).

Every request that touches llama.cpp — load, unload, chat, compare — is queued to a single Python thread,
so the two llama objects are only ever used from one thread and the GUI never waits for them. Step events
are not sent as one signal each (thousands per second with a fast drafter would flood the event loop):
the worker appends them to a buffer that the GUI drains on a ~30 Hz timer (Friture's pattern), and only
the lifecycle of a request travels as queued Qt signals. Cancel sets a ``threading.Event`` directly from
the GUI thread; the engine checks it every speculation step. The thread is never terminated, only asked
to finish and joined.
"""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from speculens.settings import Settings, generation_config, model_config

if TYPE_CHECKING:
    from speculens.engine.events import Event, FinishEvent
    from speculens.engine.session import SpeculativeEngine

log = logging.getLogger(__name__)

LANE_CHAT = "chat"
LANE_PLAIN = "plain"
LANE_SPECULATIVE = "speculative"


@dataclass(frozen=True)
class TaggedEvent:
    """An engine event with the request and lane it belongs to.

    Attributes:
        request_id: the id :meth:`EngineWorker.chat` or :meth:`EngineWorker.compare` returned.
        lane: ``chat``, or ``plain`` / ``speculative`` for the two halves of a comparison.
        event: the engine's event.
    """

    request_id: int
    lane: str
    event: Event


@dataclass(frozen=True)
class LoadedModels:
    """What the worker has loaded.

    Attributes:
        target: the target's file name.
        draft: the draft's file name (``None`` when no draft is loaded).
        draft_error: why a chosen draft was refused (tokenizer mismatch), or ``None``.
        description: llama.cpp's one-line description of the target.
        n_ctx: the context size.
        seconds: how long loading took.
    """

    target: str
    draft: str | None
    draft_error: str | None
    description: str
    n_ctx: int
    seconds: float


@dataclass(frozen=True)
class CompareResult:
    """Plain decoding and speculation on the same prompt.

    Attributes:
        plain: the plain run's finish event.
        speculative: the speculative run's finish event.
        strategy: the speculative strategy.
        greedy: whether decoding was greedy (then the outputs must be identical).
    """

    plain: FinishEvent
    speculative: FinishEvent
    strategy: str
    greedy: bool

    @property
    def speedup(self) -> float:
        """Speculative tokens/s over plain tokens/s (0 when the plain run produced nothing)."""
        plain = self.plain.stats.tokens_per_second
        return self.speculative.stats.tokens_per_second / plain if plain > 0 else 0.0

    @property
    def identical(self) -> bool:
        """Whether both runs produced the same tokens."""
        return self.plain.tokens == self.speculative.tokens


@dataclass
class _Request:
    kind: str
    request_id: int
    args: dict[str, Any] = field(default_factory=dict)
    cancel: threading.Event = field(default_factory=threading.Event)


_STOP = _Request("stop", -1)


class EngineWorker(QObject):
    """Owns the :class:`SpeculativeEngine` on its own thread and runs requests one at a time.

    Args:
        parent: the Qt parent.

    Signals:
        busy_changed(bool): a request started (True) or the queue ran empty (False).
        load_started(): loading began.
        models_loaded(LoadedModels): the models are ready.
        load_failed(str): loading failed; the message is for the user.
        models_unloaded(): the models were freed.
        generation_started(int, str): request id and lane.
        step_paused(int): Teach step mode is waiting after this step number; call :meth:`advance`.
        generation_finished(int, str, FinishEvent): request id, lane, final event.
        generation_failed(int, str): request id and a message for the user.
        compare_finished(int, CompareResult): both halves of a comparison are done.
        backend_probed(object): the llama.cpp build's GPU backend name ("CUDA", "Metal", ...) or None.
        progress_changed(str, int, int): a long task's (what, done, total), e.g. assembling the demo models.
        demo_prepared(list): the demo model paths, in the order asked for.
        task_failed(str): a task other than loading or generating failed; the message is for the user.
    """

    busy_changed = Signal(bool)
    load_started = Signal()
    models_loaded = Signal(object)
    load_failed = Signal(str)
    models_unloaded = Signal()
    generation_started = Signal(int, str)
    step_paused = Signal(int)
    generation_finished = Signal(int, str, object)
    generation_failed = Signal(int, str)
    compare_finished = Signal(int, object)
    backend_probed = Signal(object)
    progress_changed = Signal(str, int, int)
    demo_prepared = Signal(list)
    task_failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._requests: queue.Queue[_Request] = queue.Queue()
        self._events: collections.deque[TaggedEvent] = collections.deque()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._pending: dict[int, _Request] = {}
        self._step_mode = threading.Event()
        self._gate = threading.Event()
        self._engine: SpeculativeEngine | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="speculens-engine", daemon=True)
        self._thread.start()

    # ---- called from the GUI thread -------------------------------------------------------------------

    @property
    def is_loaded(self) -> bool:
        """Whether a target model is loaded (read without locking: a stale answer only delays a button)."""
        return self._engine is not None

    def load(self, settings: Settings) -> int:
        """Queue loading the models the settings name (replacing any loaded ones)."""
        return self._submit("load", settings=settings)

    def unload(self) -> int:
        """Queue freeing the models."""
        return self._submit("unload")

    def chat(self, history: list[dict[str, str]], user_text: str, settings: Settings) -> int:
        """Queue one chat turn.

        Args:
            history: the conversation before this turn (role/content dicts, system message included).
            user_text: the new user message.
            settings: the generation settings to use.

        Returns:
            The request id that tags this turn's events.
        """
        return self._submit("chat", history=list(history), user_text=user_text, settings=settings)

    def compare(self, history: list[dict[str, str]], user_text: str, settings: Settings) -> int:
        """Queue the same turn twice: plain decoding, then the chosen strategy."""
        return self._submit("compare", history=list(history), user_text=user_text, settings=settings)

    def probe_backend(self) -> int:
        """Queue asking llama.cpp whether it can offload to a GPU (importing it takes a moment)."""
        return self._submit("probe")

    def prepare_demo(self, keys: list[str]) -> int:
        """Queue assembling demo models (by key) from their installed chunk packages."""
        return self._submit("demo", keys=list(keys))

    def cancel(self) -> None:
        """Stop the running generation within one speculation step and drop queued ones."""
        with self._lock:
            for request in self._pending.values():
                if request.kind in ("chat", "compare"):
                    request.cancel.set()
        self._gate.set()  # a step paused in Teach mode must wake up to see the cancel

    def set_step_mode(self, enabled: bool) -> None:
        """Pause after every speculation step (Teach) until :meth:`advance` is called."""
        if enabled:
            self._step_mode.set()
        else:
            self._step_mode.clear()
            self._gate.set()

    def advance(self) -> None:
        """Let a generation paused in step mode run its next step."""
        self._gate.set()

    def take_events(self) -> list[TaggedEvent]:
        """Remove and return the buffered events, oldest first (the GUI timer calls this)."""
        out: list[TaggedEvent] = []
        pop = self._events.popleft
        try:
            while True:
                out.append(pop())
        except IndexError:
            return out

    def close(self, timeout: float = 30.0) -> bool:
        """Cancel, finish the current request, free the models and join the thread.

        Returns:
            True when the thread ended within ``timeout`` seconds.
        """
        if not self._closed:
            self._closed = True
            with self._lock:
                for request in self._pending.values():
                    request.cancel.set()
            self._gate.set()
            self._step_mode.clear()
            self._requests.put(_STOP)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _submit(self, kind: str, **args: Any) -> int:
        if self._closed:
            raise RuntimeError("the engine worker is closed")
        request = _Request(kind, next(self._ids), args)
        with self._lock:
            self._pending[request.request_id] = request
        self._requests.put(request)
        return request.request_id

    # ---- the worker thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            request = self._requests.get()
            if request is _STOP:
                break
            self.busy_changed.emit(True)
            try:
                handler = getattr(self, f"_do_{request.kind}")
                handler(request)
            except Exception as exc:  # a bug must not kill the only thread that can free the models
                log.exception("worker request %s failed", request.kind)
                if request.kind == "load":
                    self.load_failed.emit(f"Unexpected error while loading: {exc}")
                elif request.kind in ("probe", "demo", "unload"):
                    self.task_failed.emit(f"Unexpected error: {exc}")
                else:
                    self.generation_failed.emit(request.request_id, f"Unexpected error: {exc}")
            finally:
                with self._lock:
                    self._pending.pop(request.request_id, None)
                    idle = not self._pending
                if idle:
                    self.busy_changed.emit(False)
        self._free()

    def _free(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def _do_load(self, request: _Request) -> None:
        from speculens.engine.backend import BackendError
        from speculens.engine.session import SpeculativeEngine
        from speculens.engine.vocab import VocabMismatchError

        settings: Settings = request.args["settings"]
        self.load_started.emit()
        t0 = time.perf_counter()
        self._free()
        try:
            config = model_config(settings)
        except ValueError as exc:
            self.load_failed.emit(str(exc))
            return
        if config.n_threads == 0:
            config = replace(config, n_threads=gui_threads())
        draft_error: str | None = None
        try:
            # Load the target first and the draft separately, so a refused draft leaves a usable target
            # for the draft-free strategies instead of failing the whole load.
            engine = SpeculativeEngine(_without_draft(config))
            if config.draft is not None:
                try:
                    engine.load_draft(config.draft)
                except VocabMismatchError as exc:
                    draft_error = str(exc)
                except BackendError as exc:
                    draft_error = f"The draft model could not be loaded: {exc}"
        except BackendError as exc:
            self.load_failed.emit(str(exc))
            return
        self._engine = engine
        self.models_loaded.emit(
            LoadedModels(
                target=config.target.name,
                draft=config.draft.name if engine.draft is not None and config.draft else None,
                draft_error=draft_error,
                description=engine.target.description(),
                n_ctx=config.n_ctx,
                seconds=time.perf_counter() - t0,
            )
        )

    def _do_probe(self, request: _Request) -> None:
        from speculens.engine.backend import gpu_backend_name

        self.backend_probed.emit(gpu_backend_name())

    def _do_demo(self, request: _Request) -> None:
        from speculens.models.demo import DemoModelError, demo_model, ensure_demo_model

        out: list[str] = []
        for key in request.args["keys"]:
            model = demo_model(key)
            try:
                out.append(str(ensure_demo_model(model, progress=self._throttled_progress(model.title))))
            except DemoModelError as exc:
                self.task_failed.emit(str(exc))
                return
        self.demo_prepared.emit(out)

    def _throttled_progress(self, title: str) -> Callable[[int, int], None]:
        last = [0.0]

        def progress(done: int, total: int) -> None:
            now = time.monotonic()
            # Assembling calls back per 8 MiB chunk; 10 updates a second are plenty for a progress bar.
            if now - last[0] >= 0.1 or done >= total:
                last[0] = now
                self.progress_changed.emit(f"Assembling {title}", done, total)

        return progress

    def _do_unload(self, request: _Request) -> None:
        self._free()
        self.models_unloaded.emit()

    def _do_chat(self, request: _Request) -> None:
        settings: Settings = request.args["settings"]
        finish = self._turn(request, LANE_CHAT, generation_config(settings))
        if finish is not None:
            self.generation_finished.emit(request.request_id, LANE_CHAT, finish)

    def _do_compare(self, request: _Request) -> None:
        settings: Settings = request.args["settings"]
        plain = self._turn(request, LANE_PLAIN, generation_config(settings, strategy="none"))
        if plain is None:
            return
        self.generation_finished.emit(request.request_id, LANE_PLAIN, plain)
        speculative = self._turn(request, LANE_SPECULATIVE, generation_config(settings))
        if speculative is None:
            return
        self.generation_finished.emit(request.request_id, LANE_SPECULATIVE, speculative)
        self.compare_finished.emit(
            request.request_id,
            CompareResult(plain, speculative, settings.strategy, settings.temperature <= 0),
        )

    def _turn(self, request: _Request, lane: str, config: Any) -> FinishEvent | None:
        """Run one chat turn into the event buffer; return its finish event, or ``None`` after a failure."""
        from speculens.engine.config import PromptError
        from speculens.engine.events import FinishEvent, StepEvent
        from speculens.engine.session import ChatSession

        if self._engine is None:
            self.generation_failed.emit(request.request_id, "No model is loaded: load a model pair first.")
            return None
        session = ChatSession(self._engine)
        session.messages = list(request.args["history"])
        self._gate.clear()
        try:
            events = session.send(request.args["user_text"], config, request.cancel)
            self.generation_started.emit(request.request_id, lane)
            finish: FinishEvent | None = None
            for event in events:
                self._events.append(TaggedEvent(request.request_id, lane, event))
                if isinstance(event, FinishEvent):
                    finish = event
                elif (
                    isinstance(event, StepEvent) and self._step_mode.is_set() and not request.cancel.is_set()
                ):
                    self.step_paused.emit(event.step)
                    self._gate.wait()
                    self._gate.clear()
        except (PromptError, ValueError) as exc:
            self.generation_failed.emit(request.request_id, str(exc))
            return None
        return finish


def _without_draft(config: Any) -> Any:
    return replace(config, draft=None)


def gui_threads() -> int:
    """The automatic thread count under the GUI: every core the engine would use but one.

    llama.cpp's compute threads spin at their barriers; when the window's painting takes one of their
    cores, every barrier waits for a descheduled thread and decoding slows down many times over (measured
    on 2 cores: 288 tokens/s with 2 threads against 3000 without the window). One core stays for the GUI.
    """
    from speculens.engine.backend import default_threads

    return max(1, default_threads() - 1)
