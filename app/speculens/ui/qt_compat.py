"""A start-up check for a broken Qt binding, so the user gets a sentence instead of a crash.

PySide6 6.12.0 on CPython 3.11 returns ``None``/``True`` from its wrappers without taking a reference
(harmless on 3.12+, where those objects are immortal). Every call of a ``void`` method such as
``setText`` drops one reference to ``None``, and every ``emit()`` one to ``True``; after some minutes the
interpreter aborts with "Fatal Python error: none_dealloc". PySide6 6.11.3 is fine. The check measures
the bug instead of trusting version numbers.
"""

from __future__ import annotations

import sys

_CALLS = 32


class BrokenBindingError(RuntimeError):
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
