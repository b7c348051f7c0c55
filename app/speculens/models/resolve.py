"""Turn what a user typed (a path, a demo model's key, a library id or name) into a model file."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path

from speculens.errors import SpeculensError
from speculens.models.demo import DEMO_MODELS, DemoModel, demo_model, demo_path, ensure_demo_model
from speculens.models.library import EntryStatus, Library


class ModelNotFoundError(SpeculensError, LookupError):
    """Nothing matches what the user asked for; the message lists what would."""


def resolve_model(
    spec: str,
    library: Library | None = None,
    progress: Callable[[DemoModel, int, int], None] | None = None,
    assemble: bool = True,
) -> Path:
    """A model file for ``spec``: an existing path, a demo model key (assembled on first use), or the id or
    name of a model in the library.

    Args:
        spec: what the user typed.
        library: the library to look in (default: the user's).
        progress: called with (model, bytes written, total) while a demo model is assembled.
        assemble: ``False``: only name a demo model's file, which may not be there yet.

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
        if not assemble:
            return demo_path(model)
        report = None if progress is None else (lambda done, total: progress(model, done, total))
        return ensure_demo_model(model, progress=report)
    entry = (library or Library()).get(spec)
    if entry is not None:
        if entry.status is EntryStatus.OK or entry.status is EntryStatus.CHANGED:
            return entry.path
        raise ModelNotFoundError(f"{entry.name} ({entry.id}) is in the library, but its file is missing: {entry.path}")
    keys = ", ".join(m.key for m in DEMO_MODELS)
    known = {m.key: m.key for m in DEMO_MODELS}
    for e in (library or Library()).entries():  # what names each: its id, its file, its readable name
        for alias in (e.id, e.path.name, e.path.stem, e.name):
            known.setdefault(alias, e.id)
    near = close_names(spec, known)
    raise ModelNotFoundError(
        f"no model file {spec!r}, and it is neither a demo model ({keys}) nor a model in the library "
        "(see: speculens-cli models list)" + (f"; did you mean {' or '.join(near)}?" if near else "")
    )


def close_names(typed: str, known: dict[str, str], n: int = 3) -> list[str]:
    """The names (values of ``known``, by what names them: ids, file names) nearest to what was ``typed``, best
    first: those named by a text holding it ("qwen2.5-coder-1.5b" for the file "qwen2.5-coder-1.5b-instruct-
    q4_k_m.gguf", whose library id is qwen-1.5b), then near spellings ("qwen-1.5" for "qwen-1.5b")."""
    lowered = typed.lower().strip()
    if not lowered:
        return []
    by_lower = {alias.lower(): name for alias, name in known.items()}
    holding = [name for alias, name in by_lower.items() if lowered in alias]
    near = [by_lower[m] for m in difflib.get_close_matches(lowered, list(by_lower), n=n, cutoff=0.75)]
    return list(dict.fromkeys(holding + near))[:n]
