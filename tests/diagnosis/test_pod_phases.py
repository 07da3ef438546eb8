"""Layer-5 pod phases: scheduling, DRA, image pull, init containers, container start, Ready.

Pod, container-status and event shapes: tests/fixtures/k8s.py (kubelet and scheduler
templates and real `kubectl describe` excerpts cited in reference/pod-failure-shapes.md).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.fixtures import k8s

from .helpers import Case

NODE = "aks-a100-36215678-vmss000003"


def admitted_job(*pods_kw: dict, extra=None) -> list[dict]:
    """An admitted Job `train` with one pod per kwargs dict, plus `extra(job, pods)` objects."""
    j = k8s.job("train", active=len(pods_kw))
    pods = [k8s.job_pod(j, i, **kw) for i, kw in enumerate(pods_kw)]
    objs = [j, k8s.workload(j, state="admitted"), *pods]
    if extra:
        objs += extra(j, pods)
    return objs


def with_claim(pod: dict, volume: str, claim: str) -> dict:
    """Give ``pod`` the volume ``volume`` backed by PVC ``claim`` (as the Job template would)."""
    pod["spec"].setdefault("volumes", []).append({"name": volume, "persistentVolumeClaim": {"claimName": claim}})
    return pod


def running_pod(**kw) -> dict:
    return {"node": NODE, **kw}


def unschedulable(kind: str, created: float = 10) -> dict:
    return {"conditions": k8s.cond_unschedulable(k8s.msg_unschedulable(kind)), "created": created}


def dra_pod(allocated: bool, created: float = 10, node: str | None = NODE, version="resource.k8s.io/v1"):
    def build() -> list[dict]:
        j = k8s.job("train", active=1)
        claim = k8s.resource_claim(f"train-pod-gpu-{'a' if allocated else 'u'}", allocated=allocated,
                                   api_version=version, at=created, pool=NODE)
        kw: dict = {"resource_claims": [claim], "created": created}
        if node:
            kw["node"] = node
        else:
            kw["conditions"] = k8s.cond_unschedulable(k8s.msg_unschedulable("dra"))
        p = k8s.job_pod(j, **kw)
        return [j, k8s.workload(j, state="admitted"), p, claim]
    return build


SCHED = "Pod scheduling"
SCHEDULING = [
    Case("all-scheduled", lambda: admitted_job(running_pod(), running_pod()), SCHED, "done",
         summary="2/2 pods scheduled"),
    Case("insufficient-gpu", lambda: admitted_job(unschedulable("gpu")), SCHED, "warning",
         summary="Insufficient nvidia.com/gpu", first=SCHED, owner="node-pool-owner", transient=False,
         layer=5),
    Case("untolerated-taint", lambda: admitted_job(unschedulable("taint")), SCHED, "warning",
         summary="untolerated taint", owner="node-pool-owner"),
    Case("affinity-mismatch", lambda: admitted_job(unschedulable("affinity")), SCHED, "warning",
         summary="node affinity", owner="node-pool-owner"),
    Case("one-of-three-unschedulable", lambda: admitted_job(running_pod(), running_pod(),
                                                              unschedulable("gpu")),
         SCHED, "warning", summary="1/3 pods"),
    Case("admitted-no-pods", lambda: [k8s.job("train"), k8s.workload(k8s.job("train"))], SCHED,
         "pending", summary="admitted, no pods yet", first=SCHED, owner="node-pool-owner"),
    Case("not-yet-attempted", lambda: admitted_job({}), SCHED, "active"),
    Case("event-only-unschedulable",
         lambda: admitted_job({}, extra=lambda j, ps: [k8s.ev_failed_scheduling(ps[0])]),
         SCHED, "warning", owner="node-pool-owner"),
    Case("claims-only-within-30s", dra_pod(False, node=None, created=1790), SCHED, "active",
         owner="node-pool-owner"),
    Case("claims-only-after-30s", dra_pod(False, node=None, created=10), SCHED, "warning",
         summary="cannot allocate all claims", owner="node-pool-owner", first=SCHED),
    Case("claims-and-affinity", lambda: admitted_job(unschedulable("dra_affinity")), SCHED,
         "warning", summary="node affinity"),
]

DRA = "DRA allocation"
DRA_CASES = [
    Case("device-plugin-skipped", lambda: admitted_job(running_pod()), DRA, "skipped",
         summary="device plugin (expected)"),
    Case("allocated-v1", dra_pod(True), DRA, "done", summary="gpu.nvidia.com/"),
    Case("allocated-v1beta1", dra_pod(True, version="resource.k8s.io/v1beta1"), DRA, "done"),
    Case("allocated-v1beta2", dra_pod(True, version="resource.k8s.io/v1beta2"), DRA, "done"),
    Case("unallocated-young", dra_pod(False, created=1790, node=None), DRA, "active"),
    Case("unallocated-old", dra_pod(False, created=10, node=None), DRA, "warning",
         summary="unallocated", owner="node-pool-owner", transient=False),
    Case("prepare-failed", lambda: [*dra_pod(True)(), ],
         DRA, "done"),
]


def prepare_failed() -> list[dict]:
    objs = dra_pod(True)()
    p = next(o for o in objs if o["kind"] == "Pod")
    p["status"]["containerStatuses"] = [k8s.waiting("trainer")]
    p["status"]["phase"] = "Pending"
    return [*objs, k8s.ev_failed_prepare_dra(p)]


DRA_CASES[-1] = Case("prepare-failed", prepare_failed, DRA, "warning",
                     summary="FailedPrepareDynamicResources", first=DRA, owner="node-pool-owner")

IMG = "Image pull"
IMAGE = "taugridacr.azurecr.io/vision/train:2026.11.2"


def pull(kind: str, reason: str = "ImagePullBackOff", with_event: bool = True):
    def build() -> list[dict]:
        if reason == "InvalidImageName":
            cs = k8s.waiting("trainer", "Taugrid/Train:Latest", "InvalidImageName",
                             k8s.msg_invalid_image("Taugrid/Train:Latest"))
        elif reason == "ErrImagePull":
            cs = k8s.err_image_pull("trainer", IMAGE, kind)
        else:
            cs = k8s.image_pull_backoff("trainer", IMAGE)
        extra = (lambda j, ps: k8s.ev_pull_failed(ps[0], IMAGE, kind)) if with_event else None
        return admitted_job(running_pod(containers=[cs]), extra=extra)
    return build


def pulling() -> list[dict]:
    def extra(j, ps):
        return [k8s.event_v1(ps[0], "Pulling", f'Pulling image "{IMAGE}"', type="Normal",
                             field_path="spec.containers{trainer}", first=20, last=20)]
    return admitted_job(running_pod(containers=[k8s.waiting("trainer", IMAGE, "ContainerCreating")]),
                        extra=extra)


def init_crash_main_initializing() -> list[dict]:
    return admitted_job(running_pod(
        init_containers=[k8s.crash_loop("fetch-data")],
        containers=[k8s.waiting("trainer", IMAGE, "PodInitializing")]))


IMAGE_CASES = [
    Case("no-errors", lambda: admitted_job(running_pod()), IMG, "done"),
    Case("not-found", pull("not_found"), IMG, "warning", summary=IMAGE, first=IMG, owner="researcher",
         transient=False),
    Case("unauthorized", pull("unauthorized"), IMG, "warning", owner="image-owner", transient=False),
    Case("forbidden-403", pull("forbidden"), IMG, "warning", owner="image-owner"),
    Case("network", pull("network"), IMG, "warning", owner="platform", transient=True),
    Case("tls", pull("tls"), IMG, "warning", owner="platform", transient=True),
    Case("err-image-pull-message-only", pull("not_found", "ErrImagePull", with_event=False), IMG,
         "warning", owner="researcher"),
    Case("invalid-image-name", pull("not_found", "InvalidImageName", with_event=False), IMG,
         "warning", owner="researcher"),
    Case("pulling-in-progress", pulling, IMG, "active"),
    Case("pod-initializing-is-not-image", init_crash_main_initializing, IMG, "done"),
    Case("unscheduled-pending", lambda: admitted_job(unschedulable("gpu")), IMG, "pending"),
    Case("init-image-error",
         lambda: admitted_job(running_pod(init_containers=[k8s.image_pull_backoff("fetch-data", IMAGE)],
                                          containers=[k8s.waiting("trainer", IMAGE, "PodInitializing")])),
         IMG, "warning"),
]

INIT = "Init containers"
INIT_CASES = [
    Case("none-skipped", lambda: admitted_job(running_pod()), INIT, "skipped"),
    Case("crashloop", init_crash_main_initializing, INIT, "warning", summary="CrashLoopBackOff",
         first=INIT, owner="researcher", transient=False),
    Case("exit-nonzero",
         lambda: admitted_job(running_pod(init_containers=[k8s.terminated("fetch-data", exit_code=2)],
                                          containers=[k8s.waiting("trainer", IMAGE, "PodInitializing")])),
         INIT, "warning", summary="Init:fetch-data Error (exit 2)"),
    Case("done", lambda: admitted_job(running_pod(init_containers=[k8s.terminated("fetch-data")])),
         INIT, "done"),
    Case("running",
         lambda: admitted_job(running_pod(init_containers=[k8s.running("fetch-data", ready=False)],
                                          containers=[k8s.waiting("trainer", IMAGE, "PodInitializing")])),
         INIT, "active", first=INIT, next_action="still running", not_in_next_action="finished"),
]

START = "Container start"
START_CASES = [
    Case("running", lambda: admitted_job(running_pod()), START, "done", summary="does not prove progress"),
    Case("crashloop", lambda: admitted_job(running_pod(containers=[k8s.crash_loop("trainer")])), START,
         "warning", summary="CrashLoopBackOff", first=START, owner="researcher", transient=False),
    Case("oomkilled",
         lambda: admitted_job(running_pod(containers=[k8s.crash_loop("trainer", exit_code=137,
                                                                     reason="OOMKilled")])),
         START, "warning", summary="OOMKilled", owner="researcher"),
    Case("config-error",
         lambda: admitted_job(running_pod(containers=[k8s.create_container_config_error("trainer")])),
         START, "warning", summary="CreateContainerConfigError", owner="researcher",
         next_action="Secret `hf-token`, which does not exist"),
    # Issue 15.10: a missing binary is not a missing Secret. containerd/runc's text as the kubelet
    # reports it in RunContainerError (kubernetes#97025, containerd/containerd#4528).
    Case("missing-binary",
         lambda: admitted_job(running_pod(containers=[k8s.waiting(
             "trainer", IMAGE, "RunContainerError",
             "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
             "runc create failed: unable to start container process: exec: \"python3\": executable file "
             "not found in $PATH: unknown")])),
         START, "warning", summary="RunContainerError", owner="researcher",
         next_action="`python3` is not in the image", not_in_next_action="Secret"),
    Case("exit-nonzero",
         lambda: admitted_job(running_pod(containers=[k8s.terminated("trainer", exit_code=1)])),
         START, "warning", summary="exit 1"),
    Case("one-of-four-fails",
         lambda: admitted_job(running_pod(), running_pod(), running_pod(),
                              running_pod(containers=[k8s.crash_loop("trainer")])),
         START, "warning", summary="1/4 pods"),
    # SPEC §3: running (and ready) after restarts is done — recovered — with the restarts shown.
    # SPEC §3: ErrImageNeverPull is the researcher's (pull policy Never; no registry was asked).
    Case("err-image-never-pull",
         lambda: admitted_job(running_pod(containers=[k8s.waiting(
             "trainer", IMAGE, "ErrImageNeverPull",
             f'Container image "{IMAGE}" is not present with pull policy of Never')])),
         "Image pull", "warning", owner="researcher", transient=False),
    Case("restarted-after-oom",
         lambda: admitted_job(running_pod(containers=[k8s.running(
             "trainer", restart_count=1, last_terminated=k8s.last_terminated(137, "OOMKilled"))])),
         START, "done", summary="1 restart, last exit 137 (OOMKilled)"),
    Case("volume-mount-failure",
         lambda: admitted_job(running_pod(containers=[k8s.waiting("trainer", IMAGE, "ContainerCreating")],
                                          conditions=k8s.cond_creating()),
                              extra=lambda j, ps: [k8s.ev_failed_mount(ps[0])]),
         START, "warning", summary="FailedMount", owner="platform", transient=False),
    # Issue 15.10: the claim that failed to mount is the one in the event, through the pod's volumes.
    Case("volume-mount-names-the-claim",
         lambda: admitted_job(running_pod(containers=[k8s.waiting("trainer", IMAGE, "ContainerCreating")],
                                          conditions=k8s.cond_creating()),
                              extra=lambda j, ps: [with_claim(ps[0], "ckpt", "vision-checkpoints"),
                                                   k8s.ev_failed_mount(ps[0], volume="ckpt")][1:]),
         START, "warning", owner="platform", next_action="PVC `vision-checkpoints`",
         not_in_next_action="blob-training"),
    Case("creating", lambda: admitted_job(running_pod(containers=[k8s.waiting("trainer", IMAGE)])),
         START, "active"),
    Case("job-failed-no-pods",
         lambda: [k8s.job("train", conditions=k8s.job_failed()), k8s.workload(k8s.job("train"),
                                                                            state="finished_failed")],
         START, "warning", summary="BackoffLimitExceeded", first=START, owner="researcher"),
]

READY = "Ready"
READY_CASES = [
    Case("ready", lambda: admitted_job(running_pod()), READY, "done", first=None, layer=7,
         owner="researcher", transient=None),
    Case("not-ready-no-events",
         lambda: admitted_job(running_pod(containers=[k8s.running("trainer", ready=False)])),
         READY, "active", first=READY),
    Case("readiness-probe-failing",
         lambda: admitted_job(running_pod(containers=[k8s.running("trainer", ready=False)]),
                              extra=lambda j, ps: [k8s.ev_unhealthy(ps[0], "trainer")]),
         READY, "warning", summary="Readiness probe failed", first=READY, owner="researcher",
         transient=False),
    Case("crashlooping-is-not-a-readiness-problem",
         lambda: admitted_job(running_pod(containers=[k8s.crash_loop("trainer")])), READY, "pending"),
]

ALL = SCHEDULING + DRA_CASES + IMAGE_CASES + INIT_CASES + START_CASES + READY_CASES


@pytest.mark.parametrize("case", ALL, ids=[f"{c.phase}:{c.id}" for c in ALL])
def test_pod_phase(case: Case) -> None:
    case.check()


def test_dra_30s_rule_uses_callers_now() -> None:
    objs = dra_pod(False, created=10, node=None)
    young = Case("young", objs, DRA, "active", now=k8s.T0 + timedelta(seconds=35)).check()
    assert young.first_incomplete == "Pod scheduling"
    Case("old", objs, DRA, "warning", now=k8s.T0 + timedelta(seconds=41)).check()


def test_failed_job_pod_is_never_called_ready() -> None:
    # Job failed (BackoffLimitExceeded) with its failed pod still present (k8s.job_failed shape).
    j = k8s.job("train", conditions=k8s.job_failed(), failed=1)
    p = k8s.job_pod(j, node=NODE, containers=[k8s.terminated("trainer", exit_code=1)])
    d = Case("failed", lambda: [j, k8s.workload(j, state="finished_failed"), p], START, "warning",
             first=START, owner="researcher").check()
    assert "ready" not in d.phase(READY).summary.replace("never ready", "")
    assert "see Container start" in d.phase(READY).summary
