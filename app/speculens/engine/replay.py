"""Replay a recorded greedy answer through the adaptive controller and the draft-free sources, on saved costs.

Whether a change to a drafter or to the controller speeds decoding up is hard to see in benchmarks: on this
project's 2-core VM, runs of one configuration spread 10–30%, and a change worth 5% on one prompt needs an hour
of interleaved runs to show. A replay takes the noise out. A greedy answer is the target's own, whatever drafted
it, so it is fixed; each step's cost is what the saved cost model (the one a session restores and keeps learning,
see :class:`~speculens.engine.adaptive.CostModel`) estimates for its batch at its context; only the decisions
vary: what each source drafts, which draft the controller takes and how much of it, and so how many target
passes the answer takes and what they cost. ``speculens-cli replay`` runs it on a generation's ``--events``
file.

With ``noise``, the machine's noise is put back where it can steer the controller and nowhere else: every step
still costs what the saved model estimates, but the controller is told that time multiplied by a random factor
(log-normal, ``noise`` its standard deviation; on a 2-core VM decode calls of one size vary by 7–11%). The spread
of the speedups of replays with different seeds is then how far timing noise moves the controller's choices on
this answer, apart from how it moves the stopwatch.

What it leaves out: the draft model (its acceptance would need its own forward passes), the n-gram cache's
statistics of earlier runs (it starts from the prompt, as with ``--no-ngram-file``), a sampled answer's
randomness (it matches drafts token by token, as greedy verification does), and the machine's noise (but for
what ``noise`` tells the controller, above); every step costs the same overhead. So it compares drafters and
controller settings with each other on one machine's costs; only the side-by-side benchmark against llama.cpp
says how fast a user's decoding is.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from speculens.engine.adaptive import AdaptiveController, AdaptiveParams, CostModel, Offer
from speculens.engine.drafters.base import Drafter
from speculens.engine.generate import free_offers


@dataclass(frozen=True)
class ReplayResult:
    """What the controller would have done on the answer.

    Attributes:
        n_tokens: the answer's tokens.
        n_steps: target passes (verification batches, plain steps included).
        seconds: the passes' modelled cost.
        plain_seconds: plain decoding's modelled cost for the same tokens (one pass each).
        drafted: tokens verified, by source.
        accepted: tokens accepted, by source.
    """

    n_tokens: int
    n_steps: int
    seconds: float
    plain_seconds: float
    drafted: Mapping[str, int]
    accepted: Mapping[str, int]

    @property
    def speedup(self) -> float:
        """Plain decoding's modelled time over the replay's."""
        return self.plain_seconds / self.seconds if self.seconds > 0 else 0.0


def replay(
    prompt: Sequence[int],
    answer: Sequence[int],
    drafters: Sequence[Drafter],
    costs: Mapping[str, Any],
    n_draft: int,
    eog: Collection[int] = frozenset(),
    overhead_s: float = 0.0,
    ended: bool = False,
    noise: float = 0.0,
    seed: int = 0,
    params: AdaptiveParams | None = None,
) -> ReplayResult:
    """Decode ``answer`` after ``prompt`` again, step by step, as the generation loop does with draft-free sources.

    Args:
        prompt: the prompt's tokens.
        answer: the greedy answer's tokens (the target's choices).
        drafters: the draft-free sources, in the generation loop's order.
        costs: a saved cost model's state (:meth:`CostModel.state`): the controller starts from it, and every
            step costs what it estimates.
        n_draft: the most tokens drafted per step (at least 1).
        eog: the end-of-generation tokens (a draft ends at the first, as in the generation loop).
        overhead_s: our own time per step (the recorded run's median), charged to every step, plain or not.
        ended: the answer ended at an end-of-generation token (not at the token limit or a stop string): drafts
            may run past its last token, as they did in the generation loop, and a step goes to that token.
        noise: the standard deviation of the log-normal factor on the step times the controller is told (0: the
            modelled times themselves; see the module docstring).
        seed: the noise's random seed.
        params: the controller's tuning (default: the generation loop's).

    Raises:
        ValueError: ``n_draft`` is below 1, the answer is empty, or the saved costs have no one-token cost.
    """
    if n_draft < 1:
        raise ValueError(f"n_draft must be at least 1, not {n_draft}")
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise must be between 0 and 1, not {noise}")
    if not answer:
        raise ValueError("the recorded answer is empty: there is nothing to replay")
    machine = CostModel()  # the costs charged: never updated, so every replay is charged alike
    machine.restore(dict(costs))
    learnt = CostModel(params=params)  # the costs the controller starts from and learns, as a session's
    learnt.restore(dict(costs))
    if machine.verify.estimate(1) is None:
        raise ValueError("the saved costs have no one-token verification cost: decode once with this model first")
    ends = frozenset(eog)
    jitter = random.Random(seed)
    controller = AdaptiveController(n_draft, [d.name for d in drafters], learnt)
    for drafter in drafters:
        drafter.begin(prompt)
    # An answer that ended at an end-of-generation token goes on with one: the target's choice there, which a
    # draft may propose (any of ``ends``), and which plain decoding needs a step for too. One stopped by the
    # token limit has no position after its last token, and the generation loop drafts nothing past it.
    end = -1
    truth = [*answer, end] if ended else list(answer)
    history, i, steps = list(prompt), 0, 0
    seconds = plain = 0.0
    drafted: Counter[str] = Counter()
    accepted: Counter[str] = Counter()
    while i < len(truth):
        n_max = n_draft if ended else min(n_draft, len(truth) - i - 1)
        machine.verify.at(len(history))
        single = machine.verify.estimate(1) or 0.0
        if n_max < 1:  # the token limit's last token: the generation loop asks no source and no controller
            steps, seconds, plain = steps + 1, seconds + single + overhead_s, plain + single + overhead_s
            break
        controller.shadow_check(history)
        offers = free_offers(drafters, history, n_max, ends)
        controller.costs.verify.at(len(history))
        plan = controller.plan(n_max, [Offer(name, len(d.tokens), d.confidence) for name, d in offers.items()])
        for name, offer in offers.items():
            verified = plan.n_draft if plan.source == name else 0
            controller.shadow_drafted(len(history), offer.tokens, verified, offer.confidence, name)
        tokens = offers[plan.source].tokens[: plan.n_draft] if plan.n_draft and plan.source in offers else ()
        k = 0
        while k < len(tokens) and i + k < len(truth):
            if tokens[k] != truth[i + k] and not (truth[i + k] == end and tokens[k] in ends):
                break
            k += 1
        step = machine.verify.estimate(len(tokens) + 1) or 0.0
        told = step * jitter.lognormvariate(0.0, noise) if noise else step
        controller.observe(plan, len(tokens), k, told, overhead_s, verify_calls=[(len(tokens) + 1, told)])
        if tokens and plan.source is not None:
            drafted[plan.source] += len(tokens)
            accepted[plan.source] += k
        emitted = min(k + 1, len(truth) - i)
        steps += 1
        seconds += step + overhead_s
        plain += (single + overhead_s) * emitted
        history.extend(answer[i : i + emitted])
        i += emitted
    return ReplayResult(len(answer), steps, seconds, plain, dict(drafted), dict(accepted))
