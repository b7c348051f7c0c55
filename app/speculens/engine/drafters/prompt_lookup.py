"""Prompt lookup decoding: continue the text the way an earlier occurrence of its end continued.

The draft is free (no model runs), and it pays off when the answer repeats the prompt: code edits,
summaries quoting their source, chat turns restating earlier ones. (Saxena, "Prompt Lookup Decoding", 2023;
llama.cpp's ``lookup`` example.)

Answers that *rewrite* their prompt are where it matters most, and where a plain n-gram lookup stumbles:
after a renamed identifier or a re-indented line the suffix n-gram no longer occurs, and in repetitive code
its most recent occurrence is often the wrong one. So the drafter here follows a copy as it goes:

* **alignment**: once the answer is copying from a position, the next draft continues from where the last
  one left off instead of looking the suffix up again;
* **substitutions**: when the answer departs from its source by one token and then follows the same copy
  again (an identifier renamed), the pair is learnt and applied to later drafts (``items`` → ``stock``), and
  forgotten as soon as the answer keeps the original. Neither a copy found elsewhere after the departure nor
  a departure inside a line of an edited kind (below) teaches one: ``,`` learnt as ``:`` from one annotated
  parameter would cut every later draft at every comma. A draft stops just before a substitution that has
  not yet been confirmed :data:`SUBST_TRUST` times, or whose replacement has varied (``var`` → ``const``
  here, ``let`` there): the target then decides that token itself, as the bonus of a fully accepted draft,
  instead of throwing away the rest of a long batch;
* **longer names**: a token renamed to two to :data:`LONGER_NAME` tokens (``cnt`` written `` item``
  ``_count``) is learnt the same way, when the copy resumes at the source token after it, and drafted whole.
  Punctuation is never renamed so (``items`` written ``stock: int`` has an annotation added), nor is a token
  with words inserted before it (``a`` written ``x, a``). Until one is learnt, a draft after two tokens of a
  departure guesses that the copy resumes there (confidence 0). At a line's first word a longer name is
  taken for a replaced first word (below) until the answer has written it the same way twice;
* **shorter names**: fewer tokens in place of up to :data:`LONGER_NAME` words (`` item`` ``_count`` written
  `` n``, or a typo corrected: `` tech`` ``ique`` written `` technique``), when the copy resumes just after
  them, are learnt as a substitution of the whole old name, which applies where all of it occurs (so
  `` user`` ``_id`` written `` uid`` and `` user`` ``_name`` written `` name`` are two names): a copy that goes
  through it as renamed goes on after its last token. A word deleted (`` a`` `` b`` written `` b``) is no new
  name. Any other departure the copy resumes after, a few tokens on, moves the copy there;
* **indentation-blind matching**: whitespace-only tokens match one another when a source is looked up, so a
  re-indented line still finds the original;
* **indentation shift**: when the answer indents a copied line deeper (or shallower) than its source, the
  difference in columns is applied to every indentation token drafted from then on, so a block wrapped in a
  ``with`` or ``try`` is drafted at its new depth at every nesting level, until the answer keeps a source
  line's indentation again;
* **edited kinds of line**: when the answer departs from a source line by more than one token (a parameter
  annotated, an argument added) the line's kind — its first token after the indentation, ``def`` here — is
  remembered, and until a line of that kind is copied whole again a draft stops at the end of the line
  before one, and a draft inside one is only a guess (confidence 0). A rewrite that annotates every
  signature otherwise offers long drafts from each function body straight into the next signature, and on a
  CPU, where a batch of 16 costs eight single steps, that failed batch costs more than the copy gained;
* **line by line**: the answer's lines are matched to the source lines they rewrite, and when a line ends
  the copy goes on at the source line after it (see ``_end_line``). After an edited line the text just
  written occurs only in the answer's own earlier edited lines, so a lookup would draft the body of the
  function before instead of this one's. For the same reason a departure *inside* a line (``print("`` written
  ``logging.error("``) resumes the copy in the source line being rewritten when the text just written occurs
  there, not where it last occurred (the answer's previous rewritten line, with another message). The
  indentation shift is then the one between these two lines, not one taken from where the suffix matched;
* **replaced first words**: when the answer writes a line's first word differently (more than a renamed
  token: ``print`` written ``logging.error``) and then goes on with the rest of that line, lines of that kind
  (``print``) are drafted up to their first word and no further: the target writes it. Once the answer has
  written as many tokens in its place as the last time, beginning with the same one (``logging``, then
  ``.info``, which no copy knows), the rest of the source line follows with confidence 2. A line of the kind
  that keeps its first word makes its lines copies again.

Each draft says how it was found (:attr:`Draft.confidence`): 4 continues a copy the answer has followed for
at least twice :data:`LONG_RUN` tokens, 3 for at least :data:`LONG_RUN`, 2 one it has just started
following (or the rest of a line after its replaced first word), 1 follows a copy across a single
substitution, resumes the source after an edited line or inside the line being rewritten, starts one from
a suffix of at least :data:`STRONG_MATCH` tokens, or goes through a longer name not yet confirmed (at most 1),
0 is a guess from a shorter match (or the source line after some other departure, or after what may be a
longer name). A copy of the answer's own earlier text never rises above 3, however long it has been
followed: a rewrite copies its prompt faithfully, but where an answer repeats itself (a type written out
again, with one more field) it departs from itself more often, and counting those copies with the prompt's
long ones would make the long drafts of the next copy of the prompt look riskier than they are (the held-out
TypeScript rewrite: its class-4 estimate read 0.86 per token when the function body began, all of whose copies
were accepted). Nor is a copy of the answer's own text that the answer has followed through whitespace alone (a
blank line and the indentation after it) more than a guess: a docstring's blank line before ``Returns:`` matched the
one before ``Args:``, and with confidence 2 two drafts of 15 tokens were rejected at their first (the suite's
code-generation prompt). And a copy just begun in a line of prose (see ``_prose``; the drafter must know the
symbols) is not a 2 but a class of its own, :data:`PROSE`: where a chat answers in prose after copying code, its
sentences share their first words with the earlier answers' ("In this solution, the variable…") and then go their
own way, while a copy just begun in code goes on for a line or more. Pooled, the code's copies made the prose's
look sure; in a recorded multi-turn rename, six drafts of 15 tokens were rejected within two tokens, and the
answer's prose ran slower than plain decoding. Its prior is lower than class 2's; a summary quoting its prompt
learns that its prose copies hold. For the same reason a copy of prose resumed across a departure (what is a 1
elsewhere: a substitution assumed) is :data:`PROSE_RESUMED`: in a follow-up that renamed a function and then
explained the change, class 1 had learnt from the code that a copy resumes after a renamed token, and eight drafts
of 15 tokens from the earlier answer's explanation were rejected at their first token. The adaptive controller
learns acceptance for each class separately, so it can speculate on the copies and decode plainly between them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from speculens.engine.drafters.base import EMPTY_DRAFT, Draft
from speculens.engine.vocab import VocabInfo

STRONG_MATCH = 3  # suffix tokens that make a fresh match worth confidence 1
LONG_RUN = 4  # tokens copied in a row that make a copy worth confidence 3 (twice as many: 4)
SUBST_TRUST = 2  # times a substitution must have been seen before drafts go through it
HEAD_KEPT = 2  # tokens of a line's rest the answer must keep for its replaced first word to count (see _end_line)
LONGER_NAME = 4  # the most tokens a renamed token is learnt as (`` cnt`` -> `` item`` ``_count``: two)
PROSE = 5  # the class of a copy just begun in a line of prose (see the module docstring)
PROSE_RESUMED = 6  # the class of a copy of prose resumed across a departure (1 elsewhere)
PROSE_WORDS = 8  # a line of at least this many word tokens, three for each other token, is prose
_WS = -1  # the key every whitespace-only token shares


@dataclass
class _Departure:
    """The answer departed from the copy it followed; what it wrote since, in case it was a rename to a longer
    name (the copy resuming at the source token after the replaced one: see ``_resumes``)."""

    at: int  # the source position the answer departed at
    written: list[int]  # the answer's tokens since
    run: int  # source tokens it had followed in a row before
    rename: bool  # whether it may be a rename: a word, after a copy followed, in a line of a kind not edited
    marked: int | None = None  # the kind of line its second token marked edited (undone by a resume)


class PromptLookupDrafter:
    """Drafts by copying from the earlier occurrence of the text's end that the answer is following.

    Args:
        ngram_max: the longest suffix looked up.
        ngram_min: the shortest suffix accepted as a match.
        whitespace: ids of whitespace-only tokens (indentation), which match one another in lookups.
        indent: the width in columns of each token that is only spaces, for the indentation shift.
        newlines: ids of the tokens that end a line (their text holds a line break), for the edited kinds of
            line (none: lines are not told apart).
        symbols: ids of the tokens with no letter or digit (punctuation), which are never renamed to a longer
            name: a comma the answer writes as ``: int,`` has a type annotation inserted before it.
    """

    name = "lookup"

    def __init__(
        self,
        ngram_max: int = 4,
        ngram_min: int = 1,
        whitespace: Collection[int] = (),
        indent: Mapping[int, int] | None = None,
        newlines: Collection[int] = (),
        symbols: Collection[int] = (),
    ) -> None:
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError("need 1 <= ngram_min <= ngram_max")
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self.indent = dict(indent or {})
        self.whitespace = frozenset(whitespace) | frozenset(self.indent)
        self._by_width = {w: i for i, w in sorted(self.indent.items(), reverse=True)}
        self.newlines = frozenset(newlines)
        self.symbols = frozenset(symbols)
        self.begin(())

    @classmethod
    def for_vocab(cls, vocab: VocabInfo) -> PromptLookupDrafter:
        """A drafter that knows this vocabulary's indentation and line breaks."""
        return cls(
            whitespace=vocab.whitespace_ids,
            indent=vocab.indent_widths,
            newlines=vocab.newline_ids,
            symbols=vocab.symbol_ids,
        )

    def begin(self, prompt: Sequence[int]) -> None:
        """Start a new index over the prompt."""
        self._history: list[int] = []
        self._keys: list[int] = []
        # key n-gram -> end (exclusive) of its latest occurrence; the current suffix is never its own match
        self._ends: dict[tuple[int, ...], int] = {}
        self._ptr: int | None = None  # the history position the answer is copying next
        self._run = 0  # tokens in a row that followed the copy
        self._miss = 0  # tokens in a row that did not
        self._followed = 0  # the run before the last miss
        # A source name -> the answer's replacement for it. A name is one token, or more for one renamed to a
        # shorter name (see _resumes): its substitution applies where the whole name occurs, and a copy through
        # it skips the rest (see _match and draft), so `` user`` ``_id`` and `` user`` ``_name`` are two names.
        self._subst: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._names: dict[int, list[tuple[int, ...]]] = {}  # first token -> the names in _subst, longest first
        self._trust: dict[tuple[int, ...], int] = {}  # source name -> times its substitution was seen
        self._unsure: set[tuple[int, ...]] = set()  # source names the answer has replaced in more than one way
        self._shift = 0  # columns the answer indents deeper than the source it copies
        # the last mismatch (source, answer tokens, the rest of the source name they replace): a substitution,
        # learnt if the copy resumes after it
        self._pending: tuple[int, tuple[int, ...], tuple[int, ...]] | None = None
        self._departure: _Departure | None = None  # the answer's departure from the copy, while it lasts
        # the rest of a longer name the answer has begun writing in place of the source name at _ptr - 1 on
        self._owed: tuple[int, ...] = ()
        self._name: tuple[int, ...] = ()  # the whole of that name (a substitution learnt meanwhile may differ)
        self._renamed: tuple[int, ...] = ()  # the source name it replaces
        self._resume = 0  # where the copy goes on once that name is written (past the source name)
        self._edited: set[int] = set()  # kinds of line (see _kind) the answer has edited, not just renamed in
        self._suspect: int | None = None  # the kind of the line of the last miss, edited if the next one misses
        self._heads: set[int] = set()  # kinds of line whose first word the answer replaces (see _end_line)
        # such a kind -> what the answer wrote in its first word's place: the first token and how many tokens
        self._replacement: dict[int, tuple[int, int]] = {}
        # The start of the source line whose first word the answer departed from by more than one token:
        # a replaced first word if the answer's line then goes on with the rest of that line.
        self._head: int | None = None
        self._head_miss: int | None = None  # the same after one token (a rename, if the copy resumes)
        # The source line the answer's current line rewrites, as (start, end) history positions (its line break
        # at ``end``); how many of the line's tokens (indentation aside) followed a copy, by the start of the
        # line they were copied from, and how many were copied from the answer's own other lines (see _end_line).
        self._line: tuple[int, int] | None = None
        self._kept: Counter[int] = Counter()
        self._own = 0
        self._realigned: int | None = None  # the confidence of a copy _end_line moved to a source line
        self._answer_from = len(prompt)
        self._extend(prompt)

    def _extend(self, history: Sequence[int]) -> None:
        n = len(self._history)
        if len(history) < n or list(history[:n]) != self._history:  # edited history: index again from scratch
            prompt_len = min(self._answer_from, len(history))
            self.begin(history[:prompt_len])
            n = len(self._history)
        for token in history[n:]:
            if len(self._history) >= self._answer_from:
                self._follow(token)
                if token in self.newlines:
                    self._end_line()
            self._history.append(token)
            self._keys.append(_WS if token in self.whitespace else token)
            end = len(self._keys) - 1
            for size in range(self.ngram_min, min(self.ngram_max, end) + 1):
                self._ends[tuple(self._keys[end - size : end])] = end

    def _indentation(self, position: int) -> bool:
        """Whether the history token at ``position`` indents a line: only spaces, at the start of a line (when
        line breaks are known; a space between two words is not indentation)."""
        history = self._history
        if history[position] not in self.indent:
            return False
        return not self.newlines or position == 0 or history[position - 1] in self.newlines

    def _expected(self, position: int) -> tuple[int, ...]:
        """What the answer is expected to write where its source, at history ``position``, has its token (more
        than one token for a name renamed to a longer one)."""
        source = self._history[position]
        if (name := self._name_at(position)) is not None:
            return self._subst[name]
        if self._shift and self._indentation(position):
            return (self._by_width.get(self.indent[source] + self._shift, source),)
        return (source,)

    def _occurs(self, name: tuple[int, ...], position: int) -> bool:
        """Whether the source name ``name`` occurs at history ``position`` (its first token is there)."""
        return len(name) == 1 or tuple(self._history[position : position + len(name)]) == name

    def _name_at(self, position: int) -> tuple[int, ...] | None:
        """The longest source name with a learnt substitution that occurs at history ``position``."""
        names = self._names.get(self._history[position])
        return next((n for n in names if self._occurs(n, position)), None) if names else None

    def _unsure_at(self, position: int) -> bool:
        """Whether a name the answer has replaced in more than one way occurs at history ``position``."""
        first = self._history[position]
        return any(n[0] == first and self._occurs(n, position) for n in self._unsure)

    def _learn(self, name: tuple[int, ...], new: tuple[int, ...]) -> None:
        """Substitute ``new`` for the source name ``name`` from now on (seen once); replaced otherwise before, it
        is unsure."""
        if self._subst.get(name, new) != new:
            self._doubt(name)
        if name not in self._subst:
            names = self._names.setdefault(name[0], [])
            names.append(name)
            names.sort(key=len, reverse=True)
        self._subst[name] = new
        self._trust[name] = 1

    def _forget(self, name: tuple[int, ...]) -> None:
        """The answer kept the source name ``name`` as it is: no more substitution for it."""
        self._doubt(name)
        del self._subst[name]
        self._names[name[0]].remove(name)

    def _doubt(self, name: tuple[int, ...]) -> None:
        """The answer replaced the source name ``name`` in more than one way (or kept it)."""
        self._unsure.add(name)

    def _follow(self, token: int) -> None:
        """Move the copy along with one token of the answer, learning substitutions."""
        realigned, self._realigned = self._realigned is not None, None
        if self._ptr is None or self._ptr >= len(self._history):
            self._ptr, self._owed = None, ()
            return
        if self._owed:  # inside a longer name learnt for the source token before _ptr
            if token == self._owed[0]:
                self._owed = self._owed[1:]
                if not self._owed:
                    self._confirmed(self._renamed)
                    self._ptr = self._resume
                return
            self._unwind()
        history = self._history
        if (
            (self._run > 0 or realigned)
            and (not history or history[-1] in self.newlines)
            and (self._ptr == 0 or history[self._ptr - 1] in self.newlines)
        ):
            self._line = self._source_line(self._ptr)  # the answer starts a line as a copy of this one
        source = history[self._ptr]
        expected = self._expected(self._ptr)
        if self._indentation(self._ptr) and token in self.indent and (token,) != expected:
            # Re-indented: the copy goes on at another depth, and so will the lines after it. The draft was
            # wrong here all the same: confidence starts again.
            self._shift = self.indent[token] - self.indent[source]
            self._followed = self._run
            self._run = 0
            self._miss = 1
            self._pending = self._departure = None
            self._ptr += 1
            return
        if token in (expected[0], source) or (self._departure is not None and self._resumes(self._departure, token)):
            self._match(token)
        else:
            self._mismatch(token)

    def _match(self, token: int) -> None:
        """The answer wrote what the copy had at ``_ptr`` (or the first token of the longer name learnt for it)."""
        assert self._ptr is not None
        history, ptr = self._history, self._ptr
        source, name, expected = history[ptr], self._name_at(ptr), self._expected(ptr)
        renamed = name is not None and token == expected[0] != source
        after = ptr + len(name) if renamed and name is not None else ptr + 1  # a renamed token: past its name
        if len(expected) > 1 and token == expected[0]:
            # trusted once written whole (see _follow)
            self._owed, self._name, self._renamed = expected[1:], expected, name or (source,)
            self._resume, after = after, ptr + 1
        elif token == source and name is not None and expected != (source,):
            self._forget(name)  # kept the original this time
        elif renamed and name is not None:
            self._trust[name] += 1
        if self._pending is not None and self._run == 0 and self._miss == 1 and self._followed >= 2:
            old, new, tail = self._pending
            self._learn((old, *tail), new)
        self._pending = self._departure = None
        self._suspect = self._head_miss = None
        if token == source and self._replaced_head(ptr):
            self._heads.discard(source)  # a line of this kind kept its first word
            self._replacement.pop(source, None)
        self._run += 1
        if source not in self.whitespace:  # indentation is shared by every line of a block: it tells nothing
            self._count_kept(ptr)
        self._miss = 0
        if source in self.newlines:
            start = self._line_start(ptr)
            if self._run > ptr - start:
                self._edited.discard(self._kind(start))  # a line of its kind was copied whole
        self._ptr = after

    def _mismatch(self, token: int) -> None:
        """The answer departed from the copy at ``_ptr``."""
        assert self._ptr is not None
        history, ptr = self._history, self._ptr
        source, start = history[ptr], self._line_start(ptr)
        dep = self._departure
        if self._miss == 0:
            # Only a copy that came into this line from the lines before, and kept to it past its first
            # word, tells what the answer does with lines of its kind: a lookup that picked the wrong line
            # tells nothing, nor does a line inserted before this one (a departure at its first word).
            followed = self._run >= ptr - start + LONG_RUN and ptr > self._first_word(start)
            self._suspect = self._kind(start) if followed else None
            # A departure at the first word of a line the copy came into (its indentation followed).
            at_head = ptr == self._first_word(start) and self._run >= ptr - start
            self._head_miss = start if at_head else None
        else:
            if self._suspect is not None:  # two misses in a row: more than a renamed token
                if dep is not None and self._suspect not in self._edited:
                    dep.marked = self._suspect
                self._edited.add(self._suspect)
                self._suspect = None
            if self._head_miss is not None:
                self._head, self._head_miss = self._head_miss, None
        # In a line of a kind the answer edits, a departure is an edit, not a renamed identifier.
        edit = bool(self._edited) and self._kind(start) in self._edited
        if self._miss == 0:
            dep = _Departure(ptr, [], self._run, rename=source not in self.symbols and not edit and self._run >= 2)
        if dep is not None:
            dep.written.append(token)
            dep.rename = dep.rename and token not in self.symbols  # "items" written "stock: int" is an edit
            if len(dep.written) > LONGER_NAME:
                dep = None
        self._departure = dep
        if (name := self._name_at(ptr)) is not None and not edit:
            self._doubt(name)  # replaced, but not as learnt
        if dep is not None and dep.rename:
            self._pending = (history[dep.at], tuple(dep.written), ())
        else:
            self._pending = None if edit else (source, (token,), ())
        self._followed = self._run if self._miss == 0 else 0
        self._run = 0
        self._miss += 1
        self._ptr = ptr + 1

    def _resumes(self, dep: _Departure, token: int) -> bool:
        """Whether ``token`` resumes the copy a few source tokens after the one the answer departed at, having
        written up to :data:`LONGER_NAME` tokens (words, not punctuation) in place of another number of them, and
        if so, go on there.

        * A rename to a longer name: two or more tokens in place of one (``cnt`` written `` item`` ``_count``).
          The replacement is pending as a substitution (learnt by :meth:`_match`, as a renamed token is), and
          what its second token marked (an edited kind of line) is undone unless the token was replaced
          otherwise before: then it is an edit after all (``print`` written ``logger.error`` here,
          ``logger.info`` there).
        * A rename to a shorter name: fewer tokens in place of more words (`` item`` ``_count`` written `` n``,
          or `` tech`` ``ique`` written `` technique``, a typo corrected). It is pending the same way, with the
          rest of the old name: the substitution applies where that follows the token, and a copy through the
          renamed token goes on after it (see :meth:`_match`). Not when the answer writes a token of the old
          name again (`` a`` `` b`` written `` b``: a word deleted).
        * Anything else: words inserted before the source's token (``a`` written ``x a``), or a replacement
          beginning or ending with punctuation. Nothing is learnt; the copy goes on rather than waiting for a
          lookup to find it again. Not on the answer's own earlier text.

        As many tokens in place of as many is the copy's own alignment (see :meth:`_mismatch`)."""
        history, n = self._history, len(dep.written)
        old = history[dep.at]
        if not dep.rename:
            return False  # an edit
        inserted = dep.written[-1] == old  # "x a": no longer name for "a"
        for skip in range(1, LONGER_NAME + 1):
            at = dep.at + skip
            if at >= len(history) or (skip > 1 and at >= self._answer_from):
                return False  # the answer's own earlier text departs from itself too often to realign on it
            if skip != n and (expected := self._expected(at)) and token == expected[0]:
                break
        else:
            return False
        new, tail = tuple(dep.written), tuple(history[dep.at + 1 : at])
        # The rest of a shorter name: words, none of them written again (`` a`` `` b`` written `` b``: a word
        # deleted, no new name).
        shorter = skip > n and not any(t in self.symbols or t in self.whitespace or t in new for t in (old, *tail))
        if not inserted and (skip == 1 or shorter):
            name = (old, *tail)
            if dep.marked is not None and self._subst.get(name, new) == new and name not in self._unsure:
                self._edited.discard(dep.marked)
            self._pending = (old, new, tail)
        else:
            self._pending = None
        self._ptr = at
        self._run, self._miss, self._followed = 0, 1, dep.run
        return True

    def _replaced_head(self, position: int) -> bool:
        """Whether history ``position`` holds the first word of its line, of a kind whose first word the answer
        replaces (see :meth:`_end_line`)."""
        return self._history[position] in self._heads and position == self._first_word(self._line_start(position))

    def _confirmed(self, name: tuple[int, ...]) -> None:
        """The answer wrote the longer name learnt for the source name ``name`` whole again. Once it has as often
        as a substitution needs to be trusted, and never otherwise, a line beginning with ``name`` is a line with a
        renamed first word, not one whose first word the answer writes its own way (``print`` written
        ``logger.error`` here and ``logger.info`` there, see :meth:`_end_line`): drafts go through it."""
        trust = self._trust[name] = self._trust.get(name, 0) + 1
        if trust >= SUBST_TRUST and name not in self._unsure:
            self._heads.discard(name[0])
            self._replacement.pop(name[0], None)

    def _unwind(self) -> None:
        """The answer began the longer name learnt for the source token before ``_ptr`` but wrote another token
        in it: what it wrote of the name departed from that token after all."""
        assert self._ptr is not None
        self._ptr -= 1
        name = self._name
        written, self._owed = name[: len(name) - len(self._owed)], ()
        self._run = max(0, self._run - 1)
        self._miss = 0
        for token in written:
            self._mismatch(token)

    def _jump(self, position: int | None) -> None:
        """Copy from history ``position`` on (``None``: nothing to copy), forgetting the departure in progress."""
        self._ptr = position
        self._pending = self._departure = None
        self._owed = ()

    def _count_kept(self, position: int) -> None:
        """The answer's current line followed a copy at history ``position``."""
        line = self._line
        if line is not None and line[0] <= position <= line[1]:
            self._kept[line[0]] += 1
        elif position < self._answer_from:
            self._kept[self._line_start(position)] += 1
        else:
            self._own += 1

    def _end_line(self) -> None:
        """The answer ended a line: the copy goes on at the source line the next one will rewrite.

        A rewrite goes through its source line by line, but an edited line (an annotated signature) leaves
        the copy elsewhere: its end occurs only in the answer's own earlier lines, so a lookup would go on
        with the body of the function before. So the answer's line counts as a rewrite of the source line it
        kept the most tokens of (indentation aside; ties go to the line it started as a copy of, L, then to
        the later line), and any lines between L and that one were dropped. But if that line is not L and the
        answer's line copied more tokens from the answer's own earlier lines, it was inserted (a logging
        call), and L is still to come. The copy goes on at the line after the one rewritten; a line that
        copied nothing at all ends the alignment."""
        line, kept, own = self._line, self._kept, self._own
        self._line, self._kept, self._own = None, Counter(), 0
        start = line[0] if line is not None else -1
        head, self._head, self._head_miss = self._head, None, None
        if head is not None and head == start and kept[start] >= HEAD_KEPT:
            kind = self._kind(start)  # print(...) -> logging.error(...): the rest of the line kept
            self._heads.add(kind)
            replacement = self._replaced_by(start)
            if replacement is None:
                self._replacement.pop(kind, None)
            else:
                self._replacement[kind] = replacement
        best = max(kept, key=lambda s: (kept[s], s == start, s)) if kept else -1
        if best >= 0 and (best == start or kept[best] >= own):
            nxt = self._source_line(best)[1] + 1
        elif line is not None and own:
            nxt = start
        else:
            return
        if nxt >= self._line_start(len(self._history)):  # the line the answer is ending: nothing to copy
            return
        self._line = self._source_line(nxt)
        if self._ptr != nxt:
            # After a line of a kind the answer edits, the next line is the source's (confidence 1); after
            # another departure, a guess (confidence 0: drafted, but learnt apart from the real copies).
            self._jump(nxt)
            self._realigned = 1 if line is not None and self._kind(start) in self._edited else 0
            self._run = self._miss = 0

    def _replaced_by(self, start: int) -> tuple[int, int] | None:
        """What the answer's current line wrote in place of the first word of the source line at ``start`` before
        going on with that line's next token: its first token and how many tokens (``None``: not within three)."""
        history = self._history
        head, answer = self._first_word(start), self._first_word(self._line_start(len(history)))
        if head + 1 >= len(history) or history[head + 1] in self.newlines or answer >= len(history):
            return None
        for n in range(1, 4):
            if answer + n < len(history) and history[answer + n] == history[head + 1]:
                return history[answer], n
        return None

    def _after_head(self) -> int | None:
        """Where the copy resumes in a line whose first word the answer replaces (``print`` -> ``logging.info``),
        once it has written as many tokens in its place as the last time, beginning as it did then: the source
        line's second token (-1 while it is still writing them)."""
        if self._line is None or not self._replacement:
            return None
        history, head = self._history, self._first_word(self._line[0])
        replacement = self._replacement.get(history[head]) if head < len(history) else None
        answer = self._first_word(self._line_start(len(history)))
        written = len(history) - answer
        if replacement is None or not 0 < written <= replacement[1] or history[answer] != replacement[0]:
            return None  # not this line's replaced first word: another line inserted here, say
        return head + 1 if written == replacement[1] else -1  # -1: the answer is still writing it

    def _source_line(self, position: int) -> tuple[int, int]:
        """The line of history from ``position`` (usually a line's start) to its end:
        ``(position, position of its line break)``."""
        history, end = self._history, position
        while end < len(history) - 1 and history[end] not in self.newlines:
            end += 1
        return position, end

    def _line_start(self, position: int) -> int:
        """The history position where the line holding ``position`` begins."""
        history, newlines = self._history, self.newlines
        i = position - 1
        while i >= 0 and history[i] not in newlines:
            i -= 1
        return i + 1

    def _first_word(self, start: int) -> int:
        """The history position of the first token after the indentation of the line beginning at ``start``."""
        history, i = self._history, start
        while i < len(history) and history[i] in self.whitespace and history[i] not in self.newlines:
            i += 1
        return i

    def _prose(self, position: int) -> bool:
        """Whether history ``position`` lies in a line of prose: many word tokens, little punctuation."""
        start, end = self._source_line(self._line_start(position))
        symbols = sum(1 for t in self._history[start:end] if t in self.symbols)
        words = end - start - symbols
        return words >= PROSE_WORDS and words >= 3 * symbols

    def _kind(self, start: int) -> int:
        """The kind of the line beginning at history position ``start``: its first token after the
        indentation (-1 for an empty line, or past the history's end)."""
        i = self._first_word(start)
        return self._history[i] if i < len(self._history) and self._history[i] not in self.newlines else -1

    def _align_indent(self, found: int, size: int) -> None:
        """A copy found across an indentation token of another width sets the shift from that pair."""
        history = self._history
        for i in range(1, size + 1):
            answer, source = history[-i], history[found - i]
            if self._indentation(len(history) - i) and self._indentation(found - i):
                self._shift = self.indent[answer] - self.indent[source]
                return

    def _lookup(self) -> tuple[int | None, int]:
        """The source position for the current suffix (its most recent earlier occurrence, longest suffix
        first), and the matched length."""
        keys = self._keys
        for size in range(min(self.ngram_max, len(keys)), self.ngram_min - 1, -1):
            end = self._ends.get(tuple(keys[-size:]))
            if end is not None:
                return end, size
        return None, 0

    def _line_indent(self) -> None:
        """The copy moved into the source line the answer's current line rewrites: the indentation shift is the
        one between these two lines (a shift taken from a match elsewhere, the answer's own earlier line at
        another depth, would re-indent the lines drafted after this one)."""
        assert self._line is not None
        answer = self._line_start(len(self._history))
        columns = [
            self.indent[self._history[p]] if p < len(self._history) and self._indentation(p) else 0
            for p in (answer, self._line[0])
        ]
        self._shift = columns[0] - columns[1]

    def _in_line(self, position: int) -> bool:
        """Whether history ``position`` lies in the source line the answer's current line rewrites."""
        return self._line is not None and self._line[0] <= position <= self._line[1]

    def _lookup_line(self) -> int | None:
        """Where the current suffix (the longest, up to ``ngram_max`` tokens; indentation alone is no match)
        first occurs in the source line the answer's current line rewrites: the position after it."""
        if self._line is None:
            return None
        keys, (start, end) = self._keys, self._line
        if end >= self._line_start(len(keys)):  # the answer's own current line
            return None
        for size in range(min(self.ngram_max, len(keys) - 1), 0, -1):
            suffix = keys[-size:]
            if size == 1 and suffix[0] == _WS:
                break
            for after in range(start + size, end + 1):
                if keys[after - size : after] == suffix:
                    return after
        return None

    def draft(self, history: Sequence[int], n_max: int) -> Draft:
        """Continue the copy, or find a new one for the current suffix."""
        self._extend(history)
        if n_max <= 0:
            return EMPTY_DRAFT
        confidence = 4 if self._run >= 2 * LONG_RUN else 3 if self._run >= LONG_RUN else 2
        guess = None  # where a draft guesses the copy resumes, while the copy itself waits (see _resumes)
        if self._run == 0 and self._realigned is None:
            found, size = self._lookup()
            dep = self._departure
            if (here := self._after_head()) == -1:
                return EMPTY_DRAFT  # logging.info: ".info" is the answer's, and "(" comes after it, not now
            if here is not None:
                self._jump(here)
                self._line_indent()
                confidence = 2  # as sure as a copy just begun: the line goes on as it did the last time
            elif self._ptr is not None and self._miss == 1 and self._followed >= 2 and size < STRONG_MATCH:
                confidence = 1  # one token differed: assume a substitution and keep copying
            elif (here := self._lookup_line()) is not None and (found is None or not self._in_line(found)):
                # The answer departed inside a line it rewrites (print(...) -> logging.error(...)): the rest is that
                # source line's, not what followed the suffix's latest occurrence, which is often the answer's
                # own earlier edited line, with another message.
                self._jump(here)
                self._line_indent()
                confidence = 1
            elif dep is not None and dep.rename and size < STRONG_MATCH and self._history[dep.at] not in self._heads:
                # Maybe a name renamed to a longer one (cnt -> item_count): a guess that the copy resumes after
                # it. The copy itself stays where it is until the answer shows it (see _resumes). Not where the
                # answer replaces a first word (print) otherwise: that is a line inserted before this one.
                guess, confidence = dep.at + 1, 0
            elif found is not None:
                self._jump(found)
                confidence = 1 if size >= STRONG_MATCH else 0
                self._align_indent(found, size)
            else:
                self._jump(None)
        elif 0 < self._run < LONG_RUN and not self._owed and self._ptr is not None and not self._in_line(self._ptr):
            # A copy just found elsewhere, while the answer's line rewrites a source line that has the same
            # text: the source line's continuation is the likelier (the answer's own earlier edited line
            # shares its first words, logging.error(", but not its message).
            here = self._lookup_line()
            if here is not None:
                self._jump(here)
                self._run = 0
                self._line_indent()
                confidence = 1
        if self._realigned is not None:
            confidence = self._realigned
        ptr = self._ptr if guess is None else guess
        if ptr is None:
            return EMPTY_DRAFT
        owed = self._owed
        if owed:
            renamed = self._renamed  # the answer is writing the longer name learnt for it
            if renamed in self._unsure or self._replaced_head(ptr - 1):
                return EMPTY_DRAFT  # replaced in more than one way, or maybe so: the target decides how
            if self._trust.get(renamed, 0) < SUBST_TRUST:
                confidence = min(confidence, 1)  # its first confirmation
        if ptr >= self._answer_from:
            confidence = min(confidence, 3)  # the answer repeating itself: see the module docstring
            if 0 < self._run < LONG_RUN and all(t in self.whitespace for t in self._history[-self._run :]):
                confidence = 0  # followed through a blank line and indentation only: see the module docstring
        if confidence in (1, 2) and self.symbols and self._prose(ptr):
            confidence = PROSE if confidence == 2 else PROSE_RESUMED  # learnt apart: see the module docstring
        history = self._history
        just_replaced = self._pending[0] if self._pending is not None else None  # maybe a substitution
        edited = self._edited
        inside = bool(edited) and self._kind(self._line_start(ptr)) in edited
        if inside:
            confidence = 0  # the answer rewrites lines of this kind: copying one is a guess
        tokens = list(owed)
        at = self._resume if owed else ptr
        while at < len(history) and len(tokens) < n_max:
            t, name = history[at], self._name_at(at)
            if t == just_replaced or self._unsure_at(at) or (name is not None and self._trust[name] < SUBST_TRUST):
                break  # maybe a substitution, or not yet trusted: the target decides this one
            if self._replaced_head(at):
                break  # the answer replaces this kind of line's first word: the target writes it
            tokens += self._subst[name] if name is not None else self._expected(at)
            if t in self.newlines and edited and (inside or self._kind(at + 1) in edited):
                break  # the next line is of an edited kind (or this one was): stop here
            at += len(name) if name is not None else 1  # past the rest of a name renamed to a shorter one
        tokens = tokens[:n_max]
        if not tokens:
            return EMPTY_DRAFT
        return Draft(tuple(tokens), confidence=confidence)

    def end(self, history: Sequence[int]) -> None:
        """Nothing to persist."""
