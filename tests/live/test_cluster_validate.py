"""`cluster validate topology|nodes` (layer 6) against the emulator, under the caller's identity.

Shapes: TauCluster per SPEC §8; Kueue v1beta2 ResourceFlavor and Topology
(apis/kueue/v1beta2/resourceflavor_types.go, topology_types.go; the TAS
docs' `cloud.provider.com/topology-block` levels); Nodes as in
tests/diagnosis/test_node_health.py; the validation pod per
shared/reference/node-health.md §1.7.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.diagnosis.test_node_health import node
from tests.fakes.kube_api import KubeEmulator, running_emulator
from workers.config.workspaces import load_descriptors
from workers.kube.client import ClusterTarget, Identity, make_bot_client
from workers.kube.reader import KubeReader
from workers.validation.cluster import validate_nodes

from .conftest import write_descriptor

REPO = Path(__file__).resolve().parents[2]
OPERATOR = Identity(user="ops@example.com", groups=("platform-operators",))


def tau_cluster() -> dict:
    return {"apiVersion": "taugrid.io/v1alpha1", "kind": "TauCluster", "metadata": {"name": "aks-east"},
            "status": {"profileSetRevision": "r42", "profiles": [
                {"name": "a100-8x", "ready": True, "resourceFlavors": ["a100", "a100-tas"]},
                {"name": "h100-8x", "ready": True, "resourceFlavors": ["h100"]},
                {"name": "legacy-v100", "ready": False, "resourceFlavors": ["v100"]}]}}


def flavor(name: str, labels: dict, topology: str | None = None) -> dict:
    spec: dict = {"nodeLabels": labels, "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu",
                                                         "effect": "NoSchedule"}]}
    if topology:
        spec["topologyName"] = topology
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": spec}


def labelled(name: str, pool: str, **extra: object) -> dict:
    obj = node(**{"metadata.name": name})
    obj["metadata"]["labels"] = {**obj["metadata"]["labels"], "kubernetes.azure.com/agentpool": pool}
    for key, value in extra.items():
        obj["spec"][key] = value
    return obj


def cluster_objects() -> list[dict]:
    good = labelled("aks-a100-vmss000001", "a100")
    good["metadata"]["labels"]["cloud.provider.com/topology-block"] = "b1"
    # A node registered before its pool's topology labels were rolled out, missing one of them
    # (here the hostname level of the Topology below, so a TAS flavor cannot place on it).
    del good["metadata"]["labels"]["kubernetes.io/hostname"]
    return [
        tau_cluster(),
        flavor("a100", {"kubernetes.azure.com/agentpool": "a100"}),
        flavor("a100-tas", {"kubernetes.azure.com/agentpool": "a100"}, topology="default"),
        flavor("h100", {"kubernetes.azure.com/agentpool": "h100"}),
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "default"},
         "spec": {"levels": [{"nodeLabel": "cloud.provider.com/topology-block"},
                             {"nodeLabel": "kubernetes.io/hostname"}]}},
        good,
        labelled("aks-a100-vmss000002", "a100", unschedulable=True),  # cordoned: never counted
        labelled("aks-h100-vmss000001", "h100", unschedulable=True),  # the h100 pool's only node
    ]


def taubot(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=60)


def test_topology_reports_zero_matching_nodes_and_skips_cordoned(tmp_path: Path) -> None:
    with running_emulator(cluster_objects()) as emu:
        write_descriptor(tmp_path, emu.base_url)
        done = taubot(["cluster", "validate", "topology", "--workspace", "vision", "--workspaces-dir",
                       str(tmp_path), "--as", "ops@example.com", "--format", "json"])
        report = json.loads(done.stdout)
        assert done.returncode == 1 and report["layer"] == 6 and report["owner"] == "node-pool-owner"
        checks = {c["name"]: c for c in report["checks"]}
        assert set(checks) == {"profile a100-8x flavor a100", "profile a100-8x flavor a100-tas",
                               "profile h100-8x flavor h100"}  # the not-ready profile is not validated
        assert checks["profile a100-8x flavor a100"]["detail"] == "1 matching Ready node(s); 1 excluded"
        # The TAS flavor needs every level label, and the node lacks one.
        assert checks["profile a100-8x flavor a100-tas"]["state"] == "failed"
        assert "lacks topology label kubernetes.io/hostname" in checks["profile a100-8x flavor a100-tas"]["detail"]
        h100 = checks["profile h100-8x flavor h100"]
        assert h100["state"] == "failed" and h100["detail"].startswith("zero matching nodes for flavor h100")
        assert "cordoned" in h100["detail"]
        assert all(r.header_values("Impersonate-User") == ["ops@example.com"] for r in emu.requests)
        assert {r.method for r in emu.requests} <= {"GET"}  # read-only


def test_validate_nodes_refuses_a_caller_without_rbac_before_any_pod(tmp_path: Path) -> None:
    with running_emulator(cluster_objects()) as emu:
        write_descriptor(tmp_path, emu.base_url)
        emu.forbid("create", "pods", user="alice@example.com")
        done = taubot(["cluster", "validate", "nodes", "--selector", "kubernetes.azure.com/agentpool=a100",
                       "--workspace", "vision", "--workspaces-dir", str(tmp_path), "--as", "alice@example.com"])
        assert done.returncode == 1
        assert "refused: permission denied (create pods)" in done.stdout
        assert [r for r in emu.requests if r.method != "GET" and "selfsubjectaccessreviews" not in r.path] == []


def pod_security(level: str) -> Callable[[dict, object], dict | None]:
    """The Pod Security admission of a namespace labelled `pod-security.kubernetes.io/enforce=<level>`
    (baseline or restricted) as the API server answers a privileged pod: 403 Forbidden with the
    plugin's own words (k8s.io/pod-security-admission admission.go), though RBAC allows the create."""
    def admit(pod: dict, _caller: object) -> dict | None:
        if not any((c.get("securityContext") or {}).get("privileged") for c in pod["spec"]["containers"]):
            return None
        name = pod["metadata"]["name"]
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden",
                "message": f'pods "{name}" is forbidden: violates PodSecurity "{level}:latest": privileged '
                           '(container "validate" must not set securityContext.privileged=true)',
                "details": {"name": name, "kind": "pods"}, "code": 403}
    return admit


def test_validate_nodes_where_pod_security_refuses_privileged_pods_says_so_once_and_creates_none(
        tmp_path: Path) -> None:
    """The access review answers RBAC alone: a caller who may create pods where Pod Security is
    `baseline` (the usual level) was refused one 403 per node, each said as "permission denied
    (create pods)". A server-side dry run asks first: one line in the server's words, no pod."""
    with running_emulator(cluster_objects()) as emu:
        write_descriptor(tmp_path, emu.base_url)
        emu.admit("pods", pod_security("baseline"))
        done = taubot(["cluster", "validate", "nodes", "--selector", "kubernetes.azure.com/agentpool=a100",
                       "--workspace", "vision", "--workspaces-dir", str(tmp_path), "--as", "alice@example.com"])
        assert done.returncode == 1
        out = " ".join(done.stdout.split())
        assert 'violates PodSecurity "baseline:latest": privileged' in out, out
        assert "refused: the API server would not admit the validation pod" in out and "no pod was created" in out
        assert "pod-security.kubernetes.io/enforce=privileged" in out
        assert "permission denied (create pods)" not in out
        posts = [r for r in emu.requests if r.method == "POST" and r.path.endswith("/pods")]
        assert [r.query.get("dryRun") for r in posts] == ["All"]  # the dry run, and no pod attempted
        assert posts[0].header_values("Impersonate-User") == ["alice@example.com"]
        assert not [o for o in emu.objects() if o["kind"] == "Pod"]


async def test_validate_nodes_creates_pods_as_the_caller_reads_results_and_deletes_them(tmp_path: Path) -> None:
    objects = [o for o in cluster_objects() if o["kind"] == "Node"
               and o["metadata"]["name"].startswith("aks-a100")]
    async with KubeEmulator(objects) as emu:
        write_descriptor(tmp_path, emu.base_url)
        registry = load_descriptors(tmp_path)
        task = asyncio.create_task(validate_nodes(registry, identity=OPERATOR, selector="kubernetes.azure.com/agentpool=a100",
                                                  namespace="taugrid-validation", workspace="vision", min_healthy=2,
                                                  timeout=20))
        # Play the kubelet, on a watch of the namespace: each validation pod runs when it is
        # created; the one on ...000002 fails its dcgmi diag.
        kubelet = await make_bot_client(ClusterTarget(server=emu.base_url))
        finished: set[str] = set()
        async with kubelet:
            async for event in KubeReader(kubelet).watch("/api/v1/namespaces/taugrid-validation/pods", timeout=20):
                obj = event["object"]
                if event["type"] != "ADDED" or obj["metadata"]["name"] in finished:
                    continue
                failed = obj["spec"]["nodeName"].endswith("000002")
                obj["status"] = {"phase": "Failed" if failed else "Succeeded", "containerStatuses": [
                    {"name": "validate", "state": {"terminated": {"exitCode": 1 if failed else 0,
                                                                   "reason": "Error" if failed else "Completed"}}}]}
                if failed:
                    emu.pod_logs[("taugrid-validation", obj["metadata"]["name"], None)] = (
                        "Successfully ran diagnostic for group.\n"
                        '| Memory                  | Fail - GPU 3: DCGM_FR_VOLATILE_DBE_DETECTED            |\n')
                emu.upsert(obj)
                finished.add(obj["metadata"]["name"])
                if len(finished) == 2:
                    break
        report = await asyncio.wait_for(task, 30)
    creates = [r for r in emu.requests if r.method == "POST" and r.path.endswith("/pods") and "dryRun" not in r.query]
    assert len(creates) == 2 and all(r.header_values("Impersonate-User") == ["ops@example.com"] for r in creates)
    assert all(r.body["spec"]["containers"][0]["securityContext"] == {"privileged": True} for r in creates)
    deletes = [r for r in emu.requests if r.method == "DELETE"]
    assert len(deletes) == 2 and not [o for o in emu.objects() if o["kind"] == "Pod"]
    assert not report.ok and report.summary.startswith("1/2 nodes healthy (need 2)")
    checks = {c.name: c for c in report.checks}
    assert checks["aks-a100-vmss000001"].state == "ok"
    assert "DCGM_FR_VOLATILE_DBE_DETECTED" in checks["aks-a100-vmss000002"].detail


VALIDATION_NS = "taugrid-validation"
PODS = f"/api/v1/namespaces/{VALIDATION_NS}/pods"


def a100_nodes(count: int) -> list[dict]:
    return [labelled(f"aks-a100-vmss00000{i}", "a100") for i in range(1, count + 1)]


def ended(obj: dict, exit_code: int) -> dict:
    """A validation pod as the kubelet leaves it (`kubectl get pod -o json` of a pod that ran once)."""
    return {**obj, "status": {"phase": "Succeeded" if exit_code == 0 else "Failed", "containerStatuses": [
        {"name": "validate", "ready": False, "restartCount": 0, "state": {"terminated": {
            "exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": "2026-11-30T10:30:00Z", "finishedAt": "2026-11-30T10:30:04Z"}}}]}}


def on_node(obj: dict, suffix: str) -> bool:
    return obj.get("kind") == "Pod" and obj["spec"].get("nodeName", "").endswith(suffix) \
        and not (obj.get("status") or {}).get("phase")


async def until(condition: Callable[[], bool]) -> None:
    """Yield to the loop (the emulator and the code under test share it) until ``condition`` holds;
    the timeout only bounds a failure."""
    async with asyncio.timeout(20):
        while not condition():
            await asyncio.sleep(0)


async def test_every_node_gets_its_own_answer_and_a_slow_one_hides_none(tmp_path: Path) -> None:
    """Issue 38.1: the pods are created together (one round), and when the time is up each node says
    what became of it — healthy, failed with the exit and the log's last line, or not validated
    with the state its pod was still in (here the image pull backing off) — never one "did not
    finish in time" for all. The pod asks for no GPU (the run holds them; shapes: a kubelet's
    terminated and waiting container states, pod-failure-shapes.md)."""
    async with KubeEmulator(a100_nodes(3), latency=0.05) as emu:
        write_descriptor(tmp_path, emu.base_url)

        def kubelet(kind: str, obj: dict) -> None:
            if kind != "ADDED":
                return
            if on_node(obj, "000001"):
                emu.upsert(ended(obj, 0))
            elif on_node(obj, "000002"):
                emu.pod_logs[(VALIDATION_NS, obj["metadata"]["name"], "validate")] = (
                    "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-6a1a7f50-9d86-5a36-8a4a-f1b1d2c3e4f5)\n"
                    "Unable to determine the device handle for GPU 0000:0F:00.0: GPU is lost.  Reboot the "
                    "system to recover this GPU\n")
                emu.upsert(ended(obj, 15))
            elif on_node(obj, "000003"):
                emu.upsert({**obj, "status": {"phase": "Pending", "containerStatuses": [
                    {"name": "validate", "ready": False, "restartCount": 0, "state": {"waiting": {
                        "reason": "ImagePullBackOff",
                        "message": 'Back-off pulling image "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04"'}}}]}})

        emu.on_change.append(kubelet)
        report = await validate_nodes(load_descriptors(tmp_path), identity=OPERATOR, workspace="vision",
                                      selector="kubernetes.azure.com/agentpool=a100", namespace=VALIDATION_NS,
                                      timeout=0.5)
    checks = {c.name: c for c in report.checks}
    assert checks["aks-a100-vmss000001"].state == "ok"
    assert checks["aks-a100-vmss000002"].state == "failed"
    assert checks["aks-a100-vmss000002"].detail.startswith("failed (exit 15): Unable to determine the device "
                                                           "handle for GPU 0000:0F:00.0: GPU is lost.")
    assert checks["aks-a100-vmss000003"].state == "warning"
    assert checks["aks-a100-vmss000003"].detail == (
        'not validated: its pod was still waiting to start (ImagePullBackOff: Back-off pulling image '
        '"nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04") after 0.5s')
    assert not report.ok and report.summary == "1/3 nodes healthy (need 3); 1 not validated"
    creates = [r for r in emu.requests if r.method == "POST" and r.path == PODS and "dryRun" not in r.query]
    assert len(creates) == 3 and len({r.round for r in creates}) == 1
    container = creates[0].body["spec"]["containers"][0]
    assert "resources" not in container and container["securityContext"] == {"privileged": True}
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in container["env"]
    assert len([r for r in emu.requests if r.method == "DELETE"]) == 3


async def test_a_pod_the_kubelet_refused_is_not_validated_and_says_why(tmp_path: Path) -> None:
    """The kubelet's admission can refuse a pod pinned to its node (kubelet.go `rejectPod`: phase
    Failed, reason `OutOf<resource>`, "Pod was rejected: …"): nothing ran, so the node is neither
    healthy nor failed, and the next action says to fix that, not to repair the node."""
    async with KubeEmulator(a100_nodes(1)) as emu:
        write_descriptor(tmp_path, emu.base_url)

        def kubelet(kind: str, obj: dict) -> None:
            if kind == "ADDED" and on_node(obj, "000001"):
                emu.upsert({**obj, "status": {"phase": "Failed", "reason": "OutOfpods", "qosClass": "BestEffort",
                                              "message": "Pod was rejected: Node didn't have enough resource: "
                                                         "pods, requested: 1, used: 110, capacity: 110"}})

        emu.on_change.append(kubelet)
        report = await validate_nodes(load_descriptors(tmp_path), identity=OPERATOR, workspace="vision",
                                      selector="kubernetes.azure.com/agentpool=a100", namespace=VALIDATION_NS)
    [check] = report.checks
    assert check.state == "warning" and check.detail == (
        "not validated: the kubelet did not run its pod (OutOfpods: Pod was rejected: Node didn't have enough "
        "resource: pods, requested: 1, used: 110, capacity: 110)")
    assert report.summary == "0/1 nodes healthy (need 1); 1 not validated"
    assert report.next_action.startswith("No node failed a check, but some could not be validated")


async def test_a_watch_the_server_ends_is_resumed_and_a_compacted_one_lists_again(tmp_path: Path) -> None:
    """A WATCH can end before the time is up (an API server restart, a proxy's idle limit, etcd
    compaction): the wait resumes it, LISTs again on `410 Gone`, and still sees the last pod end."""
    async with KubeEmulator(a100_nodes(2)) as emu:
        write_descriptor(tmp_path, emu.base_url)
        emu.on_change.append(lambda kind, obj: emu.upsert(ended(obj, 0))
                             if kind == "ADDED" and on_node(obj, "000001") else None)
        task = asyncio.create_task(validate_nodes(
            load_descriptors(tmp_path), identity=OPERATOR, workspace="vision", namespace=VALIDATION_NS,
            selector="kubernetes.azure.com/agentpool=a100", timeout=60))

        def watches() -> list:
            return [r for r in emu.requests if r.path == PODS and r.query.get("watch") == "true"]

        await until(lambda: len(watches()) == 1)
        emu.upsert({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "namespace": "x"}})
        emu.compact()  # the open stream ends; resuming from its (now older) resourceVersion is 410 Gone
        await until(lambda: len(watches()) == 3)  # the resumed one (410), then one from the new LIST
        [late] = [o for o in emu.objects() if o["kind"] == "Pod" and o["spec"]["nodeName"].endswith("000002")]
        emu.upsert(ended(late, 0))
        report = await asyncio.wait_for(task, 30)
    assert report.ok and [c.state for c in report.checks] == ["ok", "ok"]
    lists = [r for r in emu.requests if r.path == PODS and r.method == "GET" and r.query.get("watch") != "true"]
    assert len(lists) == 2


async def test_pods_that_cannot_be_read_are_not_validated_never_timed_out(tmp_path: Path) -> None:
    """Truthful: when the LIST of the validation pods fails, each node says its pod could not be
    read (with the API server's status), not that it did not finish."""
    async with KubeEmulator(a100_nodes(1)) as emu:
        write_descriptor(tmp_path, emu.base_url)
        emu.on_change.append(lambda kind, obj: emu.fail("pods", 503, times=1)
                             if kind == "ADDED" and on_node(obj, "000001") else None)
        report = await validate_nodes(load_descriptors(tmp_path), identity=OPERATOR, workspace="vision",
                                      selector="kubernetes.azure.com/agentpool=a100", namespace=VALIDATION_NS)
    [check] = report.checks
    assert check.state == "warning" and check.detail.startswith("not validated: its pod could not be read (list "
                                                                "pods: unavailable")
    assert "503" in check.detail and "did not finish" not in check.detail
