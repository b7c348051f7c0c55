"""The colour-coded token stream of one answer.

Each step's tokens are appended at the end of a read-only ``QPlainTextEdit`` (its layout is incremental,
unlike ``QTextEdit``'s, which is what keeps a 20,000-token answer responsive). Rejected drafts are inserted
in place, struck through, before the target's correction. Per-token facts for the tooltips live in two
parallel lists (start offset, info) searched with ``bisect`` rather than in per-token character formats,
so the document only ever holds a handful of distinct formats.
"""

from __future__ import annotations

import bisect
import codecs
import dataclasses
import enum
import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtGui import QColor, QFont, QHelpEvent, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QToolTip, QWidget

from speculens.engine.events import (
    SHORT_ANSWER_STEPS,
    SOURCE_NAMES,
    best_weighed,
    draft_model_sat_out,
    free_drafts_declined,
    keep_chance,
    unread_words,
)
from speculens.words import and_list, percent

if TYPE_CHECKING:
    from speculens.engine.events import StepEvent


class TokenKind(enum.Enum):
    """How a token got into (or was kept out of) the answer."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    CORRECTION = "correction"
    BONUS = "bonus"
    TARGET = "target"


# (label, background RGBA, foreground or None, struck through). Backgrounds are translucent so that the
# same colours read on a light and a dark palette.
KIND_STYLE: dict[TokenKind, tuple[str, tuple[int, int, int, int], str | None, bool]] = {
    TokenKind.ACCEPTED: ("accepted draft", (46, 160, 67, 90), None, False),
    TokenKind.REJECTED: ("rejected draft", (215, 58, 73, 40), "#d73a49", True),
    TokenKind.CORRECTION: ("target correction", (235, 140, 0, 120), None, False),
    TokenKind.BONUS: ("target bonus", (56, 132, 255, 105), None, False),
    TokenKind.TARGET: ("target (no draft)", (128, 128, 128, 0), None, False),
}




def drafting_from(strategy: str, draft_idle: bool = False) -> str:
    """An answer's draft sources (the engine's "lookup+ngram-cache+draft") in words: "Drafting from prompt lookup,
    the n-gram cache and the draft model", or "Plain decoding" (a tour read the engine's name in the live panel
    beside the toolbar's "lookup, n-gram cache"). A draft model the controller keeps idle (``draft_idle``) is said
    to sit out, not to draft."""
    names = [
        SOURCE_NAMES.get(name, name)
        for name in strategy.split("+")
        if name and name != "none" and not (draft_idle and name == "draft")
    ]
    said = "Drafting from " + and_list(names) if names else "Plain decoding"
    return f"{said} (the draft model sits out: it cannot pay on this machine)" if draft_idle else said


def nothing_drafted(strategy: str, best: tuple[float, str] | None) -> str:
    """Why an answer verified no draft, in a phrase for its figures (``best``: see :func:`best_weighed`)."""
    if strategy == "none":
        return "plain decoding"
    if best is None:
        return "nothing drafted: no source found a draft"
    rate, source = best
    if rate >= 1.0:
        return "nothing drafted: the adaptive controller held speculation back (see Teach)"
    if source == "draft":  # it costs time to draft: it may lose even when it is often right
        why = ": drafting and checking cost more than its right tokens save"
        return f"nothing drafted: {_draft_would_not_pay(rate, why)}"
    # A free source loses only by drafting wrong tokens, whose checking costs more than the right ones save. Its
    # drafts are scored against the answer as it comes without being verified: a tour read "drafts were not right
    # often enough" beside "0 of 0 drafted" and asked how.
    return f"nothing drafted: {free_drafts_declined(source, rate)}"


def draft_model_idle(strategy: str, steps: Sequence[StepEvent], unread: int = 0) -> str:
    """Why the draft model drafted nothing (or only probed) in an answer where other sources did, in a phrase for its
    figures (a tour read "drafted by prompt lookup" under every answer of the demo pair and could not tell why the
    draft model it had loaded never drafted); empty when it drafted, or was not loaded. ``unread``: the prompt tokens
    it was not given (:func:`~speculens.engine.events.draft_model_unread`)."""
    if unread:
        return f"; the draft model sat out ({unread_words(unread)})"
    # Probes draft to re-measure, not because drafting paid (a tour read "drafted by the draft model" under an
    # answer whose draft model had only probed, 0% accepted, and took the pair for broken).
    rate = draft_model_sat_out(strategy, steps)
    # Scoped to the draft model, on its own: a tour read "the draft model would not pay on this answer (×0.72 of
    # plain decoding at best)" under an answer prompt lookup had made 2.6 times faster as a verdict on the answer.
    return "" if rate is None else (
        f"; the draft model sat out (on its own it would have run at ×{rate:.2f} of plain decoding at best; "
        f"{WATCH_IT_DRAFT})"
    )


def drafts_phrase(
    strategy: str, steps: Sequence[StepEvent], n_drafted: int, n_accepted: int, by: str = "", unread: int = 0
) -> str:
    """An answer's drafting in a phrase for its figures: its acceptance and what it is of, or why nothing was
    drafted; and why a loaded draft model drafted nothing, where it did not (a tour's demo answers blamed prompt
    lookup under the chat, and never said that the draft model it had loaded could not pay on this machine).
    ``by``: words that follow the acceptance (which sources drafted); ``unread``: see :func:`draft_model_idle`."""
    if n_drafted:
        acceptance = f"acceptance {percent(n_accepted, n_drafted)} ({n_accepted} of {n_drafted} drafted)"
        return acceptance + by + draft_model_idle(strategy, steps, unread)
    if strategy != "none" and len(steps) < SHORT_ANSWER_STEPS:
        return "nothing drafted"
    best = None
    for step in steps:
        # A draft model kept from the prompt was weighed with its catch-up on all of it: "×0.01 at best" beside the
        # real reason (unread) told nothing true about the model.
        if not (unread and step.considered == "draft"):
            best = best_weighed(step, best)
    if unread and best is None:  # the draft model was the only source weighed
        return "nothing drafted" + draft_model_idle(strategy, steps, unread)
    said = nothing_drafted(strategy, best)
    if best is not None and best[1] == "draft":
        return said
    return said + draft_model_idle(strategy, steps, unread)


def _draft_would_not_pay(rate: float, why: str = "") -> str:
    """The one wording of a draft model that loses to plain decoding, with ``why`` inside its brackets, and how to
    see it draft anyway (a tour could not make the demo draft model draft, and nothing said that Adaptive held it).
    Said of the answer, from the rates the controller weighed in it: "on this machine" read as a verdict that the
    toolbar, judging from the costs at load, did not always share (a tour's)."""
    best = f"×{rate:.2f} of plain decoding at best{why}"
    return f"the draft model would not pay on this answer ({best}; {WATCH_IT_DRAFT})"


WATCH_IT_DRAFT = "untick Adaptive in Settings to watch it draft anyway"


# Shown for a rejected draft token with no text (an end-of-answer token, say): counted in the legend, it must be
# seen in the text too.
NO_TEXT = "∅"


def token_html(text: str) -> str:
    """A token's text for rich text: line breaks as ⏎ and tabs as ⇥, as in the token view; in a token of whitespace
    alone (code's indentation) each space as ␣, and other spaces kept. HTML collapses spaces, so Compare's first
    differing token read «  » against «  » where one was four spaces and the other three."""
    marked = text.replace("\n", "⏎").replace("\t", "⇥")
    if not marked.strip("⏎⇥ "):
        marked = marked.replace(" ", "␣")
    return html.escape(marked).replace(" ", "&nbsp;")


@dataclass(frozen=True)
class TokenInfo:
    """What the tooltip says about one token.

    Attributes:
        kind: accepted, rejected, correction, bonus or plain target.
        text: the token's text as shown.
        step: the speculation step that produced it.
        draft_prob: the drafter's probability (``None`` for draft-free sources and target tokens).
        target_prob: the target's probability for a drafted token it judged.
        source: the drafter that proposed it (drafted tokens: ``lookup``, ``ngram-cache``, ``draft``, ...).
    """

    kind: TokenKind
    text: str
    step: int
    draft_prob: float | None = None
    target_prob: float | None = None
    source: str | None = None
    sampled: bool = False

    def tooltip(self) -> str:
        """A short, plain description for a tooltip."""
        shown = token_html(self.text) or (
            # A drafted token's own piece: empty only for a special token (the emitted stream's are decoded
            # together, where a piece can be the first bytes of a character shown with the next).
            f"{NO_TEXT} (a special token with no text, such as the end of the answer)"
            if self.kind is TokenKind.REJECTED
            else "(part of a character)"
        )
        lines = [f"<b>{shown}</b> — {KIND_STYLE[self.kind][0]}", f"step {self.step}"]
        if self.source is not None:
            lines.append(f"drafted by {SOURCE_NAMES.get(self.source, self.source)}")
        if self.draft_prob is not None:
            lines.append(f"draft probability {self.draft_prob:.3f}")
        if self.target_prob is not None:
            lines.append(f"target probability {self.target_prob:.3f}")
        if self.kind in (TokenKind.ACCEPTED, TokenKind.REJECTED):
            lines.append(self._verdict())
        return "<br>".join(lines)

    def _verdict(self) -> str:
        """How the target judged a drafted token: by comparing its own choice (greedy), or in a sampled answer by a
        draw (a tour's tooltip read "target probability 0.657, rejected by the target", and a token the target gave
        66% looked wrongly refused)."""
        accepted = self.kind is TokenKind.ACCEPTED
        p, q = self.target_prob, self.draft_prob
        if not self.sampled:
            return "accepted by the target" if accepted else "rejected by the target"
        if p is not None and q:  # rejection sampling
            return f"{keep_chance(p, q)}: the draw {'kept' if accepted else 'rejected'} it"
        # A free source's draft, sampled: kept while the target's own sample is the same token.
        if accepted:
            return "accepted: the target's own sample here was this token"
        return "rejected: the target's own sample here was another token"


def step_tokens(event: StepEvent, sampled: bool = False) -> list[TokenInfo]:
    """The tokens a step shows, in display order: accepted drafts, rejected drafts, then the target's token.
    ``sampled``: the answer samples, so its drafts were kept by draws (see :meth:`TokenInfo.tooltip`).

    Text is decoded per token with replacement here; :class:`TokenView` decodes the emitted stream
    incrementally instead, so characters split across tokens come out whole.
    """
    from speculens.engine.events import Origin

    out: list[TokenInfo] = []
    origin_kind = {
        Origin.ACCEPTED: TokenKind.ACCEPTED,
        Origin.CORRECTION: TokenKind.CORRECTION,
        Origin.BONUS: TokenKind.BONUS,
        Origin.TARGET: TokenKind.TARGET,
    }
    n_accepted = sum(1 for d in event.drafted if d.accepted)
    emitted = list(event.emitted)
    for i, token in enumerate(emitted[:n_accepted]):
        d = event.drafted[i]
        out.append(
            TokenInfo(
                origin_kind[token.origin],
                _decode(token.piece),
                event.step,
                d.draft_prob,
                d.target_prob,
                event.source,
                sampled,
            )
        )
    # The answer can end inside the accepted drafts (end of generation, a stop string, the token limit): the
    # drafts after its end are not part of it, rejected or not.
    rejected = event.drafted[n_accepted:] if len(emitted) >= n_accepted else ()
    for d in rejected:
        out.append(
            TokenInfo(
                TokenKind.REJECTED, _decode(d.piece), event.step, d.draft_prob, d.target_prob, event.source, sampled
            )
        )
    for token in emitted[n_accepted:]:
        out.append(TokenInfo(origin_kind[token.origin], _decode(token.piece), event.step))
    return out


def _decode(piece: bytes) -> str:
    return piece.decode("utf-8", errors="replace")


def shown_text(info: TokenInfo) -> str:
    """A token's text as the view shows it: a rejected draft's line breaks are shown, not made, so the answer's own
    lines (and a code block's indentation) stay as it wrote them, in the panel and in the export alike. A
    correction's or bonus token's line break is marked before it is made: its colour, on a line's end, showed
    nothing (a tour read "target correction 1" in the legend and found no orange in the text)."""
    if info.kind is TokenKind.REJECTED:
        return info.text.replace("\n", "⏎") or NO_TEXT
    if info.kind in (TokenKind.CORRECTION, TokenKind.BONUS):
        return info.text.replace("\n", "⏎\n")
    return info.text


class TokenView(QPlainTextEdit):
    """A read-only view that appends colour-coded tokens and explains each one on hover.

    Args:
        parent: the Qt parent.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)  # the undo stack would keep a copy of every insertion
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setAccessibleName("Answer tokens")
        self.setAccessibleDescription("The answer's tokens coloured by where they came from; hover for details")
        font = QFont("monospace")
        font.setStyleHint(QFont.StyleHint.Monospace)
        self.setFont(font)
        self._formats = {kind: self._make_format(kind) for kind in TokenKind}
        self._alt_formats = {kind: self._make_format(kind, alternate=True) for kind in TokenKind}
        self._starts: list[int] = []
        self._infos: list[TokenInfo] = []
        self._answer: list[int] = []  # the index in _infos of each of the answer's tokens (rejected drafts are not)
        self._counts = dict.fromkeys(TokenKind, 0)
        self._end = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.sampled = False  # the answer shown samples (see step_tokens)

    @staticmethod
    def _make_format(kind: TokenKind, alternate: bool = False) -> QTextCharFormat:
        _label, rgba, foreground, strike = KIND_STYLE[kind]
        fmt = QTextCharFormat()
        r, g, b, a = rgba
        if a:
            # Neighbouring tokens of one kind alternate two shades, so token boundaries stay visible.
            fmt.setBackground(QColor(r, g, b, int(a * 0.6) if alternate else a))
        if foreground:
            fmt.setForeground(QColor(foreground))
        fmt.setFontStrikeOut(strike)
        return fmt

    @property
    def counts(self) -> dict[TokenKind, int]:
        """How many tokens of each kind are shown."""
        return dict(self._counts)

    @property
    def infos(self) -> list[TokenInfo]:
        """Every token shown, in order."""
        return list(self._infos)

    def clear_tokens(self, sampled: bool = False) -> None:
        """Remove everything (a new answer starts; ``sampled``: it samples, see :func:`step_tokens`)."""
        self.sampled = sampled
        self.clear()
        self._starts.clear()
        self._infos.clear()
        self._answer.clear()
        self._counts = dict.fromkeys(TokenKind, 0)
        self._end = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def append_steps(self, events: Iterable[StepEvent]) -> None:
        """Append the tokens of some steps at the end, in one edit block."""
        scrollbar = self.verticalScrollBar()
        follow = scrollbar.value() >= scrollbar.maximum() - 4
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.beginEditBlock()
        for event in events:
            self._append_step(cursor, event)
        cursor.endEditBlock()
        if follow:
            scrollbar.setValue(scrollbar.maximum())

    def _append_step(self, cursor: QTextCursor, event: StepEvent) -> None:
        emitted = iter(event.emitted)
        for info in step_tokens(event, self.sampled):
            if info.kind is not TokenKind.REJECTED:
                # Emitted tokens go through the stream's decoder: a character split across two tokens
                # shows once, whole, on the second.
                text = self._decoder.decode(next(emitted).piece)
                info = dataclasses.replace(info, text=text)
            self._insert(cursor, info, shown_text(info))

    def _insert(self, cursor: QTextCursor, info: TokenInfo, text: str) -> None:
        index = len(self._infos)
        fmt = (self._alt_formats if index % 2 else self._formats)[info.kind]
        self._starts.append(self._end)
        if info.kind is not TokenKind.REJECTED:
            self._answer.append(index)
        self._infos.append(info)
        self._counts[info.kind] += 1
        if text:
            cursor.insertText(text, fmt)
            # Document positions count UTF-16 units (an emoji is two); a paragraph break is one, like "\n".
            self._end += len(text.encode("utf-16-le")) // 2

    def mark_answer_token(self, n: int) -> bool:
        """Underline the answer's ``n``-th token (0-based; rejected drafts are not the answer's) in red and scroll to
        it: where Compare's two answers part (a tour searched two long answers for it by eye). ``False`` where the
        answer has no such token (it ended there)."""
        if not 0 <= n < len(self._answer):
            return False
        i = self._answer[n]
        start = self._starts[i]
        end = self._starts[i + 1] if i + 1 < len(self._starts) else self._end
        end = max(end, min(start + 1, self._end))  # the first bytes of a character: shown with the next token
        cursor = QTextCursor(self.document())
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        fmt = QTextCharFormat()
        fmt.setFontUnderline(True)
        fmt.setUnderlineColor(QColor("#d73a49"))
        fmt.setFontWeight(QFont.Weight.Bold)
        cursor.mergeCharFormat(fmt)
        cursor.setPosition(start)
        self.setTextCursor(cursor)
        self.ensureCursorVisible()
        return True

    def answer_token_at_top(self) -> int | None:
        """The answer's token (0-based, as :meth:`mark_answer_token` counts) on the view's top line, or ``None``
        when the view is empty."""
        if not self._answer:
            return None
        i = bisect.bisect_right(self._starts, self.cursorForPosition(QPoint(0, 0)).position()) - 1
        return min(bisect.bisect_left(self._answer, i), len(self._answer) - 1)

    def scroll_to_answer_token(self, n: int) -> None:
        """Scroll so that the line of the answer's ``n``-th token (the last one, past the end) is the top one."""
        if not self._answer:
            return
        position = self._starts[self._answer[min(n, len(self._answer) - 1)]]
        block = self.document().findBlock(position)
        line = block.layout().lineForTextPosition(position - block.position())
        # A plain text view scrolls by lines of its layout, wrapped lines included.
        self.verticalScrollBar().setValue(block.firstLineNumber() + max(line.lineNumber(), 0))

    def token_at(self, position: int) -> TokenInfo | None:
        """The token covering a document position, or ``None``."""
        if not self._starts or position >= self._end:
            return None
        i = bisect.bisect_right(self._starts, position) - 1
        return self._infos[i] if i >= 0 else None

    def event(self, event: QEvent) -> bool:
        """Show the token's tooltip on hover."""
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            cursor = self.cursorForPosition(self.viewport().mapFromGlobal(event.globalPos()))
            rect = self.cursorRect(cursor)
            pos = cursor.position()
            # cursorForPosition gives the nearest gap; step back when the mouse is left of it.
            viewport_x = self.viewport().mapFromGlobal(event.globalPos()).x()
            if viewport_x < rect.x() and pos > 0:
                pos -= 1
            info = self.token_at(pos)
            if info is not None:
                QToolTip.showText(event.globalPos(), info.tooltip(), self)
            else:
                QToolTip.hideText()
            return True
        return super().event(event)

    def html_fragment(self) -> str:
        """The legend and the coloured tokens, as HTML to put in a page (the export's)."""
        spans = []
        for info in self._infos:
            _label, (r, g, b, a), foreground, strike = KIND_STYLE[info.kind]
            style = f"background: rgba({r},{g},{b},{a / 255:.2f});"
            if foreground:
                style += f" color: {foreground};"
            if strike:
                style += " text-decoration: line-through;"
            # The tooltip is rich text: its tags go and its entities become characters before the attribute's own
            # escaping (a tour's export read "&nbsp;Below" in a browser: escaped twice).
            plain = html.unescape(info.tooltip().replace("<br>", " · ").replace("<b>", "").replace("</b>", ""))
            tip = html.escape(plain, quote=True)
            text = html.escape(shown_text(info))
            spans.append(f'<span class="{info.kind.value}" style="{style}" title="{tip}">{text}</span>')
        legend = " ".join(
            f'<span style="background: rgba({r},{g},{b},{a / 255:.2f});{" color:" + fg + ";" if fg else ""}'
            f'{" text-decoration: line-through;" if s else ""} padding: 0 4px">{html.escape(label)}</span>'
            for label, (r, g, b, a), fg, s in KIND_STYLE.values()
        )
        return (
            f"<p>{legend}</p>\n<pre style='white-space: pre-wrap; font-family: monospace'>{''.join(spans)}</pre>\n"
        )


class TokenLegend(QLabel):
    """The colour key with a count per kind, wrapped between kinds where the panel is narrow: the counts grow with
    the answer, and a legend that kept to one row would widen the dock, and the window, with every digit.

    Args:
        parent: the Qt parent.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setWordWrap(True)
        self.setToolTip("The colour of each kind of token in the answer, and how many it has")
        self.set_counts(dict.fromkeys(TokenKind, 0))

    def set_counts(self, counts: dict[TokenKind, int]) -> None:
        """Show the counts next to the colours."""
        items = []
        for kind, (label, (r, g, b, a), fg, strike) in KIND_STYLE.items():
            alpha = max(a, 60) / 255
            style = f"background-color: rgba({r},{g},{b},{alpha:.2f}); padding: 1px 4px;"
            if fg:
                style += f" color: {fg};"
            if strike:
                style += " text-decoration: line-through;"
            name = html.escape(label).replace(" ", "&nbsp;")  # a line breaks between kinds, never inside one
            items.append(f'<span style="{style}">{name}</span>&nbsp;{counts.get(kind, 0)}')
        self.setText(" &nbsp; ".join(items))
        self.setAccessibleName("Legend: " + ", ".join(f"{counts.get(k, 0)} {s[0]}" for k, s in KIND_STYLE.items()))
