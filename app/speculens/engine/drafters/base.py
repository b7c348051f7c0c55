"""The protocol every draft source follows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class Draft:
    """Tokens proposed for the target to verify.

    Attributes:
        tokens: the proposed ids.
        probs: the drafter's probability of each proposed token, or ``None`` for draft-free sources.
        dists: ``(len(tokens), n_vocab_target)`` draft distributions ``q`` when a draft model sampled them
            (needed for rejection sampling); ``None`` otherwise.
        confidence: how the drafter found the tokens, as a small class (0 = its weakest guess); the adaptive
            controller learns acceptance for each class apart, so it can speculate on strong drafts only.
        source: the name of the drafter that made it (set by the generation loop).
    """

    tokens: tuple[int, ...] = ()
    probs: tuple[float, ...] | None = None
    dists: np.ndarray | None = None
    confidence: int = 0
    source: str | None = None


EMPTY_DRAFT = Draft()


class Drafter(Protocol):
    """A source of draft tokens.

    The generator calls :meth:`begin` once per generation with the prompt, :meth:`draft` once per step with
    the whole accepted history (prompt + answer so far), and :meth:`end` when the generation is over.
    """

    name: str

    def begin(self, prompt: Sequence[int]) -> None:
        """Prepare for a generation that continues ``prompt``."""

    def draft(self, history: Sequence[int], n_max: int) -> Draft:
        """Propose up to ``n_max`` tokens to follow ``history``."""

    def end(self, history: Sequence[int]) -> None:
        """The generation is over; ``history`` is everything accepted. Persist what is worth keeping."""
