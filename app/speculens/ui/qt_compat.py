"""Start-up checks, so the user gets a sentence instead of a crash: a broken Qt binding, and the system
libraries Qt's X11 plugin needs.

PySide6 6.12.0 on CPython 3.11 returns ``None``/``True`` from its wrappers without taking a reference
(harmless on 3.12+, where those objects are immortal). Every call of a ``void`` method such as
``setText`` drops one reference to ``None``, and every ``emit()`` one to ``True``; after some minutes the
interpreter aborts with "Fatal Python error: none_dealloc". PySide6 6.11.3 is fine. The check measures
the bug instead of trusting version numbers.

Qt's xcb plugin (the X11 window system) links against X libraries that PySide6's wheel does not carry and a
plain desktop install may lack; without them Qt aborts with "Could not load the Qt platform plugin xcb",
naming none of them. :func:`check_platform_libraries` loads each one as Qt would and names the packages.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from speculens.errors import OperationError

_CALLS = 32


class BrokenBindingError(OperationError):
    """The installed PySide6 would crash this Python; the message says what to install."""


def binding_drops_references() -> bool:
    """Whether calling a ``void`` Qt method loses a reference to ``None`` (the PySide6 6.12.0 bug)."""
    from PySide6.QtCore import QObject

    probe = QObject()
    before = sys.getrefcount(None)
    for _ in range(_CALLS):
        probe.setObjectName("probe")
    return sys.getrefcount(None) - before <= -_CALLS // 2


def check_binding() -> None:
    """Raise :class:`BrokenBindingError` when the Qt binding has the reference bug.

    Raises:
        BrokenBindingError: with the versions and the fix.
    """
    if binding_drops_references():
        import PySide6

        raise BrokenBindingError(
            f"PySide6 {PySide6.__version__} has a reference-counting bug on Python "
            f"{sys.version_info.major}.{sys.version_info.minor} that crashes Speculens after a few minutes. "
            "Install PySide6 6.11 (pip install 'PySide6<6.12') or use Python 3.12 or newer."
        )


# The X11 libraries libQt6XcbQpa links against, with the packages that provide them (Debian/Ubuntu, Fedora).
XCB_LIBRARIES: dict[str, tuple[str, str]] = {
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
}


class MissingSystemLibrariesError(OperationError):
    """Qt's window-system plugin cannot start: system libraries are missing (the message names them)."""


def uses_xcb(argv: Sequence[str], environ: Mapping[str, str], platform: str = sys.platform) -> bool:
    """Whether Qt will try its X11 (xcb) plugin first: on Linux, unless another platform is asked for
    (``-platform``, ``QT_QPA_PLATFORM``) or the session is Wayland."""
    if not platform.startswith("linux"):
        return False
    if "-platform" in argv:
        index = list(argv).index("-platform")
        return index + 1 < len(argv) and argv[index + 1].startswith("xcb")
    chosen = environ.get("QT_QPA_PLATFORM", "")
    if chosen:
        return chosen.split(";")[0].startswith("xcb")
    return not environ.get("WAYLAND_DISPLAY")


def _loads(soname: str) -> bool:
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def missing_xcb_libraries(loads: Callable[[str], bool] = _loads) -> list[str]:
    """The libraries of :data:`XCB_LIBRARIES` the dynamic loader cannot load."""
    return [soname for soname in XCB_LIBRARIES if not loads(soname)]


def check_platform_libraries(
    argv: Sequence[str], environ: Mapping[str, str] | None = None, loads: Callable[[str], bool] = _loads
) -> None:
    """Raise :class:`MissingSystemLibrariesError` when Qt will use X11 and a library it needs is missing.

    Raises:
        MissingSystemLibrariesError: naming the libraries and the command that installs them.
    """
    if not uses_xcb(argv, os.environ if environ is None else environ):
        return
    missing = missing_xcb_libraries(loads)
    if not missing:
        return
    debian = sorted({XCB_LIBRARIES[s][0] for s in missing})
    fedora = sorted({XCB_LIBRARIES[s][1] for s in missing})
    raise MissingSystemLibrariesError(
        f"the window cannot open: Qt's X11 plugin needs {', '.join(missing)}, which this system does not "
        f"have. Install them — Debian/Ubuntu: sudo apt install {' '.join(debian)}; Fedora: sudo dnf install "
        f"{' '.join(fedora)} — and start Speculens again."
    )
