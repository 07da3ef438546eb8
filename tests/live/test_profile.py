"""`--run-profile` over real HTTP: the request budget, the RBAC answers, and the CLI output.

The emulator serves the exporter pods and their `pods/{name}:{port}/proxy/metrics` bodies;
scrapes follow shared/reference/dcgm-exporter.md (tests/fixtures/dcgm.py). Request counts are
read from what the emulator received: ≤ 2 discovery LISTs + 1 metrics request per distinct node.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.kube_api import KubeEmulator, RecordedRequest, running_emulator
from tests.fixtures import k8s
from tests.fixtures.dcgm import Gpu, exporter_pod, scrape, taugrid_monitor_pod
from workers.cli import main
from workers.collect.investigate import diagnose_live
from workers.collect.report import RunReport
from workers.config.workspaces import load_descriptors
from workers.diagnosis.profile import FINISHED_REASON, Allocation, Devices, Stat, Unavailable
from workers.kube.client import Identity
from workers.render.profile import profile_lines

from .conftest import workspace_objects, write_descriptor

NOW = k8s.T0 + timedelta(minutes=30)
ALICE = Identity(user="alice@example.com", groups=("team-vision", "gpu-users"))
NODE_A, NODE_B, NODE_C = (f"aks-gpupool-00000000-vmss00000{i}" for i in range(3))
CPU_NODE = "aks-system-00000000-vmss000000"
DCGM_SELECTOR = "app.kubernetes.io/name=dcgm-exporter"
TAUGRID_SELECTOR = "taugrid.io/gpu-monitoring=true"


def discovery(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    return [r for r in requests if r.path == "/api/v1/pods"]


def metrics(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    return [r for r in requests if r.path.endswith("/proxy/metrics")]


def register(emu: KubeEmulator, exporter: dict, body: str, port: int = 9400) -> None:
    m = exporter["metadata"]
    emu.register_proxy("pods", m["namespace"], m["name"], port, "metrics", body,
                       content_type="text/plain; version=0.0.4")


async def live(objects: list[dict], tmp_path: Path, run: str, *, setup: Any = None, profile: bool = True,
               ) -> tuple[RunReport, list[RecordedRequest]]:
    async with KubeEmulator(objects) as emu:
        if setup:
            setup(emu)
        write_descriptor(tmp_path, emu.base_url)
        result = await diagnose_live(load_descriptors(tmp_path), run=run, identity=ALICE, now=NOW,
                                     workspace="vision", profile=profile)
        return result, list(emu.requests)


def mine(pod: dict, index: int, util: float | None, fb_used: float | None, node: str, **kw: Any) -> Gpu:
    container = pod["spec"]["containers"][0]["name"]
    return Gpu(index, pod=pod["metadata"]["name"], namespace=pod["metadata"]["namespace"],
               container=container, util=util, fb_used=fb_used, node=node, **kw)


def other_team(index: int, node: str) -> Gpu:
    """A busy GPU of another team's pod on the same node: must never count for the run."""
    return Gpu(index, pod="speech-train-0", namespace="team-speech", container="main", util=100,
               fb_used=80000, node=node)


def job_run(node: str = NODE_A) -> tuple[dict, dict, list[dict]]:
    j = k8s.job("train", active=1)
    p = k8s.job_pod(j, node=node)
    return j, p, workspace_objects() + [j, k8s.workload(j, state="admitted"), p]


async def test_one_discovery_and_one_metrics_request_when_the_exporter_is_found(tmp_path: Path) -> None:
    _, pod, objs = job_run()
    exp_a, exp_b = exporter_pod(NODE_A), exporter_pod(NODE_B)
    body = scrape([mine(pod, 0, 87, 61440, NODE_A), mine(pod, 1, 93, 63488, NODE_A),
                   other_team(2, NODE_A), Gpu(3, node=NODE_A)], hostname=NODE_A)
    objs += [exp_a, exp_b]
    result, requests = await live(objs, tmp_path, "train", setup=lambda emu: register(emu, exp_a, body))
    base, base_requests = await live(objs, tmp_path, "train", profile=False)

    [disc] = discovery(requests)
    assert disc.query["labelSelector"] == DCGM_SELECTOR
    # Sent with round 2, before the run's pods name a node: the cluster's labelled exporters, one page
    assert "fieldSelector" not in disc.query and disc.query["limit"] == "5000"
    [scraped] = metrics(requests)
    name = exp_a["metadata"]["name"]
    assert scraped.path == f"/api/v1/namespaces/gpu-operator/pods/{name}:9400/proxy/metrics"
    for req in (disc, scraped):
        assert req.header_values("Impersonate-User") == [ALICE.user]
        assert req.header_values("Impersonate-Group") == list(ALICE.groups)
    profile = result.profile
    assert profile is not None and profile.requests == 2
    assert result.requests == len(requests) == len(base_requests) + 2
    assert base.profile is None and not discovery(base_requests) and not metrics(base_requests)
    assert result.diagnosis.contract() == base.diagnosis.contract()
    assert profile.gpu_utilization == Stat(avg=90, max=93, unit="%", gpus=2, of_gpus=2)
    assert isinstance(profile.gpu_memory, Stat) and profile.gpu_memory.max == 62
    rows = dict(profile_lines(profile))
    assert rows["gpu_activity"] == "active"
    assert rows["gpu_memory"] == "avg 61 GiB, max 62 GiB (2 GPUs)"
    assert isinstance(profile.gpu_devices, Devices)
    assert {d.pod for d in profile.gpu_devices.devices} == {pod["metadata"]["name"]}


async def test_multi_node_run_reads_each_node_once(tmp_path: Path) -> None:
    rj = k8s.rayjob("train")
    rc = k8s.raycluster(rayjob=rj, state="ready")
    head = k8s.ray_pod(rc, "head", node=CPU_NODE)  # no GPU: its node is not read
    w0 = k8s.ray_pod(rc, "worker", index=0, node=NODE_A)
    w1 = k8s.ray_pod(rc, "worker", index=1, node=NODE_A)
    w2 = k8s.ray_pod(rc, "worker", index=2, node=NODE_B)
    sub = k8s.submitter_job(rj)
    exporters = [exporter_pod(n) for n in (NODE_A, NODE_B, NODE_C, CPU_NODE)]
    exporters[1]["spec"]["containers"][0]["ports"] = [{"containerPort": 9401, "name": "metrics"}]
    objs = workspace_objects() + [rj, rc, k8s.workload(rj, state="admitted"), head, w0, w1, w2, sub,
                                  k8s.submitter_pod(sub, node=CPU_NODE), *exporters]
    # Node A: a released image (`Hostname`); node B: main (`hostname`), read via Prometheus-style
    # relabelled series (`exported_pod`), as a TauGrid proxy in front of a scrape may serve them.
    body_a = scrape([mine(w0, 0, 40, 10240, NODE_A), mine(w1, 1, 60, 20480, NODE_A), other_team(2, NODE_A)],
                    hostname=NODE_A)
    body_b = scrape([mine(w2, 0, 0, 30720, NODE_B)], hostname=NODE_B, host_label="hostname",
                    style="prometheus")

    def setup(emu: KubeEmulator) -> None:
        register(emu, exporters[0], body_a)
        register(emu, exporters[1], body_b, port=9401)

    result, requests = await live(objs, tmp_path, "train", setup=setup)
    [disc] = discovery(requests)
    assert "fieldSelector" not in disc.query  # several nodes: one LIST, filtered client-side
    scraped = sorted(r.path for r in metrics(requests))
    assert scraped == sorted([
        f"/api/v1/namespaces/gpu-operator/pods/{exporters[0]['metadata']['name']}:9400/proxy/metrics",
        f"/api/v1/namespaces/gpu-operator/pods/{exporters[1]['metadata']['name']}:9401/proxy/metrics",
    ])
    profile = result.profile
    assert profile is not None and profile.requests == 1 + 2 and profile.nodes == [NODE_A, NODE_B]
    assert profile.gpu_utilization == Stat(avg=round(100 / 3, 2), max=60, unit="%", gpus=3, of_gpus=3)
    assert isinstance(profile.gpu_devices, Devices)
    assert {(d.pod, d.node) for d in profile.gpu_devices.devices} == {
        (w0["metadata"]["name"], NODE_A), (w1["metadata"]["name"], NODE_A), (w2["metadata"]["name"], NODE_B)}
    assert dict(profile_lines(profile))["gpu_activity"] == "active"


async def test_falls_back_to_the_taugrid_label_when_no_official_exporter_is_on_the_run_nodes(
        tmp_path: Path) -> None:
    _, pod, objs = job_run()
    elsewhere = exporter_pod(NODE_C)  # an official exporter, but not on the run's node
    monitor = taugrid_monitor_pod(NODE_A)
    objs += [elsewhere, monitor]
    body = scrape([mine(pod, 0, 0, 0, NODE_A)], hostname=NODE_A)
    result, requests = await live(objs, tmp_path, "train", setup=lambda emu: register(emu, monitor, body))
    assert [r.query["labelSelector"] for r in discovery(requests)] == [DCGM_SELECTOR, TAUGRID_SELECTOR]
    [scraped] = metrics(requests)
    name = monitor["metadata"]["name"]
    assert scraped.path == f"/api/v1/namespaces/taugrid-system/pods/{name}:9400/proxy/metrics"
    assert result.profile is not None and result.profile.requests == 3
    assert dict(profile_lines(result.profile))["gpu_activity"] == "idle"


async def test_no_exporter_anywhere_is_unavailable_after_two_lists(tmp_path: Path) -> None:
    _, _, objs = job_run()
    result, requests = await live(objs, tmp_path, "train")
    assert len(discovery(requests)) == 2 and not metrics(requests)
    profile = result.profile
    assert profile is not None and isinstance(profile.gpu_utilization, Unavailable)
    assert profile.gpu_utilization.reason.startswith("no dcgm-exporter pod runs on the run's nodes")
    assert TAUGRID_SELECTOR in profile.gpu_utilization.reason


async def test_a_real_zero_is_zero_and_missing_samples_are_unavailable(tmp_path: Path) -> None:
    _, pod, objs = job_run()
    exp = exporter_pod(NODE_A)
    objs.append(exp)
    idle = scrape([mine(pod, 0, 0, 0, NODE_A), other_team(1, NODE_A)], hostname=NODE_A)
    result, _ = await live(objs, tmp_path, "train", setup=lambda emu: register(emu, exp, idle))
    assert result.profile is not None
    rows = dict(profile_lines(result.profile))
    assert rows["gpu_utilization"] == "avg 0 %, max 0 % (1 GPU)"
    assert rows["gpu_activity"] == "idle"

    # Same node, only another team's samples (and an unattributed GPU): no evidence, no zero.
    foreign = scrape([other_team(1, NODE_A), Gpu(2, node=NODE_A)], hostname=NODE_A)
    result, _ = await live(objs, tmp_path, "train", setup=lambda emu: register(emu, exp, foreign))
    assert result.profile is not None
    rows = dict(profile_lines(result.profile))
    assert rows["gpu_utilization"].startswith("unavailable")
    assert rows["gpu_devices"].startswith("unavailable — no dcgm-exporter samples match the run's pods")
    assert "0 %" not in rows["gpu_utilization"] and "100" not in rows["gpu_utilization"]


def dra_job(node: str = NODE_A, *, complete: bool = False) -> tuple[dict, dict, dict, list[dict]]:
    j = k8s.job("train", active=0 if complete else 1, succeeded=1 if complete else 0,
                conditions=k8s.job_complete() if complete else None)
    j["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
    claim = k8s.resource_claim("train-pod-gpu-x7k2p", pool=node, device="gpu-3", pod="train-pod")
    containers = [k8s.terminated("trainer")] if complete else None
    p = k8s.job_pod(j, name="train-pod", node=node, resource_claims=[claim], containers=containers)
    claim["status"]["reservedFor"][0]["uid"] = p["metadata"]["uid"]
    objs = workspace_objects() + [j, k8s.workload(j, state="finished" if complete else "admitted"), p, claim]
    return j, p, claim, objs


async def test_dra_run_shows_its_allocation_identity(tmp_path: Path) -> None:
    _, pod, claim, objs = dra_job()
    exp = exporter_pod(NODE_A)
    objs.append(exp)
    gpu = mine(pod, 3, 71, 40960, NODE_A, extra={
        "dra_claim_name": claim["metadata"]["name"], "dra_claim_namespace": k8s.NS,
        "dra_driver_name": "gpu.nvidia.com", "dra_pool_name": NODE_A, "dra_device_name": "gpu-3"})
    body = scrape([gpu, other_team(0, NODE_A)], hostname=NODE_A)
    result, requests = await live(objs, tmp_path, "train", setup=lambda emu: register(emu, exp, body))
    profile = result.profile
    assert profile is not None and isinstance(profile.gpu_allocation, Allocation)
    [alloc] = profile.gpu_allocation.devices
    assert (alloc.driver, alloc.pool, alloc.device, alloc.claim) == (
        "gpu.nvidia.com", NODE_A, "gpu-3", claim["metadata"]["name"])
    assert isinstance(profile.gpu_devices, Devices)
    assert [d.dra_claim for d in profile.gpu_devices.devices] == [claim["metadata"]["name"]]
    allocation_row = dict(profile_lines(profile))["gpu_allocation"]
    assert allocation_row.startswith(f"gpu.nvidia.com pool {NODE_A} device gpu-3")
    assert len(discovery(requests)) == 1 and len(metrics(requests)) == 1


async def test_forbidden_pods_proxy_is_unavailable_and_the_status_still_works(tmp_path: Path) -> None:
    _, pod, objs = job_run()
    exp = exporter_pod(NODE_A)
    objs.append(exp)
    body = scrape([mine(pod, 0, 50, 1024, NODE_A)], hostname=NODE_A)

    def setup(emu: KubeEmulator) -> None:
        register(emu, exp, body)
        emu.forbid("get", "pods", user=ALICE.user, subresource="proxy")

    result, requests = await live(objs, tmp_path, "train", setup=setup)
    base, _ = await live(objs, tmp_path, "train", profile=False)
    assert result.diagnosis.contract() == base.diagnosis.contract()
    assert len(discovery(requests)) == 1 and len(metrics(requests)) == 1
    profile = result.profile
    assert profile is not None and isinstance(profile.gpu_utilization, Unavailable)
    assert profile.gpu_utilization.reason == (
        "metrics request failed: permission denied (get pods/proxy) — reading exporter metrics needs "
        f"the pods/proxy subresource (node {NODE_A})")
    assert "0 %" not in " ".join(v for _, v in profile_lines(profile))


async def test_forbidden_cluster_wide_pod_list_is_unavailable_and_the_status_still_works(
        tmp_path: Path) -> None:
    _, _, claim, objs = dra_job()
    objs.append(exporter_pod(NODE_A))
    # The usual team RBAC: pods readable in the namespace, not cluster-wide.
    def team_rbac(emu: KubeEmulator) -> None:
        emu.forbid("list", "pods", cluster_scope=True)

    result, requests = await live(objs, tmp_path, "train", setup=team_rbac)
    base, _ = await live(objs, tmp_path, "train", profile=False, setup=team_rbac)
    assert result.diagnosis.contract() == base.diagnosis.contract()
    assert result.diagnosis.phase("Pod scheduling").state.value == "done"  # namespaced pods: readable
    assert len(discovery(requests)) == 1 and not metrics(requests)  # the second LIST would fail too
    profile = result.profile
    assert profile is not None and isinstance(profile.gpu_devices, Unavailable)
    assert profile.gpu_devices.reason == (
        f"cannot list exporter pods ({DCGM_SELECTOR}): permission denied (list pods) — listing exporter "
        "pods needs cluster-wide pod read access")
    assert isinstance(profile.gpu_allocation, Allocation)  # from the namespaced claims: still known


async def test_completed_run_keeps_allocation_identity_without_telemetry_requests(tmp_path: Path) -> None:
    _, _, claim, objs = dra_job(complete=True)
    objs.append(exporter_pod(NODE_A))
    result, requests = await live(objs, tmp_path, "train")
    profile = result.profile
    assert profile is not None and profile.finished and profile.requests == 0
    assert not discovery(requests) and not metrics(requests)
    assert isinstance(profile.gpu_allocation, Allocation)
    assert profile.gpu_allocation.devices[0].device == "gpu-3"
    for key in ("gpu_devices", "gpu_utilization", "gpu_memory", "gpu_activity"):
        field = getattr(profile, key)
        assert isinstance(field, Unavailable) and field.reason == FINISHED_REASON


# --------------------------------------------------------------------------- CLI


def _cli(tmp_path: Path, emu: KubeEmulator, *extra: str) -> list[str]:
    write_descriptor(tmp_path, emu.base_url)
    return ["diagnose", "train", "--workspace", "vision", "--workspaces-dir", str(tmp_path),
            "--as", ALICE.user, "--as-group", "team-vision", "--now", NOW.isoformat(), *extra]


def test_cli_json_adds_profile_only_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, pod, objs = job_run()
    exp = exporter_pod(NODE_A)
    with running_emulator(objs + [exp]) as emu:
        register(emu, exp, scrape([mine(pod, 0, 0, 2048, NODE_A)], hostname=NODE_A))
        assert main(_cli(tmp_path, emu, "--format", "json")) == 0
        plain = json.loads(capsys.readouterr().out)
        assert main(_cli(tmp_path, emu, "--format", "json", "--run-profile")) == 0
        with_profile = json.loads(capsys.readouterr().out)
    assert "profile" not in plain
    assert set(with_profile) == set(plain) | {"profile"}
    assert {k: v for k, v in with_profile.items() if k != "profile"} == plain
    prof = with_profile["profile"]
    assert prof["gpu_activity"] == {"status": "observed", "state": "idle now"}
    assert prof["gpu_utilization"]["avg"] == 0 and prof["gpu_utilization"]["status"] == "observed"
    assert prof["cuda_compute_process"]["status"] == "unavailable"


def test_cli_text_prints_the_profile_after_the_phase_tree(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    _, pod, objs = job_run()
    exp = exporter_pod(NODE_A)
    with running_emulator(objs + [exp]) as emu:
        register(emu, exp, scrape([mine(pod, 0, 64, 2048, NODE_A)], hostname=NODE_A))
        assert main(_cli(tmp_path, emu, "--run-profile")) == 0
    out = capsys.readouterr().out
    tree_end = out.index("next action:")
    start = out.index("GPU run profile — 1 node, 2 Kubernetes API requests")
    assert tree_end < start
    assert "  gpu_utilization       avg 64 %, max 64 % (1 GPU)" in out[start:]
    assert "cuda_compute_process  unavailable — dcgm-exporter's supported scalar metrics" in out[start:]


@pytest.mark.parametrize("source", [["--from-file", "dump.json"], ["--example"]])
def test_cli_run_profile_needs_a_live_cluster(source: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "train", *source, "--run-profile"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "taubot: error: --run-profile needs a live cluster (--workspace)"


async def test_exporter_not_running_is_the_reason_after_both_lists(tmp_path: Path) -> None:
    _, _, objs = job_run()
    pending = exporter_pod(NODE_A, phase="Pending")
    result, requests = await live(objs + [pending], tmp_path, "train")
    assert len(discovery(requests)) == 2 and not metrics(requests)  # a pod that is not running: no read
    assert result.profile is not None and isinstance(result.profile.gpu_devices, Unavailable)
    assert result.profile.gpu_devices.reason == (
        f"exporter pod gpu-operator/{pending['metadata']['name']} is not running (phase Pending) "
        f"(node {NODE_A})")


async def test_workspace_not_ready_profiles_nothing(tmp_path: Path) -> None:
    j = k8s.job("train")
    objs = workspace_objects("Degraded") + [j, k8s.job_pod(j, node=NODE_A), exporter_pod(NODE_A)]
    result, requests = await live(objs, tmp_path, "train")
    assert not discovery(requests) and not metrics(requests)
    assert result.profile is not None and isinstance(result.profile.gpu_utilization, Unavailable)
    assert result.profile.gpu_utilization.reason.startswith("layer 2 failed:")


async def test_a_spoofed_exporter_in_a_team_namespace_is_not_trusted(tmp_path: Path) -> None:
    """A pod anyone can create, labelled like dcgm-exporter, reporting the run's GPUs as idle."""
    _, pod, objs = job_run()
    spoof = exporter_pod(NODE_A, ns=k8s.NS, name="dcgm-exporter-fake")
    spoof["metadata"].pop("ownerReferences")  # a bare pod, no DaemonSet behind it
    body = scrape([mine(pod, 0, 0, 0, NODE_A)], hostname=NODE_A)
    objs += [spoof]
    result, requests = await live(objs, tmp_path, "train", setup=lambda emu: register(emu, spoof, body))
    assert metrics(requests) == []  # never scraped
    assert result.profile is not None and result.profile.gpu_utilization.status == "unavailable"
