"""The pictures of a status, drawn: the loss (and learning-rate) curve with its time panel, and the
per-GPU utilisation strip, as PNG bytes.

What each picture shows is decided in `workers/render/chart_model.py` (data a test can read);
this module only draws that model, with matplotlib's Agg backend (no display, no GUI toolkit) at
100 dpi: 900 px wide, with text large enough that Slack's preview (about 360 px wide in a thread)
still reads — axes labelled, units named, nothing rotated. matplotlib is imported only when a
chart is drawn: a status without one, and the card renderer, never load it.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from workers.diagnosis.models import Diagnosis, ProgressTimeline

from .chart_model import (
    DRAWABLE_LIMIT,
    GpuStrip,
    LossChart,
    TimeMarks,
    chart_filename,
    drawable,
    gpu_strip_model,
    label,
    left_out,
    loss_chart_model,
    status_loss_chart,
    x_label,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 100
LISTED = 5  # the left-out values named in the thread line; the rest are counted
LOSS_BLUE, LR_RED, STALL_RED, GREY = "#1f77b4", "#d62728", "#c0392b", "#555555"
BUSY_GREEN, LOW_ORANGE, MISSING_GREY = "#2ca02c", "#ff7f0e", "#c8c8c8"


def _pyplot():  # noqa: ANN202 - matplotlib.pyplot, loaded on first use
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 14, "axes.titlesize": 17, "axes.labelsize": 15,
                         "xtick.labelsize": 14, "ytick.labelsize": 14, "legend.fontsize": 13})
    return plt


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes at its own size (900 px wide), and the figure closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    _pyplot().close(fig)
    return buf.getvalue()


def number_text(x: float) -> str:
    """A left-out value as a log writes it: `nan`, `inf`, `-inf`, `1.7e308`."""
    return repr(float(x)).replace("e+", "e")


def left_out_text(what: str, values: Sequence[float], *, drawn: bool = True) -> str:
    """`The loss curve left out 3 values it cannot draw (nan, inf, 1.7e308).` — empty when none
    were; ``drawn=False`` adds that too few were left to draw it."""
    if not values:
        return ""
    listed = ", ".join(number_text(v) for v in values[:LISTED])
    more = f" and {len(values) - LISTED} more" if len(values) > LISTED else ""
    noun = "value" if len(values) == 1 else "values"
    tail = "" if drawn else "; too few values were left to draw it"
    return f"The {what} left out {len(values)} {noun} it cannot draw ({listed}{more}){tail}."


# --------------------------------------------------------------------------- the loss chart


def _time_panel(ax: Axes, t: TimeMarks) -> None:
    """Progress against wall-clock time, the last progress line and `now` as vertical lines, the
    gap between them shaded and said in the panel's title."""
    import matplotlib.dates as mdates

    stall_colour = STALL_RED if t.stalled else GREY
    if t.points:
        ax.plot([at for at, _ in t.points], [y for _, y in t.points], color=LOSS_BLUE, linewidth=2,
                marker="o" if len(t.points) < 40 else None)
        ax.set_ylabel(t.y_label)
    else:
        ax.set_yticks([])
    if t.last_progress_at is not None:
        ax.axvline(t.last_progress_at, color=GREY, linestyle="--", linewidth=1.5, label=t.last_label)
        if t.now > t.last_progress_at:
            ax.axvspan(t.last_progress_at, t.now, color=stall_colour, alpha=0.15 if t.stalled else 0.08)
    ax.axvline(t.now, color=stall_colour, linewidth=2.5,
               label=f"now {t.now.strftime('%H:%M UTC')}")
    times = [at for at, _ in t.points] + [t.now] + ([t.last_progress_at] if t.last_progress_at else [])
    start, end = min(times), max(times)
    pad = max((end - start) * 0.03, timedelta(seconds=30))
    ax.set_xlim(start - pad, end + pad)
    locator = mdates.AutoDateLocator(tz=UTC, minticks=3, maxticks=6)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=UTC))
    ax.set_xlabel("time (UTC)")
    ax.set_title(t.gap_text or "progress over time", loc="left", color=stall_colour,
                 fontweight="bold" if t.stalled else "normal")
    # Steps rise to the right and a loss falls: the corner each leaves free for the legend.
    ax.legend(loc="lower right" if t.y_label == "step" else "upper right", framealpha=0.9)
    ax.grid(True, alpha=0.3)


def loss_figure(chart: LossChart) -> Figure:
    """The loss chart's figure, not yet saved: the loss by step above; the learning rate beneath on
    the same step axis; the time panel at the bottom (or, without one, the x label says why)."""
    plt = _pyplot()
    width, height = chart.size
    panels = (chart.loss is not None) + (chart.lr is not None) + (chart.time is not None)
    fig = plt.figure(figsize=(width / DPI, height / DPI), layout="constrained")
    axes = fig.subplots(panels, 1, squeeze=False,
                        height_ratios=[5] + [3] * (panels - 1))[:, 0]
    if chart.time is not None:
        _time_panel(axes[-1], chart.time)
    loss = chart.loss
    if loss is None:  # steps but no loss: the time panel is the picture
        fig.suptitle(chart.title, fontsize=17)
        return fig
    ax = axes[0]
    ax.plot(loss.xs, loss.ys, color=LOSS_BLUE, linewidth=2, marker="o" if len(loss.xs) < 40 else None)
    ax.set_title(chart.title)
    ax.set_ylabel("loss (as logged, unitless)")
    ax.grid(True, alpha=0.3)
    note = f"\n({chart.time_note})" if chart.time_note else ""
    if chart.lr is not None:
        lr_ax = axes[1]
        if chart.shared_step_axis:  # one step axis, labelled once beneath the learning rate
            lr_ax.sharex(ax)
            ax.tick_params(labelbottom=False)
        else:
            ax.set_xlabel(x_label(loss))
        lr = chart.lr
        lr_ax.plot(lr.xs, lr.ys, color=LR_RED, linewidth=2, marker="o" if len(lr.xs) < 40 else None)
        lr_ax.set_xlabel(x_label(lr) + note)
        lr_ax.set_ylabel("learning rate")
        lr_ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
        lr_ax.grid(True, alpha=0.3)
    else:
        ax.set_xlabel(x_label(loss) + note)
    return fig


def loss_chart(curve: Sequence[tuple[float | None, float]], run: str,
               lr_curve: Sequence[tuple[float | None, float]] = (), *,
               timeline: ProgressTimeline | None = None, now: datetime | None = None,
               stalled: bool = False) -> bytes | None:
    """The loss chart as PNG bytes (`loss_chart_model`), None with fewer than two drawable loss
    points. What cannot be drawn (NaN, ±inf, beyond ±1e100) is left out, never drawn or raised
    on. 900×450 px for the loss alone, 270 px more for each of the learning rate and the time
    panel (which needs ``now`` and a timeline)."""
    chart = loss_chart_model(curve, run, lr=lr_curve, timeline=timeline, now=now, stalled=stalled)
    return None if chart is None else png(loss_figure(chart))


# --------------------------------------------------------------------------- the GPU strip

GROUP_GAP = 0.8  # the space between two nodes' bars, in bar widths


def bar_positions(strip: GpuStrip) -> list[float]:
    """The x of each bar: consecutive within a node, a gap between nodes."""
    group_of = {i: g for g, group in enumerate(strip.groups) for i in range(group.first, group.last + 1)}
    return [i + GROUP_GAP * group_of.get(i, 0) for i in range(len(strip.bars))]


def gpu_figure(strip: GpuStrip) -> Figure:
    """The strip's figure, not yet saved: one bar per GPU, a GPU without data hatched to the top
    and labelled `no data` (grey when it sent no sample at all), never drawn as 0 %; GPU indices
    under the bars and each node's short name, horizontal, under its group."""
    plt = _pyplot()
    width, height = strip.size
    fig, ax = plt.subplots(figsize=(width / DPI, height / DPI), layout="constrained")
    xs = bar_positions(strip)
    heights = [b.utilization if b.utilization is not None else 100.0 for b in strip.bars]
    colours = [MISSING_GREY if b.state == "missing" else "white" if b.state == "no data"
               else BUSY_GREEN if (b.utilization or 0) >= 50 else LOW_ORANGE for b in strip.bars]
    bars = ax.bar(xs, heights, width=0.85, color=colours, edgecolor="#444444")
    narrow = len(strip.bars) > 6  # `no data` fits across a bar only when the bars are few
    for patch, bar, x in zip(bars, strip.bars, xs, strict=True):
        if bar.state != "measured":
            patch.set_hatch("//")
            ax.text(x, 50, "no data", ha="center", va="center", rotation=90 if narrow else 0,
                    fontsize=15, color="#222222",
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1.5})
    ax.set_ylim(0, 100)
    ax.set_title(strip.title, fontsize=20)
    ax.set_ylabel("utilisation (%)", fontsize=16)
    ax.tick_params(axis="y", labelsize=16)
    ax.set_xticks(xs, [b.index_text for b in strip.bars] if strip.index_labels else [""] * len(xs),
                  fontsize=17)
    ax.set_xlim(min(xs) - 0.7, max(xs) + 0.7)
    if any(g.label for g in strip.groups):
        centres = [(xs[g.first] + xs[g.last]) / 2 for g in strip.groups]
        nodes = ax.secondary_xaxis("bottom")
        nodes.set_xticks(centres, [g.label for g in strip.groups], fontsize=17)
        nodes.tick_params(length=0, pad=28 if strip.index_labels else 6)
        nodes.spines["bottom"].set_visible(False)
        nodes.set_xlabel(strip.x_label, fontsize=15)  # beneath the node names, not across them
        for before, after in zip(strip.groups, strip.groups[1:], strict=False):
            ax.axvline((xs[before.last] + xs[after.first]) / 2, color="#888888", linewidth=1)
    else:
        ax.set_xlabel(strip.x_label, fontsize=15)
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def gpu_strip(utilization: Mapping[str, float | None], run: str, *,
              held: Mapping[str, int] | None = None,
              capacity: Mapping[str, int] | None = None) -> bytes | None:
    """The strip as PNG bytes (`gpu_strip_model`), 900×450 px; None without GPUs."""
    strip = gpu_strip_model(utilization, run, held=held, capacity=capacity)
    return None if strip is None else png(gpu_figure(strip))


# --------------------------------------------------------------------------- a status's pictures


@dataclass(frozen=True)
class Picture:
    """One picture of a status: what it is, its file name, what it shows (``model``, decided
    without matplotlib), how to draw it (only when called: the card does not wait for
    matplotlib), and the values its curves leave out (which curve, which values)."""

    what: str
    filename: str
    model: LossChart | GpuStrip | None
    draw: Callable[[], bytes | None]
    left_out: list[tuple[str, list[float]]]

    def left_out_notes(self, *, drawn: bool) -> list[str]:
        """The thread's lines naming the values left out (`left_out_text`); a curve the picture
        does not draw (too few values left, or the picture not ``drawn``) says so too."""
        shown = self.model.curves_drawn if drawn and isinstance(self.model, LossChart) else frozenset()
        return [text for curve, values in self.left_out
                if (text := left_out_text(curve, values, drawn=curve in shown))]


def status_pictures(d: Diagnosis, now: datetime, *, utilization: Mapping[str, float | None] | None = None,
                    held: Mapping[str, int] | None = None,
                    capacity: Mapping[str, int] | None = None) -> list[Picture]:
    """The loss curve (the learning rate beneath it when the log gives one, the time panel when its
    lines carry times) and, with the run profile's ``utilization``, the per-GPU strip."""
    run = d.run.name
    omitted = [("loss curve", left_out(d.loss_curve)), ("learning-rate curve", left_out(d.lr_curve))]
    chart = status_loss_chart(d, now)
    what = chart.what if chart is not None else "loss curve"
    out = [Picture(what, chart_filename(run, what.split()[0], now), chart,
                   lambda: None if chart is None else png(loss_figure(chart)),
                   [(curve, values) for curve, values in omitted if values])]
    if utilization is not None:
        strip = gpu_strip_model(utilization, run, held=held, capacity=capacity)
        out.append(Picture("GPU utilisation strip", chart_filename(run, "gpus", now), strip,
                           lambda: None if strip is None else png(gpu_figure(strip)), []))
    return out


__all__ = ["DRAWABLE_LIMIT", "Picture", "bar_positions", "drawable", "gpu_figure", "gpu_strip", "label",
           "left_out", "left_out_text", "loss_chart", "loss_figure", "number_text", "png", "status_pictures"]
