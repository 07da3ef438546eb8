"""Generate the bundled example dumps in ``workers/examples/`` from the fixture builders.

Each example is a self-contained ``kubectl get -o json`` List of one stuck (or healthy) run
plus unrelated objects that must not be linked to it. ``EXAMPLES`` also records the diagnosis
each one must produce at ``NOW`` (SPEC §3–§4), so tests can parametrize over it.

Run from the repository root: ``python -m bench.make_examples`` (rewrites the JSON files and
the README; the output is deterministic).
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tests.fixtures import dcgm, k8s, ray_dashboard
from tests.fixtures.k8s import Obj

NOW = "2026-11-30T10:30:00Z"
"""Pass as ``--now``: every example is judged 30 minutes after ``k8s.T0``."""

NS = k8s.NS
OUT_DIR = Path(__file__).resolve().parent.parent / "workers" / "examples"
GPU_NODES = [f"aks-a100-38141759-vmss00000{i}" for i in range(6)]
CPU_NODE = "aks-cpu-20931877-vmss000001"
PRIVATE_IMAGE = "taugridacr.azurecr.io/vision/vit-private:1.4.0"


@dataclass(frozen=True)
class Example:
    """One bundled dump and the diagnosis it must produce at ``NOW``."""

    file: str
    run: str
    kind: str | None
    what: str
    first_incomplete: str | None
    layer: int
    owner: str
    transient: bool | None
    state: str | None
    """State of the first incomplete phase (None when every phase is done)."""


# --------------------------------------------------------------------------- shared pieces


def queues(gpu_quota: int = 16, gpu_used: int = 16) -> list[Obj]:
    return [k8s.local_queue("team-a", admitted=2, pending=1),
            k8s.cluster_queue(gpu_quota=gpu_quota, gpu_used=gpu_used)]


# A time limit on the other run (job label kueue.x-k8s.io/max-exec-time-seconds, copied into the
# Workload's spec.maximumExecutionTimeSeconds by Kueue's jobframework): its quota comes back by
# admission + 4 h at the latest (workload_controller.go reconcileMaxExecutionTime).
HOLDER_LIMIT_SECONDS = 4 * 3600


def _time_limited(objs: list[Obj], seconds: int = HOLDER_LIMIT_SECONDS) -> list[Obj]:
    for o in objs:
        if o["kind"] == "Job" and o["metadata"]["name"] == "clip-eval-2":
            o["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = str(seconds)
        if o["kind"] == "Workload" and o["metadata"]["name"].startswith("job-clip-eval-2-"):
            o["spec"]["maximumExecutionTimeSeconds"] = seconds
    return objs


def healthy_job_run(name: str, pods: int = 2, node_offset: int = 4) -> list[Obj]:
    """Another researcher's Job, admitted and running: must never be linked to the asked run."""
    j = k8s.job(name, parallelism=pods, active=pods, ready=pods, at=-3600)
    wl = k8s.workload(j, at=-3599, pods_ready=True)
    objs: list[Obj] = [j, wl, k8s.ev_created_workload(j, wl, first=-3599)]
    for i in range(pods):
        objs.append(k8s.job_pod(j, i, node=GPU_NODES[(node_offset + i) % len(GPU_NODES)], created=-3590))
    return objs


def background(*exclude: str) -> list[Obj]:
    """Unrelated objects every dump carries: another run, an unrelated warning, a stray pod."""
    name = next(n for n in ("clip-eval-2", "resnet-sweep-3") if n not in exclude)
    objs = healthy_job_run(name)
    stray = k8s.pod(
        "nb-scratch-7f9c",
        node=CPU_NODE,
        gpus=0,
        containers=[k8s.running("notebook", "jupyter/base-notebook:2026-11-01")],
        restart_policy="Always",
        created=-7200,
    )
    objs += [
        stray,
        k8s.event_v1(
            stray,
            "Unhealthy",
            "Readiness probe failed: HTTP probe failed with statuscode: 503",
            count=3,
            first=600,
            last=700,
            field_path="spec.containers{notebook}",
            host=CPU_NODE,
        ),
    ]
    return objs


def _ok(e: Obj | None) -> Obj:
    assert e is not None
    return e


# --------------------------------------------------------------------------- layer 3


def l3_job_not_found() -> list[Obj]:
    """A Job run that does not exist; a bare pod whose name starts like it is not a run."""
    decoy = k8s.pod(
        "llama-ft-7b-debug",
        node=CPU_NODE,
        gpus=0,
        containers=[k8s.running("shell", "busybox:1.37")],
        restart_policy="Always",
        created=-600,
    )
    return [*background(), *healthy_job_run("resnet-sweep-3", 1, 2), decoy]


def l3_rayjob_not_found() -> list[Obj]:
    """The asked RayJob is absent; ``ray-pretrain-13b-v2`` (a different run) is present."""
    rj = k8s.rayjob("ray-pretrain-13b-v2", at=-1800)
    rc = k8s.raycluster(rayjob=rj, state="ready", at=-1795)
    wl = k8s.workload(rj, at=-1799, pods_ready=True)
    head = k8s.ray_pod(rc, "head", node=CPU_NODE, created=-1790)
    workers = [k8s.ray_pod(rc, "worker", index=i, node=GPU_NODES[i], created=-1790) for i in range(2)]
    sub = k8s.submitter_job(rj, at=-1700, active=1, ready=1)
    return [*background(), rj, rc, wl, head, *workers, sub, k8s.submitter_pod(sub, created=-1699)]


# --------------------------------------------------------------------------- layer 4


def l4_job_waiting_for_quota() -> list[Obj]:
    """32 GPUs asked of a 40-GPU ClusterQueue whose other run holds 16 until its time limit: Kueue
    (older, reason Pending) says 8 more are needed; the dump's ClusterQueue and the holder's limit
    give the start estimate (latest 13:00, when clip-eval-2's limit frees its 16)."""
    j = k8s.job("llama-ft-7b", suspend=True, parallelism=4, at=60)
    wl = k8s.workload(j, state="pending", at=61)
    qr = wl["status"]["conditions"][0]
    qr["message"] = qr["message"].replace("4 more needed", "8 more needed")
    return [
        *_time_limited(background()),
        *queues(gpu_quota=40),
        j,
        wl,
        k8s.ev_created_workload(j, wl, first=61),
        _ok(k8s.ev_workload_pending(wl, first=62, last=1790)),
    ]


def l4_job_localqueue_missing() -> list[Obj]:
    j = k8s.job("bert-distill", queue="user-queue", suspend=True, at=300)
    wl = k8s.workload(j, "kueue.x-k8s.io/v1beta1", state="inadmissible", at=301)
    return [
        *background(),
        *queues(),
        j,
        wl,
        k8s.ev_created_workload(j, wl, first=301),
        _ok(k8s.ev_workload_pending(wl, first=302, last=1780)),
    ]


def l4_rayjob_exceeds_max_quota() -> list[Obj]:
    rj = k8s.rayjob(
        "ray-pretrain-13b",
        suspend=True,
        deployment_status="Suspended",
        worker_groups=[("gpu-workers", 6, 8)],
        at=120,
    )
    wl = k8s.workload(rj, state="exceeds_max", at=121)
    qr = wl["status"]["conditions"][0]  # the ClusterQueue's 40 GPUs (its nominal quota, no cohort)
    qr["message"] = qr["message"].replace("maximum capacity (16)", "maximum capacity (40)")
    return [
        *background(),
        *queues(gpu_quota=40),
        rj,
        wl,
        k8s.ev_created_workload(rj, wl, first=121),
        _ok(k8s.ev_workload_pending(wl, first=122, last=1795)),
    ]


def l4_rayjob_preempted() -> list[Obj]:
    """Kueue 0.18's shapes (pkg/scheduler/preemption/preemption.go, docs/reference/kueue-verified.md):
    urgent-eval (priority 1000) took the quota of ray-sweep-lr (priority 100) in the same ClusterQueue;
    the Evicted/Preempted conditions carry the message with the paths, the Preempted event (Normal,
    events.k8s.io) adds the effective priorities; the run is requeued, QuotaReserved=False
    WaitingForQuota. The preemptor's Job and Workload are in the dump (the user could read them)."""
    rj = k8s.rayjob("ray-sweep-lr", suspend=True, deployment_status="Suspended", at=-600)
    wl = k8s.workload(rj, "kueue.x-k8s.io/v1beta1", state="preempted", at=-599, priority=100)
    urgent = k8s.job("urgent-eval", parallelism=2, active=2, at=0)
    pre = k8s.workload(urgent, at=1, priority=1000, pods_ready=True)
    pre["spec"]["maximumExecutionTimeSeconds"] = 2 * 3600
    text = (f"Preempted to accommodate a workload (UID: {pre['metadata']['uid']}, JobUID: "
            f"{urgent['metadata']['uid']}) due to prioritization in the ClusterQueue; preemptor path: "
            "/cluster-queue; preemptee path: /cluster-queue")
    for c in wl["status"]["conditions"]:
        if c["type"] in ("Evicted", "Preempted", "Requeued"):
            c["message"] = text
        if c["type"] == "QuotaReserved":
            c["reason"] = "WaitingForQuota"
    priorities = ("; preemptor effective priority: 1000 (base: 1000, boost: 0); preemptee effective "
                  "priority: 100 (base: 100, boost: 0)")
    return [  # clip-eval-2 (16, no time limit) and urgent-eval (16, 2 h) hold all 32 of the queue's GPUs
        *background(),
        *queues(gpu_quota=32, gpu_used=32),
        rj,
        wl,
        urgent,
        pre,
        k8s.ev_created_workload(rj, wl, first=-599),
        k8s.ev_created_workload(urgent, pre, first=1),
        k8s.event_v1_events(wl, "Preempted", text + priorities, type="Normal", first=1,
                            reporting_controller="kueue-admission"),
        k8s.event_v1(
            rj,
            "Suspended",
            "Suspended RayJob ray-sweep-lr",
            type="Normal",
            first=3,
            source_component="rayjob-controller",
        ),
        _ok(k8s.ev_workload_pending(wl, first=4, last=1790)),
    ]


def l4_rayjob_admission_check_pending() -> list[Obj]:
    rj = k8s.rayjob("ray-llava-ft", suspend=True, deployment_status="Suspended", at=900)
    wl = k8s.workload(rj, state="admission_check_pending", at=901, cluster_queue="dws-cluster-queue")
    return [*background(), rj, wl, k8s.ev_created_workload(rj, wl, first=901)]


# --------------------------------------------------------------------------- layer 5


def l5_job_unschedulable_gpu() -> list[Obj]:
    j = k8s.job("llama-ft-7b", parallelism=4, active=4, at=60)
    wl = k8s.workload(j, at=61, pods_ready=False)
    msg = k8s.msg_unschedulable("gpu", nodes=6)
    objs: list[Obj] = [*background(), j, wl, k8s.ev_created_workload(j, wl, first=61)]
    for i in range(4):
        p = k8s.job_pod(
            j,
            i,
            containers=[k8s.waiting("trainer", reason="ContainerCreating")],
            conditions=k8s.cond_unschedulable(msg, at=70),
            created=70,
        )
        objs += [p, k8s.ev_failed_scheduling(p, msg, count=25, first=70, last=1780)]
    return objs


def l5_job_imagepull_unauthorized() -> list[Obj]:
    j = k8s.job("vit-pretrain", parallelism=2, active=2, image=PRIVATE_IMAGE, at=200)
    wl = k8s.workload(j, at=201, pods_ready=False)
    p0 = k8s.job_pod(
        j,
        0,
        node=GPU_NODES[0],
        containers=[k8s.image_pull_backoff("trainer", PRIVATE_IMAGE)],
        created=210,
    )
    p1 = k8s.job_pod(
        j,
        1,
        node=GPU_NODES[1],
        containers=[k8s.err_image_pull("trainer", PRIVATE_IMAGE, "unauthorized")],
        created=210,
    )
    return [
        *background(),
        j,
        wl,
        k8s.ev_created_workload(j, wl, first=201),
        *k8s.ev_pull_failed(p0, PRIVATE_IMAGE, "unauthorized", first=215, last=1700),
        *k8s.ev_pull_failed(p1, PRIVATE_IMAGE, "unauthorized", first=216, last=1790),
        p0,
        p1,
    ]


def l5_job_oomkilled() -> list[Obj]:
    j = k8s.job("llama-ft-7b", restart_policy="OnFailure", active=1, at=60)
    wl = k8s.workload(j, at=61, pods_ready=False)
    p = k8s.job_pod(
        j,
        0,
        node=GPU_NODES[2],
        containers=[k8s.crash_loop("trainer", exit_code=137, reason="OOMKilled", restart_count=6)],
        created=70,
    )
    return [
        *background(),
        j,
        wl,
        k8s.ev_created_workload(j, wl, first=61),
        p,
        k8s.ev_backoff_restart(p, count=18, first=300, last=1700),
    ]


def _ray_admitted(name: str) -> tuple[Obj, Obj]:
    rj = k8s.rayjob(name, deployment_status="Initializing", at=60)
    wl = k8s.workload(rj, at=61, pods_ready=False)
    return rj, wl


def l5_rayjob_head_crashloop() -> list[Obj]:
    rj, wl = _ray_admitted("ray-pretrain-13b")
    cluster = rj["status"]["rayClusterName"]
    head_name = k8s.ray_pod_name(cluster, "head")
    head_ref = f"{head_name}_{NS}({k8s.uid_for('Pod', NS, head_name)})"
    rc = k8s.raycluster(
        rayjob=rj,
        at=65,
        conditions=[
            k8s.rc_provisioned(False, at=65),
            k8s.rc_head_pod_ready(
                False,
                reason="CrashLoopBackOff",
                message=f"back-off 5m0s restarting failed container=ray-head pod={head_ref}",
                at=400,
            ),
        ],
    )
    head = k8s.ray_pod(
        rc,
        "head",
        node=CPU_NODE,
        containers=[
            k8s.crash_loop(
                "ray-head",
                image=k8s.RAY_IMAGE,
                exit_code=1,
                restart_count=7,
                message="ModuleNotFoundError: No module named 'flash_attn'",
            )
        ],
        created=66,
    )
    workers = [
        k8s.ray_pod(
            rc,
            "worker",
            index=i,
            node=GPU_NODES[i],
            init_containers=[k8s.running("wait-gcs-ready", k8s.RAY_IMAGE, ready=False)],
            containers=[k8s.waiting("ray-worker", k8s.RAY_IMAGE, "PodInitializing")],
            created=66,
        )
        for i in range(2)
    ]
    return [
        *background(),
        rj,
        wl,
        rc,
        head,
        *workers,
        k8s.ev_created_workload(rj, wl, first=61),
        k8s.event_v1_events(
            head,
            "BackOff",
            f"Back-off restarting failed container ray-head in pod {head_ref}",
            count=25,
            first=300,
            last=1750,
            field_path="spec.containers{ray-head}",
            host=CPU_NODE,
        ),
    ]


def l5_rayjob_dra_unallocated() -> list[Obj]:
    rj, wl = _ray_admitted("ray-dra-llama")
    rc = k8s.raycluster(
        rayjob=rj,
        at=65,
        conditions=[k8s.rc_provisioned(False, at=65), k8s.rc_head_pod_ready(True, at=120)],
    )
    head = k8s.ray_pod(rc, "head", node=CPU_NODE, created=66)
    msg = k8s.msg_unschedulable("dra", nodes=6)
    objs: list[Obj] = [*background(), rj, wl, rc, head, k8s.ev_created_workload(rj, wl, first=61)]
    for i in range(2):
        name = k8s.ray_pod_name(rc["metadata"]["name"], "worker", "gpu-workers", f"/{i}" if i else "")
        claim = k8s.resource_claim(pod=name, allocated=False, count=8, at=66)
        p = k8s.ray_pod(
            rc,
            "worker",
            index=i,
            containers=[k8s.waiting("ray-worker", k8s.RAY_IMAGE, "ContainerCreating")],
            resource_claims=[claim],
            conditions=k8s.cond_unschedulable(msg, at=67),
            created=66,
        )
        objs += [
            p,
            claim,
            k8s.event_v1_events(
                p,
                "FailedScheduling",
                msg,
                count=40,
                first=67,
                last=1790,
                reporting_controller="default-scheduler",
                action="Scheduling",
            ),
        ]
    return objs


# --------------------------------------------------------------------------- layer 7


def l7_job_running_healthy() -> list[Obj]:
    return [*background("resnet-sweep-3"), *queues(), *healthy_job_run("resnet-sweep-3", 2, 0)]


def l7_job_succeeded() -> list[Obj]:
    """Succeeded after one OOMKilled attempt: the finished run is judged as it finished."""
    j = k8s.job(
        "clip-eval-2",
        conditions=k8s.job_complete(at=1500),
        succeeded=1,
        failed=1,
        at=0,
        start_at=5,
        completion_at=1500,
    )
    wl = k8s.workload(j, state="finished", at=1)
    failed = k8s.job_pod(
        j,
        0,
        node=GPU_NODES[3],
        containers=[k8s.terminated(exit_code=137, reason="OOMKilled", finished_at=400)],
        conditions=k8s.cond_failed(at=10, finished_at=400),
        created=10,
    )
    ok = k8s.job_pod(
        j,
        1,
        node=GPU_NODES[3],
        containers=[k8s.terminated(exit_code=0, started_at=420, finished_at=1495)],
        created=405,
    )
    return [
        *background("clip-eval-2"),
        j,
        wl,
        k8s.ev_created_workload(j, wl, first=1),
        failed,
        ok,
        k8s.event_v1(
            j,
            "Completed",
            "Job completed",
            type="Normal",
            first=1500,
            source_component="job-controller",
        ),
    ]


def l7_rayjob_running() -> list[Obj]:
    rj = k8s.rayjob("ray-pretrain-13b", at=60)
    wl = k8s.workload(rj, at=61, pods_ready=True)
    rc = k8s.raycluster(rayjob=rj, state="ready", at=65)
    rj["status"]["rayClusterStatus"] = copy.deepcopy(rc["status"])
    head = k8s.ray_pod(rc, "head", node=CPU_NODE, created=66)
    workers = [k8s.ray_pod(rc, "worker", index=i, node=GPU_NODES[i], created=66) for i in range(2)]
    sub = k8s.submitter_job(rj, at=200, active=1, ready=1)
    return [
        *background(),
        rj,
        wl,
        rc,
        head,
        *workers,
        sub,
        k8s.submitter_pod(sub, node=CPU_NODE, created=201),
        k8s.ev_created_workload(rj, wl, first=61),
    ]


def l7_rayjob_failed_submission() -> list[Obj]:
    """The kuberay#2314 shape: jobStatus RUNNING next to jobDeploymentStatus Failed."""
    msg = (
        "Job submission has failed. Reason: BackoffLimitExceeded. Message: Job has reached the "
        "specified backoff limit"
    )
    rj = k8s.rayjob(
        "ray-data-prep",
        at=0,
        deployment_status="Failed",
        job_status="RUNNING",
        reason="SubmissionFailed",
        message=msg,
        failed=1,
        end_at=1200,
        ttl_seconds_after_finished=3600,
    )
    wl = k8s.workload(rj, state="finished_failed", at=1, finished_message=msg)
    rc = k8s.raycluster(rayjob=rj, state="ready", at=5)
    head = k8s.ray_pod(rc, "head", node=CPU_NODE, created=6)
    workers = [k8s.ray_pod(rc, "worker", index=i, node=GPU_NODES[i], created=6) for i in range(2)]
    sub = k8s.submitter_job(rj, at=150, failed=3, conditions=k8s.job_failed(at=1190), start_at=151)
    sub_pods = [
        k8s.submitter_pod(
            sub,
            i,
            node=CPU_NODE,
            containers=[
                k8s.terminated(
                    "ray-job-submitter",
                    k8s.RAY_IMAGE,
                    exit_code=1,
                    started_at=160 + 350 * i,
                    finished_at=400 + 350 * i,
                    message="RuntimeError: Failed to connect to Ray at address: "
                    "http://ray-data-prep-head-svc:8265",
                )
            ],
            conditions=k8s.cond_failed("ray-job-submitter", at=155 + 350 * i, finished_at=400 + 350 * i),
            created=155 + 350 * i,
        )
        for i in range(3)
    ]
    return [
        *background(),
        rj,
        wl,
        rc,
        head,
        *workers,
        sub,
        *sub_pods,
        k8s.ev_created_workload(rj, wl, first=1),
        k8s.event_v1(
            sub,
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
            first=1190,
            source_component="job-controller",
        ),
    ]


# --------------------------------------------------------------------------- the table

_W, _A, _D = "warning", "active", "pending"

EXAMPLES: list[tuple[Example, Callable[[], list[Obj]]]] = [
    (
        Example(
            "l3-job-not-found.json",
            "llama-ft-7b",
            None,
            "No Job or RayJob named llama-ft-7b; the dump holds other runs and a bare pod "
            "llama-ft-7b-debug (not a run).",
            "Submitted",
            3,
            "researcher",
            False,
            _W,
        ),
        l3_job_not_found,
    ),
    (
        Example(
            "l3-rayjob-not-found.json",
            "ray-pretrain-13b",
            None,
            "No RayJob ray-pretrain-13b; a different RayJob ray-pretrain-13b-v2 is running.",
            "Submitted",
            3,
            "researcher",
            False,
            _W,
        ),
        l3_rayjob_not_found,
    ),
    (
        Example(
            "l4-job-waiting-for-quota.json",
            "llama-ft-7b",
            "Job",
            "Suspended Job; Workload QuotaReserved=False reason Pending "
            "(insufficient unused quota for nvidia.com/gpu); the ClusterQueue and clip-eval-2's 4 h "
            "time limit give a start estimate (at the latest 13:00).",
            "Kueue admission",
            4,
            "queue-owner",
            True,
            _D,
        ),
        l4_job_waiting_for_quota,
    ),
    (
        Example(
            "l4-job-localqueue-missing.json",
            "bert-distill",
            "Job",
            'Queue label user-queue; v1beta1 Workload Inadmissible "LocalQueue user-queue doesn\'t exist".',
            "Kueue admission",
            4,
            "platform",
            False,
            _W,
        ),
        l4_job_localqueue_missing,
    ),
    (
        Example(
            "l4-rayjob-exceeds-max-quota.json",
            "ray-pretrain-13b",
            "RayJob",
            "48 GPUs asked of a 40-GPU ClusterQueue: QuotaReserved=False ExceedsMaxQuota.",
            "Kueue admission",
            4,
            "queue-owner",
            False,
            _W,
        ),
        l4_rayjob_exceeds_max_quota,
    ),
    (
        Example(
            "l4-rayjob-preempted.json",
            "ray-sweep-lr",
            "RayJob",
            "v1beta1 Workload Evicted=True Preempted / Preempted=True InClusterQueue, requeued "
            "WaitingForQuota; the Preempted event names urgent-eval (priority 1000 over 100), whose "
            "Workload is in the dump; RayJob suspended, RayCluster deleted.",
            "Kueue admission",
            4,
            "queue-owner",
            True,
            _W,
        ),
        l4_rayjob_preempted,
    ),
    (
        Example(
            "l4-rayjob-admission-check-pending.json",
            "ray-llava-ft",
            "RayJob",
            "Quota reserved, admission check dws-prov Pending; Admitted=False UnsatisfiedAdmissionChecks.",
            "Kueue admission",
            4,
            "queue-owner",
            True,
            _A,
        ),
        l4_rayjob_admission_check_pending,
    ),
    (
        Example(
            "l5-job-unschedulable-gpu.json",
            "llama-ft-7b",
            "Job",
            "Admitted; 4 pods PodScheduled=False Unschedulable: Insufficient nvidia.com/gpu.",
            "Pod scheduling",
            5,
            "node-pool-owner",
            False,
            _W,
        ),
        l5_job_unschedulable_gpu,
    ),
    (
        Example(
            "l5-job-imagepull-unauthorized.json",
            "vit-pretrain",
            "Job",
            "ImagePullBackOff (old kubelet message) and ErrImagePull; events say "
            '"pull access denied, repository does not exist or may require authorization".',
            "Image pull",
            5,
            "image-owner",
            False,
            _W,
        ),
        l5_job_imagepull_unauthorized,
    ),
    (
        Example(
            "l5-job-oomkilled.json",
            "llama-ft-7b",
            "Job",
            "restartPolicy OnFailure; trainer CrashLoopBackOff, lastState OOMKilled exit 137.",
            "Container start",
            5,
            "researcher",
            False,
            _W,
        ),
        l5_job_oomkilled,
    ),
    (
        Example(
            "l5-rayjob-head-crashloop.json",
            "ray-pretrain-13b",
            "RayJob",
            "RayCluster HeadPodReady=False CrashLoopBackOff; head exits 1; workers wait in "
            "init wait-gcs-ready (main container PodInitializing).",
            "RayCluster",
            5,
            "researcher",
            False,
            _W,
        ),
        l5_rayjob_head_crashloop,
    ),
    (
        Example(
            "l5-rayjob-dra-unallocated.json",
            "ray-dra-llama",
            "RayJob",
            'Worker pods Unschedulable only for "cannot allocate all claims" for ~29 min; '
            "their ResourceClaims (v1) have no allocation.",
            "RayCluster",
            5,
            "node-pool-owner",
            False,
            _W,
        ),
        l5_rayjob_dra_unallocated,
    ),
    (
        Example(
            "l7-job-running-healthy.json",
            "resnet-sweep-3",
            "Job",
            "Admitted, 2/2 pods Running and Ready: every phase done, check progress (layer 7).",
            None,
            7,
            "researcher",
            None,
            None,
        ),
        l7_job_running_healthy,
    ),
    (
        Example(
            "l7-job-succeeded.json",
            "clip-eval-2",
            "Job",
            "Complete after one OOMKilled attempt (a Failed pod remains): judged as finished.",
            None,
            7,
            "researcher",
            None,
            None,
        ),
        l7_job_succeeded,
    ),
    (
        Example(
            "l7-rayjob-running.json",
            "ray-pretrain-13b",
            "RayJob",
            "jobDeploymentStatus Running, jobStatus RUNNING, RayCluster ready, submitter running.",
            "RayJob status",
            7,
            "researcher",
            None,
            _A,
        ),
        l7_rayjob_running,
    ),
    (
        Example(
            "l7-rayjob-failed-submission.json",
            "ray-data-prep",
            "RayJob",
            "kuberay#2314: jobDeploymentStatus Failed + jobStatus RUNNING, reason SubmissionFailed; "
            "submitter Job BackoffLimitExceeded.",
            "RayJob status",
            7,
            "researcher",
            False,
            _W,
        ),
        l7_rayjob_failed_submission,
    ),
]


def render(objs: list[Obj], run: str, now: str = NOW) -> str:
    """The dump, annotated with the run it is about so `taubot diagnose --example` needs no map."""
    doc = k8s.kube_list(*objs)
    doc["metadata"]["annotations"] = {"taugrid.io/example-run": run, "taugrid.io/example-now": now}
    return json.dumps(doc, indent=2) + "\n"


def readme() -> str:
    lines = [
        "# Bundled example dumps",
        "",
        "Each file is a `kubectl get -o json` List: one run plus unrelated objects (another",
        "run's Job/Workload/pods, a stray notebook pod and its events) that must not be linked.",
        "Generated by `python -m bench.make_examples` from `tests/fixtures/k8s.py`; do not edit",
        "by hand. Timeline: t0 = 2026-11-30T10:00:00Z.",
        "",
        f"Diagnose with `--now {NOW}`, e.g.",
        "`taubot diagnose llama-ft-7b --from-file workers/examples/l4-job-waiting-for-quota.json "
        f"--now {NOW} --format json`.",
        "",
        "| file | run | kind | what is wrong | first incomplete (state) | layer | owner | transient |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for ex, _ in EXAMPLES:
        first = f"`{ex.first_incomplete}` ({ex.state})" if ex.first_incomplete else "null (all done)"
        transient = "null" if ex.transient is None else str(ex.transient).lower()
        lines.append(
            f"| `{ex.file}` | `{ex.run}` | {ex.kind or 'null (not found)'} | {ex.what} | {first} "
            f"| {ex.layer} | `{ex.owner}` | {transient} |"
        )
    lines += [
        "",
        "Expected values follow SPEC §3–§4; `bench.make_examples.EXAMPLES` holds the same table",
        "for tests.",
        "",
    ]
    return "\n".join(lines)


DEMO_PLATFORM = Path(__file__).resolve().parent.parent / "shell" / "demo_platform.json"


def demo_platform() -> list[Obj]:
    """The platform side of the demo workspace: TauWorkspace vision (Ready), its LocalQueue
    vision-default and ClusterQueue (`demo_queues`), and PVC blob-training — what layers 1–2 read
    before any run."""
    from shell import demo_cluster as demo

    return [k8s.tau_workspace("vision", local_queue_name=demo.LOCAL_QUEUE), *demo_queues(), k8s.pvc()]


def demo_queues() -> list[Obj]:
    """The demo's LocalQueue and ClusterQueue as Kueue keeps them for the demo runs (issue 35): the
    ClusterQueue's reservation and usage (`status.flavorsReservation`/`flavorsUsage`) are the sum of
    what the Workloads admitted to it hold (their `status.admission` podSetAssignments), its nominal
    quota `shell.demo_cluster.FREE_GPUS` more, and both queues count the pending and admitted ones."""
    from shell import demo_cluster as demo
    from workers.diagnosis.start_estimate import holding

    def true(wl: Obj, ctype: str) -> bool:
        return any(c["type"] == ctype and c["status"] == "True" for c in wl["status"].get("conditions") or [])

    objects = [o for run in demo.RUNS for o in demo.demo_run_objects(run, quota=0)] + demo.watched_objects(0)
    workloads = [o for o in objects if o["kind"] == "Workload"]
    held = [w for w in workloads if true(w, "QuotaReserved") and not true(w, "Finished")]
    pending = len([w for w in workloads if not true(w, "QuotaReserved") and not true(w, "Finished")])
    used = int(sum(holding(w, demo.FLAVOR, "nvidia.com/gpu") for w in held))
    local = k8s.local_queue(demo.LOCAL_QUEUE, pending=pending, admitted=len(held))
    cluster = k8s.cluster_queue(gpu_quota=used + demo.FREE_GPUS, gpu_used=used, pending=pending,
                                admitted=len(held))
    for usage in ("flavorsReservation", "flavorsUsage"):  # every one of them came through vision-default
        local["status"][usage] = copy.deepcopy(cluster["status"][usage])
    return [local, cluster]


def write_demo_platform(path: Path = DEMO_PLATFORM) -> None:
    """shell/demo_platform.json: the platform objects, the infrastructure and the demo's I/O."""
    platform = {**k8s.kube_list(*demo_platform(), *demo_infrastructure()), "demo": demo_io()}
    path.write_text(json.dumps(platform, indent=2, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------- the demo's I/O
# What a live status and /tau logs read beyond the objects, for the demo runs as
# shell/demo_cluster.py names them (so it runs after the examples are written).


def _demo_pods() -> list[tuple[str, Obj]]:
    """(demo run, pod) for every demo run and every stage of the watched run."""
    from shell import demo_cluster as demo

    pods = [(run.name, o) for run in demo.RUNS
            for o in demo.run_objects(run.example, run.example_run, run.name, run.nodes)
            if o["kind"] == "Pod"]
    for index in range(len(demo.WATCHED_STAGES)):
        pods += [(f"{demo.WATCHED}@{index}", o) for o in demo.watched_objects(index) if o["kind"] == "Pod"]
    return pods


RAY_DEMO_RUNS = ("ray-pretrain-live", "ray-data-prep")  # their heads answer: the dashboard's driver log


def _ray_jobs(names: tuple[str, ...] | None = RAY_DEMO_RUNS) -> list[tuple[str, Obj]]:
    """(run, RayJob) of the demo's RayJobs that have a RayCluster (all of them for None)."""
    from shell import demo_cluster as demo

    return [(r.name, o) for r in demo.RUNS if names is None or r.name in names
            for o in demo.run_objects(r.example, r.example_run, r.name)
            if o["kind"] == "RayJob" and (o.get("status") or {}).get("rayClusterName")]


def demo_node(name: str, *, gpus: int = 8, xid: str | None = None) -> Obj:
    """A Node as `kubectl get node -o json` prints an AKS A100 (or CPU) node, with the GPU problem
    conditions of AKS's node-problem-detector (shared/reference/node-health.md; the healthy shape of
    tests/diagnosis/test_node_health.py). ``xid``: an XIDErrors=True message."""
    beat = k8s.ts(seconds=1780)  # 20 s before the demo's now: a live kubelet's heartbeat
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "kubernetes.azure.com/agentpool": "a100" if gpus else "cpu"}
    if gpus:
        labels["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB"
    conditions = [
        {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
         "message": "kubelet has sufficient memory available"},
        {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
         "message": "kubelet has no disk pressure"},
        {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
         "message": "kubelet has sufficient PID available"},
        {"type": "Ready", "status": "True", "reason": "KubeletReady",
         "message": "kubelet is posting ready status"},
    ]
    if gpus:
        conditions += [
            {"type": "GPUMissing", "status": "False", "reason": "NoGPUMissing",
             "message": "Observed GPU count matches expected GPU count"},
            {"type": "XIDErrors", "status": "True" if xid else "False",
             "reason": "XIDErrorsFound" if xid else "NoXIDErrors",
             "message": xid or "No XID errors present in kernel logs"},
        ]
    capacity = {"cpu": "96", "memory": "1843313756Ki", "pods": "110",
                **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "uid": k8s.uid_for("Node", None, name),
                     "creationTimestamp": k8s.ts(seconds=-30 * 86400)},
        "spec": {"providerID": f"azure:///subscriptions/0b1f6471-1bf0-4dda-aec3-111122223333/resourceGroups/"
                               f"mc_taugrid_aks-east_eastus/providers/Microsoft.Compute/virtualMachineScaleSets/"
                               f"{name[:-6]}/virtualMachines/{int(name[-6:], 36)}",
                 **({"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]} if gpus else {})},
        "status": {"capacity": capacity, "allocatable": {**capacity, "cpu": "95", "memory": "1730000000Ki"},
                   "conditions": [{**c, "lastHeartbeatTime": beat,
                                   "lastTransitionTime": k8s.ts(seconds=-86400)} for c in conditions]},
    }


def head_service(cluster: str) -> Obj:
    """KubeRay's head Service `<cluster>-head-svc` with its named ports (kuberay-status.md: client
    10001, gcs-server 6379, dashboard 8265, metrics 8080, serve 8000)."""
    ports = [("client", 10001), ("gcs-server", 6379), ("dashboard", 8265), ("metrics", 8080), ("serve", 8000)]
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{cluster}-head-svc", "namespace": NS,
                         "labels": {"ray.io/cluster": cluster, "ray.io/node-type": "head",
                                    "app.kubernetes.io/created-by": "kuberay-operator"},
                         "uid": k8s.uid_for("Service", NS, f"{cluster}-head-svc")},
            "spec": {"type": "ClusterIP", "selector": {"ray.io/cluster": cluster, "ray.io/node-type": "head"},
                     "ports": [{"name": n, "port": p, "protocol": "TCP", "targetPort": p} for n, p in ports]}}


def _kubelet(lines: list[tuple[datetime, str]]) -> str:
    """Lines as `kubectl logs --timestamps` prints them: RFC 3339 with nanoseconds, then the text."""
    return "".join(f"{at.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {text}\n" for at, text in lines)


def _hf_training(start: datetime, end: datetime, *, every: int = 30, step0: int = 10,
                 loss0: float = 2.9, total: int = 25_000) -> list[tuple[datetime, str]]:
    """A Hugging Face Trainer run: its banner, then a log dict every ``every`` seconds
    (training-logs.md §2.4 rows 3 and 4: `{'loss': …, 'learning_rate': …, 'epoch': …, 'step': N}`)."""
    lines = [(start, "***** Running training *****"), (start, "  Num examples = 1,281,167"),
             (start, f"  Total optimization steps = {total:,}")]
    at, step = start + timedelta(seconds=every), step0
    while at <= end:
        loss = loss0 * 0.985 ** (step // 10)
        lines.append((at, f"{{'loss': {loss:.4f}, 'learning_rate': {4.9e-05 * (1 - step / 25000):.8g}, "
                          f"'epoch': {step / 1000:.4g}, 'step': {step}}}"))
        if step % 500 == 0:
            lines.append((at, f"Saving model checkpoint to /mnt/blob-training/resnet/checkpoint-{step}"))
        at, step = at + timedelta(seconds=every), step + 10
    return lines


# ray-pretrain-live's total steps: at its 10 steps a minute its training ETA is about 13:40, between the
# time limits of the demo's ClusterQueue holders (shell/demo_cluster.py TIME_LIMITS), so it is what lets
# llama-ft-queued in at its `earliest` (issue 35).
LIVE_STEPS = 2_200


def demo_io() -> dict[str, Any]:
    """Pod logs, proxied answers (Ray driver logs, dcgm-exporter /metrics) and MLflow records."""
    from shell import demo_cluster as demo

    t0, now = k8s.T0, k8s.T0 + timedelta(minutes=30)  # now: the demo's START
    logs: list[dict[str, Any]] = []
    records: dict[str, dict[str, Any]] = {}

    def record(run: str, last: datetime, step: int) -> None:
        # MLflow runs/get `data.metrics`: the latest `step` and `timestamp` (ms) of each metric (SPEC §10).
        ms = int(last.timestamp() * 1000)
        records[run] = {"run": run, "run_id": hashlib.md5(run.encode()).hexdigest(),  # 32 hex, as MLflow's
                        "metrics": [{"key": "train/loss", "value": 0.82, "timestamp": ms, "step": step},
                                    {"key": "learning_rate", "value": 4.1e-05, "timestamp": ms,
                                     "step": step}]}

    for run, pod in _demo_pods():
        container = pod["spec"]["containers"][0]["name"]
        name = pod["metadata"]["name"]
        if run == "ray-pretrain-live" and container == "ray-job-submitter":
            # KubeRay's K8sJobMode submitter: `ray job submit --no-wait …; ray job logs --follow <id>`
            # (training-logs.md §1 and row 10): the driver's output mirrored into the submitter's
            # container log, where the kubelet stamps each line (`kubectl logs --timestamps`) —
            # what a real cluster gives the status its progress times, steps and ETA from.
            job_id = next(rj["status"]["jobId"] for r, rj in _ray_jobs(("ray-pretrain-live",)))
            started = now - timedelta(minutes=20)
            banner = [(started - timedelta(seconds=5), f"Job '{job_id}' submitted successfully"),
                      (started - timedelta(seconds=5), "-" * 55),
                      (started - timedelta(seconds=4),
                       "Tailing logs until the job exits (disable with --no-wait):")]
            driver = _hf_training(started, now - timedelta(seconds=30), every=60, step0=100, total=LIVE_STEPS)
            logs.append({"namespace": NS, "pod": name, "container": container,
                         "text": _kubelet([*banner, *driver])})
            continue
        if run == "ray-pretrain-crash" and container == "ray-head":
            # The crash-looping head (l5-rayjob-head-crashloop: exit 1, "ModuleNotFoundError: No module
            # named 'flash_attn'", last run 10:24:20–10:25:00): the image's entrypoint imports the
            # model code before `ray start`, and CPython's traceback is the container's last output.
            # The kubelet serves a crash-looping container's last instance with and without
            # `--previous` (kubelet_pods.go validateContainerLogStatus: lastState.terminated).
            crash = _kubelet([(t0 + timedelta(minutes=24, seconds=58), text) for text in (
                "Traceback (most recent call last):",
                '  File "/home/ray/preload.py", line 4, in <module>',
                "    import flash_attn",
                "ModuleNotFoundError: No module named 'flash_attn'")])
            logs.append({"namespace": NS, "pod": name, "container": container, "text": crash,
                         "previous": crash})
            continue
        if container != "trainer":
            continue
        entry: dict[str, Any] = {"namespace": NS, "pod": name, "container": container}
        if run == "llama-ft-oom":
            # Killed by the kernel's OOM killer: no traceback, the log just stops (pod-failure-shapes.md).
            entry["text"] = _kubelet(_hf_training(now - timedelta(seconds=50), now - timedelta(seconds=20)))
            entry["previous"] = _kubelet(_hf_training(now - timedelta(minutes=7), now - timedelta(minutes=5)))
            record(run, now - timedelta(seconds=20), 20)
        elif run == "resnet-hang":
            # Steps until 10:05, then silence; the NCCL watchdog fires after its 10-minute timeout
            # (training-logs.md §2.5, the current format).
            hung = t0 + timedelta(minutes=5)
            entry["text"] = _kubelet([*_hf_training(t0 + timedelta(minutes=1), hung), (
                hung + timedelta(minutes=10),
                "[rank0]:[E1130 10:15:00.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught "
                "collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, "
                "NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.")])
            record(run, hung, 90)
        elif run == "llama-ft-xid":
            entry["text"] = _kubelet(_hf_training(t0 + timedelta(minutes=1), now - timedelta(seconds=40)))
            record(run, now - timedelta(seconds=40), 570)
        elif run == f"{demo.WATCHED}@1":  # running while watched: progress up to its last tick
            entry["text"] = _kubelet(_hf_training(now - timedelta(minutes=4), now + timedelta(seconds=40),
                                                  every=10, step0=2000))
        elif run == f"{demo.WATCHED}@2":
            entry["text"] = _kubelet([*_hf_training(now - timedelta(minutes=4), now + timedelta(seconds=95),
                                                    every=10, step0=2000),
                                      (now + timedelta(seconds=96), "{'train_runtime': 1075.3, "
                                       "'train_samples_per_second': 1191.4, 'train_steps_per_second': 2.33, "
                                       "'train_loss': 0.8125, 'epoch': 2.5}"),
                                      (now + timedelta(seconds=96), "Training completed. Do not forget to "
                                       "share your model on huggingface.co/models =)")])
            record(demo.WATCHED, now + timedelta(seconds=40), 2620)  # as its log at the running tick
        else:
            continue
        logs.append(entry)

    proxies: list[dict[str, Any]] = []
    for run, rayjob in _ray_jobs():
        cluster, job_id = rayjob["status"]["rayClusterName"], rayjob["status"]["jobId"]
        if run == "ray-pretrain-live":
            # The driver's stdout through the dashboard: Ray Train's HF loop, no kubelet stamps.
            driver = _hf_training(now - timedelta(minutes=20), now - timedelta(seconds=30), every=60,
                                  step0=100, total=LIVE_STEPS)
            text = "".join(f"{line}\n" for _, line in driver)
            record(run, now - timedelta(seconds=30), 290)
        else:
            text = ("Running: 0.0/18.0 CPU, 0.0/0.0 GPU, 0.03 MiB/2.33 GiB object_store_memory:   "
                    "0%|          | 1/1296 [00:00<03:29,  6.17it/s]\n"
                    "Traceback (most recent call last):\n"
                    '  File "/home/ray/prep.py", line 41, in <module>\n'
                    "    ds.write_parquet(OUT)\n"
                    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. "
                    "GPU 0 has a total capacity of 79.15 GiB of which 11.06 MiB is free.\n")
        # The head's answers as Ray 2.60 gives them (tests/fixtures/ray_dashboard.py): the job's
        # details (its driver's node), then the driver log's tail from Ray's log API.
        head = {"kind": "services", "namespace": NS, "name": f"{cluster}-head-svc", "port": "dashboard"}
        details = json.dumps(ray_dashboard.job_details(job_id))
        proxies.append({**head, "path": f"api/jobs/{job_id}", "body": details,
                        "contentType": "application/json"})
        proxies.append({**head, "path": "api/v0/logs/file", "body": text, "contentType": "text/plain"})

    # dcgm-exporter on every GPU node: each GPU attributed to the pod holding it (dcgm.py's shapes).
    on_node: dict[str, list[tuple[str, Obj]]] = {}
    for run, pod in _demo_pods():
        node = pod["spec"].get("nodeName")
        limits = (pod["spec"]["containers"][0].get("resources") or {}).get("limits") or {}
        if node and "nvidia.com/gpu" in limits and pod["status"].get("phase") == "Running":
            on_node.setdefault(node, []).append((run, pod))
    for node in sorted(on_node):
        gpus: list[dcgm.Gpu] = []
        for run, pod in on_node[node][:1]:  # one run's pod per node (demo_cluster's nodes)
            busy = 0 if run == "resnet-hang" else 87
            count = 7 if node == demo.FAULTY_NODE else 8  # the fallen-off GPU reports nothing
            gpus += [dcgm.Gpu(i, pod=pod["metadata"]["name"], namespace=NS, container="trainer"
                              if pod["spec"]["containers"][0]["name"] == "trainer" else "ray-worker",
                              util=busy + i % 3, fb_used=61440 + 512 * i, node=node) for i in range(count)]
        exporter = dcgm.exporter_pod(node)
        proxies.append({"kind": "pods", "namespace": exporter["metadata"]["namespace"],
                        "name": exporter["metadata"]["name"], "port": 9400, "path": "metrics",
                        "body": dcgm.scrape(gpus, hostname=node), "contentType": "text/plain"})
    return {"podLogs": logs, "proxies": proxies, "mlflow": list(records.values())}


def demo_infrastructure() -> list[Obj]:
    """Nodes of every demo pod (one with a hardware XID), a dcgm-exporter pod on each GPU node and the
    Ray head services whose dashboards answer."""
    from shell import demo_cluster as demo

    pods = _demo_pods()
    nodes = sorted({p["spec"]["nodeName"] for _, p in pods if p["spec"].get("nodeName")})
    objs: list[Obj] = [demo_node(n, gpus=8 if "a100" in n else 0,
                                 xid="XID errors present in kernel logs: Xid 79 (GPU has fallen off the bus)"
                                 if n == demo.FAULTY_NODE else None) for n in nodes]
    objs += [dcgm.exporter_pod(n) for n in nodes if "a100" in n]
    # KubeRay creates the head Service with the RayCluster, so a crash-looping head has one too (its
    # dashboard then does not answer: the proxy's "connection refused").
    return objs + [head_service(rayjob["status"]["rayClusterName"]) for _, rayjob in _ray_jobs(None)]


def main(argv: list[str] | None = None) -> int:
    out = Path(argv[0]) if argv else OUT_DIR
    out.mkdir(parents=True, exist_ok=True)
    for ex, build in EXAMPLES:
        (out / ex.file).write_text(render(build(), ex.run))
    (out / "README.md").write_text(readme())
    write_demo_platform()
    print(f"wrote {len(EXAMPLES)} examples to {out} and the demo platform to {DEMO_PLATFORM}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
