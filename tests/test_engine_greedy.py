"""Greedy speculative output is token-for-token the target's own greedy output, for every draft source."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import TinyModels, cheap_verification
from speculens.engine import session
from speculens.engine.backend import LlamaBackend
from speculens.engine.config import GenerationConfig, ModelConfig, Strategy
from speculens.engine.drafters.base import Draft
from speculens.engine.drafters.ngram_table import build_table
from speculens.engine.events import FinishEvent, Origin, StepEvent
from speculens.engine.generate import generate
from speculens.engine.sampling import SamplingParams
from speculens.engine.session import SpeculativeEngine
from speculens.models.synthetic import TinyModelSpec, write_tiny_model, write_tiny_pair

PROMPTS = [
    "the model of speculative decoding",
    "def return class import self",
    "one two three",
    "what is the time now",
    "print hello world",
    "a",
    "they were her first years",
    "model draft target token accept reject",
    "if else for while yield lambda none true false",
    "日本語のテキスト 😀 and more",
]
MODEL_SEEDS = (0, 1)  # two tiny model families × ten prompts = twenty combinations
N_TOKENS = 64


def run(engine: SpeculativeEngine, prompt: str, config: GenerationConfig) -> tuple[FinishEvent, list[StepEvent]]:
    events = list(engine.generate(prompt, config))
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    return finish, [e for e in events if isinstance(e, StepEvent)]


@pytest.fixture(scope="module", params=MODEL_SEEDS)
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    folder = tmp_path_factory.mktemp(f"family{request.param}")
    target, identical = write_tiny_pair(folder, "identical", seed=request.param)
    _, perturbed = write_tiny_pair(folder, "perturbed", seed=request.param)
    engines = {
        "identical": SpeculativeEngine(ModelConfig(target, identical, n_ctx=512, exact=True)),
        "perturbed": SpeculativeEngine(ModelConfig(target, perturbed, n_ctx=512, exact=True)),
    }
    plain = {
        p: run(engines["perturbed"], p, GenerationConfig(strategy=Strategy.NONE, max_tokens=N_TOKENS))[0].tokens
        for p in PROMPTS
    }
    # An n-gram map built from the target's own answers: high acceptance, so long accepted runs are tested.
    map_path = folder / "answers.npz"
    build_table(list(plain.values()), min_total=1).save(map_path, engines["perturbed"].fingerprint)
    # A bigram model's answers soon repeat themselves: prompt lookup and the n-gram cache then draft tokens that
    # are right, so the adaptive controller verifies them (on the other models it rightly never does).
    bigram = write_tiny_model(folder / "bigram.gguf", TinyModelSpec(seed=request.param, attention=0.0))
    engines["bigram"] = SpeculativeEngine(ModelConfig(bigram, None, n_ctx=512, exact=True))
    plain_bigram = {
        p: run(engines["bigram"], p, GenerationConfig(strategy=Strategy.NONE, max_tokens=N_TOKENS))[0].tokens
        for p in PROMPTS
    }
    yield {"engines": engines, "plain": plain, "plain_bigram": plain_bigram, "folder": folder, "map": map_path}
    for engine in engines.values():
        engine.close()


CASES = [
    ("identical", Strategy.DRAFT),
    ("perturbed", Strategy.DRAFT),
    ("perturbed", Strategy.LOOKUP),
    ("perturbed", Strategy.NGRAM_CACHE),
    ("map", Strategy.NGRAM_MAP),  # the perturbed pair's target, drafting from a map of its answers
    ("bigram", Strategy.LOOKUP),
    ("bigram", Strategy.NGRAM_CACHE),
]


@pytest.mark.parametrize("adaptive", [False, True], ids=["fixed", "adaptive"])
@pytest.mark.parametrize("n_draft", [1, 4, 16])
@pytest.mark.parametrize(("engine_key", "strategy"), CASES)
def test_greedy_output_equals_plain_decoding(
    family: dict, engine_key: str, strategy: Strategy, n_draft: int, adaptive: bool, monkeypatch
) -> None:
    if adaptive:
        cheap_verification(monkeypatch)  # the controller's own choices, made on costs alike on every runner
    engine = family["engines"]["perturbed" if engine_key == "map" else engine_key]
    plain = family["plain_bigram" if engine_key == "bigram" else "plain"]
    config = GenerationConfig(
        strategy=strategy, n_draft=n_draft, p_min=0.0, max_tokens=N_TOKENS, adaptive=adaptive, ngram_map=family["map"]
    )
    drafted = accepted = 0
    for prompt in PROMPTS:
        finish, steps = run(engine, prompt, config)
        assert list(finish.tokens) == list(plain[prompt]), f"{strategy} n_draft={n_draft}: {prompt!r}"
        assert sum(len(s.emitted) for s in steps) == len(finish.tokens)
        assert all(len(s.drafted) <= s.n_draft_max <= n_draft for s in steps)
        if not adaptive:
            assert steps[0].n_draft_max == n_draft and not any(s.probe for s in steps)
        drafted += finish.stats.n_drafted
        accepted += finish.stats.n_accepted
    if adaptive and strategy is Strategy.DRAFT and drafted == 0:
        return  # a draft model as costly as its target cannot pay: the controller rightly decodes plainly
    if adaptive and engine_key == "perturbed":
        return  # lookup and the n-gram cache are never right on this model: the controller rightly declines
    assert drafted > 0, f"{strategy} n_draft={n_draft} adaptive={adaptive} never drafted: nothing was tested"
    if engine_key == "bigram":
        assert accepted > 0.3 * drafted  # the repeated text was found and verified
    if engine_key == "identical":
        assert accepted == drafted > 0  # the same weights, computed alike, agree on every token
    if strategy in (Strategy.DRAFT, Strategy.NGRAM_MAP):
        assert accepted > 0.1 * drafted  # close models and a map of the answers do get drafts accepted


def test_the_start_says_what_the_cost_model_expects_a_pass_to_cost_with_a_fixed_draft_length_too(family: dict) -> None:
    """Teach's curve with Adaptive off draws on these (a teacher's tour never saw it: no plain step was timed)."""
    from speculens.engine.events import StartEvent

    target = next(family["folder"].glob("tiny-target-*.gguf"))
    draft = next(family["folder"].glob("tiny-draft-perturbed*.gguf"))
    with SpeculativeEngine(ModelConfig(target, draft, n_ctx=512)) as engine:  # timed at load (not bit-exact)
        config = GenerationConfig(strategy=Strategy.DRAFT, n_draft=4, p_min=0.0, max_tokens=8, adaptive=False)
        start = next(e for e in engine.generate(PROMPTS[0], config) if isinstance(e, StartEvent))
        engine.costs.verify.at(start.n_prompt)
        expected = engine.costs.verify.curve(5)
        assert expected is not None and len(start.verify_ms) == 5
        assert start.verify_ms == pytest.approx(tuple(1e3 * expected[1:]), abs=1e-3) and min(start.verify_ms) > 0
        plain = replace(config, strategy=Strategy.NONE)
        assert next(e for e in engine.generate(PROMPTS[0], plain) if isinstance(e, StartEvent)).verify_ms == ()


def test_perturbed_draft_is_partially_accepted(family: dict) -> None:
    engine = family["engines"]["perturbed"]
    config = GenerationConfig(strategy=Strategy.DRAFT, n_draft=16, p_min=0.0, max_tokens=N_TOKENS, adaptive=False)
    finishes = [run(engine, prompt, config)[0] for prompt in PROMPTS]
    drafted = sum(f.stats.n_drafted for f in finishes)
    accepted = sum(f.stats.n_accepted for f in finishes)
    assert 0.05 * drafted < accepted < 0.98 * drafted


class OracleDrafter:
    """Proposes the known answer with deliberate mistakes, to exercise every accept/reject path."""

    name = "oracle"

    def __init__(self, prompt_len: int, answer: Sequence[int], error_rate: float, seed: int) -> None:
        self.prompt_len = prompt_len
        self.answer = list(answer)
        self.error_rate = error_rate
        self.rng = np.random.default_rng(seed)

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def draft(self, history: Sequence[int], n_max: int) -> Draft:
        done = len(history) - self.prompt_len
        tokens = self.answer[done : done + n_max]
        tokens = [t if self.rng.random() > self.error_rate else (t + 7) % 900 + 5 for t in tokens]
        return Draft(tuple(tokens))

    def end(self, history: Sequence[int]) -> None:
        pass


@pytest.mark.parametrize("error_rate", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("n_draft", [1, 4, 16])
def test_oracle_drafts_with_mistakes_never_change_the_output(family: dict, error_rate: float, n_draft: int) -> None:
    engine = family["engines"]["perturbed"]
    config = GenerationConfig(strategy=Strategy.LOOKUP, n_draft=n_draft, max_tokens=N_TOKENS, adaptive=False)
    origins: set[Origin] = set()
    for i, prompt in enumerate(PROMPTS):
        tokens = engine.target.tokenize(prompt)
        plain = family["plain"][prompt]
        drafter = OracleDrafter(len(tokens), plain, error_rate, seed=i)
        events = list(generate(engine.target, [drafter], tokens, config, np.random.default_rng(0), exact=True))
        finish = events[-1]
        assert isinstance(finish, FinishEvent)
        assert finish.tokens == plain
        origins |= {e.origin for s in events if isinstance(s, StepEvent) for e in s.emitted}
    if error_rate == 0.0:
        assert Origin.BONUS in origins and Origin.CORRECTION not in origins
    if error_rate == 0.5:
        assert {Origin.ACCEPTED, Origin.CORRECTION} <= origins


def test_sampling_with_an_identical_draft_accepts_nearly_every_draft(family: dict) -> None:
    """Identical weights give p ≈ q (the draft's p is computed one token at a time, the target's in batches, so
    they differ in rounding at most): rejection sampling accepts nearly every draft. (That sampled speculation
    has the target's distribution is tests/test_engine_lossless.py's job.)"""
    engine = family["engines"]["identical"]
    sampling = SamplingParams(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0, seed=5)
    config = GenerationConfig(strategy=Strategy.DRAFT, p_min=0.0, sampling=sampling, adaptive=False)
    finish, _ = run(engine, PROMPTS[0], config)
    assert finish.stats.n_drafted > 0
    assert finish.stats.n_accepted >= 0.9 * finish.stats.n_drafted


def test_ngram_cache_persists_between_runs(family: dict, tmp_path: Path) -> None:
    target = next(family["folder"].glob("tiny-target-*.gguf"))
    config = ModelConfig(target, None, n_ctx=512, ngram_cache_dir=tmp_path)
    gen = GenerationConfig(strategy=Strategy.NGRAM_CACHE, max_tokens=N_TOKENS, adaptive=False)
    with_cache = SpeculativeEngine(config)
    try:
        # llama.cpp's strict thresholds want an n-gram seen at least twice before the dynamic cache drafts it.
        first, _ = run(with_cache, PROMPTS[2], gen)
        run(with_cache, PROMPTS[2], gen)
    finally:
        with_cache.close()
    files = list(tmp_path.glob("*.npz"))
    assert len(files) == 1
    again = SpeculativeEngine(config)
    try:
        second, _ = run(again, PROMPTS[2], gen)
    finally:
        again.close()
    assert second.tokens == first.tokens
    # The second run drafts from what the first one saw: more drafted and accepted tokens.
    assert second.stats.n_accepted > first.stats.n_accepted


def test_saved_costs_belong_to_the_cpu(family: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The VM this project runs on came up on another host with the same instruction sets, and the old host's
    # batch costs kept the controller from drafts that paid on the new one (see backend.cpu_model).
    target = next(family["folder"].glob("tiny-target-*.gguf"))
    engine = SpeculativeEngine(ModelConfig(target, None, n_ctx=512, costs_dir=tmp_path))
    try:
        engine.save_costs()
        here = engine._verify_costs_path()
        monkeypatch.setattr(session, "cpu_model", lambda: "Another CPU × 2")
        there = engine._verify_costs_path()
        assert here is not None and here.exists()
        assert there is not None and there != here and not there.exists()
    finally:
        monkeypatch.undo()
        engine.close()


def test_the_targets_costs_serve_every_way_of_drafting_and_a_draft_models_come_back_with_it(
    tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A batch of the target costs the same whatever drafted it, so the default (with a draft model) and prompt
    # lookup (the target alone) plan from one measurement of it, not two that drift apart; a draft model's own
    # costs are kept per pair and come back when it is loaded again, also after the target was loaded alone
    # first, as the app loads them.
    timed: list[tuple[str, tuple[int, ...]]] = []

    def recording(backend: LlamaBackend, sizes: Sequence[int], repeats: int, *_a: Any, **_k: Any) -> Any:
        timed.append((backend.path.name, tuple(sizes)))
        return [(n, (n, 0.01 * (1 + 0.4 * (n - 1)))) for n in [1, 1, 1, *sizes] * repeats]

    monkeypatch.setattr(session, "_time_calls", recording)
    monkeypatch.setattr(session, "CALIBRATION_SAMPLES", 1)  # no size re-timed for a lack of samples
    config = ModelConfig(tiny.target, tiny.perturbed, n_ctx=512, costs_dir=tmp_path)
    with SpeculativeEngine(config) as engine:
        assert {name for name, _ in timed} == {tiny.target.name, tiny.perturbed.name}
        measured = engine.costs.verify.measured()
        draft_call = engine.costs.draft_call.value
    timed.clear()
    with SpeculativeEngine(replace(config, draft=None)) as engine:
        # Only the short sizes every load re-checks are timed; the rest are the pair's measurements.
        assert timed == [(tiny.target.name, session.RECHECK_SIZES)]
        assert set(engine.costs.verify.measured()) == set(measured)
        assert engine.costs.draft_call.count == 0
        engine.load_draft(tiny.perturbed)
        # Its saved costs come back, checked against one fresh timing that agrees with them.
        assert timed[1:] == [(tiny.perturbed.name, (16,))] and engine.costs.draft_call.value == draft_call
        assert engine.costs.draft_call.count == 2
    timed.clear()
    with SpeculativeEngine(replace(config, draft=tiny.identical)) as engine:  # another draft: timed afresh
        assert (tiny.identical.name, (16,)) in timed and engine.costs.draft_call.count == 1


def test_a_draft_models_costs_saved_on_a_busy_machine_are_measured_afresh_at_the_next_load(
    tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a new-user tour: a draft model timed while another program kept both cores busy was "×0.29 of plain
    decoding at best" in every later session, where it never drafted, so nothing corrected its costs."""
    speed = {"draft": 0.05}  # seconds per draft call: busy at the first load

    def machine(backend: LlamaBackend, sizes: Sequence[int], repeats: int, *_a: Any, **_k: Any) -> Any:
        single = speed["draft"] if backend.path == tiny.perturbed else 0.01
        return [(n, (n, single * (1 + 0.4 * (n - 1)))) for n in [1, 1, 1, *sizes] * repeats]

    monkeypatch.setattr(session, "_time_calls", machine)
    config = ModelConfig(tiny.target, tiny.perturbed, n_ctx=512, costs_dir=tmp_path)
    with SpeculativeEngine(config) as engine:
        assert engine.costs.draft_call.value == pytest.approx(0.05)
    speed["draft"] = 0.012  # quiet again: within the tolerance of 0.01 it would be kept, not at 0.05
    with SpeculativeEngine(config) as engine:
        assert engine.costs.draft_call.value == pytest.approx(0.012) and engine.costs.draft_call.count == 1
    speed["draft"] = 0.013  # a little noise: the saved costs stand, with one sample more
    with SpeculativeEngine(config) as engine:
        assert engine.costs.draft_call.count == 2


def test_gpu_layers_go_to_the_gpu_by_default_and_mean_nothing_on_a_cpu_build(
    family: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama.cpp's own tools offload every layer when the build can; a user of a CUDA or Metal build must not
    # decode on the CPU because a setting was left alone. On a CPU-only build -1 and 0 load the same way, so
    # they share measured costs and the thread governor (which only runs on the CPU).
    target = next(family["folder"].glob("tiny-target-*.gguf"))
    assert ModelConfig(target).n_gpu_layers == -1 and ModelConfig(target).n_gpu_layers_draft == -1
    config = ModelConfig(target, None, n_ctx=512, n_threads=2, costs_dir=tmp_path, adaptive_threads=True)
    paths = []
    for ngl in (-1, 0):
        engine = SpeculativeEngine(replace(config, n_gpu_layers=ngl))
        try:
            paths.append(engine._verify_costs_path())
            assert engine.threads is not None
        finally:
            engine.close()
    assert paths[0] == paths[1]
    monkeypatch.setattr(session, "offloaded_layers", lambda n: n)  # a GPU build: -1 offloads every layer
    engine = SpeculativeEngine(config)
    try:
        assert engine.threads is None and engine._verify_costs_path() != paths[0]
    finally:
        engine.close()


def test_the_target_probabilities_of_judged_drafts_are_worked_out_only_when_asked_for(family: dict) -> None:
    # They cost a softmax over the vocabulary per judged token (as much as a GPU's whole verification): the
    # token view and Teach show them, benchmarks and the CLI without --events have no use for them.
    engine = family["engines"]["perturbed"]
    config = GenerationConfig(strategy=Strategy.DRAFT, n_draft=4, p_min=0.0, max_tokens=N_TOKENS, adaptive=False)
    with_probs, steps = run(engine, PROMPTS[0], config)
    without, bare = run(engine, PROMPTS[0], replace(config, judge_probs=False))
    assert without.tokens == with_probs.tokens
    judged = [d for s in steps for d in s.drafted]
    assert judged and all(d.target_prob is not None and 0.0 <= d.target_prob <= 1.0 for d in judged[:1])
    assert any(d.accepted and d.target_prob is not None and d.target_prob > 0 for d in judged)
    assert all(d.target_prob is None for s in bare for d in s.drafted)
    assert [d.id for s in bare for d in s.drafted] == [d.id for d in judged]


def test_saved_batch_costs_that_this_machine_contradicts_are_measured_afresh(
    family: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Saved costs change only for the sizes the controller drafts: a short batch once measured too dear (a
    # noisy spell, another host) would never be drafted, nor measured, again. Every load re-times the sizes
    # that start a copy, and drops the saved batch costs when the machine now says otherwise.
    target = next(family["folder"].glob("tiny-target-*.gguf"))
    config = ModelConfig(target, None, n_ctx=512, costs_dir=tmp_path)
    monkeypatch.setattr(session, "CALIBRATION_SAMPLES", 1)  # sizes measured once are re-timed: the next test

    def machine(scale: float):  # type: ignore[no-untyped-def]
        def time_calls(backend, sizes, repeats, context=24):  # type: ignore[no-untyped-def]
            ratio = {n: scale * (1 + 0.4 * (n - 1)) for n in sizes}
            return [(n, (n, 0.01 * (1.0 if n == 1 else ratio[n]))) for n in [1, 1, 1, *sizes] * repeats]

        monkeypatch.setattr(session, "_time_calls", time_calls)

    def ratios(engine: SpeculativeEngine) -> dict[int, float]:
        v = engine.costs.verify
        one = v.estimate(1)
        assert one is not None
        return {n: round(float(v.estimate(n) or 0.0) / one, 3) for n in (4, 32)}

    machine(3.0)  # a slow spell: every batch three times its cost
    dear = SpeculativeEngine(config)
    dear.save_costs()
    dear.close()
    machine(1.0)
    fresh = SpeculativeEngine(config)
    assert ratios(fresh) == {4: 2.2, 32: 13.4}  # measured afresh, every size
    fresh.save_costs()
    fresh.close()
    machine(1.1)  # within the noise: the saved costs stay, the re-timed sizes join them
    kept = SpeculativeEngine(config)
    try:
        assert ratios(kept)[32] == 13.4 and 2.2 < ratios(kept)[4] <= 2.2 * 1.1
    finally:
        kept.close()


def test_a_size_measured_once_is_timed_again_at_the_next_loads_so_one_noisy_reading_cannot_steer_it(
    family: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A size the controller seldom drafts keeps the samples of its calibration: one noisy reading at the first
    # load (on this project's VM a batch of 8 read dearer than one of 16) would steer every draft of 4 to 11
    # tokens for good, and the re-checked short sizes cannot see it. Loads re-time such sizes until each rests
    # on a median of three.
    target = next(family["folder"].glob("tiny-target-*.gguf"))
    config = ModelConfig(target, None, n_ctx=512, costs_dir=tmp_path)
    timed: list[tuple[int, ...]] = []

    def machine(spike: float) -> None:
        def time_calls(backend, sizes, repeats, context=24):  # type: ignore[no-untyped-def]
            timed.append(tuple(sizes))
            ratio = {n: (1 + 0.4 * (n - 1)) * (spike if n == 8 else 1.0) for n in sizes}
            return [(n, (n, 0.01 * (1.0 if n == 1 else ratio[n]))) for n in [1, 1, 1, *sizes] * repeats]

        monkeypatch.setattr(session, "_time_calls", time_calls)

    eights = []
    for spike in (3.0, 1.0, 1.0, 1.0):  # a batch of 8 read three times its cost at the first load only
        machine(spike)
        timed.clear()
        with SpeculativeEngine(config) as engine:
            v = engine.costs.verify
            eights.append(round(float(v.estimate(8) or 0.0) / float(v.estimate(1) or 1.0), 2))
    assert eights == [11.4, 7.6, 3.8, 3.8]
    assert timed == [session.RECHECK_SIZES]  # three samples each: the fourth load re-checks the short sizes only


def test_divergence_where_one_answer_ends_before_the_other(tiny: TinyModels) -> None:
    """From the tour of 2026-12-06: plain decoding ended 20 tokens before the speculative answer, which went on
    word for word, and Compare said nowhere where they parted: there, the shorter chose the end of the answer."""
    with SpeculativeEngine(ModelConfig(tiny.target, None, n_ctx=512)) as engine:
        prompt = engine.target.tokenize("one two three")
        a = [int(t) for t in engine.target.tokenize(" four five six seven")]
        assert engine.divergence(prompt, a, a) is None
        row = engine.target.prefill(prompt)
        for token in a[:2]:
            row = engine.target.decode([token], [0])[0].copy()
        end = max(engine.target.vocab.eog, key=lambda t: row[t])
        for shorter_first in (True, False):
            pair = (a[:2], a) if shorter_first else (a, a[:2])
            d = engine.divergence(prompt, *pair)
            assert d is not None and d.index == 2
            ended, went_on = (d.token_a, d.token_b) if shorter_first else (d.token_b, d.token_a)
            assert ended == end and went_on == a[2] and engine.target.piece(ended) == b""
            assert (d.logit_a, d.logit_b) == ((row[end], row[a[2]]) if shorter_first else (row[a[2]], row[end]))
