"""The local model library: which GGUF files the user has, where they came from, and whether they are there.

The library is one JSON index (``library.json`` in the user data directory, see :mod:`speculens.paths`).
Files are registered where they are — importing a file elsewhere on disk never copies it — and downloads and
demo models live under :func:`speculens.paths.models_dir`. The index is rewritten atomically
(:mod:`speculens.atomic`) and every change is a read-modify-write under a lock file (``library.json.lock``),
which serialises threads and processes alike: a crash never leaves half an index, and two download threads,
two windows or the CLI beside the app never undo each other's changes. A file that was moved or deleted
shows as *missing*; nothing raises because of it.

Installed demo models (the ``demo`` extra) always appear: assembled ones as ordinary entries, the others as
*not assembled* until :meth:`Library.add_demo_models` (or their first use) builds them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from speculens import paths
from speculens.atomic import write_bytes_atomic
from speculens.errors import OperationError
from speculens.models import demo
from speculens.models.gguf_info import SPLIT_RE, GGUFError, GGUFInfo, read_gguf_info

log = logging.getLogger(__name__)

INDEX_VERSION = 1
HASH_BLOCK = 8 << 20
LOCK_TIMEOUT_S = 30.0

ProgressCallback = Callable[[int, int], None]


class SourceKind(StrEnum):
    """Where a model came from."""

    HUB = "hub"  # downloaded from the Hugging Face hub
    LOCAL = "local"  # a file the user imported (or a folder scan found)
    DEMO = "demo"  # assembled from the demo packages


class EntryStatus(StrEnum):
    """Whether an entry's file is usable now."""

    OK = "ok"
    MISSING = "missing"  # the file was moved or deleted
    CHANGED = "changed"  # the file's size is not what was registered
    DAMAGED = "damaged"  # the file is there but cannot be loaded (truncated, not GGUF, ...)
    NOT_ASSEMBLED = "not-assembled"  # an installed demo model that has not been built yet

    @property
    def words(self) -> str:
        """The status as the library window shows it (a tour read the raw "not-assembled")."""
        return {
            EntryStatus.OK: "OK",
            EntryStatus.MISSING: "File missing",
            EntryStatus.CHANGED: "File changed",
            EntryStatus.DAMAGED: "Damaged",
            EntryStatus.NOT_ASSEMBLED: "Not built yet",  # how to build it: the row's tooltip
        }[self]


@dataclass(frozen=True)
class ModelSource:
    """Provenance of a model file.

    Attributes:
        kind: hub, local or demo.
        repo: the hub repository (``Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF``), for hub and demo models.
        revision: the hub commit the file was downloaded at.
        filename: the file's name in the hub repository.
        demo_key: the demo model's key (``qwen-1.5b``), for demo models.
    """

    kind: SourceKind
    repo: str | None = None
    revision: str | None = None
    filename: str | None = None
    demo_key: str | None = None

    def describe(self) -> str:
        """A short readable description (``hub: Qwen/…@abc1234``)."""
        if self.kind is SourceKind.HUB:
            rev = f"@{self.revision[:7]}" if self.revision else ""
            return f"hub: {self.repo}{rev}"
        if self.kind is SourceKind.DEMO:
            return f"demo package ({self.demo_key})"
        return "local file"

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (empty fields left out)."""
        data: dict[str, Any] = {"kind": self.kind.value}
        for key in ("repo", "revision", "filename", "demo_key"):
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSource:
        """Inverse of :meth:`to_dict` (unknown kinds read as local)."""
        try:
            kind = SourceKind(data.get("kind", "local"))
        except ValueError:
            kind = SourceKind.LOCAL
        return cls(kind, data.get("repo"), data.get("revision"), data.get("filename"), data.get("demo_key"))


@dataclass(frozen=True)
class LibraryEntry:
    """One model in the library.

    Attributes:
        id: short unique name, usable on the command line (the file's stem, or the demo key).
        path: the model file (the first part of a split model).
        name: readable name from the metadata.
        size: bytes when registered (all parts).
        source: where it came from.
        sha256: the file's SHA-256 when known (hub and demo files always; imports on request).
        added: when it was registered (Unix time); ``None`` for a demo model not built yet.
        architecture: ``general.architecture``.
        family: pairing family (see :func:`speculens.models.gguf_info.model_family`).
        parameter_count: parameters, if known.
        size_label: ``general.size_label`` (``0.5B``), the size people know the model by, if known.
        quantization: ``Q4_K_M`` etc., if known.
        context_length: training context length, if known.
        n_vocab: vocabulary size, if known.
        tokenizer: ``tokenizer.ggml.model`` and pre-tokenizer (``gpt2/qwen2``), if known.
        status: whether the file is usable now (computed when the entry is listed, never stored).
        problem: why it is not, in words (computed with the status).
    """

    id: str
    path: Path
    name: str
    size: int
    source: ModelSource
    sha256: str | None = None
    added: float | None = None
    architecture: str | None = None
    family: str | None = None
    parameter_count: int | None = None
    size_label: str | None = None
    quantization: str | None = None
    context_length: int | None = None
    n_vocab: int | None = None
    tokenizer: str | None = None
    status: EntryStatus = field(default=EntryStatus.OK, compare=False)
    problem: str = field(default="", compare=False)

    @property
    def available(self) -> bool:
        """Whether the file is there and unchanged."""
        return self.status is EntryStatus.OK

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (as stored, plus the status)."""
        return {
            "id": self.id,
            "path": str(self.path),
            "name": self.name,
            "size": self.size,
            "source": self.source.to_dict(),
            "sha256": self.sha256,
            "added": self.added,
            "architecture": self.architecture,
            "family": self.family,
            "parameter_count": self.parameter_count,
            "size_label": self.size_label,
            "quantization": self.quantization,
            "context_length": self.context_length,
            "n_vocab": self.n_vocab,
            "tokenizer": self.tokenizer,
            "status": self.status.value,
            "problem": self.problem,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LibraryEntry:
        """Inverse of :meth:`to_dict`; the status is recomputed by the library.

        Raises:
            KeyError, TypeError, ValueError: the record is damaged.
        """
        return cls(
            id=str(data["id"]),
            path=Path(data["path"]),
            name=str(data.get("name") or Path(data["path"]).stem),
            size=int(data.get("size") or 0),
            source=ModelSource.from_dict(dict(data.get("source") or {})),
            sha256=data.get("sha256"),
            added=float(data["added"]) if data.get("added") else None,
            architecture=data.get("architecture"),
            family=data.get("family"),
            parameter_count=data.get("parameter_count"),
            size_label=data.get("size_label"),
            quantization=data.get("quantization"),
            context_length=data.get("context_length"),
            n_vocab=data.get("n_vocab"),
            tokenizer=data.get("tokenizer"),
        )


@dataclass(frozen=True)
class ScanResult:
    """What :meth:`Library.scan` did.

    Attributes:
        added: entries registered by this scan.
        known: entries that were already registered.
        skipped: files that looked like models but are not usable, with the reason.
    """

    added: tuple[LibraryEntry, ...]
    known: tuple[LibraryEntry, ...]
    skipped: tuple[tuple[Path, str], ...]


class LibraryError(OperationError):
    """A library operation failed; the message says what to do."""


def sha256_file(path: Path, progress: ProgressCallback | None = None) -> str:
    """SHA-256 of a file, read in 8 MiB blocks.

    Args:
        path: the file.
        progress: called with (bytes hashed, total bytes).
    """
    digest = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    with path.open("rb") as f:
        while block := f.read(HASH_BLOCK):
            digest.update(block)
            done += len(block)
            if progress is not None:
                progress(done, total)
    return digest.hexdigest()


def default_index_path() -> Path:
    """Where the library index lives."""
    return paths.data_dir() / "library.json"


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.")
    return slug or "model"


@functools.lru_cache(maxsize=1024)
def _header_damage(path: Path, size: int, mtime_ns: int) -> str:
    """What is wrong with the file's GGUF header ("" when nothing), read once per version of the file (listing
    the library must not parse every header again: a 150k-token vocabulary takes a while to skip)."""
    try:
        read_gguf_info(path, tokens=False)
    except GGUFError as exc:
        return exc.message
    return ""


def _checked(entry: LibraryEntry) -> LibraryEntry:
    """The entry with its status now: missing, changed on disk, damaged (its header says the file is cut short
    or unreadable), or ok."""
    try:
        st = entry.path.stat()
    except OSError:
        return replace(entry, status=EntryStatus.MISSING, problem=f"The file is gone: {entry.path}")
    damage = _header_damage(entry.path, st.st_size, st.st_mtime_ns)
    if damage:  # first: a file cut short after it was registered is damaged, not merely changed
        return replace(entry, status=EntryStatus.DAMAGED, problem=damage)
    if st.st_size != entry.size and entry.size:
        return replace(
            entry,
            status=EntryStatus.CHANGED,
            problem=f"The file changed on disk ({st.st_size:,} bytes, {entry.size:,} when registered).",
        )
    return replace(entry, status=EntryStatus.OK, problem="")


class _LibraryLock:
    """The library's lock file, with a message that says what to do when another process holds it too long."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # One object made up front (made lazily, two threads could each make their own and release the
        # other's). Its state is per thread: re-entrant within a thread, each thread's own OS lock otherwise.
        self._lock = FileLock(str(path), timeout=LOCK_TIMEOUT_S, thread_local=True)

    def __enter__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
        except Timeout as exc:
            raise LibraryError(
                f"the model library is locked by another Speculens process ({self.path}); "
                "close the other window or command and try again"
            ) from exc

    def __exit__(self, *_exc: object) -> None:
        self._lock.release()


class Library:
    """The user's models.

    Args:
        index_path: the JSON index (default: ``library.json`` in the user data directory).
        include_demo: list installed demo models too (the application always does; tests may not).
    """

    def __init__(self, index_path: Path | None = None, *, include_demo: bool = True) -> None:
        self.index_path = index_path or default_index_path()
        self.include_demo = include_demo
        # Re-entrant within a thread, exclusive across threads and processes (an OS lock on a file).
        self._lock = _LibraryLock(self.index_path.with_name(self.index_path.name + ".lock"))

    # ---- the index -----------------------------------------------------------------------------------

    def _load(self) -> dict[str, LibraryEntry]:
        try:
            raw = self.index_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise LibraryError(f"cannot read the model library {self.index_path}: {exc.strerror}") from exc
        try:
            data = json.loads(raw)
            records = data["models"] if isinstance(data, dict) else None
            if not isinstance(records, list):
                raise ValueError("no model list")
        except (ValueError, KeyError, TypeError) as exc:
            # Keep the damaged file for a person to look at, and go on with an empty library.
            backup = self.index_path.with_name(f"{self.index_path.name}.damaged-{int(time.time())}")
            os.replace(self.index_path, backup)
            log.warning("the model library index was damaged (%s); it was moved to %s", exc, backup)
            return {}
        entries: dict[str, LibraryEntry] = {}
        for record in records:
            try:
                entry = LibraryEntry.from_dict(record)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("skipping a damaged library record %r: %s", record, exc)
                continue
            entries[entry.id] = entry
        return entries

    def _save(self, entries: dict[str, LibraryEntry]) -> None:
        records = [e.to_dict() for e in entries.values()]
        for record in records:
            record.pop("status", None)  # computed on listing, never stored
        payload = json.dumps({"version": INDEX_VERSION, "models": records}, indent=2, ensure_ascii=False)
        try:
            write_bytes_atomic(self.index_path, payload.encode("utf-8"))
        except OSError as exc:
            raise LibraryError(f"cannot write the model library {self.index_path}: {exc.strerror}") from exc

    # ---- reading -------------------------------------------------------------------------------------

    def entries(self) -> list[LibraryEntry]:
        """Every model, with its current status; installed demo models that are not built yet included.

        Returns:
            Entries sorted by name; missing files are listed with status ``missing``.
        """
        with self._lock:
            stored = self._load()
            if self.include_demo:
                stored = self._sync_demo(stored)
        out = [_checked(_demo_named(e)) for e in stored.values()]
        if self.include_demo:
            known = {e.source.demo_key for e in out if e.source.kind is SourceKind.DEMO}
            # Nor is a demo model listed to be built when the library has its file already, added from elsewhere
            # (a tour scanned a folder of the demo files, and each stood beside its "not built yet" twin).
            have = {(e.path.name, e.size) for e in out if e.available}
            for model in demo.DEMO_MODELS:
                if model.key not in known and demo.is_installed(model) and (model.filename, model.size) not in have:
                    out.append(_demo_placeholder(model))
        return sorted(out, key=lambda e: (e.name.lower(), e.id))

    def get(self, key: str) -> LibraryEntry | None:
        """The entry whose id, name (case-insensitive) or path is ``key``, or ``None``."""
        entries = self.entries()
        for e in entries:
            if e.id == key:
                return e
        lowered = key.lower()
        for e in entries:
            if e.name.lower() == lowered:
                return e
        try:
            resolved = Path(key).expanduser().resolve()
        except (OSError, RuntimeError):
            return None
        return next((e for e in entries if e.path == resolved), None)

    # ---- changing ------------------------------------------------------------------------------------

    def add(
        self,
        path: str | Path,
        *,
        source: ModelSource | None = None,
        sha256: str | None = None,
        compute_sha256: bool = False,
        entry_id: str | None = None,
        progress: ProgressCallback | None = None,
    ) -> LibraryEntry:
        """Register a GGUF file where it is (nothing is copied).

        Registering a file again updates its source and checksum and keeps its id.

        Args:
            path: the file (any part of a split model registers the whole model).
            source: where it came from (default: a local import).
            sha256: its SHA-256 if the caller verified it.
            compute_sha256: hash the file now (seconds per GB) if ``sha256`` is not given.
            entry_id: the id to use (default: from the file name).
            progress: called with (bytes hashed, total) while hashing.

        Returns:
            The entry.

        Raises:
            GGUFError: the file is not a readable GGUF model.
            LibraryError: the index cannot be written.
        """
        info = read_gguf_info(path, tokens=False)
        file = info.path.resolve()
        if sha256 is None and compute_sha256 and len(info.parts) == 1:
            sha256 = sha256_file(file, progress)
        with self._lock:
            entries = self._load()
            existing = next((e for e in entries.values() if e.path == file), None)
            if existing is not None:
                updated = replace(
                    existing,
                    source=source or existing.source,
                    sha256=sha256 or existing.sha256,
                    size=info.file_size,
                    **_facts(info),
                )
                entries[existing.id] = updated
                self._save(entries)
                return replace(updated, status=EntryStatus.OK)
            new_id = entry_id or _slug(SPLIT_RE.sub(r"\g<stem>", file.name).removesuffix(".gguf"))
            base, n = new_id, 2
            while new_id in entries:
                new_id = f"{base}-{n}"
                n += 1
            entry = LibraryEntry(
                id=new_id,
                path=file,
                name=info.title,
                size=info.file_size,
                source=source or ModelSource(SourceKind.LOCAL),
                sha256=sha256,
                added=time.time(),
                **_facts(info),
            )
            entries[new_id] = entry
            self._save(entries)
            return entry

    def remove(self, entry_id: str, *, delete_file: bool = False) -> None:
        """Forget a model.

        Args:
            entry_id: the entry's id.
            delete_file: also delete the file, but only when it lives in the Speculens models folder
                (an imported file elsewhere is the user's, and is never deleted).

        Raises:
            KeyError: no such entry.
        """
        with self._lock:
            entries = self._load()
            entry = entries.pop(entry_id)
            self._save(entries)
        if delete_file and entry.path.is_relative_to(paths.models_dir().resolve()):
            entry.path.unlink(missing_ok=True)

    def set_sha256(self, entry_id: str, progress: ProgressCallback | None = None) -> str:
        """Hash an entry's file and remember the SHA-256.

        Raises:
            KeyError: no such entry.
            LibraryError: the file is missing.
        """
        with self._lock:
            entry = self._load()[entry_id]
        if not entry.path.is_file():
            raise LibraryError(f"{entry.name}: the file is missing ({entry.path})")
        digest = sha256_file(entry.path, progress)
        with self._lock:
            entries = self._load()
            if entry_id in entries:
                entries[entry_id] = replace(entries[entry_id], sha256=digest)
                self._save(entries)
        return digest

    def scan(self, folder: str | Path, *, recursive: bool = True) -> ScanResult:
        """Register every GGUF model in a folder (files stay where they are).

        Later parts of split models are folded into their first part; files that are not readable GGUF
        models are skipped with the reason.

        Raises:
            LibraryError: the folder does not exist.
        """
        root = Path(folder).expanduser()
        if not root.is_dir():
            raise LibraryError(f"{root} is not a folder")
        pattern = "**/*.gguf" if recursive else "*.gguf"
        candidates = sorted(p for p in root.glob(pattern) if p.is_file() and not p.name.startswith("."))
        known_paths = {e.path for e in self.entries()}
        added: list[LibraryEntry] = []
        known: list[LibraryEntry] = []
        skipped: list[tuple[Path, str]] = []
        for p in candidates:
            m = SPLIT_RE.match(p.name)
            if m and int(m.group("no")) != 1:
                continue
            resolved = p.resolve()
            if resolved in known_paths:
                existing = self.get(str(resolved))
                if existing is not None:
                    known.append(existing)
                continue
            try:
                added.append(self.add(p))
            except GGUFError as exc:
                skipped.append((p, str(exc)))
        return ScanResult(tuple(added), tuple(known), tuple(skipped))

    def add_demo_models(self, progress: Callable[[demo.DemoModel, int, int], None] | None = None) -> list[LibraryEntry]:
        """Assemble (if needed) and register every installed demo model.

        Args:
            progress: called with (model, bytes written, total) while a model is assembled.

        Returns:
            The demo entries.

        Raises:
            DemoModelError: a model's chunks are damaged or the disk is full.
        """
        out = []
        for model in demo.DEMO_MODELS:
            if not demo.is_installed(model):
                continue
            step = None if progress is None else (lambda done, total, m=model: progress(m, done, total))
            out.append(self.assemble_demo(model.key, step))
        return out

    def assemble_demo(self, key: str, progress: Callable[[int, int], None] | None = None) -> LibraryEntry:
        """Assemble (if needed) and register one installed demo model.

        Raises:
            DemoModelError: its chunks are damaged, not installed, or the disk is full.
        """
        model = demo.demo_model(key)
        return self._add_demo_entry(model, demo.ensure_demo_model(model, progress=progress))

    def _add_demo_entry(self, model: demo.DemoModel, path: Path) -> LibraryEntry:
        # Named as entries() names it (`models demo` printed the draft as "… AWQ", from its file's metadata).
        return _demo_named(self.add(
            path,
            source=ModelSource(SourceKind.DEMO, repo=model.hub_repo, filename=model.filename, demo_key=model.key),
            sha256=model.sha256,  # verified when assembled (demo.ensure_demo_model)
            entry_id=model.key,
        ))

    def _sync_demo(self, stored: dict[str, LibraryEntry]) -> dict[str, LibraryEntry]:
        """Register demo models that were assembled (by a generate run, say) but never registered."""
        registered = {e.source.demo_key for e in stored.values() if e.source.kind is SourceKind.DEMO}
        changed = False
        for model in demo.DEMO_MODELS:
            if model.key in registered:
                continue
            path = demo.demo_path(model)
            try:
                if path.stat().st_size != model.size:
                    continue
            except OSError:
                continue
            try:
                self._add_demo_entry(model, path)
                changed = True
            except GGUFError as exc:
                log.warning("demo model %s at %s is unreadable: %s", model.key, path, exc)
        return self._load() if changed else stored


def _facts(info: GGUFInfo) -> dict[str, Any]:
    tok = info.tokenizer
    return {
        "architecture": info.architecture,
        "family": info.family,
        "parameter_count": info.parameter_count,
        "size_label": info.size_label,
        "quantization": info.quantization,
        "context_length": info.context_length,
        "n_vocab": None if tok is None else tok.n_vocab,
        "tokenizer": None if tok is None else f"{tok.model}/{tok.pre or 'default'}",
    }


def _demo_named(entry: LibraryEntry) -> LibraryEntry:
    """A demo model's entry under its demo title ("Qwen2.5-Coder-0.5B-Instruct Q4_K_M"), not its file's
    ``general.name``, which for the 0.5B draft says "AWQ" of a Q4_K_M file; also for entries registered before (and
    with the size label entries registered before it was kept lacked)."""
    key = entry.source.demo_key if entry.source.kind is SourceKind.DEMO else None
    model = next((m for m in demo.DEMO_MODELS if m.key == key), None)
    if model is None:
        return entry
    label = model.facts.get("size_label")
    return replace(entry, name=model.title, size_label=entry.size_label or (label if isinstance(label, str) else None))


def _demo_placeholder(model: demo.DemoModel) -> LibraryEntry:
    return LibraryEntry(
        id=model.key,
        path=demo.demo_path(model),
        name=model.title,
        size=model.size,
        source=ModelSource(SourceKind.DEMO, repo=model.hub_repo, filename=model.filename, demo_key=model.key),
        sha256=model.sha256,
        status=EntryStatus.NOT_ASSEMBLED,
        **model.facts,  # type: ignore[arg-type]  # what the file will say, shown before it is built (a tour's "–")
    )
