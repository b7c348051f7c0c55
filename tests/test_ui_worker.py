"""The engine worker thread with the tiny generated models: load, stream, stop, compare, close mid-answer."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from speculens.settings import Settings
from speculens.ui.worker import LANE_CHAT, EngineWorker, LoadedModels, TaggedEvent

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")


@pytest.fixture()
def worker(qtbot) -> Iterator[EngineWorker]:
    w = EngineWorker()
    yield w
    assert w.close(timeout=30)


def settings_for(tiny, draft=None, **changes: object) -> Settings:
    s = Settings(
        target_path=str(tiny.target), draft_path=str(draft or tiny.identical), n_ctx=1024, max_tokens=40
    )
    for key, value in changes.items():
        setattr(s, key, value)
    return s


def load(qtbot, worker: EngineWorker, settings: Settings) -> LoadedModels:
    with qtbot.waitSignal(worker.models_loaded, timeout=30_000) as blocker:
        worker.load(settings)
    return blocker.args[0]


def test_load_reports_the_pair_and_is_loaded(qtbot, worker: EngineWorker, tiny) -> None:
    loaded = load(qtbot, worker, settings_for(tiny))
    assert loaded.target == tiny.target.name and loaded.draft == tiny.identical.name
    assert loaded.draft_error is None and worker.is_loaded


def test_mismatched_draft_keeps_the_target_and_says_why(qtbot, worker: EngineWorker, tiny) -> None:
    loaded = load(qtbot, worker, settings_for(tiny, tiny.mismatch))
    assert loaded.draft is None
    assert loaded.draft_error and "prompt lookup" in loaded.draft_error
    assert worker.is_loaded


def test_missing_file_fails_with_a_message(qtbot, worker: EngineWorker, tmp_path) -> None:
    with qtbot.waitSignal(worker.load_failed, timeout=30_000) as blocker:
        worker.load(Settings(target_path=str(tmp_path / "nope.gguf")))
    assert "not found" in blocker.args[0].lower()


def test_chat_streams_steps_then_finishes(qtbot, worker: EngineWorker, tiny) -> None:
    from speculens.engine.events import FinishEvent, StartEvent, StepEvent

    settings = settings_for(tiny)
    load(qtbot, worker, settings)
    with qtbot.waitSignal(worker.generation_finished, timeout=30_000) as blocker:
        request = worker.chat([], "the model", settings)
    rid, lane, finish = blocker.args
    assert (rid, lane) == (request, LANE_CHAT)
    events = worker.take_events()
    assert all(isinstance(t, TaggedEvent) and t.request_id == request for t in events)
    kinds = [type(t.event) for t in events]
    assert kinds[0] is StartEvent and kinds[-1] is FinishEvent and StepEvent in kinds
    assert finish.stats.n_generated == len(finish.tokens) > 0
    # An identical draft is always accepted in greedy mode.
    assert finish.stats.n_accepted == finish.stats.n_drafted > 0
    assert worker.take_events() == []


def test_generation_without_a_model_fails_cleanly(qtbot, worker: EngineWorker, tiny) -> None:
    with qtbot.waitSignal(worker.generation_failed, timeout=10_000) as blocker:
        worker.chat([], "hello", settings_for(tiny))
    assert "load" in blocker.args[1].lower()


def test_stop_cancels_within_a_step(qtbot, worker: EngineWorker, tiny) -> None:
    # A context far larger than the tiny model fills in the time the test takes to press Stop.
    settings = settings_for(tiny, max_tokens=100_000, n_ctx=32_768)
    load(qtbot, worker, settings)
    started = threading.Event()
    worker.generation_started.connect(lambda *_: started.set())
    with qtbot.waitSignal(worker.generation_finished, timeout=30_000) as blocker:
        worker.chat([], "the model", settings)
        qtbot.waitUntil(started.is_set, timeout=10_000)
        qtbot.waitUntil(lambda: len(worker._events) > 3, timeout=10_000)
        worker.cancel()
    assert blocker.args[2].reason.value == "cancelled"


def test_step_mode_pauses_until_advanced(qtbot, worker: EngineWorker, tiny) -> None:
    from speculens.engine.events import StepEvent

    settings = settings_for(tiny, max_tokens=6)
    load(qtbot, worker, settings)
    worker.set_step_mode(True)
    with qtbot.waitSignal(worker.step_paused, timeout=10_000) as paused:
        worker.chat([], "the model", settings)
    assert paused.args == [1]
    steps = [t for t in worker.take_events() if isinstance(t.event, StepEvent)]
    assert len(steps) == 1  # nothing runs past the paused step
    with qtbot.waitSignal(worker.step_paused, timeout=10_000) as paused:
        worker.advance()
    assert paused.args == [2]
    with qtbot.waitSignal(worker.generation_finished, timeout=10_000):
        worker.set_step_mode(False)


def test_compare_gives_identical_greedy_outputs(qtbot, worker: EngineWorker, tiny) -> None:
    settings = settings_for(tiny, tiny.perturbed, max_tokens=30, adaptive=False)
    load(qtbot, worker, settings)
    with qtbot.waitSignal(worker.compare_finished, timeout=30_000) as blocker:
        worker.compare([], "the model", settings)
    result = blocker.args[1]
    assert result.identical and result.greedy
    assert result.plain.stats.n_drafted == 0 and result.speculative.stats.n_drafted > 0
    assert result.speedup > 0


def test_close_during_generation_stops_and_joins(qtbot, tiny) -> None:
    worker = EngineWorker()
    settings = settings_for(tiny, max_tokens=100_000, n_ctx=32_768)
    load(qtbot, worker, settings)
    started = threading.Event()
    worker.generation_started.connect(lambda *_: started.set())
    worker.chat([], "the model", settings)
    qtbot.waitUntil(started.is_set, timeout=10_000)
    assert worker.close(timeout=30)
    assert not worker._thread.is_alive() and not worker.is_loaded
    with pytest.raises(RuntimeError):
        worker.chat([], "again", settings)
