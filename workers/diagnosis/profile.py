"""`--run-profile`: live GPU evidence for one run from dcgm-exporter, through the Kubernetes API.

Why through the API server and not by scraping Prometheus or the node: taubot
acts only as the asking user, and the API server is the one place where that
user's RBAC is enforced (SPEC §6). So the exporter is found by listing pods
cluster-wide and read through the ``pods/proxy`` subresource; a user without
those permissions gets ``unavailable`` with the reason, and the base status is
untouched.

Why the budget is fixed: a profile is asked for while someone is waiting, and
with ``--watch`` it repeats. Discovery costs at most two LISTs (the official
``app.kubernetes.io/name=dcgm-exporter`` label, then — only when none of those
runs on the run's nodes — TauGrid's ``taugrid.io/gpu-monitoring=true``
DaemonSet), then at most one metrics request per distinct node of the run,
concurrently. Nothing depends on the number of pods or GPUs.

Why "unavailable", never zero: a missing sample is the absence of evidence, and
a 0 % that was never observed would tell a researcher their run is idle when
it may not be. A real 0 % is shown as 0 %. DCGM's blank sentinels (int64
≥ ``0x7ffffffffffffff0``, fp64 ≥ 2**47) are "no data" too
(``shared/reference/dcgm-exporter.md``).

Why samples match on namespace *and* pod: a GPU node is shared, and the
exporter reports every GPU on it; another team's pod must not lend the run its
utilization. Label names differ by exporter version and by whether the series
went through Prometheus: ``namespace``/``pod``/``container``,
``exported_namespace``/``exported_pod``/``exported_container``, and the old
``pod_namespace``/``pod_name``/``container_name``; the node label is
``Hostname`` in released images and ``hostname`` on main.

The pure part (``build_profile``) takes the scrapes as text and is unit-tested
without I/O; ``collect_profile`` does the bounded reads.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Annotated, Literal

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict, Field

from workers.kube.reader import KubeReader, ReadError, proxy_path, resource_path

from .linkage import RunObjects, meta
from .phases.common import RunContext

DCGM_LABEL = "app.kubernetes.io/name=dcgm-exporter"
TAUGRID_LABEL = "taugrid.io/gpu-monitoring=true"
DEFAULT_PORT = 9400
# One page holds this many exporter pods (one per GPU node), so discovery stays at one request
# per label on any cluster of fewer GPU nodes than this.
DISCOVERY_PAGE = 5000

UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
# Layer-6 health fields of the same scrape (dcgm-exporter etc/default-counters.csv; the health
# status only when the CSV enables it). A field absent from a scrape is "not exported", never 0.
XID = "DCGM_FI_DEV_XID_ERRORS"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
HEALTH_STATUS = "DCGM_EXP_GPU_HEALTH_STATUS"
HEALTH_FIELDS = (XID, ROW_REMAP_FAILURE, HEALTH_STATUS)
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})  # NVIDIA's catalogue: application errors
INT64_BLANK = 9223372036854775792  # DCGM_INT64_BLANK 0x7ffffffffffffff0; NOT_FOUND etc. are above it
FP64_BLANK = 2.0**47  # DCGM_FP64_BLANK 140737488355328.0

# The guide's reason, verbatim in substance (seed/troubleshooting-by-lifecycle-layer.md).
CUDA_REASON = (
    "dcgm-exporter's supported scalar metrics expose only aggregate utilization, excluding compute "
    "PIDs and CUDA contexts, so utilization alone cannot identify a process or context"
)
FINISHED_REASON = "run finished: live GPU telemetry is read only while the run is active"
NO_SAMPLES_REASON = (
    "no dcgm-exporter samples match the run's pods (namespace and pod) — is the exporter's Kubernetes "
    "pod mapping on (DCGM_EXPORTER_KUBERNETES=true, with the NVIDIA device plugin)?"
)
NO_SAMPLES_SHORT = "no dcgm-exporter samples match the run's pods"
ACTIVITY_NOTE = (
    "gpu_activity is an instantaneous device-level signal, not proof that the model makes progress"
)

# (namespace, pod, container) label names, the Prometheus-renamed ones first: after a scrape
# without honorLabels, `namespace`/`pod` are the exporter's own target labels.
POD_LABELS = (
    ("exported_namespace", "exported_pod", "exported_container"),
    ("namespace", "pod", "container"),
    ("pod_namespace", "pod_name", "container_name"),
)
HOST_LABELS = ("Hostname", "hostname")


# --------------------------------------------------------------------------- model


class Unavailable(BaseModel):
    """No evidence, and why — the only thing ever shown instead of a value."""

    model_config = ConfigDict(frozen=True)

    status: Literal["unavailable"] = "unavailable"
    reason: str


class NotApplicable(BaseModel):
    """The question does not arise for this run (e.g. no DRA: GPUs come from the device plugin)."""

    model_config = ConfigDict(frozen=True)

    status: Literal["not_applicable"] = "not_applicable"
    reason: str


class AllocatedDevice(BaseModel):
    """One device of an allocated ResourceClaim: who holds it and where it is."""

    model_config = ConfigDict(frozen=True)

    claim: str
    request: str
    driver: str
    pool: str
    device: str
    reserved_for: list[str] = Field(default_factory=list)


class Allocation(BaseModel):
    """The run's allocated DRA devices: which GPU the scheduler gave it, even with no telemetry."""

    model_config = ConfigDict(frozen=True)

    status: Literal["observed"] = "observed"
    devices: list[AllocatedDevice]


class GpuDevice(BaseModel):
    """A GPU the exporter attributes to a pod of the run."""

    model_config = ConfigDict(frozen=True)

    node: str
    pod: str
    container: str
    gpu: str
    uuid: str
    model: str
    dra_claim: str | None = None


class Devices(BaseModel):
    """The GPUs the exporter attributes to the run's pods (the join key between the two views)."""

    model_config = ConfigDict(frozen=True)

    status: Literal["observed"] = "observed"
    devices: list[GpuDevice]


class Stat(BaseModel):
    """Average and maximum over the run's GPUs that reported a value (``gpus`` of ``of_gpus``)."""

    model_config = ConfigDict(frozen=True)

    status: Literal["observed"] = "observed"
    avg: float
    max: float
    unit: Literal["%", "GiB"]
    gpus: int
    of_gpus: int


class Activity(BaseModel):
    """An instantaneous device-level signal, not proof of useful model progress (the guide)."""

    model_config = ConfigDict(frozen=True)

    status: Literal["observed"] = "observed"
    state: Literal["active", "idle now", "idle"]


class ExporterSource(BaseModel):
    """Where one node's telemetry came from, or why it did not: the evidence behind the numbers."""

    model_config = ConfigDict(frozen=True)

    node: str
    exporter: str | None = None  # namespace/name:port
    outcome: str = "read"


AllocationField = Annotated[Allocation | Unavailable | NotApplicable, Field(discriminator="status")]
DevicesField = Annotated[Devices | Unavailable, Field(discriminator="status")]
StatField = Annotated[Stat | Unavailable, Field(discriminator="status")]
ActivityField = Annotated[Activity | Unavailable, Field(discriminator="status")]


class GpuProfile(BaseModel):
    """The run profile: six keys of SPEC §6, each observed or unavailable with a reason."""

    model_config = ConfigDict(frozen=True)

    finished: bool = False
    nodes: list[str] = Field(default_factory=list)
    sources: list[ExporterSource] = Field(default_factory=list)
    gpu_allocation: AllocationField
    gpu_devices: DevicesField
    gpu_utilization: StatField
    gpu_memory: StatField
    gpu_activity: ActivityField
    cuda_compute_process: Unavailable = Unavailable(reason=CUDA_REASON)
    gaps: list[str] = Field(default_factory=list)  # nodes left out of otherwise observed values
    requests: int = 0
    gpu_health: dict[str, list[str]] = Field(default_factory=dict, description="node → DCGM faults")
    health_not_exported: list[str] = Field(default_factory=list, description="health fields absent")
    application_xids: list[str] = Field(default_factory=list, description="layer-7 evidence, not faults")


# --------------------------------------------------------------------------- pods and claims


def _requests_gpu(pod: dict) -> bool:
    """Whether the exporter could attribute a GPU to this pod at all.

    The exporter maps devices through the kubelet's PodResources, which only
    knows device-plugin resources (``nvidia.com/gpu``, MIG and renamed NVIDIA
    resources) and DRA claims. Skipping pods without any (a Ray head, a
    submitter) saves a metrics request for a node that cannot have samples.
    """
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") or {}
        if res.get("claims"):
            return True
        for key in {**(res.get("limits") or {}), **(res.get("requests") or {})}:
            if key.startswith("nvidia.com/") or "gpu" in key.lower():
                return True
    return False


def gpu_pods(run_pods: Iterable[dict]) -> list[dict]:
    """The run's pods that hold GPUs now: bound to a node, not finished, requesting a GPU."""
    return [
        p for p in run_pods
        if (p.get("spec") or {}).get("nodeName")
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        and _requests_gpu(p)
    ]


def run_nodes(run_pods: Iterable[dict]) -> list[str]:
    """Distinct nodes of the run's GPU pods, sorted: one metrics request each, at most."""
    return sorted({p["spec"]["nodeName"] for p in gpu_pods(run_pods)})


def _allocation(run_pods: list[dict], claims: Mapping[str, dict]) -> Allocation | Unavailable | NotApplicable:
    uses_dra = any((p.get("spec") or {}).get("resourceClaims") for p in run_pods)
    if not claims:
        if uses_dra:
            return Unavailable(reason="the run's pods claim DRA devices, but no ResourceClaim of theirs "
                                      "is present")
        return NotApplicable(reason="the run uses no DRA ResourceClaim (GPUs through the device plugin)")
    devices: list[AllocatedDevice] = []
    for name in sorted(claims):
        status = claims[name].get("status") or {}
        reserved = [r.get("name") or "" for r in status.get("reservedFor") or [] if r.get("name")]
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        for r in results:
            devices.append(AllocatedDevice(claim=name, request=r.get("request") or "",
                                           driver=r.get("driver") or "", pool=r.get("pool") or "",
                                           device=r.get("device") or "", reserved_for=reserved))
    if not devices:
        return Unavailable(reason=f"no ResourceClaim of the run is allocated ({len(claims)} pending)")
    return Allocation(devices=devices)


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


def read_problem(error: ReadError) -> str:
    """A failed metrics request in words that say which permission or component is missing."""
    text = f"metrics request failed: {error.describe()}"
    if error.kind == "forbidden":
        text += " — reading exporter metrics needs the pods/proxy subresource"
    return text


def discovery_problem_text(error: ReadError, selector: str) -> str:
    """A failed exporter LIST; a 403 names the cluster-wide permission the user lacks."""
    text = f"cannot list exporter pods ({selector}): {error.describe()}"
    if error.kind == "forbidden":
        text += " — listing exporter pods needs cluster-wide pod read access"
    return text


def unavailable_profile(reason: str, *, allocation: AllocationField | None = None,
                        finished: bool = False, nodes: list[str] | None = None) -> GpuProfile:
    """Every telemetry key unavailable for one reason (run finished, not found, no access…)."""
    none = Unavailable(reason=reason)
    return GpuProfile(
        finished=finished, nodes=nodes or [],
        gpu_allocation=allocation if allocation is not None else Unavailable(reason=reason),
        gpu_devices=none, gpu_utilization=none, gpu_memory=none, gpu_activity=none)


def build_profile(run_pods: list[dict], claims: Mapping[str, dict],
                  exporter_scrapes: Mapping[str, str | ReadError], finished: bool,
                  discovery_problem: str | None, *,
                  exporters: Mapping[str, str] | None = None,
                  node_problems: Mapping[str, str] | None = None) -> GpuProfile:
    """The profile from what was read: pure, so every reason can be tested without a cluster.

    ``exporter_scrapes`` maps a node to its exporter's ``/metrics`` body or the
    read error; ``exporters`` names the exporter pod per node (evidence);
    ``node_problems`` says why a node has no scrape (e.g. its exporter is not
    running); a node of the run in none of them has no exporter pod.
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
        elif isinstance(got, ReadError):
            problems[node] = read_problem(got)
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
        health_not_exported=[f for f in HEALTH_FIELDS if f not in reading.exported])


# --------------------------------------------------------------------------- I/O


def _metrics_port(pod: dict) -> int:
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


def _pick_exporters(pods: list[dict], nodes: list[str],
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


async def _discover(reader: KubeReader, nodes: list[str],
                    namespaces: tuple[str, ...] = DEFAULT_EXPORTER_NAMESPACES,
                    ) -> tuple[dict[str, dict], dict[str, str], str | None]:
    """At most two LISTs: the official label; TauGrid's only if the first covers no run node."""
    path = resource_path("", "v1", "pods")
    # One node: let the API server filter (a tiny answer); several: one LIST, filtered here.
    field = f"spec.nodeName={nodes[0]}" if len(nodes) == 1 else None
    problems: dict[str, str] = {}
    for selector in (DCGM_LABEL, TAUGRID_LABEL):
        found = await reader.list(path, label_selector=selector, field_selector=field,
                                  limit=DISCOVERY_PAGE)
        if isinstance(found, ReadError):
            text = discovery_problem_text(found, selector)
            if selector == TAUGRID_LABEL:
                text = f"no {DCGM_LABEL} pod runs on the run's nodes, and {text}"
            return {}, problems, text
        chosen, not_running = _pick_exporters(found, nodes, namespaces)
        for node, why in not_running.items():
            problems.setdefault(node, why)
        if chosen:
            return chosen, problems, None
    if problems:
        return {}, problems, None
    return {}, {}, (f"no dcgm-exporter pod runs on the run's nodes ({', '.join(nodes)}); looked for "
                    f"{DCGM_LABEL} and {TAUGRID_LABEL} cluster-wide")


async def collect_profile(reader: KubeReader, run_objects: RunObjects, *, now: datetime,
                          finished: bool | None = None,
                          namespaces: tuple[str, ...] = DEFAULT_EXPORTER_NAMESPACES) -> GpuProfile:
    """Discover the exporters on the run's nodes and read each once, under the reader's identity.

    ``finished`` defaults to whether the run says it ended (Job conditions,
    RayJob status): a finished run costs no request and keeps only its
    allocation identity.
    """
    start = reader.requests_made
    if finished is None:
        finished = RunContext(objs=run_objects, now=now).terminal() is not None
    pods, claims = run_objects.pods, run_objects.claims
    if not run_objects.found:
        return unavailable_profile("run not found")
    nodes = run_nodes(pods)
    if finished or not nodes:
        return build_profile(pods, claims, {}, finished, None)
    chosen, node_problems, problem = await _discover(reader, nodes, namespaces)
    exporters = {node: f"{meta(p).get('namespace')}/{meta(p).get('name')}:{_metrics_port(p)}"
                 for node, p in chosen.items()}
    order = sorted(chosen)
    bodies = await asyncio.gather(*(
        reader.text(proxy_path("pods", meta(chosen[n]).get("namespace") or "", meta(chosen[n]).get("name")
                               or "", _metrics_port(chosen[n]), "metrics"))
        for n in order))
    profile = build_profile(pods, claims, dict(zip(order, bodies, strict=True)), False, problem,
                            exporters=exporters, node_problems=node_problems)
    return profile.model_copy(update={"requests": reader.requests_made - start})


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


__all__ = [
    "Activity",
    "AllocatedDevice",
    "Allocation",
    "Devices",
    "ExporterSource",
    "GpuDevice",
    "GpuProfile",
    "NotApplicable",
    "Stat",
    "Unavailable",
    "build_profile",
    "collect_profile",
    "gpu_pods",
    "profile_lines",
    "render_profile_text",
    "run_nodes",
    "unavailable_profile",
    "utilization_sparkline",
]
