"""Adaptive speculation: choose the draft source and its length each step to maximise expected tokens per second.

A fixed draft length is a bet on the machine and the text. On a GPU, or with a large target, a batch of
k + 1 tokens costs about as much as one, so long drafts pay; on a small CPU a batch of 4 costs three single
steps and a draft model costs half a target step per token, so the same setting is slower than plain
decoding. The controller here measures, in this session:

* the target's one-token cost as a function of the context (:class:`StepCost`), and its verification cost
  for each batch size ``n = k + 1`` relative to it, kept per band of context length (so the estimates follow
  the context as attention gets dearer; :class:`BatchCosts`);
* the draft model's cost per decode call (draft-free sources cost nothing but their Python time);
* for the current text and each source, by draft position ``j``: how often the drafter delivers position
  ``j`` when asked (a draft model stops early below ``p_min``), and the conditional acceptance
  ``a_j = P(position j accepted | positions < j accepted)``, kept apart for each confidence class a
  draft-free source reports (a prompt-lookup draft that continues a long copy is right far more often
  than one found from a single matching token).

With ``P(accepted ≥ i) = Π_{j<i} g_j a_j`` the expected tokens of a step that asks for ``k`` drafts are

    E[tokens | k] = Σ_{i=0..k} Π_{j<i} g_j a_j

(the accepted drafts plus the target's own correction or bonus token; with a constant acceptance ``α``
and full delivery this is ``(1 − α^{k+1}) / (1 − α)``, Leviathan, Kalman & Matias, "Fast Inference from
Transformers via Speculative Decoding", ICML 2023, eq. 1), and its expected time is the draft's cost, the
verification of the delivered batch and our own overhead. Each step the controller compares every source
that could draft — the free drafts prompt lookup and the n-gram cache have already made, and the draft
model, which would still have to run — and picks the source and the ``k`` with the best ratio, or plain
decoding (``k = 0``) unless speculation is expected to win by a margin. It keeps learning while it decodes
plainly:

* a draft-free source drafts *first*, for free; the controller then verifies as much of the draft as pays
  (``delivery`` is known), and the rest — all of it on a plain step — is a *shadow* draft, scored against
  the tokens the target then produces, which is exactly what verification would have accepted. So the
  controller notices when the text starts repeating (a code rewrite) without paying for a verification;
  its acceptance is judged cautiously (a lower confidence bound), since waiting for evidence costs little;
* a draft model drafts after the plan (its drafting is what costs). It *probes*: one real speculative step
  with the best ``k > 0``, three back to back at the start of an answer and then every so often, backing
  off while probes keep losing, and never when even a draft accepted 99% of the time could not win. Probes draw
  on an exploration budget (a small share of the decoding time): a draft model that sat out many steps must
  first catch up on the tokens it missed, and on a small CPU that batch alone can cost several target steps.
  Draft-free sources probe only to measure a batch size never measured.

Timing noise must not steer it: costs are rolling medians (one scheduling hiccup moves nothing), and the loss
guard — what speculation has won or lost against plain decoding in this answer — is kept in *modelled* costs,
so one slow step cannot switch speculation off for a long stretch.

The controller only changes which tokens are verified; verification keeps the output exactly the target's.
This module is pure Python + numpy and knows nothing of llama.cpp.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MODEL = "draft"  # the source name of the draft model (see Drafter.name)
# Context lengths (tokens in the KV cache) from which a new band of verification costs begins (see BatchCosts).
CONTEXT_BANDS = (0, 1024, 2048, 4096, 8192)


def band_of(context: int) -> int:
    """The band of :data:`CONTEXT_BANDS` a context length falls in."""
    return max(i for i, start in enumerate(CONTEXT_BANDS) if context >= start)


@dataclass(frozen=True)
class AdaptiveParams:
    """Tuning of the controller (the defaults suit CPUs and GPUs alike).

    Args:
        cost_window: samples in the rolling median of a cost.
        accept_alpha: EWMA weight of a new acceptance observation (larger follows the text faster).
        accept_alpha_free: the same for a draft-free source, whose shadow drafts bring an observation at
            every position the target reaches, so its estimates can follow the text faster.
        prior_accept: conditional acceptance assumed for a position never observed (the first position;
            deeper positions start from the one before them).
        prior_accept_free: the same for a draft-free source, by the draft's confidence class (its weakest
            proposals are often plain guesses; shadow drafts correct the estimates for free). Measured for
            prompt lookup's classes on a dozen rewrites, chats and code answers of Qwen2.5-Coder (not the
            benchmark suite): 0.22, 0.44, 0.67, 0.89, 0.96 at the first position. Its sixth class, a copy
            just begun in a line of prose, is less sure than one begun in code: 0.4 (chosen on replays of 13
            recorded answers with two cost tables; 0.5–0.65 lost up to 3% on a chat answer). The seventh, a copy
            of prose resumed across a departure, starts where the second does.
        caution_free: standard errors taken off a draft-free source's acceptance estimates before deciding
            (see :meth:`PositionRates.estimates`).
        prior_deliver: probability that the drafter delivers a position never observed.
        prior_weight: how many observations the prior (or the previous position's estimate) is worth.
        prior_weight_free: the same for a draft-free source (its priors are measured, so they count for more).
        prior_deep_free: a draft-free source pools positions from 1 on (see :class:`PositionRates`) with this
            prior, by confidence class: once a copy's first token is right, the next ones are. Measured for
            prompt lookup on 8 validation prompts (rewrites, chats, code; not the benchmark suite): 0.66,
            0.91, 0.91, 0.95, 0.97 per token (rounded here); 0.9 for both prose classes.
        accept_alpha_deep: EWMA weight of a new observation of the pooled positions.
        evidence_cap: the most observations a position's own mean is worth against its prior (the mean
            itself forgets with ``accept_alpha``; this only bounds how much the prior still pulls).
        prior_slope: verification cost growth per extra batch token, relative to one token, assumed beyond
            the largest batch measured (capped there so an untried size gets tried once).
        prior_draft_ratio: a draft-model call's cost relative to a target step, assumed until measured.
        margin: speculation must beat plain decoding's expected rate by this fraction to be chosen.
        probe_every: plain steps before the first probe; doubles after each losing probe (from the
            ``probe_min``-th probe on).
        probe_min: the first probes of a generation, which come back to back whatever they find.
        probe_every_max: the longest interval between probes.
        loss_budget: the share of decoding time that speculation (probes included) may have lost against
            plain decoding, net of what it won, in a generation. A step is taken only if losing *all* of it
            would stay within the budget, so a text on which the estimates are wrong costs at most this much,
            while a text on which speculation wins earns room for longer drafts.
        loss_credit: target steps' worth of loss allowed before any budget has accrued: the first probes of
            a draft model in an answer.
        loss_credit_free: the same for a draft-free source's drafts, which cost no drafting: the first drafts
            of a rewrite. It must cover one short draft lost whole. On a 2-core CPU a batch of 4 costs 3.3
            single steps and one of 8 five, so with one step's credit only a 1-token draft could start a copy
            (a batch of 2 costs 1.9 steps: it never pays), and a rewrite waited a dozen plain steps for
            hindsight credit before its first draft (the JavaScript rewrite: 32-34 steps and 1.46x plain
            decoding; with 4, 26-29 steps and 1.82x).
        hindsight_cap: target steps' worth of credit that declined drafts, scored on their shadows, can give
            the loss guard: enough to unlock the longest drafts once a copy is under way (see
            :meth:`AdaptiveController._score_declined`).
        prior_catchup_ratio: a draft-model catch-up token's cost relative to a draft call, until measured.
        accept_ceiling: the acceptance per draft token that :meth:`AdaptiveController.could_pay` grants a draft
            model: the best it could do. The demo draft accepted 98% of 8-token drafts on the rename rewrite (a
            copy of its prompt) and 79% on code generation; at 100% a 32-token draft "could" beat plain
            decoding by 1% with this VM's costs, so the draft model was given every prompt (15–25 s more before
            a 2,800-token prompt's first token) and costed every step, and never drafted.
    """

    cost_window: int = 15
    accept_alpha: float = 0.05
    accept_alpha_free: float = 0.05
    prior_accept: float = 0.6
    prior_accept_free: tuple[float, ...] = (0.2, 0.4, 0.65, 0.85, 0.95, 0.4, 0.4)
    caution_free: float = 0.5
    prior_deliver: float = 0.9
    prior_weight: float = 2.0
    prior_weight_free: float = 6.0
    prior_deep_free: tuple[float, ...] = (0.7, 0.9, 0.9, 0.95, 0.97, 0.9, 0.9)
    accept_alpha_deep: float = 0.02
    evidence_cap: float = 32.0
    prior_slope: float = 0.15
    prior_draft_ratio: float = 0.5
    margin: float = 0.03
    probe_every: int = 8
    probe_min: int = 3
    probe_every_max: int = 64
    loss_budget: float = 0.01
    loss_credit: float = 1.0
    loss_credit_free: float = 4.0
    hindsight_cap: float = 16.0
    prior_catchup_ratio: float = 0.3
    accept_ceiling: float = 0.99


class Ewma:
    """An exponentially weighted mean that starts as a plain mean (no bias towards zero).

    Args:
        alpha: the weight of a new sample once ``1 / count`` has fallen below it.
    """

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha
        self.value = 0.0
        self.count = 0

    def add(self, x: float) -> None:
        """Fold one sample in."""
        self.count += 1
        w = max(self.alpha, 1.0 / self.count)
        self.value += w * (x - self.value)


class RollingMedian:
    """The median of the last ``window`` samples: a cost estimate that one scheduling hiccup cannot move,
    and that follows a real change (a longer context, another process) within half a window.

    Args:
        window: samples kept.
    """

    def __init__(self, window: int) -> None:
        self._samples: deque[float] = deque(maxlen=window)
        self.count = 0
        self.value = 0.0

    def add(self, x: float) -> None:
        """Fold one sample in."""
        self._samples.append(x)
        self.count += 1
        self.value = float(statistics.median(self._samples))

    @property
    def samples(self) -> list[float]:
        """The samples in the window, oldest first."""
        return list(self._samples)

    @property
    def weight(self) -> float:
        """How many samples the estimate rests on."""
        return float(len(self._samples))


class StepCost:
    """The target's one-token step cost as a function of the context.

    Attention reads every cached cell, so a step costs more as the context grows (the demo target on a 2-core
    CPU: 33 ms at 100 tokens, 51 ms at 1,500), and an answer that copies its prompt takes few plain steps to
    measure it with. A median of the last samples, whatever their contexts, would carry a long answer's
    steps into the next short one (or the last session's into this one) and misjudge plain decoding against
    the batches measured since.

    So the samples are also kept by band of ``band`` tokens of context (the last ``per_band`` of each), and
    the slope is the Theil-Sen estimate through the bands' medians (the median of the slopes between every
    two bands; 0 while one band has samples, never negative, and never so steep that the cost at no context
    would fall under half the cheapest band's). The estimate at a context is the median of the last
    ``window`` samples, each moved to that context along the slope: the level follows the machine of the
    moment, the slope rests on medians that a few slow steps cannot move, and the steps of one long answer,
    all within a band or two, cannot tilt it.

    Args:
        window: samples in the median.
        band: tokens of context per band.
        per_band: samples kept per band.
    """

    # The slope moves slowly: it is refit after this many new samples (a refit costs up to ~0.1 ms with many
    # bands), and at once when a band gets its first sample.
    SLOPE_EVERY = 8

    def __init__(self, window: int, band: int = 256, per_band: int = 15) -> None:
        self._recent: deque[tuple[int, float]] = deque(maxlen=window)
        self._bands: dict[int, deque[tuple[int, float]]] = {}
        self.band = band
        self.per_band = per_band
        self.count = 0
        self._slope: float | None = 0.0  # None: to be recomputed
        self._cache: tuple[int, float] | None = None  # (context, estimate)

    def add(self, context: int, seconds: float) -> None:
        """Fold in one step of ``seconds`` taken with ``context`` tokens in the cache."""
        sample = (int(context), float(seconds))
        self._recent.append(sample)
        self._bands.setdefault(sample[0] // self.band, deque(maxlen=self.per_band)).append(sample)
        self.count += 1
        if self.count % self.SLOPE_EVERY == 0 or len(self._bands[sample[0] // self.band]) == 1:
            self._slope = None
        self._cache = None

    @property
    def slope(self) -> float:
        """Seconds per token of context."""
        if self._slope is None:
            points = sorted(
                (statistics.median(c for c, _ in kept), statistics.median(t for _, t in kept))
                for kept in self._bands.values()
            )
            slopes = [
                (t2 - t1) / (c2 - c1)
                for i, (c1, t1) in enumerate(points)
                for c2, t2 in points[i + 1 :]
                if c2 > c1
            ]
            slope = max(0.0, statistics.median(slopes)) if slopes else 0.0
            floor = 0.5 * min(t for _, t in points)  # the cost at no context, at the least
            self._slope = min([slope, *((t - floor) / c for c, t in points if c > 0)])
        return self._slope

    def at(self, context: int) -> float:
        """The estimated step cost with ``context`` tokens in the cache (0.0 before any sample)."""
        if not self._recent:
            return 0.0
        if self._cache is None or self._cache[0] != context:
            slope = self.slope
            self._cache = (context, _median_at(self._recent, slope, context))
        return self._cache[1]

    @property
    def weight(self) -> float:
        """How many samples the estimate rests on."""
        return float(len(self._recent))

    @property
    def samples(self) -> list[list[float]]:
        """The kept samples as ``[context, seconds]``: every band's, then the most recent, oldest first."""
        kept = [x for band in self._bands.values() for x in band if x not in self._recent]
        return [[c, t] for c, t in [*kept, *self._recent]]


class BatchCosts:
    """The target's verification time as a function of the batch size, learnt online.

    Verification gets dearer as the KV cache grows (attention reads every cell, for each token of the batch),
    so a batch cost measured early in a long answer would be stale by its end, and speculation would look
    cheaper than it is. The one-token cost is therefore estimated at the context of the moment
    (:class:`StepCost`), and every batch size ``n ≥ 2`` keeps a rolling median of its cost *relative to* the
    one-token cost at the context it was measured at; an estimate is that ratio times the one-token cost at
    the current context.

    The ratio itself depends on the context too (measured on the demo target, 2-core CPU: a batch of 4 costs
    2.95 single steps at 64 tokens of context and 3.4 at 1,500; a batch of 16, 8.0 and 10.0), so ratios are
    kept per context band (:data:`CONTEXT_BANDS`): samples of a long-context answer do not make a short
    rewrite's batches look dear, nor the other way round. A band without a sample of a size uses the nearest
    band that has one. :meth:`at` tells the costs the context of the coming steps.

    A ratio sample must compare a batch with single steps of the same moment: a VM's speed drifts by a quarter
    within minutes, and while a copy is verified batch after batch no single step is taken at all, so the last
    single steps' cost is no reference (a batch of 4 read 2.0 single steps instead of 2.9 that way, see the
    README). So every decode call of a size with a known ratio also tells the machine's speed (its time over
    its ratio), and a new ratio sample of a size is taken against the median of the readings of the *other*
    sizes (single steps included) among the last :attr:`SPEED_WINDOW` calls. A size's own readings are never its
    reference, or a wrong ratio would confirm itself for ever: when only one size is verified for a while, it
    takes no samples and its ratio stays where it was, until single steps (or another size) are timed beside it.
    Nor may two sizes verified by turns confirm each other's wrong ratios (both measured in a stall that made
    one single step take seconds): a reading of the other sizes more than :attr:`REFERENCE_SPREAD` away from
    the single steps' gives way to theirs, and a sample under :attr:`RATIO_FLOOR` is dropped.

    A size never measured is interpolated linearly between its measured neighbours, or extrapolated from the
    largest measured one with the slope of a least-squares line through the measured ratios, capped at
    ``prior_slope`` (and never negative: a bigger batch does not get cheaper). When verification is split
    into decode calls of the sizes ``split(n)`` (bit-exact mode), a batch costs the sum of its calls.

    Args:
        max_batch: the largest batch size tracked.
        window: samples in each rolling median.
        prior_slope: relative growth per extra token assumed beyond the largest measured size.
        split: the decode-call sizes a batch of ``n`` is verified in (``None``: one call).
    """

    SPEED_WINDOW = 7  # decode calls whose speed readings make the reference of a new ratio sample
    # The other sizes' reading of the machine's speed may differ from the last single steps' by this factor (a
    # VM drifts by a quarter within minutes); beyond it, those readings rest on wrong ratios, and the single
    # steps are the reference.
    REFERENCE_SPREAD = 1.5
    # A batch does at least one token's work: a sample under this ratio measured a stall, not the batch.
    RATIO_FLOOR = 0.8

    def __init__(
        self,
        max_batch: int,
        window: int = 15,
        prior_slope: float = 0.15,
        split: Callable[[int], Sequence[int]] | None = None,
    ) -> None:
        self.max_batch = max_batch
        self.prior_slope = prior_slope
        self._split = split
        self._top = max(split(max_batch)) if split else max_batch  # the largest single call
        self._single = StepCost(window)
        # The one-token cost each recent decode call implies (its seconds over its size's ratio), as (size,
        # context, seconds): the reference of the other sizes' new ratio samples.
        self._speed: deque[tuple[int, int, float]] = deque(maxlen=self.SPEED_WINDOW)
        self._context = 0  # tokens in the cache for the coming steps (see at)
        # [band][call size]: each band's ratios (sizes 0 and 1 unused)
        self._bands = [[RollingMedian(window) for _ in range(self._top + 1)] for _ in range(len(CONTEXT_BANDS))]
        self._band = 0
        self._ratio_version = 0
        self._allowed: tuple[tuple[int, bool, int], tuple[bool, ...]] | None = None
        self._ratio = self._resolve()  # each call size's ratio for the current band (see _resolve)
        # The relative curve changes only when a batch is measured; it is computed once per change (a step
        # asks for it several times, and every millisecond of ours is a fortieth of a target step here).
        self._cache: tuple[int, np.ndarray] | None = None
        self.revision = 0  # counts the changes of the relative curve (see AdaptiveController.could_pay)

    def observe(self, n: int, seconds: float) -> None:
        """Record one decode call of ``n`` tokens that took ``seconds``."""
        if seconds <= 0:
            return
        if n == 1:
            self._single.add(self._context, seconds)
        elif 2 <= n <= self._top and self._single.count:
            reference = self._reference(n)
            single = self._single.at(self._context)
            if reference is None and not self._ratio[n].count:
                reference = single  # a size never measured: the single steps must do
            elif reference is not None and not 1 / self.REFERENCE_SPREAD <= reference / single <= self.REFERENCE_SPREAD:
                # Two sizes verified by turns would otherwise read the machine for each other, and a wrong pair
                # of ratios (measured in a stall) would confirm itself for ever.
                reference = single
            if reference is not None and seconds / reference >= self.RATIO_FLOOR:
                own = self._bands[self._band][n]
                own.add(seconds / reference)
                if own.count == 1:  # the band's first sample of this size replaces the nearest band's
                    self._ratio = self._resolve()
                self._drop_curve()
        else:
            return
        if n == 1 or self._ratio[n].count:  # a size without a ratio reads nothing of the machine's speed
            ratio = 1.0 if n == 1 else self._ratio[n].value
            self._speed.append((n, self._context, seconds / ratio))

    def _drop_curve(self) -> None:
        self._cache = None
        self.revision += 1

    def _reference(self, n: int) -> float | None:
        """The one-token cost of the moment at the current context as the recent decode calls of sizes other than
        ``n`` read it (moved along the context slope), or ``None`` if there are none."""
        others = [(c, t) for size, c, t in self._speed if size != n]
        return _median_at(others, self._single.slope, self._context) if others else None

    def at(self, context: int) -> None:
        """The coming steps run with ``context`` tokens in the KV cache (the one-token cost's context, and the
        band of ratios)."""
        self._context = context
        band = band_of(context)
        if band != self._band:
            self._band = band
            self._ratio = self._resolve()
            self._drop_curve()

    def _resolve(self) -> list[RollingMedian]:
        """Each call size's ratio for the current band: its own samples, or the nearest band's that has any."""
        self._ratio_version += 1  # which sizes are measured may have changed (see allowed)
        order = sorted(range(len(self._bands)), key=lambda b: (abs(b - self._band), b))
        return [
            next((self._bands[b][n] for b in order if self._bands[b][n].count), self._bands[self._band][n])
            for n in range(self._top + 1)
        ]

    def state(self) -> dict[str, dict[str, list[float]]]:
        """Every band's samples by call size, JSON-ready (see :meth:`restore`)."""
        return {
            str(b): {str(n): e.samples for n, e in enumerate(sizes) if n >= 2 and e.count}
            for b, sizes in enumerate(self._bands)
            if any(e.count for e in sizes)
        }

    def restore(self, state: dict[str, dict[str, list[float]]]) -> None:
        """Take samples saved by :meth:`state`."""
        for b, sizes in state.items():
            if 0 <= int(b) < len(self._bands):
                for n, samples in sizes.items():
                    if 2 <= int(n) <= self._top:
                        for x in samples:
                            self._bands[int(b)][int(n)].add(float(x))
        self._ratio = self._resolve()
        self._drop_curve()

    def _calls(self, n: int) -> Sequence[int]:
        return self._split(n) if self._split else [n]

    def has(self, n: int) -> bool:
        """Whether every decode call of a batch of ``n`` tokens has a measured size."""
        if not self._single.count:
            return False
        return all(c == 1 or self._ratio[c].count > 0 for c in self._calls(n))

    def count(self, n: int) -> int:
        """How many samples the ratio of call size ``n`` rests on (in the current band, or the nearest that has
        any; 0 for none)."""
        return self._ratio[n].count if 2 <= n <= self._top else 0

    def allowed(self, n_max: int) -> Sequence[bool]:
        """For every batch size ``0..n_max``: whether a plan may choose it — measured, or beyond every measured
        size (to be tried once; see :meth:`AdaptiveController.plan`)."""
        key = (n_max, self._single.count > 0, self._ratio_version)
        if self._allowed is None or self._allowed[0] != key:
            top = self.largest_measured()
            self._allowed = (key, tuple(n > top or self.has(n) for n in range(n_max + 1)))
        return self._allowed[1]

    def largest_measured(self) -> int:
        """The largest batch size with a measured cost of its own (1 before any)."""
        return max((n for n, e in enumerate(self._ratio) if n >= 2 and e.count), default=1)

    def measured(self) -> dict[int, float]:
        """The measured call sizes and their current estimates in seconds."""
        if not self._single.count:
            return {}
        one = self._single.at(self._context)
        return {1: one} | {n: one * e.value for n, e in enumerate(self._ratio) if n >= 2 and e.count}

    def estimate(self, n: int) -> float | None:
        """Seconds to verify a batch of ``n`` tokens, or ``None`` before any measurement."""
        if n == 1:
            return self._single.at(self._context) if self._single.count else None
        curve = self.curve(n)
        return None if curve is None else float(curve[n])

    def curve(self, n_max: int) -> np.ndarray | None:
        """Estimated seconds for every batch size up to ``n_max``, or ``None`` before the one-token cost is known.

        Args:
            n_max: the largest batch size wanted.

        Returns:
            An array indexed by batch size (index 0 is unused and 0).
        """
        if not self._single.count:
            return None
        if self._cache is None or len(self._cache[1]) <= n_max:
            if self._cache is not None:  # rebuilt longer, with the single steps' weight of now: a new shape
                self.revision += 1
            self._cache = (n_max, self._relative(max(n_max, self.max_batch)))
        return self._single.at(self._context) * self._cache[1][: n_max + 1]

    def _relative(self, n_max: int) -> np.ndarray:
        """Every batch size's cost relative to one token, up to ``n_max`` (see :meth:`curve`)."""
        points = {1: (1.0, self._single.weight)} | {
            n: (e.value, e.weight) for n, e in enumerate(self._ratio) if n >= 2 and e.count
        }
        sizes = np.array(sorted(points), dtype=float)
        values = np.array([points[int(s)][0] for s in sizes])
        top = max(self._top, n_max) if not self._split else self._top
        n = np.arange(top + 1, dtype=float)
        ratio = np.interp(n, sizes, values)  # exact at measured sizes, linear between them
        slope = self.prior_slope
        if len(sizes) > 1:
            w = np.array([points[int(s)][1] for s in sizes])
            slope = min(max(_weighted_line(sizes, values, w)[0], 0.0), slope)
        # Beyond the largest measured size: its cost plus the trend, but no steeper than ``prior_slope``.
        # Optimism about a size never tried gets it tried (once measured, its own cost counts), while a
        # pessimistic extrapolation from the steep first steps of a CPU's curve would never try it.
        ratio = np.where(n > sizes[-1], values[-1] + slope * (n - sizes[-1]), ratio)
        ratio[0] = 0.0
        if self._split:
            ratio = np.array([0.0] + [sum(ratio[c] for c in self._calls(k)) for k in range(1, n_max + 1)])
        return ratio[: n_max + 1]


def _still(memo: tuple[int, float, float, float, float, float, float], single: float, call: float, over: float,
           plain: float) -> bool | None:
    """:meth:`AdaptiveController.could_pay`'s last answer if the costs have not moved enough to change it, else
    ``None``.

    With the batch curve's shape fixed, a step of ``k`` drafts costs ``D_k = single·R_{k+1} + call·k + over`` (all
    terms ≥ 0). If ``single``, ``call`` and ``plain`` each moved by a factor within ``[1/f, f]`` and ``over`` by
    ``Δ`` seconds, every ``D_k`` lies within ``[D_k (1/f − δ), D_k (f + δ)]`` with ``δ = Δ / min D_k``, so the
    best rate over the bar, ``r = max E_k·plain / D_k / (1 + margin)`` (``E_k`` the expected tokens at the
    acceptance ceiling, a constant), lies within
    ``[r / (f (f + δ)), r·f / (1/f − δ)]``.
    """
    _, single0, call0, over0, plain0, ratio, d_min = memo
    f = 1.0
    for now, then in ((single, single0), (call, call0), (plain, plain0)):
        if now <= 0.0 or then <= 0.0:
            return None
        f = max(f, now / then, then / now)
    delta = abs(over - over0) / d_min
    if 1.0 / f > delta and ratio * f / (1.0 / f - delta) < 1.0:
        return False
    if ratio / (f * (f + delta)) > 1.0:
        return True
    return None


def _median_at(samples: Iterable[tuple[int, float]], slope: float, context: int) -> float:
    """The median of ``(context, seconds)`` samples, each moved to ``context`` along ``slope``."""
    return float(statistics.median(t + slope * (context - c) for c, t in samples))


def _weighted_line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    # Dot products, not np.average: on a dozen points its checks cost more than the arithmetic, and this runs
    # after every measured batch.
    total = float(w.sum())
    xm = float(w @ x) / total
    ym = float(w @ y) / total
    dx = x - xm
    var = float(w @ (dx * dx))
    slope = float(w @ (dx * (y - ym))) / var if var > 0 else 0.0
    return slope, ym - slope * xm


class CostModel:
    """What this machine charges for a step, kept for a whole session (costs do not depend on the text).

    Args:
        max_batch: the largest verification batch tracked.
        params: the controller's tuning.
        split: the decode-call sizes a verification batch is split into (see :class:`BatchCosts`).

    Attributes:
        verify: the target's verification time by batch size.
        draft_call: the draft model's time per decode call (``count == 0`` until it drafted).
        draft_catchup: the draft model's extra time per missed token when it catches up (its first call of a
            step evaluates them in one batch).
    """

    def __init__(
        self,
        max_batch: int = 65,
        params: AdaptiveParams | None = None,
        split: Callable[[int], Sequence[int]] | None = None,
    ) -> None:
        self.params = params or AdaptiveParams()
        self._max_batch, self._split = max_batch, split
        self.forget_verify()
        self.forget_draft()

    def forget_verify(self) -> None:
        """The target's verification costs are unknown again (saved ones that this machine contradicts)."""
        self.verify = BatchCosts(self._max_batch, self.params.cost_window, self.params.prior_slope, self._split)

    def forget_draft(self) -> None:
        """A different draft model was loaded: its cost is unknown again."""
        self.draft_call = RollingMedian(self.params.cost_window)
        self.draft_catchup = RollingMedian(self.params.cost_window)

    def state(self) -> dict[str, Any]:
        """The measurements, as JSON-ready data (see :meth:`restore`)."""
        return self.verify_state() | self.draft_state()

    def verify_state(self) -> dict[str, Any]:
        """The target's verification costs alone (saved per target: they do not depend on the draft model)."""
        return {"verify_single": self.verify._single.samples, "verify_ratio_by_context": self.verify.state()}

    def draft_state(self) -> dict[str, Any]:
        """The draft model's costs alone (saved per pair)."""
        return {"draft_call": self.draft_call.samples, "draft_catchup_last_row": self.draft_catchup.samples}

    def restore(self, state: dict[str, Any]) -> None:
        """Start from measurements saved by :meth:`state` (a later session on the same machine and models):
        the first answer is then planned from real costs, and new samples replace the old within a window.

        Raises:
            ValueError: the data is not such a state.
        """
        self.restore_verify(state)
        self.restore_draft(state)

    def restore_verify(self, state: dict[str, Any]) -> None:
        """Start from the verification costs of :meth:`verify_state` (or :meth:`state`).

        Raises:
            ValueError: the data has no verification costs.
        """
        try:
            v = self.verify
            singles = state["verify_single"]
            # Files of earlier releases kept bare seconds from any context, and ratios measured against them
            # (or one ratio per size for every context, "verify_ratio"): not used; calibration measures afresh.
            if all(isinstance(x, list) and len(x) == 2 for x in singles):
                for context, seconds in singles:
                    v._single.add(int(context), float(seconds))
                v.restore(state.get("verify_ratio_by_context", {}))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a saved cost model: {exc}") from exc

    def restore_draft(self, state: dict[str, Any]) -> None:
        """Start from the draft model's costs of :meth:`draft_state` (or :meth:`state`); none is none measured.

        Raises:
            ValueError: the data is not such a state.
        """
        try:
            for x in state.get("draft_call", []):
                self.draft_call.add(float(x))
            # Files of earlier releases timed the draft's catch-up asking for every row's logits, 40% dearer than
            # the catch-up the draft makes (one row, see calibrate_draft): not used; calibration measures afresh.
            for x in state.get("draft_catchup_last_row", []):
                self.draft_catchup.add(float(x))
        except (TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a saved cost model: {exc}") from exc

    def catchup_seconds(self, n_tokens: int) -> float:
        """Extra time for the draft model to evaluate ``n_tokens`` it missed along with its next call."""
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

    With ``prior_deep``, positions from 1 on are pooled into one estimate with that prior: a copy that has got
    its first token right goes on at a rate that hardly depends on the depth (measured on code rewrites and
    chats, by prompt lookup's confidence class: 0.66 for a guess, 0.9–0.97 for the others), and pooling turns
    every token of every shadow draft into evidence, so the rate of a long copy is learnt within a few steps
    instead of one observation per position per step.

    Args:
        n: positions tracked.
        alpha: EWMA weight of a new observation.
        prior: the estimate of position 0 before any observation.
        prior_weight: observations the shrinkage target is worth.
        evidence_cap: the most observations a position's own mean is worth.
        prior_deep: pool positions from 1 on, with this prior (``None``: one estimate per position).
        alpha_deep: the pooled estimate's EWMA weight.
    """

    def __init__(
        self,
        n: int,
        alpha: float,
        prior: float,
        prior_weight: float,
        evidence_cap: float = 32.0,
        prior_deep: float | None = None,
        alpha_deep: float = 0.02,
    ) -> None:
        self.prior = prior
        self.prior_weight = prior_weight
        self.evidence_cap = evidence_cap
        self.prior_deep = prior_deep
        if prior_deep is None:
            self._ewma = [Ewma(alpha) for _ in range(n)]
        else:
            deep = Ewma(alpha_deep)
            self._ewma = [Ewma(alpha), *[deep] * (n - 1)]
        # The estimates change only with an observation; a step asks for them once per offer and curve (every
        # step's Python time is taken from the target's).
        self._cache: dict[float, np.ndarray] = {}

    def observe(self, position: int, success: bool) -> None:
        """Record one observation at ``position``."""
        if 0 <= position < len(self._ewma):
            self._ewma[position].add(1.0 if success else 0.0)
            self._cache.clear()

    def estimates(self, caution: float = 0.0) -> np.ndarray:
        """The current estimate of every position.

        Args:
            caution: subtract this many standard errors (``sqrt(p (1 - p) / evidence)``), so a position seen
                only a few times counts for less than its mean: a lower confidence bound.

        Returns:
            A read-only array (shared until the next observation).
        """
        out = self._cache.get(caution)
        if out is not None:
            return out
        pooled = self.prior_deep is not None
        out = np.empty(len(self._ewma))
        base = self.prior
        for j, e in enumerate(self._ewma[:2] if pooled else self._ewma):
            w = min(float(e.count), self.evidence_cap)
            if j and self.prior_deep is not None:
                base = self.prior_deep
                w = min(float(e.count), 1.0 / e.alpha)
            base = (self.prior_weight * base + w * e.value) / (self.prior_weight + w)
            out[j] = base
            if caution:
                out[j] = max(0.0, base - caution * math.sqrt(base * (1.0 - base) / (self.prior_weight + w)))
        if pooled and len(out) > 2:
            out[2:] = out[1]  # every deeper position has the pooled estimate
        out.flags.writeable = False
        self._cache[caution] = out
        return out

    def observations(self) -> list[int]:
        """How many observations each position has had."""
        return [e.count for e in self._ewma]


@dataclass
class _Shadow:
    """Draft tokens that were not verified, waiting to be scored against what the target produces.

    ``tokens[:scored]`` were verified (or already scored); they must be in the history for the rest to count.
    """

    source: str
    start: int
    tokens: tuple[int, ...]
    confidence: int
    scored: int = 0
    # The road not taken, to score what it would have won over the step actually taken (see _Declined), and
    # what has been credited for it so far (hits that are certain already count).
    counterfactual: _Declined | None = None
    credited: float = 0.0


@dataclass(frozen=True)
class _Declined:
    """A draft the estimates favoured at length ``k`` but the loss guard held to ``k_taken`` (0: plain).

    Attributes:
        k: the length the estimates favoured.
        seconds: that step's expected time.
        k_taken: the length verified instead.
        seconds_taken: that step's expected time.
        plain: plain decoding's expected time per token.
    """

    k: int
    seconds: float
    k_taken: int
    seconds_taken: float
    plain: float

    def gain(self, hits: int) -> float:
        """What the favoured step would have won over the step taken, with ``hits`` leading tokens right."""
        favoured = (min(hits, self.k) + 1) * self.plain - self.seconds
        taken = (min(hits, self.k_taken) + 1) * self.plain - self.seconds_taken
        return favoured - taken


@dataclass(frozen=True)
class Offer:
    """A draft a free source has already made, for the controller to verify as much of as pays.

    Attributes:
        source: the drafter's name.
        n_tokens: the draft's length.
        confidence: how the drafter found it (its confidence class).
    """

    source: str
    n_tokens: int
    confidence: int = 0


@dataclass(frozen=True)
class StepPlan:
    """The controller's choice for one step.

    Attributes:
        n_draft: how many tokens to verify (0 = plain decoding).
        source: the drafter whose tokens are verified (``None`` on a plain step).
        probe: this step speculates to learn, not because it is expected to pay.
        confidence: the draft's confidence class (draft-free sources), whose acceptance this step teaches.
        expected_speedup: for the source this step chose, or the best one it declined, the expected rate of
            verifying ``k`` of its drafts over plain decoding's, for ``k = 0..`` (empty before costs are
            known). The teaching view draws it: the measured costs, not acceptance alone, set its shape.
        considered: the source ``expected_speedup`` belongs to.
    """

    n_draft: int
    source: str | None = None
    probe: bool = False
    confidence: int = 0
    expected_speedup: tuple[float, ...] = ()
    considered: str | None = None


def _by_class(priors: Sequence[float], confidence: int) -> float:
    """A prior of a confidence class (classes beyond the table take its last entry)."""
    return priors[min(max(confidence, 0), len(priors) - 1)]


class _Source:
    """What the controller knows of one draft source in this generation."""

    def __init__(self, name: str, n_draft: int, params: AdaptiveParams) -> None:
        self.name = name
        self.model = name == MODEL
        self.params = params
        self.n_draft = n_draft
        self.accept: dict[int, PositionRates] = {}  # one table per confidence class
        self.deliver = PositionRates(n_draft, params.accept_alpha, params.prior_deliver, params.prior_weight)
        self.overhead = RollingMedian(params.cost_window)  # our own time per speculative step with it

    def rates(self, confidence: int) -> PositionRates:
        table = self.accept.get(confidence)
        if table is None:
            p = self.params
            if self.model:
                prior, alpha = p.prior_accept, p.accept_alpha
            else:
                prior = _by_class(p.prior_accept_free, confidence)
                alpha = p.accept_alpha_free
            weight = p.prior_weight if self.model else p.prior_weight_free
            deep = None if self.model else _by_class(p.prior_deep_free, confidence)
            table = self.accept[confidence] = PositionRates(
                self.n_draft, alpha, prior, weight, p.evidence_cap, deep, p.accept_alpha_deep
            )
        return table


class AdaptiveController:
    """Chooses the source and ``n_draft`` per step from measured costs and acceptance (module docstring).

    A draft model is planned *before* it drafts (its drafting is what costs); a draft-free source drafts
    first, for free, and the plan picks how much of that draft to verify, knowing its length and confidence.

    One controller serves one generation (acceptance belongs to the text); the :class:`CostModel` it is
    given can outlive it and serve the session.

    Args:
        n_draft: the most tokens drafted per step.
        sources: the draft sources' names; :data:`MODEL` is the draft model, the others are draft-free.
        costs: the session's cost model (a fresh one if ``None``).
        n_draft_min: drafts shorter than this are dropped, so ``0 < k < n_draft_min`` is never chosen.
        params: tuning.
    """

    def __init__(
        self,
        n_draft: int,
        sources: Sequence[str],
        costs: CostModel | None = None,
        n_draft_min: int = 0,
        params: AdaptiveParams | None = None,
    ) -> None:
        self.params = params or (costs.params if costs is not None else AdaptiveParams())
        self.n_draft = n_draft
        self.costs = costs or CostModel(n_draft + 1, self.params)
        self.n_draft_min = n_draft_min
        self.sources = {name: _Source(name, n_draft, self.params) for name in sources}
        self.model = self.sources.get(MODEL)
        p = self.params
        self.overhead_plain = RollingMedian(p.cost_window)
        # Plain steps since the draft model last drafted. It starts at the threshold, so the first step that
        # can be costed is a probe and the acceptance of this text is known early; draft-free sources learn
        # it from shadow drafts.
        self._plain_run = p.probe_every - 1 if self.model else 0
        self._probe_interval = p.probe_every
        self._elapsed = 0.0  # decoding time observed in this generation
        self._n_probes = 0
        self._ledger = 0.0  # what speculative steps won (or, negative, lost) against plain decoding, modelled
        # What the speculation the loss guard declined would have won, scored on shadow drafts (capped).
        self._hindsight = 0.0
        self._declined: dict[str, _Declined] = {}
        self._shadows: list[_Shadow] = []
        # (source, confidence) -> the history positions of its last verified draft, whose acceptance observe()
        # has learnt already: a shadow of the same class covering them must not count them again.
        self._verified: dict[tuple[str, int], range] = {}
        self._pay_memo: tuple[int, float, float, float, float, float, float] | None = None  # see could_pay

    @property
    def draft_free(self) -> bool:
        """Whether every source is draft-free."""
        return self.model is None

    def accept(self, confidence: int = 0, source: str | None = None) -> PositionRates:
        """The acceptance estimates of one source (default: the first) and confidence class."""
        return self._source(source).rates(confidence)

    def _source(self, name: str | None) -> _Source:
        return self.sources[name] if name is not None else next(iter(self.sources.values()))

    # ---- the model ----------------------------------------------------------------------------------

    def curves(
        self, k_max: int, offered: int | None = None, confidence: int = 0, source: str | None = None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Expected tokens and seconds of a step that verifies up to ``k`` drafts, for every ``k`` in ``0..k_max``.

        Args:
            k_max: the longest draft considered (at most ``n_draft``).
            offered: a draft-free source has already drafted this many tokens (delivery is certain up to
                it); ``None`` for a draft model, whose delivery and drafting calls are estimated.
            confidence: the draft's confidence class.
            source: the source (default: the first).

        Returns:
            ``(tokens, seconds)`` arrays indexed by ``k``, or ``None`` before any cost is measured. The draft
            model's catch-up on missed tokens is not included (see :meth:`plan`).
        """
        src = self._source(source)
        k_max = min(k_max, self.n_draft)
        if offered is not None:
            k_max = min(k_max, offered)
        verify = self.costs.verify.curve(k_max + 1)
        if verify is None:
            return None
        # A draft-free source's acceptance is judged cautiously: its shadow drafts bring evidence for free,
        # so waiting for it costs little, and speculating on a lucky few observations costs a batch each time.
        a = src.rates(confidence).estimates(0.0 if src.model else self.params.caution_free)[:k_max]
        if offered is not None:  # delivered already: a step asking for k verifies k + 1 tokens
            tokens = np.concatenate(([1.0], 1.0 + np.cumsum(np.cumprod(a))))
            seconds = verify[1 : k_max + 2]  # curve() returns a fresh array: ours to add to
        else:
            g = src.deliver.estimates()[:k_max]
            # tokens[k] = Σ_{i=0..k} P(accepted ≥ i),  P(accepted ≥ i) = Π_{j<i} g_j a_j.
            tokens = np.concatenate(([1.0], 1.0 + np.cumsum(np.cumprod(g * a))))
            # P(delivered ≥ i) for i = 0..k_max; a step asking for k verifies 1 + min(delivered, k) tokens.
            at_least = np.concatenate(([1.0], np.cumprod(g)))
            exactly_below = (at_least[:-1] - at_least[1:]) * verify[1 : k_max + 1]  # delivered d < k, batch d + 1
            seconds = np.concatenate(([0.0], np.cumsum(exactly_below))) + at_least * verify[1 : k_max + 2]
            if src.model:
                # A draft of d < k tokens took d + 1 calls (the last one found p < p_min), a full one k calls.
                seconds += self.costs.draft_call_seconds() * np.concatenate(([0.0], np.cumsum(at_least[:-1])))
        # A draft-free source's Python time is part of the overhead.
        seconds[0] += self._overhead(None)
        seconds[1:] += self._overhead(src)
        return tokens, seconds

    def expected_tokens(self, k: int, confidence: int = 0, source: str | None = None) -> float:
        """Expected tokens emitted by a step that asks for ``k`` drafts (Leviathan et al. 2023, eq. 1,
        generalised to acceptance and delivery by position): ``Σ_{i=0..k} Π_{j<i} g_j a_j``."""
        src = self._source(source)
        g = src.deliver.estimates()[:k] if src.model else np.ones(k)
        a = src.rates(confidence).estimates()[:k]
        return 1.0 + float(np.cumprod(g * a).sum())

    def _plain_seconds(self) -> float | None:
        v1 = self.costs.verify.estimate(1)
        return None if v1 is None else v1 + self._overhead(None)

    def _overhead(self, src: _Source | None) -> float:
        if src is not None and src.overhead.count:
            return src.overhead.value
        return self.overhead_plain.value

    def could_pay(self) -> bool:
        """Whether the draft model could beat plain decoding at all on this machine: with its drafts
        accepted as often as a draft model can be (``accept_ceiling`` per token). A draft model that costs half a
        target step per token, with batches that cost several single steps, loses even then; it is then neither
        probed nor kept in sync with the prompt.

        Asked every step, and on a CPU where the answer is a steady no it cost ~70 µs of a 25 ms step (numpy
        on small arrays, with the caches cold after a decode call). So the last full answer is kept with its
        inputs, and while the batch curve's shape is unchanged and the scalar costs have moved too little
        to carry the best rate across the bar (a bound, not a guess), the answer stands.
        """
        if self.model is None:
            return False
        costs = self.costs
        plain = self._plain_seconds()
        single = costs.verify.estimate(1)
        if plain is None or single is None:
            return True  # nothing measured yet: it might
        call, over = costs.draft_call_seconds(), self._overhead(self.model)
        memo = self._pay_memo
        if memo is not None and memo[0] == costs.verify.revision:
            answer = _still(memo, single, call, over, plain)
            if answer is not None:
                return answer
        verify = costs.verify.curve(self.n_draft + 1)
        assert verify is not None
        k = np.arange(1, self.n_draft + 1)
        seconds = verify[2:] + call * k + over
        tokens = np.cumsum(self.params.accept_ceiling ** np.arange(self.n_draft + 1))[1:]  # Σ_{i≤k} α^i
        ratio = float(np.max(tokens / seconds)) * plain / (1.0 + self.params.margin)
        self._pay_memo = (costs.verify.revision, single, call, over, plain, ratio, float(seconds.min()))
        return ratio > 1.0

    def prefill_pays(self, n_prompt: int, n_read: int, max_tokens: int) -> bool:
        """Whether the draft model should evaluate the ``n_read`` tokens of an ``n_prompt``-token prompt its cache
        lacks before the answer: it could pay (:meth:`could_pay`, judged at the prompt's depth) and the most it could
        save over ``max_tokens`` tokens, at its best rate, exceeds what reading them costs it. Otherwise it is left
        behind, and its first draft, if the controller ever chooses one, catches up (at a cost the controller
        counts). A tour's 2,764-token prompt took 36-41 s with the demo draft model instead of 20 on 2 cores, and
        the draft model then sat out: it could beat plain decoding only at an acceptance no text gives it there.
        Only the unread tokens count: a chat's draft cache holds its earlier turns, and a turn that adds a few
        hundred tokens to a long conversation is cheap to read."""
        self.costs.verify.at(n_prompt)
        if not self.could_pay():
            return False
        plain = self._plain_seconds()
        if plain is None or self._pay_memo is None:
            return True  # nothing measured yet: it might
        best = self._pay_memo[5]  # the best rate over plain decoding (at the acceptance ceiling, less the margin)
        return max_tokens * plain * (1.0 - 1.0 / best) > self.costs.catchup_seconds(n_read)

    def draft_idle(self) -> str | None:
        """Why the draft model is left idle on this machine, in a phrase for the user (``None``: it could pay, or
        nothing is measured yet): the best it could do, even with its drafts accepted as often as a draft model
        can be (a tour saw it loaded, "✓ Compatible", and never drafting, with nothing in the window saying why)."""
        if self.model is None or self.could_pay() or self._pay_memo is None:  # no memo: nothing measured yet
            return None
        best = self._pay_memo[5] * (1.0 + self.params.margin)  # the rate could_pay weighed, before its margin
        short = f", short of the {100 * self.params.margin:.0f}% a step must win" if best >= 1.0 else ""
        return (
            f"the draft model cannot pay on this machine: ×{best:.2f} of plain decoding at best, even with "
            f"{100 * self.params.accept_ceiling:.0f}% of its drafts accepted{short}"
        )

    # ---- decisions ----------------------------------------------------------------------------------

    def plan(self, limit: int, offers: Sequence[Offer] = (), behind: int = 0) -> StepPlan:
        """Choose this step's source and draft length.

        Args:
            limit: the most the step may draft (tokens left to generate, context room, ``n_draft``).
            offers: the drafts the free sources have made.
            behind: tokens the draft model would have to catch up on before drafting.

        Returns:
            The plan; ``n_draft`` is within ``0..limit`` (and within the chosen offer).
        """
        limit = min(limit, self.n_draft)
        self._declined = {}
        k_min = max(1, self.n_draft_min)
        plain = self._plain_seconds()
        if limit < k_min or plain is None:
            return StepPlan(0)  # nothing worth drafting, or plain decoding measured first
        rate_plain = 1.0 / plain
        # What may still be lost in this generation (what it earned, plus each source's credit); a step is
        # affordable if losing all of it fits.
        p = self.params
        earned = self._ledger + self._hindsight + p.loss_budget * self._elapsed
        candidates: list[tuple[_Source, int, int]] = [  # source, how many it offers (or may draft), confidence
            (self.sources[o.source], min(limit, o.n_tokens), o.confidence)
            for o in offers
            if o.source in self.sources and min(limit, o.n_tokens) >= k_min
        ]
        model_ok = self.model is not None and self.could_pay()
        if model_ok:
            assert self.model is not None
            candidates.append((self.model, limit, 0))
        best: StepPlan | None = None
        best_rate = rate_plain * (1.0 + self.params.margin)
        shown: tuple[float, StepPlan] | None = None  # the most promising step, taken or not (for teaching)
        probe: tuple[float, float, StepPlan] | None = None  # expected loss, rate, plan
        catchup = self.costs.catchup_seconds(behind) if model_ok else 0.0
        allowed = self.costs.verify.allowed(limit + 1)
        # A draft model's probe buys information, not tokens: it is paid from the exploration budget alone (and
        # any loss this answer has run up), never from what the free sources won. A long copy's winnings
        # once paid for a probe whose catch-up on 400 missed tokens took 1.3 s of a 5 s answer.
        explore = min(self._ledger, 0.0) + p.loss_budget * self._elapsed + p.loss_credit * plain
        for src, k_max, confidence in candidates:
            room = earned + (p.loss_credit if src.model else p.loss_credit_free) * plain
            curves = self.curves(k_max, None if src.model else k_max, confidence, src.name)
            if curves is None:
                continue
            tokens, seconds = curves
            seconds = seconds.copy()
            if src.model:
                seconds[1:] += catchup
            rates = tokens / np.maximum(seconds, 1e-9)
            speedup = tuple((rates / rate_plain).tolist())
            # Batch sizes whose cost has been measured, or beyond every measured size (to be tried once): a CPU's
            # kernels make some sizes far dearer per token than their neighbours (repacked weights take rows
            # four at a time), which no curve through a few points can guess. Calibration measures a spread.
            ks = [k for k in range(k_min, k_max + 1) if allowed[k + 1]] or [k_min]
            k_top = max(ks, key=lambda k: rates[k])
            if shown is None or rates[k_top] > shown[0]:
                shown = (float(rates[k_top]), StepPlan(0, expected_speedup=speedup, considered=src.name))
            # Affordable: losing all of it (every draft rejected: one token for the step) fits the room.
            affordable = [k for k in ks if seconds[k] - plain <= room]
            if affordable:
                k = max(affordable, key=lambda k: rates[k])
                if rates[k] > best_rate:
                    best_rate = float(rates[k])
                    best = StepPlan(k, src.name, False, confidence, speedup, src.name)
            if not src.model and rates[k_top] > rate_plain * (1.0 + self.params.margin):
                k_taken = best.n_draft if best is not None and best.source == src.name else 0
                taken = float(seconds[k_taken]) if k_taken else plain
                self._declined[src.name] = _Declined(k_top, float(seconds[k_top]), k_taken, taken, plain)
            # Probes learn what plain steps cannot. A draft model's acceptance needs them (now and then); a
            # draft-free source's is learnt from its shadow drafts, so it probes only a batch size whose cost
            # was never measured.
            wanted = self._plain_run + 1 >= self._probe_interval if src.model else not self.costs.verify.has(k_top + 1)
            loss = float(seconds[k_top] - tokens[k_top] * plain)
            if wanted and loss <= (explore if src.model else room) and (probe is None or rates[k_top] > probe[1]):
                probe = (loss, float(rates[k_top]), StepPlan(k_top, src.name, True, confidence, speedup, src.name))
        if best is not None:
            for name, declined in list(self._declined.items()):
                if name != best.source or declined.k_taken != best.n_draft:
                    del self._declined[name]  # only a road not taken against what this step does is scored
            return best
        if probe is not None:
            self._declined.pop(probe[2].source or "", None)
            return probe[2]
        return shown[1] if shown is not None else StepPlan(0)

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
        verify_calls: Sequence[tuple[int, float]] | None = None,
    ) -> None:
        """Learn from a finished step.

        Args:
            plan: what :meth:`plan` chose for it.
            drafted: tokens the drafter delivered (and the target verified).
            accepted: how many of them were accepted.
            verify_s: time in the target's decode calls (batch of ``drafted + 1``).
            overhead_s: the step's time outside llama.cpp's decode calls.
            draft_s: the draft model's decode time this step.
            draft_calls: the draft model's decode calls this step.
            draft_tokens: tokens the draft model evaluated this step (``None``: one per call). Its first call
                syncs it to the history: one or two tokens after a speculative step, many after plain ones.
            verify_calls: the target's decode calls as ``(tokens, seconds)`` (default: one call of
                ``drafted + 1`` tokens taking ``verify_s``).
        """
        src = self.sources.get(plan.source or "") if plan.n_draft > 0 else None
        self._elapsed += verify_s + overhead_s + draft_s
        for n, seconds in verify_calls if verify_calls is not None else [(drafted + 1, verify_s)]:
            self.costs.verify.observe(n, seconds)
        (src.overhead if src is not None else self.overhead_plain).add(overhead_s)
        if src is None or not src.model:
            self._plain_run += 1
        if src is None:
            return
        modelled = (self.costs.verify.estimate(drafted + 1) or verify_s) + self._overhead(src)
        if src.model and draft_calls > 0:
            synced = (draft_tokens if draft_tokens is not None else draft_calls) - (draft_calls - 1)
            if synced <= 2:
                self.costs.draft_call.add(draft_s / draft_calls)
            else:
                # The first call evaluated the missed tokens in one batch: what it cost beyond an ordinary
                # call is the catch-up, per extra token.
                calls = draft_calls * self.costs.draft_call_seconds()
                self.costs.draft_catchup.add(max(0.0, draft_s - calls) / (synced - 1))
            missed = synced - 1 if synced > 2 else 0
            modelled += draft_calls * self.costs.draft_call_seconds() + self.costs.catchup_seconds(missed)
        plain = self._plain_seconds()
        if plain is not None:
            # Modelled, not measured: the estimates already follow real changes, and one slow step (another
            # process, a page fault) must not lock speculation out of the rest of the answer.
            self._ledger += (accepted + 1) * plain - modelled
        if src.model:
            for j in range(min(plan.n_draft, drafted + 1)):
                src.deliver.observe(j, j < drafted)
        rates = src.rates(plan.confidence)
        for j in range(min(drafted, accepted + 1)):
            rates.observe(j, j < accepted)
        if not src.model:
            return
        self._plain_run = 0
        if not plan.probe:
            self._probe_interval = self.params.probe_every
        else:
            # Judge a probe by what it delivered, not by the model it is meant to correct: a probe that
            # beat plain decoding brings the next one soon; a losing one waits twice as long.
            # The first few probes come one after another, whatever they find: one or two observations are
            # too few to back off on, and back to back the draft model never falls behind.
            self._n_probes += 1
            won = drafted > 0 and plain is not None and (accepted + 1) * plain > modelled
            if self._n_probes < self.params.probe_min:
                self._probe_interval = 1
            elif won:
                self._probe_interval = self.params.probe_every
            else:
                doubled = max(2 * self._probe_interval, self.params.probe_every)
                self._probe_interval = min(doubled, self.params.probe_every_max)

    def shadow_drafted(
        self, history_len: int, tokens: Sequence[int], verified: int, confidence: int = 0, source: str | None = None
    ) -> None:
        """Keep the part of a draft-free source's draft that this step does not verify, to score it later.

        Args:
            history_len: the history's length when it was drafted.
            tokens: the whole draft.
            verified: how many of its tokens the step verifies (they are learnt from by :meth:`observe`;
                the rest counts only if all of them are accepted).
            confidence: the draft's confidence class.
            source: the source that drafted it (default: the first).
        """
        name = self._source(source).name
        declined = self._declined.pop(name, None)
        if verified:
            self._verified[(name, confidence)] = range(history_len, history_len + verified)
        if len(tokens) > verified:
            counterfactual = declined if declined is not None and declined.k_taken == verified else None
            self._shadows.append(_Shadow(name, history_len, tuple(tokens), confidence, verified, counterfactual))

    def shadow_check(self, history: Sequence[int]) -> None:
        """Score pending shadow drafts against the tokens the target has produced since, position by position.

        In greedy mode a drafted token is accepted exactly when it equals the target's token; when sampling,
        verification of a draft-free source accepts exactly when its sample equals the draft. Either way the
        tokens the target produced tell what verification would have accepted, so a draft-free source's
        acceptance is learnt on plain steps too, at no cost: the controller notices when the text starts
        repeating (a code rewrite) without paying for a single verification.

        Args:
            history: the accepted history so far.
        """
        alive: list[_Shadow] = []
        for shadow in self._shadows:
            tokens, j, start = shadow.tokens, shadow.scored, shadow.start
            if list(history[start : start + j]) == list(tokens[:j]):
                alive.append(shadow)
            elif shadow.counterfactual is not None:
                # A verified token was rejected: the rest was never in question (and a longer draft would
                # have lost as much, at a higher price).
                hits = next(i for i in range(j) if history[start + i] != tokens[i])
                self._score_declined(shadow, hits, final=True)
        # Token by token: every shadow that reaches a token is scored, but a token teaches each (source,
        # confidence class) at most once — at position 0 from the newest draft, and from position 1 on from the
        # oldest draft of that class still following the text, unless observe() has counted the token for that
        # class already (it was verified) — so one edit is one miss per class, not one for every overlapping
        # draft. Each class learns how its *own* drafts go on: the deep rate of the long-copy class must not
        # wait until its drafts are the oldest alive (an older draft from a weak match usually is), or it
        # learns only from the verified steps.
        position = min((sh.start + sh.scored for sh in alive), default=len(history))
        while position < len(history) and alive:
            token = history[position]
            here = [sh for sh in alive if sh.start + sh.scored == position]
            for source in {sh.source for sh in here}:
                mine = [sh for sh in here if sh.source == source]
                newest = min(mine, key=lambda sh: sh.scored)
                if newest.scored == 0:
                    self.accept(newest.confidence, source).observe(0, token == newest.tokens[0])
                deep = {sh.confidence: sh for sh in sorted(mine, key=lambda sh: sh.scored) if sh.scored > 0}  # oldest
                for confidence, sh in deep.items():
                    if position not in self._verified.get((source, confidence), ()):
                        self.accept(confidence, source).observe(sh.scored, token == sh.tokens[sh.scored])
            for shadow in here:
                hit = token == shadow.tokens[shadow.scored]
                shadow.scored += 1
                if shadow.counterfactual is not None:
                    final = not hit or shadow.scored > shadow.counterfactual.k
                    self._score_declined(shadow, shadow.scored - (0 if hit else 1), final)
                if not hit or shadow.scored >= len(shadow.tokens):
                    alive.remove(shadow)
            position += 1
        self._shadows = alive

    def _score_declined(self, shadow: _Shadow, hits: int, final: bool) -> None:
        """Credit the loss guard with what a declined draft would have won over the step taken (``hits`` of its
        tokens matched the target's), so a text on which speculation lost early can earn its way back, and a
        copy the guard let through a few tokens at a time unlocks the long drafts it deserves.

        Shadow drafts are exact: verification of a draft-free source accepts precisely the tokens the target
        produced, so this is what speculating would have won, not a guess, and it accrues only where the
        estimates already said "speculate". Hits are credited as soon as they are certain (a shadow still on
        course has at least that many), so a copy unlocks long drafts within a step or two; the final score
        settles the account. The credit is capped at ``hindsight_cap`` target steps: it unlocks speculation,
        it does not pay for a string of losses.

        Args:
            shadow: the shadow draft whose counterfactual is scored.
            hits: its leading tokens that matched the target's (so far, unless ``final``).
            final: the shadow missed (or passed the declined length): this is the whole gain.
        """
        declined = shadow.counterfactual
        assert declined is not None
        gain = declined.gain(hits)
        credit = gain if final else max(gain, 0.0)
        cap = self.params.hindsight_cap * declined.plain
        self._hindsight = min(max(self._hindsight + credit - shadow.credited, 0.0), cap)
        shadow.credited = credit
        if final:
            shadow.counterfactual = None

    # ---- reporting ----------------------------------------------------------------------------------

    def acceptance_by_position(self, confidence: int = 0, source: str | None = None) -> list[float]:
        """The current conditional acceptance estimate per draft position."""
        return [float(a) for a in self.accept(confidence, source).estimates()]

    @property
    def probe_interval(self) -> int:
        """Plain steps between probes now (grows while probes keep losing)."""
        return self._probe_interval

    def __repr__(self) -> str:
        v1 = self.costs.verify.estimate(1)
        t = f"{1e3 * v1:.1f} ms" if v1 is not None else "?"
        return f"AdaptiveController(verify(1)={t}, sources={list(self.sources)})"
