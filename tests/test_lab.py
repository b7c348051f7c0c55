"""The pair lab's core on tiny generated models: candidates, ranking, cancel, skipping, saving, the CLI."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import TinyModels
from speculens.engine.config import Strategy
from speculens.lab import (
    PLAIN,
    Candidate,
    CostProfile,
    LabProgress,
    LabSettings,
    PairLab,
    estimate,
    lab_prompts,
    list_candidates,
    load_saved,
    save,
    theoretical_speedup,
)
from speculens.models.library import Library
from speculens.models.synthetic import TinyModelSpec, write_tiny_model

# One thread: llama.cpp's threads spin at their barriers, so on a busy machine two threads can slow down a
# hundredfold and swamp the differences the ranking test looks at; one thread only slows in proportion.
QUICK = LabSettings(n_ctx=512, n_threads=1, max_tokens=24, budget_s=0.0, min_rounds=1, max_rounds=1)


@pytest.fixture()
def library(tiny: TinyModels, tmp_path: Path) -> Library:
    lib = Library()
    unrelated = write_tiny_model(tmp_path / "tiny-unrelated.gguf", TinyModelSpec(seed=9, name="tiny-unrelated"))
    for path in (tiny.target, tiny.identical, tiny.perturbed, tiny.mismatch, unrelated):
        lib.add(path)
    return lib


def test_candidates_list_every_draft_and_say_why_one_cannot_run(tiny: TinyModels, library: Library) -> None:
    candidates = {c.key: c for c in list_candidates(tiny.target, library, n_ctx=512)}
    assert next(iter(candidates)) == PLAIN.key and {"lookup", "ngram-cache", "auto"} <= set(candidates)
    for draft in (tiny.identical, tiny.perturbed):
        assert candidates[f"draft:{draft.name}"].runnable and candidates[f"auto:{draft.name}"].runnable
    mismatch = candidates[f"draft:{tiny.mismatch.name}"]
    assert not mismatch.runnable and "tokenizer mismatch" in (mismatch.problem or "").lower()
    assert f"auto:{tiny.mismatch.name}" not in candidates
    assert f"draft:{tiny.target.name}" not in candidates  # never its own draft


def test_the_lab_ranks_identical_weights_above_a_perturbed_and_an_unrelated_draft(
    tiny: TinyModels, library: Library
) -> None:
    drafts = [c for c in list_candidates(tiny.target, library, n_ctx=512) if c.strategy is Strategy.DRAFT]
    lab = PairLab(tiny.target, drafts, lab_prompts(["chat", "code-generation"]), replace(QUICK, sweep=(4,)))
    result = lab.run()
    assert f"draft:{tiny.mismatch.name}" in lab.skipped  # listed, never run
    for kind in ("chat", "code-generation"):
        rows = result.rows[kind]
        assert f"draft:{tiny.mismatch.name}" not in rows
        fixed = [
            rows[f"draft:{name}/k=4"] for name in (tiny.identical.name, tiny.perturbed.name, "tiny-unrelated.gguf")
        ]
        identical, perturbed, unrelated = fixed
        assert identical.acceptance == 1.0 and identical.identical
        # The count the acceptance is of: every pass drafts, so most of the answers' tokens were drafted ones.
        drafted = identical.drafted
        assert drafted is not None and QUICK.max_tokens // 2 < drafted <= identical.runs * QUICK.max_tokens
        # Acceptance orders all three exactly; timings of models this small are a few milliseconds, so only the
        # wide gap (every draft accepted against almost none) is asserted on speed.
        assert identical.mean_accepted_length > perturbed.mean_accepted_length > unrelated.mean_accepted_length
        assert (identical.speedup or 0) > (unrelated.speedup or 0)
        assert [r.key for r in result.ranking(kind)].index(identical.key) < [r.key for r in result.ranking(kind)].index(
            unrelated.key
        )
    # Every draft's cost was measured before anything ran.
    est = result.estimates[f"draft:{tiny.identical.name}"]
    assert est.cost_ratio is not None and est.cost_ratio > 0


def test_cancel_mid_run_keeps_what_was_measured(tiny: TinyModels, library: Library) -> None:
    candidates = [c for c in list_candidates(tiny.target, library, n_ctx=512) if c.key in ("lookup", "ngram-cache")]
    cancel = threading.Event()
    seen: list[LabProgress] = []

    def progress(p: LabProgress) -> None:
        seen.append(p)
        if p.done >= 4:
            cancel.set()

    lab = PairLab(tiny.target, candidates, lab_prompts(["chat", "code-generation", "code-rewrite"]), QUICK, cancel)
    result = lab.run(progress)
    assert result.cancelled
    assert 4 <= len(seen) < 3 * 5  # stopped well before the 15 runs of a round
    assert result.rows  # the first prompts' figures are kept
    assert all(p.total >= p.done for p in seen) and seen[-1].elapsed_s > 0
    # The prompt it stopped in had its first candidate measured before plain decoding (the order rotates): that
    # run is kept, with its speed but without a speedup or an output comparison.
    stopped_in = [r for r in result.rows.get("code-generation", {}).values()]
    assert stopped_in and all(r.tokens_per_second > 0 for r in stopped_in)
    assert all(r.speedup is None and r.identical is None for r in stopped_in)


def test_cancel_before_the_first_run_ends_measures_no_kind(tiny: TinyModels, library: Library) -> None:
    """A kind with no run ended has no rows (an empty one made the window save the result, dated anew)."""
    candidates = [c for c in list_candidates(tiny.target, library, n_ctx=512) if c.key == "lookup"]
    cancel = threading.Event()
    lab = PairLab(tiny.target, candidates, lab_prompts(["chat"]), QUICK, cancel)
    result = lab.run(lambda p: cancel.set())
    assert result.cancelled and result.profile is not None and result.rows == {}


def test_cancel_while_loading_stops_at_once_and_frees_the_drafts(
    tiny: TinyModels, library: Library, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel while the lab loads and times its drafts stopped only once they were all loaded (seconds, on a
    first load): it now stops within a decode call, for an estimate and a run alike, and says nothing was
    measured."""
    import speculens.lab as lab_module

    candidates = [c for c in list_candidates(tiny.target, library, n_ctx=512) if c.strategy is Strategy.DRAFT]
    cancel = threading.Event()
    timed: list[object] = []
    original = lab_module.calibrate_draft

    def cancelled_meanwhile(*args, **kwargs):  # type: ignore[no-untyped-def]
        cancel.set()  # the user presses Cancel while the first draft is timed
        timed.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(lab_module, "calibrate_draft", cancelled_meanwhile)
    lab = PairLab(tiny.target, candidates, lab_prompts(["chat"]), QUICK, cancel)
    for method in (lab.estimate, lab.run):
        cancel.clear()
        timed.clear()
        result = method()  # type: ignore[operator]
        assert result.cancelled and result.profile is None and result.rows == {}
        assert len(timed) == 1 and lab._by_file == {}  # no draft timed after the cancel, every one freed


def test_a_draft_that_cannot_draft_is_never_run_even_if_listed_as_runnable(tiny: TinyModels) -> None:
    sneaky = Candidate(f"draft:{tiny.mismatch.name}", "Mismatched", Strategy.DRAFT, tiny.mismatch)
    lab = PairLab(tiny.target, [sneaky], lab_prompts(["chat"]), QUICK)
    result = lab.run()
    assert "token texts differ" in lab.skipped[sneaky.key]
    assert sneaky.key not in result.rows["chat"] and PLAIN.key in result.rows["chat"]


def test_results_are_saved_per_target_reloaded_and_accumulate(tiny: TinyModels, library: Library) -> None:
    candidates = list_candidates(tiny.target, library, n_ctx=512)
    first = PairLab(tiny.target, [c for c in candidates if c.key == "lookup"], lab_prompts(["chat"]), QUICK).run()
    save(first, tiny.target)
    second = PairLab(tiny.target, [c for c in candidates if c.key == "ngram-cache"], lab_prompts(["chat"]), QUICK).run()
    save(second, tiny.target)
    saved = load_saved(tiny.target)
    assert saved is not None
    assert {"none", "lookup", "ngram-cache"} <= set(saved.rows["chat"])
    assert saved.rows["chat"]["lookup"] == first.rows["chat"]["lookup"]  # kept, with its own date
    assert saved.rows["chat"]["ngram-cache"] == second.rows["chat"]["ngram-cache"]
    assert saved.llama_build and saved.date == second.date
    assert saved.recommendation() and all(s.startswith("For chat") for s in saved.recommendation())
    assert "lookup" in saved.to_csv().lower() or "prompt lookup" in saved.to_csv().lower()
    assert load_saved(tiny.perturbed) is None


def test_estimates_follow_leviathans_formula() -> None:
    profile = CostProfile(0.1, {1: 1.0, 2: 1.1, 4: 1.3, 8: 1.8}, {"draft:cheap": 0.05, "draft:dear": 1.2})
    # Every draft accepted: k + 1 tokens for k draft calls and one verification of k + 1.
    assert theoretical_speedup(1.0, 3, 0.05, profile) == pytest.approx(4 / (0.15 + 1.3))
    assert theoretical_speedup(0.0, 3, 0.05, profile) == pytest.approx(1 / (0.15 + 1.3))
    cheap = estimate(Candidate("draft:cheap", "cheap", Strategy.DRAFT), profile)
    dear = estimate(Candidate("draft:dear", "dear", Strategy.DRAFT), profile)
    assert not cheap.hopeless and cheap.breakeven is not None and 0.0 < cheap.breakeven < 0.5
    assert dear.hopeless and dear.breakeven is None and "cannot win" in dear.text
    free = estimate(Candidate("lookup", "lookup", Strategy.LOOKUP), profile)
    assert free.cost_ratio == 0.0 and free.best[0.9][1] > cheap.best[0.9][1]


def test_a_draft_model_that_pays_only_at_full_acceptance_is_hopeless_as_the_engine_says() -> None:
    # Batch costs measured on this project's 2-core VM; a draft token at 0.43 of a target step wins only if every
    # one of 15 drafted tokens is accepted, which the engine's controller never grants a draft model (99%).
    profile = CostProfile(0.03, {1: 1.0, 2: 1.97, 4: 3.33, 8: 7.41, 16: 8.99}, {"draft:near": 0.43})
    assert max(theoretical_speedup(1.0, k, 0.43, profile) for k in range(1, 17)) > 1.0
    assert max(theoretical_speedup(0.99, k, 0.43, profile) for k in range(1, 17)) < 1.0
    near = estimate(Candidate("draft:near", "near", Strategy.DRAFT), profile)
    assert near.hopeless and near.breakeven is None and "99% of its tokens accepted" in near.text
    auto = estimate(Candidate("draft:near", "auto", Strategy.AUTO), profile)
    assert not auto.hopeless and "its draft model" in auto.text and "cannot win here" in auto.text


def test_the_cli_ranks_and_writes_json_and_csv(tiny: TinyModels, tmp_path: Path) -> None:
    out, table = tmp_path / "lab.json", tmp_path / "lab.csv"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "speculens.cli",
            "lab",
            "-m",
            str(tiny.target),
            "--kinds",
            "chat",
            "--budget",
            "0",
            "--rounds",
            "1",
            "--max-tokens",
            "12",
            "--ctx",
            "512",
            "--only",
            "none,lookup",
            "--json",
            str(out),
            "--csv",
            str(table),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Chat" in proc.stdout and "Prompt lookup" in proc.stdout and "For chat" in proc.stdout
    assert " drafted " in proc.stdout  # the count the acceptance is of
    # Said before the runs, as the app says it: a round runs in full, whatever the budget (a tour's took 109 s of 60).
    assert "one round, which runs in full whatever --budget: 2 runs of up to 12 tokens" in proc.stderr
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["schema"] == "speculens-lab/1" and set(doc["kinds"]["chat"]) == {"none", "lookup"}
    assert table.read_text(encoding="utf-8").splitlines()[0].startswith("kind,candidate,tokens_per_second")
    assert doc["kinds"]["chat"]["none"]["drafted"] == 0
    assert f"wrote {out}" in proc.stderr and f"wrote {table}" in proc.stderr  # said, as bench says its file
    bad = subprocess.run(
        [sys.executable, "-m", "speculens.cli", "lab", "-m", str(tiny.target), "--only", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "no such candidates" in bad.stderr


def test_the_recommendation_prefers_the_simplest_of_candidates_within_the_noise() -> None:
    from speculens.lab import LabResult, Row

    def row(key: str, speedup: float) -> Row:
        return Row(key, key, 10.0 * speedup, speedup, 0.9, 2.0, 4.0, True, 3, "2026-01-01")

    candidates = {
        "none": PLAIN,
        "auto": Candidate("auto", "Automatic", Strategy.AUTO),
        "auto:d": Candidate("auto:d", "Automatic with d", Strategy.AUTO, Path("d.gguf")),
    }
    rows = {"code-rewrite": {"none": row("none", 1.0), "auto": row("auto", 1.40), "auto:d": row("auto:d", 1.42)}}
    result = LabResult("t.gguf", rows=rows, candidates=candidates)
    best = result.overall_best()
    assert best is not None and best.key == "auto"  # 1.42 vs 1.40 is noise; no draft model to load
    rows["code-rewrite"]["auto:d"] = row("auto:d", 1.60)
    assert result.overall_best().key == "auto:d"  # a real gain is worth the draft model
    rows["code-rewrite"] = {k: row(k, 1.01) for k in rows["code-rewrite"]}
    assert result.overall_best().key == "none"  # nothing beats plain decoding by more than the noise


def test_a_draft_model_that_drafted_nothing_does_not_win_on_noise_over_its_strategy_without_it() -> None:
    """From a tour: "For code rewrite, use Automatic with qwen…: ×1.64" beside Automatic's ×1.47, where the draft
    model had drafted nothing and both had drafted alike, from prompt lookup."""
    from speculens.lab import LabResult, Row

    def row(key: str, speedup: float, model_drafted: int | None) -> Row:
        label = candidates[key].label
        return Row(key, label, 10 * speedup, speedup, 0.98, 3.0, 3.0, True, 4, "2026-01-01", None, 1, model_drafted)

    candidates = {
        "none": PLAIN,
        "auto": Candidate("auto", "Automatic", Strategy.AUTO),
        "auto:d": Candidate("auto:d", "Automatic with d", Strategy.AUTO, Path("d.gguf")),
    }
    rows = {"code-rewrite": {"none": row("none", 1.0, None), "auto": row("auto", 1.47, 0),
                             "auto:d": row("auto:d", 1.64, 0)}}  # fmt: skip
    result = LabResult("t.gguf", rows=rows, candidates=candidates)
    assert result.best("code-rewrite").key == "auto" and result.overall_best().key == "auto"
    said = " ".join(result.recommendation())
    assert "use Automatic: ×1.47" in said
    assert "Automatic with d is left out: its draft model drafted nothing, so it drafted as Automatic did" in said
    # Where its draft model did draft, the gain is its own; and a row saved before the count existed is as it was.
    for drafted in (120, None):
        rows["code-rewrite"]["auto:d"] = row("auto:d", 1.64, drafted)
        assert result.overall_best().key == "auto:d" and "left out" not in " ".join(result.recommendation())
    # Without the strategy's own row to stand for it, its figure is all there is.
    rows["code-rewrite"] = {"none": row("none", 1.0, None), "auto:d": row("auto:d", 1.64, 0)}
    assert result.overall_best().key == "auto:d"


def test_a_saved_row_with_a_field_of_a_later_version_is_read_not_taken_for_damage(tiny, tmp_path: Path) -> None:
    """A file written by a later version, read by this one, was taken for damaged, and the next save overwrote the
    whole history."""
    from speculens.lab import LabResult, Row, load_saved, results_path, save

    row = Row("none", "Plain decoding", 10.0, 1.0, None, 1.0, 0.0, True, 2, "2026-12-07T19:00:00", model_drafted=0)
    save(LabResult(tiny.target.name, rows={"chat": {"none": row}}, candidates={"none": PLAIN}), tiny.target)
    path = results_path(tiny.target)
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["kinds"]["chat"]["none"]["a_later_field"] = 3
    path.write_text(json.dumps(doc), encoding="utf-8")
    saved = load_saved(tiny.target)
    assert saved is not None and saved.rows["chat"]["none"] == row
    assert "model_drafted" in saved.to_csv().splitlines()[0]


def test_a_busy_machine_marks_the_figures_noisy() -> None:
    from speculens.engine.bench import RunResult
    from speculens.lab import _noise, _others_busy, lab_prompts

    prompts = lab_prompts(["chat"])

    def runs(*tps: float) -> dict[str, dict[str, list[RunResult]]]:
        return {prompts[0].id: {"none": [RunResult((), 100, 100 / t, 0, 0, 0, 100, 0, 0) for t in tps]}}

    # Judged as on two CPUs (conftest): two threads take both.
    assert "other programs used 60%" in (_noise(0.6, 2, prompts, runs(10.0, 10.1)) or "")
    assert _noise(0.6, 1, prompts, runs(10.0, 10.1)) is None  # beside one thread, a CPU to spare
    assert _noise(0.05, 2, prompts, runs(10.0, 10.1)) is None
    assert "varied by 26%" in (_noise(0.05, 2, prompts, runs(10.0, 13.0)) or "")
    share = _others_busy(0.05)
    assert share is None or 0.0 <= share <= 1.0  # a share of the CPUs


def test_a_speedup_no_target_pass_can_give_marks_its_row_and_is_never_recommended() -> None:
    """One round has no spread to tell a slowed plain run by: a candidate 2.7x faster than plain decoding at 1.07
    tokens per target pass can only mean plain decoding was slowed. Its row says so and is left out."""
    from speculens.engine.bench import RunResult
    from speculens.lab import LabResult, _summarise, lab_prompts

    prompts = lab_prompts(["chat"])
    candidates = [PLAIN, Candidate("lookup", "Prompt lookup", Strategy.LOOKUP)]

    def summary(plain_tps: float) -> LabResult:
        runs = {
            prompts[0].id: {
                "none": [RunResult((), 100, 100 / plain_tps, 0, 0, 0, 100, 0, 0)],
                "lookup": [RunResult((), 107, 107 / 27.7, 0, 0, 0, 100, 10, 7)],
            }
        }
        rows = _summarise(prompts, candidates, runs, "2026-01-01")
        return LabResult("t.gguf", rows=rows, candidates={c.key: c for c in candidates})

    slowed = summary(10.1)
    row = slowed.rows["chat"]["lookup"]
    assert row.noisy is not None and "×2.74 over plain decoding with 1.07 tokens per target pass" in row.noisy
    # Plain decoding alone is left, and it is the figure that was slowed: nothing is recommended.
    assert slowed.best("chat") is None and slowed.overall_best() is None
    table = list(csv.DictReader(io.StringIO(slowed.to_csv())))
    assert table[-1]["noisy"] == row.noisy and table[-1]["drafted"] == str(row.drafted)
    assert [r.key for r in slowed.ranking("chat")] == ["none", "lookup"]
    words = " ".join(slowed.recommendation())
    assert "left out as faster than their tokens per target pass can make them: Prompt lookup (×2.74 at" in words
    assert "plain decoding is fastest" not in words
    fair = summary(23.0)  # ×1.19: within what 1.07 tokens per pass can give
    assert fair.rows["chat"]["lookup"].noisy is None and fair.best("chat").key == "lookup"


def test_a_result_saved_before_rows_were_checked_is_checked_when_loaded() -> None:
    """From a tour: a result saved before the check recommended prompt lookup at ×2.86 with 1.07 tokens per pass,
    without a word of warning."""
    from speculens.lab import LabResult, Row

    rows = {
        "chat": {
            "none": Row("none", "Plain decoding", 10.0, 1.0, None, 1.0, 0.0, True, 1, "2026-11-27T22:42"),
            "lookup": Row("lookup", "Prompt lookup", 28.6, 2.86, 0.7, 1.07, 4.0, True, 1, "2026-11-27T22:42"),
            "auto": Row("auto", "Automatic", 14.0, 1.4, 0.8, 1.9, 4.0, True, 1, "2026-11-27T22:42"),
        }
    }
    candidates = {
        "none": PLAIN,
        "lookup": Candidate("lookup", "Prompt lookup", Strategy.LOOKUP),
        "auto": Candidate("auto", "Automatic", Strategy.AUTO),
    }
    doc = LabResult("t.gguf", rows=rows, candidates=candidates).to_document()
    for row in doc["kinds"]["chat"].values():
        del row["noisy"]  # what the older version wrote
    old = LabResult.from_document(doc)
    assert old.rows["chat"]["lookup"].noisy is not None and old.rows["chat"]["auto"].noisy is None
    assert old.best("chat").key == "auto"
    # A row measured with the check keeps what it found (here: nothing, whatever its figures say).
    doc["kinds"]["chat"]["lookup"]["noisy"] = None
    assert LabResult.from_document(doc).best("chat").key == "lookup"


def test_a_candidate_that_never_drafted_or_a_single_run_does_not_make_a_recommendation() -> None:
    """From a user tour: a lab run cancelled after one run each recommended prompt lookup at ×1.13 on chat,
    where it had drafted nothing at all (plain decoding under another name, and a VM's noise)."""
    from speculens.lab import LabResult, Row

    def row(key: str, speedup: float, acceptance: float | None, runs: int = 3) -> Row:
        return Row(key, key, 10.0 * speedup, speedup, acceptance, 1.0, 0.0, True, runs, "2026-01-01")

    candidates = {"none": PLAIN, "lookup": Candidate("lookup", "Prompt lookup", Strategy.LOOKUP)}
    rows = {"chat": {"none": row("none", 1.0, None), "lookup": row("lookup", 1.13, None)}}
    result = LabResult("t.gguf", rows=rows, candidates=candidates)
    assert result.overall_best().key == "none" and result.best("chat").key == "none"
    assert "no candidate found anything worth drafting" in result.recommendation()[0]
    assert [r.key for r in result.ranking("chat")] == ["none", "lookup"]  # nor does it top the table
    # Drafting, but one run each: a gain within this machine's noise is not a recommendation...
    rows["chat"] = {"none": row("none", 1.0, None, runs=1), "lookup": row("lookup", 1.13, 0.4, runs=1)}
    assert result.overall_best().key == "none"
    assert "one run each" in result.recommendation()[0]
    # From the tour of 2026-11-28: "plain decoding is fastest" beside a table where it was the slowest.
    said = result.recommendation()[0]
    assert "plain decoding is fastest" not in said and "no choice is clearly faster than plain decoding" in said
    # ... a larger one is, and so is the same gain measured in several runs.
    rows["chat"]["lookup"] = row("lookup", 1.40, 0.8, runs=1)
    assert result.overall_best().key == "lookup"
    rows["chat"] = {"none": row("none", 1.0, None), "lookup": row("lookup", 1.13, 0.4)}
    assert result.overall_best().key == "lookup"


def test_the_settled_draft_length_is_that_of_the_steps_that_drafted() -> None:
    """From a user tour: lookup drafted at 94% acceptance on a rewrite, yet its 'draft length' read 0, the median
    over every late step, most of them plain (between the copies)."""
    from speculens.engine.bench import RunResult
    from speculens.lab import _summarise, lab_prompts

    prompts = lab_prompts(["code-rewrite"])[:1]
    chosen = (0,) * 40 + (0, 0, 0, 8, 0, 0, 16, 0, 0, 8) * 4
    runs = {
        prompts[0].id: {
            "none": [RunResult((1,), 100, 10.0, 0, 9.5, 0.5, 100, 0, 0)],
            "lookup": [RunResult((1,), 100, 8.0, 0.1, 7.4, 0.5, 70, 40, 37, n_draft_chosen=chosen)],
        }
    }
    lookup = Candidate("lookup", "Prompt lookup", Strategy.LOOKUP)
    rows = _summarise(prompts, [PLAIN, lookup], runs, "2026-01-01")["code-rewrite"]
    assert rows["lookup"].settled_n_draft == 8.0 and rows["lookup"].acceptance == pytest.approx(37 / 40)
    assert rows["none"].settled_n_draft == 0.0  # plain decoding never drafts


def test_the_eta_is_paced_by_the_runs_not_by_loading(
    tiny: TinyModels, library: Library, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loading and profiling take two seconds here, each run a small fraction of that: the time left after the
    # first runs must not be read at two seconds a run.
    real = PairLab._profile_into

    def slow_profile(self: PairLab, *args: object) -> None:
        time.sleep(2.0)
        real(self, *args)

    monkeypatch.setattr(PairLab, "_profile_into", slow_profile)
    candidates = [c for c in list_candidates(tiny.target, library, n_ctx=512) if c.key in ("lookup", "ngram-cache")]
    seen: list[LabProgress] = []
    result = PairLab(tiny.target, candidates, lab_prompts(["chat", "code-generation"]), QUICK).run(seen.append)
    first = next(p for p in seen if p.done == 2)
    assert first.elapsed_s > 2.0
    assert first.eta_s < 0.5 * (first.total - first.done)  # not elapsed / done per run: over 1 s a run
    # Before any run has ended, a time left all the same: the cost profile's plain decoding pace (a tour's first
    # run, on a busy machine, showed "0 of 20 runs" and no time for two minutes).
    start = seen[0]
    assert start.done == 0 and start.eta_s > 0
    assert result.profile is not None
    assert start.eta_s == pytest.approx(start.total * QUICK.max_tokens * result.profile.target_step_s, rel=1e-6)


def test_applying_a_recommendation_sets_what_the_lab_ran() -> None:
    """From the tour of 2026-12-05: applying "Automatic (lookup + n-gram cache)" kept the draft model in the pair and
    the n_draft of 4 the user had set, where the lab had run without a draft model and at its default length."""
    from speculens.engine.config import DEFAULT_N_DRAFT, Strategy
    from speculens.lab import LabResult, Row, settings_to_apply

    draft = Path("/models/draft.gguf")
    cands = [
        Candidate("auto", "Automatic (lookup + n-gram cache)", Strategy.AUTO),
        Candidate("auto+d", "Automatic with draft", Strategy.AUTO, draft=draft, n_gpu_layers_draft=-1),
        Candidate("draft/k=6", "Draft model, n_draft=6", Strategy.DRAFT, draft=draft, n_draft=6),
        Candidate("lookup", "Prompt lookup", Strategy.LOOKUP),
    ]
    result = LabResult("t.gguf", candidates={c.key: c for c in cands})

    def applied(key: str) -> dict[str, object]:
        return settings_to_apply(Row(key, key, 10.0, 1.2, 0.9, 2.0, 4.0, True, 1, "2026-12-05"), result)

    assert applied("auto") == {"strategy": "auto", "n_draft": DEFAULT_N_DRAFT, "adaptive": True, "draft_path": ""}
    assert applied("auto+d")["draft_path"] == str(draft) and applied("auto+d")["n_gpu_layers_draft"] == -1
    assert applied("draft/k=6") | {"draft_path": None} == {
        "strategy": "draft", "n_draft": 6, "adaptive": False, "draft_path": None, "n_gpu_layers_draft": 0,
    }  # fmt: skip
    assert "draft_path" not in applied("lookup")  # a draft-free strategy leaves the pair's draft alone


def test_kinds_of_text_are_known_by_their_ids_and_by_the_names_the_app_shows() -> None:
    """From the tour of 2026-12-06: `lab --kinds summary` (the app's "Summary") was refused."""
    from speculens.errors import InvalidInputError
    from speculens.words import duration

    by_id = [p.id for p in lab_prompts(["summarisation", "code-rewrite"])]
    assert by_id and [p.id for p in lab_prompts(["summary", "Code rewrite"])] == by_id
    with pytest.raises(InvalidInputError, match="unknown kinds of text: nope"):
        lab_prompts(["nope"])
    assert (duration(20), duration(89), duration(300)) == ("20 s", "89 s", "5 min")  # never "about 0 min left"


def test_the_cli_report_names_each_candidate_whole() -> None:
    """From a new-user tour: "Automatic with qwen2.5-coder-0.5b-instruct-q4_" (names cut at 46 characters)."""
    from speculens.cli.lab_cmd import report
    from speculens.lab import LabResult, Row

    name = "Automatic with qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    candidates = {"none": PLAIN, "auto:d": Candidate("auto:d", name, Strategy.AUTO, Path("d.gguf"))}
    rows = {
        "chat": {
            "none": Row("none", PLAIN.label, 10.0, 1.0, None, 1.0, 0.0, None, 3, "2026-01-01"),
            "auto:d": Row("auto:d", name, 12.0, 1.2, 0.9, 2.0, 4.0, True, 3, "2026-01-01"),
        }
    }
    said = report(LabResult("t.gguf", rows=rows, candidates=candidates))
    line = next(line for line in said.splitlines() if "12.00" in line)
    assert line.split()[:5] == ["Automatic", "with", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "12.00", "×1.20"]
    header = next(line for line in said.splitlines() if "candidate" in line)
    assert header.index("tok/s") + len("tok/s") == line.index("12.00") + len("12.00")  # the columns still line up


def test_plain_decoding_recommended_from_text_that_does_not_repeat_says_what_apply_gives_up() -> None:
    """From a new-user tour: the lab, run on one line of the user's own text, recommended plain decoding, and Apply
    set it for every answer, where Automatic ran the tour's next rename 1.28 times faster than plain decoding."""
    from speculens.lab import LabResult, Row

    def row(key: str, speedup: float) -> Row:
        return Row(key, key, 10.0 * speedup, speedup, 0.1, 1.1, 2.0, True, 3, "2026-01-01")

    candidates = {"none": PLAIN, "lookup": Candidate("lookup", "Prompt lookup", Strategy.LOOKUP)}
    rows = {"custom": {"none": row("none", 1.0), "lookup": row("lookup", 0.97)}}
    result = LabResult("t.gguf", rows=rows, candidates=candidates)
    assert result.overall_best().key == "none"
    caution = result.plain_caution()
    assert caution is not None and caution.startswith("Measured on your text only: on text that repeats itself")
    rows["code-rewrite"] = {"none": row("none", 1.0)}  # stopped before anything but plain decoding ran on it
    assert result.plain_caution() is not None
    rows["code-rewrite"] = {"none": row("none", 1.0), "lookup": row("lookup", 0.98)}
    assert result.plain_caution() is None  # measured on a rewrite too: plain decoding it is
    del rows["code-rewrite"]
    rows["custom"]["lookup"] = row("lookup", 1.5)
    assert result.plain_caution() is None  # not recommending plain decoding


def test_the_cli_takes_a_draft_by_its_library_id(tiny: TinyModels, library: Library, capsys) -> None:  # type: ignore[no-untyped-def]
    """From a new-user tour: lab's keys named drafts by file (draft:qwen2.5-coder-0.5b-instruct-q4_k_m.gguf) where
    every other command takes the library id (qwen-0.5b)."""
    from speculens.cli.__main__ import main
    from speculens.cli.lab_cmd import _by_file

    entry = library.get(str(tiny.perturbed))
    assert entry is not None and entry.id != tiny.perturbed.name
    known = {c.key for c in list_candidates(tiny.target, library, n_ctx=512)}
    assert _by_file(f"draft:{entry.id}", known, library) == f"draft:{tiny.perturbed.name}"
    assert _by_file(f"auto:{entry.id}@ngl=0", known, library) == f"auto:{tiny.perturbed.name}@ngl=0"
    assert _by_file("draft:nothing-like-it", known, library) == "draft:nothing-like-it"  # said unknown by the caller
    assert main(["lab", "-m", str(tiny.target), "--ctx", "512", "--list"]) == 0
    listed = capsys.readouterr().out
    assert f"draft:{tiny.perturbed.name}" in listed and f"(or draft:{entry.id})" in listed


def test_the_cli_leaves_out_a_draft_as_large_as_the_target_unless_named(
    tiny: TinyModels, library: Library, capsys  # type: ignore[no-untyped-def]
) -> None:
    """As the app ticks them: a draft not smaller than the target can only lose, so a run without --only leaves it
    out and says so (a tour's lab would have loaded the 1.5B as a draft for the 0.5B, twice)."""
    from speculens.cli.__main__ import main

    entry = library.get(str(tiny.perturbed))
    assert entry is not None
    base = ["lab", "-m", str(tiny.target), "--kinds", "chat", "--budget", "0", "--rounds", "1", "--max-tokens", "4"]
    assert main([*base, "--ctx", "512", "--no-save"]) == 0
    said = capsys.readouterr()
    assert f"left out draft:{tiny.perturbed.name}: not smaller than the target" in said.err
    assert "4 runs of up to 4 tokens" in said.err  # plain decoding and the three draft-free strategies
    assert main([*base, "--ctx", "512", "--no-save", "--only", f"none,draft:{entry.id}"]) == 0
    said = capsys.readouterr()
    assert "left out" not in said.err and "2 runs of up to 4 tokens" in said.err


@pytest.mark.skipif(not hasattr(time, "tzset"), reason="time.tzset is Unix-only")
def test_the_lab_s_times_read_in_local_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tour read the Pair lab's "Measured" times, saved and shown in UTC, as local ones."""
    from speculens.words import local_time

    monkeypatch.setenv("TZ", "IST-5:30")
    time.tzset()
    try:
        assert local_time("2026-12-07T06:30:00+00:00") == "2026-12-07 12:00"
        assert local_time("2026-12-07T06:30:00") == "2026-12-07 12:00"  # no offset: UTC, as the lab saves
        assert local_time("a while ago") == "a while ago"
    finally:
        monkeypatch.undo()
        time.tzset()
