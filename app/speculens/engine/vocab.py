"""Vocabulary facts and the check that a draft can speak for a target.

Draft-model speculation compares token ids, so the draft must use the target's vocabulary. The rules are
llama.cpp's (``common_speculative_are_compatible``): same vocabulary type, same BOS/EOS handling, sizes within
a small tolerance, and identical token texts from the first ordinary token on.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field

from speculens.errors import InvalidInputError

# llama.cpp tolerates this much difference in vocabulary size (SPEC_VOCAB_MAX_SIZE_DIFFERENCE) ...
MAX_VOCAB_SIZE_DIFFERENCE = 128
# ... and starts comparing token texts here (SPEC_VOCAB_CHECK_START_TOKEN_ID), past the usual special ids.
CHECK_START_TOKEN_ID = 5

VOCAB_TYPE_NAMES = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLaMo-2"}


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
        texts: the token texts by id.
        special: ids of control/unknown/user-defined tokens.
    """

    vocab_type: int
    n_vocab: int
    bos: int
    eos: int
    eog: frozenset[int]
    add_bos: bool
    add_eos: bool
    texts: tuple[str, ...] = field(repr=False)
    special: frozenset[int] = field(default_factory=frozenset, repr=False)

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

    def fingerprint(self) -> str:
        """A short hash of the token texts: n-gram caches and maps are only valid for one vocabulary."""
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
    for i in range(CHECK_START_TOKEN_ID, min(target.n_vocab, draft.n_vocab)):
        if target.texts[i] != draft.texts[i]:
            return (
                f"token texts differ from id {i} on: the target has {target.texts[i]!r}, the draft {draft.texts[i]!r}"
            )
    return None
