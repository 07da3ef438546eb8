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
    creates = [r for r in emu.requests if r.method == "POST" and r.path.endswith("/pods")]
    assert len(creates) == 2 and all(r.header_values("Impersonate-User") == ["ops@example.com"] for r in creates)
    assert all(r.body["spec"]["containers"][0]["securityContext"] == {"privileged": True} for r in creates)
    deletes = [r for r in emu.requests if r.method == "DELETE"]
    assert len(deletes) == 2 and not [o for o in emu.objects() if o["kind"] == "Pod"]
    assert not report.ok and report.summary.startswith("1/2 nodes healthy (need 2)")
    checks = {c.name: c for c in report.checks}
    assert checks["aks-a100-vmss000001"].state == "ok"
    assert "DCGM_FR_VOLATILE_DBE_DETECTED" in checks["aks-a100-vmss000002"].detail
