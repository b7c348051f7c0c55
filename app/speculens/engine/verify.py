"""Verification of drafted tokens against the target model. Pure numpy.

Three rules, each of which leaves the output exactly what the target alone would produce:

* **greedy** — accept drafts while they equal the target's argmax; the first mismatch emits the target's
  argmax (a *correction*); when every draft is accepted the last row gives a *bonus* token.
* **rejection sampling** with the draft distribution ``q`` (Leviathan, Kalman & Matias, "Fast Inference
  from Transformers via Speculative Decoding", ICML 2023; Chen et al., "Accelerating Large Language Model
  Decoding with Speculative Sampling", 2023): accept draft ``x`` with probability ``min(1, p(x)/q(x))``;
  on rejection sample from ``normalize(max(0, p - q))``.
* **sample and compare** for draft-free sources (n-gram, lookup), whose proposals have no distribution:
  sample from ``p`` at each position and accept while the sample equals the draft. Each emitted token is a
  plain sample from ``p``, so this is exact for any sampler.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from speculens.engine.sampling import sample


@dataclass(frozen=True)
class Verdict:
    """The outcome of verifying one draft.

    Attributes:
        n_accepted: how many drafted tokens were accepted (a prefix of the draft).
        next_token: the token the target adds after the accepted prefix (correction or bonus).
        target_probs: the target's probability of each drafted token up to and including the first
            rejected one (``p(x)`` under the sampling distribution, or the softmax in greedy mode).
    """

    n_accepted: int
    next_token: int
    target_probs: tuple[float, ...]


def verify_greedy(draft: Sequence[int], target_logits: np.ndarray) -> Verdict:
    """Greedy verification.

    Args:
        draft: the drafted token ids, ``k`` of them.
        target_logits: ``(k + 1, n_vocab)`` target logits; row ``i`` predicts the token after draft ``i-1``.

    Returns:
        The verdict.
    """
    best = np.argmax(target_logits, axis=-1)
    n = 0
    while n < len(draft) and int(best[n]) == draft[n]:
        n += 1
    return Verdict(n, int(best[n]), ())


def verify_rejection(
    draft: Sequence[int],
    draft_probs: np.ndarray,
    target_probs: np.ndarray,
    rng: np.random.Generator,
) -> Verdict:
    """Speculative rejection sampling (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023).

    Args:
        draft: ``k`` drafted ids, each sampled from the matching row of ``draft_probs``.
        draft_probs: ``(k, n_vocab)`` draft distributions ``q``.
        target_probs: ``(k + 1, n_vocab)`` target distributions ``p`` from the same transform chain.
        rng: the random generator.

    Returns:
        The verdict.
    """
    seen: list[float] = []
    for i, x in enumerate(draft):
        p, q = float(target_probs[i, x]), float(draft_probs[i, x])
        seen.append(p)
        if q > 0.0 and rng.random() * q < p:  # u < p/q without dividing
            continue
        residual = np.maximum(target_probs[i] - draft_probs[i], 0.0)
        total = residual.sum()
        # p == q leaves no residual mass; then p itself is the right distribution (it is never reached
        # with q > 0 because the draft was accepted with probability 1).
        return Verdict(i, sample(residual if total > 0 else target_probs[i], rng), tuple(seen))
    return Verdict(len(draft), sample(target_probs[len(draft)], rng), tuple(seen))


def verify_sample_compare(
    draft: Sequence[int],
    target_dist: Callable[[int], np.ndarray],
    rng: np.random.Generator,
) -> Verdict:
    """Verification of a draft that has no distribution: sample from ``p``, accept while it matches.

    Args:
        draft: ``k`` drafted ids.
        target_dist: returns the target's sampling distribution at row ``i`` (0..k); called lazily so
            rows after the first mismatch are never transformed.
        rng: the random generator.

    Returns:
        The verdict.
    """
    seen: list[float] = []
    for i in range(len(draft) + 1):
        p = target_dist(i)
        token = sample(p, rng)
        if i < len(draft):
            seen.append(float(p[draft[i]]))
            if token == draft[i]:
                continue
        return Verdict(i, token, tuple(seen))
    raise AssertionError("unreachable")
