"""The engine's front door: load a target (and a draft), then generate or chat.

:class:`SpeculativeEngine` owns the llama.cpp objects. It is not thread-safe by design: one worker thread
owns it (DESIGN.md §3) and every request goes through that thread; only ``cancel`` crosses threads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import statistics
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from speculens.atomic import write_json_atomic
from speculens.engine import loading
from speculens.engine.adaptive import MODEL, AdaptiveController, CostModel
from speculens.engine.backend import (
    BackendError,
    BackendParams,
    FlashProbe,
    LlamaBackend,
    cpu_model,
    default_threads,
    gpu_backend_name,
    offloaded_layers,
    system_info,
)
from speculens.engine.config import (
    FlashAttention,
    GenerationConfig,
    ModelConfig,
    PromptError,
    Strategy,
    recurrent_refusal,
)
from speculens.engine.drafters.base import Drafter
from speculens.engine.drafters.draft_model import DraftModelDrafter
from speculens.engine.drafters.ngram_cache import NgramCacheDrafter
from speculens.engine.drafters.ngram_map import NgramMapDrafter
from speculens.engine.drafters.ngram_table import NgramTable, NgramTableError, another_tokenizer
from speculens.engine.drafters.prompt_lookup import PromptLookupDrafter
from speculens.engine.events import Divergence, Event, FinishEvent, FinishReason
from speculens.engine.generate import generate
from speculens.engine.protocol import EngineInfo, Messages
from speculens.engine.threads import CpuWindow, ThreadGovernor, crowded, crowding
from speculens.engine.vocab import VocabMismatchError, vocab_mismatch
from speculens.errors import InvalidInputError

log = logging.getLogger(__name__)

# Decode-call sizes timed by SpeculativeEngine.calibrate: the verification batches (1 + n_draft tokens) the
# adaptive controller chooses among. Kernels make some sizes much dearer per token than their neighbours
# (llama.cpp's repacked Q4_K weights take rows four at a time: 16 tokens cost less than 15 on a 2-core x86),
# so the controller only uses sizes it has measured, and these are a spread of efficient ones.
CALIBRATION_SIZES = (2, 3, 4, 8, 12, 16, 24, 32, 48, 64)
# Sizes re-timed at every load even when saved costs have them: the short drafts that start a copy. Saved costs
# change only for sizes the controller drafts, so a size measured too dear once (a noisy spell, another host)
# would never be drafted, nor measured, again. When the median of their fresh ratios to the saved ones lies
# outside this factor, the saved verification costs are dropped and every size is measured afresh.
RECHECK_SIZES = (2, 3, 4)
RECHECK_TOLERANCE = 1.3
# Loads re-time each of the other calibration sizes until it has this many samples: a size drafted rarely keeps the
# one sample of its first calibration, and one noisy reading (a batch of 8 at 5.8 single steps, dearer than 16 at
# 4.6, measured so on this VM) would otherwise steer every draft of 4 to 11 tokens for good.
CALIBRATION_SAMPLES = 3
# A generation that would decode faster with flash attention switched (see fit_flash_attn) switches only when the
# caches hold no more than this many tokens it could reuse (a system prompt's, not a conversation's), or no more
# than a quarter of its prompt (a long document pasted into a conversation: the switch re-evaluates the rest).
FLASH_SWITCH_KEEP = 64
# The longest answer fit_flash_attn expects, whatever Max tokens allows: Max tokens set to a million asks not to be cut
# off, it does not foretell a long answer (a tour's 999,999 at a 2,048-token context put a one-word answer's depth at
# 1,041 tokens and timed the other setting's kernels for 6 s before it).
FLASH_ANSWER_GUESS = 1024
# A recurrent or hybrid target (Mamba, RWKV, Jamba ...) keeps this many state snapshots, so a verification can take
# back up to this many rejected drafts; its drafts are capped at that length (memory grows with it).
RECURRENT_ROLLBACK = 16


class SpeculativeEngine:
    """A loaded target, an optional draft, and the draft-free sources.

    Args:
        config: the models and their settings.

    Raises:
        BackendError: a model could not be loaded.
        VocabMismatchError: the draft's vocabulary cannot draft for the target's (the message says which
            check failed); the draft-free strategies still work with the target alone.
    """

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        forced = {FlashAttention.ON: True, FlashAttention.OFF: False}.get(config.flash_attn)
        # A choice measured at an earlier load is applied as the context is made (see choose_flash_attn).
        measured = config.flash_attn is FlashAttention.AUTO and not config.exact
        on_cpu = not offloaded_layers(config.n_gpu_layers)
        # Loads in a row whose probe ran while other programs kept the CPUs busy (see choose_flash_attn).
        saved, self._flash_busy_loads = self._saved_flash_probe() if measured and on_cpu else (None, 0)
        # What flash attention costs on and off at two depths, where it was measured (see fit_flash_attn).
        self._flash: FlashProbe | None = None
        self.target = LlamaBackend(
            config.target,
            BackendParams(
                config.n_ctx,
                config.n_threads,
                config.n_gpu_layers,
                exact=config.exact,
                rollback=RECURRENT_ROLLBACK,
                flash_attn=saved.start if saved is not None else forced,
            ),
        )
        # What flash attention the models run with, and why (see choose_flash_attn).
        self.flash_note = "on (bit-exact mode)" if config.exact else "" if forced is None else ("off", "on")[forced]
        try:
            if config.exact:
                loading.report(f"Finding the batch sizes that {config.target.name} verifies bit-exactly in")
                self.target.probe_invariance()
            elif measured:
                self.choose_flash_attn(saved)
        except BaseException:
            self.target.close()
            raise
        self.draft: LlamaBackend | None = None
        # Other programs' share of the CPUs while the draft was timed, where it crowded its threads (threads.crowded)
        self._draft_timed_busy: float | None = None
        self._target_timed_busy: float | None = None  # and while the target was (calibrate)
        # Fewer threads while another program keeps a core busy (engine.threads), on the CPU only (bit-exact mode
        # measured its invariance with its own count).
        self.threads: ThreadGovernor | None = None
        if config.adaptive_threads and not config.exact and on_cpu and self.target.n_threads > 1:
            self.threads = ThreadGovernor(self.target.n_threads)
        # What this machine charges for verification and drafting, learnt by the adaptive controller and
        # kept across generations (acceptance is per text and starts afresh each time), and across sessions
        # when there is a costs folder: the target's per target, whatever drafts for it, a draft model's per pair.
        self.costs = self.new_costs()
        self._restore(self._verify_costs_path, self.costs.restore_verify, self.costs.forget_verify)
        self._ngram_cache: NgramCacheDrafter | None = None
        self._ngram_map: tuple[tuple[Path, int, int], NgramMapDrafter] | None = None  # (file, mtime, size), map
        if config.draft is not None:
            try:
                self.load_draft(config.draft)
            except BaseException:
                self.close()
                raise
        try:
            self.calibrate()
        except BaseException:
            self.close()
            raise
        # The costs (verification, draft model) this session measured with the flash-attention setting it left, by
        # setting (see fit_flash_attn).
        self._flash_costs: dict[bool | None, tuple[dict[str, Any], dict[str, Any]]] = {}

    def load_draft(self, path: Path) -> None:
        """Load (or replace) the draft model, refusing one whose vocabulary does not match the target's."""
        # In exact mode the draft is computed like the target (cache precision, kernels), so a draft with the
        # target's own weights proposes exactly the target's tokens.
        c = self.config
        params = BackendParams(
            c.n_ctx, c.n_threads, c.n_gpu_layers_draft, exact=c.exact, flash_attn=self.target.params.flash_attn
        )
        draft = LlamaBackend(path, params)
        problem = vocab_mismatch(self.target.vocab, draft.vocab)
        if not problem and draft.recurrent:
            draft.close()
            raise BackendError(
                f"{path.name} cannot be a draft model: it is a recurrent model (Mamba, RWKV and the like), whose "
                "state llama.cpp cannot take back token by token, so every rejected draft would re-read the whole "
                "conversation. Choose an attention model as the draft, or a draft-free strategy."
            )
        if problem:
            draft.close()
            raise VocabMismatchError(
                f"{path.name} cannot draft for {self.config.target.name}: {problem}. "
                "Draft-model speculation needs the same tokenizer; prompt lookup, the n-gram cache and "
                "an n-gram map still work with the target alone."
            )
        if self.draft is not None:
            self.save_costs()  # the replaced draft's costs
            self.draft.close()
        self.draft = draft
        try:
            self._draft_costs()
        except BaseException:
            self.draft = None
            self.costs.forget_draft()
            draft.close()
            raise
        self._flash_costs = {}  # the other settings' draft costs were the replaced draft's

    def choose_flash_attn(self, saved: FlashProbe | None) -> None:
        """Run the target with flash attention as measured faster on this machine (on a CPU; on a GPU llama.cpp
        decides): ``saved``, what an earlier load measured, or else :meth:`LlamaBackend.probe_flash_attention`'s
        timings, kept per model, context size, thread count, build and CPU in the costs folder, so it is measured
        once (about 4-5 s on a 2-core VM), and once more at the next load when other programs kept the CPUs busy
        meanwhile. The load takes the setting for a short context, where a conversation
        starts; :meth:`fit_flash_attn` moves to the other one for a generation that decodes deeper. The draft model,
        loaded next, takes the target's setting."""
        c = self.config
        if offloaded_layers(c.n_gpu_layers):
            self.flash_note = "as llama.cpp decides (layers on the GPU)"
            return
        if saved is None:
            again = "again: the last timing was taken on a busy machine" if self._flash_busy_loads else (
                "once per model and context size")
            loading.report(f"Timing {c.target.name} with flash attention on and off ({again})")
            window = CpuWindow()
            saved = self.target.probe_flash_attention()
            if saved is None:
                self.flash_note = "as llama.cpp decides (could not be measured)"
                return
            # The timings of a busy spell chose the setting for every later load (nothing timed them again): they
            # are marked, and the next load times again once; a machine busy at that load too is taken as it is.
            busy = window.others_share()
            self._flash_busy_loads = self._flash_busy_loads + 1 if crowded(busy, self.target.n_threads) else 0
            path = self._flash_path()
            if path is not None:
                marked = {"busy_loads": self._flash_busy_loads, "busy_share": busy} if self._flash_busy_loads else {}
                try:
                    write_json_atomic(path, saved.state() | marked)
                except OSError as exc:
                    log.warning("could not save the flash-attention measurement: %s", exc)
            if self._flash_busy_loads == 1:
                note = f"timed while other programs used {busy:.0%} of the CPUs: timed again at the next load"
                log.info("%s: flash attention %s", c.target.name, note)
            self.target.set_flash_attn(saved.start)
        log.info("%s: %s", c.target.name, saved.describe())
        self.target.flash_supported = True  # timed with it on, now or at an earlier load on this machine and build
        self._flash = saved
        self.flash_note = saved.summary() + (" (timed on a busy machine: timed again at the next load)"
                                             if self._flash_busy_loads == 1 else "")  # fmt: skip

    def fit_flash_attn(self, prompt: Sequence[int], max_tokens: int, cancel: threading.Event | None = None) -> None:
        """Before a generation: switch flash attention (target and draft) to the setting measured faster at the
        depth this generation decodes at (the prompt and half of what it may add, up to :data:`FLASH_ANSWER_GUESS`),
        unless the caches hold more than
        :data:`FLASH_SWITCH_KEEP` tokens, and more than a quarter of this prompt, that it would reuse (a
        conversation going on: a switch empties them, and evaluating them again would cost more than it gains).
        The costs of that setting are restored and timed as at a load, the first time; a switch back to a setting
        this session left takes the costs it had then, untimed: every switch was timed, 1.0 s of the demo target's
        decode calls on 2 cores with the costs saved by earlier sessions (4.7 s while a setting's were still being
        gathered), paid by a short prompt after a long one for a gain of 2% (flash attention on at 64 tokens of
        context). Nothing happens where the setting was not measured (set by the user, bit-exact
        mode, a GPU)."""
        probe, target = self._flash, self.target
        if probe is None:
            return
        depth = len(prompt) + max(0, min(max_tokens, target.n_ctx - len(prompt), FLASH_ANSWER_GUESS)) // 2
        wanted = probe.choice(depth)
        reused = target.common_prefix(prompt)
        if wanted == target.params.flash_attn or reused > max(FLASH_SWITCH_KEEP, len(prompt) // 4):
            return
        self.save_costs()
        left = target.params.flash_attn
        target.set_flash_attn(wanted)
        if target.params.flash_attn != wanted:
            return  # llama.cpp could not make that context: the old one is back, costs and all
        log.info("flash attention %s for %d tokens of context", "off" if wanted is False else "on", depth)
        self._flash_costs[left] = (self.costs.verify_state(), self.costs.draft_state())  # fresh lists: no copy
        self.costs.forget_verify()
        if self.draft is not None:
            self.draft.set_flash_attn(wanted)
        if (kept := self._flash_costs.get(wanted)) is not None:
            self.costs.restore_verify(kept[0])
            if self.draft is not None:
                self.costs.forget_draft()
                self.costs.restore_draft(kept[1])
            return
        self._restore(self._verify_costs_path, self.costs.restore_verify, self.costs.forget_verify)
        backends = [b for b in (target, self.draft) if b is not None]
        try:
            if self.threads is not None:
                # Timed at the thread count the costs are kept for, not at the fewer a busy spell left.
                for backend in backends:
                    backend.set_threads(self.threads.full)
            # Stop stops the timing (up to 4.7 s of the demo target's decode calls on 2 cores: a tour's Ctrl+C
            # waited 5 s), and the switch is undone, to be made and timed again by the next generation that wants it.
            with loading.watching(loading.LoadWatch(cancel or threading.Event(), lambda _w, _d, _t: None)):
                if self.draft is not None:
                    self._draft_costs()
                self.calibrate()
        except loading.LoadCancelled:
            for backend in backends:
                backend.set_flash_attn(left)
            self.costs.forget_verify()
            self.costs.restore_verify(self._flash_costs[left][0])
            self.costs.forget_draft()
            self.costs.restore_draft(self._flash_costs[left][1])
        finally:
            if self.threads is not None:  # and the prompt is evaluated at the governor's count, as before
                for backend in backends:
                    backend.set_threads(self.threads.count)

    def _draft_costs(self) -> None:
        """Put the loaded draft model's saved costs (for the current settings) in the cost model, checked against a
        fresh timing (see :func:`calibrate_draft`), or time it."""
        assert self.draft is not None
        self.costs.forget_draft()
        self._restore(self._draft_costs_path, self.costs.restore_draft, self.costs.forget_draft)
        if not self.costs.draft_catchup.count:  # timed in the old way (every row's logits): measured afresh
            self.costs.forget_draft()
        loading.report(f"Timing {self.draft.path.name} on this machine")
        window = CpuWindow()
        calibrate_draft(self.draft, self.costs)  # every load: saved costs are checked against this machine now
        self._draft_timed_busy = crowding(window.others_share(), self.draft.n_threads)

    def _flash_path(self) -> Path | None:
        c = self.config
        return self._saved_path("flash", [c.n_threads or default_threads(), c.n_ctx], c.target)

    def _saved_flash_probe(self) -> tuple[FlashProbe | None, int]:
        """The flash-attention timings an earlier load measured for this model and machine, or ``None``, and how many
        loads in a row timed them on a busy machine: timed once so, they are timed again (``None``); a second busy
        load's timings are kept (the machine is so)."""
        try:
            path = self._flash_path()
            if path is None or not path.exists():
                return None, 0
            state = json.loads(path.read_text(encoding="utf-8"))
            probe = FlashProbe.from_state(state)
            busy_loads = int(state.get("busy_loads", 0))
            return (None if busy_loads == 1 else probe), busy_loads
        except (OSError, ValueError, TypeError) as exc:
            log.warning("measuring flash attention again: %s", exc)
            return None, 0

    def _saved_path(self, kind: str, key: list[object], *models: Path | None) -> Path | None:
        """A file in the costs folder for measurements of a ``kind`` keyed by ``key``, llama.cpp's build, the CPU
        and the model files."""
        c = self.config
        if c.costs_dir is None:
            return None
        key = [*key, system_info(), cpu_model()]
        for path in models:
            if path is not None:
                stat = path.stat()
                key += [str(path.resolve()), stat.st_size, stat.st_mtime_ns]
        digest = hashlib.sha256(json.dumps(key).encode("utf-8")).hexdigest()[:20]
        return c.costs_dir / f"{c.target.stem[:40]}-{kind + '-' if kind else ''}{digest}.json"

    def _costs_key(self, n_gpu_layers: int) -> list[object]:
        c = self.config
        key: list[object] = [c.n_threads, offloaded_layers(n_gpu_layers), c.exact]
        if self.target.params.flash_attn is not None:  # batches cost differently without flash attention
            key.append(f"flash_attn={self.target.params.flash_attn}")
        return key

    def _verify_costs_path(self) -> Path | None:
        """The target's saved verification costs, keyed by its file, the load settings, llama.cpp's build and the
        CPU, and shared by every way of drafting for it: a draft model, prompt lookup or none."""
        c = self.config
        return self._saved_path("", self._costs_key(c.n_gpu_layers), c.target)

    def _draft_costs_path(self) -> Path | None:
        """The loaded draft model's saved costs, keyed as the target's and by both files (``None`` without one)."""
        if self.draft is None:
            return None
        return self._saved_path("draft", self._costs_key(self.config.n_gpu_layers_draft), self.config.target,
                                self.draft.path)

    @staticmethod
    def _restore(
        where: Callable[[], Path | None], restore: Callable[[dict[str, Any]], None], forget: Callable[[], None]
    ) -> None:
        """Restore part of the cost model from its saved file; a stale or damaged one is measured afresh."""
        try:
            path = where()
            if path is not None and path.exists():
                restore(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            log.warning("ignoring saved costs: %s", exc)
            forget()

    def save_costs(self) -> None:
        """Keep what this session measured for the next one (errors are logged, never raised)."""
        for where, state in (
            (self._verify_costs_path, self.costs.verify_state),
            (self._draft_costs_path, self.costs.draft_state),
        ):
            try:
                path = where()
                if path is not None:
                    write_json_atomic(path, state())
            except OSError as exc:
                log.warning("could not save the measured costs: %s", exc)

    def calibrate(self, repeats: int = 1) -> None:
        """Time a few decode calls of the target (:meth:`load_draft` times the draft) so that the adaptive
        controller's first decisions rest on this machine's real costs, not on priors. What the cost model restored
        from an earlier session has is not timed again, but for :data:`RECHECK_SIZES` (every load) and sizes with
        fewer than :data:`CALIBRATION_SAMPLES` samples. On a small CPU a batch of 33 tokens costs 13
        single steps, on a GPU barely one: guessing either way would cost an answer its first long drafts, or
        waste them.
        """
        target, costs = self.target, self.costs
        loading.report(f"Timing {target.path.name} on this machine")
        window = CpuWindow()
        exact = self.config.exact  # bit-exact mode verifies in its invariant call sizes only: time those
        sizes = [
            n for n in CALIBRATION_SIZES if n <= target.params.n_batch and (not exact or n in target.invariant_sizes)
        ]
        costs.verify.at(0)  # timed after a short context
        recheck = [n for n in RECHECK_SIZES if n in sizes and costs.verify.has(n)]
        if recheck:
            saved = costs.verify.measured()
            # After 8 tokens, not 24: the same context band, and a third of the prompt's cost at every load.
            timed = _fastest_single(_time_calls(target, recheck, repeats, context=8))
            fresh = _ratios(timed)
            drift = statistics.median(fresh[n] / (saved[n] / saved[1]) for n in recheck if n in fresh)
            if not 1 / RECHECK_TOLERANCE <= drift <= RECHECK_TOLERANCE:
                log.info("saved batch costs are %.2fx of what this machine measures now: measuring afresh", drift)
                costs.forget_verify()
            for n_call, seconds in timed:  # the first samples of the fresh costs, or more for the saved ones
                costs.verify.observe(n_call, seconds)
        todo = [n for n in sizes if n not in recheck and costs.verify.count(n) < CALIBRATION_SAMPLES]
        if todo:
            for n_call, seconds in _fastest_single(_time_calls(target, todo, repeats)):
                costs.verify.observe(n_call, seconds)
        self._target_timed_busy = crowding(window.others_share(), target.n_threads)

    def new_costs(self) -> CostModel:
        """An empty cost model for this target (verification split as the engine verifies)."""
        return CostModel(split=self.target.split if self.config.exact else None)

    @property
    def costs_file(self) -> Path | None:
        """The file the target's verification costs are kept in for the settings of the moment (its flash-attention
        setting included, which a generation may switch): ``generate --events`` names it, so that ``replay`` models the
        run on the costs it ran with (``None`` without a costs folder, or when the model file cannot be read now: moved
        during a chat, say)."""
        try:
            return self._verify_costs_path()
        except OSError:
            return None

    @property
    def fingerprint(self) -> str:
        """The target vocabulary's fingerprint (keys the n-gram files)."""
        return self.target.vocab.fingerprint()

    def drafters(self, config: GenerationConfig, rng: np.random.Generator) -> list[Drafter]:
        """The draft sources of a generation (none for plain decoding).

        Raises:
            InvalidInputError: the strategy needs something that is not there (a draft model loaded, an n-gram map
                file in ``config``).
        """
        strategy = Strategy(config.strategy)
        if strategy is Strategy.NONE:
            return []
        if strategy is Strategy.AUTO:
            if self.speculation_off:
                return []  # plain decoding (an explicit strategy is refused by generate(), with the reason)
            sources: list[Drafter] = [self.lookup(), self.ngram_cache()]
            if config.ngram_map is not None:  # a map the user built competes as one more free source
                try:
                    sources.append(self.ngram_map(config.ngram_map))
                except NgramTableError as exc:
                    # Left out, not fatal: a map made for another model (or since deleted) stopped every answer of
                    # the automatic strategy (a tour's). The app and the CLI say so (map_problem).
                    log.warning("n-gram map left out: %s", exc)
            if self.draft is not None:
                sources.append(self.draft_drafter(config, rng))
            return sources
        if strategy is Strategy.DRAFT:
            if self.draft is None:
                raise InvalidInputError(
                    "the draft strategy needs a draft model: load one, or pick a draft-free strategy"
                )
            return [self.draft_drafter(config, rng)]
        if strategy is Strategy.LOOKUP:
            return [self.lookup()]
        if strategy is Strategy.NGRAM_CACHE:
            return [self.ngram_cache()]
        return [self.ngram_map(config.ngram_map)]

    def map_problem(self, path: Path | None) -> str | None:
        """Why the n-gram map at ``path`` cannot draft for this target (its header read: a moment), or ``None``: no
        map, or a usable one. The automatic strategy leaves such a map out; the n-gram map strategy fails."""
        if path is None:
            return None
        try:
            if NgramTable.fingerprint_of(path) != self.fingerprint:
                return another_tokenizer(path)
        except NgramTableError as exc:
            return str(exc)
        return None

    def ngram_map(self, path: Path | None) -> NgramMapDrafter:
        """The drafter of this n-gram map file, read once and again only when the file changes (rebuilt).

        Raises:
            InvalidInputError: no file, or not a map for this vocabulary (:class:`NgramTableError`).
        """
        if path is None:
            raise InvalidInputError(
                # Only the app gets here (the CLI says its own words first, see cli.missing_source).
                "the n-gram map strategy needs a map file: choose one, or build one from your own files, in "
                "Settings ▸ N-gram map (Browse…, Build…)"
            )
        try:
            stat = path.stat()
        except OSError as exc:
            raise NgramTableError(f"cannot read n-gram file {path}: {exc.strerror or exc}") from exc
        key = (path, stat.st_mtime_ns, stat.st_size)
        if self._ngram_map is None or self._ngram_map[0] != key:
            self._ngram_map = (key, NgramMapDrafter.from_file(path, self.fingerprint))
        return self._ngram_map[1]

    def draft_drafter(self, config: GenerationConfig, rng: np.random.Generator) -> DraftModelDrafter:
        """The loaded draft model as a draft source."""
        assert self.draft is not None
        return DraftModelDrafter(self.draft, config.sampling, config.p_min, self.target.n_vocab, rng)

    def lookup(self) -> PromptLookupDrafter:
        """A prompt-lookup source for this target's vocabulary."""
        return PromptLookupDrafter.for_vocab(self.target.vocab)

    def ngram_cache(self) -> NgramCacheDrafter:
        """The session's n-gram cache (its dynamic table persists across generations and runs)."""
        if self._ngram_cache is None:
            path = None
            if self.config.ngram_cache_dir is not None:
                path = self.config.ngram_cache_dir / f"{self.fingerprint}.npz"
            self._ngram_cache = NgramCacheDrafter(self.fingerprint, path)
        return self._ngram_cache

    def generate(
        self,
        prompt: Sequence[int] | str,
        config: GenerationConfig,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Generate a continuation of a prompt (text or tokens); see :func:`speculens.engine.generate.generate`.

        A text prompt is tokenized as llama.cpp's tools do: special-token texts (``<|im_start|>``) become
        their ids, so a prompt written in the model's chat format means what it says.
        """
        if isinstance(prompt, str):
            if not prompt.strip():
                raise PromptError("the prompt is empty: type something to continue from")
            tokens = self.target.tokenize(prompt, parse_special=True)
        else:
            tokens = list(prompt)
        config.validate()
        if config.sampling.seed is None:  # a fresh seed, reported in the start event so it can be reused
            config = replace(config, sampling=replace(config.sampling, seed=secrets.randbelow(2**31)))
        rng = np.random.default_rng(config.sampling.seed)
        drafters = self.drafters(config, rng)
        # Validated now (an empty or over-long prompt is refused before anything is switched or timed); the
        # flash-attention switch runs with the generation, on the thread that takes its events.
        events = generate(
            self.target, drafters, tokens, config, rng, cancel, self.costs, self.config.exact, self.threads
        )
        return self._fitted(tokens, config.max_tokens, events, cancel)

    def _fitted(
        self, prompt: Sequence[int], max_tokens: int, events: Iterator[Event], cancel: threading.Event | None
    ) -> Iterator[Event]:
        """``events``, after :meth:`fit_flash_attn` (skipped when the generation is cancelled before it begins)."""
        if cancel is None or not cancel.is_set():
            self.fit_flash_attn(prompt, max_tokens, cancel)
        yield from events

    def chat(
        self, messages: Messages, config: GenerationConfig, cancel: threading.Event | None = None
    ) -> Iterator[Event]:
        """Answer a conversation (role/content dicts) formatted with the target's chat template.

        Raises:
            PromptError: the last message is empty, or the conversation does not fit the context.
            BackendError: the model has no chat template.
        """
        if not messages or not messages[-1].get("content", "").strip():
            raise PromptError("the message is empty: type something first")
        return self.generate(self.target.format_chat(messages), config, cancel)

    def chat_divergence(self, messages: Messages, a: Sequence[int], b: Sequence[int]) -> Divergence | None:
        """:meth:`divergence` of two answers to a conversation."""
        return self.divergence(self.target.format_chat(messages), a, b)

    def info(self) -> EngineInfo:
        """What is loaded."""
        return EngineInfo(
            target=self.config.target.name,
            draft=self.draft.path.name if self.draft is not None else None,
            description=self.target.description(),
            n_ctx=self.target.n_ctx,
            exact=self.config.exact,
            invariant_sizes=self.target.invariant_sizes,
            gpu_backend=gpu_backend_name(),
            speculation_off=self.speculation_off,
            flash_attn=self.flash_note,
            draft_idle=self.draft_idle,
            vocab_fingerprint=self.fingerprint,
        )

    @property
    def draft_idle(self) -> str | None:
        """Why the loaded draft model cannot pay on this machine (see :meth:`AdaptiveController.draft_idle`), for the
        default draft length; ``None`` when it could, or when none is loaded."""
        if self.draft is None:
            return None
        idle = AdaptiveController(GenerationConfig().n_draft, [MODEL], self.costs).draft_idle()
        # The verdict rests on the target's batch costs as much as on the draft's (a tour's first load, beside a
        # compiler build, read ×0.74, and ×0.87 once it was done, with no word of the busy machine).
        busy = max((b for b in (self._draft_timed_busy, self._target_timed_busy) if b is not None), default=None)
        if idle is not None and busy is not None:
            # Said, not hidden: a draft model timed beside a busy program looks dearer than it is (a tour's first
            # load, beside another model's run, read ×0.06), and the next load times it again.
            idle += f" (timed while other programs used {busy:.0%} of the CPUs: load again once they are done)"
        return idle

    @property
    def speculation_off(self) -> str | None:
        """Why this target is only decoded plainly, or ``None`` when it can speculate."""
        if self.target.recurrent and not self.target.rollback:
            return recurrent_refusal(self.config.target.name)
        return None

    def divergence(self, prompt: Sequence[int], a: Sequence[int], b: Sequence[int]) -> Divergence | None:
        """Where answers ``a`` and ``b`` to ``prompt`` first differ, with the target's logits for both candidates
        there, as plain decoding computes them (the prompt's evaluation for the first token, one-token decoding
        after it, so this costs plain decoding's time up to there); ``None`` when they are the same. Where one is a
        prefix of the other, the shorter ended there: its token is the end-of-generation token the target ranks
        highest (a tour's plain answer stopped 20 tokens before the speculative one, and Compare said nowhere).
        """
        index = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if index is None and len(a) == len(b):
            return None
        # Plain decoding's path exactly: the prompt as it evaluates it, then one token per decode call. A cache
        # filled in one batch holds values rounded by other kernels (fast mode), and the logits read after it
        # can even rank the two candidates the other way round from what plain decoding saw.
        index = min(len(a), len(b)) if index is None else index
        row = self.target.prefill(prompt)
        for token in a[:index]:
            row = self.target.decode([token], [0])[0]
        end = max(self.target.vocab.eog, key=lambda t: row[t])  # the answer's end, as the shorter chose it
        ta = int(a[index]) if index < len(a) else end
        tb = int(b[index]) if index < len(b) else end
        return Divergence(index, ta, tb, self.target.piece(ta), self.target.piece(tb), float(row[ta]), float(row[tb]))

    def close(self) -> None:
        """Save the measured costs and free both models (idempotent)."""
        if self.target.loaded:
            self.save_costs()
        if self.draft is not None:
            self.draft.close()
            self.draft = None
        self.target.close()

    def __enter__(self) -> SpeculativeEngine:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _time_calls(
    backend: LlamaBackend, sizes: Sequence[int], repeats: int, context: int = 24, every_row: bool = True
) -> list[tuple[int, tuple[int, float]]]:
    """Decode ``1`` token three times and each of ``sizes`` tokens once after ``context`` tokens, ``repeats``
    times over; returns ``(n, first decode call's (tokens, seconds))`` for every call (the cache is left empty).
    Each call asks for every row's logits, as a verification does, or (``every_row=False``) for the last row's
    only, as a draft model's catch-up does: a row's logits cost a product with the whole output matrix.

    The largest size is decoded first, untimed: llama.cpp grows its logits buffer the first time a call asks
    for more rows than before, and the first call of every new size would otherwise pay for the allocation
    (measured here: a batch of 4 timed at 3.8 single steps right after loading, 2.7 in an answer). The
    one-token cost every ratio is taken against is the fastest of three (see :func:`_fastest_single`).
    """
    text = "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n"
    tokens = backend.tokenize(text * (2 + max(sizes) // 8))
    prefix, filler = tokens[:context], tokens[context : context + max(sizes)]
    backend.sync(prefix)

    def rows(n: int) -> Sequence[int]:
        return range(n) if every_row else [n - 1]

    backend.decode(filler, rows(len(filler)))  # warm up the kernels and the buffers
    out = []
    for n in [1, 1, 1, *sizes] * repeats:
        backend.truncate(len(prefix))
        backend.decode(filler[:n], rows(n))
        out.append((n, backend.last_calls[0]))
    backend.truncate(0)
    return out


def _ratios(timed: list[tuple[int, float]]) -> dict[int, float]:
    """Each batch size's cost over the one-token cost timed just before it, from :func:`_fastest_single`'s list
    (the last reading of a size wins)."""
    out: dict[int, float] = {}
    single = 0.0
    for n, seconds in timed:
        if n == 1:
            single = seconds
        elif single > 0:
            out[n] = seconds / single
    return out


def _fastest_single(calls: list[tuple[int, tuple[int, float]]]) -> list[tuple[int, float]]:
    """The timed calls as ``(tokens, seconds)``, each round's three one-token calls reduced to the fastest: a
    stall (a disk flush, another program starting) only ever adds time, and every ratio of the round is taken
    against them (a first start that timed two of three single steps at 2.7 s instead of 0.035 measured every
    batch at a twentieth of its cost)."""
    out: list[tuple[int, float]] = []
    singles: list[float] = []
    for n, call in calls:
        if n == 1:
            singles.append(call[1])
            continue
        if singles:
            out.append((1, min(singles)))
            singles = []
        out.append(call)
    if singles:
        out.append((1, min(singles)))
    return out


def calibrate_draft(draft: LlamaBackend, costs: CostModel, repeats: int = 1) -> None:
    """Time a draft model's one-token call and its catch-up cost per missed token into ``costs``. Costs already
    there (saved by an earlier session) that this timing puts off by more than :data:`RECHECK_TOLERANCE` are
    dropped first: a controller that judges the draft model too dear never drafts with it, so nothing it does
    would ever correct them (a tour's draft model, timed while another program kept both cores busy, was "×0.29
    of plain decoding at best" in every later session; drafting every step, it ran faster than plain decoding)."""
    timed = _fastest_single(_time_calls(draft, [16], repeats, every_row=False))
    if costs.draft_call.count:
        drift = min(seconds for n, seconds in timed if n == 1) / costs.draft_call.value
        if not 1 / RECHECK_TOLERANCE <= drift <= RECHECK_TOLERANCE:
            log.info("saved draft-model costs are %.2fx of what this machine measures now: measuring afresh", 1 / drift)
            costs.forget_draft()
    for n, seconds in timed:
        if n == 1:
            costs.draft_call.add(seconds)
        else:  # a catch-up of n tokens beyond an ordinary call
            costs.draft_catchup.add(max(0.0, seconds - costs.draft_call.value) / (n - 1))


class ChatSession:
    """A multi-turn conversation formatted with the target's own chat template.

    Each turn renders the whole conversation and hands its tokens to the engine, whose backends keep the
    common prefix in their KV caches, so only the new turn's tokens are evaluated.

    Args:
        engine: the loaded engine.
        system: an optional system message.
    """

    def __init__(self, engine: SpeculativeEngine, system: str | None = None) -> None:
        self.engine = engine
        self.messages: list[dict[str, str]] = []
        if system:
            self.messages.append({"role": "system", "content": system})

    def send(self, user_text: str, config: GenerationConfig, cancel: threading.Event | None = None) -> Iterator[Event]:
        """Generate the assistant's answer to a user message; both join the history when the answer ends (a
        stopped answer too, with what was said, unless nothing was). A turn that fails (a message too long for what
        is left of the context) leaves the history as it was, so the conversation can go on."""
        messages = [*self.messages, {"role": "user", "content": user_text}]
        for event in self.engine.chat(messages, config, cancel):
            # A message stopped before its answer began is not kept (as the app gives it back to the box): every
            # later turn would read it with an empty answer.
            if isinstance(event, FinishEvent) and (event.tokens or event.reason is not FinishReason.CANCELLED):
                self.messages = [*messages, {"role": "assistant", "content": event.text}]
            yield event
