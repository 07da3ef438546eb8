"""The pictures of a status: the loss (and learning-rate) curve and the per-GPU utilisation strip,
as PNG bytes.

Drawn with matplotlib's Agg backend (no display, no GUI toolkit) at 900×450 px with 13–15 pt
text, so Slack's preview (about 360 px wide in a thread) still reads; axes are labelled and
units named. matplotlib is imported only when a chart is drawn: a status without one, and the
card renderer, never load it.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence

from workers.outside.text import outside

WIDTH_IN, HEIGHT_IN, DPI = 9.0, 4.5, 100
LR_HEIGHT_IN = 7.2  # loss above, learning rate below
MIN_POINTS = 2
# Beyond this a value is drawn as nothing useful: matplotlib's axis and tick arithmetic overflows
# (`ValueError: arange: cannot compute length` at 1.7e308) long before a float does (SPEC §11).
DRAWABLE_LIMIT = 1e100
LISTED = 5  # the left-out values named in the thread line; the rest are counted


def _pyplot():  # noqa: ANN202 - matplotlib.pyplot, loaded on first use
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 13, "axes.titlesize": 15, "axes.labelsize": 14})
    return plt


def _png(fig) -> bytes:  # noqa: ANN001 - a matplotlib Figure
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    fig.clf()
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def drawable(x: float | None) -> bool:
    """A number a chart can draw: finite and within ±`DRAWABLE_LIMIT`."""
    return x is not None and math.isfinite(x) and abs(x) <= DRAWABLE_LIMIT


def _point_drawable(step: float | None, value: float) -> bool:
    return drawable(value) and (step is None or drawable(step))


def left_out(curve: Sequence[tuple[float | None, float]]) -> list[float]:
    """The values of a curve a chart leaves out (NaN, ±inf, beyond ±1e100, or at such a step)."""
    return [v for s, v in curve if not _point_drawable(s, v)]


def label(text: object, limit: int = 80) -> str:
    """Outside text as a chart label: through the door (stripped, redacted, clipped), with
    matplotlib's mathtext marker disarmed (a `$` pair in a node name would be parsed as TeX)."""
    return outside(text, limit, keep_newlines=False).replace("$", r"\$")


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


def _series(curve: Sequence[tuple[float | None, float]]) -> tuple[list[float], list[float], bool]:
    """(xs, ys, by_step) of a curve's drawable points (`drawable`): x is the step, or the line's
    order when any point has no step."""
    points = [(s, v) for s, v in curve if _point_drawable(s, v)]
    by_step = bool(points) and all(s is not None for s, _ in points)
    xs = [float(s) if by_step and s is not None else float(i + 1) for i, (s, _) in enumerate(points)]
    return xs, [v for _, v in points], by_step


def _x_label(by_step: bool) -> str:
    return "training step" if by_step else "progress line (the log gives no step)"


def loss_chart(curve: Sequence[tuple[float | None, float]], run: str,
               lr_curve: Sequence[tuple[float | None, float]] = ()) -> bytes | None:
    """The loss against the training step (or the progress line's order when the lines give no
    step), and beneath it, on the same step axis, the learning rate the same lines state; None
    with fewer than two drawable loss points — a single point is no curve. What cannot be drawn
    (NaN, ±inf, beyond ±1e100: `left_out`) is left out, never drawn or raised on. 900×450 px for the loss
    alone, 900×720 with the learning rate (each panel keeps Slack-preview-readable text)."""
    xs, losses, by_step = _series(curve)
    if len(xs) < MIN_POINTS:
        return None
    lr_xs, rates, lr_by_step = _series(lr_curve)
    with_lr = len(lr_xs) >= MIN_POINTS
    plt = _pyplot()
    if with_lr:
        fig, (ax, lr_ax) = plt.subplots(2, 1, figsize=(WIDTH_IN, LR_HEIGHT_IN), layout="constrained",
                                        sharex=by_step and lr_by_step)
    else:
        fig, ax = plt.subplots(figsize=(WIDTH_IN, HEIGHT_IN), layout="constrained")
    ax.plot(xs, losses, color="#1f77b4", linewidth=2, marker="o" if len(xs) < 40 else None)
    ax.set_title(f"{label(run)}: training loss" + (" and learning rate" if with_lr else ""))
    shared = with_lr and by_step and lr_by_step
    if not shared:  # a shared step axis is labelled once, beneath the learning rate
        ax.set_xlabel(_x_label(by_step))
    ax.set_ylabel("loss (as logged, unitless)")
    ax.grid(True, alpha=0.3)
    if with_lr:
        lr_ax.plot(lr_xs, rates, color="#d62728", linewidth=2, marker="o" if len(lr_xs) < 40 else None)
        lr_ax.set_xlabel(_x_label(lr_by_step))
        lr_ax.set_ylabel("learning rate (per step, unitless)")
        lr_ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
        lr_ax.grid(True, alpha=0.3)
    return _png(fig)


def gpu_strip(utilization: Mapping[str, float | None], run: str) -> bytes | None:
    """One bar per GPU (its utilisation in %, DCGM_FI_DEV_GPU_UTIL at the scrape); a GPU that
    reported no value (or one no bar can draw: NaN, ±inf) is drawn hatched as `no data`, never as
    0 %. None without GPUs."""
    if not utilization:
        return None
    names = [label(n, 40) for n in utilization]
    values = list(utilization.values())
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, HEIGHT_IN), layout="constrained")
    heights = [v if drawable(v) else 100.0 for v in values]
    colors = ["#2ca02c" if drawable(v) and v >= 50 else "#ff7f0e" if drawable(v) else "none" for v in values]
    bars = ax.bar(range(len(names)), heights, color=colors, edgecolor="#444444")
    for bar, v in zip(bars, values, strict=True):
        if not drawable(v):
            bar.set_hatch("//")
            ax.annotate("no data", (bar.get_x() + bar.get_width() / 2, 50), ha="center", rotation=90)
    ax.set_ylim(0, 100)
    ax.set_title(f"{label(run)}: GPU utilisation per GPU (dcgm-exporter)")
    ax.set_ylabel("utilisation (%)")
    ax.set_xlabel("GPU (node/gpu)")
    many = len(names) > 4
    ax.set_xticks(range(len(names)), names if len(names) <= 16 else [str(i) for i in range(len(names))],
                  rotation=45 if many else 0, ha="right" if many else "center", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    return _png(fig)


__all__ = ["DRAWABLE_LIMIT", "drawable", "gpu_strip", "left_out", "left_out_text", "loss_chart",
           "number_text"]
