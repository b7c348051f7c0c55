"""The user's settings: a Qt-free dataclass saved as versioned JSON, and the one table of their ranges.

The GUI edits a :class:`Settings` (through the settings store), the worker turns it into the engine's
``ModelConfig`` and ``GenerationConfig``. Every field's label, tip, range and whether it needs the models
reloaded is declared once, in :data:`SPECS`; validation, the settings form and the reload note all read it,
and the engine's own limits (:mod:`speculens.engine.config`) are its source. Loading never fails: a missing
file gives the defaults, unknown keys are ignored, a value of the wrong type or out of range falls back to
its default, and a file that is not JSON at all is kept as ``settings.json.corrupt`` (so the user can
recover it) before the defaults are used. Writes are atomic (:mod:`speculens.atomic`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from speculens import paths
from speculens.atomic import write_json_atomic
from speculens.engine.config import (
    DEFAULT_GPU_LAYERS,
    DEFAULT_N_CTX,
    DEFAULT_N_DRAFT,
    MAX_N_CTX,
    MAX_N_DRAFT,
    MIN_N_CTX,
    FlashAttention,
    GenerationConfig,
    ModelConfig,
    Strategy,
)
from speculens.engine.sampling import MAX_TEMPERATURE, SamplingParams
from speculens.errors import InvalidInputError
from speculens.words import and_list

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3
STRATEGIES = tuple(s.value for s in Strategy)
FLASH_ATTN = tuple(f.value for f in FlashAttention)
# Strategies that use the draft model (so the draft file is loaded only for them).
DRAFT_STRATEGIES = frozenset(s.value for s in Strategy if s.uses_draft_model)


@dataclass(frozen=True)
class FieldSpec:
    """How one setting is shown and checked.

    Attributes:
        label: the form's label.
        tip: the tooltip: what it does.
        low: the smallest allowed value (numbers).
        high: the largest allowed value (numbers).
        step: the step of a spin box.
        reload: the models must be loaded again for a change to take effect.
    """

    label: str
    tip: str
    low: float | None = None
    high: float | None = None
    step: float = 1.0
    reload: bool = False

    def allows(self, value: object) -> bool:
        """Whether ``value`` is in range (non-numbers are always allowed here)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return True
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)


SPECS: dict[str, FieldSpec] = {
    "strategy": FieldSpec(
        "Strategy", "Where draft tokens come from; Automatic picks the best source each step, or plain decoding"
    ),
    "n_draft": FieldSpec("Draft tokens (n_draft)", "Most tokens drafted per step", 1, MAX_N_DRAFT),
    "adaptive": FieldSpec(
        "Adaptive draft length",
        "Choose the source and draft length each step from measured costs and acceptance, up to n_draft and "
        "down to plain decoding when speculation does not pay",
    ),
    "n_draft_min": FieldSpec(
        "Minimum draft (n_draft_min)", "Drafts shorter than this are not verified (0 = any)", 0, MAX_N_DRAFT
    ),
    "p_min": FieldSpec(
        "Draft confidence (p_min)", "A draft model stops when its top token is less likely than this", 0, 1, 0.05
    ),
    "temperature": FieldSpec(
        "Temperature",
        "0 = greedy: the target's own choices, token for token (Top-k, Top-p, Min-p and Seed are then unused)",
        0,
        MAX_TEMPERATURE,
        0.1,
    ),
    "top_k": FieldSpec("Top-k", "Keep the k most likely tokens (0 = all)", 0, 100_000),
    "top_p": FieldSpec("Top-p", "Keep the most likely tokens until their probability reaches this", 0.01, 1, 0.01),
    "min_p": FieldSpec("Min-p", "Drop tokens less likely than this times the top token", 0, 0.99, 0.01),
    "seed": FieldSpec(
        "Seed", "Random seed for sampling (-1 = a new one each answer; the seed used is shown)", -1, 2**31 - 1
    ),
    "max_tokens": FieldSpec("Max tokens", "The longest answer, in tokens", 1, 1_000_000),
    "n_ctx": FieldSpec(
        "Context size",
        "The most tokens a conversation may hold (both models); their memory grows with the conversation",
        MIN_N_CTX,
        MAX_N_CTX,
        1024,
        reload=True,
    ),
    "threads": FieldSpec("Threads", "CPU threads (0 = automatic)", 0, 1024, reload=True),
    "n_gpu_layers": FieldSpec("GPU layers, target", "Target layers on the GPU (-1 = all)", -1, 1000, reload=True),
    "n_gpu_layers_draft": FieldSpec(
        "GPU layers, draft", "Draft layers on the GPU (-1 = all)", -1, 1000, reload=True
    ),
    "exact": FieldSpec(
        "Bit-exact verification",
        "Greedy speculation reproduces plain decoding token for token, at a measured cost in speed (the "
        "target runs kernels whose batches round exactly like single tokens). Off: llama.cpp's fastest "
        "kernels, as its own speculative decoding uses",
        reload=True,
    ),
    "flash_attn": FieldSpec(
        "Flash attention",
        "llama.cpp's flash attention for both models. Automatic: on a CPU, whichever of on and off this machine "
        "runs faster at the context each answer decodes at, timed once per model and context size (on a small CPU, "
        "off can decode long contexts 20% faster, and on is as fast or faster at short ones); "
        "on a GPU, llama.cpp's choice. Bit-exact verification always has it on",
        reload=True,
    ),
    "ngram_map_path": FieldSpec(
        "N-gram map",
        "A static n-gram map built from your own files (Build…, or 'speculens-cli ngram build')",
    ),
    "target_path": FieldSpec("Target model", "The target model file", reload=True),
    "draft_path": FieldSpec("Draft model", "The draft model file", reload=True),
    "system_prompt": FieldSpec("System prompt", "An optional system message for new chats"),
}

RELOAD_FIELDS = frozenset(name for name, spec in SPECS.items() if spec.reload)


def field_labels(names: Iterable[str]) -> str:
    """Settings named as the Settings panel labels them, for a sentence: "context size, GPU layers (target) and
    threads" (lower case but for acronyms; a label's own comma in brackets, so a list of two reads as two)."""

    def words(name: str) -> str:
        label = SPECS[name].label if name in SPECS else name
        if label[1:2].islower():
            label = label[0].lower() + label[1:]
        head, _, tail = label.partition(", ")
        return f"{head} ({tail})" if tail else head

    return and_list([words(name) for name in sorted(names)])


@dataclass
class Settings:
    """Everything the user can set, with defaults that work on a laptop CPU (see :data:`SPECS`)."""

    strategy: str = Strategy.AUTO.value
    n_draft: int = DEFAULT_N_DRAFT
    adaptive: bool = True
    n_draft_min: int = 0
    p_min: float = 0.75
    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = -1
    max_tokens: int = 512
    n_ctx: int = DEFAULT_N_CTX
    threads: int = 0
    n_gpu_layers: int = DEFAULT_GPU_LAYERS
    n_gpu_layers_draft: int = DEFAULT_GPU_LAYERS
    exact: bool = False
    flash_attn: str = FlashAttention.AUTO.value
    ngram_map_path: str = ""
    target_path: str = ""
    draft_path: str = ""
    system_prompt: str = ""

    def validated(self) -> Settings:
        """A copy with every out-of-range value replaced by its default (and the reason logged)."""
        default = Settings()
        out = dataclasses.replace(self)
        for name, spec in SPECS.items():
            value = getattr(out, name)
            ok = spec.allows(value) and (name != "strategy" or value in STRATEGIES)
            ok = ok and (name != "flash_attn" or value in FLASH_ATTN)
            if not ok:
                log.warning("setting %s=%r is out of range; using %r", name, value, getattr(default, name))
                setattr(out, name, getattr(default, name))
        if not 0 <= out.n_draft_min <= out.n_draft:
            out.n_draft_min = min(default.n_draft_min, out.n_draft)
        # Model paths as the library keeps them (absolute, links resolved), so that a path typed into
        # settings.json, or reached through a link, still names its library entry wherever paths are compared.
        out.target_path = str(Path(out.target_path).expanduser().resolve()) if out.target_path else ""
        out.draft_path = str(Path(out.draft_path).expanduser().resolve()) if out.draft_path else ""
        return out

    @property
    def uses_draft(self) -> bool:
        """Whether the chosen strategy loads the draft model (when one is chosen)."""
        return bool(self.draft_path) and self.strategy in DRAFT_STRATEGIES

    def needs_reload(self, loaded: Settings) -> set[str]:
        """The fields changed since the models were loaded with ``loaded`` that only take effect on a reload
        (switching to or from a strategy that uses the draft model counts: the draft is loaded only for it)."""
        changed = {name for name in RELOAD_FIELDS if getattr(self, name) != getattr(loaded, name)}
        if not self.uses_draft:  # no draft is loaded for it: its file and GPU layers wait for a strategy with one
            changed -= {"draft_path", "n_gpu_layers_draft"}
        if self.uses_draft != loaded.uses_draft:
            changed.add("strategy")
        return changed

    def needs_reload_to_answer(self, loaded: Settings) -> set[str]:
        """The changes of :meth:`needs_reload` the next answer would notice: a draft that is loaded but no longer
        used only sits idle until a reload, and is not worth one before an answer."""
        changed = self.needs_reload(loaded)
        if loaded.uses_draft and not self.uses_draft:
            changed -= {"strategy", "n_gpu_layers_draft"}
        return changed

    def to_dict(self) -> dict[str, Any]:
        """The JSON document: the fields plus ``schema_version``."""
        return {"schema_version": SCHEMA_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: object) -> Settings:
        """Build settings from a parsed JSON document, keeping every value that is usable.

        Args:
            data: whatever the file held; anything that is not a dict gives the defaults.

        Returns:
            The settings, validated.
        """
        settings = cls()
        if not isinstance(data, dict):
            return settings
        version = data.get("schema_version")
        if isinstance(version, int) and version > SCHEMA_VERSION:
            log.warning("settings were written by a newer Speculens (schema %s); reading what we know", version)
        for f in fields(cls):
            if f.name not in data:
                continue
            value = _coerce(data[f.name], type(getattr(settings, f.name)))
            if value is None:
                log.warning("ignoring setting %s=%r: wrong type", f.name, data[f.name])
                continue
            setattr(settings, f.name, value)
        if isinstance(version, int) and version < 2:
            # Schema 1 knew no automatic strategy and seeded every answer with 0; both defaults changed.
            if settings.strategy == Strategy.DRAFT.value:
                settings.strategy = Strategy.AUTO.value
            if data.get("seed") == 0:
                settings.seed = -1
        if isinstance(version, int) and version < 3:
            # Up to schema 2 the GPU held no layers unless told to, and the settings file kept that default as
            # 0: on a GPU build, every user who never touched it decoded on the CPU at a fraction of the speed.
            for name in ("n_gpu_layers", "n_gpu_layers_draft"):
                if data.get(name) == 0:
                    setattr(settings, name, DEFAULT_GPU_LAYERS)
        return settings.validated()


def _coerce(value: object, kind: type) -> Any:
    # JSON has one number type; accept 8.0 for an int field, never a bool (True is an int in Python).
    if kind is bool:
        return value if isinstance(value, bool) else None
    if isinstance(value, bool):
        return None
    if kind is int:
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return None
    if kind is float:
        if isinstance(value, int | float) and math.isfinite(value):
            return float(value)
        return None
    if kind is str:
        return value if isinstance(value, str) else None
    return None


def load_settings(path: Path | None = None) -> Settings:
    """The settings in the file (see :func:`read_settings`); never raises."""
    return read_settings(path)[0]


def read_settings(path: Path | None = None) -> tuple[Settings, str]:
    """Read the settings file; never raises.

    Args:
        path: the file (default: :func:`speculens.paths.settings_file`).

    Returns:
        The settings, or the defaults when the file is missing or unusable; and, where it was there but unusable, a
        sentence saying so for the user ("" otherwise): a tour's damaged file gave the first start's welcome, its
        chosen pair and sampling gone without a word. A file that is not a JSON document of settings (not UTF-8
        text, not JSON, not an object) is renamed to ``<name>.corrupt``, so that the next save does not destroy it.
    """
    path = path or paths.settings_file()
    try:
        data = json.loads(path.read_bytes().decode("utf-8-sig"))  # a BOM: the file edited in Windows' Notepad
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object of settings")
    except FileNotFoundError:
        return Settings(), ""
    except OSError as exc:
        log.warning("cannot read %s (%s); using default settings", path, exc)
        why = f"{exc.strerror}" if exc.strerror else str(exc)
        return Settings(), f"The settings file {path} could not be read ({why}), so the default settings are used."
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors too
        backup = path.with_name(path.name + ".corrupt")
        log.warning("%s is not a settings document (%s); kept it as %s and using defaults", path, exc, backup.name)
        try:
            os.replace(path, backup)
        except OSError:
            log.exception("could not keep a backup of the corrupt settings file")
            kept = "it could not be renamed, and the next change of a setting replaces it"
        else:
            kept = f"it is kept as {backup}"
        why = "it is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else str(exc)
        return Settings(), (
            f"The settings file was damaged ({why}), so the default settings are used; {kept}. Choose the models "
            "again in Models (Ctrl+M), and the other settings in the Settings tab."
        )
    return Settings.from_dict(data), ""


def save_settings(settings: Settings, path: Path | None = None) -> Path:
    """Write the settings atomically and return the file's path.

    Raises:
        OSError: the folder cannot be created or written.
    """
    path = path or paths.settings_file()
    write_json_atomic(path, settings.to_dict())
    return path


def model_config(settings: Settings) -> ModelConfig:
    """The engine's model configuration for these settings (the draft only when the strategy uses it).

    Raises:
        InvalidInputError: no target model is chosen.
    """
    if not settings.target_path:
        raise InvalidInputError("no target model is chosen: pick one in the model manager")
    return ModelConfig(
        target=Path(settings.target_path),
        draft=Path(settings.draft_path) if settings.uses_draft else None,
        n_ctx=settings.n_ctx,
        n_threads=settings.threads,
        adaptive_threads=not settings.threads,
        n_gpu_layers=settings.n_gpu_layers,
        n_gpu_layers_draft=settings.n_gpu_layers_draft,
        ngram_cache_dir=paths.ngram_cache_dir(),
        costs_dir=paths.costs_dir(),
        exact=settings.exact,
        flash_attn=FlashAttention(settings.flash_attn),
    )


def generation_config(settings: Settings, strategy: Strategy | None = None) -> GenerationConfig:
    """The engine's generation configuration for these settings.

    Args:
        settings: the settings.
        strategy: overrides the strategy (Compare runs ``none`` next to the chosen one).
    """
    n_draft = settings.n_draft
    return GenerationConfig(
        strategy=strategy or Strategy(settings.strategy),
        n_draft=n_draft,
        n_draft_min=min(settings.n_draft_min, n_draft),
        p_min=settings.p_min,
        adaptive=settings.adaptive,
        max_tokens=settings.max_tokens,
        sampling=SamplingParams(
            temperature=settings.temperature,
            top_k=settings.top_k,
            top_p=settings.top_p,
            min_p=settings.min_p,
            seed=None if settings.seed < 0 else settings.seed,
        ),
        ngram_map=Path(settings.ngram_map_path) if settings.ngram_map_path else None,
    )
