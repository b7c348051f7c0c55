"""Packaging: icons, desktop metadata, the PyInstaller spec, logging and the self-test.

Cheap checks run everywhere. Building the frozen bundle takes minutes, so that test runs only with
``SPECULENS_BUILD_BUNDLE=1`` (release CI runs ``packaging/build.py --self-test`` itself).
"""

from __future__ import annotations

import ast
import configparser
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType

import pytest

import speculens
from speculens import logging_setup, selftest

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
ICONS = ROOT / "icons"
APP_ID = "io.speculens.Speculens"
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def _load(path: Path) -> ModuleType:
    """Import a script from packaging/ (not a package) as a module."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _png_header(path: Path) -> tuple[int, int, int]:
    """Width, height and colour type from a PNG's IHDR chunk."""
    data = path.read_bytes()[:26]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height, data[25]


# ---- icons -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", PNG_SIZES)
def test_png_icon_has_its_size_and_alpha(size: int) -> None:
    width, height, colour_type = _png_header(ICONS / "png" / f"speculens-{size}.png")
    assert (width, height) == (size, size)
    assert colour_type == 6, "icons need an alpha channel (RGBA) for their rounded corners"


def test_png_set_is_exactly_the_documented_sizes() -> None:
    found = sorted(int(p.stem.rsplit("-", 1)[1]) for p in (ICONS / "png").glob("speculens-*.png"))
    assert found == sorted(PNG_SIZES)


def test_ico_holds_every_windows_size() -> None:
    data = (ICONS / "speculens.ico").read_bytes()
    reserved, kind, count = struct.unpack("<HHH", data[:6])
    assert (reserved, kind) == (0, 1)
    sizes = set()
    for i in range(count):
        width, height = data[6 + 16 * i], data[7 + 16 * i]
        sizes.add((width or 256, height or 256))  # 0 means 256 in an ICONDIRENTRY
    assert sizes == {(s, s) for s in (16, 24, 32, 48, 64, 128, 256)}


def test_icns_is_well_formed_with_retina_sizes() -> None:
    data = (ICONS / "speculens.icns").read_bytes()
    assert data[:4] == b"icns"
    assert struct.unpack(">I", data[4:8])[0] == len(data)
    types, offset = set(), 8
    while offset < len(data):
        kind, length = data[offset : offset + 4], struct.unpack(">I", data[offset + 4 : offset + 8])[0]
        assert length > 8
        types.add(kind.decode("ascii"))
        offset += length
    assert offset == len(data)
    # 128, 256, 512 and 1024 (512@2x) pixels, and the @2x variants of 16 and 32.
    assert {"ic07", "ic08", "ic09", "ic10", "ic11", "ic12"} <= types


@pytest.mark.gui
def test_icons_match_the_master_svg(qapp: object) -> None:
    """The committed PNG/ICO/ICNS files are what make_icons.py renders from icons/speculens.svg now.

    ``qapp`` first: make_icons would otherwise start a QGuiApplication, on which later widget tests abort.
    """
    pytest.importorskip("PIL", reason="Pillow assembles the .ico/.icns (the 'package' extra)")
    make_icons = _load(PACKAGING / "make_icons.py")
    stale = make_icons.stale_files()
    assert not stale, f"run python packaging/make_icons.py; stale: {[p.name for p in stale]}"


def test_master_svg_is_square_and_titled() -> None:
    root = ET.parse(ICONS / "speculens.svg").getroot()
    assert root.get("viewBox") == "0 0 512 512"
    assert root.find("{http://www.w3.org/2000/svg}title") is not None


# ---- Linux desktop metadata ------------------------------------------------------------------------


def _desktop_entry() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(PACKAGING / "linux" / f"{APP_ID}.desktop", encoding="utf-8")
    return parser["Desktop Entry"]


def test_desktop_entry_names_the_app_and_its_icon() -> None:
    entry = _desktop_entry()
    assert entry["Type"] == "Application"
    assert entry["Name"] == "Speculens"
    assert entry["Icon"] == APP_ID
    assert entry["Exec"].split()[0] == "speculens"
    assert entry["Terminal"] == "false"
    assert entry["Categories"].endswith(";")


def test_metainfo_matches_desktop_entry_and_version() -> None:
    root = ET.parse(PACKAGING / "linux" / f"{APP_ID}.metainfo.xml").getroot()
    assert root.get("type") == "desktop-application"
    assert root.findtext("id") == APP_ID
    assert root.findtext("launchable") == f"{APP_ID}.desktop"
    assert root.findtext("icon") == _desktop_entry()["Icon"]
    versions = [r.get("version") for r in root.iter("release")]
    assert speculens.__version__ in versions, "add a <release> for the new version to the metainfo"


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("desktop-file-validate", [str(PACKAGING / "linux" / f"{APP_ID}.desktop")]),
        ("appstreamcli", ["validate", "--no-net", str(PACKAGING / "linux" / f"{APP_ID}.metainfo.xml")]),
    ],
)
def test_linux_metadata_passes_the_validators(tool: str, args: list[str]) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    result = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- PyInstaller spec, Windows resource, build script, CI ------------------------------------------


def _spec_text() -> str:
    return (PACKAGING / "speculens.spec").read_text(encoding="utf-8")


def test_spec_is_python_and_names_the_bundle_facts() -> None:
    text = _spec_text()
    ast.parse(text)
    assert f'BUNDLE_ID = "{APP_ID}"' in text
    assert (PACKAGING / "launcher.py").is_file() and '"launcher.py"' in text
    for icon in ("speculens.ico", "speculens.icns"):
        assert f'"{icon}"' in text and (ICONS / icon).is_file()
    assert "console=False" in text
    for unused in ("QtWebEngineCore", "Qt3DCore", "QtMultimedia", "QtQuick", "QtQml", "QtPdf", "QtBluetooth"):
        assert f'"{unused}"' in text


def test_spec_collects_every_llama_cpp_library() -> None:
    """Run the spec's collection function: every file in llama_cpp/lib ends up as a file or a link."""
    tree = ast.parse(_spec_text())
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "llama_cpp_libraries")
    namespace: dict[str, object] = {"Path": Path}
    exec(compile(ast.Module(body=[func], type_ignores=[]), "speculens.spec", "exec"), namespace)
    files, links = namespace["llama_cpp_libraries"]()  # type: ignore[operator]

    lib = Path(importlib.util.find_spec("llama_cpp").origin).parent / "lib"  # type: ignore[arg-type,union-attr]
    collected = {Path(src).name for src, dest in files} | {Path(name).name for name, _, _ in links}
    on_disk = {p.name for p in lib.iterdir() if re.search(r"\.(so(\.\d+)*|dylib|dll)$", p.name)}
    assert on_disk and on_disk <= collected
    assert all(dest == "llama_cpp/lib" for _, dest in files)
    real = {Path(src).name for src, _ in files}
    assert any("llama" in name for name in real)
    for name, target, kind in links:
        assert kind == "SYMLINK" and target in real, f"{name} links to {target}, which is not collected"


def test_windows_version_resource_carries_the_version() -> None:
    template = (PACKAGING / "windows" / "version_info.txt").read_text(encoding="utf-8")
    numbers = [int(n) for n in re.findall(r"\d+", speculens.__version__)[:4]]
    version_tuple = tuple(numbers + [0] * (4 - len(numbers)))
    text = template.replace("{version_tuple}", repr(version_tuple)).replace(
        "{version}", speculens.__version__
    )
    expression = ast.parse(text, mode="eval").body  # PyInstaller eval()s the same text
    assert isinstance(expression, ast.Call) and getattr(expression.func, "id", None) == "VSVersionInfo"
    assert f"filevers={version_tuple!r}" in text
    assert f"'ProductVersion', '{speculens.__version__}'" in text


def test_build_script_reads_the_package_version() -> None:
    build = _load(PACKAGING / "build.py")
    assert build.version() == speculens.__version__


def test_release_workflow_builds_and_self_tests_on_three_systems() -> None:
    """Where GitHub runs it, on a tag, with llama.cpp built for any CPU of the platform, not the runner's."""
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text(encoding="utf-8"))
    assert workflow[True]["push"]["tags"] == ["v*"]  # YAML reads the key "on" as True
    job = workflow["jobs"]["bundle"]
    rows = job["strategy"]["matrix"]["include"]
    assert {row["os"].split("-")[0] for row in rows} == {"ubuntu", "windows", "macos"}
    assert all("-DGGML_NATIVE=OFF" in row["cmake_args"] for row in rows)
    build = next(step for step in job["steps"] if "llama-cpp-python" in step.get("run", ""))
    assert build["env"]["CMAKE_ARGS"] == "${{ matrix.cmake_args }}" and "--no-binary" in build["run"]
    assert not (PACKAGING / "ci").exists()
    commands = "\n".join(step.get("run", "") for step in job["steps"])
    assert "packaging/build.py --self-test" in commands
    assert '".[package]"' in commands


def test_package_extra_provides_the_build_tools() -> None:
    """The release workflow installs '.[package]': it must bring PyInstaller and Pillow (make_icons)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extra = " ".join(project.get("optional-dependencies", {}).get("package", [])).lower()
    assert "pyinstaller" in extra and "pillow" in extra


# ---- logging and self-test -------------------------------------------------------------------------


def test_backend_description_names_llama_cpp_and_its_backend() -> None:
    from speculens.engine.backend import gpu_backend_name

    text = logging_setup.backend_description()
    gpu = gpu_backend_name()
    assert text.startswith(f"llama.cpp with {gpu} offload" if gpu else "llama.cpp CPU build")


def test_windowed_app_logs_prints_and_crashes(speculens_home: Path) -> None:
    """Without a console (stdout/stderr None), prints and uncaught exceptions of any thread reach the log."""
    script = textwrap.dedent(
        """
        import sys, threading
        sys.stdout = sys.stderr = None  # what a windowed frozen app gets
        from speculens.logging_setup import setup_logging
        print(setup_logging(), "printed without a console")
        worker = threading.Thread(target=lambda: 1 / 0, name="engine-worker")
        worker.start(); worker.join()
        raise RuntimeError("boom in the main thread")
        """
    )
    env = {**os.environ, "SPECULENS_HOME": str(speculens_home)}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert result.stdout == result.stderr == ""
    log = (speculens_home / "logs" / "speculens.log").read_text(encoding="utf-8")
    assert f"Speculens {speculens.__version__} starting" in log
    assert "Backend: llama.cpp" in log
    assert "printed without a console" in log
    assert "Uncaught exception in thread engine-worker" in log and "ZeroDivisionError" in log
    assert "Uncaught exception in the main thread" in log and "RuntimeError: boom in the main thread" in log
    assert log.count("ZeroDivisionError") == 1, "a traceback must be logged once, not again via stderr"
    assert (speculens_home / "logs" / "crash.log").exists()


@pytest.mark.gui
@pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")
def test_self_test_passes_on_tiny_models() -> None:
    lines: list[str] = []
    assert selftest.run_self_test(log=lines.append) == 0, "\n".join(lines)
    assert lines[-1] == "self-test passed"
    assert any(line.startswith("speculative:") and "acceptance 100%" in line for line in lines)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("SPECULENS_BUILD_BUNDLE") != "1", reason="set SPECULENS_BUILD_BUNDLE=1")
def test_frozen_bundle_builds_and_passes_its_self_test() -> None:
    """Build with PyInstaller and run ``<bundle> --self-test`` (minutes; build.py raises on failure)."""
    pytest.importorskip("PyInstaller")
    result = subprocess.run(
        [sys.executable, str(PACKAGING / "build.py"), "--self-test", "--no-package"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "frozen self-test passed" in result.stdout
