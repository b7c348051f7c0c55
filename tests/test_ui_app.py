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


def test_an_uncaught_fault_in_the_window_is_shown_not_only_logged(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tour's Pair lab failed to open with nothing on screen: its ImportError was only in the log."""
    import sys

    from PySide6.QtWidgets import QMessageBox, QWidget

    from speculens.ui.app import report_uncaught

    logged: list[type[BaseException]] = []
    shown: list[str] = []
    monkeypatch.setattr(sys, "excepthook", lambda exc_type, exc, tb: logged.append(exc_type))
    monkeypatch.setattr(QMessageBox, "critical", lambda parent, title, text: shown.append(text))
    parent = QWidget()
    qtbot.addWidget(parent)
    report_uncaught(parent)
    for _ in range(2):  # a repeated fault: one box at a time
        try:
            raise ImportError("cannot import name 'crowded'")
        except ImportError as exc:
            sys.excepthook(type(exc), exc, exc.__traceback__)
    qtbot.waitUntil(lambda: bool(shown))
    qtbot.wait(50)
    assert logged == [ImportError, ImportError] and len(shown) == 1
    assert "ImportError: cannot import name &#x27;crowded&#x27;" in shown[0] and "speculens.log" in shown[0]
    sys.excepthook(KeyboardInterrupt, KeyboardInterrupt(), None)  # not a fault: logged as before, no box
    qtbot.wait(50)
    assert len(shown) == 1 and logged[-1] is KeyboardInterrupt
