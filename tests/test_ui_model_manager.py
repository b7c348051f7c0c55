"""The model manager window: library listing, the pair picker's mismatch warning, and a hub download."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QProgressBar

from hub_server import FakeHub, FakeHubServer, FakeRepo
from speculens.models.library import Library
from speculens.settings import Settings
from speculens.ui.model_manager import ModelManagerWindow

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")


@pytest.fixture()
def manager(qtbot, tiny) -> Iterator[ModelManagerWindow]:
    library = Library()
    for path in (tiny.target, tiny.identical, tiny.mismatch):
        library.add(path)
    window = ModelManagerWindow(Settings(n_ctx=512))
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: len(window.entries) >= 3, timeout=10_000)
    yield window
    window.shutdown()


def pick(window: ModelManagerWindow, target: Path, draft: Path) -> None:
    window.select_pair(target, draft)
    assert window.target_combo.currentData() == str(target)
    assert window.draft_combo.currentData() == str(draft)


def test_library_table_lists_the_models(manager: ModelManagerWindow, tiny) -> None:
    names = {manager.library_table.item(r, 0).toolTip() for r in range(manager.library_table.rowCount())}
    assert {str(tiny.target), str(tiny.identical), str(tiny.mismatch)} <= names
    header = [manager.library_table.horizontalHeaderItem(c).text() for c in range(7)]
    assert header == ["Name", "Family", "Size", "Quantization", "Context", "Source", "Status"]


def test_pair_picker_shows_an_unmissable_mismatch_warning(qtbot, manager: ModelManagerWindow, tiny) -> None:
    pick(manager, tiny.target, tiny.mismatch)
    qtbot.waitUntil(lambda: manager.report is not None, timeout=10_000)
    banner = manager.banner
    assert not banner.isHidden()
    assert "Tokenizer mismatch" in banner.text()
    assert "prompt lookup" in banner.text()  # says what still works
    assert "#d73a49" in banner.styleSheet()  # red
    assert not manager.use_pair_button.isEnabled()
    assert manager.use_target_only_button.isEnabled()
    assert "✗" in manager.report_view.toHtml() or "✗" in manager.report_view.toPlainText()


def test_compatible_pair_can_be_chosen(qtbot, manager: ModelManagerWindow, tiny) -> None:
    pick(manager, tiny.target, tiny.identical)
    qtbot.waitUntil(lambda: manager.report is not None, timeout=10_000)
    assert manager.report.compatible and manager.use_pair_button.isEnabled()
    with qtbot.waitSignal(manager.pair_chosen) as blocker:
        manager.use_pair_button.click()
    assert blocker.args == [str(tiny.target), str(tiny.identical)]


@pytest.fixture()
def fake_hub(tiny, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    hub = FakeHub()
    hub.add(
        FakeRepo("speculens-test/Tiny-GGUF", {"tiny-target-F32.gguf": tiny.target.read_bytes()}, downloads=5)
    )
    for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    with FakeHubServer(hub):
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield hub


def test_hub_search_list_and_download_with_progress(qtbot, manager: ModelManagerWindow, fake_hub) -> None:
    manager.hub_search.setText("Tiny")
    manager.search_hub()
    repos = manager.repo_list
    qtbot.waitUntil(lambda: repos.count() == 1 and "Tiny-GGUF" in repos.item(0).text(), timeout=10_000)
    manager.repo_list.setCurrentRow(0)
    qtbot.waitUntil(lambda: manager.file_table.rowCount() == 1, timeout=10_000)
    assert manager.file_table.item(0, 0).text() == "tiny-target-F32.gguf"
    manager.file_table.selectRow(0)
    manager._on_download_clicked()
    download = manager.downloads[-1]
    qtbot.waitUntil(lambda: download.state == "done", timeout=20_000)
    assert manager.tabs.currentIndex() == 3
    bar = manager.download_table.cellWidget(download.row, 1)
    assert isinstance(bar, QProgressBar) and bar.value() == 1000
    assert download.progress is not None and download.progress.total > 0
    assert "of" in bar.format()
    assert manager.download_table.item(download.row, 4).text() == "done"
    qtbot.waitUntil(lambda: any(e.path == Path(download.message) for e in manager.entries), timeout=10_000)


def test_failed_download_is_shown_with_its_reason(qtbot, manager: ModelManagerWindow, fake_hub) -> None:
    download = manager.start_download("speculens-test/Tiny-GGUF", "missing-Q4_0.gguf")
    qtbot.waitUntil(lambda: download.state == "failed", timeout=20_000)
    assert manager.download_table.item(download.row, 4).text() == "failed"
    assert "no such file" in download.message.lower()
    assert manager.download_table.cellWidget(download.row, 5).text() == "Resume"
