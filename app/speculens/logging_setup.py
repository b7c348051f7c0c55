"""Logging for the desktop application: a rotating log file that survives crashes and windowed builds.

A frozen, windowed build (PyInstaller ``console=False``, ``pythonw.exe``) has no console: ``sys.stdout`` and
``sys.stderr`` are ``None`` there, and a stray ``print`` or a traceback would vanish or raise. So
:func:`setup_logging` sends both streams into the log, logs every uncaught exception (main thread, other
threads, Qt slots — PySide routes those through ``sys.excepthook``) with its traceback, and points
:mod:`faulthandler` at a file so a native crash inside llama.cpp or Qt still leaves a Python stack behind.
The log goes to :func:`speculens.paths.log_dir` (platformdirs, or ``SPECULENS_HOME``).
"""

from __future__ import annotations

import faulthandler
import io
import logging
import logging.handlers
import os
import platform
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from speculens import __version__, paths

LOG_FILE = "speculens.log"
CRASH_FILE = "crash.log"
MAX_BYTES = 2 * 1024 * 1024
BACKUPS = 3
FORMAT = "%(asctime)s %(levelname)-7s %(threadName)s %(name)s: %(message)s"

log = logging.getLogger("speculens")
_state: dict[str, Any] = {"handler": None, "crash_file": None, "console": True}


class _LogStream(io.TextIOBase):
    """A write-only text stream that turns whole lines into log records (stands in for a missing console).

    Args:
        logger: where the lines go.
        level: their level.
    """

    def __init__(self, logger: logging.Logger, level: int) -> None:
        super().__init__()
        self._logger = logger
        self._level = level
        self._partial = ""
        self._lock = threading.Lock()

    def writable(self) -> bool:
        """Always writable.

        Returns:
            True.
        """
        return True

    def write(self, text: str) -> int:
        """Buffer text and log each completed line.

        Args:
            text: what was printed.

        Returns:
            The number of characters taken.
        """
        with self._lock:
            lines = (self._partial + text).split("\n")
            self._partial = lines.pop()
        for line in lines:
            if line.strip():
                self._logger.log(self._level, "%s", line.rstrip())
        return len(text)

    def flush(self) -> None:
        """Log a pending partial line."""
        with self._lock:
            pending, self._partial = self._partial, ""
        if pending.strip():
            self._logger.log(self._level, "%s", pending.rstrip())


def _log_exception(
    exc_type: type[BaseException], exc: BaseException | None, tb: TracebackType | None, where: str
) -> None:
    log.critical("Uncaught exception in %s", where, exc_info=(exc_type, exc or exc_type(), tb))
    for handler in logging.getLogger().handlers:
        handler.flush()


def _excepthook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    _log_exception(exc_type, exc, tb, "the main thread")
    if _state["console"]:  # with a console, the user also sees it where they started the app
        sys.__excepthook__(exc_type, exc, tb)


def _thread_excepthook(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "an unknown thread"
    _log_exception(args.exc_type, args.exc_value, args.exc_traceback, f"thread {name}")
    if _state["console"]:
        threading.__excepthook__(args)


def log_file() -> Path:
    """Where the current log file is (whether or not it exists yet).

    Returns:
        ``<log_dir>/speculens.log``.
    """
    return paths.log_dir() / LOG_FILE


def setup_logging(level: int | None = None) -> Path:
    """Send the application's logging to a rotating file and make crashes leave a readable trace.

    Safe to call more than once (the file handler is replaced, not added twice). Creates the log folder.
    llama.cpp's own informational output (about 150 lines per model load) is kept only at DEBUG level.

    Args:
        level: the root logger's level; default: ``SPECULENS_LOG_LEVEL`` (a name such as ``DEBUG``) or INFO.
            The variable exists for frozen builds, where there is no command line to pass a flag on.

    Returns:
        The log file's path.
    """
    path = log_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    if _state["handler"] is not None:
        root.removeHandler(_state["handler"])
        _state["handler"].close()
    handler = logging.handlers.RotatingFileHandler(
        path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8"
    )
    handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)
    if level is None:
        name = os.environ.get("SPECULENS_LOG_LEVEL", "").upper()
        level = logging.getLevelNamesMapping().get(name, logging.INFO)
    root.setLevel(level)
    llama_level = logging.NOTSET if level <= logging.DEBUG else logging.WARNING
    logging.getLogger("speculens.llama_cpp").setLevel(llama_level)
    _state["handler"] = handler

    _state["console"] = sys.stderr is not None and not isinstance(sys.stderr, _LogStream)
    if sys.stdout is None:
        sys.stdout = _LogStream(logging.getLogger("speculens.stdout"), logging.INFO)
    if sys.stderr is None:
        sys.stderr = _LogStream(logging.getLogger("speculens.stderr"), logging.WARNING)
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook
    _enable_faulthandler(path.parent / CRASH_FILE)

    log.info(
        "Speculens %s starting: Python %s on %s (%s)",
        __version__,
        platform.python_version(),
        platform.platform(),
        "frozen" if getattr(sys, "frozen", False) else "from source",
    )
    log.info("Backend: %s", backend_description())
    return path


def _enable_faulthandler(path: Path) -> None:
    """Dump Python stacks to ``path`` on a fatal signal (segfault in native code, abort)."""
    if _state["crash_file"] is None:
        # Kept open for the life of the process: faulthandler writes to its file descriptor from a signal
        # handler, where nothing can be opened. Appending keeps the trace of an earlier crash.
        crash_file: IO[str] = path.open("a", encoding="utf-8")
        _state["crash_file"] = crash_file
    faulthandler.enable(file=_state["crash_file"], all_threads=True)


def backend_description() -> str:
    """Which llama.cpp the application runs on, for the About box and the log.

    Returns:
        For example ``"llama.cpp CPU build (llama-cpp-python 0.3.36)"`` or ``"llama.cpp with CUDA offload
        (llama-cpp-python 0.3.36)"``; a sentence saying why when llama.cpp cannot be loaded at all.
    """
    version = _llama_cpp_python_version()
    suffix = f" (llama-cpp-python {version})" if version else ""
    try:
        from speculens.engine.backend import gpu_backend_name
    except (ImportError, OSError) as exc:  # the native library is missing or built for another CPU/OS
        return f"llama.cpp could not be loaded: {exc}"
    gpu = gpu_backend_name()
    return f"llama.cpp with {gpu} offload{suffix}" if gpu else f"llama.cpp CPU build{suffix}"


def _llama_cpp_python_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:  # a frozen build made without its metadata
        return None
