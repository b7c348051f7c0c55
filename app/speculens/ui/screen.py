"""Window sizes that fit the screen they open on."""

from __future__ import annotations

from PySide6.QtCore import Qt
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


def scrolled(widget: QWidget, parent: QWidget | None = None, sideways: bool = False) -> QScrollArea:
    """``widget`` in a scroll area that follows its width (text wraps; no sideways scrolling) and scrolls up and down
    when the room is shorter than the widget's minimum: in a short dock (a 1280×720 screen) Qt laid its parts over
    one another instead. ``sideways``: the other way round, it follows the height and scrolls sideways where the room
    is narrower than the widget's minimum (the charts, whose row of plots a narrow window cut off)."""
    scroll = QScrollArea(parent)
    scroll.setWidget(widget)
    scroll.setWidgetResizable(True)
    off = Qt.ScrollBarPolicy.ScrollBarAlwaysOff
    (scroll.setVerticalScrollBarPolicy if sideways else scroll.setHorizontalScrollBarPolicy)(off)
    if not sideways:  # never narrower than the widget can be: a dock at 380 pixels cut Teach's Next step off
        scroll.setMinimumWidth(widget.minimumSizeHint().width() + scroll.verticalScrollBar().sizeHint().width())
    scroll.setFrameShape(QScrollArea.Shape.NoFrame)
    return scroll
