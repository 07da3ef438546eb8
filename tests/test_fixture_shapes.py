"""The fixture builders produce what real clusters produce (reference/*.md shapes)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import make_examples
from bench.synth import RUN_NAME, synthetic_snapshot
from tests.fixtures import k8s


def test_workload_name_owner_and_job_uid_label() -> None:
    j = k8s.job("llama-ft-7b")
    wl = k8s.workload(j)
    assert re.fullmatch(r"job-llama-ft-7b-[0-9a-f]{5}", wl["metadata"]["name"])
    ref = wl["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        "Job",
        "llama-ft-7b",
        j["metadata"]["uid"],
        True,
    )
    assert wl["metadata"]["labels"][k8s.KUEUE_JOB_UID_LABEL] == j["metadata"]["uid"]
    assert wl["spec"]["queueName"] == "team-a"
    assert [ps["name"] for ps in wl["spec"]["podSets"]] == ["main"]


def test_job_pods_link_to_job_by_label_and_owner() -> None:
    j = k8s.job("llama-ft-7b", parallelism=2)
    p = k8s.job_pod(j, 1, node="n1")
    labels = p["metadata"]["labels"]
    assert labels["batch.kubernetes.io/job-name"] == labels["job-name"] == "llama-ft-7b"
    assert labels["controller-uid"] == j["metadata"]["uid"]
    assert p["metadata"]["ownerReferences"][0]["uid"] == j["metadata"]["uid"]
    assert re.fullmatch(r"llama-ft-7b-[bcdfghjklmnpqrstvwxz2456789]{5}", p["metadata"]["name"])


def test_rayjob_cluster_and_pods_linkage() -> None:
    rj = k8s.rayjob("ray-pretrain-13b")
    rc = k8s.raycluster(rayjob=rj, state="ready")
    assert rc["metadata"]["name"] == rj["status"]["rayClusterName"]
    assert re.fullmatch(r"ray-pretrain-13b-[a-z0-9]{5}", rc["metadata"]["name"])
    assert rc["metadata"]["labels"]["ray.io/originated-from-crd"] == "RayJob"
    assert rc["metadata"]["ownerReferences"][0]["uid"] == rj["metadata"]["uid"]
    wl = k8s.workload(rj)
    assert [ps["name"] for ps in wl["spec"]["podSets"]] == ["head", "gpu-workers", "submitter"]
    head = k8s.ray_pod(rc, "head", node="n0")
    worker = k8s.ray_pod(rc, "worker", node="n1")
    assert head["metadata"]["name"].startswith(f"{rc['metadata']['name']}-head-")
    assert worker["metadata"]["name"].startswith(f"{rc['metadata']['name']}-gpu-workers-worker-")
    for p, node_type in ((head, "head"), (worker, "worker")):
        labels = p["metadata"]["labels"]
        assert labels["ray.io/cluster"] == rc["metadata"]["name"]
        assert labels["ray.io/node-type"] == node_type
        assert labels["ray.io/is-ray-node"] == "yes"
        assert labels["app.kubernetes.io/created-by"] == "kuberay-operator"
    sub = k8s.submitter_job(rj)
    assert sub["metadata"]["name"] == "ray-pretrain-13b"
    assert sub["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
    assert k8s.KUEUE_QUEUE_LABEL not in sub["metadata"]["labels"]


@pytest.mark.parametrize("state", k8s.WORKLOAD_STATES)
@pytest.mark.parametrize("version", ["kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"])
def test_every_workload_state_builds(state: str, version: str) -> None:
    wl = k8s.workload(k8s.rayjob("r"), version, state=state, priority_class="high")  # type: ignore[arg-type]
    assert wl["apiVersion"] == version
    key = "priorityClassName" if version.endswith("v1beta1") else "priorityClassRef"
    assert key in wl["spec"]
    for c in wl["status"].get("conditions", []):
        assert c["status"] in ("True", "False") and c["lastTransitionTime"].endswith("Z")


def test_dra_claim_versions_and_pod_fields() -> None:
    v1 = k8s.resource_claim(pod="p", allocated=False)
    beta1 = k8s.resource_claim(pod="p", api_version="resource.k8s.io/v1beta1", pool="node-1")
    assert "exactly" in v1["spec"]["devices"]["requests"][0] and v1["status"] == {}
    assert "deviceClassName" in beta1["spec"]["devices"]["requests"][0]
    assert beta1["status"]["allocation"]["devices"]["results"][0]["pool"] == "node-1"
    p = k8s.pod("p", resource_claims=[v1])
    assert p["spec"]["resourceClaims"][0]["name"] == "gpu"
    assert p["status"]["resourceClaimStatuses"][0]["resourceClaimName"] == v1["metadata"]["name"]
    assert v1["metadata"]["ownerReferences"][0]["uid"] == p["metadata"]["uid"]


def test_crash_loop_message_names_the_pod() -> None:
    p = k8s.pod("trainer-abcde", node="n1", containers=[k8s.crash_loop("trainer")])
    msg = p["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    assert msg == (
        f"back-off 5m0s restarting failed container=trainer pod=trainer-abcde_{k8s.NS}"
        f"({p['metadata']['uid']})"
    )
    assert p["status"]["phase"] == "Running"


def test_kueue_gated_pod() -> None:
    p = k8s.pod("p", scheduling_gates=[k8s.KUEUE_ADMISSION_GATE])
    assert p["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
    assert p["status"]["phase"] == "Pending"
    assert p["status"]["conditions"][0]["reason"] == "SchedulingGated"


def test_kube_list_round_trips_through_json() -> None:
    j = k8s.job("a")
    lst = k8s.kube_list(j, [k8s.workload(j), k8s.event_v1(j, "X", "y")])
    assert lst["kind"] == "List" and len(lst["items"]) == 3
    assert json.loads(json.dumps(lst)) == lst


@pytest.mark.parametrize("kind", ["RayJob", "Job"])
def test_synthetic_snapshot(kind: str) -> None:
    snap = synthetic_snapshot(64, kind, failing_pod_index=5)  # type: ignore[arg-type]
    pods = [o for o in snap["items"] if o["kind"] == "Pod"]
    own = [p for p in pods if RUN_NAME in p["metadata"]["name"]]
    assert len(own) == 64
    assert len({p["spec"]["nodeName"] for p in own}) == 8
    assert len(pods) > len(own)
    json.dumps(snap)


def test_bundled_examples_are_up_to_date() -> None:
    """The shipped dumps equal what ``bench/make_examples.py`` generates."""
    out = Path(make_examples.__file__).resolve().parent.parent / "workers" / "examples"
    for ex, build in make_examples.EXAMPLES:
        assert (out / ex.file).read_text() == make_examples.render(build(), ex.run), ex.file
