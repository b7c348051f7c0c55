"""Prompt lookup decoding: continue the text the way an earlier occurrence of its last n-gram continued.

The draft is free (no model runs), and it pays off when the answer repeats the prompt: code edits,
summaries quoting their source, chat turns restating earlier ones. (Saxena, "Prompt Lookup Decoding", 2023;
llama.cpp's ``lookup`` example.)
"""

from __future__ import annotations

from collections.abc import Sequence

from speculens.engine.drafters.base import EMPTY_DRAFT, Draft


class PromptLookupDrafter:
    """Drafts the continuation of the most recent earlier match of the longest suffix n-gram.

    Args:
        ngram_max: the longest suffix tried.
        ngram_min: the shortest suffix accepted as a match.
    """

    name = "lookup"

    def __init__(self, ngram_max: int = 3, ngram_min: int = 1) -> None:
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError("need 1 <= ngram_min <= ngram_max")
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self._history: list[int] = []
        # n-gram -> end (exclusive) of its latest occurrence that is not the current suffix
        self._last_end: dict[tuple[int, ...], int] = {}
        self._indexed_to = 0  # n-grams ending at or before this index are in _last_end

    def begin(self, prompt: Sequence[int]) -> None:
        """Start a new index over the prompt."""
        self._history = []
        self._last_end = {}
        self._indexed_to = 0
        self._extend(prompt)

    def _extend(self, history: Sequence[int]) -> None:
        if history[: len(self._history)] != self._history:  # edited history: index again from scratch
            self._history, self._last_end, self._indexed_to = [], {}, 0
        self._history.extend(history[len(self._history) :])
        # Index every n-gram that ends before the last token (the current suffix is never its own match).
        h = self._history
        for end in range(self._indexed_to + 1, len(h)):
            for n in range(self.ngram_min, self.ngram_max + 1):
                if end - n >= 0:
                    self._last_end[tuple(h[end - n : end])] = end
        self._indexed_to = max(self._indexed_to, len(h) - 1)

    def draft(self, history: Sequence[int], n_max: int) -> Draft:
        """Look the suffix up, longest n-gram first."""
        self._extend(history)
        if n_max <= 0:
            return EMPTY_DRAFT
        h = self._history
        for n in range(min(self.ngram_max, len(h)), self.ngram_min - 1, -1):
            end = self._last_end.get(tuple(h[-n:]))
            if end is not None:
                cont = h[end : end + n_max]
                if cont:
                    return Draft(tuple(cont))
        return EMPTY_DRAFT

    def end(self, history: Sequence[int]) -> None:
        """Nothing to persist."""
