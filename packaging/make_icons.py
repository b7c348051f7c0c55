"""Render the application icon set from the master SVG, so the sizes never drift from it.

Writes ``icons/png/speculens-<N>.png`` for N in 16…512, ``icons/speculens.ico`` (Windows, all sizes up to
256) and ``icons/speculens.icns`` (macOS, 16…1024 including the @2x variants).

PNGs are rendered with PySide6's ``QSvgRenderer``: Qt is already a dependency of the app, so the icons need
no extra SVG tool (Inkscape, librsvg) on a developer's machine or in CI. Qt cannot write multi-size ``.ico``
or ``.icns`` files, so those are assembled by Pillow from the rendered PNGs (each size is its own rendering,
not a downscale of the largest one).

Usage::

    python packaging/make_icons.py            # regenerate everything
    python packaging/make_icons.py --check    # exit 1 if the committed files are missing or stale
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ICONS = ROOT / "icons"
MASTER = ICONS / "speculens.svg"
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
ICNS_SIZES = (16, 32, 64, 128, 256, 512, 1024)


def png_path(size: int) -> Path:
    """Where the PNG of one size lives.

    Args:
        size: edge length in pixels.

    Returns:
        ``icons/png/speculens-<size>.png``.
    """
    return ICONS / "png" / f"speculens-{size}.png"


def render_png(svg: Path, size: int) -> bytes:
    """Render the SVG to a square PNG.

    Args:
        svg: the master SVG.
        size: edge length in pixels.

    Returns:
        The PNG file's bytes.
    """
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    _app = QGuiApplication.instance() or QGuiApplication([])  # QPainter on a QImage wants a Gui app
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"{svg} is not a valid SVG for Qt")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(0)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")  # PySide6 takes the format as str at run time, whatever its stubs say
    buffer.close()
    return bytes(data.data())


def build(svg: Path = MASTER) -> dict[Path, bytes]:
    """Render every icon file in memory.

    Args:
        svg: the master SVG.

    Returns:
        Each output path and its contents.
    """
    from PIL import Image

    rendered = {size: render_png(svg, size) for size in sorted({*PNG_SIZES, *ICNS_SIZES})}
    images = {size: Image.open(io.BytesIO(data)).convert("RGBA") for size, data in rendered.items()}
    out: dict[Path, bytes] = {png_path(size): rendered[size] for size in PNG_SIZES}

    ico = io.BytesIO()
    largest = images[max(ICO_SIZES)]
    largest.save(
        ico,
        format="ICO",
        sizes=[(s, s) for s in ICO_SIZES],
        append_images=[images[s] for s in ICO_SIZES if s != max(ICO_SIZES)],
    )
    out[ICONS / "speculens.ico"] = ico.getvalue()

    icns = io.BytesIO()
    images[max(ICNS_SIZES)].save(
        icns, format="ICNS", append_images=[images[s] for s in ICNS_SIZES if s != max(ICNS_SIZES)]
    )
    out[ICONS / "speculens.icns"] = icns.getvalue()
    return out


def _frames(data: bytes) -> dict[tuple[int, ...], Any]:
    """Decode every image in a PNG, ICO or ICNS file.

    Args:
        data: the file's bytes.

    Returns:
        Each image (RGBA) by its size key: (w, h) for PNG and ICO, (w, h, scale) for ICNS.
    """
    from PIL import Image

    image: Any = Image.open(io.BytesIO(data))  # Any: the ICO/ICNS plugin attributes are not typed
    if image.format == "ICO":
        return {size: image.ico.getimage(size).convert("RGBA") for size in image.ico.sizes()}
    if image.format == "ICNS":
        frames: dict[tuple[int, ...], Any] = {}
        for width, height, scale in image.info["sizes"]:
            frame: Any = Image.open(io.BytesIO(data))
            frame.size = (width, height)
            frame.load(scale=scale)
            frames[(width, height, scale)] = frame.convert("RGBA")
        return frames
    return {image.size: image.convert("RGBA")}


def differs(path: Path, data: bytes) -> bool:
    """Whether a committed icon file differs from a fresh rendering by more than rasteriser noise.

    Qt's rasteriser may put an edge pixel a shade differently on another platform or Qt version, so the
    decoded pixels are compared (mean difference under 1/255 per channel), not the files' bytes.

    Args:
        path: the committed file.
        data: the fresh rendering.

    Returns:
        True when the file is missing, has other sizes, or shows a different picture.
    """
    from PIL import ImageChops, ImageStat

    if not path.exists():
        return True
    old = path.read_bytes()
    if old == data:
        return False
    old_frames, new_frames = _frames(old), _frames(data)
    if old_frames.keys() != new_frames.keys():
        return True
    for key, new in new_frames.items():
        diff = ImageStat.Stat(ImageChops.difference(old_frames[key], new))
        if max(diff.mean) >= 1.0:
            return True
    return False


def stale_files() -> list[Path]:
    """The committed icon files that no longer match the master SVG.

    Returns:
        Their paths (empty when everything is fresh).
    """
    return [p for p, data in build().items() if differs(p, data)]


def main(argv: list[str] | None = None) -> int:
    """Regenerate (or check) the icon files.

    Args:
        argv: command-line arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0, or 1 when ``--check`` finds a missing or stale file.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report files that differ from a fresh render")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for p in stale:
            print(f"stale: {p.relative_to(ROOT)} (run python packaging/make_icons.py)")
        return 1 if stale else 0
    for p, data in build().items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        print(f"wrote {p.relative_to(ROOT)} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
