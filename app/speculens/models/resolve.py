"""Turn what a user typed (a path, a demo model's key, a library id or name) into a model file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from speculens.errors import SpeculensError
from speculens.models.demo import DEMO_MODELS, DemoModel, demo_model, ensure_demo_model
from speculens.models.library import EntryStatus, Library


class ModelNotFoundError(SpeculensError, LookupError):
    """Nothing matches what the user asked for; the message lists what would."""


def resolve_model(
    spec: str,
    library: Library | None = None,
    progress: Callable[[DemoModel, int, int], None] | None = None,
) -> Path:
    """A model file for ``spec``: an existing path, a demo model key (assembled on first use), or the id or
    name of a model in the library.

    Args:
        spec: what the user typed.
        library: the library to look in (default: the user's).
        progress: called with (model, bytes written, total) while a demo model is assembled.

    Raises:
        ModelNotFoundError: neither a file nor a known name, or a library model whose file is missing.
        DemoModelError: a demo model cannot be assembled.
    """
    path = Path(spec).expanduser()
    if path.exists():
        return path
    try:
        model = demo_model(spec)
    except KeyError:
        pass
    else:
        report = None if progress is None else (lambda done, total: progress(model, done, total))
        return ensure_demo_model(model, progress=report)
    entry = (library or Library()).get(spec)
    if entry is not None:
        if entry.status is EntryStatus.OK or entry.status is EntryStatus.CHANGED:
            return entry.path
        raise ModelNotFoundError(f"{entry.name} ({entry.id}) is in the library, but its file is missing: {entry.path}")
    keys = ", ".join(m.key for m in DEMO_MODELS)
    raise ModelNotFoundError(
        f"no model file {spec!r}, and it is neither a demo model ({keys}) nor a model in the library "
        "(see: speculens-cli models list)"
    )
