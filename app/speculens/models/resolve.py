"""Turn what a user typed (a path, a demo model's key) into a model file."""

from __future__ import annotations

import sys
from pathlib import Path

from speculens.models.demo import DEMO_MODELS, demo_model, ensure_demo_model


class ModelNotFoundError(LookupError):
    """Nothing matches what the user asked for; the message lists what would."""


def _print_progress(done: int, total: int) -> None:
    if sys.stderr.isatty():
        print(f"\rassembling demo model: {100 * done // max(total, 1)}%", end="", file=sys.stderr, flush=True)
        if done >= total:
            print(file=sys.stderr)


def resolve_model(spec: str) -> Path:
    """A model file for ``spec``: an existing path, or a demo model key (assembled on first use).

    Raises:
        ModelNotFoundError: neither a file nor a known name.
        DemoModelError: a demo model cannot be assembled.
    """
    path = Path(spec).expanduser()
    if path.exists():
        return path
    try:
        model = demo_model(spec)
    except KeyError:
        keys = ", ".join(m.key for m in DEMO_MODELS)
        raise ModelNotFoundError(f"no model file {spec!r}, and it is not a demo model name ({keys})") from None
    return ensure_demo_model(model, progress=_print_progress)
