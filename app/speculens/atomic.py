"""Atomic file writes: a temporary file in the same folder, flushed to disk, then ``os.replace``.

A crash or a full disk mid-write leaves the old file (or none), never half a file. Every file Speculens
writes goes through here.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def write_atomic(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write ``path`` atomically with ``write(file)``, which gets a binary file open for writing.

    Raises:
        OSError: the folder cannot be created or written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    write_atomic(path, lambda f: f.write(data))


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as indented UTF-8 JSON to ``path`` atomically."""
    write_bytes_atomic(path, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
