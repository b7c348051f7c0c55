"""A small Hugging Face hub look-alike on 127.0.0.1 for the hub tests.

It answers the requests huggingface_hub really makes (read from huggingface_hub 2.4's ``HfApi.list_models``,
``HfApi.list_repo_tree``, ``get_hf_file_metadata`` and the ranged ``GET`` of a resolve URL):

- ``GET /api/models?search=&filter=&sort=&limit=``: model search, a JSON list.
- ``GET /api/models/{owner}/{name}/tree/{revision}``: the file listing, with ``lfs.oid`` (SHA-256).
- ``HEAD|GET /{owner}/{name}/resolve/{revision}/{path}``: ``ETag``, ``X-Linked-Etag`` (the SHA-256 of an LFS
  file), ``X-Linked-Size``, ``X-Repo-Commit``, ``Content-Length``, ``Accept-Ranges``; ``Range`` gets a 206.
- Errors as the hub sends them: 404 with ``X-Error-Code: RepoNotFound`` / ``EntryNotFound``, 401 with
  ``X-Error-Code: GatedRepo`` for a gated repository without a token, 401 with ``X-Error-Message: Invalid
  credentials in Authorization header`` for a wrong token.

Faults are injected per file: ``cut_once`` closes the connection after N body bytes on the next GET,
``corrupt`` serves bytes that do not match the advertised SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass
class FakeRepo:
    """One repository on the fake hub.

    Attributes:
        repo_id: ``owner/name``.
        files: file path -> contents.
        gated: a token from ``FakeHub.tokens`` is needed.
        commit: the commit id reported in ``X-Repo-Commit``.
        downloads: reported download count.
        tags: reported tags (``gguf`` makes it a GGUF repository).
    """

    repo_id: str
    files: dict[str, bytes]
    gated: bool = False
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    downloads: int = 0
    tags: list[str] = field(default_factory=lambda: ["gguf"])


def git_blob_sha1(data: bytes) -> str:
    """Git's object id of a blob (what the hub reports as ``oid`` of a non-LFS file)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


class FakeHub:
    """The server's state: repositories, valid tokens, injected faults and a request log.

    Attributes:
        repos: repositories by id.
        tokens: tokens that grant access to gated repositories.
        cut_once: file path -> bytes after which the next GET of it is cut off.
        corrupt: file paths served damaged (the advertised SHA-256 is the original's).
        requests: (method, path, headers) of every request, for assertions.
    """

    def __init__(self) -> None:
        self.repos: dict[str, FakeRepo] = {}
        self.tokens: set[str] = set()
        self.cut_once: dict[str, int] = {}
        self.corrupt: set[str] = set()
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.lock = threading.Lock()
        self.url = ""

    def add(self, repo: FakeRepo) -> FakeRepo:
        """Publish a repository."""
        self.repos[repo.repo_id] = repo
        return repo

    def ranges(self, filename: str) -> list[str | None]:
        """The ``Range`` headers of the GETs of one file, in order."""
        return [
            h.get("range")
            for m, p, h in self.requests
            if m == "GET" and "/resolve/" in p and p.endswith(filename)
        ]


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$")


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    # ---- helpers -----------------------------------------------------------------------------------------

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, data: Any, status: int = 200) -> None:
        self._send(status, json.dumps(data).encode(), {"Content-Type": "application/json"})

    def _error(self, status: int, code: str | None, message: str) -> None:
        headers = {"X-Error-Message": message, "Content-Type": "application/json"}
        if code:
            headers["X-Error-Code"] = code
        self._send(status, json.dumps({"error": message}).encode(), headers)

    def _repo(self, repo_id: str) -> FakeRepo | None:
        """The repository, or None after sending the error the hub would send."""
        repo = self.hub.repos.get(repo_id)
        auth = self.headers.get("Authorization")
        token = auth.removeprefix("Bearer ").strip() if auth else None
        if token is not None and token not in self.hub.tokens:
            self._error(401, None, "Invalid credentials in Authorization header")
            return None
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        if repo.gated and token is None:
            self._error(
                401,
                "GatedRepo",
                f"Access to model {repo_id} is restricted. You must be authenticated to access it.",
            )
            return None
        return repo

    # ---- routes ------------------------------------------------------------------------------------------

    def _route(self) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        with self.hub.lock:
            self.hub.requests.append((self.command, path, {k.lower(): v for k, v in self.headers.items()}))
        if path in ("", "/"):
            self._send(200, b"fake hub")
            return
        if path == "/api/models" and self.command == "GET":
            self._search(parse_qs(url.query))
            return
        m = _TREE.match(path)
        if m and self.command == "GET":
            self._tree(m.group("repo"), m.group("path") or "")
            return
        m = _RESOLVE.match(path)
        if m and self.command in ("GET", "HEAD"):
            self._resolve(m.group("repo"), m.group("path"))
            return
        self._error(404, None, "Not found")

    def _search(self, query: dict[str, list[str]]) -> None:
        text = (query.get("search") or [""])[0].lower()
        tags = query.get("filter") or []
        limit = int((query.get("limit") or ["1000"])[0])
        hits = [
            r for r in self.hub.repos.values() if text in r.repo_id.lower() and all(t in r.tags for t in tags)
        ]
        hits.sort(key=lambda r: -r.downloads)
        self._json(
            [
                {
                    "_id": r.repo_id,
                    "id": r.repo_id,
                    "downloads": r.downloads,
                    "likes": 1,
                    "gated": "auto" if r.gated else False,
                    "private": False,
                    "lastModified": "2025-01-02T03:04:05.000Z",
                    "tags": r.tags,
                }
                for r in hits[:limit]
            ]
        )

    def _tree(self, repo_id: str, prefix: str) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        entries = []
        for name, data in sorted(repo.files.items()):
            if prefix and not name.startswith(prefix.rstrip("/") + "/"):
                continue
            entry: dict[str, Any] = {
                "type": "file",
                "oid": git_blob_sha1(data),
                "size": len(data),
                "path": name,
            }
            if name.endswith(".gguf"):
                entry["lfs"] = {
                    "oid": hashlib.sha256(data).hexdigest(),
                    "size": len(data),
                    "pointerSize": 134,
                }
            entries.append(entry)
        self._json(entries)

    def _resolve(self, repo_id: str, name: str) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        data = repo.files.get(name)
        if data is None:
            self._error(404, "EntryNotFound", f"{name} does not exist on main")
            return
        lfs = name.endswith(".gguf")
        etag = hashlib.sha256(data).hexdigest() if lfs else git_blob_sha1(data)
        headers = {
            "ETag": f'"{etag}"',
            "X-Repo-Commit": repo.commit,
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if lfs:
            headers["X-Linked-Etag"] = f'"{etag}"'
            headers["X-Linked-Size"] = str(len(data))
        if self.command == "GET" and name in self.hub.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start = 0
        status = 200
        m = re.match(r"bytes=(\d+)-$", self.headers.get("Range", ""))
        if m and self.command == "GET":
            start = int(m.group(1))
            if start >= len(data):
                self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
                return
            status = 206
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        cut = self.hub.cut_once.pop(name, None) if self.command == "GET" else None
        if cut is None:
            self._send(status, body, headers)
            return
        # Promise the whole body, send part of it, and drop the connection: a network failure mid-download.
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[:cut])
        self.wfile.flush()
        self.close_connection = True

    def do_GET(self) -> None:
        self._route()

    def do_HEAD(self) -> None:
        self._route()


class _QuietServer(ThreadingHTTPServer):
    """Clients that cancel a download drop the connection: that is expected, not worth a traceback."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeHubServer:
    """The server running in a thread; use as a context manager.

    Args:
        hub: the state to serve.
    """

    def __init__(self, hub: FakeHub) -> None:
        handler = type("Handler", (_Handler,), {"hub": hub})
        self.httpd = _QuietServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.hub = hub
        hub.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-hub", daemon=True
        )

    def __enter__(self) -> FakeHubServer:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
