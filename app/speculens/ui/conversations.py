"""Saved chat conversations: one JSON file each under :func:`speculens.paths.conversations_dir`.

Qt-free, so it can be tested and reused without a display. Every save is atomic (temporary file, then
``os.replace``); the chat pane saves after each turn and, while an answer streams, at most once a second
with the partial answer marked as such, so a killed app loses at most a second of text.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from speculens import paths
from speculens.settings import write_json_atomic

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


@dataclass
class Conversation:
    """One chat.

    Args:
        id: a unique id (also the file name).
        title: shown in the list; taken from the first user message.
        created: creation time (seconds since the epoch).
        updated: last change.
        messages: role/content dicts, system message included.
        pair: the models it was held with, for the record.
        partial: an answer that was still streaming when the file was written (``None`` when complete).
    """

    id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])
    title: str = "New chat"
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    messages: list[dict[str, str]] = field(default_factory=list)
    pair: str = ""
    partial: str | None = None

    @property
    def path(self) -> Path:
        """The file it is saved to."""
        return paths.conversations_dir() / f"{self.id}.json"

    def set_title_from(self, text: str) -> None:
        """Use the start of the first user message as the title."""
        if self.title == "New chat":
            line = " ".join(text.split())
            self.title = line[:60] + ("…" if len(line) > 60 else "")

    def save(self) -> None:
        """Write the file atomically (errors are logged, never raised: chatting must go on)."""
        self.updated = time.time()
        data = {
            "schema_version": SCHEMA_VERSION,
            "id": self.id,
            "title": self.title,
            "created": self.created,
            "updated": self.updated,
            "pair": self.pair,
            "messages": self.messages,
            "partial": self.partial,
        }
        try:
            write_json_atomic(self.path, data)
        except OSError:
            log.exception("could not save the conversation to %s", self.path)

    @classmethod
    def load(cls, path: Path) -> Conversation:
        """Read one conversation.

        Raises:
            ValueError: the file is not a conversation.
            OSError: it cannot be read.
        """
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            raise ValueError(f"{path.name} is not a saved conversation")
        messages = [
            {"role": str(m["role"]), "content": str(m["content"])}
            for m in data["messages"]
            if isinstance(m, dict) and "role" in m and "content" in m
        ]
        partial = data.get("partial")
        return cls(
            id=str(data.get("id") or path.stem),
            title=str(data.get("title") or "Untitled"),
            created=float(data.get("created") or 0.0),
            updated=float(data.get("updated") or 0.0),
            messages=messages,
            pair=str(data.get("pair") or ""),
            partial=partial if isinstance(partial, str) else None,
        )


def list_conversations() -> list[Conversation]:
    """Every readable saved conversation, most recently updated first (unreadable files are skipped)."""
    folder = paths.conversations_dir()
    if not folder.is_dir():
        return []
    found = []
    for path in folder.glob("*.json"):
        try:
            found.append(Conversation.load(path))
        except (OSError, ValueError, TypeError) as exc:
            log.warning("skipping %s: %s", path.name, exc)
    return sorted(found, key=lambda c: c.updated, reverse=True)


def delete_conversation(conversation: Conversation) -> None:
    """Remove a conversation's file."""
    conversation.path.unlink(missing_ok=True)
