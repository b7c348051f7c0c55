"""The main window: toolbar with the active pair, the chat in the middle, and rearrangeable docks.

The window owns the :class:`~speculens.ui.worker.EngineWorker` and the ~30 Hz drain timer that moves the
worker's buffered events to the chat, the live panel, the Compare view and the exports. Dock and window
geometry are kept with ``QSettings`` in an INI file next to the settings (so ``SPECULENS_HOME`` isolates
them too); everything else is the Qt-free :class:`~speculens.settings.Settings`.
"""

from __future__ import annotations

import dataclasses
import html
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QByteArray, QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QToolBar,
    QToolButton,
    QWidget,
)

from speculens import __version__, paths
from speculens.settings import Settings, load_settings, save_settings
from speculens.ui.charts import ChartsPanel, RunSeries
from speculens.ui.chat_pane import ChatPane, ConversationList
from speculens.ui.compare_view import CompareView
from speculens.ui.conversations import Conversation
from speculens.ui.exports import write_events_csv, write_events_json
from speculens.ui.live_panel import LivePanel, StatsStrip
from speculens.ui.model_manager import TaskRunner, report_html
from speculens.ui.settings_panel import SettingsPanel
from speculens.ui.teach_panel import TeachPanel
from speculens.ui.worker import LANE_CHAT, CompareResult, EngineWorker, LoadedModels

if TYPE_CHECKING:
    from speculens.engine.events import Event, FinishEvent, StepEvent

log = logging.getLogger(__name__)

DRAIN_MS = 33
STATE_VERSION = 1
BADGE_WARNING = (
    "QToolButton { background: #d73a49; color: white; font-weight: bold; "
    "border-radius: 4px; padding: 3px 8px }"
)
BADGE_OK = (
    "QToolButton { background: rgba(46,160,67,150); color: white; border-radius: 4px; padding: 3px 8px }"
)


class MainWindow(QMainWindow):
    """Speculens' main window.

    Args:
        settings: the settings to start with (default: read from the settings file).
        restore_layout: restore the saved window geometry and dock layout.
        parent: the Qt parent.
    """

    def __init__(
        self, settings: Settings | None = None, restore_layout: bool = True, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Speculens")
        self.setObjectName("MainWindow")
        self.settings = settings if settings is not None else load_settings()
        self._saved_settings = dataclasses.replace(self.settings)
        self.loaded: LoadedModels | None = None
        self.loaded_settings: Settings | None = None
        self.run_events: list[Event] = []
        self._live_request: int | None = None
        self._load_after_demo = False
        self._closing = False

        self.worker = EngineWorker(self)
        self.tasks = TaskRunner(self)
        self.series = RunSeries()
        self.stats_strip = StatsStrip(self)
        self.live_panel = LivePanel(self.series, self.stats_strip, self)
        self.charts = ChartsPanel(self.series, self)
        self.compare_view = CompareView(self)
        self.teach_panel = TeachPanel(self.series, self)
        self.teach_panel.set_n_draft(self.settings.n_draft)
        self.settings_panel = SettingsPanel(self.settings, self)
        self.chat = ChatPane(self.worker, lambda: self.settings, self)
        self.conversations = ConversationList(self)
        self.setCentralWidget(self.chat)

        self._build_toolbar()
        self.docks: dict[str, QDockWidget] = {}
        self._build_docks()
        self._build_menus()
        self.statusBar().showMessage("Ready.")

        self._drain_timer = QTimer(self)
        self._drain_timer.setInterval(DRAIN_MS)
        self._drain_timer.timeout.connect(self._on_drain_timer_timeout)

        self._connect()
        self._update_pair()
        if restore_layout:
            self._restore_layout()
        else:
            self.resize(1280, 820)
        self.conversations.refresh()
        self.worker.probe_backend()
        self.check_pair()

    # ---- construction -------------------------------------------------------------------------------

    def _build_toolbar(self) -> None:
        bar = QToolBar("Models", self)
        bar.setObjectName("ModelsToolBar")
        bar.setMovable(True)
        self.addToolBar(bar)
        self.pair_label = QLabel(self)
        self.pair_label.setAccessibleName("Active model pair")
        self.pair_label.setTextFormat(Qt.TextFormat.RichText)
        self.pair_label.setContentsMargins(6, 0, 10, 0)
        self.load_action = QAction("Load", self)
        self.load_action.setShortcut(QKeySequence("Ctrl+L"))
        self.load_action.setToolTip("Load the chosen models (Ctrl+L)")
        self.load_action.triggered.connect(self._on_load_action_triggered)
        self.unload_action = QAction("Unload", self)
        self.unload_action.setToolTip("Free the models' memory")
        self.unload_action.triggered.connect(self._on_unload_action_triggered)
        self.manager_action = QAction("Models…", self)
        self.manager_action.setShortcut(QKeySequence("Ctrl+M"))
        self.manager_action.setToolTip("Open the model manager (Ctrl+M)")
        self.manager_action.triggered.connect(self.open_model_manager)
        self.progress = QProgressBar(self)
        self.progress.setMaximumWidth(180)
        self.progress.setAccessibleName("Loading progress")
        self.badge = QToolButton(self)
        self.badge.setAccessibleName("Pair compatibility")
        self.badge.clicked.connect(self._on_badge_clicked)
        self._badge_report = ""
        bar.addWidget(self.pair_label)
        # Widgets in a toolbar are shown and hidden through their actions (Qt overrides show()/hide()).
        self.badge_action = bar.addWidget(self.badge)
        self.badge_action.setVisible(False)
        bar.addSeparator()
        bar.addAction(self.load_action)
        bar.addAction(self.unload_action)
        self.progress_action = bar.addWidget(self.progress)
        self.progress_action.setVisible(False)
        bar.addSeparator()
        bar.addAction(self.manager_action)

        stats = QToolBar("Statistics", self)
        stats.setObjectName("StatsToolBar")
        stats.addWidget(self.stats_strip)
        self.addToolBarBreak()
        self.addToolBar(stats)

    def _dock(self, key: str, title: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"{key}Dock")  # saveState() identifies docks by object name
        dock.setWidget(widget)
        dock.setAccessibleName(title)
        self.addDockWidget(area, dock)
        self.docks[key] = dock
        return dock

    def _build_docks(self) -> None:
        right = Qt.DockWidgetArea.RightDockWidgetArea
        live = self._dock("Live", "Live tokens", self.live_panel, right)
        compare = self._dock("Compare", "Compare", self.compare_view, right)
        teach = self._dock("Teach", "Teach", self.teach_panel, right)
        settings = self._dock("Settings", "Settings", self.settings_panel, right)
        for dock in (compare, teach, settings):
            self.tabifyDockWidget(live, dock)
        live.raise_()
        self._dock("Charts", "Charts", self.charts, Qt.DockWidgetArea.BottomDockWidgetArea)
        self._dock("Conversations", "Conversations", self.conversations, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.resizeDocks([self.docks["Live"]], [620], Qt.Orientation.Horizontal)
        self.resizeDocks([self.docks["Charts"]], [260], Qt.Orientation.Vertical)
        self.resizeDocks([self.docks["Conversations"]], [190], Qt.Orientation.Horizontal)
        self._default_state = self.saveState(STATE_VERSION)

    def _build_menus(self) -> None:
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        self._add(file_menu, "Export transcript as &HTML…", self.export_html)
        self._add(file_menu, "Export step events as &JSON…", self.export_json)
        self._add(file_menu, "Export step events as &CSV…", self.export_csv)
        self._add(file_menu, "Export charts as &PNG…", self.export_png)
        file_menu.addSeparator()
        self._add(file_menu, "&Quit", self.close, QKeySequence.StandardKey.Quit)

        chat_menu = menu.addMenu("&Chat")
        self.send_action = self._add(chat_menu, "&Send", self.chat.send, "Ctrl+Return")
        self.stop_action = self._add(chat_menu, "S&top", self.chat.stop, "Esc")
        self._add(chat_menu, "&New chat", self.chat.new_chat, QKeySequence.StandardKey.New)
        self._add(chat_menu, "&Regenerate", self.chat.regenerate, "Ctrl+R")
        self._add(chat_menu, "&Edit last message", self.chat.edit_last, "Ctrl+E")
        self._add(chat_menu, "&Compare plain vs speculative", self.chat.compare, "Ctrl+Shift+C")
        self.next_step_action = self._add(
            chat_menu, "Next &step (Teach)", self.teach_panel.next_button.click, "F10"
        )

        models_menu = menu.addMenu("&Models")
        models_menu.addAction(self.manager_action)
        models_menu.addAction(self.load_action)
        models_menu.addAction(self.unload_action)
        self.demo_action = self._add(models_menu, "Use the &demo pair", self.use_demo_pair)
        self._add(models_menu, "Open a &target file…", self._on_open_target_triggered)
        self._add(models_menu, "Open a &draft file…", self._on_open_draft_triggered)

        view_menu = menu.addMenu("&View")
        for dock in self.docks.values():
            view_menu.addAction(dock.toggleViewAction())
        view_menu.addSeparator()
        self._add(view_menu, "&Reset layout", self._on_reset_layout_triggered)

        help_menu = menu.addMenu("&Help")
        self._add(help_menu, "&About Speculens", self.show_about)

    def _add(self, menu: object, text: str, slot: object, shortcut: object = None) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))  # type: ignore[arg-type]
        action.triggered.connect(slot)  # type: ignore[arg-type]
        menu.addAction(action)  # type: ignore[attr-defined]
        return action

    def _connect(self) -> None:
        w = self.worker
        w.busy_changed.connect(self._on_worker_busy_changed)
        w.load_started.connect(self._on_worker_load_started)
        w.models_loaded.connect(self._on_worker_models_loaded)
        w.load_failed.connect(self._on_worker_load_failed)
        w.models_unloaded.connect(self._on_worker_models_unloaded)
        w.generation_finished.connect(self._on_worker_generation_finished)
        w.generation_failed.connect(self._on_worker_generation_failed)
        w.step_paused.connect(self._on_worker_step_paused)
        w.compare_finished.connect(self._on_worker_compare_finished)
        w.backend_probed.connect(self._on_worker_backend_probed)
        w.progress_changed.connect(self._on_worker_progress_changed)
        w.demo_prepared.connect(self._on_worker_demo_prepared)
        w.task_failed.connect(self._on_worker_task_failed)
        self.chat.turn_started.connect(self._on_chat_turn_started)
        self.chat.compare_requested.connect(self._on_chat_compare_requested)
        self.chat.status_changed.connect(self._on_chat_status_changed)
        self.chat.conversation_saved.connect(self.conversations.schedule_refresh)
        self.conversations.conversation_activated.connect(self._on_conversations_conversation_activated)
        self.settings_panel.settings_changed.connect(self._on_settings_panel_settings_changed)
        self.settings_panel.reload_requested.connect(self.load_models)
        self.teach_panel.step_mode_toggled.connect(self.worker.set_step_mode)
        self.teach_panel.next_step_requested.connect(self.worker.advance)

    # ---- models -------------------------------------------------------------------------------------

    def load_models(self) -> None:
        """Load the models the settings name (the worker replaces any loaded ones)."""
        if not self.settings.target_path:
            self.open_model_manager()
            return
        self.worker.load(dataclasses.replace(self.settings))

    def _on_load_action_triggered(self) -> None:
        self.load_models()

    def _on_unload_action_triggered(self) -> None:
        self.worker.unload()

    def use_demo_pair(self) -> None:
        """Assemble the demo pair (first time only) and load it."""
        from speculens.models.demo import DEMO_MODELS, is_installed

        keys = [m.key for m in DEMO_MODELS if m.role in ("target", "draft")]
        if not all(is_installed(m) for m in DEMO_MODELS if m.key in keys):
            QMessageBox.information(
                self,
                "Demo models not installed",
                "The demo pair (Qwen2.5-Coder 1.5B with its 0.5B draft) is not installed.\n\n"
                "Install it with:  pip install 'speculens[demo]'",
            )
            return
        self._load_after_demo = True
        self.worker.prepare_demo(keys)

    def open_model_manager(self) -> None:
        """Show the model manager window (library, hub, downloads, pair picker)."""
        from speculens.ui.model_manager import ModelManagerWindow

        manager = getattr(self, "_manager", None)
        if manager is None:
            manager = ModelManagerWindow(self.settings, self)
            manager.pair_chosen.connect(self._on_manager_pair_chosen)
            self._manager = manager
        manager.show()
        manager.raise_()
        manager.activateWindow()

    def set_pair(self, target: str, draft: str | None, load: bool = True) -> None:
        """Choose a target and draft (paths) and, by default, load them."""
        changes: dict[str, object] = {"target_path": target, "draft_path": draft or ""}
        if not draft and self.settings.strategy == "draft":
            changes["strategy"] = "lookup"  # without a draft model the draft strategy cannot run
        self.settings_panel.update_settings(**changes)
        if load:
            self.load_models()

    def _on_manager_pair_chosen(self, target: str, draft: str) -> None:
        self.set_pair(target, draft or None)

    def _on_open_target_triggered(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a target model", "", "GGUF models (*.gguf)")
        if path:
            self.set_pair(path, self.settings.draft_path or None, load=False)

    def _on_open_draft_triggered(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a draft model", "", "GGUF models (*.gguf)")
        if path:
            self.settings_panel.update_settings(draft_path=path, strategy="draft")

    def _update_pair(self) -> None:
        s = self.settings
        target = Path(s.target_path).name if s.target_path else "no target chosen"
        if s.strategy == "draft":
            source = Path(s.draft_path).name if s.draft_path else "no draft chosen"
        else:
            source = {
                "lookup": "prompt lookup",
                "ngram-cache": "n-gram cache",
                "ngram-map": "n-gram map",
            }.get(s.strategy, "plain decoding")
        state = "loaded" if self.loaded else "not loaded"
        self.pair_label.setText(f"<b>{html.escape(target)}</b> ▸ {html.escape(source)} <i>({state})</i>")
        self.pair_label.setToolTip(f"Target: {s.target_path or '–'}\nDraft: {s.draft_path or '–'}")
        self.load_action.setText("Reload" if self.loaded else "Load")
        self.unload_action.setEnabled(self.loaded is not None)

    def _set_badge(self, ok: bool | None, text: str, report: str) -> None:
        if ok is None:
            self.badge_action.setVisible(False)
            return
        self.badge.setText(text)
        self.badge.setStyleSheet(BADGE_OK if ok else BADGE_WARNING)
        self.badge.setToolTip(("" if ok else "Click for the compatibility report.\n\n") + report)
        self._badge_report = report
        self.badge_action.setVisible(True)

    def check_pair(self) -> None:
        """Check the chosen pair's compatibility in the background and show the result as the badge."""
        from speculens.models.compat import check_pair

        target, draft = self.settings.target_path, self.settings.draft_path
        if not target or not draft:
            self._set_badge(None, "", "")
            return
        n_ctx = self.settings.n_ctx

        def done(report: object) -> None:
            if (self.settings.target_path, self.settings.draft_path) != (target, draft):
                return  # the pair changed meanwhile
            ok = bool(getattr(report, "compatible", False))
            self._set_badge(ok, "✓ Compatible" if ok else "⚠ Tokenizer mismatch", report_html(report))

        def failed(message: str) -> None:
            self._set_badge(False, "⚠ Cannot check", message)

        self.tasks.run(lambda: check_pair(Path(target), Path(draft), n_ctx=n_ctx), done, failed)

    def _on_badge_clicked(self) -> None:
        box = QMessageBox(self)
        box.setWindowTitle("Pair compatibility")
        box.setIcon(
            QMessageBox.Icon.Warning
            if "mismatch" in self.badge.text().lower()
            else QMessageBox.Icon.Information
        )
        box.setText(self._badge_report)
        box.exec()

    # ---- worker signals -----------------------------------------------------------------------------

    def _on_worker_busy_changed(self, busy: bool) -> None:
        if busy:
            self._drain_timer.start()
        else:
            self.drain_events()
            self._drain_timer.stop()
            self.teach_panel.set_running(False)

    def _on_worker_load_started(self) -> None:
        self.progress.setRange(0, 0)  # llama.cpp does not report loading progress through the engine
        self.progress_action.setVisible(True)
        self.load_action.setEnabled(False)
        self.statusBar().showMessage("Loading models…")
        self._load_t0 = time.monotonic()

    def _end_progress(self) -> None:
        self.progress_action.setVisible(False)
        self.load_action.setEnabled(True)

    def _on_worker_models_loaded(self, loaded: LoadedModels) -> None:
        self._end_progress()
        self.loaded = loaded
        self.loaded_settings = dataclasses.replace(self.settings)
        self.settings_panel.set_loaded(self.loaded_settings)
        self._update_pair()
        if loaded.draft_error:
            self._set_badge(False, "⚠ Tokenizer mismatch", loaded.draft_error)
            if self.settings.strategy == "draft":
                self.settings_panel.update_settings(strategy="lookup")
            self.statusBar().showMessage("Target loaded; the draft was refused (tokenizer mismatch).")
        elif loaded.draft:
            if not self.badge_action.isVisible():  # keep check_pair's full report when there is one
                self._set_badge(True, "✓ Compatible", f"{loaded.draft} can draft for {loaded.target}.")
            self.statusBar().showMessage(f"Loaded in {loaded.seconds:.1f} s: {loaded.description}")
        else:
            self._set_badge(None, "", "")
            self.statusBar().showMessage(f"Loaded in {loaded.seconds:.1f} s: {loaded.description}")

    def _on_worker_load_failed(self, message: str) -> None:
        self._end_progress()
        self.loaded = None
        self._update_pair()
        self.statusBar().showMessage("Loading failed.")
        if not self._closing:
            QMessageBox.warning(self, "Could not load the models", message)

    def _on_worker_models_unloaded(self) -> None:
        self.loaded = None
        self.loaded_settings = None
        self.settings_panel.set_loaded(None)
        self._set_badge(None, "", "")
        self._update_pair()
        self.statusBar().showMessage("Models unloaded.")

    def _on_worker_generation_finished(self, request_id: int, lane: str, finish: FinishEvent) -> None:
        self.drain_events()
        self.chat.finish_turn(request_id, lane, finish)
        if request_id == self._live_request and lane == LANE_CHAT:
            self.teach_panel.set_running(False)
            self.teach_panel.update_curve()

    def _on_worker_generation_failed(self, request_id: int, message: str) -> None:
        self.chat.fail_turn(request_id, message)
        self.compare_view.show_failure(request_id, message)
        self.statusBar().showMessage(message)

    def _on_worker_step_paused(self, step: int) -> None:
        self.drain_events()
        for event in reversed(self.live_panel.steps):
            if event.step == step:
                self._show_teach_step(event)
                break

    def _show_teach_step(self, event: StepEvent) -> None:
        self.teach_panel.show_step(event)
        self.docks["Teach"].raise_()

    def _on_worker_compare_finished(self, request_id: int, result: CompareResult) -> None:
        self.drain_events()
        self.compare_view.show_result(request_id, result)

    def _on_worker_backend_probed(self, name: str | None) -> None:
        self.settings_panel.set_gpu_backend(name)

    def _on_worker_progress_changed(self, what: str, done: int, total: int) -> None:
        self.progress_action.setVisible(True)
        self.progress.setRange(0, 1000)
        self.progress.setValue(int(1000 * done / max(total, 1)))
        self.statusBar().showMessage(f"{what}: {done / 1e6:.0f} of {total / 1e6:.0f} MB")

    def _on_worker_demo_prepared(self, files: list[str]) -> None:
        self._end_progress()
        if len(files) >= 2:
            self.settings_panel.update_settings(strategy="draft")
            self.set_pair(files[0], files[1], load=self._load_after_demo)
        self._load_after_demo = False

    def _on_worker_task_failed(self, message: str) -> None:
        self._end_progress()
        self.statusBar().showMessage(message)
        if not self._closing:
            QMessageBox.warning(self, "Speculens", message)

    # ---- chat and live panel ------------------------------------------------------------------------

    def _on_chat_turn_started(self, request_id: int) -> None:
        self._live_request = request_id
        self.run_events = []
        self.live_panel.start(f"Waiting for the worker ({self.settings.strategy})…")
        self.teach_panel.set_n_draft(self.settings.n_draft)
        self.conversations.schedule_refresh()
        self.chat.conversation.pair = self.pair_label.text()

    def _on_chat_compare_requested(self, history: list[dict[str, str]], text: str) -> None:
        request_id = self.worker.compare(history, text, dataclasses.replace(self.settings))
        self.compare_view.start(request_id, text, self.settings.strategy)
        self.docks["Compare"].show()
        self.docks["Compare"].raise_()

    def _on_chat_status_changed(self, message: str) -> None:
        self.statusBar().showMessage(message, 8000)

    def _on_conversations_conversation_activated(self, conversation: Conversation) -> None:
        if self.chat.busy:
            self.statusBar().showMessage("Stop the running answer before opening another conversation.")
            return
        self.chat.open_conversation(conversation)

    def _on_settings_panel_settings_changed(self, settings: Settings) -> None:
        pair_changed = (settings.target_path, settings.draft_path) != (
            self.settings.target_path,
            self.settings.draft_path,
        )
        self.settings = settings
        if pair_changed:
            self.check_pair()
        self.teach_panel.set_n_draft(settings.n_draft)
        self._update_pair()
        # Saved at once (atomically) so that a crash never loses a change; the file is tiny.
        try:
            save_settings(settings)
            self._saved_settings = dataclasses.replace(settings)
        except OSError as exc:
            self.statusBar().showMessage(f"Could not save the settings: {exc}")

    def _on_drain_timer_timeout(self) -> None:
        self.drain_events()

    def drain_events(self) -> None:
        """Move the worker's buffered events to the views (one batch per view per tick)."""
        tagged = self.worker.take_events()
        if not tagged:
            return
        self.chat.add_events(tagged)
        self.compare_view.add_events(tagged)
        mine = [t.event for t in tagged if t.request_id == self._live_request and t.lane == LANE_CHAT]
        if mine:
            self.run_events.extend(mine)
            self.live_panel.add_events(mine)

    # ---- exports ------------------------------------------------------------------------------------

    def _save_path(self, title: str, suffix: str, pattern: str) -> Path | None:
        default = str(Path.home() / f"speculens-{time.strftime('%Y%m%d-%H%M%S')}{suffix}")
        path, _ = QFileDialog.getSaveFileName(self, title, default, pattern)
        if not path:
            return None
        out = Path(path)
        return out if out.suffix else out.with_suffix(suffix)

    def export_html(self, path: Path | None = None) -> Path | None:
        """Write the colour-coded transcript of the last answer as HTML."""
        path = path or self._save_path("Export transcript", ".html", "HTML (*.html)")
        if path:
            path.write_text(self.live_panel.view.to_html(), encoding="utf-8")
            self.statusBar().showMessage(f"Wrote {path}")
        return path

    def export_json(self, path: Path | None = None) -> Path | None:
        """Write the last answer's events as JSON."""
        path = path or self._save_path("Export events", ".json", "JSON (*.json)")
        if path:
            write_events_json(self.run_events, path)
            self.statusBar().showMessage(f"Wrote {path}")
        return path

    def export_csv(self, path: Path | None = None) -> Path | None:
        """Write the last answer's steps as CSV."""
        path = path or self._save_path("Export events", ".csv", "CSV (*.csv)")
        if path:
            rows = write_events_csv(self.run_events, path)
            self.statusBar().showMessage(f"Wrote {rows} steps to {path}")
        return path

    def export_png(self, path: Path | None = None) -> Path | None:
        """Write the charts as a PNG image."""
        path = path or self._save_path("Export charts", ".png", "PNG images (*.png)")
        if path:
            if not self.charts.grab_png().save(str(path), "PNG"):
                self.statusBar().showMessage(f"Could not write {path}")
                return None
            self.statusBar().showMessage(f"Wrote {path}")
        return path

    # ---- first start, about, layout, closing --------------------------------------------------------

    def offer_first_start(self) -> None:
        """With no model chosen yet, offer the demo pair (when installed) and the model manager."""
        if self.settings.target_path:
            return
        from speculens.models.demo import DEMO_MODELS, is_installed

        demo = all(is_installed(m) for m in DEMO_MODELS if m.role in ("target", "draft"))
        box = QMessageBox(self)
        box.setWindowTitle("Welcome to Speculens")
        box.setIcon(QMessageBox.Icon.Information)
        text = (
            "<p><b>No model is chosen yet.</b></p><p>Speculens needs a <i>target</i> model (GGUF) and, for "
            "draft-model speculation, a smaller <i>draft</i> model with the same tokenizer.</p>"
        )
        if demo:
            text += (
                "<p>The demo pair is installed: Qwen2.5-Coder 1.5B (target) "
                "with Qwen2.5-Coder 0.5B (draft).</p>"
            )
        box.setText(text)
        demo_button = box.addButton("Use the demo pair", QMessageBox.ButtonRole.AcceptRole) if demo else None
        manager_button = box.addButton("Open the model manager", QMessageBox.ButtonRole.ActionRole)
        box.addButton("Later", QMessageBox.ButtonRole.RejectRole)
        box.exec()
        if demo_button is not None and box.clickedButton() is demo_button:
            self.use_demo_pair()
        elif box.clickedButton() is manager_button:
            self.open_model_manager()

    def show_about(self) -> None:
        """The About box, with the llama.cpp build this runs on."""
        try:
            from speculens.logging_setup import backend_description

            backend = backend_description()
        except ImportError:
            backend = "llama.cpp (build details unavailable)"
        QMessageBox.about(
            self,
            "About Speculens",
            f"<h3>Speculens {__version__}</h3><p>See and speed up speculative decoding on local GGUF "
            f"models.</p><p>{html.escape(backend)}</p>"
            f"<p>Settings: {html.escape(str(paths.settings_file()))}<br>"
            f"Conversations: {html.escape(str(paths.conversations_dir()))}</p>",
        )

    def _qsettings(self) -> QSettings:
        return QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat)

    def _restore_layout(self) -> None:
        store = self._qsettings()
        geometry = store.value("geometry")
        state = store.value("state")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        else:
            self.resize(1280, 820)
        if isinstance(state, QByteArray) and not state.isEmpty():
            self.restoreState(state, STATE_VERSION)

    def _save_layout(self) -> None:
        store = self._qsettings()
        store.setValue("geometry", self.saveGeometry())
        store.setValue("state", self.saveState(STATE_VERSION))
        store.sync()

    def _on_reset_layout_triggered(self) -> None:
        self.restoreState(self._default_state, STATE_VERSION)
        for dock in self.docks.values():
            dock.show()

    def closeEvent(self, event: QCloseEvent) -> None:
        """Stop generating, free the models on the worker thread, and remember the layout."""
        self._closing = True
        self._drain_timer.stop()
        self.worker.cancel()
        if not self.worker.close(timeout=60.0):
            log.error("the engine worker did not stop within 60 s")
        self.chat.save_now()
        try:
            if self.settings != self._saved_settings:
                save_settings(self.settings)
            self._save_layout()
        except OSError:
            log.exception("could not save settings or layout")
        manager = getattr(self, "_manager", None)
        if manager is not None:
            manager.shutdown()
            manager.close()
        self.tasks.wait()
        super().closeEvent(event)
