"""The engine worker thread: load, stream, stop, step mode, compare, close mid-answer.

With the tiny generated models (the real engine) where the engine's behaviour matters, and with the
scripted fake engine where a case cannot be reached with a real model on demand.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_engine import FakeFactory, Script
from speculens.engine.events import FinishEvent, StartEvent, StepEvent
from speculens.settings import Settings, generation_config
from speculens.ui.worker import (
    ChatRequest,
    CompareRequest,
    EngineWorker,
    Lane,
    LoadRequest,
    LoadResult,
    Record,
    RecordKind,
)

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")]


@pytest.fixture()
def worker(qtbot) -> Iterator[EngineWorker]:
    w = EngineWorker()
    yield w
    assert w.close(timeout=30)


@pytest.fixture()
def fake() -> FakeFactory:
    return FakeFactory()


@pytest.fixture()
def fake_worker(qtbot, fake: FakeFactory) -> Iterator[EngineWorker]:
    w = EngineWorker(fake)
    yield w
    assert w.close(timeout=30)


def settings_for(tiny, draft: Path | None = None, **changes: object) -> Settings:
    fields: dict[str, object] = {
        "target_path": str(tiny.target),
        "draft_path": str(draft or tiny.identical),
        "n_ctx": 1024,
        "max_tokens": 40,
    }
    return Settings(**{**fields, **changes})  # type: ignore[arg-type]


def load(qtbot, worker: EngineWorker, settings: Settings) -> LoadResult:
    with qtbot.waitSignal(worker.models_loaded, timeout=30_000) as blocker:
        worker.submit(LoadRequest(settings))
    return blocker.args[0]


def collect(qtbot, worker: EngineWorker, request_id: int, timeout: int = 30_000) -> list[Record]:
    """Drain the worker's records until the request's final one."""
    out: list[Record] = []

    def done() -> bool:
        out.extend(worker.take_records())
        return any(r.final and r.request_id == request_id for r in out)

    qtbot.waitUntil(done, timeout=timeout)
    return out


def chat(worker: EngineWorker, settings: Settings, text: str = "the model") -> int:
    return worker.submit(ChatRequest(({"role": "user", "content": text},), generation_config(settings)))


def test_load_reports_the_pair_and_the_settings_it_loaded(qtbot, worker: EngineWorker, tiny) -> None:
    settings = settings_for(tiny)
    loaded = load(qtbot, worker, settings)
    assert loaded.info.target == tiny.target.name and loaded.info.draft == tiny.identical.name
    assert loaded.draft_error is None and worker.is_loaded
    assert loaded.settings == settings  # what the reload note compares against


def test_mismatched_draft_keeps_the_target_and_says_why(qtbot, worker: EngineWorker, tiny) -> None:
    loaded = load(qtbot, worker, settings_for(tiny, tiny.mismatch))
    assert loaded.info.draft is None
    assert loaded.draft_error and "prompt lookup" in loaded.draft_error
    assert worker.is_loaded


def test_a_truncated_draft_is_named_as_damaged_not_as_a_tokenizer_mismatch(
    qtbot, worker: EngineWorker, tiny, tmp_path: Path
) -> None:
    cut = tmp_path / "cut-draft.gguf"
    data = tiny.identical.read_bytes()
    cut.write_bytes(data[: len(data) - 4096])
    loaded = load(qtbot, worker, settings_for(tiny, cut))
    assert loaded.info.draft is None and worker.is_loaded
    assert loaded.draft_error is not None
    assert "cut-draft.gguf is truncated" in loaded.draft_error and "mismatch" not in loaded.draft_error.lower()


def test_missing_file_fails_with_a_message(qtbot, worker: EngineWorker, tmp_path: Path) -> None:
    with qtbot.waitSignal(worker.load_failed, timeout=30_000) as blocker:
        worker.submit(LoadRequest(Settings(target_path=str(tmp_path / "nope.gguf"))))
    assert "nope.gguf" in blocker.args[0] and "not found" in blocker.args[0].lower()


def test_chat_streams_records_in_order_then_finishes_once(qtbot, worker: EngineWorker, tiny) -> None:
    settings = settings_for(tiny, adaptive=False, strategy="draft")
    load(qtbot, worker, settings)
    request = chat(worker, settings)
    records = collect(qtbot, worker, request)
    assert all(r.request_id == request and r.lane is Lane.CHAT for r in records)
    kinds = [r.kind for r in records]
    assert kinds[0] is RecordKind.STARTED and isinstance(records[0].event, StartEvent)
    assert kinds[-1] is RecordKind.FINISHED and kinds.count(RecordKind.FINISHED) == 1
    assert set(kinds[1:-1]) == {RecordKind.STEP}
    finish = records[-1].event
    assert isinstance(finish, FinishEvent) and finish.stats.n_generated == len(finish.tokens) > 0
    # An identical draft is always accepted in greedy mode.
    assert finish.stats.n_accepted == finish.stats.n_drafted > 0
    assert worker.take_records() == []


def test_generation_without_a_model_fails_cleanly(qtbot, worker: EngineWorker, tiny) -> None:
    records = collect(qtbot, worker, chat(worker, settings_for(tiny)))
    assert [r.kind for r in records] == [RecordKind.FAILED]
    assert "load" in records[0].message.lower()


def test_stop_cancels_within_a_step(qtbot, fake_worker: EngineWorker, fake: FakeFactory, tiny) -> None:
    fake.script = Script(answer=["word "] * 10_000, step_s=0.002)
    settings = settings_for(tiny, max_tokens=100_000)
    load(qtbot, fake_worker, settings)
    request = chat(fake_worker, settings)
    seen: list[Record] = []
    qtbot.waitUntil(lambda: len(seen.extend(fake_worker.take_records()) or seen) > 5, timeout=10_000)
    fake_worker.cancel(request)
    records = seen + collect(qtbot, fake_worker, request)
    finish = records[-1].event
    assert isinstance(finish, FinishEvent) and finish.reason.value == "cancelled"
    assert 5 <= finish.stats.n_generated < 10_000


def test_step_mode_pauses_until_advanced_and_a_pause_is_not_generation_time(
    qtbot, worker: EngineWorker, tiny
) -> None:
    settings = settings_for(tiny, max_tokens=6, adaptive=False)
    load(qtbot, worker, settings)
    worker.set_step_mode(True)
    request = chat(worker, settings)
    records: list[Record] = []
    qtbot.waitUntil(lambda: bool(records.extend(worker.take_records()) or any(
        r.kind is RecordKind.PAUSED for r in records)), timeout=10_000)  # fmt: skip
    steps = [r for r in records if r.kind is RecordKind.STEP]
    assert len(steps) == 1  # nothing runs past the paused step
    qtbot.wait(1500)  # the user reads the step
    worker.advance()
    qtbot.waitUntil(lambda: bool(records.extend(worker.take_records()) or [
        r for r in records if r.kind is RecordKind.PAUSED][1:]), timeout=10_000)  # fmt: skip
    worker.set_step_mode(False)
    records += collect(qtbot, worker, request)
    finish = records[-1].event
    assert isinstance(finish, FinishEvent)
    # A pause of 1.5 s and another; the tiny model decodes its 6 tokens in milliseconds (limits with room for a
    # busy CI runner). A pause counted as generation time would put the rate under 4 tokens/s.
    assert finish.stats.elapsed_s < 1.0
    assert finish.stats.tokens_per_second > 6


def test_compare_gives_identical_greedy_outputs(qtbot, worker: EngineWorker, tiny) -> None:
    settings = settings_for(tiny, tiny.perturbed, max_tokens=30, adaptive=False, strategy="draft")
    load(qtbot, worker, settings)
    from speculens.engine.config import Strategy

    request = worker.submit(
        CompareRequest(
            ({"role": "user", "content": "the model"},),
            generation_config(settings, Strategy.NONE),
            generation_config(settings),
        )
    )
    records = collect(qtbot, worker, request)
    lanes = {r.lane for r in records if r.kind is RecordKind.STEP}
    assert lanes == {Lane.PLAIN, Lane.SPECULATIVE}
    result = records[-1].comparison
    assert records[-1].kind is RecordKind.COMPARED and result is not None
    assert result.identical and result.greedy and result.divergence is None
    assert result.plain.stats.n_drafted == 0 and result.speculative.stats.n_drafted > 0
    assert result.speedup > 0


def test_close_during_generation_stops_and_joins(qtbot, tiny) -> None:
    fake = FakeFactory(Script(answer=["word "] * 100_000, step_s=0.001))
    worker = EngineWorker(fake)
    settings = settings_for(tiny, max_tokens=100_000)
    load(qtbot, worker, settings)
    chat(worker, settings)
    qtbot.waitUntil(lambda: len(worker._records) > 3, timeout=10_000)
    assert worker.close(timeout=30)
    assert not worker._thread.is_alive() and not worker.is_loaded
    assert fake.last.closed
    with pytest.raises(RuntimeError):
        chat(worker, settings)


def test_a_draft_that_fails_to_load_leaves_the_target_loaded_and_says_why(
    qtbot, fake_worker: EngineWorker, fake: FakeFactory, tiny
) -> None:
    fake.script = Script(draft_error="the draft's weights could not be mapped: out of memory")
    loaded = load(qtbot, fake_worker, settings_for(tiny))
    assert loaded.draft_error == "the draft's weights could not be mapped: out of memory"
    assert fake_worker.is_loaded and not fake.last.closed


def test_an_unexpected_draft_failure_never_leaks_the_target(
    qtbot, fake_worker: EngineWorker, fake: FakeFactory, tiny, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fake_engine import FakeEngine

    def explode(self: FakeEngine, path: Path) -> None:
        raise MemoryError("no memory for the draft")

    monkeypatch.setattr(FakeEngine, "load_draft", explode)
    with qtbot.waitSignal(fake_worker.load_failed, timeout=10_000) as blocker:
        fake_worker.submit(LoadRequest(settings_for(tiny)))
    assert "MemoryError" in blocker.args[0]
    assert fake.last.closed and not fake_worker.is_loaded


def test_a_user_facing_error_is_reported_with_its_own_message(
    qtbot, fake_worker: EngineWorker, fake: FakeFactory, tiny
) -> None:
    fake.script = Script(target_error="the target needs a newer llama.cpp: update Speculens")
    with qtbot.waitSignal(fake_worker.load_failed, timeout=10_000) as blocker:
        fake_worker.submit(LoadRequest(settings_for(tiny)))
    assert blocker.args[0] == "the target needs a newer llama.cpp: update Speculens"


def test_a_header_problem_is_found_before_llama_cpp_is_asked(
    qtbot, fake_worker: EngineWorker, fake: FakeFactory, tmp_path: Path, tiny
) -> None:
    target = tmp_path / "target.gguf"
    shutil.copy(tiny.target, target)
    with target.open("r+b") as f:
        f.truncate(target.stat().st_size // 2)
    with qtbot.waitSignal(fake_worker.load_failed, timeout=10_000) as blocker:
        fake_worker.submit(LoadRequest(settings_for(tiny, target_path=str(target))))
    assert "target.gguf is truncated" in blocker.args[0]
    assert fake.engines == []


def test_records_of_two_requests_carry_their_ids(qtbot, fake_worker: EngineWorker, tiny) -> None:
    settings = settings_for(tiny)
    load(qtbot, fake_worker, settings)
    first, second = chat(fake_worker, settings), chat(fake_worker, settings)
    records = collect(qtbot, fake_worker, second)
    assert [r.request_id for r in records if r.final] == [first, second]
    ids = [r.request_id for r in records]
    assert ids == sorted(ids)  # one request at a time, never interleaved
    steps = [r.event for r in records if r.kind is RecordKind.STEP]
    assert all(isinstance(e, StepEvent) for e in steps)


def test_a_running_step_mode_generation_is_cancelled_without_advancing(
    qtbot, fake_worker: EngineWorker, tiny
) -> None:
    settings = settings_for(tiny)
    load(qtbot, fake_worker, settings)
    fake_worker.set_step_mode(True)
    request = chat(fake_worker, settings)
    seen: list[Record] = []
    qtbot.waitUntil(
        lambda: any(r.kind is RecordKind.PAUSED for r in seen.extend(fake_worker.take_records()) or seen),
        timeout=10_000,
    )
    fake_worker.cancel(request)
    records = seen + collect(qtbot, fake_worker, request)
    assert records[-1].kind is RecordKind.FINISHED
    assert isinstance(records[-1].event, FinishEvent) and records[-1].event.reason.value == "cancelled"
    fake_worker.set_step_mode(False)


def test_the_worker_thread_is_the_only_one_that_touches_the_engine(
    qtbot, fake_worker: EngineWorker, fake: FakeFactory, tiny
) -> None:
    settings = settings_for(tiny)
    load(qtbot, fake_worker, settings)
    collect(qtbot, fake_worker, chat(fake_worker, settings))
    assert fake.last.threads == {"speculens-engine"}
    assert fake.last.requests and fake.last.requests[0][0] == [{"role": "user", "content": "the model"}]


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 2), (4, 3), (8, 7)])
def test_the_gui_leaves_a_core_free_only_when_it_can_spare_one(monkeypatch, cores: int, threads: int) -> None:
    """On 2 cores the window's painting costs a compute thread far less than a core does (measured: 27-29
    tokens/s with 2 threads against 21 with 1 on the demo target)."""
    import speculens.engine.backend as backend
    from speculens.ui.worker import gui_threads

    monkeypatch.setattr(backend, "default_threads", lambda: cores)
    assert gui_threads() == threads


@pytest.mark.parametrize("step", ["Reading", "Timing"])
def test_a_cancelled_load_stops_at_once_loads_nothing_and_the_next_load_works(
    qtbot, worker: EngineWorker, tiny, step: str
) -> None:
    """Cancelled while llama.cpp reads the target's weights (its progress callback says stop) or while the
    draft model is timed (the next decode call stops): nothing is loaded, the target is not leaked, and the
    next load loads."""
    from PySide6.QtCore import Qt

    seen: list[tuple[str, int, int]] = []

    def cancel_at(what: str, done: int, total: int) -> None:  # on the worker thread, before it goes on
        seen.append((what, done, total))
        if what.startswith(step) and (step == "Reading" or tiny.identical.name in what):
            worker.cancel_loading()

    worker.progress_changed.connect(cancel_at, Qt.ConnectionType.DirectConnection)
    failed: list[str] = []
    worker.load_failed.connect(failed.append)
    with qtbot.waitSignal(worker.load_cancelled, timeout=30_000):
        worker.submit(LoadRequest(settings_for(tiny)))
    assert not worker.is_loaded and failed == []
    assert seen[0] == (f"Reading {tiny.target.name}", 0, tiny.target.stat().st_size)
    if step == "Timing":
        assert (f"Reading {tiny.identical.name}", 0, tiny.identical.stat().st_size) in seen
    else:  # llama.cpp stopped reading: nothing was timed
        assert [what for what, _, _ in seen] == [f"Reading {tiny.target.name}"]
    worker.progress_changed.disconnect(cancel_at)
    loaded = load(qtbot, worker, settings_for(tiny))
    assert loaded.info.draft == tiny.identical.name and worker.is_loaded


def test_cancelling_loads_leaves_a_generation_alone(qtbot, fake_worker: EngineWorker, fake: FakeFactory, tiny) -> None:
    load(qtbot, fake_worker, settings_for(tiny))
    fake.script = Script(step_s=0.05)
    request = chat(fake_worker, settings_for(tiny))
    fake_worker.cancel_loading()
    records = collect(qtbot, fake_worker, request)
    finish = records[-1].event
    assert records[-1].kind is RecordKind.FINISHED and isinstance(finish, FinishEvent)
    assert finish.reason.value == "eog" and finish.text == "Hello there, friend."
