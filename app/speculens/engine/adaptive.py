"""Adaptive speculation: choose the draft length each step to maximise expected tokens per second.

A fixed draft length is a bet on the machine and the text. On a GPU, or with a large target, a batch of
k + 1 tokens costs about as much as one, so long drafts pay; on a small CPU a batch of 8 costs several
single steps and a draft model costs half a target step per token, so the same setting is slower than
plain decoding. The controller here measures, in this session:

* the target's verification cost as a function of the batch size ``n = k + 1`` (an EWMA per size, with
  interpolation between measured sizes and a linear fit beyond them: :class:`BatchCosts`);
* the draft model's cost per decode call (draft-free sources cost nothing but their Python time);
* for the current text, by draft position ``j``: how often the drafter delivers position ``j`` when asked
  (a draft model stops early below ``p_min``; prompt lookup finds a continuation or not), and the
  conditional acceptance ``a_j = P(position j accepted | positions < j accepted)``.

With ``P(accepted ≥ i) = Π_{j<i} g_j a_j`` the expected tokens of a step that asks for ``k`` drafts are

    E[tokens | k] = Σ_{i=0..k} Π_{j<i} g_j a_j

(the accepted drafts plus the target's own correction or bonus token; with a constant acceptance ``α``
and full delivery this is ``(1 − α^{k+1}) / (1 − α)``, Leviathan, Kalman & Matias, "Fast Inference from
Transformers via Speculative Decoding", ICML 2023, eq. 1), and its expected time is the draft's cost, the
verification of the delivered batch and our own overhead. The controller picks the ``k`` in
``0..n_draft`` with the best ratio, where ``k = 0`` is plain decoding. It picks plain decoding unless
speculation is expected to win by a margin, and while it decodes plainly it keeps learning:

* draft-free sources are asked for a *shadow* draft (free), which is scored against the tokens the target
  then produces — exactly what verification would have accepted — so the controller notices when the
  text starts repeating (a code rewrite) without paying a single verification;
* every so often (backing off while it keeps losing) it *probes*: one real speculative step with the best
  ``k > 0``, which refreshes the draft model's acceptance and the batch costs. Probes draw on an exploration
  budget (a small share of the decoding time): a draft model that sat out many steps must first catch up on
  the tokens it missed, and on a small CPU that batch alone can cost several target steps.

The controller only changes how many tokens are drafted; verification keeps the output exactly the
target's. This module is pure Python + numpy and knows nothing of llama.cpp.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AdaptiveParams:
    """Tuning of the controller (the defaults suit CPUs and GPUs alike).

    Args:
        cost_alpha: EWMA weight of a new cost measurement.
        accept_alpha: EWMA weight of a new acceptance observation (larger follows the text faster).
        prior_accept: conditional acceptance assumed for a position never observed (the first position;
            deeper positions start from the one before them).
        prior_accept_free: the same for a draft-free source, whose proposals are often plain guesses (its
            shadow drafts raise the estimate for free when the text repeats).
        prior_deliver: probability that the drafter delivers a position never observed.
        prior_weight: how many observations the prior (or the previous position's estimate) is worth.
        evidence_cap: the most observations a position's own mean is worth against its prior (the mean
            itself forgets with ``accept_alpha``; this only bounds how much the prior still pulls).
        prior_slope: verification cost growth per extra batch token, relative to one token, assumed until
            two batch sizes have been measured.
        prior_draft_ratio: a draft-model call's cost relative to a target step, assumed until measured.
        margin: speculation must beat plain decoding's expected rate by this fraction to be chosen.
        probe_every: plain steps before the first probe; doubles after each losing probe.
        probe_every_max: the longest interval between probes.
        probe_budget: the share of decoding time that probes may lose against plain decoding.
        probe_credit: target steps' worth of loss a generation may spend on probes before any budget has
            accrued (the first probe of a text is cheap: the draft model is in sync after the prompt).
        prior_catchup_ratio: a draft-model catch-up token's cost relative to a draft call, until measured.
    """

    cost_alpha: float = 0.1
    accept_alpha: float = 0.08
    prior_accept: float = 0.6
    prior_accept_free: float = 0.35
    prior_deliver: float = 0.9
    prior_weight: float = 2.0
    evidence_cap: float = 32.0
    prior_slope: float = 0.15
    prior_draft_ratio: float = 0.5
    margin: float = 0.03
    probe_every: int = 8
    probe_every_max: int = 64
    probe_budget: float = 0.015
    probe_credit: float = 1.0
    prior_catchup_ratio: float = 0.3


class Ewma:
    """An exponentially weighted mean that starts as a plain mean (no bias towards zero).

    Args:
        alpha: the weight of a new sample once ``1 / count`` has fallen below it.
        clip: once three samples are in, a new sample is clipped to ``[mean / clip, mean * clip]`` so one
            scheduling hiccup cannot swing a cost estimate.
    """

    def __init__(self, alpha: float, clip: float | None = None) -> None:
        self.alpha = alpha
        self.clip = clip
        self.value = 0.0
        self.count = 0

    def add(self, x: float) -> None:
        """Fold one sample in."""
        if self.clip is not None and self.count >= 3 and self.value > 0:
            x = min(max(x, self.value / self.clip), self.value * self.clip)
        self.count += 1
        w = max(self.alpha, 1.0 / self.count)
        self.value += w * (x - self.value)

    @property
    def weight(self) -> float:
        """How many samples the mean is worth (``count``, capped at the EWMA's memory ``1 / alpha``)."""
        return min(float(self.count), 1.0 / self.alpha)


class BatchCosts:
    """The target's verification time as a function of the batch size, learnt online.

    Each measured size keeps an :class:`Ewma`. A size never measured is interpolated linearly between
    its measured neighbours, or extrapolated with a least-squares line through the measured sizes (never
    below the nearest measurement: a bigger batch does not get cheaper). With one measured size only, the
    line's slope comes from ``prior_slope``.

    Args:
        max_batch: the largest batch size tracked.
        alpha: EWMA weight of a new measurement.
        prior_slope: relative growth per extra token assumed with a single measured size.
    """

    def __init__(self, max_batch: int, alpha: float = 0.1, prior_slope: float = 0.15) -> None:
        self.max_batch = max_batch
        self.prior_slope = prior_slope
        self._sizes = [Ewma(alpha, clip=3.0) for _ in range(max_batch + 1)]  # index = batch size

    def observe(self, n: int, seconds: float) -> None:
        """Record one verification of ``n`` tokens that took ``seconds``."""
        if 1 <= n <= self.max_batch and seconds > 0:
            self._sizes[n].add(seconds)

    def measured(self) -> dict[int, float]:
        """The measured sizes and their current estimates."""
        return {n: e.value for n, e in enumerate(self._sizes) if e.count}

    def estimate(self, n: int) -> float | None:
        """Seconds to verify a batch of ``n`` tokens, or ``None`` before any measurement."""
        curve = self.curve(n)
        return None if curve is None else float(curve[n])

    def curve(self, n_max: int) -> np.ndarray | None:
        """Estimated seconds for every batch size up to ``n_max``, or ``None`` before any measurement.

        Args:
            n_max: the largest batch size wanted.

        Returns:
            An array indexed by batch size (index 0 is unused and 0).
        """
        points = self.measured()
        if not points:
            return None
        sizes = np.array(sorted(points), dtype=float)
        values = np.array([points[int(s)] for s in sizes])
        n = np.arange(n_max + 1, dtype=float)
        if len(sizes) == 1:
            out = values[0] * (1 + self.prior_slope * (n - 1)) / (1 + self.prior_slope * (sizes[0] - 1))
        else:
            out = np.interp(n, sizes, values)  # exact at measured sizes, linear between them
            w = np.array([self._sizes[int(s)].weight for s in sizes])
            slope, intercept = _weighted_line(sizes, values, w)
            line = intercept + max(slope, 0.0) * n
            # Beyond the largest measured size: the trend, never below that measurement. Below the smallest:
            # the trend, never above it (a smaller batch is not dearer) and never below a tenth of it.
            out = np.where(n > sizes[-1], np.maximum(line, values[-1]), out)
            out = np.where(n < sizes[0], np.clip(line, 0.1 * values[0], values[0]), out)
        out[0] = 0.0
        return out


def _weighted_line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    xm = float(np.average(x, weights=w))
    ym = float(np.average(y, weights=w))
    var = float(np.average((x - xm) ** 2, weights=w))
    slope = float(np.average((x - xm) * (y - ym), weights=w)) / var if var > 0 else 0.0
    return slope, ym - slope * xm


class CostModel:
    """What this machine charges for a step, kept for a whole session (costs do not depend on the text).

    Args:
        max_batch: the largest verification batch tracked.
        params: the controller's tuning.

    Attributes:
        verify: the target's verification time by batch size.
        draft_call: the draft model's time per decode call (``count == 0`` until it drafted).
        draft_catchup: the draft model's time per token when it catches up on tokens it missed.
    """

    def __init__(self, max_batch: int = 65, params: AdaptiveParams | None = None) -> None:
        self.params = params or AdaptiveParams()
        self.verify = BatchCosts(max_batch, self.params.cost_alpha, self.params.prior_slope)
        self.draft_call = Ewma(self.params.cost_alpha, clip=3.0)
        self.draft_catchup = Ewma(self.params.cost_alpha, clip=3.0)

    def forget_draft(self) -> None:
        """A different draft model was loaded: its cost is unknown again."""
        self.draft_call = Ewma(self.params.cost_alpha, clip=3.0)
        self.draft_catchup = Ewma(self.params.cost_alpha, clip=3.0)

    def catchup_seconds(self, n_tokens: int) -> float:
        """Time for the draft model to evaluate ``n_tokens`` it missed, in one batch."""
        if self.draft_catchup.count:
            per_token = self.draft_catchup.value
        else:
            per_token = self.params.prior_catchup_ratio * self.draft_call_seconds()
        return per_token * n_tokens

    def draft_call_seconds(self) -> float:
        """One draft-model decode call, measured or (before that) ``prior_draft_ratio`` of a target step."""
        if self.draft_call.count:
            return self.draft_call.value
        return self.params.prior_draft_ratio * (self.verify.estimate(1) or 0.0)


class PositionRates:
    """Per-position probabilities estimated from yes/no observations, each shrunk towards the position
    before it (deeper positions are rarely observed, and acceptance changes smoothly with depth).

    Args:
        n: positions tracked.
        alpha: EWMA weight of a new observation.
        prior: the estimate of position 0 before any observation.
        prior_weight: observations the shrinkage target is worth.
        evidence_cap: the most observations a position's own mean is worth.
    """

    def __init__(self, n: int, alpha: float, prior: float, prior_weight: float, evidence_cap: float = 32.0) -> None:
        self.prior = prior
        self.prior_weight = prior_weight
        self.evidence_cap = evidence_cap
        self._ewma = [Ewma(alpha) for _ in range(n)]

    def observe(self, position: int, success: bool) -> None:
        """Record one observation at ``position``."""
        if 0 <= position < len(self._ewma):
            self._ewma[position].add(1.0 if success else 0.0)

    def estimates(self) -> np.ndarray:
        """The current estimate of every position."""
        out = np.empty(len(self._ewma))
        base = self.prior
        for j, e in enumerate(self._ewma):
            w = min(float(e.count), self.evidence_cap)
            base = (self.prior_weight * base + w * e.value) / (self.prior_weight + w)
            out[j] = base
        return out

    def observations(self) -> list[int]:
        """How many observations each position has had."""
        return [e.count for e in self._ewma]


@dataclass
class _Shadow:
    """A shadow draft waiting to be scored: proposed at history length ``start``, scored up to ``scored``."""

    start: int
    tokens: tuple[int, ...]
    scored: int = 0


@dataclass(frozen=True)
class StepPlan:
    """The controller's choice for one step.

    Attributes:
        n_draft: how many tokens to ask of the drafter (0 = plain decoding).
        probe: this step speculates to learn, not because it is expected to pay.
        shadow: how many tokens to ask of a draft-free source for a shadow draft (scored, never verified).
        expected_rate: the expected tokens per second of the choice (0 before anything is measured).
    """

    n_draft: int
    probe: bool = False
    shadow: int = 0
    expected_rate: float = 0.0


class AdaptiveController:
    """Chooses ``n_draft`` per step from measured costs and acceptance (see the module docstring).

    One controller serves one generation (acceptance belongs to the text); the :class:`CostModel` it is
    given can outlive it and serve the session.

    Args:
        n_draft: the most tokens drafted per step.
        draft_model: the drafter is a model (its cost is per decode call); otherwise it is draft-free
            (drafting costs only Python time, and plain steps ask it for shadow drafts).
        costs: the session's cost model (a fresh one if ``None``).
        n_draft_min: drafts shorter than this are dropped, so ``0 < k < n_draft_min`` is never chosen.
        params: tuning.
    """

    def __init__(
        self,
        n_draft: int,
        draft_model: bool,
        costs: CostModel | None = None,
        n_draft_min: int = 0,
        params: AdaptiveParams | None = None,
    ) -> None:
        self.params = params or (costs.params if costs is not None else AdaptiveParams())
        self.n_draft = n_draft
        self.draft_model = draft_model
        self.costs = costs or CostModel(n_draft + 1, self.params)
        self.n_draft_min = n_draft_min
        p = self.params
        prior = p.prior_accept if draft_model else p.prior_accept_free
        self.accept = PositionRates(n_draft, p.accept_alpha, prior, p.prior_weight, p.evidence_cap)
        self.deliver = PositionRates(n_draft, p.accept_alpha, p.prior_deliver, p.prior_weight, p.evidence_cap)
        # Our own time per step (drafting Python included), plain and speculative steps apart.
        self.overhead_plain = Ewma(p.cost_alpha, clip=3.0)
        self.overhead_spec = Ewma(p.cost_alpha, clip=3.0)
        # Plain steps since the last speculative one. A draft model starts at the threshold, so the first
        # step that can be costed is a probe and the acceptance of this text is known early; draft-free
        # sources learn it from shadow drafts.
        self._plain_run = p.probe_every - 1 if draft_model else 0
        self._probe_interval = p.probe_every
        self._elapsed = 0.0  # decoding time observed in this generation
        self._probe_loss = 0.0  # what probes lost against plain decoding
        self._behind = 0  # tokens the draft model has not seen (it is synced when it drafts)
        self._shadows: list[_Shadow] = []

    # ---- the model ----------------------------------------------------------------------------------

    def curves(self, k_max: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Expected tokens and seconds of a step that asks for ``k`` drafts, for every ``k`` in ``0..k_max``.

        Args:
            k_max: the longest draft considered (at most ``n_draft``).

        Returns:
            ``(tokens, seconds)`` arrays indexed by ``k``, or ``None`` before any cost is measured.
        """
        k_max = min(k_max, self.n_draft)
        verify = self.costs.verify.curve(k_max + 1)
        if verify is None:
            return None
        g = self.deliver.estimates()[:k_max]
        a = self.accept.estimates()[:k_max]
        # tokens[k] = Σ_{i=0..k} P(accepted ≥ i),  P(accepted ≥ i) = Π_{j<i} g_j a_j.
        tokens = np.concatenate(([1.0], 1.0 + np.cumsum(np.cumprod(g * a))))
        # P(delivered ≥ i) for i = 0..k_max; a step asking for k verifies 1 + min(delivered, k) tokens.
        at_least = np.concatenate(([1.0], np.cumprod(g)))
        exactly_below = (at_least[:-1] - at_least[1:]) * verify[1 : k_max + 1]  # delivered d < k, batch d + 1
        seconds = np.concatenate(([0.0], np.cumsum(exactly_below))) + at_least * verify[1 : k_max + 2]
        if self.draft_model:
            # A draft of d < k tokens took d + 1 calls (the last one found p < p_min), a full one k calls.
            calls = np.concatenate(([0.0], np.cumsum(at_least[:-1])))
            seconds += self.costs.draft_call_seconds() * calls
        # A draft-free source's Python time is part of the speculative steps' overhead.
        seconds[0] += self._overhead(False)
        seconds[1:] += self._overhead(True)
        return tokens, seconds

    def expected_tokens(self, k: int) -> float:
        """Expected tokens emitted by a step that asks for ``k`` drafts (Leviathan et al. 2023, eq. 1,
        generalised to acceptance and delivery by position): ``Σ_{i=0..k} Π_{j<i} g_j a_j``."""
        g = self.deliver.estimates()[:k]
        a = self.accept.estimates()[:k]
        return 1.0 + float(np.cumprod(g * a).sum())

    def expected_rate(self, k: int) -> float:
        """Expected tokens per second when asking for ``k`` drafts (0 before any measurement)."""
        curves = self.curves(k)
        if curves is None:
            return 0.0
        tokens, seconds = curves
        return float(tokens[k] / seconds[k]) if seconds[k] > 0 else 0.0

    def _plain_seconds(self) -> float | None:
        v1 = self.costs.verify.estimate(1)
        return None if v1 is None else v1 + self._overhead(False)

    def _overhead(self, speculative: bool) -> float:
        if speculative and self.overhead_spec.count:
            return self.overhead_spec.value
        return self.overhead_plain.value

    # ---- decisions ----------------------------------------------------------------------------------

    def plan(self, limit: int) -> StepPlan:
        """Choose this step's draft length.

        Args:
            limit: the most the step may draft (tokens left to generate, context room, ``n_draft``).

        Returns:
            The plan; ``n_draft`` is within ``0..limit``.
        """
        limit = min(limit, self.n_draft)
        if limit <= 0:
            return StepPlan(0)
        shadow = 0 if self.draft_model else limit
        curves = self.curves(limit)
        if curves is None:
            return StepPlan(0, shadow=shadow)  # measure plain decoding first
        tokens, seconds = curves
        rates = tokens / np.maximum(seconds, 1e-9)
        k_min = max(1, self.n_draft_min)
        if k_min > limit:
            return StepPlan(0, shadow=shadow)
        k_best = k_min + int(np.argmax(rates[k_min:]))
        rate_best, rate_plain = float(rates[k_best]), float(rates[0])
        if rate_best > rate_plain * (1.0 + self.params.margin):
            return StepPlan(k_best, expected_rate=rate_best)
        if self._plain_run + 1 >= self._probe_interval:
            catchup = self.costs.catchup_seconds(self._behind) if self.draft_model else 0.0
            loss = max(0.0, float(seconds[k_best]) + catchup - float(tokens[k_best] * seconds[0]))
            allowance = self.params.probe_budget * self._elapsed + self.params.probe_credit * float(seconds[0])
            if self._probe_loss + loss <= allowance:
                return StepPlan(k_best, probe=True, expected_rate=rate_best)
        return StepPlan(0, shadow=shadow, expected_rate=rate_plain)

    # ---- learning -----------------------------------------------------------------------------------

    def observe(
        self,
        plan: StepPlan,
        drafted: int,
        accepted: int,
        verify_s: float,
        overhead_s: float,
        draft_s: float = 0.0,
        draft_calls: int = 0,
        draft_tokens: int | None = None,
    ) -> None:
        """Learn from a finished step.

        Args:
            plan: what :meth:`plan` chose for it.
            drafted: tokens the drafter delivered (and the target verified).
            accepted: how many of them were accepted.
            verify_s: time in the target's decode call (batch of ``drafted + 1``).
            overhead_s: the step's time outside llama.cpp's decode calls.
            draft_s: the draft model's decode time this step (unused for draft-free sources).
            draft_calls: the draft model's decode calls this step.
            draft_tokens: tokens the draft model evaluated this step (``None``: one per call). Its first call
                syncs it to the history: one or two tokens after a speculative step, many after plain ones.
        """
        plain_seconds = self._plain_seconds()
        step_s = verify_s + overhead_s + (draft_s if self.draft_model else 0.0)
        self._elapsed += step_s
        self.costs.verify.observe(drafted + 1, verify_s)
        (self.overhead_spec if plan.n_draft > 0 else self.overhead_plain).add(overhead_s)
        if plan.n_draft == 0 or not self.draft_model:
            self._behind += accepted + 1
        if plan.n_draft == 0:
            self._plain_run += 1
            return
        if self.draft_model and draft_calls > 0:
            self._behind = 0
            synced = (draft_tokens if draft_tokens is not None else draft_calls) - (draft_calls - 1)
            if synced <= 2:
                self.costs.draft_call.add(draft_s / draft_calls)
            else:
                singles = (draft_calls - 1) * self.costs.draft_call_seconds()
                self.costs.draft_catchup.add(max(0.0, draft_s - singles) / synced)
        if plan.probe and plain_seconds is not None:
            self._probe_loss += max(0.0, step_s - (accepted + 1) * plain_seconds)
        self._observe_draft(plan.n_draft, drafted, accepted)
        if not plan.probe:
            self._plain_run = 0
            self._probe_interval = self.params.probe_every
        elif drafted > 0 or self.draft_model:
            # Judge a probe by what it delivered, not by the model it is meant to correct: a probe that
            # beat plain decoding's expected rate brings the next one soon; a losing one waits twice as
            # long. (A draft-free probe that found nothing to draft cost nothing: it probes again.)
            self._plain_run = 0
            won = drafted > 0 and (accepted + 1) / max(step_s, 1e-9) > self.expected_rate(0)
            self._probe_interval = (
                self.params.probe_every if won else min(2 * self._probe_interval, self.params.probe_every_max)
            )

    def _observe_draft(self, asked: int, delivered: int, accepted: int) -> None:
        for j in range(min(asked, delivered + 1)):
            self.deliver.observe(j, j < delivered)
        for j in range(min(delivered, accepted + 1)):
            self.accept.observe(j, j < accepted)

    def shadow_drafted(self, history_len: int, tokens: Sequence[int], asked: int) -> None:
        """Record a draft-free source's shadow draft for the position after ``history_len`` tokens.

        Args:
            history_len: the history's length when it was drafted.
            tokens: what the source proposed (not verified).
            asked: how many tokens it was asked for.
        """
        delivered = min(len(tokens), asked)
        for j in range(min(asked, delivered + 1)):
            self.deliver.observe(j, j < delivered)
        if delivered:
            self._shadows.append(_Shadow(history_len, tuple(tokens[:delivered])))

    def shadow_check(self, history: Sequence[int]) -> None:
        """Score pending shadow drafts against the tokens the target has produced since, position by position.

        In greedy mode a drafted token is accepted exactly when it equals the target's token; when sampling,
        verification of a draft-free source accepts exactly when its sample equals the draft. Either way the
        tokens produced by plain decoding tell what verification would have accepted. One shadow is taken
        per plain step, so in a repeating stretch every step adds evidence.

        Args:
            history: the accepted history so far.
        """
        pending = []
        for shadow in self._shadows:
            tokens, j = shadow.tokens, shadow.scored
            hit = True
            while hit and j < len(tokens) and shadow.start + j < len(history):
                hit = history[shadow.start + j] == tokens[j]
                self.accept.observe(j, hit)
                j += 1
            shadow.scored = j
            if hit and j < len(tokens):
                pending.append(shadow)
        self._shadows = pending

    # ---- reporting ----------------------------------------------------------------------------------

    def acceptance_by_position(self) -> list[float]:
        """The current conditional acceptance estimate per draft position."""
        return [float(a) for a in self.accept.estimates()]

    @property
    def probe_interval(self) -> int:
        """Plain steps between probes now (grows while probes keep losing)."""
        return self._probe_interval

    def __repr__(self) -> str:
        rates = ", ".join(f"{r:.2f}" for r in self.acceptance_by_position()[:8])
        v1 = self.costs.verify.estimate(1)
        t = f"{1e3 * v1:.1f} ms" if v1 is not None and not math.isnan(v1) else "?"
        return f"AdaptiveController(verify(1)={t}, accept=[{rates}])"
