"""The GPU run profile as text: card lines, the CLI's block, the watch card's sparkline."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel

from workers.diagnosis.profile import (
    ACTIVITY_NOTE,
    Activity,
    AllocatedDevice,
    Allocation,
    Devices,
    GpuDevice,
    GpuProfile,
    NotApplicable,
    Stat,
    Unavailable,
)

# --------------------------------------------------------------------------- rendering


def _num(value: float) -> str:
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _stat_text(stat: Stat) -> str:
    of = f"{stat.gpus} GPU{'s' if stat.gpus != 1 else ''}"
    if stat.of_gpus != stat.gpus:
        of = f"{stat.gpus} of {stat.of_gpus} GPUs"
    return f"avg {_num(stat.avg)} {stat.unit}, max {_num(stat.max)} {stat.unit} ({of})"


def _device_text(d: GpuDevice) -> str:
    where = f"{d.pod}/{d.container}" if d.container else d.pod
    model = f" ({d.model})" if d.model else ""
    return f"{where} GPU {d.gpu or '?'} {d.uuid or '(no UUID)'}{model} on {d.node}"


def _allocated_text(a: AllocatedDevice) -> str:
    return f"{a.driver} pool {a.pool} device {a.device} (claim {a.claim})"


def _items(field: BaseModel) -> list[str] | None:
    """The entries of a list-valued key (allocation, devices); None for the other kinds."""
    if isinstance(field, Allocation):
        return [_allocated_text(a) for a in field.devices]
    if isinstance(field, Devices):
        return [_device_text(d) for d in field.devices]
    return None


def _value(field: BaseModel, *, limit: int | None = None) -> str:
    if isinstance(field, Unavailable):
        return f"unavailable — {field.reason}"
    if isinstance(field, NotApplicable):
        return f"not applicable — {field.reason}"
    if isinstance(field, Stat):
        return _stat_text(field)
    if isinstance(field, Activity):
        return field.state
    items = _items(field)
    if items is None:
        raise TypeError(f"not a profile field: {type(field).__name__}")
    if limit is not None and len(items) > limit:
        items = items[:limit] + [f"… and {len(items) - limit} more"]
    return "; ".join(items)


KEYS = ("gpu_allocation", "gpu_devices", "gpu_utilization", "gpu_memory", "gpu_activity",
        "cuda_compute_process")


def profile_lines(profile: GpuProfile, *, list_limit: int | None = 4) -> list[tuple[str, str]]:
    """(key, value) rows for a card: the six keys of SPEC §6, lists cut at ``list_limit``.

    A key with no evidence reads ``unavailable — <reason>`` (``unavailable — as
    <key>`` when an earlier key gave the same reason, so a card says it once);
    ``partial`` follows when some nodes are missing from otherwise observed values.
    """
    rows: list[tuple[str, str]] = []
    first_with: dict[str, str] = {}  # reason → the key that showed it in full
    for key in KEYS:
        field = getattr(profile, key)
        if isinstance(field, Unavailable) and field.reason in first_with:
            rows.append((key, f"unavailable — as {first_with[field.reason]}"))
            continue
        if isinstance(field, Unavailable):
            first_with[field.reason] = key
        rows.append((key, _value(field, limit=list_limit)))
    if profile.gaps:
        rows.append(("partial", "; ".join(profile.gaps)))
    if profile.gpu_devices.status == "observed":
        health = "; ".join(f"{node}: {', '.join(f)}" for node, f in profile.gpu_health.items()) or "no fault"
        if profile.health_not_exported:
            health += f" ({', '.join(profile.health_not_exported)} not exported)"
        rows.append(("gpu_health", health))
    return rows


def render_profile_text(profile: GpuProfile) -> str:
    """The profile for a terminal, under the phase tree: one device per line, sources, the caveat."""
    where = ("run finished" if profile.finished
             else f"{len(profile.nodes)} node{'s' if len(profile.nodes) != 1 else ''}")
    lines = [f"GPU run profile — {where}, {profile.requests} Kubernetes API request"
             f"{'s' if profile.requests != 1 else ''}"]
    width = max(len(k) for k in KEYS)
    for key, value in profile_lines(profile, list_limit=None):
        items = _items(getattr(profile, key)) if key in KEYS else None
        if items:
            lines.append(f"  {key.ljust(width)}  {items[0]}")
            lines += [f"  {' ' * width}  {item}" for item in items[1:]]
        else:
            lines.append(f"  {key.ljust(width)}  {value}")
    for source in profile.sources:
        via = source.exporter or "no exporter"
        lines.append(f"  source: {source.node} ← {via}: {source.outcome}")
    if isinstance(profile.gpu_activity, Activity):
        lines.append(f"  note: {ACTIVITY_NOTE}")
    return "\n".join(lines)


SPARK = "▁▂▃▄▅▆▇█"


def utilization_sparkline(history: Iterable[float | None]) -> str:
    """A short utilization history for ``--watch`` cards; a gap (``·``) where it was unavailable."""
    out = []
    for value in history:
        if value is None:
            out.append("·")
        else:
            out.append(SPARK[min(len(SPARK) - 1, max(0, int(value / 100 * len(SPARK))))])
    return "".join(out)

