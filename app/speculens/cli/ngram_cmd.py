"""``speculens-cli ngram build``: build a static n-gram map from a corpus for the ``ngram-map`` strategy."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from speculens.cli import progress, resolve
from speculens.engine.backend import BackendParams, LlamaBackend
from speculens.engine.drafters.ngram_table import build_table
from speculens.errors import SpeculensError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``ngram`` sub-command group."""
    p = sub.add_parser("ngram", help="n-gram maps for draft-free speculation")
    group = p.add_subparsers(dest="ngram_command", required=True, metavar="ACTION")
    b = group.add_parser("build", help="build a map from a text corpus (files or folders)")
    b.add_argument("corpus", nargs="+", type=Path, help="text files, or folders searched for text files")
    b.add_argument("-m", "--model", required=True, help="the model whose tokenizer the map is for")
    b.add_argument("-o", "--output", required=True, type=Path, help="the map file to write (.npz)")
    b.add_argument("--ngram-max", type=int, default=4, help="longest n-gram counted (default 4)")
    b.add_argument("--min-count", type=int, default=2, help="drop n-grams seen fewer times (default 2)")
    b.set_defaults(func=run_build)


TEXT_SUFFIXES = {
    ".txt",
    ".md",
    ".py",
    ".rst",
    ".c",
    ".h",
    ".cpp",
    ".js",
    ".ts",
    ".json",
    ".html",
    ".java",
    ".rs",
}


def corpus_files(items: list[Path]) -> list[Path]:
    """Expand folders into the text files inside them."""
    files: list[Path] = []
    for item in items:
        if item.is_dir():
            files += sorted(p for p in item.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
        elif item.is_file():
            files.append(item)
        else:
            raise FileNotFoundError(f"corpus path not found: {item}")
    return files


def run_build(args: argparse.Namespace) -> int:
    """Tokenize the corpus with the model's tokenizer and write the map."""
    try:
        files = corpus_files(args.corpus)
        if not files:
            print("error: the corpus holds no text files", file=sys.stderr)
            return 1
        vocab = LlamaBackend(resolve(args.model), BackendParams(vocab_only=True))
    except (FileNotFoundError, SpeculensError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    streams = []
    n_tokens = 0
    for i, f in enumerate(files, 1):
        tokens = vocab.tokenize(f.read_text(encoding="utf-8", errors="replace"), add_special=False)
        n_tokens += len(tokens)
        streams.append(tokens)
        progress(f"tokenized {i}/{len(files)} files, {n_tokens} tokens", i == len(files))
    table = build_table(streams, ngram_max=args.ngram_max, min_total=args.min_count)
    table.save(args.output, vocab.vocab.fingerprint())
    vocab.close()
    print(
        f"wrote {args.output}: {len(table)} n-grams from {n_tokens} tokens in {time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )
    return 0
