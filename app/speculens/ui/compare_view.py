"""Compare: the same message decoded plainly and with speculation, side by side.

The worker runs the two halves one after the other on the same models (so they never compete for the
CPU/GPU); this view is a record sink of the comparison: it streams each half into its own token view, then
shows the measured speedup and whether the outputs are identical. When greedy outputs differ it names the
first differing token, both candidates and the target's logit margin there: llama.cpp's fastest kernels
round a batch differently from one token at a time, which can tip a near-tie; bit-exact verification
(one click away) restores token-for-token identity at its measured cost.
"""

from __future__ import annotations

import functools
import html
import re
import time
from collections.abc import Sequence

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from speculens.engine.config import NOISY_SPREAD
from speculens.engine.events import FinishEvent, FinishReason, StartEvent, StepEvent
from speculens.ui.labels import WrappedLabel
from speculens.ui.token_view import TokenView, token_html
from speculens.ui.worker import Comparison, Lane, Record, RecordKind

_WAITING = "waiting…"  # a lane's figures until its answer starts


def _piece(piece: bytes) -> str:
    text = piece.decode("utf-8", errors="replace")
    if not text:  # a special token: where answers part, the end of one of them
        return "the end of the answer"
    return f"<code>«{token_html(text)}»</code>"


# A speedup within this far of 1 reads as the same speed: this project's VM drifts by more between two runs.
SAME_SPEED = 0.05


def _meaning(c: Comparison) -> str:
    """What the speedup says, in words (a number alone read as a success at a glance, even at ×0.90)."""
    stats = c.speculative.stats
    if not stats.n_drafted:
        return "nothing was drafted, so both decoded plainly: the difference is run-to-run variation"
    accepted = f"{stats.n_accepted} of {stats.n_drafted} drafted tokens accepted"
    # One run each: a difference under the Pair lab's single-run margin can be the machine's (a tour read ×1.12
    # "faster" where the chat had run at plain decoding's speed with the same speculation).
    maybe = (
        f"; one run each, and a difference under {NOISY_SPREAD:.0%} can be run-to-run variation: Compare again to be "
        "sure"
        if abs(c.speedup - 1) < NOISY_SPREAD
        else ""
    )
    if c.speedup >= 1 + SAME_SPEED:
        return f"<span style='color:#2ea043'><b>speculation was faster</b></span> ({accepted}{maybe})"
    if c.speedup <= 1 - SAME_SPEED:
        # Why, where it is not noise: a tour's ×0.75 at 99% accepted said nothing of it.
        # Only of one answer decoded both ways: two different answers' rates are of different texts (a review).
        why = "" if maybe or not c.identical else ": drafting and checking the drafts took more time than they saved"
        return f"<span style='color:#d29922'><b>speculation was slower here</b></span> ({accepted}{maybe}){why}"
    return f"about the same speed ({accepted})"


def verdict_html(c: Comparison) -> str:
    """The comparison's verdict: speedup and what it means, and identity (or where and why the outputs differ),
    after a warning where other programs kept the CPUs busy during it."""
    if c.busy is None:
        return _verdict(c)
    plain, speculative = (f"{s:.0%}" if s is not None else "not measured" for s in c.others_share)
    return (
        f"<span style='color:#d29922'><b>⚠ Other programs used the CPUs during this comparison</b></span> "
        f"({plain} of the CPUs during plain decoding, {speculative} during speculation): they can slow one half more "
        "than the other, so this speedup may measure them too. Compare again when the machine is quiet.<br>"
        + _verdict(c)
    )


def _verdict(c: Comparison) -> str:
    rates = f"({c.speculative.stats.tokens_per_second:.1f} vs {c.plain.stats.tokens_per_second:.1f} tokens/s)"
    if c.speculative.stats.n_drafted:
        speed = f"<span style='font-size:large'>Speedup <b>×{c.speedup:.2f}</b></span> {rates}"
    else:  # no speedup to headline: both decoded plainly (a tour read a large bold "×1.21" of pure noise)
        speed = f"Speed ratio ×{c.speedup:.2f} {rates}"
    if c.identical:  # (where they differ, what follows is long enough, and about the difference)
        # With nothing drafted there was no batch to verify, and so nothing the check could catch (a tour read the
        # green mark under a bit-exact comparison that had drafted nothing as a proof).
        if not c.speculative.stats.n_drafted:  # no green tick for a check that could not fail (a review's)
            return f"{speed}: {_meaning(c)} · identical outputs, as they must be: nothing was verified in a batch"
        return f"{speed}: {_meaning(c)} · <span style='color:#2ea043'><b>✓ identical outputs</b></span>"
    n_spec, n_plain = c.speculative.stats.n_generated, c.plain.stats.n_generated
    if n_spec != n_plain:  # the rates are of two texts: say so, or ×0.98 reads as speculation's cost
        speed += f", rates of two different answers ({n_spec} and {n_plain} tokens)"
    if not c.greedy:  # what the speedup means, as for identical outputs (a tour's ×0.75 said nothing of it)
        return (
            f"{speed}: {_meaning(c)} · outputs differ (expected: with temperature > 0 the two runs sample "
            "differently; the distribution is the same)"
        )
    d = c.divergence
    where = ""
    if d is not None:
        where = (
            f" from token {d.index + 1} (underlined in red): plain decoding chose {_piece(d.piece_a)} (the target's "
            f"logit {d.logit_a:.3f}, one token at a time) over {_piece(d.piece_b)} ({d.logit_b:.3f}), a margin of "
            f"{d.margin:.3f}; speculation chose {_piece(d.piece_b)}"
        )
    if c.exact:
        return (
            f"{speed} · <span style='color:#d73a49'><b>✗ outputs differ</b></span>{where}. Bit-exact "
            "verification must reproduce plain decoding: please report this."
        )
    # Short: the answers above give way to the verdict, and a 10-line verdict left them 3 lines each in a 1280×800
    # window (under Xvfb). The button below it offers bit-exact verification; the tooltip says more.
    return (
        f"{speed} · <span style='color:#d29922'><b>outputs differ</b></span>{where}. A batch verified at once "
        "rounds slightly differently from one token at a time, which tipped this near-tie: both answers are "
        "the target's."
    )


ANSWER_LINES = 6  # each answer shows at least this many lines
# Side by side while each answer has at least this many characters' width; one above the other in a narrower dock
# (at 1280×800 the docked view's two columns were 160 pixels each, and code wrapped in the middle of its names).
SIDE_BY_SIDE_CHARS = 40
REVEAL_S = 0.5  # how long the dock follows the verdict's layout into view


class CompareView(QWidget):
    """Two token views and a verdict (a record sink of comparisons).

    Args:
        parent: the Qt parent.

    Signals:
        stop_requested(): the user pressed Stop.
        exact_requested(): the user asked for bit-exact verification.
    """

    stop_requested = Signal()
    exact_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.running = False
        self.comparison: Comparison | None = None
        self.prompt = WrappedLabel(self)
        self.prompt.setTextFormat(Qt.TextFormat.RichText)
        # The message is the user's (code, long names): it wraps or is cut, and never widens the window (a tour's
        # pasted function pushed it past a 1280-pixel screen, for good).
        self.prompt.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.prompt.setText("Press <b>Compare</b> in the chat: the last message is answered both ways.")
        self._outdated = False  # the chat this comparison came from has moved on since
        self._verdict_of: Comparison | None = None  # the comparison whose verdict the verdict label shows
        self.conversation: str | None = None  # the id of the conversation compared (see describe)
        self._shown: str | None = None  # the id of the conversation the chat shows (see mark_outdated)
        self._editing = False  # Edit last has taken that conversation's last message out (see mark_outdated)
        # Short: its line with Stop set the dock's narrowest width, 309 pixels (the window's could not go below 1141).
        self.with_history = QCheckBox("Whole conversation", self)
        self.with_history.setAccessibleName("Compare with the earlier conversation")
        self.with_history.setToolTip(
            "On: the whole conversation up to the last message, as the chat answers it. Off: the last message alone "
            "(faster, and fits any context)."
        )
        # On by default: a follow-up compared alone ("Now write it iteratively.") was answered "please provide the
        # text" both ways, and the tour read a speedup of that.
        self.with_history.setChecked(True)
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setAccessibleName("Stop the comparison")
        self.stop_button.setToolTip("Stop the comparison (Esc)")
        self.stop_button.setEnabled(False)
        self.stop_button.clicked.connect(self.stop_requested)
        top = QHBoxLayout()
        top.addWidget(self.with_history)
        top.addStretch(1)
        top.addWidget(self.stop_button)
        self.views = {Lane.PLAIN: TokenView(self), Lane.SPECULATIVE: TokenView(self)}
        for view in self.views.values():
            # Readable however long the verdict: in a 1024×740 window a tour's answers got two lines each under it;
            # the dock scrolls instead (see MainWindow).
            view.setMinimumHeight(ANSWER_LINES * view.fontMetrics().lineSpacing() + 2 * view.frameWidth() + 8)
        self.headers = {
            Lane.PLAIN: QLabel("<b>Plain decoding</b>", self),
            Lane.SPECULATIVE: QLabel("<b>Speculative decoding</b>", self),
        }
        self.figures = {Lane.PLAIN: QLabel(self), Lane.SPECULATIVE: QLabel(self)}
        for label in (*self.headers.values(), *self.figures.values()):
            label.setWordWrap(True)  # a long strategy name or figure wraps; it must not widen the window
        # The two answers scroll together, token by token: a tour scrolled two long answers one at a time to find
        # the same place in both (rejected drafts make the speculative one longer, so not line by line).
        self._scrolling = False
        for lane, view in self.views.items():
            view.verticalScrollBar().valueChanged.connect(functools.partial(self._scroll_with, lane))
        self.views[Lane.PLAIN].setAccessibleName("Plain decoding answer")
        self.views[Lane.SPECULATIVE].setAccessibleName("Speculative decoding answer")
        self.mark = WrappedLabel(self)  # whose comparison it is, where not the last message's (see _show_mark)
        self.mark.setTextFormat(Qt.TextFormat.RichText)
        self.mark.setAccessibleName("Whose comparison")
        self.mark.hide()
        self.verdict = WrappedLabel(self)  # the result: all of it shown; the answers keep ANSWER_LINES
        self.verdict.setTextFormat(Qt.TextFormat.RichText)
        self.verdict.setAccessibleName("Comparison result")
        self.exact_button = QPushButton("Switch to bit-exact verification", self)
        self.exact_button.setToolTip(
            "Speculation verifies drafts in one batch, and llama.cpp's fastest kernels round a batch slightly "
            "differently from one token at a time. Bit-exact verification reloads the target to verify in the call "
            "sizes that round as one token at a time: plain decoding's tokens exactly, a little slower (see the "
            "README)."
        )
        self.exact_button.clicked.connect(self._on_exact_button_clicked)
        self.exact_button.hide()
        self._reveal_until = 0.0  # time.monotonic() until which the dock follows the verdict (see _reveal_verdict)
        self._range_hooked = False
        self.stacked: bool | None = None  # the answers one above the other (see _arrange)
        self.grid = QGridLayout()
        self._arrange(stacked=False)
        self.outer = layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.prompt)
        layout.addLayout(top)
        layout.addLayout(self.grid, 1)
        layout.addWidget(self.mark)
        layout.addWidget(self.verdict)
        layout.addWidget(self.exact_button, 0, Qt.AlignmentFlag.AlignLeft)  # below: the verdict takes the width

    def _arrange(self, stacked: bool) -> None:
        """Put the two answers side by side, or one above the other (``stacked``)."""
        if stacked == self.stacked:
            return
        self.stacked, grid = stacked, self.grid
        for i, lane in enumerate((Lane.PLAIN, Lane.SPECULATIVE)):
            row, col = (3 * i, 0) if stacked else (0, i)
            for offset, widget in enumerate((self.headers[lane], self.views[lane], self.figures[lane])):
                grid.removeWidget(widget)
                grid.addWidget(widget, row + offset, col)
        for row in range(6):
            grid.setRowStretch(row, 1 if row in ((1, 4) if stacked else (1,)) else 0)
        grid.setColumnStretch(1, 0 if stacked else 1)
        grid.setColumnStretch(0, 1)

    def side_by_side_width(self) -> int:
        """The narrowest width that gives each answer :data:`SIDE_BY_SIDE_CHARS` characters of its own font a line,
        beside its frame, scroll bar and margins."""
        view = self.views[Lane.PLAIN]
        answer = (
            view.fontMetrics().horizontalAdvance("x" * SIDE_BY_SIDE_CHARS)
            + 2 * (view.frameWidth() + round(view.document().documentMargin()))
            + view.verticalScrollBar().sizeHint().width()
        )
        margins = self.outer.contentsMargins()
        return 2 * answer + max(self.grid.horizontalSpacing(), 0) + margins.left() + margins.right()

    def resizeEvent(self, event: QResizeEvent) -> None:
        """Side by side where both answers are readable so, else one above the other."""
        self._arrange(stacked=event.size().width() < self.side_by_side_width())
        super().resizeEvent(event)

    def describe(self, message: str, strategy: str, exact: bool = False, conversation: str | None = None) -> None:
        """Say what is being compared (before the records arrive), and in which mode: bit-exact changes plain
        decoding's kernels too (a tour saw the plain answer change, under headers that said nothing of it).
        ``conversation``: the id of the conversation the message is of (see :meth:`mark_outdated`)."""
        short = message if len(message) < 200 else message[:200] + "…"
        lines = html.escape(short).replace("\n", " ⏎ ")  # a pasted function's lines, not run together
        self.prompt.setText(f"Message: <i>{lines}</i>")
        self.conversation = self._shown = conversation
        self._outdated = False
        mode = ", bit-exact" if exact else ""
        self.headers[Lane.PLAIN].setText(f"<b>Plain decoding</b>{' (bit-exact)' if exact else ''}")
        self.headers[Lane.SPECULATIVE].setText(f"<b>Speculative decoding</b> ({html.escape(strategy)}{mode})")

    def on_records(self, records: Sequence[Record]) -> None:
        """Show a comparison's records."""
        for lane, view in self.views.items():
            steps = [
                r.event
                for r in records
                if r.lane is lane and r.kind is RecordKind.STEP and isinstance(r.event, StepEvent)
            ]
            if steps:
                view.append_steps(steps)
                s = steps[-1].stats
                self.figures[lane].setText(f"{s.n_generated} tokens · {s.tokens_per_second:.1f} tokens/s")
        for record in records:
            event = record.event
            if record.kind is RecordKind.QUEUED:
                self._start()
            elif record.kind is RecordKind.STARTED and isinstance(event, StartEvent):
                self.views[record.lane].sampled = event.sampled  # its tooltips say draws, not choices
            elif record.kind is RecordKind.FINISHED and isinstance(event, FinishEvent):
                s = event.stats
                stopped = " · stopped" if event.reason is FinishReason.CANCELLED else ""
                self.figures[record.lane].setText(
                    f"{s.passes_text} · {s.tokens_per_second:.1f} tokens/s{stopped}"
                )
                if record.lane is Lane.PLAIN:
                    self.verdict.setText("Plain decoding done; now speculation…")
                else:  # where the answers part, the target's logits are recomputed as plain decoding saw them
                    self.verdict.setText("Both answers done; comparing them…")
            elif record.kind is RecordKind.COMPARED and record.comparison is not None:
                self._set_running(False)
                self.comparison = self._verdict_of = record.comparison
                self.verdict.setText(verdict_html(record.comparison))
                if record.comparison.divergence is not None and record.comparison.greedy:
                    for view in self.views.values():  # underlined where they part, in both answers
                        view.mark_answer_token(record.comparison.divergence.index)
                # In a short dock, which scrolls, the verdict may lie below the answers: brought into view once laid
                # out, or the status bar's "the verdict is in Compare" pointed at nothing to see.
                self._show_mark()  # the chat may have opened another conversation meanwhile
                self._reveal_verdict()
            elif record.kind is RecordKind.FAILED:
                self._set_running(False)
                self._verdict_of = None
                self.verdict.setText(html.escape(record.message))
                for label in self.figures.values():
                    if label.text() == _WAITING:  # a lane the comparison never reached
                        label.setText("not run")
                self._reveal_verdict()  # "Comparison stopped." too (a tour's lay out of view)

    def export_html(self) -> str:
        """The finished comparison's plain half and its verdict, for a transcript (a teacher's Ctrl+S after Compare
        kept the speculative half alone); empty without one."""
        if self.comparison is None:
            return ""
        plain = self.views[Lane.PLAIN]
        return (
            "<h2>Compare: the same message decoded plainly, token by token</h2>\n"
            f"<p style='color:gray'>{html.escape(self.figures[Lane.PLAIN].text())}</p>\n{plain.html_fragment()}"
            f"\n<h2>Compare's verdict</h2>\n<p>{verdict_html(self.comparison)}</p>\n"
        )

    def _scroll_area(self) -> QScrollArea | None:
        """The scroll area the view is in (the dock's), if any."""
        parent = self.parentWidget()
        while parent is not None and not isinstance(parent, QScrollArea):
            parent = parent.parentWidget()
        return parent

    def _reveal_verdict(self) -> None:
        """Scroll the dock to the verdict now and as the layout settles over the next moment: a verdict that wraps
        to more lines lengthens the dock's range after the first scroll (under Xvfb the dock showed its first line)."""
        self._reveal_until = time.monotonic() + REVEAL_S
        scroll = self._scroll_area()
        if scroll is not None and not self._range_hooked:
            scroll.verticalScrollBar().rangeChanged.connect(self._on_range_changed)
            self._range_hooked = True
        QTimer.singleShot(0, self._show_verdict)

    def _on_range_changed(self, _low: int, _high: int) -> None:
        if time.monotonic() < self._reveal_until:
            self._show_verdict()

    def _show_verdict(self) -> None:
        scroll = self._scroll_area()
        if scroll is not None:  # the button below the verdict if both fit, else the verdict's beginning
            if self.exact_button.isVisibleTo(self):
                scroll.ensureWidgetVisible(self.exact_button, 0, 4)
            scroll.ensureWidgetVisible(self.verdict, 0, 4)

    def mark_outdated(self, shown: str | None, moved_on: str | None = None, editing: bool = False) -> None:
        """Say that the comparison shown is of an earlier message (a tour read an old verdict, made in another
        mode, under a conversation that had moved on), or of another conversation than ``shown``, the id of the one
        the chat now shows (a tour took it for this one's); opening the compared conversation again takes that back.

        Args:
            shown: the conversation the chat shows.
            moved_on: the conversation that has just had a new answer (the comparison's own: it is earlier now).
            editing: Edit last has taken the shown conversation's last message out (a tour saw its comparison stay as
                if current); until it is sent or put back (Esc), which takes the mark back.
        """
        self._shown = shown
        self._editing = editing
        if moved_on is not None and moved_on == self.conversation and self.comparison is not None:
            self._outdated = True
        if not self.running:  # a comparison still running is marked when it ends (see on_records)
            self._show_mark()

    def _show_mark(self) -> None:
        """The line over the verdict that says whose comparison this is (none for the conversation's last message),
        the verdict greyed under it: a tour read an old verdict beside an empty chat, the line under the message
        scrolled out of the dock's view."""
        if self.comparison is None:
            return
        why = ""
        if self.conversation is not None and self._shown is not None and self._shown != self.conversation:
            why = "A comparison of another conversation."
        elif self._outdated or (self._editing and self._shown == self.conversation):
            why = "An earlier comparison: the chat has moved on since."
        self.mark.setText(f"<b>{why}</b> Press <b>Compare</b> (Ctrl+Shift+C) for the last message of this one.")
        self.mark.setVisible(bool(why))
        self.verdict.setEnabled(not why)
        c = self._verdict_of  # the verdict shown, where it is this comparison's (not "Reloading…", say)
        if c is not None:
            # Greyed, all of it: its green "speculation was faster" kept its colour in a disabled label (Xvfb).
            said = verdict_html(c)
            self.verdict.setText(re.sub(r"color:#[0-9a-fA-F]{6};?", "", said) if why else said)
        # Bit-exact is offered for this conversation's own comparison only: re-running another's is no remedy.
        differs = c is not None and c.greedy and not c.identical and not c.exact
        self.exact_button.setVisible(differs and not why)

    def _start(self) -> None:
        self._outdated = False
        self.comparison = None
        for lane, view in self.views.items():
            view.clear_tokens()
            self.figures[lane].setText(_WAITING)
        self.verdict.setText("Running plain decoding first, then speculation…")
        self._verdict_of = None
        self.mark.hide()
        self.verdict.setEnabled(True)
        self.exact_button.hide()
        self._set_running(True)

    def _on_exact_button_clicked(self) -> None:
        self.exact_button.hide()
        self._verdict_of = None
        self.verdict.setText(
            "Reloading the target for bit-exact verification; the comparison runs again once it is loaded."
        )
        self.exact_requested.emit()

    def _scroll_with(self, lane: Lane, _value: int) -> None:
        """Scroll the other answer to the token at the top of ``lane``'s."""
        if self._scrolling or (n := self.views[lane].answer_token_at_top()) is None:
            return
        self._scrolling = True
        try:
            other = Lane.SPECULATIVE if lane is Lane.PLAIN else Lane.PLAIN
            self.views[other].scroll_to_answer_token(n)
        finally:
            self._scrolling = False

    def _set_running(self, running: bool) -> None:
        self.running = running
        self.stop_button.setEnabled(running)
