"""The speculation loop: draft, verify in one batched target pass, emit, repeat.

Invariant between steps: the target's KV cache holds the accepted history except its last token (the
*pending* token), so each step evaluates ``[pending] + draft`` in one batch and gets exactly the logits rows
it verifies against. Rejected drafts are rolled back with ``truncate``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

import numpy as np

from speculens.engine.adaptive import AdaptiveController, CostModel, StepPlan
from speculens.engine.backend import LlamaBackend
from speculens.engine.drafters.base import Draft, Drafter
from speculens.engine.events import (
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
from speculens.engine.sampling import SamplingParams, transform
from speculens.engine.text import TextAssembler
from speculens.engine.verify import Verdict, verify_greedy, verify_rejection, verify_sample_compare

MAX_N_DRAFT = 64


class Strategy(StrEnum):
    """Where draft tokens come from."""

    DRAFT = "draft"  # a second, smaller model
    LOOKUP = "lookup"  # prompt lookup
    NGRAM_CACHE = "ngram-cache"  # context + dynamic n-gram statistics
    NGRAM_MAP = "ngram-map"  # a static map built from a corpus
    NONE = "none"  # plain decoding with the target: the baseline


@dataclass(frozen=True)
class GenerationConfig:
    """What one generation does.

    Args:
        strategy: the draft source.
        n_draft: the most tokens drafted per step (with ``adaptive``, the upper bound of its choice).
        n_draft_min: a shorter draft is dropped (the step decodes plainly).
        p_min: a draft model stops when its top probability falls below this.
        max_tokens: the most tokens generated.
        stop: strings that end the answer (not included in it).
        sampling: temperature, top-k, top-p, min-p, seed.
        adaptive: choose the draft length each step from measured costs and acceptance, down to plain
            decoding when speculation does not pay (:mod:`speculens.engine.adaptive`); off, every step
            asks for ``n_draft`` tokens.
    """

    strategy: Strategy = Strategy.DRAFT
    n_draft: int = 8
    n_draft_min: int = 0
    p_min: float = 0.75
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    adaptive: bool = True

    def validate(self) -> None:
        """Raise ``ValueError`` with a message that says which value is wrong and what is allowed."""
        if not 1 <= self.n_draft <= MAX_N_DRAFT:
            raise ValueError(f"n_draft must be between 1 and {MAX_N_DRAFT}, not {self.n_draft}")
        if not 0 <= self.n_draft_min <= self.n_draft:
            raise ValueError(f"n_draft_min must be between 0 and n_draft ({self.n_draft}), not {self.n_draft_min}")
        if not 0.0 <= self.p_min <= 1.0:
            raise ValueError(f"p_min must be between 0 and 1, not {self.p_min}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, not {self.max_tokens}")
        if not isinstance(self.adaptive, bool):
            raise ValueError(f"adaptive must be True or False, not {self.adaptive!r}")
        self.sampling.validate()


class _Stats:
    """Mutable running totals; frozen into :class:`RunningStats` for each event."""

    def __init__(self) -> None:
        self.n_steps = self.n_generated = self.n_drafted = self.n_accepted = 0
        self.draft_s = self.verify_s = self.overhead_s = 0.0
        self.started = time.perf_counter()
        self.accepted_by_pos: list[int] = []
        self.drafted_by_pos: list[int] = []

    def record(self, n_drafted: int, n_accepted: int) -> None:
        self.n_steps += 1
        self.n_drafted += n_drafted
        self.n_accepted += n_accepted
        while len(self.drafted_by_pos) < n_drafted:
            self.drafted_by_pos.append(0)
            self.accepted_by_pos.append(0)
        for i in range(n_drafted):
            self.drafted_by_pos[i] += 1
            if i < n_accepted:
                self.accepted_by_pos[i] += 1

    def freeze(self) -> RunningStats:
        return RunningStats(
            n_steps=self.n_steps,
            n_generated=self.n_generated,
            n_drafted=self.n_drafted,
            n_accepted=self.n_accepted,
            elapsed_s=time.perf_counter() - self.started,
            draft_s=self.draft_s,
            verify_s=self.verify_s,
            overhead_s=self.overhead_s,
            accepted_by_position=tuple(self.accepted_by_pos),
            drafted_by_position=tuple(self.drafted_by_pos),
        )


class PromptError(ValueError):
    """The prompt cannot be generated from (empty, or too long for the context)."""


def generate(
    target: LlamaBackend,
    drafter: Drafter | None,
    prompt: Sequence[int],
    config: GenerationConfig,
    rng: np.random.Generator,
    cancel: threading.Event | None = None,
    draft_backend: LlamaBackend | None = None,
    costs: CostModel | None = None,
) -> Iterator[Event]:
    """Generate from ``prompt`` with speculation, yielding a start event, one event per step and a finish.

    Args:
        target: the target model; its KV cache is reused for the common prefix with its current contents.
        drafter: the draft source (``None`` for plain decoding).
        prompt: the prompt's tokens.
        config: the settings (validated here).
        rng: the random generator (used only when sampling).
        cancel: set it from any thread to stop after the current step.
        draft_backend: the draft model, when there is one, so its decode time is accounted as drafting.
        costs: the session's measured costs for the adaptive controller (kept by the caller across
            generations; a fresh model when ``None``).

    Returns:
        The events, lazily: nothing runs until the first one is taken.

    Raises:
        PromptError: empty prompt, or no room in the context.
        ValueError: a setting is out of range.
    """
    config.validate()
    if not prompt:
        raise PromptError("the prompt is empty: type something to continue from")
    limit = target.n_ctx if draft_backend is None else min(target.n_ctx, draft_backend.n_ctx)
    if len(prompt) >= limit:
        raise PromptError(
            f"the prompt has {len(prompt)} tokens but the context holds {limit}: "
            "shorten the prompt or raise the context size"
        )
    controller = None
    if config.adaptive and drafter is not None:
        controller = AdaptiveController(config.n_draft, draft_backend is not None, costs, config.n_draft_min)
    return _run(target, drafter, prompt, config, rng, cancel, draft_backend, limit, controller)


def _run(
    target: LlamaBackend,
    drafter: Drafter | None,
    prompt: Sequence[int],
    config: GenerationConfig,
    rng: np.random.Generator,
    cancel: threading.Event | None,
    draft_backend: LlamaBackend | None,
    limit: int,
    controller: AdaptiveController | None,
) -> Iterator[Event]:
    sampling = config.sampling
    t0 = time.perf_counter()
    before = target.n_decoded
    target.sync(prompt[:-1])
    n_evaluated = target.n_decoded - before + 1  # + the pending last token, evaluated in the first step
    if drafter is not None:
        drafter.begin(prompt)
    yield StartEvent(len(prompt), n_evaluated, time.perf_counter() - t0, drafter.name if drafter else "none")

    history = list(prompt)
    answer: list[int] = []
    text = TextAssembler(config.stop)
    stats = _Stats()
    eog = target.vocab.eog
    reason: FinishReason | None = None

    while reason is None:
        if cancel is not None and cancel.is_set():
            reason = FinishReason.CANCELLED
            break
        remaining = config.max_tokens - len(answer)
        room = limit - len(history)  # drafts that still fit behind the pending token
        if room < 0:
            reason = FinishReason.CONTEXT
            break
        step_t0 = time.perf_counter()
        target_dec0 = target.decode_seconds
        draft_dec0 = draft_backend.decode_seconds if draft_backend is not None else 0.0
        draft_calls0 = draft_backend.n_decode_calls if draft_backend is not None else 0
        draft_tokens0 = draft_backend.n_decoded if draft_backend is not None else 0

        # 1. Draft: as many tokens as the controller chooses (or n_draft), within the answer and context.
        n_max = min(config.n_draft, remaining - 1, room) if drafter is not None else 0
        plan: StepPlan | None = None
        offered: int | None = None
        if controller is None or drafter is None:
            draft = drafter.draft(history, n_max) if drafter is not None and n_max > 0 else Draft()
        elif controller.draft_model:  # drafting costs: plan first, then draft that much
            controller.shadow_check(history)
            plan = controller.plan(n_max)
            n_max = plan.n_draft
            draft = drafter.draft(history, n_max) if n_max > 0 else Draft()
        else:  # drafting is free: draft, then verify as much of it as pays; the rest is scored later
            controller.shadow_check(history)
            offer = drafter.draft(history, n_max) if n_max > 0 else Draft()
            offered = len(offer.tokens)
            plan = controller.plan(n_max, offered, offer.confidence)
            controller.shadow_drafted(len(history), offer.tokens, plan.n_draft, offer.confidence)
            n_max = plan.n_draft
            draft = Draft(offer.tokens[:n_max], confidence=offer.confidence) if n_max > 0 else Draft()
        if len(draft.tokens) < max(config.n_draft_min, 1):
            draft = Draft()
        t_drafted = time.perf_counter()

        # 2. Verify all drafted positions in one target pass.
        batch = [history[-1], *draft.tokens]
        rows = target.decode(batch, range(len(batch)), max_chunk=target.invariant_chunk)
        t_verified_dec = target.decode_seconds
        verdict = _verify(draft, rows, sampling, rng)
        target.truncate(len(history) + verdict.n_accepted)

        # 3. Emit: accepted drafts, then the target's own token; stop at EOG, max_tokens, stop strings.
        k = verdict.n_accepted
        new = [*draft.tokens[:k], verdict.next_token]
        origins = [Origin.ACCEPTED] * k + [
            Origin.TARGET if not draft.tokens else Origin.BONUS if k == len(draft.tokens) else Origin.CORRECTION
        ]
        emitted: list[EmittedToken] = []
        chunk = ""
        for token, origin in zip(new, origins, strict=True):
            history.append(token)
            if token in eog:
                reason = FinishReason.EOG
                break
            piece = target.piece(token)
            emitted.append(EmittedToken(token, piece, origin))
            answer.append(token)
            chunk += text.feed(piece)
            if text.stopped:
                reason = FinishReason.STOP
                break
            if len(answer) >= config.max_tokens:
                reason = FinishReason.MAX_TOKENS
                break
        if reason is not None:
            chunk += text.flush()

        drafted = tuple(
            DraftToken(
                id=t,
                piece=target.piece(t),
                draft_prob=draft.probs[i] if draft.probs is not None else None,
                target_prob=verdict.target_probs[i] if i < len(verdict.target_probs) else None,
                accepted=i < k,
            )
            for i, t in enumerate(draft.tokens)
        )
        stats.record(len(draft.tokens), k)
        stats.n_generated = len(answer)
        step_end = time.perf_counter()
        draft_s = t_drafted - step_t0
        verify_s = t_verified_dec - target_dec0
        draft_dec = (draft_backend.decode_seconds - draft_dec0) if draft_backend is not None else 0.0
        overhead_s = max(0.0, (step_end - step_t0) - verify_s - draft_dec)
        stats.draft_s += draft_s
        stats.verify_s += verify_s
        stats.overhead_s += overhead_s
        if controller is not None and plan is not None:
            calls = draft_backend.n_decode_calls - draft_calls0 if draft_backend is not None else 0
            tokens_decoded = draft_backend.n_decoded - draft_tokens0 if draft_backend is not None else 0
            controller.observe(plan, len(draft.tokens), k, verify_s, overhead_s, draft_dec, calls, tokens_decoded)
        yield StepEvent(
            step=stats.n_steps,
            n_draft_max=n_max,
            drafted=drafted,
            emitted=tuple(emitted),
            text=chunk,
            draft_ms=draft_s * 1e3,
            verify_ms=verify_s * 1e3,
            overhead_ms=overhead_s * 1e3,
            stats=stats.freeze(),
            probe=plan is not None and plan.probe,
            offered=offered,
        )

    if drafter is not None:
        drafter.end(history)
    text.flush()
    yield FinishEvent(reason, text.text, tuple(answer), stats.freeze())


def _verify(draft: Draft, rows: np.ndarray, sampling: SamplingParams, rng: np.random.Generator) -> Verdict:
    if sampling.greedy:
        verdict = verify_greedy(draft.tokens, rows)
        # Show the target's belief in each judged draft token (softmax at temperature 1).
        probs = []
        for i in range(min(verdict.n_accepted + 1, len(draft.tokens))):
            row = rows[i]
            m = float(row.max())
            probs.append(float(np.exp(float(row[draft.tokens[i]]) - m) / np.exp(row - m).sum()))
        return replace(verdict, target_probs=tuple(probs))
    if draft.dists is not None:
        p = np.stack([transform(rows[i], sampling) for i in range(len(rows))])
        return verify_rejection(draft.tokens, draft.dists, p, rng)
    return verify_sample_compare(draft.tokens, lambda i: transform(rows[i], sampling), rng)
