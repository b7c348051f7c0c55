"""Where Speculens keeps its files.

platformdirs gives the per-OS locations; ``SPECULENS_HOME`` puts everything under one folder instead (tests,
portable installs). Nothing is created at import time: callers create folders when they write.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "speculens"


def resolved(path: str | Path) -> Path | None:
    """``path`` with ``~`` expanded and its links resolved, as the library keeps paths (``None`` where it cannot
    be)."""
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError):
        return None


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file (links resolved, as the library keeps paths)."""
    ra, rb = resolved(a), resolved(b)
    return ra == rb if ra is not None and rb is not None else str(a) == str(b)


def _home() -> Path | None:
    value = os.environ.get("SPECULENS_HOME")
    return Path(value).expanduser() if value else None


def data_dir() -> Path:
    """Models, n-gram caches, conversations."""
    home = _home()
    return home / "data" if home else Path(platformdirs.user_data_dir(APP, appauthor=False))


def config_dir() -> Path:
    """Settings."""
    home = _home()
    return home / "config" if home else Path(platformdirs.user_config_dir(APP, appauthor=False))


def log_dir() -> Path:
    """Log files."""
    home = _home()
    return home / "logs" if home else Path(platformdirs.user_log_dir(APP, appauthor=False))


def cache_dir() -> Path:
    """Files that can be rebuilt: the measured decode costs of each model on this machine."""
    home = _home()
    return home / "cache" if home else Path(platformdirs.user_cache_dir(APP, appauthor=False))


def draft_verdicts_file() -> Path:
    """What the last load of each target and draft pair measured of the draft model (see ``ModelController``)."""
    return cache_dir() / "draft-verdicts.json"


def costs_dir() -> Path:
    """The adaptive controller's measured costs: one file per target and load configuration (its batch costs,
    whatever drafts for it), one per draft model and target."""
    return cache_dir() / "costs"


def models_dir() -> Path:
    """Downloaded and assembled GGUF models."""
    return data_dir() / "models"


def ngram_cache_dir() -> Path:
    """Dynamic n-gram caches, one file per vocabulary."""
    return data_dir() / "ngram-cache"


def conversations_dir() -> Path:
    """Saved chat conversations."""
    return data_dir() / "conversations"


def chat_history_file() -> Path:
    """The messages typed into ``speculens-cli generate --chat`` at a terminal, which Up recalls in the next run."""
    return data_dir() / "chat-history.jsonl"


def settings_file() -> Path:
    """The settings JSON file."""
    return config_dir() / "settings.json"
