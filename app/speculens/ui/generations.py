"""The one client of the worker for generations, and the one path their records take to the views.

A view that wants an answer asks the :class:`GenerationRouter` for it and names the sinks that should see
it (the chat pane's turn, the live panel, the teaching panel, the Compare view); the router submits the
typed request, drains the worker's record buffer on a ~30 Hz timer, and hands each request's records, in
order and in batches, to exactly the sinks that asked for them. Views keep no request ids of their own: a
sink is bound to its request by the router, and forgotten when the request's final record has been
delivered. Cancel, step mode and "next step" also go through here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from PySide6.QtCore import QObject, QTimer, Signal

from speculens.engine.config import GenerationConfig
from speculens.ui.worker import ChatRequest, CompareRequest, EngineWorker, Lane, Record, RecordKind

# How often an answer's steps are drawn (its start, end, pauses and failures are drawn at once). Every redraw
# of the token views, transcript and figures takes the window's thread, and with it a core from llama.cpp's
# threads, which then wait at their barriers. In the app under Xvfb on 2 cores (2026-12-05, a 52-token answer,
# four alternated restarts): every 33 ms, the window's thread used 320-350 ms of processor time per answer and
# decode steps took 32.4-33.3 ms (medians); every 100 ms, 230-280 ms and 29.7-32.7 ms. Three tokens a redraw at
# 30 tokens/s still reads as streaming.
DRAIN_MS = 100


class RecordSink(Protocol):
    """Something that shows a generation: it receives the request's records, oldest first, in batches."""

    def on_records(self, records: Sequence[Record]) -> None:
        """Show these records (one timer tick's worth of one request)."""


class LaneSink:
    """Passes one lane of a comparison on to a sink made for chat turns (the live panel, its charts and figures
    follow a comparison's speculative half, as they follow an answer), with the request's QUEUED record and its
    failure, whichever lane it came in (a comparison stopped in its plain half left the live panel "Starting…").

    The lane's other records are held until the comparison ends (its verdict, or a failure) and then passed on
    at once: drawing them as they came gave the window more to do while speculation ran than while plain
    decoding did, and the window's thread takes a core from llama.cpp's. In the app, under Xvfb on 2 cores, the
    speculative half's first steps took 54-62 ms and its later ones 36-38 ms against plain decoding's 31-32, so
    Compare read ×0.82 on a rename where nothing was drafted, and ×0.91 where 9 drafted tokens were all accepted.

    Args:
        sink: the sink.
        lane: the lane it sees.
    """

    def __init__(self, sink: RecordSink, lane: Lane) -> None:
        self.sink = sink
        self.lane = lane
        self._held: list[Record] = []

    def on_records(self, records: Sequence[Record]) -> None:
        """Pass on the request's start and failure now, this lane's records when the comparison ends."""
        mine: list[Record] = []
        for r in records:
            if r.kind is RecordKind.QUEUED:
                self._held = []
                mine.append(r)
            elif r.kind in (RecordKind.COMPARED, RecordKind.FAILED):
                mine += [*self._held, r]
                self._held = []
            elif r.lane is self.lane:
                self._held.append(r)
        if mine:
            self.sink.on_records(mine)


class GenerationRouter(QObject):
    """Submits generations and routes their records to the sinks that asked.

    Args:
        worker: the engine worker.
        parent: the Qt parent.

    Signals:
        running_changed(bool): a generation started (True) or the last one ended (False).
        paused(int): a generation waits in step mode (its request id); :meth:`advance` lets it go on.
    """

    running_changed = Signal(bool)
    paused = Signal(int)

    def __init__(self, worker: EngineWorker, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.worker = worker
        # Called before a generation is queued (the main window loads the chosen pair if nothing is loaded:
        # the worker runs its requests in order, so the answer waits behind the load).
        self.prepare: Callable[[], None] | None = None
        self._sinks: dict[int, list[RecordSink]] = {}
        self._timer = QTimer(self)
        self._timer.setInterval(DRAIN_MS)
        self._timer.timeout.connect(self._on_timer_timeout)
        worker.records_ready.connect(self.drain)

    @property
    def running(self) -> bool:
        """Whether a generation is queued or running."""
        return bool(self._sinks)

    def chat(self, messages: Sequence[dict[str, str]], config: GenerationConfig, sinks: Sequence[RecordSink]) -> int:
        """Answer a conversation's last message; ``sinks`` receive the records. Returns the request id."""
        return self._start(ChatRequest(tuple(messages), config), sinks)

    def compare(
        self,
        messages: Sequence[dict[str, str]],
        plain: GenerationConfig,
        speculative: GenerationConfig,
        sinks: Sequence[RecordSink],
    ) -> int:
        """Answer plainly, then with speculation, and compare; ``sinks`` receive both runs' records."""
        return self._start(CompareRequest(tuple(messages), plain, speculative), sinks)

    def _start(self, request: ChatRequest | CompareRequest, sinks: Sequence[RecordSink]) -> int:
        was_running = self.running
        if self.prepare is not None:
            self.prepare()
        request_id = self.worker.submit(request)
        self._sinks[request_id] = list(sinks)
        self._timer.start()
        if not was_running:
            self.running_changed.emit(True)
        lane = Lane.CHAT if isinstance(request, ChatRequest) else Lane.PLAIN
        self._deliver([Record(request_id, lane, RecordKind.QUEUED)])
        return request_id

    def cancel(self, request_id: int | None = None) -> None:
        """Stop a generation (every one by default); it ends within one step with its final record."""
        self.worker.cancel(request_id)

    def set_step_mode(self, enabled: bool) -> None:
        """Pause after every speculation step until :meth:`advance`."""
        self.worker.set_step_mode(enabled)

    def advance(self) -> None:
        """Let the paused generation run its next step."""
        self.worker.advance()

    def drain(self) -> None:
        """Deliver the buffered records to their sinks (the timer calls this; tests may too)."""
        records = self.worker.take_records()
        if not records:
            return
        batch: list[Record] = []
        for record in records:
            if batch and batch[-1].request_id != record.request_id:
                self._deliver(batch)
                batch = []
            batch.append(record)
        self._deliver(batch)
        if not self._sinks:
            self._timer.stop()
            self.running_changed.emit(False)

    def _deliver(self, records: list[Record]) -> None:
        request_id = records[0].request_id
        sinks = self._sinks.get(request_id)
        if sinks is None:
            return  # a request nobody waits for any more
        for sink in sinks:
            sink.on_records(records)
        for record in records:
            if record.kind is RecordKind.PAUSED:
                self.paused.emit(request_id)
        if any(r.final for r in records):
            del self._sinks[request_id]

    def _on_timer_timeout(self) -> None:
        self.drain()
