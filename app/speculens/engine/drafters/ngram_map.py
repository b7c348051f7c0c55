"""Drafting from a static n-gram map built from a corpus (``speculens-cli ngram build``).

Useful when the answers follow a known body of text: a code base, documentation, a style of report.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from speculens.engine.drafters.base import EMPTY_DRAFT, Draft
from speculens.engine.drafters.ngram_table import NgramTable

# A map is trusted when its longest matching n-gram was seen at least this often with a clear winner.
MIN_SAMPLES = (2, 2, 1, 1)
MIN_SHARE = (0.5, 0.4, 0.4, 0.4)


class NgramMapDrafter:
    """Drafts the most frequent continuation of the longest suffix found in the map.

    Args:
        table: the loaded map.
    """

    name = "ngram-map"

    def __init__(self, table: NgramTable) -> None:
        self.table = table

    @classmethod
    def from_file(cls, path: Path, fingerprint: str) -> NgramMapDrafter:
        """Load a map built for the vocabulary with this fingerprint."""
        return cls(NgramTable.load(path, fingerprint))

    def begin(self, prompt: Sequence[int]) -> None:
        """The map is static; nothing to prepare."""

    def draft(self, history: Sequence[int], n_max: int) -> Draft:
        """Follow the map for up to ``n_max`` tokens."""
        tokens: list[int] = []
        ctx = list(history[-self.table.ngram_max :])
        while len(tokens) < n_max:
            token = self.table.best(ctx, MIN_SAMPLES, MIN_SHARE)
            if token is None:
                break
            tokens.append(token)
            ctx = [*ctx[1:], token] if len(ctx) >= self.table.ngram_max else [*ctx, token]
        return Draft(tuple(tokens)) if tokens else EMPTY_DRAFT

    def end(self, history: Sequence[int]) -> None:
        """The map never changes during use."""
