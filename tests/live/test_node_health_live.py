"""Layer 6 live: the run's nodes in one impersonated LIST (by the kubelet's hostname label); 403 is
`unavailable`; a node whose hostname label is not its name is read by a GET of its own."""

from __future__ import annotations

from pathlib import Path

from bench.synth import RUN_NAME, synthetic_snapshot
from tests.diagnosis.test_node_health import UNREACHABLE, node
from tests.fakes.kube_api import KubeEmulator
from tests.live.test_live_diagnosis import ALICE, NOW, run_live
from workers.collect.investigate import diagnose_live
from workers.config.workspaces import load_descriptors

from .conftest import workspace_objects, write_descriptor


def run_and_nodes(n_pods: int) -> tuple[list[dict], list[str]]:
    items = synthetic_snapshot(n_pods, "Job", failing_pod_index=None)["items"]  # bench/synth.py shapes
    names = sorted({p["spec"]["nodeName"] for p in items if p.get("kind") == "Pod" and p["spec"].get("nodeName")})
    return items, names


async def test_256_pods_on_32_nodes_cost_one_list_as_the_user(tmp_path: Path) -> None:
    items, names = run_and_nodes(256)
    assert len(names) == 32
    nodes = [node(**{"metadata.name": n}) for n in names]
    # This node's kubernetes.io/hostname label is not its name (UNREACHABLE keeps the fixture's):
    # the LIST cannot find it, so it gets a GET of its own.
    nodes[5] = {**UNREACHABLE, "metadata": {**UNREACHABLE["metadata"], "name": names[5]}}
    result, requests = await run_live([*workspace_objects(), *items, *nodes], tmp_path, RUN_NAME)
    [listed] = [r for r in requests if r.path == "/api/v1/nodes"]
    assert listed.query["labelSelector"] == f"kubernetes.io/hostname in ({','.join(names)})"
    gets = [r for r in requests if r.path.startswith("/api/v1/nodes/")]
    assert [r.path.rsplit("/", 1)[1] for r in gets] == [names[5]]
    assert all(r.header_values("Impersonate-User") == ["alice@example.com"] for r in [listed, *gets])
    check = result.diagnosis.phase("GPU/node health")
    assert check.state.value == "warning" and names[5] in check.summary
    assert result.diagnosis.first_incomplete == "GPU/node health"


async def test_forbidden_nodes_are_unavailable_and_cost_one_request(tmp_path: Path) -> None:
    items, names = run_and_nodes(64)
    objs = [*workspace_objects(), *items, *[node(**{"metadata.name": n}) for n in names]]
    async with KubeEmulator(objs) as emu:
        emu.forbid("list", "nodes", user="alice@example.com", cluster_scope=True)
        write_descriptor(tmp_path, emu.base_url)
        result = await diagnose_live(load_descriptors(tmp_path), run=RUN_NAME, identity=ALICE, now=NOW,
                                     workspace="vision")
        reads = [r for r in emu.requests if r.path.startswith("/api/v1/nodes")]
    assert len(reads) == 1
    check = result.diagnosis.phase("GPU/node health")
    assert check.state.value == "skipped"
    assert check.summary == f"unavailable: permission denied (list nodes) ({len(names)}/{len(names)} nodes)"
    assert result.diagnosis.first_incomplete != "GPU/node health"  # the tree's answer stands
