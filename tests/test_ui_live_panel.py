"""The live panel, charts and Teach for a known event sequence: colours, strike-through, order, counts,
tooltips, stats, axes, and the expected-speedup curve."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter, QTextCursor, QTextDocument

from speculens.engine.events import (
    DraftToken,
    EmittedToken,
    Event,
    FinishEvent,
    FinishReason,
    Origin,
    RunningStats,
    StartEvent,
    StepEvent,
)
from speculens.ui.charts import RATE_TOP, ChartsPanel, RunSeries, nice_end
from speculens.ui.live_panel import LivePanel, StatsStrip
from speculens.ui.token_view import KIND_STYLE, TokenInfo, TokenKind, TokenView, drafts_phrase
from speculens.ui.worker import Lane, Record, RecordKind
from speculens.words import percent

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")]

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


def stats(n_steps: int, n_generated: int, n_drafted: int, n_accepted: int) -> RunningStats:
    return RunningStats(n_steps, n_generated, n_drafted, n_accepted, 0.1 * n_steps, 0.01, 0.05, 0.001, (3, 1), (4, 4))


def d(text: str, accepted: bool, p: float = 0.9, q: float = 0.8) -> DraftToken:
    return DraftToken(ord(text[0]), text.encode(), p, q, accepted)


def e(text: str, origin: Origin) -> EmittedToken:
    return EmittedToken(ord(text[0]), text.encode(), origin)


def shown_charts(qtbot) -> tuple[RunSeries, ChartsPanel]:  # type: ignore[no-untyped-def]
    """An empty series and its charts, shown at a main window's width."""
    series = RunSeries()
    charts = ChartsPanel(series)
    qtbot.addWidget(charts)
    charts.resize(1400, 260)
    charts.show()
    return series, charts


A, C = Origin.ACCEPTED, Origin.CORRECTION
KNOWN_STEPS = [
    # Two drafts accepted, two rejected; the target corrects the third.
    StepEvent(1, 4, (d("Al", True), d("Be", True), d("Cx", False, 0.6, 0.1), d("Dx", False)),
              (e("Al", A), e("Be", A), e("Xc", C)), "AlBeXc", 1.0, 2.0, 0.1, stats(1, 3, 4, 2)),
    # All drafts accepted, so the target adds a bonus token.
    StepEvent(2, 2, (d("Ee", True), d("Ff", True)), (e("Ee", A), e("Ff", A), e("Yb", Origin.BONUS)),
              "EeFfYb", 1.0, 2.0, 0.1, stats(2, 6, 6, 4)),
    # No draft: plain target token.
    StepEvent(3, 4, (), (e("Zt", Origin.TARGET),), "Zt", 0.5, 2.0, 0.1, stats(3, 7, 6, 4)),
]  # fmt: skip
K = TokenKind
EXPECTED = [
    ("Al", K.ACCEPTED), ("Be", K.ACCEPTED), ("Cx", K.REJECTED), ("Dx", K.REJECTED), ("Xc", K.CORRECTION),
    ("Ee", K.ACCEPTED), ("Ff", K.ACCEPTED), ("Yb", K.BONUS), ("Zt", K.TARGET),
]  # fmt: skip


def char_format_at(view: TokenView, position: int):
    cursor = QTextCursor(view.document())
    cursor.setPosition(position + 1)  # the format of the character before the cursor
    return cursor.charFormat()


@pytest.fixture()
def panel(qtbot) -> LivePanel:
    strip = StatsStrip()
    p = LivePanel(RunSeries(), strip)
    qtbot.addWidget(p)
    qtbot.addWidget(strip)
    feed(p, [], queued=True)
    return p


def feed(sink: LivePanel, events: list[Event], queued: bool = False) -> None:
    """Hand events to a sink as the router would: as records of one chat request."""
    kinds = {StartEvent: RecordKind.STARTED, StepEvent: RecordKind.STEP, FinishEvent: RecordKind.FINISHED}
    records = [Record(1, Lane.CHAT, RecordKind.QUEUED)] if queued else []
    records += [Record(1, Lane.CHAT, kinds[type(e)], event=e) for e in events]
    if records:
        sink.on_records(records)


def test_an_answer_stopped_before_it_began_leaves_the_last_one_shown(panel: LivePanel) -> None:
    """A message that waited for a load, cancelled with it: a tour saw "Finished (stopped): 0 tokens in 0 target
    passes" and a strip of zeros, for an answer that never ran."""
    feed(panel, [*KNOWN_STEPS, FinishEvent(FinishReason.EOG, "AlBeXcEeFfYbZt", tuple(range(7)), stats(3, 7, 6, 4))])
    shown = panel.view.toPlainText()
    strip = panel.stats_strip.value_text("tokens")
    panel.on_records([Record(2, Lane.CHAT, RecordKind.QUEUED)])
    stopped = FinishEvent(FinishReason.CANCELLED, "", (), RunningStats())
    panel.on_records([Record(2, Lane.CHAT, RecordKind.FINISHED, event=stopped)])
    assert panel.status.text() == "Stopped before the answer began."
    assert panel.view.toPlainText() == shown and panel.stats_strip.value_text("tokens") == strip == "7"
    # Stopped while its prompt was read: the same, with how far the prompt got (a tour read "0 tokens in 0 target
    # passes, nothing drafted: no source found a draft").
    feed(panel, [StartEvent(2764, 1536, 15.6, "lookup+ngram-cache", 7), stopped])
    assert panel.status.text() == (
        "Stopped while the prompt of 2,764 tokens was read (1,536 evaluated, the rest from the cache or not reached): "
        "no answer."
    )
    assert panel.view.toPlainText() == shown and panel.stats_strip.value_text("tokens") == "7"
    feed(panel, [StartEvent(12, 12, 0.05, "lookup", 7), *KNOWN_STEPS[1:2]])  # the next answer replaces it
    assert panel.view.toPlainText() != shown and "generating" in panel.status.text()


def test_events_kept_as_json_come_back_as_they_were() -> None:
    """What a conversation keeps of its last answer: every event whole, a piece that is half a character included."""
    import json

    from speculens.engine.events import RunSettings, event_from_dict, event_to_dict

    half = StepEvent(4, 2, (DraftToken(9, "€".encode()[:2], None, 0.4, False),), (e("\n", Origin.TARGET),), "\n",
                     0.1, 2.0, 0.1, stats(4, 8, 7, 4), probe=True, offered=3, source="lookup",
                     expected_speedup=(1.0, 1.4), considered="lookup", threads=2)  # fmt: skip
    ran = RunSettings(0.8, 40, 0.95, 0.05, 8, 0, 0.75, True, 256, ("\n\n",))  # what chose a sampled answer's tokens
    ended = FinishEvent(FinishReason.CANCELLED, "AlBeXcEeFfYbZt\n", tuple(range(8)), stats(4, 8, 7, 4), 0.5, True)
    start = StartEvent(12, 10, 0.05, "auto", 7, flash_attn=True, settings=ran, verify_ms=(30.0, 55.5))
    events = [start, *KNOWN_STEPS, half, ended]
    kept = json.loads(json.dumps([event_to_dict(x, exact=True) for x in events]))
    assert [event_from_dict(x) for x in kept] == events
    assert event_to_dict(half)["drafted"][0]["piece"] == "\\xe2\\x82"  # the exports' spelling is unchanged
    older = {**kept[0], "settings": {"temperature": 0.8}}  # kept by another version: not known, not an error
    assert event_from_dict(older) == replace(events[0], settings=None)


def test_tokens_appear_in_order_with_their_colours(panel: LivePanel) -> None:
    feed(panel, KNOWN_STEPS)
    view = panel.view
    assert view.toPlainText() == "".join(text for text, _ in EXPECTED)
    assert [(i.text, i.kind) for i in view.infos] == EXPECTED
    for index, (text, kind) in enumerate(EXPECTED):
        position = 2 * index
        fmt = char_format_at(view, position)
        _label, (r, g, b, _a), foreground, strike = KIND_STYLE[kind]
        assert fmt.fontStrikeOut() is strike, text
        background = fmt.background().color()
        if kind is TokenKind.TARGET:
            assert fmt.background().style().name == "NoBrush", text
        else:
            assert (background.red(), background.green(), background.blue()) == (r, g, b), text
        if foreground:
            assert fmt.foreground().color() == QColor(foreground), text
        assert view.token_at(position).text == text
        assert view.token_at(position + 1).text == text


def test_drafts_after_the_end_of_the_answer_are_not_shown(panel: LivePanel) -> None:
    """An answer can end inside the accepted drafts (here at an end-of-generation token, the second draft):
    the drafts after its end are not tokens of the answer, accepted or rejected."""
    ended = StepEvent(1, 4, (d("Al", True), d("Eo", True), d("Cc", True), d("Dx", False)), (e("Al", A),),
                      "Al", 1.0, 2.0, 0.1, stats(1, 1, 1, 1))  # fmt: skip
    feed(panel, [ended])
    assert [(i.text, i.kind) for i in panel.view.infos] == [("Al", K.ACCEPTED)]
    from speculens.ui.teach_panel import explain_step

    said = explain_step(ended)
    assert "Accepted 3 of 4" in said and "ended in this step" in said and "grew by <b>1</b> token " in said
    assert "ended in this step" not in explain_step(KNOWN_STEPS[0])
    # From the tour of 2026-11-28: the step at the end-of-answer token read "The target generated one token by itself:
    # —", "only the 0 tokens before its end are kept", "The answer grew by 0 tokens": an error, to a newcomer.
    last = StepEvent(9, 0, (), (), "", 0.0, 2.0, 0.1, stats(9, 9, 0, 0))
    said = explain_step(last, "auto")
    assert "The answer ended here" in said and "0 tokens" not in said and "—" not in said


def test_counts_legend_and_stats_strip(panel: LivePanel, monkeypatch) -> None:
    from speculens.ui import live_panel

    clock = [100.0]
    monkeypatch.setattr(live_panel.time, "monotonic", lambda: clock[0])
    feed(panel, KNOWN_STEPS[:1])
    assert panel.stats_strip.value_text("tokens") == "3"
    feed(panel, KNOWN_STEPS[1:2])  # the next batch of steps, sooner than FIGURES_S: the figures wait for it
    assert panel.stats_strip.value_text("tokens") == "3" and "accepted&nbsp;draft</span>&nbsp;2" in panel.legend.text()
    clock[0] += live_panel.FIGURES_S
    feed(panel, KNOWN_STEPS[2:])
    assert panel.view.counts == {
        TokenKind.ACCEPTED: 4,
        TokenKind.REJECTED: 2,
        TokenKind.CORRECTION: 1,
        TokenKind.BONUS: 1,
        TokenKind.TARGET: 1,
    }
    legend = panel.legend.text()
    assert "accepted&nbsp;draft</span>&nbsp;4" in legend and "rejected&nbsp;draft</span>&nbsp;2" in legend
    assert panel.legend.accessibleName().startswith("Legend: 4 accepted draft, 2 rejected draft, 1 target")
    strip = panel.stats_strip
    assert strip.value_text("counts") == "4 / 6"
    assert strip.value_text("acceptance") == "67%"
    assert strip.value_text("tokens") == "7"
    assert strip.value_text("mean_len") == "2.33"


def test_an_answers_end_shows_its_figures_however_soon_it_comes(panel: LivePanel, monkeypatch) -> None:
    from speculens.ui import live_panel

    monkeypatch.setattr(live_panel.time, "monotonic", lambda: 100.0)  # every batch within FIGURES_S
    feed(panel, KNOWN_STEPS[:1])
    feed(panel, KNOWN_STEPS[1:])
    assert panel.stats_strip.value_text("tokens") == "3"
    feed(panel, [FinishEvent(FinishReason.EOG, "", (), stats(3, 7, 6, 4))])
    assert panel.stats_strip.value_text("tokens") == "7" and panel.stats_strip.value_text("counts") == "4 / 6"
    assert "accepted&nbsp;draft</span>&nbsp;4" in panel.legend.text()


def test_tooltip_says_step_probabilities_and_verdict(panel: LivePanel) -> None:
    feed(panel, KNOWN_STEPS)
    rejected = panel.view.token_at(4)  # "Cx"
    assert rejected is not None and rejected.kind is TokenKind.REJECTED
    tip = rejected.tooltip()
    assert "step 1" in tip and "draft probability 0.600" in tip and "target probability 0.100" in tip
    # Greedy (the answer's start says so; both probabilities known all the same): the choices were compared.
    assert "rejected by the target" in tip and "draw" not in tip
    assert "accepted by the target" in panel.view.token_at(0).tooltip()
    # Sampled: the draw is said, with its chance (a tour read "target probability 0.657, rejected by the target" as
    # a wrong refusal of a token the target gave 66%).
    feed(panel, [StartEvent(12, 12, 0.05, "draft", 7, sampled=True), *KNOWN_STEPS], queued=True)
    tip = panel.view.token_at(4).tooltip()
    assert "a chance of min(1, p/q) = min(1, 0.10/0.60) = 0.17 to be kept: the draw rejected it" in tip
    assert "= 0.89 to be kept: the draw kept it" in panel.view.token_at(0).tooltip()
    free = TokenInfo(TokenKind.REJECTED, "Cx", 1, None, 0.3, "lookup", sampled=True)  # a source without q
    assert "rejected: the target's own sample here was another token" in free.tooltip()


def test_teach_explains_a_sampled_step_by_its_draws(qtbot) -> None:
    """From a new-user tour: Teach said "every drafted token matched the target" and "the target's own choice
    replaces the rejected token" of sampled steps, and rejection sampling was named nowhere but in the primer."""
    from speculens.ui.teach_panel import explain_step

    rejected = explain_step(KNOWN_STEPS[0], "draft", sampled=True)
    assert "had a chance of min(1, p/q) = min(1, 0.10/0.60) = 0.17 to be kept, and the draw rejected it" in rejected
    assert "max(0, p − q) normalised, replaces the rejected one: <code>«Xc»</code>" in rejected
    kept = explain_step(KNOWN_STEPS[1], "draft", sampled=True)
    assert "every draw kept it" in kept and "for free, sampled from the target" in kept
    free = replace(KNOWN_STEPS[0], drafted=tuple(replace(t, draft_prob=None) for t in KNOWN_STEPS[0].drafted))
    said = explain_step(free, "lookup", sampled=True)
    assert "the target's own sample was another token than <code>«Cx»</code>" in said
    assert "the target's own sample there, <code>«Xc»</code>, replaces the rejected token" in said
    # The panel knows from the answer's start event that it samples.
    from speculens.ui.teach_panel import TeachPanel

    teach = TeachPanel(RunSeries())
    qtbot.addWidget(teach)
    start = StartEvent(12, 12, 0.05, "draft", 7, sampled=True)
    feed(teach, [start, *KNOWN_STEPS, FinishEvent(FinishReason.EOG, "x", (1,), stats(3, 7, 6, 4))], queued=True)  # type: ignore[arg-type]
    assert "every draw kept it" in teach.explanation.toPlainText()  # its last step that drafted
    greedy = explain_step(KNOWN_STEPS[0], "draft")  # greedy: choices, not draws
    assert "the target disagreed at token 3" in greedy and "draw" not in greedy
    assert "every drafted token matched the target" in explain_step(KNOWN_STEPS[1], "draft")


def test_the_status_says_which_flash_attention_setting_the_answer_decoded_with(panel: LivePanel) -> None:
    feed(panel, [StartEvent(12, 12, 0.05, "lookup", 7, flash_attn=False)], queued=True)
    assert "flash attention off" in panel.status.text() and "generating" in panel.status.text()
    assert panel.status.text().startswith("Drafting from prompt lookup: prompt of 12 tokens")
    feed(panel, [*KNOWN_STEPS, FinishEvent(FinishReason.EOG, "AlBeXcEeFfYbZt", tuple(range(7)), stats(3, 7, 6, 4))])
    assert panel.status.text().startswith("Finished: ") and "flash attention off" in panel.status.text()
    feed(panel, [StartEvent(12, 12, 0.05, "lookup", 7, flash_attn=None)], queued=True)
    assert "flash attention as llama.cpp decides" in panel.status.text()


def test_the_status_names_the_draft_sources_in_words(panel: LivePanel) -> None:
    """From the tour of 2026-12-04: "Strategy lookup+ngram-cache+draft" beside the toolbar's "lookup, n-gram cache"."""
    feed(panel, [StartEvent(12, 12, 0.05, "lookup+ngram-cache+draft", 7)], queued=True)
    assert panel.status.text().startswith("Drafting from prompt lookup, the n-gram cache and the draft model:")
    feed(panel, [StartEvent(12, 12, 0.05, "none", 7)], queued=True)
    assert panel.status.text().startswith("Plain decoding: prompt of 12 tokens")
    # A draft model the controller keeps idle is not said to draft (a tour read the line above beside a toolbar
    # saying "draft idle: cannot pay here").
    feed(panel, [StartEvent(12, 12, 0.05, "lookup+ngram-cache+draft", 7, draft_idle=True)], queued=True)
    assert panel.status.text().startswith(
        "Drafting from prompt lookup and the n-gram cache (the draft model sits out: it cannot pay on this machine):"
    )


def test_the_status_counts_the_pass_that_ended_the_answer(panel: LivePanel) -> None:
    """A tour read "101 tokens in 102 target passes" under a plain answer and could not tell where a pass went: the
    last one produced the end of the answer, which is not a token of it."""
    plain = [StepEvent(n, 0, (), (e("Zt", Origin.TARGET),), "Zt", 0.0, 2.0, 0.1, stats(n, n, 0, 0)) for n in (1, 2)]
    ended = replace(stats(3, 2, 0, 0), n_ended=1)
    feed(panel, [*plain, FinishEvent(FinishReason.EOG, "ZtZt", (1, 2), ended)], queued=True)
    assert "2 tokens and the end of the answer in 3 target passes," in panel.status.text()
    feed(panel, [*plain, FinishEvent(FinishReason.MAX_TOKENS, "ZtZt", (1, 2), stats(2, 2, 0, 0))], queued=True)
    assert "2 tokens in 2 target passes," in panel.status.text()


def test_the_status_says_why_a_loaded_draft_model_never_drafted(panel: LivePanel) -> None:
    """A tour read "drafted by prompt lookup" under every answer of the demo pair, and could not tell why the draft
    model it had loaded never drafted."""
    first, second = (replace(step, source="lookup") for step in KNOWN_STEPS[:2])
    plain = replace(KNOWN_STEPS[2], considered="draft", expected_speedup=(1.0, 0.73, 0.64))
    end = FinishEvent(FinishReason.EOG, "AlBeXcEeFfYbZt", tuple(range(7)), stats(3, 7, 6, 4))
    feed(panel, [StartEvent(12, 12, 0.05, "lookup+ngram-cache+draft", 7), first, second, plain, end])
    # Said of the draft model on its own: a tour read "would not pay on this answer (×0.72…)" under an answer that
    # lookup had made 2.6 times faster, as a verdict on the answer.
    assert (
        "drafted by prompt lookup; the draft model sat out (on its own it would have run at ×0.73 of plain decoding"
        in panel.status.text()
    )
    feed(panel, [StartEvent(12, 12, 0.05, "lookup+ngram-cache", 7), first, second, plain, end])  # not loaded
    assert "draft model" not in panel.status.text()
    by_draft = replace(second, source="draft")
    feed(panel, [StartEvent(12, 12, 0.05, "lookup+ngram-cache+draft", 7), first, by_draft, plain, end])
    assert "sat out" not in panel.status.text()  # it drafted
    # A draft model that only probed (to re-measure its cost) did not draft because it paid: a tour read "drafted by
    # the draft model and prompt lookup" under 0% accepted and took the pair for broken.
    probed = replace(by_draft, probe=True)
    feed(panel, [StartEvent(12, 12, 0.05, "lookup+ngram-cache+draft", 7), first, probed, plain, end])
    said = panel.status.text()
    assert "drafted by the draft model (only to re-measure its cost) and prompt lookup" in said
    assert "; the draft model sat out (on its own it would have run at ×0.73" in said


def test_an_answer_that_drafted_nothing_says_why_the_loaded_draft_model_did_not_too() -> None:
    """From a new-user tour of the demo pair: the line under an answer that drafted nothing blamed prompt lookup's
    drafts, and never said that the draft model it had loaded could not pay on this machine."""
    lookup = replace(KNOWN_STEPS[2], considered="lookup", expected_speedup=(1.0, 0.9))
    draft = replace(KNOWN_STEPS[2], considered="draft", expected_speedup=(1.0, 0.21))
    weighed, drafted = [lookup, draft] * 8, [draft] * 16  # 16 steps: an answer long enough to say why
    # Under a short answer, no paragraph of reasons: a two-token "Hello!" read two lines of them (seen under Xvfb).
    assert drafts_phrase("lookup+ngram-cache+draft", weighed[:15], 0, 0) == "nothing drafted"
    phrase = drafts_phrase("lookup+ngram-cache+draft", weighed, 0, 0)
    assert "prompt lookup's drafts, scored against the answer as it came, were not right often enough" in phrase
    assert phrase.endswith(
        "; the draft model sat out (on its own it would have run at ×0.21 of plain decoding at best; untick Adaptive "
        "in Settings to watch it draft anyway)"
    )
    alone = drafts_phrase("draft", drafted, 0, 0)  # its own reason, said once
    assert alone.count("draft model would not pay") == 1
    # Not given a long prompt whose reading it could not win back: that is why, not its rate with the catch-up.
    unread = drafts_phrase("lookup+ngram-cache+draft", weighed, 0, 0, unread=2764)
    assert unread.endswith(
        "; the draft model sat out (reading 2,764 prompt tokens would have cost it more than it could save on "
        "this answer)"
    )
    assert "×0.21" not in unread
    alone = drafts_phrase("draft", drafted, 0, 0, unread=2764)  # its rate counted the catch-up on all of it
    assert alone == (
        "nothing drafted; the draft model sat out (reading 2,764 prompt tokens would have cost it more than it could "
        "save on this answer)"
    )
    # And an acceptance says what it is of (a tour read 100% of 4 drafted tokens as a strong result).
    assert drafts_phrase("lookup", [], 4, 4).startswith("acceptance 100% (4 of 4 drafted)")


def test_finish_and_series_feed_the_charts(qtbot, panel: LivePanel) -> None:
    feed(panel, KNOWN_STEPS)
    final = stats(3, 7, 6, 4)
    feed(panel, [FinishEvent(FinishReason.EOG, "AlBeXcEeFfYbZt", tuple(range(7)), final)])
    assert panel.status.text().startswith("Finished: 7 tokens in 3 target passes")  # not "(the answer ended)"
    series = panel.series
    assert series.emitted == [3, 3, 1] and series.accepted == [2, 2, 0]
    # α counts judged tokens only: 4 accepted + 1 rejection.
    assert series.alpha == pytest.approx(4 / 5)
    charts = ChartsPanel(series)
    qtbot.addWidget(charts)
    charts.refresh()
    x, y = charts.accept_step.getData()
    assert list(x) == [1.0, 2.0] and list(y) == [0.5, 1.0]
    assert list(charts.position_bars.opts["height"]) == [0.75, 0.25]
    # Each bar's samples: under the pointer, and faint where they are too few to go by (a tour's finding).
    assert series.position_tip(1) == "Draft position 1: 3 of 4 drafted tokens accepted (75%) (too few to go by)"
    assert series.position_tip(3) == ""
    alphas = [brush.color().alpha() for brush in charts.position_bars.opts["brushes"]]
    assert alphas == [60, 60]
    charts.resize(900, 300)
    charts.show()
    qtbot.waitExposed(charts)
    charts.position_plot.getViewBox().setXRange(0, 3, padding=0)
    charts._on_scene_mouse_moved(charts.position_plot.getViewBox().mapViewToScene(QPointF(2.1, 0.1)))
    assert charts.graphics.toolTip() == series.position_tip(2)
    assert list(charts.chosen_curve.getData()[1]) == [4.0, 2.0, 4.0]  # the draft length asked for each step


def test_the_adaptive_choice_and_its_probes_are_charted_and_explained(qtbot) -> None:
    from speculens.ui.teach_panel import explain_step

    plain = StepEvent(1, 0, (), (e("Zt", Origin.TARGET),), "Zt", 0.1, 2.0, 0.1, stats(1, 1, 0, 0), offered=5)
    probe = StepEvent(2, 2, (d("Al", True), d("Bx", False)), (e("Al", A), e("Xc", C)), "AlXc", 0.1, 2.0, 0.1,
                      stats(2, 3, 2, 1), probe=True, offered=6)  # fmt: skip
    series = RunSeries()
    series.add([plain, probe])
    charts = ChartsPanel(series)
    qtbot.addWidget(charts)
    charts.refresh()
    assert list(charts.chosen_curve.getData()[1]) == [0.0, 2.0]
    x, y = charts.probe_marks.getData()
    assert list(x) == [2.0] and list(y) == [2.0]
    # The legend says "▲ probe": the mark's one corner is at its top (a tour saw ▼; a path's y grows downwards).
    from pyqtgraph.graphicsItems.ScatterPlotItem import Symbols

    mark = Symbols[charts.probe_marks.opts["symbol"]]
    ys = [mark.elementAt(i).y for i in range(mark.elementCount() - 1)]  # the last point closes the path
    assert ys.count(min(ys)) == 1 and ys.count(max(ys)) == 2
    text = explain_step(plain)
    assert "Plain step" in text and "proposed 5 tokens" in text and "verified none" in text
    text = explain_step(probe)
    assert "<b>probe</b>" in text and "of 6 proposed" in text
    # A probe expected to lose is not said to be what makes speculation pay (a tour read that above "plain decoding
    # (k = 0) is fastest here"), nor "all 1 positions".
    losing = replace(probe, expected_speedup=(1.0, 0.8, 0.61), considered="draft", source="draft")
    text = explain_step(losing)
    assert "checked the 2 drafted tokens in <i>one</i> batched pass" in text
    assert "expected to run at ×0.61 of plain decoding, slower, to learn" in text and "pay off" not in text
    one = replace(losing, drafted=losing.drafted[:1], probe=False, expected_speedup=(1.0, 1.3), n_draft_max=1)
    text = explain_step(one)
    assert "checked the drafted token in" in text and "expected to run at ×1.30 of plain decoding." in text
    # A draft model that stopped short of the length chosen: the figure is of the length the controller chose.
    short = replace(losing, drafted=losing.drafted[:1], probe=False, expected_speedup=(1.0, 1.3, 1.45))
    assert "expected to run at ×1.45 of plain decoding." in explain_step(short)
    assert "probe" not in explain_step(KNOWN_STEPS[0])
    # From the tour of 2026-11-28: a probe whose draft model proposed nothing read "Plain step: speculation would
    # not pay", beside a chart marking the probe; a last rejected token read "it and the 0 after it are thrown
    # away"; a token with no text was shown as «».
    empty = StepEvent(3, 3, (), (e("Zt", Origin.TARGET),), "Zt", 125.0, 2.0, 0.1, stats(3, 4, 2, 1), probe=True,
                      expected_speedup=(1.0, 0.7), considered="draft")  # fmt: skip
    text = explain_step(empty)
    assert "A probe that found no draft" in text and "would not pay" not in text and "p_min" in text
    last = StepEvent(4, 2, (d("Al", True), DraftToken(7, b"", 0.9, 0.1, False)), (e("Al", A), e("Xc", C)), "AlXc",
                     0.1, 2.0, 0.1, stats(4, 6, 4, 2))  # fmt: skip
    text = explain_step(last)
    assert "it is thrown away" in text and "the 0 after it" not in text and "a special token with no text" in text


def test_html_export_keeps_colours_and_strikes(panel: LivePanel) -> None:
    feed(panel, KNOWN_STEPS)
    page = panel.view.html_fragment()
    assert page.count("line-through") >= 2 + 1  # two rejected tokens and the legend
    assert 'class="bonus"' in page and "step 2" in page
    # Escaped once, as an attribute: a tour's browser showed "&nbsp;Below" from a tooltip's rich text escaped twice.
    spaced = e(" Below <b>", Origin.TARGET)
    panel.view.append_steps([StepEvent(5, 0, (), (spaced,), " Below <b>", 0, 0, 0, stats(5, 9, 7, 4))])
    page = panel.view.html_fragment()
    assert "&amp;nbsp;" not in page and 'title="\xa0Below\xa0&lt;b&gt; — ' in page


def test_split_utf8_character_is_shown_once_whole(qtbot) -> None:
    view = TokenView()
    qtbot.addWidget(view)
    euro = "€".encode()
    smile = EmittedToken(3, "😀".encode(), Origin.TARGET)
    steps = [
        StepEvent(1, 0, (), (EmittedToken(1, euro[:1], Origin.TARGET),), "", 0, 0, 0, stats(1, 1, 0, 0)),
        StepEvent(2, 0, (), (EmittedToken(2, euro[1:], Origin.TARGET),), "€", 0, 0, 0, stats(2, 2, 0, 0)),
        StepEvent(3, 0, (), (smile, EmittedToken(4, b"x", Origin.TARGET)),
                  "", 0, 0, 0, stats(3, 4, 0, 0)),
    ]  # fmt: skip
    view.append_steps(steps)
    assert view.toPlainText() == "€😀x"
    # "😀" is two UTF-16 units: the token after it must still be found at its position.
    assert view.token_at(3).text == "x"


def test_twenty_thousand_tokens_append_incrementally(qtbot) -> None:
    """A long answer in 30 Hz-sized batches; the timing is written for people, not asserted."""
    view = TokenView()
    qtbot.addWidget(view)
    view.show()
    n_steps = 5000
    # Words with spaces and a line break now and then, like real answers (the view wraps at word boundaries).
    steps = [
        StepEvent(i, 3, (d("ab", True), d("cd ", True), d("ef", False)),
                  (e("ab", A), e("cd ", A), e("gh\n" if i % 8 == 0 else "gh ", C)), "", 0, 0, 0,
                  stats(i, 3 * i, 3 * i, 2 * i))
        for i in range(1, n_steps + 1)
    ]  # fmt: skip
    batch = 100
    worst = 0.0
    t0 = time.perf_counter()
    for start in range(0, n_steps, batch):
        t = time.perf_counter()
        view.append_steps(steps[start : start + batch])
        qtbot.wait(0)  # let the view lay out and paint, as the event loop would between ticks
        worst = max(worst, time.perf_counter() - t)
    total = time.perf_counter() - t0
    assert view.counts[TokenKind.ACCEPTED] == 2 * n_steps
    assert view.counts[TokenKind.CORRECTION] == n_steps
    assert len(view.infos) == 4 * n_steps  # 15,000 answer tokens + 5,000 rejected drafts
    assert view.document().characterCount() - 1 == 10 * n_steps + n_steps // 8  # a corrected line break: ⏎ too
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "token_view_timing.json").write_text(
        json.dumps({"tokens": 4 * n_steps, "batches": n_steps // batch, "total_s": total, "worst_batch_s": worst}),
        encoding="utf-8",
    )


# ---- Teach: the curve from measured costs, and plain steps that say why (item 8) -------------------------


def declined_step(step: int, expected: tuple[float, ...]) -> StepEvent:
    return StepEvent(step, 0, (), (e("Zt", Origin.TARGET),), "Zt", 0.0, 2.0, 0.1, stats(step, step, 0, 0),
                     offered=6, expected_speedup=expected, considered="draft")  # fmt: skip


def test_teach_curve_is_the_controllers_estimate_and_agrees_with_its_choice(qtbot) -> None:
    from speculens.ui.teach_panel import TeachPanel

    series = RunSeries()
    teach = TeachPanel(series)
    qtbot.addWidget(teach)
    expected = (1.0, 0.93, 0.81, 0.7, 0.62)  # what the controller computed: nothing beats plain decoding
    step = declined_step(4, expected)
    feed(teach, [step], queued=True)  # type: ignore[arg-type]
    teach.on_records([Record(1, Lane.CHAT, RecordKind.PAUSED, event=step)])
    _k, y = teach.curve.getData()
    assert list(y) == list(expected)  # never a curve of acceptance alone, which would promise ×1.4–×2.3
    assert "plain decoding (k = 0) is fastest" in teach.curve_label.text()
    text = teach.explanation.toPlainText()
    assert "Plain step: speculation would not pay" in text and "×0.93" in text and "proposed 6 tokens" in text
    assert re.search(r"would not pay\. [A-Z]", text)  # the next sentence starts as one
    assert "untick Adaptive in Settings" in text and "example rename a new chat offers" in text  # to see one draft
    # Under a strategy without prompt lookup the rename drafts nothing either: the hint says to choose one that has it
    # (a teacher's tour read the plain hint while running the rename with the draft model alone).
    from speculens.ui.teach_panel import explain_step

    assert "strategy has no prompt lookup" not in text
    alone = QTextDocument()
    alone.setHtml(explain_step(step, "draft"))
    assert "choose the Automatic or Prompt lookup strategy" in alone.toPlainText()


def test_a_hidden_teach_panel_draws_its_curve_when_shown_or_at_the_answers_end(qtbot) -> None:
    """Redrawing a curve no one sees took the window's thread, and so llama.cpp's core, while an answer ran."""
    from speculens.ui.teach_panel import TeachPanel

    teach = TeachPanel(RunSeries())
    qtbot.addWidget(teach)
    first, second = declined_step(4, (1.0, 0.93, 0.81)), declined_step(5, (1.0, 0.9, 0.8, 0.7))
    feed(teach, [first], queued=True)  # type: ignore[arg-type]
    assert not teach.isVisible() and len(teach.curve.getData()[1] or ()) == 0  # skipped while hidden
    teach.show()
    qtbot.waitExposed(teach)
    assert list(teach.curve.getData()[1]) == [1.0, 0.93, 0.81]  # caught up when shown
    feed(teach, [second])  # type: ignore[arg-type]
    assert list(teach.curve.getData()[1]) == [1.0, 0.9, 0.8, 0.7]  # and kept current while seen
    teach.hide()
    feed(teach, [first, FinishEvent(FinishReason.EOG, "x", (1,), stats(4, 4, 0, 0))])  # type: ignore[arg-type]
    assert list(teach.curve.getData()[1]) == [1.0, 0.93, 0.81]  # an answer's end draws it, seen or not


def test_a_step_near_the_answers_end_does_not_shrink_the_teach_curve(qtbot) -> None:
    """From a new-user tour: after the last step the chart shrank to k = 0..1, the answer's end being a token
    away; the chart keeps the widest k of this answer and says why the curve stops short."""
    from speculens.ui.teach_panel import TeachPanel

    teach = TeachPanel(RunSeries())
    qtbot.addWidget(teach)
    teach.resize(600, 500)
    wide, last = declined_step(4, (1.0, 0.93, 0.81, 0.7, 0.62, 0.6, 0.55)), declined_step(5, (1.0, 0.9))
    feed(teach, [wide, last], queued=True)  # type: ignore[arg-type]
    teach.on_records([Record(1, Lane.CHAT, RecordKind.PAUSED, event=wide)])
    teach.on_records([Record(1, Lane.CHAT, RecordKind.PAUSED, event=last)])
    assert list(teach.curve.getData()[1]) == [1.0, 0.9]
    assert teach.curve_plot.getViewBox().viewRange()[0][1] >= 6
    assert "at most k = 1" in teach.curve_label.text()
    feed(teach, [last], queued=True)  # type: ignore[arg-type]  # a new answer starts afresh
    teach.on_records([Record(2, Lane.CHAT, RecordKind.PAUSED, event=last)])
    assert teach.curve_plot.getViewBox().viewRange()[0][1] < 3 and "at most" not in teach.curve_label.text()
    # Rates from 0 to a round number above the curve and its dashed ×1 line, the same for curves that differ a
    # little (autoranged, the axis read 0.4–0.8, 0.6–1.0, then 0.95–1.10 on three steps, the ×1 line unlabelled).
    assert teach.curve_plot.getViewBox().viewRange()[1] == [0, 1.2]
    higher = declined_step(6, (1.0, 1.08, 1.1))
    teach.on_records([Record(2, Lane.CHAT, RecordKind.PAUSED, event=higher)])
    assert teach.curve_plot.getViewBox().viewRange()[1] == [0, 1.2]


def test_a_step_with_nothing_to_weigh_keeps_the_last_curve_and_the_caption_stays_short(qtbot) -> None:
    """From the tour of 2026-12-06: the curve was drawn at step 1, gone at step 2 (no draft on offer) and back at
    step 7; and the caption, five lines long, left the explanation three lines of a short dock."""
    from speculens.ui.teach_panel import TeachPanel

    teach = TeachPanel(RunSeries())
    qtbot.addWidget(teach)
    weighed, bare = declined_step(1, (1.0, 0.85, 0.7)), declined_step(2, ())
    feed(teach, [weighed], queued=True)  # type: ignore[arg-type]
    teach.on_records([Record(1, Lane.CHAT, RecordKind.PAUSED, event=weighed)])
    assert teach.curve_label.text().startswith("The draft model at step 1: this step alone. Marked:")
    assert "not the answer's" in teach.curve_label.toolTip()  # a tour read ×1.05 beside Compare's ×1.48
    assert "acceptance it has learnt" in teach.curve_label.toolTip()  # how it is computed: on hovering
    assert "acceptance it has learnt" not in teach.curve_label.text()
    feed(teach, [bare])  # type: ignore[arg-type]
    teach.on_records([Record(1, Lane.CHAT, RecordKind.PAUSED, event=bare)])
    assert list(teach.curve.getData()[1]) == [1.0, 0.85, 0.7]  # still drawn
    assert "at step 1 (the last step with a draft to weigh)" in teach.curve_label.text()
    assert "Step 2" in teach.explanation.toPlainText()  # the explanation is the step's own
    feed(teach, [bare], queued=True)  # type: ignore[arg-type]  # a new answer: nothing of the last one
    teach.on_records([Record(2, Lane.CHAT, RecordKind.PAUSED, event=bare)])
    assert teach.curve.getData()[1] is None or len(teach.curve.getData()[1]) == 0


def test_the_explanation_keeps_most_of_a_short_teach_dock(qtbot) -> None:
    """From the tour of 2026-12-06: in a 1280×800 window the explanation showed four lines of each step, and its
    splitter would not move (both sides at their minimum)."""
    from speculens.ui.teach_panel import TeachPanel

    teach = TeachPanel(RunSeries())
    qtbot.addWidget(teach)
    teach.resize(375, 385)  # the Teach dock of a 1280×800 window beside the Charts dock
    teach.show()
    step = declined_step(4, (1.0, 0.93, 0.81, 0.7, 0.62))
    feed(teach, [step], queued=True)  # type: ignore[arg-type]
    teach.on_records([Record(1, Lane.CHAT, RecordKind.PAUSED, event=step)])
    lines = teach.explanation.fontMetrics().lineSpacing()
    qtbot.waitUntil(lambda: teach.explanation.height() >= 10 * lines, timeout=3000)
    assert teach.curve_plot.height() >= teach.curve_plot.minimumHeight()


def test_a_plain_step_says_which_kind_of_plain_step_it_is() -> None:
    from speculens.ui.teach_panel import explain_step

    none = StepEvent(1, 0, (), (e("Zt", Origin.TARGET),), "Zt", 0.0, 2.0, 0.1, stats(1, 1, 0, 0))
    assert "strategy is <i>none</i>" in explain_step(none)
    held = declined_step(2, (1.0, 1.3, 1.2))
    assert "held back" in explain_step(held) and "loss guard" in explain_step(held)
    declined = explain_step(declined_step(3, (1.0, 0.9)))
    assert "would not pay" in declined and "or" not in declined.split("</b>")[0]


def test_the_fallback_curve_uses_the_measured_draft_and_verification_costs() -> None:
    """High acceptance but a draft as slow as the target: the curve must stay below plain decoding."""
    series = RunSeries()
    running = RunningStats()
    steps = []
    for i in range(1, 9):
        drafted = 4 if i % 2 else 0
        running = RunningStats(
            n_steps=i, n_generated=running.n_generated + (5 if drafted else 1), n_drafted=running.n_drafted + drafted,
            n_accepted=running.n_accepted + drafted, elapsed_s=0.1 * i, draft_s=running.draft_s + 0.04 * drafted,
            verify_s=running.verify_s + 0.04,
        )  # fmt: skip
        drafts = tuple(d("Ab", True) for _ in range(drafted))
        emitted = (*tuple(e("Ab", A) for _ in range(drafted)), e("Zt", Origin.BONUS if drafted else Origin.TARGET))
        steps.append(StepEvent(i, drafted, drafts, emitted, "", 40.0 * drafted, 40.0 + 2 * drafted, 0.1, running))
    series.add(steps)
    curve = series.speedup_curve(8)
    assert curve is not None and series.alpha == 1.0
    assert curve[0] == pytest.approx(1.0) and max(curve[1:]) < 1.0


def fixed_length_steps(n_draft: int, accepted: int, verify_ms: float, draft_ms: float) -> list[StepEvent]:
    """An answer with Adaptive off: every step drafts ``n_draft`` and keeps ``accepted`` (no plain step timed), from
    step 2 (the first step's pending token comes with the prompt: its pass is a batch of ``n_draft``)."""
    steps, running = [], RunningStats()
    for i in range(2, 8):
        running = RunningStats(
            n_steps=i, n_generated=running.n_generated + accepted + 1, n_drafted=running.n_drafted + n_draft,
            n_accepted=running.n_accepted + accepted, elapsed_s=0.1 * i,
            draft_s=running.draft_s + n_draft * draft_ms / 1e3, verify_s=running.verify_s + verify_ms / 1e3,
        )  # fmt: skip
        drafts = tuple(d("Ab", j < accepted) for j in range(n_draft))
        emitted = (*(e("Ab", A) for _ in range(accepted)), e("Zt", Origin.BONUS if accepted == n_draft else C))
        steps.append(StepEvent(i, n_draft, drafts, emitted, "", n_draft * draft_ms, verify_ms, 0.1, running))
    return steps


def test_with_a_fixed_draft_length_the_curve_takes_the_costs_measured_at_load() -> None:
    """A teacher's tour: Adaptive off, the draft model drafting every step, and the curve never appeared ("once this
    answer has timed a plain step"), though the costs were measured at load."""
    series = RunSeries()
    series.add(fixed_length_steps(4, 4, verify_ms=180.0, draft_ms=10.0))
    assert series.speedup_curve(8) is None  # no plain step timed, no costs from the start
    series.costs_ms = (30.0, 45.0, 60.0, 75.0, 90.0)  # a pass over 5 tokens: 3 single steps at load
    costs = series.verify_ms(9)
    assert costs is not None and not costs[1]
    # This answer's passes of 5 took 180 ms, twice what the table said: the machine is slower now, so all scale.
    assert costs[0][:5] == pytest.approx([60.0, 90.0, 120.0, 150.0, 180.0]) and costs[0][8] == pytest.approx(300.0)
    curve = series.speedup_curve(8)
    assert curve is not None and series.alpha == 1.0
    assert curve[4] == pytest.approx(5 * 60.0 / (4 * 10.0 + 180.0))
    # Noisy costs that read a bigger pass as cheaper: never extrapolated below the last measured one (a review's: the
    # curve went below zero past the table's end).
    noisy = RunSeries()
    noisy.costs_ms = (30.0, 60.0, 50.0)
    noisy.add(fixed_length_steps(2, 2, verify_ms=50.0, draft_ms=1.0))
    far = noisy.verify_ms(33)
    assert far is not None and far[0][-1] == pytest.approx(50.0) and (far[0] > 0).all()
    series.add([StepEvent(8, 0, (), (e("Zt", Origin.TARGET),), "", 0.0, 50.0, 0.1, series.stats)])  # type: ignore[arg-type]
    assert series.verify_ms(9)[1]  # type: ignore[index]  # a plain step timed: the answer's own costs


def test_the_teach_curve_says_why_it_is_below_one_at_full_acceptance(qtbot) -> None:  # type: ignore[no-untyped-def]
    """A teacher's tour saw the curve under ×1 for k = 4-11 at α = 1.00, with nothing to say why."""
    from speculens.ui.teach_panel import TeachPanel

    series = RunSeries()
    series.costs_ms = (30.0, 60.0, 80.0, 100.0, 120.0)
    series.add(fixed_length_steps(4, 4, verify_ms=120.0, draft_ms=15.0))
    teach = TeachPanel(series)
    qtbot.addWidget(teach)
    teach.set_n_draft(4)
    text = teach.curve_label.text()
    assert text.startswith("From the session's measured costs") and "α = 1.00" in text
    # 4 × 15 ms of drafting and a 120 ms pass: 180 ms, six plain steps of 30 ms for at most five tokens.
    assert "drafting 4 (60 ms) and verifying 5 take 180 ms, as long as 6.0 plain steps of 30 ms" in text
    assert "more than the 5 tokens a pass gives with every draft accepted" in text
    # And the step itself says whether it paid (the tour's step texts never did with a fixed draft length).
    teach.show_step(fixed_length_steps(4, 4, verify_ms=120.0, draft_ms=15.0)[-1])
    said = teach.explanation.toPlainText()
    assert "Drafting and verifying took 180 ms for 5 tokens; plain decoding would have taken about 150 ms" in said
    assert "it did not pay" in said
    cheap = RunSeries()
    cheap.costs_ms = series.costs_ms
    steps = fixed_length_steps(4, 4, verify_ms=120.0, draft_ms=1.0)
    cheap.add(steps)
    teach.series = cheap
    teach.update_curve()
    assert "Marked: k = 4, ×1.21" in teach.curve_label.text() and "plain steps of" not in teach.curve_label.text()
    teach.show_step(steps[-1])
    said = teach.explanation.toPlainText()
    assert "took 124 ms for 5 tokens" in said and "it paid" in said
    teach.show_step(StepEvent(9, 0, (), (e("Zt", Origin.TARGET),), "", 0.0, 30.0, 0.1, steps[-1].stats))
    assert "Did it pay" not in teach.explanation.toPlainText()  # a plain step: nothing to weigh


def test_the_exported_slides_copy_of_the_charts_is_gone_after_the_export(qtbot) -> None:  # type: ignore[no-untyped-def]
    """The PNG's off-screen copy of the panel, left to Python's collector (its signals' closures hold it in cycles),
    was destroyed after the application at exit: CI's whole test run ended in a segfault."""
    import gc

    import shiboken6

    def alive() -> int:
        return sum(1 for o in gc.get_objects() if isinstance(o, ChartsPanel) and shiboken6.isValid(o))

    panel = ChartsPanel(RunSeries())
    qtbot.addWidget(panel)
    before = alive()
    assert panel.grab_png("a caption").width() == 2 * 960
    assert alive() == before


def test_a_first_step_without_a_pass_is_not_a_measured_batch() -> None:
    """The first step's pending token comes with the prompt: a plain first step costs no pass (0 ms)."""
    series = RunSeries()
    first = StepEvent(1, 0, (), (e("Zt", Origin.TARGET),), "Zt", 0.0, 0.0, 0.1, stats(1, 1, 0, 0))
    plain = StepEvent(2, 0, (), (e("Zt", Origin.TARGET),), "Zt", 0.0, 30.0, 0.1, stats(2, 2, 0, 0))
    drafted = StepEvent(3, 2, (d("Al", True), d("Bx", False)), (e("Al", A), e("Xc", C)), "AlXc", 1.0, 50.0, 0.1,
                        stats(3, 4, 2, 1))  # fmt: skip
    assert (first.batch, plain.batch, drafted.batch) == (0, 1, 3)
    series.add([first, plain, drafted])
    assert series.batch_ms == {1: [30.0], 3: [50.0]}
    curve = series.speedup_curve(4)
    assert curve is not None and np.all(np.isfinite(curve)) and curve[0] == pytest.approx(1.0)
    # A batch timed at 0 ms (a coarse clock) gives no curve, not NaN or infinite points for Teach's plot to bound.
    zero = RunSeries()
    timed_zero = StepEvent(2, 0, (), (e("Zt", Origin.TARGET),), "Zt", 0.0, 0.0001, 0.1, stats(2, 2, 0, 0))
    zero.add([first, timed_zero, replace(drafted, verify_ms=0.0)])
    zero.batch_ms = {1: [0.0], 3: [0.0]}
    assert zero.speedup_curve(4) is None
    # Tokens per second are counted as llama.cpp counts them: the prompt's token has no rate of its own.
    _, rolling, average = series.tokens_per_second()
    assert np.isnan(rolling[0]) and np.isnan(average[0])
    assert average[-1] == pytest.approx((4 - 1) / 0.3) == drafted.stats.tokens_per_second


def test_an_answer_of_two_passes_still_draws_its_rate(qtbot) -> None:
    # A tour's answer took two passes (the prompt's token, then one copied draft): one finite rate, which a line
    # cannot draw, and the chart stayed empty under "7.4 tokens/s".
    series = RunSeries()
    first = StepEvent(1, 0, (), (e("Zt", Origin.TARGET),), "Zt", 0.0, 0.0, 0.1, stats(1, 1, 0, 0))
    copied = StepEvent(2, 2, (d("Al", True), d("Bx", True)), (e("Al", A), e("Bx", A), e("Xc", C)), "AlBxXc", 0.0,
                       50.0, 0.1, stats(2, 4, 2, 2))  # fmt: skip
    series.add([first, copied])
    charts = ChartsPanel(series)
    qtbot.addWidget(charts)
    charts.refresh()
    for curve in (charts.speed_rolling, charts.speed_average):
        _x, y = curve.getData()
        assert np.count_nonzero(np.isfinite(y)) == 1 and curve.opts["symbol"] is not None
    series.add([replace(copied, step=3, stats=stats(3, 7, 4, 4))])
    charts.refresh()
    assert charts.speed_rolling.opts["symbol"] is None  # a line again, once it has two points


# ---- charts: axes, titles, a cleared series (item 13, and the version that must never go back) ----------


def test_chart_axes_count_in_whole_numbers_from_zero_without_legends(qtbot) -> None:
    series = RunSeries()
    series.add(KNOWN_STEPS)
    series.set_stats(stats(3, 7, 6, 4))
    charts = ChartsPanel(series)
    qtbot.addWidget(charts)
    charts.resize(1400, 260)
    charts.show()
    charts.refresh()
    qtbot.wait(20)
    for plot, axis in ((charts.position_plot, "bottom"), (charts.accept_plot, "bottom"), (charts.length_plot, "bottom"),
                       (charts.length_plot, "left")):  # fmt: skip
        ax = plot.getAxis(axis)
        low, high = ax.range
        values = [v for _spacing, level in ax.tickValues(low, high, ax.width() or 300) for v in level]
        assert values and all(float(v).is_integer() for v in values), (plot.titleLabel.text, axis, values)
    # The rate axes are labelled up to 1 at the window's chart height (a teacher's tour read rates of 100% on an axis
    # labelled up to 0.8: pyqtgraph stopped labelling once four labels filled 40% of it).
    charts.resize(1270, 190)
    qtbot.wait(20)
    for plot in (charts.accept_plot, charts.position_plot):
        ax = plot.getAxis("left")
        image = QImage(10, 10, QImage.Format.Format_ARGB32)
        painter = QPainter(image)
        try:
            specs = ax.generateDrawSpecs(painter)
        finally:
            painter.end()
        labels = [text for _rect, _flags, text in specs[2]]
        assert "1.0" in labels or "1" in labels, (plot.titleLabel.text, labels)
    for plot in (charts.speed_plot, charts.accept_plot, charts.length_plot, charts.position_plot):
        assert plot.legend is None
        limits = plot.getViewBox().state["limits"]
        assert limits["xLimits"][0] == 0 and limits["yLimits"][0] == 0
    for plot in (charts.speed_plot, charts.accept_plot, charts.length_plot, charts.position_plot):
        for side in ("left", "bottom"):  # "0.2 seconds", never "200 seconds (x0.001)"
            assert not plot.getAxis(side).autoSIPrefix and "(x" not in plot.getAxis(side).labelString()
    x, rolling, average = series.tokens_per_second()
    assert (x > 0).all() and (average[np.isfinite(average)] >= 0).all()
    # Rates are drawn from zero, the highest in view (a swing of 1 token/s filled the plot from its lowest rate).
    # It ends on a round number a little above them (see the next test).
    low, high = charts.speed_plot.getViewBox().viewRange()[1]
    rates = np.concatenate([rolling, average])
    assert low == 0 and np.nanmax(rates) < high <= 1.05 * 4 / 3 * np.nanmax(rates)
    assert high == nice_end(high)


def test_nice_ends_are_round_and_at_most_a_third_apart() -> None:
    ends = [nice_end(v) for v in np.linspace(0.05, 500, 20_000)]
    assert all(nice_end(end) == end for end in ends)  # round numbers: an end is its own end
    assert {1.2, 2.5, 8.0, 15.0, 40.0, 300.0} <= set(ends)
    for v, end in zip(np.linspace(0.05, 500, 20_000), ends, strict=True):
        assert v <= end <= 4 / 3 * v + 1e-9
    assert nice_end(0.0) == nice_end(float("nan")) == 1.0


def test_a_refresh_draws_the_axes_again_only_when_their_range_changes(qtbot) -> None:
    """pyqtgraph draws an axis and its grid again whenever its range or tick spacing is set; autoranged axes and
    tick spacings set at every refresh made that most of the charts' processor time (2026-12-06: 15 ms a refresh,
    and a window that decoded 4.5% slower than the CLI). The growing axes now end on round numbers."""
    series, charts = shown_charts(qtbot)
    qtbot.waitExposed(charts)

    def plain_steps(first: int, last: int) -> list[StepEvent]:
        return [StepEvent(n, 0, (), (e("Zt", Origin.TARGET),), "Zt", 0.0, 70.0, 0.1,
                          replace(stats(n, n, 0, 0), elapsed_s=0.07 * n)) for n in range(first, last + 1)]  # fmt: skip

    series.add(plain_steps(1, 45))
    charts.refresh()
    qtbot.waitUntil(lambda: all(charts.speed_plot.getAxis(side).picture is not None for side in ("left", "bottom")))
    axes = [plot.getAxis(side) for plot in (charts.speed_plot, charts.accept_plot, charts.length_plot)
            for side in ("left", "bottom")]  # fmt: skip
    # Drawn and settled: the first layout can draw an axis twice (its tick labels widen it), on a loaded machine
    # after the first picture was there (1 run in 3 of this file failed so while a build ran beside it).
    drawn: list[object] = []
    for _ in range(50):
        qtbot.wait(100)
        if drawn == (now := [axis.picture for axis in axes]) and None not in now:
            break
        drawn = now
    series.add(plain_steps(46, 48))  # 48 steps, 3.4 s: the same 0–50 steps and 0–4 s
    charts.refresh()
    qtbot.wait(50)
    assert [axis.picture for axis in axes] == drawn  # not drawn again
    assert charts.accept_plot.getViewBox().viewRange()[0] == [0, 50] and len(charts.accept_rolling.getData()[0]) == 48
    series.add(plain_steps(49, 60))  # past 50 steps: the step axes grow to the next round end
    charts.refresh()
    assert charts.accept_plot.getViewBox().viewRange()[0] == [0, 80]


def test_a_chart_the_user_zoomed_keeps_its_view_until_the_next_answer(qtbot) -> None:
    series, charts = shown_charts(qtbot)
    series.add([replace(KNOWN_STEPS[0], step=i + 1) for i in range(40)])
    charts.refresh()
    box = charts.accept_plot.getViewBox()
    box.scaleBy(x=0.5)  # what the wheel does, announced as the user's
    box.sigRangeChangedManually.emit(box.state["mouseEnabled"])
    zoomed = box.viewRange()[0]
    series.add([replace(KNOWN_STEPS[0], step=i + 1) for i in range(40, 90)])
    charts.refresh()
    assert box.viewRange()[0] == zoomed
    assert charts.length_plot.getViewBox().viewRange()[0] == [0, 100]  # the others follow the answer
    box.scaleBy(y=0.5)  # and its rates' axis
    box.sigRangeChangedManually.emit(box.state["mouseEnabled"])
    series.clear()
    series.add([replace(KNOWN_STEPS[0], step=i + 1) for i in range(3)])
    charts.refresh()
    assert box.viewRange() == [[0, nice_end(3 * 1.02)], [0, RATE_TOP]]  # the next answer is shown whole
    # Zoomed again, then its "A" (auto-range) button: it follows the answer again, rates from 0 (pyqtgraph's own
    # autorange, left in charge, began the tokens/s axis at the lowest rate).
    speed = charts.speed_plot
    speed.getViewBox().scaleBy(x=0.5, y=0.5)
    speed.getViewBox().sigRangeChangedManually.emit(speed.getViewBox().state["mouseEnabled"])
    speed.autoBtnClicked()
    series.add([replace(KNOWN_STEPS[0], step=i + 1) for i in range(3, 6)])
    charts.refresh()
    assert speed.getViewBox().viewRange()[1][0] == 0 and not any(speed.getViewBox().autoRangeEnabled())


def test_ticks_follow_a_zoom_out(qtbot) -> None:
    """Spaced for a zoom into ten steps, the same ticks over 500 steps were a smear of digits (a review's)."""
    series, charts = shown_charts(qtbot)
    series.add([replace(KNOWN_STEPS[2], step=i + 1) for i in range(500)])
    charts.refresh()
    for plot in (charts.accept_plot, charts.length_plot, charts.position_plot):
        box, axis = plot.getViewBox(), plot.getAxis("bottom")
        box.setXRange(10, 16, padding=0)  # as the wheel would, between two refreshes
        assert axis.tickSpacing(10, 16, 300)[0][0] == 1
        box.setXRange(0, 500, padding=0)
        lo, hi = box.viewRange()[0]
        assert (hi - lo) / axis.tickSpacing(lo, hi, 300)[0][0] <= 10


def test_a_cleared_series_never_reuses_a_version(qtbot) -> None:
    series = RunSeries()
    charts = ChartsPanel(series)
    qtbot.addWidget(charts)
    series.add(KNOWN_STEPS)
    charts.refresh()
    drawn = series.version
    series.clear()
    series.add(KNOWN_STEPS[:1])  # a new answer with fewer changes than the old one had
    assert series.version > drawn
    charts.refresh()
    assert list(charts.chosen_curve.getData()[1]) == [4.0]  # the new answer, not the old one


def test_new_answer_clears_the_panel_and_its_figures_when_it_starts(panel: LivePanel) -> None:
    feed(panel, KNOWN_STEPS)
    shown = panel.view.toPlainText()
    feed(panel, [], queued=True)  # not yet: an answer that cannot start leaves the last one's (see test_ui_chat)
    assert panel.view.toPlainText() == shown and panel.series.step and panel.status.text() == "Starting…"
    feed(panel, [StartEvent(3, 3, 0.01, "auto")])  # its prompt read: it may still be stopped before its first step
    assert panel.view.toPlainText() == shown and "generating" in panel.status.text()
    feed(panel, [KNOWN_STEPS[0]])
    assert panel.series.step == [KNOWN_STEPS[0].step] and len(panel.events) == 2  # the start and the step
    assert shown not in panel.view.toPlainText() and panel.stats_strip.value_text("tokens") != "7"


def test_step_ticks_do_not_pile_up_when_a_new_answer_starts_in_the_last_ones_range(qtbot) -> None:
    """From a user tour: at the first step of an answer the step axes read '1234567891011…', the last answer's
    range (one point sets none) with ticks one step apart."""
    series, charts = shown_charts(qtbot)
    steps = [replace(KNOWN_STEPS[0], step=i + 1) for i in range(40)]
    series.add(steps)
    charts.refresh()
    qtbot.waitUntil(lambda: charts.accept_plot.getViewBox().viewRange()[0][1] > 30, timeout=5_000)
    series.clear()
    series.add(steps[:1])
    charts.refresh()
    for plot in (charts.accept_plot, charts.length_plot):
        lo, hi = plot.getViewBox().viewRange()[0]
        major = plot.getAxis("bottom").tickSpacing(lo, hi, 300)[0][0]
        assert (hi - lo) / major <= 10, (lo, hi, major)


def test_cleared_charts_drop_the_last_answers_scales(qtbot) -> None:
    """From a new-user tour: after New chat, the empty charts kept the last answer's axes (steps 0–40, 12 tokens/s)."""
    series, charts = shown_charts(qtbot)
    series.add([replace(KNOWN_STEPS[0], step=i + 1) for i in range(40)])
    charts.refresh()
    qtbot.waitUntil(lambda: charts.accept_plot.getViewBox().viewRange()[0][1] > 30, timeout=5_000)
    series.clear()
    charts.refresh()
    for plot in (charts.speed_plot, charts.accept_plot, charts.length_plot):
        assert plot.getViewBox().viewRange()[0][1] <= 1.0
    assert charts.position_plot.getViewBox().viewRange()[0] == [0, 5]  # a few positions wide (see MIN_POSITIONS)
    series.add([replace(KNOWN_STEPS[0], step=i + 1) for i in range(20)])  # and the next answer sets its own
    charts.refresh()
    qtbot.waitUntil(lambda: charts.accept_plot.getViewBox().viewRange()[0][1] > 15, timeout=5_000)


def test_a_new_answers_first_redraw_drops_the_last_answers_scales(qtbot) -> None:
    """From a new-user tour, in step mode: the first step of a new answer was drawn on the last answer's axes
    (140 steps, 6 s), since no redraw had seen the series empty in between."""
    series, charts = shown_charts(qtbot)
    series.add([replace(KNOWN_STEPS[0], step=i + 1) for i in range(40)])
    charts.refresh()
    qtbot.waitUntil(lambda: charts.accept_plot.getViewBox().viewRange()[0][1] > 30, timeout=5_000)
    series.clear()
    series.add([replace(KNOWN_STEPS[0], step=1)])  # no redraw in between
    charts.refresh()
    qtbot.waitUntil(lambda: charts.accept_plot.getViewBox().viewRange()[0][1] < 5, timeout=5_000)
    assert charts.length_plot.getViewBox().viewRange()[0][1] < 5


def test_position_ticks_do_not_pile_up_when_an_answer_drafts_nothing(qtbot) -> None:
    """From a new-user tour: after an answer with drafts at 34 positions, one that drafted nothing kept that range
    on the 'Acceptance by draft position' axis with ticks one apart: '1234567891011…' in one smear."""
    series, charts = shown_charts(qtbot)
    series.add(KNOWN_STEPS)
    series.set_stats(replace(stats(3, 7, 6, 4), drafted_by_position=(4,) * 34, accepted_by_position=(2,) * 34))
    charts.refresh()
    qtbot.waitUntil(lambda: charts.position_plot.getViewBox().viewRange()[0][1] > 30, timeout=5_000)
    series.clear()
    series.add(KNOWN_STEPS[2:])
    series.set_stats(replace(stats(1, 1, 0, 0), drafted_by_position=(), accepted_by_position=()))
    charts.refresh()
    lo, hi = charts.position_plot.getViewBox().viewRange()[0]
    major = charts.position_plot.getAxis("bottom").tickSpacing(lo, hi, 300)[0][0]
    assert (hi - lo) / major <= 10, (lo, hi, major)


def test_a_rejected_drafts_line_breaks_are_shown_not_made(panel: LivePanel) -> None:
    """The answer's own lines stay as it wrote them: a rejected draft spanning lines shows ⏎ instead."""
    step = StepEvent(1, 2, (d("A\n", True), d("B\n    x", False)), (e("A\n", A), e("C", C)), "A\nC",
                     1.0, 2.0, 0.1, stats(1, 2, 2, 1))  # fmt: skip
    feed(panel, [step])
    assert panel.view.toPlainText() == "A\nB⏎    xC"
    assert [i.kind for i in panel.view.infos] == [K.ACCEPTED, K.REJECTED, K.CORRECTION]
    assert panel.view.token_at(len("A\nB⏎    x")).text == "C"  # positions still land on their tokens
    assert ">B⏎    x</span>" in panel.view.html_fragment()  # the export too (a tour's code shifted there)


def test_a_rejected_token_with_no_text_and_a_corrected_line_break_can_be_seen(panel: LivePanel) -> None:
    """From the tour of 2026-12-06: the legend counted a rejected draft and a correction, and the text showed no red
    and no orange: the draft had no text, and the correction was a line break at a line's end."""
    empty = DraftToken(151645, b"", 0.9, 0.0, False)  # an end-of-answer token, say
    step = StepEvent(1, 2, (d("A", True), empty), (e("A", A), EmittedToken(10, b"\n", C)), "A\n",
                     1.0, 2.0, 0.1, stats(1, 2, 2, 1))  # fmt: skip
    feed(panel, [step])
    assert panel.view.toPlainText() == "A∅⏎\n"
    assert [i.kind for i in panel.view.infos] == [K.ACCEPTED, K.REJECTED, K.CORRECTION]
    assert panel.view.token_at(1).kind is K.REJECTED and panel.view.token_at(2).kind is K.CORRECTION
    assert "∅ (a special token with no text" in panel.view.token_at(1).tooltip()
    assert ">∅</span>" in panel.view.html_fragment() and ">⏎\n</span>" in panel.view.html_fragment()


def test_the_answer_token_where_two_answers_part_is_underlined(panel: LivePanel) -> None:
    """From the tour of 2026-12-06: Compare named the token where the answers part, and the reader searched two long
    answers for it by eye. The n-th token of the answer is the n-th emitted one: rejected drafts are not counted."""
    step = StepEvent(1, 2, (d("A", True), d("Bx", False)), (e("A", A), e("C", C)), "AC",
                     1.0, 2.0, 0.1, stats(1, 2, 2, 1))  # fmt: skip
    feed(panel, [step])
    view = panel.view
    assert view.toPlainText() == "ABxC"
    assert view.mark_answer_token(1) and not view.mark_answer_token(2)  # the answer has two tokens

    def underlined(position: int) -> bool:
        cursor = QTextCursor(view.document())
        cursor.setPosition(position + 1)  # the format of the character before the cursor
        return cursor.charFormat().fontUnderline()

    assert underlined(3) and not any(underlined(i) for i in range(3))  # "C", not the rejected "Bx"
    assert view.textCursor().position() == 3


def test_the_charts_paint_within_their_budget_of_the_gui_thread(qtbot) -> None:
    """Every paint counts, in processor time, and the next refresh waits until they fit the charts' budget: while
    the window paints, it takes a core from llama.cpp's threads."""
    series, charts = shown_charts(qtbot)
    qtbot.waitExposed(charts)
    series.add(KNOWN_STEPS)
    charts.graphics.painted += 0.2  # as if the last refresh had painted for 0.2 s of CPU (a slow machine)
    before = time.perf_counter()
    charts._on_timer_timeout()
    assert charts._drawn == series.version  # it refreshed
    assert charts._next_refresh - before >= 0.2 / charts.budget - 0.01
    series.add(KNOWN_STEPS[:1])
    charts._on_timer_timeout()  # too early: the data waits
    assert charts._drawn != series.version
    # Handing the plots their data counts too, not the painting alone (it was most of the charts' time).
    refresh = charts.refresh

    def slow_refresh() -> None:
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.02:  # 20 ms of processor time, as pyqtgraph's setData may take
            pass
        refresh()

    charts.refresh = slow_refresh  # type: ignore[method-assign]
    charts._next_refresh = 0.0
    before = time.perf_counter()
    charts._on_timer_timeout()
    assert charts._drawn == series.version
    assert charts._next_refresh - before >= 0.02 / charts.budget - 0.01


def test_the_charts_take_less_of_a_core_where_llama_cpp_takes_every_core(monkeypatch) -> None:
    """Every moment the charts paint is taken from decoding where llama.cpp's threads have every core."""
    from speculens.engine import backend
    from speculens.ui import charts as charts_module

    monkeypatch.setattr(backend, "default_threads", lambda: 2)  # 2 cores: the engine uses both
    assert charts_module.paint_budget() == charts_module.PAINT_BUDGET_NO_SPARE_CORE
    assert charts_module.paint_budget(threads=1) == charts_module.PAINT_BUDGET  # the setting leaves one
    monkeypatch.setattr(backend, "default_threads", lambda: 8)  # the automatic count leaves one to the window
    assert charts_module.paint_budget() == charts_module.PAINT_BUDGET
    assert charts_module.paint_budget(threads=8) == charts_module.PAINT_BUDGET_NO_SPARE_CORE  # a user's 8 of 8
    assert charts_module.PAINT_BUDGET_NO_SPARE_CORE < charts_module.PAINT_BUDGET


def test_the_solid_grid_looks_like_pyqtgraphs_translucent_one_behind_the_data(qtbot) -> None:
    """Grid lines are drawn solid (a translucent line costs Qt's raster engine about twenty times more), in the
    colour the translucent line showed: the same picture, but the data is drawn over the grid."""
    import pyqtgraph as pg
    from PySide6.QtGui import QPalette

    from speculens.ui.charts import solid_grid, solid_grid_axes

    def darken(widget: pg.PlotWidget) -> None:  # the window's theme is the ground the grid is blended for
        palette = widget.palette()
        palette.setColor(QPalette.ColorRole.Window, QColor(40, 40, 40))
        widget.setPalette(palette)

    def plot(solid: bool, dark: bool = False) -> pg.PlotWidget:
        widget = pg.PlotWidget(axisItems=solid_grid_axes() if solid else None)
        qtbot.addWidget(widget)
        widget.setBackground(None)
        if dark:
            darken(widget)
        widget.resize(400, 300)
        if solid:
            solid_grid(widget.getPlotItem())
        else:
            widget.showGrid(x=True, y=True, alpha=0.25)
        widget.setXRange(0, 50, padding=0)
        widget.setYRange(0, 1, padding=0)
        widget.show()
        qtbot.waitExposed(widget)
        return widget

    def pixels(widget: pg.PlotWidget) -> np.ndarray:  # type: ignore[type-arg]
        image = widget.grab().toImage()
        image = image.convertToFormat(image.Format.Format_RGB32)
        rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
        bgra = rows[:, : 4 * image.width()].reshape(image.height(), image.width(), 4)  # RGB32, little-endian
        return bgra[:, :, 2::-1].astype(int)

    light = (plot(False), plot(True))
    images = {"light": [pixels(w) for w in light]}
    images["dark"] = [pixels(plot(False, dark=True)), pixels(plot(True, dark=True))]
    # The theme changes while the window is open: the lines are blended again, and the view's cached background
    # (pyqtgraph's, which kept the old ground until a resize) is drawn again, by the next paint.
    for widget in light:
        darken(widget)
        pixels(widget)
    light[0].resetCachedContent()  # pyqtgraph's own grid is not redrawn on the new ground without this
    qtbot.wait(50)
    images["switched to dark"] = [pixels(w) for w in light]
    for theme, (translucent, solid) in images.items():
        ground = np.median(solid.reshape(-1, 3), axis=0)
        off_ground = np.abs(translucent - ground).max(axis=2) > 8
        assert off_ground.sum() > 1000  # there is a grid (and tick labels) to compare
        # Where two translucent lines cross they darken each other; solid ones do not. Everywhere else, the same.
        on_solid = np.abs(solid - ground).max(axis=2) > 0  # the faintest lines too
        rows, cols = on_solid.mean(axis=1) > 0.5, on_solid.mean(axis=0) > 0.5
        assert rows.sum() >= 3 and cols.sum() >= 3  # grid lines across the plot both ways
        crossings = np.outer(rows, cols)
        assert np.abs(translucent - solid).max(axis=2)[~crossings].max() <= 2, theme

    widget = plot(True)  # data over the grid: a bar across it hides the lines it covers
    widget.addItem(pg.BarGraphItem(x=[25], height=[1], width=20, brush=(200, 0, 0), pen=None))
    view = widget.getPlotItem().getViewBox()
    corner = [widget.mapFromScene(view.mapViewToScene(QPointF(x, y))) for x, y in ((17, 0.9), (33, 0.1))]
    inside = pixels(widget)[corner[0].y() : corner[1].y(), corner[0].x() : corner[1].x()]
    assert inside.size and (inside == (200, 0, 0)).all()
    item = widget.getPlotItem()
    for side in ("left", "bottom"):
        axis = item.getAxis(side)
        assert axis.zValue() < item.getViewBox().zValue()  # behind the data
        canvas = widget.grab()
        painter = QPainter(canvas)
        specs = axis.generateDrawSpecs(painter)
        painter.end()
        assert specs is not None and specs[1]
        assert all(pen.color().alpha() == 255 for pen, _a, _b in specs[1])


def test_a_plain_step_of_a_speculative_strategy_is_not_called_the_none_strategy() -> None:
    """From a walk in the app: the default's first steps (its costs still being measured) were explained as
    'no draft source is in use (the strategy is none)' while the toolbar said free drafts."""
    from speculens.ui.teach_panel import explain_step

    first = StepEvent(1, 0, (), (e("Zt", Origin.TARGET),), "Zt", 0.1, 2.0, 0.1, stats(1, 1, 0, 0))
    assert "strategy is <i>none</i>" in explain_step(first, "none")
    said = explain_step(first, "lookup+ngram-cache+draft")
    assert "strategy is" not in said and "costs are still being measured" in said


def test_the_legend_s_growing_counts_never_widen_the_panel(panel: LivePanel) -> None:
    # The counts grow with the answer: the legend wraps between its kinds rather than widen the dock (and with it
    # the window) by a digit's width each time a count gains one. In one row, five kinds took 718 pixels here.
    panel.legend.set_counts(dict.fromkeys(TokenKind, 123456))
    assert panel.minimumSizeHint().width() < 300
    assert panel.legend.heightForWidth(250) > panel.legend.heightForWidth(2000)  # two rows or more when narrow


def test_the_teach_caption_never_lies_over_its_chart_in_a_short_dock(qtbot) -> None:
    # A wrapped label's height is left out of a layout's minimum, so a short dock laid the caption (four lines at
    # this width) over the chart's axis. Its minimum height is now its text's, and the panel asks for the room.
    from speculens.ui.teach_panel import TeachPanel

    teach = TeachPanel(RunSeries())
    qtbot.addWidget(teach)
    teach.show()
    teach.resize(400, 600)
    step = declined_step(4, (1.0, 0.93, 0.81, 0.7, 0.62))
    feed(teach, [step], queued=True)  # type: ignore[arg-type]
    teach.on_records([Record(1, Lane.CHAT, RecordKind.PAUSED, event=step)])
    teach.resize(400, 200)  # shorter than the panel can be: it keeps its minimum

    def laid_out() -> None:
        caption = teach.curve_label
        assert caption.height() >= caption.heightForWidth(caption.width()) > caption.fontMetrics().height()
        assert caption.geometry().top() > teach.curve_plot.geometry().bottom()

    qtbot.waitUntil(laid_out, timeout=3000)
    assert teach.minimumSizeHint().height() >= teach.curve_plot.height() + teach.curve_label.height()


def test_teach_curve_ticks_do_not_pile_up_when_a_step_offers_fewer_tokens_than_before(qtbot) -> None:
    """From the tour of 2026-11-28: after a step of 34 tokens the axis kept 0–34 for a 5-token step, labelled at every
    k: '9101112131415…'."""
    from speculens.ui.teach_panel import TeachPanel

    teach = TeachPanel(RunSeries())
    qtbot.addWidget(teach)
    teach.show()
    for n in (34, 5):
        teach.last_step = replace(KNOWN_STEPS[0], expected_speedup=tuple(1.0 + 0.01 * k for k in range(n + 1)))
        teach.update_curve()
    plot = teach.curve_plot
    lo, hi = plot.getViewBox().viewRange()[0]
    assert hi >= 34  # the range kept, so steps compare
    major = plot.getAxis("bottom").tickSpacing(lo, hi, 300)[0][0]
    assert (hi - lo) / major <= 10, (lo, hi, major)


def test_after_an_answer_teach_explains_its_last_step_that_drafted(qtbot) -> None:
    """From the tour of 2026-11-29: an answer ran fast on prompt lookup, and Teach then showed its final step, a
    plain one whose curve (the draft model's estimate) read all below ×1, beside an answer that had sped up."""
    from speculens.ui.teach_panel import TeachPanel

    teach = TeachPanel(RunSeries())
    qtbot.addWidget(teach)
    drafted = replace(KNOWN_STEPS[1], source="lookup", considered="lookup", expected_speedup=(1.0, 1.4, 1.7))
    plain = [replace(declined_step(n, (1.0, 0.8, 0.7)), considered="draft") for n in (3, 4)]
    finish = FinishEvent(FinishReason.EOG, "x", (1,), stats(4, 8, 6, 4))
    feed(teach, [KNOWN_STEPS[0], drafted, *plain, finish], queued=True)  # type: ignore[arg-type]
    text = teach.explanation.toPlainText()
    assert "Step 2" in text and "its last step that drafted (2 plain steps followed it, to step 4)" in text
    assert "at step 2" in teach.curve_label.text() and "×1.70" in teach.curve_label.text()
    # Compare ends twice (its speculative half, then the verdict): the lead stays.
    teach.on_records([Record(1, Lane.CHAT, RecordKind.COMPARED)])
    assert "its last step that drafted (2 plain steps followed it, to step 4)" in teach.explanation.toPlainText()
    # An answer whose last step drafted: that step, without the lead.
    feed(teach, [KNOWN_STEPS[0], drafted, finish], queued=True)  # type: ignore[arg-type]
    text = teach.explanation.toPlainText()
    assert "Step 2" in text and "last step that drafted" not in text
    # An answer that never drafted: its last step, whose curve says why.
    feed(teach, [*plain, finish], queued=True)  # type: ignore[arg-type]
    assert "Step 4" in teach.explanation.toPlainText() and "at step 4" in teach.curve_label.text()
    # ... even when its last step only ended it (the tour of 2026-12-05 followed "see Teach" under such an answer
    # to "The answer ended here"): the step before, which says why it decoded plainly.
    ending = replace(plain[1], step=5, emitted=(), expected_speedup=())
    feed(teach, [*plain, ending, finish], queued=True)  # type: ignore[arg-type]
    text = teach.explanation.toPlainText()
    assert "without a draft verified" in text and "Step 4" in text and "would not pay" in text
    assert "The answer ended here" not in text
    # Where the answer's line says the controller held speculation back, so does Teach: it explains the step where a
    # draft came nearest to paying, not a last step where no source had one (a tour read the two reasons).
    held = replace(declined_step(4, (1.0, 1.2, 1.1)), considered="lookup")
    nothing = replace(declined_step(5, ()), considered=None, offered=None)
    feed(teach, [plain[0], held, nothing, finish], queued=True)  # type: ignore[arg-type]
    text = teach.explanation.toPlainText()
    assert "Step 4" in text and "came nearest to paying (×1.20" in text and "held back" in text


def test_the_mouse_wheel_over_the_teach_curve_does_not_zoom_it(qtbot) -> None:
    """From the tour of 2026-11-29: scrolling over the curve zoomed it out of sight."""
    from PySide6.QtCore import QPoint, QPointF, Qt
    from PySide6.QtGui import QWheelEvent
    from PySide6.QtWidgets import QApplication

    from speculens.ui.teach_panel import TeachPanel

    teach = TeachPanel(RunSeries())
    qtbot.addWidget(teach)
    teach.resize(500, 600)
    teach.show()
    teach.last_step = replace(KNOWN_STEPS[0], expected_speedup=(1.0, 1.3, 1.5, 1.4))
    teach.update_curve()
    view = teach.curve_plot.getViewBox()
    before = view.viewRange()
    viewport = teach.curve_plot.viewport()
    centre = QPointF(viewport.rect().center())
    axis = teach.curve_plot.getAxis("left")
    on_axis = teach.curve_plot.mapFromScene(axis.sceneBoundingRect().center())
    for at in (centre, QPointF(on_axis)):
        for _ in range(5):
            wheel = QWheelEvent(at, QPointF(viewport.mapToGlobal(QPoint(int(at.x()), int(at.y())))), QPoint(),
                                QPoint(0, 240), Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                                Qt.ScrollPhase.NoScrollPhase, False)  # fmt: skip
            QApplication.sendEvent(viewport, wheel)
            assert not wheel.isAccepted()  # left to the dock around it, which scrolls
    assert view.viewRange() == before  # over the plot and over an axis alike


def test_teach_text_can_grow_without_the_curve_vanishing(qtbot) -> None:
    """From the tour of 2026-11-28: the step text showed three lines, and dragging the splitter down to read the rest
    collapsed the curve out of sight."""
    from speculens.ui.teach_panel import TeachPanel

    teach = TeachPanel(RunSeries())
    qtbot.addWidget(teach)
    teach.resize(400, 700)
    teach.show()
    qtbot.wait(20)
    lines = teach.explanation.height() / teach.explanation.fontMetrics().lineSpacing()
    assert lines >= 6
    teach.splitter.moveSplitter(10_000, 1)  # the handle dragged to the bottom
    qtbot.wait(20)
    assert teach.curve_plot.height() >= teach.curve_plot.minimumHeight() >= 120 and teach.curve_plot.isVisible()


def test_a_captioned_chart_has_its_caption_written_above_it(qtbot) -> None:
    """An exported chart says what it measured, in a band above the plots, wrapped to their width."""
    from PySide6.QtGui import QPixmap

    from speculens.ui.charts import captioned

    plots = QPixmap(300, 100)
    plots.fill(QColor("blue"))
    assert captioned(plots, "").height() == 100
    caption = "Target qwen2.5-coder-1.5b-instruct-q4_k_m.gguf; strategy auto; temperature 0; " * 3
    image = captioned(plots, caption).toImage()
    band = image.height() - 100
    assert image.width() == 300 and band > 3 * QFontMetrics(QFont()).lineSpacing()  # wrapped to several lines
    dark = sum(image.pixelColor(x, y).value() < 128 for x in range(300) for y in range(band))
    assert dark > 100  # text drawn in the band
    assert image.pixelColor(150, band + 50) == QColor("blue")  # the plots below it, whole


def test_a_lone_rate_point_then_none_never_hands_the_plot_a_point_without_a_value(qtbot, monkeypatch) -> None:
    """One rate is drawn as a point (a scatter). The next answer's first step has no rate: the point's scatter was
    handed the NaN before its symbol went, and pyqtgraph's bounds of an all-NaN scatter warn inside Qt's call of
    boundingRect(). Under the tests' warnings-as-errors that exception reached a PySide error path that freed a
    method still in use, and the suite crashed in 1 of 5 runs of a file."""
    series, charts = shown_charts(qtbot)
    rates = {
        "one": (np.array([0.1, 0.2]), np.array([np.nan, 5.0]), np.array([np.nan, 5.0])),
        "none": (np.array([0.1]), np.array([np.nan]), np.array([np.nan])),
    }
    for case in ("one", "none", "one"):
        monkeypatch.setattr(series, "tokens_per_second", lambda case=case: rates[case])
        series.version += 1
        charts.refresh()
        charts.graphics.grab()  # painted, bounds and all
        for curve in (charts.speed_rolling, charts.speed_average):
            x, y = curve.scatter.getData()
            shown = curve.scatter.isVisible() and curve.opts["symbol"] is not None
            assert shown is (case == "one") and (not shown or np.isfinite(y).all()), (case, x, y)


def test_a_zoom_that_shows_none_of_the_answer_gives_way_and_rates_stay_within_0_to_1(qtbot) -> None:
    """From a new-user tour: the tokens/s chart zoomed while still empty at the start of an answer kept 0.25-0.75 s
    and 0.3-0.7 tokens/s, and the whole answer stayed out of view; an acceptance chart zoomed out read rates up to
    2.8; one drafted position's bar filled the whole plot."""
    series, charts = shown_charts(qtbot)
    box = charts.speed_plot.getViewBox()
    box.setRange(xRange=(0.25, 0.75), yRange=(0.3, 0.7), padding=0)
    box.sigRangeChangedManually.emit(box.state["mouseEnabled"])  # as the wheel announces it
    series.add([replace(KNOWN_STEPS[2], step=i + 1, stats=replace(stats(i + 1, i + 1, 0, 0), elapsed_s=0.1 * (i + 1)))
                for i in range(30)])  # fmt: skip
    charts.refresh()
    assert box.viewRange()[0] == [0, 4.0] and box.viewRange()[1][0] == 0  # following the answer again
    box.setRange(xRange=(1.0, 2.0), padding=0)  # a zoom onto the answer itself stays
    box.sigRangeChangedManually.emit(box.state["mouseEnabled"])
    series.add([replace(KNOWN_STEPS[2], step=31, stats=replace(stats(31, 31, 0, 0), elapsed_s=3.1))])
    charts.refresh()
    assert box.viewRange()[0] == [1.0, 2.0]
    for plot in (charts.accept_plot, charts.position_plot):
        plot.getViewBox().scaleBy(y=4.0)  # zoomed out as far as it goes
        assert plot.getViewBox().viewRange()[1][1] <= RATE_TOP < 1.2  # a rate axis never shows 2.8
    series.set_stats(replace(stats(31, 31, 1, 1), drafted_by_position=(1,), accepted_by_position=(1,)))
    charts.refresh()
    assert charts.position_plot.getViewBox().viewRange()[0][1] >= 4.5  # one bar, not the whole plot


def test_acceptance_says_100_per_cent_only_when_every_draft_was_accepted(qtbot) -> None:
    """A tour read "100%" in the strip and "acceptance 100% (208 of 209 drafted)" under an answer with a rejected
    draft."""
    strip = StatsStrip()
    qtbot.addWidget(strip)
    for accepted, shown in ((208, "99.5%"), (209, "100%"), (150, "72%"), (1, "0.5%"), (0, "0%")):
        strip.show_stats(stats(40, 250, 209, accepted))
        assert strip.value_text("acceptance") == shown
        assert drafts_phrase("lookup", [], 209, accepted).startswith(f"acceptance {shown} ({accepted} of 209")
    assert percent(99_999, 100_000) == ">99.9%" and percent(1, 100_000) == "<0.1%"
