"""Drafting with a second, smaller model that shares the target's vocabulary."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from speculens.engine.backend import DecodeCancelled, LlamaBackend
from speculens.engine.drafters.base import EMPTY_DRAFT, Draft
from speculens.engine.sampling import SamplingParams, sample, top_probability, transform

# Catch-ups longer than this (tokens) are stopped by the generation's Stop: a prompt's evaluation, not a step's.
CATCHUP_ABORTABLE = 64


class DraftModelDrafter:
    """Proposes tokens by running the draft model autoregressively.

    Its KV cache follows the accepted history: before each draft it is synced to the history, so tokens the
    target rejected are rolled back and the tokens it added are evaluated.

    Args:
        backend: the loaded draft model.
        sampling: the sampling settings; when not greedy, drafts are sampled from ``q`` (the draft's
            distribution after the same transforms as the target's) and ``q`` is returned for rejection
            sampling.
        p_min: stop drafting when the draft's most likely token has a temperature-1 probability below this
            (before the sampler chain, so it means the same greedy or sampling).
        n_vocab_target: the target's vocabulary size: ``q`` rows are given this width and ids the target
            does not have are never proposed.
        rng: the random generator shared with verification (one stream keeps a seed reproducible).
    """

    name = "draft"

    def __init__(
        self,
        backend: LlamaBackend,
        sampling: SamplingParams,
        p_min: float,
        n_vocab_target: int,
        rng: np.random.Generator,
    ) -> None:
        self.backend = backend
        self.sampling = sampling
        self.p_min = p_min
        self.n_vocab_target = n_vocab_target
        self.rng = rng
        self._prompt: Sequence[int] = ()
        self._synced = 0  # history tokens the draft's KV cache holds
        # The generation's Stop, for a catch-up long enough to be a prompt's evaluation (see draft).
        self.cancel: threading.Event | None = None

    def begin(self, prompt: Sequence[int]) -> None:
        """Start a generation; the prompt is evaluated by :meth:`prefill` or by the first draft."""
        self._prompt = prompt
        self._synced = self.backend.common_prefix(prompt)

    def prefill(self) -> None:
        """Evaluate the prompt now, reusing whatever prefix the draft's cache already holds; the generation's Stop
        (:attr:`cancel`) stops it."""
        try:
            self.backend.sync(self._prompt[:-1], cancel=self.cancel)
        except DecodeCancelled:
            self._synced = self.backend.common_prefix(self._prompt)
            raise
        self._synced = self.backend.n_past

    def behind(self, history: Sequence[int]) -> int:
        """Tokens of ``history`` the draft model has not evaluated (its next draft catches up on them)."""
        return len(history) - self._synced

    def draft(self, history: Sequence[int], n_max: int, n_min: int = 0) -> Draft:
        """Run the draft model for up to ``n_max`` tokens; ``p_min`` stops it only once it has ``n_min``.

        A sampled draft must be verified whatever it turned out to be: dropping one because it stopped short
        (after its first tokens led to an unsure one) would keep the drafts of some tokens and not of others,
        and rejection sampling would no longer give the target's distribution. So the length floor is kept
        here, before sampling, rather than by dropping short drafts afterwards.
        """
        if n_max <= 0:
            return EMPTY_DRAFT
        # A draft model kept from the prompt (it could not pay then) evaluates it at its first draft: Stop stops
        # that too. A step's own catch-up goes without (see LlamaBackend.decode).
        cancel = self.cancel if self.behind(history) > CATCHUP_ABORTABLE else None
        try:
            _, logits = self.backend.sync(history, logits_last=True, cancel=cancel)
        except DecodeCancelled:
            self._synced = self.backend.common_prefix(history)
            raise
        assert logits is not None
        self._synced = len(history)
        tokens: list[int] = []
        probs: list[float] = []
        dists: list[np.ndarray] = []
        width = min(self.n_vocab_target, self.backend.n_vocab)
        for i in range(n_max):
            row = logits[:width]
            # p_min is one thing whatever the sampler: the draft's temperature-1 belief in its likeliest token.
            if i >= n_min and top_probability(row) < self.p_min:
                break
            if self.sampling.greedy:
                token = int(np.argmax(row))
                prob = top_probability(row)
            else:
                q = transform(row, self.sampling)
                token = sample(q, self.rng)
                prob = float(q[token])
            tokens.append(token)
            probs.append(prob)
            if not self.sampling.greedy:
                full = np.zeros(self.n_vocab_target, dtype=np.float64)
                full[:width] = q
                dists.append(full)
            if token in self.backend.vocab.eog:
                break  # the answer would end here: whatever came after could never be used
            if i + 1 < n_max:
                if self.backend.n_past + 1 > self.backend.n_ctx:
                    break
                logits = self.backend.decode([token], [0])[0]
        if not tokens:
            return EMPTY_DRAFT
        return Draft(tuple(tokens), tuple(probs), np.stack(dists) if dists else None)

    def end(self, history: Sequence[int]) -> None:
        """Nothing to persist; the KV cache stays for the next turn's prefix reuse."""
