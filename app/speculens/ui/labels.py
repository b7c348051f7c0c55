"""A word-wrapped label that keeps the height its text needs."""

from __future__ import annotations

from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QWidget


class WrappedLabel(QLabel):
    """A word-wrapped label that asks for its text's height at its width: a layout leaves a wrapped label's height
    out of its minimum, so in a short dock the Teach chart's caption lay over the chart's axis and Compare's
    verdict was cut off mid-sentence."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWordWrap(True)

    def setText(self, text: str) -> None:
        super().setText(text)
        self._fit()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        if not self.isVisible():  # a hidden tab's label has no width of its own yet: it would ask for too much
            return
        height = self.heightForWidth(self.width()) if self.text() else 0
        if height >= 0 and height != self.minimumHeight():
            self.setMinimumHeight(height)
