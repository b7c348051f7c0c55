"""Teach mode: step-by-step explanations and the expected-speedup curve.

With step mode on, the worker pauses after every speculation step; this panel explains the step in words
(drafted ▸ verified ▸ accepted k of n ▸ correction or bonus) and the user presses *Next step*. The curve
shows Leviathan et al.'s expected speedup over the draft length for the measured acceptance rate α and
draft/target cost ratio c, with the current n_draft marked.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from speculens.ui.charts import RunSeries

if TYPE_CHECKING:
    from speculens.engine.events import StepEvent

MAX_GAMMA = 16


def expected_speedup(alpha: float, gamma: np.ndarray | float, cost: float) -> np.ndarray:
    """Expected walltime improvement of speculative decoding (Leviathan, Kalman & Matias 2023, Theorem 3.8).

    ``(1 - α^(γ+1)) / ((1 - α)(γ c + 1))``: expected tokens per target pass, divided by the cost of a step
    (γ draft runs at c each plus one target pass) relative to one plain target step.

    Args:
        alpha: the probability that the target accepts a drafted token, in [0, 1].
        gamma: draft length(s).
        cost: c, the time of one draft token over the time of one target pass.

    Returns:
        The speedup for each γ.
    """
    g = np.asarray(gamma, dtype=float)
    # At α = 1 the series 1 + α + … + α^γ sums to γ + 1 (the formula's limit).
    tokens = g + 1.0 if alpha >= 1.0 else (1.0 - alpha ** (g + 1.0)) / (1.0 - alpha)
    return tokens / (g * cost + 1.0)


def _quote(piece: bytes) -> str:
    text = piece.decode("utf-8", errors="replace").replace("\n", "⏎")
    return f"<code>«{html.escape(text)}»</code>"


def explain_step(event: StepEvent) -> str:
    """An HTML paragraph saying what happened in one speculation step, for a room full of students."""
    from speculens.engine.events import Origin

    n = len(event.drafted)
    k = sum(1 for d in event.drafted if d.accepted)
    parts = [f"<h3>Step {event.step}</h3>"]
    alone = f"{_quote(event.emitted[0].piece) if event.emitted else '—'}"
    offered = event.offered or 0
    if n == 0 and offered:
        parts.append(
            f"<p><b>Plain step</b>: the drafter proposed {offered} token{'s' if offered != 1 else ''}, but the "
            "adaptive controller verified none: from the costs and acceptance it has measured, checking them "
            f"would cost more than it would likely win. The target generated one token by itself: {alone}. "
            "The proposal is compared with it afterwards, so the controller keeps learning for free.</p>"
        )
    elif n == 0 and event.n_draft_max == 0 and event.offered is None:
        parts.append(
            "<p><b>Plain step</b>: nothing was drafted (plain decoding, or the adaptive controller expects a "
            "draft to cost more than it gains on this machine right now), so the target generated one token "
            f"by itself: {alone}.</p>"
        )
    elif n == 0:
        parts.append(
            "<p><b>No draft</b> this step (the drafter had nothing confident enough), so the target "
            f"generated one token by itself: {alone}.</p>"
        )
    else:
        drafted = " ".join(_quote(d.piece) for d in event.drafted)
        chosen = ""
        if offered > n:
            chosen = f" (of {offered} proposed: the adaptive controller verifies as many as it expects to pay)"
        parts.append(
            f"<p><b>1. Drafted</b> {n} token{'s' if n != 1 else ''}{chosen} in {event.draft_ms:.1f} ms: "
            f"{drafted}</p>"
        )
        if event.probe:
            parts.append(
                "<p>This step is a <b>probe</b>: the controller speculates now and then even when it expects "
                "plain decoding to be faster, to re-measure what a draft costs and how often it is right.</p>"
            )
        parts.append(
            f"<p><b>2. Verified</b>: the target scored all {n} positions in <i>one</i> batched pass "
            f"({event.verify_ms:.1f} ms) — that single pass is what makes speculation pay off.</p>"
        )
        if k == n:
            parts.append(f"<p><b>3. Accepted {k} of {n}</b>: every drafted token matched the target.</p>")
        else:
            rejected = event.drafted[k]
            why = ""
            if rejected.target_prob is not None:
                why = f" (the target gave it probability {rejected.target_prob:.2f}"
                why += f", the draft {rejected.draft_prob:.2f})" if rejected.draft_prob is not None else ")"
            parts.append(
                f"<p><b>3. Accepted {k} of {n}</b>: the target disagreed at token {k + 1}, "
                f"{_quote(rejected.piece)}{why}; it and the {n - k - 1} after it are thrown away.</p>"
            )
    last = event.emitted[-1] if event.emitted else None
    if last is not None and last.origin is Origin.CORRECTION:
        parts.append(
            f"<p><b>4. Correction</b>: the target's own choice {_quote(last.piece)} "
            "replaces the rejected token.</p>"
        )
    elif last is not None and last.origin is Origin.BONUS:
        parts.append(
            f"<p><b>4. Bonus</b>: because all drafts were accepted, the same pass also gave the next token "
            f"{_quote(last.piece)} for free.</p>"
        )
    parts.append(
        f"<p>The answer grew by <b>{len(event.emitted)}</b> token{'s' if len(event.emitted) != 1 else ''} "
        f"for one target pass (plain decoding: 1).</p>"
    )
    return "".join(parts)


class TeachPanel(QWidget):
    """Step mode controls, the current step's explanation, and the speedup curve.

    Args:
        series: the run's measurements (for α and c).
        parent: the Qt parent.

    Signals:
        step_mode_toggled(bool): the user switched step mode.
        next_step_requested(): the user pressed *Next step*.
    """

    step_mode_toggled = Signal(bool)
    next_step_requested = Signal()

    def __init__(self, series: RunSeries, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.series = series
        self.n_draft = 8
        self.step_mode = QCheckBox("Step mode: pause after every speculation step", self)
        self.step_mode.setAccessibleName("Step mode")
        self.step_mode.toggled.connect(self.step_mode_toggled)
        self.next_button = QPushButton("Next step ▸", self)
        self.next_button.setAccessibleName("Next step")
        self.next_button.setToolTip("Run the next speculation step (F10)")
        self.next_button.setEnabled(False)
        self.next_button.clicked.connect(self._on_next_button_clicked)
        top = QHBoxLayout()
        top.addWidget(self.step_mode)
        top.addStretch(1)
        top.addWidget(self.next_button)

        self.explanation = QTextBrowser(self)
        self.explanation.setAccessibleName("Step explanation")
        self.explanation.setHtml(
            "<p>Turn on <b>step mode</b> and send a message: the answer will stop after each speculation "
            "step and this panel will explain what the draft proposed, what the target verified, and what "
            "was kept.</p>"
        )

        self.curve_plot = pg.PlotWidget(self, title="Expected speedup (Leviathan et al. 2023)")
        self.curve_plot.setBackground(None)
        self.curve_plot.setLabel("bottom", "draft length γ (n_draft)")
        self.curve_plot.setLabel("left", "speedup ×")
        self.curve_plot.showGrid(x=True, y=True, alpha=0.25)
        self.curve_plot.setMenuEnabled(False)
        self.curve = self.curve_plot.plot(pen=pg.mkPen("#3884ff", width=2))
        self.marker = self.curve_plot.plot(pen=None, symbol="o", symbolSize=11, symbolBrush="#eb8c00")
        self.curve_plot.addLine(y=1.0, pen=pg.mkPen("#888888", style=Qt.PenStyle.DashLine))
        self.curve_label = QLabel(self)
        self.curve_label.setWordWrap(True)
        lower = QWidget(self)
        lower_layout = QVBoxLayout(lower)
        lower_layout.setContentsMargins(0, 0, 0, 0)
        lower_layout.addWidget(self.curve_plot, 1)
        lower_layout.addWidget(self.curve_label)

        splitter = QSplitter(Qt.Orientation.Vertical, self)
        splitter.addWidget(self.explanation)
        splitter.addWidget(lower)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(splitter, 1)
        self.update_curve()

    def set_n_draft(self, n_draft: int) -> None:
        """Mark this draft length on the curve."""
        self.n_draft = n_draft
        self.update_curve()

    def show_step(self, event: StepEvent) -> None:
        """Explain a step (called when the worker pauses on it)."""
        self.explanation.setHtml(explain_step(event))
        self.next_button.setEnabled(True)
        self.update_curve()

    def set_running(self, running: bool) -> None:
        """Disable *Next step* when nothing is paused."""
        if not running:
            self.next_button.setEnabled(False)

    def update_curve(self) -> None:
        """Redraw the curve from the measured α and c (placeholders until something was measured)."""
        alpha = self.series.alpha
        cost = self.series.cost_ratio
        measured = alpha is not None and cost is not None
        a = alpha if alpha is not None else 0.7
        c = cost if cost is not None else 0.1
        gammas = np.arange(1, MAX_GAMMA + 1, dtype=float)
        self.curve.setData(gammas, expected_speedup(a, gammas, c))
        self.marker.setData([self.n_draft], expected_speedup(a, np.asarray([self.n_draft]), c))
        best = int(gammas[int(np.argmax(expected_speedup(a, gammas, c)))])
        source = "measured" if measured else "example values (no draft measured yet)"
        self.curve_label.setText(
            f"α = {a:.2f} (acceptance per drafted token), c = {c:.3f} (draft token cost / target pass), "
            f"{source}. Current n_draft = {self.n_draft}: "
            f"×{float(expected_speedup(a, self.n_draft, c)):.2f}; "
            f"best γ for these values: {best}."
        )

    def _on_next_button_clicked(self) -> None:
        self.next_button.setEnabled(False)
        self.next_step_requested.emit()
