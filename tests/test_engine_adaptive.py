"""The adaptive controller's decisions, against a fake machine with known costs and acceptance.

No model and no clock: each simulated step reports the costs the fake machine charges, so every assertion
is about the controller's logic, never about this computer's speed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest

from speculens.engine.adaptive import (
    AdaptiveController,
    AdaptiveParams,
    BatchCosts,
    CostModel,
    Ewma,
    PositionRates,
    StepPlan,
)


class FakeMachine:
    """A machine and a text: verification cost by batch size, draft cost per call, acceptance by position.

    Args:
        verify: seconds for a batch of ``n`` tokens.
        draft_call: seconds per draft-model call (0 for a draft-free source).
        accept: conditional acceptance of position ``j``.
        deliver: probability that the drafter delivers position ``j``.
        catchup: a catch-up token's cost relative to a draft call (batches are cheap per token on a GPU).
        seed: random seed.
    """

    def __init__(
        self,
        verify: Callable[[int], float],
        draft_call: float,
        accept: Callable[[int], float],
        deliver: Callable[[int], float] = lambda j: 1.0,
        catchup: float = 0.25,
        seed: int = 0,
    ) -> None:
        self.catchup = catchup
        self.verify = verify
        self.draft_call = draft_call
        self.accept = accept
        self.deliver = deliver
        self.rng = np.random.default_rng(seed)
        self.behind = 0  # tokens the draft model missed while the controller decoded plainly

    def step(self, controller: AdaptiveController, limit: int = 16) -> tuple[StepPlan, int, int, float]:
        """One step: plan, draft, verify, observe. Returns the plan, drafted, accepted and the step's time."""
        plan = controller.plan(limit)
        drafted = 0
        while drafted < plan.n_draft and self.rng.random() < self.deliver(drafted):
            drafted += 1
        accepted = 0
        while accepted < drafted and self.rng.random() < self.accept(accepted):
            accepted += 1
        calls = min(drafted + 1, plan.n_draft) if controller.draft_model else 0
        draft_s = calls * self.draft_call
        draft_tokens = calls
        if calls:  # the first call catches up on the missed tokens
            draft_s += self.catchup * self.draft_call * self.behind
            draft_tokens += self.behind
            self.behind = 0
        else:
            self.behind += 1
        verify_s = self.verify(drafted + 1)
        overhead_s = 0.0005
        controller.observe(plan, drafted, accepted, verify_s, overhead_s, draft_s, calls, draft_tokens)
        return plan, drafted, accepted, draft_s + verify_s + overhead_s

    def run(self, controller: AdaptiveController, steps: int) -> list[tuple[StepPlan, int, int, float]]:
        return [self.step(controller) for _ in range(steps)]


def cpu_verify(n: int) -> float:
    """A small CPU: every extra token in the batch costs 40% of a single-token step."""
    return 0.05 * (1 + 0.4 * (n - 1))


def gpu_verify(n: int) -> float:
    """A GPU: a batch of 17 costs barely more than one token."""
    return 0.02 * (1 + 0.01 * (n - 1))


def test_expensive_draft_and_low_acceptance_decode_plainly() -> None:
    controller = AdaptiveController(16, draft_model=True)
    machine = FakeMachine(cpu_verify, draft_call=0.03, accept=lambda j: 0.3)
    history = machine.run(controller, 1000)
    assert all(plan.n_draft == 0 for plan, *_ in history[50:] if not plan.probe)
    assert history[1][0].probe  # the first probe is cheap: the draft model is in sync after the prompt
    # Catching up on hundreds of missed tokens costs more than the exploration budget allows, so later
    # probes are rare, and the whole run costs at most a few percent more than plain decoding.
    assert _slowdown(history, cpu_verify(1)) <= 1.03


def _slowdown(history: list[tuple[StepPlan, int, int, float]], plain_step: float) -> float:
    tokens = sum(accepted + 1 for _, _, accepted, _ in history)
    return sum(t for *_, t in history) / (tokens * (plain_step + 0.0005))


def test_probes_come_now_and_then_and_stay_within_their_budget() -> None:
    controller = AdaptiveController(16, draft_model=False)
    machine = FakeMachine(cpu_verify, draft_call=0.0, accept=lambda j: 0.1)
    history = machine.run(controller, 1000)
    probes = [i for i, (plan, *_) in enumerate(history) if plan.probe]
    assert len(probes) >= 5 and probes[-1] > 800
    assert all(b - a >= AdaptiveParams().probe_every for a, b in itertools.pairwise(probes))
    assert all(plan.n_draft == 0 for plan, *_ in history[100:] if not plan.probe)
    assert _slowdown(history, cpu_verify(1)) <= 1.03


def test_high_acceptance_and_cheap_batches_draft_long() -> None:
    controller = AdaptiveController(16, draft_model=False)
    machine = FakeMachine(gpu_verify, draft_call=0.0, accept=lambda j: 0.97)
    history = machine.run(controller, 200)
    chosen = [plan.n_draft for plan, *_ in history[50:]]
    assert np.median(chosen) >= 12
    assert not any(plan.probe for plan, *_ in history[50:])


def test_a_cheap_draft_model_with_good_acceptance_pays_on_a_gpu_but_is_shorter_on_a_cpu() -> None:
    gpu = AdaptiveController(16, draft_model=True)
    on_gpu = [plan.n_draft for plan, *_ in FakeMachine(gpu_verify, 0.002, lambda j: 0.85).run(gpu, 300)[100:]]
    cpu = AdaptiveController(16, draft_model=True)
    on_cpu = [plan.n_draft for plan, *_ in FakeMachine(cpu_verify, 0.01, lambda j: 0.85).run(cpu, 300)[100:]]
    assert np.median(on_gpu) >= 6
    assert np.mean(np.array(on_cpu) > 0) > 0.6  # speculation pays a little here: k = 1..2 beats plain by ~15%
    assert 1 <= np.median(on_cpu) <= 3


def test_the_choice_maximises_expected_tokens_per_second() -> None:
    controller = AdaptiveController(16, draft_model=True)
    machine = FakeMachine(cpu_verify, draft_call=0.005, accept=lambda j: 0.8)
    machine.run(controller, 300)
    curves = controller.curves(16)
    assert curves is not None
    tokens, seconds = curves
    plan = controller.plan(16)
    rates = tokens / seconds
    if plan.n_draft and not plan.probe:
        assert rates[plan.n_draft] == pytest.approx(rates[1:].max())
        assert rates[plan.n_draft] > rates[0]


def test_expected_tokens_is_leviathans_formula_for_a_constant_acceptance() -> None:
    alpha = 0.7
    params = AdaptiveParams(prior_accept=alpha, prior_deliver=1.0)
    controller = AdaptiveController(16, draft_model=True, params=params)
    for k in (0, 1, 4, 16):
        assert controller.expected_tokens(k) == pytest.approx((1 - alpha ** (k + 1)) / (1 - alpha))


def test_plain_decoding_is_measured_before_any_speculation() -> None:
    controller = AdaptiveController(8, draft_model=True)
    first = controller.plan(8)
    assert first.n_draft == 0 and not first.probe
    controller.observe(first, 0, 0, verify_s=0.05, overhead_s=0.001)
    # With the first cost known, the next step probes: the acceptance of this text is not known yet.
    assert controller.plan(8).probe


def test_probing_notices_when_speculation_starts_paying() -> None:
    controller = AdaptiveController(16, draft_model=True)
    bad = FakeMachine(gpu_verify, draft_call=0.003, accept=lambda j: 0.1, catchup=0.02, seed=1)
    bad.run(controller, 150)
    assert controller.plan(16).n_draft == 0 or controller.plan(16).probe
    good = FakeMachine(gpu_verify, draft_call=0.003, accept=lambda j: 0.98, catchup=0.02, seed=2)
    good.behind = bad.behind
    history = good.run(controller, 300)
    first_win = next(i for i, (plan, *_) in enumerate(history) if plan.n_draft and not plan.probe)
    assert first_win <= AdaptiveParams().probe_every_max + 10
    assert all(plan.n_draft > 0 for plan, *_ in history[first_win + 20 :])


def test_shadow_drafts_notice_a_repeating_text_without_verifying_anything() -> None:
    no_probes = AdaptiveParams(probe_every=10_000, probe_every_max=10_000)
    controller = AdaptiveController(16, draft_model=False, params=no_probes)
    controller.observe(StepPlan(0), 0, 0, verify_s=0.05, overhead_s=0.0005)
    controller.costs.verify.observe(9, cpu_verify(9))
    history = list(range(1000, 1020))
    chosen = []
    for step in range(120):
        controller.shadow_check(history)
        plan = controller.plan(16)
        assert not plan.probe
        chosen.append(plan.n_draft)
        repeating = step >= 60  # the text starts repeating (a code rewrite reaches the unchanged part)
        if plan.n_draft and repeating:
            break
        if plan.shadow:
            guess = [7 if not repeating else 3000 + len(history) + i for i in range(plan.shadow)]
            controller.shadow_drafted(len(history), guess, plan.shadow)
        history.append(3000 + len(history) if repeating else 5000 + step)
        # Before the repetition, a real draft (the prior's optimism) is rejected at its first token.
        controller.observe(
            plan, min(plan.n_draft, 4), 0, verify_s=cpu_verify(min(plan.n_draft, 4) + 1), overhead_s=0.0005
        )
    assert all(k == 0 for k in chosen[20:60])  # wrong shadows: plain decoding
    assert chosen[-1] > 0 and len(chosen) < 60 + 20  # right shadows: speculation, soon, and no probe needed


def test_a_mismatching_shadow_draft_counts_as_a_rejection_at_its_position() -> None:
    controller = AdaptiveController(8, draft_model=False)
    controller.shadow_drafted(3, [7, 8, 9], asked=8)
    controller.shadow_check([0, 1, 2, 7])
    assert controller.accept.observations()[:2] == [1, 0]  # scored as far as the target has produced
    controller.shadow_check([0, 1, 2, 7, 8, 5])
    assert controller.accept.observations()[:4] == [1, 1, 1, 0]
    assert controller.acceptance_by_position()[2] < controller.acceptance_by_position()[1]
    assert controller.deliver.observations()[:5] == [1, 1, 1, 1, 0]  # three delivered, the fourth was not
    controller.shadow_check([0, 1, 2, 7, 8, 5, 6, 7])
    assert controller.accept.observations()[:4] == [1, 1, 1, 0]  # a scored shadow is never scored again


def test_acceptance_by_position_converges() -> None:
    truth = [0.9, 0.8, 0.7, 0.6]
    controller = AdaptiveController(4, draft_model=True, params=AdaptiveParams(accept_alpha=0.02))
    machine = FakeMachine(gpu_verify, draft_call=0.0001, accept=lambda j: truth[j], seed=3)
    for _ in range(4000):
        plan = StepPlan(4)
        drafted, accepted = 4, 0
        while accepted < drafted and machine.rng.random() < truth[accepted]:
            accepted += 1
        controller.observe(plan, drafted, accepted, 0.02, 0.0, draft_s=0.0004, draft_calls=4)
    np.testing.assert_allclose(controller.acceptance_by_position(), truth, atol=0.06)


def test_the_choice_respects_the_limit_and_the_minimum_draft() -> None:
    controller = AdaptiveController(16, draft_model=False, n_draft_min=3)
    machine = FakeMachine(gpu_verify, draft_call=0.0, accept=lambda j: 0.99)
    for _ in range(100):
        plan, *_ = machine.step(controller, limit=16)
        assert plan.n_draft == 0 or 3 <= plan.n_draft <= 16
    assert controller.plan(5).n_draft <= 5
    assert controller.plan(2).n_draft == 0  # below n_draft_min: nothing worth drafting
    assert controller.plan(0).n_draft == 0


def test_batch_costs_interpolate_and_extrapolate_monotonically() -> None:
    costs = BatchCosts(32)
    assert costs.estimate(4) is None
    costs.observe(1, 0.05)
    # One measured size: the prior slope.
    assert costs.estimate(5) == pytest.approx(0.05 * (1 + 4 * 0.15))
    costs.observe(5, 0.09)
    costs.observe(9, 0.17)
    assert costs.estimate(5) == pytest.approx(0.09)
    assert costs.estimate(3) == pytest.approx(0.07)  # between 1 and 5
    curve = costs.curve(17)
    assert curve is not None
    assert np.all(np.diff(curve[1:]) >= 0)
    assert curve[17] == pytest.approx(0.05 + 0.015 * 16, rel=0.05)  # the least-squares trend beyond 9


def test_a_cost_outlier_is_clipped() -> None:
    e = Ewma(0.1, clip=3.0)
    for _ in range(5):
        e.add(1.0)
    e.add(1000.0)
    assert e.value == pytest.approx(1.0 + (3.0 - 1.0) / 6)  # the sixth sample, clipped to 3x the mean


def test_position_rates_fall_back_to_the_position_before() -> None:
    rates = PositionRates(4, alpha=0.2, prior=0.5, prior_weight=2.0)
    for _ in range(40):
        rates.observe(0, True)
    est = rates.estimates()
    assert est[0] > 0.9
    assert est[1] == pytest.approx(est[0])  # never observed: inherits position 0


def test_a_new_draft_model_forgets_the_old_ones_cost() -> None:
    costs = CostModel()
    costs.verify.observe(1, 0.05)
    costs.draft_call.add(0.01)
    costs.forget_draft()
    assert costs.draft_call_seconds() == pytest.approx(AdaptiveParams().prior_draft_ratio * 0.05)
