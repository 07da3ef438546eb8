"""What the collector could not read must read as such (SPEC §7): a 403 is "permission denied",
never "not found" and never an empty answer ("no pods yet").

`ReadGap`s are what workers/collect/investigate.py builds from the reader's errors (`ReadError.describe()`:
``permission denied (<verb> <resource>)`` / ``unavailable (<detail>)``). The detail strings are the
API server's own Status messages (apiserver RBAC authorizer: ``<resource> is forbidden: User "<u>"
cannot <verb> resource "<r>" in API group "<g>" in the namespace "<ns>"``). Objects: tests/fixtures/k8s.py.
"""

from __future__ import annotations

from tests.fixtures import k8s
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.gaps import ReadGap

from .helpers import NOW

POD_PHASES = ("Pod scheduling", "Image pull", "Init containers", "Container start", "Ready")
PODS_FORBIDDEN = ReadGap(
    kind="forbidden",
    text="permission denied (list pods)",
    detail='pods is forbidden: User "alice@example.com" cannot list resource "pods" in API group "" '
    'in the namespace "team-vision"',
)


def texts(d) -> str:
    return " ".join([p.summary for p in d.phases] + [e for p in d.phases for e in p.evidence] + d.evidence)


def test_forbidden_pods_read_permission_denied_not_no_pods() -> None:
    # What the collector got: the Job and its admitted Workload; the pod list was refused.
    j = k8s.job("train", active=2)
    snap = k8s.kube_list(j, k8s.workload(j, state="admitted"))
    d = evaluate(snap, "train", NOW, namespace=k8s.NS, gaps={"pods": PODS_FORBIDDEN})
    for name in POD_PHASES:
        p = d.phase(name)
        assert p.state.value == "warning", (name, p.state, p.summary)
        assert p.summary == "permission denied (list pods)", (name, p.summary)
    assert "no pods yet" not in texts(d)
    assert d.first_incomplete == "Pod scheduling"
    assert d.owner == "platform"
    assert d.transient is False
    assert "permission denied" in d.next_action
    # Admission was readable and stays as it was.
    assert d.phase("Kueue admission").state.value == "done"


def test_forbidden_pods_of_a_rayjob() -> None:
    rj = k8s.rayjob("train")
    snap = k8s.kube_list(rj, k8s.workload(rj, state="admitted"), k8s.raycluster(rayjob=rj, state="ready"))
    d = evaluate(snap, "train", NOW, namespace=k8s.NS, gaps={"pods": PODS_FORBIDDEN})
    assert [d.phase(n).summary for n in POD_PHASES] == ["permission denied (list pods)"] * len(POD_PHASES)
    assert "no pods yet" not in texts(d)
    assert d.owner == "platform"


def test_workloads_unavailable_is_an_admission_warning() -> None:
    gap = ReadGap(kind="unavailable", text="unavailable (503 Service Unavailable)",
                  detail="the server is currently unable to handle the request")
    j = k8s.job("train", suspend=True)
    d = evaluate(k8s.kube_list(j), "train", NOW, namespace=k8s.NS, gaps={"workloads": gap})
    p = d.phase("Kueue admission")
    assert p.state.value == "warning", (p.state, p.summary)
    assert "unavailable" in p.summary
    assert "no Workload yet" not in texts(d)
    assert d.first_incomplete == "Kueue admission"
    assert d.owner == "platform"


def test_not_found_with_rayjobs_forbidden_says_permission_denied() -> None:
    # live.py round 1: GET rayjobs/train → 403, GET jobs/train → 404 (not a gap); nothing was found.
    gap = ReadGap(
        kind="forbidden",
        text="permission denied (get rayjobs)",
        detail='rayjobs.ray.io "train" is forbidden: User "alice@example.com" cannot get resource '
        '"rayjobs" in API group "ray.io" in the namespace "team-vision"',
    )
    d = evaluate(k8s.kube_list(), "train", NOW, namespace=k8s.NS, gaps={"rayjobs": gap})
    p = d.phase("Submitted")
    assert p.state.value == "warning"
    assert "permission denied" in p.summary
    assert "not found" not in p.summary
    assert d.first_incomplete == "Submitted"
    assert d.owner == "platform"
    assert d.run.kind is None


def test_gap_on_a_found_run_does_not_unfind_it() -> None:
    # Jobs were readable and the run is there; a refused RayJob list cannot make it "not found".
    j = k8s.job("train", active=1)
    snap = k8s.kube_list(j, k8s.workload(j, state="admitted"),
                         k8s.job_pod(j, node="aks-a100-36215678-vmss000003"))
    gap = ReadGap(kind="forbidden", text="permission denied (get rayjobs)")
    d = evaluate(snap, "train", NOW, namespace=k8s.NS, gaps={"rayjobs": gap})
    assert d.phase("Submitted").state.value == "done"
    assert d.first_incomplete is None


def test_forbidden_pods_never_read_as_dra_skipped_expected() -> None:
    j = k8s.job("train", active=2)
    d = evaluate(k8s.kube_list(j, k8s.workload(j, state="admitted")), "train", NOW, namespace=k8s.NS,
                 gaps={"pods": PODS_FORBIDDEN})
    dra = d.phase("DRA allocation")
    assert dra.state.value == "warning" and dra.summary == "permission denied (list pods)"
    assert "expected" not in dra.summary


def test_a_yaml_dump_with_unquoted_timestamps_keeps_its_times() -> None:
    """`kubectl get -o yaml` output pasted without quotes: PyYAML reads timestamps as datetimes."""
    import yaml

    from workers.collect.dumps import parse_snapshot

    j = k8s.job("train", active=1)
    pod = k8s.job_pod(j, node="gpu-node-1", phase="Running", containers=[k8s.running()])
    text = yaml.safe_dump(k8s.kube_list(j, k8s.workload(j, state="admitted"), pod)).replace("'", "")
    objects = parse_snapshot(text)
    assert not isinstance(objects[0]["metadata"]["creationTimestamp"], str)  # really unquoted
    d = evaluate(objects, "train", NOW)
    assert "created at 2026-11-30" in d.phase("Submitted").summary and "?" not in d.phase("Submitted").summary
