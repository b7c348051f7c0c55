"""The speculation loop: draft, verify in one batched target pass, emit, repeat.

Invariant between steps: the target's KV cache holds the accepted history except its last token (the
*pending* token), so each step evaluates ``[pending] + draft`` in one batch and gets exactly the logits rows
it verifies against. Rejected drafts are rolled back with ``truncate``. The first step is the exception: the
prompt is evaluated whole, last token included (as llama.cpp's tools do), so it evaluates only its draft.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np

from speculens.engine.adaptive import MODEL, AdaptiveController, CostModel, Offer, StepPlan
from speculens.engine.backend import DecodeCancelled, LlamaBackend
from speculens.engine.config import ContextFullError, GenerationConfig, PromptError, recurrent_refusal
from speculens.engine.drafters.base import EMPTY_DRAFT, Draft, Drafter
from speculens.engine.drafters.draft_model import DraftModelDrafter
from speculens.engine.drafters.ngram_cache import NgramCacheDrafter
from speculens.engine.drafters.ngram_map import NgramMapDrafter
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
from speculens.engine.threads import CpuWindow, ThreadGovernor, crowded
from speculens.engine.verify import Verdict, verify_greedy, verify_rejection, verify_sample_compare
from speculens.errors import InvalidInputError

# The most a consumer may hold an answer at its steps (Teach's step mode waits for the user there), as a share of the
# decoding's own time, before the share of the CPUs other programs took meanwhile is no longer told (see generate):
# beyond it the share would be the pauses' as much as the answer's. A slack of HELD_SLACK_S seconds covers consumers
# that take a few milliseconds a step.
HELD_SHARE = 0.25
HELD_SLACK_S = 0.05


class _Stats:
    """Mutable running totals; frozen into :class:`RunningStats` for each event."""

    def __init__(self) -> None:
        self.n_steps = self.n_generated = self.n_drafted = self.n_accepted = self.n_ended = 0
        self.draft_s = self.verify_s = self.overhead_s = 0.0
        # Decoding time: the steps' own time, not the time the consumer held the generator between them (a
        # teaching pause waiting for "next step" is not generation time).
        self.elapsed_s = 0.0
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
            elapsed_s=self.elapsed_s,
            draft_s=self.draft_s,
            verify_s=self.verify_s,
            overhead_s=self.overhead_s,
            accepted_by_position=tuple(self.accepted_by_pos),
            drafted_by_position=tuple(self.drafted_by_pos),
            n_ended=self.n_ended,
        )


def generate(
    target: LlamaBackend,
    drafters: Sequence[Drafter],
    prompt: Sequence[int],
    config: GenerationConfig,
    rng: np.random.Generator,
    cancel: threading.Event | None = None,
    costs: CostModel | None = None,
    exact: bool = False,
    threads: ThreadGovernor | None = None,
) -> Iterator[Event]:
    """Generate from ``prompt`` with speculation, yielding a start event, one event per step and a finish.

    Args:
        target: the target model; its KV cache is reused for the common prefix with its current contents.
        drafters: the draft sources (none: plain decoding). With several, each step the adaptive controller
            picks the one whose draft it expects to pay most (without it, the first free source that has
            a draft, else the draft model).
        prompt: the prompt's tokens.
        config: the settings (validated here).
        rng: the random generator (used only when sampling).
        cancel: set it from any thread to stop after the current step.
        costs: the session's measured costs for the adaptive controller (kept by the caller across
            generations; a fresh model when ``None``).
        exact: verify in the target's bit-exact decode-call sizes (:meth:`LlamaBackend.split`).
        threads: the session's thread governor (``None``: the models' thread counts stay as loaded).

    Returns:
        The events, lazily: nothing runs until the first one is taken.

    Raises:
        PromptError: empty prompt, or no room in the context.
        ValueError: a setting is out of range.
    """
    config.validate()
    if not prompt:
        raise PromptError("the prompt is empty: type something to continue from")
    model = next((d for d in drafters if isinstance(d, DraftModelDrafter)), None)
    limit = target.n_ctx if model is None else min(target.n_ctx, model.backend.n_ctx)
    if len(prompt) >= limit:
        raise ContextFullError(len(prompt), limit)
    if target.recurrent and drafters:  # its state goes back only as far as its snapshots
        if not target.rollback:
            raise InvalidInputError(recurrent_refusal(target.path.name))
        config = replace(config, n_draft=min(config.n_draft, target.rollback))
        config = replace(config, n_draft_min=min(config.n_draft_min, config.n_draft))
    controller = None
    if config.adaptive and drafters:
        names = [d.name for d in drafters]
        controller = AdaptiveController(config.n_draft, names, costs, config.n_draft_min)
    loop = _Loop(target, list(drafters), model, config, rng, cancel, limit, controller, exact, threads, costs)
    return loop.run(prompt)


def end_at_eog(draft: Draft, eog: frozenset[int]) -> Draft:
    """The draft up to its first end-of-generation token: a copy from the prompt runs on into the chat
    template (``<|im_end|>``, ``<|im_start|>assistant``), and verifying tokens after the answer's end only
    makes the batch dearer."""
    for i, token in enumerate(draft.tokens):
        if token in eog:
            return replace(draft, tokens=draft.tokens[: i + 1])
    return draft


def free_offers(
    drafters: Sequence[Drafter], history: Sequence[int], n_max: int, eog: frozenset[int]
) -> dict[str, Draft]:
    """Every draft-free source's draft for this step, each cut at its first end-of-generation token.

    The n-gram map's and then the n-gram cache's draft are left out when another source's draft still offered
    starts with the same token: that source offers the continuation with estimates of its own (in a rewrite prompt
    lookup, the cache and often a map all follow the copy). The map and the cache have no confidence classes, so
    what they learnt while echoing a copy (nearly always right) made them trusted where they stand alone and guess.
    """
    offers = {d.name: end_at_eog(d.draft(history, n_max), eog) for d in drafters}
    classless = (NgramMapDrafter.name, NgramCacheDrafter.name)
    for i, name in enumerate(classless):
        own = offers.get(name)
        if own is not None and any(
            d.tokens[:1] == own.tokens[:1] for other, d in offers.items() if other not in classless[i:] and d.tokens
        ):
            offers[name] = EMPTY_DRAFT
    return offers


class _Loop:
    """One generation's state; :meth:`run` is the generator :func:`generate` returns."""

    def __init__(
        self,
        target: LlamaBackend,
        drafters: list[Drafter],
        model: DraftModelDrafter | None,
        config: GenerationConfig,
        rng: np.random.Generator,
        cancel: threading.Event | None,
        limit: int,
        controller: AdaptiveController | None,
        exact: bool,
        threads: ThreadGovernor | None = None,
        costs: CostModel | None = None,
    ) -> None:
        self.target = target
        self.costs = costs
        self.free = [d for d in drafters if d is not model]
        self.model = model
        self.config = config
        self.rng = rng
        self.cancel = cancel
        self.limit = limit
        self.controller = controller
        self.exact = exact
        self.threads = threads

    def _draft(self, history: list[int], n_max: int) -> tuple[Draft, StepPlan | None, int | None]:
        """This step's draft, the controller's plan for it, and how long the chosen free draft was."""
        controller, model = self.controller, self.model
        if n_max < max(1, self.config.n_draft_min):  # the end of the answer or the context is too near
            return Draft(), None, None
        if controller is None:  # fixed length: the first free source with a draft, else the draft model
            for drafter in self.free:
                draft = end_at_eog(drafter.draft(history, n_max), self.target.vocab.eog)
                if draft.tokens:
                    return replace(draft, source=drafter.name), None, None
            if model is not None:
                return replace(model.draft(history, n_max, self.config.n_draft_min), source=model.name), None, None
            return Draft(), None, None
        controller.shadow_check(history)
        # Free sources draft first (it costs only Python time); the controller then picks what to verify.
        offers = free_offers(self.free, history, n_max, self.target.vocab.eog)
        behind = model.behind(history) if model is not None else 0
        controller.costs.verify.at(len(history))  # batch costs depend on the context (see BatchCosts)
        plan = controller.plan(n_max, [Offer(n, len(d.tokens), d.confidence) for n, d in offers.items()], behind)
        for name, offer in offers.items():
            verified = plan.n_draft if plan.source == name else 0
            controller.shadow_drafted(len(history), offer.tokens, verified, offer.confidence, name)
        if plan.n_draft == 0:
            return Draft(), plan, None
        if plan.source == MODEL and model is not None:
            return replace(model.draft(history, plan.n_draft, self.config.n_draft_min), source=MODEL), plan, None
        offer = offers[plan.source or ""]
        draft = Draft(offer.tokens[: plan.n_draft], confidence=offer.confidence, source=plan.source)
        return draft, plan, len(offer.tokens)

    def _verify_ms(self, context: int) -> tuple[float, ...]:
        """What the session's cost model expects a verification of 1, 2, … ``n_draft + 1`` tokens to take at this
        context, in ms (empty: nothing measured yet, or plain decoding). Teach draws its curve from these when the
        answer itself times no plain step (a fixed draft length: a tour's curve never appeared)."""
        costs = self.costs if self.controller is None else self.controller.costs
        if costs is None or not (self.free or self.model):
            return ()
        costs.verify.at(context)
        curve = costs.verify.curve(self.config.n_draft + 1)
        return () if curve is None else tuple(round(float(s) * 1e3, 3) for s in curve[1:])

    def run(self, prompt: Sequence[int]) -> Iterator[Event]:
        target, model, controller, config = self.target, self.model, self.controller, self.config
        sampling = config.sampling
        # Room in the KV caches for the whole answer, before the clock starts: no step pays for a larger cache.
        target.reserve(len(prompt) + config.max_tokens)
        if model is not None:
            model.backend.reserve(len(prompt) + config.max_tokens)
        t0 = time.perf_counter()
        before = target.n_decoded
        # The whole prompt, last token included, as llama.cpp's own tools evaluate it (see LlamaBackend.prefill).
        # Stop stops it too: a long prompt takes seconds (a cancelled one ends the answer before its first step).
        pending: np.ndarray | None = None  # the last prompt token's logits row
        begun = False  # the drafters were given the prompt (and so end with the answer)
        unread = 0  # prompt tokens the draft model was not given: reading them would cost more than it could save
        try:
            pending = target.prefill(prompt, self.cancel)
            begun = True
            for drafter in self.free:
                drafter.begin(prompt)
            if model is not None:
                model.begin(prompt)
                model.cancel = self.cancel
                # A draft model that cannot pay on this machine, or not enough to pay for evaluating this prompt
                # (a long one), is not given the prompt; if it is ever chosen, its first draft catches up (and the
                # controller counts that cost).
                answer_room = max(0, min(config.max_tokens, self.limit + 1 - len(prompt)))
                behind = model.behind(prompt)
                if controller is None or controller.prefill_pays(len(prompt), behind, answer_room):
                    model.prefill()
                elif controller.could_pay():  # it might pay, but not enough to pay for reading this prompt
                    unread = behind
        except DecodeCancelled:
            pass
        n_evaluated = target.n_decoded - before
        name = "+".join(d.name for d in [*self.free, *([model] if model else [])]) or "none"
        elapsed = time.perf_counter() - t0
        flash, sampled = target.flash_attn_in_use, not sampling.greedy
        idle = model is not None and controller is not None and not controller.could_pay()
        yield StartEvent(
            len(prompt), n_evaluated, elapsed, name, sampling.seed, flash, sampled, unread, config.described(), idle,
            self.exact, self._verify_ms(len(prompt)),
        )

        # Other programs' use of the CPUs while the answer decodes (the prompt's evaluation left out, as from its rate).
        window = CpuWindow()
        held = 0.0  # seconds the consumer held the generator at its steps
        history = list(prompt)
        answer: list[int] = []
        text = TextAssembler(config.stop)
        stats = _Stats()
        eog = target.vocab.eog
        reason: FinishReason | None = None
        draft_backend = model.backend if model is not None else None

        while reason is None:
            if self.cancel is not None and self.cancel.is_set():
                reason = FinishReason.CANCELLED
                break
            remaining = config.max_tokens - len(answer)
            room = self.limit - len(history)  # drafts that still fit behind the pending token
            if room < 0:
                reason = FinishReason.CONTEXT
                break
            if self.threads is not None and draft_backend is not None:  # fewer while another program is busy
                draft_backend.set_threads(self.threads.count)
            step_t0 = time.perf_counter()
            target_dec0 = target.decode_seconds
            draft_dec0 = draft_backend.decode_seconds if draft_backend is not None else 0.0
            draft_calls0 = draft_backend.n_decode_calls if draft_backend is not None else 0
            draft_tokens0 = draft_backend.n_decoded if draft_backend is not None else 0

            # 1. Draft: the source and length the controller chooses (or n_draft), within answer and context.
            n_max = min(config.n_draft, remaining - 1, room)
            try:
                draft, plan, offered = self._draft(history, n_max)
            except DecodeCancelled:  # Stop in a draft model's catch-up on the prompt (see DraftModelDrafter.draft)
                reason = FinishReason.CANCELLED
                break
            if len(draft.tokens) < max(config.n_draft_min, 1):
                draft = Draft()
            t_drafted = time.perf_counter()

            # A trial of another thread count is timed on one-token steps only: a copy's batches keep the count
            # the governor has settled on, or a trial could last a whole copy.
            thread_trial = False
            if self.threads is not None:
                n_threads = self.threads.count if draft.tokens else self.threads.threads()
                thread_trial = n_threads != self.threads.count
                target.set_threads(n_threads)

            # 2. Verify all drafted positions in one target pass (after the prompt, its last token's row is
            # already known: only the drafts are evaluated).
            if pending is None:
                batch = [history[-1], *draft.tokens]
                rows = target.decode(batch, range(len(batch)), exact=self.exact)
                verify_calls = target.last_calls
            else:
                evaluated = target.decode(draft.tokens, range(len(draft.tokens)), exact=self.exact)
                rows = np.concatenate([pending[None, :], evaluated])
                verify_calls = target.last_calls if draft.tokens else []
                pending = None
            t_verified_dec = target.decode_seconds
            if self.threads is not None and len(verify_calls) == 1 and verify_calls[0][0] == 1:
                self.threads.observe(verify_calls[0][1], target.last_cpu)
            verdict = _verify(draft, rows, sampling, self.rng, config.judge_probs)
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
                    stats.n_ended = 1
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
            # An answer that ended inside the accepted drafts (end of generation, a stop string, the token
            # limit) keeps only those before its end: the drafts after it are neither accepted nor rejected
            # tokens of the answer, so the figures count what the token views show.
            kept = min(k, len(emitted))
            stats.record(len(draft.tokens) if kept == k else kept, kept)
            stats.n_generated = len(answer)
            step_end = time.perf_counter()
            draft_s = t_drafted - step_t0
            verify_s = t_verified_dec - target_dec0
            draft_dec = (draft_backend.decode_seconds - draft_dec0) if draft_backend is not None else 0.0
            overhead_s = max(0.0, (step_end - step_t0) - verify_s - draft_dec)
            stats.draft_s += draft_s
            stats.verify_s += verify_s
            stats.overhead_s += overhead_s
            stats.elapsed_s += step_end - step_t0
            if controller is not None and plan is not None:
                calls = draft_backend.n_decode_calls - draft_calls0 if draft_backend is not None else 0
                tokens_decoded = draft_backend.n_decoded - draft_tokens0 if draft_backend is not None else 0
                controller.observe(
                    plan,
                    len(draft.tokens),
                    k,
                    verify_s,
                    overhead_s,
                    draft_dec if plan.source == MODEL else 0.0,
                    calls,
                    tokens_decoded,
                    verify_calls,
                )
            event = StepEvent(
                step=stats.n_steps,
                n_draft_max=plan.n_draft if plan is not None else (n_max if self.free or model else 0),
                drafted=drafted,
                emitted=tuple(emitted),
                text=chunk,
                draft_ms=draft_s * 1e3,
                verify_ms=verify_s * 1e3,
                overhead_ms=overhead_s * 1e3,
                stats=stats.freeze(),
                probe=plan is not None and plan.probe,
                offered=offered,
                source=draft.source if draft.tokens else None,
                expected_speedup=plan.expected_speedup if plan is not None else (),
                considered=plan.considered if plan is not None else None,
                threads=target.n_threads,
                thread_trial=thread_trial,
            )
            suspended = time.perf_counter()
            yield event
            held += time.perf_counter() - suspended

        # Read before the sources' end, which may write a file. Teach's step mode holds the answer at its steps for as
        # long as the user reads: what other programs did meanwhile did not slow it, so an answer held for long is given
        # no share at all.
        share = window.others_share() if held <= HELD_SHARE * stats.elapsed_s + HELD_SLACK_S else None
        if begun:
            for drafter in self.free:
                drafter.end(history)
            if model is not None:
                model.end(history)
        text.flush()
        threads = self.threads.full if self.threads is not None else target.n_threads
        # With every layer on a GPU, the CPUs' other users do not hold llama.cpp's kernels back (the governor and the
        # flash-attention timing leave a GPU alone too): the share is kept, not taken for a slowed answer.
        on_gpu = target.offloads_all
        yield FinishEvent(
            reason, text.text, tuple(answer), stats.freeze(), share, not on_gpu and crowded(share, threads)
        )


def _verify(
    draft: Draft, rows: np.ndarray, sampling: SamplingParams, rng: np.random.Generator, judge_probs: bool
) -> Verdict:
    if sampling.greedy:
        verdict = verify_greedy(draft.tokens, rows)
        if not draft.tokens or not judge_probs:
            return verdict
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
