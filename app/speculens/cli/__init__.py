"""The headless command line, ``speculens-cli``."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from speculens.engine.config import Strategy
from speculens.models.demo import DemoModel
from speculens.models.gguf_info import format_bytes, read_gguf_info
from speculens.models.resolve import resolve_model

if TYPE_CHECKING:
    from speculens.engine.backend import LlamaBackend


def missing_source(strategies: Collection[Strategy], args: argparse.Namespace) -> str | None:
    """The error for a strategy given without what it drafts from (a draft model, a map), said before seconds of
    loading and in the CLI's words (the engine's own error names the app's Settings too); ``None`` when all is
    there."""
    if Strategy.DRAFT in strategies and not args.draft:
        return "the draft strategy needs -d/--draft (a draft model: a .gguf path or a demo name)"
    if Strategy.NGRAM_MAP in strategies and not args.ngram_map:
        return "the ngram-map strategy needs --ngram-map FILE (a map built with 'speculens-cli ngram build')"
    return None


def int_between(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``lo`` to ``hi`` (out of range: a usage error, exit 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from exc
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be between {lo} and {hi}, not {value}")
        return value

    return parse


@contextlib.contextmanager
def interrupt_sets(event: threading.Event) -> Iterator[threading.Event]:
    """While the block runs, Ctrl+C sets ``event`` instead of raising KeyboardInterrupt (on the main thread only,
    where signals are handled): whatever looks at it stops at its next step and keeps what it has. Raised inside
    llama.cpp's callbacks during a model load, the KeyboardInterrupt was swallowed by ctypes ("Exception ignored")
    and the command went on to answer and exit 0; raised in a lab run, it lost every result measured (a tour's)."""
    if threading.current_thread() is not threading.main_thread():
        yield event
        return
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: event.set())
    try:
        yield event
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def interruptible_load() -> Iterator[None]:
    """Load models in the block so that Ctrl+C stops the load at llama.cpp's next look (its progress callback, or
    the engine's next timed call) and the command ends "interrupted", exit 130 (see :func:`interrupt_sets`).

    Raises:
        KeyboardInterrupt: Ctrl+C was pressed during the load.
    """
    from speculens.engine import loading

    cancel = threading.Event()
    try:
        with interrupt_sets(cancel), loading.watching(loading.LoadWatch(cancel, lambda _w, _d, _t: None)):
            yield
    except loading.LoadCancelled:
        raise KeyboardInterrupt from None
    if cancel.is_set():  # pressed as the load ended: stop before the work it was for
        raise KeyboardInterrupt


def in_words(exc: BaseException) -> str:
    """An error for the terminal: an ``OSError`` as its reason and file ("No such file or directory: x.jsonl"), not
    Python's "[Errno 2] …" (a tour's); anything else as its message."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc)


def progress(line: str, done: bool = False) -> None:
    """One updating progress line on stderr: rewritten in place on a terminal; in a log (stderr not a terminal)
    only the finished line (``done``), so a captured log is not one line of carriage returns."""
    if sys.stderr.isatty():
        print(f"\r\033[K{line}", end="\n" if done else "", file=sys.stderr, flush=True)
    elif done:
        print(line, file=sys.stderr, flush=True)


def demo_progress(model: DemoModel, done: int, total: int) -> None:
    """Show a demo model's building (from its packages' chunks) as a percentage on a terminal's stderr (a log gets
    :func:`resolve`'s line once the model is built and checked)."""
    if sys.stderr.isatty():
        progress(f"building the demo model {model.title}: {100 * done // max(total, 1):3d}%", done == total)


def as_message(model: LlamaBackend, text: str) -> bool:
    """Whether ``generate`` and ``replay`` send a prompt as one user message in the model's chat template, so that a
    question is answered rather than continued: when the model has a template and the prompt holds none of its
    special-token texts. A prompt already in the chat format (``<|im_start|>user ...``, as ``bench --write-prompts``
    writes them and llama.cpp's ``llama-completion`` reads them) is used as it is, as is any prompt with ``--raw``."""
    return model.chat_template() is not None and not holds_special_tokens(model, text)


def holds_special_tokens(model: LlamaBackend, text: str) -> bool:
    """Whether ``text`` holds any of the model's special-token texts (``<|im_start|>``: written in its chat format)."""
    return model.tokenize(text, parse_special=True) != model.tokenize(text)


def resolve(spec: str) -> Path:
    """:func:`resolve_model`, saying on stderr when it built a demo model: a tour saw 1.4 GB appear after a
    ``check-pair`` that said nothing of it ("built", as the app says)."""
    built: list[DemoModel] = []

    def report(model: DemoModel, done: int, total: int) -> None:
        built[:] = [model]
        demo_progress(model, done, total)

    path = resolve_model(spec, progress=report)
    if built:  # said once it is built and checked (size and SHA-256)
        print(f"built the demo model {built[0].title} ({format_bytes(built[0].size)}) from its packages",
              file=sys.stderr, flush=True)  # fmt: skip
    return path


def resolve_checked(spec: str) -> Path:
    """:func:`resolve`, with the file's header read as the app reads it before a load: a truncated or damaged file
    gets its own diagnosis ("truncated: it has 300,000,000 bytes but its tensors need 491,400,064"), which `models
    import` gave a tour and llama.cpp's "could not load … (see the log)" did not.

    Raises:
        SpeculensError: the model cannot be found or built, or its file is not a whole GGUF model.
    """
    path = resolve(spec)
    read_gguf_info(path, tokens=False)
    return path


def folder_missing(folder: Path) -> str:
    """Why a file cannot be written into ``folder``, which is not a folder: it does not exist, or it is a file."""
    return f"{folder} is a file, not a folder" if folder.exists() else f"the folder {folder} does not exist"


def read_prompt(args: argparse.Namespace) -> str | None:
    """The prompt of ``PROMPT`` or ``-f FILE`` (``None``: neither), less one trailing newline, as llama.cpp's ``-f``
    drops it (common/arg.cpp), so one file gives both tools the same prompt.

    Raises:
        OSError, UnicodeDecodeError: the file cannot be read as text.
    """
    prompt: str | None = args.file.read_text(encoding="utf-8") if args.file is not None else args.prompt
    return prompt[:-1] if prompt is not None and prompt.endswith("\n") else prompt
