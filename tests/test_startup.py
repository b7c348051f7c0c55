"""Start-up checks that run before Qt: the X11 plugin's system libraries are named when missing (Qt-free)."""

from __future__ import annotations

import pytest

from speculens.ui.qt_compat import (
    XCB_LIBRARIES,
    MissingSystemLibrariesError,
    check_platform_libraries,
    missing_xcb_libraries,
    uses_xcb,
)


@pytest.mark.parametrize(
    ("argv", "environ", "platform", "expected"),
    [
        ([], {}, "linux", True),
        ([], {"WAYLAND_DISPLAY": "wayland-0"}, "linux", False),
        ([], {"WAYLAND_DISPLAY": "wayland-0", "QT_QPA_PLATFORM": "xcb"}, "linux", True),
        ([], {"QT_QPA_PLATFORM": "offscreen"}, "linux", False),
        ([], {"QT_QPA_PLATFORM": "xcb;wayland"}, "linux", True),
        (["-platform", "offscreen"], {}, "linux", False),
        (["-platform", "xcb"], {"WAYLAND_DISPLAY": "w"}, "linux", True),
        ([], {}, "darwin", False),
        ([], {}, "win32", False),
    ],
)
def test_when_qt_will_use_x11(argv: list[str], environ: dict[str, str], platform: str, expected: bool) -> None:
    assert uses_xcb(argv, environ, platform) is expected


def test_missing_libraries_are_named_with_the_packages_to_install() -> None:
    absent = {"libxcb-icccm.so.4", "libxcb-keysyms.so.1"}  # what a plain Debian desktop lacked
    assert missing_xcb_libraries(lambda soname: soname not in absent) == sorted(absent, key=list(XCB_LIBRARIES).index)
    with pytest.raises(MissingSystemLibrariesError) as raised:
        check_platform_libraries(["speculens"], {"DISPLAY": ":0"}, loads=lambda soname: soname not in absent)
    message = raised.value.message
    assert "libxcb-icccm.so.4" in message and "libxcb-keysyms.so.1" in message
    assert "sudo apt install libxcb-icccm4 libxcb-keysyms1" in message
    assert "xcb-util-wm" in message  # Fedora's name for the same library


def test_nothing_is_reported_when_everything_loads_or_x11_is_not_used() -> None:
    check_platform_libraries(["speculens"], {}, loads=lambda _soname: True)
    check_platform_libraries(["speculens"], {"QT_QPA_PLATFORM": "offscreen"}, loads=lambda _soname: False)


def test_the_real_loader_finds_libc_style_names() -> None:
    # The check dlopens exactly as Qt would; a library every Linux system with X has is found.
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("X11 libraries are a Linux matter")
    from speculens.ui.qt_compat import _loads

    assert _loads("libc.so.6") and not _loads("libspeculens-does-not-exist.so.9")
