"""The one place the settings live in the GUI, and the settings the models were actually loaded with.

Views read :attr:`SettingsStore.settings` and subscribe to :attr:`SettingsStore.changed`; they change
settings only through :meth:`SettingsStore.update`. The store saves every change atomically, after a short
pause and on a background thread (never on the GUI thread while an answer streams), and :meth:`flush`
writes the last change before the window closes. The worker carries the settings it loaded back with each
load (:class:`~speculens.ui.worker.LoadResult`); the store keeps them as :attr:`loaded`, so "these changes
need a reload" is one comparison, everywhere.
"""

from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from speculens.settings import Settings, save_settings

log = logging.getLogger(__name__)

SAVE_DELAY_MS = 300


class SettingsStore(QObject):
    """The current settings, the loaded ones, and saving.

    Args:
        settings: the settings to start with.
        path: where to save them (default: the settings file; ``None`` with ``autosave=False`` never saves).
        autosave: save changes (tests and the self-test may not).
        parent: the Qt parent.

    Signals:
        changed(Settings): the settings changed (a copy).
        loaded_changed(object): models were loaded with these settings (a copy), or unloaded (None).
        save_failed(str): a save failed; the message is for the user.
    """

    changed = Signal(object)
    loaded_changed = Signal(object)
    save_failed = Signal(str)

    def __init__(
        self,
        settings: Settings,
        path: Path | None = None,
        autosave: bool = True,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._settings = dataclasses.replace(settings)
        self._loaded: Settings | None = None
        self._path = path
        self._autosave = autosave
        self._saved = dataclasses.replace(settings)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="speculens-settings")
        self._pending: Future[object] | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(SAVE_DELAY_MS)
        self._timer.timeout.connect(self._on_timer_timeout)

    @property
    def settings(self) -> Settings:
        """A copy of the current settings."""
        return dataclasses.replace(self._settings)

    @property
    def loaded(self) -> Settings | None:
        """A copy of the settings the loaded models were loaded with (``None``: nothing loaded)."""
        return dataclasses.replace(self._loaded) if self._loaded is not None else None

    def update(self, **changes: object) -> None:
        """Change some fields (validated: an out-of-range value falls back to its default) and tell everyone.

        Raises:
            TypeError: a field name that does not exist.
        """
        new = dataclasses.replace(self._settings, **changes).validated()  # type: ignore[arg-type]
        if new == self._settings:
            return
        self._settings = new
        if self._autosave:
            self._timer.start()
        self.changed.emit(self.settings)

    def set_loaded(self, settings: Settings | None) -> None:
        """Record what the models were loaded with (``None`` after an unload), validated as the settings are: the
        demo pair loads from the paths it was built at, and the settings keep them resolved, so through a linked
        folder a tour read "reload needed" right after the load, and its first message loaded both again."""
        self._loaded = settings.validated() if settings is not None else None
        self.loaded_changed.emit(self.loaded)

    def reload_needed(self) -> set[str]:
        """The changed fields that only take effect once the models are loaded again (none when unloaded)."""
        return self._settings.needs_reload(self._loaded) if self._loaded is not None else set()

    def reload_frees_draft_only(self) -> bool:
        """Whether all a reload would do is unload a draft model the chosen strategy no longer uses: answers go
        on without it (see :meth:`Settings.needs_reload_to_answer`), and a reload only frees its memory."""
        if self._loaded is None:
            return False
        return bool(self.reload_needed()) and not self._settings.needs_reload_to_answer(self._loaded)

    def flush(self) -> None:
        """Write any unsaved change now and wait for it (the window is closing)."""
        self._timer.stop()
        if self._pending is not None:  # first the save under way, so an older one cannot land last
            self._pending.result()
        if self._autosave and self._settings != self._saved:
            self._save(self.settings)
        self._executor.shutdown(wait=True)

    def _on_timer_timeout(self) -> None:
        settings = self.settings
        self._pending = self._executor.submit(self._save, settings)

    def _save(self, settings: Settings) -> None:
        try:
            save_settings(settings, self._path)
            self._saved = settings
        except OSError as exc:
            log.warning("could not save the settings: %s", exc)
            self.save_failed.emit(f"Could not save the settings: {exc.strerror or exc}")
