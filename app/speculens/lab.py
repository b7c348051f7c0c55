"""The pair lab: which draft, strategy and settings make *this* target fastest on *this* machine, for the kinds of
text the user generates.

Qt-free; the app's Pair lab window and ``speculens-cli lab`` share it. Four parts:

* **candidates** (:func:`list_candidates`): plain decoding (the baseline), the draft-free strategies, every draft
  in the library (compatible ones runnable, the others listed with the compatibility report's reason) and the
  catalog's suggested drafts for the target's family that are not downloaded yet;
* **estimates** (:func:`estimate`): from a short cost profile (the target's decode time by batch size and each
  draft's time per call) and Leviathan, Kalman & Matias's formula, the speedup a candidate could reach at a
  given acceptance, the acceptance it needs to pay at all, and whether it is hopeless (it loses even when
  every draft is accepted);
* the **run** (:class:`PairLab`): one target, every candidate on every prompt, interleaved and repeated as the
  benchmark does, within a time budget, cancellable (what was measured is kept); the load average before and
  plain decoding's run-to-run spread mark a busy machine's figures as noisy, and a speedup no target pass could
  give (more than the tokens per pass) marks its row, which is then never recommended, saved or not;
* the **result** (:class:`LabResult`): a ranked table per kind of text, the draft length the adaptive
  controller settled on, greedy identity, a recommendation in words, and the settings to apply; saved per
  machine and target, exported as JSON and CSV.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from speculens import paths
from speculens.atomic import write_json_atomic
from speculens.engine.adaptive import AdaptiveParams, CostModel
from speculens.engine.backend import BackendParams, LlamaBackend, default_threads, system_info
from speculens.engine.bench import RunResult, run_once
from speculens.engine.config import (
    DEFAULT_GPU_LAYERS,
    DEFAULT_N_DRAFT,
    NOISY_SPREAD,
    GenerationConfig,
    ModelConfig,
    Strategy,
)
from speculens.engine.drafters.base import Drafter
from speculens.engine.drafters.draft_model import DraftModelDrafter
from speculens.engine.drafters.ngram_cache import NgramCacheDrafter
from speculens.engine.loading import LoadCancelled, LoadWatch, watching
from speculens.engine.sampling import SamplingParams
from speculens.engine.session import SpeculativeEngine, calibrate_draft
from speculens.engine.suite import BenchPrompt, load_suite
from speculens.engine.threads import CpuWindow, crowded
from speculens.engine.vocab import vocab_mismatch
from speculens.errors import InvalidInputError, OperationError
from speculens.logging_setup import backend_description
from speculens.models.catalog import pairs_for_target
from speculens.models.compat import check_pair
from speculens.models.gguf_info import GGUFError, read_gguf_info
from speculens.models.library import Library
from speculens.words import duration

SCHEMA = "speculens-lab/1"

# The kinds of text, as the benchmark suite's categories name them, and how people call them.
KINDS = {
    "chat": "Chat",
    "code-generation": "Code generation",
    "code-rewrite": "Code rewrite",
    "summarisation": "Summary",
    "long-context": "Long context",
    "custom": "Your text",
}
# A candidate must beat plain decoding by this much to be recommended over it (run-to-run noise is ~3%).
RECOMMEND_MARGIN = 0.03
# A candidate faster than plain decoding by more than this factor times its tokens per target pass marks its row
# noisy (see _impossible).
IMPOSSIBLE_MARGIN = 1.15


# ---- candidates ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One way to decode the target.

    Attributes:
        key: a stable identifier (saved results are matched by it).
        label: what people read.
        strategy: the draft source.
        draft: the draft model file (draft and auto strategies).
        n_gpu_layers_draft: the draft's GPU layers (-1 = all).
        problem: why it cannot run (an incompatible draft: the compatibility report's reason), or ``None``.
        download: ``(repo, file)`` of a catalog draft that is not downloaded yet.
        size: the draft's size in bytes.
        n_draft: a fixed draft length (the n_draft sweep); ``None``: the adaptive controller chooses.
        larger: a draft not smaller than the target, which can only lose: listed for teaching, not ticked at first.
    """

    key: str
    label: str
    strategy: Strategy
    draft: Path | None = None
    n_gpu_layers_draft: int = 0
    problem: str | None = None
    download: tuple[str, str] | None = None
    size: int | None = None
    n_draft: int | None = None
    larger: bool = False

    @property
    def runnable(self) -> bool:
        """Whether the lab can run it now."""
        return self.problem is None and self.download is None

    @property
    def is_plain(self) -> bool:
        """Whether this is plain decoding, the baseline."""
        return self.strategy is Strategy.NONE


PLAIN = Candidate("none", "Plain decoding", Strategy.NONE)
DRAFT_FREE = (
    Candidate("lookup", "Prompt lookup", Strategy.LOOKUP),
    Candidate("ngram-cache", "N-gram cache", Strategy.NGRAM_CACHE),
    Candidate("auto", "Automatic (lookup + n-gram cache)", Strategy.AUTO),
)


def _draft_candidates(path: Path, name: str, gpu: bool, size: int | None, larger: bool) -> list[Candidate]:
    """The draft model alone and with the draft-free sources (auto), on the GPU and the CPU when there is one."""
    out = []
    for ngl, where in ((0, ""),) if not gpu else ((-1, ", on the GPU"), (0, ", on the CPU")):
        suffix = f"@ngl={ngl}" if gpu else ""
        for key, label, strategy in (("draft", "Draft", Strategy.DRAFT), ("auto", "Automatic with", Strategy.AUTO)):
            key_, label_ = f"{key}:{path.name}{suffix}", f"{label} {name}{where}"
            out.append(Candidate(key_, label_, strategy, path, ngl, size=size, larger=larger))
    return out


def list_candidates(target: Path, library: Library, n_ctx: int = 4096, gpu: bool = False) -> list[Candidate]:
    """Every candidate for ``target``: plain decoding, the draft-free strategies, the library's drafts (those
    that cannot draft for it with the reason) and the catalog's suggested drafts not yet downloaded.

    Args:
        target: the target file.
        library: the model library.
        n_ctx: the context size (the compatibility report checks the draft's).
        gpu: the llama.cpp build can offload: each draft is tried on the GPU and on the CPU.

    Raises:
        GGUFError: the target's metadata cannot be read.
    """
    info = read_gguf_info(target)
    out = [PLAIN, *DRAFT_FREE]
    target_resolved = target.resolve()
    seen: set[str] = {target.name}
    for entry in library.entries():
        if not entry.available or entry.path.resolve() == target_resolved or entry.path.name in seen:
            continue
        seen.add(entry.path.name)
        name = entry.path.name
        try:
            report = check_pair(info, entry.path, n_ctx=n_ctx)
        except GGUFError as exc:
            out.append(Candidate(f"draft:{name}", f"Draft {name}", Strategy.DRAFT, entry.path, problem=exc.message))
            continue
        if not report.compatible:
            out.append(Candidate(f"draft:{name}", f"Draft {name}", Strategy.DRAFT, entry.path, problem=report.headline))
        else:  # one as large as the target can only lose; kept, for teaching, and its estimate says so
            larger = report.size_ratio is not None and report.size_ratio <= 1.0
            label = f"{name} (not smaller than the target)" if larger else name
            out.extend(_draft_candidates(entry.path, label, gpu, entry.size, larger))
    target_size = target.stat().st_size
    for pair in pairs_for_target(info):
        file = pair.draft.file
        if file in seen or pair.draft.size >= target_size:  # the catalog pairs it with larger targets
            continue
        seen.add(file)
        out.append(
            Candidate(
                f"draft:{file}",
                f"Draft {file} (catalog: {pair.why})",
                Strategy.DRAFT,
                download=(pair.draft.repo, file),
                size=pair.draft.size,
            )
        )
    return out


# ---- estimates ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostProfile:
    """What speculation costs on this machine, relative to one target step.

    Attributes:
        target_step_s: one target decode step (one token).
        verify: ``verify[n]`` = the time of a verification batch of ``n`` tokens over one step (``verify[1] = 1``).
        draft_call: per draft candidate key: one draft decode call over one target step.
    """

    target_step_s: float
    verify: dict[int, float]
    draft_call: dict[str, float] = field(default_factory=dict)

    def verify_cost(self, n: int) -> float:
        """The relative cost of verifying ``n`` tokens (interpolated between measured sizes, extrapolated
        linearly from the last two beyond them)."""
        sizes = sorted(self.verify)
        if n in self.verify:
            return self.verify[n]
        if n > sizes[-1] and len(sizes) >= 2:
            a, b = sizes[-2], sizes[-1]
            return self.verify[b] + (n - b) * (self.verify[b] - self.verify[a]) / (b - a)
        return float(np.interp(n, sizes, [self.verify[s] for s in sizes]))


@dataclass(frozen=True)
class Estimate:
    """What a candidate could do, before it runs.

    Attributes:
        key: the candidate.
        cost_ratio: a draft token's cost over a target step (``0`` for draft-free sources, ``None`` for plain).
        best: ``(k, speedup)`` at the best draft length for each acceptance in :data:`ESTIMATE_ALPHAS`.
        breakeven: the acceptance it needs to beat plain decoding at its best draft length (``None``: never).
        hopeless: it loses even when every draft is accepted.
        text: the estimate in words.
        short: the same in a few words, for a table's cell (``text`` is its tooltip).
    """

    key: str
    cost_ratio: float | None
    best: dict[float, tuple[int, float]]
    breakeven: float | None
    hopeless: bool
    text: str
    short: str = ""


ESTIMATE_ALPHAS = (0.5, 0.7, 0.9)


def theoretical_speedup(alpha: float, k: int, cost_ratio: float, profile: CostProfile) -> float:
    """Leviathan et al. (2023), eq. 1 and §3.4: a step that drafts ``k`` tokens, each accepted with probability
    ``alpha``, emits ``(1 - alpha^(k+1)) / (1 - alpha)`` tokens and costs ``k`` draft calls and a verification of
    ``k + 1`` tokens; the speedup is its tokens per unit of time over plain decoding's one token per step."""
    tokens = k + 1.0 if alpha >= 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)
    return tokens / (k * cost_ratio + profile.verify_cost(k + 1))


def estimate(candidate: Candidate, profile: CostProfile, n_draft: int = 16) -> Estimate:
    """The estimate of one candidate from the cost profile (see :class:`Estimate`). ``auto`` with a draft model
    is estimated as its free sources: the controller runs the draft model only when it can pay."""
    if candidate.is_plain:
        return Estimate(candidate.key, None, {}, None, False, "the baseline")
    ratio = profile.draft_call.get(candidate.key, 0.0) if candidate.strategy is Strategy.DRAFT else 0.0

    def best_at(alpha: float, cost: float = ratio) -> tuple[int, float]:
        candidates = ((k, theoretical_speedup(alpha, k, cost, profile)) for k in range(1, n_draft + 1))
        return max(candidates, key=lambda x: x[1])

    # A draft model is granted the acceptance the engine's controller grants it (99%, not 100%): the two must not
    # disagree on whether it can pay. A free source's copies can be accepted whole.
    ceiling = AdaptiveParams().accept_ceiling
    top = ceiling if candidate.strategy is Strategy.DRAFT else 1.0
    best = {a: best_at(a) for a in ESTIMATE_ALPHAS}
    hopeless = best_at(top)[1] < 1.0
    breakeven = None if hopeless else _breakeven(best_at, ratio)
    k, s = best[0.7]
    if hopeless:
        short = f"cannot win here (×{best_at(top)[1]:.2f} at {top:.0%} acceptance)"
        text = (
            f"a draft token costs {ratio:.2f} of a target step: even with {top:.0%} of its tokens accepted it would "
            f"be ×{best_at(top)[1]:.2f}, so it cannot win here"
        )
    elif candidate.strategy is Strategy.DRAFT:
        short = f"pays from {breakeven:.0%} acceptance (×{s:.2f} at 70%, k={k})"
        text = f"a draft token costs {ratio:.2f} of a target step; {short}"
    else:
        short = f"pays from {breakeven:.0%} acceptance (×{s:.2f} at 70%)"
        text = (
            f"drafting is free, but verifying a batch costs more than one step: pays from {breakeven:.0%} acceptance, "
            f"i.e. when the text repeats (×{s:.2f} at 70%)"
        )
        draft_cost = profile.draft_call.get(candidate.key)
        if candidate.strategy is Strategy.AUTO and draft_cost is not None:
            if best_at(ceiling, draft_cost)[1] < 1.0:
                short += "; its draft model cannot win"
                text += f"; its draft model (a token costs {draft_cost:.2f} of a target step) cannot win here"
            else:
                short += f"; its draft model from {_breakeven(best_at, draft_cost):.0%}"
                text += f"; its draft model pays from {_breakeven(best_at, draft_cost):.0%} acceptance"
    return Estimate(candidate.key, ratio, best, breakeven, hopeless, text, short)


def _breakeven(best_at: Callable[[float, float], tuple[int, float]], cost: float) -> float:
    """The acceptance where the best speedup crosses 1 (by bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if best_at(mid, cost)[1] >= 1.0 else (mid, hi)
    return hi


# ---- prompts -----------------------------------------------------------------------------------------------


def lab_prompts(kinds: Sequence[str], own_text: str | None = None) -> list[BenchPrompt]:
    """The benchmark suite's prompts of these kinds, plus the user's own text as a "custom" prompt.

    Raises:
        InvalidInputError: no prompt at all, or an unknown kind.
    """
    # A kind by its id or by the name the app shows ("summary", "Code rewrite"): a tour typed the app's name.
    names = {key: key for key in KINDS if key != "custom"}
    names |= {label.lower().replace(" ", "-"): key for key, label in KINDS.items() if key != "custom"}
    asked = {k: k.strip().lower().replace(" ", "-") for k in kinds}
    unknown = [k for k, name in asked.items() if name not in names]
    if unknown:
        raise InvalidInputError(
            f"unknown kinds of text: {', '.join(unknown)} (known: {', '.join(k for k in KINDS if k != 'custom')})"
        )
    kinds = [names[name] for name in asked.values()]
    prompts = [p for p in load_suite() if p.category in kinds]
    if own_text and own_text.strip():
        prompts.append(BenchPrompt("your-text", "custom", ({"role": "user", "content": own_text.strip()},)))
    if not prompts:
        raise InvalidInputError("choose at least one kind of text, or paste your own")
    return prompts


# ---- the result --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One candidate on one kind of text.

    Attributes:
        key: the candidate.
        label: its label.
        tokens_per_second: mean over the kind's prompts of the median tokens per second.
        speedup: geometric mean over the prompts of its median tokens per second over plain decoding's,
            measured in the same run.
        acceptance: accepted drafts over drafted ones (``None`` when nothing was drafted).
        mean_accepted_length: tokens per target pass.
        settled_n_draft: the draft length the adaptive controller chose on the steps that drafted in the second
            half of the answers (median), i.e. where it settled; 0 when it drafted nothing there.
        identical: every greedy answer equals plain decoding's (``None`` when plain decoding was not measured).
        runs: timed runs behind the figures.
        date: when it was measured (ISO 8601).
        noisy: why its speedup cannot be true (see :func:`_impossible`), or ``None``; such a row is never
            recommended.
        drafted: draft tokens verified, which the acceptance is of (a tour read 100% acceptance at 1.00 tokens per
            pass: a draft model's few probe tokens, all accepted); ``None`` in rows saved before it existed.
        model_drafted: the tokens of ``drafted`` the candidate's draft model drafted, its probes left out (the rest
            came from prompt lookup and the n-gram caches); ``None`` in rows saved before it existed.
    """

    key: str
    label: str
    tokens_per_second: float
    speedup: float | None
    acceptance: float | None
    mean_accepted_length: float
    settled_n_draft: float
    identical: bool | None
    runs: int
    date: str
    noisy: str | None = None
    drafted: int | None = None
    model_drafted: int | None = None


@dataclass
class LabResult:
    """What a lab run measured (and what earlier runs on this machine measured for this target).

    Attributes:
        target: the target's file name.
        rows: ``rows[kind][candidate key]``.
        estimates: the candidates' estimates.
        candidates: the candidates, by key (what Apply needs).
        profile: the cost profile.
        noisy: why the figures may not be trusted (a busy machine), or ``None``.
        cancelled: the run was stopped before its end (its figures are what it measured).
        llama_build: llama.cpp's build summary.
        machine: the machine's description.
        date: when it ran.
        setup_s: the run's time before its first timed run (loading, the cost profile, a warm-up), or ``None``.
        run_s: its mean time per timed run, or ``None``: with ``setup_s``, how long a round takes here (the cost
            profile's one-token step read 18 and then 36 tokens/s where the runs decoded at 27).
    """

    target: str
    rows: dict[str, dict[str, Row]] = field(default_factory=dict)
    estimates: dict[str, Estimate] = field(default_factory=dict)
    candidates: dict[str, Candidate] = field(default_factory=dict)
    profile: CostProfile | None = None
    noisy: str | None = None
    cancelled: bool = False
    llama_build: str = ""
    machine: str = ""
    date: str = ""
    setup_s: float | None = None
    run_s: float | None = None

    def ranking(self, kind: str) -> list[Row]:
        """The kind's rows, fastest first; candidates that drafted nothing come last, whatever their speed: they
        decoded plainly, and their difference from plain decoding is the machine's noise (a user tour read a
        draft model that never drafted at ×1.13 on top of the table)."""
        return sorted(
            self.rows.get(kind, {}).values(), key=lambda r: (not _drafted(r), r.noisy is not None, -(r.speedup or 0.0))
        )

    def best(self, kind: str) -> Row | None:
        """The kind's candidate to recommend (see :meth:`_pick`); rows whose speedup cannot be true are left out."""
        rows = self.rows.get(kind, {})
        scores = {k: r.speedup for k, r in rows.items() if r.speedup and _trusted(r) and not self.idle_twin(r, kind)}
        key = self._pick(scores, rows.values())
        return rows[key] if key is not None else None

    def idle_twin(self, row: Row, kind: str) -> Row | None:
        """Where ``row``'s draft model drafted nothing on ``kind`` and the same strategy without it was measured there
        too: that candidate's row. The two drafted alike, and their difference is noise (a tour read "use Automatic
        with the draft model" at ×1.64 beside Automatic's ×1.47 on a code rewrite where the draft model never
        drafted)."""
        cand = self.candidates.get(row.key)
        if cand is None or cand.draft is None or row.model_drafted != 0:
            return None
        for key, other in self.rows.get(kind, {}).items():
            twin = self.candidates.get(key)
            same = twin is not None and (twin.strategy, twin.n_draft) == (cand.strategy, cand.n_draft)
            if same and twin is not None and twin.draft is None:
                return other
        return None

    def overall_best(self) -> Row | None:
        """The candidate to apply for every kind measured: the best geometric-mean speedup over the kinds (each
        kind counts once), chosen as :meth:`_pick` chooses."""
        kinds, scores, rows = self._overall()
        chosen = self._pick(scores, rows)
        return self.rows[kinds[0]][chosen] if chosen is not None else None

    def overall_ties(self) -> list[tuple[Row, float]]:
        """The other candidates as fast as :meth:`overall_best`'s within the noise margin, each with the score it
        was chosen on (:meth:`overall_speedup`): the recommendation took the simplest of them (a tour read
        "Recommended: Automatic" at ×3.57 beside prompt lookup's ×3.56, with nothing to say that they were level;
        another, over two kinds, read the first kind's figures beside a choice made on both)."""
        kinds, scores, rows = self._overall()
        chosen = self._pick(scores, rows)
        if chosen is None or chosen == PLAIN.key:
            return []
        return [(self.rows[kinds[0]][k], scores[k]) for k in self._close(scores, rows) if k != chosen]

    def overall_speedup(self, key: str) -> float | None:
        """The candidate's speedup over every kind measured, as :meth:`overall_best` weighs it: the geometric mean
        of its kinds' (``None`` where it is not weighed: a kind without it, nothing drafted, a figure that cannot
        be true)."""
        return self._overall()[1].get(key)

    def _overall(self) -> tuple[list[str], dict[str, float], list[Row]]:
        """The kinds measured, each candidate's geometric-mean speedup over them, and all their rows."""
        kinds = [k for k in self.rows if self.rows[k]]
        keys = set.intersection(*(set(self.rows[k]) for k in kinds)) if kinds else set()
        scores = {}
        for key in keys:
            rows = [self.rows[k][key] for k in kinds]
            if all(self.idle_twin(self.rows[k][key], k) is not None for k in kinds):
                continue  # its draft model drafted nothing: its figure is its twin's, plus noise
            if all((r.speedup or 0.0) > 0 and r.noisy is None for r in rows) and any(_drafted(r) for r in rows):
                scores[key] = math.exp(statistics.fmean(math.log(r.speedup or 0.0) for r in rows))
        return kinds, scores, [r for k in kinds for r in self.rows[k].values()]

    @staticmethod
    def _margin(scores: dict[str, float], rows: Iterable[Row]) -> float:
        """How much better than another a score must be to count: more where a figure rests on a single run."""
        return NOISY_SPREAD if any(r.runs < 2 for r in rows if r.key in scores) else RECOMMEND_MARGIN

    def _close(self, scores: dict[str, float], rows: Iterable[Row]) -> list[str]:
        """The candidates other than plain decoding within the noise margin of the best score."""
        margin = self._margin(scores, rows)
        top = max(scores.values())
        return sorted(
            (k for k, v in scores.items() if v >= top / (1.0 + margin) and k != PLAIN.key), key=lambda k: -scores[k]
        )

    def _pick(self, scores: dict[str, float], rows: Iterable[Row]) -> str | None:
        """Plain decoding unless a candidate beats it by :data:`RECOMMEND_MARGIN` (by :data:`NOISY_SPREAD` when a
        figure rests on a single run, which this noise can move that far); among the candidates within that
        margin of the best, the simplest (no draft model to load, the adaptive controller over a fixed
        length), then the fastest. A candidate that never drafted decoded plainly: its figure is plain
        decoding's, and whatever it read above 1 is noise (the caller leaves it out). Nothing when plain decoding
        is all that is left beside figures that cannot be true: those were measured against a slowed plain run."""
        rows = list(rows)
        if not scores or (set(scores) == {PLAIN.key} and any(r.noisy for r in rows)):
            return None
        if max(scores.values()) < 1.0 + self._margin(scores, rows) and PLAIN.key in scores:
            return PLAIN.key
        return min(self._close(scores, rows), key=lambda k: (self._weight(k), -scores[k]))

    def _weight(self, key: str) -> int:
        cand = self.candidates.get(key)
        if cand is None:
            return 3
        return (1 if cand.draft is not None else 0) + (1 if cand.n_draft is not None else 0)

    def recommendation(self) -> list[str]:
        """The verdict in words, one sentence per kind of text (and one for the figures left out as impossible)."""
        out = []
        for kind in self.rows:
            out += self._verdict(kind)
            for row in self.ranking(kind):
                twin = self.idle_twin(row, kind)
                if twin is not None and (row.speedup or 0.0) > (twin.speedup or 0.0):
                    out.append(
                        f"For {KINDS.get(kind, kind).lower()}, {row.label} is left out: its draft model drafted "
                        f"nothing, so it drafted as {twin.label} did, and its ×{row.speedup or 0:.2f} against "
                        f"×{twin.speedup or 0:.2f} is this machine's noise."
                    )
            left_out = [
                f"{r.label} (×{r.speedup or 0:.2f} at {r.mean_accepted_length:.2f} tokens per pass)"
                for r in self.ranking(kind)
                if r.noisy is not None
            ]
            if left_out:
                out.append(
                    f"For {KINDS.get(kind, kind).lower()}, left out as faster than their tokens per target pass can "
                    f"make them: {', '.join(left_out)}. Something else used the CPUs while plain decoding ran: run "
                    "the lab again."
                )
        return out

    def plain_caution(self) -> str | None:
        """Where plain decoding is recommended from text that does not repeat itself, what Apply gives up, in a
        sentence (a tour applied "Plain decoding" found on one line of its own, for every answer, where Automatic
        ran its next rename 1.28 times faster than plain decoding: 19.0 tokens/s against 14.8)."""
        best = self.overall_best()
        rewrites = self.rows.get("code-rewrite", {})
        if best is None or best.key != PLAIN.key or any(key != PLAIN.key for key in rewrites):
            return None
        measured = ", ".join(KINDS.get(k, k).lower() for k in self.rows if self.rows[k])
        return (
            f"Measured on {measured} only: on text that repeats itself (a code rewrite, a rename) prompt lookup and "
            "the n-gram cache gain, and Automatic, the default, decodes plainly where they do not pay. Apply sets "
            "plain decoding for every answer."
        )

    def _verdict(self, kind: str) -> list[str]:
        row = self.best(kind)
        if row is None:
            return []
        name = KINDS.get(kind, kind).lower()
        if row.key != PLAIN.key:
            acc = f", acceptance {row.acceptance:.0%}" if row.acceptance is not None else ""
            return [f"For {name}, use {row.label}: ×{row.speedup:.2f} over plain decoding{acc}."]
        ranked = [r for r in self.ranking(kind) if r.key != PLAIN.key and r.noisy is None]
        runner = next((r for r in ranked if _drafted(r)), None)
        if runner is None and ranked:
            return [
                f"For {name}, plain decoding: no candidate found anything worth drafting in this text, so their "
                "figures are plain decoding's own (and their differences from it, noise)."
            ]
        why = self._why_not(runner)
        if runner is not None and (runner.speedup or 0.0) > 1.0:
            # Faster in the table, yet not recommended: "plain decoding is fastest" beside it read as a bug.
            noise = (
                f"one run each: on this machine a difference under {NOISY_SPREAD:.0%} can be noise"
                if runner.runs < 2
                else f"not by the {RECOMMEND_MARGIN:.0%} it takes to be worth it"
            )
            return [
                f"For {name}, no choice is clearly faster than plain decoding on this machine: the best other "
                f"choice, {runner.label}, reached ×{runner.speedup or 0:.2f} ({noise}). Run more rounds to tell."
            ]
        return [f"For {name}, plain decoding is fastest on this machine{why}."]

    def _why_not(self, row: Row | None) -> str:
        if row is None:
            return ""
        est = self.estimates.get(row.key)
        acc = "nothing was drafted" if row.acceptance is None else f"acceptance is {row.acceptance:.0%}"
        if est is not None and est.cost_ratio:
            return (
                f": the best other choice, {row.label}, reached ×{row.speedup or 0:.2f} because a draft token costs "
                f"{est.cost_ratio:.2f} of a target token and {acc}"
            )
        return (
            f": the best other choice, {row.label}, reached ×{row.speedup or 0:.2f} ({acc}: the text repeats too "
            "little)"
        )

    def to_document(self) -> dict[str, Any]:
        """The JSON document (schema ``speculens-lab/1``)."""
        return {
            "schema": SCHEMA,
            "target": self.target,
            "date": self.date,
            "machine": self.machine,
            "llama_build": self.llama_build,
            "noisy": self.noisy,
            "cancelled": self.cancelled,
            "setup_s": self.setup_s,
            "run_s": self.run_s,
            "profile": None if self.profile is None else asdict(self.profile),
            "candidates": {k: _candidate_dict(c) for k, c in self.candidates.items()},
            "estimates": {k: asdict(e) for k, e in self.estimates.items()},
            "kinds": {kind: {key: asdict(r) for key, r in rows.items()} for kind, rows in self.rows.items()},
            "recommendation": self.recommendation(),
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> LabResult:
        """Read a document written by :meth:`to_document`.

        Raises:
            ValueError: it is not a lab document.
        """
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} document")
        try:
            profile = doc.get("profile")
            return cls(
                target=str(doc["target"]),
                rows={kind: {k: _row_from(r) for k, r in rows.items()} for kind, rows in doc.get("kinds", {}).items()},
                estimates={
                    k: Estimate(
                        e["key"],
                        e["cost_ratio"],
                        {float(a): (int(b[0]), float(b[1])) for a, b in e["best"].items()},
                        e["breakeven"],
                        bool(e["hopeless"]),
                        str(e["text"]),
                        str(e.get("short", "")),  # saved before it existed: the table shows the text
                    )
                    for k, e in doc.get("estimates", {}).items()
                },
                candidates={k: _candidate_from(c) for k, c in doc.get("candidates", {}).items()},
                profile=None
                if profile is None
                else CostProfile(
                    float(profile["target_step_s"]),
                    {int(n): float(v) for n, v in profile["verify"].items()},
                    {str(k): float(v) for k, v in profile["draft_call"].items()},
                ),
                noisy=doc.get("noisy"),
                cancelled=bool(doc.get("cancelled", False)),
                llama_build=str(doc.get("llama_build", "")),
                machine=str(doc.get("machine", "")),
                date=str(doc.get("date", "")),
                setup_s=_seconds(doc.get("setup_s")),  # saved before they existed: none
                run_s=_seconds(doc.get("run_s")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a damaged lab document: {exc}") from exc

    def to_csv(self) -> str:
        """One line per kind and candidate."""
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(
            [
                "kind",
                "candidate",
                "tokens_per_second",
                "speedup",
                "acceptance",
                "mean_accepted_length",
                "settled_n_draft",
                "identical",
                "runs",
                "date",
                "noisy",
                "drafted",  # these last: added later, the columns before them keep their places
                "model_drafted",
            ]
        )
        for kind in self.rows:
            for r in self.ranking(kind):
                writer.writerow(
                    [
                        kind,
                        r.label,
                        f"{r.tokens_per_second:.3f}",
                        "" if r.speedup is None else f"{r.speedup:.4f}",
                        "" if r.acceptance is None else f"{r.acceptance:.4f}",
                        f"{r.mean_accepted_length:.3f}",
                        f"{r.settled_n_draft:g}",
                        "" if r.identical is None else r.identical,
                        r.runs,
                        r.date,
                        r.noisy or "",
                        "" if r.drafted is None else r.drafted,
                        "" if r.model_drafted is None else r.model_drafted,
                    ]
                )
        return out.getvalue()

    def merged_into(self, older: LabResult) -> LabResult:
        """This result over an older one of the same target: this run's rows win, the others stay (with their
        dates), so results accumulate per candidate."""
        rows = {kind: dict(r) for kind, r in older.rows.items()}
        for kind, new in self.rows.items():
            rows.setdefault(kind, {}).update(new)
        return replace(
            self,
            rows=rows,
            estimates={**older.estimates, **self.estimates},
            candidates={**older.candidates, **self.candidates},
            setup_s=older.setup_s if self.setup_s is None else self.setup_s,
            run_s=older.run_s if self.run_s is None else self.run_s,
        )


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def _candidate_dict(c: Candidate) -> dict[str, Any]:
    d = asdict(c)
    d["strategy"] = c.strategy.value
    d["draft"] = None if c.draft is None else str(c.draft)
    return d


def _candidate_from(d: dict[str, Any]) -> Candidate:
    return Candidate(
        str(d["key"]),
        str(d["label"]),
        Strategy(d["strategy"]),
        None if d.get("draft") is None else Path(d["draft"]),
        int(d.get("n_gpu_layers_draft", 0)),
        d.get("problem"),
        (str(d["download"][0]), str(d["download"][1])) if d.get("download") else None,
        d.get("size"),
        d.get("n_draft"),
        bool(d.get("larger", False)),
    )


# ---- saving --------------------------------------------------------------------------------------------------


def machine_description() -> str:
    """The machine and llama.cpp build the figures belong to."""
    return f"{platform.node()} · {platform.machine()} · {os.cpu_count()} CPUs · {platform.system()}"


def results_path(target: Path) -> Path:
    """Where this machine's lab results for a target are kept."""
    stat = target.stat()
    machine = hashlib.sha256(machine_description().encode()).hexdigest()[:12]
    key = hashlib.sha256(f"{target.resolve()}|{stat.st_size}".encode()).hexdigest()[:12]
    return paths.data_dir() / "lab" / machine / f"{target.stem[:60]}-{key}.json"


def load_saved(target: Path) -> LabResult | None:
    """The saved results for ``target`` on this machine, or ``None`` (a damaged file counts as none)."""
    try:
        return LabResult.from_document(json.loads(results_path(target).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def save(result: LabResult, target: Path) -> Path:
    """Merge ``result`` into the saved results for ``target`` and write them (atomically)."""
    older = load_saved(target)
    merged = result.merged_into(older) if older is not None else result
    path = results_path(target)
    write_json_atomic(path, merged.to_document())
    return path


# ---- the run -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabProgress:
    """Where a run stands.

    Attributes:
        done: runs finished.
        total: runs planned (it grows when the budget allows another round).
        elapsed_s: time since the start.
        eta_s: estimated time left.
        what: the run under way, in words.
        partial: the figures of the runs done so far (``None`` before the first): a run of several minutes showed
            an empty table until its end (a tour's).
    """

    done: int
    total: int
    elapsed_s: float
    eta_s: float
    what: str
    partial: LabResult | None = None

    @property
    def eta_words(self) -> str:
        """The time left in words: "about 3 min left", or before a run has ended "roughly 13 s left (a first
        guess)", since that figure is plain decoding's fastest step over every token, and prompts, loads and shorter
        answers move it either way (a tour's read 13 s, then 34 s after a run)."""
        if not self.eta_s:
            return ""
        if not self.done:
            return f"roughly {duration(self.eta_s)} left (a first guess)"
        return f"about {duration(self.eta_s)} left"


@dataclass(frozen=True)
class LabSettings:
    """How the lab loads and runs.

    Attributes:
        n_ctx: context size.
        n_threads: CPU threads (0 = automatic).
        n_gpu_layers: the target's GPU layers.
        max_tokens: tokens per answer.
        budget_s: the time budget; rounds (every candidate on every prompt) repeat until it is spent.
        min_rounds: rounds run whatever the budget (a median needs a few).
        max_rounds: rounds at most.
        exact: bit-exact verification.
        sweep: fixed draft lengths to measure each draft model at too (for the chart of measured against
            theoretical speedup over the draft length); empty: the adaptive controller alone.
    """

    n_ctx: int = 4096
    n_threads: int = 0
    n_gpu_layers: int = DEFAULT_GPU_LAYERS
    max_tokens: int = 192
    budget_s: float = 300.0
    min_rounds: int = 1
    max_rounds: int = 5
    exact: bool = False
    sweep: tuple[int, ...] = ()


class PairLab:
    """Measure candidates for one target (see the module docstring).

    Args:
        target: the target file.
        candidates: what to measure (plain decoding is added if missing; those that cannot run are skipped).
        prompts: the prompts (their categories are the kinds of text).
        settings: how to load and run.
        cancel: set from any thread to stop within one speculation step; the result keeps what was measured.
    """

    def __init__(
        self,
        target: Path,
        candidates: Sequence[Candidate],
        prompts: Sequence[BenchPrompt],
        settings: LabSettings | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.target = target
        self.settings = settings or LabSettings()
        runnable = [c for c in candidates if c.runnable and not c.is_plain]
        swept = [
            replace(c, key=f"{c.key}/k={k}", label=f"{c.label}, n_draft={k}", n_draft=k)
            for c in runnable
            if c.strategy is Strategy.DRAFT and c.n_draft is None
            for k in self.settings.sweep
        ]
        self.candidates = [PLAIN, *runnable, *swept]
        self.prompts = list(prompts)
        self.cancel = cancel or threading.Event()
        self.threads = self.settings.n_threads or default_threads()  # llama.cpp's, beside which others may crowd
        self.skipped: dict[str, str] = {c.key: c.problem or "not downloaded" for c in candidates if not c.runnable}
        # The drafts by file and GPU setting, and each one's cost model by the flash-attention settings (target's,
        # draft's) it was timed with (see _fit).
        self._by_file: dict[tuple[Path, int], LlamaBackend] = {}
        self._draft_costs: dict[tuple[tuple[Path, int], bool | None, bool | None], CostModel] = {}

    def memory_needed(self) -> int:
        """About the memory the lab's models take, in bytes: the target's file and every draft's it loads (they are
        loaded together; on a CPU llama.cpp repacks the weights into memory of its own)."""
        files = {self.target, *(c.draft for c in self.candidates if c.draft is not None)}
        return sum(path.stat().st_size for path in files if path.exists())

    def _model_config(self) -> ModelConfig:
        s = self.settings
        return ModelConfig(
            self.target, None, s.n_ctx, s.n_threads, s.n_gpu_layers, exact=s.exact, costs_dir=paths.costs_dir()
        )

    def _new_result(self) -> LabResult:
        return LabResult(
            self.target.name,
            llama_build=f"{backend_description()}; {system_info().strip()}",
            machine=machine_description(),
            date=datetime.now(UTC).isoformat(timespec="seconds"),
        )

    def estimate(self) -> LabResult:
        """Load the target and the drafts, measure the cost profile and estimate every candidate (no runs).

        Raises:
            OperationError: the target cannot be loaded.
        """
        result = self._new_result()
        # The costs are timed: another program on the CPUs moves them, and with them every estimate (a tour's
        # estimate for prompt lookup, timed beside another model's run, read "pays from 31%" against 57% alone).
        busy_before = _others_busy()
        loaded = self._load(result)
        if loaded is not None:
            loaded[0].close()
            self.close()
        result.noisy = _noise(busy_before, self.threads, (), {})
        return result

    def _load(
        self, result: LabResult
    ) -> tuple[SpeculativeEngine, dict[str, LlamaBackend], dict[str, CostModel]] | None:
        """Load the target and the drafts and put the cost profile in ``result``: the engine, the drafts and their
        costs. A cancel meanwhile stops it within one decode call (see :mod:`speculens.engine.loading`; the runs
        look at the cancel between steps themselves): then everything loaded is freed, ``result`` is marked
        cancelled with nothing measured, and the answer is ``None``."""
        engine: SpeculativeEngine | None = None
        try:
            with watching(LoadWatch(self.cancel, lambda _what, _done, _total: None)):
                engine = SpeculativeEngine(self._model_config())
                drafts, costs = self._load_drafts(engine)
                self._profile_into(result, engine, costs)
        except BaseException as exc:
            if engine is not None:
                engine.close()
            self.close()
            if not isinstance(exc, LoadCancelled):
                raise
            result.cancelled = True
            return None
        return engine, drafts, costs

    def _profile_into(self, result: LabResult, engine: SpeculativeEngine, costs: dict[str, CostModel]) -> None:
        result.candidates = {c.key: c for c in self.candidates}
        result.profile = _profile(engine, costs)
        result.estimates = {c.key: estimate(c, result.profile) for c in self.candidates}

    def run(self, progress: Callable[[LabProgress], None] | None = None) -> LabResult:
        """Load, profile, and measure round after round until the budget, ``max_rounds`` or a cancel.

        Args:
            progress: called before each run (on the calling thread).

        Raises:
            OperationError: the target cannot be loaded.
        """
        s = self.settings
        t0 = time.monotonic()
        busy_before = _others_busy()
        result = self._new_result()
        runs: dict[str, dict[str, list[RunResult]]] = {}
        loaded = self._load(result)
        if loaded is None:
            return result
        engine, drafts, costs = loaded
        with engine:
            try:
                runs = {p.id: {c.key: [] for c in self.candidates} for p in self.prompts}
                tokens = {p.id: engine.target.format_chat(list(p.messages)) for p in self.prompts}
                base = GenerationConfig(
                    strategy=Strategy.NONE,
                    max_tokens=s.max_tokens,
                    sampling=SamplingParams(temperature=0.0),
                    judge_probs=False,  # timed runs: no token view to show them in
                )
                self._fit(engine, costs, tokens[self.prompts[0].id])
                self._run_one(engine, PLAIN, drafts, costs, tokens[self.prompts[0].id], base)  # warm-up, untimed
                per_round = len(self.prompts) * len(self.candidates)
                planned = s.min_rounds
                done = 0
                t_runs = time.monotonic()  # the pace of runs leaves out loading, profiling and the warm-up
                for rnd in range(s.max_rounds):
                    if rnd >= planned or self.cancel.is_set():
                        break
                    for prompt in self.prompts:
                        if not self.cancel.is_set():
                            self._fit(engine, costs, tokens[prompt.id])
                        # The order rotates, so a slow moment of the machine is shared out among candidates.
                        shift = (rnd + self.prompts.index(prompt)) % len(self.candidates)
                        for cand in [*self.candidates[shift:], *self.candidates[:shift]]:
                            if self.cancel.is_set():
                                break
                            if progress is not None:
                                elapsed = time.monotonic() - t0
                                total = per_round * planned
                                if done:
                                    eta = (time.monotonic() - t_runs) / done * (total - done)
                                else:  # before a run has ended, plain decoding's pace from the cost profile (a
                                    # tour's first run, on a busy machine, showed "0 of 20 runs" for two minutes)
                                    step = result.profile.target_step_s if result.profile is not None else 0.0
                                    eta = total * s.max_tokens * step
                                what = f"{KINDS.get(prompt.category, prompt.category)}: {cand.label} (round {rnd + 1})"
                                partial = None
                                if done:
                                    partial = replace(
                                        result, rows=_summarise(self.prompts, self.candidates, runs, result.date)
                                    )
                                progress(LabProgress(done, total, elapsed, eta, what, partial))
                            run = self._run_one(engine, cand, drafts, costs, tokens[prompt.id], base)
                            if run is not None:
                                runs[prompt.id][cand.key].append(run)
                            done += 1
                    # As many rounds as what is left of the budget after loading holds, at the pace measured so far.
                    pace = (time.monotonic() - t_runs) / (rnd + 1)
                    fits = int((s.budget_s - (t_runs - t0)) // pace) if pace > 0 else s.max_rounds
                    planned = min(s.max_rounds, max(s.min_rounds, fits))
                result.setup_s = t_runs - t0
                # Not after a cancel: its last run, stopped part way, would count as a whole one.
                result.run_s = (time.monotonic() - t_runs) / done if done and not self.cancel.is_set() else None
            finally:
                self.close()
        result.cancelled = self.cancel.is_set()
        result.rows = _summarise(self.prompts, self.candidates, runs, result.date)
        result.noisy = _noise(busy_before, self.threads, self.prompts, runs)
        return result

    def _load_drafts(self, engine: SpeculativeEngine) -> tuple[dict[str, LlamaBackend], dict[str, CostModel]]:
        """Load each candidate's draft (once per file and GPU setting) and measure its cost; a draft that turns
        out unable to draft is dropped with its reason (it never runs)."""
        s = self.settings
        drafts: dict[str, LlamaBackend] = {}
        costs: dict[str, CostModel] = {}
        by_file = self._by_file
        failed: dict[tuple[Path, int], str] = {}
        keep = []
        for cand in self.candidates:
            if cand.draft is None:
                keep.append(cand)
                continue
            where = (cand.draft, cand.n_gpu_layers_draft)
            if where in failed:
                self.skipped[cand.key] = failed[where]
                continue
            backend = by_file.get(where)
            if backend is None:
                try:
                    params = BackendParams(
                        s.n_ctx,
                        s.n_threads,
                        cand.n_gpu_layers_draft,
                        exact=s.exact,
                        flash_attn=engine.target.params.flash_attn,  # as the engine's own draft would have it
                    )
                    backend = LlamaBackend(cand.draft, params)
                except OperationError as exc:
                    self.skipped[cand.key] = failed[where] = exc.message
                    continue
                problem = vocab_mismatch(engine.target.vocab, backend.vocab)
                if problem or backend.recurrent:
                    backend.close()
                    self.skipped[cand.key] = failed[where] = problem or "a recurrent model cannot draft"
                    continue
                by_file[where] = backend
            drafts[cand.key], costs[cand.key] = backend, self._draft_cost(engine, where)
            keep.append(cand)
        self.candidates = keep
        return drafts, costs

    def _draft_cost(self, engine: SpeculativeEngine, where: tuple[Path, int]) -> CostModel:
        """The cost model of the candidates drafting with the draft at ``where``, at the target's flash-attention
        setting: the target's costs as measured, the draft's timed now (once per setting), shared by those
        candidates: the machine charges them alike."""
        key = (where, engine.target.params.flash_attn, self._by_file[where].params.flash_attn)
        cost = self._draft_costs.get(key)
        if cost is None:
            cost = self._draft_costs[key] = engine.new_costs()
            cost.restore(engine.costs.state())
            cost.forget_draft()
            calibrate_draft(self._by_file[where], cost, repeats=3)
        return cost

    def _fit(self, engine: SpeculativeEngine, costs: dict[str, CostModel], prompt: list[int]) -> None:
        """Run a prompt's candidates with the flash-attention setting a generation of it gets in the app
        (:meth:`SpeculativeEngine.fit_flash_attn`, on a CPU: by the depth it decodes at), so the lab's figures are
        what a chat of that length gets: the drafts follow the target, with that setting's costs."""
        before = engine.target.params.flash_attn
        engine.fit_flash_attn(prompt, self.settings.max_tokens)
        now = engine.target.params.flash_attn
        if now == before:
            return
        for backend in self._by_file.values():
            backend.set_flash_attn(now)
        for cand in self.candidates:
            if cand.draft is not None and (where := (cand.draft, cand.n_gpu_layers_draft)) in self._by_file:
                costs[cand.key] = self._draft_cost(engine, where)

    def _run_one(
        self,
        engine: SpeculativeEngine,
        cand: Candidate,
        drafts: dict[str, LlamaBackend],
        costs: dict[str, CostModel],
        prompt: list[int],
        base: GenerationConfig,
    ) -> RunResult | None:
        config = replace(
            base, strategy=cand.strategy, n_draft=cand.n_draft or DEFAULT_N_DRAFT, adaptive=cand.n_draft is None
        )
        rng = np.random.default_rng(config.sampling.seed)
        sources: list[Drafter] = []
        if cand.strategy in (Strategy.LOOKUP, Strategy.AUTO):
            sources.append(engine.lookup())
        if cand.strategy in (Strategy.NGRAM_CACHE, Strategy.AUTO):
            # A fresh cache each run: the repeated prompts would otherwise teach it their answers.
            sources.append(NgramCacheDrafter(engine.fingerprint, None))
        draft = drafts.get(cand.key)
        if draft is not None:
            sources.append(DraftModelDrafter(draft, config.sampling, config.p_min, engine.target.n_vocab, rng))
        return run_once(engine, prompt, config, sources, costs.get(cand.key, engine.costs), self.cancel)

    def close(self) -> None:
        """Free the draft models (:meth:`run` does at its end)."""
        for backend in self._by_file.values():
            backend.close()
        self._by_file.clear()
        self._draft_costs.clear()


def _profile(engine: SpeculativeEngine, costs: dict[str, CostModel]) -> CostProfile:
    verify = engine.costs.verify
    step = verify.estimate(1) or 0.0
    sizes = sorted(verify.measured())
    rel = {n: (verify.estimate(n) or 0.0) / step for n in sizes} if step else {1: 1.0}
    rel[1] = 1.0
    draft_call = {key: cost.draft_call_seconds() / step for key, cost in costs.items()} if step else {}
    return CostProfile(step, rel, draft_call)


def _others_busy(window_s: float = 0.5) -> float | None:
    """The share of the CPUs that *other* programs used over a short window (see :class:`CpuWindow`)."""
    window = CpuWindow()
    time.sleep(window_s)
    return window.others_share()


def _drafted(row: Row) -> bool:
    """Whether a candidate speculated at all (plain decoding counts as itself)."""
    return row.key == PLAIN.key or row.acceptance is not None


def _trusted(row: Row) -> bool:
    """Whether a row can be recommended: it speculated (or is plain decoding) and its speedup can be true."""
    return _drafted(row) and row.noisy is None


def _noise(
    busy_before: float | None,
    threads: int,
    prompts: Sequence[BenchPrompt],
    runs: dict[str, dict[str, list[RunResult]]],
) -> str | None:
    if busy_before is not None and crowded(busy_before, threads):
        return (
            f"other programs used {busy_before:.0%} of the CPUs when the run began: they share the CPUs with the "
            "models, so the figures are slower and noisier than this machine can do"
        )
    spreads = []
    for p in prompts:
        tps = [r.tokens_per_second for r in runs[p.id].get(PLAIN.key, [])]
        if len(tps) >= 2 and statistics.median(tps) > 0:
            spreads.append((max(tps) - min(tps)) / statistics.median(tps))
    if spreads and max(spreads) > NOISY_SPREAD:
        return (
            f"plain decoding's speed varied by {max(spreads):.0%} between rounds: something else used the CPUs, so "
            "differences of that size mean nothing"
        )
    return None


def _impossible(speedup: float | None, per_pass: float) -> str | None:
    """Why a speedup cannot be true, or ``None``. A target pass costs at least a plain step, so no candidate can
    beat plain decoding by more than its tokens per pass; one that reads so was measured beside plain runs that
    something else slowed (a single round has no spread to tell it by)."""
    if speedup is None or speedup <= IMPOSSIBLE_MARGIN * per_pass:
        return None
    return (
        f"×{speedup:.2f} over plain decoding with {per_pass:.2f} tokens per target pass, more than any pass can "
        "give: something else used the CPUs while plain decoding ran, so run the lab again"
    )


def _row_from(doc: dict[str, Any]) -> Row:
    """A saved row; one saved before rows carried their own check gets it here, from its pooled figures. Fields a
    later version added are left out, so its file is read rather than taken for damaged (and overwritten)."""
    known = {f.name for f in fields(Row)}
    row = Row(**{k: v for k, v in doc.items() if k in known})
    return row if "noisy" in doc else replace(row, noisy=_impossible(row.speedup, row.mean_accepted_length))


def _summarise(
    prompts: Sequence[BenchPrompt],
    candidates: Sequence[Candidate],
    runs: dict[str, dict[str, list[RunResult]]],
    date: str,
) -> dict[str, dict[str, Row]]:
    out: dict[str, dict[str, Row]] = {}
    for kind in dict.fromkeys(p.category for p in prompts):
        ids = [p.id for p in prompts if p.category == kind]
        rows: dict[str, Row] = {}
        for cand in candidates:
            have = [i for i in ids if runs[i][cand.key]]
            if not have:
                continue
            # A run stopped before plain decoding was measured on a prompt keeps what was measured there: its
            # speed, without a speedup or an output comparison for that prompt.
            paired = [i for i in have if runs[i][PLAIN.key]]
            median = {i: statistics.median(r.tokens_per_second for r in runs[i][cand.key]) for i in have}
            plain = {i: statistics.median(r.tokens_per_second for r in runs[i][PLAIN.key]) for i in paired}
            ratios = {i: median[i] / plain[i] for i in paired if plain[i] > 0 and median[i] > 0}
            # Checked per prompt: a speedup more than that prompt's tokens per target pass could give.
            noisy = None
            for i, ratio in ratios.items():
                passes = sum(r.n_steps for r in runs[i][cand.key])
                if passes and noisy is None:
                    noisy = _impossible(ratio, sum(r.n_generated for r in runs[i][cand.key]) / passes)
            all_runs = [r for i in have for r in runs[i][cand.key]]
            drafted = sum(r.n_drafted for r in all_runs)
            steps = sum(r.n_steps for r in all_runs)
            # Plain steps are most steps even where drafting pays (between copies): a median over them all read 0
            # for candidates that drafted at 94% acceptance.
            late = [k for r in all_runs for k in r.n_draft_chosen[len(r.n_draft_chosen) // 2 :] if k > 0]
            identical = (
                all(r.tokens == runs[i][PLAIN.key][0].tokens for i in paired for r in runs[i][cand.key])
                if paired
                else None
            )
            rows[cand.key] = Row(
                key=cand.key,
                label=cand.label,
                tokens_per_second=statistics.fmean(median.values()),
                speedup=math.exp(statistics.fmean(math.log(x) for x in ratios.values())) if ratios else None,
                acceptance=sum(r.n_accepted for r in all_runs) / drafted if drafted else None,
                mean_accepted_length=sum(r.n_generated + r.n_ended for r in all_runs) / steps if steps else 1.0,
                settled_n_draft=float(statistics.median(late)) if late else 0.0,
                identical=identical,
                runs=len(all_runs),
                date=date,
                noisy=noisy,
                drafted=drafted,
                model_drafted=sum(r.n_drafted_model for r in all_runs),
            )
        if rows:  # a kind stopped before its first run ended has no rows (a tour's cancel saved it, dated anew)
            out[kind] = rows
    return out


def settings_to_apply(row: Row, result: LabResult) -> dict[str, Any]:
    """The settings fields a recommendation changes: the strategy, the draft length as the lab ran it (a tour's
    n_draft of 4 stayed after applying a result measured at 32), and the draft model and its GPU layers, or no
    draft model for automatic drafting without one (a tour applied "Automatic (lookup + n-gram cache)" and got
    the automatic strategy with its draft model still loaded)."""
    cand = result.candidates.get(row.key)
    if cand is None:
        return {}
    out: dict[str, Any] = {
        "strategy": cand.strategy.value,
        "n_draft": cand.n_draft or DEFAULT_N_DRAFT,
        "adaptive": cand.n_draft is None,
    }
    if cand.draft is not None:
        out["draft_path"] = str(cand.draft)
        out["n_gpu_layers_draft"] = cand.n_gpu_layers_draft
    elif cand.strategy is Strategy.AUTO:
        out["draft_path"] = ""
    return out
