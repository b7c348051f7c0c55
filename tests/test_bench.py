"""The benchmark: its arithmetic on made-up runs, its JSON on the tiny models, and the CLI as users run it.

No timing is asserted: the tiny models decode in microseconds and machines are noisy.
"""

from __future__ import annotations

import importlib.resources
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TinyModels
from speculens.cli.bench_cmd import format_profile, format_table
from speculens.engine.bench import (
    SCHEMA,
    BenchResults,
    BenchSetting,
    RunResult,
    cost_profile,
    overall,
    results_document,
    run_suite,
    settings_for,
    summarise_runs,
)
from speculens.engine.config import GenerationConfig, ModelConfig, Strategy
from speculens.engine.drafters.ngram_map import build_map
from speculens.engine.session import SpeculativeEngine
from speculens.engine.suite import BenchPrompt, load_suite
from speculens.ui.bench_chart import chart_caption, chart_data


def result(tps: float, tokens: tuple[int, ...] = (1, 2, 3), **kw: object) -> RunResult:
    """A made-up run of 100 tokens at ``tps`` tokens per second (the first comes with the prompt)."""
    fields: dict = dict(
        tokens=tokens,
        n_generated=100,
        elapsed_s=99 / tps,
        draft_s=0.0,
        verify_s=0.0,
        overhead_s=0.0,
        n_steps=100,
        n_drafted=0,
        n_accepted=0,
    )
    fields.update(kw)
    return RunResult(**fields)


def test_median_spread_and_speedup_over_plain_decoding() -> None:
    plain = [result(10.0), result(12.0), result(11.0)]
    spec = [result(20.0), result(24.0), result(21.0)]
    s = summarise_runs(spec, plain)
    assert s.tps_median == pytest.approx(21.0)
    assert (s.tps_min, s.tps_max) == (pytest.approx(20.0), pytest.approx(24.0))
    assert s.spread == pytest.approx(4.0 / 21.0)
    assert s.speedup == pytest.approx(21.0 / 11.0)
    assert s.identical is True and s.n_runs == 3
    assert summarise_runs(plain, plain).speedup == pytest.approx(1.0)
    assert summarise_runs(spec).speedup is None and summarise_runs(spec).identical is None


def test_a_different_output_in_any_run_is_reported() -> None:
    plain = [result(10.0, (1, 2, 3))]
    assert summarise_runs([result(12.0, (1, 2, 3)), result(12.0, (1, 2, 4))], plain).identical is False


def test_time_shares_acceptance_and_lengths() -> None:
    runs = [
        result(
            10.0,
            elapsed_s=10.0,
            draft_s=2.0,
            verify_s=7.0,
            overhead_s=0.5,
            n_steps=40,
            n_drafted=80,
            n_accepted=60,
            drafted_by_position=(40, 40),
            accepted_by_position=(35, 25),
            n_draft_chosen=(2,) * 40,
        ),
        result(
            10.0,
            elapsed_s=10.0,
            draft_s=0.0,
            verify_s=9.5,
            overhead_s=0.5,
            n_steps=60,
            n_drafted=20,
            n_accepted=0,
            drafted_by_position=(20,),
            accepted_by_position=(0,),
            n_draft_chosen=(0,) * 40 + (1,) * 20,
        ),
    ]
    s = summarise_runs(runs)
    assert s.draft_share == pytest.approx(2.0 / 20.0)
    assert s.verify_share == pytest.approx(16.5 / 20.0)
    assert s.overhead_share == pytest.approx(1.0 / 20.0)
    assert s.acceptance == pytest.approx(60 / 100)
    assert s.mean_accepted_length == pytest.approx(200 / 100)  # tokens per target pass
    assert s.acceptance_by_position == pytest.approx((35 / 60, 25 / 40))
    assert s.mean_n_draft == pytest.approx((80 + 20) / 100)


def test_overall_takes_the_geometric_mean_and_the_worst_prompt() -> None:
    plain = [result(10.0)]
    per_prompt = [summarise_runs([result(tps)], plain) for tps in (5.0, 20.0, 10.0)]
    o = overall("lookup/adaptive≤8", per_prompt, acceptance=0.5)
    assert o.speedup_geomean == pytest.approx(1.0)
    assert (o.speedup_min, o.speedup_max) == (pytest.approx(0.5), pytest.approx(2.0))
    assert o.identical_all is True and o.n_prompts == 3
    with pytest.raises(ValueError):
        summarise_runs([])


def test_overall_reports_the_median_run_to_run_spread() -> None:
    plain = [result(10.0)]
    steady = [summarise_runs([result(10.0), result(10.0)], plain), summarise_runs([result(9.0), result(11.0)], plain)]
    noisy = [summarise_runs([result(5.0), result(15.0)], plain), summarise_runs([result(8.0), result(12.0)], plain)]
    assert overall("a", steady).spread_median == pytest.approx(0.1)  # 0 and 0.2
    assert overall("b", noisy).spread_median == pytest.approx(0.7)  # 1.0 and 0.4


def test_the_speedup_spread_pairs_each_repetition_with_plain_decodings_run_in_it() -> None:
    # The machine slows down by half in the second repetition: both settings' tokens/s spread widely, but a
    # setting that keeps its speedup over plain decoding in every repetition has no speedup spread at all.
    plain = [result(20.0), result(10.0), result(16.0)]
    steady = summarise_runs([result(30.0), result(15.0), result(24.0)], plain)
    assert steady.spread == pytest.approx(15.0 / 24.0)
    assert steady.speedup_spread == pytest.approx(0.0)
    erratic = summarise_runs([result(30.0), result(20.0), result(16.0)], plain)  # ×1.5, ×2, ×1
    assert erratic.speedup_spread == pytest.approx((2.0 - 1.0) / 1.5)
    assert summarise_runs(plain).speedup_spread is None
    assert overall("a", [steady, erratic]).speedup_spread_median == pytest.approx(1.0 / 3.0)
    assert overall("b", [summarise_runs(plain)]).speedup_spread_median is None


def test_the_passes_spread_tells_the_controllers_choices_from_the_machines_speed() -> None:
    # Two settings whose speedups spread alike: one took the same steps in every run (the machine's speed moved
    # under them), the other took other steps each time (its choices moved).
    plain = [result(10.0), result(10.0), result(10.0)]
    same_steps = summarise_runs([result(20.0, n_steps=40), result(30.0, n_steps=40), result(25.0, n_steps=40)], plain)
    other_steps = summarise_runs([result(20.0, n_steps=50), result(30.0, n_steps=30), result(25.0, n_steps=40)], plain)
    assert same_steps.speedup_spread == pytest.approx(other_steps.speedup_spread)
    assert same_steps.passes_median == 40 and same_steps.passes_spread == 0.0
    assert other_steps.passes_median == 40 and other_steps.passes_spread == pytest.approx(20 / 40)
    assert overall("a", [same_steps, other_steps]).passes_spread_median == pytest.approx(0.25)
    lookup = BenchSetting(Strategy.LOOKUP)
    table = format_table(
        BenchResults(
            prompts=[BenchPrompt("p", "code-rewrite", ())],
            settings=[BenchSetting(Strategy.NONE), lookup],
            runs={"p": {"none": plain, lookup.label: [result(20.0, n_steps=50), result(30.0, n_steps=30)]}},
        )
    )
    header = next(line for line in table.splitlines() if line.startswith("setting") and "passes" in line)
    row = next(line for line in table.splitlines() if line.startswith(lookup.label)).split()
    assert header.split()[5] == "passes" and row[5:7] == ["40", "50%"]  # passes 30 and 50: 40 ± 20
    once = format_table(  # one run each: no spread to tell, not "0%" (a tour read it as perfectly stable)
        BenchResults(
            prompts=[BenchPrompt("p", "code-rewrite", ())],
            settings=[BenchSetting(Strategy.NONE), lookup],
            runs={"p": {"none": plain[:1], lookup.label: [result(20.0, n_steps=50)]}},
        )
    )
    row = next(line for line in once.splitlines() if line.startswith(lookup.label)).split()
    assert row[2] == row[4] == row[6] == "–"


def test_settings_start_with_plain_decoding_and_cover_every_mode() -> None:
    settings = settings_for([Strategy.DRAFT, Strategy.LOOKUP], ["adaptive", "fixed"], 8, sweep=[1, 4, 16])
    labels = [s.label for s in settings]
    assert labels[0] == "none"
    assert "draft/adaptive≤16" in labels and "lookup/n=1" in labels and "lookup/n=16" in labels
    assert len(labels) == len(set(labels)) == 1 + 2 * (1 + 3)
    assert [s.label for s in settings_for([Strategy.NONE, Strategy.LOOKUP], ["fixed"], 8)] == ["none", "lookup/n=8"]
    assert BenchSetting(Strategy.NGRAM_CACHE, 4, False).label == "ngram-cache/n=4"


def test_the_held_out_prompts_are_a_suite_apart_from_the_bench_suite() -> None:
    text = (importlib.resources.files("speculens.resources") / "prompts/heldout.json").read_text(encoding="utf-8")
    held_out, suite = load_suite(text), load_suite()
    assert {p.category for p in held_out} >= {"chat", "code-generation", "code-rewrite", "summarisation"}
    assert not {p.id for p in held_out} & {p.id for p in suite}
    assert not {p.messages[-1]["content"] for p in held_out} & {p.messages[-1]["content"] for p in suite}


def test_the_shipped_suite_covers_the_required_kinds_of_prompt() -> None:
    suite = load_suite()
    categories = [p.category for p in suite]
    for needed in ("chat", "code-generation", "summarisation", "long-context"):
        assert needed in categories
    assert categories.count("code-rewrite") >= 2
    assert len({p.id for p in suite}) == len(suite)
    assert all(p.messages and p.messages[-1]["role"] == "user" for p in suite)
    long = next(p for p in suite if p.category == "long-context")
    assert len(long.messages[-1]["content"]) > 5000
    with pytest.raises(ValueError, match="suite"):
        load_suite('{"prompts": [{"id": "x"}]}')
    with pytest.raises(ValueError, match="unique"):
        load_suite(
            '{"prompts": [{"id": "a", "category": "c", "messages": []}, {"id": "a", "category": "c", "messages": []}]}'
        )


SMALL_SUITE = json.dumps(
    {
        "prompts": [
            {"id": "one", "category": "chat", "messages": [{"role": "user", "content": "one two three"}]},
            {
                "id": "two",
                "category": "code-rewrite",
                "messages": [{"role": "user", "content": "def return class import self print if else"}],
            },
        ]
    }
)


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from speculens.models.synthetic import write_tiny_pair

    folder = tmp_path_factory.mktemp("bench-models")
    target, draft = write_tiny_pair(folder, "perturbed")
    settings = settings_for([Strategy.DRAFT, Strategy.LOOKUP, Strategy.NGRAM_CACHE], ["adaptive", "fixed"], 4)
    with SpeculativeEngine(ModelConfig(target, draft, n_ctx=512, exact=True)) as engine:
        results = run_suite(
            engine,
            load_suite(SMALL_SUITE),
            settings,
            GenerationConfig(p_min=0.0, max_tokens=24),
            repeats=2,
            warmup=1,
        )
        profile = cost_profile(engine.target, engine.draft, max_batch=4, repeats=1, exact=True)
        sizes = list(engine.target.invariant_sizes)
    results.profile = profile
    return {"results": results, "doc": results_document(results), "sizes": sizes}


def test_fresh_costs_leave_the_sessions_own_to_be_saved(tiny: TinyModels) -> None:
    # Each run of --fresh-costs starts from an empty cost model; the session's own, measured at load and saved at
    # its close for every later session of this target, must not be replaced by the last run's empty one.
    with SpeculativeEngine(ModelConfig(tiny.target, None, n_ctx=512)) as engine:
        kept = engine.costs
        assert kept.verify.estimate(1) is not None
        settings = settings_for([Strategy.LOOKUP], ["adaptive"], 4)
        run_suite(engine, load_suite(SMALL_SUITE)[:1], settings, GenerationConfig(max_tokens=8), 1, 0, True)
        assert engine.costs is kept


def test_every_setting_ran_on_every_prompt_with_identical_greedy_output(tiny_results: dict) -> None:
    results = tiny_results["results"]
    for prompt in ("one", "two"):
        for setting in results.settings:
            runs = results.runs[prompt][setting.label]
            assert len(runs) == 2 and all(r.n_generated == 24 for r in runs)
            assert results.summary(prompt, setting.label).identical is True
    # Fixed settings draft at most n_draft per step; the adaptive ones report each step's choice.
    fixed = results.runs["one"]["draft/n=4"][0]
    assert fixed.n_draft_chosen[0] == 4 and max(fixed.n_draft_chosen) <= 4
    assert all(0 <= k <= 4 for k in results.runs["one"]["lookup/adaptive≤4"][0].n_draft_chosen)
    # What the draft model drafted, apart (the lab tells an idle draft model by it).
    assert fixed.n_drafted_model == fixed.n_drafted > 0
    lookup = results.runs["one"]["lookup/n=4"]
    assert all(r.n_drafted_model == 0 for r in lookup) and any(r.n_drafted for r in lookup)


def test_the_json_document_follows_its_schema(tiny_results: dict) -> None:
    doc = json.loads(json.dumps(tiny_results["doc"]))  # serialisable as is
    assert doc["schema"] == SCHEMA
    assert {"platform", "cpus", "load_average"} <= doc["machine"].keys()
    assert next(s["label"] for s in doc["settings"]) == "none"
    assert [p["id"] for p in doc["prompts"]] == ["one", "two"]
    for p in doc["prompts"]:
        assert p["n_prompt"] > 0
        assert set(p["results"]) == {s["label"] for s in doc["settings"]}
        for _label, entry in p["results"].items():
            summary = entry["summary"]
            for key in (
                "tps_median",
                "tps_min",
                "tps_max",
                "spread",
                "speedup",
                "speedup_spread",
                "passes_median",
                "passes_spread",
                "acceptance",
                "mean_accepted_length",
                "acceptance_by_position",
                "draft_share",
                "verify_share",
                "overhead_share",
                "identical",
                "mean_n_draft",
                "n_runs",
            ):
                assert key in summary, key
            assert summary["tps_min"] <= summary["tps_median"] <= summary["tps_max"]
            # Decode calls and everything outside them partition the time (drafting overlaps both).
            assert 0.0 < summary["verify_share"] + summary["overhead_share"] <= 1.0 + 1e-9
            assert 0.0 <= summary["draft_share"] <= 1.0
            assert len(entry["runs"]) == 2
            run = entry["runs"][0]
            assert "tokens" not in run and sum(run["n_draft_chosen_histogram"].values()) == run["n_steps"]
            assert math.isclose(run["tokens_per_second"], (run["n_generated"] - 1) / run["elapsed_s"])
        assert p["results"]["none"]["summary"]["speedup"] == pytest.approx(1.0)
    assert set(doc["overall"]) == {s["label"] for s in doc["settings"]}
    assert doc["overall"]["lookup/adaptive≤4"]["identical_all"] is True
    assert set(doc["profile"]["target"]) == {"1", "2", "3", "4"} and "draft_over_target" in doc["profile"]
    assert doc["profile"]["target_calls"] == tiny_results["sizes"]  # timed as exact verification runs it


def test_table_profile_and_chart_data(tiny_results: dict) -> None:
    table = format_table(tiny_results["results"])
    for label in ("none", "draft/adaptive≤4", "lookup/n=4", "overall"):
        assert label in table
    assert "acceptance by position" in table
    assert "draft / target" in format_profile(tiny_results["doc"]["profile"])
    prompts, labels, values = chart_data(tiny_results["doc"])
    assert prompts == ["one", "two"] and "none" not in labels
    assert len(values) == len(labels) and all(len(row) == 2 for row in values)


def test_bench_cli_writes_json_and_a_png_and_prints_a_table(tiny: TinyModels, tmp_path: Path) -> None:
    suite = tmp_path / "suite.json"
    suite.write_text(SMALL_SUITE, encoding="utf-8")
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "speculens.cli",
            "bench",
            "-m",
            str(tiny.target),
            "-d",
            str(tiny.perturbed),
            "--suite",
            str(suite),
            "--prompts",
            "one",
            "-n",
            "12",
            "--repeat",
            "1",
            "--warmup",
            "0",
            "--strategies",
            "draft,lookup",
            "--sweep",
            "n_draft=2,4",
            "--modes",
            "adaptive,fixed",
            "--p-min",
            "0",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "lookup/n=2" in proc.stdout and "overall" in proc.stdout
    assert "[1/" in proc.stderr  # progress
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["schema"] == SCHEMA and doc["config"]["max_tokens"] == 12
    assert doc["config"]["threads"] >= 1  # the count used, not the 0 that asked for the automatic one
    assert [s["label"] for s in doc["settings"]] == [
        "none",
        "draft/adaptive≤4",
        "draft/n=2",
        "draft/n=4",
        "lookup/adaptive≤4",
        "lookup/n=2",
        "lookup/n=4",
    ]
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    caption = chart_caption(doc)  # under the chart's title
    assert f"target {tiny.target.name}, draft {tiny.perturbed.name}" in caption
    assert f"{doc['config']['threads']} threads · 12 tokens · greedy · 1 run" in caption


def test_bench_cli_runs_the_ngram_map_it_is_given(tiny: TinyModels, tmp_path: Path) -> None:
    suite = tmp_path / "suite.json"
    suite.write_text(SMALL_SUITE, encoding="utf-8")
    (tmp_path / "corpus.txt").write_text("one two three four five six seven eight\n" * 20, encoding="utf-8")
    build_map([tmp_path / "corpus.txt"], tiny.target, tmp_path / "map.npz")
    out = tmp_path / "results.json"
    args = ["--suite", str(suite), "--prompts", "one", "-n", "8", "--repeat", "1", "--warmup", "0", "--modes", "fixed"]
    args += ["--strategies", "ngram-map", "--ngram-map", str(tmp_path / "map.npz"), "-o", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "speculens.cli", "bench", "-m", str(tiny.target), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert [s["label"] for s in json.loads(out.read_text(encoding="utf-8"))["settings"]][1].startswith("ngram-map")


def test_bench_cli_refuses_bad_requests(tiny: TinyModels) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "speculens.cli", "bench", "-m", str(tiny.target), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert cli("--strategies", "draft").returncode == 2  # no draft model
    no_map = cli("--strategies", "ngram-map")
    assert no_map.returncode == 2 and "needs --ngram-map" in no_map.stderr
    assert cli("--sweep", "n_draft=0,4").returncode == 2
    assert cli("--modes", "sometimes").returncode == 2
    assert cli("--prompts", "nope").returncode == 2
    seed = cli("--seed", "-1")  # generate's "a new seed" crashed bench with a traceback after the models loaded
    assert seed.returncode == 2 and "--seed must be 0 or more" in seed.stderr and "Traceback" not in seed.stderr
    none = cli("--repeat", "0")  # measured nothing, wrote an empty table and exited 0 (a README walk's)
    assert none.returncode == 2 and "--repeat must be 1 or more" in none.stderr


def test_a_setting_that_drafted_nothing_has_no_acceptance() -> None:
    """A README walk read "accept 0%" for lookup on a chat where it drafted nothing: every draft rejected, it said."""
    idle = summarise_runs([result(10.0), result(11.0)], [result(10.0)])
    assert idle.acceptance is None
    rejected = result(10.0, n_drafted=4, n_accepted=0, drafted_by_position=(4,), accepted_by_position=(0,))
    drafted = summarise_runs([rejected])
    assert drafted.acceptance == 0.0  # drafted, all rejected: that is 0%


def test_the_suite_is_written_chat_formatted_for_llama_cpps_tools(tiny: TinyModels, tmp_path: Path) -> None:
    out = tmp_path / "prompts"
    proc = subprocess.run(
        [sys.executable, "-m", "speculens.cli", "bench", "-m", str(tiny.target), "--write-prompts", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    files = sorted(p.stem for p in out.glob("*.txt"))
    assert files == sorted(p.id for p in load_suite())
    chat = (out / "chat.txt").read_text(encoding="utf-8")
    first_user = next(
        m["content"] for m in next(p for p in load_suite() if p.id == "chat").messages if m["role"] == "user"
    )
    assert first_user in chat and "<|im_start|>assistant" in chat  # the tiny models' ChatML template, ready to answer
    # llama.cpp's -f drops one trailing newline; the file keeps the template's "assistant\n" whole after that.
    assert chat.endswith("<|im_start|>assistant\n\n")


def test_a_cancelled_suite_keeps_the_prompts_it_measured_and_the_cli_writes_them(
    tiny: TinyModels, tmp_path: Path, monkeypatch, capsys  # type: ignore[no-untyped-def]
) -> None:
    """From a new-user tour: Ctrl+C after three of a bench's four runs printed "interrupted" and wrote no JSON."""
    import os
    import signal
    import threading

    from speculens.cli import bench_cmd
    from speculens.cli.__main__ import main

    settings = settings_for([Strategy.LOOKUP], ["adaptive"], 4)
    cancel = threading.Event()
    seen: list[str] = []

    def progress(line: str) -> None:
        seen.append(line)
        if "two:" in line:  # the second prompt's first run: the first prompt is whole
            cancel.set()

    with SpeculativeEngine(ModelConfig(tiny.target, None, n_ctx=512)) as engine:
        results = run_suite(engine, load_suite(SMALL_SUITE), settings, GenerationConfig(max_tokens=8), 1, 0,
                            progress=progress, cancel=cancel)  # fmt: skip
    assert results.cancelled and list(results.runs) == ["one"]
    assert [p["id"] for p in results_document(results)["prompts"]] == ["one"]

    real = bench_cmd.run_suite

    def pressed_after_the_first_prompt(*args, **kwargs):  # type: ignore[no-untyped-def]
        told = args[7]

        def told_and_pressed(line: str) -> None:
            told(line)
            if "two:" in line:
                os.kill(os.getpid(), signal.SIGINT)

        return real(*args[:7], told_and_pressed, *args[8:], **kwargs)

    monkeypatch.setattr(bench_cmd, "run_suite", pressed_after_the_first_prompt)
    # In this process a chart would start a QGuiApplication, and the Qt tests after this one want a QApplication.
    monkeypatch.setattr("speculens.ui.bench_chart.render_chart", lambda _doc, _path: "not drawn in this test")
    suite = tmp_path / "suite.json"
    suite.write_text(SMALL_SUITE, encoding="utf-8")
    out = tmp_path / "bench.json"
    rc = main(["bench", "-m", str(tiny.target), "--suite", str(suite), "--strategies", "lookup", "--repeat", "1",
               "--warmup", "0", "--max-tokens", "8", "-o", str(out)])  # fmt: skip
    said = capsys.readouterr()
    assert rc == 130 and "interrupted: 1 of 2 prompts were measured with every setting before the stop;" in said.err
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["cancelled"] is True and [p["id"] for p in doc["prompts"]] == ["one"]


def test_a_suite_stopped_inside_a_prompt_keeps_the_settings_it_timed_and_says_no_speedup_it_did_not(
    tiny: TinyModels,
) -> None:
    """From a new-user tour: a bench stopped in its third run of sixteen kept nothing, and its overall table read
    0.00× for every setting (the JSON said null)."""
    import threading

    from speculens.cli.bench_cmd import format_table

    settings = settings_for([Strategy.LOOKUP], ["adaptive"], 4)
    cancel = threading.Event()

    def progress(line: str) -> None:
        if line.startswith("[2/"):  # the first prompt's second setting: plain decoding has run, lookup not
            cancel.set()

    with SpeculativeEngine(ModelConfig(tiny.target, None, n_ctx=512)) as engine:
        results = run_suite(engine, load_suite(SMALL_SUITE), settings, GenerationConfig(max_tokens=8), 1, 0,
                            progress=progress, cancel=cancel)  # fmt: skip
    assert results.cancelled and results.runs.keys() == {"one"} and results.runs["one"].keys() == {"none"}
    (prompt,) = results_document(results)["prompts"]
    assert prompt["id"] == "one" and list(prompt["results"]) == ["none"]
    table = format_table(results)
    lookup = next(line for line in table.splitlines()[::-1] if line.startswith(settings[1].label))
    assert "0.00×" not in lookup and lookup.split()[1:] == ["–"] * 9  # nor "accept 0%", "ovh max 0%"
    # The overall rows are of the prompts measured with every setting: none here, so none has figures.
    assert all(results.overall(s.label).n_prompts == 0 for s in settings)
    from speculens.ui.bench_chart import render_chart  # returns before Qt: nothing to draw

    assert render_chart(results_document(results), Path("unused.png")) == "nothing to draw (no speedup was measured)"
