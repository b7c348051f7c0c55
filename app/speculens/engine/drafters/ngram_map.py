"""Drafting from a static n-gram map built from a corpus, and building one (``speculens-cli ngram build``, or
Settings ▸ N-gram map ▸ Build… in the app).

Useful when the answers follow a known body of text: a code base, documentation, a style of report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from speculens.engine.drafters.base import EMPTY_DRAFT, Draft
from speculens.engine.drafters.ngram_table import NgramTable
from speculens.errors import InvalidInputError, OperationError

# A map is trusted when its longest matching n-gram was seen at least this often with a clear winner.
MIN_SAMPLES = (2, 2, 1, 1)
MIN_SHARE = (0.5, 0.4, 0.4, 0.4)


class NgramMapDrafter:
    """Drafts the most frequent continuation of the longest suffix found in the map.

    Args:
        table: the loaded map.
    """

    name = "ngram-map"

    def __init__(self, table: NgramTable) -> None:
        self.table = table

    @classmethod
    def from_file(cls, path: Path, fingerprint: str) -> NgramMapDrafter:
        """Load a map built for the vocabulary with this fingerprint."""
        return cls(NgramTable.load(path, fingerprint))

    def begin(self, prompt: Sequence[int]) -> None:
        """The map is static; nothing to prepare."""

    def draft(self, history: Sequence[int], n_max: int) -> Draft:
        """Follow the map for up to ``n_max`` tokens."""
        tokens: list[int] = []
        ctx = list(history[-self.table.ngram_max :])
        while len(tokens) < n_max:
            token = self.table.best(ctx, MIN_SAMPLES, MIN_SHARE)
            if token is None:
                break
            tokens.append(token)
            ctx = [*ctx[1:], token] if len(ctx) >= self.table.ngram_max else [*ctx, token]
        return Draft(tuple(tokens)) if tokens else EMPTY_DRAFT

    def end(self, history: Sequence[int]) -> None:
        """The map never changes during use."""


# The files a corpus folder contributes (anything else in it, images or archives, is skipped).
# (A tour's Go, Ruby or shell code base would have been "no text files": the common source and markup suffixes.)
TEXT_SUFFIXES = frozenset(
    ".txt .md .rst .tex .py .pyi .c .h .cc .cpp .hpp .hh .cs .java .kt .kts .scala .go .rs .swift .m .rb .php .pl "
    ".lua .r .jl .sql .sh .bash .zsh .ps1 .js .mjs .cjs .jsx .ts .tsx .vue .svelte .html .css .scss .json .yaml "
    ".yml .toml .ini .cfg .xml .csv".split()
)
# Folders not searched: a code base's dependencies and caches are not its own text (hidden folders such as .git
# and .venv are skipped too).
SKIPPED_FOLDERS = frozenset(
    {"node_modules", "__pycache__", "site-packages", "venv", "env", "build", "dist", "target"}
)
# A corpus under this many tokens makes a map whose drafts are seldom right: the app and the CLI say so.
SMALL_CORPUS = 20_000
# Tokens counted between two looks at the cancel flag and two progress reports (a second or so here).
_CHUNK = 50_000
NGRAM_MAX_RANGE = (1, 8)  # the longest n-gram a map may count (the app's and the CLI's bounds)
MIN_COUNT_RANGE = (1, 100)  # the least count it may keep


class BuildCancelled(OperationError):
    """The user stopped a map build; nothing was written."""

    def __init__(self) -> None:
        super().__init__("building the n-gram map was cancelled; no file was written")


@dataclass(frozen=True)
class MapBuilt:
    """What :func:`build_map` wrote."""

    path: Path
    n_ngrams: int
    n_tokens: int
    n_files: int
    seconds: float

    @property
    def note(self) -> str:
        """A word of warning about the map, for the user (``""`` when there is none)."""
        if self.n_tokens < SMALL_CORPUS:
            return (
                "That is a small map: its drafts will seldom be right. A larger corpus of text like the answers you "
                "want (thousands of lines) helps."
            )
        return ""


def text_kinds() -> str:
    """The files a folder contributes, in a few words (the whole list is long)."""
    shown = (".py", ".js", ".ts", ".java", ".go", ".rs", ".c", ".md", ".txt")
    return (
        f"source code, markup and plain text: {' '.join(shown)}, {len(TEXT_SUFFIXES) - len(shown)} more kinds, and "
        "text files without a suffix such as Makefile"
    )


def _binary(path: Path) -> bool:
    """Whether a file's first 8 KB hold a NUL byte (no text file does; an unreadable file counts as binary)."""
    try:
        with path.open("rb") as f:
            return b"\0" in f.read(8192)
    except OSError:
        return True


def _searched(path: Path, top: Path) -> bool:
    return not any(part.startswith(".") or part in SKIPPED_FOLDERS for part in path.relative_to(top).parts[:-1])


def _text_in_folder(path: Path) -> bool:
    """Whether a folder search takes a file: a text suffix, or none at all and no binary data (Makefile, Dockerfile,
    a script run by name: a tour's left out without a word), but for hidden files (.gitignore, .env) and ctags'
    index (tags, TAGS: machine-written, often tens of MB)."""
    suffix = path.suffix.lower()
    if suffix not in TEXT_SUFFIXES and (suffix or path.name.startswith(".") or path.name in ("tags", "TAGS")):
        return False
    try:
        regular = path.is_file()  # a folder that can be listed but not entered raises here
    except OSError:
        return False
    return regular and (bool(suffix) or not _binary(path))


def corpus_files(items: Iterable[Path]) -> list[Path]:
    """The text files of a corpus: files as given, folders searched for :data:`TEXT_SUFFIXES` and text files without
    a suffix (not in hidden folders nor in :data:`SKIPPED_FOLDERS`), each file once (a folder given beside the folder
    holding it counted its files twice, so every n-gram seen once passed a least count of 2: a tour's), and none
    that holds a NUL byte (binary data under a text suffix).

    Raises:
        InvalidInputError: a path does not exist, or there is no text file at all.
    """
    found: list[Path] = []
    for item in items:
        if item.is_dir():
            found += sorted(p for p in item.rglob("*") if _searched(p, item) and _text_in_folder(p))
        elif item.is_file():
            found.append(item)
        else:
            raise InvalidInputError(f"corpus path not found: {item}")
    unique = list(dict.fromkeys(f.resolve() for f in found))
    files = [f for f in unique if not _binary(f)]
    if not files and unique:  # a tour's binary.py read "no text files (… .py …)"
        named = ", ".join(f.name for f in unique[:3]) + (f" and {len(unique) - 3} more" if len(unique) > 3 else "")
        raise InvalidInputError(f"{named} hold{'s' if len(unique) == 1 else ''} binary data, not text: give text files")
    if not files:
        raise InvalidInputError(
            f"the corpus holds no text files ({text_kinds()}): give files, or folders that hold some"
        )
    return files


def build_map(
    files: Sequence[Path],
    model: Path,
    output: Path,
    *,
    ngram_max: int = 4,
    min_count: int = 2,
    progress: Callable[[int, int, int], None] | None = None,
    cancel: threading.Event | None = None,
) -> MapBuilt:
    """Count which token follows each n-gram of the corpus, tokenized with ``model``'s tokenizer (loaded alone,
    without weights), and write the map to ``output`` (atomically: a cancelled or failed build leaves no file, nor a
    half-written one).

    Args:
        files: the corpus (see :func:`corpus_files`); read as UTF-8, undecodable bytes replaced.
        model: the GGUF file whose tokenizer the map is for (it records the vocabulary's fingerprint, and refuses
            to load for another).
        output: the ``.npz`` file to write.
        ngram_max: the longest n-gram counted.
        min_count: n-grams seen fewer times are dropped.
        progress: called with (bytes read, bytes in all, tokens counted) once the tokenizer is loaded, after each
            file, and every few tens of thousands of tokens.
        cancel: set to stop; checked as often as ``progress`` is called, and before the map is written.

    Raises:
        BuildCancelled: ``cancel`` was set.
        SpeculensError: the model's tokenizer cannot be loaded.
        OSError: a file could not be read or the map written.
    """
    from speculens.engine.backend import BackendParams, LlamaBackend  # llama.cpp: loaded where a map is built

    for name, value, (lo, hi) in (("ngram_max", ngram_max, NGRAM_MAX_RANGE), ("min_count", min_count, MIN_COUNT_RANGE)):
        if not lo <= value <= hi:  # a tour's --ngram-max 0 wrote an empty map and said nothing
            raise InvalidInputError(f"{name} must be between {lo} and {hi}, not {value}")

    def check() -> None:
        if cancel is not None and cancel.is_set():
            raise BuildCancelled()

    t0 = time.perf_counter()
    sizes = [f.stat().st_size for f in files]
    total = sum(sizes)
    done = n_tokens = 0
    table = NgramTable(1, ngram_max)
    vocab = LlamaBackend(model, BackendParams(vocab_only=True))
    try:
        if progress is not None:
            progress(0, total, 0)
        for f, size in zip(files, sizes, strict=True):
            check()
            tokens = vocab.tokenize(f.read_text(encoding="utf-8", errors="replace"), add_special=False)
            for start in range(0, len(tokens), _CHUNK):
                check()
                stop = min(start + _CHUNK, len(tokens))
                base = max(0, start - ngram_max)  # the n-grams ending just before ``start``
                table.add(tokens[base:stop], start - base)
                n_tokens += stop - start
                if progress is not None and stop < len(tokens):
                    progress(done + size * stop // len(tokens), total, n_tokens)
            done += size
            if progress is not None:
                progress(done, total, n_tokens)
        fingerprint = vocab.vocab.fingerprint()
    finally:
        vocab.close()
    table.prune(min_count)
    check()
    if not len(table):  # a map that can never draft, written and made active, replaced a tour's strategy
        held = f"{n_tokens:,} tokens" if n_tokens else "no text (empty files)"
        raise InvalidInputError(
            f"the corpus gives no n-gram to draft from: it holds {held}"
            + (f", and none of its n-grams is seen {min_count} times or more" if n_tokens else "")
            + "; give more text, like the answers you want"
            + (" (or a smaller least count)" if n_tokens and min_count > 1 else "")
            + "; no map was written"
        )
    table.save(output, fingerprint)
    return MapBuilt(output, len(table), n_tokens, len(files), time.perf_counter() - t0)
