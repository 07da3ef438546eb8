"""`taubot mcp` (issue 37): started as a subprocess and called with the `mcp` SDK's own client over
stdio; each tool answers what its CLI twin prints, read as the `--as` identity through the
Kubernetes API emulator; a denied read says permission denied.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from shell.demo_cluster import run_objects
from tests.fakes.kube_api import KubeEmulator, running_emulator
from tests.fixtures.manifests import SAMPLE_JOB_YAML
from tests.live.conftest import workspace_objects, write_descriptor
from workers.cli.mcp import scrubbed
from workers.diagnosis.linkage import SUBMITTED_BY_ANNOTATION

REPO = Path(__file__).resolve().parents[1]
AS = ["--as", "alice@example.com", "--as-group", "team-vision"]
SECRET = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example access key id: what the redaction must catch


def objects() -> list[dict[str, Any]]:
    out = workspace_objects()
    for example, run, name in (("l5-job-oomkilled", "llama-ft-7b", "llama-ft-oom"),
                               ("l7-rayjob-running", "ray-pretrain-13b", "ray-pretrain-live")):
        for obj in run_objects(example, run, name):
            if obj.get("kind") in ("Job", "RayJob") and obj["metadata"]["name"] == name:
                obj["metadata"].setdefault("annotations", {})[SUBMITTED_BY_ANNOTATION] = "alice@example.com"
            out.append(obj)
    return out


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[KubeEmulator, Path]]:
    with running_emulator(objects()) as emu:
        emu.pod_logs[("team-vision", "llama-ft-oom-h9wch", "trainer")] = f"step 1 loss 2.0 key={SECRET}\n"
        write_descriptor(tmp_path, emu.base_url)
        yield emu, tmp_path


def cli(directory: Path, *args: str, stdin: str | None = None) -> Any:
    done = subprocess.run([sys.executable, "-m", "workers.cli", *args, "--workspaces-dir", str(directory), *AS],
                          capture_output=True, text=True, cwd=REPO, timeout=120, check=False, input=stdin)
    return json.loads(done.stdout)


def call_tools(directory: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Start `taubot mcp` and call each tool in turn with the SDK's client; the answers' texts."""
    server = StdioServerParameters(command=sys.executable, cwd=str(REPO),
                                   args=["-m", "workers.cli", "mcp", "--workspaces-dir", str(directory),
                                         "--workspace", "vision", *AS])

    async def session() -> list[Any]:
        async with Client(server) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert tools == {"diagnose", "runs", "logs", "validate"}
            out = []
            for tool, arguments in calls:
                result = await client.call_tool(tool, arguments)
                out.append(result)
            return out

    return anyio.run(session)


def text(result: Any) -> str:
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def test_each_tool_answers_what_its_cli_twin_prints(cluster: tuple[KubeEmulator, Path]) -> None:
    emu, directory = cluster
    diagnose, runs, logs, validate, bad = call_tools(directory, [
        ("diagnose", {"run": "llama-ft-oom"}), ("runs", {}), ("logs", {"run": "llama-ft-oom", "tail": 50}),
        ("validate", {"manifest": SAMPLE_JOB_YAML}), ("diagnose", {"run": "Not A Run"})])
    assert not diagnose.is_error and json.loads(text(diagnose)) == cli(
        directory, "diagnose", "llama-ft-oom", "--workspace", "vision", "--format", "json")
    assert json.loads(text(diagnose))["first_incomplete"] == "Container start"
    listed = json.loads(text(runs))
    assert listed["could_not_read"] == {}
    assert listed["runs"] == cli(directory, "runs", "--workspace", "vision", "--format", "json")
    assert [r["run"] for r in listed["runs"]] == ["llama-ft-oom", "ray-pretrain-live"]
    answered = json.loads(text(logs))
    expected = cli(directory, "logs", "llama-ft-oom", "--workspace", "vision", "--tail", "50", "--format", "json")
    # Both pass the door a Slack card does (a terminal's log is pasted into tickets and chats, a tool's
    # answer goes into a model's context): the same JSON, the key redacted in each.
    assert answered == expected == scrubbed(expected) and answered["lines"]
    assert SECRET not in json.dumps(expected) and SECRET not in text(logs)
    assert json.loads(text(validate)) == cli(directory, "validate", "-", "--workspace", "vision", "--format",
                                             "json", stdin=SAMPLE_JOB_YAML)
    assert bad.is_error and "DNS-1123" in text(bad) and "Traceback" not in text(bad)
    for request in emu.requests:  # every read as the --as identity, none as the kubeconfig's own
        assert request.header_values("Impersonate-User") == ["alice@example.com"], request.path


def test_a_denied_read_says_permission_denied(cluster: tuple[KubeEmulator, Path]) -> None:
    emu, directory = cluster
    emu.forbid("list", "rayjobs", user="alice@example.com")
    emu.forbid("list", "pods", user="alice@example.com")
    runs, diagnose = call_tools(directory, [("runs", {}), ("diagnose", {"run": "llama-ft-oom"})])
    listed = json.loads(text(runs))
    assert listed["could_not_read"]["RayJobs"] == "permission denied (list rayjobs)"
    assert [r["run"] for r in listed["runs"]] == ["llama-ft-oom"]
    assert "permission denied (list pods)" in text(diagnose)
