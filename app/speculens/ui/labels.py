"""What wraps rather than widens the window: a word-wrapped label that keeps the height its text needs, and a row
of button groups that wraps to a second line."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPoint, QRect, QSize, Qt
from PySide6.QtGui import QFocusEvent, QResizeEvent, QShowEvent
from PySide6.QtWidgets import QLabel, QLayout, QLayoutItem, QSizePolicy, QWidget


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

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self._fit()  # sized while hidden (a tab behind another), it had not fitted: Teach's caption lay over its curve

    def _fit(self) -> None:
        if not self.isVisible():  # a hidden tab's label has no width of its own yet: it would ask for too much
            return
        height = self.heightForWidth(self.width()) if self.text() else 0
        if height >= 0 and height != self.minimumHeight():
            self.setMinimumHeight(height)


class LinksLabel(QLabel):
    """A label of links that Tab and Shift+Tab step through from the widgets around it: a QLabel taking the focus
    selects none of its links (no focus ring, and Enter did nothing), so a teacher's Shift+Tab twice and Enter from
    the message box, meant for the example links, took a link only by chance."""

    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setTextInteractionFlags(
            Qt.TextInteractionFlag.LinksAccessibleByMouse | Qt.TextInteractionFlag.LinksAccessibleByKeyboard
        )

    def focusInEvent(self, event: QFocusEvent) -> None:
        super().focusInEvent(event)
        if event.reason() in (Qt.FocusReason.TabFocusReason, Qt.FocusReason.BacktabFocusReason):
            # The first link coming forwards, the last coming back.
            self.focusNextPrevChild(event.reason() is Qt.FocusReason.TabFocusReason)


class ShrinkingLabel(QLabel):
    """A one-line label that gives way, cut at its right end, where a toolbar is too narrow for all of it (the pair's
    line took the compatibility badge and itself into a toolbar's overflow menu), down to ``least`` pixels, and takes
    the room there is up to its text's width (so what follows it stays beside it)."""

    def __init__(self, parent: QWidget | None = None, least: int = 240) -> None:
        super().__init__(parent)
        self._least = least
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

    def setText(self, text: str) -> None:
        super().setText(text)
        self._cap()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange, QEvent.Type.ContentsRectChange):
            self._cap()  # the text's width changed with them

    def _cap(self) -> None:
        self.setMaximumWidth(super().sizeHint().width())

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        return QSize(min(hint.width(), self._least), hint.height())

    def minimumSizeHint(self) -> QSize:
        return self.sizeHint()


class WrapRow(QLayout):
    """Groups side by side, the last one at the right edge (as a stretch before it would put it), and on lines of
    their own where the width is too narrow for them all: the chat's buttons in one row made 620 pixels the
    narrowest the window could be, and with its docks it could not shrink below 1141 (a tour's 1140-pixel window,
    and a laptop at 125% scaling has 1093)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self.setContentsMargins(0, 0, 0, 0)

    def addItem(self, item: QLayoutItem) -> None:
        self._items.append(item)

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    def expandingDirections(self) -> Qt.Orientation:
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self._place(QRect(0, 0, width, 0), move=False)

    def setGeometry(self, rect: QRect) -> None:
        super().setGeometry(rect)
        self._place(rect, move=True)

    def sizeHint(self) -> QSize:
        hints = [item.sizeHint() for item in self._items]
        width = sum(h.width() for h in hints) + self._gap() * max(len(hints) - 1, 0)
        return QSize(width, max((h.height() for h in hints), default=0))

    def minimumSize(self) -> QSize:
        size = QSize()
        for item in self._items:
            size = size.expandedTo(item.minimumSize())
        return size

    def _gap(self) -> int:
        return max(self.spacing(), 6)

    def _place(self, rect: QRect, move: bool) -> int:
        """Lay the items out in ``rect`` (``move``) or only measure; the height they take."""
        x, y, line = rect.x(), rect.y(), 0
        for i, item in enumerate(self._items):
            hint = item.sizeHint()
            if x > rect.x() and x + hint.width() > rect.right() + 1:  # no room left on this line
                x, y, line = rect.x(), y + line + self._gap(), 0
            left = max(x, rect.right() + 1 - hint.width()) if i == len(self._items) - 1 else x
            if move:
                item.setGeometry(QRect(QPoint(left, y), hint))
            x, line = left + hint.width() + self._gap(), max(line, hint.height())
        return y + line - rect.y()
