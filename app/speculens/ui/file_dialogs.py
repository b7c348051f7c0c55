"""File dialogs that open in the folder the user last chose for the same kind of file.

A tour found every dialog opening in the home folder (or in the process's working directory), so each export
and each model import began with the same walk through the folders. The last folder of each kind — exports,
models, corpus text — is kept in ``window.ini`` beside the window's layout, so it survives a restart; a folder
that has since gone falls back to the home folder.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QFileDialog, QWidget

from speculens import paths


class Kind(StrEnum):
    """What a dialog chooses: each kind remembers its own folder."""

    EXPORTS = "exports"  # transcripts, step events, charts, pair-lab results
    MODELS = "models"  # GGUF files and folders of them
    CORPUS = "corpus"  # text for an n-gram map


def window_state() -> QSettings:
    """The window's own settings (layout, open conversation, last folders): not the user's Settings."""
    return QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat)


def last_folder(kind: Kind) -> Path:
    """Where the last dialog of this kind went, or the home folder."""
    value = window_state().value(f"folders/{kind}")
    folder = Path(value) if isinstance(value, str) and value else None
    return folder if folder is not None and folder.is_dir() else Path.home()


def remember(kind: Kind, chosen: Path) -> None:
    """Open the next dialog of this kind where ``chosen`` (a file or a folder) is."""
    folder = chosen if chosen.is_dir() else chosen.parent
    store = window_state()
    store.setValue(f"folders/{kind}", str(folder))
    store.sync()


def save_file(parent: QWidget, kind: Kind, title: str, name: str, pattern: str) -> Path | None:
    """Ask where to save a file named ``name`` by default; ``None`` when cancelled. A name typed without a suffix
    gets ``name``'s."""
    path, _ = QFileDialog.getSaveFileName(parent, title, str(last_folder(kind) / name), pattern)
    if not path:
        return None
    out = Path(path)
    if not out.suffix:
        out = out.with_suffix(Path(name).suffix)
    remember(kind, out)
    return out


def open_file(parent: QWidget, kind: Kind, title: str, pattern: str) -> Path | None:
    """Ask for an existing file; ``None`` when cancelled."""
    path, _ = QFileDialog.getOpenFileName(parent, title, str(last_folder(kind)), pattern)
    if not path:
        return None
    remember(kind, Path(path))
    return Path(path)


def open_files(parent: QWidget, kind: Kind, title: str, pattern: str = "") -> list[Path]:
    """Ask for existing files (none when cancelled)."""
    files, _ = QFileDialog.getOpenFileNames(parent, title, str(last_folder(kind)), pattern)
    if files:
        remember(kind, Path(files[0]))
    return [Path(f) for f in files]


def open_folder(parent: QWidget, kind: Kind, title: str) -> Path | None:
    """Ask for a folder; ``None`` when cancelled."""
    folder = QFileDialog.getExistingDirectory(parent, title, str(last_folder(kind)))
    if not folder:
        return None
    remember(kind, Path(folder))
    return Path(folder)
