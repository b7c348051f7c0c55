"""The settings form: strategy, drafting, sampling, and the model-loading options.

Every edit updates a :class:`~speculens.settings.Settings` at once and is saved by the main window;
generation settings apply to the next answer, while the loading options (context, threads, GPU layers,
n-gram map, model files) say that the models must be reloaded, with a button to do it.
"""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from speculens.settings import STRATEGIES, Settings

STRATEGY_LABELS = {
    "draft": "Draft model",
    "lookup": "Prompt lookup",
    "ngram-cache": "N-gram cache",
    "ngram-map": "N-gram map",
    "none": "None (plain decoding)",
}
STRATEGY_TIPS = {
    "draft": "A smaller model with the same tokenizer proposes tokens",
    "lookup": "Copies continuations of text already in the prompt (good for editing code or quoting)",
    "ngram-cache": "Statistics of n-grams seen in this and earlier generations (no draft model needed)",
    "ngram-map": "A static n-gram map built from a corpus with 'speculens-cli ngram build'",
    "none": "The target alone: the baseline",
}


class SettingsPanel(QWidget):
    """Edits the settings.

    Args:
        settings: the settings to start from.
        parent: the Qt parent.

    Signals:
        settings_changed(Settings): any value changed (a new copy).
        reload_requested(): the user pressed "Reload models".
    """

    settings_changed = Signal(object)
    reload_requested = Signal()

    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._settings = dataclasses.replace(settings)
        self._loaded: Settings | None = None
        self._updating = False

        self.strategy = QComboBox()
        for i, key in enumerate(STRATEGIES):
            self.strategy.addItem(STRATEGY_LABELS[key], key)
            self.strategy.setItemData(i, STRATEGY_TIPS[key], Qt.ItemDataRole.ToolTipRole)
        self.n_draft = self._spin(1, 64, "Most tokens drafted per step")
        self.adaptive = QCheckBox("Adaptive")
        self.adaptive.setToolTip(
            "Choose the draft length each step from measured costs and acceptance, up to n_draft and down to "
            "plain decoding when speculation does not pay"
        )
        self.n_draft_min = self._spin(0, 64, "Drafts shorter than this are not verified (0 = any)")
        self.p_min = self._dspin(
            0.0, 1.0, 0.05, "A draft model stops when its top token is less likely than this"
        )
        self.temperature = self._dspin(0.0, 5.0, 0.1, "0 = greedy: the same text as plain decoding")
        self.top_k = self._spin(0, 100000, "Keep the k most likely tokens (0 = all)")
        self.top_p = self._dspin(
            0.01, 1.0, 0.01, "Keep the most likely tokens until their probability reaches this"
        )
        self.min_p = self._dspin(0.0, 0.99, 0.01, "Drop tokens less likely than this times the top token")
        self.seed = self._spin(-1, 2**31 - 1, "Random seed for sampling (-1 = random)")
        self.max_tokens = self._spin(1, 1_000_000, "The longest answer, in tokens")
        self.n_ctx = self._spin(256, 1_048_576, "Context size in tokens (both models)")
        self.n_ctx.setSingleStep(1024)
        self.threads = self._spin(0, 256, "CPU threads (0 = automatic)")
        self.n_gpu_layers = self._spin(-1, 1000, "Target layers on the GPU (-1 = all)")
        self.n_gpu_layers_draft = self._spin(-1, 1000, "Draft layers on the GPU (-1 = all)")
        self.gpu_note = QLabel("Checking the llama.cpp build for GPU offload…")
        self.gpu_note.setWordWrap(True)
        self.ngram_map = QLineEdit()
        self.ngram_map.setPlaceholderText("no map file")
        self.ngram_map.setClearButtonEnabled(True)
        browse = QPushButton("Browse…")
        browse.setAccessibleName("Browse for an n-gram map")
        browse.clicked.connect(self._on_browse_clicked)
        map_row = QHBoxLayout()
        map_row.addWidget(self.ngram_map, 1)
        map_row.addWidget(browse)
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setPlaceholderText("optional system message for the chat")
        self.system_prompt.setMaximumHeight(60)

        self.reload_note = QLabel()
        self.reload_note.setWordWrap(True)
        self.reload_note.setStyleSheet(
            "QLabel { background: rgba(235,140,0,60); padding: 4px; border-radius: 3px }"
        )
        self.reload_button = QPushButton("Reload models")
        self.reload_button.clicked.connect(self.reload_requested)
        self.reload_note.hide()
        self.reload_button.hide()

        speculation = QGroupBox("Speculation")
        form = QFormLayout(speculation)
        form.addRow("Strategy", self.strategy)
        form.addRow("Draft tokens (n_draft)", self.n_draft)
        form.addRow("Draft length", self.adaptive)
        form.addRow("Minimum draft (n_draft_min)", self.n_draft_min)
        form.addRow("Draft confidence (p_min)", self.p_min)
        form.addRow("N-gram map", map_row)
        sampling = QGroupBox("Sampling")
        form = QFormLayout(sampling)
        form.addRow("Temperature", self.temperature)
        form.addRow("Top-k", self.top_k)
        form.addRow("Top-p", self.top_p)
        form.addRow("Min-p", self.min_p)
        form.addRow("Seed", self.seed)
        form.addRow("Max tokens", self.max_tokens)
        form.addRow("System prompt", self.system_prompt)
        loading = QGroupBox("Loading (needs a reload)")
        form = QFormLayout(loading)
        form.addRow("Context size", self.n_ctx)
        form.addRow("Threads", self.threads)
        form.addRow("GPU layers, target", self.n_gpu_layers)
        form.addRow("GPU layers, draft", self.n_gpu_layers_draft)
        form.addRow(self.gpu_note)

        body = QWidget()
        column = QVBoxLayout(body)
        for box in (speculation, sampling, loading):
            column.addWidget(box)
        column.addWidget(self.reload_note)
        column.addWidget(self.reload_button)
        column.addStretch(1)
        scroll = QScrollArea(self)
        scroll.setWidget(body)
        scroll.setWidgetResizable(True)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)

        for label, widget in (
            ("Strategy", self.strategy),
            ("Draft tokens", self.n_draft),
            ("Adaptive draft length", self.adaptive),
            ("Minimum draft", self.n_draft_min),
            ("Draft confidence", self.p_min),
            ("Temperature", self.temperature),
            ("Top-k", self.top_k),
            ("Top-p", self.top_p),
            ("Min-p", self.min_p),
            ("Seed", self.seed),
            ("Max tokens", self.max_tokens),
            ("Context size", self.n_ctx),
            ("Threads", self.threads),
            ("GPU layers for the target", self.n_gpu_layers),
            ("GPU layers for the draft", self.n_gpu_layers_draft),
            ("N-gram map file", self.ngram_map),
            ("System prompt", self.system_prompt),
        ):
            widget.setAccessibleName(label)

        self.set_settings(settings)
        self._connect()

    @staticmethod
    def _spin(low: int, high: int, tip: str) -> QSpinBox:
        spin = QSpinBox()
        spin.setRange(low, high)
        spin.setToolTip(tip)
        spin.setKeyboardTracking(False)  # apply once typing is done, not per keystroke
        return spin

    @staticmethod
    def _dspin(low: float, high: float, step: float, tip: str) -> QDoubleSpinBox:
        spin = QDoubleSpinBox()
        spin.setRange(low, high)
        spin.setSingleStep(step)
        spin.setDecimals(2)
        spin.setToolTip(tip)
        spin.setKeyboardTracking(False)
        return spin

    def _connect(self) -> None:
        self.strategy.currentIndexChanged.connect(self._on_widget_changed)
        self.adaptive.toggled.connect(self._on_widget_changed)
        for spin in (
            self.n_draft, self.n_draft_min, self.top_k, self.seed, self.max_tokens, self.n_ctx,
            self.threads, self.n_gpu_layers, self.n_gpu_layers_draft,
            self.p_min, self.temperature, self.top_p, self.min_p,
        ):  # fmt: skip
            spin.valueChanged.connect(self._on_widget_changed)
        self.ngram_map.editingFinished.connect(self._on_widget_changed)
        self.system_prompt.textChanged.connect(self._on_widget_changed)

    @property
    def settings(self) -> Settings:
        """A copy of the current settings."""
        return dataclasses.replace(self._settings)

    def set_settings(self, settings: Settings) -> None:
        """Show these settings (without emitting ``settings_changed``)."""
        self._updating = True
        try:
            self._settings = dataclasses.replace(settings)
            s = settings
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
            self.ngram_map.setText(s.ngram_map_path)
            if self.system_prompt.toPlainText() != s.system_prompt:
                self.system_prompt.setPlainText(s.system_prompt)
        finally:
            self._updating = False
        self._update_reload_note()

    def set_gpu_backend(self, name: str | None) -> None:
        """Enable the GPU-layer boxes when llama.cpp can offload, and say which backend it has."""
        offload = name is not None
        self.n_gpu_layers.setEnabled(offload)
        self.n_gpu_layers_draft.setEnabled(offload)
        if offload:
            self.gpu_note.setText(
                f"This llama.cpp build offloads to the GPU with {name}. -1 puts every layer there."
            )
        else:
            self.gpu_note.setText(
                "GPU layers are disabled: this llama.cpp build is CPU-only. Install a build with Metal "
                "(Apple silicon) or CUDA (NVIDIA) to offload layers to the GPU."
            )

    def set_loaded(self, settings: Settings | None) -> None:
        """Remember what the models were loaded with, so that changes needing a reload can be flagged."""
        self._loaded = dataclasses.replace(settings) if settings is not None else None
        self._update_reload_note()

    def _read(self) -> Settings:
        s = dataclasses.replace(self._settings)
        s.strategy = str(self.strategy.currentData())
        s.n_draft = self.n_draft.value()
        s.adaptive = self.adaptive.isChecked()
        s.n_draft_min = min(self.n_draft_min.value(), s.n_draft)
        s.p_min = self.p_min.value()
        s.temperature = self.temperature.value()
        s.top_k = self.top_k.value()
        s.top_p = self.top_p.value()
        s.min_p = self.min_p.value()
        s.seed = self.seed.value()
        s.max_tokens = self.max_tokens.value()
        s.n_ctx = self.n_ctx.value()
        s.threads = self.threads.value()
        s.n_gpu_layers = self.n_gpu_layers.value()
        s.n_gpu_layers_draft = self.n_gpu_layers_draft.value()
        s.ngram_map_path = self.ngram_map.text().strip()
        s.system_prompt = self.system_prompt.toPlainText()
        return s

    def update_settings(self, **changes: object) -> None:
        """Change some fields from outside (the model manager picks a pair) and emit the change."""
        self.set_settings(dataclasses.replace(self._settings, **changes))  # type: ignore[arg-type]
        self.settings_changed.emit(self.settings)

    def _on_widget_changed(self, *_args: object) -> None:
        if self._updating:
            return
        self._settings = self._read()
        self._update_reload_note()
        self.settings_changed.emit(self.settings)

    def _on_browse_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Choose an n-gram map", "", "N-gram maps (*.npz *.bin);;All files (*)"
        )
        if path:
            self.ngram_map.setText(path)
            self._on_widget_changed()

    def reload_fields(self) -> set[str]:
        """The changed settings that need a reload (empty when nothing is loaded)."""
        if self._loaded is None:
            return set()
        changed = self._settings.needs_reload(self._loaded)
        # The draft matters only to the draft strategy; switching strategy to/from "draft" needs a reload
        # because the draft model is loaded only for it.
        if (self._settings.strategy == "draft") != (
            self._loaded.strategy == "draft"
        ) and self._settings.draft_path:
            changed.add("strategy")
        return changed

    def _update_reload_note(self) -> None:
        fields = sorted(self.reload_fields())
        visible = bool(fields)
        if visible:
            names = ", ".join(f.replace("_", " ") for f in fields)
            self.reload_note.setText(
                f"Changed since the models were loaded: {names}. Reload the models to apply."
            )
        self.reload_note.setVisible(visible)
        self.reload_button.setVisible(visible)
