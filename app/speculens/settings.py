"""The user's settings: a Qt-free dataclass saved as versioned JSON.

The GUI edits a :class:`Settings`, the worker turns it into the engine's ``ModelConfig`` and
``GenerationConfig``. Loading never fails: a missing file gives the defaults, unknown keys are ignored, a
value of the wrong type or out of range falls back to its default, and a file that is not JSON at all is
kept as ``settings.json.corrupt`` (so the user can recover it) before the defaults are used. Writes are
atomic (temporary file, then ``os.replace``), so a crash never leaves half a settings file.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speculens import paths

if TYPE_CHECKING:
    from speculens.engine.config import GenerationConfig, ModelConfig

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1

STRATEGIES = ("draft", "lookup", "ngram-cache", "ngram-map", "none")

# Changing one of these means the models must be loaded again; everything else applies to the next answer.
RELOAD_FIELDS = frozenset(
    {"target_path", "draft_path", "n_ctx", "threads", "n_gpu_layers", "n_gpu_layers_draft", "ngram_map_path"}
)


@dataclass
class Settings:
    """Everything the user can set, with defaults that work on a laptop CPU.

    Args:
        strategy: the draft source: ``draft``, ``lookup``, ``ngram-cache``, ``ngram-map`` or ``none``.
        n_draft: the most tokens drafted per step (1–64).
        adaptive: let the controller choose the draft length each step (up to n_draft, down to plain decoding).
        n_draft_min: drafts shorter than this are dropped (0–n_draft).
        p_min: a draft model stops drafting when its top probability falls below this (0–1).
        temperature: 0 is greedy (deterministic; speculation gives the same text as plain decoding).
        top_k: keep the k most likely tokens (0 = all).
        top_p: nucleus sampling threshold, in (0, 1].
        min_p: drop tokens below min_p times the top token's probability, in [0, 1).
        seed: random seed for sampling (-1 = a new one each time).
        max_tokens: the longest answer.
        n_ctx: context size in tokens of both models.
        threads: CPU threads (0 = automatic).
        n_gpu_layers: target layers offloaded to the GPU (-1 = all, 0 = none).
        n_gpu_layers_draft: draft layers offloaded to the GPU.
        ngram_map_path: an n-gram map file for the ``ngram-map`` strategy ("" = none).
        target_path: the target model file ("" = none chosen yet).
        draft_path: the draft model file ("" = none).
        system_prompt: an optional system message for new chats.
    """

    strategy: str = "draft"
    n_draft: int = 8
    adaptive: bool = True
    n_draft_min: int = 0
    p_min: float = 0.75
    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = 0
    max_tokens: int = 512
    n_ctx: int = 4096
    threads: int = 0
    n_gpu_layers: int = 0
    n_gpu_layers_draft: int = 0
    ngram_map_path: str = ""
    target_path: str = ""
    draft_path: str = ""
    system_prompt: str = ""

    def validated(self) -> Settings:
        """A copy with every out-of-range value replaced by its default (and the reason logged)."""
        default = Settings()
        out = dataclasses.replace(self)
        checks: dict[str, bool] = {
            "strategy": out.strategy in STRATEGIES,
            "n_draft": 1 <= out.n_draft <= 64,
            "p_min": 0.0 <= out.p_min <= 1.0,
            "temperature": 0.0 <= out.temperature <= 100.0,
            "top_k": out.top_k >= 0,
            "top_p": 0.0 < out.top_p <= 1.0,
            "min_p": 0.0 <= out.min_p < 1.0,
            "seed": out.seed >= -1,
            "max_tokens": 1 <= out.max_tokens <= 1_000_000,
            "n_ctx": 64 <= out.n_ctx <= 1_048_576,
            "threads": 0 <= out.threads <= 1024,
            "n_gpu_layers": out.n_gpu_layers >= -1,
            "n_gpu_layers_draft": out.n_gpu_layers_draft >= -1,
        }
        for name, ok in checks.items():
            if not ok:
                log.warning(
                    "setting %s=%r is out of range; using %r",
                    name,
                    getattr(out, name),
                    getattr(default, name),
                )
                setattr(out, name, getattr(default, name))
        if not 0 <= out.n_draft_min <= out.n_draft:
            out.n_draft_min = min(default.n_draft_min, out.n_draft)
        return out

    def needs_reload(self, other: Settings) -> set[str]:
        """The fields that differ from ``other`` and only take effect after the models are loaded again."""
        return {name for name in RELOAD_FIELDS if getattr(self, name) != getattr(other, name)}

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
            log.warning(
                "settings were written by a newer Speculens (schema %s); reading what we know", version
            )
        for f in fields(cls):
            if f.name not in data:
                continue
            value = _coerce(data[f.name], type(getattr(settings, f.name)))
            if value is None:
                log.warning("ignoring setting %s=%r: wrong type", f.name, data[f.name])
                continue
            setattr(settings, f.name, value)
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
    """Read the settings file; never raises.

    Args:
        path: the file (default: :func:`speculens.paths.settings_file`).

    Returns:
        The settings, or the defaults when the file is missing or unreadable. A file that is not valid
        JSON is renamed to ``<name>.corrupt`` so that the next save does not destroy it.
    """
    path = path or paths.settings_file()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Settings()
    except OSError as exc:
        log.warning("cannot read %s (%s); using default settings", path, exc)
        return Settings()
    try:
        data = json.loads(text)
    except ValueError as exc:
        backup = path.with_name(path.name + ".corrupt")
        log.warning("%s is not valid JSON (%s); kept it as %s and using defaults", path, exc, backup.name)
        try:
            os.replace(path, backup)
        except OSError:
            log.exception("could not keep a backup of the corrupt settings file")
        return Settings()
    return Settings.from_dict(data)


def save_settings(settings: Settings, path: Path | None = None) -> Path:
    """Write the settings atomically and return the file's path.

    Raises:
        OSError: the folder cannot be created or written.
    """
    path = path or paths.settings_file()
    write_json_atomic(path, settings.to_dict())
    return path


def write_json_atomic(path: Path, data: object) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file in the same folder and ``os.replace``.

    Raises:
        OSError: the folder cannot be created or written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def model_config(settings: Settings) -> ModelConfig:
    """The engine's model configuration for these settings.

    Raises:
        ValueError: no target model is chosen.
    """
    # Imported here so that reading settings does not pull in llama.cpp (start-up time).
    from speculens.engine.config import ModelConfig

    if not settings.target_path:
        raise ValueError("no target model is chosen: pick one in the model manager")
    return ModelConfig(
        target=Path(settings.target_path),
        draft=Path(settings.draft_path) if settings.draft_path and settings.strategy == "draft" else None,
        n_ctx=settings.n_ctx,
        n_threads=settings.threads,
        n_gpu_layers=settings.n_gpu_layers,
        n_gpu_layers_draft=settings.n_gpu_layers_draft,
        ngram_map=Path(settings.ngram_map_path) if settings.ngram_map_path else None,
        ngram_cache_dir=paths.ngram_cache_dir(),
        costs_dir=paths.costs_dir(),
    )


def generation_config(settings: Settings, strategy: str | None = None) -> GenerationConfig:
    """The engine's generation configuration for these settings.

    Args:
        settings: the settings.
        strategy: overrides the strategy (Compare runs ``none`` next to the chosen one).
    """
    from speculens.engine.config import GenerationConfig, Strategy
    from speculens.engine.sampling import SamplingParams

    n_draft = settings.n_draft
    return GenerationConfig(
        strategy=Strategy(strategy or settings.strategy),
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
    )
