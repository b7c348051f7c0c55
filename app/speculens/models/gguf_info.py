"""GGUF facts without loading weights: architecture, size, quantization, context and the tokenizer.

The file is parsed as a stream straight from a memory map: the header, the key/value metadata, and the
tensor descriptions (for the parameter count), but never the tensor data. Best of three runs with a warm
page cache on 2 CPU cores, reading everything a compatibility check needs (ids, flags, all token texts):

=============================================  ======================  ====================
method                                         Qwen2.5-Coder-1.5B      Gemma-3-270M
                                               (1.1 GB, 151,936 tok.)  (253 MB, 262,144 tok.)
=============================================  ======================  ====================
``gguf.GGUFReader`` (the gguf package)         5.39 s                  7.63 s
llama.cpp vocab-only load (load alone)         0.21 s                  0.31 s
llama.cpp vocab-only load + per-token facts    0.38 s                  0.61 s
this streaming parse (metadata + tokens)       0.12 s                  0.10 s
=============================================  ======================  ====================

The gguf package builds a numpy view for every field and array element, which is what makes it slow on
a large vocabulary; llama.cpp is fast to load but answering per-token questions through ctypes costs
150k calls per fact. The type codes and key names come from the ``gguf`` package, so the format's
definition is not duplicated here; only the byte walk is. The tests check that what it reads agrees with a
llama.cpp vocab-only load: vocabulary type and size, BOS/EOS ids, add-BOS/EOS flags and every token text.

Every length and count is checked against what is left in the file before it is used, so a truncated or
damaged file raises :class:`GGUFError` with a sentence saying what is wrong — it never hangs on an absurd
count or reads past the end.
"""

from __future__ import annotations

import math
import mmap
import re
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speculens.engine.vocab import TokenTexts, VocabInfo
from speculens.errors import InvalidInputError

# gguf imports sentencepiece and mistral_common when they are installed, for tokenizer classes Speculens never
# uses. They stay out: with sentencepiece loaded first, llama.cpp crashed in its model loader (seen on a CUDA
# machine with Ubuntu's newer compiler, llama-cpp-python 0.3.36 built there; importing llama_cpp first avoided it).
_TOKENIZER_PACKAGES = [name for name in ("sentencepiece", "mistral_common") if name not in sys.modules]
sys.modules.update(dict.fromkeys(_TOKENIZER_PACKAGES))  # type: ignore[arg-type]  # None: "import x" fails
try:
    import gguf
    from gguf.constants import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT
finally:
    for _name in _TOKENIZER_PACKAGES:
        del sys.modules[_name]

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
# A GGUF key is at most 65535 bytes by the spec; anything longer is damage, not a key.
MAX_KEY_LENGTH = 65535
# Tensors have at most 4 dimensions in ggml (GGML_MAX_DIMS).
MAX_DIMS = 4

_VT = gguf.GGUFValueType
_SCALAR_FORMATS: dict[int, str] = {
    _VT.UINT8: "<B",
    _VT.INT8: "<b",
    _VT.UINT16: "<H",
    _VT.INT16: "<h",
    _VT.UINT32: "<I",
    _VT.INT32: "<i",
    _VT.FLOAT32: "<f",
    _VT.BOOL: "<?",
    _VT.UINT64: "<Q",
    _VT.INT64: "<q",
    _VT.FLOAT64: "<d",
}
_SCALAR_SIZES = {t: struct.calcsize(f) for t, f in _SCALAR_FORMATS.items()}

# llama.cpp's llama_vocab_type for each ``tokenizer.ggml.model`` value (llama-vocab.cpp).
VOCAB_TYPES = {"no_vocab": 0, "none": 0, "llama": 1, "gpt2": 2, "bert": 3, "t5": 4, "rwkv": 5, "plamo2": 6}
# gguf token types (gguf.TokenType): 2 unknown, 3 control, 5 unused count as special, as in llama.cpp.
_SPECIAL_TOKEN_TYPES = frozenset({int(gguf.TokenType.UNKNOWN), int(gguf.TokenType.CONTROL), int(gguf.TokenType.UNUSED)})

SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d(?:_[0-9A-Z]+)*|TQ\d_\d|MXFP4(?:_MOE)?|BF16|F16|F32|FP16|FP32)(?![A-Za-z0-9])",
    re.IGNORECASE,
)


class GGUFError(InvalidInputError):
    """A file is not a GGUF model we can read; the message says why in words a user understands."""


@dataclass(frozen=True)
class TokenizerInfo:
    """The tokenizer stored in a GGUF file.

    Attributes:
        model: ``tokenizer.ggml.model`` (``llama`` = SentencePiece, ``gpt2`` = byte-level BPE, ...).
        pre: ``tokenizer.ggml.pre``, the pre-tokenizer ("tokenizer class"), or ``None``.
        tokens: the token texts by id.
        token_types: gguf token types by id (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
            6 byte); empty when the file has none.
        bos: beginning-of-sequence id, -1 if none.
        eos: end-of-sequence id, -1 if none.
        eot: end-of-turn id, -1 if none.
        eom: end-of-message id, -1 if none.
        unk: unknown-token id, -1 if none.
        pad: padding id, -1 if none.
        add_bos: whether tokenization starts with BOS (llama.cpp's default for the model when absent).
        add_eos: whether tokenization ends with EOS.
        chat_template: the Jinja chat template, if any.
        n_merges: number of BPE merges (0 for other tokenizers).
        vocab_size: number of tokens the file declares (known even when the texts were not read).
    """

    model: str
    pre: str | None
    tokens: TokenTexts = field(repr=False)
    token_types: tuple[int, ...] = field(repr=False)
    bos: int
    eos: int
    eot: int
    eom: int
    unk: int
    pad: int
    add_bos: bool
    add_eos: bool
    chat_template: str | None = field(repr=False)
    n_merges: int = 0
    vocab_size: int = 0

    @property
    def n_vocab(self) -> int:
        """Vocabulary size."""
        return max(len(self.tokens), self.vocab_size)

    @property
    def vocab_type(self) -> int:
        """llama.cpp's ``llama_vocab_type`` for this tokenizer model (-1 if unknown to us)."""
        return VOCAB_TYPES.get(self.model, -1)

    def special_ids(self) -> frozenset[int]:
        """Ids of control, unknown and unused tokens."""
        return frozenset(i for i, t in enumerate(self.token_types) if t in _SPECIAL_TOKEN_TYPES)

    def to_vocab_info(self) -> VocabInfo:
        """The engine's :class:`VocabInfo`, so the engine's compatibility rules apply to metadata too.

        ``eog`` holds the EOS/EOT/EOM ids; llama.cpp also guesses end-of-generation tokens from their
        texts, which is not needed for compatibility checks.

        Raises:
            ValueError: the token texts were not read (``read_gguf_info(..., tokens=False)``).
        """
        if len(self.tokens) != self.vocab_size:
            raise ValueError("the token texts were not read; call read_gguf_info(path, tokens=True)")
        return VocabInfo(
            vocab_type=self.vocab_type,
            n_vocab=self.n_vocab,
            bos=self.bos,
            eos=self.eos,
            eog=frozenset(i for i in (self.eos, self.eot, self.eom) if i >= 0),
            add_bos=self.add_bos,
            add_eos=self.add_eos,
            texts=self.tokens,
            special=self.special_ids(),
        )


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF model file says about itself.

    Attributes:
        path: the file (the first part of a split model).
        parts: every file of the model, in order (one unless split).
        version: the GGUF format version.
        file_size: bytes on disk, all parts together.
        architecture: ``general.architecture`` (``llama``, ``qwen2``, ``gemma3``, ...).
        name: ``general.name``, if present.
        basename: ``general.basename`` (the family, e.g. ``Qwen2.5-Coder``), if present.
        size_label: ``general.size_label`` (``1.5B``), if present.
        finetune: ``general.finetune``, if present.
        parameter_count: ``general.parameter_count``, or the sum of the tensors' element counts.
        file_type: ``general.file_type`` (a ``gguf.LlamaFileType`` value), if present.
        quantization: readable quantization label (``Q4_K_M``), from the file type or the file name.
        context_length: the training context length, if present.
        block_count: transformer blocks (layers), if present.
        embedding_length: hidden size, if present.
        n_tensors: tensors, all parts together.
        metadata: every scalar key/value; arrays appear as ``"<array of N TYPE>"``.
        tokenizer: the tokenizer, or ``None`` when the file has none (or it was not read).
    """

    path: Path
    parts: tuple[Path, ...]
    version: int
    file_size: int
    architecture: str
    name: str | None
    basename: str | None
    size_label: str | None
    finetune: str | None
    parameter_count: int | None
    file_type: int | None
    quantization: str | None
    context_length: int | None
    block_count: int | None
    embedding_length: int | None
    n_tensors: int
    metadata: dict[str, Any] = field(repr=False)
    tokenizer: TokenizerInfo | None = field(repr=False)

    @property
    def title(self) -> str:
        """A readable name: ``general.name``, else the file name."""
        return self.name or self.path.stem

    @property
    def family(self) -> str:
        """The model family for pairing advice: ``general.basename``, else the name without sizes."""
        return model_family(self.basename, self.name, self.architecture)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly summary (no token list)."""
        tok = self.tokenizer
        return {
            "path": str(self.path),
            "parts": [str(p) for p in self.parts],
            "version": self.version,
            "file_size": self.file_size,
            "architecture": self.architecture,
            "name": self.name,
            "basename": self.basename,
            "family": self.family,
            "size_label": self.size_label,
            "finetune": self.finetune,
            "parameter_count": self.parameter_count,
            "file_type": self.file_type,
            "quantization": self.quantization,
            "context_length": self.context_length,
            "block_count": self.block_count,
            "embedding_length": self.embedding_length,
            "n_tensors": self.n_tensors,
            "tokenizer": None
            if tok is None
            else {
                "model": tok.model,
                "pre": tok.pre,
                "n_vocab": tok.n_vocab,
                "n_merges": tok.n_merges,
                "bos": tok.bos,
                "eos": tok.eos,
                "eot": tok.eot,
                "eom": tok.eom,
                "unk": tok.unk,
                "pad": tok.pad,
                "add_bos": tok.add_bos,
                "add_eos": tok.add_eos,
                "has_chat_template": tok.chat_template is not None,
            },
        }


def model_family(basename: str | None, name: str | None, architecture: str) -> str:
    """A family name for pairing advice: the basename, else the name without size and quant words.

    Args:
        basename: ``general.basename``.
        name: ``general.name``.
        architecture: ``general.architecture`` (the last resort).

    Returns:
        A lower-case family name such as ``qwen2.5-coder``.
    """
    if basename:
        return basename.strip().lower().replace(" ", "-")
    if name:
        words = re.split(r"[\s_\-]+", name.strip())
        kept = [
            w
            for w in words
            if w
            and not re.fullmatch(r"\d+(\.\d+)?[MBK]|\d+x\d+(\.\d+)?[MBK]", w, re.IGNORECASE)
            and not QUANT_RE.fullmatch(w)
            and w.lower() not in {"instruct", "chat", "it", "gguf", "base", "hf"}
        ]
        if kept:
            return "-".join(kept).lower()
    return architecture.lower()


def quant_label(file_type: int | None, filename: str = "") -> str | None:
    """A readable quantization label.

    Args:
        file_type: ``general.file_type``.
        filename: used when the file type is absent or unknown (``model-Q4_K_M.gguf``).

    Returns:
        ``Q4_K_M``, ``F16``, ... or ``None``.
    """
    if file_type is not None:
        try:
            name = gguf.LlamaFileType(file_type).name
        except ValueError:
            name = ""
        if name.startswith("MOSTLY_"):
            return name.removeprefix("MOSTLY_")
        if name == "ALL_F32":
            return "F32"
    match = QUANT_RE.search(Path(filename).name)
    return match.group(1).upper() if match else None


def split_parts(path: Path) -> tuple[Path, ...]:
    """All files of a split model (``name-00001-of-00003.gguf``), given any of them.

    Raises:
        GGUFError: a part is missing.
    """
    match = SPLIT_RE.match(path.name)
    if not match:
        return (path,)
    count = int(match.group("count"))
    if count < 1:
        raise GGUFError(f"{path.name}: a split model must have at least one part")
    stem = match.group("stem")
    width = len(match.group("no"))
    parts = tuple(path.with_name(f"{stem}-{i:0{width}d}-of-{count:0{width}d}.gguf") for i in range(1, count + 1))
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise GGUFError(
            f"{path.name} is part of a model split into {count} files, but {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} missing; put all parts in the same folder"
        )
    return parts


class _Cursor:
    """A bounds-checked reader over a byte buffer; every failure is a :class:`GGUFError`."""

    def __init__(self, buf: Any, name: str) -> None:
        self.buf = buf
        self.end = len(buf)
        self.off = 0
        self.name = name

    def need(self, n: int, what: str) -> None:
        if n < 0 or n > self.end - self.off:
            raise GGUFError(
                f"{self.name} is truncated or damaged: {what} needs {n} bytes at offset {self.off}, "
                f"but the file has {self.end - self.off} left. If it was downloaded or copied, that was cut short: "
                "download or copy it again"
            )

    def scalar(self, vtype: int, what: str) -> Any:
        fmt = _SCALAR_FORMATS[vtype]
        size = _SCALAR_SIZES[vtype]
        self.need(size, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.off)
        self.off += size
        return value

    def u32(self, what: str) -> int:
        return int(self.scalar(_VT.UINT32, what))

    def u64(self, what: str) -> int:
        return int(self.scalar(_VT.UINT64, what))

    def string(self, what: str, limit: int | None = None) -> str:
        n = self.u64(f"the length of {what}")
        if limit is not None and n > limit:
            raise GGUFError(f"{self.name} is damaged: {what} claims {n} bytes")
        self.need(n, what)
        raw = self.buf[self.off : self.off + n]
        self.off += n
        return bytes(raw).decode("utf-8", errors="replace")

    def skip_string(self, what: str) -> None:
        n = self.u64(f"the length of {what}")
        self.need(n, what)
        self.off += n

    def value_type(self, what: str) -> int:
        vtype = self.u32(f"the type of {what}")
        if vtype not in _SCALAR_FORMATS and vtype not in (_VT.STRING, _VT.ARRAY):
            raise GGUFError(f"{self.name} is damaged: {what} has an unknown value type {vtype}")
        return vtype


# Array handling: keys whose contents we keep; other arrays are skipped (their size still checked).
_KEEP_STRING_ARRAYS = {"tokenizer.ggml.tokens"}
_KEEP_INT_ARRAYS = {"tokenizer.ggml.token_type"}


def _read_array(cur: _Cursor, key: str, keep: bool) -> tuple[Any, int, int]:
    """Read or skip an array value; returns (contents or None, element type, count)."""
    etype = cur.value_type(f"the elements of {key}")
    count = cur.u64(f"the length of {key}")
    if etype == _VT.ARRAY:
        raise GGUFError(f"{cur.name}: nested arrays ({key}) are not supported")
    if etype == _VT.STRING:
        # Each string needs at least its 8-byte length: an absurd count fails here, not after a long loop.
        cur.need(count * 8, f"the {count} strings of {key}")
        if keep and key in _KEEP_STRING_ARRAYS:
            return _read_strings(cur, key, count), etype, count
        for _ in range(count):
            cur.skip_string(key)
        return None, etype, count
    size = _SCALAR_SIZES[etype]
    cur.need(count * size, f"the {count} values of {key}")
    values: Any = None
    if keep and key in _KEEP_INT_ARRAYS and etype in (_VT.INT32, _VT.UINT32):
        values = struct.unpack_from(f"<{count}{_SCALAR_FORMATS[etype][1]}", cur.buf, cur.off)
    cur.off += count * size
    return values, etype, count


def _read_strings(cur: _Cursor, key: str, count: int) -> tuple[str, ...]:
    # The hot loop of the whole module (150k tokens): locals and one bounds check per string.
    buf, off, end = cur.buf, cur.off, cur.end
    unpack = struct.Struct("<Q").unpack_from
    out: list[str] = []
    append = out.append
    for _ in range(count):
        if end - off < 8:
            cur.off = off
            cur.need(8, f"a string length in {key}")
        (n,) = unpack(buf, off)
        off += 8
        if n > end - off:
            cur.off = off
            cur.need(n, f"a string in {key}")
        append(str(buf[off : off + n], "utf-8", "replace"))
        off += n
    cur.off = off
    return tuple(out)


@dataclass
class _Header:
    version: int
    metadata: dict[str, Any]
    arrays: dict[str, Any]
    n_tensors: int
    n_params: int


def _parse(path: Path, *, tokens: bool, tensors: bool) -> _Header:
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            if size == 0:
                raise GGUFError(f"{path.name} is empty; it is not a GGUF model file")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _parse_buffer(mm, path.name, tokens=tokens, tensors=tensors)
    except OSError as exc:
        raise GGUFError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _parse_buffer(buf: Any, name: str, *, tokens: bool, tensors: bool) -> _Header:
    cur = _Cursor(buf, name)
    if cur.end < 4 or bytes(buf[:4]) != GGUF_MAGIC:
        raise GGUFError(f"{name} is not a GGUF model file (it does not start with the GGUF signature)")
    cur.off = 4
    version = cur.u32("the version")
    if version not in SUPPORTED_VERSIONS:
        if version & 0xFFFF == 0 and (version >> 24) in SUPPORTED_VERSIONS:
            raise GGUFError(f"{name} is a big-endian GGUF file, which llama.cpp on this machine cannot use")
        raise GGUFError(
            f"{name} uses GGUF version {version}; only versions {' and '.join(map(str, SUPPORTED_VERSIONS))} "
            "are supported (convert it again with a current llama.cpp)"
        )
    n_tensors = cur.u64("the tensor count")
    n_kv = cur.u64("the metadata count")
    # Every key/value takes at least 8 (key length) + 4 (type) + 1 bytes; every tensor at least 8+4+8+4+8.
    cur.need(n_kv * 13, f"{n_kv} metadata entries")
    metadata: dict[str, Any] = {}
    arrays: dict[str, Any] = {}
    for i in range(n_kv):
        key = cur.string(f"metadata key #{i}", MAX_KEY_LENGTH)
        vtype = cur.value_type(key)
        if vtype == _VT.STRING:
            metadata[key] = cur.string(key)
        elif vtype == _VT.ARRAY:
            values, etype, count = _read_array(cur, key, keep=tokens)
            metadata[key] = f"<array of {count} {_VT(etype).name}>"
            if values is not None:
                arrays[key] = values
            arrays[key + "#count"] = count
        else:
            metadata[key] = cur.scalar(vtype, key)
    n_params = 0
    data_end = 0  # the end of the last tensor's data, relative to the data section
    if tensors:
        cur.need(n_tensors * 28, f"{n_tensors} tensor descriptions")
        for i in range(n_tensors):
            cur.skip_string(f"the name of tensor #{i}")
            n_dims = cur.u32(f"the dimensions of tensor #{i}")
            if n_dims > MAX_DIMS:
                raise GGUFError(f"{name} is damaged: tensor #{i} claims {n_dims} dimensions")
            cur.need(n_dims * 8 + 12, f"tensor #{i}")
            dims = struct.unpack_from(f"<{n_dims}Q", buf, cur.off)
            ggml_type, offset = struct.unpack_from("<IQ", buf, cur.off + n_dims * 8)
            cur.off += n_dims * 8 + 12  # dims, then the ggml type (u32) and the data offset (u64)
            n_elements = math.prod(dims)
            n_params += n_elements
            block, type_size = _QUANT_SIZES.get(ggml_type, (1, 0))  # an unknown type: its extent is not checked
            data_end = max(data_end, offset + n_elements // block * type_size)
        alignment = _int_or(metadata, "general.alignment", GGUF_DEFAULT_ALIGNMENT) or GGUF_DEFAULT_ALIGNMENT
        data_start = -(-cur.off // alignment) * alignment
        if n_tensors and data_start + data_end > cur.end:
            raise GGUFError(
                f"{name} is truncated: it has {cur.end:,} bytes but its tensors need {data_start + data_end:,}. "
                "The download or copy was cut short; download or copy it again."
            )
    return _Header(version, metadata, arrays, n_tensors, n_params)


_QUANT_SIZES = {int(t): size for t, size in GGML_QUANT_SIZES.items()}  # ggml type -> (block, bytes per block)


def _int_or(meta: dict[str, Any], key: str, default: int) -> int:
    value = meta.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def _str_or_none(meta: dict[str, Any], key: str) -> str | None:
    value = meta.get(key)
    return value if isinstance(value, str) and value else None


# llama.cpp's defaults when a file does not say (llama_vocab::impl::load): model -> (bos, eos, unk, add_bos).
_TOKENIZER_DEFAULTS: dict[str, tuple[int, int, int, bool]] = {
    "llama": (1, 2, 0, True),
    "gpt2": (11, 11, -1, False),
    "bert": (101, -1, 100, True),
    "t5": (-1, 1, 2, False),
    "rwkv": (-1, -1, -1, False),
}


def _tokenizer(meta: dict[str, Any], arrays: dict[str, Any], name: str) -> TokenizerInfo | None:
    model = _str_or_none(meta, "tokenizer.ggml.model")
    if model is None:
        return None
    texts = arrays.get("tokenizer.ggml.tokens", ())
    types = arrays.get("tokenizer.ggml.token_type", ())
    if types and len(types) != len(texts):
        raise GGUFError(f"{name} is damaged: {len(texts)} tokens but {len(types)} token types")
    bos, eos, unk, add_bos = _TOKENIZER_DEFAULTS.get(model, (-1, -1, -1, False))
    add_bos_value = meta.get("tokenizer.ggml.add_bos_token")
    add_eos_value = meta.get("tokenizer.ggml.add_eos_token")
    return TokenizerInfo(
        model=model,
        pre=_str_or_none(meta, "tokenizer.ggml.pre"),
        tokens=TokenTexts(texts),
        token_types=tuple(types),
        bos=_int_or(meta, "tokenizer.ggml.bos_token_id", bos),
        eos=_int_or(meta, "tokenizer.ggml.eos_token_id", eos),
        eot=_int_or(meta, "tokenizer.ggml.eot_token_id", -1),
        eom=_int_or(meta, "tokenizer.ggml.eom_token_id", -1),
        unk=_int_or(meta, "tokenizer.ggml.unknown_token_id", unk),
        pad=_int_or(meta, "tokenizer.ggml.padding_token_id", -1),
        add_bos=bool(add_bos_value) if isinstance(add_bos_value, bool) else add_bos,
        add_eos=bool(add_eos_value) if isinstance(add_eos_value, bool) else model == "t5",
        chat_template=_str_or_none(meta, "tokenizer.chat_template"),
        n_merges=int(arrays.get("tokenizer.ggml.merges#count", 0)),
        vocab_size=int(arrays.get("tokenizer.ggml.tokens#count", 0)),
    )


def read_gguf_info(path: str | Path, *, tokens: bool = True) -> GGUFInfo:
    """Read a GGUF model's metadata without loading its weights.

    Args:
        path: the ``.gguf`` file (any part of a split model names the whole model).
        tokens: read the token texts and types too (needed for compatibility checks; costs about 0.1 s
            on a 150k vocabulary). Without them the tokenizer's ids and flags are still read.

    Returns:
        The model's facts.

    Raises:
        GGUFError: the file is missing, not GGUF, truncated, damaged, of an unsupported version, or a
            part of a split model is missing.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise GGUFError(f"model file not found: {path}")
    if path.is_dir():
        raise GGUFError(f"{path} is a folder; choose a .gguf file inside it")
    parts = split_parts(path)
    first = _parse(parts[0], tokens=tokens, tensors=True)
    meta = first.metadata
    n_tensors, n_params = first.n_tensors, first.n_params
    for part in parts[1:]:
        extra = _parse(part, tokens=False, tensors=True)
        n_tensors += extra.n_tensors
        n_params += extra.n_params
    arch = _str_or_none(meta, "general.architecture")
    if arch is None:
        raise GGUFError(f"{path.name} has no general.architecture; it is not a model file llama.cpp can load")
    file_type = meta.get("general.file_type")
    file_type = int(file_type) if isinstance(file_type, int) and not isinstance(file_type, bool) else None
    declared = meta.get("general.parameter_count")
    parameter_count = int(declared) if isinstance(declared, int) and declared > 0 else (n_params or None)
    context = meta.get(f"{arch}.context_length")
    blocks = meta.get(f"{arch}.block_count")
    embd = meta.get(f"{arch}.embedding_length")
    return GGUFInfo(
        path=parts[0],
        parts=parts,
        version=first.version,
        file_size=sum(p.stat().st_size for p in parts),
        architecture=arch,
        name=_str_or_none(meta, "general.name"),
        basename=_str_or_none(meta, "general.basename"),
        size_label=_str_or_none(meta, "general.size_label"),
        finetune=_str_or_none(meta, "general.finetune"),
        parameter_count=parameter_count,
        file_type=file_type,
        quantization=quant_label(file_type, parts[0].name),
        context_length=int(context) if isinstance(context, int) else None,
        block_count=int(blocks) if isinstance(blocks, int) else None,
        embedding_length=int(embd) if isinstance(embd, int) else None,
        n_tensors=n_tensors,
        metadata=meta,
        tokenizer=_tokenizer(meta, first.arrays, path.name),
    )


def format_params(n: int | None, label: str | None = None) -> str:
    """``1.54B``, ``494M``, or ``?``; with the model's size label where the count reads otherwise: ``630M
    (labelled 0.5B)`` (a tour read "630M" beside the name "0.5B": the file holds the output matrix that the
    original shares with the embeddings, and the label is the size people know the model by)."""
    label = (label or "").strip() or None
    if not n:
        return f"? (labelled {label})" if label else "?"
    text = str(n)
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            value = n / scale
            text = f"{value:.3g}{unit}" if value < 100 else f"{value:.0f}{unit}"
            break
    return f"{text} (labelled {label})" if label and not _label_agrees(label, n) else text


def _label_agrees(label: str, n: int) -> bool:
    """Whether a size label (``1.5B``) says about ``n`` parameters (within 10%); a label of another form (``8x7B``)
    agrees only where it reads as the count does."""
    scales = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMBT])", label.upper())
    if match is None:
        return label.upper() == format_params(n).upper()
    said = float(match[1]) * scales[match[2]]
    return said > 0 and abs(n / said - 1.0) < 0.1


def format_bytes(n: float | None) -> str:
    """``1.1 GB``, ``491 MB`` (decimal units, as the hub shows them)."""
    if n is None:
        return "?"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"
