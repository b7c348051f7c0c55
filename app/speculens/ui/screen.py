"""Window sizes that fit the screen they open on."""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget

# Left for the window manager's frame and title bar, which the available area does not count.
FRAME_W, FRAME_H = 16, 48


def resize_within_screen(widget: QWidget, width: int, height: int) -> None:
    """Resize to ``width × height``, or smaller where the screen's free area is smaller: a window taller than the
    screen hides its status line (the pair lab's progress and time left) below the edge."""
    screen = widget.screen() or QGuiApplication.primaryScreen()
    if screen is not None:
        area = screen.availableGeometry()
        width = min(width, area.width() - FRAME_W)
        height = min(height, area.height() - FRAME_H)
    widget.resize(width, height)
