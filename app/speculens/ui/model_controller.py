"""Loading, the demo pair, the chosen pair and its compatibility badge: one non-widget object owns them.

The toolbar, the menus, the model manager and the first-start dialog all go through the
:class:`ModelController`; it talks to the worker for loading (and the demo models, and the GPU probe), to
the settings store for the chosen files, and keeps the state the views draw: what is loaded, whether a load
is running, its progress, and the pair's badge. A failed load changes nothing the user chose: the message
says why (the file, not the tokenizer, when a draft is damaged), and the settings stay as they were.
"""

from __future__ import annotations

import html
import json
import logging
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from speculens import paths
from speculens.atomic import write_json_atomic
from speculens.engine.protocol import EngineInfo
from speculens.models.compat import PairReport, check_pair
from speculens.models.hub import HubClient
from speculens.models.library import Library
from speculens.settings import Settings, field_labels
from speculens.ui.settings_store import SettingsStore
from speculens.ui.tasks import TaskRunner
from speculens.ui.worker import DemoRequest, EngineWorker, LoadRequest, LoadResult, ProbeRequest, UnloadRequest
from speculens.words import upper_first

log = logging.getLogger(__name__)

LEVEL_STYLE = {"ok": ("✓", "#2ea043"), "warning": ("!", "#d29922"), "error": ("✗", "#d73a49")}


@dataclass(frozen=True)
class DraftVerdict:
    """What a load measured of a draft model for its target on this machine.

    Attributes:
        date: when, in UTC (ISO 8601).
        idle: why the draft model cannot pay here (the engine's phrase), or ``None``: it can.
    """

    date: str
    idle: str | None


def _pair_key(target: str, draft: str) -> str:
    return f"{paths.resolved(target) or target}\n{paths.resolved(draft) or draft}"


def _verdicts() -> dict[str, Any]:
    """The kept verdicts by pair (empty where there are none, or the file is unreadable)."""
    try:
        doc = json.loads(paths.draft_verdicts_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def saved_verdict(target: str, draft: str) -> DraftVerdict | None:
    """The verdict the last load of this pair measured, kept across sessions (``None``: never loaded together, or
    the file is unreadable). A tour's picker said "not measured yet" of a pair that an earlier load had timed, once
    a draft-free strategy had loaded the target alone."""
    try:
        entry = _verdicts()[_pair_key(target, draft)]
        return DraftVerdict(str(entry["date"]), None if entry.get("idle") is None else str(entry["idle"]))
    except (KeyError, TypeError):
        return None


def _keep_verdict(target: str, draft: str, idle: str | None) -> None:
    """Keep what this load measured of the draft model (errors are logged: it is a convenience)."""
    doc = _verdicts()
    doc[_pair_key(target, draft)] = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "idle": idle}
    try:
        write_json_atomic(paths.draft_verdicts_file(), doc)
    except OSError as exc:
        log.warning("could not keep the draft model's verdict: %s", exc)


@dataclass(frozen=True)
class Badge:
    """The pair's verdict next to its name.

    Attributes:
        ok: the draft can draft for the target (``False``: it cannot, or could not be checked or loaded).
        text: the badge's short text.
        report: the full report, as HTML.
    """

    ok: bool
    text: str
    report: str


def report_html(report: PairReport, headline: bool = True) -> str:
    """A compatibility report as HTML: the headline (unless shown beside it already), then every named check with
    its level."""
    rows = []
    for check in report.checks:
        symbol, colour = LEVEL_STYLE.get(check.level.value, ("?", "#888"))
        rows.append(
            f"<tr><td style='color:{colour}; font-weight:bold'>{symbol}</td>"
            f"<td><b>{html.escape(check.title)}</b></td><td>{html.escape(check.message)}</td></tr>"
        )
    head = f"<p>{html.escape(report.headline)}</p>" if headline else ""
    return f"{head}<table cellspacing='4'>{''.join(rows)}</table>"


class ModelController(QObject):
    """Owns loading, the demo pair, the chosen pair and the badge.

    Args:
        worker: the engine worker.
        store: the settings store (the chosen files, the loaded settings).
        library: the application's one model library.
        parent: the Qt parent.

    Attributes:
        loaded: what the last successful load brought (``None`` when nothing is loaded).
        loading: a load is queued or running.
        preparing_demo: the demo pair is being assembled and loaded (not the chosen pair until assembled).
        badge: the chosen pair's verdict (``None`` without a draft).
        gpu_backend: the GPU backend of the llama.cpp build, once probed (``None``: CPU only or not yet known).
        hub: the application's one hub client (it remembers that the hub answered).

    Signals:
        changed(): the state above changed; views redraw from it.
        message(str): a line for the status bar.
        load_failed(str): a load failed; the message says why and what to do.
        demo_missing(): the demo pair was asked for but the ``demo`` extra is not installed.
        replacing(): the models are about to be loaded, unloaded or replaced: a running generation should
            stop, or the request would wait behind it (a step-mode answer waits for *Next step* for ever).
    """

    changed = Signal()
    message = Signal(str)
    load_failed = Signal(str)
    demo_missing = Signal()
    replacing = Signal()

    def __init__(
        self, worker: EngineWorker, store: SettingsStore, library: Library, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.worker = worker
        self.store = store
        self.library = library
        self.hub = HubClient(library=library, token_hint="the hub tab's Access token field, or HF_TOKEN")
        self.tasks = TaskRunner(self)
        self.loaded: LoadResult | None = None
        self.loading = False
        self.badge: Badge | None = None
        self.gpu_backend: str | None = None
        self.progress: tuple[str, int, int] | None = None
        self.preparing_demo = False
        self.reload_reason = ""  # the changed settings the load under way applies before an answer (see load)
        # set_pair's note and the pair it is about: said when that pair's load ends (the worker runs loads in order,
        # and one already under way must not take it).
        self._load_note: tuple[tuple[str, str], str] | None = None
        self._load_t0 = 0.0
        worker.load_started.connect(self._on_worker_load_started)
        worker.models_loaded.connect(self._on_worker_models_loaded)
        worker.info_changed.connect(self._on_worker_info_changed)
        worker.load_failed.connect(self._on_worker_load_failed)
        worker.load_cancelled.connect(self._on_worker_load_cancelled)
        worker.models_unloaded.connect(self._on_worker_models_unloaded)
        worker.backend_probed.connect(self._on_worker_backend_probed)
        worker.progress_changed.connect(self._on_worker_progress_changed)
        worker.demo_prepared.connect(self._on_worker_demo_prepared)
        worker.task_failed.connect(self._on_worker_task_failed)
        store.changed.connect(self._on_store_changed)
        self._pair = self._chosen_pair(store.settings)

    # ---- actions ------------------------------------------------------------------------------------

    def probe_backend(self) -> None:
        """Ask which GPU backend the llama.cpp build has (answered in the background)."""
        self.worker.submit(ProbeRequest())

    def load(self, reason: str = "") -> bool:
        """Load the chosen models; returns ``False`` (and says so) when no target is chosen. ``reason``: the
        changed settings a reload before an answer applies (see :meth:`ensure_loaded`), said while it loads."""
        settings = self.store.settings
        if not settings.target_path:
            self.message.emit("Choose a target model first (Models ▸ Models…, Ctrl+M).")
            return False
        self._start_load(LoadRequest(settings), reason)
        return True

    def _start_load(self, request: LoadRequest | DemoRequest, reason: str = "") -> None:
        self.reload_reason = reason
        self.replacing.emit()
        self.worker.submit(request)
        self.loading = True  # from now: a request submitted after this one waits for it
        self.changed.emit()

    def ensure_loaded(self) -> None:
        """Load the chosen pair before an answer, unless it is loading: when nothing is loaded, or when a setting
        changed that only a reload applies (a draft-model strategy chosen while no draft is loaded, the context
        size, the threads…; a tour's answer ran without the draft its strategy named). The worker runs requests
        in order, so the message waits for the load instead of failing or running on the old settings. A draft
        that is loaded but no longer used is not worth a reload."""
        if self.loading:
            return
        if self.loaded is None:
            self.load()
        elif changed := self.stale():
            # Said, or the answer waited half a minute behind a reload nobody announced (a tour's, after it
            # changed the context size): the models load again and the whole conversation is read again.
            self.load(field_labels(changed))

    def stale(self) -> set[str]:
        """The settings changed since the models loaded that the next answer would notice (none: not stale)."""
        loaded = self.store.loaded
        return self.store.settings.needs_reload_to_answer(loaded) if loaded is not None else set()

    def cancel_loading(self) -> None:
        """Stop loading (the chosen pair or the demo pair); nothing is loaded afterwards."""
        if self.loading:
            self.worker.cancel_loading()
            self.message.emit("Cancelling the load…")

    def unload(self) -> None:
        """Free the models."""
        self.replacing.emit()
        self.worker.submit(UnloadRequest())

    def set_pair(self, target: str, draft: str | None, load: bool = True, note: str = "") -> None:
        """Choose a target and a draft (paths; ``None``: no draft) and, by default, load them; ``note`` (a sentence)
        is said when they are loaded (the model manager closes as the load begins)."""
        self.store.update(target_path=target, draft_path=draft or "")
        self._load_note = ((target, draft or ""), note) if note and load else None
        if load and not self.load():
            self._load_note = None

    def use_demo_pair(self) -> None:
        """Assemble the demo pair (the first time only), choose it and load it."""
        from speculens.models.demo import DEMO_MODELS, is_installed

        keys = tuple(m.key for m in DEMO_MODELS if m.role in ("target", "draft"))
        if not all(is_installed(m) for m in DEMO_MODELS if m.key in keys):
            self.demo_missing.emit()
            return
        self.preparing_demo = True
        self._start_load(DemoRequest(keys, self.store.settings))  # it loads them too (see DemoRequest)

    def check_pair(self) -> None:
        """Check the chosen pair's compatibility in the background; the badge shows the verdict."""
        settings = self.store.settings
        target, draft = settings.target_path, settings.draft_path
        if not target or not draft:
            self._set_badge(None)
            return
        n_ctx = settings.n_ctx

        def done(report: PairReport) -> None:
            if self._chosen_pair(self.store.settings) != (target, draft):
                return  # the pair changed meanwhile
            ok = report.compatible
            self._set_badge(Badge(ok, "✓ Compatible" if ok else "⚠ Tokenizer mismatch", report_html(report)))

        def failed(message: str) -> None:
            if self._chosen_pair(self.store.settings) == (target, draft):
                self._set_badge(Badge(False, "⚠ Cannot use the draft", html.escape(message)))

        self.tasks.run(lambda: check_pair(Path(target), Path(draft), n_ctx=n_ctx), done, failed)

    def wait(self) -> None:
        """Join the background tasks (the application is quitting)."""
        self.tasks.wait()

    # ---- state --------------------------------------------------------------------------------------

    @staticmethod
    def _chosen_pair(settings: Settings) -> tuple[str, str]:
        return settings.target_path, settings.draft_path

    def _set_badge(self, badge: Badge | None) -> None:
        self.badge = badge
        self.changed.emit()

    def _on_store_changed(self, settings: Settings) -> None:
        pair = self._chosen_pair(settings)
        if pair != self._pair:
            self._pair = pair
            self.check_pair()

    def _on_worker_load_started(self) -> None:
        self.loading = True
        self.progress = None
        self._load_t0 = time.monotonic()
        if self.reload_reason:
            self.message.emit(f"Reloading the models: {self.reload_reason} changed… (Esc cancels)")
        else:
            self.message.emit("Loading models… (Esc cancels)")
        self.changed.emit()

    def _on_worker_models_loaded(self, result: LoadResult) -> None:
        self.preparing_demo = False
        self.loading = False
        self.reload_reason = ""
        self.progress = None
        self.loaded = result
        self.store.set_loaded(result.settings)
        info = result.info
        self._keep(result.settings, info)
        if result.draft_error:
            self._set_badge(Badge(False, "⚠ Draft not loaded", html.escape(result.draft_error)))
            self.message.emit(f"The target is loaded; the draft is not: {result.draft_error}")
        else:
            if info.draft and (self.badge is None or not self.badge.ok):
                self._set_badge(Badge(True, "✓ Compatible", f"{info.draft} can draft for {info.target}."))
            off = f" Speculation is off: {info.speculation_off}" if info.speculation_off else ""
            if info.draft_idle and not info.speculation_off:
                adaptive = self.store.settings.adaptive
                fate = (
                    "so it stays idle"
                    if adaptive
                    else "yet it drafts every step with adaptive off (each draft ending where its top probability "
                    f"falls below p_min {self.store.settings.p_min:g})"
                )
                off += f" {upper_first(info.draft_idle)}, {fate}."
            # The toolbar names the models, and its tooltip has llama.cpp's description and the kernels: with them
            # here the line ran past the window's edge, cutting off what speculation will do (a tour's finding).
            if self._load_note is not None and self._load_note[0] == self._chosen_pair(result.settings):
                off += f" {self._load_note[1]}"
                self._load_note = None
            self.message.emit(f"Loaded in {result.seconds:.1f} s.{off}")
        self.changed.emit()

    def _on_worker_info_changed(self, info: EngineInfo) -> None:
        """An answer changed what is loaded says of itself (the verdict on the draft model): the toolbar follows."""
        if self.loaded is not None and not self.loading:
            changed = info.draft_idle != self.loaded.info.draft_idle  # kept again only then: no file read per answer
            self.loaded = replace(self.loaded, info=info)
            if changed:
                self._keep(self.loaded.settings, info)
            self.changed.emit()

    @staticmethod
    def _keep(settings: Settings, info: EngineInfo) -> None:
        """Keep the loaded draft model's verdict for the pair picker (see saved_verdict): at each load, and when an
        answer changes it."""
        if info.draft and settings.draft_path and not info.speculation_off:
            _keep_verdict(settings.target_path, settings.draft_path, info.draft_idle)

    def _on_worker_load_failed(self, message: str) -> None:
        self._nothing_loaded("Loading failed.")
        self.load_failed.emit(message)

    def _on_worker_load_cancelled(self) -> None:
        self._nothing_loaded("Loading cancelled: no model is loaded. Load (Ctrl+L) loads the chosen pair.")

    def _nothing_loaded(self, message: str) -> None:
        """A load ended without models (the worker frees the old ones before loading new ones)."""
        self.preparing_demo = False
        self.loading = False
        self.reload_reason = ""
        self.progress = None
        self.loaded = None
        self.store.set_loaded(None)
        self.message.emit(message)
        self.changed.emit()

    def _on_worker_models_unloaded(self, why: str) -> None:
        self.loaded = None
        self.store.set_loaded(None)
        self.message.emit(why or "Models unloaded.")
        self.changed.emit()

    def _on_worker_backend_probed(self, name: str | None) -> None:
        self.gpu_backend = name
        self.changed.emit()

    def _on_worker_progress_changed(self, what: str, done: int, total: int) -> None:
        self.progress = (what, done, total)
        cancel = " (Esc cancels)" if self.loading else ""
        self.message.emit(f"{what}: {done / 1e6:.0f} of {total / 1e6:.0f} MB{cancel}" if total else f"{what}…{cancel}")
        self.changed.emit()

    def _on_worker_demo_prepared(self, files: list[str]) -> None:
        self.progress = None
        if len(files) >= 2:
            self.set_pair(files[0], files[1], load=False)  # the worker loads them next, in the same request
        self.changed.emit()

    def _on_worker_task_failed(self, message: str) -> None:
        if self.preparing_demo:  # the demo request failed (assembling or loading): nothing will load
            self.preparing_demo = False
            self.loading = False
        self.progress = None
        self.message.emit(message)
        self.changed.emit()
        self.load_failed.emit(message)
