"""The thread governor on a simulated CPU: fewer threads while other programs keep cores busy, all of them back
when they stop, and nothing tried on a quiet machine."""

from __future__ import annotations

import time

import numpy as np

from speculens.engine.threads import ThreadGovernor


class Cpu:
    """``cores`` cores, ``busy`` of them kept busy by other programs. A one-token step with ``n`` threads takes
    ``0.036 · (2 / n) ** 0.4`` s on a quiet machine (the demo target here: 36 ms with 2 threads, 46 with 1); when
    ``n + busy`` threads want more cores than there are, each gets a share, and llama.cpp's barriers make the
    whole step wait for the slowest (64 ms with 2 threads and one busy core, measured; 47 ms with 1)."""

    def __init__(self, cores: int, seed: int = 0) -> None:
        self.cores = cores
        self.busy = 0
        self.rng = np.random.default_rng(seed)

    def step(self, n: int) -> tuple[float, float]:
        quiet = 0.036 * (2 / n) ** 0.4
        share = min(1.0, self.cores / (n + self.busy))
        seconds = quiet / share * (1.2 if share < 1.0 else 1.0) * self.rng.uniform(0.9, 1.15)
        return seconds, seconds * n * share * self.rng.uniform(0.97, 1.0)


def run(governor: ThreadGovernor, cpu: Cpu, steps: int) -> tuple[list[int], float]:
    counts, total = [], 0.0
    for _ in range(steps):
        n = governor.threads()
        seconds, cpu_seconds = cpu.step(n)
        governor.observe(seconds, cpu_seconds)
        counts.append(n)
        total += seconds
    return counts, total


def test_a_quiet_machine_keeps_every_thread_and_tries_nothing() -> None:
    governor = ThreadGovernor(2)
    counts, _ = run(governor, Cpu(2), 2000)
    assert set(counts) == {2} and governor.trials == 0


def test_a_busy_core_takes_a_thread_and_it_comes_back_when_the_core_is_free() -> None:
    cpu = Cpu(2)
    governor = ThreadGovernor(2)
    run(governor, cpu, 50)
    cpu.busy = 1
    counts, governed = run(governor, cpu, 400)
    assert counts.index(1) <= ThreadGovernor.WINDOW  # noticed within one window
    assert np.mean(np.array(counts[20:]) == 1) > 0.9  # and kept, but for the trials of two now and then
    kept = Cpu(2, seed=1)
    kept.busy = 1
    assert governed < 0.85 * sum(kept.step(2)[0] for _ in range(400))  # against two threads all along
    cpu.busy = 0
    counts, _ = run(governor, cpu, 700)
    back = next(i for i, n in enumerate(counts) if all(m == 2 for m in counts[i:]))
    assert back <= ThreadGovernor.BACKOFF_MAX + ThreadGovernor.WINDOW  # the next trial of two threads


def test_an_eight_core_machine_gives_up_one_thread_per_busy_core() -> None:
    cpu = Cpu(8)
    governor = ThreadGovernor(8)
    cpu.busy = 2
    counts, _ = run(governor, cpu, 300)
    assert counts[-1] == 6 and np.mean(np.array(counts[100:]) == 6) > 0.9


def test_a_low_cpu_share_that_fewer_threads_do_not_cure_is_tried_ever_less_often() -> None:
    """A CPU share that reads low while fewer threads are no faster (a coarse process clock, a machine slow for
    another reason): trials back off, so they cost next to nothing."""

    class Odd(Cpu):
        def step(self, n: int) -> tuple[float, float]:
            seconds = 0.036 * (2 / n) ** 0.4 * self.rng.uniform(0.9, 1.15)
            return seconds, seconds * 1.2  # always short of a whole core per thread

    governor = ThreadGovernor(2)
    counts, _ = run(governor, Odd(2), 4000)
    assert governor.trials <= 5 + 4000 // ThreadGovernor.BACKOFF_MAX  # 32, 64, 128, 256, then every 512 steps
    assert np.mean(np.array(counts) == 2) > 0.99


def test_the_engine_governs_an_automatic_thread_count_only_and_threads_never_change_the_answer(tiny) -> None:  # type: ignore[no-untyped-def]
    from speculens.engine.config import GenerationConfig, ModelConfig, Strategy
    from speculens.engine.events import FinishEvent, StepEvent
    from speculens.engine.session import SpeculativeEngine

    class Alternating(ThreadGovernor):
        """Two threads and one by turns, as trials and a busy spell would switch them."""

        def threads(self) -> int:
            self.calls = getattr(self, "calls", 0) + 1
            return 1 + self.calls % 2

        def observe(self, seconds: float, cpu_seconds: float) -> None:
            pass  # the settled count stays 2: every one-thread step is a trial

    config = GenerationConfig(strategy=Strategy.LOOKUP, max_tokens=40)
    fixed = ModelConfig(tiny.target, n_ctx=512, n_threads=2)
    with SpeculativeEngine(fixed) as engine:
        assert engine.threads is None  # a count the user gave is kept
        events = list(engine.generate("def add(a, b):", config))
        assert {e.threads for e in events if isinstance(e, StepEvent)} == {2}
        plain = next(e for e in events if isinstance(e, FinishEvent)).tokens
    with SpeculativeEngine(ModelConfig(tiny.target, n_ctx=512, n_threads=2, exact=True, adaptive_threads=True)) as e:
        assert e.threads is None  # bit-exact mode measured its invariance with its own count
    with SpeculativeEngine(ModelConfig(tiny.target, n_ctx=512, n_threads=2, adaptive_threads=True)) as engine:
        assert isinstance(engine.threads, ThreadGovernor) and engine.threads.full == 2
        engine.threads = Alternating(2)
        events = list(engine.generate("def add(a, b):", config))
        steps = [e for e in events if isinstance(e, StepEvent)]
        assert {e.threads for e in steps} == {1, 2}
        # Steps off the settled count (2) are trials: the figures do not call them a busy machine.
        assert all(e.thread_trial == (e.threads == 1) for e in steps)
        assert next(e for e in events if isinstance(e, FinishEvent)).tokens == plain


def test_other_programs_share_of_the_cpus_is_measured_and_excludes_our_own_work() -> None:
    import subprocess
    import sys
    import time

    import psutil

    from speculens.engine.threads import CpuWindow

    window = CpuWindow()
    deadline = time.perf_counter() + 0.4
    while time.perf_counter() < deadline:  # our own work is not another program's
        pass
    own = window.others_share()
    spinner = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time() + 3\nwhile time.time() < t: pass"])
    try:
        time.sleep(0.3)  # the interpreter starts
        window = CpuWindow()
        time.sleep(0.6)
        other = window.others_share()
    finally:
        spinner.kill()
        spinner.wait()
    assert own is not None and other is not None
    # One core of the machine's, busy in another program (whatever else this machine runs meanwhile).
    cores = psutil.cpu_count() or 1
    assert other >= 0.7 / cores, (own, other, cores)
    # Too short a window to tell is no figure (the system counts CPU time in 10 ms ticks).
    assert CpuWindow().others_share() is None


def test_busy_means_crowding_llama_cpps_threads_not_a_share_of_every_cpu() -> None:
    """A tour's note: 30% of all the CPUs missed one busy core of four beside four threads, which every barrier waits
    for, and flagged a share that fits beside eight threads on sixteen cores."""
    from speculens.engine.threads import crowded

    assert crowded(0.25, threads=4, cpus=4)  # one core of four, beside four threads
    assert not crowded(0.3, threads=8, cpus=16)  # 4.8 cores beside the 8 left free
    assert crowded(0.6, threads=8, cpus=16)  # 9.6 cores: more than the free ones
    assert crowded(0.31, threads=2, cpus=2) and not crowded(0.29, threads=2, cpus=2)  # two cores: 30%, as before
    assert not crowded(0.1, threads=4, cpus=4) and not crowded(None, threads=4, cpus=4)


def test_a_draft_model_timed_beside_a_busy_program_says_so_in_its_verdict(tiny, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A tour's first load, beside another model's run, read the draft model ×0.06 of plain decoding and said
    nothing of why; the next load times it again."""
    from speculens.engine import threads
    from speculens.engine.adaptive import AdaptiveController
    from speculens.engine.config import ModelConfig
    from speculens.engine.session import SpeculativeEngine

    monkeypatch.setattr(AdaptiveController, "draft_idle", lambda self: "the draft model cannot pay here")
    busy_note = " (timed while other programs used 62% of the CPUs: load again once they are done)"
    for busy, said in ((0.62, busy_note), (0.1, ""), (None, "")):
        monkeypatch.setattr(threads.CpuWindow, "others_share", lambda self, busy=busy: busy)
        with SpeculativeEngine(ModelConfig(tiny.target, tiny.identical, n_ctx=256)) as engine:
            assert engine.draft_idle == "the draft model cannot pay here" + said
            assert engine.info().draft_idle == engine.draft_idle
    # Busy while the target was timed after the draft: the verdict rests on both (a tour's first load read ×0.74,
    # ×0.87 once a compiler build beside it was done, with no word of it).
    shares = iter([0.0, 0.62])  # the draft's timing, then the target's (the CLI's order)
    monkeypatch.setattr(threads.CpuWindow, "others_share", lambda self: next(shares))
    with SpeculativeEngine(ModelConfig(tiny.target, tiny.identical, n_ctx=256)) as engine:
        assert engine.draft_idle == "the draft model cannot pay here" + busy_note
    shares = iter([0.62, 0.0])  # the target's, then the draft's, loaded after (the app's order)
    with SpeculativeEngine(ModelConfig(tiny.target, None, n_ctx=256)) as engine:
        engine.load_draft(tiny.identical)
        assert engine.draft_idle == "the draft model cannot pay here" + busy_note


def test_an_answer_decoded_beside_a_busy_program_says_so(tiny, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """The engine measures other programs' use of the CPUs while an answer decodes; the CLI says when it crowded
    llama.cpp's threads (a tour's answer ran at 7 tokens/s where the same message ran at 25 a minute later)."""
    from speculens.cli.__main__ import main
    from speculens.engine import generate as generate_module

    share = [0.0]

    order: list[str] = []  # when the share is read, and when the sources end

    class Window:
        def others_share(self) -> float | None:
            order.append("share")
            return share[0]

    monkeypatch.setattr(generate_module, "CpuWindow", Window)
    for value, said in ((0.9, True), (0.05, False)):
        share[0] = value
        assert main(["generate", "-m", str(tiny.target), "-s", "none", "-n", "4", "the model"]) == 0
        err = capsys.readouterr().err
        assert ("note: slowed: other programs used 90% of the CPUs meanwhile" in err) is said, err
    # Every layer on a GPU: the CPUs' other users do not hold its kernels back (a review's).
    from speculens.engine.backend import LlamaBackend
    from speculens.engine.config import GenerationConfig, ModelConfig
    from speculens.engine.events import FinishEvent, StepEvent
    from speculens.engine.session import SpeculativeEngine

    share[0] = 0.9
    with SpeculativeEngine(ModelConfig(tiny.target, None, n_ctx=256)) as engine:
        for offloaded in (False, True):
            monkeypatch.setattr(LlamaBackend, "offloads_all", property(lambda self, o=offloaded: o))
            events = engine.generate("the model", GenerationConfig(max_tokens=4))
            (finish,) = [e for e in events if isinstance(e, FinishEvent)]
            assert finish.others_share == 0.9 and finish.crowded is not offloaded
        # Held at its steps (Teach's step mode waits for the user there): what other programs did meanwhile did not
        # slow it, and it is not said to have been slowed. Neither the slack a consumer has nor the sources' own work at
        # the answer's end (the n-gram cache writes its file) counts as held (a review's).
        from speculens.engine.drafters.ngram_cache import NgramCacheDrafter

        monkeypatch.setattr(LlamaBackend, "offloads_all", property(lambda self: False))
        monkeypatch.setattr(NgramCacheDrafter, "end", lambda self, history: order.append("end"))
        monkeypatch.setattr(generate_module, "HELD_SLACK_S", 0.2)
        for hold, told in ((0.0, True), (0.1, True), (0.3, False)):
            finish = None
            for event in engine.generate("the model", GenerationConfig(max_tokens=4)):
                if isinstance(event, StepEvent) and event.step == 1:
                    time.sleep(hold)
                elif isinstance(event, FinishEvent):
                    finish = event
            assert finish is not None and (finish.others_share == 0.9) is told and finish.crowded is told, hold
            assert order[-2:] == ["share", "end"] or not told  # read before the cache writes its file (a review's)
