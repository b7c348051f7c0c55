"""The generation router: every record reaches exactly the sinks that asked for its request, once, in order."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from fake_engine import FakeFactory, Script
from speculens.engine.config import Strategy
from speculens.settings import Settings, generation_config
from speculens.ui.generations import GenerationRouter
from speculens.ui.worker import EngineWorker, Lane, LoadRequest, Record, RecordKind

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")]

MESSAGES = [{"role": "user", "content": "hi"}]


class Sink:
    def __init__(self) -> None:
        self.records: list[Record] = []
        self.batches = 0

    def on_records(self, records: Sequence[Record]) -> None:
        self.batches += 1
        self.records.extend(records)


@pytest.fixture()
def router(qtbot, tiny) -> Iterator[GenerationRouter]:
    worker = EngineWorker(FakeFactory(Script(answer=["a", "b", "c", "d"], step_s=0.002)))
    with qtbot.waitSignal(worker.models_loaded, timeout=10_000):
        worker.submit(LoadRequest(Settings(target_path=str(tiny.target), draft_path=str(tiny.identical))))
    yield GenerationRouter(worker)
    worker.close()


def test_each_sink_sees_only_its_own_request_from_queued_to_final(qtbot, router: GenerationRouter) -> None:
    first, second, both = Sink(), Sink(), Sink()
    config = generation_config(Settings())
    with qtbot.waitSignal(router.running_changed, timeout=10_000) as running:
        a = router.chat(MESSAGES, config, [first, both])
        b = router.chat(MESSAGES, config, [second, both])
    assert running.args == [True]
    qtbot.waitUntil(lambda: not router.running, timeout=10_000)
    assert {r.request_id for r in first.records} == {a} and {r.request_id for r in second.records} == {b}
    for sink, _request in ((first, a), (second, b)):
        kinds = [r.kind for r in sink.records]
        assert kinds[0] is RecordKind.QUEUED and kinds[1] is RecordKind.STARTED
        assert kinds[-1] is RecordKind.FINISHED and kinds.count(RecordKind.FINISHED) == 1
        assert kinds.count(RecordKind.STEP) == 4
    ran = [r.request_id for r in both.records if r.kind is not RecordKind.QUEUED]
    assert ran == sorted(ran)  # one request after the other, never interleaved
    assert len(both.records) == len(first.records) + len(second.records)


def test_a_compare_ends_with_its_verdict_and_both_lanes(qtbot, router: GenerationRouter) -> None:
    sink = Sink()
    settings = Settings()
    router.compare(MESSAGES, generation_config(settings, Strategy.NONE), generation_config(settings), [sink])
    qtbot.waitUntil(lambda: not router.running, timeout=10_000)
    assert sink.records[-1].kind is RecordKind.COMPARED and sink.records[-1].final
    finished = [r.lane for r in sink.records if r.kind is RecordKind.FINISHED]
    assert finished == [Lane.PLAIN, Lane.SPECULATIVE]  # a half's finish does not end the request


def test_a_cancelled_request_still_ends_once_and_is_forgotten(qtbot, router: GenerationRouter) -> None:
    sink = Sink()
    router.worker._factory.script = Script(answer=["x"] * 10_000, step_s=0.001)  # type: ignore[attr-defined]
    with qtbot.waitSignal(router.worker.models_loaded, timeout=10_000):
        router.worker.submit(LoadRequest(Settings(target_path=router.worker._engine.config.target.as_posix())))  # type: ignore[union-attr]
    request = router.chat(MESSAGES, generation_config(Settings(max_tokens=100_000)), [sink])
    qtbot.waitUntil(lambda: len(sink.records) > 5, timeout=10_000)
    router.cancel(request)
    qtbot.waitUntil(lambda: not router.running, timeout=10_000)
    finals = [r for r in sink.records if r.final]
    assert len(finals) == 1 and finals[0].event.reason.value == "cancelled"  # type: ignore[union-attr]
    count = len(sink.records)
    router.drain()
    assert len(sink.records) == count


def test_records_arrive_in_batches_not_one_call_per_step(qtbot, router: GenerationRouter) -> None:
    sink = Sink()
    router.worker._factory.script = Script(answer=["x"] * 400)  # type: ignore[attr-defined]
    with qtbot.waitSignal(router.worker.models_loaded, timeout=10_000):
        router.worker.submit(LoadRequest(Settings(target_path=router.worker._engine.config.target.as_posix())))  # type: ignore[union-attr]
    router.chat(MESSAGES, generation_config(Settings(max_tokens=1000)), [sink])
    qtbot.waitUntil(lambda: not router.running, timeout=10_000)
    assert sum(r.kind is RecordKind.STEP for r in sink.records) == 400
    assert sink.batches < 100  # drained on a ~30 Hz timer, not a signal per step


def test_a_lane_sink_holds_its_lane_until_the_comparison_ends() -> None:
    """The live panel follows Compare's speculative half once the comparison ends: drawn as it ran, it gave the
    window more to do while speculation ran than while plain decoding did: Compare read ×0.82 on a rename where
    nothing was drafted, and ×0.91 where nine drafted tokens were all accepted."""
    from speculens.ui.generations import LaneSink

    class Sink:
        def __init__(self) -> None:
            self.batches: list[list[RecordKind]] = []

        def on_records(self, records: Sequence[Record]) -> None:
            self.batches.append([r.kind for r in records])

    K = RecordKind
    for end in (K.COMPARED, K.FAILED):
        sink = Sink()
        lane = LaneSink(sink, Lane.SPECULATIVE)
        lane.on_records([Record(1, Lane.PLAIN, K.QUEUED)])
        lane.on_records([Record(1, Lane.PLAIN, K.STARTED), Record(1, Lane.PLAIN, K.STEP)])  # not its lane
        lane.on_records([Record(1, Lane.PLAIN, K.FINISHED), Record(1, Lane.SPECULATIVE, K.STARTED)])
        lane.on_records([Record(1, Lane.SPECULATIVE, K.STEP), Record(1, Lane.SPECULATIVE, K.STEP)])
        assert sink.batches == [[K.QUEUED]]  # the start now, the speculative half held
        lane.on_records([Record(1, Lane.SPECULATIVE, K.FINISHED), Record(1, Lane.SPECULATIVE, end)])
        assert sink.batches == [[K.QUEUED], [K.STARTED, K.STEP, K.STEP, K.FINISHED, end]]  # in order, at once
        lane.on_records([Record(2, Lane.PLAIN, K.QUEUED)])  # the next comparison starts empty
        assert sink.batches[-1] == [K.QUEUED]
