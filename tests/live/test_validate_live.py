"""`/tau validate` live: layers 1, 2 and 4 and a `dryRun=All` create, as the user, against the emulator.

The emulator answers the dry run with the API server's own Status shapes:
RBAC's 403 (pkg/registry/.../rbac: `… is forbidden: User "…" cannot create
resource …`), a 422 Invalid with `details.causes` (apimachinery
`NewInvalid`), a validating webhook's denial as the API server relays it
(`admission webhook "vrayjob.kb.io" denied the request: …`, controller-runtime
`admission.Denied`, code 403) and a strict-decoding 400. The webhook rule
below is Kueue's own (pkg/controller/jobframework/validation.go
`validateCreateForMaxExecTime`).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.fakes.kube_api import (
    CallerIdentity,
    KubeEmulator,
    invalid_status,
    running_emulator,
    strict_decoding_error,
    webhook_denial,
)
from tests.fixtures import k8s
from tests.fixtures.manifests import dump, sample
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity
from workers.validation.live import validate_text
from workers.validation.report import ValidationReport

from .conftest import workspace_objects, write_descriptor

ALICE = Identity(user="alice@example.com", groups=("team-vision", "gpu-users"))
MAX_EXEC = "kueue.x-k8s.io/max-exec-time-seconds"


async def validate(tmp_path: Path, emu: KubeEmulator | None, doc: dict[str, Any] | str, *,
                   server: str | None = None) -> ValidationReport:
    write_descriptor(tmp_path, server or (emu.base_url if emu else ""))
    text = doc if isinstance(doc, str) else dump(doc)
    return await validate_text(load_descriptors(tmp_path), text, workspace="vision", identity=ALICE,
                               timeout=5)


def check(report: ValidationReport, name: str) -> Any:
    [found] = [c for c in report.checks if c.name == name]
    return found


def assert_only_dry_run_writes(emu: KubeEmulator) -> None:
    """Every request is the user's, and the only write is a dry run: nothing can be created."""
    assert emu.requests
    for r in emu.requests:
        assert r.header_values("Impersonate-User") == [ALICE.user]
        assert r.header_values("Impersonate-Group") == list(ALICE.groups)
        if r.method != "GET":
            assert r.method == "POST" and r.query.getall("dryRun") == ["All"], (r.method, r.path)
            assert r.query.get("fieldValidation") == "Strict"


async def test_an_accepted_rayjob_proves_layers_1_to_4_and_creates_nothing(tmp_path: Path) -> None:
    async with KubeEmulator(workspace_objects()) as emu:
        report = await validate(tmp_path, emu, sample("RayJob"))
        assert report.ok, report.summary
        assert report.dry_run == "accepted" and report.layer == 3
        assert "would accept it as you" in report.summary and "Nothing was created" in report.summary
        assert check(report, "LocalQueue team-a").state == "ok"
        assert check(report, "TauWorkspace vision").state == "ok"
        assert report.manifest == f"RayJob {k8s.NS}/rayjob-sample"
        assert len(emu.requests) == 4  # /version, TauWorkspace, LocalQueue, the dry run
        [post] = [r for r in emu.requests if r.method == "POST"]
        assert post.path == f"/apis/ray.io/v1/namespaces/{k8s.NS}/rayjobs"
        assert post.body["metadata"]["namespace"] == k8s.NS
        assert_only_dry_run_writes(emu)
        assert not [o for o in emu.objects() if o.get("kind") == "RayJob"]


async def test_rbac_refusal_is_layer_1_for_the_platform(tmp_path: Path) -> None:
    async with KubeEmulator(workspace_objects()) as emu:
        emu.forbid("create", "rayjobs", user=ALICE.user)
        report = await validate(tmp_path, emu, sample("RayJob"))
        assert_only_dry_run_writes(emu)
    assert not report.ok and report.layer == 1 and report.owner == "platform"
    assert report.dry_run == "rejected"
    assert "permission denied (create rayjobs)" in report.summary
    assert 'User "alice@example.com" cannot create resource "rayjobs"' in report.server_message
    assert "grants it through the workspace's RBAC" in report.next_action


async def test_a_schema_error_quotes_the_servers_causes_for_the_researcher(tmp_path: Path) -> None:
    def api_validation(obj: dict, caller: CallerIdentity) -> dict | None:
        if obj["spec"].get("completions", 0) < 0:  # pkg/apis/batch/validation: ValidateNonnegativeField
            return invalid_status("Job", "batch", obj["metadata"]["name"], [
                ("FieldValueInvalid", "spec.completions", "Invalid value: -1: must be greater than or equal to 0")])
        return None

    doc = sample("Job")
    doc["spec"]["completions"] = -1
    async with KubeEmulator(workspace_objects()) as emu:
        emu.admit("jobs", api_validation)
        report = await validate(tmp_path, emu, doc)
        assert_only_dry_run_writes(emu)
    assert not report.ok and report.layer == 3 and report.owner == "researcher"
    server = check(report, "dry run (API server)")
    assert server.detail == ("invalid: spec.completions: Invalid value: -1: must be greater than or equal "
                             "to 0")
    assert report.server_message.startswith('Job.batch "sample-job-')
    assert report.summary.startswith("dry run (API server): invalid")


async def test_a_kueue_webhook_denial_is_authoring_not_rbac(tmp_path: Path) -> None:
    def kueue_webhook(obj: dict, caller: CallerIdentity) -> dict | None:
        value = (obj["metadata"].get("labels") or {}).get(MAX_EXEC)
        if value is not None and int(value) <= 0:
            return webhook_denial("vrayjob.kb.io", f"metadata.labels[{MAX_EXEC}]: Invalid value: {value}: "
                                  "should be greater than 0")
        return None

    doc = sample("RayJob")
    doc["metadata"]["labels"][MAX_EXEC] = "0"
    async with KubeEmulator(workspace_objects()) as emu:
        emu.admit("rayjobs", kueue_webhook)
        report = await validate(tmp_path, emu, doc)
    assert not report.ok and report.layer == 3 and report.owner == "researcher"
    assert check(report, "dry run (API server)").detail.startswith("denied by admission: admission webhook "
                                                                    '"vrayjob.kb.io" denied the request')
    assert "should be greater than 0" in report.server_message
    assert "webhook refused the manifest" in report.next_action


async def test_strict_field_validation_refusal_and_an_accepted_field_taubot_does_not_know(tmp_path: Path) -> None:
    typo = sample("Job")
    typo["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    newer = sample("Job")
    newer["spec"]["template"]["spec"]["containers"][0]["fieldFromANewerKubernetes"] = True

    def strict(obj: dict, caller: CallerIdentity) -> dict | None:
        if "imagePullPolicyy" in obj["spec"]["template"]["spec"]["containers"][0]:
            return strict_decoding_error(["spec.template.spec.containers[0].imagePullPolicyy"])
        return None

    async with KubeEmulator(workspace_objects()) as emu:
        emu.admit("jobs", strict)
        refused = await validate(tmp_path, emu, typo)
        accepted = await validate(tmp_path, emu, newer)
    assert not refused.ok and refused.layer == 3
    assert 'strict decoding error: unknown field "spec.template.spec.containers[0].imagePullPolicyy"' \
        in check(refused, "dry run (API server)").detail
    assert accepted.ok and accepted.dry_run == "accepted"
    fields = check(accepted, "fields")
    assert fields.state == "warning" and "strict field validation accepted" in fields.detail


async def test_a_run_of_that_name_exists(tmp_path: Path) -> None:
    existing = sample("RayJob") | {"metadata": {"name": "rayjob-sample", "namespace": k8s.NS}}
    async with KubeEmulator([*workspace_objects(), existing]) as emu:
        report = await validate(tmp_path, emu, sample("RayJob"))
    assert not report.ok and report.layer == 3 and "already exists" in report.summary
    assert "choose another metadata.name" in report.next_action


async def test_workspace_not_ready_is_layer_2_and_a_stopped_queue_layer_4(tmp_path: Path) -> None:
    async with KubeEmulator([k8s.tau_workspace("vision", phase="Degraded"), k8s.local_queue("team-a"),
                             k8s.pvc()]) as emu:
        degraded = await validate(tmp_path, emu, sample("Job"))
    assert not degraded.ok and degraded.layer == 2 and degraded.owner == "platform"
    async with KubeEmulator([k8s.tau_workspace("vision"), k8s.local_queue("team-a", active=False,
                                                                           reason="Stopped")]) as emu:
        stopped = await validate(tmp_path, emu, sample("Job"))
    assert not stopped.ok and stopped.layer == 4 and stopped.owner == "queue-owner"
    assert "not active (Stopped: LocalQueue is stopped)" in stopped.summary
    async with KubeEmulator([k8s.tau_workspace("vision")]) as emu:
        missing = await validate(tmp_path, emu, sample("Job"))
    assert not missing.ok and missing.layer == 4 and "LocalQueue team-a: not found" in missing.summary
    assert missing.dry_run == "accepted"  # the API server would take it; the queue would not admit it


async def test_unreachable_is_never_accepted(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    down = await validate(tmp_path, None, sample("Job"), server=f"http://127.0.0.1:{port}")
    assert not down.ok and down.layer == 1 and down.owner == "platform" and down.transient is True
    assert down.dry_run == "not sent" and "connection refused" in down.summary
    async with KubeEmulator(workspace_objects()) as emu:
        emu.fail("jobs", 503)
        failing = await validate(tmp_path, emu, sample("Job"))
    assert not failing.ok and failing.layer == 1 and failing.dry_run == "rejected"
    assert "unavailable (HTTP 503" in check(failing, "dry run (API server)").detail


async def test_a_cluster_without_the_rayjob_crd(tmp_path: Path) -> None:
    async with KubeEmulator(workspace_objects()) as emu:
        emu.serve_versions("ray.io", [])
        report = await validate(tmp_path, emu, sample("RayJob"))
    assert not report.ok and report.layer == 1 and report.owner == "platform"
    assert "rayjobs are not served by this cluster" in report.summary


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers.cli", "validate", *args], capture_output=True,
                          text=True, timeout=60, input=stdin)


def test_cli_live_offline_stdin_and_json(tmp_path: Path) -> None:
    manifest = tmp_path / "rayjob.yaml"
    manifest.write_text(dump(sample("RayJob")))
    bad = sample("RayJob")
    bad["spec"]["shutdownAfterJobFinishes"] = False
    with running_emulator(workspace_objects()) as emu:
        write_descriptor(tmp_path, emu.base_url)
        common = ("--workspaces-dir", str(tmp_path), "--workspace", "vision")
        live = _cli(str(manifest), *common, "--as", ALICE.user, "--as-group", "team-vision")
        assert live.returncode == 0, live.stderr
        assert live.stdout.startswith(f"RayJob {k8s.NS}/rayjob-sample\n✔ layer 3")
        assert "✔ dry run (API server): accepted" in live.stdout
        assert [r.query.get("dryRun") for r in emu.requests if r.method == "POST"] == ["All"]
        before = len(emu.requests)
        piped = _cli("-", *common, "--offline", "--format", "json", stdin=dump(bad))
        assert len(emu.requests) == before  # offline: not one request
    assert piped.returncode == 1
    doc = json.loads(piped.stdout)
    assert doc["ok"] is False and doc["layer"] == 3 and doc["owner"] == "researcher"
    assert doc["offline"] is True and doc["dry_run"] == "not sent"
    assert "a kueue managed job should delete the cluster after finishing" in doc["summary"]


def test_cli_bad_input(tmp_path: Path) -> None:
    write_descriptor(tmp_path, "https://127.0.0.1:9")
    common = ("--workspaces-dir", str(tmp_path), "--offline")
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    out = _cli(str(binary), *common)
    assert out.returncode == 1 and "✖ manifest: the manifest is binary data" in out.stdout
    missing = _cli(str(tmp_path / "nope.yaml"), *common)
    assert missing.returncode == 2 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr
    no_identity = _cli(str(binary), "--workspaces-dir", str(tmp_path))
    assert no_identity.returncode == 2 and "--as USER" in no_identity.stderr


async def test_local_failures_beside_an_accepted_dry_run_get_one_verdict_line(tmp_path: Path) -> None:
    """`❌ restartPolicy 'Always'` beside `✅ dry run … accepted` (issue 38, item 5): the summary says
    which wins — the manifest would not run as intended — so nobody reads the ✅ as the answer."""
    job = sample("Job")
    job["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    async with KubeEmulator(workspace_objects()) as emu:
        report = await validate(tmp_path, emu, job)
    assert report.dry_run == "accepted" and not report.ok
    assert report.summary.startswith("Verdict: it would not run as intended")
    assert "restartPolicy" in report.summary and "the ❌ checks decide" in report.summary
    assert check(report, "dry run (API server)").state == "ok"
