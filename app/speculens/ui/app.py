"""Create the ``QApplication``, follow the system's light/dark scheme, and show the main window."""

from __future__ import annotations

import html
import importlib.resources
import sys
from collections.abc import Sequence
from types import TracebackType

from PySide6.QtCore import QCoreApplication, Qt, QThread, QTimer
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPalette
from PySide6.QtWidgets import QApplication, QMessageBox, QWidget

from speculens.ui.qt_compat import check_binding, check_platform_libraries

ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)

_collector: object | None = None  # see collect_garbage_on_the_gui_thread


def collect_garbage_on_the_gui_thread() -> None:
    """Run Python's cyclic garbage collector on the GUI thread only, from now on (idempotent; needs the
    ``QApplication``).

    The collector otherwise runs in whichever thread allocates when a threshold is crossed. When it frees a Qt
    object there (a closed window's menu, held in a reference cycle) while the GUI thread deletes widgets, each
    waits for the other: a test run hung with the engine's thread in ``gc_collect`` → ``QMenu::~QMenu`` → Shiboken
    waiting for the GIL, and the GUI thread in ``QObject::~QObject`` waiting for a Qt mutex. pyqtgraph's
    ``GarbageCollector`` turns automatic collection off and collects, generation by generation as the thresholds
    would, from a one-second timer on the GUI thread (the approach of calibre and qutebrowser).
    """
    global _collector
    if _collector is None:
        from pyqtgraph.util.garbage_collector import GarbageCollector

        _collector = GarbageCollector(interval=1.0)


def app_icon() -> QIcon:
    """The application icon at every size the icons package has (Qt picks the sharpest for the DPI)."""
    icon = QIcon()
    try:
        folder = importlib.resources.files("speculens.icons")
        svg = folder / "speculens.svg"
        if svg.is_file():
            icon.addFile(str(svg))
        for size in ICON_SIZES:
            png = folder / "png" / f"speculens-{size}.png"
            if png.is_file():
                icon.addFile(str(png))
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass  # a build without the icons package still runs, with Qt's default icon
    return icon


def dark_palette() -> QPalette:
    """A dark palette for the Fusion style (used where the platform theme does not provide one)."""
    p = QPalette()
    base, window, text = QColor(30, 30, 32), QColor(45, 45, 48), QColor(230, 230, 230)
    disabled = QColor(130, 130, 130)
    for role, color in (
        (QPalette.ColorRole.Window, window),
        (QPalette.ColorRole.WindowText, text),
        (QPalette.ColorRole.Base, base),
        (QPalette.ColorRole.AlternateBase, window),
        (QPalette.ColorRole.ToolTipBase, QColor(60, 60, 64)),
        (QPalette.ColorRole.ToolTipText, text),
        (QPalette.ColorRole.Text, text),
        (QPalette.ColorRole.Button, window),
        (QPalette.ColorRole.ButtonText, text),
        (QPalette.ColorRole.Link, QColor(88, 166, 255)),
        (QPalette.ColorRole.Highlight, QColor(56, 132, 255)),
        (QPalette.ColorRole.HighlightedText, QColor(255, 255, 255)),
        (QPalette.ColorRole.PlaceholderText, disabled),
    ):
        p.setColor(role, color)
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, disabled)
    return p


def apply_color_scheme(app: QApplication) -> None:
    """Use a dark palette when the system asks for dark, the style's own palette otherwise."""
    scheme = QGuiApplication.styleHints().colorScheme()
    if scheme == Qt.ColorScheme.Dark:
        app.setPalette(dark_palette())
    else:
        app.setPalette(app.style().standardPalette())


def create_app(argv: Sequence[str] | None = None) -> QApplication:
    """The application object, styled and themed (reuses an existing one, as tests have).

    Args:
        argv: command-line arguments for Qt.

    Raises:
        BrokenBindingError: the installed PySide6 would crash on this Python.
        MissingSystemLibrariesError: Qt's X11 plugin lacks system libraries (they are named).
    """
    existing = QApplication.instance()
    if isinstance(existing, QApplication):
        collect_garbage_on_the_gui_thread()
        return existing
    check_binding()
    args = list(argv) if argv is not None else sys.argv[:1]
    check_platform_libraries(args)
    # The engine's worker is a Python thread that holds the GIL between llama.cpp calls; with the default
    # 5 ms switch interval the GUI thread can wait that long for every Python callback. 1 ms keeps the
    # window's event loop responsive during generation for a negligible cost to the worker.
    sys.setswitchinterval(0.001)
    QGuiApplication.setHighDpiScaleFactorRoundingPolicy(Qt.HighDpiScaleFactorRoundingPolicy.PassThrough)
    app = QApplication(args)
    app.setApplicationName("Speculens")
    app.setOrganizationName("Speculens")
    app.setApplicationDisplayName("Speculens")
    app.setDesktopFileName("io.speculens.Speculens")  # matches packaging/linux/*.desktop
    # Fusion looks the same everywhere and takes a palette fully, which the light/dark switch relies on.
    app.setStyle("Fusion")
    app.setWindowIcon(app_icon())
    apply_color_scheme(app)
    QGuiApplication.styleHints().colorSchemeChanged.connect(lambda _scheme: apply_color_scheme(app))
    collect_garbage_on_the_gui_thread()  # before the engine's thread starts
    return app


def report_uncaught(parent: QWidget) -> None:
    """Show uncaught exceptions of the window's thread in a message box, besides the log (see logging_setup): a
    tour's Pair lab failed to open with nothing on screen, its traceback only in the log. One box at a time: a fault
    in a repeated slot (a timer's) would otherwise pile them up."""
    logged = sys.excepthook
    showing = [False]

    def show(exc: BaseException) -> None:
        from speculens.logging_setup import log_file

        try:
            QMessageBox.critical(
                parent,
                "Something went wrong",
                f"<p>{html.escape(f'{type(exc).__name__}: {exc}')}</p><p>What you asked for did not finish; the rest "
                "of Speculens goes on, and your conversations are saved as they were. The details are in the log, "
                f"<code>{html.escape(str(log_file()))}</code>: please include it if you report this.</p>",
            )
        finally:
            showing[0] = False

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        logged(exc_type, exc, tb)
        if not issubclass(exc_type, Exception) or showing[0]:  # KeyboardInterrupt, SystemExit: not faults
            return
        app = QCoreApplication.instance()
        if app is None or QThread.currentThread() != app.thread():  # a box belongs to the window's thread: logged
            return
        showing[0] = True
        QTimer.singleShot(0, lambda: show(exc))  # after the failing slot has returned

    sys.excepthook = hook


def run(argv: Sequence[str] | None = None) -> int:
    """Start the GUI and return its exit status.

    Args:
        argv: command-line arguments for Qt.
    """
    app = create_app(argv)
    # Imported after the QApplication exists: the window module pulls in pyqtgraph, which wants one.
    from speculens.ui.main_window import MainWindow

    window = MainWindow()
    report_uncaught(window)
    window.show()
    # After the first paint, so the window appears at once and the welcome question comes on top of it.
    QTimer.singleShot(0, window.greet)
    return app.exec()
