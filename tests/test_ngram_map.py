"""Building an n-gram map from a corpus (shared by ``speculens-cli ngram build`` and the app's Build… dialog)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from conftest import TinyModels
from speculens.engine.backend import BackendParams, LlamaBackend
from speculens.engine.config import GenerationConfig, ModelConfig, Strategy
from speculens.engine.drafters.ngram_map import BuildCancelled, NgramMapDrafter, build_map, corpus_files
from speculens.engine.drafters.ngram_table import NgramTable
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
    (folder / "notes").mkdir(parents=True)
    (folder / "add.py").write_text("def add(a, b):\n    return a + b\n\n" * 30, encoding="utf-8")
    (folder / "notes" / "readme.md").write_text("# Adding\nadd returns the sum of a and b.\n" * 30, encoding="utf-8")
    (folder / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    return folder


def test_a_map_counts_the_corpus_text_files_and_drafts_what_follows(vocab: LlamaBackend, tmp_path: Path) -> None:
    files = corpus_files([corpus(tmp_path)])
    assert [f.name for f in files] == ["add.py", "readme.md"]  # folders searched; the image left out

    def tokenize(text: str) -> list[int]:
        return vocab.tokenize(text, add_special=False)

    seen: list[tuple[int, int, int]] = []
    out = tmp_path / "maps" / "code.npz"
    built = build_map(files, tokenize, vocab.vocab.fingerprint(), out, progress=lambda *p: seen.append(p))
    total = sum(f.stat().st_size for f in files)
    assert (built.path, built.n_files) == (out, 2)
    assert built.n_tokens == sum(len(tokenize(f.read_text(encoding="utf-8"))) for f in files)
    assert [d for d, _, _ in seen] == sorted(d for d, _, _ in seen) and seen[-1] == (total, total, built.n_tokens)
    table = NgramTable.load(out, vocab.vocab.fingerprint())
    assert len(table) == built.n_ngrams > 0
    start = tokenize("def add(a, b):\n    return")
    want = tokenize("def add(a, b):\n    return a + b\n")[len(start) :]
    draft = NgramMapDrafter(table).draft(start, len(want))
    assert list(draft.tokens) == want
    every = build_map(files, tokenize, vocab.vocab.fingerprint(), tmp_path / "all.npz", min_count=1, ngram_max=2)
    assert NgramTable.load(tmp_path / "all.npz", None).ngram_max == 2 and every.n_tokens == built.n_tokens


def test_a_cancelled_build_writes_nothing(vocab: LlamaBackend, tmp_path: Path) -> None:
    files = corpus_files([corpus(tmp_path)])
    cancel = threading.Event()
    out = tmp_path / "maps" / "code.npz"
    with pytest.raises(BuildCancelled, match="no file was written"):
        build_map(
            files,
            lambda text: vocab.tokenize(text, add_special=False),
            vocab.vocab.fingerprint(),
            out,
            progress=lambda *_: cancel.set(),  # stopped after the first file
            cancel=cancel,
        )
    assert not out.exists() and not (out.parent.exists() and any(out.parent.iterdir()))


def test_a_corpus_without_text_is_refused_in_words(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"not found: .*missing"):
        corpus_files([tmp_path / "missing"])
    (tmp_path / "pictures").mkdir()
    (tmp_path / "pictures" / "a.png").write_bytes(b"\x89PNG")
    with pytest.raises(InvalidInputError, match="no text files"):
        corpus_files([tmp_path / "pictures"])


def test_a_new_map_is_drafted_from_without_reloading_the_models(tiny: TinyModels, tmp_path: Path) -> None:
    """The map is a generation setting: the loaded engine reads a rebuilt file, and refuses a missing one in words."""
    path = tmp_path / "map.npz"
    with SpeculativeEngine(ModelConfig(tiny.target, None, n_ctx=256)) as engine:
        tokenize = engine.target.tokenize
        build_map(corpus_files([corpus(tmp_path)]), tokenize, engine.fingerprint, path)
        first = engine.ngram_map(path)
        assert engine.ngram_map(path) is first  # read once
        (tmp_path / "other.txt").write_text("something else entirely\n" * 40, encoding="utf-8")
        build_map([tmp_path / "other.txt"], tokenize, engine.fingerprint, path)
        assert engine.ngram_map(path) is not first  # rebuilt: read again
        config = GenerationConfig(strategy=Strategy.NGRAM_MAP, max_tokens=4, ngram_map=path)
        assert isinstance(list(engine.generate(tokenize("hello"), config))[-1], FinishEvent)
        with pytest.raises(InvalidInputError, match="needs a map file"):
            list(engine.generate(tokenize("hello"), GenerationConfig(strategy=Strategy.NGRAM_MAP, max_tokens=4)))
        with pytest.raises(InvalidInputError, match="cannot read n-gram file"):
            engine.ngram_map(tmp_path / "gone.npz")
