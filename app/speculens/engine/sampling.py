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

    Args:
        logits: shape ``(n_vocab,)``.
        params: the chain's settings; must not be greedy.

    Returns:
        A float64 probability vector of shape ``(n_vocab,)`` with zeros outside the kept set.
    """
    logits = np.asarray(logits, dtype=np.float32)
    n = logits.shape[-1]
    keep = np.arange(n)
    if 0 < params.top_k < n:
        keep = np.argpartition(logits, -params.top_k)[-params.top_k :]
    order = keep[np.argsort(-logits[keep], kind="stable")]
    sorted_logits = logits[order].astype(np.float64)
    base = np.exp(sorted_logits - sorted_logits[0])
    base /= base.sum()
    cut = len(order)
    if params.top_p < 1.0:
        # Keep tokens up to and including the one that crosses top_p.
        cut = min(cut, int(np.searchsorted(np.cumsum(base), params.top_p, side="left")) + 1)
    if params.min_p > 0.0:
        cut = min(cut, max(1, int(np.count_nonzero(base >= params.min_p * base[0]))))
    order = order[:cut]
    scaled = (sorted_logits[:cut] - sorted_logits[0]) / params.temperature
    probs = np.exp(scaled)
    probs /= probs.sum()
    out = np.zeros(n, dtype=np.float64)
    out[order] = probs
    return out


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a probability vector."""
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(probs) - 1))
