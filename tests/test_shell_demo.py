"""The demo shell, in process, on what its cards advise (issue 38): each answer read as printed.

One demo session (`workers.cli.shell.demo_session`, the path `taubot shell --demo` runs) serves
the module's tests: a line is typed with `Demo.answer`, and what the shell printed for it comes
back. The demo cluster is the bundled one (`shell/demo_cluster.py`), served over real HTTP by the
Kubernetes API emulator in process.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from shell.demo_cluster import MISSING_RUN
from tests.fixtures.demo_shell import DemoShell as Demo  # the name these tests read best with
from tests.fixtures.demo_shell import demo_shell


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    with demo_shell() as shell:
        yield shell


def test_a_run_that_does_not_exist_gets_no_word_about_its_annotations(demo: Demo) -> None:
    """Issue 38.6: there is no run, so there is no submitter to miss: the card says the run was not
    found and what to check, and nothing about a `taugrid.io/submitted-by` annotation."""
    card = demo.answer(f"/tau status {MISSING_RUN.name}")
    assert f"run {MISSING_RUN.name} not found in namespace team-vision" in card
    assert "submitted-by" not in card and "cannot tell who submitted" not in card


def test_help_shows_a_real_code_block_that_pastes_back_as_a_command(demo: Demo) -> None:
    """Issue 38.8: `/tau help` showed look-alike backticks (U+02CB) inside a code span, so its
    example could not be pasted. The list has no fence at all now; `/tau help validate` shows its
    example's manifest in a real ``` block, and typing the example as shown validates it."""
    listing = demo.answer("/tau help")
    assert "\u02cb" not in listing and "`/tau validate [--workspace W] <manifest in a code block>" in listing
    explained = demo.answer("/tau help validate")
    assert "\u02cb" not in explained
    [command] = re.findall(r"^Example: `(/tau validate[^`]*)`$", explained, re.M)
    [block] = re.findall(r"^```\n.*?^```$", explained, re.S | re.M)
    assert "kind: Job" in block
    answer = demo.answer(f"{command}\n{block}")
    assert "Manifest validation · Job team-vision/llama-ft-7b" in answer
    assert "no manifest" not in answer and "Usage" not in answer


def test_validating_the_xid_runs_nodes_tells_the_faulty_node_from_the_healthy_one(demo: Demo) -> None:
    """Issue 38.1: *Validate these 2 nodes* on the Xid 79 card ran its pods into a cluster where no
    kubelet ran them and answered "did not finish in time" for both after 2 minutes. The demo's
    kubelet (shell/demo_kubelet.py) now admits and runs each pod on its node, as the caller
    created it: on the node whose GPU fell off the bus `nvidia-smi -L` exits 15 with NVML's "GPU is
    lost" line; the other node passes. Two creates as the caller, one LIST and at most one WATCH of
    the pods, no wait for a timeout, and no pod left behind."""
    emulator = demo.shell.demo.emulator
    card = demo.answer("/tau status llama-ft-xid")
    [button] = set(re.findall(r"\[(\d+)\] 🩺 Validate these 2 nodes", card))  # the card, and its edit
    emulator.clear_requests()
    answer = demo.answer(button)
    assert "Cluster validation · vision · layer 6 ❌ failed" in answer
    assert "1/2 nodes healthy (need 2); aks-a100-38141759-vmss000008: XIDErrors=True" in answer
    assert re.search(r"❌ aks-a100-38141759-vmss000008 — failed \(exit 15\): Unable to determine the device "
                     r"handle for GPU 0000:BD:00\.0: GPU is lost\.", answer), answer
    assert "✅ aks-a100-38141759-vmss000009 — healthy" in answer
    assert "not validated" not in answer and "did not finish" not in answer
    pods = [r for r in emulator.requests if r.path == "/api/v1/namespaces/taugrid-validation/pods"]
    creates = [r for r in pods if r.method == "POST" and "dryRun" not in r.query]
    assert len(creates) == 2
    assert all(r.header_values("Impersonate-User") == ["alice@example.com"] for r in creates)
    assert all("nvidia.com/gpu" not in str(r.body) for r in creates)  # the run holds the GPUs
    lists = [r for r in pods if r.method == "GET" and r.query.get("watch") != "true"]
    watches = [r for r in pods if r.query.get("watch") == "true"]
    assert len(lists) == 1 and len(watches) <= 1
    assert len([r for r in emulator.requests if r.method == "DELETE"]) == 2
    assert not [o for o in emulator.objects() if o["kind"] == "Pod"
                and o["metadata"]["namespace"] == "taugrid-validation"]


def test_the_demo_kubelet_refuses_a_pod_asking_for_gpus_the_run_holds(demo: Demo) -> None:
    """Why the validation pod asks for no GPU: the kubelet admits a pod pinned to its node against
    what is free (kubelet.go `rejectPod`, predicate.go `InsufficientResourceError`), and the demo's
    kubelet does the same: on a node whose 8 GPUs the llama-ft-xid run holds, a pod asking for 8 is
    Failed with `OutOfnvidia.com/gpu` and nothing runs."""
    import threading

    from shell.demo_cluster import FAULTY_NODE

    emulator = demo.shell.demo.emulator
    settled = threading.Event()
    emulator.on_change.append(lambda kind, obj: settled.set() if obj["metadata"].get("name") == "gpu-hungry"
                              and (obj.get("status") or {}).get("phase") else None)
    emulator.upsert({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "gpu-hungry", "namespace": "taugrid-validation"},
                     "spec": {"nodeName": FAULTY_NODE, "restartPolicy": "Never", "containers": [
                         {"name": "validate", "image": "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
                          "command": ["sh", "-c", "nvidia-smi -L"], "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}})
    assert settled.wait(20)
    [pod] = [o for o in emulator.objects() if o["metadata"]["name"] == "gpu-hungry"]
    emulator.delete("Pod", "taugrid-validation", "gpu-hungry")
    assert pod["status"] == {"phase": "Failed", "reason": "OutOfnvidia.com/gpu", "qosClass": "BestEffort",
                             "message": "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, "
                                        "requested: 8, used: 8, capacity: 8"}


def test_topology_validation_finds_the_demo_profile_and_its_nodes(demo: Demo) -> None:
    """Issue 38.2: the demo had no TauCluster, so `/tau cluster validate topology` answered "no
    ready TauCluster profile". Its ready profile's flavor now matches the GPU pool (10 A100 nodes,
    tainted sku=gpu, which the flavor tolerates), read as the caller, read-only."""
    emulator = demo.shell.demo.emulator
    emulator.clear_requests()
    answer = demo.answer("/tau cluster validate topology")
    assert "Cluster validation · vision · layer 6 ✅ passed" in answer
    assert "✅ profile a100-8x flavor a100 — 10 matching Ready node(s)" in answer
    assert "no ready TauCluster profile" not in answer
    assert {r.method for r in emulator.requests} <= {"GET"}
    assert all(r.header_values("Impersonate-User") == ["alice@example.com"] for r in emulator.requests)
