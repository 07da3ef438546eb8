"""Live diagnosis against the Kubernetes API emulator over real HTTP, under impersonation.

Reads what the emulator received: paths, selectors, impersonation headers and the
number of requests, which must not grow with the number of pods.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from bench.synth import RUN_NAME, synthetic_snapshot
from tests.fakes.kube_api import KubeEmulator
from tests.fixtures import k8s
from workers.collect.investigate import diagnose_live
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity

from .conftest import workspace_objects, write_descriptor

NOW = k8s.T0 + timedelta(minutes=30)
ALICE = Identity(user="alice@example.com", groups=("team-vision", "gpu-users", "researchers"))


async def run_live(objects: list[dict], tmp_path: Path, run: str, *, identity: Identity = ALICE,
                   setup=None, workspace: str | None = "vision"):
    async with KubeEmulator(objects) as emu:
        if setup:
            setup(emu)
        write_descriptor(tmp_path, emu.base_url)
        result = await diagnose_live(load_descriptors(tmp_path), run=run, identity=identity, now=NOW,
                                     workspace=workspace)
        return result, list(emu.requests)


def crashloop_job(n_pods: int = 1) -> list[dict]:
    return k8s.kube_list(synthetic_snapshot(n_pods, "Job", failing_pod_index=0))["items"]


async def test_every_request_impersonates_user_and_all_groups(tmp_path: Path) -> None:
    objs = workspace_objects() + synthetic_snapshot(8, "RayJob", failing_pod_index=3)["items"]
    result, requests = await run_live(objs, tmp_path, RUN_NAME)
    assert result.diagnosis.first_incomplete == "RayCluster"
    assert requests, "the emulator saw no requests"
    for req in requests:
        assert req.headers.getall("Impersonate-User") == [ALICE.user], req.path
        assert req.headers.getall("Impersonate-Group") == list(ALICE.groups), req.path
        assert req.identity.user == ALICE.user


@pytest.mark.parametrize("kind", ["RayJob", "Job"])
async def test_request_count_does_not_grow_with_pods(tmp_path: Path, kind: str) -> None:
    """The request count is the same for 1, 100 and 1,000 pods, and at most 10: the run's nodes
    come in one LIST (tests/diagnosis/test_node_health.py node shapes), whatever their number."""
    from tests.diagnosis.test_node_health import node

    counts = {}
    for n in (1, 100, 1000):
        items = synthetic_snapshot(n, kind, failing_pod_index=0)["items"]
        hosts = sorted({p["spec"]["nodeName"] for p in items if p.get("kind") == "Pod" and p["spec"].get("nodeName")})
        objs = workspace_objects() + items + [node(**{"metadata.name": h}) for h in hosts]
        result, requests = await run_live(objs, tmp_path, RUN_NAME)
        assert result.diagnosis.first_incomplete in ("RayCluster", "Container start")
        assert result.requests == len(requests)
        [node_list] = [r for r in requests if r.path == "/api/v1/nodes"]
        assert node_list.query["labelSelector"].count(",") == min(len(hosts), 64) - 1
        assert not [r for r in requests if r.path.startswith("/api/v1/nodes/")]
        # Every read asks for gzip (aiohttp's default under kubernetes_asyncio); the pods of 100 or
        # more (over 128 KiB) come compressed, as kube-apiserver sends them, and read the same.
        assert all("gzip" in r.headers.get("Accept-Encoding", "") for r in requests)
        pod_lists = [r for r in requests if r.path.endswith("/pods")]
        assert any(r.gzipped for r in pod_lists) is (n >= 100), n
        counts[n] = len(requests)
    assert counts[1] == counts[100] == counts[1000], counts
    assert counts[1] <= 11, counts  # 10, +1 the LocalQueue read in round 1 with no ClusterQueue hint (issue 35)


async def test_crash_loop_is_proven_by_status_without_events(tmp_path: Path) -> None:
    objs = workspace_objects() + synthetic_snapshot(100, "Job", failing_pod_index=7)["items"]
    result, requests = await run_live(objs, tmp_path, RUN_NAME)
    pod_lists = [r for r in requests if r.path.endswith("/pods")]
    assert pod_lists and all(r.query.get("labelSelector") for r in pod_lists)
    assert not [r for r in requests if r.path.endswith("/events")]
    assert result.diagnosis.first_incomplete == "Container start"
    assert "OOMKilled" in result.diagnosis.phase("Container start").summary


async def test_events_fetched_only_for_the_pods_that_explain_readiness(tmp_path: Path) -> None:
    # 50 pods ready, 3 running but not ready; one of them has failing readiness probes.
    j = k8s.job("train", active=53)
    pods = [k8s.job_pod(j, i, node="aks-a100-1") for i in range(50)]
    unready = [k8s.job_pod(j, 50 + i, node="aks-a100-2",
                           containers=[k8s.running("trainer", ready=False)]) for i in range(3)]
    probe = k8s.ev_unhealthy(unready[0], "trainer")
    noise = [k8s.ev_unhealthy(p, "trainer") for p in pods[:5]]  # about ready pods: never fetched
    objs = workspace_objects() + [j, k8s.workload(j, state="admitted"), *pods, *unready, probe, *noise]
    result, requests = await run_live(objs, tmp_path, "train")
    event_lists = [r for r in requests if r.path.endswith("/events")]
    assert 1 <= len(event_lists) <= 2
    selected = {r.query.get("fieldSelector") for r in event_lists}
    assert all("involvedObject.name=" in s for s in selected)
    assert f"involvedObject.kind=Pod,involvedObject.name={unready[0]['metadata']['name']}" in selected
    ready_phase = result.diagnosis.phase("Ready")
    assert ready_phase.state.value == "warning" and "Readiness probe failed" in ready_phase.summary


async def test_dra_run_lists_claims_in_the_same_round(tmp_path: Path) -> None:
    j = k8s.job("train", active=1)
    claim = k8s.resource_claim("train-pod-gpu-x", allocated=False, at=10)
    p = k8s.job_pod(j, resource_claims=[claim],
                    conditions=k8s.cond_unschedulable(k8s.msg_unschedulable("dra")))
    j["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
    objs = workspace_objects() + [j, k8s.workload(j, state="admitted"), p, claim]
    result, requests = await run_live(objs, tmp_path, "train")
    assert [r for r in requests if r.path.endswith("/resourceclaims")]
    assert result.diagnosis.phase("DRA allocation").state.value == "warning"
    assert result.diagnosis.first_incomplete == "Pod scheduling"
    assert result.diagnosis.owner == "node-pool-owner"


async def test_forbidden_pods_read_permission_denied_never_not_found(tmp_path: Path) -> None:
    j = k8s.job("train")
    objs = workspace_objects() + [j, k8s.workload(j, state="admitted"), k8s.job_pod(j)]
    result, _ = await run_live(objs, tmp_path, "train",
                               setup=lambda emu: emu.forbid("list", "pods", user=ALICE.user))
    d = result.diagnosis
    scheduling = d.phase("Pod scheduling")
    assert scheduling.state.value == "warning"
    assert scheduling.summary == "permission denied (list pods)"
    assert "no pods" not in scheduling.summary and "not found" not in scheduling.summary
    assert d.first_incomplete == "Pod scheduling" and d.owner == "platform"


async def test_forbidden_for_one_group_member_only(tmp_path: Path) -> None:
    j = k8s.job("train")
    objs = workspace_objects() + [j, k8s.workload(j, state="admitted"), k8s.job_pod(j)]
    bob = Identity(user="bob@example.com", groups=("team-vision",))
    result, _ = await run_live(objs, tmp_path, "train", identity=bob,
                               setup=lambda emu: emu.forbid("list", "workloads", group="gpu-users"))
    assert result.diagnosis.phase("Kueue admission").state.value == "done"
    result, _ = await run_live(objs, tmp_path, "train",
                               setup=lambda emu: emu.forbid("list", "workloads", group="gpu-users"))
    assert result.diagnosis.phase("Kueue admission").summary == "permission denied (list workloads)"


async def test_server_error_reads_unavailable(tmp_path: Path) -> None:
    j = k8s.job("train")
    objs = workspace_objects() + [j, k8s.workload(j, state="admitted"), k8s.job_pod(j)]
    result, _ = await run_live(objs, tmp_path, "train", setup=lambda emu: emu.fail("workloads", 503))
    admission = result.diagnosis.phase("Kueue admission")
    assert admission.state.value == "warning" and admission.summary.startswith("unavailable")
    assert result.diagnosis.transient is True


async def test_run_not_found_when_rayjobs_forbidden_is_permission_denied(tmp_path: Path) -> None:
    result, _ = await run_live(workspace_objects(), tmp_path, "train",
                               setup=lambda emu: emu.forbid("get", "rayjobs", user=ALICE.user))
    submitted = result.diagnosis.phase("Submitted")
    assert submitted.summary == "permission denied (get rayjobs)"


async def test_degraded_workspace_is_layer_2_and_later_layers_unreachable(tmp_path: Path) -> None:
    j = k8s.job("train")
    objs = workspace_objects("Degraded") + [j, k8s.workload(j, state="pending")]
    result, requests = await run_live(objs, tmp_path, "train")
    d = result.diagnosis
    assert (d.layer, d.owner, d.first_incomplete) == (2, "platform", "Workspace readiness")
    assert all(p.summary.startswith("unreachable") for p in d.phases)
    assert all(p.state.value == "pending" for p in d.phases)
    assert "QueueReady" in " ".join(d.evidence)


async def test_missing_descriptor_is_layer_1_researcher(tmp_path: Path) -> None:
    result, requests = await run_live(workspace_objects(), tmp_path, "train", workspace="speech")
    d = result.diagnosis
    assert (d.layer, d.owner, d.first_incomplete) == (1, "researcher", "Workspace connection")
    assert requests == [] and "speech" in d.evidence[0]


async def test_unreachable_cluster_is_layer_1_platform(tmp_path: Path) -> None:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    write_descriptor(tmp_path, f"http://127.0.0.1:{port}")
    result = await diagnose_live(load_descriptors(tmp_path), run="train", identity=ALICE, now=NOW,
                                 workspace="vision", timeout=2)
    d = result.diagnosis
    assert (d.layer, d.owner) == (1, "platform") and d.transient is True
    assert "unavailable" in d.evidence[0]


def test_cli_live_diagnose_saves_a_snapshot_that_replays(tmp_path: Path) -> None:
    from tests.fakes.kube_api import running_emulator

    j = k8s.job("train")
    objs = workspace_objects() + [j, k8s.workload(j, state="exceeds_max")]
    with running_emulator(objs) as emu:
        write_descriptor(tmp_path, emu.base_url)
        saved = tmp_path / "snap.json"
        cmd = [sys.executable, "-m", "workers.cli", "diagnose", "train", "--workspace", "vision",
               "--workspaces-dir", str(tmp_path), "--as", "alice@example.com", "--as-group", "team-vision",
               "--as-group", "gpu-users", "--save-snapshot", str(saved), "--format", "json"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        live = json.loads(out.stdout)
        assert [r.header_values("Impersonate-Group") for r in emu.requests][0] == ["team-vision", "gpu-users"]
    assert live["first_incomplete"] == "Kueue admission" and live["owner"] == "queue-owner"
    replay = subprocess.run([sys.executable, "-m", "workers.cli", "diagnose", "train", "--from-file",
                             str(saved), "--format", "json"], capture_output=True, text=True, timeout=60)
    assert json.loads(replay.stdout)["first_incomplete"] == "Kueue admission"


async def test_a_misspelt_run_gets_did_you_mean_from_the_runs_the_user_may_list(tmp_path: Path) -> None:
    """Not found: one more round lists the namespace's RayJobs and Jobs as the user, and the answer
    names the close ones (k8s.job/k8s.rayjob: batch/v1 and KubeRay v1 shapes)."""
    objs = [*workspace_objects(), k8s.job("llama-ft-7b"), k8s.rayjob("ray-pretrain-13b")]
    result, requests = await run_live(objs, tmp_path, "llama-ft-7")
    submitted = result.diagnosis.phase("Submitted")
    assert submitted.reason == "run.not_found" and "did you mean llama-ft-7b?" in submitted.summary
    assert result.diagnosis.next_action.startswith("Did you mean llama-ft-7b?")
    lists = [r for r in requests if r.method == "GET" and r.path.endswith(("/rayjobs", "/jobs"))]
    assert len(lists) == 2 and all(r.headers.getall("Impersonate-User") == [ALICE.user] for r in lists)


async def test_no_suggestion_when_the_user_may_not_list_runs_and_none_for_a_far_name(tmp_path: Path) -> None:
    objs = [*workspace_objects(), k8s.job("llama-ft-7b")]
    denied, _ = await run_live(objs, tmp_path, "llama-ft-7",
                               setup=lambda emu: emu.forbid("list", "jobs", group="team-vision"))
    assert "did you mean" not in denied.diagnosis.phase("Submitted").summary
    far, _ = await run_live(objs, tmp_path, "resnet-50")
    assert far.diagnosis.phase("Submitted").summary.startswith("run resnet-50 not found: no RayJob or Job")
