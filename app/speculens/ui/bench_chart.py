"""The benchmark's PNG chart: speedup over plain decoding per prompt and setting, drawn with QPainter.

matplotlib is not a dependency, so Qt draws it; the module lives with the other Qt code in ``ui/`` (the CLI
stays Qt-free, DESIGN.md §1) and ``speculens-cli bench`` imports it only when it writes a PNG. Qt itself is
imported inside :func:`render_chart`, on the offscreen platform when no GUI application is running.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# Colour per setting, cycled; plain decoding is the 1.0 line, not a bar.
_PALETTE = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D", "#BAB0AC")


def chart_data(doc: dict[str, Any]) -> tuple[list[str], list[str], list[list[float | None]]]:
    """The chart's numbers from a benchmark document.

    Args:
        doc: a ``speculens-bench/1`` document.

    Returns:
        Prompt ids, setting labels (plain decoding left out), and ``speedup[setting][prompt]``.
    """
    labels = [s["label"] for s in doc["settings"] if s["strategy"] != "none"]
    prompts = [p["id"] for p in doc["prompts"]]
    values: list[list[float | None]] = []
    for label in labels:
        row: list[float | None] = []
        for p in doc["prompts"]:
            result = p["results"].get(label)
            row.append(result["summary"]["speedup"] if result else None)
        values.append(row)
    return prompts, labels, values


def chart_caption(doc: dict[str, Any]) -> str:
    """What the chart measured, in one line under its title: the models, threads, tokens, sampling and runs (a
    tour's finding: a PNG passed around said none of it)."""
    config = doc.get("config") or {}
    parts: list[str] = []
    if config.get("target"):
        draft = f", draft {Path(config['draft']).name}" if config.get("draft") else ""
        parts.append(f"target {Path(config['target']).name}{draft}")
    if config.get("threads"):
        parts.append(f"{config['threads']} threads")
    if config.get("max_tokens"):
        parts.append(f"{config['max_tokens']} tokens")
    temperature = config.get("temperature")
    if temperature is not None:
        parts.append("greedy" if temperature == 0 else f"temperature {temperature:g}")
    repeat = config.get("repeat")
    if repeat:
        parts.append("1 run" if repeat == 1 else f"median of {repeat} runs")
    return " · ".join(parts)


def render_chart(doc: dict[str, Any], path: Path, width: int = 1400, height: int = 640) -> str | None:
    """Draw the speedup chart and save it as a PNG.

    Args:
        doc: a ``speculens-bench/1`` document.
        path: where to write the PNG.
        width: image width in pixels.
        height: image height in pixels.

    Returns:
        ``None`` when written, else why not (Qt missing, nothing to draw, the file could not be written).
    """
    prompts, labels, values = chart_data(doc)
    if not labels:
        return "nothing to draw (no speculative settings)"
    if all(v is None for row in values for v in row):  # a stopped run (a tour's read "no speculative settings")
        return "nothing to draw (no speedup was measured)"
    try:
        if "QT_QPA_PLATFORM" not in os.environ:
            os.environ["QT_QPA_PLATFORM"] = "offscreen"
        from PySide6.QtCore import QPointF, QRectF, Qt
        from PySide6.QtGui import QColor, QFont, QGuiApplication, QImage, QPainter, QPen
    except ImportError as exc:
        return f"PySide6 is not available ({exc})"
    app = QGuiApplication.instance() or QGuiApplication([])
    del app  # only needs to exist while painting text

    image = QImage(width, height, QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    try:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        font = QFont()
        font.setPixelSize(13)
        painter.setFont(font)
        left, right, top, bottom = 70, 20, 64, 110
        plot = QRectF(left, top, width - left - right, height - top - bottom)
        finite = [v for row in values for v in row if v is not None]
        y_max = max(1.5, max(finite, default=1.0) * 1.1)

        def y_of(v: float) -> float:
            return plot.bottom() - plot.height() * v / y_max

        painter.drawText(QRectF(0, 8, width, 30), Qt.AlignmentFlag.AlignHCenter, "Speedup over plain decoding")
        painter.setPen(QPen(QColor("#666666"), 1))
        painter.drawText(QRectF(0, 28, width, 24), Qt.AlignmentFlag.AlignHCenter, chart_caption(doc))
        painter.setPen(QPen(QColor("#DDDDDD"), 1))
        step = 0.25 if y_max <= 2.5 else 0.5 if y_max <= 5 else 1.0
        tick = 0.0
        while tick <= y_max:
            painter.setPen(QPen(QColor("#E5E5E5"), 1))
            painter.drawLine(QPointF(plot.left(), y_of(tick)), QPointF(plot.right(), y_of(tick)))
            painter.setPen(QPen(QColor("#333333"), 1))
            painter.drawText(QRectF(0, y_of(tick) - 8, left - 8, 16), Qt.AlignmentFlag.AlignRight, f"{tick:.2f}×")
            tick += step
        group = plot.width() / len(prompts)
        bar = group * 0.8 / len(labels)
        for j, prompt in enumerate(prompts):
            x0 = plot.left() + j * group + group * 0.1
            for i, row in enumerate(values):
                v = row[j]
                if v is None:
                    continue
                painter.fillRect(
                    QRectF(x0 + i * bar, y_of(v), bar * 0.9, plot.bottom() - y_of(v)),
                    QColor(_PALETTE[i % len(_PALETTE)]),
                )
            painter.setPen(QPen(QColor("#333333"), 1))
            painter.drawText(
                QRectF(plot.left() + j * group, plot.bottom() + 4, group, 20), Qt.AlignmentFlag.AlignHCenter, prompt
            )
        painter.setPen(QPen(QColor("#000000"), 2, Qt.PenStyle.DashLine))
        painter.drawLine(QPointF(plot.left(), y_of(1.0)), QPointF(plot.right(), y_of(1.0)))
        painter.setPen(QPen(QColor("#333333"), 1))
        x, y = float(left), plot.bottom() + 36
        for i, label in enumerate(labels):
            painter.fillRect(QRectF(x, y + 3, 12, 12), QColor(_PALETTE[i % len(_PALETTE)]))
            painter.drawText(QPointF(x + 16, y + 14), label)
            x += 30 + 8 * len(label)
            if x > width - 200:
                x, y = float(left), y + 22
    finally:
        painter.end()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not image.save(str(path), "PNG"):  # type: ignore[call-overload]  # PySide6 takes str at run time
        return f"could not write {path}"
    return None
