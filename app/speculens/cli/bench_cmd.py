"""``speculens-cli bench``: plain decoding against speculative settings over a prompt suite.

The table goes to stdout, progress to stderr; ``-o`` writes the JSON document and a PNG chart beside it.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

from speculens.atomic import write_bytes_atomic, write_json_atomic
from speculens.cli import in_words, interrupt_sets, interruptible_load, missing_source, progress, resolve
from speculens.cli.generate_cmd import add_model_arguments, model_config
from speculens.engine.backend import BackendParams, LlamaBackend
from speculens.engine.bench import (
    BenchResults,
    cost_profile,
    results_document,
    run_suite,
    settings_for,
)
from speculens.engine.config import DEFAULT_N_DRAFT, MAX_N_DRAFT, GenerationConfig, Strategy
from speculens.engine.sampling import SamplingParams
from speculens.engine.session import SpeculativeEngine
from speculens.engine.suite import BenchPrompt, load_suite
from speculens.errors import SpeculensError


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _sweep(text: str) -> list[int]:
    name, _, values = text.partition("=")
    if name.strip() != "n_draft" or not values:
        raise argparse.ArgumentTypeError("use --sweep n_draft=1,2,4,8,16")
    try:
        lengths = sorted({int(v) for v in _comma_list(values)})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"draft lengths must be whole numbers: {values}") from exc
    if not lengths or lengths[0] < 1 or lengths[-1] > MAX_N_DRAFT:
        raise argparse.ArgumentTypeError(f"draft lengths must be between 1 and {MAX_N_DRAFT}")
    return lengths


# What the table's columns mean (a tour asked what "len k̄ draft verify ovh" were).
COLUMNS = """\
columns of the table:
  tok/s    decoding speed, the median of the runs (± its run-to-run spread)
  speedup  over plain decoding's run in the same repetition (± its spread)
  passes   target decode calls (± their spread: the controller's choices)
  accept   drafted tokens the target accepted
  len      tokens per target pass (accepted drafts plus the target's own)
  k̄        mean draft length asked for per step
  draft    share of the time spent drafting
  verify   share of the time in the target's decode calls
  ovh      share of the time outside llama.cpp's decode calls (Speculens' own)
  same     output identical to plain decoding's

the overall summary (speedups measured per prompt in the same run):
  geomean, worst, best  the speedup over plain decoding across the prompts
  ovh max               the largest ovh of any prompt
  tok/s ±               the median over prompts of the run-to-run spread of tokens/s (plain decoding's is the
                        machine's own noise)
  speedup ±             the same for each repetition's speedup over plain decoding's run in it: a stable
                        controller's is no wider than plain decoding's tok/s ±
  passes ±              the same for the target passes of each run, the controller's choices: a wide speedup ±
                        over a narrow passes ± is the machine's speed moving under the same steps"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``bench`` sub-command."""
    p = sub.add_parser(
        "bench",
        help="benchmark plain decoding against speculative settings",
        description="Run plain decoding and each strategy/setting over a prompt suite (warm-up, repeated runs,\n"
        "same seed and token budget) and report speed, acceptance, time shares, speedup and output identity.",
        epilog=COLUMNS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(p)
    p.add_argument(
        "--strategies",
        type=_comma_list,
        default=None,
        help="comma-separated draft sources (default: auto,draft,lookup,ngram-cache; draft only with --draft)",
    )
    p.add_argument(
        "--modes",
        type=_comma_list,
        default=["adaptive"],
        help="adaptive and/or fixed draft length (default: adaptive)",
    )
    p.add_argument(
        "--n-draft",
        type=int,
        default=DEFAULT_N_DRAFT,
        help=f"fixed draft length and adaptive bound (default {DEFAULT_N_DRAFT})",
    )
    p.add_argument("--sweep", type=_sweep, default=[], help="fixed draft lengths to try: n_draft=1,2,4,8,16")
    p.add_argument(
        "--p-min", type=float, default=0.75, help="draft model stops below this top probability (default 0.75)"
    )
    p.add_argument("--n-draft-min", type=int, default=0, help="drop drafts shorter than this (default 0)")
    p.add_argument(
        "-n",
        "--max-tokens",
        type=int,
        default=256,
        help="tokens per answer (default 256: the suite's chat, rewrite and summary answers finish, so a rewrite "
        "is measured whole)",
    )
    p.add_argument("--temp", type=float, default=0.0, help="temperature; 0 = greedy (default)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed, the same for every setting (default 0)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per setting and prompt (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs per setting and prompt (default 1)")
    p.add_argument(
        "--prompts",
        type=_comma_list,
        default=None,
        help=f"run only these prompt ids (the shipped suite's: {', '.join(q.id for q in load_suite())})",
    )
    p.add_argument("--suite", type=Path, help="a prompt suite JSON file instead of the shipped one")
    p.add_argument(
        "--fresh-costs",
        action="store_true",
        help="start the adaptive controller from an empty cost model in every run",
    )
    p.add_argument("--profile", action="store_true", help="also measure the machine's cost profile (k = 1..16)")
    p.add_argument("--profile-only", action="store_true", help="measure the cost profile only")
    p.add_argument("-o", "--output", type=Path, help="write the results as JSON here (and a PNG chart beside it)")
    p.add_argument("--chart", type=Path, help="where to write the PNG chart (default: the JSON path with .png)")
    p.add_argument(
        "--write-prompts",
        type=Path,
        metavar="DIR",
        help="write each prompt of the suite, formatted with the target's chat template, to DIR/<id>.txt (with one "
        "extra newline, which llama.cpp's -f and speculens-cli generate drop) and exit "
        "(to run llama.cpp's own tools on the same prompts)",
    )
    p.set_defaults(func=run)


def _progress(line: str) -> None:
    progress(line, done=not sys.stderr.isatty())  # a log keeps every measurement's line


def run(args: argparse.Namespace) -> int:
    """Run ``bench``."""
    modes = [m for m in args.modes if m in ("adaptive", "fixed")]
    if not modes or len(modes) != len(args.modes):
        print("error: --modes takes adaptive and/or fixed", file=sys.stderr)
        return 2
    if args.repeat < 1 or args.warmup < 0:  # --repeat 0 measured nothing, wrote an empty table and exited 0 (a walk's)
        print("error: --repeat must be 1 or more and --warmup 0 or more", file=sys.stderr)
        return 2
    if args.seed < 0:  # -1 crashed after the models loaded; generate's "a new seed" has no place in a comparison
        print("error: --seed must be 0 or more: bench samples every setting with one seed", file=sys.stderr)
        return 2
    try:
        names = args.strategies or ["auto", *(["draft"] if args.draft else []), "lookup", "ngram-cache"]
        strategies = [Strategy(s) for s in names]
    except ValueError as exc:
        print(f"error: {exc}; choose from {', '.join(s.value for s in Strategy)}", file=sys.stderr)
        return 2
    if missing := missing_source(strategies, args):
        print(f"error: {missing}", file=sys.stderr)
        return 2
    try:
        prompts = load_suite(args.suite.read_text(encoding="utf-8") if args.suite else None)
    except (OSError, SpeculensError) as exc:
        print(f"error: {in_words(exc)}", file=sys.stderr)
        return 1
    if args.prompts:
        unknown = set(args.prompts) - {p.id for p in prompts}
        if unknown:
            known = ", ".join(p.id for p in prompts)
            print(f"error: no prompt {', '.join(sorted(unknown))} in the suite; its prompts: {known}", file=sys.stderr)
            return 2
        prompts = [p for p in prompts if p.id in args.prompts]
    if args.write_prompts:
        return write_prompts(args, prompts)
    base = GenerationConfig(
        n_draft=max(args.sweep or [args.n_draft]),
        n_draft_min=args.n_draft_min,
        p_min=args.p_min,
        max_tokens=args.max_tokens,
        sampling=SamplingParams(temperature=args.temp, seed=args.seed),
        judge_probs=False,  # figures only: no token view to show them in
        ngram_map=args.ngram_map,
    )
    try:
        base.validate()
        settings = settings_for(strategies, modes, args.n_draft, args.sweep)
        with interruptible_load():
            engine = SpeculativeEngine(model_config(args))
    except SpeculensError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        profile = None
        if args.profile or args.profile_only:
            _progress("measuring the cost profile")
            profile = cost_profile(engine.target, engine.draft, exact=engine.config.exact)
            if sys.stderr.isatty():
                print(file=sys.stderr)
            print(format_profile(profile))
        if args.profile_only:
            if args.output:
                write_json_atomic(args.output, {"schema": "speculens-bench/1", "profile": profile})
            return 0
        t0 = time.perf_counter()
        # Ctrl+C stops the suite within a step and keeps the prompts measured by then (a tour's interrupted bench
        # wrote nothing after three of its four runs).
        with interrupt_sets(threading.Event()) as cancel:
            results = run_suite(
                engine, prompts, settings, base, args.repeat, args.warmup, args.fresh_costs, _progress, cancel
            )
        if sys.stderr.isatty():
            print(file=sys.stderr)
        results.profile = profile
        results.config = {
            "target": str(engine.config.target),
            "draft": str(engine.config.draft) if engine.config.draft else None,
            "threads": engine.target.n_threads,  # the count used (0 asked for the automatic one)
            "exact": engine.config.exact,
            "n_ctx": engine.target.n_ctx,
            "max_tokens": args.max_tokens,
            "temperature": args.temp,
            "seed": args.seed,
            "p_min": args.p_min,
            "repeat": args.repeat,
            "warmup": args.warmup,
            "fresh_costs": args.fresh_costs,
            "wall_s": time.perf_counter() - t0,
        }
    except SpeculensError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.close()
    print(format_table(results))
    if args.output:
        doc = results_document(results)
        write_json_atomic(args.output, doc)
        print(f"wrote {args.output}", file=sys.stderr)
        chart = args.chart or args.output.with_suffix(".png")
        from speculens.ui.bench_chart import render_chart

        problem = render_chart(doc, chart)
        print(f"wrote {chart}" if problem is None else f"no chart: {problem}", file=sys.stderr)
    if results.cancelled:
        done = len(results.complete())
        part = len(results.runs) - done
        partly = f" ({part} more in part)" if part else ""
        print(f"interrupted: {done} of {len(results.prompts)} prompts were measured with every setting before the "
              f"stop{partly}; what was measured is kept", file=sys.stderr)  # fmt: skip
        return 130
    return 0


def write_prompts(args: argparse.Namespace, prompts: list[BenchPrompt]) -> int:
    """Write the suite's prompts as chat-formatted text files, one per prompt."""
    try:
        with LlamaBackend(resolve(args.target), BackendParams(vocab_only=True)) as vocab:
            texts = {p.id: vocab.chat_text(list(p.messages)) for p in prompts}
        args.write_prompts.mkdir(parents=True, exist_ok=True)
        for pid, text in texts.items():
            # llama.cpp's -f drops one trailing newline (so does speculens-cli generate): one more keeps the chat
            # template's own "<|im_start|>assistant\n" whole for both.
            write_bytes_atomic(args.write_prompts / f"{pid}.txt", (text + "\n").encode("utf-8"))
    except (SpeculensError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(texts)} prompts to {args.write_prompts}", file=sys.stderr)
    return 0


def format_profile(profile: dict[str, Any]) -> str:
    """The cost profile as a table: decode time of a batch of k tokens, and its ratio to one token."""
    target = profile["target"]
    draft = profile.get("draft")
    calls = profile.get("target_calls")
    how = f"split into calls of {calls} tokens, as bit-exact verification does" if calls else "one decode call"
    lines = [
        f"cost profile: k tokens evaluated (ms), and relative to k = 1; target {how}, draft one decode call",
        f"{'k':>3} {'target':>9} {'×1':>6}" + (f" {'draft':>9} {'×1':>6}" if draft else ""),
    ]
    for k in target:
        row = f"{k:>3} {target[k]:9.1f} {target[k] / target['1']:6.2f}"
        if draft:
            row += f" {draft[k]:9.1f} {draft[k] / draft['1']:6.2f}"
        lines.append(row)
    if draft:
        lines.append(f"draft / target for one token: {profile['draft_over_target']:.2f}")
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    """A share in percent; ``None`` (an acceptance where nothing was drafted, which "0%" read as every draft
    rejected) as a dash, as ``generate`` says it."""
    return "–" if x is None else f"{100 * x:.0f}%"


def format_table(results: BenchResults) -> str:
    """A readable table: one block per prompt, one row per setting, then the overall summary."""
    w = max([22, *(len(s.label) for s in results.settings)])  # "ngram-cache/adaptive≤32" shifted its row by one
    header = (
        f"{'setting':<{w}} {'tok/s':>7} {'±':>5} {'speedup':>7} {'±':>5} {'passes':>6} {'±':>4} {'accept':>6} "
        f"{'len':>5} {'k̄':>5} {'draft':>5} {'verify':>6} {'ovh':>5} {'same':>4}"
    )
    lines = []
    # A spread needs two runs at least: with one, "0%" read as perfectly stable (a tour's --repeat 1).
    most = max((len(runs) for by_setting in results.runs.values() for runs in by_setting.values()), default=0)

    def pm(x: float | None, runs: int = most) -> str:
        return "–" if x is None or runs < 2 else _pct(x)

    for p in results.prompts:
        if p.id not in results.runs:
            continue
        lines.append(f"\n{p.id} ({p.category}, {results.n_prompt_tokens.get(p.id, '?')} prompt tokens)")
        lines.append(header)
        for s in results.settings:
            if not results.runs[p.id].get(s.label):
                continue
            m = results.summary(p.id, s.label)
            n = len(results.runs[p.id][s.label])
            speedup = f"{m.speedup:.2f}×" if m.speedup is not None else "–"
            speedup_spread = "–" if s.is_plain else pm(m.speedup_spread, n)
            same = "–" if m.identical is None or s.is_plain else ("yes" if m.identical else "NO")
            lines.append(
                f"{s.label:<{w}} {m.tps_median:7.2f} {pm(m.spread, n):>5} {speedup:>7} {speedup_spread:>5} "
                f"{m.passes_median:6.0f} {pm(m.passes_spread, n):>4} "
                f"{'–' if s.is_plain else _pct(m.acceptance):>6} "
                f"{m.mean_accepted_length:5.2f} {m.mean_n_draft:5.2f} {_pct(m.draft_share):>5} "
                f"{_pct(m.verify_share):>6} {_pct(m.overhead_share):>5} {same:>4}"
            )
            if m.acceptance_by_position and not s.is_plain:
                shown = " ".join(f"{a:.2f}" for a in m.acceptance_by_position[:8])
                more = " …" if len(m.acceptance_by_position) > 8 else ""
                lines.append(f"{'':<{w}}   acceptance by position: {shown}{more}")
    # Its legend is in --help, with the columns' (a tour read the same 90 words under every run).
    lines.append("\noverall (speedup over plain decoding, measured per prompt in the same run; columns: --help)")
    lines.append(
        f"{'setting':<{w}} {'geomean':>7} {'worst':>6} {'best':>6} {'accept':>6} {'ovh max':>7} {'tok/s ±':>7} "
        f"{'speedup ±':>9} {'passes ±':>8} {'same':>4}"
    )
    for s in results.settings:
        o = results.overall(s.label)
        if not o.n_prompts:  # stopped before a prompt was measured with every setting: no figure, not zeros
            lines.append(f"{s.label:<{w}} " + " ".join(f"{'–':>{n}}" for n in (7, 6, 6, 6, 7, 7, 9, 8, 4)))
            continue
        if s.is_plain:
            lines.append(
                f"{s.label:<{w}} {'1.00×':>7} {'':>6} {'':>6} {'–':>6} {_pct(o.overhead_share_max):>7} "
                f"{pm(o.spread_median):>7} {'–':>9} {pm(o.passes_spread_median):>8}"
            )
            continue
        same = "–" if o.identical_all is None else ("yes" if o.identical_all else "NO")
        speedup_spread = pm(o.speedup_spread_median)
        lines.append(
            f"{s.label:<{w}} {o.speedup_geomean or 0:6.2f}× {o.speedup_min or 0:5.2f}× {o.speedup_max or 0:5.2f}× "
            f"{_pct(o.acceptance):>6} {_pct(o.overhead_share_max):>7} {pm(o.spread_median):>7} "
            f"{speedup_spread:>9} {pm(o.passes_spread_median):>8} {same:>4}"
        )
    return "\n".join(lines)
