"""The dependency rule of DESIGN.md §1: the engine, the models layer and the CLI never import Qt."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import speculens

PACKAGE = Path(speculens.__file__).parent


def test_core_layers_import_without_qt() -> None:
    modules = sorted(
        ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        for layer in ("engine", "models", "cli")
        for p in (PACKAGE / layer).rglob("*.py")
    )
    assert len(modules) > 10
    code = textwrap.dedent(
        f"""
        import importlib, sys
        class BlockQt:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("PySide6", "pyqtgraph", "shiboken6"):
                    raise ImportError("Qt is not allowed here: " + name)
        sys.meta_path.insert(0, BlockQt())
        for name in {modules!r}:
            importlib.import_module(name.removesuffix(".__init__"))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_llama_cpp_is_imported_only_by_the_backend() -> None:
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name != "backend.py"
        and any(
            line.lstrip().startswith(("import llama_cpp", "from llama_cpp"))
            for line in p.read_text(encoding="utf-8").splitlines()
        )
    ]
    assert offenders == []


def test_light_types_and_settings_import_neither_llama_cpp_nor_qt() -> None:
    """The types the GUI and its tests share with the engine (DESIGN.md §1) load without llama.cpp or Qt, so
    a fake engine can stand in for the real one."""
    code = textwrap.dedent(
        """
        import sys
        import speculens.engine.config, speculens.engine.events, speculens.engine.protocol
        import speculens.engine.sampling, speculens.engine.suite, speculens.settings, speculens.errors, speculens.atomic
        import speculens.ui.conversations, speculens.ui.qt_compat
        bad = sorted({m.split(".")[0] for m in sys.modules} & {"llama_cpp", "PySide6", "pyqtgraph", "shiboken6"})
        print(",".join(bad))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_the_window_loads_llama_cpp_only_where_a_model_is_loaded() -> None:
    """llama.cpp takes a moment to load: the engine worker and background tasks import it, never the GUI thread
    while the window is built (the n-gram map dialog imported the backend at module level once)."""
    code = textwrap.dedent(
        """
        import sys
        import speculens.ui.app, speculens.ui.main_window, speculens.ui.settings_panel, speculens.ui.ngram_map_dialog
        print("llama_cpp" in sys.modules)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
