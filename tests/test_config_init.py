"""`taubot config init`: the values file and the Slack app manifest a newcomer installs from.

Run as the real command (a subprocess with its own stdin), the written values
are rendered by Helm's own SDK (the chart's schema and templates, as at
install) and the manifest is compared with the repository's template.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.test_helm_chart import by_kind, containers, render

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "deploy" / "slack-app-manifest-http.yaml"
SOCKET_TEMPLATE = ROOT / "deploy" / "slack-app-manifest-socket.yaml"
ANSWERS = ["--image", "registry.example.com/taubot:0.1.0", "--workspace", "vision", "--channel", "C012ABCDEF",
           "--user", "U012ALICE=alice@example.com:team-vision,gpu-users"]


def config_init(tmp: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers.cli", "config", "init", "--out-dir", str(tmp), *args],
                          input=stdin, capture_output=True, text=True, timeout=60, cwd=ROOT)


def written(tmp: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    return (yaml.safe_load((tmp / "taubot-values.yaml").read_text()),
            yaml.safe_load((tmp / "slack-app-manifest.yaml").read_text()))


def test_http_answers_install_behind_an_ingress_with_tls_and_class(tmp_path: Path) -> None:
    done = config_init(tmp_path, *ANSWERS, "--mode", "http", "--host", "tau.example.org",
                       "--ingress-class", "traefik", "--tls-secret", "tau-tls", "--ingress-namespace", "traefik",
                       "--redis", "redis://redis.platform.example:6379/0", "--redis-cidr", "10.20.0.5/32")
    assert done.returncode == 0, done.stderr
    # Every step to an answering bot, in an order that works: the workspace's namespace is checked
    # before the install that binds the monitor in it; the Ingress's certificate is made.
    steps = [line.split(". ", 1)[1] for line in done.stdout.splitlines() if line[:5].strip().rstrip(".").isdigit()]
    assert [s.split()[0:2] for s in steps] == [["create", "the"], ["kubectl", "get"], ["kubectl", "create"],
                                               ["kubectl", "-n"], ["kubectl", "-n"], ["helm", "lint"],
                                               ["invite", "the"]]
    assert "Signing Secret" in steps[0] and steps[1].startswith("kubectl get namespace team-vision")
    assert "--from-literal=signing-secret=" in steps[3] and "--from-literal=button-signing-key=" in steps[3]
    assert steps[4].startswith("kubectl -n taubot create secret tls tau-tls ")
    assert "helm install taubot" in steps[5]
    values, manifest = written(tmp_path)
    docs = render(values)
    policies = by_kind(docs, "NetworkPolicy")
    controller = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "traefik"}}}]
    assert {"ports": [{"port": "http", "protocol": "TCP"}], "from": controller} in policies["taubot-bot"]["spec"]["ingress"]
    assert {"to": [{"ipBlock": {"cidr": "10.20.0.5/32"}}], "ports": [{"port": 6379, "protocol": "TCP"}]} in \
        policies["taubot-bot"]["spec"]["egress"]
    [ingress] = by_kind(docs, "Ingress").values()
    assert ingress["spec"]["ingressClassName"] == "traefik"
    assert ingress["spec"]["tls"] == [{"hosts": ["tau.example.org"], "secretName": "tau-tls"}]
    assert "StatefulSet" not in {d["kind"] for d in docs}  # the platform's Redis
    role = by_kind(docs, "ClusterRole")["taubot-impersonator"]
    assert {r["resources"][0]: r["resourceNames"] for r in role["rules"]} == {
        "users": ["alice@example.com"], "groups": ["gpu-users", "team-vision"]}
    assert manifest["features"]["slash_commands"][0]["url"] == "https://tau.example.org/slack/events"
    assert manifest["settings"]["interactivity"]["request_url"] == "https://tau.example.org/slack/events"
    template = yaml.safe_load(TEMPLATE.read_text())
    assert manifest["oauth_config"] == template["oauth_config"]  # the scopes are the template's
    assert manifest["settings"]["socket_mode_enabled"] is False


def test_socket_mode_is_the_default_and_needs_no_host(tmp_path: Path) -> None:
    done = config_init(tmp_path, *ANSWERS, "--context", "aks-east")
    assert done.returncode == 0, done.stderr
    assert "--from-literal=app-token=xapp-" in done.stdout
    assert "App-Level Tokens create one with connections:write" in done.stdout
    assert "create secret tls" not in done.stdout  # no Ingress, no certificate
    values, manifest = written(tmp_path)
    assert manifest == yaml.safe_load(SOCKET_TEMPLATE.read_text())  # the Socket Mode app, as shipped
    assert manifest["settings"]["socket_mode_enabled"] is True
    assert "request_url" not in manifest["settings"]["interactivity"]
    assert "url" not in manifest["features"]["slash_commands"][0]
    docs = render(values)
    assert not by_kind(docs, "Ingress")
    assert containers(docs)["taubot-bot"]["containers"][0]["command"] == ["taubot", "serve", "socket"]
    descriptor = yaml.safe_load(values["workspaces"]["vision.yaml"])
    assert descriptor["spec"]["cluster"] == {"context": "aks-east"}
    assert descriptor["spec"]["namespace"] == "team-vision" and descriptor["spec"]["localQueue"] == "vision-default"


def test_prompts_for_what_the_flags_leave_out(tmp_path: Path) -> None:
    # image, mode (default), redis (default), workspace, namespace, queue (default), channel, first user
    answers = "registry.example.com/taubot\n\n\nnlp\nml-nlp\n\nC0NLP123\nU034BOB=bob@example.com\n"
    done = config_init(tmp_path, "--ask", stdin=answers)
    assert done.returncode == 0, done.stderr
    assert "Workspace name users type" in done.stdout and "[socket]" in done.stdout
    values, _ = written(tmp_path)
    assert values["image"] == {"repository": "registry.example.com/taubot"}
    assert values["identity"]["users"] == {"U034BOB": {"user": "bob@example.com"}}
    assert yaml.safe_load(values["workspaces"]["nlp.yaml"])["spec"]["namespace"] == "ml-nlp"
    render(values)


def test_without_a_terminal_a_missing_answer_names_its_flag(tmp_path: Path) -> None:
    done = config_init(tmp_path, "--image", "registry.example.com/taubot")
    assert done.returncode == 2
    assert done.stderr.strip().startswith("taubot: error: --workspace is needed")
    assert "Traceback" not in done.stderr and not list(tmp_path.iterdir())


def test_values_the_schema_refuses_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    done = config_init(tmp_path, *ANSWERS, "--redis", "http://redis:6379")
    assert done.returncode == 2
    assert "--redis 'http://redis:6379': 'bundled', or a redis:// or rediss:// URL" in done.stderr
    email_only = [a for a in ANSWERS if not a.startswith(("--user", "U012"))] + ["--map-by-email"]
    done = config_init(tmp_path, *email_only)
    assert done.returncode == 2 and "no user to impersonate is named" in done.stderr
    done = config_init(tmp_path, *ANSWERS[:-1], "U012ALICE=alice@example.com:system:masters")
    assert done.returncode == 2 and "system:masters" in done.stderr
    assert not list(tmp_path.iterdir())
    assert config_init(tmp_path, *email_only, "--unbounded-impersonation").returncode == 0


def test_existing_files_are_kept_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "taubot-values.yaml").write_text("mine: true\n")
    done = config_init(tmp_path, *ANSWERS)
    assert done.returncode == 2 and "exists: pass --force" in done.stderr
    assert (tmp_path / "taubot-values.yaml").read_text() == "mine: true\n"
    assert config_init(tmp_path, *ANSWERS, "--force").returncode == 0


def test_the_platforms_redis_is_reached_where_the_answer_says(tmp_path: Path) -> None:
    """With the platform's Redis the NetworkPolicies need its address: asked for, and used."""
    done = config_init(tmp_path, *ANSWERS, "--redis", "rediss://redis.platform.example:6380/0")
    assert done.returncode == 2 and "--redis-cidr is needed" in done.stderr
    done = config_init(tmp_path, *ANSWERS, "--redis", "rediss://redis.platform.example:6380/0",
                       "--redis-cidr", "10.20.0.5/32")
    assert done.returncode == 0, done.stderr
    values, _ = written(tmp_path)
    docs = render(values)
    assert not by_kind(docs, "StatefulSet")
    egress = by_kind(docs, "NetworkPolicy")["taubot-worker"]["spec"]["egress"]
    assert {"to": [{"ipBlock": {"cidr": "10.20.0.5/32"}}], "ports": [{"port": 6380, "protocol": "TCP"}]} in egress


def test_one_local_queue_name_from_the_demo_to_the_install(tmp_path: Path) -> None:
    """The LocalQueue a newcomer meets in the demo is the one config init writes by default, the
    chart's example descriptor and the README's name (SPEC §8's `vision-default`), and the demo
    cluster serves it: its TauWorkspace points at it and its runs are queued in it."""
    import re

    from shell.demo_cluster import demo_cluster

    assert config_init(tmp_path, *ANSWERS).returncode == 0  # workspace vision, no --local-queue
    values, _ = written(tmp_path)
    queue = yaml.safe_load(values["workspaces"]["vision.yaml"])["spec"]["localQueue"]
    assert queue == "vision-default"
    chart_example = (ROOT / "deploy" / "helm" / "taubot" / "values.yaml").read_text()
    assert re.findall(r"#\s+localQueue: (\S+)", chart_example) == [queue]
    assert set(re.findall(r"localQueue: (\S+)", (ROOT / "README.md").read_text())) == {queue}
    with demo_cluster() as demo:
        descriptor = yaml.safe_load((demo.workspaces_dir / "vision.yaml").read_text())
        assert descriptor["spec"]["localQueue"] == queue
        served = demo.emulator.objects()
        [workspace] = [o for o in served if o["kind"] == "TauWorkspace"]
        assert workspace["spec"]["localQueue"] == queue
        assert [o["metadata"]["name"] for o in served if o["kind"] == "LocalQueue"] == [queue]
        labels = {(o["metadata"].get("labels") or {}).get("kueue.x-k8s.io/queue-name")
                  for o in served if o["kind"] in ("Job", "RayJob")}
        assert labels - {None} == {queue}
        assert {o["spec"]["queueName"] for o in served if o["kind"] == "Workload"} == {queue}
