"""RayCluster (layer 5) and RayJob status (layer 7): the two Ray-only phases.

Shapes: tests/fixtures/k8s.py `rayjob`, `raycluster`, `rc_*`, `submitter_job`/`submitter_pod`,
`ray_pod` — KubeRay rayjob_types.go / raycluster_types.go / utils/util.go (HeadPodReady reason
substitution) and the real statuses of ray-project/kuberay#2314 (Failed + RUNNING) and #2188
(unschedulable head pod), all via reference/kuberay-status.md. Workloads: Kueue's RayJob
integration (reference/kueue-workload-status.md).
"""

from __future__ import annotations

import pytest

from tests.fixtures import k8s

from .helpers import Case, diagnose

RC = "RayCluster"
RJS = "RayJob status"

# kuberay#2314: the submitter Job hit its backoff limit; KubeRay still shows jobStatus RUNNING.
MSG_SUBMISSION_FAILED = (
    "Job submission has failed. Reason: BackoffLimitExceeded. Message: Job has reached the "
    "specified backoff limit"
)
# kuberay#2188: the head pod's PodScheduled=False message, verbatim.
MSG_HEAD_UNSCHEDULABLE = (
    "0/5 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint "
    "{node-role.kubernetes.io/master: }, 3 node(s) didn't match Pod's node affinity/selector. "
    "preemption: 0/5 nodes are available: 1 No preemption victims found for incoming pod, 4 "
    "Preemption is not helpful for scheduling.."
)
NODE = "aks-a100-36215678-vmss000003"


def ray_run(
    deployment_status: str = "Running",
    job_status: str = "RUNNING",
    *,
    rc_state: str | None = "ready",
    rc_conditions: list[dict] | None = None,
    head: dict | None = None,
    workers: bool = True,
    cluster: bool = True,
    submitter: str | None = "running",
    extra=None,
    **rj_kw,
) -> list[dict]:
    """An admitted RayJob `train` (K8sJobMode) with its RayCluster, head/worker pods and submitter.

    `head` overrides the head pod's kwargs; `submitter` is None (no submitter Job yet),
    "running", "succeeded" or "failed"; `extra(rj, rc, pods)` adds more objects.
    """
    rj = k8s.rayjob("train", deployment_status=deployment_status, job_status=job_status, **rj_kw)
    objs: list[dict] = [rj, k8s.workload(rj, state="admitted")]
    rc = None
    pods: list[dict] = []
    if cluster:
        rc = k8s.raycluster(rayjob=rj, state=rc_state, conditions=rc_conditions)
        objs.append(rc)
        head_kw = {"node": NODE} if head is None else head
        pods.append(k8s.ray_pod(rc, "head", **head_kw))
        if workers:
            ready = rc_state == "ready"
            for i in range(2):
                kw: dict = {"node": NODE, "index": i}
                if not ready:
                    kw["containers"] = [k8s.running("ray-worker", k8s.RAY_IMAGE, ready=False)]
                pods.append(k8s.ray_pod(rc, "worker", **kw))
    if submitter is not None:
        if submitter == "failed":
            sub = k8s.submitter_job(rj, conditions=k8s.job_failed(), failed=3, at=70)
            spod = k8s.submitter_pod(sub, node=NODE, created=75,
                                     containers=[k8s.terminated("ray-job-submitter", k8s.RAY_IMAGE,
                                                                exit_code=1)])
        elif submitter == "succeeded":
            sub = k8s.submitter_job(rj, conditions=k8s.job_complete(at=1400), succeeded=1, at=70,
                                    completion_at=1400)
            spod = k8s.submitter_pod(sub, node=NODE, created=75,
                                     containers=[k8s.terminated("ray-job-submitter", k8s.RAY_IMAGE)])
        else:
            sub = k8s.submitter_job(rj, active=1, ready=1, at=70)
            spod = k8s.submitter_pod(sub, node=NODE, created=75)
        objs += [sub, spod]
    objs += pods
    if extra:
        objs += extra(rj, rc, pods)
    return objs


def a_job() -> list[dict]:
    j = k8s.job("train", active=1)
    return [j, k8s.workload(j, state="admitted"), k8s.job_pod(j, node=NODE)]


def waiting_for_quota() -> list[dict]:
    # Held by Kueue: KubeRay resets rayClusterName, no RayCluster exists yet.
    rj = k8s.rayjob("train", suspend=True, deployment_status="Suspended", job_status="")
    return [rj, k8s.workload(rj, state="waiting_for_quota")]


def admitted_cluster_not_created() -> list[dict]:
    # Admitted and Initializing; status.rayClusterName is set but the object is not there yet.
    return ray_run("Initializing", "", cluster=False, submitter=None)


def provisioning() -> list[dict]:
    # Pods scheduled, images present, containers not yet ready: KubeRay's first provisioning.
    return ray_run("Initializing", "", rc_state=None, submitter=None,
                   head={"node": NODE, "containers": [k8s.running("ray-head", k8s.RAY_IMAGE, ready=False)]})


def deleted_after_success() -> list[dict]:
    # shutdownAfterJobFinishes: KubeRay deletes the cluster once the job is Complete.
    return ray_run("Complete", "SUCCEEDED", cluster=False, submitter="succeeded", end_at=1500)


def replica_failure() -> list[dict]:
    return ray_run("Initializing", "", rc_state=None, workers=False, submitter=None,
                   rc_conditions=[k8s.rc_provisioned(False), k8s.rc_replica_failure()])


def head_unschedulable() -> list[dict]:
    # An unscheduled head pod has no PodReady condition, so KubeRay reports only "provisioning".
    return ray_run("Initializing", "", rc_state=None, workers=False, submitter=None,
                   head={"conditions": k8s.cond_unschedulable(MSG_HEAD_UNSCHEDULABLE)},
                   extra=lambda rj, rc, ps: [k8s.ev_failed_scheduling(ps[0], MSG_HEAD_UNSCHEDULABLE)])


def head_pull_unauthorized() -> list[dict]:
    return ray_run(
        "Initializing", "", rc_state=None, workers=False, submitter=None,
        rc_conditions=[k8s.rc_provisioned(False), k8s.rc_head_pod_ready(False, reason="ImagePullBackOff")],
        head={"node": NODE, "containers": [k8s.image_pull_backoff("ray-head", k8s.RAY_IMAGE)]},
        extra=lambda rj, rc, ps: k8s.ev_pull_failed(ps[0], k8s.RAY_IMAGE, "unauthorized",
                                                    container="ray-head"),
    )


def head_pull_unauthorized_condition_only() -> list[dict]:
    # `kubectl get rayjob,raycluster -o json` only: the newer kubelet message (PR #138860) carries the
    # pull error, and KubeRay copies it into HeadPodReady.
    msg = k8s.msg_pull_backoff(k8s.RAY_IMAGE, k8s.pull_error(k8s.RAY_IMAGE, "unauthorized"))
    rj = k8s.rayjob("train", deployment_status="Initializing", job_status="")
    rc = k8s.raycluster(rayjob=rj, conditions=[
        k8s.rc_provisioned(False), k8s.rc_head_pod_ready(False, reason="ImagePullBackOff", message=msg)])
    return [rj, k8s.workload(rj, state="admitted"), rc]


def head_crashloop_condition_only() -> list[dict]:
    rj = k8s.rayjob("train", deployment_status="Initializing", job_status="")
    rc = k8s.raycluster(rayjob=rj, conditions=[
        k8s.rc_provisioned(False), k8s.rc_head_pod_ready(False, reason="CrashLoopBackOff")])
    return [rj, k8s.workload(rj, state="admitted"), rc]


def head_crashloop_with_pod() -> list[dict]:
    return ray_run("Initializing", "", rc_state=None, workers=False, submitter=None,
                   rc_conditions=[k8s.rc_provisioned(False),
                                  k8s.rc_head_pod_ready(False, reason="CrashLoopBackOff")],
                   head={"node": NODE, "containers": [k8s.crash_loop("ray-head", image=k8s.RAY_IMAGE)]})


def submitter_attempt_failed() -> list[dict]:
    # The first submitter pod failed (backoffLimit 2), the retry is running: the Ray cluster is fine.
    def extra(rj, rc, pods):
        sub = k8s.submitter_job(rj, active=1, failed=1, at=70)
        failed = k8s.submitter_pod(sub, 0, node=NODE, created=75,
                                   containers=[k8s.terminated("ray-job-submitter", k8s.RAY_IMAGE,
                                                              exit_code=1, finished_at=90)])
        retry = k8s.submitter_pod(sub, 1, node=NODE, created=100)
        return [sub, failed, retry]
    return ray_run(submitter=None, extra=extra)


RAYCLUSTER_CASES = [
    Case("job-skipped", a_job, RC, "skipped"),
    Case("waiting-for-quota", waiting_for_quota, RC, "pending", first="Kueue admission"),
    Case("admitted-not-created", admitted_cluster_not_created, RC, "pending", summary="not created",
         first=RC, layer=5),
    Case("provisioning", provisioning, RC, "active", summary="provisioning", first=RC, layer=5),
    Case("ready", lambda: ray_run(), RC, "done", summary="ready"),
    Case("deleted-after-job-finished", deleted_after_success, RC, "done", summary="deleted"),
    Case("replica-failure", replica_failure, RC, "warning", summary="FailedCreateWorkerPod", first=RC,
         layer=5, transient=False),
    Case("head-unschedulable", head_unschedulable, RC, "warning", summary="Insufficient cpu", first=RC,
         owner="node-pool-owner", transient=False, layer=5),
    Case("head-pull-unauthorized", head_pull_unauthorized, RC, "warning", first=RC, owner="image-owner",
         transient=False, layer=5),
    Case("head-pull-unauthorized-condition-only", head_pull_unauthorized_condition_only, RC, "warning",
         summary="ImagePullBackOff", first=RC, owner="image-owner", transient=False),
    Case("head-crashloop-condition-only", head_crashloop_condition_only, RC, "warning",
         summary="CrashLoopBackOff", first=RC, owner="researcher", transient=False, layer=5),
    Case("head-crashloop-with-pod", head_crashloop_with_pod, RC, "warning", summary="CrashLoopBackOff",
         first=RC, owner="researcher", transient=False),
    Case("submitter-failure-is-not-the-cluster", submitter_attempt_failed, RC, "done"),
]


def rayjob_failed_running(with_submitter_pod: bool) -> list[dict]:
    # kuberay#2314, verbatim status; the RayCluster and its pods are still up.
    return ray_run("Failed", "RUNNING", reason="SubmissionFailed", message=MSG_SUBMISSION_FAILED,
                   failed=1, end_at=382, submitter="failed" if with_submitter_pod else None)


def rayjob_suspended_by_kueue() -> list[dict]:
    return waiting_for_quota()


def rayjob_retrying() -> list[dict]:
    # failed < backoffLimit+1: KubeRay moves to Retrying before it tears the cluster down.
    return ray_run("Retrying", "FAILED", reason="AppFailed",
                   message="Job entrypoint command failed with exit code 1", failed=1)


def complete_failed() -> list[dict]:
    # Older KubeRay: a failed Ray job ends as Complete with jobStatus FAILED.
    return ray_run("Complete", "FAILED", message="Job entrypoint command failed with exit code 1",
                   submitter="succeeded", end_at=1500)


RAYJOB_CASES = [
    Case("job-skipped", a_job, RJS, "skipped"),
    Case("failed-beats-running", lambda: rayjob_failed_running(False), RJS, "warning",
         summary="SubmissionFailed", first=RJS, layer=7, owner="researcher", transient=False),
    Case("failed-beats-running-submitter-pod-in-dump", lambda: rayjob_failed_running(True), RJS,
         "warning", summary="SubmissionFailed", first=RJS, layer=7, owner="researcher", transient=False),
    Case("complete-succeeded", lambda: ray_run("Complete", "SUCCEEDED", submitter="succeeded",
                                               end_at=1500),
         RJS, "done", first=None, layer=7, owner="researcher", transient=None),
    Case("running", lambda: ray_run(), RJS, "active", first=RJS, layer=7, owner="researcher",
         transient=None),
    Case("initializing", provisioning, RJS, "pending"),
    Case("suspended-by-kueue", rayjob_suspended_by_kueue, RJS, "pending", first="Kueue admission",
         layer=4, owner="queue-owner"),
    Case("retrying", rayjob_retrying, RJS, "warning", first=RJS, transient=True, owner="researcher"),
    Case("complete-with-failed-job", complete_failed, RJS, "warning", first=RJS, layer=7,
         owner="researcher", transient=False),
]


@pytest.mark.parametrize("case", RAYCLUSTER_CASES, ids=[c.id for c in RAYCLUSTER_CASES])
def test_raycluster(case: Case) -> None:
    case.check()


@pytest.mark.parametrize("case", RAYJOB_CASES, ids=[c.id for c in RAYJOB_CASES])
def test_rayjob_status(case: Case) -> None:
    case.check()


def test_failed_rayjob_says_deployment_status_wins() -> None:
    d = diagnose(rayjob_failed_running(True), "train")
    p = d.phase(RJS)
    assert "RUNNING" in p.summary and "deployment status wins" in p.summary, p.summary
    # The failure is reported once, where KubeRay put the verdict — not as a container problem.
    assert all(q.state.value in ("done", "skipped") for q in d.phases if q.name != RJS), d.phases


def test_succeeded_rayjob_is_done_everywhere_even_after_a_crashed_attempt() -> None:
    def extra(rj, rc, pods):
        # A worker of the same cluster crash-looped before the job finished.
        return [k8s.ray_pod(rc, "worker", index=7, node=NODE,
                            containers=[k8s.crash_loop("ray-worker", image=k8s.RAY_IMAGE)])]
    d = diagnose(ray_run("Complete", "SUCCEEDED", submitter="succeeded", end_at=1500, extra=extra), "train")
    assert [p.state.value for p in d.phases if p.state.value not in ("done", "skipped")] == []
    assert (d.first_incomplete, d.layer, d.owner, d.transient) == (None, 7, "researcher", None)


def test_running_rayjob_never_claims_progress() -> None:
    d = diagnose(ray_run(), "train")
    assert d.phase(RJS).state.value == "active"
    assert "progress" in d.next_action
    assert all(p.state.value in ("done", "skipped") for p in d.phases if p.name != RJS), d.phases
