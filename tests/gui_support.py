"""Helpers for the GUI tests: a main window over the scripted engine (or the real one), sending, waiting."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from fake_engine import FakeFactory
from speculens.engine.events import FinishEvent
from speculens.engine.protocol import EngineFactory
from speculens.settings import Settings
from speculens.ui.main_window import MainWindow

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


def make_window(
    qtbot, tiny, factory: EngineFactory | None = None, load: bool = True, **changes: object
) -> MainWindow:
    """A shown main window with the tiny pair chosen (and loaded, by default).

    Args:
        qtbot: pytest-qt's bot.
        tiny: the tiny models.
        factory: the engine factory (default: the real engine).
        load: load the models and wait for them.
        changes: settings to change from the test defaults.
    """
    fields: dict[str, object] = {
        "target_path": str(tiny.target),
        "draft_path": str(tiny.perturbed),
        "n_ctx": 2048,
        "max_tokens": 120,
        "n_draft": 6,
    }
    settings = Settings(**{**fields, **changes})  # type: ignore[arg-type]
    window = MainWindow(settings, restore_layout=False, engine_factory=factory)
    qtbot.addWidget(window)
    window.resize(1400, 900)
    window.show()
    if load:
        with qtbot.waitSignal(window.worker.models_loaded, timeout=30_000):
            window.load_models()
    return window


def fake_window(qtbot, tiny, factory: FakeFactory | None = None, **changes: object) -> MainWindow:
    """A loaded main window over the scripted engine."""
    return make_window(qtbot, tiny, factory or FakeFactory(), **changes)


def send(qtbot, window: MainWindow, text: str, timeout: int = 30_000) -> FinishEvent:
    """Type a message, press Enter, and wait for the answer's finish (and for the window to have heard of the
    load the message started, if any: the worker's "loaded" signal can still be queued when the answer ends)."""
    window.chat.input.setPlainText(text)
    with qtbot.waitSignal(window.chat.turn_finished, timeout=timeout) as blocker:
        qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not window.models.loading, timeout=timeout)
    finish = blocker.args[0]
    assert isinstance(finish, FinishEvent)
    return finish


def wait_idle(qtbot, window: MainWindow, timeout: int = 30_000) -> None:
    """Wait until no generation runs."""
    qtbot.waitUntil(lambda: not window.router.running, timeout=timeout)


def pair_line(window: MainWindow) -> str:
    """The toolbar's line of the pair: the pair's label, then its state's (their rich text, tags and all)."""
    return f"{window.pair_label.text()} {window.state_label.text()}"
