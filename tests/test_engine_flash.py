"""Flash attention: timed both ways at load on a CPU, the faster kept per machine, and the user's choice obeyed."""

from __future__ import annotations

import ctypes
import struct
import threading
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from conftest import TinyModels
from speculens import lab
from speculens.engine import session
from speculens.engine.adaptive import CostModel
from speculens.engine.backend import BackendParams, FlashProbe, LlamaBackend, tiled_kv_state
from speculens.engine.bench import BenchSetting, run_suite
from speculens.engine.config import ContextFullError, FlashAttention, GenerationConfig, ModelConfig, Strategy
from speculens.engine.drafters.base import Drafter
from speculens.engine.drafters.draft_model import DraftModelDrafter
from speculens.engine.events import FinishEvent, StartEvent
from speculens.engine.session import SpeculativeEngine
from speculens.engine.suite import BenchPrompt

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
        backend.reserve(512)  # room for the tiled state
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
        for depth, on, off in zip(probe.depths, probe.on, probe.off, strict=True):
            assert probe.seconds(depth) == pytest.approx((on, off))
            assert (probe.choice(depth) is False) == (off < 0.97 * on)
        assert "flash attention" in probe.describe()
        assert FlashProbe.from_state(probe.state()) == probe
        # The session's own cache was not touched: the next token is decoded after the prompt as before.
        assert backend.n_past == len(tokens)
        np.testing.assert_array_equal(backend.decode([5], [0])[0], reference.decode([5], [0])[0])


def test_the_probe_times_each_setting_first_in_turn(tiny: TinyModels, monkeypatch: pytest.MonkeyPatch) -> None:
    # The call after a switch of context can run slower: timing one setting always first biased the choice.
    with LlamaBackend(tiny.target, BackendParams(n_ctx=512)) as backend:
        made: dict[int, bool | None] = {}
        new_context, timed = backend._new_context, backend._timed_decode
        order: list[bool | None] = []

        def context(n_ctx: int, flash: bool | None) -> object:
            ctx = new_context(n_ctx, flash)
            made[id(ctx)] = flash
            return ctx

        def decode(ctx: object, tokens: list[int], position: int) -> float:
            if position > 0 and len(tokens) == 1:  # a timed one-token call, not the seed's evaluation
                order.append(made[id(ctx)])
            return timed(ctx, tokens, position)

        monkeypatch.setattr(backend, "_new_context", context)
        monkeypatch.setattr(backend, "_timed_decode", decode)
        assert backend.probe_flash_attention(depths=(64,), repeats=4) is not None
        assert order == [False, True, True, False, False, True, True, False]


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
    with LlamaBackend(tiny.target, BackendParams(n_ctx=512)) as backend:  # llama.cpp refuses that context
        make = backend._new_context
        backend._new_context = lambda n_ctx, flash: None if flash is False else make(n_ctx, flash)  # type: ignore
        backend.set_flash_attn(False)
        assert backend.loaded and backend.params.flash_attn is None  # the old setting is back, and works
        assert backend.decode(backend.tokenize(PROMPT), [0])[0].shape == (backend.n_vocab,)
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
        return FlashProbe((256, 507), (0.2, 0.3), (0.1, 0.2))

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


def test_a_choice_timed_while_the_machine_was_busy_is_timed_again_at_the_next_load(
    tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timings of a busy spell chose flash attention for every later load: nothing timed them again. They are
    timed once more; a machine busy at that load too is taken as it is (not timed at every load)."""
    calls: list[int] = []

    def probe(self: LlamaBackend, *_a: object, **_k: object) -> FlashProbe:
        calls.append(1)
        return FlashProbe((256, 507), (0.2, 0.3), (0.1, 0.2))

    busy = [0.0]  # other programs' share of the CPUs during this load

    class Window:
        def others_share(self) -> float | None:
            return busy[0]

    monkeypatch.setattr(LlamaBackend, "probe_flash_attention", probe)
    monkeypatch.setattr(session, "CpuWindow", Window)
    config = ModelConfig(tiny.target, None, n_ctx=512, costs_dir=tmp_path)
    # A compiler build beside the first load, a quiet machine at the second: timed again, then kept.
    for share, timed, note in ((0.6, 1, "timed again"), (0.0, 2, ""), (0.0, 2, ""), (0.6, 2, "")):
        busy[0] = share
        with SpeculativeEngine(config) as engine:
            assert engine.target.params.flash_attn is False and "off" in engine.info().flash_attn
            assert (note in engine.info().flash_attn) if note else "busy" not in engine.info().flash_attn
        assert len(calls) == timed
    # Busy at the load that times again too: kept from then on.
    fresh = ModelConfig(tiny.target, None, n_ctx=1024, costs_dir=tmp_path)  # another context size: timed afresh
    busy[0] = 0.6
    for timed in (3, 4, 4):
        with SpeculativeEngine(fresh):
            pass
        assert len(calls) == timed


def test_a_set_choice_or_a_gpu_is_not_measured(tiny: TinyModels, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_a: object, **_k: object) -> None:
        raise AssertionError("probed")

    monkeypatch.setattr(LlamaBackend, "probe_flash_attention", fail)
    for choice, expected in ((FlashAttention.ON, True), (FlashAttention.OFF, False)):
        with SpeculativeEngine(ModelConfig(tiny.target, n_ctx=512, flash_attn=choice)) as engine:
            assert engine.target.params.flash_attn is expected and engine.info().flash_attn == choice.value
            start = next(iter(engine.generate(PROMPT, GenerationConfig(max_tokens=2))))
            assert isinstance(start, StartEvent) and start.flash_attn is expected  # what the answer decoded with
    # Bit-exact mode runs it on whatever the setting says, and its answers say so.
    with SpeculativeEngine(ModelConfig(tiny.target, n_ctx=512, exact=True, flash_attn=FlashAttention.OFF)) as engine:
        start = next(iter(engine.generate(PROMPT, GenerationConfig(max_tokens=2))))
        assert isinstance(start, StartEvent) and start.flash_attn is True and start.flash_text == "on"
    monkeypatch.setattr(session, "offloaded_layers", lambda n: n)  # a GPU build: llama.cpp decides
    with SpeculativeEngine(ModelConfig(tiny.target, n_ctx=512)) as engine:
        assert engine.target.params.flash_attn is None and "GPU" in engine.info().flash_attn


def test_a_probe_that_fails_leaves_it_to_llama_cpp(tiny: TinyModels, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LlamaBackend, "probe_flash_attention", lambda *_a, **_k: None)
    with SpeculativeEngine(ModelConfig(tiny.target, n_ctx=512)) as engine:
        assert engine.target.params.flash_attn is None and "could not be measured" in engine.info().flash_attn
        assert answer(engine).tokens
        start = next(iter(engine.generate(PROMPT, GenerationConfig(max_tokens=2))))
        assert isinstance(start, StartEvent) and start.flash_attn is None  # not known: llama.cpp's own choice
        assert start.flash_text == "as llama.cpp decides"


def test_the_probe_chooses_by_depth_between_and_beyond_the_depths_it_timed() -> None:
    # On faster at 256 tokens of context, off faster at 2048 (as measured on the AMD EPYC VM): they cross at 664.
    probe = FlashProbe((256, 2048), (0.146, 0.238), (0.156, 0.204))
    assert probe.seconds(1152) == pytest.approx((0.192, 0.180))
    assert probe.seconds(4000) == pytest.approx((0.238 + 1952 * 0.092 / 1792, 0.204 + 1952 * 0.048 / 1792))
    assert probe.seconds(0) == pytest.approx((0.146, 0.156))  # below the shallowest depth timed: its own
    assert [probe.choice(d) for d in (0, 256, 600, 900, 2048, 8000)] == [None, None, None, False, False, False]
    assert probe.crossover() == 896  # the first step of 16 where off is 3% faster (881 tokens)
    assert probe.summary() == "on below 896 tokens of context, off from there (measured)"
    assert FlashProbe((256, 2048), (0.1, 0.2), (0.09, 0.15)).summary() == "off (measured faster here)"
    # Below the shallowest depth timed, that depth's answer (the load's): no line is drawn into the unmeasured.
    assert FlashProbe((256, 2048), (0.2, 0.3), (0.3, 0.2)).choice(0) is None
    saved = probe.state()
    assert FlashProbe.from_state(saved) == probe
    v = {"version": saved["version"]}
    older = {"depths": [256, 2048], "on": [0.146, 0.238], "off": [0.156, 0.204]}  # three repetitions, on first
    for bad in ({"flash_attn": False, "note": "an older file"}, older, {**v, "depths": [2048, 256], "on": [1, 1],
                "off": [1, 1]}, {**v, "depths": [256], "on": [0.1], "off": [0]}, {**v, "depths": [256], "on": [0.1],
                "off": ["nan"]}, [1, 2]):
        with pytest.raises(ValueError):
            FlashProbe.from_state(bad)


def test_a_generation_runs_with_the_setting_measured_faster_at_its_depth(
    tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Off faster from 192 tokens of context on; the tiny model's prompt is a few tokens, a long one ~1000.
    probe = FlashProbe((64, 1024), (0.10, 0.30), (0.11, 0.20))
    monkeypatch.setattr(LlamaBackend, "probe_flash_attention", lambda *_a, **_k: probe)
    config = ModelConfig(tiny.target, tiny.identical, n_ctx=2048, costs_dir=tmp_path)
    long_prompt = " ".join(["the model of speculative decoding"] * 160)
    with SpeculativeEngine(config) as engine:
        assert engine.target.params.flash_attn is None and engine.draft is not None  # a conversation starts short
        assert "below" in engine.info().flash_attn
        short = answer(engine, Strategy.DRAFT).tokens
        assert engine.target.params.flash_attn is None
        assert engine._verify_costs_path() is not None
        on_costs = engine._verify_costs_path()
        events = list(engine.generate(long_prompt, GenerationConfig(strategy=Strategy.DRAFT, max_tokens=16)))
        deep = events[-1]
        assert isinstance(deep, FinishEvent) and deep.tokens
        assert isinstance(events[0], StartEvent) and events[0].flash_attn is False  # the event says which
        assert engine.target.params.flash_attn is False and engine.draft.params.flash_attn is False
        off_costs = engine._verify_costs_path()
        assert off_costs != on_costs and engine.costs.verify.has(2)  # this setting's costs, timed
        # A prompt that would reuse more than a system prompt's worth of the cache keeps it, and the setting,
        # although its depth (108) calls for the other one.
        tokens = engine.target.tokenize(long_prompt, parse_special=True)
        assert len(tokens) > 600 and probe.choice(100 + 16 // 2) is None
        engine.fit_flash_attn(tokens[:100], 16)
        assert engine.target.params.flash_attn is False
        assert answer(engine, Strategy.DRAFT).tokens == short  # a new short prompt: on again, the same answer
        assert engine.target.params.flash_attn is None
        start = next(iter(engine.generate(PROMPT, GenerationConfig(max_tokens=2))))
        # Left to llama.cpp, which turns it on where it is supported, as the probe showed it is: "on".
        assert isinstance(start, StartEvent) and start.flash_attn is True and start.flash_text == "on"
        # 80 tokens in the cache, on: a prompt that goes on from them and calls for off switches only when they are
        # at most a quarter of it (a long document pasted into a conversation), not for a few more tokens.
        list(engine.generate(tokens[:80], GenerationConfig(max_tokens=4)))
        assert engine.target.params.flash_attn is None and engine.target.common_prefix(tokens[:80]) == 80
        engine.fit_flash_attn(tokens[:180], 16)
        assert probe.choice(180 + 8) is False and engine.target.params.flash_attn is None
        engine.fit_flash_attn(tokens[:480], 16)
        assert engine.target.params.flash_attn is False
    assert on_costs.exists() and off_costs.exists()
    calls: list[int] = []
    monkeypatch.setattr(LlamaBackend, "probe_flash_attention", lambda *_a, **_k: calls.append(1))
    with SpeculativeEngine(config) as engine:  # the timings were kept: nothing is probed again
        assert engine.info().flash_attn == probe.summary() and not calls


def test_a_huge_max_tokens_puts_the_depth_no_deeper_than_a_long_answers(
    tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a tour: Max tokens 999,999 at a 2,048-token context put a one-word answer's depth at 1,041 tokens, so it
    switched flash attention and timed the other setting for 6 s before the answer began."""
    probe = FlashProbe((64, 1024), (0.10, 0.30), (0.11, 0.20))
    monkeypatch.setattr(LlamaBackend, "probe_flash_attention", lambda *_a, **_k: probe)
    depths: list[int] = []
    choice = FlashProbe.choice
    monkeypatch.setattr(FlashProbe, "choice", lambda self, depth: depths.append(depth) or choice(self, depth))
    with SpeculativeEngine(ModelConfig(tiny.target, None, n_ctx=2048, costs_dir=tmp_path)) as engine:
        tokens = engine.target.tokenize(PROMPT, parse_special=True)
        depths.clear()
        engine.fit_flash_attn(tokens, 999_999)
        engine.fit_flash_attn(tokens, 64)
    assert depths == [len(tokens) + 1024 // 2, len(tokens) + 64 // 2]


@pytest.mark.parametrize("kept", [True, False], ids=["costs-kept", "no-costs-folder"])
def test_a_setting_timed_in_this_session_is_not_timed_again_when_switched_back(
    tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: bool
) -> None:
    """Every switch of flash attention timed the target and the draft model as a load does: 1.0 s of the demo
    target's decode calls on 2 cores with saved costs, paid by a short prompt after a long one (and the long one after
    it) for a gain of 2%."""
    probe = FlashProbe((64, 1024), (0.10, 0.30), (0.11, 0.20))  # off from 192 tokens of context on
    monkeypatch.setattr(LlamaBackend, "probe_flash_attention", lambda *_a, **_k: probe)
    timed: list[str] = []
    real_draft = session.calibrate_draft

    def recording_draft(*args, **kwargs):  # type: ignore[no-untyped-def]
        timed.append("draft")
        return real_draft(*args, **kwargs)

    monkeypatch.setattr(session, "calibrate_draft", recording_draft)
    config = ModelConfig(tiny.target, tiny.identical, n_ctx=2048, costs_dir=tmp_path if kept else None)
    long_prompt = " ".join([PROMPT] * 160)
    with SpeculativeEngine(config) as engine:
        calibrate = engine.calibrate

        def recording_calibrate(repeats: int = 1) -> None:
            timed.append("target")
            calibrate(repeats)

        monkeypatch.setattr(engine, "calibrate", recording_calibrate)
        timed.clear()  # the load's
        left: dict[bool | None, tuple[object, object]] = {}  # each setting's costs as the session left it
        fit = engine.fit_flash_attn

        def recording_fit(prompt, max_tokens, cancel=None):  # type: ignore[no-untyped-def]
            before = engine.target.params.flash_attn
            state = (engine.costs.verify_state(), engine.costs.draft_state())
            fit(prompt, max_tokens, cancel)
            if engine.target.params.flash_attn != before:
                left[before] = state

        monkeypatch.setattr(engine, "fit_flash_attn", recording_fit)
        for prompt, setting in ((long_prompt, False), (PROMPT, None), (long_prompt, False), (PROMPT, None)):
            events = engine.generate(prompt, GenerationConfig(strategy=Strategy.DRAFT, max_tokens=4))
            next(events)  # the switch, before the prompt's evaluation
            assert engine.target.params.flash_attn is setting
            if setting in left:  # a switch back: the costs it had when the session left it, not the other's
                assert (engine.costs.verify_state(), engine.costs.draft_state()) == left[setting]
            list(events)
        # Off timed at its first switch only, on not again after the load: kept in memory, with a costs folder or not.
        assert timed == ["draft", "target"]


def test_stop_while_a_switch_is_timed_undoes_it(tiny: TinyModels, monkeypatch: pytest.MonkeyPatch) -> None:
    """From a new-user tour: Ctrl+C right after the load waited 5 s, the first long prompt's switch of flash
    attention timing the models (4.7 s of the demo target's decode calls on 2 cores) before anything looked."""
    probe = FlashProbe((64, 1024), (0.10, 0.30), (0.11, 0.20))  # off from 192 tokens of context on
    monkeypatch.setattr(LlamaBackend, "probe_flash_attention", lambda *_a, **_k: probe)
    long_prompt = " ".join([PROMPT] * 160)
    with SpeculativeEngine(ModelConfig(tiny.target, tiny.identical, n_ctx=2048)) as engine:
        assert engine.draft is not None
        before = (engine.costs.verify_state(), engine.costs.draft_state())
        cancel = threading.Event()
        calibrate_draft = session.calibrate_draft

        def pressed_while_timing(*args, **kwargs):  # type: ignore[no-untyped-def]
            cancel.set()  # Stop, while the draft model is timed for the new setting
            return calibrate_draft(*args, **kwargs)

        monkeypatch.setattr(session, "calibrate_draft", pressed_while_timing)
        events = list(engine.generate(long_prompt, GenerationConfig(strategy=Strategy.DRAFT, max_tokens=4), cancel))
        assert [type(e) for e in events] == [StartEvent, FinishEvent]  # stopped before the prompt
        # Undone: the setting it left, with that setting's costs, and nothing half-timed kept.
        assert engine.target.params.flash_attn is None and engine.draft.params.flash_attn is None
        assert (engine.costs.verify_state(), engine.costs.draft_state()) == before
        monkeypatch.undo()
        monkeypatch.setattr(LlamaBackend, "probe_flash_attention", lambda *_a, **_k: probe)
        finish = list(engine.generate(long_prompt, GenerationConfig(strategy=Strategy.DRAFT, max_tokens=4)))[-1]
        assert isinstance(finish, FinishEvent) and finish.tokens and engine.target.params.flash_attn is False


def test_the_switch_waits_for_a_valid_prompt_and_times_at_the_full_thread_count(
    tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = FlashProbe((64, 1024), (0.10, 0.30), (0.11, 0.20))  # off from 192 tokens of context on
    monkeypatch.setattr(LlamaBackend, "probe_flash_attention", lambda *_a, **_k: probe)
    config = ModelConfig(
        tiny.target, tiny.identical, n_ctx=512, n_threads=2, adaptive_threads=True, costs_dir=tmp_path
    )
    with SpeculativeEngine(config) as engine:
        assert engine.threads is not None and engine.threads.full == 2
        timed_at: list[tuple[int, int | None]] = []
        calibrate = engine.calibrate

        def recording_calibrate(repeats: int = 1) -> None:
            assert engine.draft is not None
            timed_at.append((engine.target.n_threads, engine.draft.n_threads))
            calibrate(repeats)

        monkeypatch.setattr(engine, "calibrate", recording_calibrate)
        tokens = engine.target.tokenize(" ".join([PROMPT] * 160), parse_special=True)
        # A prompt that does not fit is refused before anything is switched or timed.
        with pytest.raises(ContextFullError):
            engine.generate(tokens[:600], GenerationConfig(max_tokens=8))
        assert engine.target.params.flash_attn is None and not timed_at
        # A valid one switches when its generation begins, not when it is asked for.
        events = engine.generate(tokens[:300], GenerationConfig(max_tokens=8))
        assert engine.target.params.flash_attn is None and not timed_at
        # A busy spell had the governor down to one thread: the switch's timings are still taken at two, and the
        # prompt is evaluated at the governor's one.
        engine.threads.count = 1
        for backend in (engine.target, engine.draft):
            assert backend is not None
            backend.set_threads(1)
        prefilled_at: list[int] = []
        prefill = engine.target.prefill

        def recording_prefill(prompt: list[int], cancel: threading.Event | None = None) -> object:
            prefilled_at.append(engine.target.n_threads)
            return prefill(prompt, cancel)

        monkeypatch.setattr(engine.target, "prefill", recording_prefill)
        start = next(events)
        assert isinstance(start, StartEvent) and start.flash_attn is False
        assert timed_at == [(2, 2)] and prefilled_at == [1]
        rest = list(events)
        assert isinstance(rest[-1], FinishEvent) and rest[-1].tokens
        assert {e.threads for e in rest[:-1] if hasattr(e, "threads")} == {1}  # then the governor's count again
        # A generation cancelled before it begins does not switch back for its short prompt.
        cancel = threading.Event()
        cancel.set()
        list(engine.generate(PROMPT, GenerationConfig(max_tokens=4), cancel))
        assert engine.target.params.flash_attn is False and timed_at == [(2, 2)]


def test_a_bench_prompt_runs_with_the_setting_for_its_depth_unless_every_run_has_fresh_costs(
    tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = FlashProbe((64, 1024), (0.10, 0.30), (0.11, 0.20))
    monkeypatch.setattr(LlamaBackend, "probe_flash_attention", lambda *_a, **_k: probe)
    deep = [BenchPrompt("deep", "long-context", ({"role": "user", "content": " ".join([PROMPT] * 160)},))]
    plain, config = [BenchSetting(Strategy.NONE)], GenerationConfig(max_tokens=4)
    for fresh, expected in ((True, None), (False, False)):  # fresh costs: the load's setting, its costs left alone
        with SpeculativeEngine(ModelConfig(tiny.target, n_ctx=2048, costs_dir=tmp_path)) as engine:
            run_suite(engine, deep, plain, config, repeats=1, warmup=0, fresh_costs=fresh)
            assert engine.target.params.flash_attn is expected


def test_the_pair_lab_runs_each_prompt_with_the_setting_a_generation_of_it_gets(
    tiny: TinyModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = FlashProbe((64, 1024), (0.10, 0.30), (0.11, 0.20))  # off from 192 tokens of context on
    monkeypatch.setattr(LlamaBackend, "probe_flash_attention", lambda *_a, **_k: probe)
    seen: list[tuple[bool, bool | None, bool | str | None, int]] = []
    real = lab.run_once

    def recording(engine: SpeculativeEngine, prompt: list[int], config: GenerationConfig, sources: list[Drafter],
                  costs: CostModel, cancel: threading.Event) -> object:
        model = next((s.backend for s in sources if isinstance(s, DraftModelDrafter)), None)
        draft = model.params.flash_attn if model is not None else "no draft"
        seen.append((len(prompt) > 192, engine.target.params.flash_attn, draft, id(costs)))
        return real(engine, prompt, config, sources, costs, cancel)

    monkeypatch.setattr(lab, "run_once", recording)
    prompts = [
        BenchPrompt("short", "chat", ({"role": "user", "content": PROMPT},)),
        BenchPrompt("deep", "long-context", ({"role": "user", "content": " ".join([PROMPT] * 100)},)),
    ]
    candidate = lab.Candidate(f"draft:{tiny.identical.name}", "Identical", Strategy.DRAFT, tiny.identical)
    settings = lab.LabSettings(n_ctx=1024, n_threads=1, max_tokens=16, budget_s=0.0, min_rounds=2, max_rounds=2)
    result = lab.PairLab(tiny.target, [candidate], prompts, settings).run()
    assert result.rows["long-context"][candidate.key].tokens_per_second > 0
    drafted = [(deep, target, draft) for deep, target, draft, _ in seen if draft != "no draft"]
    assert len(drafted) == 4 and set(drafted) == {(False, None, None), (True, False, False)}
    assert {(deep, target) for deep, target, draft, _ in seen if draft == "no draft"} == {(False, None), (True, False)}
    # The draft's candidates cost their steps with each setting's own model, timed once per setting.
    by_setting = {(target, cost) for _, target, draft, cost in seen if draft != "no draft"}
    assert len(by_setting) == 2 and len({cost for _, cost in by_setting}) == 2
