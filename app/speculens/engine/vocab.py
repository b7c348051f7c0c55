"""Vocabulary facts and the check that a draft can speak for a target.

Draft-model speculation compares token ids, so the draft must use the target's vocabulary. The rules are
llama.cpp's (``common_speculative_are_compatible``): same vocabulary type, same BOS/EOS handling, sizes within
a small tolerance, and identical token texts from the first ordinary token on.
"""

from __future__ import annotations

import functools
import hashlib
import io
import re
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload

from speculens.errors import InvalidInputError

# llama.cpp tolerates this much difference in vocabulary size (SPEC_VOCAB_MAX_SIZE_DIFFERENCE) ...
MAX_VOCAB_SIZE_DIFFERENCE = 128
# ... and starts comparing token texts here (SPEC_VOCAB_CHECK_START_TOKEN_ID), past the usual special ids.
CHECK_START_TOKEN_ID = 5

VOCAB_TYPE_NAMES = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLaMo-2"}


class TokenTexts(Sequence[str]):
    """Token texts by id, kept as one string and the end offset of each text.

    A tuple of 151,936 small ``str`` objects (Qwen2.5's vocabulary) takes 12 MB; this takes 2.5 MB, and a
    target with its draft holds two vocabularies for as long as they are loaded.
    """

    __slots__ = ("_ends", "_text")

    def __init__(self, texts: Iterable[str]) -> None:
        buf, ends, end = io.StringIO(), array("I"), 0
        for text in texts:
            end += buf.write(text)
            ends.append(end)
        self._text, self._ends = buf.getvalue(), ends

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...
    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        end = self._ends[i]  # raises IndexError past the end; a negative id counts from the end
        i = i % len(self._ends)
        return self._text[self._ends[i - 1] if i else 0 : end]

    def __iter__(self) -> Iterator[str]:
        start = 0
        for end in self._ends:
            yield self._text[start:end]
            start = end

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenTexts):
            return self._ends == other._ends and self._text == other._text
        if isinstance(other, tuple | list):
            return list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:  # not a tuple's hash: equal to a tuple of the same texts, but never mixed with one
        return hash(self._text)

    def same_from(self, other: TokenTexts, start: int) -> bool:
        """Whether the texts from id ``start`` on are the same in both (compared as a whole, fast)."""
        n = min(len(self), len(other))
        if start >= n:
            return True
        a0 = self._ends[start - 1] if start else 0
        b0 = other._ends[start - 1] if start else 0
        a1, b1 = self._ends[n - 1], other._ends[n - 1]
        if a1 - a0 != b1 - b0 or self._text[a0:a1] != other._text[b0:b1]:
            return False
        return all(x - a0 == y - b0 for x, y in zip(self._ends[start:n], other._ends[start:n], strict=True))


@dataclass(frozen=True)
class VocabInfo:
    """A model's vocabulary.

    Attributes:
        vocab_type: llama.cpp's ``llama_vocab_type`` (1 SPM, 2 BPE, ...).
        n_vocab: number of tokens.
        bos: beginning-of-sequence id (-1 if none).
        eos: end-of-sequence id (-1 if none).
        eog: every end-of-generation id (EOS, EOT, ...).
        add_bos: whether tokenization starts with BOS.
        add_eos: whether tokenization ends with EOS.
        texts: the token texts by id (kept as :class:`TokenTexts`).
        special: ids of control/unknown/user-defined tokens.
    """

    vocab_type: int
    n_vocab: int
    bos: int
    eos: int
    eog: frozenset[int]
    add_bos: bool
    add_eos: bool
    texts: TokenTexts = field(repr=False)
    special: frozenset[int] = field(default_factory=frozenset, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.texts, TokenTexts):  # any sequence of texts is taken
            object.__setattr__(self, "texts", TokenTexts(self.texts))

    @property
    def type_name(self) -> str:
        """Readable vocabulary type."""
        return VOCAB_TYPE_NAMES.get(self.vocab_type, str(self.vocab_type))

    @functools.cached_property
    def whitespace_ids(self) -> frozenset[int]:
        """Ids of the tokens that are only spaces and tabs (indentation), in BPE (``Ġ``, ``ĉ``) or SPM (``▁``)
        spelling."""
        return frozenset(
            i for i, text in enumerate(self.texts) if text and i not in self.special and not text.strip(" \tĠĉ▁")
        )

    @functools.cached_property
    def indent_widths(self) -> dict[int, int]:
        """The width in columns of every token that is only spaces (indentation), by id."""
        return {i: len(self.texts[i]) for i in self.whitespace_ids if not self.texts[i].strip(" Ġ▁")}

    @functools.cached_property
    def newline_ids(self) -> frozenset[int]:
        """Ids of the tokens whose text holds a line break (BPE ``Ċ``, SPM's byte token ``<0x0A>``, or a
        literal one)."""
        return frozenset(
            i
            for i, text in enumerate(self.texts)
            if i not in self.special and ("\n" in text or "Ċ" in text or text == "<0x0A>")
        )

    @functools.cached_property
    def symbol_ids(self) -> frozenset[int]:
        """Ids of the ordinary tokens with no letter, digit or ``_`` (punctuation, operators, spacing, line
        breaks): never part of a name. BPE's spellings of a space, tab and line breaks (``Ġ``, ``ĉ``, ``Ċ``,
        ``č``) and SPM's ``▁`` are not letters here, and SPM's byte tokens (``<0x0A>``) count as their byte.
        Punctuation outside ASCII, spelt byte by byte in BPE (an em dash is ``âĢĶ``), counts as a word."""
        word = re.compile(r"[^\WĠĉĊč▁]")  # a word character, not one of those spellings
        byte = re.compile(r"<0x([0-9A-Fa-f]{2})>")

        def symbol(text: str) -> bool:
            if (m := byte.fullmatch(text)) is not None:
                c = chr(int(m.group(1), 16))
                return not (c.isalnum() or c == "_")
            return not word.search(text)

        found = (i for i, text in enumerate(self.texts) if i not in self.special and symbol(text))
        return frozenset(found) | self.newline_ids

    def fingerprint(self) -> str:
        """A short hash of the token texts: n-gram caches and maps are only valid for one vocabulary. Hashed once:
        the engine says what is loaded after every answer, and 152k texts took a noticeable moment each time."""
        return self._fingerprint

    @functools.cached_property
    def _fingerprint(self) -> str:
        h = hashlib.sha256()
        h.update(f"{self.vocab_type}:{self.n_vocab}\n".encode())
        for text in self.texts:
            h.update(text.encode("utf-8", errors="surrogatepass"))
            h.update(b"\0")
        return h.hexdigest()[:16]


class VocabMismatchError(InvalidInputError):
    """A draft's vocabulary cannot be used with the target's; the message names the failed check."""


def vocab_mismatch(target: VocabInfo, draft: VocabInfo) -> str | None:
    """Check that ``draft`` can draft for ``target``.

    Returns:
        ``None`` when compatible, else a sentence naming the failed check.
    """
    if target.vocab_type != draft.vocab_type:
        return f"vocabulary type differs: the target uses {target.type_name}, the draft {draft.type_name}"
    if target.add_bos != draft.add_bos or (target.add_bos and target.bos != draft.bos):
        return (
            f"BOS handling differs: target add_bos={target.add_bos} bos={target.bos}, "
            f"draft add_bos={draft.add_bos} bos={draft.bos}"
        )
    if target.add_eos != draft.add_eos or (target.add_eos and target.eos != draft.eos):
        return f"EOS handling differs: target eos={target.eos}, draft eos={draft.eos}"
    diff = abs(target.n_vocab - draft.n_vocab)
    if diff > MAX_VOCAB_SIZE_DIFFERENCE:
        return (
            f"vocabulary size differs by {diff} tokens (target {target.n_vocab}, draft {draft.n_vocab}; "
            f"at most {MAX_VOCAB_SIZE_DIFFERENCE} is tolerated)"
        )
    if target.texts.same_from(draft.texts, CHECK_START_TOKEN_ID):
        return None
    for i in range(CHECK_START_TOKEN_ID, min(target.n_vocab, draft.n_vocab)):
        if target.texts[i] != draft.texts[i]:
            return (
                f"token texts differ from id {i} on: the target has {target.texts[i]!r}, the draft {draft.texts[i]!r}"
            )
    return None
