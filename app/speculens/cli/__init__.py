"""The headless command line, ``speculens-cli``."""

from __future__ import annotations

import sys
from pathlib import Path

from speculens.models.demo import DemoModel
from speculens.models.resolve import resolve_model


def demo_progress(model: DemoModel, done: int, total: int) -> None:
    """Show a demo model's assembly as a percentage on stderr."""
    print(f"\rassembling {model.title}: {100 * done // max(total, 1):3d}%", end="", file=sys.stderr, flush=True)
    if done >= total:
        print(file=sys.stderr)


def resolve(spec: str) -> Path:
    """:func:`resolve_model` with assembly progress on an interactive terminal."""
    return resolve_model(spec, progress=demo_progress if sys.stderr.isatty() else None)
