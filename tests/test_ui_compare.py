"""Compare over the scripted engine: what is compared, stopping it, and step mode during it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from PySide6.QtCore import Qt

from fake_engine import FakeFactory, Script
from gui_support import fake_window, send, wait_idle
from speculens.engine.events import (
    Divergence,
    DraftToken,
    EmittedToken,
    FinishEvent,
    FinishReason,
    Origin,
    RunningStats,
    StepEvent,
)
from speculens.ui.compare_view import CompareView, verdict_html
from speculens.ui.worker import Comparison, Lane, Record, RecordKind

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")]


def test_compare_answers_the_last_message_alone_when_asked(qtbot, tiny) -> None:
    factory = FakeFactory()
    window = fake_window(qtbot, tiny, factory)
    send(qtbot, window, "an earlier question")
    send(qtbot, window, "the message to compare")
    window.compare_view.with_history.setChecked(False)
    window.chat.compare_button.click()
    qtbot.waitUntil(lambda: window.compare_view.comparison is not None, timeout=10_000)
    plain, speculative = factory.last.requests[-2:]
    assert plain[0] == speculative[0] == [{"role": "user", "content": "the message to compare"}]
    assert str(plain[1].strategy) == "none" and str(speculative[1].strategy) != "none"
    assert "the message to compare" in window.compare_view.prompt.text()
    assert window.chat.input.toPlainText() == ""  # nothing to type again


def test_compare_with_history_sends_the_conversation_up_to_the_last_message(qtbot, tiny) -> None:
    factory = FakeFactory()
    window = fake_window(qtbot, tiny, factory, system_prompt="Be brief.")
    send(qtbot, window, "an earlier question")
    send(qtbot, window, "a follow-up")
    # On by default (a tour's follow-up, compared alone, was answered "please provide the text" both ways).
    assert window.compare_view.with_history.isChecked()
    window.chat.compare_button.click()
    assert window.statusBar().currentMessage().startswith("Comparing: plain decoding, then speculation")
    qtbot.waitUntil(lambda: window.compare_view.comparison is not None, timeout=10_000)
    messages = factory.last.requests[-1][0]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]  # not the answer after it
    assert messages[1]["content"] == "an earlier question" and messages[-1]["content"] == "a follow-up"
    qtbot.waitUntil(lambda: not window.router.running, timeout=10_000)
    assert window.statusBar().currentMessage() == "Comparison finished: the verdict is in Compare."



def test_an_export_after_compare_says_its_tokens_are_comparess_run(qtbot, tiny, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """From a new-user tour: after Compare, the HTML export put Compare's speculative run (114 tokens) under the
    chat's own answer (122 tokens) as if they were one answer."""
    import json

    window = fake_window(qtbot, tiny, FakeFactory())
    send(qtbot, window, "a question")
    html = window.export_html(tmp_path / "chat.html").read_text(encoding="utf-8")
    assert "Speculens answer" in html and "Compare ran the last message again" not in html
    window.chat.compare_button.click()
    qtbot.waitUntil(lambda: window.compare_view.comparison is not None and not window.router.running, timeout=10_000)
    html = window.export_html(tmp_path / "compared.html").read_text(encoding="utf-8")
    assert "Compare&#x27;s speculative run of the last message" in html and "Compare ran the last message again" in html
    assert "strategy of Compare&#x27;s speculative run:" in html
    # Both halves and the verdict (a teacher's Ctrl+S after Compare kept the speculative half alone).
    view = window.compare_view
    plain = view.views[Lane.PLAIN].html_fragment()
    assert "decoded plainly, token by token" in html and plain in html and len(plain) > 100
    assert "<h2>Compare's verdict</h2>" in html and verdict_html(view.comparison) in html  # type: ignore[arg-type]
    assert json.loads(window.export_json(tmp_path / "e.json").read_text(encoding="utf-8"))[0]["run"] == "compare"
    send(qtbot, window, "another question")  # the chat's answer again
    assert json.loads(window.export_json(tmp_path / "e2.json").read_text(encoding="utf-8"))[0]["run"] == "chat"
    assert "Compare's verdict" not in window.export_html(tmp_path / "chat2.html").read_text(encoding="utf-8")


def test_compare_shows_both_answers_and_the_verdict(qtbot, tiny) -> None:
    window = fake_window(qtbot, tiny)
    window.chat.input.setPlainText("typed but not sent")
    window.chat.compare_button.click()  # with no conversation yet, the box's text is the message
    # The live panel waits for the verdict: drawing the speculative half as it ran slowed it alone.
    from speculens.ui.main_window import LIVE_COMPARING

    assert window.live_panel.status.text() == LIVE_COMPARING
    qtbot.waitUntil(lambda: window.compare_view.comparison is not None, timeout=10_000)
    view = window.compare_view
    assert view.views[Lane.PLAIN].toPlainText() == "Hello there, friend."
    # The speculative side also shows its rejected drafts (struck through).
    assert view.views[Lane.SPECULATIVE].toPlainText().replace("?", "") == "Hello there, friend."
    assert "identical outputs" in view.verdict.text() and "Speedup" in view.verdict.text()
    assert not view.stop_button.isEnabled()
    # From the tour of 2026-11-28: the live panel, its charts and the figures kept showing the last answer's.
    live = window.live_panel
    assert live.view.toPlainText().replace("?", "") == "Hello there, friend."  # the speculative half only
    assert "Finished" in live.status.text()
    # And the strip says whose figures it shows (a teacher's took Compare's 41.1 tokens/s for the chat answer's 33.5).
    assert window.stats_strip.value_text("run") == "Compare"
    send(qtbot, window, "a chat answer")
    assert window.stats_strip.value_text("run") == "Chat"


def test_a_running_compare_can_be_stopped_with_its_button_and_with_esc(qtbot, tiny) -> None:
    factory = FakeFactory(Script(answer=["word "] * 5_000, step_s=0.002))
    window = fake_window(qtbot, tiny, factory, max_tokens=100_000)
    for stop in ("button", "esc"):
        window.chat.input.setPlainText("compare me")
        window.chat.compare_button.click()
        view = window.compare_view
        qtbot.waitUntil(lambda: "tokens" in view.figures[Lane.PLAIN].text(), timeout=10_000)  # noqa: B023
        assert view.stop_button.isEnabled()
        # Nothing else can be queued behind it.
        assert not window.chat.send_button.isEnabled() and not window.chat.compare_button.isEnabled()
        if stop == "button":
            view.stop_button.click()
        else:
            window.activateWindow()
            qtbot.waitUntil(window.isActiveWindow, timeout=5_000)
            qtbot.keyClick(window.chat.input, Qt.Key.Key_Escape)
        wait_idle(qtbot, window, timeout=10_000)
        assert "stopped" in view.verdict.text().lower()
        # Stopped in the plain run: it says so, and the speculative side, never reached, no longer waits.
        assert view.figures[Lane.PLAIN].text().endswith("· stopped")
        assert view.figures[Lane.SPECULATIVE].text() == "not run"
        assert not view.stop_button.isEnabled()
        assert window.chat.send_button.isEnabled()
        assert window.statusBar().currentMessage() != "Stopping…"  # the status bar does not stay stuck
        assert window.live_panel.status.text() == "Comparison stopped."  # a tour's stayed at "Starting…"


def test_send_is_refused_while_a_compare_runs(qtbot, tiny) -> None:
    factory = FakeFactory(Script(answer=["word "] * 2_000, step_s=0.002))
    window = fake_window(qtbot, tiny, factory, max_tokens=100_000)
    window.chat.input.setPlainText("compare me")
    window.chat.compare_button.click()
    qtbot.waitUntil(lambda: window.router.running, timeout=5_000)
    window.chat.input.setPlainText("queued?")
    window.chat.send()
    assert window.chat.input.toPlainText() == "queued?" and window.chat.turn is None
    window.stop()
    wait_idle(qtbot, window)
    assert all(m[0][-1]["content"] != "queued?" for m in factory.last.requests)


def test_step_mode_during_compare_explains_the_compare_steps(qtbot, tiny) -> None:
    factory = FakeFactory(Script(answer=["alpha", " beta", " gamma"]))
    window = fake_window(qtbot, tiny, factory)
    send(qtbot, window, "an earlier chat turn")  # its steps must not be what Teach explains
    factory.last.script.answer = ["compare", "-only", " text"]
    window.teach_panel.step_mode.setChecked(True)
    window.chat.input.setPlainText("compare me")
    window.chat.compare_button.click()
    teach = window.teach_panel
    qtbot.waitUntil(teach.next_button.isEnabled, timeout=10_000)
    assert "compare" in teach.explanation.toPlainText() and "alpha" not in teach.explanation.toPlainText()
    clicks = 0
    while window.router.running and clicks < 20:
        qtbot.waitUntil(lambda: teach.next_button.isEnabled() or not window.router.running, timeout=10_000)
        if teach.next_button.isEnabled():
            teach.next_button.click()
            clicks += 1
    wait_idle(qtbot, window)
    assert clicks == 6  # three steps each for the plain and the speculative run, every one shown
    assert window.compare_view.comparison is not None and not teach.next_button.isEnabled()


def test_long_figures_and_strategy_names_never_widen_the_window_past_the_screen(qtbot, tiny) -> None:
    # Found under Xvfb at 1600×1000: after a Compare, its non-wrapping labels made the window 1,857 px wide.
    window = fake_window(qtbot, tiny)
    window.resize(1600, 960)
    send(qtbot, window, "a message long enough to matter")
    window.chat.compare()
    wait_idle(qtbot, window)
    for dock in window.docks.values():
        dock.raise_()
        qtbot.wait(20)
    assert "Automatic" in window.compare_view.headers[Lane.SPECULATIVE].text()
    assert window.compare_view.figures[Lane.PLAIN].text()
    assert window.minimumSizeHint().width() <= 1400 and window.width() <= 1600


def test_a_pasted_function_as_the_message_never_widens_the_compare_dock(qtbot) -> None:
    """A tour's Compare of a rename request (a 15-line function) made the window 1,310 px wide on a 1,280-px screen,
    and nothing but a restart brought it back."""
    view = CompareView()
    qtbot.addWidget(view)
    view.show()
    before = view.minimumSizeHint().width()
    code = "\n".join(f'    if order.get("status_{i}") != "paid_and_shipped": continue' for i in range(15))
    message = f"Rename biggest to largest_amount in this function:\ndef summarize_orders(orders):\n{code}"
    view.describe(message, "Automatic")
    qtbot.wait(20)
    assert view.minimumSizeHint().width() <= before
    assert " ⏎ def summarize_orders(orders): ⏎ " in view.prompt.text()  # its lines told apart, not run together


def differing() -> Comparison:
    """A greedy comparison whose answers part at their second token: plain decoding's « that» against «,»."""
    plain = FinishEvent(FinishReason.EOG, "a that", (1, 2), RunningStats())
    speculative = FinishEvent(FinishReason.EOG, "a,", (1, 3), RunningStats())
    divergence = Divergence(1, 2, 3, b" that", b",", 16.961, 16.888)
    return Comparison(plain, speculative, greedy=True, exact=False, divergence=divergence)


def shown_difference(qtbot, width: int, height: int, message: str = "") -> CompareView:  # type: ignore[no-untyped-def]
    """A Compare view of ``width × height`` showing :func:`differing`'s verdict (``message``: what was compared)."""
    view = CompareView()
    qtbot.addWidget(view)
    view.resize(width, height)
    view.show()
    if message:
        view.describe(message, "Automatic")
    view.on_records([Record(1, Lane.SPECULATIVE, RecordKind.COMPARED, comparison=differing())])
    qtbot.wait(20)
    return view


def test_a_difference_names_both_candidates_and_switching_to_bit_exact_clears_it(qtbot) -> None:
    view = CompareView()
    qtbot.addWidget(view)
    view.on_records([Record(1, Lane.SPECULATIVE, RecordKind.COMPARED, comparison=differing())])
    said = view.verdict.text()
    assert "different answers" not in said  # as long as each other
    # Which logit is whose, and which run chose which token.
    assert "from token 2 (underlined in red): plain decoding chose <code>«&nbsp;that»</code>" in said
    assert "(the target's logit 16.961" in said
    assert "over <code>«,»</code> (16.888), a margin of 0.073; speculation chose <code>«,»</code>" in said
    assert view.exact_button.isVisibleTo(view)
    with qtbot.waitSignal(view.exact_requested, timeout=1_000):
        view.exact_button.click()
    # The old verdict and its button go: the target reloads, and the next comparison is bit-exact.
    assert not view.exact_button.isVisibleTo(view)
    assert "outputs differ" not in view.verdict.text() and "Reloading" in view.verdict.text()


def test_where_the_answers_part_both_views_underline_the_token(qtbot) -> None:
    view = CompareView()
    qtbot.addWidget(view)

    def step(lane: Lane, *pieces: bytes) -> Record:
        emitted = tuple(EmittedToken(i, piece, Origin.TARGET) for i, piece in enumerate(pieces))
        text = b"".join(pieces).decode()
        return Record(1, lane, RecordKind.STEP, event=StepEvent(1, 0, (), emitted, text, 0.0, 1.0, 0.0, RunningStats()))

    view.on_records([step(Lane.PLAIN, b"a", b" that"), step(Lane.SPECULATIVE, b"a", b",")])
    comparison = Comparison(
        FinishEvent(FinishReason.EOG, "a that", (1, 2), RunningStats()),
        FinishEvent(FinishReason.EOG, "a,", (1, 3), RunningStats()),
        greedy=True,
        exact=False,
        divergence=Divergence(1, 2, 3, b" that", b",", 16.961, 16.888),
    )
    view.on_records([Record(1, Lane.SPECULATIVE, RecordKind.COMPARED, comparison=comparison)])
    for lane in (Lane.PLAIN, Lane.SPECULATIVE):
        cursor = view.views[lane].textCursor()
        assert cursor.position() == 1  # at the second token, scrolled to
        cursor.setPosition(2)
        assert cursor.charFormat().fontUnderline()


def test_teach_switches_bit_exact_verification_on_and_off(qtbot, tiny) -> None:
    factory = FakeFactory()
    window = fake_window(qtbot, tiny, factory)
    box = window.teach_panel.exact
    assert not box.isChecked() and not factory.last.config.exact
    for exact in (True, False):
        with qtbot.waitSignal(window.worker.models_loaded, timeout=30_000):
            box.click()
        assert window.store.settings.exact is exact and factory.last.config.exact is exact
        assert box.isChecked() is exact
        assert window.settings_panel.exact.isChecked() is exact  # one setting, shown alike everywhere


def test_switching_compare_to_bit_exact_runs_the_comparison_again_and_says_its_mode(qtbot, tiny) -> None:
    """From the tour of 2026-12-06: "press Compare again once it is loaded" in a dock with no Compare button, and
    then headers that said nothing of the mode, over a plain answer that had changed with it."""
    factory = FakeFactory()
    window = fake_window(qtbot, tiny, factory)
    send(qtbot, window, "say hello")
    window.chat.compare_button.click()
    view = window.compare_view
    qtbot.waitUntil(lambda: view.comparison is not None, timeout=10_000)
    assert not view.comparison.exact and "bit-exact" not in view.headers[Lane.PLAIN].text()
    view.exact_button.show()  # as where greedy outputs differ
    with qtbot.waitSignal(window.worker.models_loaded, timeout=30_000):
        view.exact_button.click()
        assert "the comparison runs again once it is loaded" in view.verdict.text()
    qtbot.waitUntil(lambda: view.comparison is not None and view.comparison.exact, timeout=10_000)
    assert factory.last.config.exact
    assert "(bit-exact)" in view.headers[Lane.PLAIN].text() and "bit-exact)" in view.headers[Lane.SPECULATIVE].text()
    assert "say hello" in view.prompt.text()  # the same message


def test_a_comparison_says_it_is_earlier_once_the_chat_moves_on(qtbot, tiny) -> None:
    """From the tour of 2026-12-06: an old verdict, made in another mode, stood under a conversation that had moved
    on, with nothing to say so."""
    window = fake_window(qtbot, tiny)
    send(qtbot, window, "first")
    view = window.compare_view
    window.chat.compare_button.click()
    qtbot.waitUntil(lambda: view.comparison is not None and not view.running, timeout=10_000)
    assert view.mark.isHidden() and view.verdict.isEnabled()
    send(qtbot, window, "second")
    assert "An earlier comparison" in view.mark.text() and "first" in view.prompt.text()
    assert not view.mark.isHidden() and not view.verdict.isEnabled()  # greyed, under the line that says why
    assert "color:#" not in view.verdict.text() and "Speedup" in view.verdict.text()  # all of it grey
    assert view.outer.indexOf(view.mark) + 1 == view.outer.indexOf(view.verdict)  # just above it: where it scrolls
    window.chat.compare_button.click()
    qtbot.waitUntil(lambda: view.comparison is not None and not view.running, timeout=10_000)
    assert view.mark.isHidden() and "second" in view.prompt.text()
    window.chat.edit_last()  # the compared message taken out to edit: an earlier comparison (a tour saw it as current)
    assert "An earlier comparison" in view.mark.text() and not view.mark.isHidden()
    window.chat.undo_edit()  # and put back (Esc): its own again (a review found the mark stuck)
    assert view.mark.isHidden() and view.verdict.isEnabled()
    compared = window.chat.conversation
    window.new_chat()  # another conversation: the comparison is said to be of another (a tour took it for this one's)
    assert "A comparison of another conversation." in view.mark.text() and "earlier" not in view.mark.text()
    window.chat.open_conversation(compared)  # and back: its own, as it was
    assert view.mark.isHidden() and view.verdict.isEnabled() and "color:#2ea043" in view.verdict.text()
    send(qtbot, window, "third")
    window.new_chat()
    window.chat.open_conversation(compared)  # its own, which has moved on since
    assert view.mark.text().count("An earlier comparison") == 1 and "another" not in view.mark.text()


def test_a_comparison_that_ends_after_another_conversation_opened_says_whose_it_is(qtbot, tiny) -> None:
    """From a review: a comparison still running when the chat opened another conversation showed its verdict there
    unmarked; and an answer finishing in another conversation must not mark it earlier."""
    window = fake_window(qtbot, tiny, FakeFactory(Script(answer=["word "] * 40, step_s=0.02)))
    send(qtbot, window, "first")
    view = window.compare_view
    window.chat.compare_button.click()
    qtbot.waitUntil(lambda: view.running, timeout=10_000)
    compared = window.chat.conversation
    window.new_chat()
    qtbot.waitUntil(lambda: view.comparison is not None and not view.running, timeout=30_000)
    assert "A comparison of another conversation." in view.mark.text()
    send(qtbot, window, "elsewhere")  # an answer in the other conversation
    window.chat.open_conversation(compared)
    assert view.mark.isHidden()


def test_where_one_answer_ends_first_the_verdict_says_it_chose_the_end(qtbot) -> None:
    view = CompareView()
    qtbot.addWidget(view)
    plain = FinishEvent(FinishReason.EOG, "a", (1,), RunningStats())
    speculative = FinishEvent(FinishReason.EOG, "a b", (1, 3), RunningStats())
    comparison = Comparison(plain, speculative, True, False, Divergence(1, 0, 3, b"", b" b", 16.9, 16.8))
    view.on_records([Record(1, Lane.SPECULATIVE, RecordKind.COMPARED, comparison=comparison)])
    assert "plain decoding chose the end of the answer (the target's logit 16.900" in view.verdict.text()


def test_answers_that_part_at_their_indentation_show_how_much_each_chose(qtbot) -> None:
    """Rich text collapses spaces: where a greedy answer chose four spaces and the other three, both read «  »."""
    plain = FinishEvent(FinishReason.EOG, "a", (1,), RunningStats())
    speculative = FinishEvent(FinishReason.EOG, "b", (2,), RunningStats())
    parted = Divergence(1, 2, 3, b"\n    ", b"   ", 16.9, 16.8)
    said = verdict_html(Comparison(plain, speculative, True, False, parted))
    assert "«⏎␣␣␣␣»" in said and "«␣␣␣»" in said
    tabs = verdict_html(Comparison(plain, speculative, True, False, replace(parted, piece_a=b"  return x\t")))
    assert "«&nbsp;&nbsp;return&nbsp;x⇥»" in tabs  # spaces among text kept as they are, each one


def test_the_verdict_is_shown_whole_in_a_narrow_short_dock(qtbot) -> None:
    """From a new-user tour at 1280×760: the explanation of differing outputs stopped mid-sentence ("switch on
    bit-exact verification to get"), the button beside it taking half the dock's width."""
    view = shown_difference(qtbot, 380, 420)
    verdict = view.verdict
    assert verdict.height() >= verdict.heightForWidth(verdict.width()) > 6 * verdict.fontMetrics().height()
    assert verdict.width() >= view.width() - 20  # the whole width: the button is below it
    assert view.exact_button.geometry().top() >= verdict.geometry().bottom()


def test_a_difference_s_verdict_leaves_the_answers_room_to_be_read(qtbot) -> None:
    """Under Xvfb at 1280×800 the verdict of differing outputs took 10 lines of the dock and left each answer 3."""
    message = "Write a Python class for a singly linked list with append, delete and find methods."
    view = shown_difference(qtbot, 375, 380, message)
    for answer in view.views.values():
        assert answer.height() >= 5.5 * answer.fontMetrics().lineSpacing(), answer.height()
    assert "both answers are the target's" in view.verdict.text()
    assert "bit-exact" in view.exact_button.text() and "one token at a time" in view.exact_button.toolTip()


def test_in_a_small_window_the_compare_dock_scrolls_and_each_answer_keeps_six_lines(qtbot, tiny) -> None:
    """From a new-user tour at 1024×740: under a differing verdict each answer had two lines, unreadable."""
    from speculens.ui.compare_view import ANSWER_LINES

    window = fake_window(qtbot, tiny)
    window.resize(1024, 640)  # the tour's docks, at 740, left what these leave at 640
    window.docks["Compare"].show()
    window.docks["Compare"].raise_()
    view = window.compare_view
    view.describe("Rename the variable `count` to `total` in this code and return the whole code", "Automatic")
    view.on_records([Record(1, Lane.SPECULATIVE, RecordKind.COMPARED, comparison=differing())])
    qtbot.wait(50)
    for answer in view.views.values():
        assert answer.height() >= ANSWER_LINES * answer.fontMetrics().lineSpacing(), answer.height()
    verdict = view.verdict
    assert verdict.height() >= verdict.heightForWidth(verdict.width())  # and the verdict whole, the dock scrolling
    # ... to the verdict and its button, which a short dock would otherwise show below the fold.
    scroll = window.docks["Compare"].widget()
    shown = view.exact_button.geometry().translated(view.pos())
    assert scroll.verticalScrollBar().maximum() > 0
    assert scroll.viewport().rect().contains(shown), (shown, scroll.viewport().rect())
    # ... and the verdict's beginning above it (a review: only the button was brought into view).
    assert scroll.viewport().rect().contains(verdict.geometry().translated(view.pos()).topLeft())


def test_after_step_mode_is_switched_off_teach_explains_the_answer_s_last_step(qtbot, tiny) -> None:
    """From a new-user tour: step mode off mid-answer, the panel still explained 'Step 3' while the curve's caption
    spoke of step 63."""
    window = fake_window(qtbot, tiny, FakeFactory(Script(expected_speedup=(1.0, 1.2, 1.3))))
    teach = window.teach_panel
    teach.step_mode.setChecked(True)
    window.chat.input.setPlainText("hello")
    window.chat.send()
    qtbot.waitUntil(teach.next_button.isEnabled, timeout=10_000)
    assert "Step 1" in teach.explanation.toPlainText()
    # From the tour of 2026-11-28: the line under the answer said "Generating…": a paused answer looked hung.
    assert "Paused after step 1" in window.chat.figures.text() and "F10" in window.chat.figures.text()
    teach.next_button.click()
    qtbot.waitUntil(lambda: "Paused after step 2" in window.chat.figures.text(), timeout=10_000)
    teach.step_mode.setChecked(False)
    assert not teach.next_button.isEnabled()  # the answer goes on by itself (a tour found Next step still enabled)
    # The answer goes on, and the chat says so (a tour's status bar still said "Paused (step mode)").
    assert window.chat.figures.text() == "Generating…"
    assert window.statusBar().currentMessage() == "Answering… (Esc stops the answer)"
    teach.next_button.click()
    wait_idle(qtbot, window)
    last = teach.last_step.step
    assert last == 5 and f"Step {last}" in teach.explanation.toPlainText()
    assert f"at step {last}" in teach.curve_label.text()


def test_a_speedup_over_answers_of_different_lengths_says_so(qtbot) -> None:
    """From a new-user tour: ×0.98 compared a 269-token answer with a 174-token one, and nothing said so."""
    view = CompareView()
    qtbot.addWidget(view)
    plain = FinishEvent(FinishReason.EOG, "a that", (1, 2), RunningStats(n_generated=269, elapsed_s=14.9))
    speculative = FinishEvent(FinishReason.EOG, "a,", (1, 3), RunningStats(n_generated=174, elapsed_s=9.8))
    divergence = Divergence(1, 2, 3, b" that", b",", 16.961, 16.888)
    comparison = Comparison(plain, speculative, greedy=True, exact=False, divergence=divergence)
    view.on_records([Record(1, Lane.SPECULATIVE, RecordKind.COMPARED, comparison=comparison)])
    assert "rates of two different answers (174 and 269 tokens)" in view.verdict.text()


@pytest.mark.parametrize(
    ("drafted", "accepted", "seconds", "meaning"),
    [
        (0, 0, 10.0, "nothing was drafted"),  # both decoded plainly: the difference is noise
        (60, 10, 11.0, "speculation was slower here"),
        (60, 55, 6.0, "speculation was faster</b></span> (55 of 60 drafted tokens accepted)"),
        (60, 40, 9.8, "about the same speed"),
        # One run each: ×1.11 and ×0.9 can be the machine's (a tour read ×1.12 "faster" as settled).
        (60, 50, 9.0, "speculation was faster</b></span> (50 of 60 drafted tokens accepted; one run each, and a "
         "difference under 15% can be run-to-run variation: Compare again to be sure)"),
        (60, 20, 11.1, "speculation was slower here</b></span> (20 of 60 drafted tokens accepted; one run each"),
        # Beyond the noise it says why (a tour's ×0.75 at 99% accepted).
        (60, 59, 13.3, "speculation was slower here</b></span> (59 of 60 drafted tokens accepted): drafting and "
         "checking the drafts took more time than they saved"),
    ],
)
def test_the_verdict_says_what_its_speedup_means(
    qtbot, drafted: int, accepted: int, seconds: float, meaning: str
) -> None:
    """From a new-user tour: 'Speedup ×0.90 · ✓ identical outputs' read as a success at a glance."""
    view = CompareView()
    qtbot.addWidget(view)
    plain = FinishEvent(FinishReason.EOG, "same", (1, 2), RunningStats(n_generated=100, elapsed_s=10.0))
    stats = RunningStats(n_generated=100, elapsed_s=seconds, n_drafted=drafted, n_accepted=accepted)
    speculative = FinishEvent(FinishReason.EOG, "same", (1, 2), stats)
    comparison = Comparison(plain, speculative, greedy=True, exact=False, divergence=None)
    view.on_records([Record(1, Lane.SPECULATIVE, RecordKind.COMPARED, comparison=comparison)])
    said = view.verdict.text()
    assert meaning in said and "identical outputs" in said
    assert (f"{accepted} of {drafted} drafted tokens accepted" in said) == bool(drafted)
    # No headline speedup where nothing was drafted (a tour read a large bold "×1.21" of run-to-run variation).
    assert ("Speedup <b>" in said) == bool(drafted) and ("Speed ratio ×" in said) == (not drafted)
    # Identical, with nothing drafted, proves nothing (a tour read the green mark as a proof of bit-exact mode).
    assert ("identical outputs, as they must be: nothing was verified in a batch" in said) == (not drafted)
    assert ("✓ identical outputs" in said) == bool(drafted)
    assert ("took more time" in said) == (seconds > 11.5)  # only beyond the noise
    # Sampled answers differ, and the verdict still says what the speedup means.
    sampled = Comparison(plain, replace(speculative, tokens=(1, 3)), greedy=False, exact=False, divergence=None)
    view.on_records([Record(2, Lane.SPECULATIVE, RecordKind.COMPARED, comparison=sampled)])
    said = view.verdict.text()
    assert meaning.split("): drafting")[0] in said and "sample differently" in said
    assert "took more time" not in said  # two different answers: no cause is claimed


def test_teach_does_not_explain_the_last_answer_s_step_while_the_next_runs(qtbot, tiny) -> None:
    """From the tour of 2026-11-28: a new answer began with Teach still showing the previous answer's 'Step 53'."""
    window = fake_window(qtbot, tiny, FakeFactory(Script(answer=["word "] * 400, step_s=0.01)))
    teach = window.teach_panel
    send(qtbot, window, "first")
    assert "Step" in teach.explanation.toPlainText()
    window.chat.input.setPlainText("second")
    window.chat.send()
    qtbot.waitUntil(lambda: window.chat.turn is not None and len(window.chat.turn.text) > 20, timeout=10_000)
    assert "Step" not in teach.explanation.toPlainText() and "being generated" in teach.explanation.toPlainText()
    window.chat.stop()
    wait_idle(qtbot, window)


def test_the_two_answers_scroll_together_token_by_token(qtbot) -> None:
    """A tour scrolled two long answers one at a time to find the same place in both; the speculative one also
    shows its rejected drafts, so the same token is on another line there."""
    view = CompareView()
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()

    def step(lane: Lane, i: int) -> Record:
        words = [f"word{i}.{k} ".encode() for k in range(4)] + [b"\n"]
        emitted = tuple(EmittedToken(k, piece, Origin.TARGET) for k, piece in enumerate(words))
        # Rejected drafts on the speculative side: one more line every step.
        pieces = [f"rejected{i}.{k} ".encode() for k in range(6)] + [b"\n"] if lane is Lane.SPECULATIVE else []
        drafted = tuple(DraftToken(k, piece, None, None, False) for k, piece in enumerate(pieces))
        event = StepEvent(i, len(drafted), drafted, emitted, b"".join(words).decode(), 0.0, 1.0, 0.0, RunningStats())
        return Record(1, lane, RecordKind.STEP, event=event)

    for lane in (Lane.PLAIN, Lane.SPECULATIVE):
        view.on_records([step(lane, i) for i in range(200)])
    plain, speculative = view.views[Lane.PLAIN], view.views[Lane.SPECULATIVE]
    assert speculative.verticalScrollBar().maximum() > plain.verticalScrollBar().maximum() + 20  # not line by line
    for scrolled, other in ((plain, speculative), (speculative, plain), (plain, speculative)):
        bar = scrolled.verticalScrollBar()
        bar.setValue(bar.maximum() // 3 if scrolled is plain else bar.maximum() // 2)
        top = scrolled.answer_token_at_top()
        assert top is not None and top > 100
        assert other.answer_token_at_top() == top  # the same token on top in both


def test_in_a_narrow_dock_the_answers_stack_and_the_verdict_comes_into_view_whole(qtbot, tiny) -> None:
    """Under Xvfb at 1280×800 the docked view's two answers were 160 pixels wide each, code wrapping mid-name; one
    above the other, the verdict lay below them, and the dock scrolled to its first line only."""
    window = fake_window(qtbot, tiny, FakeFactory(Script(answer=["word " * 60])))
    window.resize(1280, 800)
    window.show()
    window.docks["Compare"].show()
    window.docks["Compare"].raise_()
    view = window.compare_view
    window.chat.input.setPlainText("a message")
    window.chat.compare_button.click()
    qtbot.waitUntil(lambda: view.comparison is not None, timeout=10_000)
    qtbot.wait(100)
    plain, speculative = (view.views[lane].geometry() for lane in (Lane.PLAIN, Lane.SPECULATIVE))
    assert view.width() < view.side_by_side_width() and view.stacked  # a narrow dock, then
    assert speculative.top() > plain.bottom() and plain.width() > 0.8 * view.width()  # one above the other
    answer = view.views[Lane.PLAIN]
    assert answer.viewport().width() < 2 * answer.fontMetrics().horizontalAdvance("x" * 40)  # side by side: < 40 each
    scroll = window.docks["Compare"].widget()
    shown = view.verdict.geometry().translated(view.pos())
    assert scroll.verticalScrollBar().maximum() > 0  # the dock scrolls, to the verdict
    assert scroll.viewport().rect().contains(shown), (shown, scroll.viewport().rect())
    # Widened, side by side again, each answer with room for 40 characters a line.
    window.resizeDocks([window.docks["Compare"]], [view.side_by_side_width() + 40], Qt.Orientation.Horizontal)
    qtbot.waitUntil(lambda: view.views[Lane.SPECULATIVE].geometry().top() == view.views[Lane.PLAIN].geometry().top())
    assert view.views[Lane.SPECULATIVE].geometry().left() > view.views[Lane.PLAIN].geometry().right()
    assert answer.viewport().width() >= answer.fontMetrics().horizontalAdvance("x" * 40)


def test_a_comparison_on_a_busy_machine_says_its_speedup_measures_the_other_programs_too(qtbot, tiny) -> None:
    """A tour read x1.63 "speculation was faster" and then x0.63 for the same message: another program had kept a
    core busy while plain decoding ran the first time (7.8 tokens/s against 19-26 otherwise)."""
    factory = FakeFactory(Script(others_shares=(0.0, 0.55, 0.04, 0.1, 0.2)))  # the chat, then two comparisons
    window = fake_window(qtbot, tiny, factory)
    send(qtbot, window, "a message")
    view = window.compare_view
    for busy in (True, False):
        view.comparison = None
        window.chat.compare_button.click()
        qtbot.waitUntil(lambda: view.comparison is not None and not view.running, timeout=10_000)
        said = view.verdict.text()
        assert ("Other programs used the CPUs" in said) is busy, said
        assert "Speedup" in said or "Speed ratio" in said  # the verdict itself still follows
    assert view.comparison.others_share == (0.1, 0.2)
    c = view.comparison
    plain, speculative = replace(c.plain, others_share=0.55, crowded=True), replace(c.speculative, others_share=0.04)
    warned = verdict_html(replace(c, plain=plain, speculative=speculative))
    assert "55% of the CPUs during plain decoding, 4% during speculation" in warned


def test_a_marked_comparison_offers_no_bit_exact_rerun_and_keeps_a_reload_notice(qtbot) -> None:
    """From a review: marking rewrote the verdict whatever it said (a bit-exact reload's notice gave way to the old
    verdict), and left the bit-exact button under another conversation's greyed verdict."""
    view = shown_difference(qtbot, 700, 600)
    view.conversation = "compared"
    assert view.exact_button.isVisibleTo(view)
    view.mark_outdated("another")  # the chat opened another conversation
    assert not view.mark.isHidden() and not view.exact_button.isVisibleTo(view)
    view.mark_outdated("compared")  # and back
    assert view.mark.isHidden() and view.exact_button.isVisibleTo(view) and "color:#" in view.verdict.text()
    view.exact_button.click()
    notice = view.verdict.text()
    assert notice.startswith("Reloading the target for bit-exact verification")
    view.mark_outdated("another")
    view.mark_outdated("compared")
    assert view.verdict.text() == notice and not view.exact_button.isVisibleTo(view)
