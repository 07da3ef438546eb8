"""The status's charts as data: what each picture shows, decided before anything is drawn.

Why a model: the PNG is pixels, and a test that looks only at pixels cannot tell a step axis from a
line count, or a missing GPU from a busy one. Every decision a user reads off a chart — what the x
axis is, which points are left out and why, when progress was last seen and how long before
`now`, which GPUs are drawn and which have no data — is made here, in plain Python without
matplotlib; `workers/render/charts.py` only draws it.

`now` is the status's own (the clock it was diagnosed by), never read here.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from workers.diagnosis.models import Diagnosis, PhaseState, ProgressTimeline
from workers.outside.text import outside

from .forecast import duration_text

MIN_POINTS = 2  # a single point is no curve
# Beyond this a value is drawn as nothing useful: matplotlib's axis and tick arithmetic overflows
# (`ValueError: arange: cannot compute length` at 1.7e308) long before a float does (SPEC §11).
DRAWABLE_LIMIT = 1e100
WIDTH_PX, PANEL_PX, EXTRA_PANEL_PX = 900, 450, 270  # the loss panel, and each panel beneath it


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


# --------------------------------------------------------------------------- file names

_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def chart_filename(run: str, chart: str, now: datetime) -> str:
    """`ray-pretrain-live-loss-20261130T103000Z.png`: the run (through the outside-text door, in a
    filename-safe form: no separator, no leading dot), the chart and the status's time, so two
    statuses' pictures never share a name and a stale one never passes for the new one."""
    run_part = _UNSAFE_IN_NAME.sub("-", outside(run, 80, keep_newlines=False)).strip("-.") or "run"
    chart_part = _UNSAFE_IN_NAME.sub("-", chart).strip("-.") or "chart"
    return f"{run_part}-{chart_part}-{now.strftime('%Y%m%dT%H%M%SZ')}.png"


# --------------------------------------------------------------------------- the loss chart


@dataclass(frozen=True)
class Curve:
    """The points one panel draws against the step (or the line's order): ``xs``/``ys``; what it
    left out: ``left_out`` (values no chart can draw) and ``without_step`` (values the log gave
    no step for, when other points have one: drawing them at a made-up step would lie)."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]
    by_step: bool
    left_out: tuple[float, ...] = ()
    without_step: int = 0

    @property
    def drawn(self) -> bool:
        return len(self.xs) >= MIN_POINTS


def curve(points: Sequence[tuple[float | None, float]]) -> Curve:
    """x is the step when any drawable point states one (the points without are left out and
    counted), else the progress line's order (1, 2, …)."""
    fit = [(s, v) for s, v in points if _point_drawable(s, v)]
    omitted = tuple(v for s, v in points if not _point_drawable(s, v))
    stepped = [(s, v) for s, v in fit if s is not None]
    if stepped:
        return Curve(tuple(float(s) for s, _ in stepped), tuple(v for _, v in stepped), True, omitted,
                     len(fit) - len(stepped))
    return Curve(tuple(float(i + 1) for i in range(len(fit))), tuple(v for _, v in fit), False, omitted)


def x_label(c: Curve) -> str:
    """What the x axis is, said truthfully: the step when the log states it, the line's order only
    when no line does."""
    if not c.by_step:
        return "progress line, in order (the log states no step)"
    if c.without_step:
        n = c.without_step
        return f"training step ({n} value{'s' if n != 1 else ''} without a step not drawn)"
    return "training step"


@dataclass(frozen=True)
class TimeMarks:
    """The time panel: progress against wall-clock time, the last progress line's time and `now`,
    and the gap between them said in words (``gap_text``), so a curve that stopped reads as a
    stall. ``stalled``: the Runtime progress check says the run is not progressing (the gap is
    drawn in red and called "no progress"); otherwise it is said neutrally."""

    points: tuple[tuple[datetime, float], ...]
    y_label: str
    now: datetime
    last_progress_at: datetime | None
    last_label: str
    gap_seconds: float | None
    gap_text: str
    stalled: bool


def _clock(at: datetime, now: datetime) -> str:
    return at.strftime("%H:%M UTC" if at.date() == now.date() else "%b %d %H:%M UTC")


def time_marks(timeline: ProgressTimeline | None, now: datetime, *, stalled: bool) -> TimeMarks | None:
    """The time panel of a log whose lines carry times (the kubelet's), or of an untimed log whose
    tail taubot first saw as it is at a known time; None when neither is known (the chart then
    says that no line has a time rather than inventing an axis)."""
    if timeline is None:
        return None
    steps = [(at, s) for at, s, _ in timeline.points if s is not None and drawable(s)]
    losses = [(at, v) for at, _, v in timeline.points if v is not None and drawable(v)]
    points, y = (steps, "step") if steps else (losses, "loss")
    # The log's own time of its last progress; else, for an untimed log, taubot's first sighting.
    first_sighting = timeline.last_progress_at is None and timeline.unchanged_since is not None
    since = timeline.unchanged_since if first_sighting else timeline.last_progress_at
    if not points and since is None:
        return None
    gap = (now - since).total_seconds() if since is not None else None
    if since is None or gap is None:
        gap_text, since_label = "", ""
    elif first_sighting:
        gap_text = f"log unchanged for {duration_text(gap)} (by taubot's earlier reads)"
        since_label = f"log unchanged since {_clock(since, now)}"
    else:
        gap_text = (f"no progress for {duration_text(gap)}" if stalled
                    else f"last progress {duration_text(gap)} before now")
        since_label = f"last progress {_clock(since, now)}"
    return TimeMarks(tuple((at, float(v)) for at, v in points), y, now, since, since_label, gap, gap_text,
                     stalled)


@dataclass(frozen=True)
class LossChart:
    """The loss chart: the loss by step, the learning rate beneath it on the same axis when the
    lines state one, and the time panel when they carry times (``time``); ``time_note`` says why
    there is none. A log whose lines state steps but no loss (a plain tqdm bar) gets the time
    panel alone: its progress chart (``loss`` None). ``size``: the PNG's pixels."""

    run: str
    title: str
    loss: Curve | None
    lr: Curve | None
    time: TimeMarks | None
    time_note: str

    @property
    def what(self) -> str:
        """What the picture is called on the card and in its file name."""
        return "loss curve" if self.loss is not None else "progress chart"

    @property
    def size(self) -> tuple[int, int]:
        panels = (self.loss is not None) + (self.lr is not None) + (self.time is not None)
        return WIDTH_PX, PANEL_PX + EXTRA_PANEL_PX * (panels - 1)

    @property
    def shared_step_axis(self) -> bool:
        return self.lr is not None and self.loss is not None and self.loss.by_step and self.lr.by_step

    @property
    def curves_drawn(self) -> frozenset[str]:
        """The curves this chart draws, by the names the thread's left-out lines use."""
        return frozenset(name for name, c in (("loss curve", self.loss), ("learning-rate curve", self.lr))
                         if c is not None)


NO_TIME_NOTE = "no time axis: the log's lines carry no time, so when progress stopped is not known"


def runtime_stalled(d: Diagnosis) -> bool:
    """The Runtime progress check says the run is not progressing (a stall, a hang, a crash)."""
    return any(c.reason.startswith("progress.") and c.state is PhaseState.WARNING for c in d.checks)


def loss_chart_model(loss: Sequence[tuple[float | None, float]], run: str, *,
                     lr: Sequence[tuple[float | None, float]] = (),
                     timeline: ProgressTimeline | None = None, now: datetime | None = None,
                     stalled: bool = False) -> LossChart | None:
    """The loss chart of these points; without two drawable loss points, the progress chart of
    the timed lines' steps (the time panel alone); None when neither has two points."""
    loss_curve = curve(loss)
    marks = time_marks(timeline, now, stalled=stalled) if now is not None else None
    if not loss_curve.drawn:
        if marks is None or len(marks.points) < MIN_POINTS:
            return None
        return LossChart(run=label(run), title=f"{label(run)}: training progress (the log states no loss)",
                         loss=None, lr=None, time=marks, time_note="")
    lr_curve = curve(lr)
    title = f"{label(run)}: training loss" + (" and learning rate" if lr_curve.drawn else "")
    return LossChart(run=label(run), title=title, loss=loss_curve, lr=lr_curve if lr_curve.drawn else None,
                     time=marks, time_note="" if marks is not None else NO_TIME_NOTE)


def status_loss_chart(d: Diagnosis, now: datetime) -> LossChart | None:
    """The loss chart of a status: its curves, its progress times and its `now`."""
    return loss_chart_model(d.loss_curve, d.run.name, lr=d.lr_curve, timeline=d.progress_timeline, now=now,
                            stalled=runtime_stalled(d))


# --------------------------------------------------------------------------- the GPU strip

BarState = Literal["measured", "no data", "missing"]


@dataclass(frozen=True)
class GpuBar:
    """One GPU: its node, its index (None: a GPU the run holds whose index no sample names) and its
    utilisation. ``no data``: the exporter sent a blank (or undrawable) value; ``missing``: the
    run's pods hold it but the exporter sent no sample at all (fallen off the bus, Xid 79)."""

    node: str
    gpu: int | None
    utilization: float | None
    state: BarState

    @property
    def index_text(self) -> str:
        return "?" if self.gpu is None else str(self.gpu)


@dataclass(frozen=True)
class NodeGroup:
    """The bars of one node (``first``..``last``, inclusive) and the label drawn beneath them."""

    node: str
    label: str
    first: int
    last: int


@dataclass(frozen=True)
class GpuStrip:
    """The per-GPU strip: bars by node (natural order: …vmss000009 before …vmss000010), then by
    GPU index numerically (0, 1, 2, …, 10); node labels horizontal and short (their common
    prefix said once, in ``x_label``)."""

    run: str
    title: str
    bars: tuple[GpuBar, ...]
    groups: tuple[NodeGroup, ...]
    x_label: str
    index_labels: bool  # a GPU index under each bar (left out when the bars are too many to read)
    size: tuple[int, int] = (WIDTH_PX, PANEL_PX)

    @property
    def without_data(self) -> list[GpuBar]:
        return [b for b in self.bars if b.state != "measured"]


def _natural(text: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def _index(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() and len(text) < 6 else None


MAX_GPUS_PER_NODE = 64  # a node holds 8 or 16; a larger count in a pod spec draws no more bars than this
MAX_INDEX_LABELS = 32  # beyond this many bars an index under each cannot be read at 360 px
CHAR_PX = 15  # about one character of a 17 pt label at 100 dpi (DejaVu Sans digits)
PLOT_PX = 780  # the axes' width within the 900 px picture


def _short_labels(nodes: Sequence[str], bars_per_node: Sequence[int]) -> tuple[list[str], str]:
    """Each node's label as the part that tells it from the others (their common prefix, cut at a
    `-`, is said once), clipped from the left to the room its bars give it: `vmss000008`."""
    if len(nodes) == 1:
        prefix = ""
    else:
        common = os.path.commonprefix(list(nodes))
        prefix = common[:common.rfind("-") + 1] if "-" in common else ""
    total = max(sum(bars_per_node), 1)
    labels = []
    for node, count in zip(nodes, bars_per_node, strict=True):
        room = max(int(PLOT_PX * count / total / CHAR_PX) - 1, 1)  # a character's room between
        text = node[len(prefix):] or node
        labels.append(text if len(text) <= room else ("…" + text[-(room - 1):] if room > 3 else ""))
    return labels, prefix


def gpu_strip_model(utilization: Mapping[str, float | None], run: str, *,
                    held: Mapping[str, int] | None = None,
                    capacity: Mapping[str, int] | None = None) -> GpuStrip | None:
    """The strip of ``utilization`` (`node/gpu` → %, None: blank) with, per node, the GPUs the run
    holds there (``held``, `gpus_held`) that sent no sample drawn as missing: at their index when
    the run holds every GPU of the node (``capacity``, `gpu_capacity`), else as `?`. None when
    no GPU sent a sample at all: the profile then says why its telemetry is unavailable (no
    exporter, no permission), and a strip of nothing but `no data` would add no fact to that."""
    if not utilization:
        return None
    held, capacity = held or {}, capacity or {}
    by_node: dict[str, list[GpuBar]] = {}
    for key, value in utilization.items():
        node, _, gpu = str(key).rpartition("/")
        node = node or str(key)
        state: BarState = "measured" if drawable(value) else "no data"
        shown = value if drawable(value) else None
        by_node.setdefault(node, []).append(GpuBar(node, _index(gpu), shown, state))
    for node, count in held.items():
        count = min(count, MAX_GPUS_PER_NODE)
        node_bars = by_node.setdefault(node, [])
        quiet = count - len(node_bars)
        if quiet <= 0:
            continue
        seen = {b.gpu for b in node_bars}
        known = [i for i in range(count) if i not in seen][:quiet] if capacity.get(node) == count else []
        indices: list[int | None] = [*known, *([None] * (quiet - len(known)))]
        node_bars += [GpuBar(node, i, None, "missing") for i in indices]
    nodes = sorted(by_node, key=_natural)
    bars: list[GpuBar] = []
    groups_at: list[tuple[str, int, int]] = []
    for node in nodes:
        ordered = sorted(by_node[node], key=lambda b: (b.gpu is None, b.gpu or 0))
        groups_at.append((node, len(bars), len(bars) + len(ordered) - 1))
        bars += ordered
    labels, prefix = _short_labels([label(n, 63) for n in nodes],
                                   [last - first + 1 for _, first, last in groups_at])
    groups = tuple(NodeGroup(label(node, 63), text, first, last)
                   for (node, first, last), text in zip(groups_at, labels, strict=True))
    silent = [b for b in bars if b.state != "measured"]
    title = f"{label(run)}: GPU utilisation"
    if silent:
        title += f" — {len(silent)} of {len(bars)} GPU{'s' if len(bars) != 1 else ''} no data"
    if len(nodes) == 1:  # the node's name is said once, in full, beneath the axis
        x, groups = f"GPU index on node {groups[0].node}", (NodeGroup(groups[0].node, "", 0, len(bars) - 1),)
    else:
        x = "GPU index, by node" + (f" ({prefix}…)" if prefix else "")
    return GpuStrip(run=label(run), title=title, bars=tuple(bars), groups=groups, x_label=x,
                    index_labels=len(bars) <= MAX_INDEX_LABELS)


__all__ = ["DRAWABLE_LIMIT", "Curve", "GpuBar", "GpuStrip", "LossChart", "NodeGroup", "TimeMarks",
           "chart_filename", "curve", "drawable", "gpu_strip_model", "label",
           "left_out", "loss_chart_model", "runtime_stalled", "status_loss_chart", "time_marks", "x_label"]
