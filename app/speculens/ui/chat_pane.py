"""The chat: transcript with Markdown rendering, the message box, and the saved-conversation list.

The pane never touches the models: it asks the :class:`~speculens.ui.worker.EngineWorker` for a turn and
receives the turn's events from the main window's drain timer. The streaming answer is appended as plain
text (cheap, incremental); when the turn ends the transcript is rendered once as Markdown.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QKeyEvent, QTextCursor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from speculens.settings import Settings
from speculens.ui.conversations import Conversation, list_conversations
from speculens.ui.worker import LANE_CHAT, EngineWorker, TaggedEvent

if TYPE_CHECKING:
    from speculens.engine.events import FinishEvent

AUTOSAVE_INTERVAL_S = 1.0


class MessageEdit(QPlainTextEdit):
    """The message box: Enter sends, Shift+Enter starts a new line.

    Signals:
        submitted(): Enter was pressed.
    """

    submitted = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        """Send on Enter unless Shift (or an input method composing text) is involved."""
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
            event.modifiers() & Qt.KeyboardModifier.ShiftModifier
        ):
            self.submitted.emit()
            return
        super().keyPressEvent(event)


def render_markdown(messages: Sequence[dict[str, str]], streaming: str | None = None) -> str:
    """The conversation as one Markdown document (system messages are left out).

    Args:
        messages: role/content dicts.
        streaming: an answer still being generated, shown last.
    """
    parts = []
    for message in messages:
        role = message["role"]
        if role == "system":
            continue
        heading = "You" if role == "user" else "Assistant"
        parts.append(f"#### {heading}\n\n{message['content']}\n")
    if streaming is not None:
        parts.append(f"#### Assistant\n\n{streaming}\n")
    return "\n---\n\n".join(parts)


class ChatPane(QWidget):
    """A multi-turn chat over the worker.

    Args:
        worker: the engine worker.
        settings: returns the current settings when a turn starts.
        parent: the Qt parent.

    Signals:
        turn_started(int): a chat turn was queued (its request id).
        turn_finished(object): the turn's FinishEvent.
        compare_requested(list, str): Compare was pressed: (history, message).
        conversation_saved(): the conversation file was written (the list may refresh).
        status_changed(str): a message for the status bar.
    """

    turn_started = Signal(int)
    turn_finished = Signal(object)
    compare_requested = Signal(list, str)
    conversation_saved = Signal()
    status_changed = Signal(str)

    def __init__(
        self, worker: EngineWorker, settings: Callable[[], Settings], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.worker = worker
        self._settings = settings
        self.conversation = Conversation()
        self.request_id: int | None = None
        self._pending_user: str | None = None
        self._stream = ""
        self._last_save = 0.0
        self._stream_start = 0

        self.transcript = QTextBrowser(self)
        self.transcript.setOpenExternalLinks(True)
        self.transcript.setAccessibleName("Conversation")
        self.transcript.setPlaceholderText("Load a model pair, type a message and press Enter.")
        self.input = MessageEdit(self)
        self.input.setAccessibleName("Message")
        self.input.setPlaceholderText("Message — Enter sends, Shift+Enter for a new line")
        self.input.setMaximumHeight(110)
        self.input.submitted.connect(self._on_input_submitted)

        self.send_button = self._button("Send", "Send the message (Enter, Ctrl+Return)", self.send)
        self.stop_button = self._button("Stop", "Stop generating (Esc)", self.stop)
        self.regenerate_button = self._button("Regenerate", "Generate the last answer again", self.regenerate)
        self.edit_button = self._button(
            "Edit last", "Put the last message back in the box to edit and resend it", self.edit_last
        )
        self.copy_button = self._button(
            "Copy answer", "Copy the last answer to the clipboard", self.copy_answer
        )
        self.compare_button = self._button(
            "Compare", "Run the message with plain decoding and with speculation, side by side", self.compare
        )
        self.clear_button = self._button("New chat", "Start a new conversation (Ctrl+N)", self.new_chat)
        self.stop_button.setEnabled(False)

        buttons = QHBoxLayout()
        for button in (self.regenerate_button, self.edit_button, self.copy_button, self.clear_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(self.compare_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.send_button)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.transcript, 1)
        layout.addWidget(self.input)
        layout.addLayout(buttons)

        # The main window forwards the worker's finish and failure signals (finish_turn, fail_turn) after
        # it has drained the last events, so the live panel is complete when turn_finished is emitted.
        self._update_buttons()

    def _button(self, text: str, tip: str, slot: Callable[[], None]) -> QPushButton:
        button = QPushButton(text, self)
        button.setToolTip(tip)
        button.setAccessibleName(text)
        button.clicked.connect(slot)
        return button

    @property
    def busy(self) -> bool:
        """Whether a turn is running."""
        return self.request_id is not None

    # ---- actions ------------------------------------------------------------------------------------

    def send(self) -> None:
        """Send the message box's text as the next turn."""
        text = self.input.toPlainText().strip()
        if not text or self.busy:
            return
        self.input.clear()
        self._start_turn(self._history(), text)

    def stop(self) -> None:
        """Cancel the running turn (it stops within one speculation step)."""
        if self.busy:
            self.worker.cancel()
            self.status_changed.emit("Stopping…")

    def regenerate(self) -> None:
        """Drop the last answer and generate it again."""
        messages = self.conversation.messages
        if self.busy or not messages:
            return
        if messages[-1]["role"] == "assistant":
            messages.pop()
        if not messages or messages[-1]["role"] != "user":
            return
        user = messages.pop()["content"]
        self._start_turn(self._history(), user)

    def edit_last(self) -> None:
        """Take the last user message (and its answer) out of the chat and into the message box."""
        messages = self.conversation.messages
        if self.busy:
            return
        while messages and messages[-1]["role"] == "assistant":
            messages.pop()
        if not messages or messages[-1]["role"] != "user":
            return
        self.input.setPlainText(messages.pop()["content"])
        self.input.moveCursor(QTextCursor.MoveOperation.End)
        self.input.setFocus()
        self.conversation.save()
        self._render()

    def copy_answer(self) -> None:
        """Copy the last answer's text."""
        for message in reversed(self.conversation.messages):
            if message["role"] == "assistant":
                QGuiApplication.clipboard().setText(message["content"])
                self.status_changed.emit("Answer copied.")
                return

    def compare(self) -> None:
        """Ask the main window to compare plain and speculative decoding on the message."""
        text = self.input.toPlainText().strip()
        if not text and self.conversation.messages and self.conversation.messages[-1]["role"] == "user":
            text = self.conversation.messages[-1]["content"]
        if not text:
            self.status_changed.emit("Type a message to compare.")
            return
        self.compare_requested.emit(self._history(), text)

    def new_chat(self) -> None:
        """Start a new conversation (the old one stays saved)."""
        if self.busy:
            self.stop()
        self.open_conversation(Conversation())

    def open_conversation(self, conversation: Conversation) -> None:
        """Show a saved conversation; a partial answer saved by a killed app is kept as the last answer."""
        if self.busy:
            return
        if conversation.partial:
            conversation.messages.append({"role": "assistant", "content": conversation.partial})
            conversation.partial = None
        self.conversation = conversation
        self._render()
        self._update_buttons()

    # ---- turn lifecycle -----------------------------------------------------------------------------

    def _history(self) -> list[dict[str, str]]:
        settings = self._settings()
        messages = [m for m in self.conversation.messages if m["role"] != "system"]
        if settings.system_prompt.strip():
            messages.insert(0, {"role": "system", "content": settings.system_prompt.strip()})
        return messages

    def _start_turn(self, history: list[dict[str, str]], text: str) -> None:
        if not self.worker.is_loaded:
            self.status_changed.emit("Load a model pair first (toolbar ▸ Load).")
        self.conversation.set_title_from(text)
        self.conversation.messages = [m for m in history if m["role"] != "system"]
        self.conversation.messages.append({"role": "user", "content": text})
        self._pending_user = text
        self._stream = ""
        self.conversation.partial = ""
        self.conversation.save()
        self.conversation_saved.emit()
        self._render(streaming="")
        self.request_id = self.worker.chat(history, text, self._settings())
        self._update_buttons()
        self.turn_started.emit(self.request_id)

    def add_events(self, events: Sequence[TaggedEvent]) -> None:
        """Append the streaming text of this pane's turn (called by the main window's drain timer)."""
        from speculens.engine.events import StepEvent

        chunk = "".join(
            t.event.text
            for t in events
            if t.request_id == self.request_id and t.lane == LANE_CHAT and isinstance(t.event, StepEvent)
        )
        if not chunk:
            return
        self._stream += chunk
        cursor = QTextCursor(self.transcript.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        scrollbar = self.transcript.verticalScrollBar()
        follow = scrollbar.value() >= scrollbar.maximum() - 4
        cursor.insertText(chunk)
        if follow:
            scrollbar.setValue(scrollbar.maximum())
        now = time.monotonic()
        if now - self._last_save >= AUTOSAVE_INTERVAL_S:
            self._last_save = now
            self.conversation.partial = self._stream
            self.conversation.save()

    def save_now(self) -> None:
        """Write the conversation, with the streamed part of a running answer (the window is closing)."""
        if not self.conversation.messages:
            return
        self.conversation.partial = self._stream if self.busy else None
        self.conversation.save()

    def finish_turn(self, request_id: int, lane: str, finish: FinishEvent) -> None:
        """End this pane's turn with the worker's final event (other requests are ignored)."""
        if request_id != self.request_id or lane != LANE_CHAT:
            return
        self.request_id = None
        # FinishEvent.text is authoritative: step chunks may hold back a possible stop-string tail.
        self.conversation.messages.append({"role": "assistant", "content": finish.text})
        self.conversation.partial = None
        self.conversation.save()
        self.conversation_saved.emit()
        self._render()
        self._update_buttons()
        self.turn_finished.emit(finish)
        reason = finish.reason.value
        self.status_changed.emit("Stopped." if reason == "cancelled" else f"Answer finished ({reason}).")

    def fail_turn(self, request_id: int, message: str) -> None:
        """End this pane's turn after an error, giving the message back to the message box."""
        if request_id != self.request_id:
            return
        self.request_id = None
        # Give the message back so nothing the user typed is lost.
        if self.conversation.messages and self.conversation.messages[-1]["role"] == "user":
            self.input.setPlainText(self.conversation.messages.pop()["content"])
        self.conversation.partial = None
        self.conversation.save()
        self._render()
        self._update_buttons()
        self.status_changed.emit(message)

    def _on_input_submitted(self) -> None:
        self.send()

    def _render(self, streaming: str | None = None) -> None:
        self.transcript.setMarkdown(render_markdown(self.conversation.messages, streaming))
        self.transcript.moveCursor(QTextCursor.MoveOperation.End)
        self.transcript.verticalScrollBar().setValue(self.transcript.verticalScrollBar().maximum())

    def _update_buttons(self) -> None:
        busy = self.busy
        has_answer = any(m["role"] == "assistant" for m in self.conversation.messages)
        self.send_button.setEnabled(not busy)
        self.stop_button.setEnabled(busy)
        self.compare_button.setEnabled(not busy)
        self.regenerate_button.setEnabled(not busy and bool(self.conversation.messages))
        self.edit_button.setEnabled(not busy and bool(self.conversation.messages))
        self.copy_button.setEnabled(has_answer)


class ConversationList(QWidget):
    """Saved conversations, newest first; activating one opens it.

    Args:
        parent: the Qt parent.

    Signals:
        conversation_activated(Conversation): the user picked one.
    """

    conversation_activated = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.list = QListWidget(self)
        self.list.setAccessibleName("Saved conversations")
        self.list.itemActivated.connect(self._on_list_item_activated)
        self.list.itemClicked.connect(self._on_list_item_activated)
        hint = QLabel("Saved automatically. Click one to reopen it.", self)
        hint.setWordWrap(True)
        hint.setEnabled(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.list)
        layout.addWidget(hint)
        # Saves come in bursts while streaming; refresh the list at most twice a second.
        self._refresh_timer = QTimer(self)
        self._refresh_timer.setSingleShot(True)
        self._refresh_timer.setInterval(500)
        self._refresh_timer.timeout.connect(self.refresh)

    def schedule_refresh(self) -> None:
        """Refresh soon (coalescing bursts)."""
        if not self._refresh_timer.isActive():
            self._refresh_timer.start()

    def refresh(self) -> None:
        """Re-read the conversation folder."""
        self.list.clear()
        for conversation in list_conversations():
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(conversation.updated))
            item = QListWidgetItem(f"{conversation.title}\n{when}")
            item.setData(Qt.ItemDataRole.UserRole, conversation)
            item.setToolTip(conversation.pair or conversation.title)
            self.list.addItem(item)

    def _on_list_item_activated(self, item: QListWidgetItem) -> None:
        conversation = item.data(Qt.ItemDataRole.UserRole)
        if isinstance(conversation, Conversation):
            # Re-read it: the list entry may be older than the file.
            try:
                conversation = Conversation.load(conversation.path)
            except (OSError, ValueError):
                return
            self.conversation_activated.emit(conversation)
