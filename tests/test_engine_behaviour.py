"""Engine behaviour around the edges: rollback, cancel, stops, EOG, context, chat reuse, bad input."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import TinyModels
from speculens.engine import backend
from speculens.engine.adaptive import AdaptiveController, Offer, StepPlan
from speculens.engine.backend import BackendError, BackendParams, LlamaBackend, quantize_model, repacks
from speculens.engine.bench import RunResult, summarise_runs
from speculens.engine.config import GenerationConfig, ModelConfig, PromptError, Strategy
from speculens.engine.drafters.base import Draft
from speculens.engine.events import FinishEvent, FinishReason, Origin, StartEvent, StepEvent
from speculens.engine.generate import generate
from speculens.engine.sampling import SamplingParams
from speculens.engine.session import ChatSession, SpeculativeEngine
from speculens.engine.text import TextAssembler
from speculens.engine.vocab import VocabMismatchError
from speculens.models.synthetic import TinyModelSpec, write_tiny_model

PROMPT = "the model of speculative decoding"


def greedy(strategy: Strategy = Strategy.DRAFT, **kw: object) -> GenerationConfig:
    """Greedy, no p_min, and the fixed draft length unless ``adaptive=True`` is passed."""
    kw.setdefault("adaptive", False)
    return GenerationConfig(strategy=strategy, p_min=0.0, **kw)  # type: ignore[arg-type]


def finish_of(events: Iterator[object]) -> FinishEvent:
    last = None
    for last in events:  # noqa: B007
        pass
    assert isinstance(last, FinishEvent)
    return last


@pytest.fixture()
def engine(tiny: TinyModels) -> Iterator[SpeculativeEngine]:
    e = SpeculativeEngine(ModelConfig(tiny.target, tiny.perturbed, n_ctx=512))
    yield e
    e.close()


def test_logits_after_rollback_equal_a_fresh_evaluation(tiny: TinyModels) -> None:
    with (
        LlamaBackend(tiny.target, BackendParams(n_ctx=256)) as a,
        LlamaBackend(tiny.target, BackendParams(n_ctx=256)) as b,
    ):
        prefix = a.tokenize(PROMPT)
        a.decode(prefix)
        a.decode([40, 41, 42, 43, 44, 45])  # a draft that gets rejected
        a.truncate(len(prefix))
        assert a.tokens == prefix
        after_rollback = a.decode([50], [0])[0].copy()
        fresh = b.decode([*prefix, 50], [len(prefix)])[0].copy()
    np.testing.assert_allclose(after_rollback, fresh, atol=1e-3)
    assert int(np.argmax(after_rollback)) == int(np.argmax(fresh))


def test_a_prompt_is_evaluated_whole_as_llama_cpp_does_and_again_the_same_way(tiny: TinyModels) -> None:
    with (
        LlamaBackend(tiny.target, BackendParams(n_ctx=256, n_batch=16)) as a,
        LlamaBackend(tiny.target, BackendParams(n_ctx=256, n_batch=16)) as b,
    ):
        prompt = (a.tokenize(PROMPT) * 8)[:40]
        row = a.prefill(prompt)
        assert a.tokens == prompt and [n for n, _ in a.last_calls] == [16, 16, 8]  # last token included
        # llama-completion evaluates a prompt in calls of n_batch and samples from its last row: the same row.
        np.testing.assert_array_equal(row, b.decode(prompt, [len(prompt) - 1])[0])
        a.decode([40, 41, 42])  # an answer was generated after it
        again = a.prefill(prompt)  # regenerate: the final call of the first evaluation is repeated
        assert [n for n, _ in a.last_calls] == [8] and a.tokens == prompt
        np.testing.assert_array_equal(again, row)
        longer = [*prompt, 43, 44]  # a next chat turn: only its new tokens are evaluated
        a.prefill(longer)
        assert [n for n, _ in a.last_calls] == [2]


def test_logits_rows_are_only_those_asked_for_in_batch_order(tiny: TinyModels) -> None:
    with LlamaBackend(tiny.target, BackendParams(n_ctx=256)) as b:
        tokens = b.tokenize(PROMPT)
        every = b.decode(tokens, range(len(tokens))).copy()
        for wanted in ([0, 2], [1, 2], [0, 2]):  # the rows come from llama.cpp's reused buffer, as views
            b.truncate(0)
            rows = b.decode(tokens, wanted)
            assert rows.shape == (2, b.n_vocab)
            # Other output counts may round the output layer differently; a wrong row is far off.
            np.testing.assert_allclose(rows, every[wanted], rtol=1e-3, atol=1e-3)


def test_a_decode_call_is_timed_to_the_end_of_its_computation(
    tiny: TinyModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A GPU backend returns from llama_decode once the work is queued (seen on an H200: 0.03 s timed of 0.35 s
    # of plain decoding): the costs the adaptive controller learns, and the live panel's verify times, must
    # include the wait for the result. Here the wait is stood in for by a slow llama_synchronize.
    from speculens.engine import backend

    waits: list[int] = []

    def slow_synchronize(ctx: object) -> None:
        waits.append(1)
        time.sleep(0.02)

    with LlamaBackend(tiny.target, BackendParams(n_ctx=256)) as b:
        monkeypatch.setattr(backend, "_synchronize", slow_synchronize)
        b.decode([1, 2, 3], [2])
        b.decode([4], [0])
    assert len(waits) == 2
    assert all(seconds >= 0.02 for _, seconds in b.last_calls) and b.decode_seconds >= 0.04


def test_cancel_stops_within_one_step_and_the_models_stay_usable(engine: SpeculativeEngine) -> None:
    reference = finish_of(engine.generate(PROMPT, greedy(max_tokens=40))).tokens
    cancel = threading.Event()
    steps = 0
    finish = None
    for event in engine.generate(PROMPT, greedy(max_tokens=400, n_draft=2), cancel):
        if isinstance(event, StepEvent):
            steps += 1
            if steps == 3:
                cancel.set()
        finish = event
    assert isinstance(finish, FinishEvent)
    assert finish.reason is FinishReason.CANCELLED
    assert steps == 3
    # The next generation reuses the same models and still gives the plain answer.
    assert finish_of(engine.generate(PROMPT, greedy(max_tokens=40))).tokens == reference


class SetAtLook(threading.Event):
    """A cancel flag that reads set from its ``n``-th look on: at a point inside the work that looks at it, as a
    Stop pressed at that moment would be."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.looks = 0

    def is_set(self) -> bool:
        self.looks += 1
        return self.looks >= self.n or super().is_set()


def test_a_prompt_s_evaluation_stops_inside_a_decode_call_and_goes_on_from_its_finished_calls(
    tiny: TinyModels,
) -> None:
    """A 2,800-token prompt takes 20 s on 2 cores, and Stop waited for all of it: llama.cpp's abort callback now
    looks at the cancel flag between the graph's nodes. What the cache keeps is what ``tokens`` says, and the prompt
    evaluated again gives the logits an uninterrupted evaluation gives."""
    with (
        LlamaBackend(tiny.target, BackendParams(n_ctx=256, n_batch=64)) as a,
        LlamaBackend(tiny.target, BackendParams(n_ctx=256, n_batch=64)) as b,
    ):
        prompt = (a.tokenize(PROMPT) * 30)[:150]  # calls of 64, 64 and 22 tokens
        first_call = SetAtLook(3)  # the look before the first call, then llama.cpp's first two
        with pytest.raises(backend.DecodeCancelled):
            a.prefill(prompt, first_call)
        assert a.n_decode_calls == 1 and a.tokens == []  # stopped inside its first call, which left nothing
        whole_call = SetAtLook(10**6)  # how often one call of 64 looks (llama.cpp looks between the graph's nodes)
        b.decode(prompt[:64], cancel=whole_call)
        b.truncate(0)
        second_call = SetAtLook(whole_call.looks + 3)  # the first call whole, then into the second
        with pytest.raises(backend.DecodeCancelled):
            a.prefill(prompt, second_call)
        assert a.tokens == prompt[:64]
        already = threading.Event()
        already.set()
        with pytest.raises(backend.DecodeCancelled):
            a.prefill(prompt, already)
        assert a.tokens == prompt[:64] and a.n_decode_calls == 3  # nothing evaluated
        row = a.prefill(prompt)
        assert [n for n, _ in a.last_calls] == [64, 22]  # on from the finished call, in llama.cpp's calls
        np.testing.assert_array_equal(row, b.prefill(prompt))
        a.decode([int(np.argmax(row))])
        b.decode([int(np.argmax(row))])
        np.testing.assert_array_equal(a.decode([7], [0]), b.decode([7], [0]))  # the caches hold the same


def _stopped_in_the_prompt_of(engine: SpeculativeEngine, prompt: str, stopped: str) -> list[object]:
    """The events of a generation whose Stop is pressed inside the ``stopped`` model's (target or draft) first
    decode call, which evaluates the prompt."""
    assert engine.draft is not None
    backends = {"target": engine.target, "draft": engine.draft}
    for b in backends.values():
        b.truncate(0)
    cancel = SetAtLook(10**6)
    calls: list[str] = []

    def watched(*args, _name: str, _real, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(_name)
        if _name == stopped:
            cancel.n = cancel.looks + 3  # the look before the call, then llama.cpp's first two
        return _real(*args, **kwargs)

    for name, b in backends.items():
        b.decode = functools.partial(watched, _name=name, _real=b.decode)  # type: ignore[method-assign]
    try:
        events: list[object] = list(engine.generate(prompt, greedy(max_tokens=12), cancel))
    finally:
        for b in backends.values():
            del b.decode
    assert calls[-1] == stopped
    return events


def test_stop_while_the_prompt_is_evaluated_ends_the_answer_before_its_first_step(tiny: TinyModels) -> None:
    with SpeculativeEngine(ModelConfig(tiny.target, tiny.identical, n_ctx=512)) as engine:
        prompt = " ".join([PROMPT] * 20)
        reference = finish_of(engine.generate(prompt, greedy(max_tokens=12))).tokens
        for stopped in ("target", "draft"):
            events = _stopped_in_the_prompt_of(engine, prompt, stopped)
            assert [type(e) for e in events] == [StartEvent, FinishEvent]
            assert isinstance(events[-1], FinishEvent)
            assert events[-1].reason is FinishReason.CANCELLED and not events[-1].tokens
        # The models stay usable, and the next answer is the same.
        assert finish_of(engine.generate(prompt, greedy(max_tokens=12))).tokens == reference


def test_stop_in_a_draft_model_s_catch_up_on_the_prompt_ends_the_answer(
    tiny: TinyModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A draft model kept from the prompt (the controller found it could not pay then) evaluates the prompt at its
    first draft: Stop stops that as it stops the target's evaluation, and the drafters given no prompt are not told
    an answer ended."""
    from speculens.engine.drafters.draft_model import DraftModelDrafter
    from speculens.engine.drafters.prompt_lookup import PromptLookupDrafter

    with SpeculativeEngine(ModelConfig(tiny.target, tiny.identical, n_ctx=512)) as engine:
        prompt = " ".join([PROMPT] * 20)
        reference = finish_of(engine.generate(prompt, greedy(max_tokens=12))).tokens
        assert engine.draft is not None
        engine.draft.truncate(0)
        monkeypatch.setattr(DraftModelDrafter, "prefill", lambda self, cancel=None: None)  # kept from the prompt
        cancel = SetAtLook(10**6)
        real_sync = engine.draft.sync

        def sync(tokens, logits_last=False, cancel=None):  # type: ignore[no-untyped-def]
            assert cancel is not None and len(tokens) > 64  # the catch-up on the whole prompt can be stopped
            cancel.n = cancel.looks + 3  # Stop pressed inside it
            return real_sync(tokens, logits_last, cancel)

        monkeypatch.setattr(engine.draft, "sync", sync)
        events = list(engine.generate(prompt, greedy(max_tokens=12), cancel))
        finish = events[-1]
        assert isinstance(finish, FinishEvent) and finish.reason is FinishReason.CANCELLED and not finish.tokens
        monkeypatch.undo()
        ended: list[int] = []
        monkeypatch.setattr(PromptLookupDrafter, "end", lambda self, history: ended.append(len(history)))
        stopped = threading.Event()
        stopped.set()
        list(engine.generate(prompt, greedy(Strategy.LOOKUP, max_tokens=12), stopped))
        assert not ended  # stopped before the prompt: no drafter was given it, none is told an answer ended
        list(engine.generate(prompt, greedy(Strategy.LOOKUP, max_tokens=4)))
        assert ended
        monkeypatch.undo()
        assert finish_of(engine.generate(prompt, greedy(max_tokens=12))).tokens == reference


def test_a_draft_model_is_not_given_a_prompt_it_could_not_win_back(
    tiny: TinyModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    from speculens.engine.adaptive import AdaptiveController

    with SpeculativeEngine(ModelConfig(tiny.target, tiny.identical, n_ctx=512)) as engine:
        assert engine.draft is not None
        prompt = " ".join([PROMPT] * 20)
        asked: list[tuple[int, int, int]] = []
        pays = False

        def prefill_pays(self: AdaptiveController, n_prompt: int, n_read: int, max_tokens: int) -> bool:
            asked.append((n_prompt, n_read, max_tokens))
            return pays

        monkeypatch.setattr(AdaptiveController, "prefill_pays", prefill_pays)
        monkeypatch.setattr(AdaptiveController, "could_pay", lambda self: True)  # it might pay, just not for this
        read = engine.draft.n_decoded
        events = engine.generate(prompt, GenerationConfig(strategy=Strategy.DRAFT, max_tokens=8))
        start = next(events)
        assert isinstance(start, StartEvent) and asked == [(start.n_prompt, start.n_prompt, 8)]
        assert engine.draft.n_decoded == read and start.draft_behind == start.n_prompt  # not given the prompt
        finish = list(events)[-1]
        assert isinstance(finish, FinishEvent) and len(finish.tokens) == 8  # and the answer goes on
        pays = True
        for b in (engine.target, engine.draft):
            b.truncate(0)
        read = engine.draft.n_decoded
        events = engine.generate(prompt, GenerationConfig(strategy=Strategy.DRAFT, max_tokens=8))
        start = next(events)
        assert isinstance(start, StartEvent) and start.draft_behind == 0
        assert engine.draft.n_decoded > read  # a prompt worth reading is read before the answer
        list(events)
        # A chat's next turn: only what the draft's cache lacks is weighed, and no answer is longer than the context
        # has room for (a tour's multi-turn chat was refused as if the whole conversation were to be read).
        asked.clear()
        events = engine.generate(prompt + " and then some", GenerationConfig(strategy=Strategy.DRAFT, max_tokens=9999))
        start = next(events)
        assert isinstance(start, StartEvent)
        ((n_prompt, n_read, max_tokens),) = asked
        assert n_prompt == start.n_prompt > 100 and 0 < n_read < 10  # the words added, not the 100-token prompt
        assert max_tokens == engine.target.n_ctx + 1 - n_prompt
        events.close()
        # The start says whether the controller keeps the draft model idle (the live panel then says it sits out).
        assert not start.draft_idle
        monkeypatch.setattr(AdaptiveController, "could_pay", lambda self: False)
        for adaptive, idle in ((True, True), (False, False)):  # without the controller it drafts every step
            events = engine.generate(prompt, GenerationConfig(strategy=Strategy.DRAFT, max_tokens=2, adaptive=adaptive))
            start = next(events)
            assert isinstance(start, StartEvent) and start.draft_idle is idle
            events.close()


@pytest.mark.parametrize("adaptive", [False, True], ids=["fixed", "adaptive"])
@pytest.mark.parametrize("n_draft", [1, 16])
def test_a_full_context_ends_generation_without_overflow(tiny: TinyModels, n_draft: int, adaptive: bool) -> None:
    with SpeculativeEngine(ModelConfig(tiny.target, None, n_ctx=1024)) as big:
        plain = finish_of(big.generate(PROMPT, greedy(Strategy.NONE, max_tokens=400))).tokens
    with SpeculativeEngine(ModelConfig(tiny.target, tiny.identical, n_ctx=256)) as small:
        n_ctx = small.target.n_ctx  # llama.cpp may round the size up
        assert n_ctx < 400
        n_prompt = len(small.target.tokenize(PROMPT))
        events = list(small.generate(PROMPT, greedy(n_draft=n_draft, max_tokens=400, adaptive=adaptive)))
        finish = events[-1]
        assert isinstance(finish, FinishEvent)
        assert finish.reason is FinishReason.CONTEXT
        assert small.target.n_past <= n_ctx and small.draft is not None and small.draft.n_past <= n_ctx
    # Every position of the context was used, and the answer is the plain one, cut short.
    assert n_prompt + len(finish.tokens) == n_ctx + 1
    assert finish.tokens == plain[: len(finish.tokens)]


def test_stop_string_ends_the_answer_before_it(engine: SpeculativeEngine) -> None:
    full = finish_of(engine.generate(PROMPT, greedy(Strategy.NONE, max_tokens=60))).text
    stop = full[20:24]
    assert stop.strip() and full.find(stop) == 20, "pick a stop string that occurs once, mid-answer"
    events = list(engine.generate(PROMPT, greedy(max_tokens=60, stop=(stop,))))
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    assert finish.reason is FinishReason.STOP
    assert finish.text == full[:20]
    streamed = "".join(e.text for e in events if isinstance(e, StepEvent))
    assert stop not in streamed and full[:20].startswith(streamed)


def _answer_ending_mid_way(tiny_model_factory) -> tuple[list[int], int, int, Path]:  # type: ignore[no-untyped-def]
    """A tiny model's greedy answer, the position of a token it writes mid-answer (for the first time at
    position >= 5), that token, and the same model with that token declared end-of-sequence."""
    plain_model = tiny_model_factory("plain", seed=3)
    with SpeculativeEngine(ModelConfig(plain_model, None, n_ctx=512)) as plain:
        answer = finish_of(plain.generate(PROMPT, greedy(Strategy.NONE, max_tokens=60))).tokens
    position = next(i for i, t in enumerate(answer) if i >= 5 and t not in answer[:i] and t > 300)
    eos = answer[position]
    return answer, position, eos, tiny_model_factory("eos-target", seed=3, eos_token_id=eos)


def test_eog_inside_a_draft_ends_the_answer_there(tiny_model_factory) -> None:  # type: ignore[no-untyped-def]
    answer, position, eos, target = _answer_ending_mid_way(tiny_model_factory)
    draft = tiny_model_factory("eos-draft", seed=3, eos_token_id=eos)
    with SpeculativeEngine(ModelConfig(target, draft, n_ctx=512)) as engine:
        assert eos in engine.target.vocab.eog
        events = list(engine.generate(PROMPT, greedy(n_draft=16, max_tokens=60)))
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    assert finish.reason is FinishReason.EOG
    assert finish.tokens == answer[:position]
    steps = [e for e in events if isinstance(e, StepEvent)]
    # The EOG token was drafted (and accepted) and not emitted; the draft model stopped drafting there, since
    # nothing after the answer's end could be used.
    assert any(d.id == eos and d.accepted for s in steps for d in s.drafted)
    assert all(e.id != eos for s in steps for e in s.emitted)
    assert all(s.drafted[-1].id == eos for s in steps if any(d.id == eos for d in s.drafted))
    # The figures count the answer's tokens, as the token views show them: the drafts after its end are
    # neither accepted nor rejected tokens of it.
    shown_accepted = sum(e.origin is Origin.ACCEPTED for s in steps for e in s.emitted)
    last = steps[-1]
    assert finish.stats.n_accepted == shown_accepted
    assert finish.stats.n_drafted == sum(len(s.drafted) for s in steps[:-1]) + len(last.emitted)


class _CopyPastTheEnd:
    """A free drafter that copies the answer and runs on past its end, as prompt lookup does when the text it
    copies from ends a chat turn (``<|im_end|>`` and the next turn's header after it)."""

    name = "copy"

    def __init__(self, prompt_len: int, answer: list[int], eos: int) -> None:
        self.prompt_len = prompt_len
        self.text = [*answer, eos, *answer[:20]]
        self.done = 0  # answer tokens written when it last drafted

    def begin(self, prompt: object) -> None:
        pass

    def draft(self, history: list[int], n_max: int) -> Draft:
        self.done = len(history) - self.prompt_len
        return Draft(tuple(self.text[self.done : self.done + n_max]))

    def end(self, history: object) -> None:
        pass


@pytest.mark.parametrize("adaptive", [False, True])
def test_a_free_draft_is_not_verified_past_the_end_of_the_answer(  # type: ignore[no-untyped-def]
    tiny_model_factory, adaptive: bool, monkeypatch
) -> None:
    answer, position, eos, target = _answer_ending_mid_way(tiny_model_factory)
    with SpeculativeEngine(ModelConfig(target, None, n_ctx=512)) as engine:
        prompt = engine.target.tokenize(PROMPT)
        drafter = _CopyPastTheEnd(len(prompt), answer[:position], eos)
        config = greedy(Strategy.LOOKUP, n_draft=16, max_tokens=60, adaptive=adaptive)
        # What the adaptive controller is offered each step (whether it drafts depends on measured timings).
        offered: list[tuple[int, int]] = []  # (answer tokens so far, tokens offered)
        plan = AdaptiveController.plan

        def spy(self: AdaptiveController, limit: int, offers: list[Offer] = [], behind: int = 0) -> StepPlan:  # noqa: B006
            offered.extend((drafter.done, o.n_tokens) for o in offers)
            return plan(self, limit, offers, behind)

        monkeypatch.setattr(AdaptiveController, "plan", spy)
        events = list(generate(engine.target, [drafter], prompt, config, np.random.default_rng(0)))
    finish = events[-1]
    assert isinstance(finish, FinishEvent) and finish.reason is FinishReason.EOG
    assert finish.tokens == answer[:position]
    drafts = [[d.id for d in e.drafted] for e in events if isinstance(e, StepEvent) and e.drafted]
    assert all(d.index(eos) == len(d) - 1 for d in drafts if eos in d)  # a draft ends at the EOG token
    if adaptive:  # the controller is offered nothing past it, so it costs the batch it could verify
        assert any(done + 16 > position for done, _ in offered)
        assert all(n <= position + 1 - done for done, n in offered)
    else:
        assert any(eos in d for d in drafts)


def test_characters_split_across_tokens_come_out_whole(tiny: TinyModels) -> None:
    text = "日本語 😀 ünïcödé"
    with LlamaBackend(tiny.target, BackendParams(vocab_only=True)) as vocab:
        tokens = vocab.tokenize(text, add_special=False)
        pieces = [vocab.piece(t) for t in tokens]
    assert len(tokens) > len(text)  # byte fallback: one token per byte for the CJK and emoji characters
    assembler = TextAssembler()
    chunks = [assembler.feed(p) for p in pieces]
    assert all("\ufffd" not in c for c in chunks)
    assert " " + text == "".join(chunks) + assembler.flush()


def test_streamed_text_adds_up_to_the_final_text(engine: SpeculativeEngine) -> None:
    events = list(engine.generate("日本語 😀", greedy(max_tokens=50)))
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    streamed = "".join(e.text for e in events if isinstance(e, StepEvent))
    assert streamed == finish.text
    assert finish.text == engine.target.detokenize(finish.tokens)


def test_second_chat_turn_evaluates_only_the_new_tokens(tiny: TinyModels) -> None:
    with SpeculativeEngine(ModelConfig(tiny.target, tiny.identical, n_ctx=1024)) as engine:
        chat = ChatSession(engine)
        config = greedy(max_tokens=12)
        first = list(chat.send("one two three", config))
        start1 = first[0]
        assert isinstance(start1, StartEvent) and start1.n_prompt_evaluated == start1.n_prompt
        turn1_prompt = start1.n_prompt
        assert engine.draft is not None
        draft_before = engine.draft.n_decoded
        target_before = engine.target.n_decoded
        second = list(chat.send("what is the time", config))
        start2 = second[0]
        assert isinstance(start2, StartEvent)
        # The whole first turn (prompt and answer) stays in the KV cache; only the new turn is evaluated.
        assert start2.n_prompt_evaluated <= start2.n_prompt - turn1_prompt
        n_new = start2.n_prompt - turn1_prompt
        assert engine.target.n_decoded - target_before < n_new + 2 * 12 + 16
        assert engine.draft.n_decoded - draft_before < n_new + 2 * 12 + 16
    assert [m["role"] for m in chat.messages] == ["user", "assistant", "user", "assistant"]


def test_a_chat_turn_that_fails_leaves_the_conversation_as_it_was(
    tiny: TinyModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SpeculativeEngine(ModelConfig(tiny.target, tiny.identical, n_ctx=256)) as engine:
        chat = ChatSession(engine)
        config = greedy(max_tokens=8)
        list(chat.send("one two three", config))
        before = list(chat.messages)
        with pytest.raises(PromptError):
            list(chat.send("word " * 400, config))
        assert chat.messages == before
        chat_for_real = engine.chat

        def fails_after_starting(*args, **kwargs):  # type: ignore[no-untyped-def]
            events = chat_for_real(*args, **kwargs)
            yield next(events)
            raise BackendError("decode failed")

        monkeypatch.setattr(engine, "chat", fails_after_starting)
        with pytest.raises(BackendError):
            list(chat.send("four five", config))
        assert chat.messages == before  # no user message left without its answer
        monkeypatch.undo()
        stopped = threading.Event()
        stopped.set()  # Stop (Ctrl+C in `generate --chat`) before the answer began: the message is not kept
        assert finish_of(chat.send("eight nine", config, stopped)).reason is FinishReason.CANCELLED
        assert chat.messages == before
        list(chat.send("six seven", config))
    assert [m["role"] for m in chat.messages] == ["user", "assistant", "user", "assistant"]
    assert chat.messages[2]["content"] == "six seven"


def test_missing_and_non_gguf_files_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="not found"):
        LlamaBackend(tmp_path / "nope.gguf")
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("hello")
    with pytest.raises(BackendError, match="not a GGUF"):
        LlamaBackend(bogus)
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(b"GGUF" + b"\0" * 20)
    with pytest.raises(BackendError, match="could not load"):
        LlamaBackend(truncated)


def test_a_draft_with_another_vocabulary_is_refused_with_the_failed_check(tiny: TinyModels) -> None:
    with pytest.raises(VocabMismatchError, match=r"token texts differ from id \d+") as info:
        SpeculativeEngine(ModelConfig(tiny.target, tiny.mismatch, n_ctx=256))
    assert "prompt lookup" in str(info.value)


def test_bad_requests_are_refused_and_the_engine_stays_usable(engine: SpeculativeEngine) -> None:
    reference = finish_of(engine.generate(PROMPT, greedy(max_tokens=10))).tokens
    with pytest.raises(PromptError, match="empty"):
        engine.generate("   ", greedy())
    with pytest.raises(PromptError, match="context"):
        engine.generate("the " * 600, greedy())
    for bad in (0, 65):
        with pytest.raises(ValueError, match="n_draft"):
            engine.generate(PROMPT, greedy(n_draft=bad))
    with pytest.raises(ValueError, match="top-p"):
        engine.generate(PROMPT, GenerationConfig(sampling=SamplingParams(temperature=1, top_p=0)))
    with pytest.raises(ValueError, match="map file"):
        engine.generate(PROMPT, greedy(Strategy.NGRAM_MAP))
    assert finish_of(engine.generate(PROMPT, greedy(max_tokens=10))).tokens == reference


@pytest.mark.parametrize("prefix_repeats", [4, 120], ids=["short-context", "long-context"])
def test_exact_verification_is_bit_identical_to_one_token_decoding(tiny_model_factory, prefix_repeats: int) -> None:  # type: ignore[no-untyped-def]
    """The premise of exact greedy speculation: batched rows equal one-token decoding, bit for bit, when a batch
    is split into the call sizes the load-time probe found invariant.

    Quantized weights, as real models have; the long context passes 512 KV cells, where llama.cpp's flash
    attention sends one query over an f16 cache down a split-KV path (the exact target's q8_0 cache never).
    """
    model = tiny_model_factory("q8", quantized=True)
    with (
        LlamaBackend(model, BackendParams(n_ctx=2048)) as fast,
        LlamaBackend(model, BackendParams(n_ctx=2048, exact=True)) as seq,
        LlamaBackend(model, BackendParams(n_ctx=2048, exact=True)) as bat,
    ):
        assert fast.invariant_sizes == (1,)  # no promise without the probe
        bat.probe_invariance()
        assert bat.invariant_sizes[0] == 1 and bat.split(12) and sum(bat.split(12)) == 12
        prefix = seq.tokenize(PROMPT * prefix_repeats)
        seq.decode(prefix)
        bat.decode(prefix)
        tokens = [300 + i for i in range(12)]
        one_by_one = np.stack([seq.decode([t], [0])[0].copy() for t in tokens])
        batched = bat.decode(tokens, range(len(tokens)), exact=True).copy()
    assert np.array_equal(one_by_one, batched)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads Linux's /proc/self/maps")
def test_repacked_weights_are_read_not_mapped(tiny_model_factory) -> None:  # type: ignore[no-untyped-def]
    """Repacked weights are copies made from the file: mapped too, the file's pages would stay resident beside
    them. Fast mode on the CPU reads the file; bit-exact mode (no repacking) and a GPU offload keep the mapping."""
    if not repacks() or not backend.extra_buffers_default():
        pytest.skip("this llama.cpp build does not repack weights for this CPU, or not by default (an AMX build)")
    # Q4_0: repacked on x86 and ARM alike.
    model = tiny_model_factory("q4", quantized=True, quant="Q4_0")

    def in_maps() -> bool:
        return str(model) in Path("/proc/self/maps").read_text()

    with LlamaBackend(model, BackendParams(n_ctx=256)) as fast:
        assert fast.repacked and not fast.mapped and not in_maps()
        assert fast.decode(fast.tokenize(PROMPT), [0]).shape == (1, fast.n_vocab)
    with LlamaBackend(model, BackendParams(n_ctx=256, exact=True)) as exact:
        assert exact.mapped and in_maps()


def test_an_amx_build_loads_without_the_extra_buffer_types(tiny_model_factory, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An AMX build loads without llama.cpp's extra buffer types, repacking included (AMX crashes on VMs that do
    not keep its tile state, and repacking alone evaluated prompts a third slower there), unless
    SPECULENS_CPU_EXTRA_BUFFERS says otherwise; other builds keep llama.cpp's default."""
    monkeypatch.delenv("SPECULENS_CPU_EXTRA_BUFFERS", raising=False)
    monkeypatch.setattr(backend, "amx_build", lambda: False)
    assert backend.extra_buffers_default()
    monkeypatch.setattr(backend, "amx_build", lambda: True)
    assert not backend.extra_buffers_default()
    for value, expected in (("1", True), ("0", False), ("yes", False)):
        monkeypatch.setenv("SPECULENS_CPU_EXTRA_BUFFERS", value)
        assert backend.extra_buffers_default() is expected
    monkeypatch.delenv("SPECULENS_CPU_EXTRA_BUFFERS")
    # Q4_0: a type llama.cpp repacks on x86 and ARM, so a build that repacks would repack it with its defaults.
    with LlamaBackend(tiny_model_factory("q4", quantized=True, quant="Q4_0"), BackendParams(n_ctx=256)) as amx:
        assert not amx.repacked and amx.mapped
        assert amx.decode([1, 300, 301], [2]).shape == (1, amx.n_vocab)


def test_the_invariance_probe_tells_the_truth_about_every_size(tiny_model_factory) -> None:  # type: ignore[no-untyped-def]
    """A size the probe calls invariant gives identical rows; a size it rejects really does differ (so the
    probe, and the test above, can fail)."""
    model = tiny_model_factory("q8", quantized=True)
    with (
        LlamaBackend(model, BackendParams(n_ctx=512, exact=True)) as seq,
        LlamaBackend(model, BackendParams(n_ctx=512, exact=True)) as bat,
    ):
        bat.probe_invariance()
        prefix = seq.tokenize(PROMPT * 3)
        tokens = [300 + i for i in range(8)]
        seq.decode(prefix)
        one_by_one = np.stack([seq.decode([t], [0])[0].copy() for t in tokens])
        bat.decode(prefix)
        for n in range(2, 9):
            bat.truncate(len(prefix))
            same = np.array_equal(bat.decode(tokens[:n], range(n)), one_by_one[:n])
            assert same == (n in bat.invariant_sizes), n


def test_logits_of_several_decode_calls_are_all_kept(tiny: TinyModels) -> None:
    with LlamaBackend(tiny.target, BackendParams(n_ctx=256)) as b:
        tokens = b.tokenize(PROMPT)
        whole = b.decode(tokens, range(len(tokens))).copy()
    with LlamaBackend(tiny.target, BackendParams(n_ctx=256, n_batch=2)) as b:
        pieces = b.decode(tokens, range(len(tokens)))
    assert pieces.shape == whole.shape
    assert np.argmax(pieces, axis=1).tolist() == np.argmax(whole, axis=1).tolist()


def test_k_quant_batches_are_bit_identical_only_in_the_probed_sizes(tmp_path: Path) -> None:
    """The real demo models are Q4_K_M, whose CPU kernels switch with the batch size: split into the probed
    sizes, a batch gives one-token decoding's rows; as one decode call it does not (so the test can fail)."""
    f32 = write_tiny_model(tmp_path / "f32.gguf", TinyModelSpec(n_embd=256, n_head=4, n_ff=512))
    model = quantize_model(f32, tmp_path / "q4_k_m.gguf")
    with (
        LlamaBackend(model, BackendParams(n_ctx=512, exact=True)) as seq,
        LlamaBackend(model, BackendParams(n_ctx=512, exact=True)) as bat,
        LlamaBackend(model, BackendParams(n_ctx=512)) as fast,
    ):
        assert "Q4_K" in seq.description()
        bat.probe_invariance()
        prefix = seq.tokenize(PROMPT * 3)
        tokens = [300 + i for i in range(12)]
        for backend in (seq, bat, fast):
            backend.decode(prefix)
        one_by_one = np.stack([seq.decode([t], [0])[0].copy() for t in tokens])
        split = bat.decode(tokens, range(len(tokens)), exact=True).copy()
        bat.truncate(len(prefix))
        whole = bat.decode(tokens, range(len(tokens))).copy()
        fast_whole = fast.decode(tokens, range(len(tokens))).copy()
        fast.truncate(len(prefix))
        fast_one_by_one = np.stack([fast.decode([t], [0])[0].copy() for t in tokens])
    assert np.array_equal(split, one_by_one)
    assert not np.array_equal(whole, one_by_one)  # one call of 12: another kernel, other rounding
    assert not np.array_equal(fast_whole, fast_one_by_one)  # fast mode (repacked weights) alike


def test_plain_decoding_reads_one_token_per_pass_including_the_end_token(tiny_model_factory) -> None:  # type: ignore[no-untyped-def]
    """From a user tour: a 20-token plain answer read 0.95 tokens per pass, because the pass that produced
    the end-of-generation token counted and the token did not."""
    answer, position, _eos, target = _answer_ending_mid_way(tiny_model_factory)
    with SpeculativeEngine(ModelConfig(target, None, n_ctx=512)) as engine:
        finish = finish_of(engine.generate(PROMPT, greedy(Strategy.NONE, max_tokens=60)))
    assert finish.reason is FinishReason.EOG and finish.tokens == answer[:position]
    stats = finish.stats
    assert stats.n_generated == position and stats.n_steps == position + 1 and stats.n_ended == 1
    assert stats.mean_accepted_length == 1.0
    run = RunResult.from_stats(finish.tokens, stats)
    assert summarise_runs([run]).mean_accepted_length == 1.0


@pytest.mark.parametrize("flash_attn", [None, False], ids=["flash-auto", "flash-off"])
def test_the_kv_cache_grows_as_needed_and_its_logits_do_not_change(tiny: TinyModels, flash_attn: bool | None) -> None:
    with (
        LlamaBackend(tiny.target, BackendParams(n_ctx=1024, flash_attn=flash_attn)) as growing,
        LlamaBackend(tiny.target, BackendParams(n_ctx=1024, flash_attn=flash_attn)) as whole,
    ):
        tokens = (growing.tokenize(PROMPT) * 200)[:600]
        whole.reserve(5000)  # at most the context size
        assert growing.n_cells == backend.KV_STEP and whole.n_cells == whole.n_ctx == 1024
        rows = []
        for model in (growing, whole):  # the same decode calls: the cache grows before the second and the third
            model.decode(tokens[:200])
            model.decode(tokens[200:300])
            rows.append(model.decode(tokens[300:], range(300)).copy())
        assert growing.n_cells == 768 and growing.tokens == whole.tokens == tokens  # by half, then to 600 rounded up
        np.testing.assert_array_equal(rows[0], rows[1])
        growing.truncate(100)  # what it holds is still a cache: cut back and evaluated again alike
        whole.truncate(100)
        np.testing.assert_array_equal(growing.decode([50], [0]), whole.decode([50], [0]))


def test_a_kv_cache_that_cannot_grow_says_so_and_keeps_what_it_holds(
    tiny: TinyModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    with LlamaBackend(tiny.target, BackendParams(n_ctx=1024)) as model:
        tokens = (model.tokenize(PROMPT) * 100)[:300]
        make = model._new_context
        monkeypatch.setattr(model, "_new_context", lambda n, flash: None if n > 256 else make(n, flash))
        model.decode(tokens[:200])
        with pytest.raises(BackendError, match="not enough memory to grow the context"):
            model.decode(tokens[200:])
        assert model.loaded and model.n_cells == 256 and model.tokens == tokens[:200]
        kept = model.decode(tokens[200:250], [49])[0].copy()
        with LlamaBackend(tiny.target, BackendParams(n_ctx=256)) as fresh:
            fresh.decode(tokens[:200])
            np.testing.assert_array_equal(kept, fresh.decode(tokens[200:250], [49])[0])


@pytest.mark.parametrize("exact", [False, True], ids=["f16-cache", "q8_0-cache"])
def test_a_kv_cell_s_memory_is_what_llama_cpp_stores_for_it(tiny: TinyModels, exact: bool) -> None:
    import llama_cpp

    with LlamaBackend(tiny.target, BackendParams(n_ctx=1024, exact=exact)) as model:
        tokens = (model.tokenize(PROMPT) * 100)[:300]
        model.decode(tokens[:200])
        before = llama_cpp.llama_state_seq_get_size(model._ctx, 0)
        model.decode(tokens[200:])
        per_cell = (llama_cpp.llama_state_seq_get_size(model._ctx, 0) - before) / 100
        # The saved state holds each cell's keys and values, and its position and sequences (12 bytes here).
        assert model.host_cell_bytes <= per_cell <= model.host_cell_bytes + 16


def test_a_kv_cache_never_grows_past_the_memory_left(tiny: TinyModels, monkeypatch: pytest.MonkeyPatch) -> None:
    with LlamaBackend(tiny.target, BackendParams(n_ctx=8192)) as model:
        tokens = (model.tokenize(PROMPT) * 100)[:300]
        model.decode(tokens[:200])
        cell = model.host_cell_bytes
        monkeypatch.setattr(backend, "available_memory", lambda: backend.MEMORY_HEADROOM + 300 * cell)
        with pytest.raises(BackendError, match=r"not enough memory to grow the context .* to 400 tokens"):
            model.reserve(400)  # 400 new cells and a copy of the 200 in use, less the 256 freed: 344 > 300
        assert model.loaded and model.n_cells == 256 and model.tokens == tokens[:200]
        monkeypatch.setattr(backend, "available_memory", lambda: None)  # not Linux: llama.cpp refuses, or swaps
        model.reserve(4096)
        assert model.n_cells == 4096
        monkeypatch.setattr(backend, "available_memory", lambda: backend.MEMORY_HEADROOM + 600 * cell)
        model.reserve(4200)  # by half would be 6,144 cells; what fits is 600 more than the 3,896 spare
        assert 4200 <= model.n_cells <= 3896 + 600 + backend.KV_STEP and model.tokens == tokens[:200]
        model.decode(tokens[200:])
        assert model.tokens == tokens


def test_a_model_left_without_any_context_says_why_when_it_is_used_again(
    tiny: TinyModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    with LlamaBackend(tiny.target, BackendParams(n_ctx=1024)) as model:
        tokens = (model.tokenize(PROMPT) * 100)[:300]
        model.decode(tokens[:200])
        monkeypatch.setattr(model, "_new_context", lambda n, flash: None)  # neither the larger nor the old size
        with pytest.raises(BackendError, match="not even at its old size of 256 tokens, so it was unloaded") as first:
            model.decode(tokens[200:])
        assert not model.loaded
        with pytest.raises(BackendError) as later:  # the next generation: the same reason, not "vocabulary-only"
            model.decode(tokens[:1])
        assert str(later.value) == str(first.value)


def test_a_generation_grows_the_caches_before_its_first_step(tiny: TinyModels) -> None:
    with SpeculativeEngine(ModelConfig(tiny.target, tiny.identical, n_ctx=2048)) as engine:
        assert engine.target.n_cells == engine.draft.n_cells == backend.KV_STEP  # type: ignore[union-attr]
        events = engine.generate(PROMPT, greedy(n_draft=8, max_tokens=300))
        start = next(events)
        assert isinstance(start, StartEvent)
        cells = (engine.target.n_cells, engine.draft.n_cells)  # type: ignore[union-attr]
        assert min(cells) >= start.n_prompt + 300
        finish = finish_of(events)
        assert len(finish.tokens) == 300 and (engine.target.n_cells, engine.draft.n_cells) == cells  # type: ignore[union-attr]
    with SpeculativeEngine(ModelConfig(tiny.target, tiny.identical, n_ctx=2048)) as plain:
        plain.target.reserve(2048)
        assert finish_of(plain.generate(PROMPT, greedy(Strategy.NONE, max_tokens=300))).tokens == finish.tokens
        assert plain.draft is not None and plain.draft.n_cells == backend.KV_STEP  # not used: not grown


def test_without_flash_attention_a_prompt_is_computed_in_smaller_ubatches(tiny: TinyModels) -> None:
    import llama_cpp

    with LlamaBackend(tiny.target, BackendParams(n_ctx=1024, flash_attn=False)) as off:
        assert llama_cpp.llama_n_ubatch(off._ctx) == backend.UBATCH_NO_FLASH < off.params.n_batch
        off.set_flash_attn(True)
        off.reserve(1024)  # llama.cpp computes at most a context's cells at once
        assert llama_cpp.llama_n_ubatch(off._ctx) == off.params.n_batch


def test_a_decode_asking_for_more_rows_than_a_context_holds_is_cut_into_calls_that_fit(tiny: TinyModels) -> None:
    with LlamaBackend(tiny.target, BackendParams(n_ctx=512)) as b:
        tokens = (b.tokenize(PROMPT) * 40)[:150]
        rows = b.decode(tokens, range(len(tokens))).copy()
        assert [n for n, _ in b.last_calls] == [65, 65, 20]  # each call at most N_OUTPUTS_MAX rows
        b.truncate(0)
        rows_last = b.decode(tokens, [149]).copy()
        assert [n for n, _ in b.last_calls] == [150]  # one row asked: one call, as a prompt is evaluated
    with LlamaBackend(tiny.target, BackendParams(n_ctx=512, n_batch=2)) as small:
        reference = small.decode(tokens, range(len(tokens)))
    assert rows.shape == reference.shape == (150, small.n_vocab)
    assert np.argmax(rows, axis=1).tolist() == np.argmax(reference, axis=1).tolist()
    assert int(np.argmax(rows_last[0])) == int(np.argmax(reference[149]))


@pytest.mark.parametrize("n_rows", [backend.N_OUTPUTS_MAX, backend.N_OUTPUTS_MAX + 1])
def test_a_context_reserves_logits_for_the_longest_verification_only(tiny: TinyModels, n_rows: int) -> None:
    # One llama_decode asking for more rows than the context was made for aborts inside llama.cpp (that is why
    # decode cuts such calls): run it in a child process, the proof that the smaller buffer is in force.
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from speculens.engine.backend import LlamaBackend, BackendParams\n"
        f"b = LlamaBackend(sys.argv[1], BackendParams(n_ctx=512))\n"
        f"tokens = (b.tokenize('{PROMPT}') * 40)[:{n_rows}]\n"
        f"rc, _ = b._call(b._ctx, tokens, 0, [True] * {n_rows})\n"
        "print('decoded', rc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(tiny.target)], capture_output=True, text=True)
    if n_rows <= backend.N_OUTPUTS_MAX:
        assert proc.returncode == 0 and "decoded 0" in proc.stdout, proc.stderr[-2000:]
    else:
        assert proc.returncode != 0 and "decoded" not in proc.stdout
