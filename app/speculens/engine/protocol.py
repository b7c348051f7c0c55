"""What the rest of the application needs from an engine, free of llama.cpp.

The GUI's worker drives an :class:`Engine` made by an :data:`EngineFactory`; the real one is
:class:`speculens.engine.session.SpeculativeEngine`, and tests hand the worker a fake that yields scripted
events, so the GUI's edge cases (a failed load, a prompt longer than the context, a cancel in mid-answer)
can be reached without a model.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from speculens.engine.config import GenerationConfig, ModelConfig
from speculens.engine.events import Divergence, Event

Messages = Sequence[dict[str, str]]


@dataclass(frozen=True)
class EngineInfo:
    """What is loaded, as the user sees it.

    Attributes:
        target: the target's file name.
        draft: the draft's file name (``None`` when none is loaded).
        description: llama.cpp's one-line description of the target.
        n_ctx: the context size.
        exact: bit-exact verification is on.
        invariant_sizes: the decode-call sizes measured bit-identical to one-token decoding (exact mode).
        gpu_backend: the GPU backend of the llama.cpp build (``None``: CPU only).
        speculation_off: why this target is only decoded plainly (a recurrent model whose state llama.cpp cannot
            take back), or ``None``.
        flash_attn: whether the models run with flash attention (on a CPU, measured: at which depths), and why
            (empty when llama.cpp decided).
        draft_idle: why the loaded draft model cannot pay on this machine, from the costs measured at load (the
            adaptive controller then never drafts with it), or ``None``.
        vocab_fingerprint: the target vocabulary's fingerprint, which an n-gram map must have been built for
            (empty where unknown).
    """

    target: str
    draft: str | None
    description: str
    n_ctx: int
    exact: bool
    invariant_sizes: tuple[int, ...]
    gpu_backend: str | None
    speculation_off: str | None = None
    flash_attn: str = ""
    draft_idle: str | None = None
    vocab_fingerprint: str = ""


class Engine(Protocol):
    """A loaded target (and draft) that generates chat answers as events."""

    config: ModelConfig

    def info(self) -> EngineInfo:
        """What is loaded."""

    def load_draft(self, path: Path) -> None:
        """Load (or replace) the draft model.

        Raises:
            SpeculensError: it cannot be loaded, or cannot draft for the target (the message says why).
        """

    def chat(
        self, messages: Messages, config: GenerationConfig, cancel: threading.Event | None = None
    ) -> Iterator[Event]:
        """Answer the conversation's last message; the events end with a finish event.

        Raises:
            SpeculensError: a bad setting, or a conversation that does not fit the context.
        """

    def chat_divergence(self, messages: Messages, a: Sequence[int], b: Sequence[int]) -> Divergence | None:
        """Where two answers to the conversation first differ, with the target's logits there."""

    def close(self) -> None:
        """Free the models."""


EngineFactory = Callable[[ModelConfig], Engine]
