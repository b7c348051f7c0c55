"""Recurrent targets (Mamba, RWKV and the like): speculation needs to take rejected drafts back, and llama.cpp can
take a recurrent state back only for the architectures that keep snapshots of it. For the others Speculens does
not speculate: rebuilding the state from the start after every rejection would cost the whole conversation each
time, and re-read in one batch it could change greedy output."""

from __future__ import annotations

from pathlib import Path

import pytest

from speculens.engine.config import GenerationConfig, ModelConfig, Strategy
from speculens.engine.events import FinishEvent, StepEvent
from speculens.engine.session import SpeculativeEngine
from speculens.errors import InvalidInputError, OperationError
from speculens.models.synthetic import TinyModelSpec, write_tiny_model

PROMPT = "one two three one two three one two three one two"


@pytest.fixture(scope="module")
def mamba(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mamba")
    return write_tiny_model(folder / "mamba.gguf", TinyModelSpec(arch="mamba", weight_scale=0.5, name="tiny-mamba"))


def test_a_tiny_mamba_is_recognised_as_recurrent_without_rollback(mamba: Path) -> None:
    with SpeculativeEngine(ModelConfig(mamba, n_ctx=256)) as engine:
        assert engine.target.recurrent and engine.target.rollback == 0
        info = engine.info()
        assert info.speculation_off is not None and "recurrent" in info.speculation_off


@pytest.mark.parametrize("strategy", [Strategy.LOOKUP, Strategy.NGRAM_CACHE])
def test_an_explicit_strategy_is_refused_with_the_reason(mamba: Path, strategy: Strategy) -> None:
    with SpeculativeEngine(ModelConfig(mamba, n_ctx=256)) as engine:
        with pytest.raises(InvalidInputError, match=r"recurrent model.*plain decoding"):
            engine.generate(PROMPT, GenerationConfig(strategy=strategy))
        # The engine stays usable.
        events = list(engine.generate(PROMPT, GenerationConfig(strategy=Strategy.NONE, max_tokens=5)))
        assert isinstance(events[-1], FinishEvent) and len(events[-1].tokens) == 5


def test_the_automatic_strategy_decodes_plainly_without_rebuilding_the_state_each_step(mamba: Path) -> None:
    with SpeculativeEngine(ModelConfig(mamba, n_ctx=256)) as engine:
        greedy = GenerationConfig(strategy=Strategy.NONE, max_tokens=40, sampling=GenerationConfig().sampling)
        plain = list(engine.generate(PROMPT, greedy))[-1]
        engine.target.n_rebuilds = 0
        events = list(engine.generate(PROMPT, GenerationConfig(strategy=Strategy.AUTO, max_tokens=40)))
    finish = events[-1]
    assert isinstance(plain, FinishEvent) and isinstance(finish, FinishEvent)
    assert finish.tokens == plain.tokens
    assert not any(e.drafted for e in events if isinstance(e, StepEvent))
    assert engine.target.n_rebuilds <= 1  # going back to the prompt at the start, never once per step


def test_a_recurrent_draft_model_is_refused(tmp_path: Path, mamba: Path) -> None:
    target = write_tiny_model(tmp_path / "target.gguf", TinyModelSpec(name="tiny-target"))
    with pytest.raises(OperationError, match="recurrent model"):
        SpeculativeEngine(ModelConfig(target, mamba, n_ctx=256))
