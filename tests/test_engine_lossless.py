"""Sampling is lossless: speculation's tokens have the target's own distribution, for every draft source.

Method. For one prompt, the exact probability of every sequence of the target's first ``DEPTH`` tokens under plain
sampling is computed from the target's own logits, evaluated as plain decoding evaluates them (the prompt in one
batch, then one token at a time; the target is loaded bit-exact, so verification batches give the same rows):
a tree of every prefix whose probability is at least ``MIN_MASS``, the rest of each prefix's children lumped into
one bin. ``N`` seeded generations of a configuration are binned the same way and compared with the exact
probabilities by a chi-square goodness-of-fit test at ``FAMILY_ALPHA / len(FAMILY)`` each (Bonferroni), so a
correct engine fails any test of the family with probability at most ``FAMILY_ALPHA``. The seeds are fixed, so
every run gives the same verdicts.

Power. The draft model is a close copy of the target (rejections, residual samples, accepted chains and bonus
tokens all occur hundreds of times: asserted), prompt lookup finds the target's likely continuation in the prompt,
the n-gram cache learns the answers as the samples go, and the n-gram map is built from the target's own samples.
Deliberately broken samplers — a draft model that drafts its argmax but reports ``q``, a draft distribution taken
before the sampler chain, a bonus token from the wrong row, a residual taken from ``p``, a draft-free rule that
accepts likely drafts without sampling — must each fail the same test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chisquare

import speculens.engine.drafters.draft_model as draft_model_module
import speculens.engine.generate as generate_module
from conftest import cheap_verification
from speculens.engine.adaptive import CostModel
from speculens.engine.backend import LlamaBackend
from speculens.engine.config import GenerationConfig, ModelConfig, Strategy
from speculens.engine.drafters.ngram_table import build_table
from speculens.engine.events import FinishEvent, Origin, StepEvent
from speculens.engine.sampling import SamplingParams, sample, softmax, transform
from speculens.engine.session import SpeculativeEngine
from speculens.engine.verify import Verdict
from speculens.models.synthetic import TinyModelSpec, write_tiny_model

DEPTH = 3  # tokens per sample: the first step drafts two and can emit a bonus as the third
N = 4000  # samples per configuration
MIN_MASS = 6.0 / N  # prefixes expected fewer than ~6 times are lumped with their siblings
FAMILY_ALPHA = 1e-3
OTHER = -1  # in a bin key: "any token not listed"
END = -2  # in a bin key: the answer ended (an end-of-generation token, which is not emitted)

CHAIN_OFF = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
CHAIN_ON = SamplingParams(temperature=0.8, top_k=12, top_p=0.9, min_p=0.02)


@dataclass(frozen=True)
class Case:
    """One configuration of the family."""

    name: str
    strategy: Strategy
    sampling: SamplingParams
    adaptive: bool = False
    n_draft: int = 4
    n_draft_min: int = 0
    p_min: float = 0.0


FAMILY = [
    Case("plain", Strategy.NONE, CHAIN_ON),
    Case("draft", Strategy.DRAFT, CHAIN_OFF),
    Case("draft-chain", Strategy.DRAFT, CHAIN_ON),
    Case("draft-chain-adaptive-pmin", Strategy.DRAFT, CHAIN_ON, adaptive=True, p_min=0.3),
    # p_min stops the draft model early; with n_draft_min, a short sampled draft must still be verified.
    Case("draft-chain-min2-pmin", Strategy.DRAFT, CHAIN_ON, n_draft_min=2, p_min=0.5),
    Case("lookup-chain", Strategy.LOOKUP, CHAIN_ON),
    Case("ngram-cache", Strategy.NGRAM_CACHE, CHAIN_OFF),
    Case("ngram-map-chain-min2", Strategy.NGRAM_MAP, CHAIN_ON, n_draft_min=2),
    Case("auto-chain-adaptive", Strategy.AUTO, CHAIN_ON, adaptive=True, p_min=0.3),
]
ALPHA = FAMILY_ALPHA / len(FAMILY)

# The longer matrix: every source with the chain on and off, adaptive on and off, n_draft_min and p_min.
SLOW_FAMILY = [
    Case(f"{s.value}-{'chain' if c is CHAIN_ON else 'nochain'}-{'ad' if a else 'fix'}-m{m}-p{p}", s, c, a, 4, m, p)
    for s in (Strategy.DRAFT, Strategy.LOOKUP, Strategy.NGRAM_CACHE, Strategy.NGRAM_MAP, Strategy.AUTO)
    for c in (CHAIN_OFF, CHAIN_ON)
    for a in (False, True)
    for m, p in ((0, 0.0), (2, 0.5))
]


# ---- the models, the prompt and the exact distribution ---------------------------------------------------


@dataclass
class Lab:
    """The engine, the prompt, and the exact distribution of the target's first tokens for each sampler."""

    engine: SpeculativeEngine
    prompt: list[int]
    exact: dict[SamplingParams, dict[tuple[int, ...], float]]
    ngram_map: Path


def _row(target: LlamaBackend, prompt: Sequence[int], prefix: Sequence[int]) -> np.ndarray:
    """The target's logits after ``prompt + prefix``, computed as plain decoding computes them."""
    target.sync(prompt[:-1])
    target.truncate(len(prompt) - 1)
    row = np.empty(0)
    for token in [prompt[-1], *prefix]:
        row = target.decode([token], [0])[0]
    return row.copy()


def exact_distribution(
    target: LlamaBackend, prompt: Sequence[int], sampling: SamplingParams
) -> dict[tuple[int, ...], float]:
    """Bin probabilities of plain sampling's first ``DEPTH`` tokens: ``(t1, t2, t3)`` for a likely sequence,
    ``(t1, .., tj, END)`` for one that ends there, ``(t1, .., tj, OTHER)`` for the rest of a prefix's children."""
    eog = target.vocab.eog
    bins: dict[tuple[int, ...], float] = {}

    def expand(prefix: tuple[int, ...], mass: float) -> None:
        p = transform(_row(target, prompt, prefix), sampling)
        rest = mass
        for token in np.flatnonzero(p * mass >= MIN_MASS):
            child = mass * float(p[token])
            rest -= child
            if int(token) in eog:
                bins[(*prefix, END)] = child
            elif len(prefix) + 1 == DEPTH:
                bins[(*prefix, int(token))] = child
            else:
                expand((*prefix, int(token)), child)
        if rest > 1e-12:
            bins[(*prefix, OTHER)] = rest

    expand((), 1.0)
    return bins


def bin_of(tokens: Sequence[int], bins: dict[tuple[int, ...], float]) -> tuple[int, ...]:
    """The bin a sampled answer (its first ``DEPTH`` tokens, fewer when it ended) falls in."""
    inner = {key[:j] for key in bins for j in range(1, len(key))}
    prefix: tuple[int, ...] = ()
    for token in tokens[:DEPTH]:
        if (*prefix, token) in inner:
            prefix = (*prefix, token)
        elif (*prefix, token) in bins:
            return (*prefix, token)
        else:
            return (*prefix, OTHER)
    return (*prefix, END) if (*prefix, END) in bins else (*prefix, OTHER)


def _self_consistent_prompt(target: LlamaBackend, seed: list[int], filler: list[int]) -> list[int]:
    """``seed + [c1, c2] + filler + seed`` with ``c1, c2`` chosen so that the target itself is likely to say
    ``c1, c2`` after it: prompt lookup, matching the final ``seed`` with its first occurrence, then drafts what
    the target is likely to sample (a random tiny model has no copying behaviour of its own to rely on)."""
    words = [t for t in range(target.n_vocab) if t not in target.vocab.special and t not in target.vocab.eog]
    words = [t for t in words if not target.piece(t).startswith(b"<0x")][:400]

    def build(c1: int, c2: int) -> list[int]:
        return [*seed, c1, c2, *filler, *seed[1:]]

    def prob(prompt: list[int], token: int) -> float:
        return float(softmax(_row(target, prompt, ())[None])[0, token])

    c2 = words[0]
    c1 = max(words, key=lambda c: prob(build(c, c2), c))
    c2 = max(words, key=lambda c: prob(build(c1, c), c1) * prob([*build(c1, c), c1], c))
    return build(c1, c2)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    folder = tmp_path_factory.mktemp("lossless")
    # Weights scaled so the next-token distributions are spread over many tokens, and a draft close enough
    # that it is often right and often wrong.
    spec = TinyModelSpec(seed=21, weight_scale=0.5, name="lossless-target")
    target = write_tiny_model(folder / "target.gguf", spec)
    draft = write_tiny_model(folder / "draft.gguf", replace(spec, noise=0.02, name="lossless-draft"))
    with SpeculativeEngine(ModelConfig(target, draft, n_ctx=512, exact=True)) as engine:
        t = engine.target
        prompt = _self_consistent_prompt(
            t, t.tokenize("the draft model of speculative decoding"), t.tokenize("and then", add_special=False)
        )
        # An n-gram map built from the target's own answers to this prompt.
        corpus = [
            [*prompt, *_finish(engine.generate(prompt, _config(Case("", Strategy.NONE, s), seed))).tokens]
            for s in (CHAIN_ON, CHAIN_OFF)
            for seed in range(200)
        ]
        map_path = folder / "map.npz"
        build_table(corpus).save(map_path, engine.fingerprint)
        exact = {s: exact_distribution(t, prompt, s) for s in (CHAIN_ON, CHAIN_OFF)}
        yield Lab(engine, prompt, exact, map_path)


def _finish(events: Iterator[object]) -> FinishEvent:
    last = None
    for last in events:  # noqa: B007
        pass
    assert isinstance(last, FinishEvent)
    return last


def _config(case: Case, seed: int, ngram_map: Path | None = None) -> GenerationConfig:
    return GenerationConfig(
        strategy=case.strategy,
        n_draft=case.n_draft,
        n_draft_min=case.n_draft_min,
        p_min=case.p_min,
        max_tokens=DEPTH,
        sampling=replace(case.sampling, seed=seed),
        adaptive=case.adaptive,
        ngram_map=ngram_map,
    )


@dataclass
class Outcome:
    """What N samples of a configuration did."""

    p_value: float
    counts: Counter[tuple[int, ...]]
    chains: int = 0  # steps that accepted two drafts or more
    residuals: int = 0  # steps whose correction was sampled after a rejection
    bonuses: int = 0  # steps that emitted a bonus token
    drafted: int = 0
    accepted: int = 0


def run(lab: Lab, case: Case, n: int = N, base_seed: int = 0) -> Outcome:
    """Sample ``n`` answers of ``DEPTH`` tokens and test them against the exact distribution.

    With ``case.adaptive`` the draft model is priced at a twentieth of a target step, so the controller drafts
    because the costs say so, not because of how the tiny models' milliseconds fell on this machine (a draft
    model as large as its target would rightly sit out, and this test would then test plain decoding)."""
    if case.adaptive:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(CostModel, "draft_call_seconds", lambda self: 0.05 * (self.verify.estimate(1) or 0.0))
            mp.setattr(CostModel, "catchup_seconds", lambda self, n_tokens: 0.0)
            cheap_verification(mp)  # and batches cheap, whatever this CPU's kernels make of the tiny target
            return _run(lab, case, n, base_seed)
    return _run(lab, case, n, base_seed)


def _run(lab: Lab, case: Case, n: int, base_seed: int) -> Outcome:
    bins = lab.exact[case.sampling]
    counts: Counter[tuple[int, ...]] = Counter()
    outcome = Outcome(1.0, counts)
    for i in range(n):
        for event in lab.engine.generate(lab.prompt, _config(case, base_seed + i, lab.ngram_map)):
            if isinstance(event, StepEvent):
                accepted = sum(d.accepted for d in event.drafted)
                outcome.drafted += len(event.drafted)
                outcome.accepted += accepted
                outcome.chains += accepted >= 2
                outcome.residuals += accepted < len(event.drafted)
                outcome.bonuses += any(e.origin is Origin.BONUS for e in event.emitted)
            elif isinstance(event, FinishEvent):
                counts[bin_of(event.tokens, bins)] += 1
    if set(counts) - set(bins):  # a sequence the target cannot produce (probability 0) was sampled
        outcome.p_value = 0.0
        return outcome
    # Bins expected fewer than 5 times are pooled, so the chi-square approximation holds.
    big = [k for k in bins if bins[k] * n >= 5]
    small = [k for k in bins if bins[k] * n < 5]
    observed = [counts[k] for k in big] + ([sum(counts[k] for k in small)] if small else [])
    expected = [bins[k] * n for k in big] + ([sum(bins[k] for k in small) * n] if small else [])
    outcome.p_value = float(chisquare(np.array(observed, float), np.array(expected)).pvalue)
    return outcome


# ---- the family ------------------------------------------------------------------------------------------


def test_the_first_tokens_are_spread_over_many_bins(lab: Lab) -> None:
    for bins in lab.exact.values():
        assert abs(sum(bins.values()) - 1.0) < 1e-9
        # A near-deterministic start would hide a biased sampler: no bin may hold most of the mass.
        assert len(bins) >= 12 and max(bins.values()) < 0.5, sorted(bins.values())[-5:]


@pytest.mark.parametrize("case", FAMILY, ids=lambda c: c.name)
def test_speculation_samples_the_targets_own_distribution(lab: Lab, case: Case) -> None:
    outcome = run(lab, case)
    assert outcome.p_value > ALPHA, f"{case.name}: chi-square p = {outcome.p_value:.2e}"
    if case.strategy is Strategy.NONE:
        return
    assert outcome.drafted >= N // 2, f"{case.name}: drafted only {outcome.drafted} tokens in {N} answers"
    if case.strategy is Strategy.DRAFT and not case.adaptive:
        # Every rule of rejection sampling ran many times: accepted chains, residual samples, bonus tokens.
        assert min(outcome.chains, outcome.residuals, outcome.bonuses) >= 150, outcome


@pytest.mark.parametrize("strategy", [Strategy.LOOKUP, Strategy.NGRAM_CACHE, Strategy.NGRAM_MAP])
def test_draft_free_sources_sample_the_plain_tokens_for_the_same_seed(lab: Lab, strategy: Strategy) -> None:
    # Sample-and-compare draws one sample from p at each position, in order, as plain sampling does; with the
    # target's rows bit-identical (exact mode) the same seed gives the same tokens, drafted or not.
    drafted = 0
    for sampling in (CHAIN_ON, CHAIN_OFF):
        for seed in range(150):
            plain = _finish(lab.engine.generate(lab.prompt, _config(Case("", Strategy.NONE, sampling), seed)))
            events = list(lab.engine.generate(lab.prompt, _config(Case("", strategy, sampling), seed, lab.ngram_map)))
            drafted += sum(len(e.drafted) for e in events if isinstance(e, StepEvent))
            assert events[-1].tokens == plain.tokens, (sampling, seed)
    assert drafted >= 300


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_FAMILY, ids=lambda c: c.name)
def test_every_setting_samples_the_targets_own_distribution(lab: Lab, case: Case) -> None:
    alpha = FAMILY_ALPHA / len(SLOW_FAMILY)
    outcome = run(lab, case, base_seed=100_000)
    assert outcome.p_value > alpha, f"{case.name}: chi-square p = {outcome.p_value:.2e}"


# ---- power: broken samplers fail the same test -----------------------------------------------------------


def _verify_rejection_residual_from_p(
    draft: Sequence[int], draft_probs: np.ndarray, target_probs: np.ndarray, rng: np.random.Generator
) -> Verdict:
    for i, x in enumerate(draft):
        if float(draft_probs[i, x]) > 0 and rng.random() * float(draft_probs[i, x]) < float(target_probs[i, x]):
            continue
        return Verdict(i, sample(target_probs[i], rng), ())  # broken: p, not normalize(max(0, p - q))
    return Verdict(len(draft), sample(target_probs[len(draft)], rng), ())


def _bonus_from_the_previous_row(real: Callable[..., Verdict]) -> Callable[..., Verdict]:
    def broken(draft: Sequence[int], draft_probs: np.ndarray, target_probs: np.ndarray, rng: np.random.Generator):
        p = np.array(target_probs)
        if len(draft):
            p[len(draft)] = p[len(draft) - 1]  # broken: the bonus token comes from the last draft's row
        return real(draft, draft_probs, p, rng)

    return broken


def _accept_likely_drafts(
    draft: Sequence[int], target_dist: Callable[[int], np.ndarray], rng: np.random.Generator
) -> Verdict:
    for i in range(len(draft) + 1):
        p = target_dist(i)
        if i < len(draft) and p[draft[i]] >= 0.2:  # broken: a likely draft is taken without sampling
            continue
        return Verdict(i, sample(p, rng), ())
    raise AssertionError("unreachable")


def _argmax(q: np.ndarray, rng: np.random.Generator) -> int:
    rng.random()  # keep the stream's use as it is
    return int(np.argmax(q))


def _patch_before_chain(monkeypatch: pytest.MonkeyPatch, sampling: SamplingParams) -> None:
    # The draft samples from the chain's q but reports the raw temperature-1 softmax as q.
    monkeypatch.setattr(draft_model_module, "transform", lambda row, _params: softmax(row))
    monkeypatch.setattr(
        draft_model_module,
        "sample",
        lambda q, rng: sample(transform(np.log(np.maximum(q, 1e-300)), sampling), rng),
    )


BROKEN = {
    "draft-argmax-reported-as-q": (
        Case("broken", Strategy.DRAFT, CHAIN_OFF),
        lambda mp: mp.setattr(draft_model_module, "sample", _argmax),
    ),
    "draft-q-before-the-chain": (
        Case("broken", Strategy.DRAFT, CHAIN_ON),
        lambda mp: _patch_before_chain(mp, CHAIN_ON),
    ),
    "bonus-from-the-wrong-row": (
        Case("broken", Strategy.DRAFT, CHAIN_ON),
        lambda mp: mp.setattr(
            generate_module, "verify_rejection", _bonus_from_the_previous_row(generate_module.verify_rejection)
        ),
    ),
    "residual-from-p": (
        Case("broken", Strategy.DRAFT, CHAIN_OFF),
        lambda mp: mp.setattr(generate_module, "verify_rejection", _verify_rejection_residual_from_p),
    ),
    "draft-free-accepts-likely-drafts": (
        Case("broken", Strategy.LOOKUP, CHAIN_ON),
        lambda mp: mp.setattr(generate_module, "verify_sample_compare", _accept_likely_drafts),
    ),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_sampler_fails_the_test(lab: Lab, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    case, breaks = BROKEN[name]
    breaks(monkeypatch)
    outcome = run(lab, case)
    assert outcome.p_value < ALPHA, f"{name} went unnoticed: chi-square p = {outcome.p_value:.3f}"
