"""The settings store and the settings panel: one copy of the settings, the reload note, the mouse wheel."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QHelpEvent, QWheelEvent
from PySide6.QtWidgets import QApplication, QMessageBox, QToolTip, QWidget

from conftest import TinyModels
from fake_engine import FakeFactory
from gui_support import fake_window, pair_line
from speculens import paths
from speculens.engine.drafters.ngram_map import build_map
from speculens.engine.drafters.ngram_table import NgramTable, build_table
from speculens.settings import SPECS, Settings, generation_config, load_settings
from speculens.ui import ngram_map_dialog
from speculens.ui.ngram_map_dialog import NgramMapDialog
from speculens.ui.settings_panel import SettingsPanel
from speculens.ui.settings_store import SettingsStore

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")]


def wheel(widget: QWidget, steps: int = 1) -> None:
    """Turn the mouse wheel over a widget (without clicking it first)."""
    centre = QPointF(widget.width() / 2, widget.height() / 2)
    event = QWheelEvent(
        centre,
        QPointF(widget.mapToGlobal(centre.toPoint())),
        QPoint(0, 0),
        QPoint(0, -120 * steps),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)


@pytest.fixture()
def store(qtbot, tmp_path: Path) -> SettingsStore:
    return SettingsStore(Settings(target_path="/t.gguf"), path=tmp_path / "settings.json")


def test_panel_edits_go_to_the_store_and_only_loading_fields_flag_a_reload(qtbot, store: SettingsStore) -> None:
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    store.set_loaded(store.settings)
    assert panel.reload_note.isHidden()
    with qtbot.waitSignal(store.changed) as blocker:
        panel.temperature.setValue(0.8)
    assert blocker.args[0].temperature == pytest.approx(0.8) and store.settings.temperature == pytest.approx(0.8)
    assert panel.reload_note.isHidden()  # sampling applies to the next answer without a reload
    panel.resize(360, 400)  # a short dock: the fields scroll
    panel.show()
    panel.scroll_area.verticalScrollBar().setValue(0)
    assert panel.scroll_area.verticalScrollBar().maximum() > 0
    panel.n_ctx.setValue(8192)
    assert not panel.reload_note.isHidden()
    assert "context size" in panel.reload_note.text()
    # In view without scrolling (a tour found the note and its button only at the end of the scrolled panel).
    qtbot.waitUntil(lambda: not panel.reload_button.visibleRegion().isEmpty())
    assert not panel.reload_note.visibleRegion().isEmpty()
    store.set_loaded(store.settings)  # a reload with the new settings
    assert panel.reload_note.isHidden()


def test_restore_defaults_brings_back_every_value_but_the_files_and_words_chosen(qtbot, store: SettingsStore) -> None:
    """A teacher's tour changed a dozen values for a demo and found no way back but remembering each default."""
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    assert not panel.restore_button.isEnabled()  # nothing to restore
    store.update(
        strategy="draft", n_draft=4, adaptive=False, p_min=0.0, temperature=0.8, n_ctx=8192, exact=True,
        draft_path="/d.gguf", ngram_map_path="/m.npz", system_prompt="Be brief.",
    )  # fmt: skip
    assert panel.restore_button.isEnabled()
    qtbot.mouseClick(panel.restore_button, Qt.MouseButton.LeftButton)
    kept = Settings(target_path="/t.gguf", draft_path="/d.gguf", ngram_map_path="/m.npz", system_prompt="Be brief.")
    assert store.settings == kept
    assert panel.strategy.currentData() == "auto" and panel.adaptive.isChecked() and panel.n_ctx.value() == kept.n_ctx
    assert not panel.restore_button.isEnabled()


@pytest.mark.qt_log_ignore("This plugin does not support (raise|propagateSizeHints)")  # the tooltip, shown
def test_a_number_typed_beyond_a_field_s_range_is_brought_to_its_nearer_end(qtbot, store: SettingsStore) -> None:
    """Qt's spin boxes refuse the keystroke that leaves the range: 9999 read 9, and 5 in p_min was undone."""
    store.update(draft_path="/d.gguf")  # the draft model's confidence is editable where one drafts
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    panel.show()
    said = []
    for field, typed in ((panel.n_draft, "9999"), (panel.p_min, "5"), (panel.temperature, "-3"), (panel.n_ctx, "16")):
        field.setFocus()
        field.selectAll()
        qtbot.keyClicks(field, typed)
        qtbot.keyClick(field, Qt.Key.Key_Return)
        said.append(QToolTip.text())  # said where it happened (a tour's 999 became 64 without a word)
    assert said[0] == f"From 1 to {panel.n_draft.maximum()}: 9999 is set to {panel.n_draft.maximum()}.", said
    assert said[1] == "From 0.00 to 1.00: 5 is set to 1.00.", said
    assert (store.settings.n_draft, store.settings.p_min) == (panel.n_draft.maximum(), 1.0)
    assert (store.settings.temperature, store.settings.n_ctx) == (0.0, panel.n_ctx.minimum())
    assert "to" in panel.n_draft.toolTip() and f"{panel.n_draft.maximum()}" in panel.n_draft.toolTip()
    # In the field's own words (a review's "-5 is set to -1" for a seed that reads "random"); nothing for a number
    # only rounded to the field's decimals, which was in range.
    store.update(temperature=0.8)  # a seed matters (and can be typed) where the answer is sampled
    for field, typed in ((panel.seed, "-5"), (panel.p_min, "0.555")):
        field.setFocus()
        field.selectAll()
        qtbot.keyClicks(field, typed)
        qtbot.keyClick(field, Qt.Key.Key_Return)
        said.append(QToolTip.text() if QToolTip.isVisible() else "")
    assert said[4].startswith("From random to ") and said[4].endswith(": -5 is set to random."), said
    assert "0.555" not in said[5], said


@pytest.mark.qt_log_ignore("This plugin does not support raise")  # the map's tooltip, shown
def test_a_file_that_is_no_n_gram_map_is_refused_when_chosen(qtbot, store: SettingsStore, tmp_path: Path) -> None:
    """Said at once, in our words (numpy's spoke of unpickling), not after both models reloaded."""
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    panel.show()
    junk = tmp_path / "junk.npz"
    junk.write_text("junk\n", encoding="utf-8")
    panel.ngram_map.setText(str(junk))
    panel.ngram_map.editingFinished.emit()
    assert store.settings.ngram_map_path == ""  # the map in use is unchanged
    assert panel.map_error.isVisible() and "junk.npz is not an n-gram map" in panel.map_error.text()
    assert "pickle" not in panel.map_error.text() and "speculens-cli" not in panel.map_error.text()  # the app's words
    tip = panel.strategy.itemData(panel.strategy.findData("ngram-map"), Qt.ItemDataRole.ToolTipRole)
    assert "speculens-cli" not in tip and "Build…" in tip
    good = tmp_path / "code.npz"
    build_table([[1, 2, 3, 1, 2, 3]], min_total=1).save(good, "fingerprint")
    panel.ngram_map.setText(str(good))
    panel.ngram_map.editingFinished.emit()
    assert store.settings.ngram_map_path == str(good) and not panel.map_error.isVisible()
    # Built for another tokenizer than the loaded target's: said by the field, with what it does and the way out (a
    # tour chose one without a word, then every answer failed).
    panel.set_loaded_vocab("another fingerprint")
    said = panel.map_error.text()
    assert panel.map_error.isVisible() and said.startswith("The n-gram map code.npz was built with another model's")
    assert "the automatic strategy goes on without it" in said and "Build…" in said
    store.update(strategy="ngram-map")
    assert "answers cannot start" in panel.map_error.text()
    panel.set_loaded_vocab("fingerprint")  # a target it was built for
    assert not panel.map_error.isVisible()
    # What the map holds, where the user points at it (a tour found no way to see it but ls), made as the tooltip
    # shows, from the file as it is then.
    info = NgramTable.summary(good)
    facts = f"code.npz: {info['n_ngrams']} n-grams of {info['ngram_min']} to {info['ngram_max']} tokens"
    assert info["n_ngrams"] > 0 and facts not in panel.ngram_map.toolTip()
    hover = QHelpEvent(QEvent.Type.ToolTip, QPoint(5, 5), panel.ngram_map.mapToGlobal(QPoint(5, 5)))
    QApplication.sendEvent(panel.ngram_map, hover)
    tip = panel.ngram_map.toolTip()
    QToolTip.hideText()
    assert facts in tip and "built with the loaded target's tokenizer" in tip
    build_table([[1, 2, 3, 4, 1, 2, 3, 4, 5, 6]], min_total=1).save(good, "another fingerprint")  # rebuilt
    assert "built with another model's tokenizer" in panel.map_tooltip()
    good.write_bytes(good.read_bytes()[:100])  # damaged: said in words, and nothing raises
    assert "code.npz is not an n-gram map" in panel.map_tooltip()
    good.unlink()
    assert "code.npz: No such file or directory" in panel.map_tooltip()
    store.update(ngram_map_path="")
    assert panel.map_tooltip() == SPECS["ngram_map_path"].tip


def test_a_map_is_built_from_the_users_files_in_the_app_and_drafted_from(
    qtbot, tiny: TinyModels, tmp_path: Path
) -> None:
    """Settings ▸ N-gram map ▸ Build…: the map is written for the target's tokenizer and becomes the one in use."""
    store = SettingsStore(Settings(), path=tmp_path / "settings.json")
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    panel.show()
    assert not panel.build_map.isEnabled() and "target model first" in panel.build_map.toolTip()
    store.update(target_path=str(tiny.target))
    assert panel.build_map.isEnabled()
    corpus = tmp_path / "project"
    corpus.mkdir()
    (corpus / "add.py").write_text("def add(a, b):\n    return a + b\n" * 20, encoding="utf-8")
    panel.build_map.click()
    dialog = panel.findChild(NgramMapDialog)
    assert dialog is not None and dialog.isVisible() and not dialog.build_button.isEnabled()
    dialog.min_count.setValue(1)
    dialog.add_paths([corpus, corpus])
    assert dialog.corpus.count() == 1 and dialog.build_button.isEnabled()
    assert Path(dialog.output.text()) == paths.data_dir() / "ngram-maps" / "project.npz"
    before = dialog.corpus.geometry()
    with qtbot.waitSignal(dialog.built, timeout=30_000):
        dialog.build_button.click()
    assert "Wrote" in dialog.status.text() and "n-grams" in dialog.status.text()
    qtbot.wait(10)  # laid out again with the progress bar and a summary of two lines
    assert dialog.bar.isVisible() and dialog.corpus.geometry() == before  # the list did not jump (a tour's)
    assert store.settings.ngram_map_path == dialog.output.text() and store.settings.strategy == "auto"
    NgramTable.check(Path(store.settings.ngram_map_path))
    assert dialog.close_button.text() == "Close" and dialog.build_button.isEnabled()
    qtbot.wait(20)  # the build's end was handled: Cancel became Close under the pointer, and waits a moment
    assert not dialog.close_button.isEnabled()  # a late click on Cancel does not close away the summary
    qtbot.waitUntil(dialog.close_button.isEnabled, timeout=3_000)
    assert not store.reload_needed()  # a map is read by the next answer: no reload of the models
    assert generation_config(store.settings).ngram_map == Path(store.settings.ngram_map_path)
    assert "small map" in dialog.status.text()  # 20 lines of text: a user is told it will seldom help
    dialog.close()
    panel.build_map.click()
    again = [d for d in panel.findChildren(NgramMapDialog) if d.isVisible()]
    assert len(again) == 1 and again[0].corpus_paths() == [corpus]  # the last corpus, to rebuild it
    assert again[0].min_count.value() == 1  # and its options (a tour's rebuild went back to 2, and shrank its map)


def test_a_map_is_not_replaced_unasked_nor_used_unless_wanted(
    qtbot, tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SettingsStore(Settings(target_path=str(tiny.target), strategy="lookup"), path=tmp_path / "settings.json")
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    dialog = NgramMapDialog(tiny.target, panel)
    dialog.built.connect(lambda path, use_now: panel._on_map_built(path, use_now, dialog))
    qtbot.addWidget(dialog)
    (tmp_path / "notes.txt").write_text("some notes\n" * 50, encoding="utf-8")
    dialog.add_paths([tmp_path / "notes.txt"])
    existing = Path(dialog.output.text())
    existing.parent.mkdir(parents=True, exist_ok=True)
    existing.write_bytes(b"an earlier map")
    asked: list[str] = []

    def answer(_parent, _title, text, *_args):
        asked.append(text)
        return QMessageBox.StandardButton.No

    monkeypatch.setattr(QMessageBox, "question", answer)
    dialog.build_button.click()
    assert len(asked) == 1 and str(existing) in asked[0]
    assert existing.read_bytes() == b"an earlier map" and dialog.close_button.text() == "Close"  # not started
    dialog.output.setText(str(tmp_path / "new.npz"))
    dialog.use_now.setChecked(False)
    with qtbot.waitSignal(dialog.built, timeout=30_000):
        dialog.build_button.click()
    assert "choose it in Settings" in dialog.status.text() and (tmp_path / "new.npz").exists()
    assert (store.settings.ngram_map_path, store.settings.strategy) == ("", "lookup")  # left as they were
    dialog.use_now.setChecked(True)
    with qtbot.waitSignal(dialog.built, timeout=30_000):
        dialog.build_button.click()  # its own map again: replaced without asking
    assert len(asked) == 1
    # Lookup alone would not draft from it: the automatic strategy takes it beside lookup and the n-gram cache.
    assert (store.settings.ngram_map_path, store.settings.strategy) == (str(tmp_path / "new.npz"), "auto")
    assert "The strategy was Prompt lookup" in dialog.status.text() and "it is now Automatic" in dialog.status.text()
    # Another corpus: the last build's result goes, as it is not this corpus's.
    (tmp_path / "more.txt").write_text("more notes\n", encoding="utf-8")
    dialog.add_paths([tmp_path / "more.txt"])
    assert dialog.status.text() == "" and dialog.bar.isHidden()


def test_a_corpus_that_gives_no_map_changes_nothing_and_its_error_goes_with_it(
    qtbot, tiny: TinyModels, tmp_path: Path
) -> None:
    """From a new-user tour: an empty file made a map of 0 n-grams, which was made active and switched the strategy
    from Draft model to Automatic; and a failed build's error stayed under the next corpus."""
    store = SettingsStore(Settings(target_path=str(tiny.target), strategy="draft"), path=tmp_path / "settings.json")
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    dialog = NgramMapDialog(tiny.target, panel)
    dialog.built.connect(lambda path, use_now: panel._on_map_built(path, use_now, dialog))
    qtbot.addWidget(dialog)
    (tmp_path / "empty.py").write_text("", encoding="utf-8")
    dialog.add_paths([tmp_path / "empty.py"])
    dialog.build_button.click()
    qtbot.waitUntil(lambda: "Could not build a map" in dialog.status.text(), timeout=30_000)
    assert "no n-gram to draft from" in dialog.status.text() and not Path(dialog.output.text()).exists()
    assert (store.settings.ngram_map_path, store.settings.strategy) == ("", "draft")
    (tmp_path / "notes.txt").write_text("some notes\n", encoding="utf-8")
    dialog.add_paths([tmp_path / "notes.txt"])
    assert dialog.status.text() == ""


def test_a_map_build_is_cancelled_from_the_dialog_and_writes_nothing(
    qtbot, tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = threading.Event()

    def paused(*args, progress, cancel, **kwargs):  # the real build, held after its first file until cancelled
        def hold(*p: int) -> None:
            progress(*p)
            started.set()
            cancel.wait(10)
            time.sleep(0.5)  # a long chunk: the cancel is seen at the next one

        return build_map(*args, progress=hold, cancel=cancel, **kwargs)

    monkeypatch.setattr(ngram_map_dialog, "build_map", paused)
    dialog = NgramMapDialog(tiny.target)
    qtbot.addWidget(dialog)
    dialog.show()
    (tmp_path / "notes.txt").write_text("some notes\n" * 50, encoding="utf-8")
    dialog.add_paths([tmp_path / "notes.txt"])
    dialog.output.setText(str(tmp_path / "notes.npz"))
    dialog.build_button.click()
    qtbot.waitUntil(lambda: started.is_set() and "Counting n-grams" in dialog.status.text(), timeout=10_000)
    assert dialog.close_button.text() == "Cancel" and not dialog.build_button.isEnabled()
    assert not dialog.use_now.isEnabled() and not dialog.add_folder.isEnabled()  # as the build was started
    dialog.close_button.click()
    assert dialog.isVisible() and dialog.status.text() == "Stopping…"  # the dialog stays to say so
    qtbot.wait(250)
    assert dialog.status.text() == "Stopping…"  # the progress timer ticked, and did not write over it
    qtbot.waitUntil(lambda: "Cancelled" in dialog.status.text(), timeout=10_000)
    assert not (tmp_path / "notes.npz").exists() and dialog.close_button.text() == "Close"
    dialog.close_button.click()
    assert not dialog.isVisible()


def test_the_store_tells_every_view_and_saves_after_a_pause(qtbot, store: SettingsStore, tmp_path: Path) -> None:
    first, second = SettingsPanel(store), SettingsPanel(store)
    qtbot.addWidget(first)
    qtbot.addWidget(second)
    first.n_draft.setValue(9)
    assert second.n_draft.value() == 9  # one store, every view follows it
    assert not (tmp_path / "settings.json").exists()  # not on the GUI thread at every keystroke
    qtbot.waitUntil(lambda: (tmp_path / "settings.json").exists(), timeout=5_000)
    assert load_settings(tmp_path / "settings.json").n_draft == 9
    store.update(n_draft=10)
    store.flush()  # the window closes: the last change is written at once
    assert load_settings(tmp_path / "settings.json").n_draft == 10


def test_a_failed_save_is_reported(qtbot, tmp_path: Path) -> None:
    blocker_file = tmp_path / "not-a-folder"
    blocker_file.write_text("x")
    store = SettingsStore(Settings(), path=blocker_file / "settings.json")
    with qtbot.waitSignal(store.save_failed, timeout=5_000) as blocker:
        store.update(n_draft=5)
    assert "Could not save the settings" in blocker.args[0]


@pytest.mark.qt_log_ignore("This plugin does not support raise", "This plugin does not support grabbing the keyboard")
def test_the_mouse_wheel_scrolls_past_a_field_instead_of_changing_it(qtbot, store: SettingsStore) -> None:
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    panel.show()
    seed_before = panel.seed.value()
    for field in (panel.seed, panel.n_draft, panel.temperature, panel.strategy):
        before = store.settings
        wheel(field, 3)
        assert store.settings == before, field.accessibleName()
    assert panel.seed.value() == seed_before
    # Reached with Tab, a field keeps its value under the wheel too (a tour's Max tokens went from 512 to 506 as it
    # scrolled the panel).
    panel.max_tokens.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(panel.max_tokens.hasFocus, timeout=2_000)
    wheel(panel.max_tokens, 3)
    assert store.settings.max_tokens == Settings().max_tokens
    # A field the user clicked into takes the wheel, as expected.
    panel.n_draft.setFocus(Qt.FocusReason.MouseFocusReason)
    qtbot.waitUntil(panel.n_draft.hasFocus, timeout=2_000)
    wheel(panel.n_draft, 1)
    assert store.settings.n_draft != Settings().n_draft
    # A combo box clicked (its list opens and closes, taking the focus and giving it back) takes the wheel too.
    qtbot.mouseClick(panel.strategy, Qt.MouseButton.LeftButton)
    qtbot.wait(100)
    qtbot.keyClick(QApplication.focusWidget() or panel.strategy, Qt.Key.Key_Escape)
    qtbot.waitUntil(panel.strategy.hasFocus, timeout=2_000)
    before = store.settings.strategy
    wheel(panel.strategy, 1)
    assert store.settings.strategy != before


def test_seed_shows_random_at_its_default(qtbot, store: SettingsStore) -> None:
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    assert panel.seed.value() == -1 and panel.seed.text() == "random"


def test_sampling_fields_are_greyed_while_decoding_is_greedy(qtbot, store: SettingsStore) -> None:
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    sampling = [panel.top_k, panel.top_p, panel.min_p, panel.seed]
    panel.temperature.setValue(0)
    assert not any(w.isEnabled() for w in sampling)
    panel.temperature.setValue(0.7)
    assert all(w.isEnabled() for w in sampling) and store.settings.temperature == 0.7


def test_draft_settings_are_greyed_where_nothing_uses_them(qtbot, store: SettingsStore) -> None:
    """From the tour of 2026-12-06: with plain decoding chosen, the draft length, Adaptive and the draft
    confidence stayed editable, to no effect (the sampling fields were greyed at temperature 0)."""
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    drafting = [panel.n_draft, panel.adaptive, panel.n_draft_min]
    store.update(strategy="none")
    assert not any(w.isEnabled() for w in [*drafting, panel.p_min])
    store.update(strategy="lookup", draft_path="/d.gguf")  # draft-free: no draft model's confidence to weigh
    assert all(w.isEnabled() for w in drafting) and not panel.p_min.isEnabled()
    store.update(strategy="auto")
    assert panel.p_min.isEnabled()
    store.update(draft_path="")
    assert not panel.p_min.isEnabled()
    assert panel.map_needed.isHidden()
    store.update(strategy="ngram-map")  # and no map chosen: said by the field (a tour found it in the toolbar)
    assert not panel.map_needed.isHidden() and "Browse…" in panel.map_needed.text()
    store.update(ngram_map_path="/code.npz")
    assert panel.map_needed.isHidden()


def test_values_that_will_hurt_are_said_and_ranges_read_as_numbers(qtbot, store: SettingsStore, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """From the tour of 2026-12-06: 99 threads on 2 cores ran at a third of the speed, and a context as long as Max
    tokens was taken without a word; the context's tooltip read "(256 to 1.04858e+06)"."""
    import speculens.engine.backend

    monkeypatch.setattr(speculens.engine.backend, "usable_cpus", lambda: 2)
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    assert panel.advice.isHidden()
    panel.threads.setValue(99)
    assert not panel.advice.isHidden() and "99 threads on this machine's 2 CPU cores" in panel.advice.text()
    panel.threads.setValue(2)
    assert panel.advice.isHidden()
    panel.max_tokens.setValue(panel.n_ctx.value())
    assert "no longer than Max tokens" in panel.advice.text() and not panel.advice.isHidden()
    assert "e+" not in panel.n_ctx.toolTip() and "1,048,576" in panel.n_ctx.toolTip()


def test_gpu_layers_are_disabled_with_a_reason_on_a_cpu_build(qtbot, store: SettingsStore) -> None:
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    panel.set_gpu_backend(None)
    assert not panel.n_gpu_layers.isEnabled() and not panel.n_gpu_layers_draft.isEnabled()
    assert "CPU-only" in panel.gpu_note.text()
    # The greyed boxes say why when hovered (a tour read only "Target layers on the GPU (-1 = all) (-1 to 1,000)").
    tip = panel.n_gpu_layers.toolTip()
    assert tip.endswith(panel.gpu_note.text()) and "(-1 to 1,000)" in tip
    assert "CPU-only" in panel.n_gpu_layers_draft.toolTip()
    panel.set_gpu_backend("Metal")
    assert panel.n_gpu_layers.isEnabled() and "Metal" in panel.gpu_note.text()
    assert "CPU-only" not in panel.n_gpu_layers.toolTip() and panel.n_gpu_layers.toolTip().endswith("(-1 to 1,000)")
    # Every layer by default, as llama.cpp's tools: the box says so rather than showing -1.
    assert panel.n_gpu_layers.value() == panel.n_gpu_layers_draft.value() == -1
    assert panel.n_gpu_layers.text() == panel.n_gpu_layers_draft.text() == "all"
    panel.n_gpu_layers.setValue(20)
    assert panel.n_gpu_layers.text() == "20"


def test_changing_the_context_size_says_reload_and_reload_applies_it(qtbot, tiny) -> None:
    factory = FakeFactory()
    window = fake_window(qtbot, tiny, factory)
    panel = window.settings_panel
    assert panel.reload_note.isHidden()
    panel.n_ctx.setValue(8192)
    assert panel.reload_note.isVisible() or not panel.isVisible()
    assert not panel.reload_note.isHidden() and "context size" in panel.reload_note.text()
    assert "reload needed" in pair_line(window)  # the toolbar says so too
    with qtbot.waitSignal(window.worker.models_loaded, timeout=10_000):
        panel.reload_button.click()
    assert factory.last.config.n_ctx == 8192
    assert panel.reload_note.isHidden() and "reload needed" not in pair_line(window)


def test_a_narrow_dock_wraps_the_notes_instead_of_scrolling_sideways(qtbot, store: SettingsStore) -> None:
    """From a user tour: the CPU-only GPU note ran past the dock's edge behind a horizontal scrollbar."""
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    panel.set_gpu_backend(None)
    panel.resize(380, 700)
    panel.show()
    qtbot.waitExposed(panel)
    assert panel.scroll_area.widget().width() <= panel.scroll_area.viewport().width()
    note = panel.gpu_note
    assert "CPU-only" in note.text() and note.height() > note.fontMetrics().height() * 1.5  # wrapped


def test_flash_attention_is_chosen_in_the_loading_group_and_needs_a_reload(qtbot, store: SettingsStore) -> None:
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    store.set_loaded(store.settings)
    assert panel.flash_attn.currentText() == "Automatic (measured)"
    assert [panel.flash_attn.itemData(i) for i in range(panel.flash_attn.count())] == ["auto", "on", "off"]
    with qtbot.waitSignal(store.changed):
        panel.flash_attn.setCurrentIndex(panel.flash_attn.findData("off"))
    assert store.settings.flash_attn == "off"
    assert not panel.reload_note.isHidden() and "flash attention" in panel.reload_note.text().lower()


def test_the_flash_attention_choice_is_explained_in_the_panel_with_what_the_load_measured(
    qtbot, store: SettingsStore
) -> None:
    """From a user tour: what the choice does was only in a tooltip."""
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    assert "whichever this machine decodes faster" in panel.flash_note.text()
    with qtbot.waitSignal(store.changed):
        panel.flash_attn.setCurrentIndex(panel.flash_attn.findData("off"))
    assert panel.flash_note.text().startswith("Off for both models")
    panel.set_flash_measured("off (forced)")
    assert panel.flash_note.text().endswith("Loaded: off (forced).")
    with qtbot.waitSignal(store.changed):
        panel.exact.setChecked(True)
    assert panel.flash_note.text().startswith("Always on with bit-exact verification")
    panel.set_flash_measured("")
    assert "Loaded" not in panel.flash_note.text()


def test_the_strategy_box_shows_its_whole_name_and_explains_the_one_shown(qtbot, store: SettingsStore) -> None:
    """From a new-user tour: the automatic strategy's long name was cut in the dock ("Automatic (looku…"), it left
    out the n-gram map it also drafts from, and the closed box's tooltip never said what the shown strategy does."""
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitExposed(panel)
    box = panel.strategy
    box.setCurrentIndex(box.findData("auto"))
    width = box.fontMetrics().horizontalAdvance(box.currentText())
    assert width < box.width() - 30  # room for the frame and the arrow: shown whole
    assert "n-gram map" in box.toolTip() and box.toolTip().startswith(SPECS["strategy"].tip)
    box.setCurrentIndex(box.findData("lookup"))
    assert "Prompt lookup: Copies continuations" in box.toolTip()


def test_tab_leaves_the_system_prompt(qtbot, store: SettingsStore) -> None:
    """From a keyboard-only tour: Tab typed tab characters into the system prompt (saved as "\\t\\t\\t\\t"), and the
    fields after it were out of the keyboard's reach."""
    panel = SettingsPanel(store)
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitExposed(panel)
    panel.activateWindow()
    panel.system_prompt.setFocus()
    qtbot.waitUntil(panel.system_prompt.hasFocus)
    qtbot.keyClick(panel.system_prompt, Qt.Key.Key_Tab)
    assert not panel.system_prompt.hasFocus() and panel.system_prompt.toPlainText() == ""


def test_a_map_of_several_files_is_named_after_their_folder(qtbot, tiny, tmp_path: Path) -> None:
    """A tour's map of four engine files was offered as "generate.npz", the first file's name, as if of one file."""
    from speculens.ui.ngram_map_dialog import NgramMapDialog

    dialog = NgramMapDialog(tiny.target)
    qtbot.addWidget(dialog)
    code = tmp_path / "engine"
    code.mkdir()
    dialog.add_paths([code / "generate.py"])
    assert Path(dialog.output.text()).name == "generate.npz"  # one file: its name
    dialog.add_paths([code / "session.py", code / "adaptive.py"])
    assert Path(dialog.output.text()).name == "engine.npz"  # several: the folder they share
    dialog.corpus.clear()
    (tmp_path / "v1.2").mkdir()
    dialog.add_paths([tmp_path / "v1.2"])  # a folder keeps its whole name (a review's)
    assert Path(dialog.output.text()).name == "v1.2.npz"


@pytest.mark.qt_log_ignore("This plugin does not support (raise|propagateSizeHints)")  # the tooltip, shown
def test_a_number_clamped_when_tab_ends_the_typing_is_said_in_the_status_bar(qtbot, tiny) -> None:
    """From a tour: 100 typed in Draft tokens and Tab pressed became 64 with no word seen: Tab's key coming up hid the
    tooltip that said so. The window's status bar keeps the sentence."""
    from gui_support import make_window

    window = make_window(qtbot, tiny, load=False)
    field = window.settings_panel.n_draft
    window.docks["Settings"].raise_()
    qtbot.waitUntil(field.isVisible, timeout=5_000)
    field.setFocus()
    qtbot.waitUntil(field.hasFocus, timeout=5_000)
    field.selectAll()
    qtbot.keyClicks(field, "100")
    qtbot.keyClick(field, Qt.Key.Key_Tab)
    assert not field.hasFocus() and field.value() == field.maximum()
    said = f"From 1 to {field.maximum()}: 100 is set to {field.maximum()}."
    assert window.statusBar().currentMessage() == said
    qtbot.waitUntil(lambda: QToolTip.isVisible() and QToolTip.text() == said, timeout=2_000)  # shown again
