"""Teach mode: step-by-step explanations and the expected-speedup curve.

With step mode on, the worker pauses after every speculation step; this panel explains the step in words
(drafted ▸ verified ▸ accepted k of n ▸ correction or bonus, or why the step decoded plainly) and the user
presses *Next step*. The curve is the expected speedup over the draft length as this machine measured it:
the adaptive controller's own estimate each step (its measured verification and drafting costs and the
acceptance it has learnt), or, with a fixed draft length, Leviathan et al.'s formula with the acceptance,
draft time and verification time per batch size that this answer measured. A teacher's chart must agree
with the stopwatch: a draft that costs more than it wins shows a curve below 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QGridLayout,
    QPushButton,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from speculens.engine.events import SOURCE_NAMES, keep_chance
from speculens.ui.charts import RunSeries, nice_end, solid_grid, solid_grid_axes
from speculens.ui.labels import WrappedLabel
from speculens.ui.token_view import token_html
from speculens.ui.worker import Record, RecordKind
from speculens.words import upper_first

if TYPE_CHECKING:
    from speculens.engine.events import StepEvent

MAX_GAMMA = 32


def _quote(piece: bytes) -> str:
    text = piece.decode("utf-8", errors="replace")
    if not text:  # a token with no text of its own ("«»" read as a glitch)
        return "<code>«»</code> (a special token with no text, such as the end of the answer)"
    return f"<code>«{token_html(text)}»</code>"


def explain_step(event: StepEvent, strategy: str | None = None, sampled: bool = False) -> str:
    """An HTML paragraph saying what happened in one speculation step, for a room full of students.

    Args:
        event: the step.
        strategy: the generation's draft sources as its start event names them (``none``: plain decoding;
            ``None``: unknown, judged from the step alone).
        sampled: the answer samples (temperature above 0): drafts are kept by a draw, not by matching the
            target's choice (a tour's sampled steps read "every drafted token matched the target").
    """
    from speculens.engine.events import Origin

    n = len(event.drafted)
    k = sum(1 for d in event.drafted if d.accepted)
    # Sampled with a draft model's probabilities: rejection sampling (see engine/verify.py). Sampled from a free
    # source (no q): the target samples at each position and keeps the draft while the samples agree.
    rejection = sampled and n > 0 and all(d.draft_prob is not None for d in event.drafted)
    parts = [f"<h3>Step {event.step}</h3>"]
    if not event.emitted and not k:
        first = "the target's own choice" if not n else "the target's choice at the first drafted position"
        return "".join(parts) + (
            f"<p><b>The answer ended here</b>: {first} was the end of the answer (or a stop string or the token "
            "limit came), so this step added no token.</p>"
        )
    alone = f"{_quote(event.emitted[0].piece) if event.emitted else '—'}"
    offered = event.offered or 0
    best = max(event.expected_speedup[1:], default=None)
    plain_only = event.n_draft_max == 0 and not event.expected_speedup and event.offered is None
    if n == 0 and event.probe:
        source = SOURCE_NAMES.get(event.considered or event.source or "", "the draft model")
        parts.append(
            f"<p><b>A probe that found no draft</b>: the controller asked {source} for a draft now and then, to "
            "re-measure what drafting costs and how often it is right, but it proposed nothing it was confident of "
            f"(the <i>draft confidence</i> setting, p_min). The target generated one token by itself: {alone}.</p>"
        )
    elif n == 0 and (strategy == "none" or (strategy is None and plain_only)):
        parts.append(
            "<p><b>Plain decoding</b>: no draft source is in use (the strategy is <i>none</i>), so the target "
            f"generated one token by itself: {alone}.</p>"
        )
    elif n == 0 and best is not None and best < 1.0:
        source = SOURCE_NAMES.get(event.considered or "", "the drafter")
        proposal = (
            f"{upper_first(source)} proposed {offered} token{'s' if offered != 1 else ''}, but with"
            if offered
            else "With"
        )
        # How to see a draft verified: a tour stepped through 15 plain steps of a question and never saw one. Under
        # a strategy without prompt lookup the rename would not draft either (a teacher's tour read the hint while
        # running that very example with the draft model alone).
        lookup_used = strategy is None or "lookup" in strategy.split("+")
        rewrite = (
            "answer a rewrite such as the example rename a new chat offers (Ctrl+N), whose copied lines prompt lookup "
            "drafts for free"
            if lookup_used
            else "choose the <i>Automatic</i> or <i>Prompt lookup</i> strategy and answer a rewrite such as the "
            "example rename a new chat offers (Ctrl+N): this answer's strategy has no prompt lookup, which drafts its "
            "copied lines for free"
        )
        parts.append(
            f"<p><b>Plain step: speculation would not pay.</b> {proposal} the costs measured on this machine "
            f"and the acceptance learnt so far, the best draft length is expected to run at ×{best:.2f} of "
            "plain decoding, so the adaptive controller decoded plainly. The target generated one token by "
            f"itself: {alone}. Proposals are still compared with the target's tokens afterwards, so the "
            "controller keeps learning for free.</p><p style='color:gray'>To watch drafts being verified here, untick "
            f"<i>Adaptive</i> in Settings (a draft model then drafts every step, paying or not), or {rewrite}.</p>"
        )
    elif n == 0 and best is not None:
        source = SOURCE_NAMES.get(event.considered or "", "the drafter")
        parts.append(
            f"<p><b>Plain step: held back.</b> Drafting with {source} was expected to run at ×{best:.2f}, "
            "but the controller's loss guard keeps speculation from risking more time than it has won in this "
            "answer; it waits until the proposals it declines prove right. The target generated one token by "
            f"itself: {alone}.</p>"
        )
    elif n == 0 and offered:
        parts.append(
            f"<p><b>Plain step</b>: the drafter proposed {offered} token{'s' if offered != 1 else ''}, but the "
            f"adaptive controller verified none. The target generated one token by itself: {alone}.</p>"
        )
    elif n == 0 and event.n_draft_max == 0:
        parts.append(
            "<p><b>Plain step</b>: no source had a draft, or the costs are still being measured, so the target "
            f"generated one token by itself: {alone}.</p>"
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
        by = f" by {SOURCE_NAMES.get(event.source, event.source)}" if event.source else ""
        parts.append(
            f"<p><b>1. Drafted</b> {n} token{'s' if n != 1 else ''}{by}{chosen} in {event.draft_ms:.1f} ms: "
            f"{drafted}</p>"
        )
        if event.probe:
            parts.append(
                "<p>This step is a <b>probe</b>: the controller speculates now and then even when it expects "
                "plain decoding to be faster, to re-measure what a draft costs and how often it is right.</p>"
            )
        # Whether this pass was expected to pay (a tour read "that single pass is what makes speculation pay off"
        # above "plain decoding (k = 0) is fastest here" on a probe).
        asked = event.n_draft_max  # the length the controller chose (a draft model may stop short of it)
        expected = (
            event.expected_speedup[asked]
            if 0 < asked < len(event.expected_speedup) and event.considered in (None, event.source)
            else None
        )
        outlook = "" if expected is None else (
            f": this one was expected to run at ×{expected:.2f} of plain decoding"
            + (", slower, to learn" if event.probe and expected < 1.0 else "")
        )
        tokens = "the drafted token" if n == 1 else f"the {n} drafted tokens"
        parts.append(
            f"<p><b>2. Verified</b>: the target checked {tokens} in <i>one</i> batched pass "
            f"({event.verify_ms:.1f} ms). Speculation pays when drafting and such a pass cost less than the plain "
            f"steps for the tokens they yield{outlook}.</p>"
        )
        if k == n:
            agreed = (
                "each drafted token had a chance of min(1, p/q) to be kept, p the target's probability of it and q "
                "the draft's, and every draw kept it"
                if rejection
                else "at every position the target's own sample was the drafted token"
                if sampled
                else "every drafted token matched the target"
            )
            parts.append(f"<p><b>3. Accepted {k} of {n}</b>: {agreed}.</p>")
        else:
            rejected = event.drafted[k]
            p, q = rejected.target_prob, rejected.draft_prob
            why = ""
            if p is not None:
                why = f" (the target gave it probability {p:.2f}"
                why += f", the draft {q:.2f})" if q is not None else ")"
            if rejection and p is not None and q:
                verdict = f"token {k + 1}, {_quote(rejected.piece)}, had {keep_chance(p, q)}, and the draw rejected it"
            elif sampled:
                verdict = (
                    f"at token {k + 1} the target's own sample was another token than {_quote(rejected.piece)}{why}"
                )
            else:
                verdict = f"the target disagreed at token {k + 1}, {_quote(rejected.piece)}{why}"
            parts.append(
                f"<p><b>3. Accepted {k} of {n}</b>: {verdict}; "
                + (f"it and the {n - k - 1} after it are thrown away" if n - k - 1 else "it is thrown away")
                + ".</p>"
            )
    last = event.emitted[-1] if event.emitted else None
    if last is not None and last.origin is Origin.CORRECTION:
        if rejection:
            instead = (
                f"a token sampled from what the target's distribution has beyond the draft's, max(0, p − q) "
                f"normalised, replaces the rejected one: {_quote(last.piece)}. With the draws above, this keeps the "
                "answer's tokens distributed exactly as the target alone would sample them"
            )
        elif sampled:
            instead = f"the target's own sample there, {_quote(last.piece)}, replaces the rejected token"
        else:
            instead = f"the target's own choice {_quote(last.piece)} replaces the rejected token"
        parts.append(f"<p><b>4. Correction</b>: {instead}.</p>")
    elif last is not None and last.origin is Origin.BONUS:
        parts.append(
            f"<p><b>4. Bonus</b>: because all drafts were accepted, the same pass also gave the next token "
            f"{_quote(last.piece)} for free{', sampled from the target' if sampled else ''}.</p>"
        )
    grew = len(event.emitted)
    if grew < k + 1:
        after = ", and the drafts after it are not part of the answer" if n else ""
        parts.append(
            "<p><b>The answer ended in this step</b> (at the end-of-answer token, a stop string or the token "
            f"limit): only the {grew} token{'s' if grew != 1 else ''} before its end {'are' if grew != 1 else 'is'} "
            f"kept{after}.</p>"
        )
    parts.append(
        f"<p>The answer grew by <b>{grew}</b> token{'s' if grew != 1 else ''} "
        f"for one target pass (plain decoding: 1).</p>"
    )
    return "".join(parts)


class TeachPanel(QWidget):
    """Step mode controls, the current step's explanation, and the speedup curve (a record sink).

    Args:
        series: the answer's measurements (for the fixed-length curve).
        parent: the Qt parent.

    Signals:
        step_mode_toggled(bool): the user switched step mode.
        next_step_requested(): the user pressed *Next step*.
        exact_toggled(bool): the user switched bit-exact verification (the target reloads in that mode).
    """

    step_mode_toggled = Signal(bool)
    next_step_requested = Signal()
    exact_toggled = Signal(bool)

    def __init__(self, series: RunSeries, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.series = series
        self._curve_stale = False  # an answer's steps came in while the panel was hidden (see on_records)
        self.n_draft = 8
        # The longest draft an estimate of this answer has covered: the chart keeps that width, so a step near
        # the answer's end (whose estimate stops at k = 1) does not shrink it.
        self._k_seen = 0
        self.last_step: StepEvent | None = None
        self._last_drafted: StepEvent | None = None  # this answer's last step that verified a draft
        self._last_token: StepEvent | None = None  # this answer's last step that generated a token
        # Its plain step whose declined draft came nearest to paying, with that rate: the answer's own line gives
        # its reason from that step (see speculens.ui.token_view.drafts_phrase).
        self._nearest: tuple[float, StepEvent] | None = None
        self._final: StepEvent | None = None  # this answer's last step
        self._curve_step: StepEvent | None = None  # this answer's last step with a curve of its own
        self._strategy: str | None = None  # the running generation's sources, from its start event
        self._sampled = False  # and whether it samples
        self.step_mode = QCheckBox("Step mode: pause after each step", self)
        self.step_mode.setAccessibleName("Step mode")
        self.step_mode.toggled.connect(self.step_mode_toggled)
        self.next_button = QPushButton("Next step ▸", self)
        self.next_button.setAccessibleName("Next step")
        self.next_button.setToolTip("Run the next speculation step (F10)")
        self.next_button.setEnabled(False)
        self.next_button.clicked.connect(self._on_next_button_clicked)
        # Off, a paused answer goes on by itself: Next step has nothing to do (a tour found it still enabled).
        self.step_mode.toggled.connect(self._on_step_mode_toggled)
        self.exact = QCheckBox("Bit-exact verification", self)
        self.exact.setAccessibleName("Bit-exact verification")
        self.exact.setToolTip(
            "Verify drafts with the kernels of one-token decoding, so greedy speculation reproduces plain "
            "decoding token for token (slower: no repacked weights; reloads the target)"
        )
        self.exact.clicked.connect(self.exact_toggled)
        # Two rows: in one, the three set the narrowest width of the docks they share, and so the window's
        # (wider than a 1280-pixel screen); Next step beside the shorter, or it was cut at a 380-pixel dock's edge.
        top = QGridLayout()
        top.addWidget(self.step_mode, 0, 0, 1, 3)
        top.addWidget(self.exact, 1, 0)
        top.addWidget(self.next_button, 1, 2)
        top.setColumnStretch(1, 1)

        self.explanation = QTextBrowser(self)
        self.explanation.setAccessibleName("Step explanation")
        self._intro = (
            "<p>Turn on <b>step mode</b> and send a message (or press <b>Compare</b>): the answer stops after "
            "each speculation step and this panel explains what was proposed, what the target verified, and "
            "what was kept — or why the step decoded plainly.</p>"
        )
        self.explanation.setHtml(self._intro)

        self.curve_plot = pg.PlotWidget(self, title="Expected speedup by draft length", axisItems=solid_grid_axes())
        self.curve_plot.setFocusPolicy(Qt.FocusPolicy.ClickFocus)  # Tab passes the chart by (see charts.py)
        self.curve_plot.setBackground(None)
        self.curve_plot.setLabel("bottom", "draft length k")
        self.curve_plot.getAxis("bottom").setTickSpacing(1, 1)  # k counts tokens (see update_curve)
        self.curve_plot.setLabel("left", "speedup ×")
        solid_grid(self.curve_plot.getPlotItem())
        self.curve_plot.setMenuEnabled(False)
        # The axes follow the steps shown (update_curve): a tour's mouse wheel, scrolling past, zoomed the curve
        # out of sight, with no way back but the small auto-range button.
        self.curve_plot.setMouseEnabled(x=False, y=False)
        self.curve_plot.hideButtons()
        self.curve_plot.getViewBox().setLimits(xMin=0, yMin=0)
        self.curve = self.curve_plot.plot(pen=pg.mkPen("#3884ff", width=2))
        self.marker = self.curve_plot.plot(pen=None, symbol="o", symbolSize=11, symbolBrush="#eb8c00")
        self.curve_plot.addLine(y=1.0, pen=pg.mkPen("#888888", style=Qt.PenStyle.DashLine))
        self.curve_label = WrappedLabel(self)
        lower = QWidget(self)
        lower_layout = QVBoxLayout(lower)
        lower_layout.setContentsMargins(0, 0, 0, 0)
        lower_layout.addWidget(self.curve_plot, 1)
        lower_layout.addWidget(self.curve_label)
        # A long caption under a short dock squeezed the chart to a strip with overlapping labels; at 150 pixels
        # (and a five-line caption) the explanation kept four lines of a 1280×800 window's dock.
        self.curve_plot.setMinimumHeight(120)
        # A step's explanation runs to five or six short paragraphs: a tour saw three lines of it, and dragging the
        # splitter down to read the rest made the curve vanish (the splitter collapsed it).
        self.explanation.setMinimumHeight(6 * self.explanation.fontMetrics().lineSpacing())

        splitter = QSplitter(Qt.Orientation.Vertical, self)
        splitter.setChildrenCollapsible(False)
        splitter.addWidget(self.explanation)
        splitter.addWidget(lower)
        # The explanation is what a learner reads step by step: it gets the larger share (a tour found it small).
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        self.splitter = splitter
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(splitter, 1)
        self.update_curve()

    def clear(self) -> None:
        """Forget the last answer's step (another conversation is shown)."""
        self.last_step = self._last_drafted = self._last_token = self._final = self._curve_step = None
        self._nearest = None
        self._k_seen = 0
        self.explanation.setHtml(self._intro)
        self.update_curve()

    def set_exact(self, exact: bool) -> None:
        """Show whether bit-exact verification is the chosen mode (without emitting ``exact_toggled``)."""
        self.exact.setChecked(exact)

    def set_n_draft(self, n_draft: int) -> None:
        """Mark this draft length on the curve."""
        self.n_draft = n_draft
        self.update_curve()

    def on_records(self, records: Sequence[Record]) -> None:
        """Follow a generation: explain the step it pauses on, keep the curve current."""
        from speculens.engine.events import StartEvent, StepEvent

        for record in records:
            event = record.event
            if record.kind is RecordKind.QUEUED:
                self.last_step = self._last_drafted = self._last_token = self._final = self._curve_step = None
                self._nearest = None
                self._k_seen = 0
            elif record.kind is RecordKind.STARTED and isinstance(event, StartEvent):
                self._strategy, self._sampled = event.strategy, event.sampled
                if not self.step_mode.isChecked():  # not the last answer's step while this one runs
                    self.explanation.setHtml(
                        "<p>An answer is being generated. When it ends, its last step that drafted is explained "
                        "here; turn on <b>step mode</b> to pause at every step and see what happens in it.</p>"
                    )
            elif record.kind is RecordKind.STEP and isinstance(event, StepEvent):
                self.last_step = self._final = event
                if event.drafted:
                    self._last_drafted = event
                if event.emitted:
                    self._last_token = event
                if not event.drafted and event.emitted and event.considered and len(event.expected_speedup) > 1:
                    rate = max(event.expected_speedup[1:])
                    if self._nearest is None or rate >= self._nearest[0]:  # the later of equals
                        self._nearest = (rate, event)
            elif record.kind is RecordKind.PAUSED and isinstance(event, StepEvent):
                self.show_step(event)
            elif record.final or record.kind is RecordKind.FINISHED:
                self.set_running(False)
                self._explain_answer()
        # Redrawn as the answer runs only where it can be seen: the window's thread takes its time from
        # llama.cpp's (see speculens.ui.charts.paint_budget). A dock tabbed behind Live tokens or Compare stays
        # "visible" to Qt with nothing of it on screen, hence the region. A pause and an answer's end redraw it
        # anyway; a hidden panel catches up when shown (catch_up).
        ends = any(r.final or r.kind in (RecordKind.FINISHED, RecordKind.PAUSED) for r in records)
        if ends or (self.isVisible() and not self.visibleRegion().isEmpty()):
            self.update_curve()
        else:
            self._curve_stale = True

    def catch_up(self) -> None:
        """Draw the curve the panel skipped while it could not be seen (its dock's tab was raised, say)."""
        if self._curve_stale:
            self.update_curve()

    def showEvent(self, event: QShowEvent) -> None:
        """Catch up with the answer the curve skipped while hidden."""
        super().showEvent(event)
        self.catch_up()

    def _explain_answer(self) -> None:
        """An answer ended: explain its last step that drafted, when steps without a draft followed it. The last
        step alone read as a contradiction: a tour saw an answer run fast on prompt lookup, then a curve all
        below ×1, the estimate for the draft model at a final step where lookup had nothing to offer."""
        step, drafted = self._final, self._last_drafted  # not last_step: Compare ends twice (its half, then both)
        if step is None:
            return
        lead = ""
        if drafted is not None and drafted is not step:
            after = step.step - drafted.step
            lead = (
                f"<p><i>The answer has ended. Explained here: step {drafted.step}, its last step that drafted "
                f"({after} plain step{'s' if after != 1 else ''} followed it, to step {step.step}).</i></p>"
            )
            self.last_step = step = drafted
        elif drafted is None and self._nearest is not None:
            # Nothing drafted: the step where a draft came nearest to paying says why, as the line under the answer
            # does (a tour read "held speculation back" there, and here, of the last step, "no source had a draft").
            rate, nearest = self._nearest
            lead = (
                f"<p><i>The answer has ended without a draft verified. Explained here: step {nearest.step}, where a "
                f"draft came nearest to paying (×{rate:.2f} of plain decoding expected).</i></p>"
            )
            self.last_step = step = nearest
        elif drafted is None and not step.emitted and self._last_token is not None:
            # Nothing drafted, and the last step only ended the answer: the step before it says why the answer
            # decoded plainly (a tour followed "see Teach" under such an answer to "The answer ended here").
            lead = (
                f"<p><i>The answer has ended without a draft verified. Explained here: step "
                f"{self._last_token.step}, its last step that generated a token.</i></p>"
            )
            self.last_step = step = self._last_token
        # The explanation and the curve's caption speak of the same step.
        self.explanation.setHtml(lead + explain_step(step, self._strategy, self._sampled) + self._did_it_pay(step))

    def show_step(self, event: StepEvent) -> None:
        """Explain a step (called when the worker pauses on it)."""
        self.last_step = event
        self.explanation.setHtml(explain_step(event, self._strategy, self._sampled) + self._did_it_pay(event))
        self.next_button.setEnabled(True)
        self.update_curve()

    def _did_it_pay(self, event: StepEvent) -> str:
        """Whether a step that verified a draft beat plain decoding, in its own milliseconds against the plain step's
        cost (a teacher's tour: with a fixed draft length the step text never said whether a step paid)."""
        costs = self.series.verify_ms(1)
        if not event.drafted or costs is None or costs[0][0] <= 0:
            return ""
        plain = float(costs[0][0])
        spent = event.draft_ms + event.verify_ms
        n = len(event.emitted)
        would = n * plain
        verdict = "it paid" if spent < would else "it did not pay"
        return (
            f"<p><b>Did it pay?</b> Drafting and verifying took {spent:.0f} ms for {n} token{'s' if n != 1 else ''}; "
            f"plain decoding would have taken about {would:.0f} ms ({n} × {plain:.0f} ms a step): {verdict}.</p>"
        )

    def set_running(self, running: bool) -> None:
        """Disable *Next step* when nothing is paused."""
        if not running:
            self.next_button.setEnabled(False)

    def update_curve(self) -> None:
        """Redraw the curve: the controller's estimate of the last step (or of this answer's last step that had
        one), else Leviathan's formula with this answer's acceptance and its costs, or the session's (see
        :meth:`RunSeries.verify_ms`). The caption is short, for a short dock; how the curve is
        computed is in its tooltip."""
        self._curve_stale = False
        step = self.last_step
        if step is not None and len(step.expected_speedup) > 1:
            self._curve_step = step
        elif step is not None and self._curve_step is not None and self._curve_step.step < step.step:
            # A step with nothing to weigh (no draft on offer) keeps the last curve, said to be that step's: a
            # tour saw the curve drawn at step 1, gone at step 2 and back at step 7.
            step = self._curve_step
        if step is not None and len(step.expected_speedup) > 1:
            speedup = np.asarray(step.expected_speedup, dtype=float)
            source = SOURCE_NAMES.get(step.considered or "", "the drafter")
            # This step's, said so: a tour read ×1.05 here beside Compare's ×1.48 for the whole answer.
            lead = f"{upper_first(source)} at step {step.step}"
            if step is not self.last_step:
                lead += " (the last step with a draft to weigh)"
            lead += ": this step alone"
            how = (
                f"Expected speedup by draft length: the adaptive controller's estimate for {source} at step "
                f"{step.step}, from the verification and drafting costs it measured on this machine and the "
                "acceptance it has learnt. It is this one step's expectation, not the answer's: the answer's speed is "
                "in the line under the answer in the chat, and Compare measures it against plain decoding."
            )
            mark = step.n_draft_max
            extra = ""
            if len(speedup) - 1 < self._k_seen:
                lead += f", at most k = {len(speedup) - 1} here"
                how += (
                    f" This step could verify at most k = {len(speedup) - 1}: the length of the draft on offer, "
                    "or the tokens left before the answer's end."
                )
            self._k_seen = max(self._k_seen, len(speedup) - 1)
        else:
            k_max = max(MAX_GAMMA, self.n_draft)
            curve = self.series.speedup_curve(k_max)
            costs = self.series.verify_ms(k_max + 1)
            if curve is None or costs is None:
                self.curve.setData([], [])
                self.marker.setData([], [])
                self.curve_label.setToolTip("")
                self.curve_plot.setToolTip("")
                self.curve_label.setText(
                    "The curve appears once this answer has timed a speculative step and the costs of a pass are "
                    "known: it is computed from the costs measured here, never from acceptance alone."
                )
                return
            speedup = curve
            alpha = self.series.alpha or 0.0
            verify, own = costs
            where = (
                "this answer's measurements"
                if own
                else "the session's measured costs (scaled to this answer's passes) and this answer's acceptance"
            )
            lead = f"From {where} (α = {alpha:.2f})"
            how = (
                f"Expected speedup by draft length: Leviathan et al.'s formula with acceptance α = {alpha:.2f}, the "
                f"draft time per token and the verification time of each batch size, from {where}."
            )
            mark = min(self.n_draft, len(speedup) - 1)
            extra = self._why_below_one(mark, float(speedup[mark]), alpha, verify)
        k = np.arange(len(speedup), dtype=float)
        # k is a count of tokens: whole-number ticks only (a 2-point curve got ticks at 0.2, 0.4, …), about eight
        # over the axis's whole range, which can be longer than this step's curve (a label at every k of 1 to 34
        # read "9101112131415…").
        span = max(self._k_seen, len(speedup) - 1, 1)
        major = max(1, int(np.ceil(span / 8)))
        self.curve_plot.getAxis("bottom").setTickSpacing(major, major)
        self.curve.setData(k, speedup)
        self.curve_plot.setXRange(0, span, padding=0.05)
        # From 0 to a round number above the curve and the dashed ×1 line: autoranged, the axis read 0.4–0.8, then
        # 0.6–1.0, then 0.95–1.10 on three steps of one answer, and the ×1 line had no label (a tour's).
        top = nice_end(1.05 * max(float(np.max(speedup)), 1.0))
        if self.curve_plot.getViewBox().viewRange()[1] != [0, top]:
            self.curve_plot.setYRange(0, top, padding=0)
        mark = min(mark, len(speedup) - 1)
        self.marker.setData([mark], [speedup[mark]])
        best = int(np.argmax(speedup))
        verdict = f"best: k = {best}, ×{speedup[best]:.2f}" if best > 0 else "plain decoding (k = 0) is fastest here"
        self.curve_label.setText(f"{lead}. Marked: k = {mark}, ×{speedup[mark]:.2f}; {verdict}.{extra}")
        self.curve_label.setToolTip(how)
        self.curve_plot.setToolTip(how)

    def _why_below_one(self, k: int, rate: float, alpha: float, verify: np.ndarray) -> str:
        """Why the curve is below ×1 at the marked length ``k``, in the costs that make it so (a teacher's tour saw
        it there at α = 1.00 with nothing to say why); empty where it is not."""
        if k < 1 or rate >= 1.0 or verify[0] <= 0:
            return ""
        draft = k * self.series.draft_ms
        steps = (draft + float(verify[k])) / float(verify[0])
        drafting = f"drafting {k} ({draft:.0f} ms) and verifying {k + 1}" if draft else f"verifying {k + 1}"
        ceiling = (
            f"more than the {k + 1} tokens a pass gives with every draft accepted"
            if steps > k + 1
            else f"more than the {rate * steps:.1f} tokens a pass gives on average at α = {alpha:.2f}"
        )
        return (
            f" At k = {k}, {drafting} take{'s' if not draft else ''} {draft + float(verify[k]):.0f} ms, as long as "
            f"{steps:.1f} plain steps of {verify[0]:.0f} ms: {ceiling}."
        )

    def _on_step_mode_toggled(self, on: bool) -> None:
        if not on:
            self.next_button.setEnabled(False)

    def _on_next_button_clicked(self) -> None:
        self.next_button.setEnabled(False)
        self.next_step_requested.emit()
