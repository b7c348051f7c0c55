"""The model manager window: library, pair picker, Hugging Face hub search, and downloads.

A Qt face on the Qt-free :mod:`speculens.models` layer, over the application's one library and hub client
(owned by the :class:`~speculens.ui.model_controller.ModelController`). Everything that reads files or the
network — listing the library, checking a pair, suggesting drafts, searching, downloading — runs on
background threads through :class:`~speculens.ui.tasks.TaskRunner`, whose results come back as queued
signals, so the window never blocks. Download progress is stored by the download thread and pulled by a
5 Hz timer, like the live panel's records. It reads the current settings (the context size) from the
settings store whenever it checks a pair, so its reports are never stale.
"""

from __future__ import annotations

import html
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QModelIndex, QObject, QPersistentModelIndex, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QKeyEvent, QKeySequence, QShortcut, QShowEvent, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from speculens import paths
from speculens.engine.config import Strategy
from speculens.models.library import EntryStatus
from speculens.settings import DRAFT_STRATEGIES
from speculens.ui import file_dialogs
from speculens.ui.file_dialogs import Kind
from speculens.ui.model_controller import ModelController, report_html, saved_verdict
from speculens.ui.screen import resize_within_screen
from speculens.ui.tasks import TaskRunner
from speculens.words import local_time

log = logging.getLogger(__name__)

MISMATCH_STYLE = "QLabel { background: #d73a49; color: white; font-weight: bold; padding: 10px; border-radius: 4px }"
OK_STYLE = "QLabel { background: rgba(46,160,67,150); color: white; padding: 8px; border-radius: 4px }"


RUNNING = ("queued", "downloading", "verifying")  # the states of a download still under way


@dataclass
class Download:
    """One download's state, shared between its thread (writes) and the GUI timer (reads).

    Attributes:
        repo: the hub repository.
        filename: the file.
        cancel: set to stop it (the partial file stays for a resume).
        progress: the latest progress report.
        state: ``queued``, ``downloading``, ``verifying``, ``done``, ``cancelled``, ``failed``, or ``interrupted``
            (left unfinished by an earlier session).
        message: the error, or where the file went.
        row: its row in the downloads table.
    """

    repo: str
    filename: str
    cancel: threading.Event = field(default_factory=threading.Event)
    progress: Any = None
    state: str = "queued"
    message: str = ""
    row: int = -1


def _cell(table: QTableWidget, row: int, column: int) -> QTableWidgetItem:
    """The item at (row, column), created if the cell is still empty."""
    item = table.item(row, column)
    if item is None:
        item = QTableWidgetItem()
        table.setItem(row, column, item)
    return item


def display_path(path: Path) -> str:
    """A path as the user reads it: the home folder as ``~``."""
    try:
        return str(Path("~") / path.relative_to(Path.home()))
    except ValueError:
        return str(path)


def _squash(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def name_disagrees(entry: Any) -> bool:
    """Whether the metadata's name says something the file name does not (a re-quantised or renamed copy)."""
    return _squash(entry.name) not in _squash(entry.path.stem)


class _ElideStart(QStyledItemDelegate):
    """Cut a cell's text at its start (a path: its file name stays)."""

    def initStyleOption(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        super().initStyleOption(option, index)
        option.textElideMode = Qt.TextElideMode.ElideLeft


SOURCE_COLUMN = 6
HUB_TAB = 2  # the tabs: library, pair picker, the Hugging Face hub, downloads
SOURCE_WIDTH = 220  # pixels at most for the Source column (see _show_library)
# The library's Location column at least, where its paths are that long (then the table scrolls sideways). At 260 the
# demo pair's rows pushed the Status column out of the Models window on a 1366x768 screen; 180 still shows a path's
# last 26 characters or so, and the tooltip has it whole.
LOCATION_WIDTH = 180


def entry_label(entry: Any, entries: list[Any]) -> str:
    """How a model is named in a list, as the library's first column names it (a tour found the pair picker
    naming files where the library named models): its name, its file where that says something else, its size
    and quantisation, and its folder when another model in the library has the same file name (the demo copy
    and an imported copy)."""
    label = entry.name
    if name_disagrees(entry):
        label += f" ({entry.path.name})"
    quant = entry.quantization if entry.quantization and entry.quantization not in entry.name else ""
    label += f" — {_format_bytes(entry.size)}{' ' + quant if quant else ''}"
    if sum(1 for e in entries if e.path.name == entry.path.name) > 1:
        label += f" — in {display_path(entry.path.parent)}"
    return label


def _format_bytes(n: float | None) -> str:
    from speculens.models.gguf_info import format_bytes

    return format_bytes(n)


def _format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else (f"{seconds // 60}:{seconds % 60:02d}")
    )


class ModelManagerWindow(QMainWindow):
    """Library, pair picker, hub and downloads, as tabs.

    Args:
        models: the model controller (the library, the hub client, the settings store).
        parent: the main window.

    Signals:
        pair_chosen(str, str): the user chose a target and a draft path ("" = no draft); it is also set in
            the model controller, which loads it.
        pair_lab_requested(str): the user wants the pair lab for the target chosen here (its path; "" for none),
            which the main window opens on that target.
        downloads_changed(str): how the running downloads stand ("Downloading x.gguf: 37%"), "" when none runs:
            the main window shows it, so a download goes on being seen with this window closed.
        download_ended(str): a download ended, in a sentence (done, or why it failed): the main window says it too
            (a tour closed this window during a download and never learnt that it had finished).
    """

    pair_chosen = Signal(str, str)
    pair_lab_requested = Signal(str)
    downloads_changed = Signal(str)
    download_ended = Signal(str)

    def __init__(self, models: ModelController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowFlag(Qt.WindowType.Window)
        self.setWindowTitle("Models")  # Qt adds " — Speculens", the application display name
        self.setObjectName("ModelManager")
        resize_within_screen(self, 1100, 680)
        QShortcut(QKeySequence("Esc"), self, self.close)  # a tool window: Esc closes it
        self.models = models
        self.library = models.library
        self.hub = models.hub
        self.tasks = TaskRunner(self)
        self.entries: list[Any] = []
        self._pending_pick: tuple[Any, QComboBox] | None = None  # a demo model assembled to be picked
        self._unbuilt: dict[str, Any] = {}  # demo models listed in the pair picker, not built yet, by path
        self._building: set[str] = set()  # those being built now
        self._removing: set[str] = set()  # library entries removed once the loaded models are freed
        self.downloads: list[Download] = []
        self.report: Any = None
        self._speed_shown = ""  # the speed line under the report (see _speed_here)
        self._hub_files: list[Any] = []

        self.tabs = QTabWidget(self)
        self.tabs.setAccessibleName("Model manager sections")
        self.tabs.addTab(self._build_library(), "Library")
        self.tabs.addTab(self._build_pair(), "Pair picker")
        self.tabs.addTab(self._build_hub(), "Hugging Face hub")
        self.tabs.addTab(self._build_downloads(), "Downloads")
        # Errors wrap in a line of their own: a long message never runs off the edge of a status bar.
        self.message = QLabel(self)
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.setAccessibleName("Model manager message")
        central = QWidget(self)
        column = QVBoxLayout(central)
        column.setContentsMargins(6, 6, 6, 6)
        column.addWidget(self.tabs, 1)
        column.addWidget(self.message)
        self.setCentralWidget(central)
        # Enter presses the focused button, as Space does (a keyboard tour's Enter on "Use this pair" did nothing:
        # only a dialog's buttons take it by default).
        for button in central.findChildren(QPushButton):
            button.setAutoDefault(True)
        self._say("Reading the library…")
        models.store.changed.connect(self._on_store_changed)
        models.changed.connect(self._on_models_changed)  # a load finished: the speed line follows it
        # The hub tab: typing goes to its search box (a tour's first query went nowhere).
        self._said_of_tab: int | None = None  # the tab the message at the foot is about (see _show_error)
        self.tabs.currentChanged.connect(self._on_tabs_current_changed)
        # The next and previous tab from anywhere in the window: a text field kept Ctrl+Tab from the tab widget (a
        # tour, opened on the hub tab with the keyboard in its search box, could not reach the Pair picker).
        for keys, step in (("Ctrl+Tab", 1), ("Ctrl+PgDown", 1), ("Ctrl+Shift+Tab", -1), ("Ctrl+PgUp", -1)):
            QShortcut(QKeySequence(keys), self, lambda step=step: self._next_tab(step))
        if parent is not None:  # Ctrl+Q quits from here too, as from the main window
            QShortcut(QKeySequence(QKeySequence.StandardKey.Quit), self, parent.close)

        self._download_timer = QTimer(self)
        self._download_timer.setInterval(200)
        self._download_timer.timeout.connect(self._on_download_timer_timeout)
        self._list_interrupted_downloads()
        self.refresh_library()

    # ---- library ------------------------------------------------------------------------------------

    def _build_library(self) -> QWidget:
        page = QWidget(self)
        self.library_table = QTableWidget(0, 8, page)
        self.library_table.setHorizontalHeaderLabels(
            ["Name", "Location", "Family", "Size", "Quantization", "Context", "Source", "Status"]
        )
        # Long texts lose their middle; a path loses its start, where paths in one library agree (a tour read two
        # Qwen rows as the same '/tmp/…/data/s…struct-q4_k_m.gguf': their file names differ in the middle).
        self.library_table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.library_table.setItemDelegateForColumn(1, _ElideStart(self.library_table))
        self.library_table.setWordWrap(False)
        self.library_table.setAccessibleName("Library")
        self.library_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.library_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        # Tab goes on to the buttons: from cell to cell it wrapped to the next row, and a tour's Alt+T then chose
        # another model than the one it had selected.
        self.library_table.setTabKeyNavigation(False)
        self.library_table.verticalHeader().hide()
        self.library_table.viewport().installEventFilter(self)
        buttons = QHBoxLayout()
        # Alt+letter for each, as the menus have (a keyboard tour found none here); Delete removes the selected row.
        for text, slot in (
            ("&Import file…", self._on_import_clicked),
            ("&Scan folder…", self._on_scan_clicked),
            ("R&efresh", self.refresh_library),
            ("Use as &target", self._on_use_target_clicked),
            ("Use as &draft", self._on_use_draft_clicked),
            ("&Remove from library", self._on_remove_clicked),
        ):
            button = QPushButton(text, page)
            button.setAccessibleName(text.replace("&", ""))
            button.clicked.connect(slot)
            buttons.addWidget(button)
        self.library_table.installEventFilter(self)  # the Delete key (see eventFilter)
        buttons.addStretch(1)
        layout = QVBoxLayout(page)
        layout.addWidget(self.library_table)
        layout.addLayout(buttons)
        return page

    def refresh_library(self, news: str = "", select: Path | None = None) -> None:
        """Re-read the library index on a background thread; ``news`` (what changed it) is said before the count
        (a tour's scan summary was overwritten by the count at once); ``select``: the model to select then (one just
        imported: a tour's stayed on the first row, and its Alt+T chose that one)."""
        self.tasks.run(
            self.library.entries, lambda entries: self._show_library(entries, news, select), self._show_error
        )

    def _show_library(self, entries: list[Any], news: str = "", select: Path | None = None) -> None:
        from speculens.models.gguf_info import format_bytes

        selected = self._selected_entry()
        wanted = str(select) if select is not None else str(selected.path) if selected is not None else None
        opening = not self.entries
        self.entries = entries
        table = self.library_table
        table.setRowCount(len(entries))
        for row, e in enumerate(entries):
            cells = [
                e.name + (f"\n{e.path.name}" if name_disagrees(e) else ""),
                display_path(e.path),
                e.family or "–",
                format_bytes(e.size),
                e.quantization or "–",
                f"{e.context_length:,}" if e.context_length else "–",
                e.source.describe(),
                e.status.words,
            ]
            tip = f"{e.name}\n{e.path}\nSource: {e.source.describe()}" + (f"\n\n{e.problem}" if e.problem else "")
            if e.status is EntryStatus.NOT_ASSEMBLED:  # said here, so that the Status column stays narrow
                tip += "\n\nNot built yet: Use as target or Use as draft builds it from its installed packages."
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(tip)
                if e.status is not EntryStatus.OK:
                    item.setForeground(Qt.GlobalColor.red if e.status is EntryStatus.DAMAGED else Qt.GlobalColor.gray)
                table.setItem(row, col, item)
        self._mark_pair_rows()
        table.resizeColumnsToContents()
        # A hub source ("hub: google/gemma-3-270m-GGUF@0123456") loses its middle rather than push the Status
        # column out of the window (a tour's, at 1100 pixels); the tooltip has it whole.
        table.setColumnWidth(SOURCE_COLUMN, min(table.columnWidth(SOURCE_COLUMN), SOURCE_WIDTH))
        table.resizeRowsToContents()
        self._fit_location()
        # The arrow keys, Delete and the buttons work from the keyboard as the window opens (a keyboard tour found
        # no row selected); a refresh keeps the selection on its model, and a removed one leaves none, so that a
        # second click removes nothing.
        rows = {str(e.path): r for r, e in enumerate(entries)}
        if wanted is not None and wanted in rows:
            table.setCurrentCell(rows[wanted], 0)
        elif opening and entries:
            table.setCurrentCell(rows.get(self.models.store.settings.target_path, 0), 0)
        damaged = [e for e in entries if e.status is EntryStatus.DAMAGED]
        note = f" {len(damaged)} damaged: {damaged[0].problem}" if damaged else ""
        self._say(f"{news + ' ' if news else ''}{len(entries)} models in the library.{note}")
        self._fill_pair_combos()
        pending, self._pending_pick = self._pending_pick, None
        if pending is not None:
            self._pick_in_pair_tab(*pending)

    def _fit_location(self) -> None:
        """The Location column takes the width the other columns leave, and at least LOCATION_WIDTH where its
        paths need it: the table scrolls sideways rather than cut it to nothing (a tour read '/t…uf')."""
        table = self.library_table
        others = sum(table.columnWidth(c) for c in range(table.columnCount()) if c != 1)
        least = min(LOCATION_WIDTH, table.sizeHintForColumn(1))
        table.setColumnWidth(1, max(least, table.viewport().width() - others))

    def _next_tab(self, step: int) -> None:
        self.tabs.setCurrentIndex((self.tabs.currentIndex() + step) % self.tabs.count())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind == QEvent.Type.Resize and watched is self.library_table.viewport():
            self._fit_location()  # the window resized, or the Library tab shown at another size
        elif (
            kind == QEvent.Type.KeyPress
            and watched is self.library_table
            and isinstance(event, QKeyEvent)
            and (event.matches(QKeySequence.StandardKey.Delete) or event.key() == Qt.Key.Key_Backspace)  # Mac: ⌫
        ):
            self._on_remove_clicked()  # as the button does, asking first
            return True
        return super().eventFilter(watched, event)

    def _mark_pair_rows(self) -> None:
        """The chosen target and draft in bold, their role after the name: which models are in use is seen in the
        library itself (a new user could not tell)."""
        settings = self.models.store.settings
        roles = {settings.target_path: "target", settings.draft_path: "draft"}
        for row, e in enumerate(self.entries):
            item = self.library_table.item(row, 0)
            if item is None:
                continue
            role = roles.get(str(e.path))
            item.setText(e.name + (f"  ({role})" if role else "") + (f"\n{e.path.name}" if name_disagrees(e) else ""))
            font = item.font()
            font.setBold(role is not None)
            item.setFont(font)
        # Bold and "(draft)" are wider: the names are fitted again (a tour read "Qwen2.5 Coder 0.5…uct AWQ
        # (draft)" once a pair was chosen), and Location takes what is left.
        self.library_table.resizeColumnToContents(0)
        self._fit_location()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self.tabs.currentIndex() == 0:  # typing goes to the library's rows (the hub tab focuses its search box)
            self.library_table.setFocus()

    def show_in_library(self, path: Path) -> None:
        """Select the library's row of ``path`` (a finished download), on the Library tab, with the keyboard there."""
        self.tabs.setCurrentIndex(0)
        row = next((i for i, e in enumerate(self.entries) if e.path == path), None)
        if row is None:  # removed from the library since
            self._show_error(f"{path.name} is no longer in the library: download it again, or Import it.")
            return
        self.library_table.selectRow(row)
        self.library_table.scrollTo(self.library_table.model().index(row, 0))
        self.library_table.setFocus()

    def _selected_entry(self) -> Any:
        rows = {i.row() for i in self.library_table.selectedIndexes()}
        return self.entries[min(rows)] if rows else None

    def _on_import_clicked(self) -> None:
        path = file_dialogs.open_file(self, Kind.MODELS, "Import a GGUF model", "GGUF models (*.gguf)")
        if path:
            self.import_file(path)

    def import_file(self, path: Path) -> None:
        """Register a file where it is (nothing is copied)."""
        self._say(f"Reading {path.name}…")
        self.tasks.run(
            lambda: self.library.add(path), lambda e: self.refresh_library(f"{e.name} added.", e.path), self._show_error
        )

    def _on_scan_clicked(self) -> None:
        folder = file_dialogs.open_folder(self, Kind.MODELS, "Scan a folder for GGUF models")
        if folder:
            self.scan_folder(folder)

    def scan_folder(self, folder: Path) -> None:
        """Register every GGUF model in a folder."""

        def done(result: Any) -> None:
            skipped = ""
            if result.skipped:
                reasons = "; ".join(f"{p.name}: {why}" for p, why in result.skipped[:3])
                skipped = f", {len(result.skipped)} skipped ({reasons})"
            self.refresh_library(f"Scan: {len(result.added)} added, {len(result.known)} already known{skipped}.")

        self._say(f"Scanning {folder}…")
        self.tasks.run(lambda: self.library.scan(folder), done, self._show_error)

    def _on_remove_clicked(self) -> None:
        """Forget the selected model, once the user says so: a tour removed one with a click, and a second click
        removed the next (the selection moves on). A file in the Speculens models folder may be deleted with it
        (a demo model's must be: the library lists any demo model it finds built); a file elsewhere is the
        user's and stays."""
        from speculens.models.gguf_info import format_bytes

        entry = self._selected_entry()
        if entry is None:
            return
        if entry.status is EntryStatus.NOT_ASSEMBLED:
            # Listed while its packages are installed, and taking no space (a tour looked for a way to remove it).
            self._say(
                f"{entry.name} is a demo model not built yet: it takes no disk space, and stays listed while its "
                "packages are installed (pip uninstall them to drop it)."
            )
            return
        ours = entry.path.resolve().is_relative_to(paths.models_dir().resolve())
        if entry.id in self._removing:  # waiting for the models to be freed: a second Remove would find no entry
            self._say(f"{entry.name} is removed as soon as the loaded models are freed.")
            return
        # The chosen target or draft: said first, and the pair given up with it (a tour removed both, and the window
        # went on naming them until a load failed on a file not found).
        roles, in_memory = self._in_use(entry)
        in_use = ""
        if "target" in roles:
            in_use = "It is the chosen target: the pair is left without one"
        elif roles:
            in_use = (
                "It is the chosen draft: the pair goes on without a draft model (prompt lookup and the n-gram cache "
                "still draft)"
            )
        if in_use:
            in_use += (", and the loaded models are freed (an answer running stops)" if in_memory else "") + ".\n\n"
        box = QMessageBox(QMessageBox.Icon.Question, "Remove from library", f"Remove {entry.name} from the library?",
                          parent=self)  # fmt: skip
        delete = keep = None
        if entry.source.demo_key:
            box.setInformativeText(
                in_use + f"Its file ({format_bytes(entry.size)}) is deleted; the demo model stays listed as not built, "
                "and Use as target or Use as draft builds it again from its installed packages."
            )
            delete = box.addButton("Remove and delete the file", QMessageBox.ButtonRole.DestructiveRole)
        elif ours:
            box.setInformativeText(
                in_use + f"Its file ({format_bytes(entry.size)}) is in the Speculens models folder: delete it to free "
                "the space, or keep it (Import file… adds it back)."
            )
            delete = box.addButton("Remove and delete the file", QMessageBox.ButtonRole.DestructiveRole)
            keep = box.addButton("Remove, keep the file", QMessageBox.ButtonRole.AcceptRole)
        else:
            box.setInformativeText(in_use + f"The file stays where it is ({entry.path}); Import file… adds it back.")
            keep = box.addButton("Remove", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        clicked = box.clickedButton()
        if clicked is None or clicked not in (delete, keep):
            return
        erase = clicked is delete
        news = f"{entry.name} removed" + (" and its file deleted." if erase else ".")
        self.library_table.clearSelection()

        def removed(_result: object) -> None:
            self._removing.discard(entry.id)
            self.refresh_library(news)

        def failed(message: str) -> None:
            self._removing.discard(entry.id)
            self._show_error(message)

        def remove(_why: str = "") -> None:
            self.tasks.run(lambda: self.library.remove(entry.id, delete_file=erase), removed, failed)

        roles, in_memory = self._in_use(entry)  # again: a load may have begun or ended while the question was open
        if roles:
            self.models.store.update(**{f"{role}_path": "" for role in roles})
        self._removing.add(entry.id)
        if in_memory:  # freed first: a file llama.cpp maps cannot be deleted on Windows
            self.models.cancel_loading()
            self.models.worker.models_unloaded.connect(remove, Qt.ConnectionType.SingleShotConnection)
            self.models.unload()
            self._say(f"Freeing the loaded models, then removing {entry.name}…")
        else:
            remove()

    def _in_use(self, entry: Any) -> tuple[list[str], bool]:
        """Whether a library entry is the chosen target and/or draft (its roles), and whether its file may be open in
        the loaded models, or in a load under way. Paths are compared resolved: a file opened through a link names
        the entry's file by another path (a review's)."""
        settings = self.models.store.settings

        def same(chosen: str) -> bool:
            return bool(chosen) and paths.same_file(chosen, entry.path)

        roles = [role for role, chosen in (("target", settings.target_path), ("draft", settings.draft_path))
                 if same(chosen)]  # fmt: skip
        loaded = self.models.loaded
        in_memory = self.models.loading or self.models.preparing_demo or (
            loaded is not None
            and (same(loaded.settings.target_path) or (bool(loaded.info.draft) and same(loaded.settings.draft_path)))
        )
        return roles, in_memory

    def _on_use_target_clicked(self) -> None:
        self._pick_in_pair_tab(self._selected_entry(), self.target_combo)

    def _on_use_draft_clicked(self) -> None:
        self._pick_in_pair_tab(self._selected_entry(), self.draft_combo)

    def _pick_in_pair_tab(self, entry: Any, combo: QComboBox, pick: bool = True) -> None:
        """Pick a library entry in one of the pair picker's lists; a demo model not built yet is built first
        (``pick``: then picked; else the list, which already shows it, keeps whatever is chosen by then)."""
        if entry is None:
            return
        if entry.status is EntryStatus.NOT_ASSEMBLED and entry.source.demo_key:
            # Its file does not exist yet: build it from the installed chunks first, then pick it.
            def done(built: Any) -> None:
                self._building.discard(str(entry.path))
                self._unbuilt.pop(str(entry.path), None)
                self._say(f"{built.name} is ready.")
                if pick:
                    self._pending_pick = (built, combo)  # picked once the refreshed library is shown
                self.refresh_library()

            def failed(message: str) -> None:
                self._building.discard(str(entry.path))
                self._show_error(message)
                self._check_pair()  # says it is not built, with its link to try again

            if str(entry.path) in self._building:
                return
            self._building.add(str(entry.path))
            self._say(f"Assembling {entry.name} from its installed packages…")
            key = entry.source.demo_key
            self.tasks.run(lambda: self.library.assemble_demo(key), done, failed)
            return
        index = combo.findData(str(entry.path))
        if index >= 0:
            combo.setCurrentIndex(index)
        self.tabs.setCurrentIndex(1)

    # ---- pair picker --------------------------------------------------------------------------------

    def _build_pair(self) -> QWidget:
        page = QWidget(self)
        self.target_combo = QComboBox(page)
        self.target_combo.setAccessibleName("Target model")
        self.draft_combo = QComboBox(page)
        self.draft_combo.setAccessibleName("Draft model")
        self.suggestions = QListWidget(page)
        self.suggestions.setAccessibleName("Suggested drafts")
        self.suggestions.setMaximumHeight(130)
        self.suggestions.itemActivated.connect(self._on_suggestions_item_activated)
        self.suggestions.itemClicked.connect(self._on_suggestions_item_activated)
        self.banner = QLabel(page)
        self.banner.setWordWrap(True)
        self.banner.setAccessibleName("Compatibility verdict")
        self.banner.hide()
        self.report_view = QTextBrowser(page)
        self.report_view.setAccessibleName("Compatibility report")
        self.report_view.setOpenLinks(False)  # its one link builds a demo model (_on_report_link_clicked)
        self.report_view.anchorClicked.connect(self._on_report_link_clicked)
        # Alt+letter for each, as the library's buttons have (a keyboard tour found none here).
        self.use_pair_button = QPushButton("&Use this pair", page)
        self.use_pair_button.setAccessibleName("Use this pair")
        self.use_pair_button.clicked.connect(self._on_use_pair_clicked)
        self.use_target_only_button = QPushButton("Use the target &alone (draft-free strategies)", page)
        self.use_target_only_button.setAccessibleName("Use the target alone (draft-free strategies)")
        self.use_target_only_button.clicked.connect(self._on_use_target_only_clicked)
        self.pair_lab_button = QPushButton("&Pair lab…", page)
        self.pair_lab_button.setAccessibleName("Pair lab…")
        self.pair_lab_button.setToolTip("Measure which draft and strategy make this target fastest on this machine")
        # On the target chosen here: a tour picked the demo target, and the lab opened on the library's first model.
        self.pair_lab_button.clicked.connect(
            lambda: self.pair_lab_requested.emit(self.target_combo.currentData() or "")
        )
        form = QFormLayout()
        form.addRow("Target", self.target_combo)
        form.addRow("Suggested drafts", self.suggestions)
        form.addRow("Draft", self.draft_combo)
        buttons = QHBoxLayout()
        buttons.addWidget(self.pair_lab_button)
        buttons.addStretch(1)
        buttons.addWidget(self.use_target_only_button)
        buttons.addWidget(self.use_pair_button)
        # Tab in the order they are seen, left to right (they were made right to left).
        QWidget.setTabOrder(self.report_view, self.pair_lab_button)
        QWidget.setTabOrder(self.pair_lab_button, self.use_target_only_button)
        QWidget.setTabOrder(self.use_target_only_button, self.use_pair_button)
        layout = QVBoxLayout(page)
        layout.addLayout(form)
        layout.addWidget(self.banner)
        layout.addWidget(self.report_view, 1)
        layout.addLayout(buttons)
        self.target_combo.currentIndexChanged.connect(self._on_target_combo_changed)
        self.draft_combo.currentIndexChanged.connect(self._on_draft_combo_changed)
        return page

    def _fill_pair_combos(self) -> None:
        settings = self.models.store.settings
        self._unbuilt = {
            str(e.path): e for e in self.entries if e.status is EntryStatus.NOT_ASSEMBLED and e.source.demo_key
        }
        for combo, current, blank in (
            (self.target_combo, settings.target_path, "— choose a target —"),
            (self.draft_combo, settings.draft_path, "— no draft —"),
        ):
            chosen = combo.currentData() or current
            combo.blockSignals(True)  # refilling must not trigger a check per item
            combo.clear()
            combo.addItem(blank, "")
            for e in self.entries:
                if e.available:
                    combo.addItem(entry_label(e, self.entries), str(e.path))
                    combo.setItemData(combo.count() - 1, str(e.path), Qt.ItemDataRole.ToolTipRole)
                elif e.status is EntryStatus.NOT_ASSEMBLED and e.source.demo_key:
                    # Listed too, as the library lists it (a tour found the mismatch demo missing here): chosen,
                    # the report offers to build it from its installed packages, then checks the pair.
                    combo.addItem(f"{entry_label(e, self.entries)} — not built yet", str(e.path))
                    combo.setItemData(combo.count() - 1, "Not built yet: choose it, then Build it now",
                                      Qt.ItemDataRole.ToolTipRole)  # fmt: skip
            index = combo.findData(chosen) if chosen else 0
            combo.setCurrentIndex(max(index, 0))
            combo.blockSignals(False)
        self._on_target_combo_changed()

    def select_pair(self, target: Path, draft: Path | None) -> None:
        """Pick a target and draft in the pair picker (both must be in the library)."""
        self.target_combo.setCurrentIndex(max(0, self.target_combo.findData(str(target))))
        self.draft_combo.setCurrentIndex(max(0, self.draft_combo.findData(str(draft) if draft else "")))
        self.tabs.setCurrentIndex(1)

    def _on_target_combo_changed(self, *_args: object) -> None:
        from speculens.models.compat import suggest_drafts

        target = self.target_combo.currentData()
        self._grey_target_as_draft(target)
        self.suggestions.clear()
        if not target or target in self._unbuilt:  # none, or one to build first (then this comes back)
            self._check_pair()
            return
        self.suggestions.addItem("Looking for drafts…")
        n_ctx = self.models.store.settings.n_ctx

        def done(suggestions: list[Any]) -> None:
            if self.target_combo.currentData() != target:
                return  # the user picked another target meanwhile
            self.suggestions.clear()
            by_path = {e.path: e for e in self.entries}
            for s in suggestions:
                where = "download from the hub" if s.source != "library" else (
                    "in your library, not built yet" if str(s.path) in self._unbuilt else "in your library"
                )
                # A library model as the lists name it: copies of one file told apart (a tour's five identical lines).
                entry = by_path.get(s.path) if s.source == "library" else None
                title = entry_label(entry, self.entries) if entry is not None else s.title
                item = QListWidgetItem(f"{title} ({where})")
                item.setToolTip(s.reason)
                item.setData(Qt.ItemDataRole.UserRole, s)
                self.suggestions.addItem(item)
            if not suggestions:
                self.suggestions.addItem("No compatible smaller draft found in the library or the catalog.")

        self.tasks.run(lambda: suggest_drafts(Path(target), self.library, n_ctx=n_ctx), done, self._show_error)
        self._check_pair()

    def _unbuilt_picked(self) -> bool:
        """A demo model not built yet, chosen in the target or draft list: say so where the pair's report goes,
        with a link that builds it (not the choice itself: stepping through the list with the arrow keys or the
        wheel would build each one passed), or that it is being built. ``False``: both are built."""
        for combo in (self.target_combo, self.draft_combo):
            entry = self._unbuilt.get(combo.currentData() or "")
            if entry is None:
                continue
            name = html.escape(entry.name)
            self.report_view.setHtml(
                f"<p>Building {name} from its installed packages; the pair is checked once it is built.</p>"
                if str(entry.path) in self._building
                else f"<p>{name} is not built yet: it is assembled from its installed packages "
                f"({_format_bytes(entry.size)}), once. <a href='build'>Build it now</a></p>"
            )
            return True
        return False

    def _on_report_link_clicked(self, _url: object) -> None:
        for combo in (self.target_combo, self.draft_combo):
            entry = self._unbuilt.get(combo.currentData() or "")
            if entry is not None:
                self._pick_in_pair_tab(entry, combo, pick=False)
                self._check_pair()
                return

    def _grey_target_as_draft(self, target: str | None) -> None:
        """The target is no draft of itself (it would check its own drafts at twice the cost): greyed in the draft
        list, and replaced by no draft if it was the draft."""
        model = self.draft_combo.model()
        if not isinstance(model, QStandardItemModel):
            return
        for row in range(1, self.draft_combo.count()):
            item = model.item(row)
            itself = bool(target) and self.draft_combo.itemData(row) == target
            item.setEnabled(not itself)
            path = str(self.draft_combo.itemData(row))
            if path not in self._unbuilt:  # its own tip says it is not built yet
                item.setToolTip("The target itself: a draft is a smaller model" if itself else path)
        if target and self.draft_combo.currentData() == target:
            self.draft_combo.setCurrentIndex(0)

    def _on_suggestions_item_activated(self, item: QListWidgetItem) -> None:
        suggestion = item.data(Qt.ItemDataRole.UserRole)
        if suggestion is None:
            return
        if suggestion.path is not None:
            self.draft_combo.setCurrentIndex(max(0, self.draft_combo.findData(str(suggestion.path))))
        elif suggestion.repo and suggestion.filename:
            self.hub_search.setText(suggestion.repo)
            self.tabs.setCurrentIndex(HUB_TAB)
            self.search_hub()
            self._say(f"Download {suggestion.filename} from {suggestion.repo}.")

    def _on_draft_combo_changed(self, *_args: object) -> None:
        target = self.target_combo.currentData()
        if target and self.draft_combo.currentData() == target:
            self.draft_combo.setCurrentIndex(0)  # no draft of itself (this comes back here once)
            return
        self._check_pair()

    def _check_pair(self) -> None:
        from speculens.models.compat import check_pair

        target, draft = self.target_combo.currentData(), self.draft_combo.currentData()
        self.report = None
        self.use_pair_button.setEnabled(False)
        self.banner.hide()  # the last pair's verdict, until this one's arrives
        self.use_target_only_button.setEnabled(bool(target) and target not in self._unbuilt)
        if self._unbuilt_picked():
            return
        if not target or not draft:
            self.report_view.setHtml(
                "<p>Choose a target and a draft to see whether they can work together.</p>"
                if not target
                else "<p>No draft chosen: the target runs with a draft-free strategy "
                "(prompt lookup, n-gram cache or n-gram map).</p>"
            )
            return
        self.report_view.setHtml("<p>Checking the pair…</p>")
        n_ctx = self.models.store.settings.n_ctx

        def done(report: Any) -> None:
            if (self.target_combo.currentData(), self.draft_combo.currentData()) == (target, draft):
                self.show_report(report)

        self.tasks.run(lambda: check_pair(Path(target), Path(draft), n_ctx=n_ctx), done, self._show_error)

    def show_report(self, report: Any) -> None:
        """Show a compatibility report; a tokenizer mismatch gets a red banner that cannot be missed."""
        self.report = report
        speed = self._speed_shown = self._speed_here() if report.compatible else ""
        self.report_view.setHtml(report_html(report, headline=False) + speed)  # the banner above says it (once)
        self.banner.setText(("⚠ " if not report.compatible else "✓ ") + report.headline)
        self.banner.setStyleSheet(MISMATCH_STYLE if not report.compatible else OK_STYLE)
        self.banner.show()
        self.use_pair_button.setEnabled(report.compatible)
        self.use_pair_button.setToolTip(
            "" if report.compatible else "This draft cannot draft for this target: its tokenizer differs."
        )

    def _speed_here(self) -> str:
        """Whether the picked pair's draft model pays on this machine, where the loaded pair is the picked one, else
        how to find out: "✓ Compatible" alone read as a promise of speed, and the demo pair's draft model sits out on
        a 2-core CPU (a tour's)."""
        loaded = self.models.loaded
        picked = (self.target_combo.currentData(), self.draft_combo.currentData())
        info = loaded.info if loaded is not None else None
        if self.models.loading:  # the loaded pair's verdict would be of the models being replaced
            said = "Speed on this machine: measured when the load under way ends."
        elif (
            loaded is None
            or info is None
            or (loaded.settings.target_path, loaded.settings.draft_path) != picked
            or not info.draft  # loaded without it (a strategy that drafts from the prompt only): never timed
            or info.speculation_off
        ):
            if lab := self._lab_said(*picked):
                return f"<p>{html.escape(lab)}</p>"
            if (kept := saved_verdict(*picked) if all(picked) else None) is not None:
                return self._verdict_html(kept.idle, f"measured on {local_time(kept.date)[:10]}")
            said = (
                "Speed on this machine: not measured yet. Loading the pair under a strategy that uses the draft model "
                "(Automatic, the default, or Draft model) times it against the target here; the Pair lab measures it "
                "on your kind of text."
            )
        else:
            return self._verdict_html(info.draft_idle, "measured at load")
        return f"<p>{html.escape(said)}</p>"

    def _verdict_html(self, idle: str | None, when: str) -> str:
        """The verdict a load measured on the draft model (``idle``: why it cannot pay; ``None``: it can)."""
        if idle:
            fate = (
                "It stays idle; prompt lookup and the n-gram cache still draft where the text repeats itself"
                if self.models.store.settings.adaptive
                else "With Adaptive off it drafts every step all the same"
            )
            said = (
                f"⚠ Speed on this machine ({when}): {idle}. {fate}. The Pair lab compares drafts and strategies on "
                "your kind of text."
            )
            return f"<p style='color:#d29922'>{html.escape(said)}</p>"
        said = (
            f"✓ Speed on this machine ({when}): the draft model can pay here; the adaptive controller drafts with it "
            "where its drafts are likely right."
        )
        return f"<p>{html.escape(said)}</p>"

    @staticmethod
    def _lab_said(target: str | None, draft: str | None) -> str:
        """What the Pair lab measured of the draft model alone for this target on this machine, in a sentence ("" for
        nothing): a tour's picker said "not measured yet" right after the lab had measured the pair."""
        from speculens.lab import KINDS, load_saved

        saved = load_saved(Path(target)) if target and draft else None
        if saved is None or draft is None:
            return ""
        ran, idle, dates = [], [], set()
        for kind, rows in saved.rows.items():
            for key, row in rows.items():
                cand = saved.candidates.get(key)
                if cand is None or cand.strategy is not Strategy.DRAFT or cand.n_draft is not None or not row.speedup:
                    continue
                if cand.draft is None or row.noisy or not paths.same_file(cand.draft, draft):
                    continue  # another file, or a figure the lab itself calls impossible
                dates.add(row.date[:10])
                name = KINDS.get(kind, kind).lower()
                if row.acceptance is None:  # plain decoding, whatever its figure read (a tour's ×1.12 "gain")
                    idle.append(name)
                else:
                    ran.append(f"×{row.speedup:.2f} of plain decoding on {name} (acceptance {row.acceptance:.0%})")
        if not dates:
            return ""
        when = min(dates) if len(dates) == 1 else f"{min(dates)} to {max(dates)}"
        parts = [f"ran {', '.join(ran)}"] if ran else []
        if idle:
            parts.append(
                f"drafted nothing on {' or '.join(idle)}: the adaptive controller found it too dear here, so those "
                "runs decoded plainly"
            )
        return (
            f"Speed on this machine (the Pair lab, {when}): the Draft model strategy {'; it '.join(parts)}. The Pair "
            "lab's results compare it with the draft-free strategies."
        )

    def _on_use_pair_clicked(self) -> None:
        draft = self.draft_combo.currentData() or ""
        store = self.models.store
        note = ""
        if draft and store.settings.strategy not in DRAFT_STRATEGIES:
            # A pair is chosen for its draft: under a draft-free strategy it would be loaded without it, unused
            # (a tour chose a pair with prompt lookup set and got the target alone, with no word why).
            store.update(strategy=Strategy.AUTO.value)
            note = "The strategy is now Automatic, which drafts with the draft model when that pays."
        self._choose(self.target_combo.currentData() or "", draft, note)

    def _on_use_target_only_clicked(self) -> None:
        # The picker shows what is chosen (a tour's kept showing the draft just dropped).
        self.draft_combo.setCurrentIndex(0)
        self._choose(self.target_combo.currentData() or "", "")

    def _choose(self, target: str, draft: str, note: str = "") -> None:
        """Choose and load a pair, and close: a tour's manager, left open over the main window, hid the load and
        kept saying "loading it in the main window" long after it had loaded. The main window's status bar says
        the load (with ``note``)."""
        self._say("")
        self.models.set_pair(target, draft or None, note=note)
        self.pair_chosen.emit(target, draft)
        self.close()

    def _on_models_changed(self) -> None:
        # Only where the line would change: the signal comes with every step of a load's progress.
        if self.report is not None and self.report.compatible and self._speed_here() != self._speed_shown:
            self.show_report(self.report)

    def _on_store_changed(self, _settings: object) -> None:
        self._mark_pair_rows()
        if self.isVisible():
            self._check_pair()  # the context size may have changed: the report depends on it

    # ---- hub ----------------------------------------------------------------------------------------

    def _build_hub(self) -> QWidget:
        page = QWidget(self)
        self.hub_search = QLineEdit(page)
        self.hub_search.setPlaceholderText("Search GGUF repositories, e.g. Qwen2.5 Coder")
        self.hub_search.setAccessibleName("Hub search")
        self.hub_search.returnPressed.connect(self.search_hub)
        search_button = QPushButton("Search", page)
        search_button.clicked.connect(self.search_hub)
        # For gated and private repositories; kept for this session only (HF_TOKEN, or a saved `hf auth login`,
        # is used when it is empty). A tour found the gated error naming a --token flag the window does not have.
        self.hub_token = QLineEdit(page)
        self.hub_token.setEchoMode(QLineEdit.EchoMode.Password)
        self.hub_token.setPlaceholderText("Access token (gated only)")
        self.hub_token.setMinimumWidth(190)
        self.hub_token.setAccessibleName("Access token")
        self.hub_token.setToolTip(
            "A Hugging Face access token (hf_…) of an account granted access to a gated or private repository. "
            "Kept until Speculens quits; empty: HF_TOKEN or a saved 'hf auth login' is used."
        )
        self.hub_token.textChanged.connect(lambda text: setattr(self.hub, "token", text.strip() or None))
        # Enter (or leaving the field) lists the chosen repository's files again, with the token.
        self.hub_token.editingFinished.connect(self._relist_files)
        row = QHBoxLayout()
        row.addWidget(self.hub_search, 1)
        row.addWidget(search_button)
        row.addWidget(self.hub_token)
        self.repo_list = QListWidget(page)
        self.repo_list.setAccessibleName("Repositories")
        self.repo_list.setWordWrap(True)  # a failed search's explanation is a paragraph
        self.repo_list.currentItemChanged.connect(self._on_repo_list_current_changed)
        self.file_table = QTableWidget(0, 3, page)
        self.file_table.setHorizontalHeaderLabels(["File", "Size", "Quantization"])
        self.file_table.setAccessibleName("Repository files")
        self.file_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.file_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.file_table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.file_table.verticalHeader().hide()
        self.file_table.doubleClicked.connect(self._on_download_clicked)
        self.file_table.setTabKeyNavigation(False)  # Tab goes on to Download, not from cell to cell
        for key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):  # Enter on a file downloads it, in this list only
            enter = QShortcut(QKeySequence(key), self.file_table, self._on_download_clicked)
            enter.setContext(Qt.ShortcutContext.WidgetShortcut)  # (as a keyword, PySide6 dropped it)
        download = QPushButton("Download", page)
        download.setAccessibleName("Download the selected file")
        download.clicked.connect(self._on_download_clicked)
        # Enabled once a file is selected: clicked with none, it used to replace the hub's last error with
        # "Select a file to download." (a tour lost the reason a search had failed that way).
        download.setEnabled(False)
        self.file_table.itemSelectionChanged.connect(
            lambda: download.setEnabled(bool(self.file_table.selectedIndexes()))
        )
        self.download_button = download
        right = QWidget(page)
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.file_table)
        right_layout.addWidget(download, alignment=Qt.AlignmentFlag.AlignRight)
        splitter = QSplitter(page)
        splitter.addWidget(self.repo_list)
        splitter.addWidget(right)
        splitter.setSizes([350, 600])
        layout = QVBoxLayout(page)
        layout.addLayout(row)
        layout.addWidget(splitter, 1)
        return page

    def search_hub(self) -> None:
        """Search the hub for the text in the search box."""
        text = self.hub_search.text().strip()
        if not text:
            return
        self.repo_list.clear()
        self.repo_list.addItem("Searching…")

        def done(repos: list[Any]) -> None:
            self.repo_list.clear()
            for repo in repos:
                gated = " (gated: needs an access token)" if repo.gated else ""  # a tour saw 🔒 as a box
                # How much it is used, liked and kept up, to choose between look-alike repositories (a tour's).
                facts = [f"{repo.downloads or 0:,} downloads"]
                if repo.likes:
                    facts.append(f"{repo.likes:,} like{'s' if repo.likes != 1 else ''}")
                if repo.last_modified:
                    facts.append(f"updated {repo.last_modified[:10]}")
                item = QListWidgetItem(f"{repo.repo_id}{gated}\n{' · '.join(facts)}")
                item.setData(Qt.ItemDataRole.UserRole, repo.repo_id)
                self.repo_list.addItem(item)
            if not repos:  # what is searched, and what to try (a tour's "No GGUF repository found." said neither)
                self.repo_list.addItem(
                    f"No GGUF repository found for {text!r}.\n\nOnly repositories with GGUF files are searched: try "
                    "a shorter name (\"qwen2.5 coder\"), or a model family with \"gguf\" (\"llama gguf\")."
                )
            some = "1 GGUF repository" if len(repos) == 1 else f"{len(repos)} GGUF repositories"
            self._say(f"{some} found for {text!r}." if repos else "")

        def failed(message: str) -> None:
            # Said where the results would have been, not only in the line at the window's foot (a tour
            # searching offline saw the list empty and missed the small red line below).
            self.repo_list.clear()
            item = QListWidgetItem(f"The search failed. {message}\n\nPress Enter in the search box to try again.")
            item.setFlags(Qt.ItemFlag.ItemIsEnabled)
            self.repo_list.addItem(item)
            if self.tabs.currentIndex() == HUB_TAB:  # else said in the list alone, not under another tab
                self._show_error(message, HUB_TAB)

        self.tasks.run(lambda: self.hub.search(text), done, failed)

    def _on_repo_list_current_changed(self, item: QListWidgetItem | None, _previous: object) -> None:
        repo_id = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        self.file_table.setRowCount(0)
        if not repo_id:
            return

        def done(files: list[Any]) -> None:
            if self.repo_list.currentItem() is not item:
                return
            some = "1 GGUF file" if len(files) == 1 else f"{len(files)} GGUF files"
            self._say(f"{repo_id}: {some}." + (" Select one, then Download (or Enter)." if files else ""))
            self._hub_files = files
            self.file_table.setRowCount(len(files))
            # Files this repository gave the library already are marked (a tour downloaded one a second time).
            have = {e.source.filename for e in self.entries if e.source.repo == repo_id and e.source.filename}
            for row, f in enumerate(files):
                parts = f" ({len(f.parts)} parts)" if len(f.parts) > 1 else ""
                mine = " — in your library" if f.filename in have else ""
                for col, text in enumerate((f.filename + parts + mine, _format_bytes(f.size), f.quant or "–")):
                    self.file_table.setItem(row, col, QTableWidgetItem(text))

        self._say(f"Listing the files of {repo_id}…")  # not the last repository's count (a tour waited 3 s on it)
        self.tasks.run(lambda: self.hub.list_files(repo_id), done, self._show_error)

    def _relist_files(self) -> None:
        self._on_repo_list_current_changed(self.repo_list.currentItem(), None)

    def _on_download_clicked(self, *_args: object) -> None:
        rows = {i.row() for i in self.file_table.selectedIndexes()}
        if not rows:
            self._say("Select a file to download.")
            return
        f = self._hub_files[min(rows)]
        self.start_download(f.repo_id, f.filename)

    # ---- downloads ----------------------------------------------------------------------------------

    def _build_downloads(self) -> QWidget:
        page = QWidget(self)
        self.download_table = QTableWidget(0, 6, page)
        self.download_table.setHorizontalHeaderLabels(["File", "Progress", "Speed", "ETA", "State", ""])
        self.download_table.setAccessibleName("Downloads")
        self.download_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.download_table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.download_table.verticalHeader().hide()
        self.download_table.setColumnWidth(1, 300)  # "109 MB of 491 MB (22%)" on one line
        # Rows follow their two lines of text as the table's width changes (sized once, before the window was laid
        # out, a tour's first row stood three times too tall).
        self.download_table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        note = QLabel(
            "Downloads are verified against the hub's SHA-256 before they enter the library. A cancelled or "
            "interrupted download resumes where it stopped.",
            page,
        )
        note.setWordWrap(True)
        note.setEnabled(False)
        layout = QVBoxLayout(page)
        layout.addWidget(self.download_table, 1)
        layout.addWidget(note)
        return page

    def start_download(self, repo_id: str, filename: str) -> Download:
        """Start (or resume) a download on its own thread and show it in the Downloads tab: in the row of the same
        file's unfinished download if there is one (a tour's table grew a row, and an orphan, at each Resume)."""
        from speculens.models.hub import DownloadCancelled, interrupted_downloads

        row = None
        for existing in self.downloads:
            if (existing.repo, existing.filename) != (repo_id, filename):
                continue
            if existing.state in RUNNING:
                self.tabs.setCurrentIndex(3)
                return existing
            if existing.state != "done":
                row = existing.row
                self.downloads.remove(existing)
                break
        # What is on disk, shown until the resumed transfer reports: a retry that failed before its first report
        # showed an empty bar (a tour's), and none is kept after a checksum failure, which deletes the file.
        kept = next((p for r, p in interrupted_downloads() if (r, p.filename) == (repo_id, filename)), None)
        download = Download(repo_id, filename, progress=kept)
        self.downloads.append(download)
        self._add_download_row(download, row)
        self._update_download_row(download)

        def body() -> Any:
            download.state = "downloading"

            def progress(p: Any) -> None:
                download.progress = p  # one reference swap; the GUI timer reads it
                download.state = p.phase if p.phase != "done" else download.state

            try:
                return self.hub.download(repo_id, filename, progress=progress, cancel=download.cancel)
            except DownloadCancelled:
                download.state = "cancelled"
                raise

        def done(result: Any) -> None:
            download.state = "done"
            download.message = str(result.path)
            self._update_download_row(download)
            # Not "added" for a file the library had (a tour's count stayed the same under that word).
            known = any(e.path == Path(result.path).resolve() for e in self.entries)
            news = f"{filename} " + (
                "was downloaded already: checked, and in the library." if known
                else "downloaded, checked and added to the library."
            )
            self.refresh_library(news)
            self.download_ended.emit(news)

        def failed(message: str) -> None:
            # Said on the message line too: a tour saw only "Failed" under a full bar, and an older error there.
            if download.state != "cancelled" and not download.cancel.is_set():
                download.state = "failed"
                self._show_error(message)  # "Downloading F from R: why, and what to do"
                self.download_ended.emit(message)
            else:
                self._say(f"The download of {filename} was cancelled: Resume continues where it stopped.")
            download.message = message
            self._update_download_row(download)

        self.tasks.run(body, done, failed)
        self._download_timer.start()
        self.tabs.setCurrentIndex(3)
        self._say(f"Downloading {filename} from {repo_id}…")  # not the last cancel's "Resume continues…" (a tour's)
        return download

    def _list_interrupted_downloads(self) -> None:
        """Rows for the downloads an earlier session left unfinished, each with its Resume."""
        from speculens.models.hub import interrupted_downloads

        for repo, progress in interrupted_downloads():
            download = Download(repo, progress.filename, progress=progress, state="interrupted",
                                message="Stopped before it finished: Resume continues where it stopped.")  # fmt: skip
            self.downloads.append(download)
            self._add_download_row(download)
            self._update_download_row(download)

    def active_downloads(self) -> list[Download]:
        """The downloads still running (queued, downloading or verifying)."""
        return [d for d in self.downloads if d.state in RUNNING]

    def _add_download_row(self, download: Download, row: int | None = None) -> None:
        table = self.download_table
        if row is None:
            row = table.rowCount()
            table.insertRow(row)
        download.row = row
        table.setItem(download.row, 0, QTableWidgetItem(f"{download.filename}\n{download.repo}"))
        bar = QProgressBar(table)
        bar.setRange(0, 1000)
        bar.setAccessibleName(f"Progress of {download.filename}")
        table.setCellWidget(download.row, 1, bar)
        for col in (2, 3, 4):
            table.setItem(download.row, col, QTableWidgetItem("–"))
        button = QPushButton("Cancel", table)
        button.setAccessibleName(f"Cancel, resume or show {download.filename}")
        button.clicked.connect(lambda: self._on_download_button_clicked(download))
        table.setCellWidget(download.row, 5, button)

    def _on_download_button_clicked(self, download: Download) -> None:
        if download.state == "done":
            self.show_in_library(Path(download.message))
        elif download.state in RUNNING:
            download.cancel.set()
        else:
            # Resume (or Retry): a fresh request, in the same row, continues from the .part file the hub client kept
            # (none after a damaged download, which it deleted: that starts again).
            self.start_download(download.repo, download.filename)

    def _update_download_row(self, download: Download) -> None:
        table = self.download_table
        p = download.progress
        bar = table.cellWidget(download.row, 1)
        state = download.state
        running = state in RUNNING
        if p is not None and isinstance(bar, QProgressBar):
            bar.setValue(int(1000 * p.fraction))
            done = f"{_format_bytes(p.downloaded)} of {_format_bytes(p.total)}"
            bar.setFormat(f"{done} (%p%)" if state != "failed" else f"failed at {done}")
            # Speed and time left only while it runs (a cancelled row kept its last "14.9 MB/s, 0:25").
            _cell(table, download.row, 2).setText(f"{_format_bytes(p.speed)}/s" if p.speed and running else "–")
            _cell(table, download.row, 3).setText(_format_eta(p.eta) if running else "–")
        if state == "done" and isinstance(bar, QProgressBar):
            bar.setValue(1000)
        sheet = "QProgressBar::chunk { background: #d73a49; }" if state == "failed" else ""
        if isinstance(bar, QProgressBar) and bar.styleSheet() != sheet:  # not a full, blue success (a tour's)
            bar.setStyleSheet(sheet)  # on a change only: this runs at every progress tick, and a sheet re-polishes
        _cell(table, download.row, 4).setText(state.capitalize())  # as the library's statuses are written
        _cell(table, download.row, 4).setToolTip(download.message)
        button = table.cellWidget(download.row, 5)
        if isinstance(button, QPushButton):
            # Done: where to use it (an empty cell left the user to find the new file among the library's rows).
            words = {"done": "Show in library", "failed": "Retry"}
            button.setText("Cancel" if running else words.get(state, "Resume"))

    def _on_download_timer_timeout(self) -> None:
        for download in self.downloads:
            self._update_download_row(download)
        active = self.active_downloads()
        if not active:
            self._download_timer.stop()
        progress = [d.progress for d in active if d.progress is not None]
        if len(active) == 1:
            share = f": {progress[0].fraction:.0%}" if progress else ""
            self.downloads_changed.emit(f"Downloading {active[0].filename}{share}")
        elif active:
            total = sum(p.total for p in progress)
            share = f": {sum(p.downloaded for p in progress) / total:.0%}" if total else ""
            self.downloads_changed.emit(f"Downloading {len(active)} files{share}")
        else:
            self.downloads_changed.emit("")

    # ---- misc ---------------------------------------------------------------------------------------

    def _say(self, message: str) -> None:
        self.message.setStyleSheet("")
        self.message.setText(message)
        self._said_of_tab = None

    def _show_error(self, message: str, tab: int | None = None) -> None:
        """Say what failed in red; ``tab``: the tab it is about, whose leaving clears it."""
        self.message.setStyleSheet("QLabel { color: #d73a49 }")
        self.message.setText(message)
        self._said_of_tab = tab

    def _on_tabs_current_changed(self, index: int) -> None:
        if index == HUB_TAB:
            self.hub_search.setFocus()
        if self._said_of_tab is not None and index != self._said_of_tab:
            # A hub search's failure is the hub's: a tour read "cannot reach huggingface.co" under the library too.
            self._say("")

    def closeEvent(self, event: QCloseEvent) -> None:
        """Hide (the main window keeps the manager); downloads continue in the background."""
        event.accept()

    def shutdown(self) -> None:
        """Cancel downloads and join the background threads (the application is quitting)."""
        for download in self.downloads:
            download.cancel.set()
        self.tasks.wait()

