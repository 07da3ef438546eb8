"""Layers 1–2 (`taubot workspace connection|status|check`) against the emulator.

TauWorkspace/PVC shapes: tests/fixtures/k8s.py `tau_workspace` (SPEC §8) and `pvc`.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.fakes.kube_api import KubeEmulator, running_emulator
from tests.fixtures import k8s
from workers.collect.workspace import check_connection, workspace_status
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity

from .conftest import workspace_objects, write_descriptor

ALICE = Identity(user="alice@example.com", groups=("team-vision", "gpu-users"))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers.cli", *args], capture_output=True, text=True,
                          timeout=60)


async def test_connection_all_checks_pass_and_impersonate(tmp_path: Path) -> None:
    async with KubeEmulator(workspace_objects()) as emu:
        write_descriptor(tmp_path, emu.base_url)
        report = await check_connection(load_descriptors(tmp_path), workspace="vision", identity=ALICE)
        assert report.ok, report
        names = [c.name for c in report.checks]
        assert "may list workloads" in names and "may get pods/log" in names
        reviews = [r for r in emu.requests if r.path.endswith("selfsubjectaccessreviews")]
        assert len(reviews) == 7
        assert all(r.header_values("Impersonate-Group") == list(ALICE.groups) for r in emu.requests)


async def test_connection_forbidden_is_platform_not_descriptor(tmp_path: Path) -> None:
    async with KubeEmulator(workspace_objects()) as emu:
        emu.forbid("list", "rayjobs", user=ALICE.user)
        write_descriptor(tmp_path, emu.base_url)
        report = await check_connection(load_descriptors(tmp_path), workspace="vision", identity=ALICE)
    assert not report.ok and report.owner == "platform"
    failed = [c for c in report.checks if c.state == "failed"]
    assert [c.name for c in failed] == ["may list rayjobs"]
    assert failed[0].detail == "permission denied"


async def test_connection_missing_localqueue(tmp_path: Path) -> None:
    async with KubeEmulator([k8s.tau_workspace("vision"), k8s.pvc()]) as emu:
        write_descriptor(tmp_path, emu.base_url)
        report = await check_connection(load_descriptors(tmp_path), workspace="vision", identity=ALICE)
    assert not report.ok and "LocalQueue team-a: missing" in report.summary


async def test_unreachable_vs_descriptor_problem(tmp_path: Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    write_descriptor(tmp_path, f"http://127.0.0.1:{port}")
    registry = load_descriptors(tmp_path)
    live = await check_connection(registry, workspace="vision", identity=ALICE, timeout=2)
    assert (live.ok, live.owner, live.transient) == (False, "platform", True)
    assert "unavailable" in live.summary
    offline = await check_connection(registry, workspace="vision", offline=True)
    assert offline.ok and "offline" in offline.summary
    missing = await check_connection(registry, workspace="speech", offline=True)
    assert (missing.ok, missing.owner) == (False, "researcher")
    assert "speech" in missing.summary


async def test_status_ready_requires_bound_pvc(tmp_path: Path) -> None:
    objs = [k8s.tau_workspace("vision"), k8s.local_queue("team-a"), k8s.pvc(phase="Pending")]
    async with KubeEmulator(objs) as emu:
        write_descriptor(tmp_path, emu.base_url)
        report = await workspace_status(load_descriptors(tmp_path), "vision", identity=ALICE)
    assert report.phase == "Ready" and not report.ok and report.owner == "platform"
    assert "PVC blob-training Pending" in report.summary


async def test_workload_identity_is_shown_not_gating(tmp_path: Path) -> None:
    objs = [k8s.tau_workspace("vision", workload_identity_ready=False), k8s.pvc()]
    async with KubeEmulator(objs) as emu:
        write_descriptor(tmp_path, emu.base_url)
        report = await workspace_status(load_descriptors(tmp_path), "vision", identity=ALICE)
    assert report.ok
    wi = next(c for c in report.checks if c.name == "WorkloadIdentityReady")
    assert wi.state == "warning"


def test_cli_check_exit_codes(tmp_path: Path) -> None:
    ident = ["--as", ALICE.user, "--as-group", "team-vision"]
    with running_emulator(workspace_objects()) as emu:
        write_descriptor(tmp_path, emu.base_url)
        ok = cli("workspace", "check", "vision", "--workspaces-dir", str(tmp_path), *ident)
        assert ok.returncode == 0, ok.stderr
        assert "✔ layer 2" in ok.stdout
    with running_emulator(workspace_objects("Degraded")) as emu:
        write_descriptor(tmp_path, emu.base_url)
        bad = cli("workspace", "check", "vision", "--workspaces-dir", str(tmp_path), *ident)
        assert bad.returncode == 1
        assert "QueueReady" in bad.stdout and "owner: platform" in bad.stdout
        status = cli("workspace", "status", "vision", "--workspaces-dir", str(tmp_path), *ident)
        assert status.returncode == 0 and "Degraded" in status.stdout
    conn = cli("workspace", "connection", "--offline", "--workspaces-dir", str(tmp_path))
    assert conn.returncode == 0 and "descriptor" in conn.stdout
    none = cli("workspace", "connection", "--offline", "--workspace", "nlp",
               "--workspaces-dir", str(tmp_path))
    assert none.returncode == 1 and "owner: researcher" in none.stdout
    noid = cli("workspace", "status", "vision", "--workspaces-dir", str(tmp_path))
    assert noid.returncode == 2 and "--as" in noid.stderr
