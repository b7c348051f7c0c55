"""A scripted engine for GUI tests: it speaks :class:`speculens.engine.protocol.Engine` without llama.cpp.

The GUI's edge cases — a draft that fails to load, a conversation longer than the context, an answer cut off
inside a code block, a long answer to stop in the middle — are reached by scripting what the engine does,
not by finding a model that happens to do it. Every engine built is kept in :attr:`FakeFactory.engines`, so
a test can check what was asked of it (the messages, the configuration) and that it was closed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from speculens.engine import loading
from speculens.engine.config import ContextFullError, GenerationConfig, ModelConfig
from speculens.engine.events import (
    Divergence,
    DraftToken,
    EmittedToken,
    Event,
    FinishEvent,
    FinishReason,
    Origin,
    RunningStats,
    StartEvent,
    StepEvent,
)
from speculens.engine.protocol import EngineInfo, Messages
from speculens.engine.threads import crowded
from speculens.errors import OperationError


@dataclass
class Script:
    """What the fake engine does.

    Attributes:
        answer: the answer's pieces, one step each (with a draft of two, the first accepted).
        step_s: how long each step takes (wall time, so a test can stop an answer in the middle).
        n_ctx_tokens: the context size, counted in words of the conversation (longer: ContextFullError; an answer
            that fills it ends with FinishReason.CONTEXT).
        draft_error: loading the draft raises this message.
        target_error: building the engine raises this message.
        expected_speedup: what each step reports as the controller's expected-speedup curve.
        n_draft_max: each step's draft length (0: plain steps).
        fail_after: after this many pieces the engine raises an OperationError (a decode failure midway).
        prompt_s: how long the prompt takes before the first step (cancel is looked at only afterwards, as
            the real engine does).
        threads: each step's thread count, by step (cycled; empty: 2 for every step).
        thread_trials: whether each step was a trial of its thread count, by step (cycled; empty: none).
        draft_idle: what the engine's info says of a loaded draft model that cannot pay.
        load_s: how long building the engine takes, reporting its progress and looking at a cancel as the real
            engine does (see :mod:`speculens.engine.loading`).
    """

    answer: Sequence[str] = ("Hello", " there", ",", " friend", ".")
    step_s: float = 0.0
    n_ctx_tokens: int = 10_000
    draft_error: str | None = None
    target_error: str | None = None
    expected_speedup: tuple[float, ...] = ()
    n_draft_max: int = 2
    fail_after: int | None = None
    prompt_s: float = 0.0
    threads: Sequence[int] = ()
    thread_trials: Sequence[bool] = ()
    draft_idle: str | None = None
    load_s: float = 0.0
    # Other programs' share of the CPUs during each answer, in turn (cycled; judged as on 2 cores with 2 threads).
    others_shares: Sequence[float] = ()


@dataclass
class FakeEngine:
    """One scripted engine (see :class:`Script`)."""

    config: ModelConfig
    script: Script
    draft: Path | None = None
    closed: bool = False
    requests: list[tuple[list[dict[str, str]], GenerationConfig]] = field(default_factory=list)
    threads: set[str] = field(default_factory=set)  # the threads that called it

    def info(self) -> EngineInfo:
        return EngineInfo(
            target=self.config.target.name,
            draft=self.draft.name if self.draft else None,
            description="fake 1B",
            n_ctx=self.config.n_ctx,
            exact=self.config.exact,
            invariant_sizes=(1, 2, 3) if self.config.exact else (),
            gpu_backend=None,
            draft_idle=self.script.draft_idle if self.draft else None,
        )

    def load_draft(self, path: Path) -> None:
        self.threads.add(threading.current_thread().name)
        if self.script.draft_error:
            raise OperationError(self.script.draft_error)
        self.draft = path

    def chat(
        self, messages: Messages, config: GenerationConfig, cancel: threading.Event | None = None
    ) -> Iterator[Event]:
        self.threads.add(threading.current_thread().name)
        self.requests.append(([dict(m) for m in messages], config))
        n_prompt = sum(len(m["content"].split()) for m in messages)
        if n_prompt > self.script.n_ctx_tokens:
            raise ContextFullError(n_prompt, self.script.n_ctx_tokens)
        seed = config.sampling.seed if config.sampling.seed is not None else 1000 + len(self.requests)
        if self.script.prompt_s:
            time.sleep(self.script.prompt_s)
        yield StartEvent(n_prompt, n_prompt, max(0.001, self.script.prompt_s), str(config.strategy), seed=seed,
                         sampled=not config.sampling.greedy, exact=self.config.exact)  # fmt: skip
        stats = RunningStats()
        text = ""
        tokens: list[int] = []
        reason = FinishReason.EOG
        trials = self.script.thread_trials
        for i, piece in enumerate(self.script.answer[: config.max_tokens]):
            if cancel is not None and cancel.is_set():
                reason = FinishReason.CANCELLED
                break
            if n_prompt + i >= self.script.n_ctx_tokens:  # the answer filled the context
                reason = FinishReason.CONTEXT
                break
            if self.script.fail_after is not None and i >= self.script.fail_after:
                raise OperationError("llama_decode failed (scripted)")
            t0 = time.perf_counter()
            if self.script.step_s:
                time.sleep(self.script.step_s)
            drafted: tuple[DraftToken, ...] = ()
            origin = Origin.TARGET
            if self.script.n_draft_max and str(config.strategy) != "none":
                drafted = (
                    DraftToken(i, piece.encode(), 0.9, 0.9, True),
                    DraftToken(99, b"?", 0.5, 0.1, False),
                )[: self.script.n_draft_max]
                origin = Origin.ACCEPTED
            emitted = (EmittedToken(i, piece.encode(), origin),)
            tokens.append(i)
            text += piece
            ms = 1000 * (time.perf_counter() - t0) or 1.0
            stats = RunningStats(
                n_steps=stats.n_steps + 1,
                n_generated=stats.n_generated + 1,
                n_drafted=stats.n_drafted + len(drafted),
                n_accepted=stats.n_accepted + sum(d.accepted for d in drafted),
                elapsed_s=stats.elapsed_s + ms / 1000,
                verify_s=stats.verify_s + ms / 1000,
                accepted_by_position=(stats.n_accepted + 1, 0)[: len(drafted)] if drafted else (),
                drafted_by_position=(stats.n_steps + 1,) * len(drafted),
            )
            yield StepEvent(
                step=i + 1,
                n_draft_max=len(drafted),
                drafted=drafted,
                emitted=emitted,
                text=piece,
                draft_ms=0.0,
                verify_ms=ms,
                overhead_ms=0.0,
                stats=stats,
                source="draft" if drafted else None,
                expected_speedup=self.script.expected_speedup,
                considered="draft" if self.script.expected_speedup else None,
                threads=self.script.threads[i % len(self.script.threads)] if self.script.threads else 2,
                thread_trial=bool(trials) and trials[i % len(trials)],
            )
        else:
            if len(self.script.answer) > config.max_tokens:
                reason = FinishReason.MAX_TOKENS
        shares = self.script.others_shares
        share = shares[(len(self.requests) - 1) % len(shares)] if shares else None
        yield FinishEvent(reason, text, tuple(tokens), stats, share, crowded(share, 2, cpus=2))

    def chat_divergence(self, messages: Messages, a: Sequence[int], b: Sequence[int]) -> Divergence | None:
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                return Divergence(i, x, y, b"a", b"b", 1.0, 0.99)
        return None

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeFactory:
    """Builds :class:`FakeEngine` objects following :attr:`script` (change it between loads)."""

    script: Script = field(default_factory=Script)
    engines: list[FakeEngine] = field(default_factory=list)

    def __call__(self, config: ModelConfig) -> FakeEngine:
        if self.script.target_error:
            raise OperationError(self.script.target_error)
        end = time.monotonic() + self.script.load_s
        while time.monotonic() < end:
            loading.report(f"Timing {config.target.name} on this machine")
            loading.check()
            time.sleep(0.01)
        engine = FakeEngine(config, replace(self.script))
        self.engines.append(engine)
        return engine

    @property
    def last(self) -> FakeEngine:
        """The engine built last."""
        return self.engines[-1]
