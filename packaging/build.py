"""Build the double-click package of Speculens for the system this runs on.

Steps: check the icons are fresh, run PyInstaller on ``packaging/speculens.spec``, optionally run the frozen
``--self-test``, then wrap the bundle for download:

- Linux: ``dist/speculens-<version>-linux-<arch>.tar.gz`` (the bundle with its desktop entry, AppStream
  metadata, icons and ``install-desktop-entry.sh``);
- macOS: ``dist/Speculens-<version>-macos-<arch>.dmg`` (``hdiutil``, with an Applications link to drag to);
- Windows: ``dist/Speculens-<version>-windows-<arch>.zip``.

Usage::

    python packaging/build.py                 # bundle + package
    python packaging/build.py --self-test     # ... and run the frozen self-test on the bundle
    python packaging/build.py --skip-pyinstaller --self-test   # re-test / re-package an existing bundle

It prints the build time and the bundle's size, and writes them to ``dist/build-info.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
DIST = ROOT / "dist"
WORK = ROOT / "build"
APP_ID = "io.speculens.Speculens"


def version() -> str:
    """The version in ``speculens.__version__``, read without importing the package.

    Returns:
        The version string.
    """
    text = (ROOT / "app" / "speculens" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if match is None:
        raise SystemExit("no __version__ in app/speculens/__init__.py")
    return match.group(1)


def arch() -> str:
    """The machine architecture in the names release files usually use.

    Returns:
        ``x86_64``, ``arm64``, ...
    """
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "aarch64": "arm64"}.get(machine, machine)


def bundle_dir() -> Path:
    """The folder PyInstaller produces.

    Returns:
        ``dist/Speculens.app`` on macOS, ``dist/speculens`` elsewhere.
    """
    return DIST / "Speculens.app" if sys.platform == "darwin" else DIST / "speculens"


def executable() -> Path:
    """The frozen program inside the bundle.

    Returns:
        Its path.
    """
    if sys.platform == "darwin":
        return bundle_dir() / "Contents" / "MacOS" / "Speculens"
    return bundle_dir() / ("speculens.exe" if sys.platform == "win32" else "speculens")


def folder_size(path: Path) -> int:
    """Bytes in the files under a folder (links not followed, as ``du`` counts them).

    Args:
        path: the folder.

    Returns:
        The total size in bytes.
    """
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def run_pyinstaller() -> None:
    """Build the bundle from the spec file (``--clean``: stale PyInstaller caches make odd bundles)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "PyInstaller",
            "--noconfirm",
            "--clean",
            "--distpath",
            str(DIST),
            "--workpath",
            str(WORK),
            str(PACKAGING / "speculens.spec"),
        ],
        check=True,
        cwd=ROOT,
    )


def run_self_test(timeout: float = 300.0) -> float:
    """Run ``<bundle> --self-test`` off screen with a throw-away home, printing its log.

    The windowed build has no console on Windows, so the test's own lines are read back from the log file.

    Args:
        timeout: seconds before the test counts as hung.

    Returns:
        The seconds it took.

    Raises:
        SystemExit: the self-test failed.
    """
    with tempfile.TemporaryDirectory(prefix="speculens-selftest-home-") as home:
        env = {**os.environ, "SPECULENS_HOME": home, "QT_QPA_PLATFORM": "offscreen"}
        started = time.perf_counter()
        result = subprocess.run(
            [str(executable()), "--self-test"], env=env, timeout=timeout, capture_output=True, text=True
        )
        seconds = time.perf_counter() - started
        print(result.stdout, end="")
        print(result.stderr, end="", file=sys.stderr)
        for log in sorted(Path(home).rglob("*.log")):
            if log.stat().st_size:
                print(f"--- {log.name} ---\n{log.read_text(encoding='utf-8', errors='replace')}")
    if result.returncode != 0:
        raise SystemExit(f"frozen self-test failed with exit status {result.returncode}")
    print(f"frozen self-test passed in {seconds:.1f} s")
    return seconds


def package_linux(ver: str) -> list[Path]:
    """Tarball of the Linux bundle, laid out for ``install-desktop-entry.sh``.

    An AppImage would need ``appimagetool``, a binary fetched from GitHub rather than a package; the tarball
    plus the install script gives the same menu entry and double-click start without it.

    Args:
        ver: the version.

    Returns:
        The files made.
    """
    stage = WORK / "linux-stage" / f"speculens-{ver}"
    shutil.rmtree(stage.parent, ignore_errors=True)
    shutil.copytree(bundle_dir(), stage, symlinks=True)
    share = stage / "share"
    (share / "applications").mkdir(parents=True)
    shutil.copy2(PACKAGING / "linux" / f"{APP_ID}.desktop", share / "applications")
    (share / "metainfo").mkdir()
    shutil.copy2(PACKAGING / "linux" / f"{APP_ID}.metainfo.xml", share / "metainfo")
    for png in sorted((ROOT / "icons" / "png").glob("speculens-*.png")):
        size = png.stem.rsplit("-", 1)[1]
        target = share / "icons" / "hicolor" / f"{size}x{size}" / "apps"
        target.mkdir(parents=True)
        shutil.copy2(png, target / f"{APP_ID}.png")
    scalable = share / "icons" / "hicolor" / "scalable" / "apps"
    scalable.mkdir(parents=True)
    shutil.copy2(ROOT / "icons" / "speculens.svg", scalable / f"{APP_ID}.svg")
    shutil.copy2(PACKAGING / "linux" / "install-desktop-entry.sh", stage)

    made = []
    tarball = DIST / f"speculens-{ver}-linux-{arch()}.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(stage, arcname=stage.name)
    made.append(tarball)

    return made


def package_macos(ver: str) -> list[Path]:
    """A compressed DMG holding the app and a link to /Applications.

    Args:
        ver: the version.

    Returns:
        The files made.
    """
    stage = WORK / "dmg-stage"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    shutil.copytree(bundle_dir(), stage / "Speculens.app", symlinks=True)
    (stage / "Applications").symlink_to("/Applications")
    dmg = DIST / f"Speculens-{ver}-macos-{arch()}.dmg"
    dmg.unlink(missing_ok=True)
    subprocess.run(
        [
            "hdiutil",
            "create",
            "-volname",
            "Speculens",
            "-srcfolder",
            str(stage),
            "-ov",
            "-format",
            "UDZO",
            str(dmg),
        ],
        check=True,
    )
    return [dmg]


def package_windows(ver: str) -> list[Path]:
    """A zip of the bundle folder (unzip anywhere, double-click speculens.exe).

    Args:
        ver: the version.

    Returns:
        The files made.
    """
    archive = DIST / f"Speculens-{ver}-windows-{arch()}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for path in sorted(bundle_dir().rglob("*")):
            zf.write(path, Path(f"Speculens-{ver}") / path.relative_to(bundle_dir()))
    return [archive]


def main(argv: list[str] | None = None) -> int:
    """Build, test and package.

    Args:
        argv: command-line arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit status.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--self-test", action="store_true", help="run the frozen --self-test on the bundle")
    parser.add_argument("--skip-pyinstaller", action="store_true", help="reuse the bundle already in dist/")
    parser.add_argument("--no-package", action="store_true", help="stop after the bundle (and self-test)")
    args = parser.parse_args(argv)
    ver = version()
    info: dict[str, object] = {"version": ver, "platform": sys.platform, "arch": arch()}

    stale = subprocess.run([sys.executable, str(PACKAGING / "make_icons.py"), "--check"], cwd=ROOT)
    if stale.returncode != 0:
        raise SystemExit("icons are stale: run python packaging/make_icons.py and commit the result")

    if not args.skip_pyinstaller:
        started = time.perf_counter()
        run_pyinstaller()
        info["build_seconds"] = round(time.perf_counter() - started, 1)
        print(f"PyInstaller build took {info['build_seconds']} s")
    if not executable().exists():
        raise SystemExit(f"no bundle at {bundle_dir()}: build it first")
    broken = [p for p in bundle_dir().rglob("*") if p.is_symlink() and not p.exists()]
    if broken:  # e.g. a library dropped in the spec while a link to it stayed
        raise SystemExit(f"broken links in the bundle: {[str(p.relative_to(DIST)) for p in broken]}")
    info["bundle_bytes"] = size = folder_size(bundle_dir())
    print(f"bundle {bundle_dir().relative_to(ROOT)}: {size / 2**20:.0f} MiB")

    if args.self_test:
        info["self_test_seconds"] = round(run_self_test(), 1)

    if not args.no_package:
        packagers = {"linux": package_linux, "darwin": package_macos, "win32": package_windows}
        made = packagers.get(sys.platform, package_linux)(ver)
        info["packages"] = {p.name: p.stat().st_size for p in made}
        for p in made:
            print(f"package {p.relative_to(ROOT)}: {p.stat().st_size / 2**20:.0f} MiB")
    (DIST / "build-info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
