"""The real demo models (the ``demo`` extra): speculation with Qwen2.5-Coder 1.5B ▸ 0.5B on this machine."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from speculens.engine.backend import BackendParams, LlamaBackend
from speculens.engine.config import GenerationConfig, ModelConfig, Strategy
from speculens.engine.events import FinishEvent
from speculens.engine.session import ChatSession, SpeculativeEngine
from speculens.engine.vocab import VocabMismatchError
from speculens.models.demo import DEMO_MODELS, ensure_demo_model, is_installed
from speculens.models.gguf_info import read_gguf_info
from speculens.models.library import _facts

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
    """The pair in bit-exact mode, where greedy speculation must reproduce plain decoding token for token."""
    config = ModelConfig(demo_paths["qwen-1.5b"], demo_paths["qwen-0.5b"], n_ctx=2048, n_threads=2, exact=True)
    e = SpeculativeEngine(config)
    yield e
    e.close()


def answer(engine: SpeculativeEngine, prompt: str, config: GenerationConfig) -> FinishEvent:
    events = list(ChatSession(engine).send(prompt, config))
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    return finish


def test_the_facts_shown_before_a_demo_model_is_built_are_its_files(demo_paths: dict) -> None:
    for model in DEMO_MODELS:
        assert _facts(read_gguf_info(demo_paths[model.key])) == model.facts, model.key


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


def test_qwen_exact_verification_matches_one_token_decoding(demo_paths: dict) -> None:
    params = BackendParams(n_ctx=2048, n_threads=2, exact=True)
    with LlamaBackend(demo_paths["qwen-1.5b"], params) as seq, LlamaBackend(demo_paths["qwen-1.5b"], params) as bat:
        sizes = bat.probe_invariance()
        print(f"\nbit-exact decode-call sizes: {sizes} (probe {bat.probe_seconds:.2f} s)")
        assert max(sizes) >= 2  # speculation can verify more than one token per call
        # Past 512 KV cells, where flash attention would send one query over an f16 cache down another path.
        prefix = seq.tokenize(
            "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n" * 30
        )
        assert len(prefix) > 600
        seq.decode(prefix)
        bat.decode(prefix)
        tokens = seq.tokenize(" if n < 2:\n        return n\n    return fib", add_special=False)[:12]
        one_by_one = np.stack([seq.decode([t], [0])[0].copy() for t in tokens])
        batched = bat.decode(tokens, range(len(tokens)), exact=True).copy()
    assert np.array_equal(one_by_one, batched)


def test_fast_mode_differs_from_plain_decoding_only_at_near_ties(demo_paths: dict) -> None:
    """llama.cpp's fastest kernels round batches differently; where that changes a greedy answer, the two
    candidates were a near-tie for the target, and Compare can say which."""
    config = ModelConfig(demo_paths["qwen-1.5b"], demo_paths["qwen-0.5b"], n_ctx=2048, n_threads=2)
    drafting = GenerationConfig(strategy=Strategy.DRAFT, n_draft=8, p_min=0.0, max_tokens=64, adaptive=False)
    differences = 0
    with SpeculativeEngine(config) as fast:
        for prompt in PROMPTS:
            tokens = fast.target.format_chat([{"role": "user", "content": prompt}])
            plain = list(fast.generate(tokens, GenerationConfig(strategy=Strategy.NONE, max_tokens=64)))[-1]
            spec = list(fast.generate(tokens, drafting))[-1]
            assert isinstance(plain, FinishEvent) and isinstance(spec, FinishEvent)
            d = fast.divergence(tokens, plain.tokens, spec.tokens)
            if d is not None:
                differences += 1
                print(f"\n{prompt[:30]!r}: differs at {d.index}: {d.piece_a!r} vs {d.piece_b!r}, margin {d.margin:.3f}")
                assert d.token_a == plain.tokens[d.index] and d.token_b == spec.tokens[d.index]
                assert d.margin < 1.0
    print(f"\n{differences} of {len(PROMPTS)} answers differ from plain decoding in fast mode")


def test_divergence_reports_the_logits_plain_decoding_chose_from(demo_paths: dict) -> None:
    """Compare explains a difference with the logits plain decoding saw: its own path, one token per decode
    call. A prefix evaluated in one batch fills the cache with values fast mode's batched kernels round
    differently, and the logits read after it can even rank the two candidates the other way round."""
    config = ModelConfig(demo_paths["qwen-1.5b"], None, n_ctx=2048, n_threads=2)
    k = 20
    with SpeculativeEngine(config) as fast:
        prompt = fast.target.format_chat([{"role": "user", "content": PROMPTS[0]}])
        plain = list(fast.generate(prompt, GenerationConfig(strategy=Strategy.NONE, max_tokens=k + 4)))[-1]
        assert isinstance(plain, FinishEvent) and len(plain.tokens) > k
        a = list(plain.tokens)
        row = fast.target.prefill(prompt)
        for token in a[:k]:
            row = fast.target.decode([token], [0])[0].copy()
        assert int(np.argmax(row)) == a[k]  # the row plain decoding chose its token from
        runner_up = int(np.argsort(row)[-2])
        # What Compare's speculative run leaves behind: the same tokens in the cache, evaluated in a batch.
        fast.target.truncate(len(prompt))
        fast.target.decode(a[:k])
        d = fast.divergence(prompt, a, [*a[:k], runner_up])
    assert d is not None and d.index == k
    assert (d.logit_a, d.logit_b) == (float(row[a[k]]), float(row[runner_up]))
    assert d.logit_a >= d.logit_b


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
