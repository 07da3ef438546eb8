"""`--run-profile`: the GPU profile of one run (SPEC §6) — its model, and what is pure about it.

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

This module holds the profile's model and what is pure about it (the run's GPU pods and
nodes, the DRA allocation); the exporter discovery, the scrapes and their parsing are
``workers/collect/dcgm.py``, and the text a person reads is ``workers/render/profile.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

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
    per_gpu_utilization: dict[str, float | None] = Field(
        default_factory=dict, description="node/gpu → DCGM_FI_DEV_GPU_UTIL % (None: blank), for the strip")


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


DEVICE_PLUGIN_GPU = "nvidia.com/gpu"


def _count(quantity: object) -> int:
    """A whole-GPU quantity (`"8"`, 8); 0 for anything else (a hostile or fractional value)."""
    text = str(quantity).strip()
    return int(text) if text.isdigit() and len(text) < 6 else 0


def gpus_held(run_pods: Iterable[dict]) -> dict[str, int]:
    """Node → the GPUs the run's GPU pods hold there through the device plugin (their containers'
    `nvidia.com/gpu`): a GPU held but absent from the exporter's samples fell silent — the strip
    draws it as missing, never leaves it out (an Xid 79 GPU that fell off the bus reports nothing)."""
    held: dict[str, int] = {}
    for pod in gpu_pods(run_pods):
        for c in (pod.get("spec") or {}).get("containers") or []:
            res = c.get("resources") or {}
            n = _count((res.get("limits") or {}).get(DEVICE_PLUGIN_GPU, (res.get("requests") or {}).get(
                DEVICE_PLUGIN_GPU, 0)))
            if n:
                held[pod["spec"]["nodeName"]] = held.get(pod["spec"]["nodeName"], 0) + n
    return held


def gpu_capacity(objects: Iterable[dict]) -> dict[str, int]:
    """Node → its `nvidia.com/gpu` capacity, from the Node objects among ``objects``: when a run
    holds every GPU of a node, the index of a silent one is known (the indices the others lack)."""
    return {name: n for o in objects if o.get("kind") == "Node"
            and (name := (o.get("metadata") or {}).get("name"))
            and (n := _count(((o.get("status") or {}).get("capacity") or {}).get(DEVICE_PLUGIN_GPU, 0)))}


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


def unavailable_profile(reason: str, *, allocation: AllocationField | None = None,
                        finished: bool = False, nodes: list[str] | None = None) -> GpuProfile:
    """Every telemetry key unavailable for one reason (run finished, not found, no access…)."""
    none = Unavailable(reason=reason)
    return GpuProfile(
        finished=finished, nodes=nodes or [],
        gpu_allocation=allocation if allocation is not None else Unavailable(reason=reason),
        gpu_devices=none, gpu_utilization=none, gpu_memory=none, gpu_activity=none)
