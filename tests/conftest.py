"""Shared fixtures: tiny generated GGUF models and an isolated Speculens home per test; the Qt guard.

Every test that drives Qt carries the ``gui`` marker, and ``-m "not gui"`` runs without Qt: when the
pytest-qt plugin is not active (not installed, or ``-p no:pytest-qt``), Qt's modules cannot be imported at all
(a test that needs Qt without saying so fails loudly instead of passing by accident), the ``test_ui_*``
modules are not collected, and pytest-qt's settings and markers are declared here so ``--strict-config``
still holds. CI runs the suite that way once, to prove it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from speculens.models.synthetic import TinyModelSpec, write_tiny_model, write_tiny_pair

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

QT_PACKAGES = frozenset({"PySide6", "shiboken6", "pyqtgraph", "pytestqt"})
QT_FIXTURES = frozenset({"qtbot", "qapp", "qtlog", "qtmodeltester"})
GUI_MODULES = "test_ui_*.py"
QT_PLUGIN = "pytest-qt"  # its entry-point name: "-p no:pytest-qt" switches it off


class _QtBlocker(importlib.abc.MetaPathFinder):
    """Refuses every Qt import (installed when pytest-qt is not active)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in QT_PACKAGES:
            raise ImportError(f"{fullname}: Qt is not available in this run; a test that needs it is marked gui")
        return None


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    if pluginmanager.has_plugin(QT_PLUGIN):
        return
    # pytest-qt's ini settings, so pyproject.toml's [tool.pytest.ini_options] passes --strict-config.
    for name in ("qt_api", "qt_log_level_fail", "qt_no_exception_capture"):
        parser.addini(name, "pytest-qt setting (pytest-qt is not active)")
    parser.addini("qt_log_ignore", "pytest-qt setting (pytest-qt is not active)", type="linelist")


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.has_plugin(QT_PLUGIN):
        return
    config.addinivalue_line("markers", "qt_log_ignore: pytest-qt marker (pytest-qt is not active)")
    sys.meta_path.insert(0, _QtBlocker())


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if not config.pluginmanager.has_plugin(QT_PLUGIN) and collection_path.match(GUI_MODULES):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every Qt test must say so: a test in a ``test_ui_*`` module or using a Qt fixture needs ``gui``."""
    unmarked = [
        item.nodeid
        for item in items
        if item.get_closest_marker("gui") is None
        and (Path(str(item.path)).match(GUI_MODULES) or QT_FIXTURES & set(getattr(item, "fixturenames", ())))
    ]
    if unmarked:
        raise pytest.UsageError("Qt tests without the gui marker: " + ", ".join(unmarked))


@dataclass(frozen=True)
class TinyModels:
    """Paths of the tiny model family.

    Attributes:
        target: the target.
        identical: a draft with the target's weights (acceptance 1 in greedy mode).
        perturbed: a noisy copy of the target (partial acceptance).
        mismatch: a draft with a shuffled vocabulary (refused for draft-model speculation).
        folder: where they live.
    """

    target: Path
    identical: Path
    perturbed: Path
    mismatch: Path
    folder: Path


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    """The tiny models, written once per test session."""
    folder = tmp_path_factory.mktemp("tiny-models")
    target, identical = write_tiny_pair(folder, "identical")
    _, perturbed = write_tiny_pair(folder, "perturbed")
    _, mismatch = write_tiny_pair(folder, "mismatch")
    return TinyModels(target, identical, perturbed, mismatch, folder)


@pytest.fixture()
def tiny_model_factory(tmp_path: Path):
    """Write a custom tiny model: ``factory(name, **spec_fields) -> Path``."""

    def make(name: str, **fields: object) -> Path:
        return write_tiny_model(tmp_path / f"{name}.gguf", TinyModelSpec(**fields))  # type: ignore[arg-type]

    return make


@pytest.fixture(autouse=True)
def speculens_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own empty Speculens home, so nothing touches the user's real files."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("SPECULENS_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def two_cpus_for_crowding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether other programs crowded llama.cpp's threads depends on the machine's CPUs (threads.crowded): the tests'
    shares are judged as on two, this project's VM, wherever they run (on 20 CPUs a share of 0.6 fits beside 8
    threads)."""
    from speculens.engine import threads

    monkeypatch.setattr(threads, "_cpus", lambda: 2)


def cheap_verification(monkeypatch: pytest.MonkeyPatch) -> None:
    """Price verifying a batch of n tokens at 1 + 0.1·(n − 1) single steps of this machine, whatever its kernels
    make of the tiny models. A test of the adaptive controller's output then sees it draft because its costs say
    drafting pays, on every runner: on the real timings a CI runner's controller rightly drafted nothing within
    24 tokens, and what the test was about went untested (exact mode's batch sizes differ by CPU, too)."""
    import numpy as np

    from speculens.engine.adaptive import BatchCosts

    def curve(self: BatchCosts, n_max: int) -> np.ndarray | None:
        if not self._single.count:
            return None
        ratio = 1.0 + 0.1 * np.arange(-1, n_max, dtype=float)
        ratio[0] = 0.0
        return self._single.at(self._context) * ratio

    monkeypatch.setattr(BatchCosts, "curve", curve)


@pytest.fixture(autouse=True)
def no_flash_probe(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Flash attention left to llama.cpp, except where the probe is what a test checks (test_engine_flash): a
    tiny model's timings are noise, and a generation whose depth they favour differently would switch settings,
    emptying the caches that a test of prefix reuse counts on."""
    if request.node.module is not None and request.node.module.__name__.endswith("test_engine_flash"):
        return
    from speculens.engine.backend import LlamaBackend

    monkeypatch.setattr(LlamaBackend, "probe_flash_attention", lambda *_a, **_k: None)


@pytest.fixture(autouse=True)
def gui_thread_garbage_collection(request: pytest.FixtureRequest) -> None:
    """Qt tests collect garbage on the GUI thread only, as the app does (``ui.app.create_app``): a cycle holding
    a closed window's widgets, collected in the engine's thread, once hung a whole run."""
    if request.node.get_closest_marker("gui") is not None:
        request.getfixturevalue("qapp")
        from speculens.ui.app import collect_garbage_on_the_gui_thread

        collect_garbage_on_the_gui_thread()
