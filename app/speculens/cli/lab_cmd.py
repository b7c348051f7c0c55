"""``speculens-cli lab``: which draft and settings make a target fastest on this machine (the app's Pair lab).

The ranking goes to stdout, progress to stderr; results are saved per machine and target (as the app saves
them) unless ``--no-save``, and ``--json`` / ``--csv`` write them.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from speculens.atomic import write_bytes_atomic, write_json_atomic
from speculens.cli import in_words, interrupt_sets, resolve_checked
from speculens.engine.backend import offloaded_layers
from speculens.engine.config import DEFAULT_GPU_LAYERS, DEFAULT_N_CTX
from speculens.errors import SpeculensError
from speculens.lab import (
    KINDS,
    LabProgress,
    LabResult,
    LabSettings,
    PairLab,
    lab_prompts,
    list_candidates,
    load_saved,
    save,
)
from speculens.models.library import Library
from speculens.words import duration


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``lab`` sub-command."""
    p = sub.add_parser(
        "lab",
        help="find the fastest draft and strategy for a target on this machine",
        description="Run plain decoding, the draft-free strategies and every compatible draft in the library on "
        "the benchmark suite's prompts of the chosen kinds, interleaved and repeated within a time budget, and "
        "rank them per kind of text.",
    )
    p.add_argument("-m", "--target", required=True, help="target model: a .gguf path, demo name or library id")
    p.add_argument(
        "--kinds",
        default="chat,code-generation,code-rewrite",
        help=f"kinds of text, comma-separated (default: chat,code-generation,code-rewrite; any of "
        f"{', '.join(k for k in KINDS if k != 'custom')}, or their names in the app, e.g. summary)",
    )
    p.add_argument("--text", type=Path, help="your own text as one more prompt (kind 'custom')")
    p.add_argument("--budget", type=float, default=300.0, help="time budget in seconds (default 300)")
    p.add_argument("--rounds", type=int, default=5, help="rounds at most (default 5; at least 1 runs)")
    p.add_argument("--only", help="candidate keys to run, comma-separated (see --list)")
    p.add_argument("--list", action="store_true", help="list the candidates and exit")
    p.add_argument("--sweep", help="also measure each draft model at these fixed draft lengths, e.g. 1,2,4,8")
    p.add_argument("--max-tokens", type=int, default=192, help="tokens per answer (default 192)")
    p.add_argument("--ctx", type=int, default=DEFAULT_N_CTX, help=f"context size (default {DEFAULT_N_CTX})")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: automatic)")
    p.add_argument(
        "--ngl", type=int, default=DEFAULT_GPU_LAYERS, help="target layers offloaded to the GPU (default -1 = all)"
    )
    p.add_argument("--exact", action="store_true", help="bit-exact verification")
    p.add_argument("--json", type=Path, help="write the results as JSON here")
    p.add_argument("--csv", type=Path, help="write the results as CSV here")
    p.add_argument("--no-save", action="store_true", help="do not keep the results for the app's Pair lab")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``lab``."""
    try:
        target = resolve_checked(args.target)
        sweep = tuple(int(k) for k in args.sweep.split(",")) if args.sweep else ()
        library = Library()
        candidates = list_candidates(target, library, args.ctx, gpu=offloaded_layers(args.ngl) != 0)
        if args.list:
            ids = {e.path.name: e.id for e in library.entries()}
            for c in candidates:
                state = "" if c.runnable else f"  [cannot run: {c.problem or 'not downloaded'}]"
                kind, file, where = _key_parts(c.key)
                alias = f" (or {kind}:{ids[file]}{where})" if file in ids else ""
                print(f"{c.key:48} {c.label}{alias}{state}")
            return 0
        if args.only:
            known = {c.key for c in candidates}
            keys = {_by_file(key, known, library) for key in args.only.split(",")}
            unknown = keys - known
            if unknown:
                print(f"error: no such candidates: {', '.join(sorted(unknown))} (see --list)", file=sys.stderr)
                return 2
            candidates = [c for c in candidates if c.key in keys]
        else:  # as the app ticks them: a draft as large as the target can only lose, so it runs when named
            for c in candidates:
                if c.larger and c.runnable:
                    why = "not smaller than the target (name it in --only to run it)"
                    print(f"left out {c.key}: {why}", file=sys.stderr)
            candidates = [c for c in candidates if not c.larger]
        text = args.text.read_text(encoding="utf-8") if args.text else None
        prompts = lab_prompts([k for k in args.kinds.split(",") if k], text)
    except ValueError as exc:  # SpeculensError's input errors are ValueErrors too
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (SpeculensError, OSError) as exc:
        print(f"error: {in_words(exc)}", file=sys.stderr)
        return 1
    settings = LabSettings(
        n_ctx=args.ctx,
        n_threads=args.threads,
        n_gpu_layers=args.ngl,
        max_tokens=args.max_tokens,
        budget_s=args.budget,
        max_rounds=max(1, args.rounds),
        exact=args.exact,
        sweep=sweep,
    )
    lab = PairLab(target, candidates, prompts, settings, threading.Event())
    for key, why in lab.skipped.items():
        print(f"skipped {key}: {why}", file=sys.stderr)
    # As the app says before a run: a tour's --budget 60 took 109 s, and nothing said a round runs in full.
    n_runs = len(lab.prompts) * len(lab.candidates)
    said = f"one round, which runs in full whatever --budget: {n_runs} runs of up to {settings.max_tokens} tokens"
    last = load_saved(target)
    if last is not None and last.run_s:
        said += f", about {duration((last.setup_s or 0.0) + n_runs * last.run_s)} at the last run's pace"
    print(said, file=sys.stderr)

    def progress(p: LabProgress) -> None:
        eta = f", {p.eta_words}" if p.eta_words else ""  # as the app says it
        print(f"[{p.done + 1}/{p.total}] {p.what}{eta}", file=sys.stderr, flush=True)

    try:
        # Ctrl+C stops the lab within one step, and what it measured is reported and written, marked cancelled (a
        # tour's interrupted lab wrote neither its --json nor its --csv).
        with interrupt_sets(lab.cancel):
            result = lab.run(progress)
    except SpeculensError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(report(result))
    if not args.no_save:
        print(f"saved to {save(result, target)}", file=sys.stderr)
    # Said as bench says its file (a README walk's lab wrote lab.json without a word).
    if args.json:
        write_json_atomic(args.json, result.to_document())
        print(f"wrote {args.json}", file=sys.stderr)
    if args.csv:
        write_bytes_atomic(args.csv, result.to_csv().encode("utf-8"))
        print(f"wrote {args.csv}", file=sys.stderr)
    if result.cancelled:
        print("interrupted: the results above are what was measured before the stop", file=sys.stderr)
        return 130
    return 0


def _key_parts(key: str) -> tuple[str, str, str]:
    """A candidate key's kind, draft and placement: ``auto:FILE.gguf@ngl=0`` → ``("auto", "FILE.gguf", "@ngl=0")``
    (the draft is empty for a key without one, such as ``lookup``)."""
    kind, _, spec = key.partition(":")
    file, at, where = spec.partition("@")
    return kind, file, at + where


def _by_file(key: str, known: set[str], library: Library) -> str:
    """A candidate key as the lab names it, ``draft:FILE.gguf``, from one that names the draft by its library id
    (``draft:qwen-0.5b``, as every other command does: a tour's --list keys were file names alone)."""
    kind, name, where = _key_parts(key)
    entry = library.get(name) if name and key not in known else None
    return f"{kind}:{entry.path.name}{where}" if entry is not None else key


def report(result: LabResult) -> str:
    """The ranking per kind of text, the estimates and the recommendation, as text."""
    lines = []
    if result.noisy:
        lines.append(f"NOISY: {result.noisy}")
    if result.cancelled:
        lines.append("CANCELLED: these are the runs measured before the stop.")
    # As wide as the longest name: "Automatic with qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" was cut at 46 (a tour's).
    w = max([9, *(len(r.label) for kind in result.rows for r in result.ranking(kind))])
    w = max([w, *(len(result.candidates[key].label) for key in result.estimates)])
    for kind in result.rows:
        lines.append(f"\n{KINDS.get(kind, kind)}")
        lines.append(
            f"  {'candidate':{w}} {'tok/s':>7} {'speedup':>8} {'accept':>7} {'drafted':>7} {'tok/pass':>8} "
            f"{'k':>4} same"
        )
        for r in result.ranking(kind):
            acc = "-" if r.acceptance is None else f"{r.acceptance:.0%}"
            speedup = "-" if r.speedup is None else f"×{r.speedup:.2f}" + ("?" if r.noisy else "")
            same = "-" if r.identical is None else ("yes" if r.identical else "no")
            lines.append(
                f"  {r.label:{w}} {r.tokens_per_second:7.2f} {speedup:>8} {acc:>7} {r.drafted or '-':>7} "
                f"{r.mean_accepted_length:8.2f} {r.settled_n_draft:4g} {same}"
            )
    if result.estimates:
        lines.append("\nEstimates from the cost profile")
        for key, est in result.estimates.items():
            if est.cost_ratio is not None:
                lines.append(f"  {result.candidates[key].label:{w}} {est.text}")
    lines.append("")
    lines.extend(result.recommendation())
    if caution := result.plain_caution():
        lines.append(caution)
    return "\n".join(lines)
