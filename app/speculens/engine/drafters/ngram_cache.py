"""Self-speculation from n-gram statistics, as llama.cpp's ``lookup`` example does it.

Three tables are consulted in turn for each drafted token (``common_ngram_cache_draft``):

1. the **context** table, built from the current prompt and answer, with lax thresholds;
2. the **dynamic** table, accumulated over earlier generations and saved in the user data directory,
   with strict thresholds;
3. the **static** table (an n-gram map built from a corpus), if one is loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from speculens.engine.drafters.base import EMPTY_DRAFT, Draft
from speculens.engine.drafters.ngram_table import NgramTable, NgramTableError

log = logging.getLogger(__name__)

# llama.cpp's thresholds (common/ngram-cache.cpp), indexed by n-gram length - 1.
MIN_SAMPLES_LAX = (2, 2, 1, 1)
MIN_PERCENT_LAX = (0.66, 0.50, 0.50, 0.50)
MIN_SAMPLES_STRICT = (4, 3, 2, 2)
MIN_PERCENT_STRICT = (0.75, 0.66, 0.66, 0.66)


class NgramCacheDrafter:
    """Drafts from context, dynamic and static n-gram tables.

    Args:
        fingerprint: the target vocabulary's fingerprint (tables are per vocabulary).
        dynamic_path: where the dynamic table lives between runs (``None``: do not persist).
        static: an optional static table (n-gram map).
    """

    name = "ngram-cache"

    def __init__(self, fingerprint: str, dynamic_path: Path | None = None, static: NgramTable | None = None):
        self.fingerprint = fingerprint
        self.dynamic_path = dynamic_path
        self.static = static
        self.dynamic = NgramTable()
        if dynamic_path is not None and dynamic_path.exists():
            try:
                self.dynamic = NgramTable.load(dynamic_path, fingerprint)
            except NgramTableError as exc:  # a stale or damaged cache is rebuilt, never fatal
                log.warning("ignoring n-gram cache: %s", exc)
        self.context = NgramTable()
        self._seen = 0

    def begin(self, prompt: Sequence[int]) -> None:
        """Start the context table from the prompt."""
        self.context = NgramTable()
        self._seen = 0
        self._update(prompt)

    def _update(self, history: Sequence[int]) -> None:
        self.context.add(history, start=self._seen)
        self._seen = len(history)

    def draft(self, history: Sequence[int], n_max: int) -> Draft:
        """Draft token by token while some table is confident."""
        if len(history) < self._seen:  # history was rewound: recount
            self.begin(history)
        self._update(history)
        tokens: list[int] = []
        ctx = list(history[-self.context.ngram_max :])
        while len(tokens) < n_max:
            token = self.context.best(ctx, MIN_SAMPLES_LAX, MIN_PERCENT_LAX)
            if token is None:
                token = self.dynamic.best(ctx, MIN_SAMPLES_STRICT, MIN_PERCENT_STRICT)
            if token is None and self.static is not None:
                token = self.static.best(ctx, (1,), (0.0,))
            if token is None:
                break
            tokens.append(token)
            ctx = [*ctx[1:], token] if len(ctx) >= self.context.ngram_max else [*ctx, token]
        return Draft(tuple(tokens)) if tokens else EMPTY_DRAFT

    def end(self, history: Sequence[int]) -> None:
        """Fold this generation's statistics into the dynamic table and save it."""
        self._update(history)
        self.dynamic.merge(self.context)
        self.context = NgramTable()
        self._seen = 0
        if self.dynamic_path is not None:
            try:
                self.dynamic.save(self.dynamic_path, self.fingerprint)
            except OSError as exc:
                log.warning("could not save the n-gram cache to %s: %s", self.dynamic_path, exc)
