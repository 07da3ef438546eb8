"""Submitted (layer 3), which object is the run, and how a finished run is judged.

Shapes: tests/fixtures/k8s.py (`job`, `job_complete`/`job_failed` from the batch/v1 Job controller;
`rayjob`/`submitter_job` from KubeRay rayjob_types.go and rayjob_controller.go), via
reference/pod-failure-shapes.md and reference/kuberay-status.md. The ValidationFailed status and
the InvalidRayJobSpec event follow KubeRay rayjob_controller.go (`validateRayJob` → event
"%s/%s: %v", status reason ValidationFailed, message err.Error()) and utils/validation.go messages.
"""

from __future__ import annotations

import pytest

from tests.fixtures import k8s

from .helpers import NOW, Case, diagnose

SUB = "Submitted"
NODE = "aks-a100-36215678-vmss000003"
# kuberay utils/validation.go ValidateRayJobSpec, first check.
MSG_INVALID = (
    "The RayJob spec is invalid: a RayJob with shutdownAfterJobFinishes set to false is not allowed "
    "to be suspended"
)
FINISHED = ("done", "skipped")


def healthy_job(name: str = "train", ns: str = k8s.NS, **pod_kw) -> list[dict]:
    j = k8s.job(name, ns, active=1)
    pod_kw.setdefault("node", NODE)
    return [j, k8s.workload(j, state="admitted"), k8s.job_pod(j, **pod_kw)]


def other_run_only() -> list[dict]:
    return healthy_job("eval-sweep")


def validation_failed() -> list[dict]:
    # Validation fails before a cluster exists: no rayClusterName/jobId/dashboardURL yet.
    rj = k8s.rayjob("train", suspend=True, shutdown_after_job_finishes=False,
                    deployment_status="ValidationFailed", job_status="", reason="ValidationFailed",
                    message=MSG_INVALID)
    for key in ("rayClusterName", "jobId", "dashboardURL", "startTime"):
        rj["status"].pop(key, None)
    ev = k8s.event_v1(rj, "InvalidRayJobSpec", f"{k8s.NS}/train: {MSG_INVALID}",
                      source_component="rayjob-controller", first=1, last=1)
    return [rj, ev]


def invalid_spec_event_only() -> list[dict]:
    # Older KubeRay only emitted the event and left the status empty.
    rj = k8s.rayjob("train", deployment_status="none")
    ev = k8s.event_v1(rj, "InvalidRayJobSpec", f"{k8s.NS}/train: {MSG_INVALID}",
                      source_component="rayjob-controller", first=1, last=1)
    return [rj, ev]


CASES = [
    Case("found", lambda: healthy_job(), SUB, "done", summary="created"),
    Case("not-found", other_run_only, SUB, "warning", summary="not found", first=SUB, layer=3,
         owner="researcher", transient=False),
    Case("rayjob-validation-failed", validation_failed, SUB, "warning", summary="invalid", first=SUB,
         layer=3, owner="researcher", transient=False),
    Case("invalid-rayjob-spec-event", invalid_spec_event_only, SUB, "warning", summary="InvalidRayJobSpec",
         first=SUB, layer=3, owner="researcher"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_submitted(case: Case) -> None:
    case.check()


def test_not_found_has_no_kind_and_nothing_after_it_is_done() -> None:
    d = diagnose(other_run_only(), "train")
    assert d.run.kind is None
    assert d.contract()["run"]["kind"] is None
    later = [p for p in d.phases if p.name != SUB]
    assert [p.name for p in later if p.state.value == "done"] == [], later
    # The other run's healthy objects must not leak into a "not found" answer.
    assert "eval-sweep" not in " ".join(p.summary for p in d.phases)


def test_not_found_run_makes_no_claim_about_its_gpus() -> None:
    # `skipped` means "does not apply to this run" (SPEC §3); for a run that does not exist nobody
    # knows whether it uses DRA, so "GPUs come through the device plugin (expected)" would mislead.
    d = diagnose(other_run_only(), "train")
    later = [p for p in d.phases if p.name != SUB]
    assert [(p.name, p.summary) for p in later if p.state.value in FINISHED] == []


def test_rayjob_wins_over_its_same_named_submitter_job() -> None:
    rj = k8s.rayjob("train")
    sub = k8s.submitter_job(rj, active=1, at=70)
    rc = k8s.raycluster(rayjob=rj, state="ready")
    # The Job is listed first, as `kubectl get jobs,rayjobs` would print it.
    d = diagnose([sub, k8s.submitter_pod(sub, node=NODE), rj, k8s.workload(rj), rc,
                  k8s.ray_pod(rc, node=NODE)], "train")
    assert d.run.kind == "RayJob"
    assert d.phase("RayCluster").state.value == "done"
    assert d.phase("RayJob status").state.value == "active"
    assert d.first_incomplete == "RayJob status"


def test_taugrid_run_label_is_honoured() -> None:
    j = k8s.job("train-x7k2p", labels={"taugrid.io/run": "train"}, active=1)
    p = k8s.job_pod(j, node=NODE, containers=[k8s.crash_loop("trainer")])
    d = diagnose([j, k8s.workload(j, state="admitted"), p], "train")
    assert d.run.kind == "Job"
    assert d.phase(SUB).state.value == "done"
    # Its pods (linked by the Job's real name) are judged.
    assert d.first_incomplete == "Container start"
    assert "CrashLoopBackOff" in d.phase("Container start").summary


def test_namespace_filter_picks_the_right_run() -> None:
    crashing = healthy_job("train", "team-nlp", containers=[k8s.crash_loop("trainer", ns="team-nlp")])
    objs = healthy_job("train", k8s.NS) + crashing
    snap = k8s.kube_list(*objs)
    from workers.diagnosis.evaluate import evaluate

    ok = evaluate(snap, "train", NOW, namespace=k8s.NS)
    bad = evaluate(snap, "train", NOW, namespace="team-nlp")
    assert ok.run.namespace == k8s.NS and ok.first_incomplete is None
    assert bad.run.namespace == "team-nlp" and bad.first_incomplete == "Container start"
    missing = evaluate(snap, "train", NOW, namespace="team-audio")
    assert missing.phase(SUB).state.value == "warning" and missing.run.kind is None


def succeeded_job_after_oom() -> list[dict]:
    # Pod 0 was OOMKilled (restartPolicy Never → pod Failed); the replacement pod succeeded.
    j = k8s.job("train", conditions=k8s.job_complete(at=1500), succeeded=1, failed=1, completion_at=1500)
    oom = k8s.job_pod(j, 0, node=NODE, containers=[k8s.terminated("trainer", exit_code=137,
                                                                   reason="OOMKilled", finished_at=300)])
    ok = k8s.job_pod(j, 1, node=NODE, created=320, containers=[k8s.terminated("trainer", finished_at=1490)])
    return [j, k8s.workload(j, state="finished"), oom, ok,
            k8s.event_v1(j, "Completed", "Job completed", type="Normal", source_component="job-controller",
                         first=1500)]


def failed_job() -> list[dict]:
    j = k8s.job("train", conditions=k8s.job_failed(at=900), failed=7, backoff_limit=6)
    p = k8s.job_pod(j, 6, node=NODE, containers=[k8s.terminated("trainer", exit_code=1, finished_at=880)])
    return [j, k8s.workload(j, state="finished_failed"), p]


def test_succeeded_job_is_done_everywhere_whatever_was_left_behind() -> None:
    d = diagnose(succeeded_job_after_oom(), "train")
    assert {p.name: p.state.value for p in d.phases if p.state.value not in FINISHED} == {}
    assert (d.first_incomplete, d.layer, d.owner, d.transient) == (None, 7, "researcher", None)


FINISHED_CASES = [
    Case("failed-job-container-start", failed_job, "Container start", "warning", summary="exit 1",
         first="Container start", layer=5, owner="researcher", transient=False),
    Case("failed-job-admission-stays-done", failed_job, "Kueue admission", "done"),
]


@pytest.mark.parametrize("case", FINISHED_CASES, ids=[c.id for c in FINISHED_CASES])
def test_finished(case: Case) -> None:
    case.check()
