"""``speculens-cli replay``: a recorded greedy answer decoded again by the draft-free sources, on saved costs.

See :mod:`speculens.engine.replay`: a noise-free comparison of drafters and controller settings on one
machine's measured costs, for the same answer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from speculens import paths
from speculens.cli import as_message, in_words, read_prompt, resolve
from speculens.engine.backend import BackendParams, LlamaBackend
from speculens.engine.config import DEFAULT_N_DRAFT, MAX_N_DRAFT
from speculens.engine.drafters.base import Drafter
from speculens.engine.drafters.ngram_cache import NgramCacheDrafter
from speculens.engine.drafters.prompt_lookup import PromptLookupDrafter
from speculens.engine.replay import ReplayResult, replay
from speculens.errors import SpeculensError
from speculens.models.resolve import ModelNotFoundError, resolve_model

STRATEGIES = ("auto", "lookup", "ngram-cache")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``replay`` sub-command."""
    p = sub.add_parser(
        "replay",
        help="decode a recorded greedy answer again with the draft-free sources, on saved costs (no noise)",
        description="Replays the answer of a 'generate --events FILE' run (greedy, one prompt) through the "
        "adaptive controller and the draft-free sources, charging each step what the saved cost model of "
        "this target estimates for its batch. Prints the target passes and the modelled speedup over plain "
        "decoding: a comparison of drafters and settings free of timing noise. The draft model is not replayed, "
        "and the n-gram cache starts from the prompt alone (as with --no-ngram-file).",
    )
    p.add_argument(
        "--events", required=True, type=Path, help="the --events file of a greedy 'speculens-cli generate' run"
    )
    p.add_argument("-m", "--target", required=True, help="the target model of that run (its tokenizer)")
    p.add_argument("prompt", nargs="?", help="that run's prompt (or -f FILE), one trailing newline dropped")
    p.add_argument("-f", "--file", type=Path, help="read the prompt from this file (one trailing newline dropped)")
    p.add_argument("--raw", action="store_true", help="the run was generate --raw: no chat template")
    p.add_argument(
        "--costs",
        type=Path,
        help="a saved cost model (.json); default: the one of the recorded run's settings, as last saved (its events "
        "name it), "
        f"else the newest saved for this target in {paths.costs_dir()}",
    )
    p.add_argument(
        "-s", "--strategy", choices=STRATEGIES, default="auto", help="draft-free sources (default: auto, both)"
    )
    p.add_argument(
        "--n-draft",
        type=int,
        default=DEFAULT_N_DRAFT,
        metavar="N",
        help=f"most tokens drafted per step, 1-{MAX_N_DRAFT} (default {DEFAULT_N_DRAFT})",
    )
    p.add_argument(
        "--noise",
        type=float,
        default=0.0,
        metavar="SD",
        help="replay again --repeat times with this much random noise (standard deviation; 0.1 is ±10%%, as on a "
        "2-core VM) in the step times the controller measures, each step still charged its modelled cost, and "
        "print how far the speedup spreads: how much timing noise moves the controller's choices on this answer "
        "(default 0: none)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=20,
        metavar="N",
        help="replays with --noise, each with its own seed (default 20; without --noise, none)",
    )
    p.set_defaults(func=run)


@dataclass
class Recorded:
    """The first generation of an events file, as replay needs it.

    Attributes:
        n_prompt: its prompt's length in tokens.
        answer: its answer's tokens.
        overhead: its median overhead per step, in seconds.
        ended: whether it ended at an end-of-generation token.
        drafted: the sources that drafted in it (beyond probes), in the order they first did.
        sampled: whether it sampled (temperature above 0).
        target: its target model's file name, where the file says (``generate --events`` writes it).
        passes: its target passes, and ``seconds`` its decoding time, as it ran.
        costs: the file name of the target's saved costs it decoded with, where the file says (``generate --events``
            writes it): thread counts, GPU layers, flash-attention settings and bit-exact mode each keep their own.
    """

    n_prompt: int
    answer: list[int]
    overhead: float
    ended: bool
    drafted: list[str]
    sampled: bool
    target: str | None
    passes: int
    seconds: float
    costs: str | None = None


def _recorded(path: Path) -> Recorded:
    """The first generation of an events file (see :class:`Recorded`)."""
    start: dict | None = None
    overheads: list[float] = []
    drafted: dict[str, None] = {}
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            try:
                event = json.loads(line)
                kind = event.get("type")
                if kind == "start":
                    start, overheads, drafted = event, [], {}
                elif kind == "step" and start is not None:
                    overheads.append(float(event["overhead_ms"]) / 1e3)
                    if event.get("drafted") and not event.get("probe") and event.get("source"):
                        drafted[str(event["source"])] = None
                elif kind == "finish" and start is not None:
                    target, costs = start.get("target"), start.get("costs")
                    return Recorded(
                        n_prompt=int(start["n_prompt"]),
                        answer=[int(t) for t in event["tokens"]],
                        overhead=statistics.median(overheads or [0.0]),
                        ended=event["reason"] == "eog",
                        drafted=list(drafted),
                        sampled=bool(start.get("sampled")),
                        target=target if isinstance(target, str) else None,
                        passes=int(event["stats"]["n_steps"]),
                        seconds=float(event["stats"]["elapsed_s"]),
                        costs=costs if isinstance(costs, str) and costs else None,
                    )
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise ValueError(f"{path.name}, line {number}: not an event of 'generate --events' ({exc})") from exc
    raise ValueError(f"{path.name} holds no whole generation (a start and a finish event)")


def _is_target_costs(path: Path, target: Path) -> bool:
    """Whether ``path`` is named as a saved cost model of ``target``'s verification (not a draft model's costs, nor
    its flash-attention measurement): the model's name, a dash and a 20-digit hexadecimal key."""
    stem, key = path.stem, path.stem[-20:]
    return (path.suffix == ".json" and stem == f"{target.stem[:40]}-{key}"
            and all(c in "0123456789abcdef" for c in key))  # fmt: skip


def _newest_costs(target: Path) -> tuple[Path, int]:
    """The most recently saved cost model of this target, and how many others there are (other thread counts,
    GPU layers, flash-attention settings or bit-exact mode each keep their own; a draft model's costs and the
    flash-attention measurement are in files of their own)."""
    folder = paths.costs_dir()
    found = sorted((p for p in folder.glob(f"{target.stem[:40]}-*.json") if _is_target_costs(p, target)),
                   key=lambda p: p.stat().st_mtime)  # fmt: skip
    if not found:
        raise FileNotFoundError(f"no saved costs for {target.name} in {folder}: run 'generate' with it once")
    return found[-1], len(found) - 1


def run(args: argparse.Namespace) -> int:
    """Run ``replay``."""
    if (args.prompt is None) == (args.file is None):
        print("error: give the run's PROMPT or -f FILE", file=sys.stderr)
        return 2
    if not 1 <= args.n_draft <= MAX_N_DRAFT:
        print(f"error: --n-draft must be between 1 and {MAX_N_DRAFT}", file=sys.stderr)
        return 2
    if not 0.0 <= args.noise <= 1.0 or not 2 <= args.repeat <= 1000:
        print("error: --noise must be between 0 and 1 (0.1 is ±10%), and --repeat between 2 and 1000", file=sys.stderr)
        return 2
    others = 0
    try:
        prompt_text = read_prompt(args) or ""
        recorded = _recorded(args.events)
        # Another target's run is refused before its model is looked for: a tour's `-m gemma-270m` built a 253 MB
        # demo model and then failed for want of its costs.
        try:
            named: str | None = resolve_model(args.target, assemble=False).name
        except ModelNotFoundError:
            named = None  # said by resolve() below
        if recorded.target and named and named != recorded.target:
            print(f"error: {args.events.name} is a run of {recorded.target}, not of {named}: give -m that model",
                  file=sys.stderr)  # fmt: skip
            return 1
        # Sources replay does not model are said, not silently swapped (a tour replayed a map's run as auto); only
        # those that drafted (a tour's note named the draft model of a run it never drafted in).
        unmodelled = [s for s in recorded.drafted if s in ("ngram-map", "draft")]
        if unmodelled:
            print(f"note: the recorded run drafted with {' and '.join(unmodelled)} too, which replay does not model: "
                  f"this is {args.strategy} on the same answer", file=sys.stderr)  # fmt: skip
        if recorded.sampled:
            print("note: the recorded run sampled (temperature above 0); replay checks drafts against its "
                  "tokens as a greedy run's, so its figures are of this one sample, not of sampling",
                  file=sys.stderr)  # fmt: skip
        target = resolve(args.target)
        # The run's own cost model, where its events name it and it is still there: the newest one was a bit-exact
        # run's after a fast one (a tour's replay read x0.974 on it, x1.019 on the costs the run decoded with).
        # Only a file name of this target's cost models is taken from the events (a review's: "../x" or an absolute
        # path would have left the costs folder, and a draft model's or another target's file would have been read).
        named = Path(recorded.costs).name if recorded.costs else ""
        own = paths.costs_dir() / named if _is_target_costs(Path(named), target) else None
        if args.costs:
            costs_path, others, whose = args.costs, 0, ""
        elif own is not None and own.is_file():
            costs_path, others, whose = own, 0, "the recorded run's settings', as last saved; "
        else:
            costs_path, others = _newest_costs(target)
            whose = ("the newest; " if recorded.costs is None
                     else f"the newest: the recorded run's ({named}) is not in this costs folder; ")  # fmt: skip
        costs = json.loads(costs_path.read_text(encoding="utf-8"))
        if not isinstance(costs, dict):
            raise ValueError(f"{costs_path.name} is not a saved cost model")
    except (OSError, UnicodeDecodeError, ValueError, SpeculensError) as exc:
        print(f"error: {in_words(exc)}", file=sys.stderr)
        return 1
    try:
        with LlamaBackend(target, BackendParams(vocab_only=True)) as vocab_model:
            if not args.raw and as_message(vocab_model, prompt_text):  # as generate sent it
                prompt = vocab_model.format_chat([{"role": "user", "content": prompt_text}])
            else:
                prompt = vocab_model.tokenize(prompt_text, parse_special=True)
            vocab = vocab_model.vocab
    except SpeculensError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if len(prompt) != recorded.n_prompt:
        print(
            f"error: this prompt is {len(prompt)} tokens, the recorded run's was {recorded.n_prompt}: not the same "
            "prompt or not the same model",
            file=sys.stderr,
        )
        return 1
    drafters: list[Drafter] = []
    if args.strategy in ("auto", "lookup"):
        drafters.append(PromptLookupDrafter.for_vocab(vocab))
    if args.strategy in ("auto", "ngram-cache"):
        drafters.append(NgramCacheDrafter(vocab.fingerprint(), None))

    def again(noise: float = 0.0, seed: int = 0) -> ReplayResult:  # the drafters start from the prompt each time
        return replay(
            prompt, recorded.answer, drafters, costs, args.n_draft, vocab.eog, recorded.overhead, recorded.ended,
            noise, seed,
        )  # fmt: skip

    try:
        result = again()
        noisy = [again(args.noise, seed) for seed in range(1, args.repeat + 1)] if args.noise else []
    except (ValueError, TypeError, KeyError) as exc:  # a damaged cost file included
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        f"replayed {result.n_tokens} tokens in {result.n_steps} target passes: {result.seconds:.2f} s modelled, "
        f"plain decoding {result.plain_seconds:.2f} s, ×{result.speedup:.3f}"
    )
    for name in result.drafted:
        print(f"  {name}: {result.drafted[name]} drafted, {result.accepted[name]} accepted")
    if noisy:
        speedups = sorted(r.speedup for r in noisy)
        mid = statistics.median(speedups)
        passes = sorted(r.n_steps for r in noisy)
        spread = 100 * (speedups[-1] - speedups[0]) / mid
        print(
            f"with {100 * args.noise:.3g}% timing noise (sd) in what the controller measures, {len(noisy)} replays: "
            f"×{mid:.3f} median, ×{speedups[0]:.3f}–×{speedups[-1]:.3f} (spread {spread:.0f}%), "
            f"{passes[0]}–{passes[-1]} target passes"
        )
    # Beside the model, the run as it went: a tour's replay on costs timed while the machine was busy modelled
    # plain decoding at three times the recorded run's time, and nothing showed it.
    print(f"recorded: {len(recorded.answer)} tokens in {recorded.passes} target passes, {recorded.seconds:.2f} s "
          f"as it ran ({'sampled' if recorded.sampled else 'greedy'})", file=sys.stderr)  # fmt: skip
    print(f"costs: {costs_path} ({whose}timed when it was saved: a busy machine's read slow; --costs chooses "
          "another)", file=sys.stderr)  # fmt: skip
    if others:
        print(f"({others} other saved cost models of this target: choose one with --costs)", file=sys.stderr)
    return 0
