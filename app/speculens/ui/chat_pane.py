"""The chat: the transcript, the message box, and the saved-conversation list.

Each message is rendered on its own — the user's as plain text with its line breaks, the assistant's as
Markdown with any code fence it left open closed — so nothing in one message (an answer cut off inside a
code block) can leak into the next. A streaming answer is rendered as Markdown as it grows (a few times a
second at most, and never for more than a small share of the time: the GUI thread shares the CPU with the
model), with the text that arrives in between appended as it comes.

The pane never touches the models: a turn is a :class:`_Turn` record sink that the
:class:`~speculens.ui.generations.GenerationRouter` feeds, bound to the conversation it was asked for. So
"New chat" mid-answer switches at once, and the answer that was stopped still lands, partial, in the
conversation it belongs to.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Callable, Sequence

from PySide6.QtCore import QPoint, Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor,
    QGuiApplication,
    QKeyEvent,
    QKeySequence,
    QShortcut,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from speculens.engine.config import ContextFullError
from speculens.engine.events import Event, FinishEvent, FinishReason, StartEvent, StepEvent, draft_model_unread
from speculens.engine.suite import load_suite
from speculens.engine.threads import ThreadTally
from speculens.settings import generation_config
from speculens.ui.conversations import UNTITLED, Conversation, ConversationStore
from speculens.ui.generations import GenerationRouter, RecordSink
from speculens.ui.labels import LinksLabel, WrapRow
from speculens.ui.settings_store import SettingsStore
from speculens.ui.token_view import drafts_phrase
from speculens.ui.worker import Record, RecordKind
from speculens.words import upper_first

AUTOSAVE_INTERVAL_S = 1.0
STREAM_RENDER_S = 0.3  # the shortest interval between two Markdown renders of a streaming answer
STREAM_RENDER_SHARE = 0.02  # ... and at most this share of the time spent rendering it
FENCE = "```"
# An empty conversation offers these prompts of the benchmark suite (a tour's first question answered with no draft
# at all: on a CPU the draft model sits out, and a question gives prompt lookup nothing to copy). Its id, its link's
# words, and what the answer will show.
EXAMPLES = (
    ("rewrite-rename", "a rename in a class", "the answer copies the code, so prompt lookup drafts it for free"),
    # Not "which only a draft model can guess": on a CPU where it cannot pay it sits out, and a tour took the promise
    # for a fault. The live panel says which it was.
    ("chat", "a question", "new text: nothing to copy, so only a draft model could draft it, where it pays"),
)


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


def in_code_block(text: str) -> bool:
    """Whether ``text`` ends inside a code block (it opened a fence it has not closed)."""
    return sum(1 for line in text.splitlines() if line.lstrip().startswith(FENCE)) % 2 == 1


def close_fences(text: str) -> str:
    """``text`` with a code fence it leaves open closed (an answer cut off in a code block)."""
    return text + ("\n" + FENCE if in_code_block(text) else "")


def close_inline_code(text: str) -> str:
    """A streaming ``text`` with an inline code span it leaves open closed, outside code blocks: a tour saw the raw
    backtick until the span's end arrived (a span does not cross a blank line, so only the last paragraph counts)."""
    if in_code_block(text):
        return text
    return text + ("`" if text.split("\n\n")[-1].count("`") % 2 else "")


def hard_line_breaks(text: str) -> str:
    """``text`` with every line break outside code blocks kept, as chat users expect (a poem, an address):
    Markdown would otherwise join consecutive lines into one paragraph. A line's indentation inside a paragraph is
    kept too (as no-break spaces): a model that writes code without a fence (``def f(x):`` then ``    return x``)
    lost it, where Markdown ignores it anyway. Lines that start a list, quote, heading or table, and Markdown's
    indented code blocks, are left as they are: their indentation means something. Python's dunder names outside
    code (``__init__``) stay names, not bold (see :func:`_escape_dunders`)."""
    lines = text.split("\n")
    in_fence = False
    starts_block = True  # the line after a blank line or a fence starts a paragraph, or an indented code block
    code_block = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith(FENCE):
            in_fence = not in_fence
            starts_block = True
            continue
        if in_fence:
            continue
        body = line.lstrip(" \t")
        indent = line[: len(line) - len(body)].expandtabs(4)
        if not body:
            starts_block = True
            continue
        if starts_block:
            code_block = len(indent) >= 4
            starts_block = False
        elif indent and not code_block and not _MARKDOWN_LINE_START.match(body):
            lines[i] = "\u00a0" * len(indent) + body
        if not code_block:
            lines[i] = _escape_dunders(lines[i])
        if i + 1 < len(lines) and lines[i + 1].strip():
            lines[i] = lines[i].rstrip() + "  "  # Markdown's hard line break
    return "\n".join(lines)


def _escape_dunders(line: str) -> str:
    """``line`` with each ``__name__`` outside inline code escaped: Markdown makes ``def __init__(self):`` (code
    without a fence, or prose naming a method) into "def **init**(self):". Chat models write bold as ``**``; a
    ``__word__`` meant as bold shows its underscores instead."""
    parts = line.split("`")
    parts[::2] = [_DUNDER.sub(r"\_\_\1\_\_", part) for part in parts[::2]]  # the even parts are outside code spans
    return "`".join(parts)


_DUNDER = re.compile(r"(?<![\w\\])__(\w+?)__(?!\w)")
# How a line that starts a list item, quote, heading or table row begins (its indentation nests it).
_MARKDOWN_LINE_START = re.compile(r"([-*+]\s|\d+[.)]\s|#|>|\|)")


def code_shade() -> QColor:
    """The ground of code blocks in the window: the text's colour at 8% over the base, so a dark theme gets a dark
    shade (the palette's alternate base was too faint to see under Xvfb)."""
    palette = QGuiApplication.palette()
    base, ink = palette.base().color(), palette.text().color()

    def mix(b: int, t: int) -> int:
        return round(0.92 * b + 0.08 * t)

    return QColor(mix(base.red(), ink.red()), mix(base.green(), ink.green()), mix(base.blue(), ink.blue()))


# Exports are read in a browser, on its white page with black text, whatever the app's theme.
EXPORT_CODE_SHADE = QColor("#f0f0f0")


def markdown_html(text: str, shade: QColor | None = None) -> str:
    """One message's Markdown as an HTML fragment (its own document, so nothing leaks out of it), code blocks on
    ``shade`` (default: :func:`code_shade`; a tour found them set apart by their font alone)."""
    doc = QTextDocument()
    doc.setMarkdown(hard_line_breaks(close_fences(text)))
    shade = shade or code_shade()
    block = doc.begin()
    while block.isValid():
        fmt = block.blockFormat()
        if fmt.hasProperty(QTextFormat.Property.BlockCodeLanguage):  # Qt's mark of a code block, fenced or indented
            fmt.setBackground(shade)
            QTextCursor(block).setBlockFormat(fmt)
        block = block.next()
    full = doc.toHtml()
    start, end = full.find("<body"), full.rfind("</body>")
    body = full[full.find(">", start) + 1 : end] if start >= 0 and end > start else full
    return body


def answer_figures(events: Sequence[Event]) -> str:
    """The line under an answer, from its events: tokens, speed, acceptance or why nothing was drafted, the seed
    where it sampled, threads the engine took back, and how it ended; empty without its finish."""
    start = next((e for e in events if isinstance(e, StartEvent)), None)
    finish = events[-1] if events and isinstance(events[-1], FinishEvent) else None
    if finish is None:
        return ""
    tally = ThreadTally()
    step_events = [event for event in events if isinstance(event, StepEvent)]
    for step in step_events:
        tally.add(step)
    s = finish.stats
    drafts = drafts_phrase(start.strategy if start is not None else "", step_events, s.n_drafted, s.n_accepted,
                           unread=draft_model_unread(start, step_events))  # fmt: skip
    # No line break inside a figure and its unit (a tour's line ended "· seed" with "42" alone below it).
    seed = f" · seed\u00a0{start.seed}" if start is not None and start.sampled and start.seed is not None else ""
    tokens = f"{s.n_generated}\u00a0token{'s' if s.n_generated != 1 else ''}"
    stopped = "" if finish.reason in (FinishReason.EOG, FinishReason.STOP) else f" · {finish.reason.words}"
    threads = ""
    fewer = tally.fewer()
    if fewer is not None:  # the engine took threads back while another program kept a core busy
        fewest, steps = fewer
        threads = (
            f" · {fewest}\u00a0thread{'s' if fewest != 1 else ''} for {steps}\u00a0of\u00a0{tally.steps}\u00a0steps "
            "(another program was busy)"
        )
    rate = f" · {s.tokens_per_second:.1f}\u00a0tokens/s" if s.n_generated > 1 else ""  # the first: the prompt's
    if rate and (slowed := finish.crowded_words):
        rate += f" ({slowed})"
    # The time it took, the prompt's reading apart, as the rate leaves it out: a teacher's stopwatch read 24.3 s for
    # 230 tokens at 12.4 tokens/s, and nothing under the answer said where the other 5.8 s went.
    took = f" · {s.elapsed_s:.1f}\u00a0s" if s.n_generated > 1 else ""
    if took and start is not None and start.prompt_s >= 0.05:
        took += f" (+{start.prompt_s:.1f}\u00a0s prompt)"
    return f"{tokens}{rate}{took} · {drafts}{seed}{threads}{stopped}"


def plain_html(text: str) -> str:
    """Plain text as HTML with its line breaks and spacing kept."""
    return f"<p style='white-space: pre-wrap'>{html.escape(text)}</p>"


def sent(messages: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """The messages as the model gets them: role and content (a transcript's notes are for the reader), less
    the turns left out to fit the context (kept in the conversation, marked ``dropped``)."""
    return [{"role": m["role"], "content": m["content"]} for m in messages if not m.get("dropped")]


# Under the turns left out to fit the context.
DROPPED_NOTE = (
    "— The turns above were left out to fit the context: they are kept here, but the model no longer reads them."
)


def render_transcript(
    messages: Sequence[dict[str, str]], streaming: bool = False, shade: QColor | None = None
) -> str:
    """The conversation as HTML, one section per message (system messages left out).

    Args:
        messages: role/content dicts.
        streaming: end with an empty Assistant section for an answer still being generated.
        shade: the ground of code blocks (default: the window's, :func:`code_shade`).
    """
    parts = []
    shown = [m for m in messages if m["role"] != "system"]
    for i, message in enumerate(shown):
        role = message["role"]
        heading = "You" if role == "user" else "Assistant"
        body = plain_html(message["content"]) if role == "user" else markdown_html(message["content"], shade)
        if message.get("note"):  # an answer cut short: "stopped", "cut off at the Max tokens limit", …
            body += f"<p style='color:gray'><i>— {html.escape(message['note'])}</i></p>"
        if message.get("dropped"):  # kept for the reader, no longer read by the model
            part = f"<div style='color:gray'><h4>{heading}</h4>{body}</div>"
            if i + 1 == len(shown) or not shown[i + 1].get("dropped"):
                part += f"<p style='color:gray'><i>{DROPPED_NOTE}</i></p>"
            parts.append(part)
            continue
        parts.append(f"<h4>{heading}</h4>{body}")
    if streaming:
        parts.append("<h4>Assistant</h4>")
    return "<hr>".join(parts)


class _Turn:
    """One answer being generated, bound to its conversation (a record sink)."""

    def __init__(self, pane: ChatPane, conversation: Conversation, user_text: str) -> None:
        self.pane = pane
        self.conversation = conversation
        self.user_text = user_text
        self.text = ""
        self.seed: int | None = None
        self.request_id: int | None = None
        self.discarded = False  # its conversation was deleted: nothing of it is saved
        self.restored = False  # put back by a quit (see ChatPane.save_now): the turn's end changes nothing more
        # Stopped by the app, not by the user's Stop: another conversation opened, the models reloading. A Regenerate so
        # stopped gives back the answer it was replacing, as a quit does (a review's: a click on another conversation
        # swapped a 300-token answer for a 20-token fragment).
        self.by_app = False
        self.updated = conversation.updated  # its date before this turn, back if the turn is withdrawn
        self._last_save = time.monotonic()
        self.paused = False  # step mode holds it after a step
        self.events: list[Event] = []  # kept with the conversation, so the answer is shown again when it is opened

    @property
    def replaced(self) -> dict[str, str] | None:
        """The answer Regenerate took out (the whole message, its note included), put back if this turn fails or
        the app quits during it; ``None`` once put back. Kept as the conversation's :attr:`Conversation.replacing`,
        so that every save meanwhile writes it, not the new answer's part."""
        return self.conversation.replacing

    @replaced.setter
    def replaced(self, answer: dict[str, str] | None) -> None:
        self.conversation.replacing = answer

    def on_records(self, records: Sequence[Record]) -> None:
        chunk = ""
        for record in records:
            if record.kind in (RecordKind.STARTED, RecordKind.STEP, RecordKind.FINISHED) and record.event is not None:
                self.events.append(record.event)
            if record.kind is RecordKind.STARTED and isinstance(record.event, StartEvent):
                self.seed = record.event.seed
                self.pane._turn_started(self)
            elif record.kind is RecordKind.STEP and isinstance(record.event, StepEvent):
                if self.paused:  # Next step: it goes on
                    self.paused = False
                    self.pane._turn_started(self)
                chunk += record.event.text
            elif record.kind is RecordKind.PAUSED and isinstance(record.event, StepEvent):
                self.paused = True
                self.pane._turn_paused(self, record.event)
            elif record.kind is RecordKind.FINISHED and isinstance(record.event, FinishEvent):
                self.pane._finish_turn(self, record.event)
                return
            elif record.kind is RecordKind.FAILED:
                self.text += chunk  # what it said in this batch before failing is kept too
                self.pane._fail_turn(self, record)
                return
        if chunk:
            self.text += chunk
            self.pane._stream(self, chunk)
            # Not once a quit has put a replaced answer back: this partial text is no longer the conversation's. During
            # a Regenerate the file keeps the answer it replaces instead (Conversation.replacing).
            if not self.discarded and not self.restored and time.monotonic() - self._last_save >= AUTOSAVE_INTERVAL_S:
                self._last_save = time.monotonic()
                self.conversation.partial = self.text
                # A Regenerate's file is the conversation as it was (Conversation.replacing), its date included.
                self.pane.store.save(self.conversation, touched=self.replaced is None)


class ChatPane(QWidget):
    """A multi-turn chat over the generation router.

    Args:
        router: the generation router.
        settings: the settings store.
        store: the saved conversations.
        observers: more sinks that see every chat turn (the live panel, the teaching panel).
        parent: the Qt parent.

    Signals:
        turn_finished(object): a turn ended (its FinishEvent).
        conversation_opened(Conversation): another conversation (or a new one) is shown, or the same one without
            its last answer (Edit last): the views show its :attr:`kept_answer` in place of what they showed.
        compare_requested(list): Compare was pressed with this conversation (the message to compare last).
        status_changed(str): a message for the status bar.
    """

    turn_finished = Signal(object)
    conversation_opened = Signal(object)
    compare_requested = Signal(list)
    status_changed = Signal(str)

    def __init__(
        self,
        router: GenerationRouter,
        settings: SettingsStore,
        store: ConversationStore,
        observers: Sequence[RecordSink] = (),
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.router = router
        self.settings = settings
        self.store = store
        self._models_ready = False  # see set_models_state
        self._reloading = ""
        # Until the first token, the line under the answer counts the seconds spent reading the prompt: a long one
        # takes a while on a CPU (a 1,064-token paste took 18 s in a tour), and a line that never changes looks hung.
        self._reading_since = 0.0
        self._reading_timer = QTimer(self)
        self._reading_timer.setInterval(1000)
        self._reading_timer.timeout.connect(self._show_reading)
        self.observers = list(observers)
        self.conversation = Conversation()
        # What was typed and not sent in the conversations left since (by id): a message stays with its
        # conversation (a tour opened another one with the first one's message in the box, one Enter from it).
        self._unsent: dict[str, str] = {}
        self.pair = ""
        self.turn: _Turn | None = None
        self.last_seed: int | None = None  # the seed the last finished answer sampled with
        self.kept_answer: list[Event] = []  # the events kept of the opened conversation's last answer
        self.finished_in = self.conversation  # the conversation of the last answer that finished (turn_finished)
        self.closing = False  # the window is closing: a running answer stops because of it (see save_now)
        # What Edit last took out (the conversation, its message and answers), until something is sent or another
        # conversation opens: Esc puts it back (a tour's Ctrl+E lost an answer for good).
        self._taken: tuple[Conversation, list[dict[str, str]]] | None = None
        self.finished_status = ""  # what the status bar was told of this conversation (_say_for_conversation)
        self._stream_cursor: QTextCursor | None = None
        self._stream_start = 0  # where the streaming answer begins in the transcript
        self._stream_next_render = 0.0  # time.monotonic() of its next Markdown render
        self._overflow: tuple[int, int] | None = None  # the refused prompt's tokens and the context's, for a trim

        self.transcript = QTextBrowser(self)
        self.transcript.setOpenExternalLinks(True)
        self.transcript.setAccessibleName("Conversation")
        # Six lines of the conversation at least: in a short window the docks give way first (a tour's 840×600
        # window kept the charts' 200 pixels and showed 50 of the transcript, a line and a scroll bar).
        self.transcript.setMinimumHeight(6 * self.transcript.fontMetrics().lineSpacing() + 12)
        # Read to its end, the transcript stays at its end when it grows or its viewport shrinks (the answer's
        # figures wrapping to a second line when it finishes hid its last line).
        self._pinned = True
        bar = self.transcript.verticalScrollBar()
        bar.valueChanged.connect(self._on_transcript_scrolled)
        bar.rangeChanged.connect(self._on_transcript_range_changed)
        self.set_models_state(False, False)
        self.error = QLabel(self)
        self.error.setWordWrap(True)
        self.error.setTextFormat(Qt.TextFormat.RichText)
        self.error.setAccessibleName("Error")
        self.error.setStyleSheet(
            "QLabel { background: rgba(215,58,73,40); border: 1px solid #d73a49; border-radius: 4px; padding: 6px }"
        )
        self.trim_button = QPushButton("Leave out the oldest turns and send again", self)
        self.trim_button.setAccessibleName("Leave out the oldest turns")
        self.trim_button.setToolTip(
            "The model stops reading the oldest turns, as many as leave room for an answer; they stay in the "
            "conversation, in grey"
        )
        self.trim_button.clicked.connect(self.trim_and_resend)
        error_row = QHBoxLayout()
        error_row.addWidget(self.error, 1)
        error_row.addWidget(self.trim_button)
        self.error.hide()
        self.trim_button.hide()
        self.input = MessageEdit(self)
        # Tab leaves the box, as in a form, so the rest of the window is reachable without the mouse (a keyboard
        # tour's Tab typed tab characters and stayed); pasted code keeps its tabs.
        self.input.setTabChangesFocus(True)
        self.input.setAccessibleName("Message")
        self.input.setPlaceholderText("Message — Enter sends, Shift+Enter for a new line")
        # Four lines: on a 720-pixel screen the box took as much height as the transcript it answers (a walk's).
        self.input.setMaximumHeight(4 * self.input.fontMetrics().lineSpacing() + 16)
        self.input.submitted.connect(self._on_input_submitted)

        self.send_button = self._button("Send", "Send the message (Enter, Ctrl+Return)", self.send)
        self.stop_button = self._button("Stop", "Stop generating (Esc)", self.stop)
        self.regenerate_button = self._button("Regenerate", "Generate the last answer again (Ctrl+R)", self.regenerate)
        self.edit_button = self._button(
            "Edit last", "Put the last message back in the box to edit and resend it (Ctrl+E)", self.edit_last
        )
        self.copy_button = self._button("Copy answer", "Copy the last answer to the clipboard", self.copy_answer)
        self.compare_button = self._button(
            "Compare",
            "Answer the last message with plain decoding and with speculation, side by side (Ctrl+Shift+C)",
            self.compare,
        )
        self.clear_button = self._button("New chat", "Start a new conversation (Ctrl+N)", self.new_chat)
        self.figures = QLabel(self)
        self.figures.setAccessibleName("Answer figures")
        # Under the transcript, on a line of their own: they wrap rather than widen the window or hide the seed.
        self.figures.setWordWrap(True)
        self.figures.setEnabled(False)
        self.figures.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)  # copy the seed
        suite = {p.id: p.messages[-1]["content"] for p in load_suite()}
        self._examples = {id_: suite[id_] for id_, _, _ in EXAMPLES}
        links = (f'<a href="{id_}">{html.escape(text)}</a> ({html.escape(why)})' for id_, text, why in EXAMPLES)
        # Tab reaches the links, Enter follows one; a screen reader reads them (the name alone replaced the text).
        self.examples = LinksLabel("Try an example: " + " · ".join(links), self)
        self.examples.setAccessibleName("Examples")
        self.examples.setAccessibleDescription(
            "Try an example: " + "; ".join(f"{text} ({why})" for _, text, why in EXAMPLES)
        )
        self.examples.setWordWrap(True)
        self.examples.setToolTip("Puts the example in the message box: Enter sends it")
        self.examples.linkActivated.connect(self.use_example)

        # Two groups, Send's at the right; on a line of its own where the pane is too narrow for both (WrapRow).
        buttons = WrapRow()
        for group in (
            (self.regenerate_button, self.edit_button, self.copy_button, self.clear_button),
            (self.compare_button, self.stop_button, self.send_button),
        ):
            box = QWidget(self)
            row = QHBoxLayout(box)
            row.setContentsMargins(0, 0, 0, 0)
            for button in group:
                row.addWidget(button)
            buttons.addWidget(box)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.transcript, 1)
        layout.addWidget(self.examples)
        layout.addWidget(self.figures)
        layout.addLayout(error_row)
        layout.addWidget(self.input)
        layout.addLayout(buttons)
        # The links next to the message box they fill, as they are on screen: created after the buttons, they were
        # last in the Tab order, and a teacher's Shift+Tab from the message box went to the conversation.
        QWidget.setTabOrder(self.transcript, self.examples)
        QWidget.setTabOrder(self.examples, self.input)
        self._update_buttons()

    def _button(self, text: str, tip: str, slot: Callable[[], None]) -> QPushButton:
        button = QPushButton(text, self)
        button.setToolTip(tip)
        button.setAccessibleName(text)
        button.clicked.connect(slot)
        return button

    @property
    def busy(self) -> bool:
        """Whether a turn (of any conversation) is running."""
        return self.turn is not None

    # ---- actions ------------------------------------------------------------------------------------

    def send(self) -> None:
        """Send the message box's text as the next turn."""
        text = self.input.toPlainText().strip()
        if self.busy or self.router.running:
            return
        if not text:  # a tour's Enter on an empty box did nothing, with no word of why
            self._say_for_conversation("Type a message to send.")
            return
        self.input.clear()
        self._start_turn(text)

    def stop(self, *, by_user: bool = True) -> None:
        """Cancel the running turn (it stops within one speculation step); ``by_user``: at the user's Stop (Esc), not
        because the app needs it stopped (a Regenerate stopped so keeps what it wrote, see _Turn.by_app). Keyword-only:
        the Stop button's ``clicked`` passes ``checked`` (False) to a slot's first argument (a review's)."""
        if self.turn is not None and self.turn.request_id is not None:
            # Only a turn that runs: one still being sent may start a load that replaces the models, and that is no
            # stop of it (a review's: its later Esc gave the old answer back).
            self.turn.by_app = self.turn.by_app or not by_user
            self.router.cancel(self.turn.request_id)
            self.status_changed.emit("Stopping…")

    def regenerate(self) -> None:
        """Drop the last answer and generate it again (with a new seed when the seed is random)."""
        messages = self.conversation.messages
        if self.busy or self.router.running or not messages:
            return
        replaced = messages.pop() if messages[-1]["role"] == "assistant" else None
        if not messages or messages[-1]["role"] != "user":
            return
        self._start_turn(messages.pop()["content"])
        if self.turn is not None:
            self.turn.replaced = replaced

    def edit_last(self) -> None:
        """Take the last user message (and its answer) out of the chat and into the message box."""
        messages = self.conversation.messages
        if self.busy:
            return
        start = len(messages)
        while start and messages[start - 1]["role"] == "assistant":
            start -= 1
        if not start or messages[start - 1]["role"] != "user":
            return
        # A second Edit last before anything is sent takes the exchange before too: Esc puts both back (a review).
        later = self._taken[1] if self._taken is not None and self._taken[0] is self.conversation else []
        self._taken = (self.conversation, [*messages[start - 1 :], *later])
        del messages[start - 1 :]
        self.input.setPlainText(self._taken[1][0]["content"])
        self.input.moveCursor(QTextCursor.MoveOperation.End)
        self.input.setFocus()
        self.figures.setText("")  # the figures of an answer no longer there (a tour saw them stay)
        # Taking a message out to edit it is no new activity: the conversation keeps its date and place in the list
        # until the edit is sent (a tour's Edit last and Esc moved it from 03:55 to 03:56).
        self.store.save(self.conversation, touched=False)
        self._render()
        # Its tokens and charts go too, as when the conversation is opened again (a tour saw them stay).
        self.kept_answer = []
        self.conversation_opened.emit(self.conversation)
        self._update_buttons()  # Regenerate, Edit last and Copy answer had nothing left to act on (seen under Xvfb)
        self.status_changed.emit("Editing your last message: Send replaces it and its answer; Esc puts them back.")

    @property
    def editing(self) -> bool:
        """Whether Edit last has taken this conversation's last message into the box (until it is sent or put back)."""
        return self._taken is not None and self._taken[0] is self.conversation

    def undo_edit(self) -> bool:
        """Put back the message and answer Edit last took out, if nothing was sent since and the same conversation
        is open; the message box keeps what was typed unless it is still the message itself. Whether it did."""
        taken, self._taken = self._taken, None
        if taken is None or self.busy or taken[0] is not self.conversation:
            return False
        removed = taken[1]
        if self.input.toPlainText().strip() == removed[0]["content"].strip():
            self.input.clear()
        self.conversation.messages.extend(removed)
        self.store.save(self.conversation, touched=False)
        self.kept_answer = self.store.answer(self.conversation)  # its events are still kept: they are its again
        self.figures.setText(answer_figures(self.kept_answer))
        self._render()
        self._update_buttons()
        self.conversation_opened.emit(self.conversation)  # its tokens and charts, as when it is opened
        self.status_changed.emit(
            "Your last message and its answer are back." if len(removed) <= 2 else "Your last messages and their "
            "answers are back."
        )
        return True

    def use_example(self, example: str) -> None:
        """Put the suite's prompt ``example`` (an id of :data:`EXAMPLES`) in the message box, replacing what was typed
        there as an edit that Ctrl+Z undoes."""
        typed = self.input.toPlainText().strip()
        cursor = self.input.textCursor()
        cursor.select(QTextCursor.SelectionType.Document)
        cursor.insertText(self._examples[example])
        self.input.setTextCursor(cursor)
        self.input.setFocus()
        when = " once the answer or comparison running ends" if self.busy or self.router.running else ""
        self.status_changed.emit(
            f"The example is in the message box: Enter sends it{when}."
            + (" Ctrl+Z in the box puts back what you had typed." if typed else "")
        )

    def copy_answer(self) -> None:
        """Copy the last answer's text."""
        for message in reversed(self.conversation.messages):
            if message["role"] == "assistant":
                QGuiApplication.clipboard().setText(message["content"])
                self.status_changed.emit("Answer copied.")
                return

    def compare(self) -> None:
        """Ask for a comparison of the last message (or the one typed in the box)."""
        if self.busy or self.router.running:
            return
        text = self.input.toPlainText().strip()
        messages = sent(self.conversation.messages)
        while messages and messages[-1]["role"] == "assistant":
            messages.pop()
        if text:
            messages.append({"role": "user", "content": text})
        if not messages or messages[-1]["role"] != "user":
            self._say_for_conversation("Type a message to compare.")  # goes with the conversation (a tour read it on)
            return
        self.compare_requested.emit(messages)

    def new_chat(self) -> None:
        """Start a new conversation at once (a running answer stops and is kept in its own conversation), the focus
        in its message box."""
        self.open_conversation(Conversation())
        self.input.setFocus(Qt.FocusReason.OtherFocusReason)

    def open_conversation(self, conversation: Conversation) -> None:
        """Show a conversation. A running answer of another one stops (what it streamed is kept there); a
        partial answer saved by a killed app is kept as the last answer."""
        running = self.turn.conversation if self.turn is not None else None
        if running is not None and running is not conversation:
            self.stop(by_user=False)
        if conversation.partial and running is not conversation:
            # Killed or crashed (a quit keeps the answer whole): "the app closed" read wrong after a kill (a tour's).
            note = "interrupted: the app stopped during this answer"
            conversation.messages.append({"role": "assistant", "content": conversation.partial, "note": note})
            conversation.partial = None
            self.store.save(conversation)
        if conversation is not self.conversation:
            self._taken = None
            if text := self.input.toPlainText():
                self._unsent[self.conversation.id] = text
            self.input.setPlainText(self._unsent.pop(conversation.id, ""))
        self.conversation = conversation
        self._stream_cursor = None
        self._hide_error()
        # The last answer's events, kept with the conversation (its line here: a tour restarted the app and found
        # it gone; its tokens and charts in the live panel).
        self.kept_answer = [] if running is conversation else self.store.answer(conversation)
        self.figures.setText(answer_figures(self.kept_answer))
        self._render(streaming=running is conversation)
        if running is conversation and self.turn is not None and self._stream_cursor is not None:
            self._render_stream(self.turn.text)  # what streamed meanwhile
        self._update_buttons()
        self.conversation_opened.emit(conversation)

    def discard(self, conversation: Conversation, then: Conversation | None = None) -> None:
        """The conversation was deleted: its running answer stops and nothing of it is saved again. Where it was
        open, ``then`` opens in its place (the list's next), as a mail client does (two tours, dropped into an
        empty chat beside the conversation they had left); a new chat where there is none."""
        if self.turn is not None and self.turn.conversation is conversation:
            self.turn.discarded = True
            self.stop()
        if conversation is self.conversation and then is not None:
            self.open_conversation(then)
        elif conversation is self.conversation:
            self.new_chat()

    def save_now(self) -> None:
        """Keep the streamed part of a running answer (the window is closing): the answer it ends with says it was
        stopped by the quit, and a Regenerate cut short so gives the answer it was replacing back (a tour quit four
        seconds into one and found its whole 301-token answer gone for an 81-token fragment marked "stopped")."""
        self.closing = True
        turn = self.turn
        if turn is None or turn.discarded:  # a deleted conversation is not written back (a review's)
            return
        if turn.replaced is not None:  # saved back now: a worker that does not stop in time, or a kill, keeps it too
            turn.conversation.messages.append(turn.replaced)
            turn.conversation.partial = None
            turn.replaced, turn.restored = None, True
        elif not turn.restored:
            turn.conversation.partial = turn.text
        self.store.save(turn.conversation)

    def trim_and_resend(self) -> None:
        """Leave the oldest exchanges out of what the model reads and send the last message again (the conversation
        was too long): as many as leave room for an answer (the longest answer, up to half the context), estimated
        from the refused prompt's tokens per character; at least one. They stay in the conversation, marked."""
        text = self.input.toPlainText().strip()
        system = self.settings.settings.system_prompt.strip()
        messages = [m for m in self.conversation.messages if not m.get("dropped")]

        def chars() -> int:
            return len(system) + len(text) + sum(len(m["content"]) for m in messages)

        n_prompt, n_ctx = self._overflow or (0, 0)
        per_char = n_prompt / max(chars(), 1)
        budget = n_ctx - min(self.settings.settings.max_tokens, n_ctx // 2)
        # The oldest user message and the answers up to the next user message, while the rest would not fit: left
        # out of what the model reads, not deleted (a tour lost its first exchange from the saved chat).
        while len(messages) >= 2:
            messages.pop(0)["dropped"] = "1"
            while messages and messages[0]["role"] == "assistant":
                messages.pop(0)["dropped"] = "1"
            if chars() * per_char <= budget:
                break
        self._hide_error()
        if text and not self.busy:
            self.input.clear()
            self._start_turn(text)

    # ---- turn lifecycle -----------------------------------------------------------------------------

    def _history(self) -> list[dict[str, str]]:
        system = self.settings.settings.system_prompt.strip()
        return ([{"role": "system", "content": system}] if system else []) + sent(self.conversation.messages)

    def _start_turn(self, text: str) -> None:
        self._taken = None  # what Edit last took out is replaced now
        self._hide_error()
        self.conversation.set_title_from(text)
        self.conversation.messages.append({"role": "user", "content": text})
        self.conversation.pair = self.pair
        turn = _Turn(self, self.conversation, text)
        self.turn = turn
        # The last answer's figures are not this one's; until its first token, say what it waits for. The line keeps
        # their height meanwhile: from four lines to "Generating…" and back, it moved the docks below up and down
        # by a line at every answer (a tour's, at 1024×740).
        self.figures.setMinimumHeight(self.figures.height())
        self._reading_since = time.monotonic()
        self._show_reading()
        self._reading_timer.start()
        if self._models_ready:  # not the last answer's "finished"; while they load, the load's steps are said
            self.status_changed.emit("Answering… (Esc stops the answer)")
        self._render(streaming=True)
        config = generation_config(self.settings.settings)
        turn.request_id = self.router.chat(self._history(), config, [turn, *self.observers])
        self._show_reading()  # again: sending may have started a reload the answer waits for
        self._update_buttons()

    def _turn_started(self, turn: _Turn) -> None:
        if self.turn is turn:  # the prompt is read: tokens follow
            self._reading_timer.stop()
            self.figures.setText("Generating…")

    def _turn_paused(self, turn: _Turn, step: StepEvent) -> None:
        """Step mode paused the answer: say so where "Generating…" stood (a paused answer looked like a hung one)."""
        if self.turn is turn:
            self.figures.setText(f"Paused after step {step.step} (step mode): Next step in Teach, or F10, goes on")
            self.status_changed.emit("Paused (step mode): press F10 or Next step in Teach for the next step.")

    def step_mode_changed(self, enabled: bool) -> None:
        """Step mode switched off while an answer paused: it goes on, and says so (a tour's status bar kept saying
        "Paused (step mode)" while the answer ran on)."""
        if not enabled and self.turn is not None and self.turn.paused:
            self.figures.setText("Generating…")
            self.status_changed.emit("Answering… (Esc stops the answer)")

    def _show_reading(self) -> None:
        """A second more of waiting for the first token: say how long it has been."""
        if self.turn is None:
            self._reading_timer.stop()
            return
        waited = int(time.monotonic() - self._reading_since)
        if self._models_ready:
            what = "Reading the prompt"
        elif self._reloading:
            what = f"Reloading the models ({self._reloading} changed), then reading the whole conversation"
        else:
            what = "Waiting for the models to load"
        self.figures.setText(f"{what}… {waited} s" if waited >= 2 else f"{what}…")

    def _stream(self, turn: _Turn, chunk: str) -> None:
        if turn.conversation is not self.conversation or self._stream_cursor is None:
            return
        # The transcript follows the answer while it is read to its end (_on_transcript_range_changed).
        if time.monotonic() >= self._stream_next_render:
            self._render_stream(turn.text)
        else:  # until the next render, in the format where the answer stands (a code block's, or plain)
            cursor = self._stream_cursor
            cursor.insertText(chunk, cursor.charFormat() if in_code_block(turn.text) else QTextCharFormat())

    def _on_transcript_scrolled(self, value: int) -> None:
        self._pinned = value >= self.transcript.verticalScrollBar().maximum() - 4

    def _on_transcript_range_changed(self, _low: int, high: int) -> None:
        if self._pinned:
            self.transcript.verticalScrollBar().setValue(high)

    def _render_stream(self, text: str) -> None:
        """Replace the streaming answer shown so far with ``text`` rendered as Markdown, and schedule the next
        render so that rendering (which grows with the answer) takes at most STREAM_RENDER_SHARE of the time."""
        start = time.monotonic()
        cursor = QTextCursor(self.transcript.document())
        cursor.setPosition(self._stream_start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        # A plain block again: the removed render's code block leaves its format (grey, unbroken lines) on the
        # block it began in, and the answer's first paragraph was drawn inside it while streaming (a tour's).
        cursor.setBlockFormat(QTextBlockFormat())
        cursor.setCharFormat(QTextCharFormat())
        if text:
            cursor.insertHtml(markdown_html(close_inline_code(text)))
        self._stream_cursor = cursor
        spent = time.monotonic() - start
        self._stream_next_render = time.monotonic() + max(STREAM_RENDER_S, spent / STREAM_RENDER_SHARE)

    def _end_turn(self, turn: _Turn) -> None:
        if self.turn is turn:
            self._reading_timer.stop()
            self.turn = None
            if turn.conversation is self.conversation:  # not a deleted one's, over the conversation opened after it
                self.figures.setText("")  # "Generating…" goes; a finished answer sets its own figures after this
                self.figures.setMinimumHeight(0)
        self._stream_cursor = None
        self._update_buttons()

    def _finish_turn(self, turn: _Turn, finish: FinishEvent) -> None:
        conversation = self.finished_in = turn.conversation
        if turn.restored:  # a Regenerate the quit stopped: its replaced answer is back already (see save_now)
            self._end_turn(turn)
            self.turn_finished.emit(finish)
            return
        if finish.reason is FinishReason.CANCELLED and not finish.text:
            regenerating = turn.replaced is not None
            self._withdraw_turn(turn)  # stopped before a word was said: no empty answer in the history
            self.turn_finished.emit(finish)
            if not turn.discarded:
                self._say_for_conversation(
                    "Stopped before the new answer began; the answer it was to replace is kept." if regenerating
                    else "Stopped before the answer began; your message is back in the box."
                )
            return
        # A Regenerate the app stopped (another conversation opened, a reload, the quit): the answer it was replacing is
        # back. The quit counts though its cancel came before save_now (see MainWindow.closeEvent; a review's).
        if finish.reason is FinishReason.CANCELLED and (turn.by_app or self.closing) and turn.replaced is not None:
            self._withdraw_turn(turn)
            self.turn_finished.emit(finish)
            if not turn.discarded:
                self._say_for_conversation("The Regenerate was stopped; the answer it was replacing is back.")
            return
        # FinishEvent.text is authoritative: step chunks may hold back a possible stop-string tail.
        turn.replaced = None  # the new answer takes its place, on disk too
        answer = {"role": "assistant", "content": finish.text}
        if finish.reason in (FinishReason.CANCELLED, FinishReason.MAX_TOKENS, FinishReason.CONTEXT):
            answer["note"] = finish.reason.words  # an answer cut short says so in the transcript and exports
        if finish.reason is FinishReason.CANCELLED and self.closing:
            answer["note"] = "stopped: Speculens was closed during this answer"
        conversation.messages.append(answer)
        conversation.partial = None
        if not turn.discarded:
            self.store.save(conversation)
            self.store.save_answer(conversation, turn.events)
        self._end_turn(turn)
        self.last_seed = turn.seed
        if conversation is self.conversation:
            self._render()
            self.figures.setText(answer_figures(turn.events))
        self.turn_finished.emit(finish)
        if finish.reason is FinishReason.CANCELLED:
            self._say_for_conversation("Stopped.")
        elif finish.reason is FinishReason.MAX_TOKENS:
            self._say_for_conversation(
                "The answer was cut off at the Max tokens limit (Settings); raise it for longer answers."
            )
        elif finish.reason is FinishReason.CONTEXT:  # with what to do, as for Max tokens (a tour's finding)
            self._say_for_conversation(
                "The answer was cut off: the context is full. Raise the context size (Settings, then Reload) or "
                "start a new chat."
            )
        elif finish.reason is FinishReason.STOP:
            self._say_for_conversation(f"Answer finished ({finish.reason.words}).")
        else:  # not "Answer finished (the answer ended)", as a tour read it
            self._say_for_conversation("Answer finished.")

    def _say_for_conversation(self, words: str) -> None:
        """Say how the last answer ended (or a hint about this conversation), in the status bar; opening another
        conversation takes it away (a tour read "Answer finished." under a new chat)."""
        self.finished_status = words
        self.status_changed.emit(words)

    def _withdraw_turn(self, turn: _Turn) -> None:
        """Take a turn that produced nothing back out: the conversation is as it was, the message back in the
        box (nothing the user typed is lost)."""
        conversation = turn.conversation
        replaced, turn.replaced = turn.replaced, None
        if replaced is not None:  # a failed Regenerate keeps the answer it was to replace
            conversation.messages.append(replaced)
        elif conversation.messages and conversation.messages[-1] == {"role": "user", "content": turn.user_text}:
            conversation.messages.pop()
        if not conversation.messages and not conversation.renamed:  # the next message names it, not this one
            conversation.title = UNTITLED
        conversation.partial = None
        if conversation.messages and not turn.discarded:  # as it was, date and place in the list included
            conversation.updated = turn.updated
            self.store.save(conversation, touched=False)
        self._end_turn(turn)
        if conversation is self.conversation:
            if replaced is None and not self.input.toPlainText().strip():
                self.input.setPlainText(turn.user_text)
            self._render()
        elif replaced is None and not self._unsent.get(conversation.id, "").strip():
            self._unsent[conversation.id] = turn.user_text  # in its box when that conversation is opened again

    def _fail_turn(self, turn: _Turn, record: Record) -> None:
        conversation = turn.conversation
        if turn.restored:  # the quit put the replaced answer back already (see save_now)
            self._end_turn(turn)
            return
        if turn.text and turn.replaced is None:  # it failed midway: what it said is kept, the error shown
            conversation.messages.append({"role": "assistant", "content": turn.text, "note": "stopped by an error"})
            conversation.partial = None
            if not turn.discarded:
                self.store.save(conversation)
            self._end_turn(turn)
            if conversation is self.conversation:
                self._render()
                self._show_error(record.message, trim=False, heading="The answer stopped with an error.")
            self.status_changed.emit(record.message)
            return
        self._withdraw_turn(turn)
        if conversation is self.conversation:
            message, trim = record.message, False
            if isinstance(record.error, ContextFullError):
                kept = sent(conversation.messages)
                trim = len(kept) >= 2
                self._overflow = (record.error.n_prompt, record.error.n_ctx)
                if not kept:  # no older turns to drop: only the message itself can change
                    message = (
                        f"your message alone makes a prompt of {record.error.n_prompt} tokens but the context holds "
                        f"{record.error.n_ctx}: shorten it, or raise the context size in Settings and reload"
                    )
            self._show_error(message, trim=trim)
            self.status_changed.emit(upper_first(message))  # the same words as the box above
            return
        self.status_changed.emit(record.message)

    def _show_error(self, message: str, trim: bool, heading: str = "The answer could not start.") -> None:
        self.error.setText(f"<b>{heading}</b> {html.escape(upper_first(message))}")
        self.error.show()
        self.trim_button.setVisible(trim)

    def _hide_error(self) -> None:
        self.error.hide()
        self.trim_button.hide()

    def settings_changed(self) -> None:
        """A changed setting may be the fix the last error asked for (a tour cleared an unusable n-gram map and
        still read "The answer could not start" above a conversation that now answers): its advice is stale, and
        the next message checks again."""
        self._hide_error()

    def _on_input_submitted(self) -> None:
        self.send()

    def _render(self, streaming: bool = False) -> None:
        self.transcript.setHtml(render_transcript(self.conversation.messages, streaming))
        if streaming:
            cursor = QTextCursor(self.transcript.document())
            cursor.movePosition(QTextCursor.MoveOperation.End)
            # A plain paragraph of its own: not the heading's block (bold, and no break after "Assistant").
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
            self._stream_cursor = cursor
            self._stream_start = cursor.position()
            self._stream_next_render = 0.0
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
        # Not while Edit last has emptied it: the message being edited is in the box (a review's).
        self.examples.setVisible(not self.conversation.messages and self._taken is None)

    def set_models_state(self, loaded: bool, chosen: bool, loading: bool = False, reloading: str = "") -> None:
        """Say what to do first in an empty conversation: choose a pair, or type (the chosen pair loads on the
        first message if it is not loaded yet). ``reloading``: the changed settings a reload before the answer
        applies (the answer waits for it, and then reads the whole conversation again)."""
        waited = loaded and not self._models_ready and self.turn is not None and self._reading_timer.isActive()
        self._models_ready = loaded
        self._reloading = reloading  # the controller clears it when the load ends
        if waited:  # the wait for the load is over: count the prompt's own seconds, said at once
            self._reading_since = time.monotonic()
            self._show_reading()
        if loading:  # a reload (new context size, new models) makes the last refusal's advice stale (a tour's)
            self._hide_error()
        if loaded:
            text = "Type a message below and press Enter."
        elif loading:
            text = "Loading the models… Type a message below and press Enter: it is answered once they are loaded."
        elif chosen:
            text = "Type a message below and press Enter: the chosen models load first (Ctrl+L loads them now)."
        else:
            text = "Choose a model pair first (Models ▸ Models…, Ctrl+M), then type a message below."
        self.transcript.setPlaceholderText(text)

    def set_generation_running(self, running: bool) -> None:
        """Disable sending while another view's generation (a comparison) runs."""
        self.send_button.setEnabled(not running and not self.busy)
        self.compare_button.setEnabled(not running and not self.busy)
        self.regenerate_button.setEnabled(not running and not self.busy and bool(self.conversation.messages))


class ConversationList(QWidget):
    """Saved conversations, newest first; activating one opens it; rename and delete from its menu.

    Args:
        store: the saved conversations.
        parent: the Qt parent.

    Signals:
        conversation_activated(Conversation): the user picked one.
        conversation_deleted(Conversation, object): the user deleted one; the second, the conversation that takes its
            place in the list (``None``: it was the only one).
    """

    conversation_activated = Signal(object)
    conversation_deleted = Signal(object, object)

    def __init__(self, store: ConversationStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.current_id: str | None = None  # the conversation the chat shows (see show_current)
        self.list = QListWidget(self)
        self.list.setAccessibleName("Saved conversations")
        self.list.setWordWrap(True)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.itemActivated.connect(self._on_list_item_activated)
        self.list.itemClicked.connect(self._on_list_item_activated)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._on_list_context_menu)
        self.rename_button = QPushButton("Rename…", self)
        self.rename_button.setAccessibleName("Rename the selected conversation")
        self.rename_button.setToolTip("Rename the selected conversation (F2 in the list)")
        self.rename_button.clicked.connect(self.rename_selected)
        self.delete_button = QPushButton("Delete", self)
        self.delete_button.setAccessibleName("Delete the selected conversation")
        self.delete_button.setToolTip("Delete the selected conversation (Delete in the list)")
        self.delete_button.clicked.connect(self.delete_selected)
        # The buttons act on the selection: enabled only with one (a tour's did nothing with none).
        self.list.currentItemChanged.connect(self._update_buttons)
        for key, slot in ((QKeySequence(Qt.Key.Key_F2), self.rename_selected),
                          (QKeySequence(QKeySequence.StandardKey.Delete), self.delete_selected)):  # fmt: skip
            shortcut = QShortcut(key, self.list)
            shortcut.setContext(Qt.ShortcutContext.WidgetShortcut)
            shortcut.activated.connect(slot)
        buttons = QHBoxLayout()
        buttons.addWidget(self.rename_button)
        buttons.addWidget(self.delete_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.list)
        layout.addLayout(buttons)
        self.setMinimumWidth(200)
        # Saves come in bursts while streaming; redraw at most twice a second (from memory, not the disk).
        self._refresh_timer = QTimer(self)
        self._refresh_timer.setSingleShot(True)
        self._refresh_timer.setInterval(500)
        self._refresh_timer.timeout.connect(self.refresh)
        self._rows: list[tuple[str, str, str]] = []  # (id, text, tooltip) of the items shown
        self.refresh()

    def schedule_refresh(self) -> None:
        """Refresh soon (coalescing bursts)."""
        if not self._refresh_timer.isActive():
            self._refresh_timer.start()

    def show_current(self, conversation: Conversation) -> None:
        """Highlight the conversation the chat shows (none for a new one, until it is saved)."""
        self.current_id = conversation.id
        self.refresh()

    def refresh(self) -> None:
        """Redraw the list from the store."""
        selected = self.selected()
        wanted = self.current_id if self.current_id is not None else selected.id if selected is not None else None
        rows = []
        for conversation in self.store.conversations():
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(conversation.updated))
            # Conversations begun alike (a tour's two "Rewrite this function…") differ in their length and their
            # last question: the item says how many questions, and its tooltip the last one.
            asked = [m["content"] for m in conversation.messages if m.get("role") == "user"]
            count = f" · {len(asked)} question{'s' if len(asked) != 1 else ''}" if asked else ""
            last = " ".join(asked[-1].split()) if len(asked) > 1 else ""
            last = f"Last question: {last[:100]}{'…' if len(last) > 100 else ''}" if last else ""
            tip = "\n".join(filter(None, (conversation.title, last, conversation.pair)))
            rows.append((conversation.id, f"{conversation.title}\n{when}{count}", tip))
        # A streaming answer is saved every second, and each save asked for this: the same rows are not built again
        # (the window's thread takes a core from llama.cpp's, and a long list cost more with every conversation).
        if rows != self._rows:
            self._rows = rows
            self.list.clear()
            for conversation_id, text, tip in rows:
                item = QListWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, conversation_id)
                item.setToolTip(tip)
                self.list.addItem(item)
        row = next((i for i, (conversation_id, _t, _tip) in enumerate(rows) if conversation_id == wanted), -1)
        if self.list.currentRow() != row:
            self.list.setCurrentRow(row)
        if row < 0:  # none (a new chat, not saved yet)
            self.list.clearSelection()
        self._update_buttons()

    def _update_buttons(self) -> None:
        chosen = self.list.currentItem() is not None
        self.rename_button.setEnabled(chosen)
        self.delete_button.setEnabled(chosen)

    def selected(self) -> Conversation | None:
        """The selected conversation."""
        item = self.list.currentItem()
        return self.store.get(str(item.data(Qt.ItemDataRole.UserRole))) if item is not None else None

    def rename_selected(self) -> None:
        """Ask for a new title for the selected conversation."""
        conversation = self.selected()
        if conversation is None:
            return
        dialog = QInputDialog(self)
        dialog.setWindowTitle("Rename conversation")
        dialog.setLabelText("A new title for this conversation\n(empty: named after its first message again):")
        dialog.setTextValue(conversation.title)
        # Sized to its label, the dialog cut its own title bar short, and a long title scrolled in its box.
        metrics = dialog.fontMetrics()
        wanted = max(metrics.horizontalAdvance(conversation.title), metrics.horizontalAdvance("M" * 36)) + 60
        screen = self.screen().availableGeometry().width() if self.screen() is not None else wanted
        dialog.resize(min(wanted, screen * 2 // 3), dialog.sizeHint().height())
        if dialog.exec() == QInputDialog.DialogCode.Accepted:
            self.store.rename(conversation, dialog.textValue())
            self.refresh()

    def delete_selected(self) -> None:
        """Delete the selected conversation after asking."""
        conversation = self.selected()
        if conversation is None:
            return
        # No by default: Enter, pressed for the question, does not delete what cannot be undone (a tour's finding).
        answer = QMessageBox.question(
            self, "Delete conversation", f"Delete “{conversation.title}”? This cannot be undone.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No,
        )  # fmt: skip
        if answer == QMessageBox.StandardButton.Yes:
            ids = [conversation_id for conversation_id, _text, _tip in self._rows]
            at = ids.index(conversation.id) if conversation.id in ids else -1
            neighbours = [*ids[at + 1 :], *reversed(ids[:at])] if at >= 0 else []
            then = next((c for i in neighbours if (c := self.store.get(i)) is not None), None)
            self.store.delete(conversation)
            self.conversation_deleted.emit(conversation, then)
            self.refresh()

    def _on_list_context_menu(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        self.list.setCurrentItem(item)
        menu = QMenu(self)
        menu.addAction("Rename…", self.rename_selected)
        menu.addAction("Delete", self.delete_selected)
        menu.exec(self.list.viewport().mapToGlobal(pos))

    def _on_list_item_activated(self, item: QListWidgetItem) -> None:
        conversation = self.store.get(str(item.data(Qt.ItemDataRole.UserRole)))
        if conversation is not None:
            self.conversation_activated.emit(conversation)
