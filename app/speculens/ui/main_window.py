"""The main window: layout, menus and wiring — nothing else.

The objects that do the work are not widgets: the :class:`~speculens.ui.settings_store.SettingsStore`
holds the settings, the :class:`~speculens.ui.worker.EngineWorker` owns the models on its thread, the
:class:`~speculens.ui.generations.GenerationRouter` is the only client of the worker for generations, and
the :class:`~speculens.ui.model_controller.ModelController` owns loading, the demo pair and the pair's badge.
Views subscribe to them. Dock and window geometry are kept with ``QSettings`` in an INI file next to the
settings (so ``SPECULENS_HOME`` isolates them too).
"""

from __future__ import annotations

import dataclasses
import html
import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QByteArray, QEvent, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence, QResizeEvent
from PySide6.QtWidgets import (
    QDialog,
    QDockWidget,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QProgressBar,
    QToolBar,
    QToolButton,
    QWidget,
)

from speculens import __version__, paths
from speculens.engine.config import Strategy
from speculens.engine.events import FinishEvent, FinishReason, RunSettings, StartEvent
from speculens.engine.protocol import EngineFactory
from speculens.models.library import Library
from speculens.settings import Settings, generation_config, read_settings
from speculens.ui import file_dialogs
from speculens.ui.charts import ChartsPanel, RunSeries, paint_budget
from speculens.ui.chat_pane import EXPORT_CODE_SHADE, ChatPane, ConversationList, render_transcript
from speculens.ui.compare_view import CompareView
from speculens.ui.conversations import Conversation, ConversationStore
from speculens.ui.exports import write_events_csv, write_events_json
from speculens.ui.file_dialogs import Kind
from speculens.ui.generations import GenerationRouter, LaneSink
from speculens.ui.labels import ShrinkingLabel
from speculens.ui.live_panel import LivePanel, StatsStrip
from speculens.ui.model_controller import ModelController
from speculens.ui.primer import PRIMER_HTML, show_page
from speculens.ui.screen import resize_within_screen, scrolled
from speculens.ui.settings_panel import SettingsPanel
from speculens.ui.settings_store import SettingsStore
from speculens.ui.teach_panel import TeachPanel
from speculens.ui.worker import EngineWorker, Lane
from speculens.words import upper_first

if TYPE_CHECKING:
    from speculens.models.compat import PairReport
    from speculens.ui.model_manager import ModelManagerWindow

log = logging.getLogger(__name__)

STATE_VERSION = 2
CHARTS_SHARE = 25  # percent of a shrinking window's height the docks across it keep at most (see resizeEvent)
LIVE_COMPARING = (
    "Comparing: the speculative half is shown here when the comparison ends (drawing it as it runs would slow "
    "speculation and not plain decoding)."
)
COMPARING = "Comparing: plain decoding, then speculation… (Esc stops)"
BADGE_WARNING = (
    "QToolButton { background: #d73a49; color: white; font-weight: bold; border-radius: 4px; padding: 3px 8px }"
)
BADGE_OK = "QToolButton { background: rgba(46,160,67,150); color: white; border-radius: 4px; padding: 3px 8px }"


# How long after the last key a message typed and not sent is written down (window.ini, as at quit).
UNSENT_SAVE_MS = 1000


def _keep_unsent(text: str) -> None:
    """Write the message box's text where the next start restores it (on the saver's thread)."""
    store = file_dialogs.window_state()
    store.setValue("unsent", text)
    store.sync()


class MainWindow(QMainWindow):
    """Speculens' main window.

    Args:
        settings: the settings to start with (default: read from the settings file).
        restore_layout: restore the saved window geometry and dock layout.
        engine_factory: builds the engine (tests pass a fake; default: llama.cpp's).
        library: the model library (default: the user's).
        autosave: save settings changes (the self-test does not).
        parent: the Qt parent.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        restore_layout: bool = True,
        engine_factory: EngineFactory | None = None,
        library: Library | None = None,
        autosave: bool = True,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Speculens")
        self.setObjectName("MainWindow")
        self._closing = False
        self._compared: list[dict[str, str]] = []  # the last comparison's messages
        self._compared_in = ""  # the id of the conversation those messages are of
        self._draft_check: object | None = None  # the last draft file Open a draft file… checks (see there)
        # run again once bit-exact is loaded: the messages and their conversation's id
        self._compare_again: tuple[list[dict[str, str]], str] | None = None
        self._pages: dict[str, QDialog] = {}  # the Help pages open, by title

        # A settings file that could not be used is said once the window is up (mention_settings_problem).
        settings, self._settings_problem = (settings, "") if settings is not None else read_settings()
        self.store = SettingsStore(settings, autosave=autosave, parent=self)
        self.library = library if library is not None else Library()
        self.worker = EngineWorker(engine_factory, self)
        self.router = GenerationRouter(self.worker, self)
        self.models = ModelController(self.worker, self.store, self.library, self)
        self.router.prepare = self.models.ensure_loaded  # a message sent before Load waits for the load
        self.conversations = ConversationStore(on_change=self._on_conversations_changed)

        self.series = RunSeries()
        self.stats_strip = StatsStrip(self)
        self.live_panel = LivePanel(self.series, self.stats_strip, self)
        self.charts = ChartsPanel(self.series, self)
        self.charts.budget = paint_budget(self.store.settings.threads)
        self.compare_view = CompareView(self)
        self.teach_panel = TeachPanel(self.series, self)
        self.teach_panel.set_n_draft(self.store.settings.n_draft)
        self.teach_panel.set_exact(self.store.settings.exact)
        self.settings_panel = SettingsPanel(self.store, self)
        self.chat = ChatPane(self.router, self.store, self.conversations, [self.live_panel, self.teach_panel], self)
        # Before a conversation opens: opening one that a killed app left with a partial answer saves it, and the
        # save refreshes this list (which, made after, was not there yet: the app could not start again).
        self.conversation_list = ConversationList(self.conversations, self)
        recent = self.conversations.conversations()
        state = file_dialogs.window_state()
        if recent:  # the app opens where it was left (an answer cut short by a crash included): the conversation
            # that was open at the last close, else the latest (a tour found the latest opened instead)
            last = state.value("conversation")
            self.chat.open_conversation(next((c for c in recent if c.id == last), recent[0]))
        unsent = state.value("unsent")
        if isinstance(unsent, str) and unsent:  # a message typed and not sent is not lost by quitting (a tour's)
            self.chat.input.setPlainText(unsent)
        # Nor by a crash or a kill (a tour's kill -9 lost one that a quit would have kept): kept a second after the
        # typing stops, on a thread of its own (no disk on the window's thread while an answer streams), in order.
        self._unsent_saver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="speculens-unsent")
        self._unsent_timer = QTimer(self, singleShot=True, interval=UNSENT_SAVE_MS)
        self._unsent_timer.timeout.connect(
            lambda: self._unsent_saver.submit(_keep_unsent, self.chat.input.toPlainText())
        )
        self.chat.input.textChanged.connect(self._unsent_timer.start)
        self.conversation_list.show_current(self.chat.conversation)
        self._show_kept_answer()
        self.setCentralWidget(self.chat)

        self._build_toolbar()
        self.docks: dict[str, QDockWidget] = {}
        self._build_docks()
        self._build_menus()
        # The message whole as a tooltip, where the bar cuts it (the loaded pair with its measured settings).
        self.statusBar().messageChanged.connect(self._on_status_bar_message_changed)
        self.statusBar().showMessage("Ready.")
        # Running downloads, on the right, with the Models window closed too (a tour saw "Ready." alone).
        self.download_status = QLabel(self.statusBar())
        self.download_status.setAccessibleName("Downloads")
        self.statusBar().addPermanentWidget(self.download_status)
        self._unfinished_note: str | None = None  # what the status bar said at start of unfinished downloads
        self._connect()
        self._update_models()
        if restore_layout:
            self._restore_layout()
        else:
            resize_within_screen(self, 1280, 820)
        self.focus_input()  # typing at once goes into the message box (a tour's went nowhere)
        self.models.probe_backend()
        self.models.check_pair()

    # ---- construction -------------------------------------------------------------------------------

    def _build_toolbar(self) -> None:
        bar = QToolBar("Models", self)
        bar.setObjectName("ModelsToolBar")
        self.addToolBar(bar)
        self.pair_label = ShrinkingLabel(self)
        self.pair_label.setAccessibleName("Active model pair")
        self.pair_label.setTextFormat(Qt.TextFormat.RichText)
        self.pair_label.setContentsMargins(6, 0, 4, 0)
        # The state on a label of its own, which the pair's line gives way to first: cut at its end, "(loading…)" read
        # "(lo" beside the progress bar in a 1280-pixel window (under Xvfb). A long state gives way too, to 160 pixels,
        # or in a narrow window it took the progress bar and Cancel into the toolbar's overflow menu (a review's).
        self.state_label = ShrinkingLabel(self, least=160)
        self.state_label.setAccessibleName("Model state")
        self.state_label.setTextFormat(Qt.TextFormat.RichText)
        self.state_label.setContentsMargins(0, 0, 10, 0)
        self.load_action = QAction("Load", self)
        self.load_action.setShortcut(QKeySequence("Ctrl+L"))
        self.load_action.setToolTip("Load the chosen models (Ctrl+L)")
        self.load_action.triggered.connect(self.load_models)
        self.cancel_load_action = QAction("Cancel loading", self)
        self.cancel_load_action.setToolTip("Stop loading the models (Esc); nothing stays loaded")
        self.cancel_load_action.triggered.connect(self.models.cancel_loading)
        self.unload_action = QAction("Unload", self)
        self.unload_action.setToolTip("Free the models' memory")
        self.unload_action.triggered.connect(self.models.unload)
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
        # The buttons first: the pair's line changes length with the strategy and the state, and buttons after
        # it would move under the pointer; the badge before it too, as the line went into the overflow menu
        # with the badge after it in a narrower window (a tour's).
        bar.addAction(self.load_action)
        bar.addAction(self.unload_action)
        bar.addAction(self.manager_action)
        bar.addSeparator()
        # Widgets in a toolbar are shown and hidden through their actions (Qt overrides show()/hide()).
        self.badge_action = bar.addWidget(self.badge)
        bar.addWidget(self.pair_label)
        bar.addWidget(self.state_label)
        self.progress_action = bar.addWidget(self.progress)
        bar.addAction(self.cancel_load_action)

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
        compare = self._dock("Compare", "Compare", scrolled(self.compare_view), right)  # answers kept readable
        teach = self._dock("Teach", "Teach", scrolled(self.teach_panel), right)  # its text and curve: no overlap
        teach.visibilityChanged.connect(self._on_teach_dock_visibility_changed)  # a raised tab: see catch_up
        settings = self._dock("Settings", "Settings", self.settings_panel, right)
        for dock in (compare, teach, settings):
            self.tabifyDockWidget(live, dock)
        live.raise_()
        self._dock("Charts", "Charts", scrolled(self.charts, sideways=True), Qt.DockWidgetArea.BottomDockWidgetArea)
        self._dock("Conversations", "Conversations", self.conversation_list, Qt.DockWidgetArea.LeftDockWidgetArea)
        # The chat keeps most of the width: its buttons wrap (WrapRow) and no longer hold the docks back.
        self.resizeDocks([self.docks["Live"]], [380], Qt.Orientation.Horizontal)
        # The charts under the chat, not over it: 260 pixels left the transcript 115 of a 720-pixel screen (a walk's).
        self.resizeDocks([self.docks["Charts"]], [200], Qt.Orientation.Vertical)
        self.resizeDocks([self.docks["Conversations"]], [240], Qt.Orientation.Horizontal)
        self._default_state = self.saveState(STATE_VERSION)

    def _build_menus(self) -> None:
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        # Save keys for the two exports users make most (a tour found the exports a mouse's alone).
        self._add(file_menu, "Export transcript as &HTML…", self.export_html, QKeySequence.StandardKey.Save)
        self._add(file_menu, "Export step events as &JSON…", self.export_json, "Ctrl+Shift+S")
        self._add(file_menu, "Export step events as &CSV…", self.export_csv)
        self._add(file_menu, "Export charts as &PNG…", self.export_png)
        file_menu.addSeparator()
        self._add(file_menu, "&Settings…", self.show_settings, "Ctrl+,")
        file_menu.addSeparator()
        self._add(file_menu, "&Quit", self.close, QKeySequence.StandardKey.Quit)

        chat_menu = menu.addMenu("&Chat")
        self.send_action = self._add(chat_menu, "&Send", self.chat.send, "Ctrl+Return")
        self.stop_action = self._add(chat_menu, "S&top (answering or loading), or cancel Edit last", self.escape, "Esc")
        self._add(chat_menu, "&New chat", self.new_chat, QKeySequence.StandardKey.New)
        self._add(chat_menu, "&Regenerate", self.chat.regenerate, "Ctrl+R")
        self._add(chat_menu, "&Edit last message", self.chat.edit_last, "Ctrl+E")
        self._add(chat_menu, "Cop&y the last answer", self.chat.copy_answer, "Ctrl+Shift+Y")  # a button alone before
        self._add(chat_menu, "&Compare plain vs speculative", self.chat.compare, "Ctrl+Shift+C")
        self.next_step_action = self._add(chat_menu, "Next &step (Teach)", self.next_step, "F10")
        # A teacher at a lectern turns step mode on from the keyboard too (a tour's needed the mouse for it).
        self.step_mode_action = self._add(
            chat_menu, "Step &mode (Teach)", self.teach_panel.step_mode.toggle, "Ctrl+F10"
        )
        self.step_mode_action.setCheckable(True)
        self.teach_panel.step_mode.toggled.connect(self.step_mode_action.setChecked)
        self.teach_panel.step_mode.toggled.connect(self._say_step_mode)

        models_menu = menu.addMenu("&Models")
        models_menu.addAction(self.manager_action)
        models_menu.addAction(self.load_action)
        models_menu.addAction(self.cancel_load_action)
        models_menu.addAction(self.unload_action)
        self.demo_action = self._add(models_menu, "Use the &demo pair", self.models.use_demo_pair)
        self._add(models_menu, "&Pair lab…", self.open_pair_lab, "Ctrl+Shift+L")
        self._add(models_menu, "Open a &target file…", self._on_open_target_triggered)
        self._add(models_menu, "Open a &draft file…", self._on_open_draft_triggered)

        view_menu = menu.addMenu("&View")
        for dock in self.docks.values():
            view_menu.addAction(dock.toggleViewAction())
        view_menu.addSeparator()
        # Keyboard users reach every part (a tour found no way to the message box, the list or the side tabs):
        # each shows its part, in front, with the focus in it.
        go = view_menu.addMenu("&Go to")
        self._add(go, "The &message box", self.focus_input, "F6")
        self._add(go, "&Conversations", lambda: self.go_to("Conversations", self.conversation_list.list), "Ctrl+1")
        self._add(go, "&Live tokens", lambda: self.go_to("Live", self.live_panel), "Ctrl+2")
        self._add(go, "C&ompare", lambda: self.go_to("Compare", self.compare_view), "Ctrl+3")
        self._add(go, "&Teach", lambda: self.go_to("Teach", self.teach_panel), "Ctrl+4")
        # The plots themselves: they take focus by a click or this key only (Tab passes them).
        self._add(go, "C&harts", lambda: self.go_to("Charts", self.charts.graphics), "Ctrl+5")
        view_menu.addSeparator()
        # For a projector (a teacher's tour pressed F11 and nothing happened): the system's key (Ctrl+Cmd+F on a Mac),
        # F11 where the platform names none (X11 without a desktop's theme).
        self.full_screen_action = self._add(view_menu, "&Full screen", self.toggle_full_screen)
        self.full_screen_action.setShortcuts(
            QKeySequence.keyBindings(QKeySequence.StandardKey.FullScreen) or [QKeySequence("F11")]
        )
        self.full_screen_action.setCheckable(True)
        self._add(view_menu, "&Teaching layout: Teach beside Live tokens", self.teaching_layout, "Ctrl+Shift+T")
        self._add(view_menu, "&Reset layout", self._on_reset_layout_triggered)

        help_menu = menu.addMenu("&Help")
        self._add(help_menu, "&How speculative decoding works", self.show_primer)
        self._add(help_menu, "&Keyboard shortcuts", self.show_shortcuts, QKeySequence.StandardKey.HelpContents)
        self._add(help_menu, "&About Speculens", self.show_about)

    def _add(
        self,
        menu: QMenu,
        text: str,
        slot: Callable[[], object],
        shortcut: QKeySequence | QKeySequence.StandardKey | str | None = None,
    ) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        # Not connected directly: Qt would pass ``checked`` (False) to a slot with an optional first argument
        # (Use the demo pair then chose the pair without loading it).
        action.triggered.connect(lambda: slot())
        menu.addAction(action)
        return action

    def _connect(self) -> None:
        self.models.changed.connect(self._update_models)
        self.models.message.connect(self._on_status_message)
        self.models.load_failed.connect(self._on_models_load_failed)
        self.models.demo_missing.connect(self._on_models_demo_missing)
        self.store.changed.connect(self._on_store_changed)
        self.store.save_failed.connect(self._on_status_message)
        self.router.running_changed.connect(self._on_router_running_changed)
        self.router.paused.connect(self._on_router_paused)
        self.chat.status_changed.connect(self._on_status_message)
        # The charts' last steps at once: their refreshes during an answer wait for the paint budget, and a tour
        # read "Answer finished." over charts that stopped a few steps short and redrew a second later.
        # Next in the event loop: the chat hears of the finish before the live panel adds the last steps to the series.
        self.chat.turn_finished.connect(lambda _finish: QTimer.singleShot(0, self.charts.refresh))
        self.chat.turn_finished.connect(
            lambda _finish: self.compare_view.mark_outdated(self.chat.conversation.id, self.chat.finished_in.id)
        )
        self.models.replacing.connect(self._on_models_replacing)
        self.worker.models_loaded.connect(self.live_panel.models_loaded)
        # Whichever way another conversation is opened (New chat button, Ctrl+N, the list), the live panel,
        # its charts and figures forget the old answer, and the rest of a stopping answer is not shown.
        self.chat.conversation_opened.connect(self._on_conversation_opened)
        self.chat.compare_requested.connect(self.compare)
        self.conversation_list.conversation_activated.connect(self._on_conversation_activated)
        self.conversation_list.conversation_deleted.connect(self._on_conversation_deleted)
        self.compare_view.stop_requested.connect(self.stop)
        self.compare_view.exact_requested.connect(self._on_compare_exact_requested)
        self.models.changed.connect(self._compare_again_once_loaded)
        self.settings_panel.reload_requested.connect(self.load_models)
        self.teach_panel.step_mode_toggled.connect(self.router.set_step_mode)
        self.teach_panel.step_mode_toggled.connect(self.chat.step_mode_changed)
        self.teach_panel.next_step_requested.connect(self.router.advance)
        self.teach_panel.exact_toggled.connect(self._on_exact_toggled)

    # ---- actions ------------------------------------------------------------------------------------

    def load_models(self) -> None:
        """Load the chosen models, or open the model manager when none is chosen."""
        if not self.models.load():
            self.open_model_manager()

    def stop(self) -> None:
        """Stop whatever runs: a load, and a generation (a chat answer or a comparison, or one waiting for the
        load: its message goes back to the box)."""
        self.models.cancel_loading()
        if self.router.running:
            self.router.cancel()
            self.statusBar().showMessage("Stopping…")

    def _on_models_replacing(self) -> None:
        """A load replaces the models: whatever runs stops, a chat answer as stopped by the app (a Regenerate gives
        back the answer it was replacing)."""
        self.chat.stop(by_user=False)
        self.stop()

    def escape(self) -> None:
        """Esc: stop what runs, or, with nothing running, cancel Edit last (its message and answer come back). Not
        :meth:`stop` itself, which a load calls too (a review: loading another pair brought back an edited answer)."""
        if self.router.running or self.models.loading:
            self.stop()
        else:
            self.chat.undo_edit()

    def new_chat(self) -> None:
        """A new conversation, the focus in its message box; the answers, figures and charts of the old one are
        cleared."""
        self.chat.new_chat()

    def focus_input(self) -> None:
        """The focus in the message box (a tour's typing after Ctrl+N went into the Settings panel)."""
        self.chat.input.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def compare(self, messages: list[dict[str, str]], conversation: str | None = None) -> None:
        """Answer the conversation's last message plainly and with speculation, side by side (``conversation``: the id
        of the conversation they are of, when not the open one)."""
        if self.router.running:
            return
        self._compared_in = conversation or self.chat.conversation.id
        settings = self.store.settings
        self._compared = list(messages)
        if not self.compare_view.with_history.isChecked():
            messages = messages[-1:]
        system = settings.system_prompt.strip()
        if system:
            messages = [{"role": "system", "content": system}, *messages]
        plain = generation_config(settings, Strategy.NONE)
        speculative = generation_config(settings)
        self.compare_view.describe(
            messages[-1]["content"], Strategy(settings.strategy).label, settings.exact, self._compared_in
        )
        self.compare_view.mark_outdated(self.chat.conversation.id)  # a bit-exact rerun's may not be the one shown
        # The live panel, its charts and the figures above the chat follow the speculative half, as they follow an
        # answer (they kept showing the last answer's while Compare ran), once the comparison ends (see LaneSink).
        live = LaneSink(self.live_panel, Lane.SPECULATIVE)
        # The live panel before Teach, as for a chat answer: Teach's curve reads the series the live panel fills.
        self.router.compare(messages, plain, speculative, [self.compare_view, live, self.teach_panel])
        self.live_panel.status.setText(LIVE_COMPARING)
        self.statusBar().showMessage(COMPARING)  # not the last answer's "Answer finished." (a tour's)
        self.docks["Compare"].show()
        self.docks["Compare"].raise_()

    def _on_teach_dock_visibility_changed(self, visible: bool) -> None:
        if visible:
            self.teach_panel.catch_up()

    def open_model_manager(self) -> ModelManagerWindow:
        """Show the model manager window (library, hub, downloads, pair picker)."""
        from speculens.ui.model_manager import ModelManagerWindow

        manager = getattr(self, "_manager", None)
        if manager is None:
            manager = ModelManagerWindow(self.models, self)
            manager.pair_lab_requested.connect(self._open_pair_lab_on)
            manager.downloads_changed.connect(self._on_downloads_changed)
            manager.download_ended.connect(self.statusBar().showMessage)
            self._manager = manager
        manager.show()
        manager.raise_()
        manager.activateWindow()
        return manager

    def open_pair_lab(self) -> None:
        """Show the pair lab: which draft and settings make the target fastest on this machine."""
        self._open_pair_lab_on("")

    def _open_pair_lab_on(self, target: str) -> None:
        """Show the pair lab on ``target`` (a library path; "" for the one it would choose itself)."""
        from speculens.ui.pair_lab import PairLabWindow

        lab = getattr(self, "_pair_lab", None)
        if lab is None:
            lab = PairLabWindow(self.worker, self.store, self.models, self._download_in_manager, self)
            lab.setWindowFlag(Qt.WindowType.Window)
            self._pair_lab = lab
        else:
            lab.refresh_targets()
        if target:
            lab.choose_target(target)
        lab.show()
        lab.raise_()
        lab.activateWindow()

    def _download_in_manager(self, repo: str, filename: str) -> None:
        self.open_model_manager().start_download(repo, filename)

    def _on_open_target_triggered(self) -> None:
        path = file_dialogs.open_file(self, Kind.MODELS, "Choose a target model", "GGUF models (*.gguf)")
        if path:
            self.models.set_pair(str(path), self.store.settings.draft_path or None, load=False)

    def _on_open_draft_triggered(self) -> None:
        """Choose a draft file, once checked against the chosen target: a tour's mismatched draft went in unasked,
        and the next answer waited half a minute for a reload that then refused it (the pair picker refuses such a
        pair before anything loads)."""
        from speculens.models.compat import check_pair

        path = file_dialogs.open_file(self, Kind.MODELS, "Choose a draft model", "GGUF models (*.gguf)")
        settings = self.store.settings
        target, draft = settings.target_path, settings.draft_path
        if not path:
            return
        if not target:  # nothing to check it against: the pair is checked once a target is chosen
            self.store.update(draft_path=str(path))
            return
        n_ctx = settings.n_ctx
        token = self._draft_check = object()  # only the last file chosen is acted on (a review's)

        def current() -> bool:
            """Nothing chose otherwise meanwhile: another file here, another target or draft elsewhere."""
            s = self.store.settings
            return self._draft_check is token and (s.target_path, s.draft_path) == (target, draft)

        def checked(report: PairReport) -> None:
            if not current():
                self.statusBar().clearMessage()
            elif report.compatible:
                self.store.update(draft_path=str(path))
                self.statusBar().showMessage(f"{path.name} is the draft: {report.headline}")
            else:
                self.statusBar().clearMessage()
                QMessageBox.warning(
                    self,
                    "Not a draft for this target",
                    f"{path.name} is not set as the draft for {Path(target).name}.\n\n{report.headline}\n\n"
                    "Models ▸ Models… (Ctrl+M), Pair, suggests drafts that fit this target.",
                )

        def unreadable(message: str) -> None:
            self.statusBar().clearMessage()
            if current():
                QMessageBox.warning(self, "Cannot check this draft", f"{path.name} was not set as the draft: {message}")

        self.statusBar().showMessage(f"Checking {path.name} against {Path(target).name}…")
        self.models.tasks.run(lambda: check_pair(Path(target), path, n_ctx=n_ctx), checked, unreadable)

    def _on_compare_exact_requested(self) -> None:
        """Compare's "Switch to bit-exact verification": reload, then run the same comparison again (a tour was
        told to press Compare again in a dock with no Compare button)."""
        self._compare_again = (self._compared, self._compared_in)
        self._on_exact_toggled(True)

    def _compare_again_once_loaded(self) -> None:
        if self._compare_again is None or self.models.loading:
            return
        (messages, of), self._compare_again = self._compare_again, None
        if self.models.loaded is not None and self.models.loaded.info.exact:  # not after a failed or cancelled load
            QTimer.singleShot(0, lambda: self.compare(messages, of))

    def _on_exact_toggled(self, exact: bool) -> None:
        """Switch bit-exact verification (Compare, Teach): the target reloads in the chosen mode."""
        self.store.update(exact=exact)
        self.load_models()

    # ---- state → views ------------------------------------------------------------------------------

    def _update_models(self) -> None:
        s = self.store.settings
        models = self.models
        # File names without ".gguf", and the state in a word or two: the whole line must fit a 1280-pixel window's
        # toolbar, or it goes into the toolbar's overflow menu and no pair is shown at all. The tooltip says more.
        target = Path(s.target_path).stem if s.target_path else "no target chosen"
        strategy = Strategy(s.strategy)
        # What drafts, by name ("free drafts" was never defined anywhere a user looks). A map the loaded target
        # cannot use is left out by the automatic strategy, and said so (a tour read "map" over answers without it).
        info = models.loaded.info if models.loaded is not None else None
        self.settings_panel.set_loaded_vocab(info.vocab_fingerprint if info is not None else "")
        # Of the draft model loaded, not of another chosen since (a review's: the note spoke of a file never measured).
        loaded_draft = models.loaded.settings.draft_path if models.loaded is not None else None
        idle = info.draft_idle if info is not None and not models.loading and loaded_draft == s.draft_path else None
        self.settings_panel.set_draft_idle(idle)
        map_unusable = self.settings_panel.map_unusable
        free = "lookup, n-gram cache" + (", map" if s.ngram_map_path and not map_unusable else "")
        if map_unusable and strategy is Strategy.AUTO:
            free += " (map left out: see Settings)"
        if strategy.uses_draft_model and s.draft_path:
            source = Path(s.draft_path).stem + (f" + {free}" if strategy is Strategy.AUTO else "")
        else:
            source = strategy.label.lower() if strategy is not Strategy.AUTO else free
        if strategy is Strategy.NGRAM_MAP and not s.ngram_map_path:  # a tour learnt it only from Send's error
            source += " — none chosen: Settings ▸ N-gram map"
        state = "loading…" if models.loading else "loaded" if models.loaded else "not loaded"
        if models.loaded and models.loaded.draft_error and not models.loading and s.draft_path:
            state = "target loaded, draft not"  # "loaded" beside "⚠ Draft not loaded" read as a contradiction
        if models.loaded and models.loaded.info.exact:
            state += ", bit-exact"
        # Without the adaptive controller the draft model drafts every step, paying or not (a tour read "draft
        # idle" over an answer it had drafted all of, a third slower than plain decoding).
        idle = models.loaded.info.draft_idle if models.loaded and s.uses_draft and s.adaptive else None
        if models.loaded and not models.loading and self.store.reload_needed():
            state += " — draft idle: Reload frees it" if self.store.reload_frees_draft_only() else " — reload needed"
        elif idle and not models.loading:  # loaded, "✓ Compatible", and never drafting: a tour could not tell why
            state += " — draft idle: cannot pay here"
        label, said = f"<b>{html.escape(target)}</b> ▸ {html.escape(source)}", state
        if models.preparing_demo and not s.target_path:  # not chosen until its files are assembled
            label, said = "<b>The demo pair</b>", "preparing its files and loading…"
        elif not s.target_path:  # "no target chosen ▸ lookup, n-gram cache (not loaded)" was jargon before a choice
            label, said = "<b>No model chosen yet</b>", "Models ▸ Models…, Ctrl+M"
        self.pair_label.setText(label)
        self.state_label.setText(f"<i>({html.escape(said)})</i>")
        # The whole line first: a narrow window cuts the pair's label and a long state's.
        tip = f"{target} ▸ {source} ({state})\nTarget: {s.target_path or '–'}\nDraft: {s.draft_path or '–'}"
        if strategy is Strategy.AUTO:
            tip += (
                "\nAutomatic: each step takes a free draft (prompt lookup, the n-gram cache"
                + (", your n-gram map" if s.ngram_map_path else "")
                + ") when one is likely right, the draft model when it pays on this machine, and decodes plainly "
                "otherwise."
            )
        if models.loaded and not models.loading:
            loaded = models.loaded.info
            kernels = f", bit-exact in calls of {max(loaded.invariant_sizes)}" if loaded.exact else ""
            if loaded.flash_attn and not loaded.exact:
                kernels += f", flash attention {loaded.flash_attn}"
            tip += f"\nLoaded in {models.loaded.seconds:.1f} s: {loaded.description}{kernels}."
        if not models.loaded and not models.loading:
            tip += "\nNot loaded yet: the models load with your first message (or Load, Ctrl+L)."
        elif models.loaded and self.store.reload_needed():
            tip += "\nSettings changed since the models loaded: Reload (Ctrl+L) applies them."
        if idle:
            tip += f"\n{upper_first(idle)}: it stays loaded but idle (the Pair lab finds what pays here)."
        self.pair_label.setToolTip(tip)
        self.state_label.setToolTip(tip)
        self.chat.set_models_state(
            bool(models.loaded) and not models.loading, bool(s.target_path), models.loading, models.reload_reason
        )
        self.load_action.setText("Reload" if models.loaded else "Load")
        self.load_action.setEnabled(not models.loading)
        self.unload_action.setEnabled(models.loaded is not None and not models.loading)
        badge = models.badge
        self.badge_action.setVisible(badge is not None)
        if badge is not None:
            self.badge.setText(badge.text)
            self.badge.setStyleSheet(BADGE_OK if badge.ok else BADGE_WARNING)
            self.badge.setToolTip("Click for the full report.")
        self.progress_action.setVisible(models.loading or models.progress is not None)
        self.cancel_load_action.setVisible(models.loading)
        self.cancel_load_action.setEnabled(models.loading)
        if models.progress is not None and models.progress[2]:
            what, done, total = models.progress
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * done / total))
            self.progress.setToolTip(what)
        elif models.loading:
            self.progress.setRange(0, 0)  # a step of unknown length: timing this machine
            self.progress.setToolTip(models.progress[0] if models.progress is not None else "Loading the models")
        self.settings_panel.set_gpu_backend(models.gpu_backend)
        self.settings_panel.set_flash_measured(info.flash_attn if info is not None and not info.exact else "")
        self.chat.pair = f"{target} ▸ {source}"  # what answered, for the record (not whether it was loaded)

    def _on_conversation_opened(self, conversation: Conversation) -> None:
        if self.chat.finished_status and self.statusBar().currentMessage() == self.chat.finished_status:
            self.statusBar().clearMessage()  # the last answer's word goes with it (a tour read it under New chat)
        self.live_panel.clear()
        self.teach_panel.clear()
        # Edit last opens the same conversation again, its last message taken out: a comparison of that message is
        # an earlier one now (a tour's stayed on screen as if current).
        self.compare_view.mark_outdated(conversation.id, editing=self.chat.editing)
        self.conversation_list.show_current(conversation)
        self._show_kept_answer()
        # Now, not when the budget next allows a refresh: a click is no answer's stream, and a tour opened an
        # emptied conversation under the last one's charts.
        self.charts.refresh()

    def _show_kept_answer(self) -> None:
        """The tokens, charts and figures of the opened conversation's last answer, as it was generated (a tour
        found a conversation opened again with "No answer yet." beside its answers)."""
        if self.chat.kept_answer:
            # Teach too: it explains the answer's last step that drafted, as when it ended (a tour found it empty).
            self.teach_panel.on_records(self.live_panel.show_saved(self.chat.kept_answer))

    def _on_store_changed(self, settings: Settings) -> None:
        self.charts.budget = paint_budget(settings.threads)
        self.teach_panel.set_n_draft(settings.n_draft)
        self.teach_panel.set_exact(settings.exact)
        self.chat.settings_changed()
        self._update_models()

    def _on_router_running_changed(self, running: bool) -> None:
        self.chat.set_generation_running(running)
        if not running:
            self.teach_panel.set_running(False)
            if self.statusBar().currentMessage() == "Stopping…":  # a comparison has no answer to report it
                self.statusBar().showMessage("Stopped.")
            elif self.statusBar().currentMessage() == COMPARING:
                self.statusBar().showMessage("Comparison finished: the verdict is in Compare.")

    def _on_router_paused(self, _request_id: int) -> None:
        self.docks["Teach"].raise_()

    def _on_status_bar_message_changed(self, message: str) -> None:
        self.statusBar().setToolTip(message)

    def _on_status_message(self, message: str) -> None:
        self.statusBar().showMessage(message)  # kept until the next one: the loaded models, say, stay said

    def _on_models_load_failed(self, message: str) -> None:
        if not self._closing:
            QMessageBox.warning(self, "Could not load the models", message)

    def _on_models_demo_missing(self) -> None:
        QMessageBox.information(
            self,
            "Demo models not installed",
            "The demo pair (Qwen2.5-Coder 1.5B with its 0.5B draft) is not installed.\n\n"
            "Install it with:  pip install 'speculens[demo]'",
        )

    def _on_badge_clicked(self) -> None:
        badge = self.models.badge
        if badge is None:
            return
        box = QMessageBox(self)
        box.setWindowTitle("Pair compatibility")
        box.setIcon(QMessageBox.Icon.Information if badge.ok else QMessageBox.Icon.Warning)
        box.setText(badge.report)
        box.exec()

    def _on_conversations_changed(self) -> None:
        self.conversation_list.schedule_refresh()

    def _on_conversation_activated(self, conversation: Conversation) -> None:
        if conversation is self.chat.conversation:
            return
        # Opening another conversation stops the answer being written: asked first, since a click on a list that
        # reorders itself as answers come can land on another chat (a tour lost an answer at 20 tokens that way).
        running = self.chat.turn.conversation if self.chat.turn is not None else None
        if running is not None and running is not conversation:
            regenerating = self.chat.turn is not None and self.chat.turn.replaced is not None
            kept = "the answer it is regenerating is kept" if regenerating else "what it has written is kept"
            answer = QMessageBox.question(
                self,
                "Stop the answer?",
                f"An answer is still being written in “{running.title}”.\n\nStop it ({kept}) and open "
                f"“{conversation.title}”?",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                QMessageBox.StandardButton.No,
            )
            if answer != QMessageBox.StandardButton.Yes:
                self.conversation_list.show_current(self.chat.conversation)
                return
        self.chat.open_conversation(conversation)

    def _on_conversation_deleted(self, conversation: Conversation, then: Conversation | None) -> None:
        self.chat.discard(conversation, then)
        self.statusBar().showMessage(f"Deleted “{conversation.title}”.")  # not the last export's "Wrote …"

    # ---- exports ------------------------------------------------------------------------------------

    def _save_path(self, title: str, suffix: str, pattern: str, about: str = "") -> Path | None:
        """Ask where to export, offering a name that says what it is of (``about``: a conversation's title; else the
        target that answered) and when (a tour's CSV did not say which model; a transcript named after the model,
        not its conversation, was another tour's)."""
        what = re.sub(r"[^\w.-]+", "-", about.lower()).strip("-.")[:48].strip("-.") or Path(
            self.store.settings.target_path
        ).stem
        name = f"speculens-{f'{what}-' if what else ''}{time.strftime('%Y%m%d-%H%M%S')}{suffix}"
        return file_dialogs.save_file(self, Kind.EXPORTS, title, name, pattern)

    def _last_start(self) -> StartEvent | None:
        """The start event of the answer the live panel shows."""
        return next((e for e in self.live_panel.events if isinstance(e, StartEvent)), None)

    def _answer_title(self) -> str:
        start = self._last_start()
        seed = f" (seed {start.seed})" if start is not None and start.seed is not None else ""
        if self.live_panel.comparing:
            return f"Compare's speculative run of the last message{seed}"
        return f"Speculens answer{seed}"

    def _answer_figures(self) -> str:
        """The exported answer's figures, as the app showed them (a tour found the export had none); the PNG's
        caption has them too, with the draft length (a teacher's slide had none of them)."""
        finish = next((e for e in reversed(self.live_panel.events) if isinstance(e, FinishEvent)), None)
        if finish is None:
            return ""
        s = finish.stats
        drafts = f"{s.n_accepted} of {s.n_drafted} drafted tokens accepted" if s.n_drafted else "nothing drafted"
        start = self._last_start()
        if start is not None and start.strategy != "none" and (ran := start.settings) is not None:  # as it ran
            drafts += f", drafts of up to {ran.n_draft} tokens" + (" as the adaptive controller chose" if ran.adaptive
                                                                   else "")  # fmt: skip
        why = "" if finish.reason is FinishReason.EOG else f" · {finish.reason.words}"
        rate = f" · {s.tokens_per_second:.1f} tokens/s" if s.n_generated > 1 else ""  # the first: the prompt's
        return f"{s.passes_text}{rate} · {drafts}{why}"

    def _export_fields(self) -> dict[str, object]:
        """Which models and strategy made the answer, and when it was exported: a file read later, or by someone
        else, said only its seed (a tour's finding). The JSON export's start event carries them."""
        start = self._last_start()
        s = self.store.settings
        # The draft model only where the answer's sources had it (a tour's lookup answer was captioned with the
        # draft, under settings changed since).
        drafting = start.uses_draft_model if start is not None else s.uses_draft
        # What the answer ran with (its start event keeps it), else the settings now: with the seed and the sources,
        # they reproduce a sampled answer (a tour's export held the temperature alone).
        ran = self._ran()
        return {
            "target": Path(s.target_path).name if s.target_path else None,
            "draft": Path(s.draft_path).name if s.draft_path and drafting else None,
            "strategy": start.strategy if start is not None else s.strategy,
            "run": "compare" if self.live_panel.comparing else "chat",  # Compare's speculative half, or the chat's
            "temperature": ran.temperature,
            "settings": dataclasses.asdict(ran),
            "system_prompt": s.system_prompt.strip() or None,  # it shapes every answer (a tour found it missing)
            # The answer's verification mode (a tour's bit-exact export said nothing of it); the loaded models' where
            # the answer did not keep it.
            "exact": start.exact if start is not None and start.exact is not None else bool(
                self.models.loaded and self.models.loaded.info.exact),
            "exported": time.strftime("%Y-%m-%d %H:%M"),
        }

    def _ran(self) -> RunSettings:
        """The settings the last answer ran with (its start event keeps them), else the settings now."""
        start = self._last_start()
        if start is not None and start.settings is not None:
            return start.settings
        return generation_config(self.store.settings).described()

    def _export_context(self) -> str:
        """:meth:`_export_fields` as plain text: the HTML export's first line, the PNG's caption."""
        f = self._export_fields()
        draft = f", draft {f['draft']}" if f["draft"] else ""
        # The last answer's strategy: earlier answers may have had another (a tour's header named the last one's
        # for an answer regenerated with plain decoding).
        ran, start = self._ran(), self._last_start()
        run = "Compare's speculative run" if f["run"] == "compare" else "the last answer"
        sampling = "greedy" if not ran.temperature else (
            f"temperature {ran.temperature:g}, top-k {ran.top_k}, top-p {ran.top_p:g}, min-p {ran.min_p:g}"
            + (f", seed {start.seed}" if start is not None and start.sampled else "")
        )
        exact = "; bit-exact verification" if f["exact"] else ""
        return (
            f"Target {f['target'] or 'no target'}{draft}; strategy of {run}: {f['strategy']}; {sampling}{exact}; "
            f"exported {f['exported']} by Speculens."
        )

    def export_html(self, path: Path | None = None) -> Path | None:
        """Write the conversation as HTML, then its last answer token by token, colour-coded."""
        conversation = self.chat.conversation
        view = self.live_panel.view
        if not conversation.messages and not view.infos:
            self.statusBar().showMessage("Nothing to export yet: send a message first.")
            return None
        path = path or self._save_path("Export transcript", ".html", "HTML (*.html)", conversation.title)
        if path:
            title = conversation.title or "Speculens conversation"
            body = render_transcript(conversation.messages, shade=EXPORT_CODE_SHADE)
            prompt = self._export_fields()["system_prompt"]
            system = f"<p style='color:gray'>System prompt: <i>{html.escape(str(prompt))}</i></p>\n" if prompt else ""
            if view.infos:  # the answer generated last, in this conversation (opening another one clears it)
                other = (
                    "<p style='color:gray'>Not the answer above: Compare ran the last message again, and its text "
                    "can differ (a sampled answer, or another context).</p>\n"
                    if self.live_panel.comparing
                    else ""
                )
                said = self._answer_figures()
                figures = f"<p style='color:gray'>{html.escape(said)}</p>\n" if said else ""
                body += (
                    f"<hr><h2>{html.escape(self._answer_title())}, token by token</h2>\n{other}"
                    f"{figures}{view.html_fragment()}"
                )
                if self.live_panel.comparing:
                    body += self.compare_view.export_html()
            path.write_text(
                "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
                f"<title>{html.escape(title)}</title></head>\n<body style='font-family: sans-serif'>"
                f"<h1>{html.escape(title)}</h1>\n<p style='color:gray'>{html.escape(self._export_context())}</p>\n"
                f"{system}{body}</body></html>\n",
                encoding="utf-8",
            )
            self.statusBar().showMessage(f"Wrote {path}")
        return path

    def _answered(self) -> bool:
        """Whether there is an answer's steps to export; if not, says so (a tour's export wrote "[]" and reported
        success)."""
        if self.live_panel.events:
            return True
        self.statusBar().showMessage("Nothing to export yet: the step events and charts come from an answer.")
        return False

    def export_json(self, path: Path | None = None) -> Path | None:
        """Write the last answer's events as JSON (the start event carries the seed)."""
        if not self._answered():
            return None
        path = path or self._save_path("Export events", ".json", "JSON (*.json)")
        if path:
            write_events_json(self.live_panel.events, path, self._export_fields())
            self.statusBar().showMessage(f"Wrote {path}")
        return path

    def export_csv(self, path: Path | None = None) -> Path | None:
        """Write the last answer's steps as CSV."""
        if not self._answered():
            return None
        path = path or self._save_path("Export events", ".csv", "CSV (*.csv)")
        if path:
            rows = write_events_csv(self.live_panel.events, path)
            self.statusBar().showMessage(f"Wrote {rows} steps to {path}")
        return path

    def export_png(self, path: Path | None = None) -> Path | None:
        """Write the charts as a PNG image."""
        if not self._answered():
            return None
        path = path or self._save_path("Export charts", ".png", "PNG images (*.png)")
        if path:
            # Not the conversation's title: after Compare the charts show another message's answer.
            figures = self._answer_figures()
            caption = f"{self._answer_title()}{': ' + figures if figures else ''}. {self._export_context()}"
            if not self.charts.grab_png(caption).save(str(path), "PNG"):
                self.statusBar().showMessage(f"Could not write {path}")
                return None
            self.statusBar().showMessage(f"Wrote {path}")
        return path

    # ---- first start, about, layout, closing --------------------------------------------------------

    def greet(self) -> None:
        """What the window says at start, in turn: a settings file it could not use (which explains the welcome that
        follows: a dialog of its own runs the event loop, and timers of their own had the welcome open over it),
        downloads left unfinished, and the welcome where no model is chosen."""
        self.mention_settings_problem()
        self.mention_unfinished_downloads()
        self.offer_first_start()

    def mention_settings_problem(self) -> None:
        """Say why the settings are the defaults, where the file was there and unusable: a tour's damaged file
        gave the first start's welcome, its chosen pair and sampling gone, and only the log said why."""
        if self._settings_problem:
            QMessageBox.warning(self, "Settings reset", self._settings_problem)

    def mention_unfinished_downloads(self) -> None:
        """Say in the status bar that downloads an earlier session left unfinished wait to be resumed (their rows
        are in the model manager's Downloads tab, which a user would not open unasked)."""
        from speculens.models.hub import interrupted_downloads

        left = [progress.filename for _repo, progress in interrupted_downloads()]
        if left:
            some = f"The download of {left[0]} is" if len(left) == 1 else f"{len(left)} downloads are"
            self._unfinished_note = f"{some} unfinished: Models ▸ Models… (Ctrl+M), Downloads, Resume."
            self.statusBar().showMessage(self._unfinished_note)

    def _on_downloads_changed(self, text: str) -> None:
        self.download_status.setText(text)
        if self.statusBar().currentMessage() == self._unfinished_note:
            # Resumed (or tried and failed at once): the note at start would contradict the download shown, or
            # the Retry that took Resume's place (a tour's).
            self.statusBar().clearMessage()

    def offer_first_start(self) -> None:
        """With no model chosen yet, offer the demo pair (when installed) and the model manager."""
        if self.store.settings.target_path:
            return
        from speculens.models.demo import DEMO_MODELS, demo_path, is_installed
        from speculens.models.gguf_info import format_bytes

        pair = [m for m in DEMO_MODELS if m.role in ("target", "draft")]
        demo = all(is_installed(m) for m in pair)
        box = QMessageBox(self)
        box.setWindowTitle("Welcome to Speculens")
        box.setIcon(QMessageBox.Icon.Information)
        text = (
            "<p><b>No model is chosen yet.</b></p><p>Speculens needs a <i>target</i> model (GGUF) and, for "
            "draft-model speculation, a smaller <i>draft</i> model with the same tokenizer.</p>"
        )
        if demo:
            unbuilt = [m for m in pair if not demo_path(m).exists()]
            # A tour read "installed" beside a library listing both as "Not built yet".
            size = format_bytes(sum(m.size for m in unbuilt))
            build = f" Their files are built from the installed packages when used ({size}, once)." if unbuilt else ""
            text += f"<p>The demo pair: Qwen2.5-Coder 1.5B (target) with Qwen2.5-Coder 0.5B (draft).{build}</p>"
        box.setText(text)
        demo_button = box.addButton("Use the demo pair", QMessageBox.ButtonRole.AcceptRole) if demo else None
        manager_button = box.addButton("Open the model manager", QMessageBox.ButtonRole.ActionRole)
        box.addButton("Later", QMessageBox.ButtonRole.RejectRole)
        box.exec()
        if demo_button is not None and box.clickedButton() is demo_button:
            self.models.use_demo_pair()
        elif box.clickedButton() is manager_button:
            self.open_model_manager()

    def shortcuts_html(self) -> str:
        """Every menu command that has a shortcut, read from the menus themselves (so the list cannot go stale)."""
        rows = ["<tr><td><b>Enter</b></td><td>Send the message (Shift+Enter: a new line)</td></tr>"]

        def walk(actions: list[QAction], path: str) -> None:
            for action in actions:
                what = f"{path} ▸ {action.text().replace('&', '')}" if path else action.text().replace("&", "")
                menu = action.menu()
                if isinstance(menu, QMenu):
                    walk(menu.actions(), what)
                elif key := action.shortcut().toString(QKeySequence.SequenceFormat.NativeText):
                    rows.append(f"<tr><td><b>{html.escape(key)}</b></td><td>{html.escape(what)}</td></tr>")

        walk(self.menuBar().actions(), "")
        save = QKeySequence(QKeySequence.StandardKey.Save).toString(QKeySequence.SequenceFormat.NativeText)
        rows.append(  # the tool windows' own shortcuts (not in the menus)
            "<tr><td><b>Esc</b></td><td>In the Models window: close it. In the Pair lab: stop a run, or close "
            "the lab when none is running</td></tr>"
            "<tr><td><b>Ctrl+Tab</b></td><td>In the Models window: the next section (Library, Pair picker, "
            "Hugging Face hub, Downloads); Ctrl+Shift+Tab the one before</td></tr>"
            "<tr><td><b>Delete</b></td><td>In the Models window's library: remove the selected model (it asks "
            "first)</td></tr>"
            "<tr><td><b>Ctrl+Return</b></td><td>In the Pair lab: run</td></tr>"
            f"<tr><td><b>{html.escape(save)}</b></td><td>In the Pair lab: export the results as JSON</td></tr>"
            "<tr><td><b>F2</b></td><td>In the conversation list: rename the selected conversation</td></tr>"
            "<tr><td><b>Delete</b></td><td>In the conversation list: delete the selected conversation</td></tr>"
        )
        return f"<table cellspacing='6'>{''.join(rows)}</table>"

    def show_settings(self) -> None:
        """The Settings panel, brought to the front (its dock shown again if it was closed) with the focus in it."""
        self.go_to("Settings", self.settings_panel.strategy)  # its first field

    def go_to(self, name: str, focus: QWidget) -> None:
        """Show a dock (again, if it was closed), in front of the docks tabbed with it, with the focus in ``focus``
        (or, where that takes none, its first child that does)."""
        dock = self.docks[name]
        if dock.isFloating() and not dock.isVisible():
            dock.setFloating(False)
        dock.show()
        dock.raise_()
        if not focus.focusPolicy() & Qt.FocusPolicy.TabFocus:
            takers = (w for w in focus.findChildren(QWidget) if w.focusPolicy() & Qt.FocusPolicy.TabFocus)
            focus = next((w for w in takers if w.isVisibleTo(dock) and w.isEnabled()), focus)
        focus.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def show_primer(self) -> QDialog:
        """Help ▸ How speculative decoding works."""
        return self._show_page("How speculative decoding works", PRIMER_HTML)

    def show_shortcuts(self) -> QDialog:
        """The keyboard shortcuts."""
        return self._show_page("Keyboard shortcuts", self.shortcuts_html(), 560)

    def _show_page(self, title: str, page_html: str, width: int = 640) -> QDialog:
        """A Help page (one of each: opened again, it comes to the front)."""
        page = self._pages.get(title)
        if page is None:
            page = self._pages[title] = show_page(self, title, page_html, width)
            page.destroyed.connect(lambda: self._pages.pop(title, None))
        page.raise_()
        page.activateWindow()
        return page

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

    def next_step(self) -> None:
        """Teach's Next step; with step mode off, what to do instead (a teacher's tour pressed F10 and nothing
        happened, nor was anything said)."""
        if self.teach_panel.next_button.isEnabled():
            self.teach_panel.next_button.click()
        elif not self.teach_panel.step_mode.isChecked():
            self.statusBar().showMessage(
                "Step mode is off: Ctrl+F10 (or Teach ▸ Step mode) pauses the next answer after every step, and F10 "
                "runs each next step."
            )

    def _say_step_mode(self, on: bool) -> None:
        """Say what step mode now does (F10's "Step mode is off" stayed in the status bar after a tour's Ctrl+F10
        had turned it on). While an answer runs, the chat says what it does now ("Paused…", "Answering…")."""
        if self.chat.busy or self.router.running:
            return
        self.statusBar().showMessage(
            "Step mode is on: answers pause after every step, and F10 runs the next one."
            if on
            else "Step mode is off: answers run to their end."
        )

    def toggle_full_screen(self) -> None:
        """Full screen, or back to the window as it was (maximised or not)."""
        self.setWindowState(self.windowState() ^ Qt.WindowState.WindowFullScreen)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.WindowStateChange:  # F11, the window manager, or quitting from full screen
            self.full_screen_action.setChecked(self.isFullScreen())

    def resizeEvent(self, event: QResizeEvent) -> None:
        """A window made shorter takes from the charts too, down to a quarter of its height: Qt gives all of a change
        to the chat, and a tour's 840×600 window kept the charts' 200 pixels and showed one line of the conversation.
        Only a shrink, and only above that share: a size the user gives the charts is theirs, and nothing grows or
        drifts as the window is dragged, maximised or opened again."""
        super().resizeEvent(event)
        old, new = event.oldSize(), event.size()
        if not self.isVisible() or old.height() <= 0 or new.height() >= old.height():
            return
        across = (Qt.DockWidgetArea.TopDockWidgetArea, Qt.DockWidgetArea.BottomDockWidgetArea)
        for dock in self.docks.values():
            if not dock.isVisible() or dock.isFloating() or self.dockWidgetArea(dock) not in across:
                continue
            cap = max(dock.minimumSizeHint().height(), new.height() * CHARTS_SHARE // 100)
            if dock.height() > cap:
                self.resizeDocks([dock], [cap], Qt.Orientation.Vertical)

    def _restore_layout(self) -> None:
        store = file_dialogs.window_state()
        geometry = store.value("geometry")
        state = store.value("state")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        else:
            resize_within_screen(self, 1280, 820)
        if isinstance(state, QByteArray) and not state.isEmpty():
            self.restoreState(state, STATE_VERSION)

    def _save_layout(self) -> None:
        store = file_dialogs.window_state()
        if self.isFullScreen():  # the next start opens as a window: full screen is for the moment (a projector)
            self.setWindowState(self.windowState() & ~Qt.WindowState.WindowFullScreen)
        store.setValue("geometry", self.saveGeometry())
        store.setValue("state", self.saveState(STATE_VERSION))
        store.setValue("conversation", self.chat.conversation.id)
        store.setValue("unsent", self.chat.input.toPlainText())
        store.sync()

    def teaching_layout(self) -> None:
        """Teach on the left (the conversations tabbed behind it), Live tokens on the right: a step's explanation and
        its coloured tokens in view together. They share the right's tabs by default, and a teacher's tour in step
        mode went back and forth between them at every step."""
        teach, live, conversations = self.docks["Teach"], self.docks["Live"], self.docks["Conversations"]
        for dock in (teach, live, conversations):
            dock.setFloating(False)
            dock.show()
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, conversations)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, teach)
        self.tabifyDockWidget(conversations, teach)
        teach.raise_()
        live.raise_()
        widths = [max(380, self.width() // 3), max(320, self.width() // 4)]
        self.resizeDocks([teach, live], widths, Qt.Orientation.Horizontal)
        said = "" if self.teach_panel.step_mode.isChecked() else "; Ctrl+F10 turns step mode on"
        self.statusBar().showMessage(f"Teach beside Live tokens (View ▸ Reset layout puts them back){said}.")

    def _on_reset_layout_triggered(self) -> None:
        self.restoreState(self._default_state, STATE_VERSION)
        for dock in self.docks.values():
            dock.show()

    def _quit_stopping_downloads(self) -> bool:
        """Whether to quit though downloads are under way: asked, since one can take hours (a stopped download
        resumes from its partial file)."""
        manager = getattr(self, "_manager", None)
        running = manager.active_downloads() if manager is not None else []
        if not running:
            return True
        names = ", ".join(d.filename for d in running[:3])
        if len(running) > 3:
            names += f" and {len(running) - 3} more"
        some = "A download is" if len(running) == 1 else f"{len(running)} downloads are"
        answer = QMessageBox.question(
            self,
            "Quit Speculens?",
            f"{some} still running: {names}.\n\nQuit anyway? What was downloaded is kept: the next time, Resume in "
            "Models ▸ Downloads continues where it stopped.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No,
        )
        return answer == QMessageBox.StandardButton.Yes

    def closeEvent(self, event: QCloseEvent) -> None:
        """Stop generating, keep what was written, free the models on the worker thread, remember the layout
        (after asking, when downloads are under way)."""
        if not self._closing and not self._quit_stopping_downloads():
            event.ignore()
            return
        self._closing = True
        self.chat.closing = True  # a chat answer the cancel ends now ends as stopped by the quit (see save_now)
        self.router.cancel()
        # What the worker sent before the cancel first: an answer that had just finished is kept as finished, not
        # saved as stopped (a Regenerate's would be taken back for the answer it replaced; a review's).
        self.router.drain()
        self.chat.save_now()
        if not self.worker.close(timeout=60.0):
            log.error("the engine worker did not stop within 60 s")
        self.router.drain()
        self.conversations.close()
        self.store.flush()
        self.chat.input.textChanged.disconnect(self._unsent_timer.start)  # no save is submitted once shut down
        self._unsent_timer.stop()
        self._unsent_saver.shutdown()  # its last write before the layout's, which has the box's text now
        try:
            self._save_layout()
        except OSError:
            log.exception("could not save the window layout")
        manager = getattr(self, "_manager", None)
        if manager is not None:
            manager.shutdown()
            manager.close()
        self.models.wait()
        super().closeEvent(event)
