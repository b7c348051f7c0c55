"""Flash attention: timed both ways at load on a CPU, the faster kept per machine, and the user's choice obeyed."""

from __future__ import annotations

import ctypes
import struct
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from conftest import TinyModels
from speculens.engine import session
from speculens.engine.backend import BackendParams, FlashProbe, LlamaBackend, tiled_kv_state
from speculens.engine.config import FlashAttention, GenerationConfig, ModelConfig, Strategy
from speculens.engine.events import FinishEvent
from speculens.engine.session import SpeculativeEngine

PROMPT = "the model of speculative decoding"


def state_blob(
    cells: int, v_trans: bool, header: bool, ext: bool, first: int = 100, period: int = 256, layers: int = 2
) -> bytes:
    """A sequence state laid out as llama.cpp writes one, cells at positions ``first ..``; every byte of cell
    ``i``'s keys and values is ``i % period``."""
    row = 8
    out = [struct.pack("<Ii", 0x67677371, 0)] if header else []
    out.append(struct.pack("<II", 1, cells))
    for i in range(cells):
        out.append(struct.pack("<iI", first + i, 1) + (struct.pack("<iii", 7, 8, 9) if ext else b"") + b"\0" * 4)
    out.append(struct.pack("<II", int(v_trans), layers))
    for _ in range(layers):
        out.append(struct.pack("<iQ", 1, row) + b"".join(bytes([i % period]) * row for i in range(cells)))
    for _ in range(layers):
        if v_trans:  # one row per embedding value, holding every cell's element (2 bytes each here)
            out.append(struct.pack("<iII", 1, 2, row // 2))
            out.append(b"".join(bytes([i % period]) * 2 for _ in range(row // 2) for i in range(cells)))
        else:
            out.append(struct.pack("<iQ", 1, row) + b"".join(bytes([i % period]) * row for i in range(cells)))
    return b"".join(out)


@pytest.mark.parametrize("v_trans", [False, True], ids=["rows", "transposed"])
@pytest.mark.parametrize("header", [True, False], ids=["header", "bare"])
@pytest.mark.parametrize("ext", [False, True], ids=["plain", "ext"])
def test_a_state_is_tiled_to_more_cells_at_consecutive_positions(v_trans: bool, header: bool, ext: bool) -> None:
    small = state_blob(3, v_trans, header, ext)
    # 7 cells at positions 0..6, cell i holding what cell i % 3 held.
    assert tiled_kv_state(small, 7) == state_blob(7, v_trans, header, ext, first=0, period=3)


BROKEN = state_blob(3, False, True, False)


@pytest.mark.parametrize(
    "blob", [b"", b"\x01\x00\x00\x00", BROKEN[:-1], BROKEN + b"x"], ids=["empty", "short", "truncated", "trailing"]
)
def test_a_state_it_cannot_read_is_refused(blob: bytes) -> None:
    assert tiled_kv_state(blob, 10) is None


def test_a_real_cache_tiles_and_loads_at_the_longer_length(tiny: TinyModels) -> None:
    with LlamaBackend(tiny.target, BackendParams(n_ctx=512)) as backend:
        tokens = backend.tokenize(PROMPT)
        backend.decode(tokens)
        ctx = backend._ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        assert llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0) == size
        grown = tiled_kv_state(bytes(buffer), 300)
        assert grown is not None
        data = (ctypes.c_uint8 * len(grown)).from_buffer_copy(grown)
        assert llama_cpp.llama_state_seq_set_data(ctx, data, len(grown), 0) == len(grown)
        memory = llama_cpp.llama_get_memory(ctx)
        assert llama_cpp.llama_memory_seq_pos_max(memory, 0) == 299


def test_the_probe_times_both_settings_and_leaves_the_context_alone(tiny: TinyModels) -> None:
    with (
        LlamaBackend(tiny.target, BackendParams(n_ctx=512)) as backend,
        LlamaBackend(tiny.target, BackendParams(n_ctx=512)) as reference,
    ):
        tokens = backend.tokenize(PROMPT)
        backend.decode(tokens)
        reference.decode(tokens)
        probe = backend.probe_flash_attention(depths=(64, 4096), repeats=2)
        assert probe is not None
        assert probe.depths[0] == 64 and probe.depths[-1] < 512  # capped by the context size
        assert all(t > 0 for t in probe.on + probe.off)
        assert probe.flash_attn in (None, False)
        assert (probe.flash_attn is False) == (sum(probe.off) < 0.97 * sum(probe.on))
        assert "flash attention" in probe.describe()
        # The session's own cache was not touched: the next token is decoded after the prompt as before.
        assert backend.n_past == len(tokens)
        np.testing.assert_array_equal(backend.decode([5], [0])[0], reference.decode([5], [0])[0])


def test_switching_flash_attention_recreates_an_empty_context(tiny: TinyModels) -> None:
    with LlamaBackend(tiny.target, BackendParams(n_ctx=512)) as backend:
        backend.decode(backend.tokenize(PROMPT))
        backend.set_flash_attn(False)
        assert backend.params.flash_attn is False and backend.n_past == 0
        with LlamaBackend(tiny.target, BackendParams(n_ctx=512, flash_attn=False)) as fresh:
            tokens = backend.tokenize(PROMPT)
            np.testing.assert_array_equal(
                backend.decode(tokens, [len(tokens) - 1])[0], fresh.decode(tokens, [len(tokens) - 1])[0]
            )
    with LlamaBackend(tiny.target, BackendParams(n_ctx=512, exact=True)) as exact:
        exact.set_flash_attn(False)  # bit-exact mode needs it on: nothing changes
        assert exact.params.flash_attn is None and exact.probe_flash_attention() is None


def answer(engine: SpeculativeEngine, strategy: Strategy = Strategy.NONE) -> FinishEvent:
    finish = list(engine.generate(PROMPT, GenerationConfig(strategy=strategy, max_tokens=16)))[-1]
    assert isinstance(finish, FinishEvent)
    return finish


def test_the_measured_choice_is_kept_and_given_to_the_draft(
    tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def off_is_faster(self: LlamaBackend, *_a: object, **_k: object) -> FlashProbe:
        calls.append(1)
        return FlashProbe((256, 507), (0.2, 0.3), (0.2, 0.2), False)

    monkeypatch.setattr(LlamaBackend, "probe_flash_attention", off_is_faster)
    config = ModelConfig(tiny.target, tiny.identical, n_ctx=512, costs_dir=tmp_path)
    with SpeculativeEngine(config) as engine:
        assert engine.target.params.flash_attn is False and engine.draft is not None
        assert engine.draft.params.flash_attn is False
        assert "off" in engine.info().flash_attn
        first = answer(engine, Strategy.DRAFT).tokens
        costs = engine._verify_costs_path()
    with SpeculativeEngine(config) as engine:  # measured once: the saved answer is used
        assert engine.target.params.flash_attn is False and answer(engine, Strategy.DRAFT).tokens == first
    assert len(calls) == 1
    monkeypatch.setattr(session, "cpu_model", lambda: "Another CPU × 2")
    with SpeculativeEngine(config):  # another machine measures again
        assert len(calls) == 2
    monkeypatch.undo()
    # Costs measured without flash attention are kept apart from those measured with it.
    with SpeculativeEngine(ModelConfig(tiny.target, tiny.identical, n_ctx=512, costs_dir=tmp_path,
                                       flash_attn=FlashAttention.ON)) as engine:  # fmt: skip
        assert engine.target.params.flash_attn is True and engine._verify_costs_path() != costs


def test_a_set_choice_or_a_gpu_is_not_measured(tiny: TinyModels, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_a: object, **_k: object) -> None:
        raise AssertionError("probed")

    monkeypatch.setattr(LlamaBackend, "probe_flash_attention", fail)
    for choice, expected in ((FlashAttention.ON, True), (FlashAttention.OFF, False)):
        with SpeculativeEngine(ModelConfig(tiny.target, n_ctx=512, flash_attn=choice)) as engine:
            assert engine.target.params.flash_attn is expected and engine.info().flash_attn == choice.value
    monkeypatch.setattr(session, "offloaded_layers", lambda n: n)  # a GPU build: llama.cpp decides
    with SpeculativeEngine(ModelConfig(tiny.target, n_ctx=512)) as engine:
        assert engine.target.params.flash_attn is None and "GPU" in engine.info().flash_attn


def test_a_probe_that_fails_leaves_it_to_llama_cpp(tiny: TinyModels, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LlamaBackend, "probe_flash_attention", lambda *_a, **_k: None)
    with SpeculativeEngine(ModelConfig(tiny.target, n_ctx=512)) as engine:
        assert engine.target.params.flash_attn is None and "could not be measured" in engine.info().flash_attn
        assert answer(engine).tokens
