"""The application object: Python's garbage is collected on the GUI thread only."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
from PySide6.QtCore import QObject

pytestmark = pytest.mark.gui


class _Cycle(QObject):
    """A Qt object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        super().__init__()
        self.me = self


def test_garbage_is_collected_on_the_gui_thread_only(qtbot) -> None:  # type: ignore[no-untyped-def]
    """A cycle holding Qt objects, collected in the engine's thread while the GUI thread deleted widgets, once
    hung a whole test run (each thread waiting for the other). The app collects on the GUI thread only."""
    assert not gc.isenabled()  # create_app's collector (the tests install it as the app does)
    freed_in: list[str] = []
    cycle = _Cycle()
    ref = weakref.ref(cycle)
    weakref.finalize(cycle, lambda: freed_in.append(threading.current_thread().name))
    del cycle

    def churn() -> None:  # cyclic garbage enough to cross every generation's threshold many times over
        for _ in range(200_000):
            junk: list[object] = []
            junk.append(junk)

    worker = threading.Thread(target=churn, name="speculens-engine")
    worker.start()
    worker.join()
    assert ref() is not None and freed_in == []  # the worker thread collected nothing
    qtbot.waitUntil(lambda: ref() is None, timeout=5_000)
    assert freed_in == ["MainThread"]
