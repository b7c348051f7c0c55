"""Compare: the same prompt decoded plainly and with speculation, side by side.

The worker runs the two halves one after the other on the same models (so they never compete for the
CPU/GPU); this view streams each into its own token view and then shows the measured speedup and whether
the outputs are identical — which greedy decoding guarantees and sampling does not.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGridLayout, QLabel, QVBoxLayout, QWidget

from speculens.ui.token_view import TokenView
from speculens.ui.worker import LANE_PLAIN, LANE_SPECULATIVE, CompareResult, TaggedEvent


class CompareView(QWidget):
    """Two token views and a verdict.

    Args:
        parent: the Qt parent.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.request_id: int | None = None
        self.prompt = QLabel("Type a message and press <b>Compare</b> in the chat.", self)
        self.prompt.setWordWrap(True)
        self.views = {LANE_PLAIN: TokenView(self), LANE_SPECULATIVE: TokenView(self)}
        self.headers = {LANE_PLAIN: QLabel("<b>Plain decoding</b>", self), LANE_SPECULATIVE: QLabel(self)}
        self.figures = {LANE_PLAIN: QLabel(self), LANE_SPECULATIVE: QLabel(self)}
        self.views[LANE_PLAIN].setAccessibleName("Plain decoding answer")
        self.views[LANE_SPECULATIVE].setAccessibleName("Speculative decoding answer")
        self.verdict = QLabel(self)
        self.verdict.setWordWrap(True)
        self.verdict.setTextFormat(Qt.TextFormat.RichText)
        self.verdict.setAccessibleName("Comparison result")
        grid = QGridLayout()
        for col, lane in enumerate((LANE_PLAIN, LANE_SPECULATIVE)):
            grid.addWidget(self.headers[lane], 0, col)
            grid.addWidget(self.views[lane], 1, col)
            grid.addWidget(self.figures[lane], 2, col)
        grid.setRowStretch(1, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.prompt)
        layout.addLayout(grid, 1)
        layout.addWidget(self.verdict)

    def start(self, request_id: int, prompt: str, strategy: str) -> None:
        """A comparison was queued."""
        self.request_id = request_id
        short = prompt if len(prompt) < 200 else prompt[:200] + "…"
        self.prompt.setText(f"Prompt: <i>{html.escape(short)}</i>")
        self.headers[LANE_SPECULATIVE].setText(f"<b>Speculative decoding</b> ({html.escape(strategy)})")
        for lane in self.views:
            self.views[lane].clear_tokens()
            self.figures[lane].setText("waiting…")
        self.verdict.setText("Running plain decoding first, then speculation…")

    def add_events(self, events: Sequence[TaggedEvent]) -> None:
        """Append this comparison's steps to the matching side."""
        from speculens.engine.events import FinishEvent, StepEvent

        for lane, view in self.views.items():
            steps = [
                t.event
                for t in events
                if t.request_id == self.request_id and t.lane == lane and isinstance(t.event, StepEvent)
            ]
            if steps:
                view.append_steps(steps)
                s = steps[-1].stats
                self.figures[lane].setText(f"{s.n_generated} tokens · {s.tokens_per_second:.1f} tokens/s")
            for t in events:
                if t.request_id == self.request_id and t.lane == lane and isinstance(t.event, FinishEvent):
                    s = t.event.stats
                    self.figures[lane].setText(
                        f"{s.n_generated} tokens in {s.n_steps} target passes · "
                        f"{s.tokens_per_second:.1f} tokens/s"
                    )

    def show_result(self, request_id: int, result: CompareResult) -> None:
        """Show the speedup and the identical-output check."""
        if request_id != self.request_id:
            return
        self.request_id = None
        if result.identical:
            same = "<span style='color:#2ea043'><b>✓ identical outputs</b></span>"
        else:
            n = next(
                (
                    i
                    for i, (a, b) in enumerate(
                        zip(result.plain.tokens, result.speculative.tokens, strict=False)
                    )
                    if a != b
                ),
                min(len(result.plain.tokens), len(result.speculative.tokens)),
            )
            same = f"<span style='color:#d73a49'><b>✗ outputs differ</b></span> from token {n + 1}"
            if result.greedy:
                same += " — greedy speculation must reproduce plain decoding exactly; please report this"
            else:
                same += " (expected: with temperature > 0 the two runs sample differently)"
        self.verdict.setText(
            f"<span style='font-size:large'>Speedup <b>×{result.speedup:.2f}</b></span> "
            f"({result.speculative.stats.tokens_per_second:.1f} vs "
            f"{result.plain.stats.tokens_per_second:.1f} tokens/s) · {same}"
        )

    def show_failure(self, request_id: int, message: str) -> None:
        """Say why the comparison did not run."""
        if request_id == self.request_id:
            self.request_id = None
            self.verdict.setText(html.escape(message))
