"""Every CLI error a newcomer meets first is one line naming what to do (issue 38, Build item 2).

Each case runs `taubot` as a subprocess — exit code, stdout and stderr exactly as a terminal sees
them — and asserts one line on stderr, no traceback, and the exit code: 2 for bad input or
configuration, 1 when the command ran but could not read what it needed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TAUBOT = [sys.executable, "-m", "workers.cli"]


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without any TAUBOT_* or KUBECONFIG: only what the case gives counts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAUBOT_") and k != "KUBECONFIG"}
    return {**env, **extra}


def taubot(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TAUBOT, *args], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=clean_env() if env is None else env, input=stdin)


def one_line(out: subprocess.CompletedProcess[str], code: int, *said: str) -> str:
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert out.returncode == code, (out.returncode, out.stderr)
    assert len(lines) == 1, out.stderr
    for words in said:
        assert words in lines[0], lines[0]
    return lines[0]


def closed_port() -> int:
    """A port nothing listens on: bound, read and released, so a connect is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def descriptor_dir(tmp_path: Path, cluster: dict) -> Path:
    """One WorkspaceConnection as README "Your own cluster, from a laptop" writes it."""
    directory = tmp_path / "workspaces"
    directory.mkdir()
    (directory / "vision.yaml").write_text(yaml.safe_dump({
        "apiVersion": "taugrid.io/v1alpha1", "kind": "WorkspaceConnection", "metadata": {"name": "vision"},
        "spec": {"cluster": cluster, "namespace": "team-vision", "workspace": "vision",
                 "localQueue": "team-a", "slack": {"channels": ["C012ABCDEF"]}}}))
    return directory


def kubeconfig(path: Path, context: str, server: str) -> Path:
    """The shape `kubectl config view --raw` prints (clusters, contexts, users, current-context)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "east", "cluster": {"server": server}}],
        "contexts": [{"name": context, "context": {"cluster": "east", "user": "me"}}],
        "users": [{"name": "me", "user": {"token": "not-a-real-token"}}],
        "current-context": context}))
    return path


def live_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return clean_env(TAUBOT_WORKSPACES_DIR=str(descriptor_dir(tmp_path, {"context": "aks-east"})), **extra)


def test_no_kubeconfig_says_which_setting(tmp_path: Path) -> None:
    out = taubot("workspace", "connection", "--workspace", "vision", "--as", "alice@example.com",
                 env=live_env(tmp_path, KUBECONFIG=str(tmp_path / "missing"), HOME=str(tmp_path)))
    one_line(out, 2, "no kubeconfig at", "KUBECONFIG", "'aks-east'")


def test_no_kubeconfig_anywhere_names_the_default_file(tmp_path: Path) -> None:
    out = taubot("diagnose", "llama-ft", "--workspace", "vision", "--as", "alice@example.com",
                 env=live_env(tmp_path, HOME=str(tmp_path)))
    one_line(out, 2, "no kubeconfig at", ".kube/config", "set KUBECONFIG")


def test_a_missing_context_lists_the_ones_there(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "config", "aks-west", "https://127.0.0.1:6443")
    out = taubot("workspace", "connection", "--workspace", "vision", "--as", "alice@example.com",
                 env=live_env(tmp_path, KUBECONFIG=str(config)))
    one_line(out, 2, "has no context 'aks-east'", "aks-west", "spec.cluster.context")


def test_a_kubeconfig_the_client_refuses_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [],
                                      "contexts": [{"name": "aks-east", "context": {"cluster": "gone",
                                                                                    "user": "me"}}]}))
    out = taubot("diagnose", "llama-ft", "--workspace", "vision", "--as", "alice@example.com",
                 env=live_env(tmp_path, KUBECONFIG=str(config)))
    one_line(out, 2, "context 'aks-east'", "kubectl config view")


def test_an_unreachable_cluster_exits_1_with_the_reason(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "config", "aks-east", f"https://127.0.0.1:{closed_port()}")
    out = taubot("diagnose", "llama-ft", "--workspace", "vision", "--as", "alice@example.com",
                 env=live_env(tmp_path, KUBECONFIG=str(config)))
    one_line(out, 1, "could not read the cluster", "connection refused", "retry")
    assert "unreachable" in out.stdout  # the answer itself still says what was and was not checked


def test_workspace_status_of_an_unreachable_cluster_exits_1(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "config", "aks-east", f"https://127.0.0.1:{closed_port()}")
    out = taubot("workspace", "status", "vision", "--as", "alice@example.com",
                 env=live_env(tmp_path, KUBECONFIG=str(config)))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "connection refused" in out.stdout


@pytest.mark.parametrize(("content", "said"), [
    # kubectl get … -o json when the list is empty as some tools write it (Go's nil slice)
    ('{"apiVersion": "v1", "kind": "List", "items": null, "metadata": {"resourceVersion": ""}}',
     "a List whose items are null"),
    # what `kubectl get jobs -n team-vision` prints (to stderr) when nothing matches, redirected
    ("No resources found in team-vision namespace.\n", "\"No resources found\""),
    ('{"apiVersion": "v1", "kind": "List", "items": []}', "holds no objects"),
    ('{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "batch/v1", "kind": "Job", '
     '"metadata": "llama-ft"}]}', "metadata should be a mapping, found str"),
    ('{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "llama-ft"}, "spec": 5}',
     "Job llama-ft): spec should be a mapping, found int"),
    ("apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: llama-ft\n  labels: [a, b]\n",
     "metadata.labels should be a mapping, found list"),
    ('{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": 7}}', "metadata.name should be a string"),
], ids=["null-items", "no-resources-found", "empty-list", "metadata-str", "spec-int", "labels-list", "name-int"])
def test_a_bad_dump_is_one_line(tmp_path: Path, content: str, said: str) -> None:
    dump = tmp_path / "dump.json"
    dump.write_text(content)
    line = one_line(taubot("diagnose", "llama-ft", "--from-file", str(dump)), 2, said)
    assert "-o json" in line  # …and says how to get a good one


def test_worker_without_a_redis_url_names_the_setting() -> None:
    """It never falls back to whatever answers on :6379: a bot and a worker on different Redis
    servers would never meet."""
    one_line(taubot("worker", "--burst"), 2, "taubot worker", "TAUBOT_REDIS_URL")


@pytest.mark.parametrize("command", [["serve", "socket"], ["monitor", "--once"]])
def test_other_services_need_their_redis_too(command: list[str]) -> None:
    one_line(taubot(*command), 2, "TAUBOT_REDIS_URL")


def test_monitor_once_exits_1_when_every_read_failed(tmp_path: Path, redis_url: str) -> None:
    workspaces = descriptor_dir(tmp_path, {"server": f"http://127.0.0.1:{closed_port()}"})
    env = clean_env(TAUBOT_WORKSPACES_DIR=str(workspaces), TAUBOT_REDIS_URL=redis_url,
                    TAUBOT_SLACK_BOT_TOKEN="xoxb-never-used", TAUBOT_BUTTON_SIGNING_KEY="k" * 32,
                    TAUBOT_SLACK_API_URL=f"http://127.0.0.1:{closed_port()}/api/")
    out = taubot("monitor", "--once", env=env)
    one_line(out, 1, "read nothing", "connection refused")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["runs"] == 0 and report["unread"]  # the sweep's own account says the same


@pytest.mark.parametrize(("args", "said"), [
    (["diagnsoe", "llama-ft"], "did you mean `taubot diagnose`?"),
    (["workspace", "conection"], "did you mean `taubot workspace connection`?"),
    (["cluster", "validate", "nods"], "did you mean `taubot cluster validate nodes`?"),
    (["diagnose", "llama-ft", "--fromfile", "d.json"], "--fromfile: did you mean --from-file?"),
    (["workspace", "status", "vision", "--fromat", "json"], "--fromat: did you mean --format?"),
    (["diagnose", "llama-ft", "--format", "jsn"], "did you mean --format json?"),
], ids=["command", "nested-command", "deep-command", "flag", "subcommand-flag", "choice"])
def test_a_misspelling_gets_did_you_mean(args: list[str], said: str) -> None:
    one_line(taubot(*args), 2, said)


def test_no_suggestion_for_a_word_like_none() -> None:
    line = one_line(taubot("diagnose", "llama-ft", "--bogus"), 2, "unrecognized arguments: --bogus")
    assert "did you mean" not in line
