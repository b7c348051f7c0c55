"""``speculens-cli generate``: one generation (or an interactive chat) with a chosen strategy.

The answer alone goes to stdout, so scripts can compare outputs; the summary (llama.cpp's figures) goes to
stderr.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import select
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType
from typing import IO

from speculens import paths
from speculens.atomic import write_bytes_atomic
from speculens.cli import (
    as_message,
    folder_missing,
    holds_special_tokens,
    in_words,
    interrupt_sets,
    interruptible_load,
    missing_source,
    progress,
    read_prompt,
    resolve_checked,
)
from speculens.engine.config import (
    DEFAULT_GPU_LAYERS,
    DEFAULT_N_CTX,
    DEFAULT_N_DRAFT,
    FlashAttention,
    GenerationConfig,
    ModelConfig,
    PromptError,
    Strategy,
)
from speculens.engine.drafters.ngram_table import NgramTable, NgramTableError
from speculens.engine.events import (
    SHORT_ANSWER_STEPS,
    FinishEvent,
    FinishReason,
    Origin,
    RunningStats,
    StartEvent,
    StepEvent,
    draft_model_sat_out,
    draft_model_unread,
    event_to_dict,
    free_drafts_declined,
    free_sources_declined,
    unread_words,
)
from speculens.engine.sampling import SamplingParams
from speculens.engine.session import ChatSession, SpeculativeEngine
from speculens.engine.threads import ThreadTally
from speculens.errors import InvalidInputError, SpeculensError

# Terminal colours for --color: accepted drafts green, rejected drafts red (struck through), target blue.
_GREEN, _RED_STRIKE, _BLUE, _RESET = "\033[32m", "\033[9;31m", "\033[34m", "\033[0m"


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Model and context options shared by commands that load models."""
    p.add_argument(
        "-m", "--target", required=True, help="target model: a .gguf path, a demo name (qwen-1.5b) or a library id"
    )
    p.add_argument(
        "-d",
        "--draft",
        help="draft model: a .gguf path, a demo name (qwen-0.5b) or a library id; --strategy draft uses it, auto "
        "when it pays",
    )
    p.add_argument("--ctx", type=int, default=DEFAULT_N_CTX, help=f"context size in tokens (default {DEFAULT_N_CTX})")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="CPU threads (default 0, automatic: the cores this process may use, at most 8, fewer while another "
        "program keeps one busy)",
    )
    p.add_argument(
        "--ngl",
        type=int,
        default=DEFAULT_GPU_LAYERS,
        help="target layers offloaded to the GPU (default -1 = all, where the build has a GPU backend; 0 = none)",
    )
    p.add_argument(
        "--ngl-draft", type=int, default=DEFAULT_GPU_LAYERS, help="draft layers offloaded to the GPU (default -1 = all)"
    )
    p.add_argument(
        "--ngram-map", type=Path, help="n-gram map file for --strategy ngram-map, and one more free source for auto"
    )
    p.add_argument(
        "--no-ngram-file",
        action="store_true",
        help="neither read nor save the n-gram cache's statistics of earlier runs (for benchmarks: repeating a "
        "prompt would otherwise teach the cache its answer)",
    )
    p.add_argument(
        "--exact",
        action="store_true",
        help="bit-exact verification: greedy speculation reproduces plain decoding token for token, at a measured "
        "cost in speed (default: llama.cpp's fastest kernels, as its own speculative decoding uses)",
    )
    p.add_argument(
        "--flash-attn",
        choices=[f.value for f in FlashAttention],
        default=FlashAttention.AUTO.value,
        help="flash attention (default: auto: on a CPU, whichever of on and off this machine runs faster at the "
        "context the prompt decodes at, timed once per model and context size (once more after a load on a busy "
        "machine); on a GPU, llama.cpp's choice)",
    )


def add_generation_arguments(p: argparse.ArgumentParser) -> None:
    """Strategy and sampling options shared by commands that generate."""
    p.add_argument(
        "-s",
        "--strategy",
        choices=[s.value for s in Strategy],
        default=Strategy.AUTO.value,
        help="draft source (default: auto: prompt lookup and the n-gram cache, and the --draft model when it pays)",
    )
    p.add_argument(
        "--n-draft", type=int, default=DEFAULT_N_DRAFT, help=f"most tokens drafted per step (default {DEFAULT_N_DRAFT})"
    )
    p.add_argument(
        "--adaptive",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="choose the draft length each step from measured costs, down to plain decoding when "
        "speculation does not pay (default); --no-adaptive drafts --n-draft tokens every step",
    )
    p.add_argument("--n-draft-min", type=int, default=0, help="drop drafts shorter than this (default 0)")
    p.add_argument(
        "--p-min", type=float, default=0.75, help="draft model stops below this top probability (default 0.75)"
    )
    p.add_argument("--temp", type=float, default=0.0, help="temperature; 0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=40, help="sampling: the K likeliest tokens only (default 40)")
    p.add_argument("--top-p", type=float, default=0.95, help="sampling: nucleus probability (default 0.95)")
    p.add_argument("--min-p", type=float, default=0.05, help="sampling: least probability, relative to the top (0.05)")
    p.add_argument(
        "--seed",
        type=int,
        default=-1,
        help="sampling seed; -1 = a new one each answer, printed with its figures (default, as llama.cpp's tools "
        "and the app draw one)",
    )
    p.add_argument("-n", "--max-tokens", type=int, default=256, help="most tokens generated (default 256)")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``generate`` sub-command."""
    p = sub.add_parser("generate", help="generate text with speculative decoding")
    add_model_arguments(p)
    add_generation_arguments(p)
    p.add_argument(
        "prompt",
        nargs="?",
        help="the prompt (or -f; with --chat, the conversation's first message, optional): a message the target "
        "answers in its chat template, unless (without --chat) it is "
        "already written in that template or --raw is given; one trailing newline is dropped, as llama.cpp's tools "
        "drop it from a prompt file, so a file given to both gives both the same prompt",
    )
    p.add_argument("-f", "--file", type=Path, help="read the prompt from this file (one trailing newline dropped)")
    p.add_argument(
        "--raw",
        action="store_true",
        help="continue the prompt as it is, without the chat template (a completion, as llama-completion does)",
    )
    p.add_argument(
        "--chat",
        action="store_true",
        help="interactive multi-turn chat on stdin/stdout (a PROMPT or -f FILE is its first message)",
    )
    p.add_argument("--color", action="store_true", help="colour accepted/rejected drafts (terminal)")
    p.add_argument("--events", type=Path, help="write every step as a JSON line to this file")
    p.set_defaults(func=run)


def model_config(args: argparse.Namespace) -> ModelConfig:
    """The ModelConfig from parsed arguments (resolving demo names)."""
    return ModelConfig(
        target=resolve_checked(args.target),
        draft=resolve_checked(args.draft) if args.draft else None,
        n_ctx=args.ctx,
        n_threads=args.threads,
        adaptive_threads=not args.threads,
        n_gpu_layers=args.ngl,
        n_gpu_layers_draft=args.ngl_draft,
        ngram_cache_dir=None if args.no_ngram_file else paths.ngram_cache_dir(),
        costs_dir=paths.costs_dir(),
        exact=args.exact,
        flash_attn=FlashAttention(args.flash_attn),
    )


def generation_config(args: argparse.Namespace) -> GenerationConfig:
    """The GenerationConfig from parsed arguments."""
    return GenerationConfig(
        strategy=Strategy(args.strategy),
        n_draft=args.n_draft,
        n_draft_min=args.n_draft_min,
        p_min=args.p_min,
        max_tokens=args.max_tokens,
        stop=tuple(args.stop),
        sampling=SamplingParams(args.temp, args.top_k, args.top_p, args.min_p, None if args.seed < 0 else args.seed),
        adaptive=args.adaptive,
        judge_probs=getattr(args, "events", None) is not None,  # only the events file shows them here
        ngram_map=args.ngram_map,
    )


def summary(
    stats: RunningStats,
    start: StartEvent | None,
    reason: FinishReason,
    threads: ThreadTally | None = None,
    sources: dict[str, tuple[int, int]] | None = None,
    in_chat: bool = False,
    crowded: str = "",
) -> str:
    """llama.cpp-style closing figures (``threads``: the steps by thread count, shown when the engine took a thread
    back or tried another count; ``sources``: tokens drafted and accepted by each source that drafted, which a
    tour of the automatic strategy could not tell from ``n_drafted`` alone; ``in_chat``: a turn of ``--chat``, whose
    seed alone does not give its answer again)."""
    lines = []
    if reason is FinishReason.CANCELLED and not stats.n_generated:
        # Stopped before the answer began: no block of zeros (a tour's), but how far the prompt got.
        if start is not None:
            lines.append(
                f"strategy {start.strategy}; prompt: {start.n_prompt} tokens, {start.n_prompt_evaluated} of them "
                f"evaluated in {start.prompt_s:.2f} s, flash attention {start.flash_text}"
            )
        return "\n".join([*lines, "stopped: interrupted before the answer began (cancelled)"])
    if start is not None:
        lines.append(
            f"strategy {start.strategy}; prompt: {start.n_prompt} tokens ({start.n_prompt_evaluated} evaluated) in "
            f"{start.prompt_s:.2f} s, flash attention {start.flash_text}"
        )
        if start.sampled and start.seed is not None:  # a sampled answer said nothing of how to get it again
            # Not in a chat (--seed gives every turn that seed) nor with a draft model (its draws, as many as the
            # adaptive controller's draft lengths, come from the same generator).
            again = "" if in_chat or start.uses_draft_model else f" (--seed {start.seed} gives this answer again)"
            lines.append(f"sampled with seed {start.seed}{again}")
    lines += [
        # One token comes with the prompt's evaluation: no decode rate (a tour read "decoded 1 tokens … 0.00 t/s").
        # The first token comes with the prompt: the rate is of the others (a tour divided 63 by 2.22 s and got 28.4
        # where it read 27.87).
        f"decoded {stats.n_generated} tokens: the first with the prompt, the other {stats.n_generated - 1} in "
        f"{stats.elapsed_s:.2f} s, speed: {stats.tokens_per_second:.2f} t/s"
        if stats.n_generated > 1
        else f"decoded {stats.n_generated} token{'' if stats.n_generated == 1 else 's'} (with the prompt): no decode "
        "rate",
        f"n_drafted    = {stats.n_drafted}",
        f"n_accept     = {stats.n_accepted}",
        *(
            [f"drafted by   = {', '.join(f'{n} {d} ({a} accepted)' for n, (d, a) in sources.items())}"]
            if sources
            else []
        ),
        # Nothing drafted has no acceptance (a tour read "0.00%" under plain decoding, as if every draft failed).
        f"accept       = {100 * stats.acceptance:.2f}%" if stats.n_drafted else "accept       = – (nothing drafted)",
        # The end-of-generation token takes a pass (a tour read 63 tokens in 64 passes at 1.00 a pass as off by one).
        f"mean accepted length = {stats.mean_accepted_length:.2f} tokens per target pass ({stats.passes_text})",
        f"time: draft {stats.draft_s:.2f} s, verify {stats.verify_s:.2f} s, overhead {stats.overhead_s:.2f} s",
        f"stopped: {'interrupted' if reason is FinishReason.CANCELLED else reason.words} ({reason.value})",
    ]
    if crowded:  # FinishEvent.crowded_words
        lines.append(f"note: {crowded}, so this speed is below what this machine can do")
    if threads is not None and threads.fewer() is not None:
        counts = ", ".join(f"{n} for {steps} steps" for n, steps in sorted(threads.settled.items(), reverse=True))
        lines.append(f"threads: {counts} (fewer while another program kept a core busy)")
    if threads is not None and threads.trials:
        lines.append(
            f"thread trials: {threads.trials} steps tried another thread count (whether fewer or more decode faster "
            "while other programs share the CPUs; the faster is kept)"
        )
    return "\n".join(lines)


def consume(
    events: object,
    out: IO[str],
    color: bool,
    log: IO[str] | None,
    models: ModelConfig | None = None,
    costs: Callable[[], Path | None] | None = None,
) -> tuple[FinishEvent, StartEvent | None, ThreadTally, dict[str, tuple[int, int]], list[StepEvent]]:
    """Print a generation's text as it streams; return its finish (and start) event, its steps by thread count,
    the tokens each source drafted and had accepted, and its steps. The log's start event names ``models``' files,
    as the app's JSON export does (the draft only where the answer's sources had it), and the file of the target's
    costs the answer decoded with (``costs``, asked when it starts: the flash-attention setting is chosen by then), for
    ``replay``."""
    start: StartEvent | None = None
    finish: FinishEvent | None = None
    threads = ThreadTally()
    sources: dict[str, tuple[int, int]] = {}
    steps: list[StepEvent] = []
    for event in events:  # type: ignore[attr-defined]
        assert isinstance(event, StartEvent | StepEvent | FinishEvent)
        if log is not None:
            record = event_to_dict(event)
            if isinstance(event, StartEvent) and models is not None:
                draft = models.draft if event.uses_draft_model else None
                record.update(target=models.target.name, draft=draft.name if draft else None)
            if isinstance(event, StartEvent) and costs is not None and (costs_file := costs()) is not None:
                record["costs"] = costs_file.name
            log.write(json.dumps(record) + "\n")
        if isinstance(event, StartEvent):
            start = event
        elif isinstance(event, StepEvent):
            out.write(_render_colored(event) if color else event.text)
            out.flush()
            threads.add(event)
            steps.append(event)
            if event.source and event.drafted:
                # Counted as n_drafted and n_accept count them, from the step's running totals: drafts past the
                # answer's end (a stop string, the end of generation or the token limit inside accepted drafts) are
                # not the answer's (a tour's haiku read "n_drafted = 1" over "drafted by = draft 2").
                drafted, accepted = sources.get(event.source, (0, 0))
                before = steps[-2].stats if len(steps) > 1 else None
                sources[event.source] = (
                    drafted + event.stats.n_drafted - (before.n_drafted if before else 0),
                    accepted + event.stats.n_accepted - (before.n_accepted if before else 0),
                )
        else:
            finish = event
    assert finish is not None
    return finish, start, threads, sources, steps


def draft_model_idle(
    start: StartEvent | None, steps: list[StepEvent], adaptive: bool, load_said: bool = False
) -> str:
    """A line saying that the adaptive controller kept a loaded draft model from drafting in this answer (beyond
    probes that re-measure its cost), with the best rate over plain decoding it expected of it: a tour ran
    ``-s draft``, read "strategy draft" and 64 passes for 64 tokens, and could not tell a decision had been made.
    Empty where the draft model drafted, was not loaded, or drafts every step (``--no-adaptive``)."""
    if unread := draft_model_unread(start, steps):
        return f"note: the draft model sat out: {unread_words(unread)} (it reads a prompt where it might pay)"
    rate = draft_model_sat_out(start.strategy, steps) if adaptive and start is not None else None
    if rate is None:
        return ""
    if load_said and start is not None and start.draft_idle:
        # The load's note gave its figure, with 99% of the drafts accepted; this answer's, with the acceptance it
        # measured, read as a second "at best" that contradicted it (a tour's ×0.89 and ×0.12). Only where that
        # note was printed (``load_said``): the answer's verdict is its own (another --n-draft, a later --chat turn).
        return "note: the draft model sat out this answer, as the note after loading said it would"
    return (
        f"note: the adaptive controller kept the draft model from drafting (×{rate:.2f} of plain decoding at best "
        "with the acceptance it measured on this answer): it would not have paid here; --no-adaptive drafts every "
        "step anyway"
    )


def free_sources_idle(start: StartEvent | None, steps: list[StepEvent], adaptive: bool) -> str:
    """A line saying why the adaptive controller verified no free source's draft in an answer where nothing was
    drafted, in the app's words (the draft model's part is :func:`draft_model_idle`'s): a tour's `-s ngram-map`
    printed n_drafted = 0 and nothing of why (``--no-adaptive`` drafted 358 tokens, 13% accepted, at half plain
    decoding's speed). Empty otherwise."""
    if len(steps) < SHORT_ANSWER_STEPS:  # a one-token "OK" in --chat (a CLI tour's)
        return ""
    declined = free_sources_declined(steps) if adaptive and start is not None else None
    if declined is None:
        return ""
    rate, source = declined
    return f"note: nothing drafted: {free_drafts_declined(source, rate)}; --no-adaptive drafts every step anyway"


def _say_figures(
    consumed: tuple[FinishEvent, StartEvent | None, ThreadTally, dict[str, tuple[int, int]], list[StepEvent]],
    adaptive: bool,
    in_chat: bool = False,
    load_said: bool = False,
) -> None:
    """An answer's closing figures on stderr, and why a loaded draft model sat out (``load_said``: the load's note
    said it cannot pay on this machine)."""
    finish, start, threads, sources, steps = consumed
    if sys.stderr.isatty():  # at a terminal, a blank line between the answer and its figures (a tour's ran together)
        print(file=sys.stderr)
    print(summary(finish.stats, start, finish.reason, threads, sources, in_chat, finish.crowded_words), file=sys.stderr)
    if not steps:  # stopped before the answer began: no answer the draft model sat out
        return
    if idle := draft_model_idle(start, steps, adaptive, load_said):
        print(idle, file=sys.stderr)
    if idle := free_sources_idle(start, steps, adaptive):
        print(idle, file=sys.stderr)


@functools.cache
def _marks(encoding: str) -> tuple[str, str, str]:
    """How a rejected draft's line break, tab and special token (no text: the end of the answer, say) are shown in
    ``encoding``: ⏎, ⇥ and ∅ (the app's mark), or ``\\n``, ``\\t`` and ``[special]`` where it cannot write them (a
    console code page: Windows' cp1252, say)."""
    try:
        "⏎⇥∅".encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return "\\n", "\\t", "[special]"
    return "⏎", "⇥", "∅"


def _render_colored(event: StepEvent, encoding: str | None = None) -> str:
    """A step's text with its drafts coloured, for a terminal writing ``encoding`` (stdout's by default)."""
    newline, tab, special = _marks(encoding or sys.stdout.encoding or "ascii")
    parts: list[str] = []
    for e in event.emitted:
        if e.origin is not Origin.ACCEPTED:
            # A rejected draft is not text of the answer: its line breaks and tabs are shown, not made (a tour's
            # struck-through newline broke a function's lines apart), as in the app's Live tokens; a special token,
            # which has no text, is marked (a walk's rejected end-of-turn token showed as nothing between the colour
            # codes).
            parts.extend(
                _RED_STRIKE
                + (d.piece.decode("utf-8", errors="replace").replace("\n", newline).replace("\t", tab) or special)
                + _RESET
                for d in event.drafted
                if not d.accepted
            )
        parts.append(
            (_GREEN if e.origin is Origin.ACCEPTED else _BLUE) + e.piece.decode("utf-8", errors="replace") + _RESET
        )
    return "".join(parts)


# How long a line typed at the terminal waits for the next before it is sent: lines that come together are a paste.
PASTE_S = 0.05


# Messages of earlier runs that Up recalls in ``generate --chat`` (as a shell keeps its history).
HISTORY_KEPT = 500


class ChatHistory:
    """The messages typed into ``generate --chat`` at a terminal, kept between runs (:func:`paths.chat_history_file`,
    one JSON string a line, so that a message of several lines stays one entry) and given to readline, so that Up
    recalls them as a shell does. A history that cannot be read is left alone (never replaced by this run's), and
    one that cannot be written is said once; the chat goes on either way."""

    def __init__(self, readline: ModuleType) -> None:
        self.path: Path | None = paths.chat_history_file()
        messages = self._read()
        if messages is None:
            self.path = None
        for message in (messages or [])[-HISTORY_KEPT:]:
            readline.add_history(message)

    def _read(self) -> list[str] | None:
        """The kept messages (a damaged line skipped), or ``None`` where the file is there and cannot be read."""
        assert self.path is not None
        try:
            text = self.path.read_bytes().decode("utf-8", errors="replace")  # a stray byte reads as �
        except FileNotFoundError:
            return []
        except OSError:
            return None
        messages = []
        for line in text.splitlines():
            try:
                message = json.loads(line)
            except ValueError:  # a line cut off or edited by hand: the rest are kept
                continue
            if isinstance(message, str) and message:
                messages.append(message)
        return messages

    def add(self, message: str) -> None:
        """Keep ``message`` (already in readline's history) for the next run: after what the file holds now (another
        chat may have added to it since), once where it was sent twice in a row, as readline keeps it."""
        if self.path is None or not message.strip():
            return
        messages = self._read()
        if messages is None:
            self.path = None
            return
        if messages[-1:] != [message]:
            messages.append(message)
        try:
            write_bytes_atomic(
                self.path, "".join(json.dumps(m) + "\n" for m in messages[-HISTORY_KEPT:]).encode("utf-8")
            )
        except OSError as exc:  # said once; the chat goes on without keeping it
            print(f"note: the messages are not kept for the next run ({in_words(exc)})", file=sys.stderr)
            self.path = None


def line_editing() -> ChatHistory | None:
    """Line editing for ``generate --chat`` at a terminal, where Python has readline (not on Windows, whose console
    edits and recalls lines itself): the arrow keys, Up for an earlier message (of this run or, from the returned
    :class:`ChatHistory`, of an earlier one), and bracketed paste, which takes a pasted function as one message (a
    tour's was answered line by line) even without its last newline. Tab inserts a tab, as in the code people paste
    and type, instead of completing file names."""
    if os.name != "posix":  # pyreadline3 may be installed there: its history is not GNU readline's
        return None
    try:
        import readline
    except ImportError:
        return None
    if "libedit" in (readline.__doc__ or ""):  # macOS's Python: editline, whose own syntax this is
        readline.parse_and_bind("bind ^I ed-insert")
    else:
        readline.parse_and_bind("tab: tab-insert")
        readline.parse_and_bind("set enable-bracketed-paste on")
    return ChatHistory(readline)


def as_typed(message: str, prompt: str = "> ") -> str:
    """``message`` under the prompts :func:`read_message` shows as it is typed: ``prompt`` before its first line,
    "… " before each other (a review's: a first message of several lines given as PROMPT echoed its first line alone
    under "> ")."""
    return "\n".join(f"{prompt if i == 0 else '… '}{part}" for i, part in enumerate(message.rstrip("\n").split("\n")))


def read_message(prompt: str = "> ", history: ChatHistory | None = None) -> str:
    """One chat message typed at a terminal ("" at the end of input): a line, or several where each but the last
    ends with a backslash (llama.cpp's interactive mode takes them so), or lines pasted together: in one piece
    where the terminal brackets a paste (see :func:`line_editing`), otherwise told from typing by their arrival
    together (``select``, POSIX only), a backslash at the end of a pasted line then kept as pasted. Python's
    ``input()`` edits with readline only where stdout is the terminal too; the prompts go to stderr otherwise.
    ``history`` keeps the message for the next run."""

    def ask(said: str) -> str:
        if sys.stdout.isatty():
            return input(said)
        print(said, end="", file=sys.stderr, flush=True)
        return input()

    readline = sys.modules.get("readline")  # imported by line_editing(), where Python has it
    kept = readline.get_current_history_length() if readline is not None else 0

    def one_message(text: str) -> str:
        """``text``, as one entry of the history where it took several lines (a tour's Up recalled its last)."""
        if readline is not None and len(lines) > 1:
            try:
                for _ in range(readline.get_current_history_length() - kept):
                    readline.remove_history_item(kept)
                readline.add_history(text.rstrip("\n"))
            except ValueError:  # a line editor whose history counts otherwise: its entries stay, the chat goes on
                pass
        if history is not None:
            history.add(text.rstrip("\n"))
        return text

    lines: list[str] = []
    while True:
        try:
            line = ask(prompt if not lines else "… ")
        except EOFError:  # Ctrl+D: the shell's prompt on a line of its own
            print(file=sys.stderr)
            return one_message("".join(lines))
        except KeyboardInterrupt:  # Ctrl+C at the prompt quits: "interrupted" on a line of its own
            print(file=sys.stderr)
            raise
        pasted = os.name == "posix" and bool(select.select([sys.stdin], [], [], PASTE_S)[0])
        if line.endswith("\\") and not pasted:
            lines.append(line[:-1] + "\n")
            continue
        lines.append(line + "\n")
        if not pasted:
            return one_message("".join(lines))


def as_flag(message: str) -> str:
    """A settings error in the words of the command line: its setting named as the option that sets it ("n_draft
    must be ..." reads "--n-draft must be ...", "temperature ..." "--temp ...")."""
    name, _, rest = message.partition(" ")
    flag = "--temp" if name == "temperature" else "--" + name.replace("_", "-")
    return f"{flag} {rest}" if rest.startswith("must ") else message


def run(args: argparse.Namespace) -> int:
    """Run ``generate``."""
    if args.prompt is not None and args.file is not None:
        print("error: give a PROMPT or -f FILE, not both", file=sys.stderr)
        return 2
    if args.chat and args.raw:  # a conversation is in the chat template, turn by turn
        print("error: --raw continues a text as it is; --chat sends messages in the chat template: choose one",
              file=sys.stderr)  # fmt: skip
        return 2
    if not args.chat and args.prompt is None and args.file is None:
        print("error: give a PROMPT or -f FILE, or --chat for an interactive conversation", file=sys.stderr)
        return 2
    try:
        prompt = read_prompt(args)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error: cannot read the prompt file: {in_words(exc)}", file=sys.stderr)
        return 1
    if prompt is not None and not prompt.strip():  # said before seconds of loading (a tour's waited 11 s for it)
        print("error: the prompt is empty: give some text to answer", file=sys.stderr)
        return 2
    if args.events is not None and not args.events.parent.is_dir():  # not a traceback after the load (a tour's)
        print(f"error: --events: {folder_missing(args.events.parent)}", file=sys.stderr)
        return 2
    try:
        config = generation_config(args)
        try:
            config.validate()
        except InvalidInputError as exc:  # an option out of range is bad usage, as argparse's own errors are
            print(f"error: {as_flag(str(exc))}", file=sys.stderr)
            return 2
        if missing := missing_source([config.strategy], args):
            print(f"error: {missing}", file=sys.stderr)
            return 2
        if args.ngram_map is not None:
            try:
                NgramTable.check(args.ngram_map)  # not a map: said before seconds of loading (a tour's)
            except NgramTableError as exc:
                print(f"error: {exc} ('speculens-cli ngram build FILES -m MODEL -o MAP.npz')", file=sys.stderr)
                return 1
            if config.strategy not in (Strategy.AUTO, Strategy.NGRAM_MAP):
                print(f"note: --ngram-map is drafted from by the auto and ngram-map strategies, not {config.strategy}",
                      file=sys.stderr)  # fmt: skip
        if args.draft and not config.strategy.uses_draft_model:
            # Seconds of loading and a gigabyte for nothing (a tour's -s none -d qwen-0.5b loaded both); nor is its
            # file checked (a damaged one stopped a run that did not use it, in a review).
            unused = f"--strategy {config.strategy} does not use a draft model"
            print(f"note: {unused}: --draft is not loaded", file=sys.stderr)
            args = argparse.Namespace(**{**vars(args), "draft": None})
        models = model_config(args)
        loading = f"{models.target.name}" + (f" and {models.draft.name}" if models.draft else "")
        progress(f"loading {loading}…")  # seconds of silence otherwise (a terminal only; a log gets the line below)
        t0 = time.perf_counter()
        with interruptible_load():
            engine = SpeculativeEngine(models)
        progress(f"loaded {loading} in {time.perf_counter() - t0:.1f} s", True)
        load_idle = engine.draft_idle if config.strategy.uses_draft_model else None
        if load_idle:  # with --no-adaptive too, as the app's load message says (a tour's run said nothing of it)
            fate = (
                "so it stays idle"
                if config.adaptive
                else "and --no-adaptive has it draft every step all the same (each draft ending where its top "
                f"probability falls below --p-min {config.p_min:g})"
            )
            print(f"note: {load_idle}, {fate}", file=sys.stderr)
        if config.strategy is Strategy.AUTO and (problem := engine.map_problem(config.ngram_map)):
            print(f"note: {problem}; the automatic strategy goes on without it", file=sys.stderr)
    except SpeculensError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    with ExitStack() as stack:
        stack.callback(engine.close)
        try:
            log = stack.enter_context(args.events.open("w", encoding="utf-8")) if args.events else None
        except OSError as exc:
            print(f"error: cannot write the events file: {in_words(exc)}", file=sys.stderr)
            return 1
        cancel = threading.Event()
        try:
            if not args.chat:
                assert prompt is not None  # checked above: PROMPT or -f without --chat
                if not args.raw and as_message(engine.target, prompt):
                    events = engine.chat([{"role": "user", "content": prompt}], config, cancel)
                else:
                    events = engine.generate(prompt, config, cancel)
                # Ctrl+C stops the answer within a step (or its prompt's evaluation) and keeps it: the figures of
                # what was generated, and an events file that ends with its finish event (a tour's could not be
                # replayed). Exit 130, as an interrupted command.
                with interrupt_sets(cancel):
                    consumed = consume(events, sys.stdout, args.color, log, models, lambda: engine.costs_file)
                if not consumed[0].text.endswith("\n"):
                    sys.stdout.write("\n")
                _say_figures(consumed, config.adaptive, load_said=bool(load_idle))
                if cancel.is_set():
                    print("interrupted", file=sys.stderr)
                    return 130
                return 0
            chat = ChatSession(engine)
            interactive = sys.stdin.isatty()
            history = line_editing() if interactive else None
            failed = answered = False
            # A PROMPT or -f FILE is the first message (a README walk's was dropped without a word, and the answer
            # was to its second).
            first = prompt
            # A review's: a prompt file written in the template would be nested in it.
            if first is not None and holds_special_tokens(engine.target, first):
                print("error: with --chat the PROMPT is the first message: this one holds the chat template's special "
                      "tokens (give the message itself, or leave --chat out)", file=sys.stderr)  # fmt: skip
                return 2
            while True:
                if first is not None:
                    line, first = first, None
                    if interactive:
                        print(as_typed(line), file=sys.stderr if not sys.stdout.isatty() else sys.stdout)
                        readline = sys.modules.get("readline")
                        if readline is not None and history is not None:  # Up recalls it, as a typed message
                            readline.add_history(line)
                            history.add(line)
                else:
                    line = read_message(history=history) if interactive else sys.stdin.readline()
                if not line:
                    return 1 if failed else 0
                if not line.strip():
                    continue
                events = chat.send(line.rstrip("\n"), config, cancel)
                try:
                    if answered and not interactive:
                        sys.stdout.write("\n")  # piped: a blank line between one answer and the next
                    # Ctrl+C stops this answer (kept in the conversation as far as it went) and, at a terminal,
                    # gives the prompt back, as llama.cpp's interactive mode does; at the prompt it quits.
                    with interrupt_sets(cancel):
                        consumed = consume(events, sys.stdout, args.color, log, models, lambda: engine.costs_file)
                    answered = True
                except PromptError as exc:  # this message only: the conversation goes on, and the exit status says
                    print(f"error: {exc} (the conversation goes on without this message)", file=sys.stderr)
                    failed = True
                    continue
                if not consumed[0].text.endswith("\n"):
                    sys.stdout.write("\n")
                sys.stdout.flush()
                _say_figures(consumed, config.adaptive, in_chat=True, load_said=bool(load_idle))
                if cancel.is_set():
                    if not interactive:
                        print("interrupted", file=sys.stderr)
                        return 130
                    cancel.clear()
        except SpeculensError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return 0
