"""The sampler chain shared by the target and the draft.

Speculative sampling is exact only when the target's distribution ``p`` and the draft's ``q`` come out of
the same transforms, so both go through :func:`transform`. The order follows llama.cpp's default chain:
top-k, top-p and min-p on the temperature-1 distribution, then temperature.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speculens.errors import InvalidInputError

# Beyond this the distribution is practically uniform over the kept tokens: no use, and a likely typo.
MAX_TEMPERATURE = 5.0


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen.

    Args:
        temperature: 0 (or less) means greedy: always the most likely token.
        top_k: keep the k most likely tokens (0 = all).
        top_p: keep the smallest set whose probability reaches top_p (1 = all).
        min_p: drop tokens less likely than min_p times the most likely one (0 = none).
        seed: seed of the random generator; ``None`` draws one from the OS.
    """

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = 0

    @property
    def greedy(self) -> bool:
        """True when sampling reduces to argmax."""
        return self.temperature <= 0.0

    def validate(self) -> None:
        """Raise :class:`~speculens.errors.InvalidInputError` (a ``ValueError``) when a value is out of range."""
        if self.top_k < 0:
            raise InvalidInputError(f"top-k must be 0 (off) or positive, not {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidInputError(f"top-p must be in (0, 1], not {self.top_p}")
        if not 0.0 <= self.min_p < 1.0:
            raise InvalidInputError(f"min-p must be in [0, 1), not {self.min_p}")
        if not 0.0 <= self.temperature <= MAX_TEMPERATURE:
            raise InvalidInputError(
                f"temperature must be between 0 (greedy) and {MAX_TEMPERATURE:g}, not {self.temperature}"
            )


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax in float64 along the last axis."""
    x = logits.astype(np.float64, copy=True)
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x


def top_probability(logits: np.ndarray) -> float:
    """Probability of the most likely token at temperature 1 (used by ``p_min``), without a full softmax copy."""
    m = float(logits.max())
    return 1.0 / float(np.exp((logits - m).astype(np.float64)).sum())


def transform(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Turn one row of logits into the sampling distribution.

    Top-k keeps the k likeliest tokens; top-p then keeps the shortest run of them (likeliest first) whose
    temperature-1 probability reaches top_p, and min-p those at least min_p times as likely as the likeliest;
    temperature reshapes what is left. Only the candidates a cut can keep are sorted: sorting a 152k-token
    vocabulary for every verified row (top-k off) costs ~10 ms a row.

    Args:
        logits: shape ``(n_vocab,)``.
        params: the chain's settings; must not be greedy.

    Returns:
        A float64 probability vector of shape ``(n_vocab,)`` with zeros outside the kept set.
    """
    logits = np.asarray(logits, dtype=np.float32)
    n = logits.shape[-1]
    pool = np.sort(np.argpartition(logits, -params.top_k)[-params.top_k :]) if 0 < params.top_k < n else None
    values = (logits if pool is None else logits[pool]).astype(np.float64)
    top = float(values.max())
    weights = np.exp(values - top)  # the temperature-1 probabilities within the pool, times its normaliser
    total = float(weights.sum())
    if params.min_p > 0.0:
        candidates = np.flatnonzero(weights >= params.min_p)  # min-p's cut, in the pool's order
    elif params.top_p < 1.0:
        candidates = _top_p_candidates(values, weights, total, params.top_p)
    else:  # nothing is cut: no sorting at all
        candidates = None
    if candidates is None:
        kept = np.arange(len(values))
    else:
        order = candidates[np.argsort(-values[candidates], kind="stable")]
        if params.top_p < 1.0:
            # Keep tokens up to and including the one that crosses top_p.
            cut = int(np.searchsorted(np.cumsum(weights[order]) / total, params.top_p, side="left")) + 1
            order = order[:cut]
        kept = order
    probs = np.exp((values[kept] - top) / params.temperature)
    probs /= probs.sum()
    out = np.zeros(n, dtype=np.float64)
    out[kept if pool is None else pool[kept]] = probs
    return out


def _top_p_candidates(values: np.ndarray, weights: np.ndarray, total: float, top_p: float) -> np.ndarray:
    """Indices (ascending) of the fewest likeliest tokens whose mass reaches ``top_p``, grown four times at a
    time from 64: the run top-p keeps lies within them."""
    m = 64
    while m < len(values):
        part = np.argpartition(values, -m)[-m:]
        if float(weights[part].sum()) >= top_p * total:
            return np.sort(part)
        m *= 4
    return np.arange(len(values))


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a probability vector."""
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(probs) - 1))
