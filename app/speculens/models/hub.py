"""The Hugging Face hub: search GGUF repositories, list their GGUF files, download one into the library.

Search and listing go through :class:`huggingface_hub.HfApi`; file metadata (size, commit, SHA-256 from the
``X-Linked-Etag`` of LFS files) through :func:`huggingface_hub.get_hf_file_metadata`; the bytes through
huggingface_hub's own HTTP session with ``Range`` requests. We stream the file ourselves rather than call
``hf_hub_download`` because the GUI needs what that function does not give: a progress callback with speed
and ETA, cancellation from another thread, a resumable partial file in our models folder (not the hub
cache), and a SHA-256 check before the file is renamed into place and registered.

A download is written to ``<file>.part`` next to a small ``<file>.part.json`` that remembers which
version of the file it holds; an interrupted or cancelled download resumes from there when the hub still
serves the same version. Nothing is registered in the library until every byte is there and the checksum
matches, so no error — not found, unauthorized, gated, no network, disk full, checksum mismatch — can
leave a partial file registered as a model.

The endpoint is ``HF_ENDPOINT`` read when a :class:`HubClient` is made (huggingface_hub itself reads it
once, at import), or the ``endpoint`` argument; the token is the ``token`` argument, else the one
huggingface_hub finds (``HF_TOKEN`` or ``hf auth login``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, NoReturn

from speculens import paths
from speculens.errors import OperationError
from speculens.models.gguf_info import SPLIT_RE, quant_label
from speculens.models.library import Library, LibraryEntry, ModelSource, SourceKind
from speculens.words import upper_first

CHUNK_SIZE = 256 << 10
PROGRESS_INTERVAL_S = 0.1
SPEED_WINDOW_S = 3.0
REACHABILITY_TTL_S = 60.0
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_GIT_SHA1_RE = re.compile(r"^[0-9a-f]{40}$")


class HubErrorKind(StrEnum):
    """Why a hub operation failed."""

    NOT_FOUND = "not-found"
    UNAUTHORIZED = "unauthorized"
    GATED = "gated"
    NETWORK = "network"
    OFFLINE = "offline"
    DISK_FULL = "disk-full"
    CHECKSUM = "checksum"
    CANCELLED = "cancelled"
    HTTP = "http"


class HubError(OperationError):
    """A hub operation failed; ``str(error)`` is a sentence for the user, ``kind`` says which failure.

    Args:
        kind: the failure.
        message: what happened and what to do.
    """

    def __init__(self, kind: HubErrorKind, message: str) -> None:
        super().__init__(upper_first(message))  # "Searching the hub for …: cannot reach …"
        self.kind = kind


class DownloadCancelled(HubError):
    """The user cancelled a download; the partial file is kept so it can resume."""

    def __init__(self, message: str = "download cancelled; run it again to resume") -> None:
        super().__init__(HubErrorKind.CANCELLED, message)


@dataclass(frozen=True)
class HubRepo:
    """A repository found by :meth:`HubClient.search`.

    Attributes:
        repo_id: ``owner/name``.
        downloads: recent downloads, if the hub said.
        likes: likes, if the hub said.
        gated: whether access must be requested (``False``, ``"auto"`` or ``"manual"``).
        last_modified: ISO date of the last change, if known.
        tags: the hub's tags.
    """

    repo_id: str
    downloads: int | None
    likes: int | None
    gated: bool | str
    last_modified: str | None
    tags: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "repo_id": self.repo_id,
            "downloads": self.downloads,
            "likes": self.likes,
            "gated": self.gated,
            "last_modified": self.last_modified,
            "tags": list(self.tags),
        }


@dataclass(frozen=True)
class HubFile:
    """One GGUF model in a repository (all parts of a split model together).

    Attributes:
        repo_id: the repository.
        filename: the file's path in the repository (the first part of a split model).
        parts: every file of the model, in order.
        size: bytes, all parts together.
        quant: quantization label from the file name (``Q4_K_M``), if any.
        sha256: the SHA-256 of a single-file model, when the listing gave it.
    """

    repo_id: str
    filename: str
    parts: tuple[str, ...]
    size: int
    quant: str | None
    sha256: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "repo_id": self.repo_id,
            "filename": self.filename,
            "parts": list(self.parts),
            "size": self.size,
            "quant": self.quant,
            "sha256": self.sha256,
        }


@dataclass(frozen=True)
class DownloadProgress:
    """A progress report for the GUI or the CLI.

    Attributes:
        filename: the file being transferred.
        downloaded: bytes on disk so far (all parts, resumed bytes included).
        total: bytes in all (all parts).
        speed: bytes per second over the last few seconds (0 until measurable).
        eta: seconds left at that speed, or ``None`` while unknown.
        phase: ``downloading``, ``verifying`` or ``done``.
        resumed_from: in the report a resumed transfer makes before its first new byte, the bytes it goes on
            from (0 in every other report).
    """

    filename: str
    downloaded: int
    total: int
    speed: float
    eta: float | None
    phase: str
    resumed_from: int = 0

    @property
    def fraction(self) -> float:
        """0..1."""
        return self.downloaded / self.total if self.total else 0.0


ProgressCallback = Callable[[DownloadProgress], None]


@dataclass(frozen=True)
class DownloadResult:
    """A finished download.

    Attributes:
        path: the model file (first part of a split model).
        sha256: the verified SHA-256 of each part, by file name.
        revision: the commit the file was downloaded at.
        entry: the library entry, when the download was registered.
    """

    path: Path
    sha256: dict[str, str]
    revision: str | None
    entry: LibraryEntry | None


def _is_true(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_folder(repo_id: str) -> Path:
    """Where files of ``repo_id`` are downloaded (inside the Speculens models folder)."""
    return paths.models_dir() / "hub" / repo_id.replace("/", "__")


def interrupted_downloads() -> list[tuple[str, DownloadProgress]]:
    """Downloads that stopped before they finished (cancelled, cut off, or Speculens quit), from the partial files
    in the hub folder: each one's repository and how far its file got, so that a restarted window can offer to
    resume them (a tour found the Downloads tab empty after a restart, its 93 MB partial file waiting unseen)."""
    found = []
    for state in sorted((paths.models_dir() / "hub").glob("*/*.part.json")):
        version = _read_json(state)
        try:
            have = state.with_suffix("").stat().st_size  # x.gguf.part.json: x.gguf.part
            repo, name, size = str(version["repo"]), str(version["file"]), int(version["size"])
        except (OSError, TypeError, KeyError, ValueError):
            continue
        found.append((repo, DownloadProgress(name, have, size, 0.0, None, "interrupted")))
    return found


def group_gguf_files(repo_id: str, files: list[tuple[str, int, str | None]]) -> list[HubFile]:
    """Group a repository's GGUF files into models: split parts become one :class:`HubFile`.

    Args:
        repo_id: the repository.
        files: (path, size, sha256 or None) of every file in it.

    Returns:
        The models, sorted by file name.
    """
    singles: list[HubFile] = []
    splits: dict[str, list[tuple[int, str, int]]] = {}
    for name, size, sha in files:
        if not name.lower().endswith(".gguf"):
            continue
        m = SPLIT_RE.match(name)
        if m:
            splits.setdefault(f"{m.group('stem')}|{m.group('count')}", []).append(
                (int(m.group("no")), name, size)
            )
        else:
            singles.append(HubFile(repo_id, name, (name,), size, quant_label(None, name), sha))
    for group in splits.values():
        group.sort()
        names = tuple(n for _, n, _ in group)
        singles.append(
            HubFile(repo_id, names[0], names, sum(s for _, _, s in group), quant_label(None, names[0]), None)
        )
    return sorted(singles, key=lambda f: f.filename.lower())


class _Meter:
    """Turns byte counts into throttled :class:`DownloadProgress` reports."""

    def __init__(self, callback: ProgressCallback | None, total: int, done: int) -> None:
        self.callback = callback
        self.total = total
        self.done = done
        self.filename = ""
        self.samples: deque[tuple[float, int]] = deque([(time.monotonic(), done)])
        self.last_report = 0.0

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        self.samples.append((now, self.done))
        while len(self.samples) > 2 and now - self.samples[0][0] > SPEED_WINDOW_S:
            self.samples.popleft()
        if now - self.last_report >= PROGRESS_INTERVAL_S:
            self.report("downloading")

    def reset(self, done: int) -> None:
        self.done = done
        self.samples = deque([(time.monotonic(), done)])

    def report(self, phase: str, resumed: bool = False) -> None:
        if self.callback is None:
            return
        self.last_report = time.monotonic()
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        speed = (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0
        eta = (self.total - self.done) / speed if speed > 0 else None
        start = self.done if resumed else 0
        self.callback(DownloadProgress(self.filename, self.done, self.total, speed, eta, phase, start))


class HubClient:
    """Search, list and download GGUF models from the Hugging Face hub (or a compatible server).

    Args:
        endpoint: the hub's address (default: ``HF_ENDPOINT``, else https://huggingface.co).
        token: an access token for gated or private repositories (default: the one huggingface_hub
            finds, from ``HF_TOKEN`` or a saved login).
        offline: refuse every network request (default: ``HF_HUB_OFFLINE``).
        library: where finished downloads are registered (default: the user's library).
        retries: how often one download resumes by itself after a dropped connection.
        token_hint: where the user gives a token, as the errors of a gated or private repository say it.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        *,
        offline: bool | None = None,
        library: Library | None = None,
        retries: int = 3,
        token_hint: str = "--token or HF_TOKEN",
    ) -> None:
        from huggingface_hub import constants

        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
        self.token = token
        self.offline = (
            offline
            if offline is not None
            else (_is_true(os.environ.get("HF_HUB_OFFLINE")) or constants.is_offline_mode())
        )
        # What turned it on, as the offline error says it: the caller's choice (the CLI's --offline), or the variable.
        self._offline_by = "--offline" if offline else "HF_HUB_OFFLINE"
        self.library = library
        self.retries = retries
        self.token_hint = token_hint
        self._reachable_until = 0.0

    # ---- errors ------------------------------------------------------------------------------------------

    def _fail(self, exc: BaseException, what: str) -> NoReturn:
        """Turn huggingface_hub's and httpx's exceptions into a :class:`HubError` with a clear sentence."""
        import httpx2
        from huggingface_hub import errors

        if isinstance(exc, HubError):
            raise exc
        if isinstance(exc, errors.OfflineModeIsEnabled):
            raise self._offline_error(what) from exc
        if isinstance(exc, errors.GatedRepoError):
            raise HubError(
                HubErrorKind.GATED,
                f"{what}: the repository is gated. Accept its conditions on its hub page, then give an "
                f"access token ({self.token_hint}) of the account that was granted access.",
            ) from exc
        if isinstance(exc, errors.RepositoryNotFoundError):
            raise HubError(
                HubErrorKind.NOT_FOUND,
                f"{what}: repository not found. Check the name; if it is private, give an access token "
                f"({self.token_hint}).",
            ) from exc
        if isinstance(exc, errors.RevisionNotFoundError):
            raise HubError(HubErrorKind.NOT_FOUND, f"{what}: that revision does not exist.") from exc
        if isinstance(exc, errors.EntryNotFoundError | errors.RemoteEntryNotFoundError):
            raise HubError(HubErrorKind.NOT_FOUND, f"{what}: no such file in the repository.") from exc
        if isinstance(exc, errors.HfHubHTTPError):
            status = exc.response.status_code if exc.response is not None else None
            if status in (401, 403):
                # The hub's own reason where it gives one, and advice for the token there is or is not (a tour's
                # wrong token read "missing, invalid, or lacks permission" where the hub said which).
                said = exc.response.headers.get("X-Error-Message") if exc.response is not None else None
                advice = (
                    f"Check the access token ({self.token_hint}): mistyped, expired, or without access to this "
                    "repository."
                    if self.token
                    else f"It needs an access token ({self.token_hint}) of an account with access."
                )
                raise HubError(
                    HubErrorKind.UNAUTHORIZED,
                    f"{what}: the hub refused access ({status}{': ' + said if said else ''}). {advice}",
                ) from exc
            raise HubError(HubErrorKind.HTTP, f"{what}: the hub answered with an error ({status}).") from exc
        if isinstance(exc, httpx2.TransportError | ConnectionError | TimeoutError):
            raise HubError(
                HubErrorKind.NETWORK,
                f"{what}: cannot reach {self.endpoint} ({exc.__class__.__name__}). Check the network "
                "connection or proxy, or work offline with the models you have.",
            ) from exc
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise self._disk_full(what, paths.models_dir()) from exc
        raise exc

    def _offline_error(self, what: str) -> HubError:
        return HubError(
            HubErrorKind.OFFLINE,
            f"{what}: offline mode is on ({self._offline_by}), so the hub is not contacted. The models already in "
            "the library still work.",
        )

    @staticmethod
    def _disk_full(what: str, folder: Path, needed: int | None = None) -> HubError:
        need = f" {needed / 1e9:.2f} GB more are needed" if needed else ""
        return HubError(
            HubErrorKind.DISK_FULL,
            f"{what}: the disk holding {folder} is full.{need} Free some space and run the download again; "
            "it resumes where it stopped.",
        )

    def _check_online(self, what: str) -> None:
        """Refuse in offline mode, and find out fast when the hub cannot be reached at all.

        huggingface_hub retries network errors with back-off for about 20 s; one quick request first
        turns "no network" into an immediate, clear error (a success is remembered for a minute).
        """
        if self.offline:
            raise self._offline_error(what)
        if time.monotonic() < self._reachable_until:
            return
        from huggingface_hub.utils import get_session

        try:
            get_session().head(self.endpoint, timeout=10, follow_redirects=False)
        except Exception as exc:  # classified by _fail: network, offline, ...
            self._fail(exc, what)
        self._reachable_until = time.monotonic() + REACHABILITY_TTL_S

    def _api(self) -> Any:
        from huggingface_hub import HfApi

        return HfApi(endpoint=self.endpoint, token=self.token)

    # ---- search and listing ----------------------------------------------------------------------------

    def search(self, text: str, *, limit: int = 30) -> list[HubRepo]:
        """GGUF repositories matching ``text``, most downloaded first.

        Raises:
            HubError: offline, no network, or the hub refused.
        """
        what = f"searching the hub for {text!r}"
        self._check_online(what)
        try:
            models = list(self._api().list_models(search=text, filter="gguf", sort="downloads", limit=limit))
        except Exception as exc:
            self._fail(exc, what)
        return [
            HubRepo(
                repo_id=m.id,
                downloads=m.downloads,
                likes=m.likes,
                gated=m.gated if m.gated is not None else False,
                last_modified=m.last_modified.isoformat() if m.last_modified else None,
                tags=tuple(m.tags or ()),
            )
            for m in models
        ]

    def list_files(self, repo_id: str, *, revision: str | None = None) -> list[HubFile]:
        """The GGUF models in a repository, with size and quantization label.

        Raises:
            HubError: not found, unauthorized/gated, offline, or no network.
        """
        from huggingface_hub.hf_api import RepoFile

        what = f"listing {repo_id}"
        self._check_online(what)
        try:
            tree = list(self._api().list_repo_tree(repo_id, recursive=True, revision=revision))
        except Exception as exc:
            self._fail(exc, what)
        files = [
            (f.path, int(f.size), f.lfs.sha256 if f.lfs is not None else None)
            for f in tree
            if isinstance(f, RepoFile)
        ]
        return group_gguf_files(repo_id, files)

    # ---- download --------------------------------------------------------------------------------------

    def download(
        self,
        repo_id: str,
        filename: str,
        *,
        revision: str | None = None,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
        folder: Path | None = None,
        register: bool = True,
    ) -> DownloadResult:
        """Download a GGUF model (every part of a split one), verify it, and register it in the library.

        Safe to call from a worker thread; ``cancel.set()`` from any thread stops it within one chunk.

        Args:
            repo_id: the repository.
            filename: the file (any part of a split model downloads all parts).
            revision: branch, tag or commit (default ``main``).
            progress: called about ten times a second with a :class:`DownloadProgress`.
            cancel: set it to stop; the partial file stays and the next call resumes it.
            folder: where to put the file (default: ``models/hub/<owner>__<name>/``).
            register: add the finished file to the library.

        Returns:
            Where the model is, its checksums, the commit, and its library entry.

        Raises:
            DownloadCancelled: ``cancel`` was set.
            HubError: not found, unauthorized/gated, offline, no network, disk full, checksum mismatch.
        """
        what = f"downloading {filename} from {repo_id}"
        self._check_online(what)
        names = self._part_names(filename)
        metas = [self._metadata(repo_id, name, revision, what) for name in names]
        target_dir = folder or hub_folder(repo_id)
        created = not target_dir.exists()
        try:
            target_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._fail(exc, what)
        try:
            total = sum(m["size"] for m in metas)
            dests = [target_dir / Path(name).name for name in names]
            # Everything not yet on disk must fit, or the download would fail half-way.
            have = sum(_part_size(d, m) for d, m in zip(dests, metas, strict=True))
            free = shutil.disk_usage(target_dir).free
            if total - have > free:
                raise self._disk_full(what, target_dir, total - have - free)
            meter = _Meter(progress, total, 0)
            digests: dict[str, str] = {}
            for name, dest, meta in zip(names, dests, metas, strict=True):
                meter.filename = name
                digests[name] = self._download_one(repo_id, name, revision, dest, meta, meter, cancel, what)
            meter.report("done")
            commit = metas[0]["commit"]
            entry = None
            if register:
                library = self.library or Library()
                single = digests[names[0]] if len(names) == 1 else None
                entry = library.add(
                    dests[0],
                    source=ModelSource(
                        SourceKind.HUB, repo=repo_id, revision=commit or revision, filename=names[0]
                    ),
                    sha256=single,
                )
            return DownloadResult(dests[0], digests, commit, entry)
        except BaseException:
            if created:  # a folder made for a download that left nothing in it goes too (a tour's checksum failure)
                with contextlib.suppress(OSError):
                    target_dir.rmdir()  # only if empty: a partial download kept to resume stays
            raise

    @staticmethod
    def _part_names(filename: str) -> list[str]:
        m = SPLIT_RE.match(Path(filename).name)
        if not m:
            return [filename]
        count = int(m.group("count"))
        width = len(m.group("no"))
        folder = filename[: len(filename) - len(Path(filename).name)]
        return [
            f"{folder}{m.group('stem')}-{i:0{width}d}-of-{count:0{width}d}.gguf" for i in range(1, count + 1)
        ]

    def _metadata(self, repo_id: str, filename: str, revision: str | None, what: str) -> dict[str, Any]:
        """Size, commit and expected checksum of one file, from a HEAD on its resolve URL."""
        from huggingface_hub import get_hf_file_metadata, hf_hub_url

        url = hf_hub_url(repo_id, filename, revision=revision, endpoint=self.endpoint)
        try:
            meta = get_hf_file_metadata(url, token=self.token, endpoint=self.endpoint)
        except Exception as exc:
            self._fail(exc, what)
        if meta.size is None:
            raise HubError(HubErrorKind.HTTP, f"{what}: the hub did not say how large the file is.")
        etag = (meta.etag or "").lower()
        sha256 = etag if _SHA256_RE.match(etag) else None
        git_sha1 = etag if sha256 is None and _GIT_SHA1_RE.match(etag) else None
        if sha256 is None and git_sha1 is None:
            raise HubError(
                HubErrorKind.CHECKSUM,
                f"{what}: the hub gave no checksum for the file, so it cannot be verified; not downloading.",
            )
        return {
            "url": url,
            "size": int(meta.size),
            "commit": meta.commit_hash,
            "sha256": sha256,
            "git_sha1": git_sha1,
        }

    def _download_one(
        self,
        repo_id: str,
        filename: str,
        revision: str | None,
        dest: Path,
        meta: dict[str, Any],
        meter: _Meter,
        cancel: threading.Event | None,
        what: str,
    ) -> str:
        part = dest.with_name(dest.name + ".part")
        state = dest.with_name(dest.name + ".part.json")
        version = {
            "repo": repo_id,
            "file": filename,
            "size": meta["size"],
            "sha256": meta["sha256"],
            "git_sha1": meta["git_sha1"],
        }
        if dest.is_file() and dest.stat().st_size == meta["size"] and not part.exists():
            # Already downloaded earlier: verify it rather than fetch it again. Its bytes are done, not fetched now:
            # counted as a transfer, a tour's finished download, resumed, read "12.9 TB/s".
            meter.reset(meter.done + meta["size"])
            return self._verify(dest, meta, meter, what)
        if part.exists() and _read_json(state) != version:
            part.unlink()  # a partial file of another version of this file cannot be resumed
        try:
            state.write_text(json.dumps(version), encoding="utf-8")
        except OSError as exc:
            self._fail(exc, what)
        attempts = 0
        base = meter.done  # bytes of the earlier parts
        while True:
            try:
                self._transfer(meta, part, meter, base, cancel)
                break
            except DownloadCancelled:
                raise
            except Exception as exc:
                import httpx2

                if isinstance(exc, httpx2.TransportError) and attempts < self.retries:
                    attempts += 1
                    time.sleep(min(0.5 * attempts, 4.0))
                    continue
                self._fail(exc, what)
        digest = self._verify(part, meta, meter, what)
        os.replace(part, dest)
        state.unlink(missing_ok=True)
        return digest

    def _transfer(
        self, meta: dict[str, Any], part: Path, meter: _Meter, base: int, cancel: threading.Event | None
    ) -> None:
        """Append the missing bytes of one file to ``part`` (one HTTP request)."""
        from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, http_stream_backoff

        size = meta["size"]
        have = part.stat().st_size if part.exists() else 0
        if have > size:
            part.unlink()
            have = 0
        meter.reset(base + have)
        if have == size:
            return
        if have:  # said before the first new byte: where a resumed download goes on from (the bar, the CLI's line)
            meter.report("downloading", resumed=True)
        headers = build_hf_headers(token=self.token)
        headers["Accept-Encoding"] = "identity"
        if have:
            headers["Range"] = f"bytes={have}-"
        with http_stream_backoff(
            "GET",
            meta["url"],
            headers=headers,
            timeout=30,
            follow_redirects=True,
            max_retries=2,
            base_wait_time=0.5,
            retry_on_exceptions=(),
            retry_on_status_codes=(429, 502, 503, 504),
        ) as response:
            hf_raise_for_status(response)
            if have and response.status_code != 206:
                have = 0  # the server ignored the range: start over rather than corrupt the file
                meter.reset(base)
            elif have:
                start = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
                if start is None or int(start.group(1)) != have:
                    raise HubError(
                        HubErrorKind.HTTP, "the hub answered a resume request with the wrong range"
                    )
            with part.open("r+b" if have else "wb") as out:
                out.seek(have)
                out.truncate()
                for chunk in response.iter_bytes(CHUNK_SIZE):
                    if cancel is not None and cancel.is_set():
                        raise DownloadCancelled()
                    out.write(chunk)
                    meter.add(len(chunk))
        got = part.stat().st_size
        if got != size:
            import httpx2

            raise httpx2.RemoteProtocolError(f"the connection closed after {got} of {size} bytes")

    def _verify(self, file: Path, meta: dict[str, Any], meter: _Meter, what: str) -> str:
        """Hash ``file`` and compare it with the hub's checksum.

        Returns:
            The SHA-256. On a mismatch the file is deleted and :class:`HubError` raised.
        """
        meter.report("verifying")
        sha256 = hashlib.sha256()
        sha1 = hashlib.sha1(f"blob {meta['size']}\0".encode(), usedforsecurity=False)
        with file.open("rb") as f:
            for block in _blocks(f):
                sha256.update(block)
                if meta["git_sha1"]:
                    sha1.update(block)
        digest = sha256.hexdigest()
        ok = digest == meta["sha256"] if meta["sha256"] else sha1.hexdigest() == meta["git_sha1"]
        if not ok:
            file.unlink(missing_ok=True)
            file.with_name(file.name.removesuffix(".part") + ".part.json").unlink(missing_ok=True)
            expected = meta["sha256"] or meta["git_sha1"]
            raise HubError(
                HubErrorKind.CHECKSUM,
                f"{what}: checksum mismatch (got {digest[:16]}…, the hub says {expected[:16]}…). The damaged "
                "file was deleted; run the download again.",
            )
        return digest


def _blocks(f: Any) -> Iterator[bytes]:
    while block := f.read(8 << 20):
        yield block


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _part_size(dest: Path, meta: dict[str, Any]) -> int:
    part = dest.with_name(dest.name + ".part")
    if dest.is_file() and dest.stat().st_size == meta["size"]:
        return int(meta["size"])
    return part.stat().st_size if part.is_file() else 0
