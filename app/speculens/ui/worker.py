"""The one worker thread that owns the models (DESIGN.md §3).

Every request that touches llama.cpp — load, unload, generate, compare — is a typed request queued to a
single Python thread, so the llama objects are only ever used from one thread and the GUI never waits for
them. A generation's whole life — started, every step, a pause in step mode, finished or failed, and a
comparison's verdict — travels as :class:`Record` objects through one buffer that the
:class:`~speculens.ui.generations.GenerationRouter` drains on a ~30 Hz timer (Friture's pattern), so there
is exactly one path from the engine to the views. Everything else (loading, the demo models, the GPU
probe) reports with queued Qt signals. Cancel sets a ``threading.Event`` directly from the GUI thread; the
engine checks it every speculation step. The thread is never terminated, only asked to finish and joined.
"""

from __future__ import annotations

import collections
import enum
import functools
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import psutil
from PySide6.QtCore import QObject, Signal

from speculens.engine import loading
from speculens.engine.config import GenerationConfig
from speculens.engine.events import Divergence, Event, FinishEvent, FinishReason, RunningStats, StepEvent
from speculens.engine.loading import LoadCancelled, LoadWatch, watching
from speculens.engine.protocol import Engine, EngineFactory, EngineInfo
from speculens.errors import SpeculensError
from speculens.models.gguf_info import read_gguf_info
from speculens.settings import Settings, model_config

if TYPE_CHECKING:
    from speculens.lab import LabProgress, PairLab

log = logging.getLogger(__name__)


class Lane(enum.StrEnum):
    """Which run of a request a record belongs to."""

    CHAT = "chat"
    PLAIN = "plain"  # Compare's plain-decoding half
    SPECULATIVE = "speculative"  # Compare's speculative half


class RecordKind(enum.StrEnum):
    """What happened."""

    QUEUED = "queued"  # the request was submitted (made by the router, so views can clear at once)
    STARTED = "started"  # the prompt is processed (event: the StartEvent)
    STEP = "step"  # one speculation step (event: the StepEvent)
    PAUSED = "paused"  # step mode waits after this step (event: the StepEvent); call advance()
    FINISHED = "finished"  # the run ended (event: the FinishEvent)
    FAILED = "failed"  # the run could not go on (message, error)
    COMPARED = "compared"  # both halves of a comparison finished (comparison)


@dataclass(frozen=True)
class Comparison:
    """Plain decoding and speculation on the same conversation.

    Attributes:
        plain: the plain run's finish event.
        speculative: the speculative run's finish event.
        greedy: decoding was greedy (then only batched kernels' rounding can make them differ).
        exact: the target was loaded for bit-exact verification (then greedy outputs must be identical).
        divergence: where they first differ, with the target's logits there (``None`` when identical).
    """

    plain: FinishEvent
    speculative: FinishEvent
    greedy: bool
    exact: bool
    divergence: Divergence | None

    @property
    def others_share(self) -> tuple[float | None, float | None]:
        """The share of the CPUs other programs used while each half ran (plain, speculative; ``None`` where
        unknown): a busy machine slows one half and not the other (a tour read x1.63 and then x0.63)."""
        return self.plain.others_share, self.speculative.others_share

    @property
    def busy(self) -> float | None:
        """The larger share of the CPUs other programs used during a half, where it crowded llama.cpp's threads
        (``None``: the machine was quiet enough, or it is unknown; see :attr:`FinishEvent.crowded`)."""
        shares = [f.others_share for f in (self.plain, self.speculative) if f.crowded and f.others_share is not None]
        return max(shares) if shares else None

    @property
    def speedup(self) -> float:
        """Speculative tokens/s over plain tokens/s (0 when the plain run produced nothing)."""
        plain = self.plain.stats.tokens_per_second
        return self.speculative.stats.tokens_per_second / plain if plain > 0 else 0.0

    @property
    def identical(self) -> bool:
        """Whether both runs produced the same tokens."""
        return self.plain.tokens == self.speculative.tokens


@dataclass(frozen=True)
class Record:
    """One thing that happened to a generation request.

    Attributes:
        request_id: the id :meth:`EngineWorker.submit` returned.
        lane: chat, or the plain / speculative half of a comparison.
        kind: what happened.
        event: the engine's event (started, step, paused, finished).
        message: why it failed, for the user (failed).
        error: the error itself (failed), so a view can offer a remedy (a conversation too long for the
            context can drop its oldest turns).
        comparison: the verdict (compared).
    """

    request_id: int
    lane: Lane
    kind: RecordKind
    event: Event | None = None
    message: str = ""
    error: Exception | None = None
    comparison: Comparison | None = None

    @property
    def final(self) -> bool:
        """Whether this record ends its request (a comparison ends with its verdict)."""
        if self.kind is RecordKind.FAILED or self.kind is RecordKind.COMPARED:
            return True
        return self.kind is RecordKind.FINISHED and self.lane is Lane.CHAT


# ---- requests -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadRequest:
    """Load the models the settings name (replacing any loaded ones)."""

    settings: Settings


@dataclass(frozen=True)
class UnloadRequest:
    """Free the models."""


@dataclass(frozen=True)
class ChatRequest:
    """Answer the last message of a conversation (role/content dicts, system message included)."""

    messages: tuple[dict[str, str], ...]
    config: GenerationConfig


@dataclass(frozen=True)
class CompareRequest:
    """Answer the same conversation plainly, then with speculation, and compare."""

    messages: tuple[dict[str, str], ...]
    plain: GenerationConfig
    speculative: GenerationConfig


@dataclass(frozen=True)
class DemoRequest:
    """Assemble demo models (by key) from their installed chunk packages and, given ``settings``, load the first
    two as the target and the draft with them. The load is part of this request, so a message sent while the
    files are assembled waits behind the load instead of running before it."""

    keys: tuple[str, ...]
    settings: Settings | None = None


@dataclass(frozen=True)
class ProbeRequest:
    """Ask llama.cpp which GPU backend the build has (importing it takes a moment)."""


@dataclass(frozen=True)
class LabRequest:
    """Run the pair lab (:class:`speculens.lab.PairLab`) on its own engine; ``estimate_only`` stops after the
    cost profile (the estimates shown before a run)."""

    lab: PairLab
    estimate_only: bool = False


Request = LoadRequest | UnloadRequest | ChatRequest | CompareRequest | DemoRequest | ProbeRequest | LabRequest
GENERATIONS = (ChatRequest, CompareRequest)
CANCELLABLE = (ChatRequest, CompareRequest, LabRequest)


@dataclass(frozen=True)
class LoadResult:
    """What a load achieved.

    Attributes:
        settings: the settings the models were loaded with (the reload note compares against them).
        info: what is loaded.
        draft_error: why the chosen draft was not loaded (the target alone still works), or ``None``.
        seconds: how long loading took.
    """

    settings: Settings
    info: EngineInfo
    draft_error: str | None
    seconds: float


@dataclass
class _Job:
    request: Request
    request_id: int
    cancel: threading.Event = field(default_factory=threading.Event)


_STOP = object()


def default_engine_factory(config: object) -> Engine:
    """The real engine (imported on the worker thread: llama.cpp takes a moment to load)."""
    from speculens.engine.session import SpeculativeEngine

    return SpeculativeEngine(config)  # type: ignore[arg-type]


class EngineWorker(QObject):
    """Owns the engine on its own thread and runs requests one at a time.

    Args:
        engine_factory: builds the engine from a model configuration (tests pass a fake).
        parent: the Qt parent.

    Signals:
        load_started(): loading began.
        models_loaded(LoadResult): the models are ready.
        load_failed(str): loading failed; the message is for the user.
        load_cancelled(): loading was cancelled (:meth:`cancel_loading`); nothing is loaded.
        models_unloaded(why): the models were freed ("" for Unload; else why, for the user).
        backend_probed(object): the llama.cpp build's GPU backend name ("CUDA", "Metal", ...) or None.
        progress_changed(str, int, int): a long task's (what, done, total) in bytes, e.g. assembling the demo models
            or reading a model's weights; total 0 for a step of unknown length (timing this machine).
        demo_prepared(list): the demo model paths, in the order asked for.
        task_failed(str): a task other than loading or generating failed; the message is for the user.
        records_ready(): generation records are waiting in the buffer (a hint; the router also polls).
        lab_progressed(object): a pair-lab run's :class:`~speculens.lab.LabProgress`.
        lab_finished(object): a pair-lab run's (or estimate's) :class:`~speculens.lab.LabResult`.
        lab_failed(str): the pair lab could not run; the message is for the user.
    """

    load_started = Signal()
    models_loaded = Signal(object)
    info_changed = Signal(object)  # EngineInfo: what is loaded, said again where an answer changed it
    load_failed = Signal(str)
    load_cancelled = Signal()
    models_unloaded = Signal(str)  # why, where the user did not ask for it ("" for Unload)
    backend_probed = Signal(object)
    progress_changed = Signal(str, int, int)
    demo_prepared = Signal(list)
    task_failed = Signal(str)
    records_ready = Signal()
    lab_progressed = Signal(object)
    lab_finished = Signal(object)
    lab_failed = Signal(str)

    def __init__(self, engine_factory: EngineFactory | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._factory: EngineFactory = engine_factory or default_engine_factory
        self._jobs: queue.Queue[_Job | object] = queue.Queue()
        self._records: collections.deque[Record] = collections.deque()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._pending: dict[int, _Job] = {}
        self._step_mode = threading.Event()
        self._gate = threading.Event()
        self._engine: Engine | None = None
        self._info: EngineInfo | None = None  # what models_loaded or info_changed said last
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="speculens-engine", daemon=True)
        self._thread.start()

    # ---- called from the GUI thread -------------------------------------------------------------------

    @property
    def is_loaded(self) -> bool:
        """Whether a target model is loaded (read without locking: a stale answer only delays a button)."""
        return self._engine is not None

    def submit(self, request: Request) -> int:
        """Queue a request; returns its id (generation records carry it).

        Raises:
            RuntimeError: the worker is closed.
        """
        if self._closed:
            raise RuntimeError("the engine worker is closed")
        job = _Job(request, next(self._ids))
        with self._lock:
            self._pending[job.request_id] = job
        self._jobs.put(job)
        return job.request_id

    def cancel(self, request_id: int | None = None) -> None:
        """Stop a generation or a lab run (all of them by default) within one speculation step; a queued one
        never runs."""
        with self._lock:
            for job in self._pending.values():
                if isinstance(job.request, CANCELLABLE) and request_id in (None, job.request_id):
                    job.cancel.set()
        self._gate.set()  # a step paused in step mode must wake up to see the cancel

    def cancel_loading(self) -> None:
        """Stop the load that runs (within one tensor of llama.cpp's reading, or one timed decode call) and any
        that wait; the models the last load left are freed either way, so nothing is loaded afterwards."""
        with self._lock:
            for job in self._pending.values():
                if isinstance(job.request, LoadRequest | DemoRequest):
                    job.cancel.set()

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

    def take_records(self) -> list[Record]:
        """Remove and return the buffered records, oldest first (the router's timer calls this)."""
        out: list[Record] = []
        pop = self._records.popleft
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
                for job in self._pending.values():
                    job.cancel.set()
            self._gate.set()
            self._step_mode.clear()
            self._jobs.put(_STOP)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # ---- the worker thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if not isinstance(job, _Job):
                break
            try:
                self._handle(job)
            except Exception as exc:  # a bug must not kill the only thread that can free the models
                log.exception("worker request %s failed", type(job.request).__name__)
                self._report_failure(job, f"Unexpected error ({type(exc).__name__}: {exc}); see the log.", exc)
            finally:
                with self._lock:
                    self._pending.pop(job.request_id, None)
        self._free()

    def _handle(self, job: _Job) -> None:
        match job.request:
            case LoadRequest(settings=settings):
                self._watched(job.cancel, functools.partial(self._load, settings))
            case UnloadRequest():
                self._free()
                self.models_unloaded.emit("")
            case ChatRequest(messages=messages, config=config):
                self._generate(job, Lane.CHAT, messages, config)
                self._refresh_info()
            case CompareRequest():
                self._compare(job, job.request)
                self._refresh_info()
            case DemoRequest(keys=keys, settings=settings):
                self._watched(job.cancel, functools.partial(self._demo, keys, settings))
            case ProbeRequest():
                from speculens.engine.backend import gpu_backend_name

                self.backend_probed.emit(gpu_backend_name())
            case LabRequest(lab=lab, estimate_only=estimate_only):
                self._lab(job, lab, estimate_only)

    def _report_failure(self, job: _Job, message: str, error: Exception) -> None:
        match job.request:
            case LoadRequest():
                self.load_failed.emit(message)
            case LabRequest():
                self.lab_failed.emit(message)
            case ChatRequest() | CompareRequest():
                self._records.append(Record(job.request_id, Lane.CHAT, RecordKind.FAILED, message=message, error=error))
                self.records_ready.emit()
            case _:
                self.task_failed.emit(message)

    def _free(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def _watched(self, cancel: threading.Event, load: Callable[[], None]) -> None:
        """Run a load (or the demo pair's assembly and load) under a loading watch: its steps go out as
        ``progress_changed``, and a cancel ends it with ``load_cancelled`` (see :mod:`speculens.engine.loading`)."""
        try:
            with watching(LoadWatch(cancel, self.progress_changed.emit)):
                load()
        except LoadCancelled:
            self.load_cancelled.emit()

    def _load(self, settings: Settings) -> None:
        self.load_started.emit()
        t0 = time.perf_counter()
        self._free()
        loading.check()  # cancelled while it waited: the old models are freed all the same
        try:
            config = model_config(settings)
            if config.n_threads == 0:
                config = replace(config, n_threads=gui_threads())
            # The header first: a truncated or damaged file gets its real diagnosis, not llama.cpp's "could
            # not load". The target, then the draft separately, so a refused draft leaves a usable target for
            # the draft-free strategies instead of failing the whole load.
            read_gguf_info(config.target, tokens=False)
            engine = self._factory(replace(config, draft=None))
        except SpeculensError as exc:
            self.load_failed.emit(exc.message)
            return
        draft_error: str | None = None
        if config.draft is not None:
            try:
                read_gguf_info(config.draft, tokens=False)
                engine.load_draft(config.draft)
            except SpeculensError as exc:
                draft_error = exc.message
            except BaseException:
                engine.close()  # never leak the target that did load (a cancel included)
                raise
        self._engine = engine
        self._info = engine.info()
        self.models_loaded.emit(LoadResult(settings, self._info, draft_error, time.perf_counter() - t0))

    def _refresh_info(self) -> None:
        """Say what is loaded again where an answer changed it: the costs measured as it ran can turn the verdict on
        the draft model (a tour's toolbar said "cannot pay here", from a load beside a busy program, over an answer
        whose draft model had sat out only for the prompt it would have had to read)."""
        if self._engine is None:
            return
        info = self._engine.info()
        if info != self._info:
            self._info = info
            self.info_changed.emit(info)

    def _demo(self, keys: Sequence[str], settings: Settings | None) -> None:
        from speculens.models.demo import demo_model, ensure_demo_model

        out: list[str] = []
        try:  # an assembly cut short by a cancel leaves no file behind (write_atomic)
            for key in keys:
                model = demo_model(key)
                out.append(str(ensure_demo_model(model, progress=_assembling(model.title))))
        except SpeculensError as exc:
            self.task_failed.emit(exc.message)
            return
        self.demo_prepared.emit(out)
        if settings is not None and len(out) >= 2:
            self._load(replace(settings, target_path=out[0], draft_path=out[1]))

    def _lab(self, job: _Job, lab: PairLab, estimate_only: bool) -> None:
        """Run the pair lab on this thread (its own engine: the loaded models stay for the chat, unless the memory
        the system has available would not hold the lab's beside them: a tour's lab took 2.0 GB to 3.5 GB)."""
        lab.cancel = job.cancel
        if self._engine is not None:
            need, free = lab.memory_needed(), available_memory()
            if free is not None and need > free:
                self._free()
                self.models_unloaded.emit(
                    f"The chat's models were unloaded to leave the Pair lab room: its models take about "
                    f"{need / 1e9:.1f} GB and {free / 1e9:.1f} GB was available. They load again with your next "
                    "message (or Load, Ctrl+L)."
                )
        last = [0.0]

        def progress(p: LabProgress) -> None:
            now = time.monotonic()
            if now - last[0] >= 0.2:  # a progress bar needs no more
                last[0] = now
                self.lab_progressed.emit(p)

        try:
            result = lab.estimate() if estimate_only else lab.run(progress)
        except SpeculensError as exc:
            self.lab_failed.emit(exc.message)
            return
        self.lab_finished.emit(result)

    def _record(self, job: _Job, lane: Lane, kind: RecordKind, **fields: object) -> None:
        self._records.append(Record(job.request_id, lane, kind, **fields))  # type: ignore[arg-type]
        if kind is not RecordKind.STEP:  # steps are polled; the rest wake the router at once
            self.records_ready.emit()

    def _generate(
        self, job: _Job, lane: Lane, messages: Sequence[dict[str, str]], config: GenerationConfig
    ) -> FinishEvent | None:
        """Run one answer into the record buffer; return its finish event, or ``None`` after a failure."""
        if self._engine is None and job.cancel.is_set():  # stopped while its load ran (and was cancelled with it)
            stopped = FinishEvent(FinishReason.CANCELLED, "", (), RunningStats())
            self._record(job, lane, RecordKind.FINISHED, event=stopped)
            return stopped
        if self._engine is None:
            self._record(job, lane, RecordKind.FAILED, message=NO_MODEL_LOADED)
            return None
        self._gate.clear()
        finish: FinishEvent | None = None
        try:
            for event in self._engine.chat(messages, config, job.cancel):
                if isinstance(event, StepEvent):
                    self._record(job, lane, RecordKind.STEP, event=event)
                    if self._step_mode.is_set() and not job.cancel.is_set():
                        self._record(job, lane, RecordKind.PAUSED, event=event)
                        self._gate.wait()
                        self._gate.clear()
                elif isinstance(event, FinishEvent):
                    finish = event
                    self._record(job, lane, RecordKind.FINISHED, event=event)
                else:
                    self._record(job, lane, RecordKind.STARTED, event=event)
        except SpeculensError as exc:
            self._record(job, lane, RecordKind.FAILED, message=exc.message, error=exc)
            return None
        if finish is None:  # the engine broke its contract; the views must still learn the request ended
            self._record(job, lane, RecordKind.FAILED, message="The engine ended the answer without finishing it.")
        return finish

    def _compare(self, job: _Job, request: CompareRequest) -> None:
        runs: list[FinishEvent] = []
        for lane, config in ((Lane.PLAIN, request.plain), (Lane.SPECULATIVE, request.speculative)):
            finish = self._generate(job, lane, request.messages, config)
            if finish is None:
                return  # the failure is recorded
            if job.cancel.is_set():
                self._record(job, lane, RecordKind.FAILED, message="Comparison stopped.")
                return
            runs.append(finish)
        assert self._engine is not None
        plain, speculative = runs
        divergence = None
        if plain.tokens != speculative.tokens:
            try:  # an explanation of where they differ is a bonus: the comparison stands without it
                divergence = self._engine.chat_divergence(request.messages, plain.tokens, speculative.tokens)
            except SpeculensError as exc:
                log.warning("could not explain where the answers differ: %s", exc.message)
        greedy = request.speculative.sampling.greedy
        comparison = Comparison(plain, speculative, greedy, self._engine.config.exact, divergence)
        self._record(job, Lane.SPECULATIVE, RecordKind.COMPARED, comparison=comparison)


def available_memory() -> int | None:
    """The memory the system can give without swapping, in bytes (``None`` where unknown)."""
    try:
        return int(psutil.virtual_memory().available)
    except (psutil.Error, OSError):
        return None


def _assembling(title: str) -> Callable[[int, int], None]:
    """The progress of assembling a demo model, which a cancelled load stops."""

    def progress(done: int, total: int) -> None:
        loading.check()
        loading.report(f"Assembling {title}", done, total)

    return progress


def gui_threads() -> int:
    """The automatic thread count under the GUI: every core the engine would use, but one when it has more
    than two.

    llama.cpp's compute threads spin at their barriers, and while the window paints it takes a core from one
    of them, so every barrier waits for it. With charts that keep to a small share of a core
    (:func:`~speculens.ui.charts.paint_budget`: 1.5% here) that costs far less than a core: on 2 cores the demo target
    decoded at 27-29 tokens/s in the window with 2 threads against 21 with 1 (31 without the window), and its
    0.5B draft, as a target, at 38-43 against 26-29. With more cores, one stays free for the GUI: it costs
    a quarter of the compute at most, and decoding is bound by memory before that (not measured here).
    """
    from speculens.engine.backend import default_threads

    n = default_threads()
    return n if n <= 2 else n - 1


# Why an answer could not start: the live panel takes it away once models load (LivePanel.models_loaded).
NO_MODEL_LOADED = (
    "No model is loaded: choose a target model (Models ▸ Models…, Ctrl+M); if one is chosen, its load failed (the "
    "message about it says why)."
)
