"""Linkage (SPEC §2): a run's objects are found only by fields real clusters set.

Each test strips every other link from an object so exactly one real field connects it. Shapes:
tests/fixtures/k8s.py — Kueue's controller ownerReference and `kueue.x-k8s.io/job-uid` label
(jobframework/reconciler.go, constants.go), KubeRay's `status.rayClusterName`, ownerReferences and
`ray.io/cluster` pod label (common/pod.go), the Job controller's pod labels (`batch.kubernetes.io/
job-name`, legacy `job-name`), DRA `spec.resourceClaims` / `status.resourceClaimStatuses`, and
core/v1 vs events.k8s.io/v1 events — via reference/kueue-workload-status.md,
reference/kuberay-status.md and reference/pod-failure-shapes.md.
"""

from __future__ import annotations

import copy

import pytest

from tests.fixtures import k8s
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.linkage import find_run

from .helpers import NOW, diagnose

NODE = "aks-a100-36215678-vmss000003"
JOB_POD_LABELS = ("batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name",
                  "controller-uid", "job-name")


def names(objs: list[dict]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


def only_labels(obj: dict, keep: tuple[str, ...] = ()) -> dict:
    obj["metadata"]["labels"] = {k: v for k, v in obj["metadata"].get("labels", {}).items() if k in keep}
    return obj


def no_owners(obj: dict) -> dict:
    obj["metadata"].pop("ownerReferences", None)
    return obj


# --------------------------------------------------------------------------- Workloads


def test_workload_by_controller_owner_reference_alone() -> None:
    j = k8s.job("train")
    wl = only_labels(k8s.workload(j, state="admitted"))
    objs = find_run([j, wl], "train")
    assert names(objs.workloads) == [wl["metadata"]["name"]]


def test_workload_by_job_uid_label_alone() -> None:
    j = k8s.job("train")
    wl = no_owners(k8s.workload(j, state="admitted"))
    assert wl["metadata"]["labels"] == {k8s.KUEUE_JOB_UID_LABEL: j["metadata"]["uid"]}
    objs = find_run([j, wl], "train")
    assert names(objs.workloads) == [wl["metadata"]["name"]]


def test_workload_of_a_same_named_job_elsewhere_is_not_linked() -> None:
    j = k8s.job("train")
    other = k8s.job("train", "team-nlp")
    objs = find_run([j, k8s.workload(other, state="exceeds_max")], "train", k8s.NS)
    assert objs.workloads == []


def test_workload_link_decides_admission() -> None:
    # The run's own Workload (label only) is admitted; another job's, named alike, is over quota.
    j = k8s.job("train", active=1)
    mine = no_owners(k8s.workload(j, state="admitted"))
    decoy_job = k8s.job("train-eval", active=0, suspend=True)
    decoy = k8s.workload(decoy_job, state="exceeds_max")
    d = diagnose([j, mine, decoy_job, decoy, k8s.job_pod(j, node=NODE)], "train")
    assert d.phase("Kueue admission").state.value == "done"
    assert d.first_incomplete is None


# --------------------------------------------------------------------------- RayCluster


def test_raycluster_by_status_ray_cluster_name() -> None:
    rj = k8s.rayjob("train")
    rc = only_labels(no_owners(k8s.raycluster(rayjob=rj, state="ready")))
    decoy = k8s.raycluster("train-old-x2b9d", state="ready")
    objs = find_run([decoy, rj, rc], "train")
    assert objs.raycluster is rc


def test_raycluster_by_owner_reference() -> None:
    # Before KubeRay writes status.rayClusterName the owner reference is the only link.
    rj = k8s.rayjob("train", deployment_status="Initializing", job_status="")
    del rj["status"]["rayClusterName"]
    rc = only_labels(k8s.raycluster(rayjob=rj, name="train-7kq2m"))
    decoy = k8s.raycluster("train-old-x2b9d", state="ready")
    objs = find_run([decoy, rj, rc], "train")
    assert objs.raycluster is rc


# --------------------------------------------------------------------------- pods


@pytest.mark.parametrize("link", ["batch.kubernetes.io/job-name", "job-name", "ownerReference"])
def test_job_pod_by_one_link(link: str) -> None:
    j = k8s.job("train", active=1)
    p = k8s.job_pod(j, node=NODE, containers=[k8s.crash_loop("trainer")])
    if link == "ownerReference":
        only_labels(p)
    else:
        only_labels(no_owners(p), (link,))
    assert names(find_run([j, p], "train").pods) == [p["metadata"]["name"]]
    # And the pod is judged: its crash loop is the run's verdict.
    d = diagnose([j, k8s.workload(j, state="admitted"), p], "train")
    assert d.first_incomplete == "Container start"


def test_ray_pods_by_ray_io_cluster_label() -> None:
    rj = k8s.rayjob("train")
    rc = k8s.raycluster(rayjob=rj, state="ready")
    head = no_owners(k8s.ray_pod(rc, "head", node=NODE))
    worker = no_owners(k8s.ray_pod(rc, "worker", node=NODE))
    stranger = k8s.ray_pod(k8s.raycluster("other-c4x8p", state="ready"), "head", node=NODE)
    objs = find_run([rj, rc, head, worker, stranger], "train")
    assert sorted(names(objs.pods)) == sorted(names([head, worker]))


def test_submitter_pod_by_its_job() -> None:
    rj = k8s.rayjob("train")
    sub = k8s.submitter_job(rj, active=1)
    sp = k8s.submitter_pod(sub, node=NODE)
    objs = find_run([rj, sub, sp], "train")
    assert objs.kind == "RayJob"
    assert names(objs.pods) == [sp["metadata"]["name"]]


# --------------------------------------------------------------------------- ResourceClaims


def test_claim_by_pod_spec_resource_claim_name() -> None:
    # A pod that names a pre-created claim directly (no template, no status entry, no owner).
    j = k8s.job("train", active=1)
    claim = no_owners(k8s.resource_claim("shared-a100-claim", allocated=True, pod="x"))
    p = k8s.job_pod(j, node=NODE)
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared-a100-claim"}]
    unrelated = k8s.resource_claim("someone-elses-claim", allocated=False, pod="y")
    objs = find_run([j, p, claim, unrelated], "train")
    assert list(objs.claims) == ["shared-a100-claim"]


def test_claim_by_pod_status_resource_claim_statuses() -> None:
    # Template-generated claim: its name appears only in the pod's status.
    j = k8s.job("train", active=1)
    claim = no_owners(k8s.resource_claim("train-pod-gpu-9x2kq", allocated=False, at=10))
    p = k8s.job_pod(j, resource_claims=[claim], node=None,
                    conditions=k8s.cond_unschedulable(k8s.msg_unschedulable("dra")))
    assert "resourceClaimName" not in p["spec"]["resourceClaims"][0]
    objs = find_run([j, p, claim], "train")
    assert list(objs.claims) == ["train-pod-gpu-9x2kq"]
    d = diagnose([j, k8s.workload(j, state="admitted"), p, claim], "train")
    assert d.phase("DRA allocation").state.value == "warning"


# --------------------------------------------------------------------------- events


def not_ready_job() -> tuple[dict, dict, list[dict]]:
    j = k8s.job("train", active=1)
    p = k8s.job_pod(j, node=NODE, containers=[k8s.running("trainer", ready=False)])
    return j, p, [j, k8s.workload(j, state="admitted"), p]


def test_core_v1_event_reaches_ready() -> None:
    j, p, objs = not_ready_job()
    assert diagnose(objs, "train").phase("Ready").state.value == "active"
    d = diagnose(objs + [k8s.ev_unhealthy(p, "trainer")], "train")
    assert d.phase("Ready").state.value == "warning"
    assert "Readiness probe failed" in d.phase("Ready").summary


def test_events_k8s_io_v1_event_reaches_ready() -> None:
    j, p, objs = not_ready_job()
    ev = k8s.event_v1_events(p, "Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503",
                             count=30, first=120, last=1700, field_path="spec.containers{trainer}",
                             host=NODE)
    assert "involvedObject" not in ev and "message" not in ev
    d = diagnose(objs + [ev], "train")
    assert d.phase("Ready").state.value == "warning"
    assert d.first_incomplete == "Ready"


# --------------------------------------------------------------------------- unrelated objects


def healthy_run() -> list[dict]:
    j = k8s.job("train", active=2)
    return [j, k8s.workload(j, state="admitted"), k8s.job_pod(j, 0, node=NODE), k8s.job_pod(j, 1, node=NODE)]


def other_runs_crash_loops() -> list[dict]:
    other = k8s.job("train-sweep", active=1)
    p = k8s.job_pod(other, node=NODE, containers=[k8s.crash_loop("trainer")])
    return [other, k8s.workload(other, state="admitted"), p, k8s.ev_backoff_restart(p)]


def events_about_other_pods() -> list[dict]:
    # A pod named like a `train` pod but never linked (no labels, no owner), with failure events.
    stray = only_labels(no_owners(k8s.pod("train-zz9k4", node=NODE)))
    return [k8s.ev_unhealthy(stray, "trainer"), k8s.ev_failed_scheduling(stray)]


def same_named_pod_elsewhere() -> list[dict]:
    # The `train` Job of another namespace, with a pod of exactly the same name, crash-looping.
    mine = healthy_run()
    other_job = k8s.job("train", "team-nlp", active=1)
    twin = copy.deepcopy(mine[2])
    twin["metadata"]["namespace"] = "team-nlp"
    twin["metadata"]["uid"] = k8s.uid_for("Pod", "team-nlp", twin["metadata"]["name"])
    twin["status"]["containerStatuses"] = [k8s.crash_loop("trainer", ns="team-nlp")]
    twin["metadata"]["ownerReferences"] = [k8s.owner_ref(other_job)]
    return [other_job, twin, k8s.ev_backoff_restart(twin), k8s.ev_unhealthy(twin, "trainer")]


@pytest.mark.parametrize("noise", [other_runs_crash_loops, events_about_other_pods, same_named_pod_elsewhere],
                         ids=lambda f: f.__name__)
def test_unrelated_objects_never_change_the_verdict(noise) -> None:
    base = evaluate(k8s.kube_list(*healthy_run()), "train", NOW, namespace=k8s.NS)
    noisy = evaluate(k8s.kube_list(*healthy_run(), *noise()), "train", NOW, namespace=k8s.NS)
    assert base.first_incomplete is None
    assert noisy.contract() == base.contract()
    assert noisy.evidence == base.evidence

