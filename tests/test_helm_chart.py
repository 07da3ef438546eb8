"""The Helm chart, rendered and linted with Helm's own Go SDK (helm-python-sdk, no binary).

What an operator relies on, asserted on the rendered objects for several
value sets: least-privilege RBAC bound to the chart's own ServiceAccounts in
the release namespace, probes on real health, secrets as files, a
NetworkPolicy and PDBs, the optional ServiceMonitor, a values schema that
refuses a wrong value at install, and every TAUBOT_* variable in step with
`workers/settings.py`.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import helm_python as helm  # helm-python-sdk, in the test extras: a missing one fails, never skips
import pytest
import yaml

from workers.cli import build_parser
from workers.monitor.cache import KINDS
from workers.settings import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "taubot"
NS = "chatops"
DESCRIPTOR = """\
apiVersion: taugrid.io/v1alpha1
kind: WorkspaceConnection
metadata: {name: %(name)s}
spec:
  cluster: {server: https://kubernetes.default.svc}
  namespace: %(ns)s
  workspace: %(name)s
  localQueue: %(name)s-default
  slack: {channels: [C012ABCDEF]}
"""
MINIMAL: dict[str, Any] = {
    "image": {"repository": "registry.example.com/taubot"},
    "workspaces": {"vision.yaml": DESCRIPTOR % {"name": "vision", "ns": "team-vision"},
                   "nlp.yaml": DESCRIPTOR % {"name": "nlp", "ns": "team-nlp"}},
}
FULL: dict[str, Any] = {
    **MINIMAL,
    "redis": {"url": "redis://unused:6379/0", "urlSecret": {"name": "taubot-redis", "key": "url"}},
    "slack": {"existingSecret": "taubot-slack", "botTokenKey": "bot-token", "signingSecretKey": "signing-secret",
              "appTokenKey": "app-token", "apiUrl": "https://slack.com/api/"},
    "rbac": {"impersonate": {"groups": ["team-vision", "gpu-users"]},
             "monitor": {"clusterWide": True}},
    "metrics": {"port": 9100, "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    "networkPolicy": {"enabled": True, "redisPeers": [{"podSelector": {"matchLabels": {"app": "redis"}}}]},
    "extraEnv": [{"name": "TAUBOT_MUTE_HOURS", "value": "12"}],
}
SMALL: dict[str, Any] = {**MINIMAL, "monitor": {"enabled": False, "replicas": 1}, "bot": {"replicas": 1},
                         "worker": {"replicas": 1}, "ingress": {"enabled": False},
                         "networkPolicy": {"enabled": False}}


def render(values: dict[str, Any], release: str = "taubot") -> list[dict[str, Any]]:
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name=release, namespace=NS)
    docs = []
    for name, text in manifests.items():
        if name.endswith(".yaml"):
            docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Deployment"}


@pytest.fixture(scope="module")
def minimal() -> list[dict[str, Any]]:
    return render(MINIMAL)


@pytest.fixture(scope="module")
def full() -> list[dict[str, Any]]:
    return render(FULL)


def test_lint_passes_with_values_and_the_object_list(minimal: list[dict[str, Any]]) -> None:
    for values in (MINIMAL, FULL, SMALL):
        report = helm.lint(str(CHART), values=values, strict=True, namespace=NS)
        assert report["errors"] == [], report
        assert [m["error"] for m in report["messages"]] == ["icon is recommended"]  # INFO only
    listed = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in minimal)
    assert listed == sorted([
        "ConfigMap/taubot-identity", "ConfigMap/taubot-workspaces",
        "ClusterRole/taubot-impersonator", "ClusterRoleBinding/taubot-impersonator",
        "ClusterRole/taubot-stall-monitor", "RoleBinding/taubot-stall-monitor", "RoleBinding/taubot-stall-monitor",
        "Deployment/taubot-bot", "Deployment/taubot-worker", "Deployment/taubot-monitor",
        "Ingress/taubot-bot", "NetworkPolicy/taubot",
        "PodDisruptionBudget/taubot-bot", "PodDisruptionBudget/taubot-worker", "PodDisruptionBudget/taubot-monitor",
        "Service/taubot-bot", "Service/taubot-metrics",
        "ServiceAccount/taubot-bot", "ServiceAccount/taubot-worker", "ServiceAccount/taubot-monitor",
    ])


def test_impersonation_is_the_workers_only_right(minimal: list[dict[str, Any]], full: list[dict[str, Any]]) -> None:
    role = by_kind(minimal, "ClusterRole")["taubot-impersonator"]
    assert {(res, verb) for r in role["rules"] for res in r["resources"] for verb in r["verbs"]} == {
        ("users", "impersonate"), ("groups", "impersonate")}
    assert all(r["apiGroups"] == [""] and "resourceNames" not in r for r in role["rules"])
    [binding] = by_kind(minimal, "ClusterRoleBinding").values()
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "taubot-worker", "namespace": NS}]
    narrowed = by_kind(full, "ClusterRole")["taubot-impersonator"]
    groups = next(r for r in narrowed["rules"] if r["resources"] == ["groups"])
    assert groups["resourceNames"] == ["team-vision", "gpu-users"]


def test_the_monitor_reads_exactly_its_kinds_in_the_workspaces_namespaces(minimal: list[dict[str, Any]],
                                                                        full: list[dict[str, Any]]) -> None:
    rules = by_kind(minimal, "ClusterRole")["taubot-stall-monitor"]["rules"]
    listed = {(group, res) for r in rules for group in r["apiGroups"] for res in r["resources"]
              if r["verbs"] == ["get", "list", "watch"]}
    assert listed == {(k.group, k.plural) for k in KINDS}
    gets = {res for r in rules if r["verbs"] == ["get"] for res in r["resources"]}
    assert gets == {"pods/log", "services/proxy"}
    assert {v for r in rules for v in r["verbs"]} == {"get", "list", "watch"}
    bindings = [d for d in minimal if d["kind"] == "RoleBinding"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-nlp", "team-vision"]
    assert all(b["subjects"] == [{"kind": "ServiceAccount", "name": "taubot-monitor", "namespace": NS}]
               for b in bindings)
    assert "taubot-stall-monitor" in by_kind(full, "ClusterRoleBinding")  # clusterWide: true
    assert not [d for d in full if d["kind"] == "RoleBinding"]


def test_the_bot_has_no_kubernetes_identity(minimal: list[dict[str, Any]]) -> None:
    accounts = by_kind(minimal, "ServiceAccount")
    assert accounts["taubot-bot"]["automountServiceAccountToken"] is False
    assert containers(minimal)["taubot-bot"]["automountServiceAccountToken"] is False
    subjects = [s["name"] for d in minimal if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
                for s in d["subjects"]]
    assert "taubot-bot" not in subjects


def test_commands_and_probes(minimal: list[dict[str, Any]]) -> None:
    pods = containers(minimal)
    commands = {name: spec["containers"][0]["command"] for name, spec in pods.items()}
    assert commands == {"taubot-bot": ["taubot", "serve", "http", "--port", "3000", "--processes", "2"],
                        "taubot-worker": ["taubot", "worker", "--pool", "4", "--in-process"],
                        "taubot-monitor": ["taubot", "monitor"]}
    parser = build_parser()
    for command in commands.values():
        parser.parse_args(command[1:])  # every command is one the image's CLI accepts
    for name, spec in pods.items():
        [c] = spec["containers"]
        ports = {p["name"] for p in c["ports"]}
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz", name
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz", name
        assert {c["readinessProbe"]["httpGet"]["port"], c["livenessProbe"]["httpGet"]["port"]} <= ports
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["image"] == f"registry.example.com/taubot:{project_version()}"


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_chart_app_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == project_version()


def _env(spec: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in spec["containers"][0]["env"]}


def test_secrets_are_files_and_every_variable_is_a_setting(minimal: list[dict[str, Any]],
                                                           full: list[dict[str, Any]]) -> None:
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    known |= {name + "_FILE" for name in known} | {"TAUBOT_LOG_FORMAT"}
    for docs in (minimal, full):
        for name, spec in containers(docs).items():
            env = _env(spec)
            assert set(env) - known == set(), (name, set(env) - known)  # a typo would be ignored silently
            assert {"TAUBOT_WORKSPACES_DIR", "TAUBOT_IDENTITY_FILE", "TAUBOT_SLACK_BOT_TOKEN_FILE"} <= set(env)
            assert {"TAUBOT_REDIS_URL", "TAUBOT_REDIS_URL_FILE"} & set(env)
            assert not any(n in env for n in ("TAUBOT_SLACK_BOT_TOKEN", "TAUBOT_SLACK_SIGNING_SECRET"))
            secrets = [v for v in spec["volumes"] if "secret" in v]
            assert secrets and all(v["secret"]["defaultMode"] == 0o400 for v in secrets)
    assert _env(containers(full)["taubot-worker"])["TAUBOT_REDIS_URL_FILE"] == "/run/secrets/taubot-redis/url"
    assert "TAUBOT_SLACK_APP_TOKEN_FILE" in _env(containers(full)["taubot-bot"])


def test_every_taubot_variable_the_code_reads_is_a_setting_with_a_default() -> None:
    code = "\n".join(p.read_text() for d in ("bot", "workers", "shell") for p in (ROOT / d).rglob("*.py"))
    read = set(re.findall(r"\"(TAUBOT_[A-Z0-9_]+)\"", code))
    settings = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    assert read - settings - {"TAUBOT_LOG_FORMAT"} == set()
    assert [n for n, f in Settings.model_fields.items() if f.is_required()] == []


def test_network_policy_and_pdbs(minimal: list[dict[str, Any]], full: list[dict[str, Any]]) -> None:
    [policy] = by_kind(minimal, "NetworkPolicy").values()
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    egress_ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert egress_ports == {53, 6379, 443, 6443}
    ingress_ports = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert ingress_ports == {"http", "metrics"}
    [full_policy] = by_kind(full, "NetworkPolicy").values()
    redis_rule = next(r for r in full_policy["spec"]["egress"] if r["ports"][0]["port"] == 6379)
    assert redis_rule["to"] == [{"podSelector": {"matchLabels": {"app": "redis"}}}]
    small = render(SMALL)
    assert not by_kind(small, "PodDisruptionBudget") and not by_kind(small, "NetworkPolicy")
    assert "taubot-monitor" not in containers(small) and not by_kind(small, "Ingress")
    assert "taubot-stall-monitor" not in by_kind(small, "ClusterRole")


def test_service_monitor_is_optional(minimal: list[dict[str, Any]], full: list[dict[str, Any]]) -> None:
    assert not by_kind(minimal, "ServiceMonitor")
    [monitor] = by_kind(full, "ServiceMonitor").values()
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == {"http", "metrics"}
    assert all(e["path"] == "/metrics" for e in monitor["spec"]["endpoints"])


def test_another_release_name_gets_its_own_cluster_objects() -> None:
    docs = render(MINIMAL, release="staging")
    assert "staging-taubot-impersonator" in by_kind(docs, "ClusterRole")
    [binding] = by_kind(docs, "ClusterRoleBinding").values()
    assert binding["subjects"][0]["name"] == "staging-taubot-worker"


@pytest.mark.parametrize(("values", "said"), [
    ({**MINIMAL, "bot": {"replicas": "two"}}, "at '/bot/replicas': got string, want integer"),
    ({**MINIMAL, "bot": {"replicas": 2, "processes": 0}}, "at '/bot/processes': minimum"),
    ({**MINIMAL, "imagee": {}}, "additional properties 'imagee' not allowed"),
    ({**MINIMAL, "config": {"QUEUE_NAME": "x"}}, "'QUEUE_NAME' does not match pattern '^TAUBOT_"),
    ({**MINIMAL, "logFormat": "xml"}, "/logFormat"),
    ({**MINIMAL, "redis": {"url": "http://redis:6379"}}, "/redis/url"),
    ({"workspaces": MINIMAL["workspaces"]}, "image.repository is required"),
])
def test_a_wrong_value_fails_at_install(values: dict[str, Any], said: str) -> None:
    with pytest.raises(helm.HelmError) as failed:
        render(values)
    assert said in str(failed.value)


def test_ingress_exposes_only_slack_events(minimal: list[dict[str, Any]]) -> None:
    [ingress] = by_kind(minimal, "Ingress").values()
    paths = [p["path"] for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]]
    assert paths == ["/slack/events"]


def test_the_readme_install_values_render_and_load() -> None:
    """The values an operator copies from README "Install on a cluster" install as they are, and the
    descriptor and identity file they carry load in taubot itself."""
    readme = (ROOT / "README.md").read_text()
    text = re.search(r"cat > taubot-values.yaml <<'VALUES'\n(.*?)\nVALUES\n", readme, re.S).group(1)
    values = yaml.safe_load(text)
    docs = render(values)
    maps = by_kind(docs, "ConfigMap")
    assert "taubot-workspaces" in maps and "taubot-identity" in maps
    assert [b["metadata"]["namespace"] for b in docs if b["kind"] == "RoleBinding"] == ["team-vision"]
    assert helm.lint(str(CHART), values=values, strict=True, namespace=NS)["errors"] == []


def test_readme_values_files_parse_as_taubot_config(tmp_path: Path) -> None:
    from bot.identity import load_identity_map
    from workers.workspaces import load_descriptors

    readme = (ROOT / "README.md").read_text()
    values = yaml.safe_load(re.search(r"<<'VALUES'\n(.*?)\nVALUES\n", readme, re.S).group(1))
    [(name, text)] = values["workspaces"].items()
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / name).write_text(text)
    registry = load_descriptors(tmp_path / "ws")
    assert registry.resolve(workspace="vision").descriptor.spec.namespace == "team-vision"
    (tmp_path / "identity.yaml").write_text(yaml.safe_dump(values["identity"]))
    identities = load_identity_map(tmp_path / "identity.yaml")
    assert identities.users["U012ABCDEF"].user == "alice@example.com"
