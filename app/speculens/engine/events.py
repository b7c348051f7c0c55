"""The typed events a generation yields: one per speculation step, plus a start and a finish.

The GUI, the CLI and the benchmarks all consume these and nothing else, so they are plain frozen
dataclasses that serialise to JSON with :func:`event_to_dict`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


class Origin(enum.StrEnum):
    """Where an emitted token came from."""

    ACCEPTED = "accepted"  # a drafted token the target agreed with
    CORRECTION = "correction"  # the target's own token in place of a rejected draft
    BONUS = "bonus"  # the target's token after a fully accepted draft
    TARGET = "target"  # plain decoding: no draft this step


class FinishReason(enum.StrEnum):
    """Why generation stopped."""

    EOG = "eog"  # the model produced an end-of-generation token
    MAX_TOKENS = "max_tokens"
    STOP = "stop"  # a stop string appeared
    CONTEXT = "context"  # the context window is full
    CANCELLED = "cancelled"

    @property
    def words(self) -> str:
        """Why, in words for a status line."""
        return _FINISH_WORDS[self]


_FINISH_WORDS = {
    FinishReason.EOG: "the answer ended",
    FinishReason.MAX_TOKENS: "cut off at the Max tokens limit",
    FinishReason.STOP: "a stop string appeared",
    FinishReason.CONTEXT: "the context is full",
    FinishReason.CANCELLED: "stopped",
}


@dataclass(frozen=True)
class DraftToken:
    """One drafted token.

    Attributes:
        id: token id.
        piece: its bytes.
        draft_prob: the drafter's probability for it (``None`` for draft-free sources).
        target_prob: the target's probability for it, when the target got to judge it.
        accepted: whether the target accepted it.
    """

    id: int
    piece: bytes
    draft_prob: float | None
    target_prob: float | None
    accepted: bool


@dataclass(frozen=True)
class EmittedToken:
    """One token added to the answer.

    Attributes:
        id: token id.
        piece: its bytes.
        origin: accepted draft, correction, bonus, or plain target token.
    """

    id: int
    piece: bytes
    origin: Origin


def decode_rate(n_generated: int, elapsed_s: float) -> float:
    """Decoded tokens per second, counted as llama.cpp counts its eval rate: the first token comes with the
    prompt's evaluation (its logits row), so it is not a decoded token and its time is the prompt's."""
    return (n_generated - 1) / elapsed_s if elapsed_s > 0 and n_generated > 1 else 0.0


@dataclass(frozen=True)
class RunningStats:
    """Totals since the start of the generation.

    Attributes:
        n_steps: speculation steps (target verification passes).
        n_generated: tokens emitted.
        n_drafted: tokens drafted.
        n_accepted: drafted tokens accepted.
        elapsed_s: time spent in the decoding steps (prompt processing, and any pause of the consumer between
            steps, excluded).
        draft_s: time spent drafting.
        verify_s: time in the target's decode calls.
        overhead_s: everything else: our own sampling, verification and bookkeeping.
        accepted_by_position: accepted counts per draft position (index 0 = first drafted token).
        drafted_by_position: drafted counts per draft position.
        n_ended: 1 once the target has produced the end-of-generation token (it ends the answer and is not
            emitted, but a target pass produced it: tokens per pass count it, so plain decoding reads 1.00).
    """

    n_steps: int = 0
    n_generated: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    elapsed_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    overhead_s: float = 0.0
    accepted_by_position: tuple[int, ...] = ()
    drafted_by_position: tuple[int, ...] = ()
    n_ended: int = 0

    @property
    def acceptance(self) -> float:
        """Accepted / drafted (0 when nothing was drafted)."""
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def tokens_per_second(self) -> float:
        """Decoded tokens per second (see :func:`decode_rate`)."""
        return decode_rate(self.n_generated, self.elapsed_s)

    @property
    def mean_accepted_length(self) -> float:
        """Tokens per target pass: accepted drafts plus the target's own token (llama.cpp's figure), the
        end-of-generation token included."""
        return (self.n_generated + self.n_ended) / self.n_steps if self.n_steps else 0.0

    @property
    def passes_text(self) -> str:
        """The tokens and the target passes they took, in words: "101 tokens and the end of the answer in 102 target
        passes" (a tour read "101 tokens in 102 target passes" as one pass wasted: the last produced the end)."""
        tokens = f"{self.n_generated} token{'s' if self.n_generated != 1 else ''}"
        ended = " and the end of the answer" if self.n_ended else ""
        return f"{tokens}{ended} in {self.n_steps} target pass{'es' if self.n_steps != 1 else ''}"


@dataclass(frozen=True)
class RunSettings:
    """The generation settings that, with its seed and sources, chose an answer's tokens: a sampled answer is
    reproduced only with all of them (a tour's exports held the temperature alone). Made by
    :meth:`speculens.engine.config.GenerationConfig.described`."""

    temperature: float
    top_k: int
    top_p: float
    min_p: float
    n_draft: int
    n_draft_min: int
    p_min: float
    adaptive: bool
    max_tokens: int
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class StartEvent:
    """Prompt processing is done; decoding starts.

    Attributes:
        n_prompt: prompt tokens.
        n_prompt_evaluated: prompt tokens the target had to evaluate (the rest came from its KV cache).
        prompt_s: time the prompt took (target and draft).
        strategy: the draft source's name.
        seed: the random seed this answer samples with (give it back to reproduce the answer).
        flash_attn: whether the target decodes this answer with flash attention (``None``: left to llama.cpp, which
            turns it on wherever the backend supports it, where that is not known). On a CPU it is chosen per
            generation by the depth it decodes at (see
            :meth:`speculens.engine.session.SpeculativeEngine.fit_flash_attn`), and the two settings' kernels
            round differently, so a greedy answer can part from another run's at a near-tie.
        sampled: the answer samples (temperature above 0), so its seed reproduces it; greedy, the seed plays no
            part (an answer opened again showed or hid its seed by the temperature of the moment).
        draft_behind: prompt tokens a loaded draft model was not given before the answer, because reading them
            would have cost it more than it could save (it catches up on them if it is ever chosen).
        settings: the generation settings that, with the seed and the sources, chose its tokens; ``None`` where
            not known (an answer kept before they were).
        draft_idle: the adaptive controller keeps a loaded draft model idle in this answer: it could not beat plain
            decoding on this machine even with nearly every draft accepted (a tour read "Drafting from prompt
            lookup, the n-gram cache and the draft model" beside a toolbar saying "draft idle: cannot pay here").
        exact: the target verified in bit-exact mode (``None``: not known, an answer kept before it was); the
            exports say it from here, not from the models loaded when they are made (a review's).
        verify_ms: the target's verification time in ms for 1, 2, … tokens at the prompt's context, as the session's
            cost model expected it when the answer began (measured on this machine at load and in earlier answers;
            empty where nothing was measured, or for plain decoding).
    """

    n_prompt: int
    n_prompt_evaluated: int
    prompt_s: float
    strategy: str
    seed: int | None = None
    flash_attn: bool | None = None
    sampled: bool = False
    draft_behind: int = 0
    settings: RunSettings | None = None
    draft_idle: bool = False
    exact: bool | None = None
    verify_ms: tuple[float, ...] = ()

    @property
    def uses_draft_model(self) -> bool:
        """Whether the draft model was among the answer's sources (``strategy`` joins their names with "+")."""
        return "draft" in self.strategy.split("+")

    @property
    def flash_text(self) -> str:
        """The flash-attention setting in words: "on", "off" or "as llama.cpp decides"."""
        return "as llama.cpp decides" if self.flash_attn is None else ("off", "on")[self.flash_attn]


@dataclass(frozen=True)
class StepEvent:
    """One speculation step: draft, verify, emit.

    Attributes:
        step: 1-based step number.
        n_draft_max: the draft length asked of the drafter this step: ``n_draft``, or the adaptive
            controller's choice (0 = it decoded plainly).
        drafted: what was drafted, with the verdict on each token.
        emitted: what the answer gained (accepted drafts, then a correction or bonus).
        text: the new answer text made visible by this step.
        draft_ms: time spent drafting.
        verify_ms: time in the target's decode call (of :attr:`batch` tokens).
        overhead_ms: the rest of the step: sampling, verification, bookkeeping.
        stats: totals so far.
        probe: the adaptive controller speculated this step to re-measure, not because it expected a gain.
        offered: with the adaptive controller and a draft-free source, how many tokens the source proposed
            before the controller chose how many of them to verify (``None`` otherwise).
        source: the drafter whose tokens were verified (``lookup``, ``ngram-cache``, ``ngram-map``,
            ``draft``), ``None`` on a plain step.
        expected_speedup: the adaptive controller's expected rate over plain decoding for verifying
            ``k = 0..`` drafts of ``considered`` (the source it chose, or the most promising one it declined),
            from the costs and acceptance it had measured; empty without the controller.
        considered: the source ``expected_speedup`` is about.
        threads: the CPU threads the target decoded with this step (fewer than the automatic count while
            another program keeps a core busy, see :mod:`speculens.engine.threads`; 0: not known).
        thread_trial: this plain step tried :attr:`threads` to find out whether fewer (or more) decode faster;
            the count the engine settled on is another, unless the trial won.
    """

    step: int
    n_draft_max: int
    drafted: tuple[DraftToken, ...]
    emitted: tuple[EmittedToken, ...]
    text: str
    draft_ms: float
    verify_ms: float
    overhead_ms: float
    stats: RunningStats
    probe: bool = False
    offered: int | None = None
    source: str | None = None
    expected_speedup: tuple[float, ...] = ()
    considered: str | None = None
    threads: int = 0
    thread_trial: bool = False

    @property
    def n_accepted(self) -> int:
        """Drafted tokens accepted this step."""
        return sum(1 for d in self.drafted if d.accepted)

    @property
    def batch(self) -> int:
        """Tokens the target evaluated in this step's pass (``verify_ms``): the drafts and the pending token,
        except in the first step, whose pending token came with the prompt (0: a first step without a draft
        made no pass at all)."""
        return len(self.drafted) + (1 if self.step > 1 else 0)


@dataclass(frozen=True)
class FinishEvent:
    """Generation ended.

    Attributes:
        reason: why.
        text: the whole answer.
        tokens: the answer's token ids (without an end-of-generation token).
        stats: final totals.
        others_share: the share of the CPUs other programs used while it decoded (``None``: unknown, too short to
            tell (see :class:`~speculens.engine.threads.CpuWindow`), or held at its steps for long by its consumer,
            as Teach's step mode holds it, so that the share would be of the pauses as much as of the answer).
        crowded: they took time llama.cpp's threads needed (:func:`~speculens.engine.threads.crowded`), so its
            speed is below what this machine can do: a tour's answer read 7.0 tokens/s where the same message ran
            at 25 a minute later, with no word of why.
    """

    reason: FinishReason
    text: str
    tokens: tuple[int, ...]
    stats: RunningStats
    others_share: float | None = None
    crowded: bool = False

    @property
    def crowded_words(self) -> str:
        """Why its speed is below this machine's, where :attr:`crowded`: a phrase for its figures; else empty."""
        if not self.crowded or self.others_share is None:
            return ""
        return f"slowed: other programs used {self.others_share:.0%} of the CPUs meanwhile"


Event = StartEvent | StepEvent | FinishEvent


@dataclass(frozen=True)
class Divergence:
    """Where two answers to the same prompt first differ, and how close the target's call was there.

    Batched kernels round differently from one token at a time, so fast (non-exact) greedy speculation can
    take the other side of a near-tie; this says which tie.

    Attributes:
        index: the first answer position where the tokens differ.
        token_a: the first answer's token there (plain decoding, in Compare).
        token_b: the second answer's token there.
        piece_a: its bytes.
        piece_b: its bytes.
        logit_a: the target's logit for ``token_a`` there, decoded one token at a time.
        logit_b: the same for ``token_b``.
    """

    index: int
    token_a: int
    token_b: int
    piece_a: bytes
    piece_b: bytes
    logit_a: float
    logit_b: float

    @property
    def margin(self) -> float:
        """How far apart the two candidates' logits are (a near-tie is a small fraction of one)."""
        return abs(self.logit_a - self.logit_b)


# The drafters' names as people read them (the app's words and the CLI's).
SOURCE_NAMES = {
    "draft": "the draft model",
    "lookup": "prompt lookup",
    "ngram-cache": "the n-gram cache",
    "ngram-map": "the n-gram map",
}


# Answers of fewer steps get no word on why nothing was drafted, in the app's figures and the CLI's notes alike: a short
# answer has little to copy from and few steps to draft in, and a paragraph of reasons under a two-token "Hello!" was
# noise (a CLI tour's, then the window's under Xvfb).
SHORT_ANSWER_STEPS = 16


def best_weighed(step: StepEvent, best: tuple[float, str] | None) -> tuple[float, str] | None:
    """The best expected rate over plain decoding of any draft the adaptive controller weighed in an answer, and
    its source: ``best`` (so far) updated with one more step's."""
    if step.considered and len(step.expected_speedup) > 1:
        rate = max(step.expected_speedup[1:])
        if best is None or rate > best[0]:
            return rate, step.considered
    return best


def keep_chance(p: float, q: float) -> str:
    """A drafted token's chance to be kept by rejection sampling (Leviathan et al. 2023), in words for Teach and the
    token tooltips alike: ``p`` the target's probability of it, ``q`` the draft model's."""
    return f"a chance of min(1, p/q) = min(1, {p:.2f}/{q:.2f}) = {min(1.0, p / q):.2f} to be kept"


def free_drafts_declined(source: str, rate: float) -> str:
    """Why the adaptive controller verified none of a free source's drafts, in a phrase: a free source loses only by
    drafting wrong tokens, whose checking costs more than the right ones save. Its drafts are scored against the
    answer as it comes without being verified (a tour read "drafts were not right often enough" beside "0 of 0
    drafted" and asked how)."""
    return (
        f"{SOURCE_NAMES.get(source, source)}'s drafts, scored against the answer as it came, were not right often "
        f"enough to pay for checking them (×{rate:.2f} of plain decoding at best)"
    )


def free_sources_declined(steps: Iterable[StepEvent]) -> tuple[float, str] | None:
    """The best rate over plain decoding (and its source) of the free sources' drafts the adaptive controller weighed
    in an answer where nothing was verified but probes; ``None`` where something was, or none was weighed below 1."""
    best = None
    for step in steps:
        if step.drafted and not step.probe:
            return None
        if step.considered != "draft":
            best = best_weighed(step, best)
    return best if best is not None and best[0] < 1.0 else None


def draft_model_sat_out(strategy: str, steps: Iterable[StepEvent]) -> float | None:
    """The best rate over plain decoding the adaptive controller expected of a loaded draft model (``strategy``: the
    answer's sources, "lookup+ngram-cache+draft") that drafted nothing in an answer but probes, which re-measure its
    cost; ``None`` where it drafted, was not loaded, or was not expected to lose. Said by the app's figures and the
    CLI's notes alike."""
    if "draft" not in strategy.split("+"):
        return None
    rates = []
    for step in steps:
        if step.source == "draft" and step.drafted and not step.probe:
            return None
        if step.considered == "draft" and len(step.expected_speedup) > 1:
            rates.append(max(step.expected_speedup[1:]))
    best = max(rates, default=None)
    return best if best is not None and best < 1.0 else None


def unread_words(n: int) -> str:
    """Why a draft model was not given ``n`` prompt tokens, in words for the app's figures and the CLI."""
    tokens = f"{n:,} prompt token{'s' if n != 1 else ''}"
    return f"reading {tokens} would have cost it more than it could save on this answer"


def draft_model_unread(start: StartEvent | None, steps: Iterable[StepEvent]) -> int:
    """The prompt tokens a loaded draft model was not given (see :attr:`StartEvent.draft_behind`) in an answer where
    it then drafted nothing but probes; 0 otherwise. Its best rate in such an answer counts the catch-up on those
    tokens, and read "×0.01 of plain decoding at best" (a tour's long paste)."""
    if start is None or not start.draft_behind:
        return 0
    if any(step.source == "draft" and step.drafted and not step.probe for step in steps):
        return 0
    return start.draft_behind


def event_to_dict(event: Event, exact: bool = False) -> dict[str, Any]:
    """A JSON-ready dict of an event, with its type and the derived statistics.

    Args:
        event: the event.
        exact: keep every token's bytes (a piece that is part of a character becomes lone surrogates, which JSON
            writes as escapes), so that :func:`event_from_dict` gives the event back; otherwise such bytes read
            ``\\xe2`` (the exports, the CLI's ``--events``).
    """

    def convert(value: Any) -> Any:
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="surrogateescape" if exact else "backslashreplace")
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, tuple | list):
            return [convert(v) for v in value]
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out = {f.name: convert(getattr(value, f.name)) for f in dataclasses.fields(value)}
            if isinstance(value, RunningStats):
                out.update(
                    acceptance=value.acceptance,
                    tokens_per_second=value.tokens_per_second,
                    mean_accepted_length=value.mean_accepted_length,
                )
            return out
        return value

    return {"type": type(event).__name__.removesuffix("Event").lower(), **convert(event)}


def event_from_dict(data: dict[str, Any]) -> Event:
    """The event :func:`event_to_dict` made ``data`` from, with ``exact=True`` (the derived statistics are left).

    Raises:
        KeyError, TypeError, ValueError: ``data`` is not such a dict.
    """

    def known(cls: type, values: dict[str, Any]) -> dict[str, Any]:
        return {f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values}

    def piece(text: str) -> bytes:
        return text.encode("utf-8", errors="surrogateescape")

    def stats(values: dict[str, Any]) -> RunningStats:
        out = known(RunningStats, values)
        for name in ("accepted_by_position", "drafted_by_position"):
            out[name] = tuple(out.get(name, ()))
        return RunningStats(**out)

    def run_settings(values: object) -> RunSettings | None:
        if not isinstance(values, dict):
            return None
        try:
            return RunSettings(**{**known(RunSettings, values), "stop": tuple(values.get("stop", ()))})
        except TypeError:  # written by another version, with fields missing: not known
            return None

    kind = data["type"]
    if kind == "start":
        return StartEvent(
            **{
                **known(StartEvent, data),
                "settings": run_settings(data.get("settings")),
                "verify_ms": tuple(data.get("verify_ms", ())),
            }
        )
    if kind == "finish":
        return FinishEvent(
            FinishReason(data["reason"]),
            data["text"],
            tuple(data["tokens"]),
            stats(data["stats"]),
            data.get("others_share"),
            bool(data.get("crowded", False)),
        )
    if kind != "step":
        raise ValueError(f"not an event of a generation: {kind!r}")
    fields = known(StepEvent, data)
    fields["drafted"] = tuple(
        DraftToken(**{**known(DraftToken, d), "piece": piece(d["piece"])}) for d in data["drafted"]
    )
    fields["emitted"] = tuple(
        EmittedToken(t["id"], piece(t["piece"]), Origin(t["origin"])) for t in data["emitted"]
    )
    fields["stats"] = stats(data["stats"])
    fields["expected_speedup"] = tuple(data.get("expected_speedup", ()))
    return StepEvent(**fields)
