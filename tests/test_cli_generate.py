"""``speculens-cli generate`` and ``ngram build`` run as a user runs them."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import TinyModels
from speculens import paths

CLI = [sys.executable, "-m", "speculens.cli"]
# Runs whose answers are compared use the same kernels: each process times flash attention on and off, and on a
# busy runner two processes may pick differently, which can turn a near-tie of the tiny model's logits.
SAME_KERNELS = ("--flash-attn", "off")


def cli(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=120, input=input)


def test_generate_prints_only_the_answer_on_stdout(tiny: TinyModels, tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    spec = cli(
        "generate",
        "-m",
        tiny.target,
        "-d",
        tiny.perturbed,
        "--p-min",
        "0",
        "--no-adaptive",  # drafts every step: adaptive may rightly find drafting dear on a busy CI runner
        *SAME_KERNELS,
        "-n",
        "24",
        "--events",
        events,
        "the model of speculative decoding",
    )
    # A draft model that plain decoding would not use is not loaded (a tour's -s none -d loaded both).
    plain = cli("generate", "-m", tiny.target, "-d", tiny.perturbed, "-s", "none", *SAME_KERNELS, "-n", "24",
                spec.args[-1])
    assert spec.returncode == 0 and plain.returncode == 0, spec.stderr + plain.stderr
    assert "--strategy none does not use a draft model: --draft is not loaded" in plain.stderr
    assert f"loaded {tiny.target.name} in " in plain.stderr and tiny.perturbed.name not in plain.stderr
    assert "accept       = – (nothing drafted)" in plain.stderr  # not "0.00%", as if every draft failed
    assert spec.stdout == plain.stdout and spec.stdout.strip()
    for key in ("n_drafted", "n_accept", "accept", "mean accepted length", "t/s"):
        assert key in spec.stderr
    # From a new-user tour: seconds of silence while loading, no word of the strategy, and "stopped: max_tokens".
    assert f"loaded {tiny.target.name} and {tiny.perturbed.name} in " in spec.stderr
    assert "strategy " in spec.stderr and "stopped: cut off at the Max tokens limit (max_tokens)" in spec.stderr
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert lines[0]["type"] == "start" and lines[-1]["type"] == "finish"
    # Which models answered, as the app's JSON export says (a tour's finding: the CLI's file did not).
    assert (lines[0]["target"], lines[0]["draft"]) == (tiny.target.name, tiny.perturbed.name)
    steps = [line for line in lines if line["type"] == "step"]
    assert sum(len(s["emitted"]) for s in steps) == 24
    assert lines[-1]["stats"]["n_drafted"] == sum(len(s["drafted"]) for s in steps)
    by: dict[str, list[int]] = {}  # which source drafted how much (a tour could not tell from n_drafted)
    for s in steps:
        if s["drafted"]:
            by.setdefault(s["source"], [0, 0])
            by[s["source"]][0] += len(s["drafted"])
            by[s["source"]][1] += sum(d["accepted"] for d in s["drafted"])
    assert by and f"drafted by   = {', '.join(f'{n} {d} ({a} accepted)' for n, (d, a) in by.items())}" in spec.stderr
    assert "drafted by" not in plain.stderr


def test_a_sampled_answer_draws_a_new_seed_and_says_it_so_it_can_be_had_again(tiny: TinyModels) -> None:
    """`--temp 0.8` gave the same answer every run (seed 0) and never said its seed: llama.cpp's tools and the app
    draw one each answer."""
    args = ("generate", "-m", tiny.target, "-s", "none", "-n", "16", "--temp", "1.5", "a story")
    runs = [cli(*args) for _ in range(2)]
    seeds = []
    for run in runs:
        assert run.returncode == 0, run.stderr
        found = re.search(r"sampled with seed (\d+) \(--seed \1 gives this answer again\)", run.stderr)
        assert found, run.stderr
        seeds.append(found.group(1))
    assert seeds[0] != seeds[1]
    again = cli(*args, "--seed", seeds[0])
    assert again.stdout == runs[0].stdout and f"sampled with seed {seeds[0]} " in again.stderr
    greedy = cli("generate", "-m", tiny.target, "-s", "none", "-n", "4", "a story")
    assert "seed" not in greedy.stderr
    # A draft model's draws come from the same generator, as many as its draft lengths: the seed alone is said.
    drafted = cli("generate", "-m", tiny.target, "-d", tiny.perturbed, "-n", "8", "--temp", "1.5", "a story")
    assert "sampled with seed " in drafted.stderr and "gives this answer again" not in drafted.stderr
    # In a chat --seed gives every turn that seed: each turn says its seed alone.
    chat = cli("generate", "-m", tiny.target, "-s", "none", "-n", "4", "--temp", "1.5", "--chat", input="hi\nmore\n")
    assert chat.stderr.count("sampled with seed ") == 2 and "gives this answer again" not in chat.stderr


def test_color_marks_accepted_and_rejected_drafts(tiny: TinyModels) -> None:
    out = cli(
        "generate", "-m", tiny.target, "-d", tiny.perturbed, "--p-min", "0", "--no-adaptive", *SAME_KERNELS, "-n",
        "40", "--color", "one two",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "\033[32m" in out.stdout and "\033[9;31m" in out.stdout
    # Without the rejected drafts and the colours, the text is the answer, line for line (a tour's struck-through
    # newline broke a function apart).
    import re

    rejected = re.compile("\033\\[9;31m(.*?)\033\\[0m", re.S)
    assert all("\n" not in piece for piece in rejected.findall(out.stdout))
    plain = cli("generate", "-m", tiny.target, "-s", "none", *SAME_KERNELS, "-n", "40", "one two")
    assert re.sub("\033\\[[0-9;]*m", "", rejected.sub("", out.stdout)) == plain.stdout


def test_color_shows_a_rejected_drafts_line_breaks_instead_of_making_them() -> None:
    """From a new-user tour: a struck-through rejected newline broke a function's lines apart."""
    from speculens.cli.generate_cmd import _render_colored
    from speculens.engine.events import DraftToken, EmittedToken, Origin, RunningStats, StepEvent

    rejected = (DraftToken(7, b"\n\t", None, None, False), DraftToken(8, b"x", None, None, False))
    step = StepEvent(1, 2, rejected, (EmittedToken(9, b" y", Origin.CORRECTION),), " y", 1.0, 2.0, 0.1, RunningStats())
    said = _render_colored(step, "utf-8")
    assert "\n" not in said and "⏎⇥" in said and " y" in said
    assert "\\n\\t" in _render_colored(step, "cp1252")  # a console that cannot write ⏎
    # A rejected special token (no text: the end of the turn) is marked, not an empty pair of colour codes (a walk's).
    end = StepEvent(1, 1, (DraftToken(2, b"", None, None, False),), (EmittedToken(9, b" y", Origin.CORRECTION),), " y",
                    1.0, 2.0, 0.1, RunningStats())  # fmt: skip
    assert "\033[9;31m∅\033[0m" in _render_colored(end, "utf-8")
    assert "[special]" in _render_colored(end, "cp1252")


def test_errors_are_one_clear_line_and_a_failure_status(tiny: TinyModels, tmp_path: Path) -> None:
    missing = cli("generate", "-m", tmp_path / "none.gguf", "hi")
    assert missing.returncode == 1 and "no model file" in missing.stderr
    mismatch = cli("generate", "-m", tiny.target, "-d", tiny.mismatch, "hi")
    assert mismatch.returncode == 1 and "token texts differ" in mismatch.stderr
    bad = cli("generate", "-m", tiny.target, "--n-draft", "0", "hi")
    assert bad.returncode == 2 and "error: --n-draft must be between 1 and" in bad.stderr  # bad usage, by its flag
    hot = cli("generate", "-m", tiny.target, "--temp", "-1", "hi")
    assert hot.returncode == 2 and "error: --temp must be between 0 (greedy) and" in hot.stderr
    # An empty prompt is refused before the models load (a tour waited 11 s for "the message is empty").
    empty = cli("generate", "-m", tmp_path / "none.gguf", "  ")
    assert empty.returncode == 2 and "the prompt is empty" in empty.stderr and "no model file" not in empty.stderr
    assert "Traceback" not in missing.stderr + mismatch.stderr + bad.stderr
    for strategy, flag in (("draft", "-d/--draft"), ("ngram-map", "--ngram-map FILE")):  # said before any load
        missing_source = cli("generate", "-m", tmp_path / "none.gguf", "-s", strategy, "hi")
        assert missing_source.returncode == 2 and flag in missing_source.stderr, missing_source.stderr
    unknown = cli("generate", "-m", tiny.target, "--bogus", "hi")  # with generate's usage, not the top level's
    assert unknown.returncode == 2
    assert "speculens-cli generate: error: unrecognized arguments: --bogus" in unknown.stderr


def test_chat_reads_turns_from_stdin(tiny: TinyModels) -> None:
    out = cli("generate", "-m", tiny.target, "-s", "lookup", "-n", "8", "--chat", input="hello\nhow are you\n")
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("n_drafted") == 2
    assert len(out.stdout.splitlines()) >= 2


def test_a_prompt_given_with_chat_is_its_first_message(tiny: TinyModels, tmp_path: Path) -> None:
    """A README walk's `--chat "My name is Ada."` with a question piped in: the PROMPT was dropped without a word."""
    out = cli("generate", "-m", tiny.target, "-s", "none", "-n", "8", "--chat", "first message", input="second\n")
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("n_drafted") == 2  # both answered, the PROMPT first
    events = tmp_path / "events.jsonl"
    alone = cli("generate", "-m", tiny.target, "-s", "none", "-n", "8", "--chat", "--events", events, "only", input="")
    assert alone.returncode == 0 and alone.stderr.count("n_drafted") == 1
    assert sum('"type": "finish"' in line for line in events.read_text().splitlines()) == 1
    (tmp_path / "p.txt").write_text("from a file")
    both = cli("generate", "-m", tiny.target, "-f", tmp_path / "p.txt", "and a PROMPT")
    assert both.returncode == 2 and "error: give a PROMPT or -f FILE, not both" in both.stderr
    from_file = cli("generate", "-m", tiny.target, "-s", "none", "-n", "8", "--chat", "-f", tmp_path / "p.txt",
                    input="")  # fmt: skip
    assert from_file.returncode == 0 and from_file.stderr.count("n_drafted") == 1
    # A review's: a prompt written in the chat template (bench --write-prompts) would be nested in it; --raw has no
    # place in a conversation.
    formatted = cli("generate", "-m", tiny.target, "--chat", "<|im_start|>user\nhi<|im_end|>\n", input="")
    assert formatted.returncode == 2 and "holds the chat template's special tokens" in formatted.stderr
    raw = cli("generate", "-m", tiny.target, "--chat", "--raw", input="")
    assert raw.returncode == 2 and "choose one" in raw.stderr


def test_a_chat_message_too_long_for_the_context_is_refused_and_the_chat_goes_on(tiny: TinyModels) -> None:
    turns = "hello\n" + "word " * 400 + "\nhow are you\n"
    out = cli("generate", "-m", tiny.target, "-s", "lookup", "-n", "8", "--ctx", "256", "--chat", input=turns)
    assert out.returncode == 1  # the exit status still says a message failed
    assert "goes on without this message" in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.count("n_drafted") == 2  # both other turns were answered


def test_ngram_build_then_generate_with_the_map(tiny: TinyModels, tmp_path: Path) -> None:
    plain = cli("generate", "-m", tiny.target, "-s", "none", *SAME_KERNELS, "-n", "48", "print hello world")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "answers.txt").write_text(plain.stdout * 3)
    map_file = tmp_path / "map.npz"
    built = cli("ngram", "build", corpus, "-m", tiny.target, "-o", map_file)
    assert built.returncode == 0, built.stderr
    assert map_file.exists() and "n-grams" in built.stderr and "small map" in built.stderr
    spec = cli(
        "generate",
        "-m",
        tiny.target,
        "-s",
        "ngram-map",
        "--ngram-map",
        map_file,
        "--no-adaptive",  # draft every step: the tiny model's costs make the controller rightly cautious
        *SAME_KERNELS,
        "-n",
        "48",
        "print hello world",
    )
    assert spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout
    accepted = int(next(line for line in spec.stderr.splitlines() if line.startswith("n_accept")).split("=")[1])
    assert accepted > 10
    other = cli("ngram", "build", corpus, "-m", tiny.mismatch, "-o", tmp_path / "other.npz")
    assert other.returncode == 0
    assert "wrote" in other.stderr and "\r" not in other.stderr  # a captured log gets lines, not returns
    refused = cli("generate", "-m", tiny.target, "-s", "ngram-map", "--ngram-map", tmp_path / "other.npz", "hi")
    assert refused.returncode == 1 and "other.npz was built with another model's tokenizer" in refused.stderr
    # The automatic strategy goes on without it, and says so (a tour's every answer failed).
    auto = cli("generate", "-m", tiny.target, "--ngram-map", tmp_path / "other.npz", "-n", "4", "hi")
    assert auto.returncode == 0 and "note: the n-gram map other.npz was built with another" in auto.stderr
    # Not a map at all: said before the model loads.
    (tmp_path / "notes.npz").write_text("not a map", encoding="utf-8")
    bad = cli("generate", "-m", tiny.target, "--ngram-map", tmp_path / "notes.npz", "hi")
    assert bad.returncode == 1 and "is not an n-gram map" in bad.stderr and "loaded" not in bad.stderr
    assert "speculens-cli ngram build" in bad.stderr  # how to make one, in the CLI's words


def n_prompt(tiny: TinyModels, tmp_path: Path, *args: str) -> int:
    """The prompt tokens a greedy plain ``generate`` with ``args`` decoded after (from its events file)."""
    events = tmp_path / "e.jsonl"
    common = ["-m", str(tiny.target), "-s", "none", "--max-tokens", "6", "--events", str(events)]
    proc = cli("generate", *common, *args)
    assert proc.returncode == 0, proc.stderr
    return int(json.loads(events.read_text(encoding="utf-8").splitlines()[0])["n_prompt"])


def test_a_prompt_file_loses_one_trailing_newline_as_in_llama_cpp(tiny: TinyModels, tmp_path: Path) -> None:
    """llama.cpp's -f drops one trailing newline; so does speculens-cli, so one file gives both one prompt."""
    prompt = tmp_path / "p.txt"
    prompt.write_text("one two three\n", encoding="utf-8")
    for raw in ([], ["--raw"]):
        assert (
            n_prompt(tiny, tmp_path, *raw, "-f", str(prompt))
            == n_prompt(tiny, tmp_path, *raw, "one two three")
            == n_prompt(tiny, tmp_path, *raw, "one two three\n")
        )
        assert n_prompt(tiny, tmp_path, *raw, "one two three\n\n") > n_prompt(tiny, tmp_path, *raw, "one two three")


def test_a_question_is_answered_in_the_chat_template_a_formatted_prompt_kept(tiny: TinyModels, tmp_path: Path) -> None:
    """A plain prompt is a user message in the target's template (answered, not continued); one already written in
    the template, as bench --write-prompts writes them for llama.cpp's tools too, or any with --raw, is kept."""
    formatted = tmp_path / "formatted.txt"  # with the newline a prompt file loses
    formatted.write_text("<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n\n", encoding="utf-8")
    raw = n_prompt(tiny, tmp_path, "--raw", "hello there")
    assert n_prompt(tiny, tmp_path, "hello there") == n_prompt(tiny, tmp_path, "-f", str(formatted)) > raw + 4
    assert n_prompt(tiny, tmp_path, "--raw", "-f", str(formatted)) == n_prompt(tiny, tmp_path, "-f", str(formatted))


def test_the_summary_says_when_fewer_threads_decoded() -> None:
    from speculens.cli.generate_cmd import summary
    from speculens.engine.events import FinishReason, RunningStats, StepEvent
    from speculens.engine.threads import ThreadTally

    stats = RunningStats(3, 3, 0, 0, 0.1, 0.0, 0.1, 0.0, (), (), 0)
    cut = FinishReason.MAX_TOKENS

    def tally(*steps: tuple[int, bool]) -> ThreadTally:
        out = ThreadTally()
        for i, (n, trial) in enumerate(steps):
            out.add(StepEvent(i + 1, 0, (), (), "", 0.0, 1.0, 0.0, stats, threads=n, thread_trial=trial))
        return out

    assert "thread" not in summary(stats, None, cut, tally((2, False), (2, False), (2, False)))
    busy = summary(stats, None, cut, tally((2, False), (1, False), (1, False)))
    assert "threads: 2 for 1 steps, 1 for 2 steps (fewer while another program kept a core busy)" in busy
    # A trial of one thread that lost is not a busy machine: said apart (a tour read a false 'busy' note).
    tried = summary(stats, None, cut, tally((2, False), (1, True), (1, True), (2, False)))
    assert "busy" not in tried and "thread trials: 2 steps tried another thread count" in tried
    # A whole answer at one thread, settled in an earlier answer: its trials of two show it was fewer.
    settled = summary(stats, None, cut, tally((1, False), (2, True), (1, False)))
    assert "threads: 1 for 2 steps (fewer while another program kept a core busy)" in settled


def test_flash_attention_can_be_set_and_a_wrong_value_is_refused(tiny: TinyModels) -> None:
    on = cli("generate", "-m", tiny.target, "-s", "none", "-n", "8", "--flash-attn", "off", "one two three")
    assert on.returncode == 0 and on.stdout.strip(), on.stderr
    wrong = cli("generate", "-m", tiny.target, "--flash-attn", "sometimes", "one two three")
    assert wrong.returncode == 2 and "--flash-attn" in wrong.stderr


def test_every_option_of_every_command_says_what_it_does() -> None:
    """From the tour of 2026-12-06: `bench --help` listed --n-draft-min and --seed with no word, and its table's
    columns ("len k̄ draft verify ovh") were explained nowhere."""
    from speculens.cli.__main__ import build_parser
    from speculens.cli.bench_cmd import COLUMNS

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    silent = [
        f"{name} {action.option_strings[-1]}"
        for name, sub in commands.items()
        for action in sub._actions
        if action.option_strings and not action.help
    ]
    assert silent == []
    for column in ("tok/s", "speedup", "passes", "accept", "len", "k̄", "draft", "verify", "ovh", "same"):
        assert f"\n  {column} " in COLUMNS


def test_ctrl_c_while_the_models_load_ends_the_command_interrupted(
    tiny: TinyModels, monkeypatch, capsys  # type: ignore[no-untyped-def]
) -> None:
    """From a new-user tour: Ctrl+C during the load, which llama.cpp spends in C calling back into Python (its log,
    its progress), raised inside a callback, where ctypes swallowed it ("Exception ignored"); the command then
    answered and exited 0."""
    import ctypes
    import os
    import signal

    from speculens.cli import generate_cmd
    from speculens.cli.__main__ import main
    from speculens.engine import loading

    real = generate_cmd.SpeculativeEngine

    def pressed_during_the_load(models):  # type: ignore[no-untyped-def]
        ctypes.CFUNCTYPE(None)(lambda: os.kill(os.getpid(), signal.SIGINT))()  # in a callback, as llama.cpp's
        loading.check()  # the engine looks before its next timed call
        return real(models)

    monkeypatch.setattr(generate_cmd, "SpeculativeEngine", pressed_during_the_load)
    assert main(["generate", "-m", str(tiny.target), "-n", "8", "hello"]) == 130
    said = capsys.readouterr()
    assert said.out == "" and said.err.rstrip().endswith("interrupted")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl+C raises again afterwards


def test_ctrl_c_while_answering_stops_the_answer_and_keeps_it_with_its_figures(
    tiny: TinyModels, tmp_path: Path, monkeypatch, capsys  # type: ignore[no-untyped-def]
) -> None:
    """Ctrl+C in an answer raised out of the generation: no figures, and an events file without its finish event,
    which `replay` refuses ("holds no whole generation")."""
    import os
    import signal

    from speculens.cli import generate_cmd
    from speculens.cli.__main__ import main

    real = generate_cmd.consume

    def pressed_at_the_third_step(events, *args, **kwargs):  # type: ignore[no-untyped-def]
        def pressing():  # type: ignore[no-untyped-def]
            for n, event in enumerate(events):
                if n == 3:  # the start event, two steps
                    os.kill(os.getpid(), signal.SIGINT)
                yield event

        return real(pressing(), *args, **kwargs)

    monkeypatch.setattr(generate_cmd, "consume", pressed_at_the_third_step)
    log = tmp_path / "events.jsonl"
    rc = main(["generate", "-m", str(tiny.target), "-s", "none", "-n", "200", "--events", str(log), "hello"])
    said = capsys.readouterr()
    assert rc == 130 and said.err.rstrip().endswith("interrupted")
    assert "stopped: interrupted (cancelled)" in said.err and "decoded 3 tokens" in said.err
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["type"] for line in lines] == ["start", "step", "step", "step", "finish"]
    assert lines[-1]["reason"] == "cancelled" and said.out.strip() and said.out.strip() == lines[-1]["text"].strip()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl+C raises again afterwards


def test_an_answer_stopped_before_it_began_says_how_far_its_prompt_got() -> None:
    """From a new-user tour: Ctrl+C while the prompt was read printed "(0 evaluated) in 0.00 s", a block of zeros
    (n_drafted, accept 0.00%, mean accepted length 0.00) and "stopped: interrupted (cancelled)"."""
    from speculens.cli.generate_cmd import summary
    from speculens.engine.events import FinishReason, RunningStats, StartEvent

    start = StartEvent(2764, 1536, 15.6, "lookup+ngram-cache", 7, False)
    said = summary(RunningStats(), start, FinishReason.CANCELLED)
    assert said.splitlines() == [
        "strategy lookup+ngram-cache; prompt: 2764 tokens, 1536 of them evaluated in 15.60 s, flash attention off",
        "stopped: interrupted before the answer began (cancelled)",
    ]
    assert "n_drafted" in summary(RunningStats(), start, FinishReason.EOG)  # an answer of no tokens that ended


def test_an_answer_stopped_before_it_began_has_no_note_on_the_draft_model(capsys) -> None:  # type: ignore[no-untyped-def]
    """A draft model kept from a long prompt sat out no answer where none began: the note said it did."""
    from speculens.cli.generate_cmd import _say_figures
    from speculens.engine.events import FinishEvent, FinishReason, RunningStats, StartEvent
    from speculens.engine.threads import ThreadTally

    start = StartEvent(2764, 2764, 20.1, "lookup+ngram-cache+draft", 7, False, False, 2764)
    stopped = FinishEvent(FinishReason.CANCELLED, "", (), RunningStats())
    _say_figures((stopped, start, ThreadTally(), {}, []), True)
    said = capsys.readouterr().err
    assert "stopped: interrupted before the answer began" in said and "note:" not in said


CHAT_READER = """
import os, sys
from speculens.cli.generate_cmd import line_editing, read_message
history = line_editing()
with os.fdopen(int(sys.argv[1]), "w") as said:
    while message := read_message(history=history):
        said.write(repr(message) + "\\n")
        said.flush()
"""


@contextlib.contextmanager
def chat_reader(editing: bool) -> Iterator[Callable[..., str]]:
    """``generate --chat``'s reader in a pseudo-terminal, with readline (stdout the terminal) or without (stdout
    elsewhere: the terminal's own line editing, and the prompts on stderr). Yields ``typed(*keys)``, which types
    each key at a person's pace and returns the message read; the reader must end (Ctrl+D) with exit status 0."""
    import ast
    import select
    import subprocess
    import time

    master, terminal = os.openpty()
    said_r, said_w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", CHAT_READER, str(said_w)], pass_fds=(said_w,), stdin=terminal,
        stdout=terminal if editing else subprocess.DEVNULL, stderr=terminal, start_new_session=True,
        env={**os.environ, "TERM": "xterm", "INPUTRC": "/dev/null"},  # not the user's key bindings
    )  # fmt: skip
    os.close(said_w)
    os.close(terminal)
    try:
        with os.fdopen(said_r) as said:

            def typed(*keys: bytes) -> str:
                for key in keys:
                    os.write(master, key)
                    time.sleep(0.3)  # a person's pace: longer than a paste's
                assert select.select([said], [], [], 30)[0], "no message read"
                return str(ast.literal_eval(said.readline()))

            yield typed
            os.write(master, b"\x04")  # Ctrl+D: the end
            assert child.wait(timeout=30) == 0 and said.read() == ""
    finally:
        child.kill()
        child.wait()
        os.close(master)


@pytest.mark.skipif(os.name != "posix", reason="a pseudo-terminal")
@pytest.mark.parametrize("editing", [True, False], ids=["readline", "plain"])
def test_a_chat_message_typed_at_a_terminal_can_hold_several_lines(editing: bool) -> None:
    """From a new-user tour: a function pasted into `generate --chat` at a terminal was answered line by line."""
    with chat_reader(editing) as typed:
        if editing:  # a terminal that brackets a paste: one message, even without the paste's last newline
            assert typed(b"\x1b[200~def f(x):\n    return x * 2\x1b[201~", b"\r") == "def f(x):\n    return x * 2\n"
        # Lines that arrive together are a paste (a backslash ending one of them is the text's own).
        assert typed(b"x = 1 + \\\r    2\r\rWhat does this do?\r") == "x = 1 + \\\n    2\n\nWhat does this do?\n"
        assert typed(b"first line \\\r", b"second line\r") == "first line \nsecond line\n"  # typed going on
        if editing:  # Up recalls a message of several lines whole (a tour's recalled its last line)
            assert typed(b"\x1b[A", b"\r") == "first line \nsecond line\n"
            assert typed(b"\x1b[A\x1b[A", b"\r") == "x = 1 + \\\n    2\n\nWhat does this do?\n"
        assert typed(b"hello\r") == "hello\n" and typed(b"again\r") == "again\n"  # typed: a line a message


def test_a_first_message_of_several_lines_is_echoed_as_if_typed() -> None:
    from speculens.cli.generate_cmd import as_typed

    typed = "> Rename x to y:\n… \n… def f(x):\n…     return x"
    assert as_typed("Rename x to y:\n\ndef f(x):\n    return x\n") == typed
    assert as_typed("hello") == "> hello"


@pytest.mark.skipif(os.name != "posix", reason="a pseudo-terminal")
def test_up_recalls_the_messages_of_an_earlier_chat() -> None:
    """As a shell's history: the next `generate --chat` at a terminal recalls this one's messages, a message of
    several lines whole, and a history file with a damaged line keeps the others."""
    with chat_reader(True) as typed:
        assert typed(b"\x1b[200~def f(x):\n    return x\x1b[201~", b"\r") == "def f(x):\n    return x\n"
        assert typed(b"what does f do?\r") == "what does f do?\n"
    kept = paths.chat_history_file()
    assert [json.loads(line) for line in kept.read_text(encoding="utf-8").splitlines()] == [
        "def f(x):\n    return x", "what does f do?"]  # fmt: skip
    with kept.open("a", encoding="utf-8") as f:
        f.write('"cut off\n')
    with chat_reader(True) as typed:
        assert typed(b"\x1b[A", b"\r") == "what does f do?\n"
        with kept.open("a", encoding="utf-8") as f:  # another chat at the same time: its message is kept too
            f.write('"from another chat"\n')
        assert typed(b"\x1b[A\x1b[A\x1b[A", b"\r") == "def f(x):\n    return x\n"
    assert [json.loads(line) for line in kept.read_text(encoding="utf-8").splitlines()] == [
        "def f(x):\n    return x", "what does f do?", "from another chat", "def f(x):\n    return x"
    ]  # "what does f do?" once in a row; the damaged line gone


def test_a_chat_history_that_cannot_be_read_is_never_replaced(tmp_path: Path) -> None:
    """A history with a stray byte keeps its messages; one that cannot be read at all is left as it is, not replaced
    by this run's one message (a review's finding: up to 500 messages lost)."""
    from types import SimpleNamespace

    from speculens.cli.generate_cmd import ChatHistory

    recalled: list[str] = []
    readline = SimpleNamespace(add_history=recalled.append)
    kept = paths.chat_history_file()
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_bytes(b'"first"\n"caf\xe9"\n42\n"last"\n')
    history = ChatHistory(readline)  # type: ignore[arg-type]
    assert recalled == ["first", "caf\ufffd", "last"]
    history.add("next")
    assert kept.read_text(encoding="utf-8").splitlines()[-1] == '"next"'
    kept.unlink()
    kept.mkdir()  # there, and not a file that can be read
    history = ChatHistory(readline)  # type: ignore[arg-type]
    history.add("lost")
    assert kept.is_dir() and history.path is None


def test_ctrl_c_in_a_lab_run_keeps_what_it_measured(
    tiny: TinyModels, tmp_path: Path, monkeypatch, capsys  # type: ignore[no-untyped-def]
) -> None:
    """From a new-user tour: an interrupted lab wrote neither its --json nor its --csv."""
    import os
    import signal

    from speculens import lab
    from speculens.cli.__main__ import main

    real = lab.PairLab.run

    def pressed_at_the_start(self, progress=None):  # type: ignore[no-untyped-def]
        os.kill(os.getpid(), signal.SIGINT)
        return real(self, progress)

    monkeypatch.setattr(lab.PairLab, "run", pressed_at_the_start)
    out, table = tmp_path / "lab.json", tmp_path / "lab.csv"
    rc = main(["lab", "-m", str(tiny.target), "--kinds", "chat", "--budget", "0", "--rounds", "1", "--max-tokens",
               "8", "--ctx", "512", "--only", "none,lookup", "--json", str(out), "--csv", str(table), "--no-save"])
    said = capsys.readouterr()
    assert rc == 130 and "interrupted: the results above are what was measured" in said.err
    assert "CANCELLED" in said.out
    assert json.loads(out.read_text(encoding="utf-8"))["cancelled"] is True and table.exists()


def test_a_draft_model_that_cannot_pay_is_said_with_or_without_the_adaptive_controller(
    tiny: TinyModels, monkeypatch, capsys  # type: ignore[no-untyped-def]
) -> None:
    """From a new-user tour: `-s draft --no-adaptive` said nothing of the verdict at load, which the app says."""
    from speculens.cli.__main__ import main
    from speculens.engine import session
    from speculens.engine.adaptive import AdaptiveController

    monkeypatch.setattr(AdaptiveController, "draft_idle", lambda self: "the draft model cannot pay on this machine")
    monkeypatch.setattr(session, "crowded", lambda *_a: False)  # a busy machine adds its share (seen beside a CI run)
    monkeypatch.setattr(session, "crowding", lambda *_a: None)
    every = "and --no-adaptive has it draft every step all the same (each draft ending where its top probability falls"
    for flags, fate in (([], "so it stays idle"), (["--no-adaptive", "--p-min", "0.5"], f"{every} below --p-min 0.5)")):
        args = ["generate", "-m", str(tiny.target), "-d", str(tiny.identical), "-s", "draft", "-n", "4", *flags]
        assert main([*args, "the model"]) == 0
        assert f"note: the draft model cannot pay on this machine, {fate}" in capsys.readouterr().err


def test_the_cli_says_why_a_free_source_drafted_nothing() -> None:
    """From a new-user tour: `-s ngram-map` printed n_drafted = 0 and no word of why, where the app's figures said
    the map's drafts would not have paid."""
    from dataclasses import replace

    from speculens.cli.generate_cmd import SHORT_ANSWER_STEPS, free_sources_idle
    from speculens.engine.events import DraftToken, EmittedToken, Origin, RunningStats, StartEvent, StepEvent

    start = StartEvent(12, 12, 0.05, "ngram-map", 7)
    one = StepEvent(1, 0, (), (EmittedToken(65, b"A", Origin.TARGET),), "A", 0.0, 70.0, 0.1, RunningStats(),
                    considered="ngram-map", expected_speedup=(1.0, 0.84, 0.7))  # fmt: skip
    # A short answer gets no note (a CLI tour's one-token "OK" in --chat had one, every time).
    assert free_sources_idle(start, [one] * (SHORT_ANSWER_STEPS - 1), adaptive=True) == ""
    plain = [one] * SHORT_ANSWER_STEPS
    note = free_sources_idle(start, plain, adaptive=True)
    assert note == (
        "note: nothing drafted: the n-gram map's drafts, scored against the answer as it came, were not right often "
        "enough to pay for checking them (×0.84 of plain decoding at best); --no-adaptive drafts every step anyway"
    )
    drafted = replace(one, source="ngram-map", drafted=(DraftToken(66, b"B", None, None, False),))
    assert free_sources_idle(start, [*plain, replace(drafted, probe=True)], adaptive=True) == note  # a probe
    assert free_sources_idle(start, [*plain, drafted], adaptive=True) == ""  # it drafted
    assert free_sources_idle(start, plain, adaptive=False) == ""
    held = [replace(one, expected_speedup=(1.0, 1.2))] * SHORT_ANSWER_STEPS
    assert free_sources_idle(start, held, adaptive=True) == ""  # held back


def test_the_cli_says_when_the_adaptive_controller_kept_the_draft_model_from_drafting() -> None:
    """From a new-user tour: `-s draft` read "strategy draft" and 64 passes for 64 tokens, with no word that the
    adaptive controller had decided the draft model would not pay (`--no-adaptive` drafted, 94% accepted)."""
    from dataclasses import replace

    from speculens.cli.generate_cmd import draft_model_idle
    from speculens.engine.events import DraftToken, EmittedToken, Origin, RunningStats, StartEvent, StepEvent

    start = StartEvent(12, 12, 0.05, "draft", 7)
    plain = StepEvent(1, 0, (), (EmittedToken(65, b"A", Origin.TARGET),), "A", 0.0, 70.0, 0.1, RunningStats(),
                      considered="draft", expected_speedup=(1.0, 0.86, 0.7))  # fmt: skip
    note = draft_model_idle(start, [plain], adaptive=True)
    assert "kept the draft model from drafting (×0.86 of plain decoding at best" in note and "--no-adaptive" in note
    probe = replace(plain, source="draft", drafted=(DraftToken(66, b"B", 0.9, 0.1, False),), probe=True)
    assert draft_model_idle(start, [plain, probe], adaptive=True) == note  # a probe only re-measures
    assert draft_model_idle(start, [plain, replace(probe, probe=False)], adaptive=True) == ""  # it drafted
    assert draft_model_idle(start, [plain], adaptive=False) == ""  # --no-adaptive: every step drafts
    assert draft_model_idle(replace(start, strategy="lookup+ngram-cache"), [plain], adaptive=True) == ""
    # Not given a long prompt, whose reading it could not win back: said so, not "×0.01 at best" (the catch-up on
    # the whole prompt counted in every step's rate), a tour's reading of its long paste.
    unread = replace(start, draft_behind=2764)
    catching_up = replace(plain, expected_speedup=(1.0, 0.01))
    assert draft_model_idle(unread, [catching_up], adaptive=True) == (
        "note: the draft model sat out: reading 2,764 prompt tokens would have cost it more than it could save on "
        "this answer (it reads a prompt where it might pay)"
    )
    assert draft_model_idle(unread, [catching_up, replace(probe, probe=False)], adaptive=True) == ""  # it caught up
    # Idle from the load on: the load's note gave the figure (with 99% accepted); a second "at best", with this
    # answer's acceptance, read as a contradiction (a tour's ×0.89 and ×0.12).
    idle = draft_model_idle(replace(start, draft_idle=True), [plain], adaptive=True, load_said=True)
    assert idle == "note: the draft model sat out this answer, as the note after loading said it would"
    # Only where that note was printed (a review's: another --n-draft, or a later --chat turn, judges anew).
    assert draft_model_idle(replace(start, draft_idle=True), [plain], adaptive=True) == note


def test_cli_errors_and_figures_are_in_words(tiny: TinyModels, tmp_path: Path) -> None:
    """From a new-user tour: "error: [Errno 2] No such file or directory: …", and "decoded 1 tokens … 0.00 t/s"."""
    from speculens.cli.generate_cmd import summary
    from speculens.engine.events import FinishReason, RunningStats

    missing = tmp_path / "nonexistent.jsonl"
    replay = cli("replay", "--events", missing, "-m", tiny.target, "hello")
    assert replay.returncode == 1 and f"error: No such file or directory: {missing}" in replay.stderr
    prompt = cli("generate", "-m", tiny.target, "-f", missing)
    assert prompt.returncode == 1 and "[Errno" not in prompt.stderr and "No such file or directory" in prompt.stderr
    one = summary(RunningStats(n_steps=1, n_generated=1, elapsed_s=0.0), None, FinishReason.EOG)
    assert "decoded 1 token (with the prompt): no decode rate" in one and "t/s" not in one


def test_a_reader_that_goes_away_ends_the_cli_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    """From a CLI tour: `generate … | head -2` ended in a BrokenPipeError traceback. A closed stdout ends the command
    with 141, as a Unix tool killed by SIGPIPE (a pipe's test depends on its buffer: the whole answer of a tiny model
    fits in it before the reader closes, so the write that fails is made to fail here)."""
    from speculens.cli import generate_cmd
    from speculens.cli.__main__ import main

    def closed(_args: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(generate_cmd, "run", closed)
    assert main(["generate", "-m", "any.gguf", "hello"]) == 141


def test_cli_mistakes_a_script_makes_get_one_line_not_a_traceback(tiny: TinyModels, tmp_path: Path) -> None:
    """From a CLI tour: `--events` into a folder that does not exist ended in a FileNotFoundError traceback after the
    load; `ngram build -o /nonexistent/x.npz` made the
    folder at the root; a truncated model got llama.cpp's "could not load … (see the log)" where `models import`
    says what is wrong."""
    nowhere = tmp_path / "no" / "such" / "folder"
    events = cli("generate", "-m", tiny.target, "-n", "4", "--events", nowhere / "e.jsonl", "hello")
    assert events.returncode == 2 and f"error: --events: the folder {nowhere} does not exist" in events.stderr
    assert "loaded" not in events.stderr  # said before the load
    built = cli("ngram", "build", tiny.target, "-m", tiny.target, "-o", nowhere / "map.npz")
    assert built.returncode == 2 and f"error: -o: the folder {nowhere} does not exist" in built.stderr
    assert not (tmp_path / "no").exists()
    half = tmp_path / "half.gguf"
    half.write_bytes(tiny.target.read_bytes()[: tiny.target.stat().st_size // 2])
    truncated = cli("generate", "-m", half, "-n", "4", "hello")
    assert truncated.returncode == 1 and "is truncated" in truncated.stderr and "could not load" not in truncated.stderr


def test_drafted_by_counts_what_n_drafted_counts_when_the_answer_ends_inside_a_draft(tiny: TinyModels) -> None:
    """A tour's haiku read "n_drafted = 1" and "drafted by = draft 2 (2 accepted)": accepted drafts past the answer's
    end (here a stop string) are not the answer's, and the two lines must say the same."""
    run = cli(
        "generate", "-m", tiny.target, "-d", tiny.identical, "-s", "draft", "--no-adaptive", "--n-draft", "8",
        "--p-min", "0", "-n", "24", "--stop", "aft", "the model of speculative decoding",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "aft" not in run.stdout  # stopped inside the first step's draft
    drafted = int(re.search(r"n_drafted    = (\d+)", run.stderr)[1])  # type: ignore[index]
    accepted = int(re.search(r"n_accept     = (\d+)", run.stderr)[1])  # type: ignore[index]
    assert 0 < drafted < 8  # the identical draft's 8 were all right; the answer ended within them
    assert f"drafted by   = draft {drafted} ({accepted} accepted)" in run.stderr
