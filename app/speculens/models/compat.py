"""Can this draft speak for this target? A report of named checks, each ok / warning / error.

Errors are tokenizer facts that make draft-model speculation impossible (it compares token ids, so both
models must mean the same thing by every id). The verdict uses the engine's own rules
(:func:`speculens.engine.vocab.vocab_mismatch`, which follows llama.cpp), so the report and the engine
never disagree; the other checks explain *which* fact differs, in words, and add advice (context length,
size ratio, family) as warnings.

Everything is read from GGUF metadata (:mod:`speculens.models.gguf_info`): no weights are loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from speculens.engine.vocab import (
    CHECK_START_TOKEN_ID,
    MAX_VOCAB_SIZE_DIFFERENCE,
    VOCAB_TYPE_NAMES,
    vocab_mismatch,
)
from speculens.models.catalog import pairs_for_target
from speculens.models.gguf_info import GGUFError, GGUFInfo, TokenizerInfo, format_params, read_gguf_info
from speculens.models.library import EntryStatus, Library
from speculens.words import upper_first

# The context a session uses when the caller does not say (the engine's default ``BackendParams.n_ctx``).
DEFAULT_SESSION_CTX = 4096
# A draft less than this many times smaller than the target rarely pays for its own forward passes.
MIN_USEFUL_SIZE_RATIO = 2.0
# Strategies that need no draft model, so they work whatever the draft's tokenizer (engine Strategy values).
DRAFT_FREE_STRATEGIES: tuple[tuple[str, str], ...] = (
    ("lookup", "prompt lookup"),
    ("ngram-cache", "n-gram cache"),
    ("ngram-map", "n-gram map"),
)


class Level(StrEnum):
    """How serious a check's outcome is."""

    OK = "ok"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class Check:
    """One named check of a pair.

    Attributes:
        key: a stable identifier (``vocab_type``, ``token_texts``, ...).
        title: a short readable name ("Token texts").
        level: ok, warning or error.
        message: a sentence a user understands.
    """

    key: str
    title: str
    level: Level
    message: str

    def to_dict(self) -> dict[str, str]:
        """JSON-friendly form."""
        return {"key": self.key, "title": self.title, "level": self.level.value, "message": self.message}


@dataclass(frozen=True)
class TokenDifference:
    """The first token id at which two vocabularies differ.

    Attributes:
        token_id: the id.
        target_text: the target's text for it (``None`` past the end of its vocabulary).
        draft_text: the draft's text for it (``None`` past the end of its vocabulary).
    """

    token_id: int
    target_text: str | None
    draft_text: str | None


@dataclass(frozen=True)
class PairReport:
    """The outcome of :func:`check_pair`.

    Attributes:
        target: the target's metadata.
        draft: the draft's metadata.
        checks: the checks, in a fixed order.
        first_difference: the first differing token (from the first ordinary id on), if any.
        size_ratio: how many times smaller the draft is (parameters, else file size), if known.
    """

    target: GGUFInfo = field(repr=False)
    draft: GGUFInfo = field(repr=False)
    checks: tuple[Check, ...]
    first_difference: TokenDifference | None
    size_ratio: float | None

    @property
    def compatible(self) -> bool:
        """Whether draft-model speculation can run with this pair (no error-level check)."""
        return not self.errors

    @property
    def errors(self) -> tuple[Check, ...]:
        """The failed checks."""
        return tuple(c for c in self.checks if c.level is Level.ERROR)

    @property
    def warnings(self) -> tuple[Check, ...]:
        """The checks with advice."""
        return tuple(c for c in self.checks if c.level is Level.WARNING)

    def check(self, key: str) -> Check:
        """The check named ``key``.

        Raises:
            KeyError: no such check.
        """
        for c in self.checks:
            if c.key == key:
                return c
        raise KeyError(key)

    @property
    def headline(self) -> str:
        """One prominent sentence: can the pair run, and if not, what still can."""
        if self.errors:
            free = ", ".join(f"{label} ({key})" for key, label in DRAFT_FREE_STRATEGIES)
            # Two kinds of tokenizer (BPE and SentencePiece: a Qwen and a Gemma) is the plainest reason, so it leads;
            # else the differing token, the most concrete evidence ("from id 5 on" alone read as obscure detail).
            leads = [c for key in ("vocab_type", "token_texts") for c in self.errors if c.key == key]
            leads = leads or [self.errors[0]]
            more = len(self.errors) - len(leads)
            also = f" ({more} more tokenizer check{'s' if more > 1 else ''} failed)" if more else ""
            return (
                "Tokenizer mismatch: draft-model speculation cannot run with this pair. "
                + " ".join(c.message.rstrip(".") + "." for c in leads)[:-1]
                + f"{also}. Draft-free strategies still work with the target alone: {free}."
            )
        if self.warnings:
            n = len(self.warnings)
            return f"Compatible: draft-model speculation can run ({n} warning{'s' if n > 1 else ''} below)."
        return "Compatible: draft-model speculation can run with this pair."

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        diff = self.first_difference
        return {
            "target": str(self.target.path),
            "draft": str(self.draft.path),
            "compatible": self.compatible,
            "headline": self.headline,
            "size_ratio": self.size_ratio,
            "first_difference": None
            if diff is None
            else {"token_id": diff.token_id, "target_text": diff.target_text, "draft_text": diff.draft_text},
            "checks": [c.to_dict() for c in self.checks],
        }


def _type_name(tok: TokenizerInfo) -> str:
    return VOCAB_TYPE_NAMES.get(tok.vocab_type, tok.model)


def first_token_difference(target: TokenizerInfo, draft: TokenizerInfo) -> TokenDifference | None:
    """The first id, from the first ordinary token (``CHECK_START_TOKEN_ID``) on, whose texts differ.

    When one vocabulary is a prefix of the other, the difference is the first id only one of them has.

    Returns:
        The difference, or ``None`` when the vocabularies are identical from that id on.
    """
    a, b = target.tokens, draft.tokens
    start = min(CHECK_START_TOKEN_ID, len(a), len(b))
    common = min(len(a), len(b))
    if not a.same_from(b, start):  # one comparison of the whole texts in the common (equal) case
        for i in range(start, common):
            if a[i] != b[i]:
                return TokenDifference(i, a[i], b[i])
    if len(a) != len(b):
        return TokenDifference(
            common, a[common] if common < len(a) else None, b[common] if common < len(b) else None
        )
    return None


def _as_info(model: GGUFInfo | str | Path) -> GGUFInfo:
    if isinstance(model, GGUFInfo):
        if model.tokenizer is not None and len(model.tokenizer.tokens) != model.tokenizer.vocab_size:
            return read_gguf_info(model.path)  # it was read without tokens, and the texts are needed here
        return model
    return read_gguf_info(model)


def check_pair(
    target: GGUFInfo | str | Path, draft: GGUFInfo | str | Path, *, n_ctx: int = DEFAULT_SESSION_CTX
) -> PairReport:
    """Check whether ``draft`` can draft for ``target``.

    Args:
        target: the target model (its metadata, or a path).
        draft: the draft model (its metadata, or a path).
        n_ctx: the context size the session will use; the draft must be trained for at least that.

    Returns:
        The report. ``report.compatible`` is the engine's own verdict.

    Raises:
        GGUFError: a file cannot be read.
    """
    t, d = _as_info(target), _as_info(draft)
    checks: list[Check] = []
    diff: TokenDifference | None = None
    tt, dt = t.tokenizer, d.tokenizer
    if tt is None or dt is None:
        which = "the target" if tt is None else "the draft"
        checks.append(
            Check(
                "tokenizer", "Tokenizer", Level.ERROR, f"{which.capitalize()} has no tokenizer in its file."
            )
        )
    else:
        checks += _tokenizer_checks(tt, dt)
        diff = first_token_difference(tt, dt)
        checks.append(_token_text_check(tt, dt, diff))
        verdict = vocab_mismatch(tt.to_vocab_info(), dt.to_vocab_info())
        if verdict is None:
            checks.append(
                Check(
                    "draft_model",
                    "Draft-model speculation",
                    Level.OK,
                    "llama.cpp accepts this draft for this target.",
                )
            )
        else:
            checks.append(
                Check(
                    "draft_model",
                    "Draft-model speculation",
                    Level.ERROR,
                    f"llama.cpp refuses this pair: {verdict}.",
                )
            )
    checks.append(_context_check(d, n_ctx))
    size_check, ratio = _size_check(t, d)
    checks.append(size_check)
    checks.append(_family_check(t, d))
    return PairReport(t, d, tuple(checks), diff, ratio)


def _tokenizer_checks(t: TokenizerInfo, d: TokenizerInfo) -> list[Check]:
    checks: list[Check] = []
    if t.vocab_type == d.vocab_type:
        checks.append(
            Check("vocab_type", "Vocabulary type", Level.OK, f"Both use a {_type_name(t)} vocabulary.")
        )
    else:
        checks.append(
            Check(
                "vocab_type",
                "Vocabulary type",
                Level.ERROR,
                f"The target's vocabulary is {_type_name(t)} and the draft's is {_type_name(d)}.",
            )
        )
    delta = abs(t.n_vocab - d.n_vocab)
    if delta == 0:
        checks.append(Check("vocab_size", "Vocabulary size", Level.OK, f"Both have {t.n_vocab:,} tokens."))
    elif delta <= MAX_VOCAB_SIZE_DIFFERENCE:
        checks.append(
            Check(
                "vocab_size",
                "Vocabulary size",
                Level.WARNING,
                f"The vocabularies differ by {delta} tokens (target {t.n_vocab:,}, draft {d.n_vocab:,}), "
                f"within llama.cpp's tolerance of {MAX_VOCAB_SIZE_DIFFERENCE}; "
                "the extra ids are never drafted.",
            )
        )
    else:
        checks.append(
            Check(
                "vocab_size",
                "Vocabulary size",
                Level.ERROR,
                f"The target has {t.n_vocab:,} tokens and the draft {d.n_vocab:,}: {delta:,} apart, "
                f"more than the {MAX_VOCAB_SIZE_DIFFERENCE} llama.cpp tolerates.",
            )
        )
    problems: list[str] = []
    fatal = False
    if t.add_bos != d.add_bos:
        fatal = True
        problems.append(
            f"the target {'adds' if t.add_bos else 'does not add'} BOS, the draft "
            f"{'does' if d.add_bos else 'does not'}"
        )
    elif t.bos != d.bos:
        fatal = fatal or t.add_bos
        problems.append(f"BOS is id {t.bos} in the target and {d.bos} in the draft")
    if t.add_eos != d.add_eos:
        fatal = True
        problems.append(
            f"the target {'adds' if t.add_eos else 'does not add'} EOS, the draft "
            f"{'does' if d.add_eos else 'does not'}"
        )
    elif t.eos != d.eos:
        fatal = fatal or t.add_eos
        problems.append(f"EOS is id {t.eos} in the target and {d.eos} in the draft")
    if not problems:
        checks.append(
            Check(
                "special_tokens",
                "BOS/EOS",
                Level.OK,
                f"BOS {t.bos} and EOS {t.eos} agree, and {'both add' if t.add_bos else 'neither adds'} BOS.",
            )
        )
    else:
        text = "; ".join(problems)
        checks.append(
            Check(
                "special_tokens",
                "BOS/EOS",
                Level.ERROR if fatal else Level.WARNING,
                upper_first(text) + ("." if fatal else " (not used when tokenizing, so only advice)."),
            )
        )
    if t.model != d.model:
        checks.append(
            Check(
                "tokenizer_class",
                "Tokenizer class",
                Level.ERROR,
                f"The target's tokenizer is {t.model!r} and the draft's {d.model!r}.",
            )
        )
    elif (t.pre or "default") != (d.pre or "default"):
        checks.append(
            Check(
                "tokenizer_class",
                "Tokenizer class",
                Level.WARNING,
                f"Both use the {t.model!r} tokenizer but different pre-tokenizers (target {t.pre!r}, draft "
                f"{d.pre!r}): text may split into different tokens, which lowers acceptance.",
            )
        )
    else:
        checks.append(
            Check(
                "tokenizer_class",
                "Tokenizer class",
                Level.OK,
                f"Both use the {t.model!r} tokenizer with the {t.pre or 'default'!r} pre-tokenizer.",
            )
        )
    return checks


def _token_text_check(t: TokenizerInfo, d: TokenizerInfo, diff: TokenDifference | None) -> Check:
    if diff is None:
        return Check(
            "token_texts",
            "Token texts",
            Level.OK,
            f"All token texts from id {CHECK_START_TOKEN_ID} on are identical.",
        )
    if diff.target_text is not None and diff.draft_text is not None:
        return Check(
            "token_texts",
            "Token texts",
            Level.ERROR,
            f"Token texts differ from id {diff.token_id} on: the target has {diff.target_text!r}, "
            f"the draft {diff.draft_text!r}.",
        )
    longer = "target" if diff.target_text is not None else "draft"
    extra = diff.target_text if diff.target_text is not None else diff.draft_text
    within = abs(t.n_vocab - d.n_vocab) <= MAX_VOCAB_SIZE_DIFFERENCE
    return Check(
        "token_texts",
        "Token texts",
        Level.WARNING if within else Level.ERROR,
        f"The shared token texts are identical; the {longer} has extra tokens from id {diff.token_id} on "
        f"(first {extra!r}).",
    )


def _context_check(d: GGUFInfo, n_ctx: int) -> Check:
    ctx = d.context_length
    if ctx is None:
        return Check(
            "context", "Context length", Level.WARNING, "The draft's file does not say its context length."
        )
    if ctx >= n_ctx:
        return Check(
            "context",
            "Context length",
            Level.OK,
            f"The draft handles {ctx:,} tokens of context, enough for the session's {n_ctx:,}.",
        )
    return Check(
        "context",
        "Context length",
        Level.WARNING,
        f"The draft was trained for {ctx:,} tokens of context but the session uses {n_ctx:,}: its drafts "
        f"get worse past {ctx:,} tokens. Use a context of at most {ctx:,}.",
    )


def _size_check(t: GGUFInfo, d: GGUFInfo) -> tuple[Check, float | None]:
    if t.parameter_count and d.parameter_count:
        ratio = t.parameter_count / d.parameter_count
        what = (
            f"The draft has {format_params(d.parameter_count, d.size_label)} parameters, the target "
            f"{format_params(t.parameter_count, t.size_label)}"
        )
    elif t.file_size and d.file_size:
        ratio = t.file_size / d.file_size
        what = f"The draft file is {d.file_size / 1e9:.2f} GB, the target {t.file_size / 1e9:.2f} GB"
    else:
        return Check("size", "Size", Level.WARNING, "The sizes of the models are unknown."), None
    if ratio <= 1.0:
        return Check(
            "size",
            "Size",
            Level.WARNING,
            f"{what}: the draft is not smaller than the target, so drafting cannot make it faster.",
        ), ratio
    if ratio < MIN_USEFUL_SIZE_RATIO:
        return Check(
            "size",
            "Size",
            Level.WARNING,
            f"{what}: only {ratio:.1f}× smaller, so drafting costs nearly as much as it saves.",
        ), ratio
    return Check("size", "Size", Level.OK, f"{what}: {ratio:.1f}× smaller."), ratio


def _family_check(t: GGUFInfo, d: GGUFInfo) -> Check:
    if t.family == d.family:
        return Check("family", "Family", Level.OK, f"Both are {t.basename or t.family} models.")
    return Check(
        "family",
        "Family",
        Level.WARNING,
        f"The target is a {t.basename or t.family} model and the draft a {d.basename or d.family} model: "
        "a draft from the target's own family usually agrees with it more often (advice only).",
    )


@dataclass(frozen=True)
class DraftSuggestion:
    """A draft proposed for a target.

    Attributes:
        source: ``library`` (a file the user has) or ``catalog`` (a recommended hub download).
        title: readable name.
        reason: why it is proposed, in words.
        entry_id: the library entry, for library suggestions.
        path: the file, for library suggestions.
        repo: the hub repository, for catalog suggestions.
        filename: the hub file, for catalog suggestions.
        size: bytes (approximate for catalog suggestions).
        report: the full compatibility report, for library suggestions.
    """

    source: str
    title: str
    reason: str
    entry_id: str | None = None
    path: Path | None = None
    repo: str | None = None
    filename: str | None = None
    size: int | None = None
    report: PairReport | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "source": self.source,
            "title": self.title,
            "reason": self.reason,
            "entry_id": self.entry_id,
            "path": None if self.path is None else str(self.path),
            "repo": self.repo,
            "filename": self.filename,
            "size": self.size,
        }


def suggest_drafts(
    target: GGUFInfo | str | Path,
    library: Library | None = None,
    *,
    n_ctx: int = DEFAULT_SESSION_CTX,
    include_catalog: bool = True,
) -> list[DraftSuggestion]:
    """Drafts for ``target``: compatible, smaller models from the library, then catalog recommendations.

    Library models are checked with :func:`check_pair` and kept when compatible and smaller; those of the
    target's family and with fewer warnings come first. Catalog drafts already in the library, or made
    for another target of the family and not :data:`MIN_USEFUL_SIZE_RATIO` times smaller than this one, are left
    out.

    Args:
        target: the target (metadata or path).
        library: the library to search (default: the user's).
        n_ctx: the session's context size, for the context check.
        include_catalog: add recommendations from the catalog.

    Returns:
        The suggestions, best first.
    """
    t = _as_info(target)
    library = library if library is not None else Library()
    entries = library.entries()
    target_path = t.path.resolve()
    ranked: list[tuple[tuple[int, int, float], DraftSuggestion]] = []
    for entry in entries:
        if not entry.available or entry.path == target_path:
            continue
        # Cheap pre-filter from the index: vocabulary sizes too far apart can never pass.
        if (
            t.tokenizer is not None
            and entry.n_vocab is not None
            and abs(entry.n_vocab - t.tokenizer.n_vocab) > MAX_VOCAB_SIZE_DIFFERENCE
        ):
            continue
        try:
            report = check_pair(t, entry.path, n_ctx=n_ctx)
        except GGUFError:
            continue
        if not report.compatible or (report.size_ratio or 0.0) <= 1.0:
            continue
        same_family = report.check("family").level is Level.OK
        reason = f"{report.check('size').message} {report.check('family').message}"
        ranked.append(
            (
                (0 if same_family else 1, len(report.warnings), -(report.size_ratio or 0.0)),
                DraftSuggestion(
                    "library",
                    entry.name,
                    reason,
                    entry.id,
                    entry.path,
                    entry.source.repo,
                    None,
                    entry.size,
                    report,
                ),
            )
        )
    out = [s for _, s in sorted(ranked, key=lambda item: item[0])]
    if include_catalog:
        have = {(e.source.repo or "", (e.source.filename or e.path.name).lower()) for e in entries}
        have_names = {e.path.name.lower() for e in entries}
        source = next((e.source for e in entries if e.path == target_path), None)
        # Demo models not built yet cannot be checked, but the catalog vouches for its own pairs: such a draft is
        # offered from the library (picked, it is built), or the demo target's picker said "no compatible smaller
        # draft found" above a draft list holding its demo draft (seen under Xvfb).
        unbuilt = {e.path.name.lower(): e for e in entries if e.status is EntryStatus.NOT_ASSEMBLED}
        seen: set[tuple[str, str]] = set()
        for pair in pairs_for_target(t, repo=source.repo if source else None):
            key = (pair.draft.repo, pair.draft.file.lower())
            if key in seen or pair.draft.file.lower() == t.path.name.lower():  # the target's own file is no draft
                continue
            # A pair of the same family may have a larger target, and a draft too large to pay for this one (a
            # tour's 268 MB Gemma was offered the 292 MB and 806 MB drafts; another's imported 1.5B target was
            # offered the demo 1.5B, the catalog's draft for a 32B). A pair made for this very file is the
            # catalog's own choice, kept whatever its file sizes (Qwen2.5 1.5B Q4_K_M and 0.5B Q8_0: 1.9x).
            for_this_file = pair.target.file.lower() == t.path.name.lower()
            if not for_this_file and pair.draft.size * MIN_USEFUL_SIZE_RATIO > t.file_size:
                continue
            demo = unbuilt.get(pair.draft.file.lower())
            if demo is not None and demo.path != target_path:
                seen.add(key)
                reason = f"Recommended with {pair.target.file}: {pair.why} A demo model: picked, it is built."
                out.append(DraftSuggestion("library", demo.name, reason, demo.id, demo.path, size=demo.size))
                continue
            if key in have or pair.draft.file.lower() in have_names:
                continue
            seen.add(key)
            out.append(
                DraftSuggestion(
                    "catalog",
                    f"{pair.draft.repo} / {pair.draft.file}",
                    f"Recommended with {pair.target.file}: {pair.why}",
                    repo=pair.draft.repo,
                    filename=pair.draft.file,
                    size=pair.draft.size,
                )
            )
    return out
