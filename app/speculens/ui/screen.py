"""Window sizes that fit the screen they open on."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QScrollArea, QWidget

# Left for the window manager's frame and title bar, which the available area does not count.
FRAME_W, FRAME_H = 16, 48


def resize_within_screen(widget: QWidget, width: int, height: int) -> None:
    """Resize to ``width × height``, or smaller where the screen's free area is smaller: a window taller than the
    screen hides its status line (the pair lab's progress and time left) below the edge. A window with a parent
    is placed over the middle of its parent's window, and kept inside the screen's free area (left to the window
    manager, the Models window opened with its bottom third below the screen)."""
    screen = widget.screen() or QGuiApplication.primaryScreen()
    if screen is None:
        widget.resize(width, height)
        return
    area = screen.availableGeometry()
    width = min(width, area.width() - FRAME_W)
    height = min(height, area.height() - FRAME_H)
    widget.resize(width, height)
    parent = widget.parentWidget()
    if parent is not None and widget.isWindow():
        centre = parent.window().frameGeometry().center()
        x = max(area.left(), min(centre.x() - width // 2, area.right() - width - FRAME_W))
        y = max(area.top(), min(centre.y() - height // 2, area.bottom() - height - FRAME_H))
        widget.move(x, y)


class _Scroll(QScrollArea):
    """A scroll area that scrolls one way only and is never narrower (or, ``sideways``, shorter) than its widget
    can be the other way, as that widget's minimum stands now: a dock at 380 pixels cut Teach's Next step off, and
    a minimum taken once, when it was built, would miss what the widget shows later."""

    def __init__(self, widget: QWidget, parent: QWidget | None, sideways: bool) -> None:
        super().__init__(parent)
        self._sideways = sideways
        self.setWidget(widget)
        self.setWidgetResizable(True)
        off = Qt.ScrollBarPolicy.ScrollBarAlwaysOff
        (self.setVerticalScrollBarPolicy if sideways else self.setHorizontalScrollBarPolicy)(off)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        # Its contents take Tab; the frame itself showed no focus, and a keyboard tour's Tab seemed stuck on it.
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        widget.installEventFilter(self)

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        widget = self.widget()
        if widget is None:
            return hint
        least = widget.minimumSizeHint().expandedTo(widget.minimumSize())
        if self._sideways:
            return QSize(hint.width(), least.height() + self.horizontalScrollBar().sizeHint().height())
        return QSize(least.width() + self.verticalScrollBar().sizeHint().width(), hint.height())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()  # its minimum may have changed: the dock's layout asks again
        return super().eventFilter(watched, event)


def scrolled(widget: QWidget, parent: QWidget | None = None, sideways: bool = False) -> QScrollArea:
    """``widget`` in a scroll area that follows its width (text wraps; no sideways scrolling) and scrolls up and down
    when the room is shorter than the widget's minimum: in a short dock (a 1280×720 screen) Qt laid its parts over
    one another instead. ``sideways``: the other way round, it follows the height and scrolls sideways where the room
    is narrower than the widget's minimum (the charts, whose row of plots a narrow window cut off)."""
    return _Scroll(widget, parent, sideways)
