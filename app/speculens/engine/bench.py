"""Benchmarks: run plain decoding and speculative settings over a prompt suite, and summarise honestly.

Three parts, all Qt-free:

* the settings to compare (:class:`BenchSetting`), over the suite of :mod:`speculens.engine.suite`;
* the **runner** (:func:`run_suite`): one engine, chat-formatted prompts, warm-up runs, then repeated runs in
  an order that rotates every repetition, all with the same seed and the same token budget;
* the **arithmetic** (:func:`summarise_runs`, :func:`overall`, :func:`results_document`): medians and spread of
  tokens per second, acceptance, mean accepted length, acceptance by draft position, the draft / verify /
  overhead shares of the decoding time, the speedup over plain decoding measured in the same session, and
  whether each greedy output equals plain decoding's. Expected tokens per step follow Leviathan, Kalman &
  Matias, "Fast Inference from Transformers via Speculative Decoding" (ICML 2023).

:func:`cost_profile` times the target's and the draft's decode calls for batches of 1..16 tokens.
"""

from __future__ import annotations

import os
import platform
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from speculens.engine.adaptive import CostModel
from speculens.engine.backend import LlamaBackend
from speculens.engine.config import GenerationConfig, Strategy
from speculens.engine.drafters.base import Drafter
from speculens.engine.drafters.draft_model import DraftModelDrafter
from speculens.engine.drafters.ngram_cache import NgramCacheDrafter
from speculens.engine.events import FinishEvent, FinishReason, RunningStats, StepEvent, decode_rate
from speculens.engine.generate import generate
from speculens.engine.session import SpeculativeEngine
from speculens.engine.suite import BenchPrompt

SCHEMA = "speculens-bench/1"


# ---- the settings to compare ------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchSetting:
    """One way of decoding to compare.

    Attributes:
        strategy: the draft source (``none`` is plain decoding, the baseline).
        n_draft: the most tokens drafted per step.
        adaptive: the adaptive controller chooses the draft length.
    """

    strategy: Strategy
    n_draft: int = 8
    adaptive: bool = True

    @property
    def label(self) -> str:
        """A short unique name: ``none``, ``lookup/adaptive≤16``, ``draft/n=8``."""
        if self.strategy is Strategy.NONE:
            return "none"
        mode = f"adaptive≤{self.n_draft}" if self.adaptive else f"n={self.n_draft}"
        return f"{self.strategy.value}/{mode}"

    @property
    def is_plain(self) -> bool:
        """Whether this is the plain-decoding baseline."""
        return self.strategy is Strategy.NONE


def settings_for(
    strategies: Sequence[Strategy], modes: Sequence[str], n_draft: int, sweep: Sequence[int] = ()
) -> list[BenchSetting]:
    """The settings a benchmark compares: plain decoding first, then every strategy in every mode.

    Args:
        strategies: draft sources (``none`` is always included, first).
        modes: ``adaptive`` and/or ``fixed``.
        n_draft: the draft length of fixed runs and the bound of adaptive ones.
        sweep: fixed draft lengths to try instead of ``n_draft`` (adaptive runs use the largest as bound).

    Returns:
        The settings, without duplicates.
    """
    out = [BenchSetting(Strategy.NONE)]
    lengths = list(sweep) or [n_draft]
    for strategy in strategies:
        if strategy is Strategy.NONE:
            continue
        if "adaptive" in modes:
            out.append(BenchSetting(strategy, max(lengths), True))
        if "fixed" in modes:
            out.extend(BenchSetting(strategy, n, False) for n in lengths)
    unique: dict[str, BenchSetting] = {}
    for setting in out:
        unique.setdefault(setting.label, setting)
    return list(unique.values())


# ---- one run ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    """One timed generation.

    Attributes:
        tokens: the answer's token ids.
        n_generated: tokens emitted.
        elapsed_s: decoding wall time (prompt processing excluded).
        draft_s: time spent drafting (model decode calls and the drafter's own Python).
        verify_s: time in the target's decode calls.
        overhead_s: everything outside llama.cpp's decode calls.
        n_steps: target passes.
        n_drafted: tokens drafted.
        n_accepted: drafted tokens accepted.
        accepted_by_position: accepted counts per draft position.
        drafted_by_position: drafted counts per draft position.
        n_draft_chosen: the draft length asked for at each step (the adaptive controller's choices).
        n_probes: steps the controller speculated only to re-measure.
        n_ended: 1 when the answer ended on the target's end-of-generation token (see RunningStats).
        n_drafted_model: the tokens of ``n_drafted`` a draft model drafted for tokens, not as the controller's probe
            (the rest came from draft-free sources; a draft model sitting out still probes now and then).
    """

    tokens: tuple[int, ...]
    n_generated: int
    elapsed_s: float
    draft_s: float
    verify_s: float
    overhead_s: float
    n_steps: int
    n_drafted: int
    n_accepted: int
    accepted_by_position: tuple[int, ...] = ()
    drafted_by_position: tuple[int, ...] = ()
    n_draft_chosen: tuple[int, ...] = ()
    n_probes: int = 0
    n_ended: int = 0
    n_drafted_model: int = 0

    @property
    def tokens_per_second(self) -> float:
        """Decoded tokens per second (see :func:`decode_rate`)."""
        return decode_rate(self.n_generated, self.elapsed_s)

    @classmethod
    def from_stats(
        cls,
        tokens: Sequence[int],
        stats: RunningStats,
        chosen: Sequence[int] = (),
        n_probes: int = 0,
        n_drafted_model: int = 0,
    ) -> RunResult:
        """A result from a generation's final statistics."""
        return cls(
            tokens=tuple(tokens),
            n_generated=stats.n_generated,
            elapsed_s=stats.elapsed_s,
            draft_s=stats.draft_s,
            verify_s=stats.verify_s,
            overhead_s=stats.overhead_s,
            n_steps=stats.n_steps,
            n_drafted=stats.n_drafted,
            n_accepted=stats.n_accepted,
            accepted_by_position=stats.accepted_by_position,
            drafted_by_position=stats.drafted_by_position,
            n_draft_chosen=tuple(chosen),
            n_probes=n_probes,
            n_ended=stats.n_ended,
            n_drafted_model=n_drafted_model,
        )


def _drafters(engine: SpeculativeEngine, config: GenerationConfig, rng: np.random.Generator) -> list[Drafter]:
    # A fresh n-gram cache per run: the dynamic table would otherwise learn the answer from the earlier
    # repetitions of the same prompt and flatter the n-gram cache.
    return [
        NgramCacheDrafter(engine.fingerprint, None) if isinstance(d, NgramCacheDrafter) else d
        for d in engine.drafters(config, rng)
    ]


def run_once(
    engine: SpeculativeEngine,
    prompt: Sequence[int],
    config: GenerationConfig,
    drafters: Sequence[Drafter] | None = None,
    costs: CostModel | None = None,
    cancel: threading.Event | None = None,
) -> RunResult | None:
    """Generate once and collect the figures.

    Args:
        engine: the loaded engine (its KV caches keep the prompt between runs).
        prompt: the prompt's tokens.
        config: the generation settings.
        drafters: the draft sources (default: the engine's for the strategy, with a fresh n-gram cache).
        costs: the adaptive controller's cost model (default: the engine's).
        cancel: stops the run within a step; a stopped run returns ``None``.

    Returns:
        The run's result, or ``None`` when it was cancelled.
    """
    rng = np.random.default_rng(config.sampling.seed)
    if drafters is None:
        drafters = _drafters(engine, config, rng)
    chosen: list[int] = []
    probes = by_model = 0
    finish: FinishEvent | None = None
    events = generate(
        engine.target, drafters, prompt, config, rng, cancel, costs or engine.costs, engine.config.exact, engine.threads
    )
    for event in events:
        if isinstance(event, StepEvent):
            chosen.append(event.n_draft_max)
            probes += event.probe
            by_model += len(event.drafted) if event.source == DraftModelDrafter.name and not event.probe else 0
        elif isinstance(event, FinishEvent):
            finish = event
    assert finish is not None
    if finish.reason is FinishReason.CANCELLED:
        return None
    return RunResult.from_stats(finish.tokens, finish.stats, chosen, probes, by_model)


# ---- the arithmetic ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """One setting on one prompt, over its repeated runs.

    Attributes:
        tps_median: median tokens per second.
        tps_min: slowest run.
        tps_max: fastest run.
        spread: ``(max - min) / median`` of tokens per second.
        speedup: median tokens per second over plain decoding's median on the same prompt (``None`` when
            there is no plain baseline).
        speedup_spread: ``(max - min) / median`` of the speedups of each repetition (this setting's run over
            plain decoding's run of the same repetition): how much the speedup itself varies from run to run,
            to be set against plain decoding's own ``spread``, the machine's noise (``None`` without a
            baseline).
        passes_median: the median of target passes per run.
        passes_spread: ``(max - min) / median`` of target passes per run: how much the controller's choices
            varied between runs of the same answer. A speedup that spreads while its passes do not was the
            machine's speed moving under the same steps (the same greedy answer is the same work), not the
            controller following the noise.
        acceptance: accepted / drafted over all runs (``None``: nothing was drafted, which 0% would read as every
            draft rejected).
        mean_accepted_length: tokens emitted per target pass.
        acceptance_by_position: per draft position ``j``, the share of tokens drafted there that were
            accepted (a token at ``j`` is accepted only when the ones before it were).
        draft_share: drafting time (the draft model's decode calls and the drafter's own Python) over
            decoding time.
        verify_share: the target's decode time over decoding time.
        overhead_share: time outside llama.cpp's decode calls over decoding time: our own cost, which
            includes a drafter's Python time (so it overlaps ``draft_share`` by that much).
        identical: every run's tokens equal plain decoding's (``None`` without a baseline).
        mean_n_draft: the mean draft length asked for per step.
        n_runs: timed runs.
    """

    tps_median: float
    tps_min: float
    tps_max: float
    spread: float
    speedup: float | None
    speedup_spread: float | None
    passes_median: float
    passes_spread: float
    acceptance: float | None
    mean_accepted_length: float
    acceptance_by_position: tuple[float, ...]
    draft_share: float
    verify_share: float
    overhead_share: float
    identical: bool | None
    mean_n_draft: float
    n_runs: int


def _spread(values: Sequence[float]) -> float:
    """``(max - min) / median`` of repeated measurements (0 when the median is not positive)."""
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid if mid > 0 else 0.0


def summarise_runs(runs: Sequence[RunResult], plain: Sequence[RunResult] | None = None) -> Summary:
    """Summarise the repeated runs of one setting on one prompt.

    Args:
        runs: the timed runs (at least one).
        plain: plain decoding's runs on the same prompt (the baseline for speedup and identity).

    Returns:
        The summary.
    """
    if not runs:
        raise ValueError("no runs to summarise")
    tps = [r.tokens_per_second for r in runs]
    med = statistics.median(tps)
    elapsed = sum(r.elapsed_s for r in runs)
    drafted = sum(r.n_drafted for r in runs)
    accepted = sum(r.n_accepted for r in runs)
    steps = sum(r.n_steps for r in runs)
    width = max((len(r.drafted_by_position) for r in runs), default=0)
    by_pos = []
    for j in range(width):
        d = sum(r.drafted_by_position[j] for r in runs if j < len(r.drafted_by_position))
        a = sum(r.accepted_by_position[j] for r in runs if j < len(r.accepted_by_position))
        by_pos.append(a / d if d else 0.0)
    chosen = [k for r in runs for k in r.n_draft_chosen]
    passes = [float(r.n_steps) for r in runs]
    speedup = speedup_spread = identical = None
    if plain:
        base = statistics.median(p.tokens_per_second for p in plain)
        speedup = med / base if base > 0 else None
        # Repetition i of every setting ran beside plain decoding's run i (the order rotates within it).
        pairs = zip(runs, plain, strict=False)
        paired = [r.tokens_per_second / p.tokens_per_second for r, p in pairs if p.tokens_per_second > 0]
        if paired:
            mid = statistics.median(paired)
            speedup_spread = (max(paired) - min(paired)) / mid if mid > 0 else None
        identical = all(r.tokens == plain[0].tokens for r in runs)
    return Summary(
        tps_median=med,
        tps_min=min(tps),
        tps_max=max(tps),
        spread=_spread(tps),
        speedup=speedup,
        speedup_spread=speedup_spread,
        passes_median=statistics.median(passes),
        passes_spread=_spread(passes),
        acceptance=accepted / drafted if drafted else None,
        mean_accepted_length=sum(r.n_generated + r.n_ended for r in runs) / steps if steps else 0.0,
        acceptance_by_position=tuple(by_pos),
        draft_share=sum(r.draft_s for r in runs) / elapsed if elapsed > 0 else 0.0,
        verify_share=sum(r.verify_s for r in runs) / elapsed if elapsed > 0 else 0.0,
        overhead_share=sum(r.overhead_s for r in runs) / elapsed if elapsed > 0 else 0.0,
        identical=identical,
        mean_n_draft=sum(chosen) / len(chosen) if chosen else 0.0,
        n_runs=len(runs),
    )


@dataclass(frozen=True)
class OverallSummary:
    """One setting over the whole suite.

    Attributes:
        label: the setting's label.
        speedup_geomean: geometric mean of the per-prompt speedups.
        speedup_min: the worst prompt's speedup.
        speedup_max: the best prompt's speedup.
        tps_median_of_medians: median over prompts of the median tokens per second.
        acceptance: accepted / drafted over every run (``None``: nothing was drafted).
        overhead_share_max: the largest per-prompt overhead share.
        identical_all: every output on every prompt equals plain decoding's.
        n_prompts: prompts summarised.
        spread_median: the median over prompts of the spread of tokens per second across repeated runs
            (``(max - min) / median``): how stable the setting is; plain decoding's own is the machine's
            noise, against which a controller's stability is judged.
        speedup_spread_median: the median over prompts of the spread of the speedup across repetitions
            (``None`` without a baseline).
        passes_spread_median: the median over prompts of the spread of target passes per run (see
            :attr:`Summary.passes_spread`).
    """

    label: str
    speedup_geomean: float | None
    speedup_min: float | None
    speedup_max: float | None
    tps_median_of_medians: float
    acceptance: float | None
    overhead_share_max: float
    identical_all: bool | None
    n_prompts: int
    spread_median: float = 0.0
    speedup_spread_median: float | None = None
    passes_spread_median: float = 0.0


def overall(label: str, summaries: Sequence[Summary], acceptance: float | None = None) -> OverallSummary:
    """Combine one setting's per-prompt summaries.

    Args:
        label: the setting's label.
        summaries: one per prompt.
        acceptance: accepted / drafted over all its runs (computed by the caller from the counts).

    Returns:
        The suite-wide summary.
    """
    speedups = [s.speedup for s in summaries if s.speedup is not None]
    speedup_spreads = [s.speedup_spread for s in summaries if s.speedup_spread is not None]
    identical = [s.identical for s in summaries if s.identical is not None]
    return OverallSummary(
        label=label,
        speedup_geomean=float(np.exp(np.mean(np.log(speedups)))) if speedups else None,
        speedup_min=min(speedups) if speedups else None,
        speedup_max=max(speedups) if speedups else None,
        tps_median_of_medians=statistics.median(s.tps_median for s in summaries) if summaries else 0.0,
        acceptance=acceptance,
        overhead_share_max=max((s.overhead_share for s in summaries), default=0.0),
        identical_all=all(identical) if identical else None,
        n_prompts=len(summaries),
        spread_median=statistics.median(s.spread for s in summaries) if summaries else 0.0,
        speedup_spread_median=statistics.median(speedup_spreads) if speedup_spreads else None,
        passes_spread_median=statistics.median(s.passes_spread for s in summaries) if summaries else 0.0,
    )


# ---- the runner -------------------------------------------------------------------------------------------


@dataclass
class BenchResults:
    """Everything a benchmark measured.

    Attributes:
        prompts: the suite's prompts that were run.
        settings: the settings compared (plain decoding first).
        runs: ``runs[prompt_id][label]`` = the timed runs.
        n_prompt_tokens: prompt length per prompt id.
        config: how it was run (threads, max tokens, repeats, ...).
        profile: the machine's cost profile, when measured.
        cancelled: the suite was stopped before its end: ``runs`` holds what was timed before the stop (a stopped
            prompt's settings timed at least once).
    """

    prompts: list[BenchPrompt]
    settings: list[BenchSetting]
    runs: dict[str, dict[str, list[RunResult]]] = field(default_factory=dict)
    n_prompt_tokens: dict[str, int] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] | None = None
    cancelled: bool = False

    def summary(self, prompt_id: str, label: str) -> Summary:
        """The summary of one setting on one prompt."""
        by_label = self.runs[prompt_id]
        return summarise_runs(by_label[label], by_label.get("none"))

    def complete(self) -> list[str]:
        """The prompts measured with every setting (a stopped suite's last prompt may hold some of them only)."""
        labels = {s.label for s in self.settings}
        return [p.id for p in self.prompts if labels <= self.runs.get(p.id, {}).keys()]

    def overall(self, label: str) -> OverallSummary:
        """The suite-wide summary of one setting, over the :meth:`complete` prompts (counted for some settings and
        not others, the rows would not compare)."""
        ids = self.complete()
        runs = [r for i in ids for r in self.runs[i][label]]
        drafted = sum(r.n_drafted for r in runs)
        acceptance = sum(r.n_accepted for r in runs) / drafted if drafted else None
        return overall(label, [self.summary(i, label) for i in ids], acceptance)


Progress = Callable[[str], None]


def run_suite(
    engine: SpeculativeEngine,
    prompts: Sequence[BenchPrompt],
    settings: Sequence[BenchSetting],
    base: GenerationConfig,
    repeats: int = 3,
    warmup: int = 1,
    fresh_costs: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> BenchResults:
    """Run every setting on every prompt: warm-up runs, then ``repeats`` timed runs each.

    Within a prompt the settings run in turn, and the order rotates every repetition, so a slow moment of
    the machine is shared out rather than charged to one setting. All runs use ``base``'s seed, sampling and
    token budget; only the strategy, the draft length and the adaptive switch change.

    Args:
        engine: the loaded engine (with a draft model when ``draft`` is among the settings).
        prompts: the prompts.
        settings: the settings (plain decoding should be among them: it is the baseline).
        base: the shared generation settings.
        repeats: timed runs per setting and prompt.
        warmup: untimed runs per setting and prompt before the timed ones.
        fresh_costs: give the adaptive controller an empty cost model for every run, instead of the
            session's (which keeps what earlier runs measured, as the app does); the session's is put back
            after the suite, so what the engine saves at its close is what it measured, not the last run's.
        progress: called with a line of text before each run.
        cancel: stops the suite within a step: the results keep every setting timed on a prompt at least once,
            and say they were cancelled.

    Returns:
        The results.
    """
    results = BenchResults(list(prompts), list(settings))
    total = len(prompts) * len(settings) * (repeats + warmup)
    done = 0
    kept = engine.costs  # put back after the suite: the engine saves it at its close
    stop = cancel or threading.Event()  # never set when nothing can cancel the suite
    try:
        for prompt in prompts:
            if stop.is_set():
                break
            tokens = engine.target.format_chat(list(prompt.messages))
            results.n_prompt_tokens[prompt.id] = len(tokens)
            if not fresh_costs:  # as a generation of this prompt would run (fresh costs keep the load's setting)
                engine.fit_flash_attn(tokens, base.max_tokens)
            by_label: dict[str, list[RunResult]] = {s.label: [] for s in settings}
            for rep in range(warmup + repeats):
                shift = rep % len(settings)
                for setting in [*settings[shift:], *settings[:shift]]:
                    done += 1
                    kind = "warm-up" if rep < warmup else f"run {rep - warmup + 1}/{repeats}"
                    if progress is not None:
                        progress(f"[{done}/{total}] {prompt.id}: {setting.label} ({kind})")
                    if fresh_costs:
                        engine.costs = engine.new_costs()
                    config = replace(
                        base,
                        strategy=setting.strategy,
                        n_draft=setting.n_draft,
                        adaptive=setting.adaptive,
                    )
                    result = run_once(engine, tokens, config, cancel=stop)
                    if result is None:  # cancelled
                        break
                    if rep >= warmup:
                        by_label[setting.label].append(result)
                if stop.is_set():
                    break
            # A stopped prompt keeps the settings timed on it (a tour's bench stopped in its third run of sixteen kept
            # nothing, and its table read 0.00×); a speedup needs plain decoding's run beside it.
            if timed := {label: runs for label, runs in by_label.items() if runs}:
                results.runs[prompt.id] = timed
        results.cancelled = stop.is_set()
    finally:
        engine.costs = kept
    return results


def cost_profile(
    target: LlamaBackend, draft: LlamaBackend | None, max_batch: int = 16, repeats: int = 5, exact: bool = False
) -> dict[str, Any]:
    """Time the evaluation of ``k`` tokens (logits for all of them), ``k = 1..max_batch``, after a short
    context, for the target and the draft: the machine's price list for speculation. The target is timed as
    it verifies (split into its bit-exact call sizes when ``exact``), the draft as one decode call (its
    catch-up after plain steps).

    Args:
        target: the target model.
        draft: the draft model, if any.
        max_batch: the largest batch timed.
        repeats: calls per batch size (the median is kept).

    Returns:
        ``{"target": {"1": ms, ...}, "draft": {...}, "draft_over_target": ratio of single-token costs,
        "target_calls": the target's bit-exact decode-call sizes or None}``.
    """
    out: dict[str, Any] = {}
    for name, backend in (("target", target), ("draft", draft)):
        if backend is None:
            continue
        text = "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n"
        context = backend.tokenize(text * 8)
        backend.sync(context)
        n_past = backend.n_past
        filler = (context * (1 + max_batch // max(len(context), 1)))[:max_batch]
        backend.decode(filler[:4], range(4))  # warm the kernels
        backend.truncate(n_past)
        times: dict[str, float] = {}
        for k in range(1, max_batch + 1):
            samples = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                backend.decode(filler[:k], range(k), exact=exact and backend is target)
                samples.append(time.perf_counter() - t0)
                backend.truncate(n_past)
            times[str(k)] = 1e3 * statistics.median(samples)
        out[name] = times
    if "draft" in out:
        out["draft_over_target"] = out["draft"]["1"] / out["target"]["1"]
    out["target_calls"] = list(target.invariant_sizes) if exact else None
    return out


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on."""
    try:
        load: list[float] | None = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": load,
    }


def results_document(results: BenchResults) -> dict[str, Any]:
    """The JSON document of a benchmark (schema ``speculens-bench/1``).

    Returns:
        ``{"schema", "machine", "config", "settings", "prompts": [{"id", "category", "n_prompt",
        "results": {label: {"summary", "runs"}}}], "overall": {label: ...}, "profile"}``.
    """
    prompts = []
    for p in results.prompts:
        if p.id not in results.runs:
            continue
        per_label = {}
        for s in results.settings:
            runs = results.runs[p.id].get(s.label)
            if not runs:
                continue
            per_label[s.label] = {
                "summary": asdict(results.summary(p.id, s.label)),
                "runs": [
                    {
                        **{k: v for k, v in asdict(r).items() if k not in ("tokens", "n_draft_chosen")},
                        "tokens_per_second": r.tokens_per_second,
                        "n_draft_chosen_histogram": _histogram(r.n_draft_chosen),
                    }
                    for r in runs
                ],
            }
        n_prompt = results.n_prompt_tokens.get(p.id)
        prompts.append({"id": p.id, "category": p.category, "n_prompt": n_prompt, "results": per_label})
    return {
        "schema": SCHEMA,
        "machine": machine_info(),
        "config": results.config,
        "settings": [
            {"label": s.label, "strategy": s.strategy.value, "n_draft": s.n_draft, "adaptive": s.adaptive}
            for s in results.settings
        ],
        "prompts": prompts,
        "overall": {s.label: asdict(results.overall(s.label)) for s in results.settings},
        "profile": results.profile,
        "cancelled": results.cancelled,
    }


def _histogram(values: Sequence[int]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in values:
        counts[str(v)] = counts.get(str(v), 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: int(kv[0])))
