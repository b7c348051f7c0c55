"""Saved chat conversations: one JSON file each under :func:`speculens.paths.conversations_dir`.

Qt-free, so it can be tested and reused without a display. The :class:`ConversationStore` reads the folder
once, keeps every conversation in memory, and writes each change atomically on its own background thread,
so neither streaming an answer nor listing the conversations ever touches the disk on the GUI thread. While
an answer streams, the chat saves at most once a second with the partial answer marked as such, so a killed
app loses at most a second of text.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from speculens import paths
from speculens.atomic import write_bytes_atomic, write_json_atomic
from speculens.engine.events import Event, FinishEvent, event_from_dict, event_to_dict

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
UNTITLED = "New chat"


@dataclass
class Conversation:
    """One chat.

    Args:
        id: a unique id (also the file name).
        title: shown in the list; taken from the first user message until the user renames it.
        created: creation time (seconds since the epoch).
        updated: last change.
        messages: role/content dicts (no system message: that comes from the settings); an answer cut short has
            a ``note`` too ("stopped"), for the reader, never sent to the model; a turn left out to fit the context
            is marked ``dropped``: kept for the reader, no longer sent.
        pair: the models it was held with, for the record.
        partial: an answer that was still streaming when the file was written (``None`` when complete).
        renamed: the user chose the title.
        replacing: the answer a running Regenerate took out (``None`` otherwise). Until the new one ends, the file
            keeps it in its place and no partial answer: a crash or a kill meanwhile leaves the conversation as it
            was, as a quit does (a tour's quit found a whole answer gone for a fragment; a kill still lost it).
    """

    id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])
    title: str = UNTITLED
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    messages: list[dict[str, str]] = field(default_factory=list)
    pair: str = ""
    partial: str | None = None
    renamed: bool = False
    replacing: dict[str, str] | None = field(default=None, compare=False, repr=False)

    def file(self, folder: Path) -> Path:
        """The file it is saved to in ``folder``."""
        return folder / f"{self.id}.json"

    def set_title_from(self, text: str) -> None:
        """Use the start of the first user message as the title (unless the user named it)."""
        if not self.renamed and self.title == UNTITLED:
            # Without Markdown's code fences: a tour's pasted modules were all titled "Here is a module: ```python
            # def transform_1(rec…".
            line = " ".join(re.sub(r"(?:```|~~~)[\w+-]*", " ", text).split())
            if line:  # a message of fences alone leaves the title to the next one
                self.title = line[:60] + ("…" if len(line) > 60 else "")

    def to_dict(self) -> dict[str, object]:
        """The JSON document."""
        return {
            "schema_version": SCHEMA_VERSION,
            "id": self.id,
            "title": self.title,
            "created": self.created,
            "updated": self.updated,
            "pair": self.pair,
            # Copies: the document is written on another thread while the chat goes on.
            "messages": [dict(m) for m in [*self.messages, *([self.replacing] if self.replacing else [])]],
            "partial": self.partial if self.replacing is None else None,
            "renamed": self.renamed,
        }

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
            | {key: str(m[key]) for key in ("note", "dropped") if m.get(key)}
            for m in data["messages"]
            if isinstance(m, dict) and "role" in m and "content" in m and m["role"] != "system"
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
            renamed=bool(data.get("renamed", False)),
        )


class ConversationStore:
    """Every saved conversation, in memory, with saving and deleting on a background thread.

    Args:
        folder: where the files live (default: :func:`speculens.paths.conversations_dir`).
        on_change: called (on the caller's thread) after every change, so a list can redraw.
    """

    def __init__(self, folder: Path | None = None, on_change: Callable[[], None] | None = None) -> None:
        self.folder = folder or paths.conversations_dir()
        self.on_change = on_change
        self._by_id: dict[str, Conversation] = {}
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="speculens-conversations")
        self._read_folder()

    def _read_folder(self) -> None:
        if not self.folder.is_dir():
            return
        for path in self.folder.glob("*.json"):
            try:
                conversation = Conversation.load(path)
            except (OSError, ValueError, TypeError) as exc:
                log.warning("skipping %s: %s", path.name, exc)
                continue
            self._by_id[conversation.id] = conversation

    def conversations(self) -> list[Conversation]:
        """Every saved conversation, most recently updated first."""
        return sorted(self._by_id.values(), key=lambda c: c.updated, reverse=True)

    def get(self, conversation_id: str) -> Conversation | None:
        """A conversation by id."""
        return self._by_id.get(conversation_id)

    def save(self, conversation: Conversation, touched: bool = True) -> None:
        """Keep a conversation and write it (in the background). An empty one is not kept.

        Args:
            conversation: the conversation.
            touched: its messages changed, so it moves to the top of the list (a new title is no new activity).
        """
        if not conversation.messages and conversation.partial is None:
            return
        if touched:
            conversation.updated = time.time()
        self._by_id[conversation.id] = conversation
        self._executor.submit(self._write, conversation.file(self.folder), conversation.to_dict())
        self._changed()

    def rename(self, conversation: Conversation, title: str) -> None:
        """Give a conversation the user's title; a blank one names it after its first message again."""
        title = " ".join(title.split())
        conversation.renamed = bool(title)
        conversation.title = title or UNTITLED
        for message in conversation.messages if not title else ():  # the first that gives a title (not fences)
            if message["role"] == "user":
                conversation.set_title_from(message["content"])
                if conversation.title != UNTITLED:
                    break
        self.save(conversation, touched=False)  # it keeps its date and its place in the list

    def delete(self, conversation: Conversation) -> None:
        """Forget a conversation and remove its file and its answer's events (in the background)."""
        self._by_id.pop(conversation.id, None)
        for path in (conversation.file(self.folder), self._answer_file(conversation)):
            self._executor.submit(path.unlink, missing_ok=True)
        self._changed()

    def _answer_file(self, conversation: Conversation) -> Path:
        return conversation.file(self.folder / "answers")

    def save_answer(self, conversation: Conversation, events: Sequence[Event]) -> None:
        """Keep the events of the conversation's last answer, in place of those kept before (in the background), so
        that its tokens, charts and figures are shown again when it is opened (a tour found them gone)."""
        data = json.dumps([event_to_dict(e, exact=True) for e in events]).encode("utf-8")
        self._executor.submit(self._write_answer, self._answer_file(conversation), data)

    def answer(self, conversation: Conversation) -> list[Event]:
        """The events kept for the conversation's last answer, if they are still its (an answer regenerated or
        edited away since has none); an unreadable file is left alone."""
        self.flush()  # an answer just finished is still being written (a code review: opened at once, it had none)
        try:
            data = json.loads(self._answer_file(conversation).read_text(encoding="utf-8"))
            events = [event_from_dict(d) for d in data]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("not showing the last answer's tokens of %s: %s", conversation.id, exc)
            return []
        last = conversation.messages[-1] if conversation.messages else None
        finish = events[-1] if events else None
        if last is None or last["role"] != "assistant" or not isinstance(finish, FinishEvent):
            return []
        return events if last["content"] == finish.text else []

    def _write_answer(self, path: Path, data: bytes) -> None:
        try:
            write_bytes_atomic(path, data)
        except OSError:
            log.exception("could not keep the answer's events in %s", path)

    def flush(self) -> None:
        """Wait for the pending writes (the window is closing, or an answer is read back)."""
        with contextlib.suppress(RuntimeError):  # closed: nothing is pending
            self._executor.submit(lambda: None).result()

    def close(self) -> None:
        """Finish the pending writes and stop the writer."""
        self._executor.shutdown(wait=True)

    def _write(self, path: Path, data: dict[str, object]) -> None:
        with self._lock:
            try:
                write_json_atomic(path, data)
            except OSError:
                log.exception("could not save the conversation to %s", path)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()
