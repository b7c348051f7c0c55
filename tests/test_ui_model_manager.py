"""The model manager window: library listing, the pair picker's mismatch warning, a hub download, and the
settings and library it shares with the main window."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtWidgets import QProgressBar, QPushButton, QWidget

from fake_engine import FakeFactory
from gui_support import fake_window
from hub_server import FakeHub, FakeHubServer, FakeRepo
from speculens.models.library import Library
from speculens.settings import Settings
from speculens.ui.model_controller import ModelController
from speculens.ui.model_manager import ModelManagerWindow, display_path, entry_label
from speculens.ui.screen import resize_within_screen
from speculens.ui.settings_store import SettingsStore
from speculens.ui.worker import EngineWorker

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")]


@pytest.fixture()
def controller(qtbot) -> Iterator[ModelController]:
    worker = EngineWorker(FakeFactory())
    store = SettingsStore(Settings(n_ctx=512), autosave=False)
    yield ModelController(worker, store, Library())
    worker.close()


@pytest.fixture()
def manager(qtbot, tiny, controller: ModelController) -> Iterator[ModelManagerWindow]:
    for path in (tiny.target, tiny.identical, tiny.mismatch):
        controller.library.add(path)
    window = ModelManagerWindow(controller)
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: len(window.entries) >= 3, timeout=10_000)
    yield window
    window.shutdown()


def pick(window: ModelManagerWindow, target: Path, draft: Path) -> None:
    window.select_pair(target, draft)
    assert window.target_combo.currentData() == str(target)
    assert window.draft_combo.currentData() == str(draft)


def test_library_table_lists_the_models(manager: ModelManagerWindow, tiny) -> None:
    table = manager.library_table
    locations = {table.item(r, 1).text() for r in range(table.rowCount())}
    assert {display_path(p) for p in (tiny.target, tiny.identical, tiny.mismatch)} <= locations
    header = [table.horizontalHeaderItem(c).text() for c in range(8)]
    assert header == ["Name", "Location", "Family", "Size", "Quantization", "Context", "Source", "Status"]


def test_the_library_opens_with_the_keyboard_on_a_row_that_stays_through_a_refresh(
    qtbot, manager: ModelManagerWindow, tiny
) -> None:
    """A keyboard tour opened the manager on its tab bar with no row selected: the arrow keys and Delete did nothing."""
    table = manager.library_table
    manager.show()
    qtbot.waitExposed(manager)
    qtbot.waitUntil(lambda: manager.focusWidget() is table)
    assert table.currentRow() >= 0
    first = manager.entries[table.currentRow()].path
    qtbot.keyClick(table, Qt.Key.Key_Down)
    moved = manager.entries[table.currentRow()].path
    assert moved != first
    manager.refresh_library()  # the rows are read again (a scan, a download): the selection stays on its model
    qtbot.waitUntil(lambda: "models in the library" in manager.message.text())
    qtbot.wait(50)
    assert manager.entries[table.currentRow()].path == moved


def test_the_location_column_is_never_cut_to_nothing(qtbot, manager: ModelManagerWindow) -> None:
    """From a new-user tour: in a 1080 px window, the other columns left the stretched Location column '/t…uf'."""
    from speculens.ui.model_manager import LOCATION_WIDTH

    table = manager.library_table
    manager.show()
    qtbot.waitExposed(manager)
    needed = min(LOCATION_WIDTH, table.sizeHintForColumn(1))
    others = sum(table.columnWidth(c) for c in range(8) if c != 1)
    # A little wider than the other columns alone, as the tour's window was.
    manager.resize(manager.width() + others + 40 - table.viewport().width(), manager.height())
    qtbot.waitUntil(lambda: abs(table.viewport().width() - others - 40) < 20, timeout=5_000)
    assert table.columnWidth(1) >= needed  # it keeps its width; the table scrolls sideways
    # 200 pixels to spare: every column is in view, Status (the last) included, where a 1366x768 screen's Models window
    # cut it off and hid which models were missing or damaged.
    manager.resize(manager.width() + 160, manager.height())
    qtbot.waitUntil(lambda: abs(table.viewport().width() - others - 200) < 20, timeout=5_000)
    assert sum(table.columnWidth(c) for c in range(8)) <= table.viewport().width()
    manager.resize(manager.width() + 900, manager.height())  # wide: it takes what the others leave, no gap after it
    qtbot.waitUntil(lambda: table.viewport().width() > others + 600, timeout=5_000)
    assert sum(table.columnWidth(c) for c in range(8)) == table.viewport().width()
    # Cut, a path keeps its end (a tour read two models' paths as the same: their names differ mid-file-name).
    from PySide6.QtWidgets import QStyleOptionViewItem

    option = QStyleOptionViewItem()
    table.itemDelegateForColumn(1).initStyleOption(option, table.model().index(0, 1))
    assert option.textElideMode == Qt.TextElideMode.ElideLeft and table.textElideMode() == Qt.TextElideMode.ElideMiddle


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
    assert manager.report.headline not in manager.report_view.toPlainText()  # said once, in the banner (a tour's)


def test_compatible_pair_can_be_chosen(qtbot, manager: ModelManagerWindow, tiny) -> None:
    pick(manager, tiny.target, tiny.identical)
    qtbot.waitUntil(lambda: manager.report is not None, timeout=10_000)
    assert "Compatible" in manager.banner.text() and not manager.banner.isHidden()
    pick(manager, tiny.target, tiny.mismatch)  # while it is checked, the last pair's verdict is not shown
    assert manager.report is None and manager.banner.isHidden()
    pick(manager, tiny.target, tiny.identical)
    qtbot.waitUntil(lambda: manager.report is not None, timeout=10_000)
    assert manager.report.compatible and manager.use_pair_button.isEnabled()
    with qtbot.waitSignal(manager.pair_chosen) as blocker:
        manager.use_pair_button.click()
    assert blocker.args == [str(tiny.target), str(tiny.identical)]
    settings = manager.models.store.settings  # the one store the main window reads too
    assert (settings.target_path, settings.draft_path) == (str(tiny.target), str(tiny.identical))


def test_a_pair_chosen_under_a_draft_free_strategy_switches_to_one_that_uses_the_draft(
    qtbot, manager: ModelManagerWindow, tiny
) -> None:
    """From a new-user tour: with prompt lookup set, 'Use this pair' loaded the target alone, the draft unused."""
    store = manager.models.store
    store.update(strategy="lookup")
    said: list[str] = []
    manager.models.message.connect(said.append)  # the main window's status bar
    manager.show()
    pick(manager, tiny.target, tiny.identical)
    qtbot.waitUntil(lambda: manager.report is not None and manager.use_pair_button.isEnabled(), timeout=10_000)
    manager.use_pair_button.click()
    assert store.settings.strategy == "auto" and store.settings.uses_draft
    # The manager closes, so the main window shows the load: a tour's, left open over it, hid the load and kept
    # saying "loading it in the main window" long after. The note goes with the load's messages.
    assert not manager.isVisible()
    automatic = "The strategy is now Automatic, which drafts with the draft model when that pays."
    qtbot.waitUntil(lambda: any(m.startswith("Loaded in") for m in said), timeout=10_000)
    assert said[0] == "Loading models… (Esc cancels)"
    assert said[-1].startswith("Loaded in") and said[-1].endswith(automatic)
    said.clear()
    manager.show()
    store.update(strategy="none")
    manager.use_target_only_button.click()  # the target alone: the strategy is the user's business
    assert store.settings.strategy == "none" and not manager.isVisible()
    # The picker shows what was chosen (a tour's still showed the draft just dropped).
    assert manager.draft_combo.currentData() == "" and not store.settings.draft_path
    qtbot.waitUntil(lambda: any(m.startswith("Loaded in") for m in said), timeout=10_000)
    assert not any("Automatic" in m for m in said) and manager.message.text() == ""


@pytest.fixture()
def fake_hub(tiny, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    hub = FakeHub()
    hub.add(FakeRepo("speculens-test/Tiny-GGUF", {"tiny-target-F32.gguf": tiny.target.read_bytes()}, downloads=5))
    for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    with FakeHubServer(hub):
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield hub


def test_hub_search_list_and_download_with_progress(qtbot, fake_hub, manager: ModelManagerWindow) -> None:
    repos = manager.repo_list
    manager.hub_search.setText("no such model")
    manager.search_hub()
    # Said what is searched, and what to try (a tour's "No GGUF repository found." said neither).
    qtbot.waitUntil(lambda: "No GGUF repository found for 'no such model'" in repos.item(0).text(), timeout=10_000)
    assert "Only repositories with GGUF files are searched" in repos.item(0).text()
    manager.hub_search.setText("Tiny")
    manager.search_hub()
    qtbot.waitUntil(lambda: repos.count() == 1 and "Tiny-GGUF" in repos.item(0).text(), timeout=10_000)
    # How much it is used, liked and kept up (the fake hub's figures), to choose between look-alikes.
    assert repos.item(0).text().endswith("\n5 downloads · 1 like · updated 2025-01-02"), repos.item(0).text()
    manager.repo_list.setCurrentRow(0)
    assert manager.message.text() == "Listing the files of speculens-test/Tiny-GGUF…"  # meanwhile (a tour's)
    qtbot.waitUntil(lambda: manager.file_table.rowCount() == 1, timeout=10_000)
    assert manager.file_table.item(0, 0).text() == "tiny-target-F32.gguf"
    # Nothing selected, nothing to download: the button waits (clicked, it replaced the hub's last error).
    assert not manager.download_button.isEnabled()
    manager.file_table.selectRow(0)
    assert manager.download_button.isEnabled()
    manager.download_button.click()
    download = manager.downloads[-1]
    qtbot.waitUntil(lambda: download.state == "done", timeout=20_000)
    assert manager.tabs.currentIndex() == 3
    bar = manager.download_table.cellWidget(download.row, 1)
    assert isinstance(bar, QProgressBar) and bar.value() == 1000
    assert download.progress is not None and download.progress.total > 0
    assert "of" in bar.format()
    assert manager.download_table.item(download.row, 4).text() == "Done"
    qtbot.waitUntil(lambda: any(e.path == Path(download.message) for e in manager.entries), timeout=10_000)
    manager._relist_files()  # the repository's files again: the one downloaded is marked (a tour fetched one twice)
    qtbot.waitUntil(lambda: manager.file_table.rowCount() == 1, timeout=10_000)
    assert manager.file_table.item(0, 0).text() == "tiny-target-F32.gguf — in your library"


@pytest.mark.qt_log_ignore("This plugin does not support")
def test_enter_searches_in_the_search_box_and_downloads_in_the_file_list(
    qtbot, fake_hub, manager: ModelManagerWindow
) -> None:
    from PySide6.QtWidgets import QApplication

    manager.show()
    qtbot.waitExposed(manager)
    manager.activateWindow()
    manager.tabs.setCurrentIndex(2)
    qtbot.waitUntil(lambda: QApplication.focusWidget() is manager.hub_search, timeout=5_000)  # typing goes there
    qtbot.keyClicks(manager.hub_search, "Tiny")
    qtbot.keyClick(manager.hub_search, Qt.Key.Key_Return)  # a search, not a download (a window-wide Enter took it)
    qtbot.waitUntil(lambda: manager.repo_list.count() == 1 and "Tiny-GGUF" in manager.repo_list.item(0).text(),
                    timeout=10_000)  # fmt: skip
    assert not manager.downloads
    manager.repo_list.setCurrentRow(0)
    qtbot.waitUntil(lambda: manager.file_table.rowCount() == 1, timeout=10_000)
    manager.file_table.setFocus()
    manager.file_table.selectRow(0)
    qtbot.keyClick(manager.file_table, Qt.Key.Key_Return)
    assert [d.filename for d in manager.downloads] == ["tiny-target-F32.gguf"]
    qtbot.waitUntil(lambda: manager.downloads[0].state == "done", timeout=20_000)


def test_a_failed_search_says_why_where_the_results_go(qtbot, manager: ModelManagerWindow, monkeypatch) -> None:
    from speculens.models.hub import HubError, HubErrorKind

    def unreachable(text: str) -> list[object]:
        raise HubError(HubErrorKind.NETWORK, f"Searching the hub for {text!r}: cannot reach https://hub.test.")

    monkeypatch.setattr(manager.hub, "search", unreachable)
    manager.tabs.setCurrentIndex(2)  # the hub's tab, where the search is typed
    manager.hub_search.setText("Qwen")
    manager.search_hub()
    repos = manager.repo_list
    qtbot.waitUntil(lambda: "failed" in repos.item(0).text(), timeout=10_000)
    assert repos.count() == 1 and "cannot reach https://hub.test" in repos.item(0).text()
    assert "try again" in repos.item(0).text()
    assert not repos.item(0).flags() & Qt.ItemFlag.ItemIsSelectable  # a note, not a repository to pick
    assert "cannot reach" in manager.message.text()
    # The hub's failure, not the library's: a tour read it under the library too, long after.
    manager.tabs.setCurrentIndex(0)
    assert manager.message.text() == ""
    assert "failed" in repos.item(0).text()  # still said where it happened


def test_failed_download_is_shown_with_its_reason(qtbot, fake_hub, manager: ModelManagerWindow) -> None:
    download = manager.start_download("speculens-test/Tiny-GGUF", "missing-Q4_0.gguf")
    qtbot.waitUntil(lambda: download.state == "failed", timeout=20_000)
    assert manager.download_table.item(download.row, 4).text() == "Failed"
    assert "no such file" in download.message.lower()
    assert manager.download_table.cellWidget(download.row, 5).text() == "Retry"


def test_a_corrupted_download_says_why_on_the_message_line(qtbot, fake_hub, manager: ModelManagerWindow) -> None:
    manager._show_error("an older, unrelated error")
    fake_hub.corrupt.add("tiny-target-F32.gguf")
    download = manager.start_download("speculens-test/Tiny-GGUF", "tiny-target-F32.gguf")
    qtbot.waitUntil(lambda: download.state == "failed", timeout=20_000)
    # A tour saw "Failed" under a full bar, with the reason in a tooltip and an older error below.
    assert manager.message.text().startswith("Downloading tiny-target-F32.gguf from speculens-test/Tiny-GGUF: checksum")
    assert manager.download_table.cellWidget(download.row, 1).format().startswith("failed at")
    assert manager.download_table.item(download.row, 2).text() == "–"  # no speed left from the transfer
    # And a full bar that failed is drawn red, not as a blue success (a tour's).
    bar = manager.download_table.cellWidget(download.row, 1)
    shot = bar.grab().toImage()
    left = shot.pixelColor(3, shot.height() // 2)
    assert left.red() > 150 and left.blue() < 120, left.name()


def test_a_resumed_download_keeps_its_row_and_a_finished_one_shows_its_model(
    qtbot, fake_hub, manager: ModelManagerWindow
) -> None:
    from speculens.models import hub as hub_module

    started = threading.Event()
    real = hub_module.HubClient._transfer

    def slow_start(*args: object, **kwargs: object) -> None:  # cancelled before its first byte
        started.set()
        args[-1].wait(10)  # type: ignore[attr-defined]  # its cancel event
        real(*args, **kwargs)  # type: ignore[arg-type]

    hub_module.HubClient._transfer = slow_start  # type: ignore[method-assign]
    try:
        first = manager.start_download("speculens-test/Tiny-GGUF", "tiny-target-F32.gguf")
        assert started.wait(10)
        with qtbot.waitSignal(manager.downloads_changed) as said:  # for the main window's status bar
            manager._on_download_timer_timeout()
        assert said.args[0].startswith("Downloading tiny-target-F32.gguf")
        button = manager.download_table.cellWidget(first.row, 5)
        button.click()  # Cancel
        qtbot.waitUntil(lambda: first.state == "cancelled", timeout=10_000)
        assert "cancelled" in manager.message.text()
    finally:
        hub_module.HubClient._transfer = real  # type: ignore[method-assign]
    qtbot.waitUntil(lambda: manager.download_table.cellWidget(first.row, 5).text() == "Resume", timeout=5_000)
    with qtbot.waitSignal(manager.download_ended, timeout=20_000) as ended:  # said in the main window too
        manager.download_table.cellWidget(first.row, 5).click()  # Resume
        assert manager.message.text().startswith("Downloading tiny-target-F32.gguf")  # not "…was cancelled"
    assert ended.args == ["tiny-target-F32.gguf downloaded, checked and added to the library."]
    again = manager.downloads[-1]
    assert again is not first and again.row == first.row and manager.download_table.rowCount() == 1
    qtbot.waitUntil(lambda: again.state == "done", timeout=20_000)
    with qtbot.waitSignal(manager.downloads_changed) as said:
        manager._on_download_timer_timeout()
    assert said.args == [""]  # the main window's word on downloads goes
    qtbot.waitUntil(lambda: "downloaded, checked and added to the library" in manager.message.text(), timeout=10_000)
    # No Resume on a finished download, but the way to it (an empty cell left the user to look for it).
    button = manager.download_table.cellWidget(again.row, 5)
    assert button.text() == "Show in library"
    button.click()
    assert manager.tabs.currentIndex() == 0 and manager._selected_entry().path == Path(again.message)
    # The same file once more: not "added", which a tour read under an unchanged count.
    with qtbot.waitSignal(manager.download_ended, timeout=20_000) as ended:
        manager.start_download("speculens-test/Tiny-GGUF", "tiny-target-F32.gguf")
    assert ended.args == ["tiny-target-F32.gguf was downloaded already: checked, and in the library."]


def test_a_download_left_unfinished_is_offered_again_after_a_restart(
    qtbot, fake_hub, manager: ModelManagerWindow, controller: ModelController
) -> None:
    fake_hub.cut_once["tiny-target-F32.gguf"] = 300_000  # the connection drops after a chunk, past every retry
    manager.hub.retries = 0
    first = manager.start_download("speculens-test/Tiny-GGUF", "tiny-target-F32.gguf")
    qtbot.waitUntil(lambda: first.state == "failed", timeout=20_000)
    bar = manager.download_table.cellWidget(first.row, 1)
    kept = bar.value()
    assert 0 < kept < 1000 and bar.format().startswith("failed at ")
    # A retry that fails before any transfer (the hub out of reach) keeps what is on disk in view (a tour's bar
    # went empty).
    endpoint, manager.hub.endpoint = manager.hub.endpoint, "http://127.0.0.1:9"
    manager.download_table.cellWidget(first.row, 5).click()  # Retry
    retry = manager.downloads[-1]
    qtbot.waitUntil(lambda: retry.state == "failed", timeout=20_000)
    manager.hub.endpoint = endpoint
    bar = manager.download_table.cellWidget(retry.row, 1)
    assert bar.value() == kept and bar.format().startswith("failed at "), (bar.value(), bar.format())
    restarted = ModelManagerWindow(controller)  # as a new session's window opens
    qtbot.addWidget(restarted)
    assert restarted.download_table.rowCount() == 1
    assert restarted.download_table.item(0, 4).text() == "Interrupted"
    bar = restarted.download_table.cellWidget(0, 1)
    assert 0 < bar.value() < 1000 and restarted.download_table.cellWidget(0, 5).text() == "Resume"
    restarted.download_table.cellWidget(0, 5).click()  # Resume
    again = restarted.downloads[-1]
    qtbot.waitUntil(lambda: again.state == "done", timeout=20_000)
    assert restarted.download_table.rowCount() == 1
    assert any(r[0] == "GET" and "range" in {k.lower() for k in r[2]} for r in fake_hub.requests)  # resumed
    restarted.shutdown()


def test_a_gated_repository_says_where_the_window_takes_a_token(qtbot, fake_hub, manager: ModelManagerWindow) -> None:
    fake_hub.add(FakeRepo("speculens-test/Gated-GGUF", {"g-Q4_0.gguf": b"x" * 10}, gated=True))
    fake_hub.tokens.add("hf_granted")
    manager.start_download("speculens-test/Gated-GGUF", "g-Q4_0.gguf")
    qtbot.waitUntil(lambda: "gated" in manager.message.text(), timeout=10_000)
    assert "Access token field" in manager.message.text() and "--token" not in manager.message.text()
    manager.hub_search.setText("Gated")
    manager.search_hub()
    qtbot.waitUntil(lambda: "Gated-GGUF (gated" in manager.repo_list.item(0).text(), timeout=10_000)
    manager.repo_list.setCurrentRow(0)
    qtbot.waitUntil(lambda: "gated" in manager.message.text() and "Listing" in manager.message.text(), timeout=10_000)
    manager.hub_token.setText("hf_granted")
    assert manager.hub.token == "hf_granted"
    manager.hub_token.editingFinished.emit()  # Enter in the field: the files are listed with the token
    qtbot.waitUntil(lambda: manager.file_table.rowCount() == 1, timeout=10_000)
    manager.hub_token.clear()
    assert manager.hub.token is None  # HF_TOKEN or a saved login again


def test_a_scan_s_summary_stays_on_the_message_line(qtbot, manager: ModelManagerWindow, tmp_path: Path) -> None:
    (tmp_path / "notes.gguf").write_text("not a model")
    manager.scan_folder(tmp_path)
    qtbot.waitUntil(lambda: "models in the library" in manager.message.text(), timeout=10_000)
    assert "Scan: 0 added" in manager.message.text() and "notes.gguf" in manager.message.text()


@pytest.mark.parametrize("answer", ["Cancel", "Remove"])
def test_remove_from_library_asks_first_and_leaves_the_user_s_file(
    qtbot, manager: ModelManagerWindow, tiny, tmp_path: Path, answer: str
) -> None:
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    copy = tmp_path / "mine.gguf"
    shutil.copy(tiny.identical, copy)
    manager.library.add(copy)
    manager.refresh_library()
    qtbot.waitUntil(lambda: any(e.path == copy for e in manager.entries), timeout=10_000)
    manager.library_table.selectRow(next(i for i, e in enumerate(manager.entries) if e.path == copy))
    asked: list[str] = []

    def reply() -> None:
        box = QApplication.activeModalWidget()
        assert isinstance(box, QMessageBox)
        asked.append(box.text() + " " + box.informativeText())
        next(b for b in box.buttons() if b.text() == answer).click()

    QTimer.singleShot(0, reply)
    manager.show()
    manager.library_table.setFocus()
    qtbot.keyClick(manager.library_table, Qt.Key.Key_Delete)  # the Delete key, as the button (a keyboard tour's)
    assert asked and "stays where it is" in asked[0]
    if answer == "Cancel":
        qtbot.wait(100)
        assert any(e.path == copy for e in manager.entries)
    else:
        qtbot.waitUntil(lambda: all(e.path != copy for e in manager.entries), timeout=10_000)
        assert "removed" in manager.message.text() and copy.exists()
        assert not manager.library_table.selectedIndexes()  # a second click removes nothing


def test_removing_the_chosen_draft_says_so_frees_it_and_leaves_the_pair_without_it(
    qtbot, manager: ModelManagerWindow, tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tour removed the chosen draft (then the target): nothing said they were in use, and the window went on naming
    them until a load failed on a file not found."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    copy = tmp_path / "mine.gguf"
    shutil.copy(tiny.identical, copy)
    manager.library.add(copy)
    manager.refresh_library()
    qtbot.waitUntil(lambda: any(e.path == copy for e in manager.entries), timeout=10_000)
    models = manager.models
    with qtbot.waitSignal(models.worker.models_loaded, timeout=30_000):
        models.set_pair(str(tiny.target), str(copy))
    qtbot.waitUntil(lambda: models.store.loaded is not None, timeout=10_000)
    manager.library_table.selectRow(next(i for i, e in enumerate(manager.entries) if e.path == copy))
    asked: list[str] = []

    def reply() -> None:
        box = QApplication.activeModalWidget()
        assert isinstance(box, QMessageBox)
        asked.append(box.informativeText())
        next(b for b in box.buttons() if b.text() == "Remove").click()

    freed_first: list[bool] = []  # whether the models were freed when the entry went (its file, on Windows)
    remove = manager.library.remove
    monkeypatch.setattr(manager.library, "remove", lambda *a, **k: (
        freed_first.append(models.worker._engine is None), remove(*a, **k)))
    QTimer.singleShot(0, reply)
    manager._on_remove_clicked()
    assert asked and asked[0].startswith("It is the chosen draft") and "the loaded models are freed" in asked[0]
    manager.library_table.selectRow(next(i for i, e in enumerate(manager.entries) if e.path == copy))
    manager._on_remove_clicked()  # again while the models are freed: said, not asked nor removed twice
    assert manager.message.text().endswith("is removed as soon as the loaded models are freed.") and len(asked) == 1
    qtbot.waitUntil(lambda: all(e.path != copy for e in manager.entries), timeout=10_000)
    assert freed_first == [True]
    settings = models.store.settings
    assert settings.draft_path == "" and settings.target_path == str(tiny.target) and models.store.loaded is None


def test_copies_of_one_file_are_told_apart_by_their_folder(
    qtbot, manager: ModelManagerWindow, tiny, tmp_path: Path
) -> None:
    copy = tmp_path / "elsewhere" / tiny.identical.name
    copy.parent.mkdir()
    shutil.copy(tiny.identical, copy)
    before = len(manager.entries)
    manager.import_file(copy)
    qtbot.waitUntil(lambda: len(manager.entries) == before + 1, timeout=10_000)
    table = manager.library_table
    locations = [table.item(r, 1).text() for r in range(table.rowCount())]
    assert display_path(copy) in locations and display_path(tiny.identical) in locations
    labels = [manager.draft_combo.itemText(i) for i in range(manager.draft_combo.count())]
    twins = [label for label in labels if " — in " in label]
    assert len(twins) == 2 and len(set(twins)) == 2
    assert any(display_path(copy.parent) in label for label in twins)
    # And in the suggested drafts: two copies of a smaller draft (a tour's five identical lines).
    from speculens.models.synthetic import TinyModelSpec, write_tiny_model

    for where in "ab":
        (tmp_path / where).mkdir()
        manager.library.add(write_tiny_model(tmp_path / where / "small.gguf", TinyModelSpec(n_layer=1, name="small")))
    manager.refresh_library()
    qtbot.waitUntil(lambda: len(manager.entries) == before + 3, timeout=10_000)
    manager.target_combo.setCurrentIndex(manager.target_combo.findData(str(tiny.target)))
    manager._on_target_combo_changed()  # suggested afresh, with both copies in the library

    def suggested() -> list[str]:
        lines = manager.suggestions
        return [lines.item(i).text() for i in range(lines.count()) if "(in your library)" in lines.item(i).text()]

    qtbot.waitUntil(lambda: len(suggested()) == 2, timeout=10_000)
    assert len(set(suggested())) == 2, suggested()


def test_a_metadata_name_that_disagrees_with_the_file_name_shows_both(tiny, tmp_path: Path) -> None:
    from speculens.models.library import Library

    library = Library()
    renamed = tmp_path / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    shutil.copy(tiny.identical, renamed)
    entry = library.add(renamed)
    label = entry_label(entry, [entry])
    assert label.startswith(f"{entry.name} ({renamed.name}) — ")  # the name first, as the library shows it


def test_a_truncated_file_is_refused_at_import_with_the_reason(
    qtbot, manager: ModelManagerWindow, tiny, tmp_path: Path
) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny.identical.read_bytes()[:-1000])
    manager.import_file(cut)
    qtbot.waitUntil(lambda: "truncated" in manager.message.text(), timeout=10_000)
    assert "cut.gguf" in manager.message.text()
    assert all(e.path != cut for e in manager.entries)


def test_a_registered_file_found_damaged_is_listed_so_and_cannot_be_picked(
    qtbot, manager: ModelManagerWindow, tiny, tmp_path: Path
) -> None:
    cut = tmp_path / "cut.gguf"
    shutil.copy(tiny.identical, cut)
    entry = manager.library.add(cut)
    # Damaged in place at the same size (a copy interrupted by a full disk leaves zeros, say): the header
    # still reads, but its tensors claim more than the file holds once the tail is gone; simulate an index
    # written before the check by recording the cut size.
    cut.write_bytes(cut.read_bytes()[:-1000])
    index = json.loads(manager.library.index_path.read_text(encoding="utf-8"))
    for model in index["models"]:
        if model["id"] == entry.id:
            model["size"] = cut.stat().st_size
    manager.library.index_path.write_text(json.dumps(index), encoding="utf-8")
    manager.refresh_library()
    qtbot.waitUntil(lambda: any(e.path == cut and e.status.value == "damaged" for e in manager.entries), timeout=10_000)
    row = next(i for i, e in enumerate(manager.entries) if e.path == cut)
    assert manager.library_table.item(row, 7).text() == "Damaged"
    assert "truncated" in manager.library_table.item(row, 0).toolTip()
    assert "damaged" in manager.message.text()
    choices = [manager.draft_combo.itemData(i) for i in range(manager.draft_combo.count())]
    assert str(cut) not in choices  # a damaged file cannot be picked as a draft


def test_the_report_uses_the_current_context_size(qtbot, manager: ModelManagerWindow, tiny) -> None:
    manager.show()
    pick(manager, tiny.target, tiny.identical)
    qtbot.waitUntil(lambda: manager.report is not None, timeout=10_000)
    assert "512" in manager.report_view.toPlainText() or manager.report.compatible
    manager.models.store.update(n_ctx=8192)
    qtbot.waitUntil(lambda: (manager.report is not None and "8,192" in manager.report_view.toPlainText())
                    or "8192" in manager.report_view.toPlainText(), timeout=10_000)  # fmt: skip


def test_a_long_error_wraps_instead_of_running_off_the_edge(qtbot, manager: ModelManagerWindow) -> None:
    manager.show()
    manager.resize(700, 500)
    long = "The hub could not be reached: " + "a very long reason that goes on " * 12 + "— check the network."
    manager._show_error(long)
    qtbot.wait(10)
    assert manager.message.text() == long and manager.message.wordWrap()
    assert manager.message.width() <= manager.width()
    assert manager.message.sizeHint().height() > manager.message.fontMetrics().height() * 2


@pytest.mark.qt_log_ignore("This plugin does not support raise")
def test_the_main_windows_manager_shares_its_library_hub_and_settings(qtbot, tiny) -> None:
    window = fake_window(qtbot, tiny)
    window.open_model_manager()
    manager = window._manager
    assert manager.library is window.models.library and manager.hub is window.models.hub
    # A model added in the manager is in the main window's library at once (one object, one lock).
    before = {e.path for e in window.models.library.entries()}
    manager.library.add(tiny.mismatch)
    assert {e.path for e in window.models.library.entries()} - before == {tiny.mismatch}
    # A setting changed anywhere is what the manager sees.
    window.models.store.update(n_ctx=2048)
    assert manager.models.store.settings.n_ctx == 2048
    manager.shutdown()


@dataclass
class UnbuiltDemo:
    """A demo model not built yet (the mismatch demo's stand-in): its path once built, the keys built so far, and
    an event a build waits for (set: it goes on at once)."""

    path: str
    built: list[str]
    release: threading.Event


@pytest.fixture()
def unbuilt_demo(tiny, monkeypatch) -> UnbuiltDemo:  # type: ignore[no-untyped-def]
    from speculens.models import demo

    data = tiny.mismatch.read_bytes()
    fake = demo.DemoModel(
        key="other",
        title="Other tokenizer",
        role="mismatch",
        filename="other.gguf",
        packages=("json",),
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        hub_repo="example/other",
    )
    made = UnbuiltDemo(str(demo.demo_path(fake)), [], threading.Event())
    made.release.set()

    def assemble(model, folder=None, progress=None):  # type: ignore[no-untyped-def]
        made.release.wait(10)
        path = demo.demo_path(model)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(tiny.mismatch, path)
        made.built.append(model.key)
        return path

    monkeypatch.setattr(demo, "DEMO_MODELS", (fake,))
    monkeypatch.setattr(demo, "ensure_demo_model", assemble)
    return made


def test_use_as_draft_on_a_demo_model_not_yet_assembled_assembles_and_picks_it(
    qtbot, tiny, controller: ModelController, unbuilt_demo: UnbuiltDemo
) -> None:
    """From a new-user tour: Use as draft on the not-assembled Gemma demo switched to the pair picker and
    silently kept the old draft (its file did not exist yet, so the combo had no entry for it)."""
    controller.library.add(tiny.target)
    window = ModelManagerWindow(controller)
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: any(e.id == "other" for e in window.entries), timeout=10_000)
    row = next(i for i, e in enumerate(window.entries) if e.id == "other")
    window.library_table.selectRow(row)
    window._on_use_draft_clicked()
    wanted = unbuilt_demo.path
    qtbot.waitUntil(lambda: window.draft_combo.currentData() == wanted, timeout=10_000)
    assert window.tabs.currentIndex() == 1
    window.shutdown()


def test_a_demo_model_not_yet_built_is_in_the_pair_picker_and_built_on_a_click(
    qtbot, tiny, controller: ModelController, unbuilt_demo: UnbuiltDemo
) -> None:
    """From a new-user tour: the mismatch demo (Gemma), not built yet, was missing from the pair picker's draft
    list, so its warning could be seen only by way of the library's Use as draft. Chosen, it is built on a click
    (a code review: choosing alone built each model the arrow keys passed)."""
    controller.library.add(tiny.target)
    window = ModelManagerWindow(controller)
    qtbot.addWidget(window)
    wanted, built = unbuilt_demo.path, unbuilt_demo.built
    qtbot.waitUntil(lambda: window.draft_combo.findData(wanted) > 0, timeout=10_000)
    window.target_combo.setCurrentIndex(window.target_combo.findData(str(tiny.target)))
    index = window.draft_combo.findData(wanted)
    assert window.draft_combo.itemText(index).endswith("not built yet") and not built
    window.draft_combo.setCurrentIndex(index)  # chosen (the arrow keys or the wheel could pass it): not built yet
    assert "Build it now" in window.report_view.toPlainText() and not window.use_pair_button.isEnabled()
    assert window.use_target_only_button.isEnabled() and not built
    window.report_view.anchorClicked.emit(QUrl("build"))
    assert "Building" in window.report_view.toPlainText()
    qtbot.waitUntil(lambda: window.report is not None, timeout=10_000)
    assert built == ["other"] and window.draft_combo.currentData() == wanted
    assert not window.draft_combo.itemText(window.draft_combo.currentIndex()).endswith("not built yet")
    assert window.banner.text().startswith("⚠")  # its tokenizer differs: the warning the demo is there for
    window.shutdown()


def test_a_demo_model_built_from_the_picker_does_not_undo_a_later_choice(
    qtbot, tiny, controller: ModelController, unbuilt_demo: UnbuiltDemo
) -> None:
    """From a code review: a build that ended put its model back in the list the user had since changed."""
    unbuilt_demo.release.clear()  # the build waits until the user has changed their mind
    controller.library.add(tiny.target)
    controller.library.add(tiny.identical)
    window = ModelManagerWindow(controller)
    qtbot.addWidget(window)
    wanted = unbuilt_demo.path
    qtbot.waitUntil(lambda: window.draft_combo.findData(wanted) > 0, timeout=10_000)
    window.target_combo.setCurrentIndex(window.target_combo.findData(str(tiny.target)))
    window.draft_combo.setCurrentIndex(window.draft_combo.findData(wanted))
    window.report_view.anchorClicked.emit(QUrl("build"))
    window.draft_combo.setCurrentIndex(window.draft_combo.findData(str(tiny.identical)))  # changed their mind
    unbuilt_demo.release.set()
    qtbot.waitUntil(lambda: window.draft_combo.findText("not built yet", Qt.MatchFlag.MatchEndsWith) < 0
                    and window.draft_combo.findData(wanted) > 0, timeout=10_000)  # fmt: skip
    qtbot.wait(100)
    assert window.draft_combo.currentData() == str(tiny.identical)
    window.shutdown()


def test_escape_closes_the_manager(qtbot, manager: ModelManagerWindow) -> None:
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    manager.show()
    qtbot.waitExposed(manager)
    manager.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is manager, timeout=5_000)
    qtbot.keyClick(manager, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: not manager.isVisible(), timeout=5_000)


def test_a_tool_window_opens_over_its_parent_and_inside_the_screen(qtbot) -> None:
    """From a new-user tour: on a 1600×1000 screen the window manager put the Models window at the left edge,
    680 px tall from y=335, so its bottom third was below the screen (resize_within_screen now places it)."""
    parent = QWidget()
    qtbot.addWidget(parent)
    area = parent.screen().availableGeometry()
    parent.setGeometry(area.left() + 100, area.top() + 100, 400, 300)
    child = QWidget(parent, Qt.WindowType.Window)
    resize_within_screen(child, 200, 100)
    centre, want = child.geometry().center(), parent.frameGeometry().center()
    assert abs(centre.x() - want.x()) <= 1 and abs(centre.y() - want.y()) <= 1, (centre, want)
    parent.move(area.right() - 250, area.bottom() - 100)  # low on the screen, partly past its right edge
    resize_within_screen(child, 200, area.height())
    assert area.contains(child.geometry()), (area, child.geometry())


def test_the_target_is_not_offered_as_its_own_draft(qtbot, manager: ModelManagerWindow, tiny) -> None:
    """From a new-user tour: the Draft list offered the target itself."""
    pick(manager, tiny.target, tiny.identical)
    combo = manager.draft_combo
    row = combo.findData(str(tiny.target))
    assert row > 0 and not combo.model().item(row).isEnabled()
    assert "target itself" in combo.model().item(row).toolTip()
    assert combo.model().item(combo.findData(str(tiny.identical))).isEnabled()
    manager.select_pair(tiny.identical, tiny.identical)  # the draft becomes the target: no draft, not itself
    assert combo.currentData() == "" and combo.model().item(row).isEnabled()


def test_the_library_shows_which_models_are_the_pair(manager: ModelManagerWindow, tiny) -> None:
    """From a new-user tour: the Library tab did not show which model was the target and which the draft."""
    table = manager.library_table

    def row_of(path: Path) -> int:
        return next(r for r in range(table.rowCount()) if table.item(r, 1).text() == display_path(path))

    assert not any("(target)" in table.item(r, 0).text() for r in range(table.rowCount()))
    manager.models.store.update(target_path=str(tiny.target), draft_path=str(tiny.identical))
    target, draft, other = (table.item(row_of(p), 0) for p in (tiny.target, tiny.identical, tiny.mismatch))
    assert target.text().endswith("(target)") and target.font().bold()
    assert draft.text().endswith("(draft)") and draft.font().bold()
    assert "(" not in other.text() and not other.font().bold()


def test_a_name_marked_as_the_pair_s_is_shown_whole(qtbot, manager: ModelManagerWindow, tmp_path: Path) -> None:
    """Bold, with "(draft)" after it, a name is wider: a tour read "Qwen2.5 Coder 0.5…uct AWQ (draft)"."""
    from speculens.models.synthetic import TinyModelSpec, write_tiny_model

    path = write_tiny_model(tmp_path / "a.gguf", TinyModelSpec(name="A rather long model name, as hub models have"))
    manager.library.add(path)
    manager.refresh_library()
    qtbot.waitUntil(lambda: any(e.path == path.resolve() for e in manager.entries), timeout=10_000)
    table = manager.library_table
    manager.models.store.update(draft_path=str(path.resolve()))
    row = next(i for i, e in enumerate(manager.entries) if e.path == path.resolve())
    assert table.item(row, 0).text().startswith("A rather long model name, as hub models have  (draft)")
    assert table.columnWidth(0) >= table.sizeHintForColumn(0), (table.columnWidth(0), table.sizeHintForColumn(0))


@pytest.mark.qt_log_ignore("This plugin does not support")  # raise(), offscreen
def test_the_main_window_mentions_downloads_left_unfinished(qtbot, tiny) -> None:
    import json

    from speculens import paths

    window = fake_window(qtbot, tiny)
    window.mention_unfinished_downloads()
    assert "unfinished" not in window.statusBar().currentMessage()
    folder = paths.models_dir() / "hub" / "owner__Repo-GGUF"
    folder.mkdir(parents=True)
    (folder / "m-Q4_0.gguf.part").write_bytes(b"x" * 10)
    version = {"repo": "owner/Repo-GGUF", "file": "m-Q4_0.gguf", "size": 100, "sha256": "0", "git_sha1": "0"}
    (folder / "m-Q4_0.gguf.part.json").write_text(json.dumps(version))
    window.mention_unfinished_downloads()
    assert window.statusBar().currentMessage().startswith("The download of m-Q4_0.gguf is unfinished")
    window.open_model_manager().downloads_changed.emit("Downloading m-Q4_0.gguf: 10%")  # Resume was pressed
    assert window.download_status.text() == "Downloading m-Q4_0.gguf: 10%" and not window.statusBar().currentMessage()
    # Resumed and failed at once (no download ever shown): the note, which says Resume where Retry now stands, goes.
    window.statusBar().showMessage(window._unfinished_note)
    window.open_model_manager().downloads_changed.emit("")
    assert not window.statusBar().currentMessage()


def test_a_long_hub_source_never_pushes_the_status_column_out_of_the_window(
    qtbot, manager: ModelManagerWindow, tiny, tmp_path: Path
) -> None:
    """A tour's 1100-pixel manager showed "hub: google/gemma-3-270m-GGUF@0123…" and no Status column."""
    from speculens.models.library import ModelSource, SourceKind
    from speculens.ui.model_manager import SOURCE_COLUMN, SOURCE_WIDTH

    copy = tmp_path / "hubbed.gguf"
    shutil.copy(tiny.identical, copy)
    source = ModelSource(SourceKind.HUB, repo="someone/" + "a-very-long-repository-name-" * 3 + "GGUF",
                         revision="0123456789abcdef0123456789abcdef01234567", filename="hubbed.gguf")
    manager.library.add(copy, source=source)
    manager.refresh_library()
    qtbot.waitUntil(lambda: any(e.path == copy for e in manager.entries), timeout=10_000)
    table = manager.library_table
    row = next(i for i, e in enumerate(manager.entries) if e.path == copy)
    assert table.columnWidth(SOURCE_COLUMN) <= SOURCE_WIDTH < table.fontMetrics().horizontalAdvance(source.describe())
    assert source.describe() in table.item(row, SOURCE_COLUMN).toolTip()  # whole, where the cell elides it


def test_a_pair_s_note_is_said_when_that_pair_is_loaded_not_an_earlier_load(
    qtbot, controller: ModelController, tiny
) -> None:
    """The worker runs loads in order: a pair chosen while another load ran gave its note to that load."""
    said: list[str] = []
    controller.message.connect(said.append)
    controller.set_pair(str(tiny.target), None)  # a load under way (the start-up one, say)
    controller.set_pair(str(tiny.target), str(tiny.identical), note="The strategy is now Automatic.")
    qtbot.waitUntil(lambda: sum(m.startswith("Loaded in") for m in said) == 2, timeout=20_000)
    first, second = (m for m in said if m.startswith("Loaded in"))
    assert "Automatic" not in first and second.endswith("The strategy is now Automatic.")


def test_ctrl_tab_moves_between_sections_from_a_text_field(qtbot, manager: ModelManagerWindow) -> None:
    """From a new-user tour: opened on the hub tab with the keyboard in its search box, Ctrl+Tab and Ctrl+PgDown did
    nothing, so the Pair picker was out of the keyboard's reach."""
    manager.show()
    qtbot.waitExposed(manager)
    manager.tabs.setCurrentIndex(2)
    manager.activateWindow()
    qtbot.waitUntil(lambda: manager.hub_search.hasFocus())
    qtbot.keyClick(manager.hub_search, Qt.Key.Key_Tab, Qt.KeyboardModifier.ControlModifier)
    assert manager.tabs.currentIndex() == 3
    qtbot.keyClick(manager.focusWidget() or manager, Qt.Key.Key_PageDown, Qt.KeyboardModifier.ControlModifier)
    assert manager.tabs.currentIndex() == 0  # round again
    qtbot.keyClick(manager.focusWidget() or manager, Qt.Key.Key_Backtab,
                   Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)  # fmt: skip
    assert manager.tabs.currentIndex() == 3


def test_the_keyboard_leaves_the_library_with_tab_and_presses_buttons_with_enter(
    qtbot, tiny, manager: ModelManagerWindow
) -> None:
    """From a keyboard-only tour: Tab moved from cell to cell of the library and wrapped to the next row, so the
    selected model changed unasked; Enter on a focused button did nothing; the pair picker's buttons had no Alt
    letter and took Tab right to left."""
    manager.show()
    qtbot.waitExposed(manager)
    manager.activateWindow()
    manager.library_table.selectRow(1)
    manager.library_table.setFocus()
    qtbot.waitUntil(manager.library_table.hasFocus)
    selected = manager._selected_entry()
    qtbot.keyClick(manager.library_table, Qt.Key.Key_Tab)
    assert not manager.library_table.hasFocus() and manager._selected_entry() is selected
    assert isinstance(manager.focusWidget(), QPushButton)  # on to the buttons below the table
    pick(manager, tiny.target, tiny.identical)
    qtbot.waitUntil(lambda: manager.use_pair_button.isEnabled() and manager.use_target_only_button.isEnabled())
    order = [manager.pair_lab_button, manager.use_target_only_button, manager.use_pair_button]
    manager.pair_lab_button.setFocus()
    qtbot.waitUntil(manager.pair_lab_button.hasFocus)
    for button in order[1:]:  # left to right, as seen
        qtbot.keyClick(manager.focusWidget(), Qt.Key.Key_Tab)
        assert manager.focusWidget() is button
    assert [b.text() for b in order] == ["&Pair lab…", "Use the target &alone (draft-free strategies)",
                                         "&Use this pair"]  # fmt: skip
    pressed: list[bool] = []
    manager.pair_lab_requested.connect(lambda: pressed.append(True))
    manager.pair_lab_button.setFocus()
    qtbot.waitUntil(manager.pair_lab_button.hasFocus)
    qtbot.keyClick(manager.pair_lab_button, Qt.Key.Key_Return)
    assert pressed == [True]


def test_a_model_just_imported_is_the_one_selected(qtbot, tiny, manager: ModelManagerWindow) -> None:
    """From a keyboard-only tour: after an import the selection stayed on the first row, and Alt+T chose that."""
    manager.library_table.selectRow(0)
    first = manager._selected_entry()
    manager.import_file(tiny.perturbed)
    qtbot.waitUntil(lambda: "added" in manager.message.text(), timeout=10_000)
    chosen = manager._selected_entry()
    assert chosen is not first and chosen.path.resolve() == tiny.perturbed.resolve()


def test_the_pair_picker_says_whether_the_draft_model_pays_on_this_machine(
    qtbot, manager: ModelManagerWindow, tiny
) -> None:
    """A tour read "✓ Compatible: draft-model speculation can run with this pair" over the demo pair, whose draft
    model sits out on a 2-core CPU: compatible tokenizers are no promise of speed."""
    from speculens.engine.protocol import EngineInfo
    from speculens.ui.worker import LoadResult

    pick(manager, tiny.target, tiny.identical)
    qtbot.waitUntil(lambda: manager.report is not None, timeout=10_000)
    assert "Speed on this machine: not measured yet" in manager.report_view.toPlainText()
    idle = "the draft model cannot pay on this machine: ×0.88 of plain decoding at best"
    info = EngineInfo(tiny.target.name, tiny.identical.name, "tiny", 512, False, (), None, draft_idle=idle)
    settings = Settings(target_path=str(tiny.target), draft_path=str(tiny.identical))
    for draft_idle, said in ((idle, f"(measured at load): {idle}. It stays idle"), (None, "can pay here")):
        # A load ending while the picker is open: its line follows.
        manager.models.loaded = LoadResult(settings, replace(info, draft_idle=draft_idle), None, 1.0)
        manager.models.changed.emit()
        assert said in manager.report_view.toPlainText()
    # Loaded without the draft model (a strategy that drafts from the prompt only): never timed, so not measured.
    manager.models.loaded = LoadResult(settings, replace(info, draft=None, draft_idle=None), None, 1.0)
    manager.models.changed.emit()
    assert "Speed on this machine: not measured yet" in manager.report_view.toPlainText()
    manager.models.loading = True  # a load under way: the loaded pair's verdict would be of the models it replaces
    manager.models.changed.emit()
    assert "measured when the load under way ends" in manager.report_view.toPlainText()
    manager.models.loading = False
    # Measured by the Pair lab, and not loaded since: the lab's figures (a tour read "not measured yet" after it).
    from speculens.engine.config import Strategy
    from speculens.lab import PLAIN, Candidate, LabResult, Row, save

    key, at = f"draft:{tiny.identical.name}", "2026-12-07T19:00:00"
    lab = Candidate(key, f"Draft {tiny.identical.name}", Strategy.DRAFT, tiny.identical)
    rows = {"chat": {"none": Row("none", "Plain", 10.0, 1.0, None, 1.0, 0.0, True, 2, at),
                     key: Row(key, lab.label, 9.0, 0.9, None, 1.0, 0.0, True, 2, at, drafted=0)},
            "code-rewrite": {key: Row(key, lab.label, 13.0, 1.3, 0.8, 2.1, 3.0, True, 2, at)}}  # fmt: skip
    save(LabResult(tiny.target.name, rows=rows, candidates={"none": PLAIN, key: lab}), tiny.target)
    manager.models.changed.emit()
    assert (
        "Speed on this machine (the Pair lab, 2026-12-07): the Draft model strategy ran ×1.30 of plain decoding on "
        "code rewrite (acceptance 80%); it drafted nothing on chat: the adaptive controller found it too dear here, "
        "so those runs decoded plainly."
    ) in manager.report_view.toPlainText()


def test_the_pair_picker_gives_the_verdict_of_the_pairs_last_load_once_it_is_loaded_otherwise(
    qtbot, manager: ModelManagerWindow, tiny
) -> None:
    """From a tour: the demo pair loaded under Automatic said its draft model sat out (×0.72 at best); with prompt
    lookup chosen since, the target was loaded alone, and the picker said "Speed on this machine: not measured yet".
    A load's verdict is kept for the pair, across sessions, and said with its date."""
    from speculens.engine.protocol import EngineInfo
    from speculens.ui.model_controller import saved_verdict
    from speculens.ui.worker import LoadResult
    from speculens.words import local_time

    pick(manager, tiny.target, tiny.identical)
    qtbot.waitUntil(lambda: manager.report is not None, timeout=10_000)
    idle = "the draft model cannot pay on this machine: ×0.72 of plain decoding at best"
    info = EngineInfo(tiny.target.name, tiny.identical.name, "tiny", 512, False, (), None, draft_idle=idle)
    settings = Settings(target_path=str(tiny.target), draft_path=str(tiny.identical))
    manager.models._on_worker_models_loaded(LoadResult(settings, info, None, 1.0))  # as the worker's signal calls it
    kept = saved_verdict(str(tiny.target), str(tiny.identical))
    assert kept is not None and kept.idle == idle
    lookup = replace(settings, strategy="lookup")  # the target alone: the draft model is not loaded, nor timed
    manager.models._on_worker_models_loaded(LoadResult(lookup, replace(info, draft=None, draft_idle=None), None, 1.0))
    text = manager.report_view.toPlainText()
    assert f"(measured on {local_time(kept.date)[:10]}): {idle}. It stays idle" in text
    assert saved_verdict(str(tiny.target), str(tiny.identical)) == kept  # a load without it changes nothing
    assert saved_verdict(str(tiny.target), str(tiny.perturbed)) is None  # another pair: nothing measured
    # An answer that finds the draft model can pay after all (costs measured since): kept, and said.
    manager.models._on_worker_models_loaded(LoadResult(settings, info, None, 1.0))
    manager.models._on_worker_info_changed(replace(info, draft_idle=None))
    kept = saved_verdict(str(tiny.target), str(tiny.identical))
    assert kept is not None and kept.idle is None
