"""Building an n-gram map from a corpus (shared by ``speculens-cli ngram build`` and the app's Build… dialog), and
drafting from it."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conftest import TinyModels
from speculens.engine.backend import BackendParams, LlamaBackend
from speculens.engine.config import GenerationConfig, ModelConfig, Strategy
from speculens.engine.drafters import ngram_map
from speculens.engine.drafters.ngram_map import BuildCancelled, NgramMapDrafter, build_map, corpus_files
from speculens.engine.drafters.ngram_table import NgramTable, NgramTableError, build_table
from speculens.engine.events import FinishEvent
from speculens.engine.session import SpeculativeEngine
from speculens.errors import InvalidInputError


@pytest.fixture()
def vocab(tiny: TinyModels):
    backend = LlamaBackend(tiny.target, BackendParams(vocab_only=True))
    yield backend
    backend.close()


def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    for sub in ("notes", ".git", "node_modules/lib"):
        (folder / sub).mkdir(parents=True)
    (folder / "add.py").write_text("def add(a, b):\n    return a + b\n\n" * 30, encoding="utf-8")
    (folder / "notes" / "readme.md").write_text("# Adding\nadd returns the sum of a and b.\n" * 30, encoding="utf-8")
    (folder / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (folder / ".git" / "description.txt").write_text("not the project's text\n", encoding="utf-8")
    (folder / "node_modules" / "lib" / "index.js").write_text("module.exports = 1;\n", encoding="utf-8")
    return folder


def test_a_map_counts_the_corpus_text_files_and_drafts_what_follows(
    tiny: TinyModels, vocab: LlamaBackend, tmp_path: Path
) -> None:
    files = corpus_files([corpus(tmp_path)])
    assert [f.name for f in files] == ["add.py", "readme.md"]  # no image, nothing hidden, no dependencies

    def tokenize(text: str) -> list[int]:
        return vocab.tokenize(text, add_special=False)

    seen: list[tuple[int, int, int]] = []
    out = tmp_path / "maps" / "code.npz"
    built = build_map(files, tiny.target, out, progress=lambda *p: seen.append(p))
    total = sum(f.stat().st_size for f in files)
    assert (built.path, built.n_files) == (out, 2)
    assert built.n_tokens == sum(len(tokenize(f.read_text(encoding="utf-8"))) for f in files)
    assert seen[0] == (0, total, 0) and seen[-1] == (total, total, built.n_tokens)
    assert [d for d, _, _ in seen] == sorted(d for d, _, _ in seen)
    table = NgramTable.load(out, vocab.vocab.fingerprint())
    assert len(table) == built.n_ngrams > 0
    start = tokenize("def add(a, b):\n    return")
    want = tokenize("def add(a, b):\n    return a + b\n")[len(start) :]
    assert list(NgramMapDrafter(table).draft(start, len(want)).tokens) == want
    build_map(files, tiny.target, tmp_path / "all.npz", min_count=1, ngram_max=2)
    assert NgramTable.load(tmp_path / "all.npz", None).ngram_max == 2


def test_counting_in_chunks_counts_what_one_pass_counts(
    tiny: TinyModels, vocab: LlamaBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long file is counted a chunk at a time (cancel and progress between chunks): the n-grams across a chunk's
    edge are counted once, as in one pass."""
    files = corpus_files([corpus(tmp_path)])
    monkeypatch.setattr(ngram_map, "_CHUNK", 7)
    seen: list[tuple[int, int, int]] = []
    build_map(files, tiny.target, tmp_path / "chunked.npz", min_count=1, progress=lambda *p: seen.append(p))
    streams = [vocab.tokenize(f.read_text(encoding="utf-8"), add_special=False) for f in files]
    assert NgramTable.load(tmp_path / "chunked.npz", None).counts == build_table(streams, min_total=1).counts
    assert len(seen) > sum(len(s) for s in streams) // 7  # reported within the files, not only after each
    cancel = threading.Event()

    def stop_mid_file(done: int, total: int, tokens: int) -> None:
        if tokens > 20:
            cancel.set()

    with pytest.raises(BuildCancelled, match="no file was written"):
        build_map(files, tiny.target, tmp_path / "stopped.npz", progress=stop_mid_file, cancel=cancel)
    assert not (tmp_path / "stopped.npz").exists()
    assert [p.name for p in tmp_path.iterdir() if p.suffix != ".npz" and p.is_file()] == []  # no temporary left


def test_a_corpus_without_text_is_refused_in_words(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"not found: .*missing"):
        corpus_files([tmp_path / "missing"])
    (tmp_path / "pictures").mkdir()
    (tmp_path / "pictures" / "a.png").write_bytes(b"\x89PNG")
    with pytest.raises(InvalidInputError, match="no text files"):
        corpus_files([tmp_path / "pictures"])


def test_a_new_map_is_drafted_from_without_reloading_the_models(tiny: TinyModels, tmp_path: Path) -> None:
    """The map is a generation setting: the loaded engine drafts from it, reads a rebuilt file again, and refuses a
    missing one in words."""
    path = tmp_path / "map.npz"
    with SpeculativeEngine(ModelConfig(tiny.target, None, n_ctx=256)) as engine:
        prompt = engine.target.tokenize("print hello world")
        plain = list(engine.generate(prompt, GenerationConfig(strategy=Strategy.NONE, max_tokens=32)))[-1]
        assert isinstance(plain, FinishEvent)
        answers = tmp_path / "answers.txt"
        answers.write_text(engine.target.detokenize(plain.tokens) * 3, encoding="utf-8")
        (tmp_path / "other.txt").write_text("something else entirely\n" * 40, encoding="utf-8")
        build_map([tmp_path / "other.txt"], tiny.target, path)
        first = engine.ngram_map(path)
        assert engine.ngram_map(path) is first  # read once
        build_map([answers], tiny.target, path, min_count=1)
        assert engine.ngram_map(path) is not first  # rebuilt: read again
        config = GenerationConfig(strategy=Strategy.NGRAM_MAP, max_tokens=32, adaptive=False, ngram_map=path)
        spec = list(engine.generate(prompt, config))[-1]
        assert isinstance(spec, FinishEvent) and spec.tokens == plain.tokens
        assert spec.stats.n_accepted > 10  # drafted from the rebuilt map (the first one knows none of this)
        rng = np.random.default_rng(0)
        assert "ngram-map" in [d.name for d in engine.drafters(replace(config, strategy=Strategy.AUTO), rng)]
        assert "ngram-map" not in [d.name for d in engine.drafters(GenerationConfig(strategy=Strategy.AUTO), rng)]
        with pytest.raises(InvalidInputError, match="needs a map file"):
            list(engine.generate(prompt, GenerationConfig(strategy=Strategy.NGRAM_MAP, max_tokens=4)))
        with pytest.raises(InvalidInputError, match="cannot read n-gram file"):
            engine.ngram_map(tmp_path / "gone.npz")


def test_a_file_listed_twice_is_counted_once_and_binary_data_under_a_text_suffix_is_left_out(
    tiny: TinyModels, tmp_path: Path
) -> None:
    """A tour's corpus held a folder and the folder above it: every file counted twice, so every n-gram seen once
    passed a least count of 2. And 300 KB of random bytes named blob.py became 60,688 n-grams."""
    folder = corpus(tmp_path)
    (folder / "blob.py").write_bytes(bytes(range(256)) * 64)
    files = corpus_files([folder / "notes", folder, folder / "add.py"])
    assert sorted(f.name for f in files) == ["add.py", "readme.md"]
    once = build_map(corpus_files([folder / "add.py"]), tiny.target, tmp_path / "once.npz", min_count=2)
    twice = build_map(corpus_files([folder / "add.py", folder]), tiny.target, tmp_path / "twice.npz", min_count=2)
    assert twice.n_files == 2 and twice.n_tokens > once.n_tokens  # readme.md added, add.py not again
    with pytest.raises(InvalidInputError, match="ngram_max must be between 1 and 8, not 0"):
        build_map(files, tiny.target, tmp_path / "none.npz", ngram_max=0)
    assert not (tmp_path / "none.npz").exists()
    # Given alone, binary data is said to be binary, not "no text files (… .py …)" of a .py file (a tour's).
    with pytest.raises(InvalidInputError, match=r"^blob.py holds binary data, not text"):
        corpus_files([folder / "blob.py"])


def test_a_corpus_that_gives_no_ngram_writes_no_map(tiny: TinyModels, tmp_path: Path) -> None:
    """From a new-user tour: an empty file made a map of 0 n-grams from 0 tokens, which the app made active (and
    switched the strategy to draft from it)."""
    empty = tmp_path / "empty.py"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"no n-gram to draft from: it holds no text \(empty files\)"):
        build_map([empty], tiny.target, tmp_path / "empty.npz")
    once = tmp_path / "once.txt"
    once.write_text("every word here comes once", encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"none of its n-grams is seen 100 times or more.*smaller least"):
        build_map([once], tiny.target, tmp_path / "once.npz", min_count=100)
    assert not (tmp_path / "empty.npz").exists() and not (tmp_path / "once.npz").exists()


def test_the_cli_refuses_out_of_range_options_as_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from speculens.cli.__main__ import main

    for option, value in (("--ngram-max", "0"), ("--ngram-max", "100"), ("--min-count", "0"), ("--min-count", "-3")):
        with pytest.raises(SystemExit) as ended:
            main(["ngram", "build", "corpus", "-m", "model", "-o", "map.npz", option, value])
        assert ended.value.code == 2 and "must be between" in capsys.readouterr().err


def test_a_map_built_for_another_tokenizer_is_left_out_of_the_automatic_strategy_and_said(
    tiny: TinyModels, tmp_path: Path
) -> None:
    """A tour chose a map built with another model's tokenizer: nothing said so, then every answer failed, the
    automatic strategy's too, with "Gemma.npz was built with another tokenizer"."""
    (tmp_path / "words.txt").write_text("def add(a, b):\n    return a + b\n" * 40, encoding="utf-8")
    other = build_map([tmp_path / "words.txt"], tiny.mismatch, tmp_path / "gemma.npz").path
    mine = build_map([tmp_path / "words.txt"], tiny.target, tmp_path / "mine.npz").path
    with SpeculativeEngine(ModelConfig(tiny.target, None, n_ctx=256)) as engine:
        said = engine.map_problem(other)
        assert said is not None and said.startswith("the n-gram map gemma.npz was built with another model's")
        assert engine.map_problem(mine) is None and engine.map_problem(None) is None
        prompt = engine.target.tokenize("print hello world")
        auto = GenerationConfig(strategy=Strategy.AUTO, max_tokens=8, ngram_map=other)
        assert isinstance(list(engine.generate(prompt, auto))[-1], FinishEvent)  # answered, without the map
        rng = np.random.default_rng(0)
        assert "ngram-map" not in [d.name for d in engine.drafters(auto, rng)]
        with pytest.raises(InvalidInputError, match=r"gemma\.npz was built with another model's tokenizer"):
            list(engine.generate(prompt, replace(auto, strategy=Strategy.NGRAM_MAP)))


def test_a_go_or_shell_code_base_is_text_too(tmp_path: Path) -> None:
    """A tour read "no text files (.c .cpp .h …)": a Go, Ruby or shell code base would have been refused."""
    for name in ("main.go", "deploy.sh", "app.rb", "config.yaml"):
        (tmp_path / name).write_text("x = 1\n", encoding="utf-8")
    assert sorted(f.name for f in corpus_files([tmp_path])) == ["app.rb", "config.yaml", "deploy.sh", "main.go"]


def test_text_files_without_a_suffix_are_read_and_programs_and_hidden_files_are_not(tmp_path: Path) -> None:
    """A folder search left out Makefile, Dockerfile and scripts run by name without a word."""
    for name in ("Makefile", "Dockerfile", "run-tests", ".gitignore", ".env", ".eslintrc.json", "tags"):
        (tmp_path / name).write_text("all:\n\tmake build\n", encoding="utf-8")
    (tmp_path / "a.out").write_bytes(b"\x7fELF\x00\x01")  # a suffix that is not text
    (tmp_path / "server").write_bytes(b"\x7fELF\x02\x00\x00")  # a program without a suffix
    (tmp_path / "env" / "bin").mkdir(parents=True)  # a virtual environment's scripts are not the code base's
    (tmp_path / "env" / "bin" / "activate").write_text("export PATH\n", encoding="utf-8")
    found = sorted(f.name for f in corpus_files([tmp_path]))
    assert found == [".eslintrc.json", "Dockerfile", "Makefile", "run-tests"]  # a hidden file with a suffix, as before
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "server").write_bytes(b"\x7fELF\x02\x00\x00")
    with pytest.raises(InvalidInputError, match="no text files"):  # programs alone are no corpus
        corpus_files([tmp_path / "bin"])


def test_ngram_info_says_what_a_map_holds_and_whether_it_fits_a_model(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tour found no way to see what a map holds (its n-grams, its size, its tokenizer) but ls."""
    import json

    from speculens.cli.__main__ import main

    (tmp_path / "words.txt").write_text("def add(a, b):\n    return a + b\n" * 40, encoding="utf-8")
    built = build_map([tmp_path / "words.txt"], tiny.target, tmp_path / "map.npz", ngram_max=3)
    assert main(["ngram", "info", str(built.path), "-m", str(tiny.target), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["n_ngrams"] == built.n_ngrams and (info["ngram_min"], info["ngram_max"]) == (1, 3)
    assert info["bytes"] == built.path.stat().st_size and info["fits_model"] is True
    assert main(["ngram", "info", str(built.path), "-m", str(tiny.mismatch)]) == 3  # as check-pair says a mismatch
    out = capsys.readouterr().out
    assert f"{built.n_ngrams:,} n-grams of 1 to 3 tokens" in out and "was not built with" in out
    (tmp_path / "notes.npz").write_text("not a map", encoding="utf-8")
    assert main(["ngram", "info", str(tmp_path / "notes.npz")]) == 1
    assert "is not an n-gram map" in capsys.readouterr().err


def test_a_damaged_map_is_an_error_in_words_from_every_reader(tmp_path: Path) -> None:
    """A truncated file (a bad zip inside), or a map missing one of its arrays, raised numpy's and zipfile's own
    errors past the app's handlers: a damaged map named in the settings stopped the window from opening."""
    good = tmp_path / "code.npz"
    build_table([[1, 2, 3, 1, 2, 3]], min_total=1).save(good, "fingerprint")
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    lacking = tmp_path / "lacking.npz"
    with np.load(good) as data:
        np.savez(lacking, **{k: data[k] for k in data.files if not k.startswith("keys")})
    for path in (truncated, lacking):
        for read in (NgramTable.check, NgramTable.fingerprint_of, NgramTable.summary,
                     lambda p: NgramTable.load(p, None)):  # fmt: skip
            try:
                read(path)
            except NgramTableError as exc:
                assert path.name in str(exc)
            else:
                assert read is NgramTable.check or read is NgramTable.fingerprint_of, (path, read)  # header intact
