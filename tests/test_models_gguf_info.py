"""GGUF metadata without weights: facts agree with llama.cpp, and bad files fail clearly and fast."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from gguf_split import split_gguf
from speculens.engine.backend import BackendParams, LlamaBackend
from speculens.models.gguf_info import GGUFError, model_family, quant_label, read_gguf_info
from speculens.models.synthetic import TinyModelSpec, tiny_vocab


@pytest.mark.parametrize("which", ["target", "perturbed", "mismatch"])
def test_tokenizer_facts_agree_with_a_llama_cpp_vocab_only_load(tiny, which: str) -> None:
    path = getattr(tiny, which)
    ours = read_gguf_info(path).tokenizer
    assert ours is not None
    mine = ours.to_vocab_info()
    with LlamaBackend(path, BackendParams(vocab_only=True)) as backend:
        theirs = backend.vocab
        n_params = backend.n_params
    for name in ("vocab_type", "n_vocab", "bos", "eos", "add_bos", "add_eos"):
        assert getattr(mine, name) == getattr(theirs, name), name
    assert mine.texts == theirs.texts
    assert read_gguf_info(path).parameter_count == n_params


def test_model_facts_of_a_tiny_model(tiny) -> None:
    info = read_gguf_info(tiny.target)
    spec = TinyModelSpec()
    tokens, _, types = tiny_vocab(spec)
    assert info.architecture == "llama"
    assert info.name == "tiny-target"
    assert info.context_length == spec.n_ctx_train
    assert info.block_count == spec.n_layer
    assert info.embedding_length == spec.n_embd
    assert info.quantization == "F32"
    assert info.parts == (tiny.target,)
    assert info.file_size == tiny.target.stat().st_size
    tok = info.tokenizer
    assert tok is not None
    assert (tok.model, tok.pre, tok.bos, tok.eos, tok.unk, tok.add_bos) == ("llama", "default", 1, 2, 0, True)
    assert list(tok.tokens) == tokens
    assert list(tok.token_types) == types
    assert tok.chat_template is not None and "im_start" in tok.chat_template
    assert info.to_dict()["tokenizer"]["n_vocab"] == len(tokens)


def test_tokens_can_be_skipped(tiny) -> None:
    info = read_gguf_info(tiny.target, tokens=False)
    assert info.tokenizer is not None
    assert info.tokenizer.tokens == ()
    assert info.tokenizer.n_vocab == len(tiny_vocab(TinyModelSpec())[0])
    with pytest.raises(ValueError, match="not read"):
        info.tokenizer.to_vocab_info()


def test_split_model_is_one_model(tiny, tmp_path: Path) -> None:
    parts = split_gguf(tiny.target, tmp_path / "tiny.gguf", max_tensors=8)
    assert len(parts) == 3
    whole = read_gguf_info(tiny.target)
    for part in parts:  # any part names the whole model
        info = read_gguf_info(part)
        assert info.parts == tuple(parts)
        assert info.path == parts[0]
        assert info.parameter_count == whole.parameter_count
        assert info.n_tensors == whole.n_tensors
        assert info.tokenizer is not None and info.tokenizer.tokens == whole.tokenizer.tokens  # type: ignore[union-attr]
    parts[1].unlink()
    with pytest.raises(GGUFError, match=r"tiny-00002-of-00003\.gguf is missing"):
        read_gguf_info(parts[0])


def _header(version: int = 3, n_tensors: int = 0, n_kv: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def _damaged(tiny_path: Path, tmp_path: Path, offset: int, value: bytes) -> Path:
    data = bytearray(tiny_path.read_bytes())
    data[offset : offset + len(value)] = value
    out = tmp_path / "damaged.gguf"
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty"),
        (b"hello, I am a text file", "not a GGUF model file"),
        (b"GGU", "not a GGUF model file"),
        (_header(version=1), "GGUF version 1"),
        (_header(version=99), "GGUF version 99"),
        (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian"),
        (_header()[:10], "truncated"),
        (_header(n_kv=1 << 60), "truncated or damaged"),
        (_header(n_tensors=1 << 60, n_kv=0), "truncated or damaged"),
        (_header(n_kv=1) + struct.pack("<Q", 1 << 40) + b"\0" * 16, "claims"),
        (
            _header(n_kv=1) + struct.pack("<Q", 3) + b"abc" + struct.pack("<I", 77) + b"\0" * 16,
            "unknown value type",
        ),
        (
            _header(n_kv=1) + struct.pack("<Q", 3) + b"abc" + struct.pack("<IIQ", 9, 8, 1 << 58) + b"\0" * 16,
            "truncated or damaged",
        ),
    ],
)
def test_bad_files_raise_a_clear_error_quickly(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    t0 = time.perf_counter()
    with pytest.raises(GGUFError, match=message):
        read_gguf_info(path)
    assert time.perf_counter() - t0 < 1.0  # absurd counts are refused before any loop runs


def test_every_truncation_of_a_real_file_is_a_clear_error(tiny, tmp_path: Path) -> None:
    data = tiny.target.read_bytes()
    info = read_gguf_info(tiny.target)
    assert info.tokenizer is not None
    path = tmp_path / "cut.gguf"
    # Cut inside the header, inside the metadata (in and after the token list) and inside the tensor infos.
    metadata_end = data.index(b"token_embd.weight") - 8
    for cut in [5, 20, 30, 200, 2000, 6000, metadata_end // 2, metadata_end - 3, metadata_end + 10]:
        path.write_bytes(data[:cut])
        with pytest.raises(GGUFError, match=r"truncated|not a GGUF") as refused:
            read_gguf_info(path)
        if cut >= 30:  # past the header: each says what to do (a tour met "needs 8 bytes at offset …" alone)
            assert "download or copy it again" in str(refused.value), str(refused.value)


def test_absurd_token_string_length_is_refused(tiny, tmp_path: Path) -> None:
    data = tiny.target.read_bytes()
    at = data.index(b"<unk>") - 8  # the length of the first token text
    damaged = _damaged(tiny.target, tmp_path, at, struct.pack("<Q", 1 << 50))
    with pytest.raises(GGUFError, match="truncated or damaged"):
        read_gguf_info(damaged)


def test_missing_and_folder(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="not found"):
        read_gguf_info(tmp_path / "nope.gguf")
    with pytest.raises(GGUFError, match="folder"):
        read_gguf_info(tmp_path)


def test_no_architecture_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "noarch.gguf"
    path.write_bytes(_header())
    with pytest.raises(GGUFError, match=r"general\.architecture"):
        read_gguf_info(path)


@pytest.mark.parametrize(
    ("file_type", "name", "label"),
    [
        (15, "", "Q4_K_M"),
        (0, "", "F32"),
        (None, "Llama-3.2-1B-Instruct-Q8_0.gguf", "Q8_0"),
        (None, "model.IQ2_XXS.gguf", "IQ2_XXS"),
        (None, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "Q4_K_M"),
        (None, "model-bf16-00001-of-00002.gguf", "BF16"),
        (None, "model.gguf", None),
    ],
)
def test_quant_labels(file_type: int | None, name: str, label: str | None) -> None:
    assert quant_label(file_type, name) == label


def test_model_family() -> None:
    assert model_family("Qwen2.5-Coder", "whatever", "qwen2") == "qwen2.5-coder"
    assert model_family(None, "Llama 3.2 1B Instruct", "llama") == "llama-3.2"
    assert model_family(None, None, "gemma3") == "gemma3"


def test_a_parameter_count_that_reads_otherwise_than_the_models_size_label_gives_the_label() -> None:
    """A tour read "630M" beside "Qwen2.5 0.5B" and "1.78B" beside "1.5B" in the pair check: the files hold the
    output matrix the originals share with the embeddings. The label people know the model by is said beside."""
    from speculens.models.gguf_info import format_params

    assert format_params(630_167_424, "0.5B") == "630M (labelled 0.5B)"
    assert format_params(1_777_088_000, "1.5B") == "1.78B (labelled 1.5B)"
    assert format_params(1_543_714_304, "1.5B") == "1.54B"  # within 10%: the label adds nothing
    assert format_params(268_098_176, "270M") == "268M"
    assert format_params(46_700_000_000, "8x7B") == "46.7B (labelled 8x7B)"
    assert format_params(494_000_000) == "494M" and format_params(None, "7B") == "? (labelled 7B)"
    assert format_params(494_000_000, "0B") == "494M (labelled 0B)"  # an odd label is said, not divided by
    assert format_params(494_000_000, "  ") == format_params(494_000_000, "") == "494M"
