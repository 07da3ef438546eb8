"""The GPU run profile (SPEC §6) from what `--run-profile` read: pure, so every reason is tested
without a cluster.

`workers/collect/dcgm.py` only reads — it finds the exporters (`pick_exporters` chooses among the
pods it listed) and scrapes each once — and hands the bodies and the reasons a node has none to
`build_profile`. The models and the budget's reasons are in `workers/diagnosis/profile.py`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

from .linkage import meta
from .profile import (
    APPLICATION_XIDS,
    DEFAULT_PORT,
    FB_USED,
    FINISHED_REASON,
    FP64_BLANK,
    HEALTH_FIELDS,
    HEALTH_STATUS,
    HOST_LABELS,
    INT64_BLANK,
    NO_SAMPLES_REASON,
    NO_SAMPLES_SHORT,
    POD_LABELS,
    ROW_REMAP_FAILURE,
    UTIL,
    XID,
    Activity,
    Devices,
    ExporterSource,
    GpuDevice,
    GpuProfile,
    Stat,
    Unavailable,
    _allocation,
    run_nodes,
    unavailable_profile,
)

# --------------------------------------------------------------------------- samples


def is_blank(value: float) -> bool:
    """DCGM's "no data" sentinels, and NaN: never a reading."""
    return math.isnan(value) or value >= FP64_BLANK or value >= INT64_BLANK


def _pod_identity(labels: Mapping[str, str]) -> tuple[str, str, str] | None:
    for ns_key, pod_key, container_key in POD_LABELS:
        ns, pod = labels.get(ns_key), labels.get(pod_key)
        if ns and pod:
            return ns, pod, labels.get(container_key) or ""
    return None


class _Reading:
    """What one node's scrape says about the run's GPUs."""

    def __init__(self) -> None:
        self.devices: dict[tuple[str, str], GpuDevice] = {}  # (node, uuid or index) → device
        self.util: dict[tuple[str, str], float | None] = {}  # None: blank sentinel
        self.fb_used: dict[tuple[str, str], float | None] = {}
        self.health: dict[str, list[str]] = {}
        self.app_xids: list[str] = []
        self.exported: set[str] = set()


def _parse_scrape(node: str, text: str, wanted: set[tuple[str, str]], known_nodes: set[str],
                  into: _Reading) -> int:
    """Add the run's samples from one scrape to ``into``; return how many matched.

    Raises ValueError when the body is not Prometheus text.
    """
    matched = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            who = _pod_identity(sample.labels)
            if who is None or (who[0], who[1]) not in wanted:
                continue
            matched += 1
            labels = sample.labels
            host = next((labels[k] for k in HOST_LABELS if labels.get(k)), "")
            # The hostname can be the exporter pod's name (NODE_NAME unset); trust it only
            # when it names one of the run's nodes.
            where = host if host in known_nodes else node
            gpu = labels.get("gpu", "")
            uuid = labels.get("UUID") or labels.get("uuid") or ""
            key = (where, uuid or f"gpu{gpu}")
            into.devices.setdefault(key, GpuDevice(
                node=where, pod=who[1], container=who[2], gpu=gpu, uuid=uuid,
                model=labels.get("modelName", ""), dra_claim=labels.get("dra_claim_name") or None))
            name = sample.name.upper()  # `--use-old-namespace` exporters write lower-case names
            value = float(sample.value)
            target = into.util if name == UTIL else into.fb_used if name == FB_USED else None
            if target is not None and target.get(key) is None:
                target[key] = None if is_blank(value) else value
            if name in HEALTH_FIELDS:
                into.exported.add(name)
                _health_sample(into, where, gpu, name, value, labels)
    return matched


def _health_sample(into: _Reading, node: str, gpu: str, name: str, value: float,
                   labels: Mapping[str, str]) -> None:
    """One health sample: the last XID (a gauge, not a count), a failed row remap, a DCGM health
    watch in WARN (10) or FAIL (20)."""
    if is_blank(value):
        return
    if name == XID and value > 0:
        xid = int(value)
        text = f"GPU {gpu}: XID {xid} {labels.get('err_msg') or ''}".rstrip()
        if xid in APPLICATION_XIDS:
            into.app_xids.append(f"{node} {text} (application error)")
        else:
            into.health.setdefault(node, []).append(text)
    elif name == ROW_REMAP_FAILURE and value > 0:
        into.health.setdefault(node, []).append(f"GPU {gpu}: row remapping failed")
    elif name == HEALTH_STATUS and value >= 10:
        level = "FAIL" if value >= 20 else "WARN"
        into.health.setdefault(node, []).append(
            f"GPU {gpu}: DCGM health {labels.get('health_watch', '?')} {level} "
            f"{labels.get('health_error_code', '')}".rstrip())


def _stat(values: Mapping[tuple[str, str], float | None], metric: str, unit: Literal["%", "GiB"],
          scale: float, n_devices: int) -> Stat | Unavailable:
    if not values:
        return Unavailable(reason=f"{metric} missing from the exporter's metrics for the run's GPUs "
                                  "(not in its collectors CSV, or a MIG device, where it is not reported)")
    real = [v / scale for v in values.values() if v is not None]
    if not real:
        return Unavailable(reason=f"{metric} has no data (DCGM blank value) for the run's GPUs")
    return Stat(avg=round(sum(real) / len(real), 2), max=round(max(real), 2), unit=unit,
                gpus=len(real), of_gpus=n_devices)


def _activity(util: Stat | Unavailable, memory: Stat | Unavailable,
              fb_used: Mapping[tuple[str, str], float | None]) -> Activity | Unavailable:
    if isinstance(util, Unavailable):
        return Unavailable(reason=f"needs gpu_utilization: {util.reason}")
    if util.max > 0:
        return Activity(state="active")
    if isinstance(memory, Unavailable):
        return Unavailable(reason="utilization is 0 % but framebuffer use is unavailable, so "
                                  f"'idle now' and 'idle' cannot be told apart ({memory.reason})")
    if any(v for v in fb_used.values() if v is not None):
        return Activity(state="idle now")
    return Activity(state="idle")


def _grouped(problems: Mapping[str, str]) -> str:
    """``reason (node a, node b); other reason (node c)``: one line for many nodes."""
    by_reason: dict[str, list[str]] = {}
    for node, reason in problems.items():
        by_reason.setdefault(reason, []).append(node)
    parts = []
    for reason, nodes in by_reason.items():
        label = "node" if len(nodes) == 1 else "nodes"
        parts.append(f"{reason} ({label} {', '.join(sorted(nodes))})")
    return "; ".join(parts)


def build_profile(run_pods: list[dict], claims: Mapping[str, dict],
                  exporter_scrapes: Mapping[str, str], finished: bool,
                  discovery_problem: str | None, *,
                  exporters: Mapping[str, str] | None = None,
                  node_problems: Mapping[str, str] | None = None) -> GpuProfile:
    """The profile from what was read: pure, so every reason can be tested without a cluster.

    ``exporter_scrapes`` maps a node to its exporter's ``/metrics`` body;
    ``exporters`` names the exporter pod per node (evidence); ``node_problems``
    says why a node has no scrape (its exporter is not running, its metrics
    request failed — in words, `workers/collect/dcgm.py` `read_problem`); a node
    of the run in none of them has no exporter pod.
    ``discovery_problem`` makes all telemetry unavailable for that reason.
    """
    allocation = _allocation(run_pods, claims)
    nodes = run_nodes(run_pods)
    if finished:
        return unavailable_profile(FINISHED_REASON, allocation=allocation, finished=True, nodes=nodes)
    if discovery_problem:
        return unavailable_profile(discovery_problem, allocation=allocation, nodes=nodes)
    if not nodes:
        reason = ("no pod of the run holds a GPU on a node yet" if run_pods
                  else "no pod of the run exists")
        return unavailable_profile(reason, allocation=allocation)

    wanted = {(meta(p).get("namespace") or "", meta(p).get("name") or "") for p in run_pods}
    exporters = exporters or {}
    problems: dict[str, str] = {}
    sources: list[ExporterSource] = []
    reading = _Reading()
    empty_nodes: list[str] = []
    for node in nodes:
        got = exporter_scrapes.get(node)
        source = exporters.get(node)
        if got is None:
            problems[node] = (node_problems or {}).get(node) or "no dcgm-exporter pod on the node"
        else:
            try:
                if not _parse_scrape(node, got, wanted, set(nodes), reading):
                    empty_nodes.append(node)
            except (ValueError, IndexError) as exc:
                problems[node] = f"metrics are not Prometheus text ({exc})"
        sources.append(ExporterSource(node=node, exporter=source, outcome=problems.get(node, "read")))

    if not reading.devices:
        reason = NO_SAMPLES_REASON + (f" (read from {', '.join(empty_nodes)})" if empty_nodes else "")
        if problems:
            reason = _grouped(problems) + (f"; {reason}" if empty_nodes else "")
        profile = unavailable_profile(reason, allocation=allocation, nodes=nodes)
        return profile.model_copy(update={"sources": sources})

    n = len(reading.devices)
    util = _stat(reading.util, UTIL, "%", 1.0, n)
    memory = _stat(reading.fb_used, FB_USED, "GiB", 1024.0, n)
    gaps = [f"{reason} (node {node})" for node, reason in problems.items()]
    gaps += [f"{NO_SAMPLES_SHORT} (node {node})" for node in empty_nodes]
    return GpuProfile(
        finished=False, nodes=nodes, sources=sources, gpu_allocation=allocation,
        gpu_devices=Devices(devices=sorted(reading.devices.values(),
                                           key=lambda d: (d.node, d.pod, d.container, d.gpu))),
        gpu_utilization=util, gpu_memory=memory,
        gpu_activity=_activity(util, memory, reading.fb_used), gaps=gaps,
        gpu_health=reading.health, application_xids=reading.app_xids,
        per_gpu_utilization={f"{node}/{device.gpu}": reading.util.get((node, key))  # None: no value
                             for (node, key), device in sorted(reading.devices.items())},
        health_not_exported=[f for f in HEALTH_FIELDS if f not in reading.exported])


# --------------------------------------------------------------------------- exporters


def metrics_port(pod: dict) -> int:
    """The exporter container's port named ``metrics`` (the Helm chart's), else 9400."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        for port in c.get("ports") or []:
            if port.get("name") == "metrics" and port.get("containerPort"):
                return int(port["containerPort"])
    return DEFAULT_PORT


DEFAULT_EXPORTER_NAMESPACES = ("gpu-operator", "taugrid-system")  # the operator's; TauGrid's monitor


def trusted_exporter(pod: dict, namespaces: tuple[str, ...]) -> bool:
    """An exporter is believed only in the operator's namespaces and when a DaemonSet owns it:
    any pod can carry the dcgm-exporter label, and a spoofed one could report any GPU as idle."""
    owned = any(ref.get("kind") == "DaemonSet" and ref.get("controller")
                for ref in meta(pod).get("ownerReferences") or [])
    return owned and (meta(pod).get("namespace") or "") in namespaces


def pick_exporters(pods: list[dict], nodes: list[str],
                    namespaces: tuple[str, ...] = DEFAULT_EXPORTER_NAMESPACES
                    ) -> tuple[dict[str, dict], dict[str, str]]:
    """Per run node, a Running trusted exporter pod (ready and not terminating first); else why not."""
    chosen: dict[str, dict] = {}
    not_running: dict[str, str] = {}
    pods = [p for p in pods if trusted_exporter(p, namespaces)]

    def rank(p: dict) -> tuple[bool, bool, str]:
        conds = (p.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
        return (bool(meta(p).get("deletionTimestamp")), not ready, meta(p).get("name") or "")

    for p in sorted(pods, key=rank):
        node = (p.get("spec") or {}).get("nodeName")
        if node not in nodes or node in chosen:
            continue
        phase = (p.get("status") or {}).get("phase") or "Unknown"
        if phase == "Running":
            chosen[node] = p
            not_running.pop(node, None)
        else:
            not_running.setdefault(node, f"exporter pod {meta(p).get('namespace')}/{meta(p).get('name')} "
                                         f"is not running (phase {phase})")
    return chosen, not_running


__all__ = ["DEFAULT_EXPORTER_NAMESPACES", "build_profile", "is_blank", "metrics_port", "pick_exporters",
           "trusted_exporter"]
