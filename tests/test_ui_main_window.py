"""The main window end to end with the tiny models: chat, live panel, saving, exports, closing, screenshot."""

from __future__ import annotations

import csv
import json
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from speculens.settings import Settings, load_settings
from speculens.ui.conversations import list_conversations
from speculens.ui.main_window import MainWindow

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


def make_window(qtbot, tiny, **changes: object) -> MainWindow:
    settings = Settings(
        target_path=str(tiny.target), draft_path=str(tiny.perturbed), n_ctx=2048, max_tokens=120, n_draft=6
    )
    for key, value in changes.items():
        setattr(settings, key, value)
    window = MainWindow(settings, restore_layout=False)
    qtbot.addWidget(window)
    window.resize(1400, 900)
    window.show()
    with qtbot.waitSignal(window.worker.models_loaded, timeout=30_000):
        window.load_models()
    return window


def send(qtbot, window: MainWindow, text: str) -> object:
    window.chat.input.setPlainText(text)
    with qtbot.waitSignal(window.chat.turn_finished, timeout=30_000) as blocker:
        qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    return blocker.args[0]


def test_screenshot_of_a_finished_speculative_answer(qtbot, tiny) -> None:
    # A fixed draft length: the adaptive controller would rightly decode the tiny pair plainly (a draft model
    # as costly as its target cannot pay), and the screenshot is of speculation.
    window = make_window(qtbot, tiny, adaptive=False)
    finish = send(qtbot, window, "the model")
    assert finish.stats.n_drafted > 0
    assert window.live_panel.view.toPlainText()
    assert "Finished" in window.live_panel.status.text()
    assert window.pair_label.text().count("tiny") == 2 and "loaded" in window.pair_label.text()
    window.charts.refresh()
    qtbot.wait(50)
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / "main-window.png"
    assert window.grab().save(str(path), "PNG")
    assert path.stat().st_size > 10_000


def test_enter_sends_and_shift_enter_adds_a_line(qtbot, tiny) -> None:
    window = make_window(qtbot, tiny)
    box = window.chat.input
    box.setPlainText("first line")
    box.moveCursor(box.textCursor().MoveOperation.End)
    qtbot.keyClick(box, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert box.toPlainText() == "first line\n" and not window.chat.busy
    finish = send(qtbot, window, "first line\nsecond")
    messages = window.chat.conversation.messages
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"] == "first line\nsecond" and messages[1]["content"] == finish.text


def test_conversation_is_saved_and_can_be_reopened(qtbot, tiny) -> None:
    window = make_window(qtbot, tiny)
    send(qtbot, window, "the model")
    saved = list_conversations()
    assert len(saved) == 1 and saved[0].messages == window.chat.conversation.messages
    assert saved[0].partial is None
    window.chat.new_chat()
    assert window.chat.conversation.messages == []
    window.conversations.refresh()
    item = window.conversations.list.item(0)
    window.conversations.list.itemActivated.emit(item)
    assert window.chat.conversation.messages == saved[0].messages


def test_regenerate_and_edit_last(qtbot, tiny) -> None:
    window = make_window(qtbot, tiny, temperature=0.0)
    first = send(qtbot, window, "the model")
    with qtbot.waitSignal(window.chat.turn_finished, timeout=30_000) as blocker:
        window.chat.regenerate()
    assert blocker.args[0].text == first.text  # greedy: the same answer again, not a second one
    assert len(window.chat.conversation.messages) == 2
    window.chat.edit_last()
    assert window.chat.input.toPlainText() == "the model" and window.chat.conversation.messages == []


def test_exports_write_html_json_csv_png(qtbot, tiny, tmp_path: Path) -> None:
    window = make_window(qtbot, tiny)
    finish = send(qtbot, window, "the model")
    html = window.export_html(tmp_path / "t.html").read_text(encoding="utf-8")
    assert "line-through" in html or finish.stats.n_accepted == finish.stats.n_drafted
    events = json.loads(window.export_json(tmp_path / "e.json").read_text(encoding="utf-8"))
    assert events[0]["type"] == "start" and events[-1]["type"] == "finish"
    with window.export_csv(tmp_path / "e.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == finish.stats.n_steps
    assert window.export_png(tmp_path / "c.png").stat().st_size > 1000


def test_mismatched_draft_shows_the_warning_badge(qtbot, tiny) -> None:
    window = make_window(qtbot, tiny, draft_path=str(tiny.mismatch))
    qtbot.waitUntil(window.badge_action.isVisible, timeout=10_000)
    assert "mismatch" in window.badge.text().lower()
    assert window.settings.strategy == "lookup"  # switched to a strategy that still works


def test_settings_changes_are_saved(qtbot, tiny) -> None:
    window = make_window(qtbot, tiny)
    window.settings_panel.n_draft.setValue(11)
    assert load_settings().n_draft == 11
    assert window.teach_panel.n_draft == 11


def test_closing_during_generation_stops_cleanly_and_keeps_the_text(qtbot, tiny) -> None:
    window = make_window(qtbot, tiny, max_tokens=100_000, n_ctx=32_768)
    started = threading.Event()
    window.worker.generation_started.connect(lambda *_: started.set())
    window.chat.input.setPlainText("the model")
    window.chat.send()
    qtbot.waitUntil(started.is_set, timeout=10_000)
    qtbot.waitUntil(lambda: bool(window.chat._stream), timeout=10_000)
    window.close()
    assert not window.worker._thread.is_alive()
    saved = list_conversations()
    assert saved and saved[0].partial  # the streamed part of the answer survived
