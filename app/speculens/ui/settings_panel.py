"""The settings form: strategy, drafting, sampling, and the model-loading options.

Every field is built from :data:`speculens.settings.SPECS` (label, tip, range), so the form can never allow
what validation refuses. An edit goes to the settings store at once; the store tells every view, saves it,
and knows which changes need the models reloaded — the note at the bottom says which, with a button. Spin
boxes ignore the mouse wheel unless they have focus, so scrolling the panel never changes a value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, QPoint, Qt, QTimer, Signal
from PySide6.QtGui import QFocusEvent, QValidator
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from speculens import paths
from speculens.engine.config import FlashAttention, Strategy
from speculens.engine.drafters.ngram_table import NgramTable, NgramTableError
from speculens.models.gguf_info import format_bytes
from speculens.settings import FLASH_ATTN, SPECS, STRATEGIES, Settings, field_labels
from speculens.ui.ngram_map_dialog import NgramMapDialog
from speculens.ui.screen import scrolled
from speculens.ui.settings_store import SettingsStore
from speculens.words import upper_first

STRATEGY_TIPS = {
    "auto": "Each step, the adaptive controller takes a free draft from prompt lookup, the n-gram cache or your "
    "n-gram map (when one is set) when one is confident, the draft model only when it pays, and decodes plainly "
    "otherwise",
    "draft": "A smaller model with the same tokenizer proposes tokens",
    "lookup": "Copies continuations of text already in the prompt (good for editing code or quoting)",
    "ngram-cache": "Statistics of n-grams seen in this and earlier generations (no draft model needed)",
    "ngram-map": "Only the n-gram map built from your own files (the N-gram map field below: Browse… or Build…); the "
    "automatic strategy also drafts from it when one is set",
    "none": "The target alone: the baseline",
}


class _Clamping:
    """Spin boxes that take a number typed beyond their range and bring it to the nearer end when typing ends:
    Qt's own refuse the keystroke, so 9999 typed in a 1–64 field read 9, 5 in a 0–1 field was silently undone."""

    def __init__(self) -> None:
        super().__init__()
        self.setCorrectionMode(QAbstractSpinBox.CorrectionMode.CorrectToNearestValue)  # type: ignore[attr-defined]

    def _clamped(self, text: str) -> float | None:
        box: QSpinBox | QDoubleSpinBox = self  # type: ignore[assignment]
        value, ok = box.locale().toDouble(text.strip())
        return min(max(value, box.minimum()), box.maximum()) if ok else None

    def validate(self, text: str, pos: int) -> tuple[QValidator.State, str, int]:
        state, text, pos = super().validate(text, pos)  # type: ignore[misc]
        if state == QValidator.State.Invalid and self._clamped(text) is not None:
            state = QValidator.State.Intermediate  # fixup() brings it into the range
        return state, text, pos

    def fixup(self, text: str) -> str:
        value = self._clamped(text)
        if value is None:
            return text
        box: QSpinBox | QDoubleSpinBox = self  # type: ignore[assignment]
        fixed = box.textFromValue(round(value) if isinstance(box, QSpinBox) else value)  # type: ignore[arg-type]
        typed, _ok = box.locale().toDouble(text.strip())
        if box.isVisible() and not box.minimum() <= typed <= box.maximum():
            # Said where it happened (a tour's 999 became 64 without a word), in the field's own words ("random" for
            # a seed of -1); not for a value rounded to the field's decimals, which was in range.
            def shown(v: float) -> str:
                if v == box.minimum() and box.specialValueText():
                    return box.specialValueText()
                return box.textFromValue(round(v) if isinstance(box, QSpinBox) else v)  # type: ignore[arg-type]

            said = f"From {shown(box.minimum())} to {shown(box.maximum())}: {text.strip()} is set to {shown(value)}."
            QToolTip.showText(box.mapToGlobal(QPoint(0, box.height())), said, box)
            # Tab, which ends the typing, hides a tooltip as its key comes up (a tour's 100 became 64 without a word
            # it saw): the window's status bar keeps the sentence, and the tooltip is shown again once the key is up.
            window = box.parentWidget()
            while window is not None and not isinstance(window, QMainWindow):
                window = window.parentWidget()  # past a floating dock, which is a window of its own
            if window is not None:
                window.statusBar().showMessage(said, 15_000)
            QTimer.singleShot(300, box, lambda: box.isVisible() and QToolTip.showText(
                box.mapToGlobal(QPoint(0, box.height())), said, box))
        return fixed


class ClampingSpinBox(_Clamping, QSpinBox):
    """A :class:`QSpinBox` that clamps what is typed (see :class:`_Clamping`)."""


class ClampingDoubleSpinBox(_Clamping, QDoubleSpinBox):
    """A :class:`QDoubleSpinBox` that clamps what is typed (see :class:`_Clamping`)."""


class _TipOnHover(QObject):
    """Sets a widget's tooltip from ``tip()`` just before Qt shows it: what it says can change on disk meanwhile."""

    def __init__(self, tip: Callable[[], str], parent: QObject) -> None:
        super().__init__(parent)
        self._tip = tip

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(watched, QWidget):
            watched.setToolTip(self._tip())
        return False


class _WheelGuard(QObject):
    """Lets a field take the mouse wheel only once it was clicked into (a scrolled-over field keeps its value). Focus
    alone is not enough: a tour reached Max tokens with Tab, scrolled the panel with the pointer over it, and its
    512 became 506."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._clicked: QObject | None = None  # the field clicked into, while it keeps the focus

    # Focus that comes back to a field after a moment away (its own popup or menu, another window) is not the
    # keyboard taking it: a clicked combo box's list would otherwise cost it the wheel. Leaving a field changes
    # nothing: a field takes the wheel only while it has the focus.
    PASSING = (Qt.FocusReason.PopupFocusReason, Qt.FocusReason.ActiveWindowFocusReason)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind == QEvent.Type.FocusIn and isinstance(event, QFocusEvent) and event.reason() not in self.PASSING:
            self._clicked = watched if event.reason() == Qt.FocusReason.MouseFocusReason else None
        elif kind == QEvent.Type.Wheel and (watched is not self._clicked or not isinstance(watched, QWidget)
                                            or not watched.hasFocus()):  # fmt: skip
            event.ignore()  # the scroll area scrolls instead
            return True
        return False


def _tip(name: str) -> str:
    """A setting's tooltip: what it does, and its range (a number typed beyond it is clamped)."""
    spec = SPECS[name]
    if spec.low is not None and spec.high is not None:
        return f"{spec.tip} ({_number(spec.low)} to {_number(spec.high)})"
    return spec.tip


class SettingsPanel(QWidget):
    """Edits the settings in the store.

    Args:
        store: the settings store.
        parent: the Qt parent.

    Signals:
        reload_requested(): the user pressed "Reload models".
    """

    reload_requested = Signal()

    def __init__(self, store: SettingsStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self._updating = False
        self._wheel_guard = _WheelGuard(self)
        self.fields: dict[str, QWidget] = {}
        self._map_corpus: list[Path] = []  # the last map built here: the Build… dialog starts with its corpus
        self._map_options: tuple[int, int] | None = None  # and its longest n-gram and least count (a tour's reset)

        self.strategy = QComboBox()
        # The longest strategy name would set the dock's narrowest width; the closed box elides it instead.
        self.strategy.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.strategy.setMinimumContentsLength(14)
        for i, key in enumerate(STRATEGIES):
            self.strategy.addItem(Strategy(key).label, key)
            self.strategy.setItemData(i, STRATEGY_TIPS[key], Qt.ItemDataRole.ToolTipRole)
        self._add("strategy", self.strategy)
        # The closed box's tooltip explains the strategy shown, not only what a strategy is.
        self.strategy.currentIndexChanged.connect(self._explain_strategy)
        self._explain_strategy()
        self.n_draft = self._spin("n_draft")
        self.adaptive = self._check("adaptive", "Adaptive")
        self.n_draft_min = self._spin("n_draft_min")
        self.p_min = self._dspin("p_min")
        self.temperature = self._dspin("temperature")
        self.top_k = self._spin("top_k")
        self.top_p = self._dspin("top_p")
        self.min_p = self._dspin("min_p")
        self.seed = self._spin("seed")
        self.seed.setSpecialValueText("random")  # shown at the minimum, -1
        self.max_tokens = self._spin("max_tokens")
        self.n_ctx = self._spin("n_ctx")
        self.threads = self._spin("threads")
        self.threads.setSpecialValueText("automatic")
        self.n_gpu_layers = self._spin("n_gpu_layers")
        self.n_gpu_layers_draft = self._spin("n_gpu_layers_draft")
        for spin in (self.n_gpu_layers, self.n_gpu_layers_draft):
            spin.setSpecialValueText("all")  # -1, the default: every layer, as llama.cpp's own tools
        self.exact = self._check("exact", "Token for token (slower)")
        self.flash_attn = QComboBox()
        for key in FLASH_ATTN:
            self.flash_attn.addItem(FlashAttention(key).label, key)
        self._add("flash_attn", self.flash_attn)
        # What the choice does, in the panel (the tooltip says more): a user deciding sees it without hovering.
        self.flash_note = _note("About flash attention", "palette(placeholder-text)", hidden=False)
        self._flash_measured = ""
        self._loaded_vocab = ""  # the loaded target's vocabulary fingerprint (see set_loaded_vocab)
        self._map_vocab_said = False  # the map note says the map is for another tokenizer
        self._map_facts_of: tuple[object, str, str] = (None, "", "")  # (path, mtime, size), its facts, tokenizer
        self.gpu_note = QLabel("Checking the llama.cpp build for GPU offload…")
        self.gpu_note.setWordWrap(True)
        self.ngram_map = QLineEdit()
        self.ngram_map.setPlaceholderText("no map file")
        self.ngram_map.setClearButtonEnabled(True)
        self._add("ngram_map_path", self.ngram_map)
        self.ngram_map.installEventFilter(_TipOnHover(self.map_tooltip, self))
        browse = QPushButton("Browse…")
        browse.setAccessibleName("Browse for an n-gram map")
        browse.clicked.connect(self._on_browse_clicked)
        self.build_map = QPushButton("Build…")
        self.build_map.setAccessibleName("Build an n-gram map from files")
        self.build_map.clicked.connect(self._on_build_map_clicked)
        map_buttons = QHBoxLayout()  # under the field, which keeps the width to show the file's name
        map_buttons.addWidget(browse)
        map_buttons.addWidget(self.build_map)
        map_buttons.addStretch(1)
        # A file that is no n-gram map, said when chosen (not at the next answer).
        self.map_error = _note("N-gram map error", "#d73a49")
        # The n-gram map strategy with no map chosen, said by the field (a tour found it only in the toolbar).
        self.map_needed = _note("N-gram map needed", WARNING)
        self.map_needed.setText("The n-gram map strategy drafts from a map: Browse… for one, or Build… one.")
        # The draft model strategy with a draft model that cannot pay here, Adaptive ticked: it never drafts, and only
        # the toolbar said "draft idle" (a teacher's tour chose the strategy to show drafting and saw none). Said in
        # the Speculation group, under the strategy's other notes.
        self.idle_note = _note("Draft model idle", WARNING)
        self._draft_idle: str | None = None
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setPlaceholderText("optional system message for the chat")
        self.system_prompt.setMaximumHeight(60)
        # Tab moves on, as in every other field (a tour's Tab typed tabs into it, and the fields after it were out of
        # the keyboard's reach); a system prompt has no use for a tab character.
        self.system_prompt.setTabChangesFocus(True)
        self._add("system_prompt", self.system_prompt)

        self.reload_note = QLabel()
        self.reload_note.setWordWrap(True)
        self.reload_note.setAccessibleName("Reload needed")
        self.reload_note.setStyleSheet("QLabel { background: rgba(235,140,0,60); padding: 4px; border-radius: 3px }")
        self.reload_button = QPushButton("Reload models")
        self.reload_button.clicked.connect(self.reload_requested)
        self.reload_note.hide()
        self.reload_button.hide()

        speculation = QGroupBox("Speculation")
        form = QFormLayout(speculation)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        for name in ("strategy", "n_draft", "adaptive", "n_draft_min", "p_min"):
            form.addRow(SPECS[name].label, self.fields[name])
        form.addRow(SPECS["ngram_map_path"].label, self.ngram_map)
        form.addRow("", map_buttons)
        form.addRow(self.map_error)
        form.addRow(self.map_needed)
        form.addRow(self.idle_note)
        sampling = QGroupBox("Sampling")
        form = QFormLayout(sampling)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        for name in ("temperature", "top_k", "top_p", "min_p", "seed", "max_tokens", "system_prompt"):
            form.addRow(SPECS[name].label, self.fields[name])
        loading = QGroupBox("Loading (needs a reload)")
        form = QFormLayout(loading)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        for name in ("n_ctx", "threads", "n_gpu_layers", "n_gpu_layers_draft", "exact", "flash_attn"):
            form.addRow(SPECS[name].label, self.fields[name])
        form.addRow(self.flash_note)
        form.addRow(self.gpu_note)
        # Values the panel takes but that will hurt, said beside them (a tour set 99 threads on 2 cores and read a
        # third of the speed, and a context no longer than Max tokens, without a word).
        self.advice = _note("Settings advice", WARNING)
        form.addRow(self.advice)

        # Back to where a new user starts, but for the choices of files and words (a teacher's tour, having changed
        # a dozen values for a demo, found no way back but remembering each default).
        self.restore_button = QPushButton("Restore defaults")
        self.restore_button.setToolTip(
            "Set every value here back to its default; the models, the n-gram map and the system message are kept"
        )
        self.restore_button.clicked.connect(self._on_restore_clicked)
        restore_row = QHBoxLayout()
        restore_row.addStretch(1)
        restore_row.addWidget(self.restore_button)

        body = QWidget()
        column = QVBoxLayout(body)
        for box in (speculation, sampling, loading):
            column.addWidget(box)
        column.addLayout(restore_row)
        column.addStretch(1)
        scroll = scrolled(body, self)  # the panel follows the dock's width (notes wrap), never scrolls sideways
        self.scroll_area = scroll
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)
        # Under the scrolled fields, always in view: a tour changed the context size and found the note and its
        # button only by scrolling to the panel's end.
        footer = QVBoxLayout()
        footer.setContentsMargins(6, 0, 6, 6)
        footer.addWidget(self.reload_note)
        footer.addWidget(self.reload_button)
        outer.addLayout(footer)

        self.show_settings(store.settings)
        self._connect()
        store.changed.connect(self._on_store_changed)
        store.loaded_changed.connect(self._on_store_loaded_changed)

    # ---- construction -------------------------------------------------------------------------------

    def _update_advice(self, s: Settings) -> None:
        from speculens.engine.backend import usable_cpus

        cores = usable_cpus()
        said = []
        if s.threads > cores:
            said.append(
                f"{s.threads} threads on this machine's {cores} CPU cores: llama.cpp's threads wait for each other, "
                "so decoding runs slower, not faster. Automatic (0) uses the cores there are."
            )
        if s.max_tokens >= s.n_ctx:
            said.append(
                f"The context ({s.n_ctx:,} tokens) is no longer than Max tokens ({s.max_tokens:,}): the prompt and the "
                "answer share it, so an answer stops short of Max tokens."
            )
        self.advice.setText("\n".join(said))
        self.advice.setVisible(bool(said))

    def _add(self, name: str, widget: QWidget) -> QWidget:
        spec = SPECS[name]
        widget.setToolTip(_tip(name))
        widget.setAccessibleName(spec.label)
        if isinstance(widget, QAbstractSpinBox | QComboBox):
            widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # no focus (and so no wheel) by hovering
            widget.installEventFilter(self._wheel_guard)
        self.fields[name] = widget
        return widget

    def _explain_strategy(self) -> None:
        key = self.strategy.currentData()
        self.strategy.setToolTip(f"{SPECS['strategy'].tip}\n\n{self.strategy.currentText()}: {STRATEGY_TIPS[key]}")

    def _spin(self, name: str) -> QSpinBox:
        spec = SPECS[name]
        spin = ClampingSpinBox()
        spin.setRange(int(spec.low or 0), int(spec.high or 0))
        spin.setSingleStep(int(spec.step))
        spin.setKeyboardTracking(False)  # apply once typing is done, not per keystroke
        self._add(name, spin)
        return spin

    def _dspin(self, name: str) -> QDoubleSpinBox:
        spec = SPECS[name]
        spin = ClampingDoubleSpinBox()
        spin.setRange(float(spec.low or 0), float(spec.high or 0))
        spin.setSingleStep(spec.step)
        spin.setDecimals(2)
        spin.setKeyboardTracking(False)
        self._add(name, spin)
        return spin

    def _check(self, name: str, text: str) -> QCheckBox:
        box = QCheckBox(text)
        self._add(name, box)
        return box

    def _connect(self) -> None:
        self.strategy.currentIndexChanged.connect(self._on_widget_changed)
        self.flash_attn.currentIndexChanged.connect(self._on_widget_changed)
        for box in (self.adaptive, self.exact):
            box.toggled.connect(self._on_widget_changed)
        for spin in (
            self.n_draft, self.n_draft_min, self.top_k, self.seed, self.max_tokens, self.n_ctx,
            self.threads, self.n_gpu_layers, self.n_gpu_layers_draft,
            self.p_min, self.temperature, self.top_p, self.min_p,
        ):  # fmt: skip
            spin.valueChanged.connect(self._on_widget_changed)
        self.ngram_map.editingFinished.connect(self._on_map_changed)
        self.system_prompt.textChanged.connect(self._on_widget_changed)

    # ---- showing and reading ------------------------------------------------------------------------

    def show_settings(self, s: Settings) -> None:
        """Show these settings (without writing them back)."""
        self._updating = True
        try:
            self.strategy.setCurrentIndex(max(0, self.strategy.findData(s.strategy)))
            self.n_draft.setValue(s.n_draft)
            self.adaptive.setChecked(s.adaptive)
            self.n_draft_min.setValue(s.n_draft_min)
            self.p_min.setValue(s.p_min)
            self.temperature.setValue(s.temperature)
            self.top_k.setValue(s.top_k)
            self.top_p.setValue(s.top_p)
            self.min_p.setValue(s.min_p)
            self.seed.setValue(s.seed)
            self.max_tokens.setValue(s.max_tokens)
            self.n_ctx.setValue(s.n_ctx)
            self.threads.setValue(s.threads)
            self.n_gpu_layers.setValue(s.n_gpu_layers)
            self.n_gpu_layers_draft.setValue(s.n_gpu_layers_draft)
            # Used only when sampling: greyed at temperature 0, where a tour edited them to no effect.
            for name in ("top_k", "top_p", "min_p", "seed"):
                self.fields[name].setEnabled(s.temperature > 0)
            # Likewise the draft settings under plain decoding, and the draft model's confidence where none drafts.
            speculating = s.strategy != Strategy.NONE.value
            for name in ("n_draft", "adaptive", "n_draft_min"):
                self.fields[name].setEnabled(speculating)
            self.p_min.setEnabled(speculating and s.uses_draft and bool(s.draft_path))
            self.map_needed.setVisible(s.strategy == Strategy.NGRAM_MAP.value and not s.ngram_map_path)
            self.exact.setChecked(s.exact)
            self.flash_attn.setCurrentIndex(max(0, self.flash_attn.findData(s.flash_attn)))
            if self.ngram_map.text() != s.ngram_map_path:
                self.ngram_map.setText(s.ngram_map_path)
            if self.system_prompt.toPlainText() != s.system_prompt:
                self.system_prompt.setPlainText(s.system_prompt)
            self.build_map.setEnabled(bool(s.target_path))
            self.build_map.setToolTip(
                "Build a map from your own files (a code base, documentation) for the target's tokenizer"
                if s.target_path
                else "Choose a target model first (Models, Ctrl+M): a map is built for its tokenizer"
            )
        finally:
            self._updating = False
        self._update_reload_note()
        self._update_flash_note()
        self._update_advice(s)
        self._update_idle_note(s)
        self.restore_button.setEnabled(self._restored(s) != s)

    @staticmethod
    def _restored(s: Settings) -> Settings:
        """``s`` with its defaults back, but for the files and words chosen (see :attr:`restore_button`)."""
        return Settings(
            target_path=s.target_path, draft_path=s.draft_path, ngram_map_path=s.ngram_map_path,
            system_prompt=s.system_prompt,
        )  # fmt: skip

    def _on_restore_clicked(self) -> None:
        self.store.update(**dataclasses.asdict(self._restored(self.store.settings)))

    def set_draft_idle(self, reason: str | None) -> None:
        """Why the loaded draft model cannot pay on this machine (``None``: it can, or none is loaded)."""
        self._draft_idle = reason
        self._update_idle_note(self.store.settings)

    def _update_idle_note(self, s: Settings) -> None:
        shown = bool(self._draft_idle) and s.strategy == Strategy.DRAFT.value and s.adaptive and bool(s.draft_path)
        if shown:
            self.idle_note.setText(
                f"{upper_first(self._draft_idle or '')} (measured at load): with Adaptive ticked this strategy decodes "
                "plainly and the draft model never drafts. Untick Adaptive to watch it draft every step (slower here), "
                "or choose Automatic, which drafts from prompt lookup and the n-gram cache where they pay."
            )
        self.idle_note.setVisible(shown)

    def _read(self) -> dict[str, object]:
        n_draft = self.n_draft.value()
        return {
            "strategy": str(self.strategy.currentData()),
            "n_draft": n_draft,
            "adaptive": self.adaptive.isChecked(),
            "n_draft_min": min(self.n_draft_min.value(), n_draft),
            "p_min": self.p_min.value(),
            "temperature": self.temperature.value(),
            "top_k": self.top_k.value(),
            "top_p": self.top_p.value(),
            "min_p": self.min_p.value(),
            "seed": self.seed.value(),
            "max_tokens": self.max_tokens.value(),
            "n_ctx": self.n_ctx.value(),
            "threads": self.threads.value(),
            "n_gpu_layers": self.n_gpu_layers.value(),
            "n_gpu_layers_draft": self.n_gpu_layers_draft.value(),
            "exact": self.exact.isChecked(),
            "flash_attn": str(self.flash_attn.currentData()),
            "ngram_map_path": self.ngram_map.text().strip(),
            "system_prompt": self.system_prompt.toPlainText(),
        }

    def set_gpu_backend(self, name: str | None) -> None:
        """Enable the GPU-layer boxes when llama.cpp can offload, and say which backend it has."""
        offload = name is not None
        if offload:
            note = (
                f"This llama.cpp build offloads to the GPU with {name}: 'all' (the default) puts every layer "
                "there, 0 keeps a model on the CPU."
            )
        else:
            note = (
                "GPU layers are disabled: this llama.cpp build is CPU-only. Install a build with Metal "
                "(Apple silicon) or CUDA (NVIDIA) to offload layers to the GPU."
            )
        self.gpu_note.setText(note)
        for setting, box in (("n_gpu_layers", self.n_gpu_layers), ("n_gpu_layers_draft", self.n_gpu_layers_draft)):
            box.setEnabled(offload)
            # The boxes' own tooltip says why they are greyed (a tour hovered one and read only its range).
            box.setToolTip(_tip(setting) if offload else f"{_tip(setting)}\n\n{note}")

    def set_loaded_vocab(self, fingerprint: str) -> None:
        """The loaded target's vocabulary fingerprint (``""``: none loaded): a map built for another one is said
        (see :meth:`_check_map_vocab`; checked again each time, so that :attr:`map_unusable` is of the settings
        now, whichever of the store's listeners runs first)."""
        self._loaded_vocab = fingerprint
        self._check_map_vocab()

    @property
    def map_unusable(self) -> bool:
        """The map in use cannot draft for the loaded target (built with another tokenizer, or unreadable)."""
        return self._map_vocab_said

    def _check_map_vocab(self) -> None:
        """Say, by the map field, that the map in use was built for another tokenizer than the loaded target's: a
        tour chose one without a word, then every answer failed (the automatic strategy now leaves it out)."""
        path = self.store.settings.ngram_map_path
        problem = None
        if path and self._loaded_vocab:
            try:
                if NgramTable.fingerprint_of(Path(path)) != self._loaded_vocab:
                    problem = f"the n-gram map {Path(path).name} was built with another model's tokenizer"
            except NgramTableError as exc:
                problem = str(exc)
        if problem is None:
            if self._map_vocab_said:
                self.map_error.hide()
                self._map_vocab_said = False
            return
        strategy = Strategy(self.store.settings.strategy)
        fate = {Strategy.AUTO: "the automatic strategy goes on without it", Strategy.NGRAM_MAP: "answers cannot start"}
        said = upper_first(problem) + (f"; {fate[strategy]}." if strategy in fate else ".")
        # In words: a tour's font drew "ⓧ" as a box.
        self.map_error.setText(f"{said} Clear the field (its button at the right), or Build… a map for this model.")
        self.map_error.show()
        self._map_vocab_said = True

    def map_tooltip(self) -> str:
        """The map field's tooltip: what the field is for and what the map in it holds (``gemma.npz: 347 n-grams of
        2 to 4 tokens, 31.1 kB, built with the loaded target's tokenizer``; a tour found no way to see it but
        ``ls``). Made when the tooltip is about to show, from the file as it is then (rebuilt, or deleted); the
        n-gram count, which takes a moment on a large map, once per version of the file."""
        tip = SPECS["ngram_map_path"].tip
        path = self.store.settings.ngram_map_path
        if not path:
            return tip
        try:
            stat = Path(path).stat()
            key = (path, stat.st_mtime_ns, stat.st_size)
            if self._map_facts_of[0] != key:
                info = NgramTable.summary(Path(path))
                facts = (
                    f"{Path(path).name}: {info['n_ngrams']:,} n-grams of {info['ngram_min']} to {info['ngram_max']} "
                    f"tokens, {format_bytes(info['bytes'])}"
                )
                self._map_facts_of = (key, facts, info["fingerprint"])
        except (OSError, NgramTableError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            return f"{tip}\n\n{Path(path).name}: {reason}"
        _key, facts, fingerprint = self._map_facts_of
        if self._loaded_vocab:
            fits = "the loaded target's tokenizer" if fingerprint == self._loaded_vocab else "another model's tokenizer"
            facts += f", built with {fits}"
        return f"{tip}\n\n{facts}"

    def set_flash_measured(self, text: str) -> None:
        """What the loaded models run with (``on below 416 tokens of context, off from there (measured)``), or
        ``""`` when nothing is loaded."""
        self._flash_measured = text
        self._update_flash_note()

    def _update_flash_note(self) -> None:
        if self.exact.isChecked():
            note = "Always on with bit-exact verification."
        else:
            note = {
                "auto": "Automatic: on a CPU, on or off, whichever this machine decodes faster at each answer's "
                "context (timed once per model and context size); on a GPU, llama.cpp's choice.",
                "on": "On for both models.",
                "off": "Off for both models: on a small CPU often faster at long contexts.",
            }.get(str(self.flash_attn.currentData()), "")
        if self._flash_measured:
            note += f" Loaded: {self._flash_measured}."
        self.flash_note.setText(note)

    def _on_widget_changed(self, *_args: object) -> None:
        if not self._updating:
            self.store.update(**self._read())

    def _on_store_changed(self, settings: Settings) -> None:
        self.show_settings(settings)
        self._check_map_vocab()  # another map, or another strategy (what the note says of it)

    def _on_store_loaded_changed(self, _loaded: object) -> None:
        self._update_reload_note()

    def _on_browse_clicked(self) -> None:
        current = Path(self.ngram_map.text().strip())
        folder = current.parent if current.name else paths.data_dir() / "ngram-maps"  # where Build… saves them
        path, _ = QFileDialog.getOpenFileName(
            self, "Choose an n-gram map", str(folder if folder.is_dir() else ""), "N-gram maps (*.npz);;All files (*)"
        )
        if path:
            self.ngram_map.setText(path)
            self._on_map_changed()

    def _on_build_map_clicked(self) -> None:
        target = self.store.settings.target_path
        if not target:
            return
        dialog = NgramMapDialog(Path(target), self, self._map_corpus)
        if self._map_options is not None:
            dialog.ngram_max.setValue(self._map_options[0])
            dialog.min_count.setValue(self._map_options[1])
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.built.connect(lambda path, use_now: self._on_map_built(path, use_now, dialog))
        dialog.open()

    def _on_map_built(self, path: str, use_now: bool, dialog: NgramMapDialog | None = None) -> None:
        """A map built in the dialog becomes the map in use if the user wants to draft from it now; a strategy that
        would not draft from it becomes the automatic one, which takes it beside prompt lookup and the n-gram cache
        (the dialog says so: a strategy the Pair lab had just applied changed with no word)."""
        if dialog is not None:
            self._map_corpus = dialog.corpus_paths()  # the next Build… starts with it
            self._map_options = (dialog.ngram_max.value(), dialog.min_count.value())
        if not use_now:
            return
        self.ngram_map.setText(path)
        self.map_error.hide()
        before = self.strategy.currentText()
        if self.strategy.currentData() not in (Strategy.AUTO.value, Strategy.NGRAM_MAP.value):
            self.strategy.setCurrentIndex(self.strategy.findData(Strategy.AUTO.value))
            if dialog is not None:
                dialog.status.setText(
                    f"{dialog.status.text()} The strategy was {before}, which does not draft from a map: it is now "
                    f"{self.strategy.currentText()}."
                )
        self._on_widget_changed()
        self._check_map_vocab()  # built again at the same path: the store saw no change, the file did

    def _on_map_changed(self) -> None:
        """Take a new n-gram map path if the file is one (its header read now); otherwise say why and keep the old."""
        text = self.ngram_map.text().strip()
        try:
            if text and text != self.store.settings.ngram_map_path:
                NgramTable.check(Path(text))
        except NgramTableError as exc:
            self.map_error.setText(f"{exc}. The map in use is unchanged.")
            self.map_error.show()
            self.ngram_map.setText(self.store.settings.ngram_map_path)
            return
        self.map_error.hide()
        self._on_widget_changed()

    def _update_reload_note(self) -> None:
        fields = self.store.reload_needed()
        if fields and self.store.reload_frees_draft_only():
            self.reload_note.setText(
                "The draft model stays loaded, but this strategy does not use it: answers go on without a reload. "
                "Reload the models to free its memory."
            )
        elif fields:
            self.reload_note.setText(
                f"Changed since the models were loaded: {field_labels(fields)}. Reload the models to apply "
                "(Ctrl+L); otherwise your next message reloads them first, then the whole conversation is read "
                "again (a reload empties the models' context)."
            )
        self.reload_note.setVisible(bool(fields))
        self.reload_button.setVisible(bool(fields))


WARNING = "#b35900"  # the colour of a note on a value that will hurt


def _note(name: str, color: str, hidden: bool = True) -> QLabel:
    """A wrapped note in the panel, in ``color``, named ``name`` for screen readers (hidden until it has news)."""
    label = QLabel()
    label.setWordWrap(True)
    label.setAccessibleName(name)
    label.setStyleSheet(f"QLabel {{ color: {color} }}")
    label.setVisible(not hidden)
    return label


def _number(value: float) -> str:
    """A range's end as people write it: "1,048,576", not "1.04858e+06"."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:g}"
