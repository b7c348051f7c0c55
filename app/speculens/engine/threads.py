"""Fewer threads while another program keeps a core busy.

llama.cpp's CPU threads meet at a barrier after every operation, so one thread the operating system holds back
holds them all back: on this project's 2-core VM, with one core kept busy by another process, the demo target
decoded 7.9 tokens/s with 2 threads and 13.6–17.7 with 1 (it decodes ~26 with 2 on a quiet machine). A user's
desktop is rarely quiet (a browser, a build, an indexer), and a fixed thread count cannot know.

The sign is in our own process: while llama.cpp decodes, each of its threads works or spins at a barrier, so the
process uses ``n`` cores' worth of CPU time per second of a decode call with ``n`` threads on a quiet machine
(1.99 measured with 2 threads), and less when the system gives its threads less (1.43 with one core busy). So
:class:`ThreadGovernor` watches the CPU time of one-token decode calls: when the last few got less than ``n`` minus
a third of a core, it tries ``n − 1`` threads for a few steps and keeps them if they decode faster. While fewer
than the full count, it tries one more now and then (less and less often while that loses), so the threads come
back when the other program stops. The answer never depends on it: thread counts change the speed of llama.cpp's
kernels, not their results (each output row is computed by one thread). Only automatic thread counts are governed
(an explicit ``--threads`` is the user's), and never in bit-exact mode, whose invariance was measured with its
thread count.
"""

from __future__ import annotations

import statistics
from collections import Counter, deque
from dataclasses import dataclass, field

import psutil

from speculens.engine.events import StepEvent

# Other programs using more than this many cores' worth of CPU time beyond the cores llama.cpp's threads leave free
# make timings slower and noisier than the machine can do (see :func:`crowded`).
BUSY_CORES = 0.6
MIN_WINDOW_S = 0.25  # the shortest CpuWindow that gives a share (of each CPU's time)


class CpuWindow:
    """What share of the CPUs *other* programs used between its creation and :meth:`others_share`: the system's
    busy time less this process's, over the CPUs' total (psutil reads it on Linux, macOS and Windows alike). The
    pair lab flags its figures with it, and a load its draft model's verdict: a model timed while something else
    held the cores looks dearer than it is."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._start = self._read()

    def _read(self) -> tuple[float, float, float] | None:
        """(busy, total) seconds of all CPUs and this process's CPU seconds, or ``None`` where unreadable."""
        try:
            times = psutil.cpu_times()._asdict()
            own = self._process.cpu_times()
        except (psutil.Error, OSError):
            return None
        # Guest time is inside user time already (Linux counts it twice over).
        total = sum(v for k, v in times.items() if k not in ("guest", "guest_nice"))
        idle = times["idle"] + times.get("iowait", 0.0)
        return total - idle, total, own.user + own.system

    def others_share(self) -> float | None:
        """Other programs' share of the CPUs since the window opened (0 to 1), or ``None`` where unknown, or the
        window too short to tell: the system counts CPU time in ticks of 10 ms, so a window of a few ticks could
        read tens of percent of noise."""
        end = self._read()
        if self._start is None or end is None or end[1] - self._start[1] < MIN_WINDOW_S * (psutil.cpu_count() or 1):
            return None
        busy = (end[0] - self._start[0]) - (end[2] - self._start[2])
        return min(1.0, max(0.0, busy / (end[1] - self._start[1])))


def crowded(share: float | None, threads: int, cpus: int | None = None) -> bool:
    """Whether other programs, using ``share`` of the ``cpus`` (:meth:`CpuWindow.others_share`; the machine's, by
    default), took time that llama.cpp's ``threads`` needed: more than :data:`BUSY_CORES` of a core beyond the cores
    those threads leave free. A share of all the CPUs alone misjudged both ends: on four cores, four threads and one
    core kept busy by another program read 25%, under the 30% that counted as busy, while every barrier waited for
    the thread that program held back; on sixteen cores with eight threads, 30% fits beside them. On two cores with
    two threads, as on this project's VM, this is the 30% it was."""
    if share is None:
        return False
    cpus = cpus or _cpus()
    return share * cpus > max(0, cpus - threads) + BUSY_CORES


def crowding(share: float | None, threads: int) -> float | None:
    """``share`` where it crowded llama.cpp's ``threads`` (:func:`crowded`), else ``None``."""
    return share if crowded(share, threads) else None


def _cpus() -> int:
    """The machine's CPUs, over which :class:`CpuWindow` gives its shares."""
    return psutil.cpu_count() or 1


class ThreadGovernor:
    """The thread count for the next decode call, from the speed and CPU share of the last one-token calls.

    Args:
        full: the automatic thread count (the most it uses).
    """

    WINDOW = 5  # one-token calls whose CPU share and median time describe the present count
    TRIAL = 3  # one-token calls a trial of another count takes
    SHORT = 0.35  # cores' worth of CPU time missing per second of decoding that makes a trial of one thread fewer
    WIN = 0.95  # a trial wins when its median time is under this fraction of the present count's
    BACKOFF_FIRST = 32  # one-token calls before the next trial after a trial lost (doubling while they lose)
    BACKOFF_MAX = 512

    def __init__(self, full: int) -> None:
        self.full = max(1, full)
        self.count = self.full
        self._wall: deque[float] = deque(maxlen=self.WINDOW)
        self._cpu: deque[float] = deque(maxlen=self.WINDOW)
        self._trial: tuple[int, list[float]] | None = None  # the count tried and its calls' times
        self._before = 0.0  # the present count's median time when the trial began
        self._since = 0  # one-token calls at the present count since the last change or trial
        self._wait = {-1: 0, +1: self.BACKOFF_FIRST}  # calls to wait before a trial down / up
        self.trials = 0  # trials begun (for tests and the figures)

    def threads(self) -> int:
        """The thread count for the next decode call."""
        return self._trial[0] if self._trial is not None else self.count

    def observe(self, seconds: float, cpu_seconds: float) -> None:
        """A one-token decode call at :meth:`threads` took ``seconds``, and the process used ``cpu_seconds`` of
        CPU time meanwhile."""
        if seconds <= 0.0:
            return
        if self._trial is not None:
            count, times = self._trial
            times.append(seconds)
            if len(times) >= self.TRIAL:
                self._end_trial(count, statistics.median(times))
            return
        self._wall.append(seconds)
        self._cpu.append(cpu_seconds)
        self._since += 1
        if len(self._wall) < self.WINDOW:
            return
        share = sum(self._cpu) / sum(self._wall)  # cores' worth of CPU time per second of decoding
        if self.count > 1 and share < self.count - self.SHORT and self._since >= self._wait[-1]:
            self._begin_trial(self.count - 1)
        elif self.count < self.full and self._since >= self._wait[+1]:
            self._begin_trial(self.count + 1)

    def _begin_trial(self, count: int) -> None:
        self._before = statistics.median(self._wall)
        self._trial = (count, [])
        self.trials += 1

    def _end_trial(self, count: int, median: float) -> None:
        self._trial = None
        self._since = 0
        direction = -1 if count < self.count else +1
        if median < self.WIN * self._before:
            self.count = count
            self._wall.clear()
            self._cpu.clear()
            self._wait = {-1: 0, +1: self.BACKOFF_FIRST}
        else:
            self._wait[direction] = min(max(2 * self._wait[direction], self.BACKOFF_FIRST), self.BACKOFF_MAX)


@dataclass
class ThreadTally:
    """An answer's steps by the thread count the engine settled on, for its figures. A settled count below the
    most the answer ran (its trials included) means the engine took a thread back while another program kept a
    core busy; steps that only tried another count are counted apart (a trial that lost, counted as fewer
    threads, read as a busy machine). The governor lives as long as the loaded models, so an answer can run at
    one thread throughout: its trials of two tell that it was fewer."""

    settled: Counter[int] = field(default_factory=Counter)
    trials: int = 0
    most: int = 0

    def add(self, step: StepEvent) -> None:
        """Count one step."""
        self.most = max(self.most, step.threads)
        if step.thread_trial:
            self.trials += 1
        else:
            self.settled[step.threads] += 1

    @property
    def steps(self) -> int:
        """Steps counted."""
        return self.settled.total() + self.trials

    def fewer(self) -> tuple[int, int] | None:
        """The fewest threads the engine settled on and for how many steps, when that is below the most the answer
        ran with (``None``: it never took a thread back)."""
        if not self.settled:
            return None
        fewest = min(self.settled)
        return (fewest, self.settled[fewest]) if fewest < self.most else None
