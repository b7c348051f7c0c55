"""Building an n-gram map from the user's own files, in the app (what ``speculens-cli ngram build`` does).

The corpus is tokenized with the chosen target's tokenizer (loaded alone, without weights, on the build's thread:
the window never loads llama.cpp itself) and counted on a background thread
(:class:`~speculens.ui.tasks.TaskRunner`); a timer shows its progress, Cancel stops it between two files or
chunks of tokens, and nothing is written unless the whole map is (see
:func:`~speculens.engine.drafters.ngram_map.build_map`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from PySide6.QtCore import QCoreApplication, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from speculens import paths
from speculens.engine.drafters.ngram_map import (
    MIN_COUNT_RANGE,
    NGRAM_MAX_RANGE,
    BuildCancelled,
    MapBuilt,
    build_map,
    corpus_files,
    text_kinds,
)
from speculens.ui import file_dialogs
from speculens.ui.file_dialogs import Kind
from speculens.ui.screen import resize_within_screen
from speculens.ui.tasks import TaskRunner

CLOSE_PAUSE_MS = 800  # how long Close ignores clicks after a build ends (see NgramMapDialog._finish)


def _build(
    items: list[Path], model: Path, output: Path, ngram_max: int, min_count: int, state: _Progress
) -> MapBuilt:
    """The background half: find the files, then count them (see :func:`build_map`)."""
    files = corpus_files(items)
    state.files = len(files)
    return build_map(
        files, model, output, ngram_max=ngram_max, min_count=min_count, progress=state.update, cancel=state.cancel
    )


class _Progress:
    """What the build thread has done, read by the dialog's timer (each field one reference swap)."""

    def __init__(self) -> None:
        self.cancel = threading.Event()
        self.files = 0
        self.done = 0
        self.total = 0
        self.tokens = 0

    def update(self, done: int, total: int, tokens: int) -> None:
        self.done, self.total, self.tokens = done, total, tokens


class NgramMapDialog(QDialog):
    """Picks a corpus and builds a map for the target's tokenizer.

    Args:
        model: the target model file, whose tokenizer the map is for.
        parent: the Qt parent.
        corpus: files and folders to start with (the last build's).

    Signals:
        built(str, bool): the map written, and whether the user asked to draft from it now.
    """

    built = Signal(str, bool)

    def __init__(self, model: Path, parent: QWidget | None = None, corpus: list[Path] | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Build an n-gram map")
        self.model = model
        self.tasks = TaskRunner(self)
        self._state: _Progress | None = None
        self._output_chosen = False  # the user chose the file: no longer named after the corpus
        self._confirmed: Path | None = None  # a file the save dialog already asked to replace

        intro = QLabel(
            "An n-gram map drafts what usually follows in a body of text you give it: a code base, documentation, "
            f"reports in your style. It is built for the tokenizer of {model.name} and works with every model "
            "that shares it."
        )
        intro.setWordWrap(True)
        self.corpus = QListWidget()
        self.corpus.setAccessibleName("Corpus files and folders")
        self.corpus.setToolTip(
            f"Folders are searched for text files ({text_kinds()}), leaving out hidden folders, dependencies "
            "(node_modules, virtual environments, build output) and files holding binary data; a file added by "
            "name is read whatever its suffix"
        )
        self.add_folder = add_folder = QPushButton("Add &folder…")
        add_folder.clicked.connect(self._on_add_folder_clicked)
        self.add_files = add_files = QPushButton("Add f&iles…")
        add_files.clicked.connect(self._on_add_files_clicked)
        self.remove = QPushButton("&Remove")
        self.remove.clicked.connect(self._on_remove_clicked)
        self.corpus.itemSelectionChanged.connect(self._update_buttons)
        self.corpus.model().rowsInserted.connect(self._on_corpus_changed)
        self.corpus.model().rowsRemoved.connect(self._on_corpus_changed)
        corpus_buttons = QVBoxLayout()
        for button in (add_folder, add_files, self.remove):
            corpus_buttons.addWidget(button)
        corpus_buttons.addStretch(1)
        corpus_row = QHBoxLayout()
        corpus_row.addWidget(self.corpus, 1)
        corpus_row.addLayout(corpus_buttons)

        self.ngram_max = QSpinBox()
        self.ngram_max.setRange(*NGRAM_MAX_RANGE)
        self.ngram_max.setValue(4)
        self.ngram_max.setAccessibleName("Longest n-gram")
        self.ngram_max.setToolTip("The longest run of tokens a draft continues from (1 to 8; longer: a bigger map)")
        self.min_count = QSpinBox()
        self.min_count.setRange(*MIN_COUNT_RANGE)
        self.min_count.setValue(2)
        self.min_count.setAccessibleName("Least count")
        self.min_count.setToolTip("N-grams seen fewer times in the corpus are left out (1 to 100; more: a smaller map)")
        self.output = QLineEdit(str(paths.data_dir() / "ngram-maps" / "map.npz"))
        self.output.setAccessibleName("Map file")
        self.output.textEdited.connect(self._on_output_edited)
        self.choose = choose = QPushButton("Choose…")
        choose.setAccessibleName("Choose where to save the map")
        choose.clicked.connect(self._on_choose_output_clicked)
        output_row = QHBoxLayout()
        output_row.addWidget(self.output, 1)
        output_row.addWidget(choose)
        self.use_now = QCheckBox("Draft from it now")
        self.use_now.setToolTip(
            "Make it the map in use: the automatic strategy then drafts from it beside prompt lookup and the n-gram "
            "cache, where it is right often enough to pay (another strategy, other than the n-gram map alone, is set "
            "to automatic)"
        )
        self.use_now.setChecked(True)
        form = QFormLayout()
        for text, field in (("Longest n-gram", self.ngram_max), ("Least count", self.min_count)):
            label = QLabel(text)
            label.setToolTip(field.toolTip())  # hovering the name says it too
            form.addRow(label, field)
        form.addRow("Save as", output_row)
        form.addRow(self.use_now)

        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setAccessibleName("Build progress")
        # The bar and the status keep their room while empty: the corpus list above them jumped when a build's
        # progress appeared (a tour's), and again when its summary wrapped to more lines.
        policy = self.bar.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        self.bar.setSizePolicy(policy)
        self.bar.hide()
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.status.setMinimumHeight(3 * self.status.fontMetrics().lineSpacing())
        self.status.setAccessibleName("Build status")
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.buttons = QDialogButtonBox()
        self.build_button = self.buttons.addButton("&Build", QDialogButtonBox.ButtonRole.AcceptRole)
        self.build_button.setDefault(True)
        self.close_button = self.buttons.addButton(QDialogButtonBox.StandardButton.Close)
        self._close_pause = QTimer(self)  # see _finish
        self._close_pause.setSingleShot(True)
        self._close_pause.setInterval(CLOSE_PAUSE_MS)
        self._close_pause.timeout.connect(lambda: self.close_button.setEnabled(True))
        self.buttons.accepted.connect(self._on_build_clicked)
        self.buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(QLabel("Corpus:"))
        layout.addLayout(corpus_row, 1)
        layout.addLayout(form)
        layout.addWidget(self.bar)
        layout.addWidget(self.status)
        layout.addWidget(self.buttons)

        self._timer = QTimer(self)
        self._timer.setInterval(100)
        self._timer.timeout.connect(self._show_progress)
        app = QCoreApplication.instance()
        if app is not None:  # quitting with a build running: stop it before the objects it reports to go
            app.aboutToQuit.connect(self._stop)
        self._update_buttons()
        self.add_paths(corpus or [])
        resize_within_screen(self, 620, 480)

    # ---- the corpus ---------------------------------------------------------------------------------------

    def add_paths(self, items: list[Path]) -> None:
        """Add files or folders to the corpus (each once); the map is named after it, unless chosen: one file or
        folder by its name, several by the folder they share (a tour's four engine files made "generate.npz", as if
        of one file)."""
        present = {str(p) for p in self.corpus_paths()}
        for item in items:
            if str(item) not in present:
                self.corpus.addItem(str(item))
                present.add(str(item))
        corpus = self.corpus_paths()
        if not self._output_chosen and corpus:
            one = corpus[0]
            try:
                shared = Path(os.path.commonpath(corpus)) if len(corpus) > 1 else one
            except ValueError:  # different drives (Windows)
                shared = Path("map")
            # A folder keeps its whole name ("v1.2"), a file drops its suffix; files with nothing nearer in common
            # than the home folder or the root are a "map" (not "alice.npz").
            name = shared.stem if shared == one and not one.is_dir() else shared.name
            if len(corpus) > 1 and shared in (Path.home(), Path(shared.anchor)):
                name = "map"
            self.output.setText(str(paths.data_dir() / "ngram-maps" / f"{name or 'map'}.npz"))
        self._update_buttons()

    def corpus_paths(self) -> list[Path]:
        """The files and folders in the corpus list."""
        return [Path(self.corpus.item(i).text()) for i in range(self.corpus.count())]

    def _on_add_folder_clicked(self) -> None:
        folder = file_dialogs.open_folder(self, Kind.CORPUS, "Add a folder of text files")
        if folder:
            self.add_paths([folder])

    def _on_add_files_clicked(self) -> None:
        self.add_paths(file_dialogs.open_files(self, Kind.CORPUS, "Add text files"))

    def _on_remove_clicked(self) -> None:
        for item in self.corpus.selectedItems():
            self.corpus.takeItem(self.corpus.row(item))
        self._update_buttons()

    def _on_output_edited(self, _text: str) -> None:
        self._output_chosen = True

    def _on_choose_output_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the n-gram map as", self.output.text(), "N-gram maps (*.npz)")
        if path:
            path = path if path.endswith(".npz") else path + ".npz"
            self.output.setText(path)
            self._output_chosen = True
            self._confirmed = Path(path)  # the save dialog asked whether to replace it

    def _on_corpus_changed(self) -> None:
        if self._state is None:  # the last build's result, or its error (a tour's stayed), is not this corpus's
            self.bar.hide()
            self.status.setText("")

    def _update_buttons(self) -> None:
        busy = self._state is not None
        for widget in (self.add_folder, self.add_files, self.ngram_max, self.min_count, self.output, self.choose,
                       self.use_now):  # fmt: skip
            widget.setEnabled(not busy)  # what the running build was started with
        self.build_button.setEnabled(not busy and self.corpus.count() > 0)
        self.remove.setEnabled(not busy and bool(self.corpus.selectedItems()))
        self.close_button.setText("Cancel" if busy else "Close")

    # ---- building -----------------------------------------------------------------------------------------

    def _on_build_clicked(self) -> None:
        if self._state is not None or not self.corpus.count():
            return
        output = Path(self.output.text().strip()).expanduser()
        if not output.name or output.is_dir():
            self.status.setText("Say which file to write the map to (Save as).")
            return
        if output.suffix != ".npz":
            output = output.with_name(output.name + ".npz")
        if output.exists() and output != self._confirmed:
            answer = QMessageBox.question(
                self,
                "Replace the map?",
                f"{output} already exists. Replace it with a map of this corpus?",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                QMessageBox.StandardButton.No,
            )
            if answer != QMessageBox.StandardButton.Yes:
                return
        state = self._state = _Progress()
        items = self.corpus_paths()
        ngram_max, min_count, use_now = self.ngram_max.value(), self.min_count.value(), self.use_now.isChecked()
        self.bar.setValue(0)
        self.bar.show()
        self.status.setText("Finding the files and loading the tokenizer…")

        def done(result: MapBuilt) -> None:
            self._finish()
            self.bar.setValue(1000)
            self.status.setText(
                ("It was written before it could stop. " if state.cancel.is_set() else "")
                + f"Wrote {result.path}: {result.n_ngrams:,} n-grams from {result.n_tokens:,} tokens in "
                f"{result.n_files} file{'s' if result.n_files != 1 else ''}, {result.seconds:.1f} s."
                + (f" {result.note}" if result.note else "")
                + (
                    " Speculens drafts from it now."
                    if use_now
                    else " To draft from it, choose it in Settings (N-gram map, Browse…)."
                )
            )
            self._confirmed = result.path  # building again replaces it without asking
            self.built.emit(str(result.path), use_now)

        def failed(message: str) -> None:
            cancelled = message == BuildCancelled().message
            self._finish(cancelled)
            self.bar.hide()
            self.status.setText("Cancelled: nothing was written." if cancelled else f"Could not build a map: {message}")

        self.tasks.run(lambda: _build(items, self.model, output, ngram_max, min_count, state), done, failed)
        self._timer.start()
        self._update_buttons()

    def _show_progress(self) -> None:
        state = self._state
        if state is None or state.cancel.is_set():
            return  # "Stopping…" stays
        if state.total:
            self.bar.setValue(int(1000 * state.done / state.total))
            files = f"{state.files} file{'s' if state.files != 1 else ''}"
            self.status.setText(f"Counting n-grams: {state.tokens:,} tokens of {files}…")

    def _finish(self, cancelled: bool = False) -> None:
        self._timer.stop()
        self._state = None
        self._update_buttons()
        if not cancelled:
            # Cancel turns into Close under the pointer: a click meant to cancel, landing as the build ends, closed
            # the dialog before its summary was read (a tour's). It takes clicks again after a moment.
            self.close_button.setEnabled(False)
            self._close_pause.start()

    def _stop(self) -> None:
        """Stop a running build and wait for it (the application is quitting)."""
        if self._state is not None:
            self._state.cancel.set()
            self.tasks.wait(5.0)

    def reject(self) -> None:
        """Cancel (or Esc, or the window's close button) stops a running build, and the dialog stays to say so;
        with nothing running it closes."""
        if self._state is not None:
            self._state.cancel.set()
            self.status.setText("Stopping…")
            return
        super().reject()
