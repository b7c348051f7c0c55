"""The installation self-test behind ``speculens --self-test``.

It proves, on the machine at hand and without downloading anything, that a build works end to end: the
bundled llama.cpp loads a tiny generated model pair, speculative decoding with a draft model gives exactly
the plain greedy output, the packaged icons are readable, and the Qt front end starts (off screen when
there is no display). Release CI runs it on every frozen bundle; a user can run it to tell "my install is
broken" from "my model is broken".
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PROMPT = "the draft model proposes tokens and the target"
MAX_TOKENS = 24
ICON_FILES = ("speculens.svg", "png/speculens-256.png")


def run_self_test(log: Callable[[str], None] = print) -> int:
    """Run the engine check, then the GUI check, reporting each step through ``log``.

    Args:
        log: receives one human-readable line per step (``print`` by default; the GUI passes its logger).

    Returns:
        The exit status: 0 when every check passed, 1 otherwise.
    """
    from speculens import __version__
    from speculens.logging_setup import backend_description

    log(
        f"Speculens {__version__} self-test ({'frozen' if getattr(sys, 'frozen', False) else 'source'} build)"
    )
    log(f"backend: {backend_description()}")
    failures: list[str] = []
    checks = (("engine", _check_engine), ("resources", _check_resources), ("gui", _check_gui))
    for name, check in checks:
        try:
            problem = check(log)
        except Exception as exc:  # a self-test reports every failure instead of stopping at the first
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            failures.append(f"{name}: {problem}")
            log(f"FAIL {name}: {problem}")
        else:
            log(f"ok   {name}")
    log("self-test passed" if not failures else f"self-test FAILED ({len(failures)} of {len(checks)} checks)")
    return 1 if failures else 0


def _check_engine(log: Callable[[str], None]) -> str | None:
    """Speculative greedy decoding on a tiny identical pair must equal plain decoding.

    Returns:
        ``None`` on success, else what went wrong.
    """
    from speculens.engine.config import GenerationConfig, ModelConfig, Strategy
    from speculens.engine.events import FinishEvent
    from speculens.engine.sampling import SamplingParams
    from speculens.engine.session import SpeculativeEngine
    from speculens.models.synthetic import write_tiny_pair

    with tempfile.TemporaryDirectory(prefix="speculens-selftest-") as tmp:
        target, draft = write_tiny_pair(Path(tmp), "identical")
        started = time.perf_counter()
        # One thread: the models are tiny, and llama.cpp's spinning worker threads make a run on a busy
        # machine (a CI runner) take seconds instead of milliseconds.
        engine = SpeculativeEngine(ModelConfig(target=target, draft=draft, n_ctx=256, n_threads=1))
        try:
            log(f"loaded {target.name} + {draft.name} in {1000 * (time.perf_counter() - started):.0f} ms")
            results: dict[Strategy, FinishEvent] = {}
            for strategy in (Strategy.DRAFT, Strategy.NONE):
                config = GenerationConfig(
                    strategy=strategy,
                    n_draft=4,
                    # Fixed drafts: the adaptive controller rightly declines a draft as slow as its target.
                    adaptive=False,
                    max_tokens=MAX_TOKENS,
                    sampling=SamplingParams(temperature=0.0),
                )
                finish = [e for e in engine.generate(PROMPT, config) if isinstance(e, FinishEvent)]
                if not finish:
                    return f"the {strategy} generation ended without a finish event"
                results[strategy] = finish[0]
        finally:
            engine.close()
    spec, plain = results[Strategy.DRAFT], results[Strategy.NONE]
    log(
        f"speculative: {spec.stats.passes_text}, "
        f"acceptance {spec.stats.acceptance:.0%}; plain: {len(plain.tokens)} tokens"
    )
    if not plain.tokens:
        return "plain decoding produced no tokens"
    if spec.tokens != plain.tokens:
        return f"speculative output differs from plain decoding: {spec.tokens} != {plain.tokens}"
    if spec.stats.n_accepted == 0:
        return "an identical draft had no token accepted: verification is broken"
    return None


def _check_resources(log: Callable[[str], None]) -> str | None:
    """The icons must be readable through importlib.resources, as the GUI reads them (wheel or bundle).

    Returns:
        ``None`` on success, else what went wrong.
    """
    from importlib.resources import files

    icons = files("speculens.icons")
    missing = [name for name in ICON_FILES if not icons.joinpath(name).is_file()]
    if missing:
        return f"missing from speculens.icons: {', '.join(missing)}"
    log(f"icons: {icons}")
    return None


def _check_gui(log: Callable[[str], None]) -> str | None:
    """Start Qt and build the main window, off screen unless a platform was chosen.

    Returns:
        ``None`` on success, else what went wrong.
    """
    # A self-test must not flash a window on a desktop, and CI machines have no display at all.
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "speculens"])
    if not isinstance(app, QApplication):  # widgets on a QGuiApplication abort the process
        return f"a {type(app).__name__} is running; widgets need a QApplication"
    log(f"Qt platform: {QApplication.platformName()}")
    if not _module_exists("speculens.ui.main_window"):
        log("speculens.ui.main_window is not part of this build: only Qt itself was checked")
        return None
    from speculens.ui.app import collect_garbage_on_the_gui_thread

    collect_garbage_on_the_gui_thread()  # as the app does: a build must carry pyqtgraph's collector too
    module = importlib.import_module("speculens.ui.main_window")
    window = module.MainWindow()
    window.show()
    app.processEvents()
    shown = window.isVisible()
    log(f"main window: {window.windowTitle()!r}, {window.width()}x{window.height()}")
    window.close()
    window.deleteLater()
    app.processEvents()
    return None if shown else "the main window did not show"


def _module_exists(name: str) -> bool:
    """Whether a module is part of this build, without importing it (its parent packages are imported).

    Args:
        name: the dotted module name.

    Returns:
        True when it can be imported.
    """
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError as exc:  # a parent package is missing
        if exc.name is not None and name.startswith(exc.name):
            return False
        raise
