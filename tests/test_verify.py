"""The verification rules, checked statistically against their exact target distribution."""

from __future__ import annotations

import numpy as np
import pytest

from speculens.engine.sampling import SamplingParams, sample, transform
from speculens.engine.verify import verify_greedy, verify_rejection, verify_sample_compare

N_SAMPLES = 100_000


def _random_dist(rng: np.random.Generator, n: int, zeros: int = 0) -> np.ndarray:
    p = rng.dirichlet(np.full(n, 0.7))
    if zeros:
        p[rng.choice(n, zeros, replace=False)] = 0.0
        p /= p.sum()
    return p


def _assert_matches(counts: np.ndarray, expected: np.ndarray) -> None:
    """Every cell within 5 standard deviations, and the total variation small."""
    n = counts.sum()
    freq = counts / n
    sd = np.sqrt(expected * (1 - expected) / n)
    assert np.all(np.abs(freq - expected) <= 5 * sd + 1e-12), (freq, expected)
    assert 0.5 * np.abs(freq - expected).sum() < 0.01


@pytest.mark.parametrize("case", range(4))
def test_rejection_sampling_first_token_is_distributed_as_p(case: int) -> None:
    rng = np.random.default_rng(100 + case)
    n = 6
    p = np.stack([_random_dist(rng, n, zeros=case % 2) for _ in range(3)])
    q = np.stack([_random_dist(rng, n, zeros=(case + 1) % 2) for _ in range(2)])
    counts = np.zeros(n)
    accepted_first = 0
    for _ in range(N_SAMPLES):
        draft = [sample(q[0], rng), sample(q[1], rng)]
        v = verify_rejection(draft, q, p, rng)
        first = draft[0] if v.n_accepted >= 1 else v.next_token
        counts[first] += 1
        accepted_first += v.n_accepted >= 1
    _assert_matches(counts, p[0])
    # The acceptance rate of the first draft is sum(min(p, q)) (Leviathan et al., Theorem 3.5).
    assert abs(accepted_first / N_SAMPLES - np.minimum(p[0], q[0]).sum()) < 0.01


def test_rejection_sampling_second_token_given_acceptance_is_distributed_as_p() -> None:
    rng = np.random.default_rng(7)
    n = 5
    p = np.stack([_random_dist(rng, n) for _ in range(3)])
    q = np.stack([_random_dist(rng, n) for _ in range(2)])
    counts = np.zeros(n)
    for _ in range(N_SAMPLES):
        draft = [sample(q[0], rng), sample(q[1], rng)]
        v = verify_rejection(draft, q, p, rng)
        if v.n_accepted >= 1:
            counts[draft[1] if v.n_accepted == 2 else v.next_token] += 1
    _assert_matches(counts, p[1])


def test_rejection_when_p_equals_q_accepts_everything() -> None:
    rng = np.random.default_rng(3)
    p = np.stack([_random_dist(rng, 4) for _ in range(3)])
    for _ in range(200):
        draft = [sample(p[0], rng), sample(p[1], rng)]
        assert verify_rejection(draft, p[:2], p, rng).n_accepted == 2


def test_sample_compare_first_token_is_distributed_as_p() -> None:
    rng = np.random.default_rng(11)
    n = 6
    p = np.stack([_random_dist(rng, n, zeros=1) for _ in range(4)])
    draft = [int(np.argmax(p[0])), 2, 3]  # a fixed n-gram guess, no distribution
    counts = np.zeros(n)
    for _ in range(N_SAMPLES):
        v = verify_sample_compare(draft, lambda i: p[i], rng)
        counts[draft[0] if v.n_accepted >= 1 else v.next_token] += 1
    _assert_matches(counts, p[0])


def test_greedy_accepts_matching_prefix_then_corrects() -> None:
    logits = np.array([[0, 5, 1], [3, 0, 1], [0, 0, 9], [1, 2, 0]], dtype=np.float32)
    assert verify_greedy([1, 0, 2], logits).n_accepted == 3
    assert verify_greedy([1, 0, 2], logits).next_token == 1  # bonus from the last row
    v = verify_greedy([1, 2, 2], logits)
    assert (v.n_accepted, v.next_token) == (1, 0)  # correction at the first mismatch
    assert verify_greedy([], logits[:1]).next_token == 1


def test_transform_applies_top_k_top_p_min_p_and_temperature() -> None:
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], dtype=np.float32))
    p = transform(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0))
    np.testing.assert_allclose(p, [0.5, 0.2, 0.15, 0.1, 0.05], rtol=1e-5)
    p = transform(logits, SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0))
    np.testing.assert_allclose(p, [0.5 / 0.7, 0.2 / 0.7, 0, 0, 0], rtol=1e-5)
    p = transform(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.8, min_p=0.0))
    assert np.count_nonzero(p) == 3  # 0.5 + 0.2 < 0.8 <= 0.85
    p = transform(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.25))
    assert np.count_nonzero(p) == 3  # 0.15 >= 0.25 * 0.5 > 0.1
    hot = transform(logits, SamplingParams(temperature=2.0, top_k=0, top_p=1.0, min_p=0.0))
    assert hot[0] < 0.5 and hot[4] > 0.05
    assert abs(hot.sum() - 1) < 1e-9
