"""The Pair lab window: from "I have this target" to the fastest draft and settings for the user's text.

A Qt face on :mod:`speculens.lab`. The user picks a target; the candidates appear (plain decoding, the draft-free
strategies, every draft in the library — those that cannot draft for the target greyed with the reason — and the
catalog's suggested drafts with a Download button). *Estimate* measures a short cost profile on the engine worker
and shows what each candidate could reach (hopeless ones are unticked); *Run* measures the ticked candidates on
the chosen kinds of text within a time budget, with a progress bar, an ETA and Cancel (what was measured is
kept). The results — a ranked table per kind, a chart of speedup per kind, a chart of measured against
theoretical speedup over the draft length, and a recommendation in words — are saved per machine and target and
shown again next time; *Apply* puts the recommended strategy and draft in the settings; File exports JSON, CSV
and PNG.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QCloseEvent, QKeySequence, QResizeEvent, QShortcut
from PySide6.QtWidgets import (
    QBoxLayout,
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMainWindow,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from speculens.atomic import write_bytes_atomic, write_json_atomic
from speculens.engine.config import Strategy
from speculens.errors import SpeculensError
from speculens.lab import (
    KINDS,
    PLAIN,
    Candidate,
    LabProgress,
    LabResult,
    LabSettings,
    PairLab,
    Row,
    lab_prompts,
    list_candidates,
    load_saved,
    save,
    settings_to_apply,
    theoretical_speedup,
)
from speculens.paths import resolved
from speculens.ui import file_dialogs
from speculens.ui.charts import captioned, solid_grid, solid_grid_axes
from speculens.ui.file_dialogs import Kind
from speculens.ui.model_controller import ModelController
from speculens.ui.screen import resize_within_screen, scrolled
from speculens.ui.settings_store import SettingsStore
from speculens.ui.tasks import TaskRunner
from speculens.ui.worker import EngineWorker, LabRequest, gui_threads
from speculens.words import duration, local_time, percent, upper_first

SUITE_KINDS = [k for k in KINDS if k != "custom"]
DEFAULT_KINDS = ("chat", "code-generation", "code-rewrite")
NOISY_STYLE = "QLabel { background: #fff3cd; color: #664d03; padding: 8px; border-radius: 4px }"
SWEEP = (1, 2, 4, 8)
LEGEND_CHARS = 24  # the longest candidate label in the speedup chart's legend
FEW_DRAFTED = 100  # below this many draft tokens, the acceptance cell says how many it is of
PALETTE = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2")
_COLUMNS = ("Candidate", "tok/s", "Speedup", "Acceptance", "Tokens/pass", "Draft length", "Same output", "Measured")


def _sentence(text: str) -> str:
    """A note as a sentence of its own (the lab's notes are clauses, also printed by the CLI)."""
    text = upper_first(text)
    return text if text.endswith(".") else text + "."


def _speedup_cell(r: Row) -> tuple[str, str, bool]:
    """The speedup column: a candidate that drafted nothing decoded plainly, and says so."""
    if r.speedup is None:
        return "–", "plain decoding was not measured on these prompts (the run was stopped first)", True
    if r.noisy is not None:
        return f"×{r.speedup:.2f} ⚠", f"Left out of the recommendation: it read {r.noisy}.", True
    if r.key != PLAIN.key and r.acceptance is None:  # said in the acceptance column (_acceptance_cell)
        return f"×{r.speedup:.2f}", _NEVER_DRAFTED, True
    return f"×{r.speedup:.2f}", "over plain decoding in the same run", True


_NEVER_DRAFTED = "It never drafted, so it decoded plainly: its difference from ×1.00 is the machine's noise."


def _same_cell(r: Row) -> tuple[str, str, bool]:
    """The same-output column, with why an answer can differ."""
    if r.key == PLAIN.key:  # a tour read "yes" here: plain decoding compared with itself
        return "–", "plain decoding is the reference the others' answers are compared with", False
    if r.identical is None:
        return "–", "plain decoding was not measured on these prompts", False
    if r.identical:
        return "yes", "every greedy answer equals plain decoding's, token for token", False
    return "no", _DIFFERS, False


# Why a greedy answer can differ from plain decoding's: in the "no" cell's tooltip, and under the recommendation.
_DIFFERS = (
    "Verifying a batch rounds differently from decoding one token at a time, which can tip a near-tie: both "
    "answers are the target's. Bit-exact verification (Settings) makes them identical, at its cost."
)


def _item(text: str, tip: str = "", align_right: bool = False) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
    if tip:
        item.setToolTip(tip)
    if align_right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


class _ChartRow(QWidget):
    """The lab's charts side by side where the room holds them whole, else one above the other: a plot narrower
    than its title and axes cuts them off (a 1024×768 screen showed "Speedup over plain, by" and half of the
    other chart), and a row that may not shrink below both charts would push the window past a small screen."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self._layout = QBoxLayout(QBoxLayout.Direction.LeftToRight, self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(6)  # one spacing both ways (a style may leave it to the widgets: -1)
        self._plots: list[pg.PlotWidget] = []

    def add(self, plot: pg.PlotWidget) -> None:
        plot.setMinimumHeight(240)
        self._plots.append(plot)
        self._layout.addWidget(plot)
        self.refit()

    def refit(self) -> None:
        """Make each plot as wide as its title and axes need (call after they change)."""
        for plot in self._plots:
            least = plot.plotItem.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
            plot.setMinimumWidth(math.ceil(least) + 2 * plot.frameWidth())
        self._arrange(self.width())
        self.updateGeometry()

    def side_by_side(self) -> bool:
        return self._layout.direction() is QBoxLayout.Direction.LeftToRight

    def minimumSizeHint(self) -> QSize:
        """As narrow as the widest chart: narrower than both, they stack."""
        hint = super().minimumSizeHint()
        return QSize(max((p.minimumWidth() for p in self._plots), default=0), hint.height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._arrange(event.size().width())

    def _arrange(self, width: int) -> None:
        both = sum(p.minimumWidth() for p in self._plots) + self._layout.spacing() * (len(self._plots) - 1)
        direction = QBoxLayout.Direction.LeftToRight if width >= both else QBoxLayout.Direction.TopToBottom
        if direction is not self._layout.direction():
            self._layout.setDirection(direction)
            self.updateGeometry()


class PairLabWindow(QMainWindow):
    """The pair lab.

    Args:
        worker: the engine worker (the lab runs there, serialised with the chat).
        store: the settings store (context, threads, GPU layers; Apply writes to it).
        models: the model controller (library, GPU backend).
        download: starts a hub download in the model manager (repo, file).
        parent: the Qt parent.
    """

    def __init__(
        self,
        worker: EngineWorker,
        store: SettingsStore,
        models: ModelController,
        download: Callable[[str, str], None] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Pair lab")
        self.worker = worker
        self.store = store
        self.models = models
        self.download = download
        self.tasks = TaskRunner(self)
        self.candidates: list[Candidate] = []
        self.result: LabResult | None = None
        self._request: int | None = None
        self._estimating = False
        self._settings_target = ""  # the main window's target when the list was last filled (see refresh_targets)
        self._row_keys: list[str] = []  # the candidate in each row of the table, as last filled
        # Candidates of this target unticked once as hopeless: not again, so a tick given since stays (a tour's
        # tick was undone when the lab was opened again).
        self._unticked_hopeless: set[str] = set()
        self._listed_target: Path | None = None
        self._build()
        worker.lab_progressed.connect(self._on_worker_lab_progressed)
        worker.lab_finished.connect(self._on_worker_lab_finished)
        worker.lab_failed.connect(self._on_worker_lab_failed)
        worker.models_unloaded.connect(self._on_worker_models_unloaded)
        self.refresh_targets()
        resize_within_screen(self, 1400, 900)

    # ---- layout -------------------------------------------------------------------------------------------

    def _build(self) -> None:
        splitter = QSplitter(self)
        setup = QWidget(splitter)
        left = QVBoxLayout(setup)
        form = QFormLayout()
        self.target_box = QComboBox(setup)
        self.target_box.currentIndexChanged.connect(self._on_target_box_current_index_changed)
        form.addRow("Target", self.target_box)
        left.addLayout(form)

        self.candidate_table = QTableWidget(0, 3, setup)
        self.candidate_table.setHorizontalHeaderLabels(["Candidate", "Estimate", "Status"])
        header = self.candidate_table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        self.candidate_table.setColumnWidth(0, 250)
        self.candidate_table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.candidate_table.verticalHeader().setVisible(False)
        self.candidate_table.setWordWrap(True)
        # Rows are as tall as their wrapped text at the columns' widths of the moment: the estimate column
        # stretches with the window, so the heights follow it (they were cut off mid-sentence after a resize).
        header.sectionResized.connect(lambda *_: self.candidate_table.resizeRowsToContents())
        left.addWidget(QLabel("<b>Candidates</b> (tick what to measure; plain decoding always runs)", setup))
        left.addWidget(self.candidate_table, 3)

        kinds = self.kinds_group = QGroupBox("Kinds of text", setup)
        # Two columns, so the candidates' table keeps the height: a tour at 1366×768 saw four of seven candidates
        # once the estimates wrapped their rows.
        kinds_layout = QGridLayout(kinds)
        self.kind_boxes: dict[str, QCheckBox] = {}
        for i, kind in enumerate(SUITE_KINDS):
            box = QCheckBox(KINDS[kind], kinds)
            box.setChecked(kind in DEFAULT_KINDS)
            kinds_layout.addWidget(box, i // 2, i % 2)
            self.kind_boxes[kind] = box
        self.own_text = QPlainTextEdit(kinds)
        self.own_text.setPlaceholderText("…or paste a request like the ones you make (it becomes one more prompt)")
        self.own_text.setMaximumHeight(64)
        kinds_layout.addWidget(self.own_text, (len(SUITE_KINDS) + 1) // 2, 0, 1, 2)
        left.addWidget(kinds)

        options = QFormLayout()
        self.budget = QSpinBox(setup)
        self.budget.setRange(1, 120)
        self.budget.setValue(5)
        self.budget.setSuffix(" min")
        self.budget.setToolTip("Rounds repeat until the budget is spent (at least one round runs)")
        options.addRow("Time budget", self.budget)
        self.sweep_box = QCheckBox("Also measure draft models at fixed lengths 1, 2, 4, 8", setup)
        self.sweep_box.setToolTip("For the chart of measured against theoretical speedup (takes longer)")
        options.addRow(self.sweep_box)
        # What one round costs, before Run: a tour set the budget to 1 min and learnt only 50 s into the run that
        # one round (36 runs, always run in full) would take about 12.
        # Prompts per kind of text, read once: the note is redrawn at every change of a candidate's tick.
        self._prompts_per_kind = Counter(p.category for p in lab_prompts(list(self.kind_boxes)))
        self.round_note = QLabel(setup)
        self.round_note.setWordWrap(True)
        self.round_note.setAccessibleName("What one round takes")
        self.round_note.setStyleSheet("QLabel { color: palette(placeholder-text) }")
        options.addRow(self.round_note)
        self.candidate_table.itemChanged.connect(self._update_round_note)
        for box in (*self.kind_boxes.values(), self.sweep_box):
            box.toggled.connect(self._update_round_note)
        self.own_text.textChanged.connect(self._update_round_note)
        self.budget.valueChanged.connect(self._update_round_note)
        left.addLayout(options)

        buttons = QHBoxLayout()
        self.estimate_button = QPushButton("Estimate", setup)
        self.estimate_button.setToolTip("Measure a short cost profile and estimate each candidate (seconds)")
        self.estimate_button.clicked.connect(self.estimate)
        self.run_button = QPushButton("Run (Ctrl+Return)", setup)
        self.run_button.clicked.connect(self.run)
        self.cancel_button = QPushButton("Cancel (Esc)", setup)
        self.cancel_button.clicked.connect(self.cancel)
        self.cancel_button.setEnabled(False)
        for b in (self.estimate_button, self.run_button, self.cancel_button):
            buttons.addWidget(b)
        left.addLayout(buttons)
        self.progress = QProgressBar(setup)
        self.progress.setFormat("%v of %m runs")
        # The bar and three lines of status keep their room while empty: a tour saw the form above jump at each
        # change of status, the candidate table giving up and taking back the rows the text took.
        policy = self.progress.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        self.progress.setSizePolicy(policy)
        self.progress.hide()
        left.addWidget(self.progress)
        self.status = QLabel("", setup)
        self.status.setWordWrap(True)
        self.status.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.status.setMinimumHeight(3 * self.status.fontMetrics().lineSpacing())
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        left.addWidget(self.status)
        # Why the chat's models are gone, where the lab unloaded them for room (see EngineWorker._lab).
        self.memory_note = QLabel("", setup)
        self.memory_note.setWordWrap(True)
        self.memory_note.setAccessibleName("Memory note")
        self.memory_note.hide()
        left.addWidget(self.memory_note)

        results = QWidget()
        right = QVBoxLayout(results)
        self.header = QLabel("No results for this target on this machine yet.", results)
        self.header.setWordWrap(True)
        right.addWidget(self.header)
        self.noisy = QLabel("", results)
        self.noisy.setStyleSheet(NOISY_STYLE)
        self.noisy.setWordWrap(True)
        self.noisy.hide()
        right.addWidget(self.noisy)
        self.recommendation = QLabel("", results)
        self.recommendation.setWordWrap(True)
        self.recommendation.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        right.addWidget(self.recommendation)
        apply_row = QHBoxLayout()
        self.apply_button = QPushButton("Apply the recommendation", results)
        self.apply_button.setEnabled(False)
        self.apply_button.clicked.connect(self.apply)
        apply_row.addWidget(self.apply_button)
        apply_row.addStretch(1)
        right.addLayout(apply_row)
        self.tabs = QTabWidget(results)
        right.addWidget(self.tabs, 3)
        charts = self.charts = _ChartRow(results)
        # Short enough for half the results pane at 1280 pixels (a walk saw "per kind of text" cut off there).
        title = "Speedup over plain, by kind of text"
        self.speedup_plot = pg.PlotWidget(charts, title=title, axisItems=solid_grid_axes())
        self.speedup_plot.setBackground("w")
        solid_grid(self.speedup_plot.getPlotItem(), x=False, alpha=0.3)
        self.speedup_plot.setLabel("left", "speedup ×")
        # Two columns of short labels in a small font: a tour saw 30-character labels run past the plot's edge.
        self.speedup_plot.addLegend(offset=(10, 5), colCount=2, labelTextSize="8pt")
        self._legend_names: list[str] = []
        # Labels are shortened to the plot's width, whatever the fonts: CI's fonts ran 7 px past it at 24 characters.
        self.speedup_plot.plotItem.getViewBox().sigResized.connect(self._fit_legend)
        self.sweep_plot = pg.PlotWidget(charts, title="Draft length: theory vs measured", axisItems=solid_grid_axes())
        self.sweep_plot.setBackground("w")
        solid_grid(self.sweep_plot.getPlotItem(), alpha=0.3)
        self.sweep_plot.setLabel("bottom", "draft length (n_draft)")
        self.sweep_plot.setLabel("left", "speedup ×")
        self.sweep_plot.addLegend(offset=(-10, 10))
        for plot in (self.speedup_plot, self.sweep_plot):
            plot.setFocusPolicy(Qt.FocusPolicy.ClickFocus)  # Tab passes them by, as the main window's charts
            plot.setAccessibleName(plot.getPlotItem().titleLabel.text)
            charts.add(plot)
        right.addWidget(charts, 2)
        splitter.addWidget(setup)
        # The results scroll up and down where the window is too short for them and the charts stacked (a
        # 1024×768 screen); they never scroll sideways: the charts stack instead.
        splitter.addWidget(scrolled(results))
        splitter.setStretchFactor(1, 2)
        splitter.setSizes([520, 880])
        self.setCentralWidget(splitter)

        file_menu = self.menuBar().addMenu("&File")
        save = QKeySequence.StandardKey.Save
        self.export_json_action = file_menu.addAction("Export results as &JSON…", save, self.export_json)
        self.export_csv_action = file_menu.addAction("Export results as &CSV…", self.export_csv)
        self.export_png_action = file_menu.addAction("Export charts as &PNG…", self.export_png)
        for action in (self.export_json_action, self.export_csv_action, self.export_png_action):
            action.setEnabled(False)
        file_menu.addSeparator()
        file_menu.addAction("&Close", QKeySequence.StandardKey.Close, self.close)
        QShortcut(QKeySequence("Ctrl+Return"), self, self.run)
        QShortcut(QKeySequence("Esc"), self, self._on_escape)

    # ---- target and candidates ----------------------------------------------------------------------------

    def refresh_targets(self) -> None:
        """List the library's models as targets: the one chosen here before, unless the main window's target has
        changed since (a tour opened the lab before choosing the demo pair, and it kept offering the first model)."""
        chosen = self.store.settings.target_path
        current = self.target_path if chosen == self._settings_target else None
        current = current or (Path(chosen) if chosen else None)
        self._settings_target = chosen
        entries = [e for e in self.models.library.entries() if e.available]
        self.target_box.blockSignals(True)
        self.target_box.clear()
        for entry in entries:
            self.target_box.addItem(f"{entry.path.name} — {entry.name}", str(entry.path))
        # The library keeps resolved paths (Library.add): the settings' path may reach the file through a link.
        known = {current, resolved(current) if current is not None else None} - {None}
        index = next((i for i, e in enumerate(entries) if e.path in known), 0)
        self.target_box.setCurrentIndex(index)
        self.target_box.blockSignals(False)
        if entries:
            self._on_target_box_current_index_changed(index)
        else:
            self.status.setText("The library is empty: add or download a model in the model manager first.")

    def choose_target(self, path: str) -> None:
        """Make ``path`` (a library model's) the target, unless a measurement runs or it is not in the list."""
        index = self.target_box.findData(path)
        if index < 0:
            index = self.target_box.findData(str(resolved(path)))
        if self._request is not None:
            self.status.setText("A measurement is running: the target stays as it is until it ends.")
        elif index < 0:
            self.status.setText(f"{Path(path).name} is not in the library as a model on disk (build or add it first).")
        else:
            self.target_box.setCurrentIndex(index)

    @property
    def target_path(self) -> Path | None:
        """The chosen target."""
        data = self.target_box.currentData() if hasattr(self, "target_box") else None
        return Path(data) if data else None

    def _on_target_box_current_index_changed(self, _index: int) -> None:
        target = self.target_path
        if target is None:
            return
        s = self.store.settings
        gpu = bool(self.models.gpu_backend)
        self.status.setText("Checking which drafts can draft for this target…")
        self.tasks.run(
            lambda: (target, list_candidates(target, self.models.library, s.n_ctx, gpu), load_saved(target)),
            self._on_candidates_listed,
            self._show_error,
        )

    def _on_candidates_listed(self, found: tuple[Path, list[Candidate], LabResult | None]) -> None:
        target, candidates, saved = found
        if target != self.target_path:
            # Listed for a target chosen before the current one, and done after it: the picker's Pair lab… opened
            # a new lab on the main window's target, then on its own, and the first one's results won (seen under
            # Xvfb: the 0.5B chosen, the 1.5B's figures shown).
            return
        self.candidates = candidates
        if self.target_path != self._listed_target:
            # Another target's ticks are not this one's (a draft smaller than one target is larger than another).
            self._listed_target, self._unticked_hopeless, self._row_keys = self.target_path, set(), []
        self.status.setText("")
        self.show_result(saved)
        self._fill_candidates()  # with the saved estimates, if any

    def _fill_candidates(self) -> list[str]:
        """Fill the candidates' table; the labels of those it unticked as hopeless."""
        table = self.candidate_table
        # The user's ticks stay as they were (a tour unticked all but two, and Estimate ticked them all again);
        # a candidate the estimate finds hopeless is unticked, once, and one not shown before is ticked.
        before = {
            key: item.checkState()
            for row, key in enumerate(self._row_keys)
            if (item := table.item(row, 0)) is not None and item.flags() & Qt.ItemFlag.ItemIsUserCheckable
        }
        table.setRowCount(len(self.candidates))
        self._row_keys = [cand.key for cand in self.candidates]
        estimates = self.result.estimates if self.result is not None else {}
        unticked: list[str] = []
        for row, cand in enumerate(self.candidates):
            item = _item(cand.label, cand.problem or "")
            if cand.runnable:
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                est = estimates.get(cand.key)
                untick = est is not None and est.hopeless and cand.key not in self._unticked_hopeless
                if untick:
                    self._unticked_hopeless.add(cand.key)
                # A draft as large as the target can only lose: listed, for teaching, but not measured unasked (a
                # tour's lab would have loaded the 1.5B as a draft for the 0.5B, twice).
                first = Qt.CheckState.Unchecked if cand.larger else Qt.CheckState.Checked
                item.setCheckState(Qt.CheckState.Unchecked if untick else before.get(cand.key, first))
                if cand.is_plain:
                    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsUserCheckable)
                if untick:
                    unticked.append(cand.label)
            else:
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEnabled)
            table.setItem(row, 0, item)
            est = estimates.get(cand.key)
            # A candidate that cannot run says why where its estimate would be (a tour saw only "cannot draft").
            why = cand.problem.split(": ", 1)[0] if cand.problem and not cand.runnable else ""
            text, tip = (est.short or est.text, est.text) if est is not None else (why, cand.problem or "")
            table.setItem(row, 1, _item(text, tip))
            table.removeCellWidget(row, 2)
            if cand.download is not None:
                button = QPushButton("Download", table)
                repo, file = cand.download
                button.setToolTip(f"Download {file} from {repo} in the model manager")
                button.clicked.connect(lambda _=False, r=repo, f=file: self._download(r, f))
                table.setCellWidget(row, 2, button)
            elif cand.problem:
                status = _item("cannot draft", cand.problem)
                status.setFlags(status.flags() & ~Qt.ItemFlag.ItemIsEnabled)
                table.setItem(row, 2, status)
            else:
                table.setItem(row, 2, _item("ready"))
        table.resizeRowsToContents()
        self._update_round_note()
        return unticked

    def _update_round_note(self, *_args: object) -> None:
        """Say how many runs one round is (it always runs in full), and how long on this machine once its speed is
        known (an estimate's or a saved result's cost profile)."""
        n_prompts = sum(self._prompts_per_kind[k] for k, box in self.kind_boxes.items() if box.isChecked())
        n_prompts += bool(self.own_text.toPlainText().strip())  # your own text is one more prompt
        if not n_prompts:
            self.round_note.setText("")
            return
        n = n_prompts * (1 + sum(1 for c in self.checked() if not c.is_plain))
        tokens = LabSettings().max_tokens
        text = f"One round, which always runs in full whatever the budget: {n} runs of up to {tokens} tokens"
        if self.sweep_box.isChecked():
            text += ", and more at fixed draft lengths"
        result = self.result
        profile = result.profile if result is not None else None
        seconds: float | None = None
        if result is not None and result.run_s is not None:  # the last run's own pace, loading included
            seconds = (result.setup_s or 0.0) + n * result.run_s
            text += (
                f": about {duration(seconds)} here at the last run's pace ({result.run_s:.1f} s a run, plus "
                f"{duration(result.setup_s or 0.0)} loading)"
            )
        elif profile is not None and profile.target_step_s > 0:  # before any run: the cost profile's speed
            seconds = n * tokens * profile.target_step_s
            speed = 1 / profile.target_step_s
            # The profile's step is the fastest one-token call the load timed: a tour read "31 tokens/s" here and 26.9
            # in the table, whose runs pay for their context and the loop too.
            text += (
                f": about {duration(seconds)} here at plain decoding's fastest step ({speed:.0f} tokens/s; a whole "
                "answer runs a little slower), plus loading"
            )
        else:
            text += " (Estimate says how long that takes here)"
        budget = self.budget.value()
        if seconds is not None and seconds > 60 * budget:  # a tour set 1 min and waited 3.5 with no word before
            text += f", more than the {budget} min budget: the budget adds rounds, it never cuts one short"
        self.round_note.setText(text + ".")

    def checked(self) -> list[Candidate]:
        """The ticked candidates."""
        out = []
        for row, cand in enumerate(self.candidates):
            item = self.candidate_table.item(row, 0)
            if cand.runnable and item is not None and item.checkState() == Qt.CheckState.Checked:
                out.append(cand)
        return out

    def _download(self, repo: str, file: str) -> None:
        if self.download is not None:
            self.download(repo, file)
            self.status.setText(f"Downloading {file} in the model manager; it appears here once it is in the library.")

    # ---- running ------------------------------------------------------------------------------------------

    def _lab(self) -> PairLab | None:
        target = self.target_path
        if target is None:
            self.status.setText("Choose a target first.")
            return None
        kinds = [k for k, box in self.kind_boxes.items() if box.isChecked()]
        try:
            prompts = lab_prompts(kinds, self.own_text.toPlainText())
        except SpeculensError as exc:
            self._show_error(exc.message)
            return None
        s = self.store.settings
        settings = LabSettings(
            n_ctx=s.n_ctx,
            n_threads=s.threads or gui_threads(),
            n_gpu_layers=s.n_gpu_layers,
            budget_s=60.0 * self.budget.value(),
            exact=s.exact,
            sweep=SWEEP if self.sweep_box.isChecked() else (),
        )
        return PairLab(target, self.checked(), prompts, settings)

    def estimate(self) -> None:
        """Measure the cost profile and estimate every runnable candidate."""
        lab = self._lab()
        if lab is None or self._request is not None:
            return
        lab.candidates = [PLAIN, *(c for c in self.candidates if c.runnable and not c.is_plain)]
        self._estimating = True
        self._start(lab, estimate_only=True)
        self.progress.setRange(0, 0)  # busy: a tour's estimate took 45 s with a line of text alone
        self.progress.show()
        self.status.setText("Measuring the cost profile (the target and each draft, a few decode calls)…")

    def run(self) -> None:
        """Measure the ticked candidates on the chosen kinds of text."""
        lab = self._lab()
        if lab is None or self._request is not None:
            return
        for key, why in lab.skipped.items():
            self.status.setText(f"Skipping {key}: {why}")
        self._estimating = False
        self._start(lab, estimate_only=False)
        self.progress.setRange(0, 0)  # busy until the first run reports
        self.progress.show()
        drafts = any(c.draft is not None for c in lab.candidates)
        self.status.setText("Loading the target and the drafts…" if drafts else "Loading the target…")

    def _start(self, lab: PairLab, estimate_only: bool) -> None:
        self._request = self.worker.submit(LabRequest(lab, estimate_only))
        self.memory_note.hide()
        self._set_running(True)

    def _on_worker_models_unloaded(self, why: str) -> None:
        if why and self._request is not None:  # this lab's doing: said here too, where the user is looking
            self.memory_note.setText(f"⚠ {why}")
            self.memory_note.show()

    def cancel(self) -> None:
        """Stop the run (a load within a decode call, a run after its current answer); what it measured is kept."""
        if self._request is not None:
            self.worker.cancel(self._request)
            self.status.setText("Stopping after the current answer…")

    def _on_escape(self) -> None:
        """Esc stops a run or an estimate; with nothing running it closes the window, as in the model manager."""
        if self._request is not None:
            self.cancel()
        else:
            self.close()

    def _set_running(self, running: bool) -> None:
        for w in (
            self.estimate_button,
            self.run_button,
            self.target_box,
            self.candidate_table,
            self.kinds_group,
            self.budget,
            self.sweep_box,
        ):
            w.setEnabled(not running)
        self.cancel_button.setEnabled(running)

    def _on_worker_lab_progressed(self, p: LabProgress) -> None:
        if self._request is None:
            return
        self.progress.setRange(0, max(p.total, 1))
        self.progress.setValue(p.done)
        eta = f" — {p.eta_words}" if p.eta_words else ""
        if p.eta_s and p.elapsed_s + p.eta_s > 1.1 * 60.0 * self.budget.value():
            # At least one round runs (a median needs every candidate on every prompt): say why it overruns.
            eta += (
                f", past the {self.budget.value()} min budget: one round of every ticked candidate on every kind "
                "of text always runs (tick fewer to shorten it; Esc keeps what was measured)"
            )
        self.status.setText(f"{p.what}{eta}")
        if p.partial is not None and p.partial.rows:
            # The runs done so far, as they come; the recommendation waits for the end.
            self._show_tables(p.partial)
            self.header.setText(
                f"<b>{html.escape(p.partial.target)}</b> — measuring: the runs done so far "
                f"({p.done} of {p.total}); the recommendation comes at the end"
            )

    def _on_worker_lab_finished(self, result: LabResult) -> None:
        if self._request is None:
            return
        self._request = None
        self._set_running(False)
        self.progress.hide()
        target = self.target_path
        if result.cancelled and result.profile is None:  # stopped while it loaded: what was shown stays
            self.status.setText("Stopped while loading the models: nothing was measured.")
            return
        if result.cancelled and not result.rows and not self._estimating:  # nothing new: what was shown stays
            self.status.setText("Stopped before a run ended: nothing was measured.")
            return
        if self._estimating:
            saved = load_saved(target) if target is not None else None
            merged = replace(saved, estimates=result.estimates, profile=result.profile) if saved else result
            self.show_result(merged)
            hopeless = self._fill_candidates()  # not those the user ticked again after an earlier estimate
            self.status.setText(
                "Estimated." + (f" Unticked, since they cannot win here: {', '.join(hopeless)}." if hopeless else "")
            )
            if result.noisy:
                self.status.setText(
                    f"{self.status.text()} ⚠ {_sentence(result.noisy)} Estimate again when the machine is quiet."
                )
            return
        if target is not None and result.rows:
            try:
                save(result, target)
            except OSError as exc:
                self.status.setText(f"The results could not be saved: {exc}")
        self.show_result((load_saved(target) if target is not None else None) or result, latest=result)
        self.status.setText("Stopped: these are the runs measured before the stop." if result.cancelled else "Done.")

    def _on_worker_lab_failed(self, message: str) -> None:
        if self._request is None:
            return
        self._request = None
        self._set_running(False)
        self.progress.hide()
        self._show_error(message)

    def _show_error(self, message: str) -> None:
        self.status.setText(f"<b>The pair lab could not go on.</b> {html.escape(message)}")

    # ---- results ------------------------------------------------------------------------------------------

    def show_result(self, result: LabResult | None, latest: LabResult | None = None) -> None:
        """Show saved (or just measured) results: tables, charts, recommendation."""
        self.result = result
        self._update_round_note()  # its cost profile tells how long a round takes here
        self.tabs.clear()
        self.speedup_plot.clear()
        self.sweep_plot.clear()
        for action in (self.export_json_action, self.export_csv_action, self.export_png_action):
            action.setEnabled(bool(result and result.rows))
        if result is None or not result.rows:
            self.header.setText("No results for this target on this machine yet: choose kinds of text and Run.")
            self.recommendation.setText("")
            self.noisy.hide()
            self.apply_button.setEnabled(False)
            return
        self.header.setText(f"<b>{html.escape(result.target)}</b> — {html.escape(_measured(result))}")
        self.header.setToolTip(result.llama_build)
        shown = latest or result
        notes: list[str | None] = [shown.noisy, "cancelled before the end" if shown.cancelled else None]
        if any(r.noisy for rows in result.rows.values() for r in rows.values()):
            notes.append(
                "speedups marked ⚠ cannot be true (more than their tokens per pass can give): they were measured "
                "beside plain runs that something else slowed, and are left out of the recommendation"
            )
        sentences = [_sentence(n) for n in notes if n]
        self.noisy.setText("⚠ " + " ".join(sentences) if sentences else "")
        self.noisy.setVisible(bool(sentences))
        best = result.overall_best()
        lines = [html.escape(s) for s in result.recommendation()]
        if best is not None:
            kinds = [k for k in result.rows if result.rows[k]]
            if len(kinds) == 1:
                head = f"Recommended: {html.escape(best.label)}"
            else:  # one setting for all of them may differ from each kind's own best, listed below
                head = f"One setting for all these kinds of text together: {html.escape(best.label)}"
                if best.key != PLAIN.key and (score := result.overall_speedup(best.key)) is not None:
                    head += f": ×{score:.2f} over them all, the geometric mean of the kinds'"
                if any((b := result.best(k)) is not None and b.key != best.key for k in kinds):
                    head += " (each kind's own best is below)" if shown.cancelled else (
                        " (Apply sets it; each kind's own best is below)")  # fmt: skip
            lines.insert(0, f"<b>{head}</b>")
            if ties := result.overall_ties():
                level = ", ".join(f"{r.label} (×{score:.2f})" for r, score in ties)
                over = "" if len(kinds) == 1 else ", over them all"
                lines.insert(
                    1,
                    f"As fast within this machine's noise{over}: {html.escape(level)}. The simplest to run is "
                    "recommended.",
                )
        if caution := result.plain_caution():  # after the verdict it qualifies
            lines.append(html.escape(caution))
        differ = sorted({r.label for rows in result.rows.values() for r in rows.values() if r.identical is False})
        if differ:  # said where it is read, not only in the cells' tooltips
            lines.append(
                f"<span style='color:gray'>Same output “no” for {html.escape(', '.join(differ))}: "
                f"{html.escape(_DIFFERS)}</span>"
            )
        # A stopped run measured some kinds of text and candidates, not the others: a tour's, stopped after 3 of 36
        # runs (all on chat), recommended plain decoding, and Apply would have turned off prompt lookup, ×1.66 on
        # the rename it had not reached.
        stopped = shown.cancelled
        if best is not None and stopped:
            lines.append(
                "Apply is off after a stopped run: the runs it did not reach could change the verdict. Run the lab "
                "to the end to apply one."
            )
        self.recommendation.setText("<br>".join(lines))
        self.apply_button.setEnabled(best is not None and not stopped)
        self.apply_button.setToolTip("Stopped before the end: run the lab to the end to apply its recommendation"
                                     if best is not None and stopped else "")  # fmt: skip
        self._show_tables(result)
        self._plot_speedups(result)
        self._plot_sweep(result)
        self.charts.refit()  # the titles changed

    def _show_tables(self, result: LabResult) -> None:
        """A table per kind of text (the tab shown stays shown)."""
        shown = self.tabs.currentIndex()
        self.tabs.clear()
        for kind in result.rows:
            self.tabs.addTab(self._table(result, kind), KINDS.get(kind, kind))
        self.tabs.setCurrentIndex(max(0, min(shown, self.tabs.count() - 1)))

    def _table(self, result: LabResult, kind: str) -> QTableWidget:
        ranked = result.ranking(kind)
        table = QTableWidget(len(ranked), len(_COLUMNS), self.tabs)
        table.setHorizontalHeaderLabels(list(_COLUMNS))
        table.verticalHeader().setVisible(False)
        table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for i, r in enumerate(ranked):
            est = result.estimates.get(r.key)
            values = [
                (r.label, est.text if est is not None else "", False),
                (f"{r.tokens_per_second:.1f}", "", True),
                _speedup_cell(r),
                _acceptance_cell(r),
                (f"{r.mean_accepted_length:.2f}", "tokens per target pass", True),
                (f"{r.settled_n_draft:g}", "the draft length the adaptive controller settled on when it drafted", True),
                _same_cell(r),
                (local_time(r.date), _MEASURED_TIP.format(runs=r.runs), False),
            ]
            for column, (text, tip, right) in enumerate(values):
                table.setItem(i, column, _item(text, tip, right))
        table.resizeColumnsToContents()
        table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        return table

    def _plot_speedups(self, result: LabResult) -> None:
        kinds = list(result.rows)
        keys: list[str] = []
        # The best few of each kind; left out: plain decoding (the 1.0 line), impossible figures, and a candidate that
        # never drafted, which decoded plainly (a tour read its ×0.92 bar as a slowdown: it was the machine's noise).
        for kind in kinds:
            ranked = result.ranking(kind)
            keys += [r.key for r in ranked if r.key != PLAIN.key and r.noisy is None and r.acceptance is not None][:3]
        keys = list(dict.fromkeys(keys))[:6]
        width = 0.8 / max(len(keys), 1)
        top = 1.0
        self._legend_names = []
        for i, key in enumerate(keys):
            xs = [k + (i - (len(keys) - 1) / 2) * width for k in range(len(kinds))]
            ys = [
                (row.speedup or 0.0) if (row := result.rows[kind].get(key)) is not None and row.acceptance is not None
                else 0.0
                for kind in kinds
            ]
            top = max(top, *ys)
            label = result.candidates[key].label if key in result.candidates else key
            self._legend_names.append(label)
            color = PALETTE[i % len(PALETTE)]
            self.speedup_plot.addItem(pg.BarGraphItem(x=xs, height=ys, width=width * 0.9, brush=color, name=label))
        self._fit_legend()
        self.speedup_plot.addLine(y=1.0, pen=pg.mkPen("#444", style=Qt.PenStyle.DashLine))
        rows = (len(keys) + 1) // 2  # the legend's rows, above the bars
        self.speedup_plot.setYRange(0, top * (1.2 + 0.15 * rows), padding=0)
        self.speedup_plot.setXRange(-0.5, len(kinds) - 0.5, padding=0)
        axis = self.speedup_plot.getAxis("bottom")
        axis.setTicks([[(i, KINDS.get(k, k)) for i, k in enumerate(kinds)]])

    def _fit_legend(self) -> None:
        """Shorten the speedup legend's labels (to LEGEND_CHARS at most) until it fits inside the plot."""
        legend = self.speedup_plot.plotItem.legend
        if legend is None or len(legend.items) != len(self._legend_names):
            return
        room = self.speedup_plot.plotItem.getViewBox().boundingRect().width() - 20  # the legend's offset, twice
        for chars in range(LEGEND_CHARS, 5, -1):
            for (_, label), name in zip(legend.items, self._legend_names, strict=True):
                label.setText(name if len(name) <= chars else name[: chars - 1] + "…")
            legend.setGeometry(0, 0, 0, 0)  # else the layout stretches the labels to the legend's old width
            legend.layout.activate()
            legend.updateSize()
            if legend.boundingRect().width() <= room:
                return

    def _plot_sweep(self, result: LabResult) -> None:
        """The best draft model's theoretical speedup (its measured acceptance and costs, Leviathan's formula)
        against what was measured: fixed draft lengths when swept, and the adaptive controller's point."""
        if result.profile is None:
            return
        kinds = list(result.rows)
        drafts = [k for k, c in result.candidates.items() if c.strategy is Strategy.DRAFT and c.n_draft is None]
        rows = [(kind, result.rows[kind][k]) for kind in kinds for k in drafts if k in result.rows[kind]]
        if not rows:
            # A short title: the whole sentence widened the chart past the window's edge (a tour's screenshot).
            self.sweep_plot.setTitle("Draft length: no draft model measured")
            self.sweep_plot.setToolTip(
                "Tick a draft model on its own (a “Draft …” row) and Run: this chart compares the speedup theory "
                "predicts for each draft length with the one measured."
            )
            return
        # The fastest draft model that drafted: one the adaptive controller left idle has no acceptance to draw a
        # curve from (its "theory: α 0%" said nothing while another draft model had drafted; seen in CI).
        kind, row = max(rows, key=lambda kr: (kr[1].acceptance is not None, kr[1].speedup or 0.0))
        est = result.estimates.get(row.key)
        swept_rows = [
            result.rows[kind][k]
            for k, c in result.candidates.items()
            if c.n_draft is not None and k.startswith(row.key + "/") and k in result.rows[kind]
        ]
        # The acceptance the curve is drawn for: measured where the draft model drafted most (the adaptive
        # controller may have declined to draft at all on this machine).
        measured = [r for r in [row, *swept_rows] if r.acceptance is not None]
        if not measured:
            # No acceptance to draw theory from, and the adaptive point is plain decoding's, plotted at length 0
            # above the ×1 line it could not beat (a tour's chart beside "cannot win here").
            self.sweep_plot.setTitle("Draft length: the draft model drafted nothing")
            self.sweep_plot.setToolTip(
                f"{row.label} drafted nothing: the adaptive controller found its drafts too dear to pay on this "
                "machine, so there is no acceptance to draw the theory from. Tick “Also measure draft models at "
                "fixed lengths” and Run again to see what drafting would have given."
            )
            return
        drafted_most = max(measured, key=lambda r: r.runs * r.settled_n_draft)
        alpha = drafted_most.acceptance or 0.0
        ratio = est.cost_ratio if est is not None and est.cost_ratio is not None else 0.0
        ks = np.arange(1, 17)
        theory = [theoretical_speedup(alpha, int(k), ratio, result.profile) for k in ks]
        # Short enough for the chart's default width (a tour read "Draft length: theory vs measured (code" and
        # "theory: acceptance 100%, draft co…"); the tooltip says it whole.
        self.sweep_plot.setTitle(f"Theory vs measured ({KINDS.get(kind, kind).lower()})")
        self.sweep_plot.setToolTip(
            f"{row.label}: acceptance {alpha:.0%}, a draft token costs {ratio:.2f} of a target step; the curve is "
            "Leviathan et al.'s expected speedup with the measured verification costs"
        )
        of = _of_few(drafted_most.drafted)
        name = f"theory: α {alpha:.0%}{of}, draft token {ratio:.2f} step"
        self.sweep_plot.plot(ks, theory, pen=pg.mkPen("#4C78A8", width=2), name=name)
        swept = [
            (c.n_draft, result.rows[kind][k].speedup)
            for k, c in result.candidates.items()
            if c.n_draft is not None and k.startswith(row.key + "/") and k in result.rows[kind]
        ]
        if swept:
            xs, ys = zip(*sorted((k, s or 0.0) for k, s in swept), strict=True)
            self.sweep_plot.plot(xs, ys, pen=None, symbol="o", symbolBrush="#E45756", name="measured, fixed length")
        self.sweep_plot.plot(
            [max(row.settled_n_draft, 0.0)],
            [row.speedup or 0.0],
            pen=None,
            symbol="star",
            symbolSize=14,
            symbolBrush="#54A24B",
            name="measured, adaptive",
        )
        self.sweep_plot.addLine(y=1.0, pen=pg.mkPen("#444", style=Qt.PenStyle.DashLine))

    def apply(self) -> None:
        """Put the recommended strategy and draft into the settings (a reload applies a new draft)."""
        if self.result is None:
            return
        best = self.result.overall_best()
        if best is None:
            return
        changes = settings_to_apply(best, self.result)
        target = self.target_path
        if target is not None:
            changes["target_path"] = str(target)
        dropped = self.store.settings.draft_path if changes.get("draft_path") == "" else ""
        self.store.update(**changes)
        reload = ""
        if dropped:
            # Said, not done silently: a tour had measured no draft model, applied a draft-free winner, and found
            # its pair's draft gone.
            measured = any(c.draft is not None for c in self.result.candidates.values())
            why = "it did not win here" if measured else "this run did not measure it: tick it and Run to weigh it"
            reload = f" The draft model {Path(dropped).stem} is no longer used ({why})."
        if self.store.reload_needed() and not self.store.reload_frees_draft_only():
            reload += " Load the models again (Ctrl+L) to use the new draft."
        elif self.store.reload_needed():
            which = "It" if dropped else "The draft model"
            reload += f" {which} stays loaded but idle: Reload (Ctrl+L) frees its memory."
        self.status.setText(f"Applied: {best.label}.{reload}")

    # ---- exports ------------------------------------------------------------------------------------------

    def _ask(self, title: str, suffix: str, kind: str) -> Path | None:
        name = f"pair-lab-{Path(self.result.target).stem if self.result else 'results'}{suffix}"
        return file_dialogs.save_file(self, Kind.EXPORTS, title, name, kind)

    def export_json(self) -> None:
        """Save the results as JSON."""
        if self.result is not None and (path := self._ask("Export results as JSON", ".json", "JSON (*.json)")):
            write_json_atomic(path, self.result.to_document())

    def export_csv(self) -> None:
        """Save the results as CSV."""
        if self.result is not None and (path := self._ask("Export results as CSV", ".csv", "CSV (*.csv)")):
            write_bytes_atomic(path, self.result.to_csv().encode("utf-8"))

    def export_png(self) -> None:
        """Save both charts as one PNG."""
        if self.result is not None and (path := self._ask("Export charts as PNG", ".png", "PNG images (*.png)")):
            self.save_png(path)

    def save_png(self, path: Path) -> bool:
        """Render the charts into a PNG file, under what they measured (target, machine, build, date)."""
        caption = "" if self.result is None else f"Speculens pair lab: {self.result.target}, {_measured(self.result)}."
        return bool(captioned(self.charts.grab(), caption).save(str(path), "PNG"))

    def closeEvent(self, event: QCloseEvent) -> None:
        """Closing the window stops a run (its partial results are saved when they arrive)."""
        self.cancel()
        self.tasks.wait(5.0)
        super().closeEvent(event)


def _acceptance_cell(row: Row) -> tuple[str, str, bool]:
    """The acceptance, with how many draft tokens it is of where they are few (a tour read 100% beside 1.00 tokens
    per pass: a draft model's few probe tokens, all accepted, in steps that otherwise decoded plainly)."""
    if row.acceptance is None:  # there, not beside the speedup: that made the column wide, and cut the names
        if row.key == PLAIN.key:
            return "–", "plain decoding drafts nothing", True
        return "drafted nothing", _NEVER_DRAFTED, True
    if row.drafted is None:  # saved before the count was
        return f"{row.acceptance:.0%}", "", True
    accepted = round(row.acceptance * row.drafted)
    tip = f"{accepted} of {row.drafted} draft tokens accepted, over {row.runs} timed runs"
    text = percent(accepted, row.drafted) + _of_few(row.drafted)
    return text, tip, True


# The "Measured" column's tooltip: a row kept from an earlier run (a run of fewer candidates keeps the others') shows
# that run's time, so the column reads alike on every row only until then (a tour asked why).
_MEASURED_TIP = (
    "when the Pair lab run that measured this row began, in {runs} timed runs; a row kept from an earlier run shows "
    "that run's"
)


def _measured(result: LabResult) -> str:
    """When, where and with which llama.cpp build the results were measured."""
    return f"measured {local_time(result.date)} on {result.machine} with {result.llama_build.split(';')[0]}"



def _of_few(drafted: int | None) -> str:
    """" of N" after an acceptance measured over few draft tokens (see FEW_DRAFTED), else nothing."""
    return f" of {drafted}" if drafted is not None and drafted < FEW_DRAFTED else ""

