"""The engine's light types: what to load, what to generate, and the ranges they allow.

Nothing here imports llama.cpp, so the settings, the CLI's argument parser and the GUI can use these types
(and tests can build them) without loading a model. Every default and range lives here once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from speculens.engine.events import RunSettings
from speculens.engine.sampling import SamplingParams
from speculens.errors import InvalidInputError

MAX_N_DRAFT = 64
DEFAULT_N_DRAFT = 32
DEFAULT_N_CTX = 4096
# Layers on the GPU unless told otherwise: all of them, as llama.cpp's own tools do (a CPU-only build ignores it).
DEFAULT_GPU_LAYERS = -1
# How far one run's speed can move from the next on a machine others use (this project's VM, plain decoding's spread
# between rounds): the Pair lab's bar for a gain measured once, and Compare's for a difference worth a second look.
NOISY_SPREAD = 0.15
MIN_N_CTX = 256
MAX_N_CTX = 1 << 20


class Strategy(StrEnum):
    """Where draft tokens come from."""

    AUTO = "auto"  # free drafts from prompt lookup and the n-gram cache, the draft model when it pays
    DRAFT = "draft"  # a second, smaller model
    LOOKUP = "lookup"  # prompt lookup
    NGRAM_CACHE = "ngram-cache"  # context + dynamic n-gram statistics
    NGRAM_MAP = "ngram-map"  # a static map built from a corpus
    NONE = "none"  # plain decoding with the target: the baseline

    @property
    def label(self) -> str:
        """The name people read (menus, legends, reports)."""
        return _LABELS[self]

    @property
    def uses_draft_model(self) -> bool:
        """Whether it drafts with a draft model (when one is loaded): only for it is one loaded."""
        return self in (Strategy.AUTO, Strategy.DRAFT)


_LABELS = {
    Strategy.AUTO: "Automatic",  # what it drafts from: the tooltips, and the toolbar for the loaded pair
    Strategy.DRAFT: "Draft model",
    Strategy.LOOKUP: "Prompt lookup",
    Strategy.NGRAM_CACHE: "N-gram cache",
    Strategy.NGRAM_MAP: "N-gram map",
    Strategy.NONE: "None (plain decoding)",
}


class FlashAttention(StrEnum):
    """Whether the models use llama.cpp's flash attention."""

    # measured on a CPU (the faster at each generation's depth, timed once per model, context size and machine);
    # llama.cpp's choice on a GPU
    AUTO = "auto"
    ON = "on"
    OFF = "off"

    @property
    def label(self) -> str:
        """The name people read."""
        return _FLASH_LABELS[self]


_FLASH_LABELS = {
    FlashAttention.AUTO: "Automatic (measured)",
    FlashAttention.ON: "On",
    FlashAttention.OFF: "Off",
}


def recurrent_refusal(model: str) -> str:
    """Why speculation is off for a recurrent target whose state llama.cpp cannot take back."""
    return (
        f"{model} is a recurrent model (Mamba, RWKV and the like), and this llama.cpp cannot take its state back "
        "to an earlier token: every rejected draft would re-read the whole conversation and greedy output could "
        "change, so Speculens does not speculate with it. Choose 'None (plain decoding)' (the automatic strategy "
        "does so by itself)."
    )


class PromptError(InvalidInputError):
    """The prompt cannot be generated from (empty, or too long for the context)."""


class ContextFullError(PromptError):
    """The prompt leaves no room to answer in the context.

    Attributes:
        n_prompt: the prompt's tokens.
        n_ctx: the context size it must fit in.
    """

    def __init__(self, n_prompt: int, n_ctx: int) -> None:
        super().__init__(
            f"the prompt has {n_prompt} tokens but the context holds {n_ctx}, leaving no room to answer: shorten it "
            "(in a chat: leave out older turns, or start a new chat), or raise the context size"
        )
        self.n_prompt = n_prompt
        self.n_ctx = n_ctx


@dataclass(frozen=True)
class GenerationConfig:
    """What one generation does.

    Args:
        strategy: the draft source; ``auto`` lets the adaptive controller pick, each step, among prompt
            lookup, the n-gram cache and (when one is loaded) the draft model, or plain decoding.
        n_draft: the most tokens drafted per step (with ``adaptive``, the upper bound of its choice).
        n_draft_min: a shorter draft is not verified (the step decodes plainly); the draft model drafts at least
            this many tokens (``p_min`` stops it only after them), so a sampled draft is never dropped for
            its content, which would bias the output.
        p_min: a draft model stops when its top probability falls below this: the temperature-1 softmax of
            its logits, before the sampler chain, so the setting means the same greedy or sampling.
        max_tokens: the most tokens generated.
        stop: strings that end the answer (not included in it).
        sampling: temperature, top-k, top-p, min-p, seed.
        adaptive: choose the source and the draft length each step from measured costs and acceptance, down
            to plain decoding when speculation does not pay (:mod:`speculens.engine.adaptive`); off, every
            step asks for ``n_draft`` tokens.
        judge_probs: greedy only: work out the target's probability of each draft token it judged (the token
            view's tooltips, Teach, the events file). That is a softmax over the whole vocabulary per judged
            token, 0.15 ms each for a 152k vocabulary on this 2-core VM: noise beside a CPU's batch, but as much
            as the whole verification on a GPU, where a batch of 9 takes about 2 ms. Off, the events carry none
            (the CLI without ``--events``, benchmarks, the pair lab).
        ngram_map: the n-gram map file of the ``ngram-map`` strategy: read by the first generation that drafts
            from it and kept while the file is the same, so a new map takes no reload of the models.
    """

    strategy: Strategy = Strategy.AUTO
    n_draft: int = DEFAULT_N_DRAFT
    n_draft_min: int = 0
    p_min: float = 0.75
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    adaptive: bool = True
    judge_probs: bool = True
    ngram_map: Path | None = None

    def described(self) -> RunSettings:
        """What chose this answer's tokens besides its seed and sources, as its start event keeps it."""
        s = self.sampling
        return RunSettings(s.temperature, s.top_k, s.top_p, s.min_p, self.n_draft, self.n_draft_min, self.p_min,
                           self.adaptive, self.max_tokens, self.stop)  # fmt: skip

    def validate(self) -> None:
        """Raise ``ValueError`` with a message that says which value is wrong and what is allowed."""
        if not 1 <= self.n_draft <= MAX_N_DRAFT:
            raise InvalidInputError(f"n_draft must be between 1 and {MAX_N_DRAFT}, not {self.n_draft}")
        if not 0 <= self.n_draft_min <= self.n_draft:
            raise InvalidInputError(
                f"n_draft_min must be between 0 and n_draft ({self.n_draft}), not {self.n_draft_min}"
            )
        if not 0.0 <= self.p_min <= 1.0:
            raise InvalidInputError(f"p_min must be between 0 and 1, not {self.p_min}")
        if self.max_tokens < 1:
            raise InvalidInputError(f"max_tokens must be at least 1, not {self.max_tokens}")
        if not isinstance(self.adaptive, bool):
            raise InvalidInputError(f"adaptive must be True or False, not {self.adaptive!r}")
        self.sampling.validate()


@dataclass(frozen=True)
class ModelConfig:
    """Which models to load and how.

    Args:
        target: the target GGUF.
        draft: the draft GGUF (for the ``draft`` strategy; ``auto`` uses it when it pays).
        n_ctx: context size of both models.
        n_threads: CPU threads (0 = automatic).
        n_gpu_layers: target layers offloaded to the GPU (-1 = all).
        n_gpu_layers_draft: draft layers offloaded to the GPU (-1 = all).
        ngram_cache_dir: where the dynamic n-gram cache is kept (``None``: not persisted).
        costs_dir: where the adaptive controller's measured costs are kept between sessions: the target's
            per target and load configuration, a draft model's per pair (``None``: measured afresh each session).
        adaptive_threads: decode with fewer threads while another program keeps a core busy, and with all of
            ``n_threads`` again once it stops (:mod:`speculens.engine.threads`); for an automatic thread count.
            Not in bit-exact mode, nor with layers on a GPU.
        exact: bit-exact verification: load the target in a configuration whose batched logits equal its
            one-token logits (measured at load) and verify in those batch sizes, so greedy speculation
            reproduces plain decoding token for token, at a measured cost in speed. Off (the default), the
            target runs llama.cpp's fastest kernels and verifies a draft in one batch, as llama.cpp's own
            speculative decoding does; batched kernels can round differently and flip a near-tie.
        flash_attn: flash attention for both models. ``auto`` times the target both ways at load on a CPU
            (:meth:`speculens.engine.backend.LlamaBackend.probe_flash_attention`; the timings are kept in
            ``costs_dir``) and runs each generation with the setting faster at its depth
            (:meth:`speculens.engine.session.SpeculativeEngine.fit_flash_attn`); with layers on a GPU it leaves it
            to llama.cpp. Bit-exact mode always has it on.
    """

    target: Path
    draft: Path | None = None
    n_ctx: int = DEFAULT_N_CTX
    n_threads: int = 0
    n_gpu_layers: int = DEFAULT_GPU_LAYERS
    n_gpu_layers_draft: int = DEFAULT_GPU_LAYERS
    ngram_cache_dir: Path | None = None
    costs_dir: Path | None = None
    exact: bool = False
    adaptive_threads: bool = False
    flash_attn: FlashAttention = FlashAttention.AUTO
