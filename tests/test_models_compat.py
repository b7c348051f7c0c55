"""Pair checks on the tiny models: identical pairs pass, a shuffled vocabulary fails naming the token."""

from __future__ import annotations

from pathlib import Path

import pytest

from speculens.engine.vocab import CHECK_START_TOKEN_ID, vocab_mismatch
from speculens.models.catalog import load_catalog, pairs_for_target
from speculens.models.compat import Level, check_pair, suggest_drafts
from speculens.models.gguf_info import read_gguf_info
from speculens.models.library import Library
from speculens.models.synthetic import TinyModelSpec, tiny_vocab, write_tiny_model


def test_identical_pair_is_compatible(tiny) -> None:
    report = check_pair(tiny.target, tiny.identical)
    assert report.compatible
    for key in (
        "vocab_type",
        "vocab_size",
        "token_texts",
        "special_tokens",
        "tokenizer_class",
        "draft_model",
    ):
        assert report.check(key).level is Level.OK, key
    assert report.first_difference is None
    # The same size is advice, not an error: it can run, but it cannot be faster.
    assert report.check("size").level is Level.WARNING
    assert "not smaller" in report.check("size").message
    assert report.headline.startswith("Compatible")


def test_shuffled_vocabulary_names_the_first_differing_token(tiny) -> None:
    report = check_pair(tiny.target, tiny.mismatch)
    assert not report.compatible
    target_tokens, _, _ = tiny_vocab(TinyModelSpec())
    draft_tokens, _, _ = tiny_vocab(TinyModelSpec(vocab_shuffle_seed=7))
    first = next(
        i for i in range(CHECK_START_TOKEN_ID, len(target_tokens)) if target_tokens[i] != draft_tokens[i]
    )
    diff = report.first_difference
    assert diff is not None
    assert (diff.token_id, diff.target_text, diff.draft_text) == (
        first,
        target_tokens[first],
        draft_tokens[first],
    )
    check = report.check("token_texts")
    assert check.level is Level.ERROR
    assert f"id {first}" in check.message and repr(target_tokens[first]) in check.message
    assert report.check("draft_model").level is Level.ERROR
    assert report.check("vocab_type").level is Level.OK  # same kind of vocabulary, different ids
    headline = report.headline
    assert "cannot run" in headline and f"id {first}" in headline
    for strategy in ("lookup", "ngram-cache", "ngram-map"):
        assert strategy in headline


def test_verdict_is_the_engines_own(tiny, tiny_model_factory) -> None:
    drafts = [
        tiny.identical,
        tiny.perturbed,
        tiny.mismatch,
        tiny_model_factory("extra", extra_words=("zebra", "quokka")),
        tiny_model_factory("eos", eos_token_id=4),
    ]
    target = read_gguf_info(tiny.target)
    for draft in drafts:
        info = read_gguf_info(draft)
        expected = vocab_mismatch(target.tokenizer.to_vocab_info(), info.tokenizer.to_vocab_info())  # type: ignore[union-attr]
        assert check_pair(target, info).compatible == (expected is None), draft.name


def test_small_vocabulary_growth_is_a_warning(tiny, tiny_model_factory) -> None:
    draft = tiny_model_factory("extra", extra_words=("zebra",))
    report = check_pair(tiny.target, draft)
    assert report.compatible
    assert report.check("vocab_size").level is Level.WARNING
    assert "tolerance" in report.check("vocab_size").message
    assert report.check("token_texts").level is Level.WARNING


def test_different_eos_is_advice_when_not_added(tiny, tiny_model_factory) -> None:
    report = check_pair(tiny.target, tiny_model_factory("eos", eos_token_id=4))
    assert report.compatible
    assert report.check("special_tokens").level is Level.WARNING
    assert "EOS is id 2 in the target and 4 in the draft" in report.check("special_tokens").message


def test_context_and_size(tiny, tiny_model_factory) -> None:
    small = tiny_model_factory("small", n_embd=16, n_head=2, n_ff=32, n_ctx_train=2048)
    report = check_pair(tiny.target, small, n_ctx=4096)
    assert report.check("context").level is Level.WARNING
    assert "2,048" in report.check("context").message
    assert check_pair(tiny.target, small, n_ctx=1024).check("context").level is Level.OK
    assert report.size_ratio is not None and report.size_ratio > 2
    assert report.check("size").level is Level.OK
    assert f"{report.size_ratio:.1f}×" in report.check("size").message


def test_family_is_advice(tiny, tmp_path: Path) -> None:
    other = write_tiny_model(tmp_path / "other.gguf", TinyModelSpec(name="Other Family 1B"))
    report = check_pair(tiny.target, other)
    assert report.compatible
    assert report.check("family").level is Level.WARNING


def test_report_to_dict(tiny) -> None:
    data = check_pair(tiny.target, tiny.mismatch).to_dict()
    assert data["compatible"] is False
    assert data["first_difference"]["token_id"] >= CHECK_START_TOKEN_ID
    assert {c["key"] for c in data["checks"]} >= {"vocab_type", "token_texts", "context", "size", "family"}


def test_suggest_drafts_from_the_library(tiny, tmp_path: Path) -> None:
    small = write_tiny_model(
        tmp_path / "small.gguf", TinyModelSpec(n_embd=16, n_head=2, n_ff=32, name="tiny-target")
    )
    library = Library(tmp_path / "library.json", include_demo=False)
    for path in (tiny.target, tiny.identical, tiny.mismatch, small):
        library.add(path)
    suggestions = suggest_drafts(tiny.target, library)
    # The identical copy is not smaller, the mismatch cannot run: only the small compatible model remains.
    assert [s.path for s in suggestions if s.source == "library"] == [small.resolve()]
    assert suggestions[0].report is not None and suggestions[0].report.compatible


def test_catalog_covers_the_families_with_small_and_large_targets() -> None:
    pairs = load_catalog()
    families = {p.family for p in pairs}
    assert {"qwen2.5", "qwen2.5-coder", "llama-3", "gemma-3"} <= families
    assert len(families) >= 5
    assert {p.scale for p in pairs} == {"small", "large"}
    for p in pairs:
        assert p.target.file.endswith(".gguf") and p.draft.file.endswith(".gguf")
        assert p.draft.size < p.target.size, p.id
        assert p.why


def test_catalog_suggestions_for_a_target(tiny) -> None:
    demo_pair = pairs_for_target(filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    assert demo_pair and demo_pair[0].draft.file == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    assert pairs_for_target(read_gguf_info(tiny.target, tokens=False)) == []


@pytest.mark.parametrize("missing", ["target", "draft"])
def test_model_without_tokenizer_is_an_error(tiny, tmp_path: Path, missing: str) -> None:
    import gguf

    path = tmp_path / "notok.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_context_length(128)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    report = check_pair(path, tiny.target) if missing == "target" else check_pair(tiny.target, path)
    assert not report.compatible
    assert "no tokenizer" in report.check("tokenizer").message


def test_token_texts_are_kept_compactly_and_compared_by_boundaries_too() -> None:
    from speculens.engine.vocab import TokenTexts, VocabInfo

    words = ["<s>", "", "Ġthe", "Ċ", "é", "ab", "c", "Ġx"]
    texts = TokenTexts(words)
    assert list(texts) == words and len(texts) == len(words)
    assert [texts[i] for i in range(len(words))] == words and texts[-1] == "Ġx" and texts[2:4] == ["Ġthe", "Ċ"]
    with pytest.raises(IndexError):
        texts[len(words)]
    assert texts == words and texts == TokenTexts(words) and texts != TokenTexts(words[:-1])

    def vocab(tokens: list[str]) -> VocabInfo:
        return VocabInfo(2, len(tokens), 0, 1, frozenset({1}), False, False, tokens)

    assert vocab_mismatch(vocab(words), vocab(list(words))) is None
    # The same characters in the same order, split at another place: id 5 is "a", not "ab".
    shifted = [*words[:5], "a", "bc", "Ġx"]
    problem = vocab_mismatch(vocab(words), vocab(shifted))
    assert problem is not None and "from id 5" in problem and "'ab'" in problem


def test_catalog_drafts_no_smaller_than_the_target_are_not_suggested(tmp_path: Path) -> None:
    """A tour's 268 MB Gemma 3 target was offered the 292 MB and 806 MB drafts of larger Gemma 3 targets."""
    import dataclasses

    target = read_gguf_info(write_tiny_model(tmp_path / "g.gguf", TinyModelSpec(name="gemma-3-270m-it")))
    assert target.family == "gemma-3"
    library = Library(tmp_path / "library.json", include_demo=False)

    def suggested(file_size: int) -> list[str]:
        return [s.filename or "" for s in suggest_drafts(dataclasses.replace(target, file_size=file_size), library)]

    assert suggested(268_000_000) == []
    assert suggested(1_000_000_000) == ["gemma-3-270m-it-Q8_0.gguf"]  # the 806 MB one would cost nearly as much
    assert suggested(2_500_000_000) == ["gemma-3-270m-it-Q8_0.gguf", "gemma-3-1b-it-Q4_K_M.gguf"]
    # The catalog's pair for this very file is its own choice, whatever the sizes (Qwen2.5 1.5B and 0.5B Q8_0).
    qwen = write_tiny_model(tmp_path / "Qwen2.5-1.5B-Instruct-Q4_K_M.gguf", TinyModelSpec(name="Qwen2.5 1.5B"))
    info = dataclasses.replace(read_gguf_info(qwen), file_size=986_000_000)
    assert "Qwen2.5-0.5B-Instruct-Q8_0.gguf" in [s.filename for s in suggest_drafts(info, library)]


def test_a_demo_draft_not_built_yet_is_suggested_for_its_catalog_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen under Xvfb: the demo target's picker said "No compatible smaller draft found" above a draft list that
    held the demo draft, not built yet (it cannot be checked before it is built; the catalog vouches for it)."""
    from speculens.models import demo

    draft = demo.DemoModel("tiny-draft", "Tiny demo draft", "draft", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                           ("no_such_chunk_package",), 491_000_000, "0" * 64, "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF")
    monkeypatch.setattr(demo, "DEMO_MODELS", (draft,))
    monkeypatch.setattr(demo, "is_installed", lambda model: True)
    target = write_tiny_model(tmp_path / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", TinyModelSpec(name="Qwen"))
    library = Library(tmp_path / "library.json")
    [entry] = [e for e in library.entries() if e.source.demo_key == "tiny-draft"]
    suggestions = suggest_drafts(target, library)
    [offered] = [s for s in suggestions if s.path == entry.path]
    assert offered.source == "library" and "A demo model: picked, it is built." in offered.reason
    assert not any(s.filename == draft.filename for s in suggestions if s.source == "catalog")  # not twice


def test_a_demo_model_not_built_yet_is_not_offered_as_a_draft_as_large_as_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a new-user tour: an imported 1.5B target, in a home whose demo models were not built yet, was offered the
    demo 1.5B (the same file) as its draft: the catalog's draft for a 32B target, let through before the size check."""
    import dataclasses

    from speculens.models import demo

    big = demo.DemoModel("tiny-big", "Tiny demo 1.5B", "target", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                         ("no_such_chunk_package",), 1_120_000_000, "0" * 64, "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF")
    small = demo.DemoModel("tiny-small", "Tiny demo 0.5B", "draft", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                           ("no_such_chunk_package",), 491_000_000, "0" * 64, "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF")
    monkeypatch.setattr(demo, "DEMO_MODELS", (big, small))
    monkeypatch.setattr(demo, "is_installed", lambda model: True)
    (tmp_path / "imported").mkdir()
    target = write_tiny_model(tmp_path / "imported" / big.filename, TinyModelSpec(name="Qwen2.5 Coder 1.5B Instruct"))
    info = dataclasses.replace(read_gguf_info(target), file_size=big.size)
    assert info.family == "qwen2.5-coder"  # the catalog's family: its 32B target's 1.5B draft is this file
    offered = [s.path.name for s in suggest_drafts(info, Library(tmp_path / "library.json")) if s.path is not None]
    assert big.filename not in offered and small.filename in offered
