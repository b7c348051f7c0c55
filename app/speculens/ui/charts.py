"""Live pyqtgraph plots of one generation, and the series they draw from.

:class:`RunSeries` accumulates per-step numbers as events arrive (cheap list appends); :class:`ChartsPanel`
pulls a snapshot of it on its own ~30 Hz ``QTimer`` and calls ``setData`` only when something changed
(Friture's pattern), so a fast generation costs the GUI at most 30 plot updates a second, never one per
token.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
import shiboken6
from PySide6.QtCore import QRect, Qt, QTimer
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter, QPaintEvent, QPalette, QPen, QPixmap
from PySide6.QtWidgets import QVBoxLayout, QWidget

if TYPE_CHECKING:
    from speculens.engine.events import RunningStats, StepEvent

REFRESH_MS = 33
EXPORT_SCALE = 2.0  # pixels a point in an exported chart (see ChartsPanel.grab_png)
# An exported chart's size in points, its caption included: a 16:9 slide's shape, the plots two by two (a teacher's
# tour exported the window's row of four as a 2732×440 strip, hard to fit on a slide, its plots small).
SLIDE = (960, 540)
# The charts may take at most this share of a core: painting four plots in software costs 10-30 ms, and
# while the GUI paints it takes a core from llama.cpp's threads, whose barriers then wait for it. Measured in
# the window on 2 cores, both for llama.cpp, demo target: 20-22 tokens/s with a quarter of the GUI thread
# counted in wall time, 27-28 with a twentieth of a core counted in processor time (31 without a window).
PAINT_BUDGET = 0.05
# Where llama.cpp's threads take every core (2 cores or fewer, see speculens.ui.worker.gui_threads), every moment
# the charts take is the decoding's: at 3% the window decoded the demo target 4.5% slower than the CLI (2026-12-06,
# 2 cores). Their solid grid (SolidGridAxis) cut a refresh from 22 to 14 ms of processor time, and axes drawn again
# only when their range or ticks change (see ChartsPanel.refresh), painted once, from 15-17 to 4 ms (medians of 60
# refreshes of a plain answer, 1270x190 px): at this share they refresh as often as they did at 3% before (28
# refreshes in an answer of 18 s, against 22 in 20 s), and the rest goes to llama.cpp.
PAINT_BUDGET_NO_SPARE_CORE = 0.015
ROLLING_STEPS = 16
# The top of the rate axes (acceptance): above 1, so that a rate of 1 shows, and far enough above it for the label
# "1.0" to fit inside the axis, which pyqtgraph requires of a gridded axis's labels (at 1.05 a teacher's tour read rates
# of 100% on axes labelled up to 0.8).
RATE_TOP = 1.12
MIN_POSITIONS = 4  # the acceptance-by-position plot is at least this many positions wide
# A draft position tried fewer times than this is drawn faint: a rate of 1 from one drafted token is no finding.
FEW_SAMPLES = 5
BAR_GREEN = (46, 160, 67)


def _costs_line(sizes: list[int], ms: list[float], n: np.ndarray) -> np.ndarray:
    """Pass times at the sizes ``n``: linear between the measured ``sizes``, and beyond the largest its time plus the
    last two's slope, never negative (noisy timings read a bigger batch as cheaper: a review's, the curve then went
    below zero past the table's end)."""
    slope = max((ms[-1] - ms[-2]) / (sizes[-1] - sizes[-2]), 0.0)
    return np.where(n > sizes[-1], ms[-1] + slope * (n - sizes[-1]), np.interp(n, sizes, ms))


class RunSeries:
    """Per-step numbers of one generation, in plain lists.

    Attributes:
        step: step numbers.
        elapsed: seconds since decoding started, at the end of each step.
        generated: tokens emitted so far.
        drafted: tokens drafted in the step.
        accepted: drafted tokens accepted in the step.
        emitted: tokens the step added (accepted length: accepted drafts + the target's token).
        chosen: the draft length asked for in the step (the adaptive controller's choice; 0 = plain).
        probes: ``(step, draft length)`` of the steps in which the controller speculated only to re-measure.
        rejected_steps: steps in which a draft token was rejected.
        stats: the latest running totals.
        costs_ms: the target's verification times (ms, 1, 2, … tokens) the session's cost model expected when the
            answer began (:attr:`speculens.engine.events.StartEvent.verify_ms`).
    """

    def __init__(self) -> None:
        self.step: list[int] = []
        self.elapsed: list[float] = []
        self.generated: list[int] = []
        self.drafted: list[int] = []
        self.accepted: list[int] = []
        self.emitted: list[int] = []
        self.chosen: list[int] = []
        self.probes: list[tuple[int, int]] = []
        self.rejected_steps = 0
        self.stats: RunningStats | None = None
        self.batch_ms: dict[int, list[float]] = {}  # verification time by batch size (drafts + 1)
        self.costs_ms: tuple[float, ...] = ()  # the cost model's verification times at the start (StartEvent.verify_ms)
        self.version = 0  # bumped on every change (never reset), so a plot knows whether to redraw
        self.cleared = 0  # bumped by every clear (a new answer), so a plot knows its ranges are the last answer's

    def clear(self) -> None:
        """Forget everything (the version moves on, so a plot of the old answer redraws empty)."""
        version, cleared = self.version, self.cleared
        self.__init__()  # type: ignore[misc]
        self.version, self.cleared = version + 1, cleared + 1

    def add(self, events: Iterable[StepEvent]) -> None:
        """Append steps."""
        for e in events:
            n_acc = sum(1 for d in e.drafted if d.accepted)
            self.step.append(e.step)
            self.elapsed.append(e.stats.elapsed_s)
            self.generated.append(e.stats.n_generated)
            self.drafted.append(len(e.drafted))
            self.accepted.append(n_acc)
            self.emitted.append(len(e.emitted) + e.stats.n_ended)  # the end token: produced, not emitted
            self.chosen.append(e.n_draft_max)
            if e.probe:
                self.probes.append((e.step, e.n_draft_max))
            if n_acc < len(e.drafted):
                self.rejected_steps += 1
            if e.batch:
                self.batch_ms.setdefault(e.batch, []).append(e.verify_ms)
            self.stats = e.stats
        self.version += 1

    def set_stats(self, stats: RunningStats) -> None:
        """Take the final totals from the finish event."""
        self.stats = stats
        self.version += 1

    @property
    def alpha(self) -> float | None:
        """Estimated per-token acceptance probability α (Leviathan et al.'s model).

        Each step judges its accepted drafts plus, when one was rejected, that one token; tokens after the
        first rejection are never judged. So α = accepted / (accepted + rejections) — the geometric
        maximum-likelihood estimate — rather than accepted / drafted, which would count unjudged tokens
        as failures.
        """
        accepted = sum(self.accepted)
        judged = accepted + self.rejected_steps
        return accepted / judged if judged else None

    @property
    def cost_ratio(self) -> float | None:
        """c: the time to draft one token over the time of one target pass (None before any draft)."""
        stats = self.stats
        if stats is None or not stats.n_drafted or not stats.n_steps or stats.verify_s <= 0:
            return None
        return (stats.draft_s / stats.n_drafted) / (stats.verify_s / stats.n_steps)

    def verify_ms(self, n_max: int) -> tuple[np.ndarray, bool] | None:
        """The verification time in ms of a pass over 1, 2, … ``n_max`` tokens, and whether it is this answer's own.

        Once the answer has timed a plain step and a speculative one: the medians of its passes by size (linear
        between measured sizes, the last measured slope beyond them). Before that, or with a fixed draft length
        (no plain step at all: a tour's Teach curve never appeared): the session's cost model at the answer's start
        (:attr:`costs_ms`, measured at load), scaled to the passes this answer has timed, as a machine's speed
        drifts. ``None`` when neither is known.
        """
        sizes = sorted(self.batch_ms)
        n = np.arange(1, n_max + 1, dtype=float)
        if 1 in self.batch_ms and len(sizes) >= 2:
            return _costs_line(sizes, [float(np.median(self.batch_ms[s])) for s in sizes], n), True
        table = np.asarray(self.costs_ms, dtype=float)
        if len(table) < 2 or not sizes:
            return None
        ratios = [float(np.median(self.batch_ms[s])) / table[s - 1] for s in sizes if s <= len(table) and table[s - 1]]
        scale = float(np.median(ratios)) if ratios else 1.0
        return scale * _costs_line(list(range(1, len(table) + 1)), list(table), n), False

    @property
    def draft_ms(self) -> float:
        """The time to draft one token in this answer, in ms (0 before any draft, and for draft-free sources)."""
        stats = self.stats
        return 1e3 * stats.draft_s / stats.n_drafted if stats is not None and stats.n_drafted else 0.0

    def speedup_curve(self, k_max: int) -> np.ndarray | None:
        """Expected speedup over plain decoding for a fixed draft length ``k = 0..k_max``, from the acceptance α
        this answer measured, its draft time per token, and the verification time of each batch size
        (:meth:`verify_ms`). ``None`` until a speculative step has been timed and the costs are known.

        ``E[tokens | k] = (1 − α^{k+1}) / (1 − α)`` (Leviathan, Kalman & Matias 2023, eq. 1) over
        ``k · draft + verify(k + 1)``, against one token per ``verify(1)``. ``None`` too where a timing of 0 ms
        makes it infinite or undefined.
        """
        alpha = self.alpha
        costs = self.verify_ms(k_max + 1)
        if alpha is None or self.stats is None or costs is None:
            return None
        verify = costs[0]
        k = np.arange(k_max + 1, dtype=float)
        tokens = k + 1.0 if alpha >= 1.0 else (1.0 - alpha ** (k + 1.0)) / (1.0 - alpha)
        with np.errstate(divide="ignore", invalid="ignore"):
            curve = tokens * verify[0] / (k * self.draft_ms + verify)
        # A step timed at 0 ms (a clock too coarse) leaves no curve, rather than NaN points, whose bounds warn from
        # inside Qt's paint (see refresh: under the tests' warnings-as-errors that crashed PySide).
        return curve if np.isfinite(curve).all() else None

    def tokens_per_second(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Time, rolling tokens/s over the last steps, and the running average."""
        t = np.asarray(self.elapsed, dtype=float)
        g = np.asarray(self.generated, dtype=float)
        if len(t) == 0:
            return t, t, t
        # The first token comes with the prompt's evaluation, at time 0 (as RunningStats.tokens_per_second
        # counts it): a first step without a draft has no rate of its own.
        lag = np.maximum(np.arange(len(t)) - ROLLING_STEPS, 0)
        t0 = np.where(np.arange(len(t)) >= ROLLING_STEPS, t[lag], 0.0)
        g0 = np.where(np.arange(len(t)) >= ROLLING_STEPS, g[lag], 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            rolling = np.where((t > t0) & (g > g0), (g - g0) / (t - t0), np.nan)
            average = np.where((t > 0) & (g > 1), (g - 1) / t, np.nan)
        return t, rolling, average

    def acceptance(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step numbers, acceptance per step (NaN without a draft), and the rolling acceptance."""
        x = np.asarray(self.step, dtype=float)
        d = np.asarray(self.drafted, dtype=float)
        a = np.asarray(self.accepted, dtype=float)
        if len(x) == 0:
            return x, x, x
        with np.errstate(divide="ignore", invalid="ignore"):
            per_step = np.where(d > 0, a / d, np.nan)
            kernel = np.ones(ROLLING_STEPS)
            a_sum = np.convolve(a, kernel)[: len(a)]
            d_sum = np.convolve(d, kernel)[: len(d)]
            rolling = np.where(d_sum > 0, a_sum / d_sum, np.nan)
        return x, per_step, rolling

    def per_position(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Draft positions (1-based), the acceptance rate at each, and its samples: the tokens drafted there and
        the tokens accepted."""
        stats = self.stats
        if stats is None or not stats.drafted_by_position:
            return np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0)
        drafted = np.asarray(stats.drafted_by_position, dtype=float)
        accepted = np.asarray(stats.accepted_by_position, dtype=float)
        rate = np.where(drafted > 0, accepted / np.maximum(drafted, 1), 0.0)
        return np.arange(1, len(drafted) + 1, dtype=float), rate, drafted, accepted

    def position_tip(self, position: int) -> str:
        """What the bar at a draft position rests on, for its tooltip."""
        pos, rate, drafted, accepted = self.per_position()
        if not 1 <= position <= len(pos):
            return ""
        i = position - 1
        few = " (too few to go by)" if drafted[i] < FEW_SAMPLES else ""
        return (
            f"Draft position {position}: {accepted[i]:.0f} of {drafted[i]:.0f} drafted tokens accepted "
            f"({100 * rate[i]:.0f}%){few}"
        )


class SolidGridAxis(pg.AxisItem):
    """An axis whose grid lines are solid, in the colour pyqtgraph's translucent ones show over the plot's ground.

    Qt's raster engine draws a translucent line about twenty times slower than a solid one (52 against 2.4 µs
    for a 175-pixel line, measured 2026-12-05), and translucent grid lines were most of what the live charts
    cost the window's thread during an answer (py-spy: ``QRasterPaintEngine::drawPolygon`` under the axes'
    painting). Solid lines drawn over the data would cut through it, so :func:`solid_grid` puts the axes behind
    the plot's view box: the data is drawn over the grid. Where two lines cross, the one drawn last shows (two
    translucent ones darkened each other there): a pixel per crossing.
    """

    _ground: int | None = None  # the RGB the grid lines were blended for

    def paint(self, p: QPainter, opt: object, widget: object) -> None:
        ground = self._ground_colour().rgb()
        if ground != self._ground:  # a new theme: blend again
            if self._ground is not None and (view := self.getViewWidget()) is not None:
                # pyqtgraph's views cache their background: without this the new lines would lie on the old
                # ground until the view is resized (translucent ones blended with whatever was there).
                view.resetCachedContent()
                view.viewport().update()
            self._ground = ground
            self.picture = None
        super().paint(p, opt, widget)

    def generateDrawSpecs(self, p: QPainter) -> tuple | None:
        specs = super().generateDrawSpecs(p)
        if specs is None or self.grid is False:
            return specs
        axis, ticks, texts = specs
        ground = QColor.fromRgb(self._ground if self._ground is not None else self._ground_colour().rgb())
        return axis, [(_solid_pen(pen, ground), a, b) for pen, a, b in ticks], texts

    def _ground_colour(self) -> QColor:
        """The colour the plot is painted on: its view's background brush, or the window's colour behind it."""
        view = self.getViewWidget()
        if view is None:
            return QColor("white")
        brush = view.backgroundBrush()
        if brush.style() == Qt.BrushStyle.SolidPattern and brush.color().alpha() == 255:
            return brush.color()
        return view.palette().color(QPalette.ColorRole.Window)  # no brush of one colour: the window shows


def _solid_pen(pen: QPen, ground: QColor) -> QPen:
    """``pen`` made opaque in the colour it shows over ``ground``."""
    colour = pen.color()
    a = colour.alphaF()
    if a >= 1.0:
        return pen
    out = QPen(pen)
    out.setColor(
        QColor.fromRgbF(
            colour.redF() * a + ground.redF() * (1 - a),
            colour.greenF() * a + ground.greenF() * (1 - a),
            colour.blueF() * a + ground.blueF() * (1 - a),
        )
    )
    return out


def solid_grid_axes() -> dict[str, pg.AxisItem]:
    """Left and bottom axes for a new plot (``axisItems=``) whose grid :func:`solid_grid` shows (axes given
    there are shown, so the hidden right and top ones stay pyqtgraph's)."""
    return {"left": SolidGridAxis("left"), "bottom": SolidGridAxis("bottom")}


def solid_grid(plot: pg.PlotItem, x: bool = True, y: bool = True, alpha: float = 0.25) -> None:
    """Show ``plot``'s grid (its axes made by :func:`solid_grid_axes`) in solid lines behind its data. A view box
    given a background colour of its own would hide it."""
    plot.showGrid(x=x, y=y, alpha=alpha)
    for side in ("left", "bottom", "right", "top"):
        axis = plot.getAxis(side)
        if isinstance(axis, SolidGridAxis):
            axis.setZValue(plot.getViewBox().zValue() - 1)
        else:  # no translucent lines over the data should a hidden axis be shown
            axis.setGrid(False)


def _plot(layout: pg.GraphicsLayoutWidget, row: int, col: int, title: str, left: str, bottom: str) -> pg.PlotItem:
    plot = layout.addPlot(row=row, col=col, title=title, axisItems=solid_grid_axes())
    plot.setLabel("left", left)
    plot.setLabel("bottom", bottom)
    for side in ("left", "bottom"):
        plot.getAxis(side).enableAutoSIPrefix(False)  # "0.2 seconds", never "200 seconds (x0.001)"
    solid_grid(plot)
    plot.setMenuEnabled(False)
    plot.setClipToView(True)
    plot.setDownsampling(auto=True, mode="peak")
    # Seconds, steps, positions and lengths are never negative: no padding below zero on either axis.
    plot.getViewBox().setLimits(xMin=0, yMin=0)
    return plot


def _title(text: str, *keys: tuple[str, str]) -> str:
    """A plot title that names its curves in their colours (a legend inside the plot would hide data)."""
    names = ", ".join(f"<span style='color:{colour}'>{name}</span>" for name, colour in keys)
    return f"{text}<br><span style='font-size:8pt'>{names}</span>" if keys else text


def integer_tick_step(span: float, max_ticks: int = 8) -> int:
    """A whole-number tick spacing that fits ``span`` in at most ``max_ticks`` ticks (1, 2, 5, 10, 20...)."""
    step = 1
    while span / step > max_ticks:
        for factor in (2, 5 / 2, 2):
            step = int(step * factor)
            if span / step <= max_ticks:
                break
    return step


# Range ends the growing axes snap to, times a power of ten: consecutive ends differ by at most a third.
NICE_ENDS = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)


def nice_end(value: float) -> float:
    """The smallest of :data:`NICE_ENDS` (times a power of ten) at or above ``value`` (1 for nothing to show)."""
    if not math.isfinite(value) or value <= 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(value))
    return next(round(end * scale, 12) for end in NICE_ENDS if end * scale >= value * (1 - 1e-12))


def set_tick_spacing(axis: pg.AxisItem, major: float, minor: float) -> None:
    """``axis.setTickSpacing(major, minor)`` where that changes something: pyqtgraph draws the axis and its grid
    lines again at every call, and the charts asked at every refresh (a third of their processor time)."""
    if getattr(axis, "_tickSpacing", None) != [(major, 0.0), (minor, 0.0)]:
        axis.setTickSpacing(major, minor)


def paint_budget(threads: int = 0) -> float:
    """The share of a core the live charts may take: :data:`PAINT_BUDGET` where the engine leaves the window a core,
    :data:`PAINT_BUDGET_NO_SPARE_CORE` where llama.cpp's threads take them all (``threads``: the setting, 0 for
    the automatic count, :func:`~speculens.ui.worker.gui_threads`)."""
    from speculens.engine.backend import default_threads
    from speculens.ui.worker import gui_threads

    return PAINT_BUDGET if (threads or gui_threads()) < default_threads() else PAINT_BUDGET_NO_SPARE_CORE


class _TimedGraphics(pg.GraphicsLayoutWidget):
    """The plots' view, keeping the processor time it has spent painting (see :func:`paint_budget`): CPU time,
    not wall time, which would count the moments llama.cpp's threads held the core as painting."""

    painted = 0.0

    def paintEvent(self, event: QPaintEvent) -> None:
        t0 = time.thread_time()
        super().paintEvent(event)
        self.painted += time.thread_time() - t0


class ChartsPanel(QWidget):
    """Four live plots: tokens/s over time, acceptance per step, the draft length chosen and the tokens won
    per step, acceptance by draft position.

    Args:
        series: the data to draw.
        parent: the Qt parent.
        columns: plots in a row (the window's: all four; an exported slide's: two, see :meth:`grab_png`).
    """

    def __init__(self, series: RunSeries, parent: QWidget | None = None, columns: int = 4) -> None:
        super().__init__(parent)
        self.series = series
        self._drawn = -1
        self._cleared = 0  # the series' clear the ranges are fitted to
        # Antialiased lines cost several times more to paint in software, and the engine wants every core.
        pg.setConfigOptions(antialias=False)
        self.graphics = _TimedGraphics(self)
        # A click gives it the keys; Tab passes it by (a keyboard tour's Tab landed in it and seemed stuck).
        self.graphics.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.graphics.setAccessibleName("Speculation charts")
        self.graphics.setBackground(None)  # follow the window palette (light or dark)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.graphics)

        self.speed_plot = _plot(
            self.graphics,
            *divmod(0, columns),
            _title("Tokens/s over time", ("rolling", "#3884ff"), ("average", "#9467bd")),
            "tokens/s",
            "seconds",
        )
        # A lone rate is drawn as a point in the line's colour (see refresh).
        self.speed_rolling = self.speed_plot.plot(
            pen=pg.mkPen("#3884ff", width=2), symbolBrush="#3884ff", symbolPen=None, name="rolling"
        )
        self.speed_average = self.speed_plot.plot(
            pen=pg.mkPen("#9467bd", width=2, style=pg.QtCore.Qt.PenStyle.DashLine),
            symbolBrush="#9467bd",
            symbolPen=None,
            name="average",
        )

        self.accept_plot = _plot(
            self.graphics,
            *divmod(1, columns),
            _title("Acceptance per step", ("per step", "#2ea043"), ("rolling", "#2ea043")),
            "rate",
            "step",
        )
        self.accept_plot.setYRange(0, RATE_TOP)
        self.accept_step = self.accept_plot.plot(
            pen=None,
            symbol="o",
            symbolSize=4,
            symbolBrush=(46, 160, 67, 140),
            symbolPen=None,
            name="per step",
        )
        self.accept_rolling = self.accept_plot.plot(pen=pg.mkPen("#2ea043", width=2), name="rolling")

        self.length_plot = _plot(
            self.graphics,
            *divmod(2, columns),
            _title(
                "Draft length, tokens per pass",
                ("tokens per pass", "#3884ff"),
                ("draft length chosen", "#d29922"),
                ("▲ probe", "#d29922"),
            ),
            "tokens",
            "step",
        )
        # Filled lines, not stepMode="center": pyqtgraph's downsampling and clip-to-view break the step
        # curve's len(x) == len(y) + 1 invariant once a long answer has thousands of steps.
        self.length_curve = self.length_plot.plot(
            fillLevel=0, brush=(56, 132, 255, 80), pen=pg.mkPen("#3884ff"), name="tokens per pass"
        )
        self.chosen_curve = self.length_plot.plot(pen=pg.mkPen("#d29922", width=2), name="draft length chosen")
        self.probe_marks = self.length_plot.plot(
            pen=None, symbol="t1", symbolSize=7, symbolBrush="#d29922", symbolPen=None, name="probe"
        )

        self.position_plot = _plot(
            self.graphics, *divmod(3, columns), "Acceptance by position", "rate", "position in the draft"
        )
        self.position_plot.setYRange(0, RATE_TOP)
        for plot in (self.accept_plot, self.position_plot):  # rates: a zoom out cannot show 2.8 (a tour's)
            plot.getViewBox().setLimits(yMax=RATE_TOP)
        self.position_bars = pg.BarGraphItem(x=[], height=[], width=0.7, brush=(*BAR_GREEN, 170))
        self.position_plot.addItem(self.position_bars)
        # A plot the user zoomed or panned keeps its view until the next answer, or its "A" button (see _follow).
        self._zoomed: set[pg.PlotItem] = set()
        for plot in (self.speed_plot, self.accept_plot, self.length_plot, self.position_plot):
            plot.getViewBox().sigRangeChangedManually.connect(lambda *_a, plot=plot: self._zoomed.add(plot))
        # Whole-number ticks spaced for what a plot shows, whoever changed it: spaced for a zoom into ten steps, the
        # same ticks over 500 steps after zooming out were a smear of digits (a review's).
        for plot in (self.accept_plot, self.length_plot, self.position_plot):
            plot.getViewBox().sigRangeChanged.connect(lambda *_a, plot=plot: self._space_ticks(plot))
        # How many tokens each bar rests on, under the pointer (a tour could not tell 1 of 1 from 90 of 90).
        self.graphics.scene().sigMouseMoved.connect(self._on_scene_mouse_moved)

        # As wide as the plots' titles and axes need (a view does not pass its scene's minimum on): a narrower
        # window scrolls the charts sideways (see main_window) where it cut the last plot off.
        self.setMinimumWidth(math.ceil(self.graphics.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()) + 2)
        self._next_refresh = 0.0
        self._painted = 0.0  # the plots' painting time up to the last refresh
        self.budget = paint_budget()
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self._on_timer_timeout)
        self._timer.start()

    def refresh(self) -> None:
        """Redraw from the series now, if it changed since the last redraw."""
        if self.series.version == self._drawn:
            return
        self._drawn = self.series.version
        t, rolling, average = self.series.tokens_per_second()
        for curve, values in ((self.speed_rolling, rolling), (self.speed_average, average)):
            finite = np.isfinite(values)
            if np.count_nonzero(finite) == 1:
                # One rate is a point, which a line cannot draw: a tour's answer of two passes (lookup copied the
                # rest in one) showed an empty chart under "7.4 tokens/s". The point goes alone, with its symbol in
                # the same call: a scatter handed NaNs (the next answer's first step, before its symbol went)
                # warned from inside Qt's call of its boundingRect(), and under the tests' warnings-as-errors that
                # exception crashed PySide (a method freed while in use, in 1 of 5 runs of a test file).
                curve.setData(t[finite], values[finite], symbol="o")
            else:
                curve.setData(t, values, connect="finite", symbol=None)
        x, per_step, rolling_acc = self.series.acceptance()
        finite = np.isfinite(per_step)
        self.accept_step.setData(x[finite], per_step[finite])
        self.accept_rolling.setData(x, rolling_acc, connect="finite")
        self.length_curve.setData(x, np.asarray(self.series.emitted, dtype=float))
        chosen = np.asarray(self.series.chosen, dtype=float)
        self.chosen_curve.setData(x, chosen)
        probes = np.asarray(self.series.probes, dtype=float).reshape(-1, 2)
        self.probe_marks.setData(probes[:, 0], probes[:, 1])
        pos, rate, drafted, _accepted = self.series.per_position()
        self.position_bars.setOpts(
            x=pos, height=rate, brushes=[pg.mkBrush(*BAR_GREEN, 170 if n >= FEW_SAMPLES else 60) for n in drafted]
        )
        # No answer (a new chat), or a new one at its first redraw (a tour saw step 1 drawn on the last answer's
        # 140 steps and 6 s, in step mode): the last answer's scales go with its data, and so does a zoom of it.
        if not len(x) or self.series.cleared != self._cleared:
            self._cleared = self.series.cleared
            self._zoomed.clear()
        # The growing axes end on round numbers (nice_end), a little past the data: pyqtgraph draws an axis and
        # its grid again whenever its range changes, which autoranging did at every refresh (most of the charts'
        # processor time), and these change a dozen times in an answer. Rates from zero: from the answer's lowest
        # rate, a swing of 1 token/s filled the plot (a tour's finding).
        rates = np.concatenate([rolling, average])
        rates = rates[np.isfinite(rates)]
        steps = nice_end(1.02 * float(x[-1])) if len(x) else 1.0
        top = max(float(np.max(chosen, initial=0)), float(np.max(self.series.emitted, initial=0)))
        first = float(x[0]) if len(x) else 0.0
        self._follow(
            self.speed_plot,
            nice_end(1.02 * float(t[-1])) if len(t) else 1.0,
            nice_end(1.05 * float(rates.max())) if rates.size else 1.0,
            (float(t[0]), float(t[-1]), float(rates.min()), float(rates.max())) if rates.size else None,
        )
        self._follow(self.accept_plot, steps, RATE_TOP, (first, float(x[-1]), 0.0, 1.0) if len(x) else None)
        self._follow(
            self.length_plot, steps, nice_end(1.05 * max(top, 1.0)), (first, float(x[-1]), 0.0, top) if len(x) else None
        )
        # At least a few positions wide: one drafted position's bar filled the whole plot (a tour's).
        self._follow(
            self.position_plot,
            nice_end(max(len(pos), MIN_POSITIONS) + 0.5),
            RATE_TOP,
            (1.0, float(len(pos)), 0.0, 1.0) if len(pos) else None,
        )
        for plot in (self.accept_plot, self.length_plot, self.position_plot):
            self._space_ticks(plot)

    def _follow(
        self,
        plot: pg.PlotItem,
        x_end: float,
        y_end: float,
        data: tuple[float, float, float, float] | None = None,
    ) -> None:
        """Show ``plot`` from 0 to ``x_end`` and ``y_end``, unless the user zoomed or panned it in this answer and
        the view still shows some of the ``data`` (its x and y bounds) and has not been given back with the plot's
        "A" (auto-range) button: a tour zoomed a chart still empty at the start of an answer, and the whole answer
        came out of view. Setting a range it already shows would draw its axes again."""
        box = plot.getViewBox()
        auto = box.autoRangeEnabled()
        (x0, x1), (y0, y1) = box.viewRange()
        if plot in self._zoomed:
            shows_data = data is None or (x0 <= data[1] and x1 >= data[0] and y0 <= data[3] and y1 >= data[2])
            if shows_data and not any(auto):
                return
            self._zoomed.discard(plot)  # "A", or a view of nothing: follow the answer again
        if (x0, x1) != (0, x_end) or auto[0]:
            plot.setXRange(0, x_end, padding=0)
        if (y0, y1) != (0, y_end) or auto[1]:
            plot.setYRange(0, y_end, padding=0)

    def _space_ticks(self, plot: pg.PlotItem) -> None:
        """Whole numbers on the axes that count things (steps, positions, tokens), spaced for what ``plot`` shows:
        a view that kept the last answer's range with no data of its own (the position plot when nothing was
        drafted) read 1…34 one unit apart, a smear of digits (a tour's)."""
        (x0, x1), (y0, y1) = plot.getViewBox().viewRange()
        set_tick_spacing(plot.getAxis("bottom"), integer_tick_step(max(x1 - x0, 1.0)), 1)
        if plot is self.length_plot:
            set_tick_spacing(plot.getAxis("left"), integer_tick_step(max(y1 - y0, 1.0), 6), 1)

    def _on_scene_mouse_moved(self, point: object) -> None:
        plot = self.position_plot
        tip = ""
        if plot.sceneBoundingRect().contains(point):
            x = plot.getViewBox().mapSceneToView(point).x()
            tip = self.series.position_tip(round(x))
        self.graphics.setToolTip(tip)

    def _on_timer_timeout(self) -> None:
        # Hidden plots (a closed dock) skip the work; they catch up when shown.
        if not self.isVisible() or self.series.version == self._drawn:
            return
        now = time.perf_counter()
        if now < self._next_refresh:
            return
        t0, before = time.thread_time(), self.graphics.painted
        self.refresh()
        # The refresh counts whole, handing the plots their data (pyqtgraph's setData and ranges) as well as
        # painting them: only painting was counted, and py-spy found the charts' timer (setData and ranges) at
        # 38 of 142 samples of the GUI thread during an answer, beside painting's 42 (2026-12-05). So does every
        # paint since the last refresh: Qt paints the new data once, at its next idle moment (a repaint() here
        # painted it twice, once now and once for the scene's own update), and it counts at the next refresh.
        # The next refresh waits until they fit the budget.
        cost = time.thread_time() - t0 + before - self._painted
        self._painted = self.graphics.painted
        self._next_refresh = now + max(REFRESH_MS / 1000, cost / self.budget)

    def grab_png(self, caption: str = "") -> QPixmap:
        """The plots as an image for a slide or a report: two by two, :data:`SLIDE` points in all with ``caption``
        above them (see :func:`captioned`), at :data:`EXPORT_SCALE` pixels a point or the screen's ratio if more.
        Drawn by a copy of the panel laid out for it, off screen, showing the whole answer (a zoom of the window's plots
        is not exported): the window's stays as it is."""
        ratio = max(EXPORT_SCALE, self.graphics.devicePixelRatioF())
        width, height = SLIDE
        band = math.ceil(caption_height(caption, round(width * ratio), ratio) / ratio)  # whole points: exact size
        slide = ChartsPanel(self.series, columns=2)
        try:
            slide._timer.stop()
            slide.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen)
            slide.setAttribute(Qt.WidgetAttribute.WA_QuitOnClose, False)  # no "last window closed" for it
            slide.resize(width, height - band)
            slide.show()  # laid out, never on screen
            slide.refresh()
            view = slide.graphics
            picture = QPixmap(view.size() * ratio)
            picture.setDevicePixelRatio(ratio)
            picture.fill(self.graphics.palette().color(self.graphics.backgroundRole()))
            QWidget.render(view, picture)  # the widget's own render: QGraphicsView's paints a scene rect into a painter
        finally:
            # Deleted now: its signals' closures hold it in reference cycles, and a copy left to Python's collector
            # was destroyed after the application at exit, which crashed (CI's test run ended in a segfault).
            slide.hide()
            shiboken6.delete(slide)
        return captioned(picture, caption, round(band * ratio))


def _caption_font(ratio: float) -> QFont:
    font = QFont()  # the application's, scaled to a picture of ``ratio`` pixels a point
    if font.pointSizeF() > 0:
        font.setPointSizeF(font.pointSizeF() * ratio)
    return font


CAPTION_MARGIN = 8


def caption_height(caption: str, width: int, ratio: float) -> int:
    """The height in pixels of the band :func:`captioned` puts ``caption`` in, over a picture ``width`` pixels wide
    at ``ratio`` pixels a point (0 without a caption)."""
    if not caption:
        return 0
    room = QRect(0, 0, max(width - 2 * CAPTION_MARGIN, 1), 10_000)
    text = QFontMetrics(_caption_font(ratio)).boundingRect(room, int(Qt.TextFlag.TextWordWrap), caption)
    return text.height() + 2 * CAPTION_MARGIN


def captioned(picture: QPixmap, caption: str, height: int | None = None) -> QPixmap:
    """``picture`` under a white band holding ``caption``, wrapped to its width: an exported chart says what it
    measured (models, strategy, when), which a tour found missing from a PNG read later or by someone else. The band
    is ``height`` pixels high, at least the caption's (:func:`caption_height`)."""
    if not caption:
        return picture
    shot = picture.toImage()
    ratio = shot.devicePixelRatio()  # drawn in the picture's own pixels, the caption's font scaled to match
    shot.setDevicePixelRatio(1.0)
    margin = CAPTION_MARGIN
    height = max(height or 0, caption_height(caption, shot.width(), ratio))
    font = _caption_font(ratio)
    image = QImage(shot.width(), shot.height() + height, QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    painter.setFont(font)
    painter.setPen(QColor(60, 60, 60))
    painter.drawText(
        QRect(margin, margin, max(shot.width() - 2 * margin, 1), height - 2 * margin), int(Qt.TextFlag.TextWordWrap),
        caption,
    )
    painter.drawImage(0, height, shot)
    painter.end()
    return QPixmap.fromImage(image)
