"""Live diagnosis: collect one run's snapshot under the user's identity, then evaluate it.

The request budget is fixed, whatever the run's size: at most three concurrent
rounds (run + TauWorkspace; Workloads, RayCluster, pods by label selector and,
for DRA runs, claims; then — only when the answer depends on them — the events
of at most `EVENT_PODS` pods that explain the first incomplete phase). Lists
page with `limit`/`continue` at `PAGE_SIZE`, so a run of up to that many pods
costs the same number of requests as a run of one. Every call goes through a
client that impersonates the asking user; there is no path that uses the bot's
own identity.

Layers 1–2 come first: when the descriptor does not resolve, the cluster does
not answer, or the TauWorkspace is not Ready, that is the answer and the ten
phases are reported as unreachable, not failed.

`--run-profile` adds its own bounded reads within the same rounds (workers/collect/dcgm.py):
the exporter discovery with round 2, the metrics with round 3; in the same client session, and
without it nothing here changes.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from workers.collect.dcgm import ProfileReads
from workers.collect.experiments import MlflowAuth, experiment_record
from workers.collect.kueue import (
    CLUSTER_QUEUE_NAMES,
    QueueMemo,
    QueueRead,
    named_cluster_queue,
    position_from,
    read_local_queue,
    read_queue,
    workload_version,
)
from workers.collect.kueue_etas import EtaRead, readable_etas, remember_eta
from workers.collect.kueue_forecast import (
    PreemptorRead,
    read_preemption,
    with_never_fits,
    with_preemption,
    with_preemptor,
)
from workers.collect.logs.ahead import ReadAhead
from workers.collect.logs.seen import SeenStore, remember
from workers.collect.logs.sources import LogAccess, log_evidence, with_driver_stack
from workers.collect.plan import ReadPlan
from workers.collect.report import RunReport
from workers.collect.workspace import (
    readiness_report,
    resolution_report,
    tauworkspace_path,
    unreachable_report,
)
from workers.config.workspaces import Registry, Resolution, ResolutionFailure, WorkspaceConnection
from workers.diagnosis.checks import LayerReport
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.gaps import ReadGap
from workers.diagnosis.layers import layer_info
from workers.diagnosis.linkage import QUEUE_LABEL, RunObjects, find_run, labels, meta, run_names
from workers.diagnosis.models import (
    Diagnosis,
    ExperimentEvidence,
    Finding,
    LogEvidence,
    PhaseResult,
    PhaseState,
    RunRef,
)
from workers.diagnosis.phases import image_pull
from workers.diagnosis.phases.admission import FORECAST_FOR
from workers.diagnosis.phases.common import RunContext
from workers.diagnosis.phases.table import POD_JUDGES
from workers.diagnosis.podfacts import is_terminal
from workers.diagnosis.profile import GpuProfile, unavailable_profile
from workers.diagnosis.progress_checks import DEFAULT_STALL_SECONDS, main_started
from workers.diagnosis.queue_position import QueuePosition, awaits_admission
from workers.diagnosis.registry import ADMISSION, LAYER_CHECKS, PHASE_NAMES, RAYCLUSTER, STATUS_PROVEN
from workers.kube.client import Identity, KubeClients
from workers.kube.reader import KubeReader, ReadError, resource_path

PAGE_SIZE = 2000
EVENT_PODS = 2




def unreachable_diagnosis(run: str, namespace: str | None, report: LayerReport) -> Diagnosis:
    """Layer 1 or 2 failed: that is the answer; the phase tree was not checked."""
    label = LAYER_CHECKS[report.layer]
    phases = [
        PhaseResult(name=name, state=PhaseState.PENDING, layer=0,
                    summary=f"unreachable: layer {report.layer} ({label.lower()}) failed",
                    finding=_report_finding(report), reason="workspace.unreachable")
        for name in PHASE_NAMES
    ]
    return Diagnosis(
        run=RunRef(name=run, namespace=namespace, kind=None),
        phases=phases,
        first_incomplete=label,
        layer=report.layer,
        owner=report.owner or "platform",
        transient=report.transient,
        next_action=report.next_action,
        evidence=[report.summary] + [f"{c.name}: {c.detail}" for c in report.checks if c.state == "failed"],
        layer_info=layer_info(report.layer, run, namespace),
        unreachable_from=report.layer + 1,
    )


def _report_finding(report: LayerReport) -> Finding:
    return Finding(reason=f"workspace.layer{report.layer}", owner=report.owner or "platform",
                   transient=report.transient,
                   next_action=report.next_action or report.summary)


def _gap(error: ReadError) -> ReadGap | None:
    if error.kind == "not_found":
        return None
    return ReadGap(kind=error.kind, text=error.describe(), detail=error.message)


def uses_dra(run_obj: dict) -> bool:
    """Whether the run's pod templates (Job template, RayCluster groups) claim DRA devices."""
    return "resourceClaims" in json.dumps(run_obj.get("spec") or {})




def needs_events(diagnosis: Diagnosis) -> bool:
    """Events decide only some answers: readiness probes, mounts, DRA prepare, pull errors.

    A crash loop or an unschedulable pod is proven by the pod's status; an
    unclassified image pull error, a not-ready container or a container stuck
    creating is explained only by its events.
    """
    first = diagnosis.first_incomplete
    if first is None or first not in (*POD_JUDGES, RAYCLUSTER.name):
        return False
    phase = diagnosis.phase(first)
    if phase.state is not PhaseState.WARNING:
        return True
    cause = first
    if first == RAYCLUSTER.name:  # the pod phase whose evidence RayCluster borrows, if any
        cause = phase.via or ""
        if cause not in POD_JUDGES:  # KubeRay's HeadPodReady or ReplicaFailure said it
            return False
    if cause == image_pull.NAME:
        return phase.reason == "image.unclassified"
    return cause not in STATUS_PROVEN


def explaining_pods(objs: RunObjects, diagnosis: Diagnosis, now: datetime, limit: int = EVENT_PODS
                    ) -> list[dict]:
    """The few pods whose events can explain the first incomplete phase.

    For a pod phase: the pods that keep it from being done (those with its
    state first). For RayCluster: the same, among the Ray pods, for the first
    pod phase that is not done. Anything else needs no pod events.
    """
    first = diagnosis.first_incomplete
    ctx = RunContext(objs=objs, now=now)
    candidates: list[tuple[str, PhaseState, list[dict]]] = []
    if first in POD_JUDGES:
        candidates.append((first, diagnosis.phase(first).state, objs.pods))
    elif first == RAYCLUSTER.name:
        ray_pods = [p for p in objs.pods if objs.is_ray_pod(p)]
        candidates += [(name, PhaseState.WARNING, ray_pods) for name in POD_JUDGES]
    for name, state, pods in candidates:
        judged = [(POD_JUDGES[name](ctx, p).state, p) for p in pods]
        open_ = [(s, p) for s, p in judged if s is not PhaseState.DONE]
        if not open_:
            continue
        open_.sort(key=lambda sp: sp[0] is not state)
        return [p for _, p in open_[:limit]]
    return []


@dataclass
class Collected:
    """What `collect` gathered; `diagnosis` is set when it already evaluated exactly these objects."""

    objects: list[dict]
    gaps: dict[str, ReadGap]
    tauworkspace: dict | ReadError
    diagnosis: Diagnosis | None = None
    alongside: Any = None  # what `alongside` returned, when it ran
    linked: RunObjects | None = None  # the run's objects, linked once after round 2 (+ round 3's events)
    known_runs: list[str] | None = None  # a run not found: the names the user may list instead
    queue: Any = None  # what `queue` returned, when the run awaited admission (round 2), or REUSED
    workload_version: str = ""  # of the run's Workloads as round 2 listed them (`workload_version`)


REUSED = "reused"  # `Collected.queue` when the caller's earlier queue read still holds


async def collect(reader: KubeReader, namespace: str, run: str, now: datetime, tauworkspace: str, *,
                  alongside: Callable[[RunObjects], Awaitable[Any]] | None = None,
                  queue: Callable[[dict, Awaitable[list[dict] | ReadError]], Awaitable[Any]] | None = None,
                  on_run: Callable[[RunObjects], None] | None = None,
                  queue_unless: str | None = None) -> Collected:
    """Gather the run's objects in three concurrent rounds; errors become gaps, never silence.

    ``alongside`` is started on the objects of round 2 and runs concurrently with round 3 (the
    events): the node reads and the log read depend on the pods, not on the events, so a status
    costs three round trips, not five. ``queue`` (the queue-position reads) starts with round 2 when
    Kueue keeps the run suspended and goes on, for the ClusterQueue's reads, while round 2's other
    answers are evaluated (workers/collect/kueue.py); it is handed round 2's read of the run's
    Workloads too, to start what depends on them alone (a preempted run's preemptor) the moment
    they are in. ``on_run`` sees the run alone as soon as
    round 1 found it, to start what round 2 may carry for round 3 (the log's access review). With
    ``queue_unless`` (the version of the run's Workloads an earlier read was made at,
    `workload_version`) the queue is read only after round 2, and only when the Workloads changed;
    otherwise `Collected.queue` is `REUSED`."""
    gaps: dict[str, ReadGap] = {}
    objects: list[dict] = []

    def keep(plural: str, got: dict | list[dict] | ReadError) -> list[dict]:
        if isinstance(got, ReadError):
            gap = _gap(got)
            if gap:
                gaps.setdefault(plural, gap)
            return []
        items = got if isinstance(got, list) else [got]
        objects.extend(items)
        return items

    # Round 1: the TauWorkspace (layers 1–2) and the run itself, RayJob and Job alike.
    tw, rayjob, job = await asyncio.gather(
        reader.get(tauworkspace),
        reader.get(resource_path("ray.io", "v1", "rayjobs", namespace, run)),
        reader.get(resource_path("batch", "v1", "jobs", namespace, run)),
    )
    if isinstance(tw, ReadError) or ((tw.get("status") or {}).get("phase") != "Ready"):
        return Collected([], {}, tw)
    rayjob_items = keep("rayjobs", rayjob)
    job_items = keep("jobs", job)
    if "rayjobs" in gaps:
        # The RayJob could not be read: a Job of its name that a RayJob owns is KubeRay's submitter,
        # never the run itself (a failed read of a kind is never "none exist").
        job_items = [j for j in job_items if not any(
            ref.get("kind") == "RayJob" for ref in (j.get("metadata") or {}).get("ownerReferences") or [])]
        objects[:] = [o for o in objects if o.get("kind") != "Job" or o in job_items]
    if not rayjob_items and not job_items:
        if gaps:  # a read failed: never "not found", and no guesses
            return Collected(objects, gaps, tw)
        # Not found: the runs the user may list in the namespace, for "did you mean" (one more round,
        # only on this path; a LIST the user may not make suggests nothing).
        listed = await asyncio.gather(
            reader.list(resource_path("ray.io", "v1", "rayjobs", namespace), limit=PAGE_SIZE),
            reader.list(resource_path("batch", "v1", "jobs", namespace), limit=PAGE_SIZE))
        runs = [o for got in listed if not isinstance(got, ReadError) for o in got]  # kinds set by the reader
        return Collected(objects, gaps, tw, known_runs=run_names(runs))
    is_rayjob = bool(rayjob_items)  # a RayJob wins; a Job of its name is its submitter
    run_obj = (rayjob_items or job_items)[0]
    if on_run is not None:
        on_run(find_run([run_obj], run, namespace))

    # Round 2: Workloads, RayCluster, pods (each by a selector, not by pod count), and the
    # namespace's ResourceClaims when the run's pod templates use DRA.
    uid = (run_obj.get("metadata") or {}).get("uid") or ""
    pods_path = resource_path("", "v1", "pods", namespace)
    run_workloads = asyncio.ensure_future(_run_workloads(reader, namespace, uid))
    calls: dict[str, Awaitable[Any]] = {"workloads": run_workloads}
    if is_rayjob:
        rc_name = (run_obj.get("status") or {}).get("rayClusterName")
        if rc_name:
            rc_path = resource_path("ray.io", "v1", "rayclusters", namespace, rc_name)
            calls["rayclusters"] = reader.get(rc_path)
            calls["pods"] = reader.list(pods_path, label_selector=f"ray.io/cluster={rc_name}",
                                        limit=PAGE_SIZE)
        calls["pods:submitter"] = reader.list(pods_path, label_selector=f"batch.kubernetes.io/job-name={run}",
                                              limit=PAGE_SIZE)
    else:
        calls["pods"] = reader.list(pods_path, label_selector=f"batch.kubernetes.io/job-name={run}",
                                    limit=PAGE_SIZE)
    if uses_dra(run_obj):
        claims_path = resource_path("resource.k8s.io", "v1", "resourceclaims", namespace)
        calls["resourceclaims"] = reader.list(claims_path, limit=PAGE_SIZE)
    queued_run = queue is not None and awaits_admission(run_obj)
    if queued_run and queue is not None and queue_unless is None:
        calls["queue"] = queue(run_obj, run_workloads)
    results = dict(zip(calls, await asyncio.gather(*calls.values()), strict=True))
    queued = results.pop("queue", None)
    wl = results.pop("workloads")
    version = workload_version(wl) if isinstance(wl, list) else ""
    if queued_run and queue is not None and queue_unless is not None:
        queued = REUSED if version and version == queue_unless else await queue(run_obj, run_workloads)
    keep("workloads", wl)
    for key, got in results.items():
        keep(key.split(":")[0], got)

    # Round 3, only when the answer depends on them: the events of the few pods that
    # explain the first incomplete phase — together with whatever `alongside` reads.
    objs = find_run(objects, run, namespace)  # the one linkage of the status
    extra = asyncio.ensure_future(alongside(objs)) if alongside is not None else None
    prelim = evaluate(objects, run, now, namespace, gaps, linked=objs)
    if not needs_events(prelim):
        return Collected(objects, gaps, tw, prelim, await extra if extra is not None else None, objs,
                         queue=queued, workload_version=version)
    explain = explaining_pods(objs, prelim, now)
    events_path = resource_path("", "v1", "events", namespace)
    calls3 = {}
    for i, pod in enumerate(explain):
        name = (pod.get("metadata") or {}).get("name")
        selector = f"involvedObject.kind=Pod,involvedObject.name={name}"
        calls3[f"events:{i}"] = reader.list(events_path, field_selector=selector, limit=PAGE_SIZE)
    before = (len(objects), len(gaps))
    if calls3:
        for key, got in zip(calls3, await asyncio.gather(*calls3.values()), strict=True):
            keep(key.split(":")[0], got)
    unchanged = (len(objects), len(gaps)) == before
    if not unchanged:
        objs = objs.with_events(objects[before[0]:])
    return Collected(objects, gaps, tw, prelim if unchanged else None,
                     await extra if extra is not None else None, objs, queue=queued, workload_version=version)


async def _run_workloads(reader: KubeReader, namespace: str, uid: str) -> list[dict] | ReadError:
    """The run's Kueue Workloads, by the job-uid label Kueue sets on them; at v1beta1 on a cluster
    that serves only that (a 404 for v1beta2)."""
    selector = f"kueue.x-k8s.io/job-uid={uid}"
    got = await reader.list(resource_path("kueue.x-k8s.io", "v1beta2", "workloads", namespace),
                            label_selector=selector, limit=PAGE_SIZE)
    if isinstance(got, ReadError) and got.kind == "not_found":
        got = await reader.list(resource_path("kueue.x-k8s.io", "v1beta1", "workloads", namespace),
                                label_selector=selector, limit=PAGE_SIZE)
    return got


MAX_NODE_READS = 64  # distinct nodes of the run read; past this, the rest read "not read"
HOSTNAME_LABEL = "kubernetes.io/hostname"  # set by the kubelet on every node; equal to its name
MAX_NODE_FALLBACK_GETS = 8  # nodes the LIST missed (deleted, or a hostname that is not the name)
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


async def _value(value: Any) -> Any:
    return value


async def read_nodes(reader: KubeReader, objs: RunObjects) -> tuple[list[dict], dict[str, str]]:
    """The Nodes the run's live pods are bound to, in one impersonated LIST: a set-based selector
    on the kubelet's `kubernetes.io/hostname` label names exactly them, so 32 nodes cost one
    request instead of 32 GETs (and a 403 says "may not list nodes" once, for all). A name that
    cannot be a label value (over 63 characters) is read by a GET of its own beside the LIST, in
    the same round; a node the LIST did not return (a hostname that differs from the node's
    name, a node deleted since its pods were listed) by a GET after it — the one case where the
    nodes take a round more."""
    names = sorted({(p.get("spec") or {}).get("nodeName") for p in objs.pods
                    if (p.get("spec") or {}).get("nodeName") and not is_terminal(p)})
    if not names:
        return [], {}
    read, gaps = names[:MAX_NODE_READS], {n: f"not read (over {MAX_NODE_READS} nodes)"
                                           for n in names[MAX_NODE_READS:]}
    listable = [n for n in read if _LABEL_VALUE.match(n)]
    unlistable = [n for n in read if n not in listable]
    for name in unlistable[MAX_NODE_FALLBACK_GETS:]:
        gaps[name] = f"not read (not a {HOSTNAME_LABEL} value; over {MAX_NODE_FALLBACK_GETS} GETs)"
    unlistable = unlistable[:MAX_NODE_FALLBACK_GETS]
    found: dict[str, dict] = {}

    def keep(names: list[str], answers: list[dict | ReadError]) -> None:
        for name, one in zip(names, answers, strict=True):
            if isinstance(one, ReadError):
                gaps[name] = "node not found" if one.kind == "not_found" else one.describe()
            else:
                found[name] = one

    selector = f"{HOSTNAME_LABEL} in ({','.join(listable)})"
    listed, *singles = await asyncio.gather(
        reader.list(resource_path("", "v1", "nodes"), label_selector=selector) if listable else _value([]),
        *(reader.get(resource_path("", "v1", "nodes", name=n)) for n in unlistable))
    keep(unlistable, singles)
    if isinstance(listed, ReadError):
        gaps.update({n: listed.describe() for n in listable})
        listable = []
    else:
        wanted = set(listable)
        found.update({name: node for node in listed
                      if (name := (node.get("metadata") or {}).get("name")) in wanted})
    missing = [n for n in listable if n not in found]
    room = MAX_NODE_FALLBACK_GETS - len(unlistable)
    for name in missing[max(room, 0):]:
        gaps[name] = f"not read (not listed by {HOSTNAME_LABEL}; over {MAX_NODE_FALLBACK_GETS} GETs)"
    missing = missing[:max(room, 0)]
    if missing:
        keep(missing, list(await asyncio.gather(*(reader.get(resource_path("", "v1", "nodes", name=n))
                                                  for n in missing))))
    nodes = []
    for name in read:
        if name in found:
            found[name].setdefault("apiVersion", "v1")
            found[name].setdefault("kind", "Node")
            nodes.append(found[name])
    return nodes, gaps


def reads_driver_log(objs: RunObjects, now: datetime) -> bool:
    """A RayJob whose driver has started and that names its cluster and job: its status reads the
    driver log from the dashboard (known from the run alone, so its access review can be sent
    with round 2)."""
    status = (objs.run or {}).get("status") or {}
    return (objs.kind == "RayJob" and bool(status.get("rayClusterName")) and bool(status.get("jobId"))
            and main_started(RunContext(objs=objs, now=now)))


async def layer7_evidence(reader: KubeReader, ws: WorkspaceConnection, objs: RunObjects, now: datetime, *,
                          timeout: float, mlflow_token: str | None,
                          mlflow_auth: MlflowAuth | None = None, seen: SeenStore | None = None,
                          access: LogAccess | None = None, stall_seconds: int = DEFAULT_STALL_SECONDS,
                          ahead: ReadAhead | None = None
                          ) -> tuple[LogEvidence | None, ExperimentEvidence | None]:
    """The log (one bounded read) once the run's main process has started, and the experiment
    record when the workspace names a store — the latter read with the bot's token, so only after
    the user's access review for `get` on the run itself. ``access``: the `get pods/log` review,
    when the caller sent it early; ``ahead``: the reads that depend on the log, sent with it when
    the last read of the run or round 2's objects call for them (workers/collect/logs/ahead.py),
    and what this read finds, kept for the next."""
    if objs.run is None or not main_started(RunContext(objs=objs, now=now)):
        return None, None
    kusto = ws.spec.logs.kusto if ws.spec.logs else None
    uid = (objs.run.get("metadata") or {}).get("uid")

    async def logs_read() -> LogEvidence:
        if ahead is not None and access is not None:
            ahead.start_stack(objs, access.answer)  # with the log, if the last read found the driver waiting
        read = await log_evidence(reader, objs, kusto=kusto, now=now, timeout=timeout, access=access,
                                  stall_seconds=stall_seconds, ranks=True,  # every rank's tail (SPEC §5c)
                                  ahead=ahead)
        read = remember(seen, uid, read, now)
        read = await with_driver_stack(reader, objs, read, now=now, stall_seconds=stall_seconds,
                                       access=access, ahead=ahead)
        if ahead is not None:
            ahead.keep(objs)
        return read

    logs_call = logs_read()
    store = ws.spec.experiments
    if store is None:
        return await logs_call, None

    async def record() -> ExperimentEvidence:
        group, resource = ("ray.io", "rayjobs") if objs.kind == "RayJob" else ("batch", "jobs")
        allowed = await reader.access_review("get", resource, group, namespace=objs.namespace, name=objs.name)
        if isinstance(allowed, ReadError):
            return ExperimentEvidence(unavailable=f"access review {allowed.describe()}")
        if not allowed:
            return ExperimentEvidence(unavailable=f"permission denied (get {resource})")
        auth = mlflow_auth or MlflowAuth(token=mlflow_token)
        return await experiment_record(store.mlflow.uri, objs.name, auth=auth,
                                       experiment=store.mlflow.experiment, timeout=timeout)

    logs, experiment = await asyncio.gather(logs_call, record())
    return logs, experiment


async def diagnose_live(registry: Registry, *, run: str, identity: Identity, now: datetime,
                        workspace: str | None = None, channel: str | None = None,
                        kube: KubeClients | None = None, seen: SeenStore | None = None,
                        mlflow_token: str | None = None, mlflow_auth: MlflowAuth | None = None,
                        **plan: Any) -> RunReport:
    """Resolve the workspace (once), then `investigate` (the CLI's and the tests' entry); ``plan``:
    the `ReadPlan`'s fields."""
    resolution = registry.resolve(workspace=workspace, channel=channel)
    return await investigate(resolution, kube=kube or KubeClients(), identity=identity, now=now,
                             plan=ReadPlan(run=run, workspace=workspace, **plan), seen=seen,
                             mlflow_auth=mlflow_auth or MlflowAuth(token=mlflow_token))


async def investigate(resolution: Resolution, *, kube: KubeClients, identity: Identity, now: datetime,
                      plan: ReadPlan, seen: SeenStore | None = None,
                      mlflow_auth: MlflowAuth | None = None) -> RunReport:
    """Collect under `identity` in the resolved workspace and evaluate, in one impersonated client
    session of its own (`investigate_in` for a caller that opens the session and shares it with
    its own reviews). Layers 1–2 first: a workspace that does not resolve opens no client."""
    if isinstance(resolution, ResolutionFailure):
        return unresolved_report(resolution, plan)
    ws = resolution.descriptor
    async with user_session(kube, ws, identity, plan.timeout) as reader:
        return await investigate_in(reader, ws, now=now, plan=plan, seen=seen, mlflow_auth=mlflow_auth)


def unresolved_report(resolution: ResolutionFailure, plan: ReadPlan) -> RunReport:
    """Layer 1 failed before any read: the descriptor does not resolve."""
    report = resolution_report(resolution, plan.workspace)
    return RunReport(diagnosis=unreachable_diagnosis(plan.run, None, report), workspace=plan.workspace,
                     namespace=None, requests=0, objects=[], layer_report=report,
                     profile=_layer_profile(report) if plan.profile else None)


@asynccontextmanager
async def user_session(kube: KubeClients, ws: WorkspaceConnection, identity: Identity,
                       timeout: float) -> AsyncIterator[KubeReader]:
    """One impersonated client for everything a status reads as ``identity`` — the investigation
    and the reviews beside it (operator hints, node validation): one connection, one identity."""
    api = await kube.user(ws.cluster_target(), identity)
    async with api:
        yield KubeReader(api, timeout)


async def investigate_in(reader: KubeReader, ws: WorkspaceConnection, *, now: datetime, plan: ReadPlan,
                         seen: SeenStore | None = None, mlflow_auth: MlflowAuth | None = None) -> RunReport:
    """`investigate` inside the caller's session: collect, evaluate, and with `plan.profile` the GPU
    run profile (SPEC §6), its reads sent within the status's rounds on the same client
    (`ProfileReads`); without it the request count is exactly the base status's. The objects are
    linked once; the answer is one `RunReport` that every later reader uses. `plan.queue_memo` (a
    watch's last queue read) is reused while the run's Workloads are unchanged, so such a tick
    makes no queue reads; `plan.list_namespace_workloads` False (a tick) reads the Workloads ahead
    by name instead of listing the namespace's."""
    run, timeout, layer7, stall_seconds = plan.run, plan.timeout, plan.layer7, plan.stall_seconds
    queue_memo = plan.queue_memo
    ns = ws.spec.namespace
    start = reader.requests_made
    # The driver log may be read only after the user's `get pods/log` review allowed it; sent
    # with round 2 (the pods), the read itself joins round 3 instead of adding two (issue 28).
    log_access = LogAccess(reader, ns)
    # What the last read of the run found sends the log's dependent reads with it (issue 36.2).
    ahead = ReadAhead(reader, seen, now, stall_seconds)
    # `--run-profile`: the exporter discovery with round 2, the metrics with round 3 (issue 36.2).
    profile_reads = ProfileReads(reader, now=now, namespaces=plan.exporter_namespaces, hints=seen,
                                 cluster=ws.cluster_target().model_dump_json()) if plan.profile else None

    def on_run(objs: RunObjects) -> None:
        if profile_reads is not None:
            profile_reads.discover(objs)
        driver_log = layer7 and reads_driver_log(objs, now)
        if driver_log:
            log_access.start()
        if layer7:
            ahead.recall(objs, driver_log=driver_log)
            if ahead.review_with_round_2(objs):
                log_access.start()

    async def nodes_and_evidence(objs: RunObjects) -> tuple[Any, Any]:
        if profile_reads is not None:
            profile_reads.scrape(objs)
        none: tuple[Any, Any] = (None, None)
        nodes_call = read_nodes(reader, objs) if plan.nodes_health and objs.pods else _value(none)
        evidence_call = layer7_evidence(reader, ws, objs, now, timeout=timeout, mlflow_token=None,
                                        mlflow_auth=mlflow_auth, seen=seen,
                                        access=log_access, stall_seconds=stall_seconds, ahead=ahead,
                                        ) if layer7 else _value(none)
        return tuple(await asyncio.gather(nodes_call, evidence_call))  # type: ignore[return-value]

    cluster = ws.cluster_target().model_dump_json()
    memo_hint = queue_memo.cluster_queue if queue_memo else None
    own_hint = memo_hint or CLUSTER_QUEUE_NAMES.get(cluster, ns, ws.spec.localQueue, shared=seen)
    # Issue 35: with no ClusterQueue hint (a fresh process, none in Redis), the user's read of the
    # descriptor's LocalQueue goes with round 1, so a waiting run's ClusterQueue reads join round 2
    # and the Workloads ahead in other namespaces round 3. Only a status without a hint pays it —
    # one GET, no round — and it teaches the hint, so the next status does not. A watch's tick
    # (``queue_memo``) never does: it reuses its status's read.
    first_queue = None if own_hint or queue_memo is not None else asyncio.ensure_future(
        read_local_queue(reader, ns, ws.spec.localQueue))

    async def queue(run_obj: dict, run_workloads: Awaitable[list[dict] | ReadError]) -> QueueRead:
        local_queue = labels(run_obj).get(QUEUE_LABEL) or ws.spec.localQueue
        hint = own_hint if local_queue == ws.spec.localQueue else \
            memo_hint or CLUSTER_QUEUE_NAMES.get(cluster, ns, local_queue, shared=seen)
        known = None  # the run's LocalQueue as this status read it in round 1
        if first_queue is not None:
            early = await first_queue
            if local_queue == ws.spec.localQueue:
                known = early
            else:  # another LocalQueue of the namespace: the descriptor's ClusterQueue is only a hint
                hint = hint or named_cluster_queue(early)

        async def preemptor() -> PreemptorRead:
            return await read_preemption(reader, ns, await run_workloads)

        async def etas(holders: list[dict]) -> EtaRead:  # the holders' ETAs this user may read (issue 35)
            return await readable_etas(reader, seen, holders, now, namespace=ns, own_review=log_access.answer)

        read, preempting = await asyncio.gather(
            read_queue(reader, ns, local_queue, cluster_queue=hint, run_uid=meta(run_obj).get("uid") or "",
                       list_namespace=plan.list_namespace_workloads, local_queue_object=known,
                       run_workloads=run_workloads, etas=etas),
            preemptor())
        read.preemptor = preempting
        CLUSTER_QUEUE_NAMES.learn(cluster, ns, local_queue, read.queue_object, shared=seen)
        return read

    try:
        collected = await collect(reader, ns, run, now, tauworkspace_path(ws),
                                  alongside=nodes_and_evidence, queue=queue, on_run=on_run,
                                  queue_unless=queue_memo.workload_version if queue_memo else None)
    finally:
        await log_access.settle()
        await ahead.settle()
        if profile_reads is not None:
            await profile_reads.settle()
        if first_queue is not None:
            if first_queue.done() and not first_queue.cancelled() and first_queue.exception() is None:
                CLUSTER_QUEUE_NAMES.learn(cluster, ns, ws.spec.localQueue, first_queue.result(), shared=seen)
            else:
                first_queue.cancel()
    objects, tw = collected.objects, collected.tauworkspace
    gpu_profile: GpuProfile | None = None
    ready = isinstance(tw, dict) and (tw.get("status") or {}).get("phase") == "Ready"
    logs: LogEvidence | None = None
    experiment: ExperimentEvidence | None = None
    node_gaps: dict[str, str] | None = None
    if ready and collected.alongside is not None:
        (node_objects, node_gaps), (logs, experiment) = collected.alongside
        objects = [*objects, *(node_objects or [])]
    if ready and profile_reads is not None:
        gpu_profile = await profile_reads.profile(collected.linked or find_run(objects, run, ns))
    report: LayerReport | None = None
    if isinstance(tw, ReadError):
        report = unreachable_report(ws, tw, f"TauWorkspace {ws.spec.workspace}")
    elif (tw.get("status") or {}).get("phase") != "Ready":
        report = readiness_report(ws, tw, None)
    if report is not None:
        diagnosis = unreachable_diagnosis(run, ns, report)
        if plan.profile:
            gpu_profile = _layer_profile(report)
    elif (logs is None and experiment is None and not node_gaps and len(objects) == len(collected.objects)
          and not (gpu_profile and gpu_profile.gpu_health)):
        diagnosis = collected.diagnosis or evaluate(objects, run, now, ns, collected.gaps,
                                                    stall_seconds=stall_seconds, linked=collected.linked,
                                                    known_runs=collected.known_runs)
    else:
        diagnosis = evaluate(objects, run, now, ns, collected.gaps, logs=logs, experiment=experiment,
                             stall_seconds=stall_seconds, node_gaps=node_gaps,
                             dcgm_health=gpu_profile.gpu_health if gpu_profile else None,
                             linked=collected.linked)
    if diagnosis.eta is not None and collected.linked is not None and collected.linked.run is not None:
        # for the start estimates of runs waiting behind this one (issue 35, `kueue_etas`)
        remember_eta(seen, meta(collected.linked.run).get("uid"), diagnosis.eta.expected_end, now)
    memo: QueueMemo | None = None
    if report is None and waiting_for_quota(diagnosis):
        preemption = None
        if isinstance(collected.queue, str) and queue_memo is not None:  # REUSED: nothing changed
            memo = queue_memo.model_copy(update={"fresh": False})
            position, preemption = memo.position, memo.preemption
            if preemption is not None:  # the preemptor as the status read it (issue 35): no re-read
                diagnosis = with_preemption(diagnosis, preemption)
        else:
            position = _position(collected, now)
            if collected.linked is not None and diagnosis.phase(ADMISSION.name).preemption is not None:
                # Read with the queue (2 requests, round 3); only a run Kueue had not suspended reads it now.
                pre = collected.queue.preemptor if isinstance(collected.queue, QueueRead) else None
                if pre is None:
                    pre = await read_preemption(reader, ns, collected.linked.workloads)
                diagnosis = with_preemptor(diagnosis, collected.linked, pre)
                preemption = diagnosis.phase(ADMISSION.name).preemption
            if isinstance(collected.queue, QueueRead) and collected.workload_version:
                memo = QueueMemo(workload_version=collected.workload_version, position=position,
                                 cluster_queue=position.cluster_queue, preemption=preemption)
        # A run that can never fit is a warning with the numbers, as a dump's answer is (SPEC §5b).
        diagnosis = with_never_fits(diagnosis.model_copy(update={"queue_position": position}), position)
    return RunReport(diagnosis=diagnosis, workspace=ws.metadata.name, namespace=ns,
                     requests=reader.requests_made - start + (profile_reads.requests if profile_reads else 0),
                     objects=objects, layer_report=report,
                     profile=gpu_profile, descriptor=ws, linked_objects=collected.linked, queue_memo=memo)


def waiting_for_quota(diagnosis: Diagnosis) -> bool:
    """The answer is Kueue admission waiting for quota — or preempted and requeued, when its place
    in the queue is said again, or over the queue's maximum, when by how much is said (issue 35):
    the answers a queue position serves (`admission.FORECAST_FOR`)."""
    return (diagnosis.first_incomplete == ADMISSION.name
            and diagnosis.phase(ADMISSION.name).reason in FORECAST_FOR)


def _position(collected: Collected, now: datetime | None = None) -> QueuePosition:
    objs = collected.linked
    if not isinstance(collected.queue, QueueRead) or objs is None or objs.run is None:
        return QueuePosition(local_queue="?", unavailable="not read (Kueue had not suspended the run)")
    return position_from(collected.queue, run_uid=meta(objs.run).get("uid") or "",
                         workload_names={meta(w).get("name") for w in objs.workloads},
                         run_workloads=objs.workloads, now=now)


def _layer_profile(report: LayerReport) -> GpuProfile:
    """Layers 1–2 failed: no run to profile, and the reason is theirs."""
    return unavailable_profile(f"layer {report.layer} failed: {report.summary}")
