"""``speculens-cli ngram build``: build a static n-gram map from a corpus for the ``ngram-map`` strategy."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from speculens.cli import folder_missing, in_words, int_between, progress, resolve
from speculens.engine.drafters.ngram_map import MIN_COUNT_RANGE, NGRAM_MAX_RANGE, build_map, corpus_files
from speculens.engine.drafters.ngram_table import NgramTable
from speculens.errors import SpeculensError
from speculens.models.gguf_info import format_bytes


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``ngram`` sub-command group."""
    p = sub.add_parser("ngram", help="n-gram maps for draft-free speculation: build one, or see what one holds")
    group = p.add_subparsers(dest="ngram_command", required=True, metavar="ACTION")
    b = group.add_parser("build", help="build a map from a text corpus (files or folders)")
    b.add_argument("corpus", nargs="+", type=Path, help="text files, or folders searched for text files")
    b.add_argument("-m", "--model", required=True, help="the model whose tokenizer the map is for")
    b.add_argument("-o", "--output", required=True, type=Path, help="the map file to write (.npz)")
    b.add_argument("--ngram-max", type=int_between(*NGRAM_MAX_RANGE), default=4,
                   help="longest n-gram counted, {} to {} (default 4)".format(*NGRAM_MAX_RANGE))  # fmt: skip
    b.add_argument("--min-count", type=int_between(*MIN_COUNT_RANGE), default=2,
                   help="drop n-grams seen fewer times, {} to {} (default 2)".format(*MIN_COUNT_RANGE))  # fmt: skip
    b.set_defaults(func=run_build)
    i = group.add_parser("info", help="what a map holds: n-grams, lengths, size, and whether it fits a model")
    i.add_argument("map", type=Path, help="the map file (.npz)")
    i.add_argument("-m", "--model", help="say whether the map was built with this model's tokenizer (exit 3 if not)")
    i.add_argument("--json", action="store_true", help="print one JSON document")
    i.set_defaults(func=run_info)


def run_info(args: argparse.Namespace) -> int:
    """Describe a map (a tour found no way to see what one holds but ls)."""
    from speculens.engine.backend import BackendParams, LlamaBackend  # llama.cpp: loaded where it is needed

    try:
        info = NgramTable.summary(args.map)
        if args.model:
            with LlamaBackend(resolve(args.model), BackendParams(vocab_only=True)) as vocab:
                info["fits_model"] = vocab.vocab.fingerprint() == info["fingerprint"]
    except SpeculensError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    # A script learns a mismatch from the status too, as from `models check-pair` (a tour's read 0 for a map that
    # cannot fit).
    status = 3 if info.get("fits_model") is False else 0
    if args.json:
        print(json.dumps(info, indent=1))
        return status
    print(f"{args.map}: {info['n_ngrams']:,} n-grams of {info['ngram_min']} to {info['ngram_max']} tokens, "
          f"{format_bytes(info['bytes'])}, for the tokenizer {info['fingerprint']}")  # fmt: skip
    if "fits_model" in info:
        fits = "was" if info["fits_model"] else "was not"
        print(f"it {fits} built with {Path(args.model).name}'s tokenizer" + ("" if info["fits_model"] else
              ": rebuild it for that model (ngram build … -m MODEL)"))  # fmt: skip
    return status


def run_build(args: argparse.Namespace) -> int:
    """Tokenize the corpus with the model's tokenizer and write the map."""
    if not args.output.parent.is_dir():  # a typo in -o made folders anywhere (a tour's /nonexistent at the root)
        print(f"error: -o: {folder_missing(args.output.parent)}", file=sys.stderr)
        return 2
    try:
        files = corpus_files(args.corpus)
        built = build_map(
            files,
            resolve(args.model),
            args.output,
            ngram_max=args.ngram_max,
            min_count=args.min_count,
            progress=lambda done, total, n: progress(
                f"tokenized {done / max(total, 1):.0%} of {len(files)} file{'s' if len(files) != 1 else ''}, "
                f"{n} tokens"
            ),
        )
    except SpeculensError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {in_words(exc)}", file=sys.stderr)
        return 1
    progress(
        f"wrote {built.path}: {built.n_ngrams:,} n-grams from {built.n_tokens:,} tokens in {built.n_files} "
        f"file{'s' if built.n_files != 1 else ''}, {built.seconds:.1f} s",
        True,
    )
    if built.note:
        print(f"note: {built.note}", file=sys.stderr)
    return 0
