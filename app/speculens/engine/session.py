"""The engine's front door: load a target (and a draft), then generate or chat.

:class:`SpeculativeEngine` owns the llama.cpp objects. It is not thread-safe by design: one worker thread
owns it (DESIGN.md §3) and every request goes through that thread; only ``cancel`` crosses threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from speculens.engine.adaptive import CostModel
from speculens.engine.backend import BackendParams, LlamaBackend
from speculens.engine.drafters.base import Drafter
from speculens.engine.drafters.draft_model import DraftModelDrafter
from speculens.engine.drafters.ngram_cache import NgramCacheDrafter
from speculens.engine.drafters.ngram_map import NgramMapDrafter
from speculens.engine.drafters.prompt_lookup import PromptLookupDrafter
from speculens.engine.events import Event, FinishEvent
from speculens.engine.generate import GenerationConfig, PromptError, Strategy, generate
from speculens.engine.vocab import VocabMismatchError, vocab_mismatch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelConfig:
    """Which models to load and how.

    Args:
        target: the target GGUF.
        draft: the draft GGUF (only needed for the ``draft`` strategy).
        n_ctx: context size of both models.
        n_threads: CPU threads (0 = automatic).
        n_gpu_layers: target layers offloaded to the GPU (-1 = all).
        n_gpu_layers_draft: draft layers offloaded to the GPU (-1 = all).
        ngram_map: an n-gram map file for the ``ngram-map`` strategy.
        ngram_cache_dir: where the dynamic n-gram cache is kept (``None``: not persisted).
        exact: load the target so that verification reproduces plain decoding bit for bit (no repacked
            weights, verification in batches of at most ``BATCH_INVARIANT_CHUNK`` tokens); ``False``
            allows llama.cpp's faster repacked weights, whose batched rounding can flip greedy near-ties.
    """

    target: Path
    draft: Path | None = None
    n_ctx: int = 4096
    n_threads: int = 0
    n_gpu_layers: int = 0
    n_gpu_layers_draft: int = 0
    ngram_map: Path | None = None
    ngram_cache_dir: Path | None = None
    exact: bool = True


class SpeculativeEngine:
    """A loaded target, an optional draft, and the draft-free sources.

    Args:
        config: the models and their settings.

    Raises:
        BackendError: a model could not be loaded.
        VocabMismatchError: the draft's vocabulary cannot draft for the target's (the message says which
            check failed); the draft-free strategies still work with the target alone.
    """

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.target = LlamaBackend(
            config.target,
            BackendParams(config.n_ctx, config.n_threads, config.n_gpu_layers, batch_invariant=config.exact),
        )
        self.draft: LlamaBackend | None = None
        # What this machine charges for verification and drafting, learnt by the adaptive controller and
        # kept across generations (acceptance is per text and starts afresh each time).
        self.costs = CostModel(chunk=self.target.invariant_chunk)
        self._ngram_cache: NgramCacheDrafter | None = None
        self._ngram_map: NgramMapDrafter | None = None
        if config.draft is not None:
            try:
                self.load_draft(config.draft)
            except BaseException:
                self.close()
                raise

    def load_draft(self, path: Path) -> None:
        """Load (or replace) the draft model, refusing one whose vocabulary does not match the target's."""
        draft = LlamaBackend(
            path, BackendParams(self.config.n_ctx, self.config.n_threads, self.config.n_gpu_layers_draft)
        )
        problem = vocab_mismatch(self.target.vocab, draft.vocab)
        if problem:
            draft.close()
            raise VocabMismatchError(
                f"{path.name} cannot draft for {self.config.target.name}: {problem}. "
                "Draft-model speculation needs the same tokenizer; prompt lookup, the n-gram cache and "
                "an n-gram map still work with the target alone."
            )
        if self.draft is not None:
            self.draft.close()
        self.draft = draft
        self.costs.forget_draft()

    @property
    def fingerprint(self) -> str:
        """The target vocabulary's fingerprint (keys the n-gram files)."""
        return self.target.vocab.fingerprint()

    def drafter(self, config: GenerationConfig, rng: np.random.Generator) -> Drafter | None:
        """The draft source for a generation.

        Raises:
            ValueError: the strategy needs something that is not loaded (a draft model, an n-gram map).
        """
        strategy = Strategy(config.strategy)
        if strategy is Strategy.NONE:
            return None
        if strategy is Strategy.DRAFT:
            if self.draft is None:
                raise ValueError("the draft strategy needs a draft model: load one, or pick a draft-free strategy")
            return DraftModelDrafter(self.draft, config.sampling, config.p_min, self.target.n_vocab, rng)
        if strategy is Strategy.LOOKUP:
            return PromptLookupDrafter(whitespace=self.target.vocab.whitespace_ids)
        if strategy is Strategy.NGRAM_CACHE:
            if self._ngram_cache is None:
                path = None
                if self.config.ngram_cache_dir is not None:
                    path = self.config.ngram_cache_dir / f"{self.fingerprint}.npz"
                self._ngram_cache = NgramCacheDrafter(self.fingerprint, path)
            return self._ngram_cache
        if self._ngram_map is None:
            if self.config.ngram_map is None:
                raise ValueError("the ngram-map strategy needs a map file: build one with 'speculens-cli ngram build'")
            self._ngram_map = NgramMapDrafter.from_file(self.config.ngram_map, self.fingerprint)
        return self._ngram_map

    def generate(
        self,
        prompt: Sequence[int] | str,
        config: GenerationConfig,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Generate a continuation of a prompt (text or tokens); see :func:`speculens.engine.generate.generate`."""
        if isinstance(prompt, str):
            if not prompt.strip():
                raise PromptError("the prompt is empty: type something to continue from")
            tokens = self.target.tokenize(prompt)
        else:
            tokens = list(prompt)
        config.validate()
        rng = np.random.default_rng(config.sampling.seed)
        drafter = self.drafter(config, rng)
        return generate(
            self.target,
            drafter,
            tokens,
            config,
            rng,
            cancel,
            self.draft if config.strategy == Strategy.DRAFT else None,
            self.costs,
        )

    def close(self) -> None:
        """Free both models."""
        if self.draft is not None:
            self.draft.close()
            self.draft = None
        self.target.close()

    def __enter__(self) -> SpeculativeEngine:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class ChatSession:
    """A multi-turn conversation formatted with the target's own chat template.

    Each turn renders the whole conversation and hands its tokens to the engine, whose backends keep the
    common prefix in their KV caches, so only the new turn's tokens are evaluated.

    Args:
        engine: the loaded engine.
        system: an optional system message.
    """

    def __init__(self, engine: SpeculativeEngine, system: str | None = None) -> None:
        self.engine = engine
        self.messages: list[dict[str, str]] = []
        if system:
            self.messages.append({"role": "system", "content": system})

    def send(self, user_text: str, config: GenerationConfig, cancel: threading.Event | None = None) -> Iterator[Event]:
        """Add a user message and generate the assistant's answer; the answer joins the history at the end."""
        if not user_text.strip():
            raise PromptError("the message is empty: type something first")
        messages = [*self.messages, {"role": "user", "content": user_text}]
        tokens = self.engine.target.format_chat(messages)
        events = self.engine.generate(tokens, config, cancel)
        self.messages = messages
        return self._record(events)

    def _record(self, events: Iterator[Event]) -> Iterator[Event]:
        for event in events:
            if isinstance(event, FinishEvent):
                self.messages.append({"role": "assistant", "content": event.text})
            yield event
