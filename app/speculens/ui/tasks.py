"""Short background tasks (file reads, network calls) whose results come back on the GUI thread.

Reading GGUF headers, checking a pair, searching the hub and downloading all block; :class:`TaskRunner`
runs each on its own thread and delivers ``done(result)`` or ``failed(message)`` through queued signals,
so the window never waits. Failures carry the user's sentence of a :class:`~speculens.errors.SpeculensError`;
anything else is a bug, logged with its traceback.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

from speculens.errors import SpeculensError

log = logging.getLogger(__name__)


class TaskRunner(QObject):
    """Runs functions on short-lived background threads and reports back on the GUI thread.

    Args:
        parent: the Qt parent.

    Signals:
        task_finished(int, object): a task's id and its result.
        task_failed(int, str): a task's id and its error message.
    """

    task_finished = Signal(int, object)
    task_failed = Signal(int, str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._next = 0
        self._callbacks: dict[int, tuple[Callable[[Any], None], Callable[[str], None] | None]] = {}
        self._threads: list[threading.Thread] = []
        self.task_finished.connect(self._on_self_task_finished)
        self.task_failed.connect(self._on_self_task_failed)

    def run(
        self,
        fn: Callable[[], Any],
        done: Callable[[Any], None],
        failed: Callable[[str], None] | None = None,
    ) -> int:
        """Call ``fn()`` on a thread; then ``done(result)`` or ``failed(message)`` on the GUI thread."""
        self._next += 1
        task_id = self._next
        self._callbacks[task_id] = (done, failed)

        def body() -> None:
            try:
                result = fn()
            except SpeculensError as exc:
                self.task_failed.emit(task_id, exc.message)
            except OSError as exc:
                self.task_failed.emit(task_id, f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "))
            except Exception as exc:  # a bug: reported, never lost on a thread
                log.exception("background task failed")
                self.task_failed.emit(task_id, f"Unexpected error ({type(exc).__name__}: {exc}); see the log.")
            else:
                self.task_finished.emit(task_id, result)

        thread = threading.Thread(target=body, name=f"speculens-task-{task_id}", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()
        return task_id

    def wait(self, timeout: float = 10.0) -> None:
        """Join the running tasks (the window is closing)."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _on_self_task_finished(self, task_id: int, result: object) -> None:
        done, _ = self._callbacks.pop(task_id, (None, None))
        if done is not None:
            done(result)

    def _on_self_task_failed(self, task_id: int, message: str) -> None:
        _, failed = self._callbacks.pop(task_id, (None, None))
        if failed is not None:
            failed(message)
