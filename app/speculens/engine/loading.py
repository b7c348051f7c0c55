"""Progress and cancellation of a model load, for whoever started it.

A load is several steps deep in the engine (llama.cpp reading each model's weights, then timing this machine:
flash attention, the target's batches, the draft model), and only the GUI's worker wants to watch it. Rather than
thread a callback through every constructor, the worker runs the load inside :func:`watching`; the engine
reports its steps with :func:`report` and checks :func:`check` before every decode call, both of which do
nothing outside a watched load (the CLI, the tests, the Pair lab). llama.cpp's own loading progress is asked for
through :func:`llama_progress`, which also stops the weights' reading when the load is cancelled.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

# (what, done, total): what is being done, and how far, in bytes of a model file; total 0 when unknown.
Report = Callable[[str, int, int], None]


class LoadCancelled(Exception):
    """The user cancelled the load; nothing is loaded. Control flow, not a :class:`~speculens.errors.SpeculensError`:
    the code that reports a failed load (or a refused draft) lets it through to whoever watches the load."""


@dataclass
class LoadWatch:
    """One load's cancel flag and where its progress goes (called at most ten times a second per step)."""

    cancel: threading.Event
    report: Report
    _last: tuple[str, float] = field(default=("", 0.0))

    def tell(self, what: str, done: int = 0, total: int = 0) -> None:
        now = time.monotonic()
        if what != self._last[0] or now - self._last[1] >= 0.1 or (total and done >= total):
            self._last = (what, now)
            self.report(what, done, total)


_watch: contextvars.ContextVar[LoadWatch | None] = contextvars.ContextVar("speculens_load_watch", default=None)


@contextlib.contextmanager
def watching(watch: LoadWatch) -> Iterator[LoadWatch]:
    """Run a load, on this thread, under ``watch``."""
    token = _watch.set(watch)
    try:
        yield watch
    finally:
        _watch.reset(token)


def check() -> None:
    """Stop a watched load that was cancelled.

    Raises:
        LoadCancelled: it was.
    """
    watch = _watch.get()
    if watch is not None and watch.cancel.is_set():
        raise LoadCancelled("Loading was cancelled: no model is loaded.")


def report(what: str, done: int = 0, total: int = 0) -> None:
    """Say what a watched load does now (``done`` of ``total`` bytes, when known)."""
    watch = _watch.get()
    if watch is not None:
        watch.tell(what, done, total)


def llama_progress(what: str, total: int) -> Callable[[float], bool] | None:
    """For llama.cpp's model loading: a function of its fraction read that reports it and returns whether to go on
    (``None`` outside a watched load)."""
    watch = _watch.get()
    if watch is None:
        return None

    def progress(fraction: float) -> bool:
        watch.tell(what, int(fraction * total), total)
        return not watch.cancel.is_set()

    return progress
