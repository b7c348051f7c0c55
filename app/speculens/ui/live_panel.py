"""The live speculation panel: coloured tokens, legend, and the stats strip.

The panel is a record sink of every chat turn: the generation router hands it each timer tick's records in
one batch; it appends the batch's tokens in one edit block and feeds the
:class:`~speculens.ui.charts.RunSeries` that the charts pull from.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from speculens.engine.events import (
    SOURCE_NAMES,
    FinishEvent,
    FinishReason,
    StartEvent,
    StepEvent,
    draft_model_unread,
)
from speculens.ui.charts import RunSeries
from speculens.ui.token_view import TokenLegend, TokenView, drafting_from, drafts_phrase
from speculens.ui.worker import NO_MODEL_LOADED, Lane, Record, RecordKind
from speculens.words import and_list, percent

if TYPE_CHECKING:
    from speculens.engine.events import Event, RunningStats

# The legend's counts and the figures strip change at most this often while an answer runs (and at its end, a pause
# or a failure). Their labels' new text lays out the toolbar and the dock again: redrawn with every batch of steps
# (ten times a second) they cost the window's thread as much as the charts, 50-60 ms of a 1.8 s answer measured in
# the app on 2 cores, time llama.cpp's threads waited for.
FIGURES_S = 0.5


class StatsStrip(QWidget):
    """One line of figures: whose run (the chat's answer or Compare's), tokens/s, acceptance, mean accepted length,
    counts, draft vs verify time, tokens.

    Args:
        parent: the Qt parent.
    """

    FIELDS = (
        # After a Compare the strip has Compare's speculative run, not the chat's answer: a teacher's tour read 41.1
        # tokens/s here and 33.5 under the answer, and took them for one run.
        ("run", "run", "Whose figures these are: the chat's last answer, or Compare's speculative run of its message"),
        ("tps", "tokens/s", "Emitted tokens per second of decoding"),
        ("acceptance", "acceptance", "Accepted draft tokens / drafted tokens"),
        (
            "mean_len",
            "tokens/pass",
            "Mean tokens gained per target pass (accepted drafts + the target's token)",
        ),
        ("counts", "accepted/drafted", "Accepted and drafted token counts"),
        (
            "times",
            "draft | verify",
            "Time spent drafting or looking for a draft (prompt lookup's search, the draft model catching up on new "
            "tokens), so not zero even when nothing was drafted | time in the target's passes",
        ),
        ("tokens", "tokens", "Tokens in the answer"),
    )

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 2)
        layout.setSpacing(18)
        self._values: dict[str, QLabel] = {}
        for key, caption, tip in self.FIELDS:
            box = QVBoxLayout()
            box.setSpacing(0)
            value = QLabel("–", self)
            value.setAccessibleName(caption)
            value.setToolTip(tip)
            font = value.font()
            font.setPointSizeF(font.pointSizeF() * 1.25)
            font.setBold(True)
            value.setFont(font)
            label = QLabel(caption, self)
            label.setEnabled(False)  # the disabled palette gives a muted caption in light and dark themes
            box.addWidget(value, alignment=Qt.AlignmentFlag.AlignLeft)
            box.addWidget(label, alignment=Qt.AlignmentFlag.AlignLeft)
            layout.addLayout(box)
            self._values[key] = value
        layout.addStretch(1)

    def value_text(self, key: str) -> str:
        """The text shown for one figure (tests and accessibility)."""
        return self._values[key].text()

    def clear(self) -> None:
        """Show dashes."""
        for value in self._values.values():
            value.setText("–")

    def show_stats(self, stats: RunningStats) -> None:
        """Show the running totals."""
        # The first token comes with the prompt (decode_rate): one token has no decode rate yet.
        self._values["tps"].setText(f"{stats.tokens_per_second:.1f}" if stats.n_generated > 1 else "–")
        self._values["acceptance"].setText(percent(stats.n_accepted, stats.n_drafted))  # "–" with nothing drafted
        self._values["mean_len"].setText(f"{stats.mean_accepted_length:.2f}")
        self._values["counts"].setText(f"{stats.n_accepted} / {stats.n_drafted}")
        self._values["times"].setText(f"{stats.draft_s:.2f}s | {stats.verify_s:.2f}s")
        self._values["tokens"].setText(str(stats.n_generated))

    def set_run(self, compare: bool) -> None:
        """Say whose figures the strip shows: Compare's speculative run, or the chat's answer."""
        self._values["run"].setText("Compare" if compare else "Chat")


class LivePanel(QWidget):
    """The coloured tokens of the current chat answer with their legend (a record sink for chat turns).

    Args:
        series: the series the charts draw (fed from here).
        stats_strip: the strip to update (it lives in the main window's toolbar area).
        parent: the Qt parent.
    """

    def __init__(self, series: RunSeries, stats_strip: StatsStrip, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.series = series
        self.stats_strip = stats_strip
        self.legend = TokenLegend(self)
        self.view = TokenView(self)
        self.status = QLabel("No answer yet.", self)
        self.status.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.legend)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.status)
        self.steps: list[StepEvent] = []
        self.events: list[Event] = []  # the current answer's events, for the exports
        self._request: int | None = None  # the request shown
        self._started = False  # whether it began (its start event came)
        # Its start event, until its first step or its end: an answer stopped while its prompt was read leaves the
        # last one shown, as one stopped before it started does.
        self._start: StartEvent | None = None
        # What is shown is Compare's speculative run of the last message, not the chat's own answer: the exports
        # say so (a tour's HTML export put Compare's 114 tokens under the chat's 122-token answer as if one).
        self.comparing = False
        self._figures_due = 0.0  # when the legend and the figures may change again (see FIGURES_S)
        self._saved_ids = itertools.count(-1, -1)  # request ids of answers shown from their kept events
        self._dropped: set[int] = set()  # requests cleared away: their late records are not shown
        self._no_model = False  # the status shows an answer's failure for want of loaded models

    def clear(self, description: str = "No answer yet.") -> None:
        """Forget the shown answer: tokens, charts, figures (a new chat, another conversation). The rest of
        an answer that is still stopping is not shown either."""
        if self._request is not None:
            self._dropped.add(self._request)
        self._start = None
        self._reset(description)

    def show_saved(self, events: Sequence[Event]) -> list[Record]:
        """Show an answer generated earlier, from its kept events (a conversation opened again); return the records
        it was shown from, for the other views that follow an answer (Teach)."""
        request = next(self._saved_ids)
        kinds = {StartEvent: RecordKind.STARTED, StepEvent: RecordKind.STEP, FinishEvent: RecordKind.FINISHED}
        records = [Record(request, Lane.CHAT, RecordKind.QUEUED)]
        records += [Record(request, Lane.CHAT, kinds[type(e)], event=e) for e in events]
        self.on_records(records)
        self.status.setText(f"The last answer, as it was generated. {self.status.text()}")
        return records

    def models_loaded(self, *_result: object) -> None:
        """Models were loaded: an answer's failure for want of them no longer holds (a tour read "No model is loaded:
        choose a target model…" here under "Loaded in 15.8 s."). The last answer's tokens, if any, stay."""
        if self._no_model:
            self.status.setText("Models loaded.")
        self._no_model = False

    def _reset(self, description: str, sampled: bool = False) -> None:
        self.view.clear_tokens(sampled)
        self.series.clear()
        self.steps.clear()
        self.events.clear()
        self.stats_strip.clear()
        self.legend.set_counts(self.view.counts)
        self._figures_due = 0.0
        self.status.setText(description)
        self._no_model = False

    def on_records(self, records: Sequence[Record]) -> None:
        """Show a chat turn's records (one timer tick's worth)."""
        records = [r for r in records if r.request_id not in self._dropped]
        steps = [r.event for r in records if r.kind is RecordKind.STEP and isinstance(r.event, StepEvent)]
        for record in records:
            event = record.event
            if record.kind is RecordKind.QUEUED:
                # The last answer's tokens and charts stay until this one starts: one that cannot start (a prompt
                # too long for the context) leaves them, with its reason below them.
                self._request = record.request_id
                self.comparing = record.lane is not Lane.CHAT  # a comparison's speculative half, not a chat answer
                self._started = False
                self._start = None
                self.status.setText("Starting…")
            elif record.kind is RecordKind.STARTED and isinstance(event, StartEvent):
                self._started = True
                self._start = event
                seed = f", seed {event.seed}" if event.seed is not None else ""
                self.status.setText(
                    f"{drafting_from(event.strategy, event.draft_idle)}: prompt of {event.n_prompt} tokens "
                    f"({event.n_prompt_evaluated} evaluated, {event.prompt_s * 1e3:.0f} ms){seed}, "
                    f"flash attention {event.flash_text}; generating…"
                )
            elif isinstance(event, FinishEvent) and not self._started and not event.stats.n_generated:
                # Stopped while it waited (for a load, say): no answer ran, so the last one's figures stay (a tour
                # saw "Finished (stopped): 0 tokens in 0 target passes" and a strip of zeros).
                self.status.setText("Stopped before the answer began.")
            elif (
                isinstance(event, FinishEvent)
                and (start := self._start) is not None
                and event.reason is FinishReason.CANCELLED
                and not event.stats.n_generated
            ):
                # Stopped while its prompt was read: the same (a tour read "0 tokens in 0 target passes, nothing
                # drafted: no source found a draft" here). The count evaluated is not how far it got: a chat turn
                # evaluates only what its cache lacks.
                self._start = None
                self.status.setText(
                    f"Stopped while the prompt of {start.n_prompt:,} tokens was read ({start.n_prompt_evaluated:,} "
                    "evaluated, the rest from the cache or not reached): no answer."
                )
            elif record.kind is RecordKind.FINISHED and isinstance(event, FinishEvent):
                self._begin()
                self._show_steps(steps)
                steps = []
                self.events.append(event)
                self.finish(event)
            elif record.kind is RecordKind.FAILED:
                self.status.setText(record.message)
                self._no_model = record.message == NO_MODEL_LOADED
                self._figures_due = 0.0
            elif record.kind is RecordKind.PAUSED:
                self._figures_due = 0.0  # a paused step is read figure by figure
        self._show_steps(steps)

    def _begin(self) -> None:
        """Clear the last answer for this one, at its first step or its end (see ``_start``)."""
        if self._start is not None:
            self._reset(self.status.text(), self._start.sampled)  # what the start said ("prompt of … tokens …")
            self.series.costs_ms = self._start.verify_ms
            self.stats_strip.set_run(self.comparing)
            self.events.append(self._start)
            self._start = None

    def _show_steps(self, steps: list[StepEvent]) -> None:
        if steps:
            self._begin()
            self.view.append_steps(steps)
            self.series.add(steps)
            self.steps.extend(steps)
            self.events.extend(steps)
        now = time.monotonic()
        if self.steps and now >= self._figures_due:
            self._figures_due = now + FIGURES_S
            self.legend.set_counts(self.view.counts)
            self.stats_strip.show_stats(self.steps[-1].stats)

    def finish(self, event: FinishEvent) -> None:
        """Show the final totals."""
        self.series.set_stats(event.stats)
        self.legend.set_counts(self.view.counts)
        self.stats_strip.show_stats(event.stats)
        s = event.stats
        start = next((e for e in self.events if isinstance(e, StartEvent)), None)
        sources = sorted({st.source for st in self.steps if st.source})
        # Probes re-measure the draft model's cost: it drafted then, not because it paid (see draft_model_idle).
        probed = all(st.probe for st in self.steps if st.source == "draft")
        names = [SOURCE_NAMES.get(x, x) + (" (only to re-measure its cost)" if x == "draft" and probed else "")
                 for x in sources]  # fmt: skip
        drafted_by = f", drafted by {and_list(names)}" if names else ""
        strategy = start.strategy if start is not None else ""
        acceptance = drafts_phrase(strategy, self.steps, s.n_drafted, s.n_accepted, by=drafted_by,
                                   unread=draft_model_unread(start, self.steps))  # fmt: skip
        flash = f", flash attention {start.flash_text}" if start is not None else ""
        slowed = f" ({event.crowded_words})" if event.crowded_words else ""
        rate = f"{s.tokens_per_second:.1f} tokens/s{slowed}, " if s.n_generated > 1 else ""
        why = "" if event.reason is FinishReason.EOG else f" ({event.reason.words})"  # the figures say it ended
        self.status.setText(f"Finished{why}: {s.passes_text}, {rate}{acceptance}{flash}.")
