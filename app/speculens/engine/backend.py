"""One llama.cpp model and its context, over llama-cpp-python's low-level C API.

This is the only module that imports ``llama_cpp``. It keeps the KV cache's contents as a token list, so a
caller can roll back (``truncate``) or reuse a common prefix (``sync``), and it asks llama.cpp for logits
only at the positions the caller needs — never an ``n_ctx × n_vocab`` buffer.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import functools
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from speculens.engine import loading
from speculens.engine.config import MAX_N_DRAFT
from speculens.engine.vocab import TokenTexts, VocabInfo
from speculens.errors import OperationError

log = logging.getLogger(__name__)
_llama_log = logging.getLogger("speculens.llama_cpp")

# ggml_log_level: 0 none, 1 debug, 2 info, 3 warn, 4 error, 5 continue the previous line.
_LEVELS = {0: logging.CRITICAL, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_log_level = [logging.DEBUG]  # the level of the line being assembled
_log_line: list[str] = []
# The cancel flag of the abortable decode call running now. One for the process: the engine decodes on one thread
# at a time (the app's worker, the CLI's main thread), so no other call's log lines can come in meanwhile.
_abortable: list[threading.Event | None] = [None]

# llama_get_logits as a plain address: llama-cpp-python's binding returns a ctypes pointer, and turning it into
# an address or an array costs tens of microseconds a call (see LlamaBackend._logit_rows).
_logits_address = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(("llama_get_logits", llama_cpp.llama_cpp._lib))
# llama_synchronize, bound the same way: a GPU backend returns from llama_decode once the work is queued, so a
# decode call is timed up to the end of its computation, not of its launch (see LlamaBackend.decode).
_synchronize = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(("llama_synchronize", llama_cpp.llama_cpp._lib))


@llama_cpp.llama_log_callback
def _on_llama_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    # llama.cpp logs in fragments; join them into lines and hand them to Python logging, so the CLI's
    # stdout and stderr stay clean and the GUI's log file gets everything.
    if level != 5:
        _log_level[0] = _LEVELS.get(level, logging.DEBUG)
    _log_line.append(text.decode("utf-8", errors="replace"))
    if _log_line[-1].endswith("\n"):
        # A decode stopped by its cancel flag (LlamaBackend.decode) is the user's doing, not a failure: llama.cpp
        # logs it in four errors and warnings, which the CLI would print.
        stopping = _abortable[0] is not None and _abortable[0].is_set()
        _llama_log.log(logging.INFO if stopping else _log_level[0], "%s", "".join(_log_line).rstrip())
        _log_line.clear()


_init_lock = threading.Lock()
_initialised = False


def _init_backend() -> None:
    global _initialised
    with _init_lock:
        if not _initialised:
            llama_cpp.llama_log_set(_on_llama_log, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _initialised = True


class BackendError(OperationError):
    """A model could not be loaded or evaluated; the message says what to do."""


class DecodeCancelled(Exception):
    """A decode call given a cancel flag stopped because the flag was set (see :meth:`LlamaBackend.decode`). Control
    flow, not a :class:`~speculens.errors.SpeculensError`: the generation ends as stopped."""


def supports_gpu_offload() -> bool:
    """Whether this llama.cpp build can offload layers to a GPU (CUDA, Metal, Vulkan, ...)."""
    _init_backend()
    return bool(llama_cpp.llama_supports_gpu_offload())


def offloaded_layers(n_gpu_layers: int) -> int:
    """What a GPU-layer setting does on this build: the setting itself, or 0 on a CPU-only build (llama.cpp
    ignores it there, so -1, the default, and 0 load the same way)."""
    return n_gpu_layers if n_gpu_layers and supports_gpu_offload() else 0


def gpu_backend_name() -> str | None:
    """The GPU backend this llama.cpp build has ("CUDA", "Metal", ...), or ``None`` for a CPU-only build."""
    if not supports_gpu_offload():
        return None
    info = system_info()
    for name in ("CUDA", "Metal", "Vulkan", "HIP", "SYCL", "OpenCL", "MUSA", "CANN"):
        if name.upper() in info.upper():
            return name
    return "GPU"


def available_memory() -> int | None:
    """Bytes of memory the system can still give without swapping (``MemAvailable``), on Linux; ``None`` elsewhere.

    Linux grants an allocation larger than that and kills the process when the pages are touched (llama.cpp clears
    a KV cache when it makes one), where Windows refuses the allocation and llama.cpp says so: so only Linux needs
    the check before a cache grows (see :meth:`LlamaBackend.reserve`). macOS compresses and swaps instead."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def system_info() -> str:
    """llama.cpp's build and CPU feature summary (``llama_print_system_info``)."""
    _init_backend()
    return str(llama_cpp.llama_print_system_info().decode("utf-8", errors="replace"))


@functools.cache
def cpu_model() -> str:
    """The CPU's model name ("AMD EPYC 9B14", "Apple M2 Pro"), and how many CPUs this system has.

    Measured decode costs belong to the CPU, and llama.cpp's feature summary does not tell two CPUs with the
    same instruction sets apart. This project's VM came up on another host between two sessions: the saved
    figures said a batch of 4 tokens cost 4.1 single steps where the new host took 2.9, and since a size believed
    dear is never drafted, it was never measured again, and the default left short drafts untaken.
    """
    name = ""
    try:
        if sys.platform.startswith("linux"):
            for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    name = line.split(":", 1)[1].strip()
                    break
        elif sys.platform == "darwin":
            name = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5, check=False
            ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return f"{name or platform.processor() or platform.machine()} × {os.cpu_count()}"


def repacks() -> bool:
    """Whether this llama.cpp build repacks weights for this CPU's kernels (its ``REPACK`` feature)."""
    return "REPACK = 1" in system_info()


def amx_build() -> bool:
    """Whether this llama.cpp build has Intel AMX kernels (an extra CPU buffer type)."""
    return "AMX_INT8 = 1" in system_info()


def extra_buffers_default() -> bool:
    """Whether llama.cpp's extra CPU buffer types (weight repacking, AMX) are all safe to use.

    A build with Intel AMX kernels crashes in ``ggml_backend_amx_mul_mat`` on virtual machines that do not
    keep the guest's AMX tile state (seen on Firecracker: ``tilezero`` raises an illegal instruction in the
    first batch of two or more tokens, in llama.cpp's own ``llama-completion`` too), and the AMX buffer takes
    every weight it has kernels for, so such builds load without the extra buffer types, as llama.cpp's tools
    must be told to (``--no-repack``). Handing only the repacking buffer its weights by name was tried and
    measured on such a VM (an AVX-512 Xeon): one token decoded about 4% faster, but a prompt was evaluated a
    third slower than by ``llama-completion --no-repack`` (54-56 tokens/s against 81-85 on a 2,764-token prompt),
    and prompt lookup's long verification batches were no faster, so a rewrite's prompt and answer together took
    longer. ``SPECULENS_CPU_EXTRA_BUFFERS=1`` (all of them, AMX included, for a machine where AMX works) or ``=0``
    (none) overrides the choice.
    """
    forced = os.environ.get("SPECULENS_CPU_EXTRA_BUFFERS")
    return forced == "1" if forced in ("0", "1") else not amx_build()


# The KV cache types an exact target tries, in order (see BackendParams.exact): GGML_TYPE_Q8_0, and
# GGML_TYPE_BF16 for models whose attention heads are not a multiple of q8_0's 32-value blocks.
EXACT_KV_TYPES = (8, 30)
# The KV cache's first size, in cells, and the unit llama.cpp rounds a context size up to (see LlamaBackend.reserve).
KV_STEP = 256
# The most tokens llama.cpp computes at once in a context without flash attention (see _new_context): a prompt of
# the demo target at 2,764 tokens of context held 1,355 MB at 512 and 1,277 MB at 128, evaluated as fast.
UBATCH_NO_FLASH = 128
# Bytes one value of a KV cache takes, by ggml type: F32, F16, Q8_0 (34-byte blocks of 32), BF16.
KV_VALUE_BYTES = {0: 4.0, 1: 2.0, 8: 34 / 32, 30: 2.0}
# Memory a KV cache's growth leaves free for everything else (compute buffers, Qt, the conversation).
MEMORY_HEADROOM = 256 * 2**20
# The most logits rows one decode call asks for (see decode): a verification of the longest draft. llama.cpp's
# default is the whole batch (512), and it reserves a compute buffer to hold that many rows of logits, 297 MiB for
# a vocabulary of 151,936 (the demo pair's): on a CPU address space that is never touched (but committed memory
# on Windows), on a GPU device memory. At 65 rows the demo target's buffer is 66 MiB instead of 303 (llama.cpp's
# log, ubatch 512), and a generation with the demo pair peaked at 2.16 GB of address space instead of 2.39.
N_OUTPUTS_MAX = MAX_N_DRAFT + 1
# The largest decode call the invariance probe tries.
PROBE_MAX_SIZE = 8
# Where probe_flash_attention times decoding: a short and a long context (capped by the context size), one
# token and a verification batch at each, a few times over, and how much faster "off" must be to be chosen.
# The short depth is where a conversation starts (a one-line question in the chat template is 30-60 tokens):
# timed at 256 instead, the two settings read level on the AMD EPYC VM while plain decoding of a 54-token prompt
# ran faster with flash attention on (paired runs, 2026-12-04). Three repetitions, flash attention always timed
# first, let one noisy spell decide: a saved probe there read "off" 11% faster at 256 tokens, five fresh ones 1-5%.
FLASH_PROBE_DEPTHS = (64, 2048)
FLASH_PROBE_BATCH = 4
FLASH_PROBE_REPEATS = 5
FLASH_PROBE_MARGIN = 0.03
# Saved probes of another version (other depths, repetitions or order) are measured again at the next load.
FLASH_PROBE_VERSION = 2


@dataclass(frozen=True)
class FlashProbe:
    """What :meth:`LlamaBackend.probe_flash_attention` measured, and which setting it makes faster where.

    On a CPU the answer depends on the context: on the AMD EPYC VM we test on, the demo target ran a token and a
    batch of 4 at 256 tokens of context in 146 ms with flash attention and 156 ms without, and at 2,048 tokens in
    238 ms with it and 204 ms without. So the setting is chosen for the depth a generation decodes at
    (:meth:`choice`), not once for every context.

    Attributes:
        depths: the context lengths timed, ascending.
        on: seconds per depth, flash attention on: the median one-token call plus the median batch call.
        off: the same with flash attention off.
    """

    depths: tuple[int, ...]
    on: tuple[float, ...]
    off: tuple[float, ...]

    def seconds(self, depth: int) -> tuple[float, float]:
        """(on, off) at ``depth``: linear between the timed depths, and beyond the deepest along the last two;
        below the shallowest, its own (a load starts with that depth's setting)."""
        x, on, off = self.depths, self.on, self.off
        if len(x) == 1:
            return on[0], off[0]
        depth = max(depth, x[0])
        i = min(max(bisect.bisect_left(x, depth) - 1, 0), len(x) - 2)
        f = (depth - x[i]) / (x[i + 1] - x[i])
        return on[i] + f * (on[i + 1] - on[i]), off[i] + f * (off[i + 1] - off[i])

    def choice(self, depth: int) -> bool | None:
        """The setting for decoding at ``depth`` tokens of context: ``False`` when "off" is faster there by
        :data:`FLASH_PROBE_MARGIN`, otherwise ``None`` (llama.cpp's own choice: on)."""
        on, off = self.seconds(depth)
        return False if off < (1.0 - FLASH_PROBE_MARGIN) * on else None

    @property
    def start(self) -> bool | None:
        """The setting a load starts with: the shallowest timed depth's (a conversation starts short)."""
        return self.choice(self.depths[0])

    def crossover(self) -> int | None:
        """The shallowest depth, in steps of 16 tokens up to 16k, whose choice differs from the first timed
        depth's (``None``: the same everywhere)."""
        first = self.start
        return next((d for d in range(self.depths[0], 16385, 16) if self.choice(d) != first), None)

    def describe(self) -> str:
        """One line for the log and the UI."""
        timed = zip(self.depths, self.off, self.on, strict=True)
        cells = ", ".join(f"{d} tokens {1e3 * a:.0f} vs {1e3 * b:.0f} ms" for d, a, b in timed)
        return f"flash attention {self.summary()}; off vs on, one token + a batch of {FLASH_PROBE_BATCH} at {cells}"

    def summary(self) -> str:
        """Which setting where, in a few words."""
        name = {None: "on", False: "off"}
        first, at = self.start, self.crossover()
        if at is None:
            return f"{name[first]} (measured faster here)"
        return f"{name[first]} below {at} tokens of context, {name[self.choice(at)]} from there (measured)"

    def state(self) -> dict[str, Any]:
        """What to save (see :meth:`from_state`)."""
        return {
            "version": FLASH_PROBE_VERSION,
            "depths": list(self.depths),
            "on": list(self.on),
            "off": list(self.off),
            "note": self.describe(),
        }

    @classmethod
    def from_state(cls, state: object) -> FlashProbe:
        """A probe saved by :meth:`state`.

        Raises:
            ValueError: not one, or one of an older probe (:data:`FLASH_PROBE_VERSION`; an older file holds only the
                choice): it is measured again.
        """
        if not isinstance(state, dict):
            raise ValueError("not a saved flash-attention measurement")
        if state.get("version") != FLASH_PROBE_VERSION:
            raise ValueError("a flash-attention measurement of an older probe")
        try:
            depths = tuple(int(d) for d in state["depths"])
            on = tuple(float(t) for t in state["on"])
            off = tuple(float(t) for t in state["off"])
        except (KeyError, TypeError) as exc:
            raise ValueError("not a saved flash-attention measurement") from exc
        ok = depths and len(on) == len(off) == len(depths) and list(depths) == sorted(set(depths))
        if not ok or not all(math.isfinite(t) and t > 0 for t in on + off):
            raise ValueError("not a saved flash-attention measurement")
        return cls(depths, on, off)


def seq_state(ctx: Any) -> Any | None:
    """Sequence 0's state in ``ctx`` (``llama_state_seq_get_data``: its KV cells), or ``None`` if llama.cpp fails."""
    size = llama_cpp.llama_state_seq_get_size(ctx, 0)
    buffer = (ctypes.c_uint8 * size)()
    return buffer if llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0) == size else None


def load_seq_state(ctx: Any, state: bytes | ctypes.Array[ctypes.c_uint8]) -> bool:
    """Put a state :func:`seq_state` read (or :func:`tiled_kv_state` made) into sequence 0 of ``ctx``; whether
    llama.cpp took it."""
    data = state if isinstance(state, ctypes.Array) else (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
    return bool(llama_cpp.llama_state_seq_set_data(ctx, data, len(state), 0) == len(state))


def tiled_kv_state(state: bytes, n_cells: int) -> bytes | None:
    """A KV-cache state of one sequence (``llama_state_seq_get_data``) grown to ``n_cells`` cells at positions
    ``0 ..``, by repeating the cells it has — what a long context costs to attend over, without evaluating one.

    Returns:
        The new state, or ``None`` when ``state`` is not laid out as this llama.cpp writes an attention cache
        (one stream; per cell its position, one sequence id and perhaps a fixed-size extension; then the keys
        and values of every layer, the values perhaps transposed).
    """
    u32 = np.dtype("<u4")

    def layout(head: int, meta: int) -> tuple[int, list[tuple[bytes, int, int]]] | None:
        # The cell count and the sections after the cells' metadata as (header, bytes per cell, rows of cells).
        if head + 8 > len(state):
            return None
        n_stream, count = (int(x) for x in np.frombuffer(state, u32, 2, head))
        at = head + 8 + count * meta
        if n_stream != 1 or count == 0 or at + 8 > len(state):
            return None
        v_trans, n_layer = (int(x) for x in np.frombuffer(state, u32, 2, at))
        if v_trans > 1 or not 0 < n_layer < 100_000:
            return None
        out = [(state[at : at + 8], 0, 0)]
        at += 8
        for part in range(2):  # keys, then values
            for _ in range(n_layer):
                if at + 12 > len(state):
                    return None
                if part == 1 and v_trans:  # type, element size, rows: one row of every cell per embedding value
                    size, rows = (int(x) for x in np.frombuffer(state, u32, 2, at + 4))
                else:  # type, row size, one row per cell
                    size, rows = int(np.frombuffer(state, np.dtype("<u8"), 1, at + 4)[0]), 1
                out.append((state[at : at + 12], size, rows))
                at += 12 + size * rows * count
                if at > len(state):
                    return None
        return (count, out) if at == len(state) else None

    # Perhaps a header (this llama.cpp writes a magic number and the sequence id), then per cell its position,
    # the number of its sequence ids (1) and the id, perhaps with a llama_kv_cell_ext (12 bytes) as well.
    for head, meta in ((8, 12), (8, 24), (0, 12), (0, 24)):
        found = layout(head, meta)
        if found is not None:
            count, sections = found
            break
    else:
        return None
    cells = np.frombuffer(state, np.uint8, count * meta, head + 8).reshape(count, meta)
    reps = np.arange(n_cells) % count
    grown = cells[reps].copy()
    grown[:, :4] = np.arange(n_cells, dtype="<i4").view(np.uint8).reshape(n_cells, 4)
    parts = [state[:head], np.array([1, n_cells], u32).tobytes(), grown.tobytes(), sections[0][0]]
    at = head + 8 + count * meta + 8
    for header, size, rows in sections[1:]:
        at += len(header)
        block = np.frombuffer(state, np.uint8, size * rows * count, at).reshape(rows, count, size)
        parts += [header, block[:, reps].tobytes()]
        at += size * rows * count
    return b"".join(parts)


# llama.cpp's file types (llama_ftype) that :func:`quantize_model` writes.
FTYPE_Q4_K_M = 15


def quantize_model(source: Path, destination: Path, file_type: int = FTYPE_Q4_K_M, n_threads: int = 0) -> Path:
    """Quantize a GGUF model with llama.cpp's own quantizer (the gguf package cannot write K-quants): the tests
    make tiny models that take the kernels real Q4_K_M models take.

    Raises:
        BackendError: llama.cpp refused (the message names the file).
    """
    _init_backend()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = file_type
    params.nthread = n_threads or default_threads()
    tmp = destination.with_name(destination.name + ".tmp")
    if llama_cpp.llama_model_quantize(str(source).encode(), str(tmp).encode(), ctypes.byref(params)) != 0:
        tmp.unlink(missing_ok=True)
        raise BackendError(f"llama.cpp could not quantize {source.name}")
    tmp.replace(destination)
    return destination


def check_gguf_file(path: Path) -> None:
    """Raise :class:`BackendError` with a clear message unless ``path`` is a readable GGUF file."""
    if not path.exists():
        raise BackendError(f"Model file not found: {path}")
    if path.is_dir():
        raise BackendError(f"{path} is a folder; choose a .gguf file inside it")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise BackendError(f"Cannot read {path}: {exc.strerror}") from exc
    if magic != b"GGUF":
        raise BackendError(f"{path.name} is not a GGUF model file (it does not start with the GGUF signature)")


@dataclass(frozen=True)
class BackendParams:
    """How a model is loaded.

    Args:
        n_ctx: context size in tokens.
        n_threads: CPU threads (0 = all physical cores we can see, at most 8).
        n_gpu_layers: layers to offload to the GPU (-1 = all, 0 = none).
        n_batch: the largest batch one decode call takes (prompt chunks are split to it).
        vocab_only: load only the tokenizer (no weights, no context).
        extra_buffers: use llama.cpp's extra CPU buffer types (repacked weights); ``None`` decides with
            :func:`extra_buffers_default`.
        exact: load in the configuration where batches can be computed with the same kernels as one token: no
            repacked weights, flash attention on, a q8_0 (or bf16) KV cache (see :data:`EXACT_KV_TYPES`).
            :meth:`LlamaBackend.probe_invariance` then finds the decode-call sizes that are.
        flash_attn: flash attention on (``True``) or off (``False``); ``None`` leaves it to llama.cpp, which
            turns it on wherever the backend supports it (see :meth:`LlamaBackend.probe_flash_attention`).
            Ignored in exact mode, which needs it on.
        rollback: for a recurrent or hybrid model (Mamba, RWKV, Qwen3.5, Nemotron-H ...): how many of the last
            decode call's tokens it should be able to take back (llama.cpp keeps a snapshot of the state after
            each of them, for the architectures it supports this for; :attr:`LlamaBackend.rollback` says what
            it granted). An attention cache can be cut back anywhere; a recurrent state only that far.
    """

    n_ctx: int = 4096
    n_threads: int = 0
    n_gpu_layers: int = 0
    n_batch: int = 512
    vocab_only: bool = False
    extra_buffers: bool | None = None
    exact: bool = False
    rollback: int = 0
    flash_attn: bool | None = None


def _cap_outputs(sizes: Sequence[int], rows: Sequence[int]) -> list[int]:
    """``sizes`` (consecutive decode calls) with each call cut after its :data:`N_OUTPUTS_MAX`-th asked row
    (``rows``: sorted indices into the whole batch) until none asks for more."""
    out: list[int] = []
    start = 0
    for size in sizes:
        end = start + size
        inside = rows[bisect.bisect_left(rows, start) : bisect.bisect_left(rows, end)]
        while len(inside) > N_OUTPUTS_MAX:
            cut = inside[N_OUTPUTS_MAX - 1] + 1
            out.append(cut - start)
            start, inside = cut, inside[N_OUTPUTS_MAX:]
        out.append(end - start)
        start = end
    return out


def usable_cpus() -> int:
    """The CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


def default_threads() -> int:
    """A sensible thread count: the CPUs this process may use, at most 8."""
    return min(usable_cpus(), 8)


class LlamaBackend:
    """One model and one context, driven token by token.

    Args:
        path: the GGUF file.
        params: how to load it.

    Raises:
        BackendError: the file is missing, not GGUF, or llama.cpp refuses it.
    """

    def __init__(self, path: str | Path, params: BackendParams | None = None) -> None:
        self.path = Path(path)
        self.params = params or BackendParams()
        check_gguf_file(self.path)
        _init_backend()
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = self.params.n_gpu_layers
        mparams.vocab_only = self.params.vocab_only
        extra = self.params.extra_buffers
        exact = self.params.exact
        # Repacked weights compute 4+ rows with other kernels than one row (measured: 0.4 logits apart).
        mparams.use_extra_bufts = False if exact else (extra_buffers_default() if extra is None else extra)
        offloads = offloaded_layers(self.params.n_gpu_layers) != 0
        loads_weights = not self.params.vocab_only and not offloads
        self.repacked = loads_weights and mparams.use_extra_bufts and repacks()
        self.mapped = not self.repacked
        if not self.mapped:
            # Repacked weights are copies, made from the file's mapped pages, and those pages stay resident:
            # mapped, every repacked weight would be held twice. Reading the file instead holds it once
            # (measured on the demo pair: peak RSS 2.47 GB mapped, 1.85 GB read; the target's load took
            # 0.6-1.3 s longer). A GPU offload keeps the mapping, which its backends share.
            if hasattr(mparams, "load_mode"):
                mparams.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
            else:  # llama-cpp-python before llama.cpp's load modes
                mparams.use_mmap = False
        # Decode-call sizes whose logits equal one-token decoding bit for bit: measured by probe_invariance,
        # until then only the trivial size (no promise).
        self.invariant_sizes: tuple[int, ...] = (1,)
        self.probe_seconds = 0.0
        self.kv_type: int | None = None  # the KV cache's ggml type when it is not llama.cpp's default
        progress = None if self.params.vocab_only else loading.llama_progress(
            f"Reading {self.path.name}", self.path.stat().st_size
        )
        if progress is not None:  # a watched load: its progress bar, and its Cancel, which stops the reading
            callback = llama_cpp.llama_progress_callback(lambda fraction, _user: progress(fraction))
            mparams.progress_callback = callback
        self._model = llama_cpp.llama_model_load_from_file(str(self.path).encode("utf-8"), mparams)
        if not self._model:
            loading.check()  # a cancelled load is not a damaged file
            raise BackendError(
                f"llama.cpp could not load {self.path.name}: the file may be damaged, incomplete, or of an "
                "architecture this llama.cpp build does not know (see the log for details)"
            )
        self._ctx: Any = None
        self._batch: Any = None
        self.unloaded_because = ""  # why a failure closed it (see _unload), said again by decode
        self.n_cells = 0  # the cells its KV cache has now (see reserve)
        self._vocab_ptr = llama_cpp.llama_model_get_vocab(self._model)
        # A recurrent (or hybrid) model keeps a state, not a cache of every position: see BackendParams.rollback.
        self.recurrent = bool(
            llama_cpp.llama_model_is_recurrent(self._model) or llama_cpp.llama_model_is_hybrid(self._model)
        )
        self.sliding_window = int(llama_cpp.llama_model_n_swa(self._model)) > 0
        self.n_rebuilds = 0  # rollbacks that had to rebuild a recurrent state from the start
        # Whether this backend can run flash attention with this model, as a probe with it on showed (now or at an
        # earlier load on this machine: SpeculativeEngine.choose_flash_attn sets it); None until known.
        self.flash_supported: bool | None = None
        self.rollback = 0
        self.vocab = self._read_vocab()
        self._pieces: dict[int, bytes] = {}
        self.tokens: list[int] = []  # what the KV cache holds, position by position
        self.decode_seconds = 0.0  # time spent inside llama_decode, for honest overhead accounting
        self.n_decoded = 0  # tokens evaluated (for tests and statistics)
        self.n_decode_calls = 0  # llama_decode calls (the adaptive controller costs a draft per call)
        self.last_calls: list[tuple[int, float]] = []  # the last decode()'s calls: (tokens, seconds)
        self.last_cpu = 0.0  # the process's CPU time during the last decode call (see engine.threads)
        self.n_threads = self.params.n_threads or default_threads()  # see set_threads
        # The last prompt prefill() evaluated, and where its final decode call began (see prefill).
        self._last_prefill: tuple[tuple[int, ...], int] | None = None
        if self.params.vocab_only:
            return
        self._views: dict[tuple[int, int], np.ndarray] = {}  # see _logit_rows
        self._open_context(self.params.flash_attn)
        self._batch = llama_cpp.llama_batch_init(self.params.n_batch, 0, 1)
        for j in range(self.params.n_batch):  # every token belongs to sequence 0, in every call
            self._batch.n_seq_id[j] = 1
            self._batch.seq_id[j][0] = 0

    def _new_context(self, n_ctx: int, flash_attn: bool | None) -> Any:
        """A llama.cpp context on this model (``None`` if llama.cpp refuses it); exact mode sets its own cache."""
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = self.params.n_batch
        # Without flash attention a prompt's decode call holds its attention scores, one row per token and head
        # over the whole cache, twice: on a CPU, smaller ubatches hold a quarter of that as fast (a GPU wants 512).
        cpu = offloaded_layers(self.params.n_gpu_layers) == 0
        no_flash = flash_attn is False and not self.params.exact
        cparams.n_ubatch = min(self.params.n_batch, UBATCH_NO_FLASH) if cpu and no_flash else self.params.n_batch
        cparams.n_outputs_max = N_OUTPUTS_MAX
        cparams.n_threads = self.n_threads
        cparams.n_threads_batch = self.n_threads
        cparams.no_perf = True
        if self.recurrent:
            cparams.n_rs_seq = self.params.rollback
        if not self.params.exact:
            if flash_attn is not None:
                cparams.flash_attn_type = int(flash_attn)  # LLAMA_FLASH_ATTN_TYPE_DISABLED / _ENABLED
            return llama_cpp.llama_init_from_model(self._model, cparams)
        # Without flash attention, llamafile's kernels multiply the attention matrices of 2+ queries (they never
        # take one); llama.cpp's CPU flash attention handles each query alike, except one query over an f16/f32
        # cache of 512+ cells (a split-KV path), which a q8_0 cache never takes.
        cparams.flash_attn_type = 1  # LLAMA_FLASH_ATTN_TYPE_ENABLED
        for kv_type in sorted(EXACT_KV_TYPES, key=lambda t: t != self.kv_type):  # the type found before, first
            cparams.type_k = cparams.type_v = kv_type
            ctx = llama_cpp.llama_init_from_model(self._model, cparams)
            if ctx:
                self.kv_type = kv_type
                return ctx
        return None

    def _open_context(self, flash_attn: bool | None, keep_model: bool = False) -> None:
        """A fresh, empty context with ``flash_attn``, as many cells as the current one (the first: :data:`KV_STEP`,
        or the whole context for a recurrent model, whose state does not grow with it, and for a model with sliding-
        window attention, whose cache a copy would pack differently once its window has wrapped)."""
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
            self._views.clear()
        if not self.n_cells:
            whole = self.recurrent or self.sliding_window
            self.n_cells = self.n_ctx if whole else min(self.n_ctx, KV_STEP)
        self._ctx = self._new_context(self.n_cells, flash_attn)
        if not self._ctx:
            message = (
                f"llama.cpp could not create a context for {self.path.name}: "
                "try a smaller context size or fewer GPU layers"
            )
            if not keep_model:
                self._unload(message)
            raise BackendError(message)
        self.params = replace(self.params, flash_attn=flash_attn)
        self._context_made()
        self.tokens = []
        self._last_prefill = None

    def _context_made(self) -> None:
        self.n_cells = int(llama_cpp.llama_n_ctx(self._ctx))  # llama.cpp rounds it up (to 256 cells here)
        # How many of the last decode call's tokens a recurrent state can take back (0: none, as for Mamba and
        # RWKV in this llama.cpp); irrelevant for an attention cache, which can be cut anywhere.
        self.rollback = int(llama_cpp.llama_n_rs_seq(self._ctx)) if self.recurrent else 0
        self._memory = llama_cpp.llama_get_memory(self._ctx)

    def reserve(self, n_tokens: int) -> None:
        """Make the KV cache hold at least ``n_tokens`` tokens (at most :attr:`n_ctx`), keeping what it holds.

        The cache is allocated for what the conversation needs rather than for the whole context size at load:
        llama.cpp fills every cell of a cache when it makes one, so a 4,096-token context of the demo pair held
        160 MB from the start, where a short answer needs a tenth of it. It grows by half at least, in a new context
        (llama.cpp cannot resize one) into which the sequence's state is copied: its cells are the same values in
        the same order, and attention covers the same cells as before (llama.cpp attends over the cells in use,
        rounded up to 256), so the logits do not change. :meth:`decode` grows it when a call needs more room; a
        generation reserves its prompt and its longest answer before its clock starts
        (:func:`speculens.engine.generate.generate`), so no step pays for it. It never shrinks before a reload.
        Where the system says how much memory is free (:func:`available_memory`), it grows by no more than fits.

        Raises:
            BackendError: ``n_tokens`` would not fit in the memory left, or llama.cpp could not make the larger
                context; the cache is as before.
        """
        want = min(n_tokens, self.n_ctx)
        if self._ctx is None or want <= self.n_cells:
            return
        cells = min(self.n_ctx, max(want, self.n_cells * 3 // 2))
        free = available_memory()
        if free is not None:  # on Linux, asking for more than is free gets the process killed (available_memory)
            # At its peak a growth holds the new cache and a copy of the cells in use (the old cache is freed first).
            cell_bytes = max(1, self.host_cell_bytes)
            spare = self.n_cells - len(self.tokens)
            room = free - MEMORY_HEADROOM
            if (want - spare) * cell_bytes > room:
                gib = 2**30
                raise BackendError(
                    f"not enough memory to grow the context of {self.path.name} to {want} tokens: it would need "
                    f"{(want - spare) * cell_bytes / gib:.1f} GiB more, and {free / gib:.1f} GiB is free: start a new "
                    "conversation, lower Max tokens (--max-tokens), or close other programs"
                )
            cells = min(cells, spare + room // cell_bytes)
        t0 = time.perf_counter()
        state = seq_state(self._ctx) if self.tokens else None
        llama_cpp.llama_free(self._ctx)  # before the larger one is made: the two are never held at once
        self._ctx = None
        self._views.clear()
        old = self.n_cells
        self._ctx = self._new_context(cells, self.params.flash_attn)
        failed = not self._ctx
        if failed:
            self._ctx = self._new_context(old, self.params.flash_attn)
            if not self._ctx:
                message = (
                    f"not enough memory for a context of {self.path.name}, not even at its old size of {old} tokens, "
                    "so it was unloaded: load the models again, with a smaller context size or fewer GPU layers"
                )
                self._unload(message)
                raise BackendError(message)
        self._context_made()
        if state is not None and not load_seq_state(self._ctx, state):
            llama_cpp.llama_memory_clear(self._memory, True)
            state = None
        if state is None and self.tokens:  # not copied: evaluated again, uncounted (no caller asked for it)
            counts = self.n_decoded, self.n_decode_calls, self.decode_seconds, self.last_calls
            kept, self.tokens, self._last_prefill = self.tokens, [], None
            self.decode(kept, exact=self.params.exact)
            self.n_decoded, self.n_decode_calls, self.decode_seconds, self.last_calls = counts
        log.info("%s: KV cache %d -> %d cells (%.3f s)", self.path.name, old, self.n_cells, time.perf_counter() - t0)
        if failed:
            raise BackendError(
                f"not enough memory to grow the context of {self.path.name} to {cells} tokens: "
                "try a smaller context size or fewer GPU layers"
            )

    def set_flash_attn(self, flash_attn: bool | None) -> None:
        """Recreate the context with flash attention on, off, or as llama.cpp decides (the KV cache is emptied:
        flash attention changes how llama.cpp lays out the cached values). If llama.cpp cannot make that context
        (its buffers differ in size), the context comes back with the setting it had, and ``params.flash_attn``
        says so; :class:`BackendError` only if neither can be made (the model is then closed)."""
        previous = self.params.flash_attn
        if self.params.exact or self.params.vocab_only or flash_attn == previous:
            return
        try:
            self._open_context(flash_attn, keep_model=True)
        except BackendError:
            log.warning("%s: no context with flash attention %s; keeping it as it was", self.path.name, flash_attn)
            self._open_context(previous)

    @property
    def flash_attn_in_use(self) -> bool | None:
        """Whether the context runs flash attention: as set, always in exact mode, and where llama.cpp decides, on
        once this backend is known to support it (llama.cpp then turns it on); ``None`` when that is not known."""
        if self.params.exact:
            return True
        if self.params.flash_attn is not None:
            return self.params.flash_attn
        return True if self.flash_supported else None

    # ---- facts -------------------------------------------------------------------------------------

    def _read_vocab(self) -> VocabInfo:
        v = self._vocab_ptr
        n = int(llama_cpp.llama_vocab_n_tokens(v))
        texts = TokenTexts(
            (llama_cpp.llama_vocab_get_text(v, i) or b"").decode("utf-8", errors="replace") for i in range(n)
        )
        eog = frozenset(i for i in range(n) if llama_cpp.llama_vocab_is_eog(v, i))
        # llama_vocab_get_attr: bit 0x2 UNKNOWN... special tokens are CONTROL(8)/USER_DEFINED(16)/UNUSED.
        special = frozenset(i for i in range(n) if int(llama_cpp.llama_vocab_get_attr(v, i)) & (1 | 2 | 8))
        return VocabInfo(
            vocab_type=int(llama_cpp.llama_vocab_type(v)),
            n_vocab=n,
            bos=int(llama_cpp.llama_vocab_bos(v)),
            eos=int(llama_cpp.llama_vocab_eos(v)),
            eog=eog,
            add_bos=bool(llama_cpp.llama_vocab_get_add_bos(v)),
            add_eos=bool(llama_cpp.llama_vocab_get_add_eos(v)),
            texts=texts,
            special=special,
        )

    @property
    def loaded(self) -> bool:
        """Whether the model is still loaded (not closed)."""
        return bool(self._model)

    @property
    def n_vocab(self) -> int:
        """Vocabulary size (width of a logits row)."""
        return self.vocab.n_vocab

    @property
    def n_ctx(self) -> int:
        """The context size: the most tokens the cache may hold (it has :attr:`n_cells` now, see :meth:`reserve`)."""
        return self.params.n_ctx

    @property
    def n_past(self) -> int:
        """Tokens in the KV cache."""
        return len(self.tokens)

    @property
    def n_params(self) -> int:
        """Parameter count of the model."""
        return int(llama_cpp.llama_model_n_params(self._model))

    @property
    def n_layer(self) -> int:
        """Transformer blocks (the range of ``n_gpu_layers``)."""
        return int(llama_cpp.llama_model_n_layer(self._model))

    @property
    def offloads_all(self) -> bool:
        """Whether every transformer block runs on a GPU (then the CPU threads only feed it)."""
        offloaded = offloaded_layers(self.params.n_gpu_layers)
        return offloaded < 0 or (offloaded > 0 and offloaded >= self.n_layer)

    @property
    def host_cell_bytes(self) -> int:
        """Host memory one KV cache cell takes: the keys and values of every layer not offloaded to a GPU."""
        model = self._model
        layers = self.n_layer
        offloaded = offloaded_layers(self.params.n_gpu_layers)
        host_layers = 0 if offloaded < 0 else max(0, layers - offloaded)

        def meta(key: str) -> str | None:
            buf = ctypes.create_string_buffer(128)
            n = llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
            return buf.value.decode("utf-8", errors="replace") if n > 0 else None

        arch = meta("general.architecture") or ""
        head_k = int(meta(f"{arch}.attention.key_length") or 0) or (
            int(llama_cpp.llama_model_n_embd(model)) // max(1, int(llama_cpp.llama_model_n_head(model)))
        )
        head_v = int(meta(f"{arch}.attention.value_length") or 0) or head_k
        values = host_layers * int(llama_cpp.llama_model_n_head_kv(model)) * (head_k + head_v)
        return int(values * KV_VALUE_BYTES.get(self.kv_type if self.kv_type is not None else 1, 2.0))

    @property
    def n_ctx_train(self) -> int:
        """The context length the model was trained with."""
        return int(llama_cpp.llama_model_n_ctx_train(self._model))

    def description(self) -> str:
        """llama.cpp's one-line description (architecture, size, quantization)."""
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self._model, buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        """The chat template stored in the GGUF, if any."""
        raw = llama_cpp.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    # ---- text ---------------------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Tokenize text.

        Args:
            text: the text.
            add_special: add BOS (and EOS) if the model asks for it.
            parse_special: turn special-token texts (``<|im_start|>``) into their ids.
        """
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(self._vocab_ptr, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(self._vocab_ptr, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes one token stands for (special tokens render as empty)."""
        cached = self._pieces.get(token)
        if cached is None:
            buf = ctypes.create_string_buffer(64)
            n = llama_cpp.llama_token_to_piece(self._vocab_ptr, token, buf, len(buf), 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self._vocab_ptr, token, buf, len(buf), 0, False)
            cached = self._pieces[token] = buf.raw[:n]
        return cached

    def detokenize(self, tokens: Iterable[int]) -> str:
        """Text of a token sequence (bytes joined first, so split characters come out whole)."""
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def chat_text(self, messages: Sequence[dict[str, str]]) -> str:
        """A conversation rendered with the model's own chat template, ready for the answer (as text, with the
        template's special-token texts). Uses llama-cpp-python's sandboxed Jinja2 formatter, as llama.cpp's
        server does.

        Raises:
            BackendError: the model has no chat template, or it fails.
        """
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = self.chat_template()
        if not template:
            raise BackendError(f"{self.path.name} has no chat template; use a plain prompt instead of chat")
        vocab = self.vocab
        formatter = Jinja2ChatFormatter(
            template,
            eos_token=vocab.texts[vocab.eos] if 0 <= vocab.eos < vocab.n_vocab else "",
            bos_token=vocab.texts[vocab.bos] if 0 <= vocab.bos < vocab.n_vocab else "",
        )
        try:
            return str(formatter(messages=list(messages)).prompt)  # type: ignore[arg-type]
        except Exception as exc:  # a template error is the model file's fault, not a crash
            raise BackendError(f"The chat template of {self.path.name} failed: {exc}") from exc

    def format_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Tokens of a conversation rendered with the model's own chat template (:meth:`chat_text`).

        Raises:
            BackendError: the model has no chat template, or it fails.
        """
        vocab = self.vocab
        tokens = self.tokenize(self.chat_text(messages), add_special=False, parse_special=True)
        if vocab.add_bos and vocab.bos >= 0 and (not tokens or tokens[0] != vocab.bos):
            tokens.insert(0, vocab.bos)
        return tokens

    # ---- evaluation ---------------------------------------------------------------------------------

    def decode(
        self,
        tokens: Sequence[int],
        logits_for: Sequence[int] = (),
        exact: bool = False,
        cancel: threading.Event | None = None,
    ) -> np.ndarray:
        """Evaluate tokens appended after the KV cache's current contents.

        Args:
            tokens: the tokens, evaluated at positions ``n_past ..``.
            logits_for: indices into ``tokens`` whose logits the caller wants.
            exact: split the batch into decode calls of :attr:`invariant_sizes` (see :meth:`split`), so every
                row equals one-token decoding bit for bit; otherwise calls of up to ``n_batch`` tokens. A call is
                cut further where it would ask for more than :data:`N_OUTPUTS_MAX` rows (llama.cpp aborts there).
            cancel: stop when it is set: before the next call, and inside a call where llama.cpp can stop one (its
                CPU backend looks between the graph's nodes; not a recurrent model, whose state could not be taken
                back). The cache then holds the calls that ended. For a prompt's evaluation: a 2,800-token prompt
                takes 20 s on 2 cores, and Stop waited for all of it. A step's calls go without, as the flag is
                looked at through a Python callback, once a node (about 1,000 a call), on a thread that waits for
                the GIL.

        Returns:
            A ``(len(logits_for), n_vocab)`` float32 array. When one decode call computed them all, it is a view
            into llama.cpp's output buffer, valid until the next decode.

        Raises:
            BackendError: the tokens do not fit in the context, or llama.cpp fails.
            DecodeCancelled: ``cancel`` was set.
        """
        if self._ctx is None:
            if self.params.vocab_only:
                raise BackendError("this model was loaded vocabulary-only and cannot be evaluated")
            raise BackendError(self.unloaded_because or f"{self.path.name} was unloaded: load the models again")
        if self.n_past + len(tokens) > self.n_ctx:
            raise BackendError(
                f"context full: {self.n_past} + {len(tokens)} tokens exceed the context size {self.n_ctx}"
            )
        want = set(logits_for)
        if any(not 0 <= i < len(tokens) for i in want):
            raise ValueError("logits_for indexes outside the batch")
        if self.n_past + len(tokens) > self.n_cells:
            self.reserve(self.n_past + len(tokens))
        sizes = self.split(len(tokens)) if exact else self._plain_split(len(tokens))
        if len(want) > N_OUTPUTS_MAX:  # never on a step's path: a verification asks for at most this many
            sizes = _cap_outputs(sizes, sorted(want))
        self.last_calls = []
        rows: list[np.ndarray] = []
        start = 0
        for size in sizes:
            if cancel is not None and cancel.is_set():
                raise DecodeCancelled
            chunk = tokens[start : start + size]
            asked = [start + j in want for j in range(len(chunk))]
            c0 = time.process_time()
            abortable = None if self.recurrent else cancel
            rc, seconds = self._call(self._ctx, chunk, self.n_past, asked, abortable)
            self.last_cpu = time.process_time() - c0
            self.decode_seconds += seconds
            self.last_calls.append((len(chunk), seconds))
            self.n_decode_calls += 1
            if rc != 0 and not self.recurrent:
                # llama.cpp took back the ubatch that failed or was stopped, not those of the call before it: they
                # go too, so the cache holds what self.tokens says (an attention cache can be cut anywhere)
                llama_cpp.llama_memory_seq_rm(self._memory, 0, self.n_past, -1)
            if rc == 2 and abortable is not None:
                raise DecodeCancelled
            if rc != 0:
                raise BackendError(f"llama_decode failed with code {rc} (1 = no KV slot: the context is full)")
            self.tokens.extend(chunk)
            self.n_decoded += len(chunk)
            start += size
            n_rows = sum(asked)
            if n_rows:
                rows.append(self._logit_rows(n_rows))
                if start < len(tokens):  # the next call reuses llama.cpp's buffer: keep a copy
                    rows[-1] = rows[-1].copy()
        if not rows:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        return rows[0] if len(rows) == 1 else np.concatenate(rows)

    def set_threads(self, n: int) -> None:
        """Decode with ``n`` CPU threads from the next call on (one-token and batch calls alike)."""
        if n != self.n_threads and self._ctx is not None:
            llama_cpp.llama_set_n_threads(self._ctx, n, n)
            self.n_threads = n

    def _plain_split(self, n: int) -> list[int]:
        full, rest = divmod(n, self.params.n_batch)
        return [self.params.n_batch] * full + ([rest] if rest else [])

    def split(self, n: int) -> list[int]:
        """The decode-call sizes that evaluate ``n`` tokens bit-identically to one-token decoding: the largest
        invariant size that fits, repeatedly (1 is always invariant)."""
        out: list[int] = []
        sizes = sorted(self.invariant_sizes, reverse=True)
        while n > 0:
            size = next(s for s in sizes if s <= n)
            out.append(size)
            n -= size
        return out

    def probe_invariance(self, max_size: int = PROBE_MAX_SIZE) -> tuple[int, ...]:
        """Find the decode-call sizes whose logits equal one-token decoding bit for bit, and keep them in
        :attr:`invariant_sizes` (the KV cache is left empty).

        Kernels are chosen by batch size, model, build and hardware (llama.cpp's CPU backend: one row vs
        several, repacked weights from 4 rows, ARM's two-row i8mm kernels for even sizes; GPU backends their
        own thresholds), so this is measured rather than assumed: a short context, ``max_size`` tokens decoded
        one at a time, then the same tokens as one batch of each size, compared row by row.
        """
        t0 = time.perf_counter()
        text = "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n"
        tokens = (self.tokenize(text * 4, add_special=True) * 2)[: 24 + max_size]
        prefix, probe = tokens[:24], tokens[24:]
        self.decode(prefix)
        single = [self.decode([t], [0])[0].copy() for t in probe]
        sizes = [1]
        for n in range(2, len(probe) + 1):
            self.truncate(len(prefix))
            rows = self.decode(probe[:n], range(n))
            if all(np.array_equal(rows[i], single[i]) for i in range(n)):
                sizes.append(n)
        self.truncate(0)
        self.n_decoded = self.n_decode_calls = 0
        self.decode_seconds = 0.0
        self.invariant_sizes = tuple(sizes)
        self.probe_seconds = time.perf_counter() - t0
        log.info(
            "%s: decode calls of %s tokens are bit-identical to one-token decoding (probe: %.2f s)",
            self.path.name,
            ", ".join(map(str, self.invariant_sizes)),
            self.probe_seconds,
        )
        return self.invariant_sizes

    def probe_flash_attention(
        self, depths: Sequence[int] = FLASH_PROBE_DEPTHS, repeats: int = FLASH_PROBE_REPEATS
    ) -> FlashProbe | None:
        """Time decoding with flash attention on and off, and say which to use (the context is not touched).

        llama.cpp turns flash attention on wherever the backend supports it, without timing it. On a CPU it is
        not always faster: on the 2-core AMD EPYC VM we test on, one-token decoding of the demo target at 3,000
        tokens of context ran at 17.4 tokens/s with it and 21.3 without, and batches were slower still, while
        short contexts and prompt evaluation timed the same (``llama-bench``); others report the opposite on
        other CPUs. So both are measured here, in two scratch contexts: a few real tokens are evaluated, their
        cache is repeated out to each of ``depths`` (see :func:`tiled_kv_state`; the cost of attending over a
        context does not depend on what it says), and one token and a batch of :data:`FLASH_PROBE_BATCH` are
        timed there, each setting first in turn, :data:`FLASH_PROBE_REPEATS` times. About 4-5 s on that VM.

        Returns:
            What was measured, or ``None`` when it could not be (exact mode, a recurrent model, a context or a
            cache state llama.cpp refused).
        """
        if self.params.exact or self.recurrent or self._ctx is None:
            return None
        top = min(max(depths), self.n_ctx - FLASH_PROBE_BATCH - 1)
        depths = tuple(sorted({min(d, top) for d in depths}))
        text = "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n"
        seed = (self.tokenize(text * 8, add_special=True))[:32]
        contexts: dict[bool, Any] = {}
        try:
            states: dict[bool, bytes] = {}
            for flash in (True, False):
                ctx = contexts[flash] = self._new_context(top + FLASH_PROBE_BATCH + 1, flash)
                if not ctx:
                    return None
                self._timed_decode(ctx, seed, 0)
                buffer = seq_state(ctx)
                if buffer is None:
                    return None
                states[flash] = bytes(buffer)
            timed: dict[bool, list[float]] = {True: [], False: []}
            for depth in depths:
                for flash, ctx in contexts.items():
                    state = tiled_kv_state(states[flash], depth)
                    if state is None or not load_seq_state(ctx, state):
                        return None
                single: dict[bool, list[float]] = {True: [], False: []}
                batch: dict[bool, list[float]] = {True: [], False: []}
                for repeat in range(repeats):
                    # Each setting timed first in turn: the call after a switch of context can run slower.
                    for flash, ctx in sorted(contexts.items(), reverse=repeat % 2 == 1):
                        memory = llama_cpp.llama_get_memory(ctx)
                        single[flash].append(self._timed_decode(ctx, seed[:1], depth))
                        llama_cpp.llama_memory_seq_rm(memory, 0, depth, -1)
                        batch[flash].append(self._timed_decode(ctx, seed[:FLASH_PROBE_BATCH], depth))
                        llama_cpp.llama_memory_seq_rm(memory, 0, depth, -1)
                for flash in contexts:
                    timed[flash].append(statistics.median(single[flash]) + statistics.median(batch[flash]))
        except BackendError:
            return None
        finally:
            for ctx in contexts.values():
                if ctx:
                    llama_cpp.llama_free(ctx)
        return FlashProbe(depths, tuple(timed[True]), tuple(timed[False]))

    def _timed_decode(self, ctx: Any, tokens: Sequence[int], position: int) -> float:
        """Evaluate ``tokens`` at ``position ..`` in sequence 0 of ``ctx`` (a scratch context), every row's logits
        asked for as a verification asks; its seconds."""
        rc, seconds = self._call(ctx, tokens, position, [True] * len(tokens))
        if rc != 0:
            raise BackendError(f"llama_decode failed with code {rc}")
        return seconds

    def _call(
        self,
        ctx: Any,
        tokens: Sequence[int],
        position: int,
        logits: Sequence[bool],
        abort: threading.Event | None = None,
    ) -> tuple[int, float]:
        """One ``llama_decode`` of ``tokens`` at ``position ..`` (sequence 0), asking for row ``j``'s logits when
        ``logits[j]``; its return code (2: stopped because ``abort`` was set) and its seconds, to the end of the
        computation."""
        loading.check()  # a cancelled load stops before its next timed call
        b = self._batch
        b.n_tokens = len(tokens)
        for j, token in enumerate(tokens):
            b.token[j] = token
            b.pos[j] = position + j
            b.logits[j] = logits[j]
        t0 = time.perf_counter()
        if abort is None:
            rc = llama_cpp.llama_decode(ctx, b)
        else:
            callback = llama_cpp.ggml_abort_callback(lambda _data: abort.is_set())
            try:  # reset whatever happens: llama.cpp must never call a freed callback
                _abortable[0] = abort
                llama_cpp.llama_set_abort_callback(ctx, callback, None)
                rc = llama_cpp.llama_decode(ctx, b)
            finally:
                _abortable[0] = None
                llama_cpp.llama_set_abort_callback(ctx, llama_cpp.ggml_abort_callback(), None)
        if rc == 0:
            # Measured on an H200: without this, plain decoding's 192 calls timed 0.03 s of 0.35 s, the rest
            # landing in "overhead" when the logits were read, and the adaptive controller saw a batch of 8
            # cost what one token does. Reading the logits waits for the same work anyway.
            _synchronize(ctx)
        return rc, time.perf_counter() - t0

    def common_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading ``tokens`` the KV cache already holds."""
        limit = min(len(tokens), self.n_past)
        n = 0
        while n < limit and self.tokens[n] == tokens[n]:
            n += 1
        return n

    def _logit_rows(self, n_rows: int) -> np.ndarray:
        """The last decode call's ``n_rows`` logits rows, as a view into llama.cpp's output buffer.

        llama.cpp stores the rows a batch asked for contiguously, in batch order (``llama_get_logits``, which
        also waits for an asynchronous backend). The view is made once per buffer address and row count: right
        after a decode call, with the caches cold, numpy's ctypes bridge took ~100 µs a step here, a third of
        our own time per token. A view is only handed out for the buffer at its address now, which holds at
        least ``n_rows`` rows (it just returned them).
        """
        address = _logits_address(self._ctx)
        if not address:
            raise BackendError("llama.cpp returned no logits for the last decode call")
        view = self._views.get((address, n_rows))
        if view is None:
            if any(a != address for a, _ in self._views):
                self._views.clear()  # the buffer moved: views of the old one must never be handed out again
            buffer = (ctypes.c_float * (n_rows * self.n_vocab)).from_address(address)
            view = self._views[address, n_rows] = np.ctypeslib.as_array(buffer).reshape(n_rows, self.n_vocab)
        return view

    def truncate(self, n_past: int) -> None:
        """Roll the KV cache back to its first ``n_past`` tokens."""
        if n_past < self.n_past:
            if not llama_cpp.llama_memory_seq_rm(self._memory, 0, n_past, -1):
                # A recurrent state goes back only within its snapshots (BackendParams.rollback): start over.
                self.n_rebuilds += 1
                llama_cpp.llama_memory_clear(self._memory, True)
                kept = self.tokens[:n_past]
                self.tokens = []
                if kept:
                    self.decode(kept)
                return
            del self.tokens[n_past:]

    def sync(
        self, tokens: Sequence[int], logits_last: bool = False, cancel: threading.Event | None = None
    ) -> tuple[int, np.ndarray | None]:
        """Make the KV cache hold exactly ``tokens``, reusing the longest common prefix.

        Args:
            tokens: the wanted cache contents.
            logits_last: return the logits of the last token (it is re-evaluated if needed).
            cancel: see :meth:`decode`.

        Returns:
            How many tokens had to be evaluated, and the last token's logits row if asked for.
        """
        common = self.common_prefix(tokens)
        if logits_last and common == len(tokens) and common > 0:
            common -= 1  # the last token's logits are gone once another decode happened
        self.truncate(common)
        rest = list(tokens[common:])
        if not rest:
            return 0, None
        rows = self.decode(rest, [len(rest) - 1] if logits_last else (), cancel=cancel)
        return len(rest), (rows[0] if logits_last else None)

    def prefill(self, prompt: Sequence[int], cancel: threading.Event | None = None) -> np.ndarray:
        """Evaluate a prompt, its last token included, reusing the cached prefix; return the last token's
        logits row (a copy). ``cancel`` stops it (see :meth:`decode`).

        The tokens past the cached prefix go in calls of ``n_batch``, as llama.cpp's own tools evaluate a
        prompt, so a fresh prompt's first token is chosen from the same logits as ``llama-completion``'s,
        bit for bit (a last token evaluated on its own rounds differently on a CPU's batched kernels, and a
        greedy answer can part from llama.cpp's at a near-tie). A prompt evaluated again — a regenerated
        answer, Compare's second run, a benchmark's next run — repeats the final call of its last
        evaluation, so every run of it starts from the same logits.

        Raises:
            ValueError: the prompt is empty.
            BackendError: it does not fit in the context, or llama.cpp fails.
            DecodeCancelled: ``cancel`` was set.
        """
        n = len(prompt)
        if not n:
            raise ValueError("an empty prompt has no logits")
        key = tuple(prompt)
        common = self.common_prefix(prompt)
        last = self._last_prefill
        repeat = last is not None and last[0] == key and common >= last[1]
        start = last[1] if last is not None and repeat else min(common, n - 1)
        self.truncate(start)
        row = self.decode(prompt[start:], [n - 1 - start], cancel=cancel)[0].copy()
        self._last_prefill = (key, start + self.params.n_batch * ((n - 1 - start) // self.params.n_batch))
        return row

    def _unload(self, why: str) -> None:
        """Close after a failure that leaves no usable context, remembering ``why`` for whoever calls next."""
        self.close()
        self.unloaded_because = why

    def close(self) -> None:
        """Free the context and the model (idempotent)."""
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> LlamaBackend:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # At interpreter shutdown the library may already be gone.
        with contextlib.suppress(Exception):
            self.close()
