"""The Helm chart, rendered and linted with Helm's own Go SDK (helm-python-sdk, no binary).

What an operator relies on, asserted on the rendered objects for several
value sets: least-privilege RBAC bound to the chart's own ServiceAccounts in
the release namespace, probes on real health, secrets as files, a
NetworkPolicy and PDBs, the optional ServiceMonitor, a values schema that
refuses a wrong value at install, and every TAUBOT_* variable in step with
`workers/config/settings.py`.
"""

from __future__ import annotations

import base64
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import helm_python as helm  # helm-python-sdk, in the test extras: a missing one fails, never skips
import pytest
import yaml

from workers.cli import build_parser
from workers.config.settings import ENV_PREFIX, Settings
from workers.monitor.cache import CLUSTER_KINDS, KINDS

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
IDENTITY: dict[str, Any] = {  # the identity file of SPEC §9, as chart values
    "users": {"U012ALICE": {"user": "alice@example.com", "groups": ["team-vision", "gpu-users"]},
              "U034BOB": {"user": "bob@example.com"}},
    "usergroups": {"S0NLP": "team-nlp"},
}
MINIMAL: dict[str, Any] = {
    "image": {"repository": "registry.example.com/taubot"},
    "ingress": {"host": "taubot.example.com"},
    "workspaces": {"vision.yaml": DESCRIPTOR % {"name": "vision", "ns": "team-vision"},
                   "nlp.yaml": DESCRIPTOR % {"name": "nlp", "ns": "team-nlp"}},
    "identity": IDENTITY,
}
FULL: dict[str, Any] = {
    **MINIMAL,
    "redis": {"enabled": False, "urlSecret": {"name": "taubot-redis", "key": "url"}},
    "slack": {"existingSecret": "taubot-slack", "botTokenKey": "bot-token", "signingSecretKey": "signing-secret",
              "appTokenKey": "app-token", "apiUrl": "https://slack.com/api/"},
    "rbac": {"impersonate": {"groups": ["team-vision", "gpu-users"]},
             "monitor": {"clusterWide": True}},
    "metrics": {"port": 9100, "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    "networkPolicy": {"enabled": True, "egress": {"redis": {"peers": [{"podSelector": {"matchLabels": {"app": "redis"}}}]}}},
    "extraEnv": [{"name": "TAUBOT_MUTE_HOURS", "value": "12"}],
}
SMALL: dict[str, Any] = {**MINIMAL, "monitor": {"enabled": False, "replicas": 1}, "bot": {"replicas": 1},
                         "worker": {"replicas": 1}, "ingress": {"enabled": False},
                         "networkPolicy": {"enabled": False}}


def render(values: dict[str, Any], release: str = "taubot", chart_dir: Path = CHART) -> list[dict[str, Any]]:
    with helm.Chart.load(str(chart_dir)) as chart:
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
        "ClusterRole/taubot-stall-monitor-clusterqueues", "ClusterRoleBinding/taubot-stall-monitor-clusterqueues",
        "Deployment/taubot-bot", "Deployment/taubot-worker", "Deployment/taubot-monitor",
        "Ingress/taubot-bot", "NetworkPolicy/taubot-bot", "NetworkPolicy/taubot-worker",
        "NetworkPolicy/taubot-monitor", "NetworkPolicy/taubot-redis",
        "StatefulSet/taubot-redis", "Service/taubot-redis", "Secret/taubot-redis",
        "PodDisruptionBudget/taubot-bot", "PodDisruptionBudget/taubot-worker", "PodDisruptionBudget/taubot-monitor",
        "Service/taubot-bot", "Service/taubot-metrics",
        "ServiceAccount/taubot-bot", "ServiceAccount/taubot-worker", "ServiceAccount/taubot-monitor",
    ])


def _impersonable(docs: list[dict[str, Any]]) -> dict[str, list[str] | None]:
    """What the worker's ClusterRole lets it impersonate, per resource (None: any name)."""
    role = by_kind(docs, "ClusterRole")["taubot-impersonator"]
    assert all(r["apiGroups"] == [""] and r["verbs"] == ["impersonate"] for r in role["rules"])
    return {res: r.get("resourceNames") for r in role["rules"] for res in r["resources"]}


def test_impersonation_is_the_workers_only_right(minimal: list[dict[str, Any]], full: list[dict[str, Any]]) -> None:
    bindings = by_kind(minimal, "ClusterRoleBinding")
    binding = bindings.pop("taubot-impersonator")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "taubot-worker", "namespace": NS}]
    # The only other cluster-wide binding: the monitor's read of ClusterQueues (issue 35), no impersonation.
    assert list(bindings) == ["taubot-stall-monitor-clusterqueues"]
    roles = by_kind(minimal, "ClusterRole")
    assert {v for b in bindings.values() for r in roles[b["roleRef"]["name"]]["rules"] for v in r["verbs"]} \
        == {"get", "list", "watch"}
    # Default values bound it to the identities the identity values name (SPEC §9).
    assert _impersonable(minimal) == {"users": ["alice@example.com", "bob@example.com"],
                                      "groups": ["gpu-users", "team-nlp", "team-vision"]}
    # rbac.impersonate names them outright.
    narrowed = _impersonable(full)
    assert narrowed["groups"] == ["gpu-users", "team-vision"]
    assert narrowed["users"] == ["alice@example.com", "bob@example.com"]


def test_impersonation_unbounded_only_by_explicit_opt_in() -> None:
    email_only = {**MINIMAL, "identity": {"map_by_email": True, "usergroups": {}}}
    with pytest.raises(helm.HelmError) as refused:
        render(email_only)
    assert "at '/rbac/impersonate/users': minItems" in str(refused.value)
    assert "at '/identity/users': minProperties" in str(refused.value)
    opted_in = render({**email_only, "rbac": {"impersonate": {"unbounded": True}}})
    assert _impersonable(opted_in) == {"users": None, "groups": None}
    # Users only, no group named: the worker may impersonate no group at all (an empty
    # resourceNames would mean any group).
    users_only = render({**MINIMAL, "identity": {"users": {"U034BOB": {"user": "bob@example.com"}}}})
    assert _impersonable(users_only) == {"users": ["bob@example.com"]}


@pytest.mark.parametrize(("values", "said"), [
    ({**MINIMAL, "rbac": {"impersonate": {"groups": ["system:masters"]}}}, "/rbac/impersonate/groups/0"),
    ({**MINIMAL, "rbac": {"impersonate": {"users": ["system:admin"]}}}, "/rbac/impersonate/users/0"),
    ({**MINIMAL, "rbac": {"impersonate": {"unbounded": True, "groups": ["system:masters"]}}},
     "/rbac/impersonate/groups/0"),
    ({**MINIMAL, "identity": {"users": {"U012A": {"user": "a@example.com", "groups": ["system:masters"]}}}},
     "at '/identity/users/U012A/groups/0': 'not' failed"),
    ({**MINIMAL, "identity": {"users": {"U012A": {"user": "a@example.com"}}, "usergroups": {"S012": "system:nodes"}}},
     "at '/identity/usergroups/S012': 'not' failed"),
])
def test_a_system_group_is_refused_at_install(values: dict[str, Any], said: str) -> None:
    with pytest.raises(helm.HelmError) as failed:
        render(values)
    assert said in str(failed.value)


def test_bundled_redis_is_append_only_on_a_volume_and_only_taubot_reaches_it(
        minimal: list[dict[str, Any]], full: list[dict[str, Any]]) -> None:
    [redis] = by_kind(minimal, "StatefulSet").values()
    [container] = redis["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]
    [claim] = redis["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data" and claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
    assert redis["spec"]["serviceName"] == "taubot-redis" and "taubot-redis" in by_kind(minimal, "Service")
    url = f"redis://:$(TAUBOT_REDIS_PASSWORD)@taubot-redis.{NS}.svc:6379/0"
    assert {_env(spec)["TAUBOT_REDIS_URL"] for spec in containers(minimal).values()} == {url}
    policy = by_kind(minimal, "NetworkPolicy")["taubot-redis"]
    [rule] = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "taubot",
                                                             "app.kubernetes.io/instance": "taubot"}}}]
    assert policy["spec"]["egress"] == []
    to_redis = next(r for r in by_kind(minimal, "NetworkPolicy")["taubot-worker"]["spec"]["egress"]
                    if r["ports"][0]["port"] == 6379)
    assert to_redis["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "redis"
    # The platform's Redis named (redis.enabled: false): nothing bundled.
    assert not by_kind(full, "StatefulSet") and "taubot-redis" not in by_kind(full, "Service")


@pytest.mark.parametrize(("redis", "said"), [
    ({"enabled": False}, "/redis"),
    ({"enabled": True, "url": "redis://platform:6379/0"}, "/redis/url"),
])
def test_redis_is_bundled_or_named_never_both_nor_neither(redis: dict[str, Any], said: str) -> None:
    with pytest.raises(helm.HelmError) as failed:
        render({**MINIMAL, "redis": redis})
    assert said in str(failed.value)


def test_socket_mode_needs_no_ingress_and_no_service_for_slack() -> None:
    docs = render({**MINIMAL, "bot": {"replicas": 1, "mode": "socket"}})
    assert not by_kind(docs, "Ingress") and "taubot-bot" not in by_kind(docs, "Service")
    bot = containers(docs)["taubot-bot"]
    [c] = bot["containers"]
    assert c["command"] == ["taubot", "serve", "socket"]
    build_parser().parse_args(c["command"][1:])
    env = _env(bot)
    assert env["TAUBOT_SLACK_APP_TOKEN_FILE"] == "/run/secrets/taubot-slack/app-token"  # from the Secret
    assert "TAUBOT_SLACK_SIGNING_SECRET_FILE" not in env  # nothing signs a WebSocket frame
    assert c["readinessProbe"]["httpGet"]["port"] == "metrics" and [p["name"] for p in c["ports"]] == ["metrics"]
    policy = by_kind(docs, "NetworkPolicy")["taubot-bot"]
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} == {"metrics"}
    assert helm.lint(str(CHART), values={**MINIMAL, "bot": {"replicas": 1, "mode": "socket"}},
                     strict=True, namespace=NS)["errors"] == []


def test_ingress_class_and_tls() -> None:
    docs = render({**MINIMAL, "ingress": {"enabled": True, "className": "nginx", "host": "tau.example.org",
                                          "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
                                          "tls": {"secretName": "tau-example-org-tls"}}})
    [ingress] = by_kind(docs, "Ingress").values()
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"hosts": ["tau.example.org"], "secretName": "tau-example-org-tls"}]
    assert ingress["metadata"]["annotations"] == {"cert-manager.io/cluster-issuer": "letsencrypt"}
    plain = render({**MINIMAL, "ingress": {"enabled": True, "host": "tau.example.org", "tls": {"secretName": ""}}})
    [ingress] = by_kind(plain, "Ingress").values()
    assert "tls" not in ingress["spec"] and "ingressClassName" not in ingress["spec"]


def test_monitor_cluster_wide_and_metrics_bind(minimal: list[dict[str, Any]], full: list[dict[str, Any]]) -> None:
    assert _env(containers(full)["taubot-monitor"])["TAUBOT_MONITOR_CLUSTER_WIDE"] == "true"
    assert "TAUBOT_MONITOR_CLUSTER_WIDE" not in _env(containers(minimal)["taubot-monitor"])
    # The settings' default binds /metrics to 127.0.0.1; probes and Prometheus come from outside the pod.
    for spec in containers(minimal).values():
        assert _env(spec)["TAUBOT_METRICS_HOST"] == "0.0.0.0"


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
    # The cluster-scoped kinds (ClusterQueues, issue 35): a role and a cluster-wide binding of their own,
    # in either mode, read-only.
    for docs in (minimal, full):
        cluster_rules = by_kind(docs, "ClusterRole")["taubot-stall-monitor-clusterqueues"]["rules"]
        assert [(r["apiGroups"], r["resources"], r["verbs"]) for r in cluster_rules] == [
            ([k.group], [k.plural], ["get", "list", "watch"]) for k in CLUSTER_KINDS]
        binding = by_kind(docs, "ClusterRoleBinding")["taubot-stall-monitor-clusterqueues"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "taubot-monitor", "namespace": NS}]
        assert binding["roleRef"]["name"] == "taubot-stall-monitor-clusterqueues"


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


# Set by the chart for a setting another change adds (issue 24: the monitor's cluster-wide WATCH).
# Drop it from here once workers/config/settings.py has it.
PENDING_SETTINGS = {"TAUBOT_MONITOR_CLUSTER_WIDE"} - {
    ENV_PREFIX + name.upper() for name in Settings.model_fields}


def test_secrets_are_files_and_every_variable_is_a_setting(minimal: list[dict[str, Any]],
                                                           full: list[dict[str, Any]]) -> None:
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    known |= {name + "_FILE" for name in known} | {"TAUBOT_LOG_FORMAT"}
    known |= PENDING_SETTINGS | {"TAUBOT_REDIS_PASSWORD"}  # the chart's: expanded into TAUBOT_REDIS_URL
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


def test_pdbs_and_network_policies_can_be_switched_off() -> None:
    small = render(SMALL)
    assert not by_kind(small, "PodDisruptionBudget") and not by_kind(small, "NetworkPolicy")
    assert "taubot-monitor" not in containers(small) and not by_kind(small, "Ingress")
    assert "taubot-stall-monitor" not in by_kind(small, "ClusterRole")
    assert "taubot-stall-monitor-clusterqueues" not in by_kind(small, "ClusterRole")


def test_service_monitor_is_optional(minimal: list[dict[str, Any]], full: list[dict[str, Any]]) -> None:
    assert not by_kind(minimal, "ServiceMonitor")
    [monitor] = by_kind(full, "ServiceMonitor").values()
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == {"http", "metrics"}
    assert all(e["path"] == "/metrics" for e in monitor["spec"]["endpoints"])


def test_another_release_name_gets_its_own_cluster_objects() -> None:
    docs = render(MINIMAL, release="staging")
    assert "staging-taubot-impersonator" in by_kind(docs, "ClusterRole")
    binding = by_kind(docs, "ClusterRoleBinding")["staging-taubot-impersonator"]
    assert binding["subjects"][0]["name"] == "staging-taubot-worker"
    assert "staging-taubot-stall-monitor-clusterqueues" in by_kind(docs, "ClusterRoleBinding")


@pytest.mark.parametrize(("values", "said"), [
    ({**MINIMAL, "bot": {"replicas": "two"}}, "at '/bot/replicas': got string, want integer"),
    ({**MINIMAL, "bot": {"replicas": 2, "processes": 0}}, "at '/bot/processes': minimum"),
    ({**MINIMAL, "imagee": {}}, "additional properties 'imagee' not allowed"),
    ({**MINIMAL, "config": {"QUEUE_NAME": "x"}}, "'QUEUE_NAME' does not match pattern '^TAUBOT_"),
    ({**MINIMAL, "logFormat": "xml"}, "/logFormat"),
    ({**MINIMAL, "redis": {"enabled": False, "url": "http://redis:6379"}}, "/redis/url"),
    ({**MINIMAL, "bot": {"replicas": 1, "mode": "websocket"}}, "/bot/mode"),
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
    from workers.config.workspaces import load_descriptors

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


MLFLOW_BASIC: dict[str, Any] = {**MINIMAL, "mlflow": {"existingSecret": "taubot-mlflow", "usernameKey": "username",
                                                      "passwordKey": "password"}}


def test_mlflow_basic_auth_comes_from_a_secret_mounted_in_the_worker_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow's own auth app expects HTTP Basic (SPEC §11): the chart hands the worker, and only the
    worker, the Secret's username and password as files, and taubot reads them as its settings."""
    docs = render(MLFLOW_BASIC)
    specs = containers(docs)
    worker = specs["taubot-worker"]
    env = {k: v for k, v in _env(worker).items() if "MLFLOW" in k}
    assert env == {"TAUBOT_MLFLOW_USERNAME_FILE": "/run/secrets/taubot-mlflow/username",
                   "TAUBOT_MLFLOW_PASSWORD_FILE": "/run/secrets/taubot-mlflow/password"}
    [volume] = [v for v in worker["volumes"] if v["name"] == "mlflow"]
    assert volume["secret"] == {"secretName": "taubot-mlflow", "defaultMode": 0o400}
    [mount] = [m for m in worker["containers"][0]["volumeMounts"] if m["name"] == "mlflow"]
    assert mount == {"name": "mlflow", "mountPath": "/run/secrets/taubot-mlflow", "readOnly": True}
    for other in ("taubot-bot", "taubot-monitor"):
        assert not [k for k in _env(specs[other]) if "MLFLOW" in k]
        assert not [v for v in specs[other]["volumes"] if v["name"] == "mlflow"]
    assert helm.lint(str(CHART), values=MLFLOW_BASIC, strict=True, namespace=NS)["errors"] == []
    # The files the Secret becomes load as the settings MlflowAuth is built from.
    from workers.collect.experiments import MlflowAuth

    (tmp_path / "username").write_text("taubot-reader\n")
    (tmp_path / "password").write_text("s3cret-from-the-secret\n")
    for name, path in env.items():
        monkeypatch.setenv(name, path.replace("/run/secrets/taubot-mlflow", str(tmp_path)))
    auth = MlflowAuth.from_settings(Settings())
    assert (auth.username, auth.password, auth.token) == ("taubot-reader", "s3cret-from-the-secret", None)
    assert all("MLFLOW" not in k for k in _env(containers(render(MINIMAL))["taubot-worker"]))  # none: nothing


def _redis_password_ref(spec: dict[str, Any]) -> dict[str, str]:
    """The secretKeyRef TAUBOT_REDIS_PASSWORD comes from, which must precede the URL expanding it."""
    env = spec["containers"][0]["env"]
    names = [e["name"] for e in env]
    assert names.index("TAUBOT_REDIS_PASSWORD") < names.index("TAUBOT_REDIS_URL")
    [entry] = [e for e in env if e["name"] == "TAUBOT_REDIS_PASSWORD"]
    assert "value" not in entry
    return entry["valueFrom"]["secretKeyRef"]


def _redis_server(docs: list[dict[str, Any]]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    [redis] = by_kind(docs, "StatefulSet").values()
    [container] = redis["spec"]["template"]["spec"]["containers"]
    return container["command"], {e["name"]: e for e in container["env"]}


def test_bundled_redis_requires_a_generated_password_by_default(minimal: list[dict[str, Any]]) -> None:
    command, env = _redis_server(minimal)
    assert command[command.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    assert command[command.index("--protected-mode") + 1] == "yes"
    ref = {"name": "taubot-redis", "key": "password"}
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == ref
    assert env["REDISCLI_AUTH"]["valueFrom"]["secretKeyRef"] == ref  # the probes' redis-cli ping
    secret = by_kind(minimal, "Secret")["taubot-redis"]
    password = base64.b64decode(secret["data"]["password"]).decode()
    assert len(password) == 32 and password.isalnum()
    for name, spec in containers(minimal).items():
        assert _redis_password_ref(spec) == ref, name
        assert _env(spec)["TAUBOT_REDIS_URL"].startswith("redis://:$(TAUBOT_REDIS_PASSWORD)@")
    # Kubernetes' expansion gives a URL the settings accept, with the password redis-py sends.
    url = _env(containers(minimal)["taubot-worker"])["TAUBOT_REDIS_URL"].replace("$(TAUBOT_REDIS_PASSWORD)", password)
    assert urlsplit(Settings(redis_url=url).redis_url).password == password


def test_an_existing_secret_replaces_the_generated_password() -> None:
    values = {**MINIMAL, "redis": {"auth": {"existingSecret": "platform-redis", "existingSecretPasswordKey": "pw"}}}
    docs = render(values)
    assert "taubot-redis" not in by_kind(docs, "Secret")
    command, env = _redis_server(docs)
    assert "--requirepass" in command
    ref = {"name": "platform-redis", "key": "pw"}
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == ref
    assert {name: _redis_password_ref(spec) for name, spec in containers(docs).items()} == {
        name: ref for name in ("taubot-bot", "taubot-worker", "taubot-monitor")}
    assert helm.lint(str(CHART), values=values, strict=True, namespace=NS)["errors"] == []


PLATFORM_REDIS_PEERS = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "platform"}},
                         "podSelector": {"matchLabels": {"app.kubernetes.io/name": "redis"}}}]
PLATFORM = {"networkPolicy": {"egress": {"redis": {"peers": PLATFORM_REDIS_PEERS}}}}


def test_the_platforms_redis_takes_tls_and_a_password_from_a_secret() -> None:
    values = {**MINIMAL, **PLATFORM, "redis": {"enabled": False, "url": "rediss://redis.platform.svc:6380/1",
                                               "auth": {"existingSecret": "platform-redis"}}}
    docs = render(values)
    assert not by_kind(docs, "StatefulSet") and not by_kind(docs, "Secret")
    for name, spec in containers(docs).items():
        assert _redis_password_ref(spec) == {"name": "platform-redis", "key": "password"}, name
        assert _env(spec)["TAUBOT_REDIS_URL"] == "rediss://:$(TAUBOT_REDIS_PASSWORD)@redis.platform.svc:6380/1"
    plain = containers(render({**MINIMAL, **PLATFORM,
                               "redis": {"enabled": False, "url": "rediss://redis.platform.svc:6380/1"}}))
    assert all("TAUBOT_REDIS_PASSWORD" not in _env(spec) for spec in plain.values())


# --- lint fails where render fails (issue 38) -------------------------------------------------
# `helm lint` renders the templates in lint mode, where `required` and `fail` only log: a value set
# the templates refuse passed `lint --strict`. So every refusal the templates make is also a rule of
# values.schema.json, which lint and install both apply first. Each row: the values, what the
# schema says (naming the value to set), what the template's own guard says when the schema is
# skipped (`--skip-schema-validation`), exactly.
WITH_PEERS = {"egress": {"redis": {"peers": [{"ipBlock": {"cidr": "10.20.0.5/32"}}]}}}
BROKEN: list[tuple[str, dict[str, Any], str, str]] = [
    ("no image", {**MINIMAL, "image": {"repository": ""}}, "at '/image/repository': minLength: got 0, want 1",
     "image.repository is required: build the image from the Dockerfile and push it (see the README, "
     "Install on a cluster)"),
    ("http without a signing secret", {**MINIMAL, "slack": {"signingSecretKey": ""}},
     "at '/slack/signingSecretKey': minLength: got 0, want 1",
     "slack.signingSecretKey is required with bot.mode: http (Slack signs every request)"),
    ("http without a host", {**MINIMAL, "ingress": {"host": ""}}, "at '/ingress/host': minLength: got 0, want 1",
     "ingress.host is required with bot.mode: http and ingress.enabled: the public host Slack calls "
     "(or bot.mode: socket, which needs no Ingress)"),
    ("nobody may reach the bot", {**MINIMAL, "networkPolicy": {"botFrom": []}},
     "at '/networkPolicy/botFrom': minItems: got 0, want 1",
     "networkPolicy.botFrom must name who may reach the bot's port (the Ingress controller's namespace or pods)"),
    ("nobody to impersonate", {**MINIMAL, "identity": {"map_by_email": True}},
     "at '/identity/users': minProperties: got 0, want 1",
     "rbac.impersonate: no user to impersonate is named (rbac.impersonate.users, or identity.users). Name them, "
     "or set rbac.impersonate.unbounded: true to let the worker impersonate anyone (system: groups included)"),
    ("a system: user", {**MINIMAL, "identity": {"users": {"U012A": {"user": "system:admin"}}}},
     "at '/identity/users/U012A/user': 'not' failed",
     'impersonating "system:admin" is refused: a system: user is never impersonated'),
    ("a system: group", {**MINIMAL, "identity": {"users": {"U012A": {"user": "a@example.com"}},
                                                  "usergroups": {"S012": "system:nodes"}}},
     "at '/identity/usergroups/S012': 'not' failed",
     'impersonating group "system:nodes" is refused: a system: group is never impersonated '
     "(system:masters bypasses RBAC)"),
    ("MLflow user without password", {**MINIMAL, "mlflow": {"existingSecret": "taubot-mlflow", "usernameKey": "u"}},
     "at '/mlflow/passwordKey': minLength: got 0, want 1",
     "mlflow.usernameKey and mlflow.passwordKey go together (HTTP Basic needs both)"),
    ("MLflow keys without a Secret", {**MINIMAL, "mlflow": {"tokenKey": "token"}},
     "at '/mlflow/existingSecret': minLength: got 0, want 1",
     "mlflow.existingSecret is required with mlflow.usernameKey/passwordKey/tokenKey"),
    ("MLflow Secret without keys", {**MINIMAL, "mlflow": {"existingSecret": "taubot-mlflow"}},
     "at '/mlflow/tokenKey': minLength: got 0, want 1",
     "mlflow.existingSecret needs mlflow.usernameKey and passwordKey, or tokenKey"),
    ("Redis URL with a password beside a Secret's",
     {**MINIMAL, "networkPolicy": WITH_PEERS, "redis": {"enabled": False, "url": "redis://:old@redis.platform.svc:6379/0",
                                                         "auth": {"existingSecret": "platform-redis"}}},
     "at '/redis/url': 'redis://:old@redis.platform.svc:6379/0' does not match pattern",
     "redis.auth.existingSecret needs redis.url as redis://host:port/db or rediss://host:port/db with no password "
     "in it (the chart adds the Secret's)"),
    ("Redis URL Secret beside a password Secret",
     {**MINIMAL, "networkPolicy": WITH_PEERS, "redis": {"enabled": False, "url": "redis://redis.platform.svc:6379/0",
                                                         "urlSecret": {"name": "taubot-redis"},
                                                         "auth": {"existingSecret": "platform-redis"}}},
     "at '/redis/urlSecret/name': maxLength: got 12, want 0",
     "redis.auth.existingSecret and redis.urlSecret are exclusive: a URL from a Secret carries its own password"),
    ("the platform's Redis, nowhere", {**MINIMAL, "redis": {"enabled": False, "url": "redis://redis.platform.svc:6379/0"}},
     "at '/networkPolicy/egress/redis/peers': minItems: got 0, want 1",
     "networkPolicy.egress.redis.peers is required with redis.enabled: false: where the platform's Redis is "
     "(an ipBlock, or a namespaceSelector and podSelector)"),
]


@pytest.fixture(scope="module")
def chart_without_schema(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart as `--skip-schema-validation` sees it: its templates' own guards only."""
    copy = tmp_path_factory.mktemp("chart") / "taubot"
    shutil.copytree(CHART, copy, ignore=shutil.ignore_patterns("values.schema.json"))
    return copy


@pytest.mark.parametrize(("values", "schema_says", "template_says"), [row[1:] for row in BROKEN],
                         ids=[row[0] for row in BROKEN])
def test_lint_fails_where_render_fails_naming_the_value(values: dict[str, Any], schema_says: str,
                                                        template_says: str, chart_without_schema: Path) -> None:
    with pytest.raises(helm.HelmError) as failed:
        render(values)
    assert schema_says in str(failed.value)
    report = helm.lint(str(CHART), values=values, strict=True, namespace=NS)
    assert any(schema_says in error for error in report["errors"]), report["errors"]
    with pytest.raises(helm.HelmError) as guarded:
        render(values, chart_dir=chart_without_schema)
    assert template_says in str(guarded.value)


def test_every_template_guard_has_its_schema_rule() -> None:
    """A new `required` or `fail` in a template without a row above (and so, likely, without a
    schema rule) fails here: lint would pass the values it refuses."""
    text = "\n".join(p.read_text() for p in sorted((CHART / "templates").iterdir()))
    guards = re.findall(r'(?:required|fail) \(?(?:printf )?"((?:[^"\\]|\\.)*)"', text)
    assert len(guards) >= 12
    said = [row[3] for row in BROKEN]
    for guard in guards:
        pattern = re.escape(guard.replace('\\"', '"')).replace("%q", '"[^"]+"')
        assert any(re.fullmatch(pattern, s) for s in said), f"no broken value set for the guard {guard!r}"


def test_the_defaults_fail_both_ways_naming_what_to_set() -> None:
    """The chart's own values.yaml, unchanged: both `helm template` and `helm lint --strict` refuse it,
    each naming every value a first install must set."""
    needed = ["at '/image/repository'", "at '/ingress/host'", "at '/identity/users'"]
    with pytest.raises(helm.HelmError) as failed:
        render({})
    assert all(n in str(failed.value) for n in needed), str(failed.value)
    errors = "\n".join(helm.lint(str(CHART), values={}, strict=True, namespace=NS)["errors"])
    assert all(n in errors for n in needed), errors


# --- NetworkPolicies: each component reaches only what it uses (issue 38) -----------------------
KUBE_DNS = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
             "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]
BUNDLED_REDIS = [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "redis", "app.kubernetes.io/instance": "taubot",
                                                  "app.kubernetes.io/component": "redis"}}}]
PUBLIC = [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                                      "100.64.0.0/10", "169.254.0.0/16"]}},
          {"ipBlock": {"cidr": "::/0", "except": ["fc00::/7", "fe80::/10"]}}]
PRIVATE = [{"ipBlock": {"cidr": c}} for c in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                                               "fc00::/7")]
RELEASE_NS = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}}]


def _egress(policy: dict[str, Any]) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """Egress rules as {(port, …): peers}; a rule without `to` (anywhere) fails here."""
    rules = {}
    for rule in policy["spec"]["egress"]:
        assert rule.get("to"), rule
        ports = tuple(p["port"] if p["protocol"] == "TCP" else f"{p['port']}/{p['protocol']}" for p in rule["ports"])
        rules[ports] = rule["to"]
    return rules


def _ingress(policy: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    return [(p["port"], rule["from"]) for rule in policy["spec"]["ingress"] for p in rule["ports"]]


def test_each_component_reaches_only_what_it_uses(minimal: list[dict[str, Any]]) -> None:
    policies = by_kind(minimal, "NetworkPolicy")
    assert set(policies) == {"taubot-bot", "taubot-worker", "taubot-monitor", "taubot-redis"}
    for component in ("bot", "worker", "monitor"):
        spec = policies[f"taubot-{component}"]["spec"]
        assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == component
        assert spec["policyTypes"] == ["Ingress", "Egress"]
    # No cluster to read the API server's endpoints from (helm template): the private ranges.
    common = {("53/UDP", 53): KUBE_DNS, (6379,): BUNDLED_REDIS, (443,): PUBLIC}
    assert _egress(policies["taubot-bot"]) == common  # the bot never calls Kubernetes
    for component in ("worker", "monitor"):
        assert _egress(policies[f"taubot-{component}"]) == {**common, (443, 6443): PRIVATE}, component
    assert _ingress(policies["taubot-bot"]) == [("http", [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "ingress-nginx"}}}]), ("http", RELEASE_NS)]  # /slack/events; /metrics
    assert _ingress(policies["taubot-worker"]) == _ingress(policies["taubot-monitor"]) == [("metrics", RELEASE_NS)]
    redis = policies["taubot-redis"]["spec"]
    assert redis["egress"] == [] and _ingress(policies["taubot-redis"]) == [("redis", [{"podSelector": {
        "matchLabels": {"app.kubernetes.io/name": "taubot", "app.kubernetes.io/instance": "taubot"}}}])]
    socket = by_kind(render({**MINIMAL, "bot": {"replicas": 1, "mode": "socket"}}), "NetworkPolicy")
    assert _ingress(socket["taubot-bot"]) == [("metrics", RELEASE_NS)]  # no rule for a port nobody calls
    assert "taubot-monitor" not in by_kind(render({**MINIMAL, "monitor": {"enabled": False, "replicas": 1}}),
                                           "NetworkPolicy")


MLFLOW_DESCRIPTOR = (DESCRIPTOR % {"name": "vision", "ns": "team-vision"}) + """\
  experiments: {mlflow: {uri: "https://mlflow.example.com:5443"}}
  logs:
    kusto: {cluster: aks-east-prod, endpoint: "https://aks-east-prod.eastus.kusto.windows.net", database: logs}
"""
IN_CLUSTER_MLFLOW = (DESCRIPTOR % {"name": "nlp", "ns": "team-nlp"}) + """\
  experiments: {mlflow: {uri: "http://mlflow.mlflow.svc:5000"}}
"""


def _notes(values: dict[str, Any]) -> str:
    with helm.Chart.load(str(CHART)) as chart:
        return chart.render(values, name="taubot", namespace=NS)["taubot/templates/NOTES.txt"]


def test_the_internet_is_public_addresses_on_the_ports_taubot_calls() -> None:
    values = {**MINIMAL, "workspaces": {"vision.yaml": MLFLOW_DESCRIPTOR, "nlp.yaml": IN_CLUSTER_MLFLOW},
              "slack": {"apiUrl": "http://slack-proxy.example.com:8080/api/"}}
    policies = by_kind(render(values), "NetworkPolicy")
    # The bot: Slack only (its proxy's port); the worker and the monitor: the descriptors' MLflow too.
    assert _egress(policies["taubot-bot"])[(443, 8080)] == PUBLIC
    assert _egress(policies["taubot-worker"])[(443, 8080, 5443)] == PUBLIC
    # An in-cluster MLflow is no public address: its port is not opened to the internet; the notes say so.
    assert not [ports for ports in _egress(policies["taubot-worker"]) if 5000 in ports]
    notes = _notes(values)
    assert "http://mlflow.mlflow.svc:5000 is inside the cluster" in notes
    assert "networkPolicy.egress.extra" in notes
    extra = [{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mlflow"}}}],
              "ports": [{"port": 5000, "protocol": "TCP"}]}]
    proxied = {**values, "networkPolicy": {"egress": {"internet": {"cidrs": ["203.0.113.0/24"]}, "extra": extra}}}
    policies = by_kind(render(proxied), "NetworkPolicy")
    worker = _egress(policies["taubot-worker"])
    assert worker[(443, 8080, 5443)] == [{"ipBlock": {"cidr": "203.0.113.0/24"}}]  # no except on named ranges
    assert worker[(5000,)] == extra[0]["to"]
    assert _egress(policies["taubot-bot"])[(5000,)] == extra[0]["to"]


def test_the_platforms_redis_is_reached_where_the_values_say(full: list[dict[str, Any]]) -> None:
    worker = _egress(by_kind(full, "NetworkPolicy")["taubot-worker"])
    assert worker[(6379,)] == [{"podSelector": {"matchLabels": {"app": "redis"}}}]
    tls = render({**MINIMAL, **PLATFORM, "redis": {"enabled": False, "url": "rediss://redis.platform.svc:6380/1"}})
    assert _egress(by_kind(tls, "NetworkPolicy")["taubot-bot"])[(6380,)] == PLATFORM_REDIS_PEERS  # the URL's port


def test_dns_metrics_and_bot_peers_come_from_values() -> None:
    controller = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress"}},
                   "podSelector": {"matchLabels": {"app.kubernetes.io/name": "traefik"}}}]
    prometheus = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    node_local_dns = [{"ipBlock": {"cidr": "169.254.20.10/32"}}]
    docs = render({**MINIMAL, "networkPolicy": {"botFrom": controller, "metricsFrom": prometheus,
                                                "egress": {"dns": node_local_dns}}})
    policies = by_kind(docs, "NetworkPolicy")
    assert _ingress(policies["taubot-bot"]) == [("http", controller), ("http", prometheus)]
    assert _ingress(policies["taubot-monitor"]) == [("metrics", prometheus)]
    assert _egress(policies["taubot-worker"])[("53/UDP", 53)] == node_local_dns
    render({**MINIMAL, "bot": {"replicas": 1, "mode": "socket"}, "networkPolicy": {"botFrom": []}})  # unused there


# kube-apiserver's own EndpointSlice for the kubernetes Service (pkg/controlplane/reconcilers/
# endpointsadapter.go, endpointSliceFromEndpoints): named after the Service, labelled with it,
# the Endpoints' first subset's ports (name https) and ready addresses.
API_SERVER_SLICE = {
    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
    "metadata": {"name": "kubernetes", "namespace": "default",
                 "labels": {"kubernetes.io/service-name": "kubernetes"}},
    "addressType": "IPv4",
    "endpoints": [{"addresses": ["10.224.0.4"], "conditions": {"ready": True}},
                  {"addresses": ["10.224.0.5"], "conditions": {"ready": True}}],
    "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
}


def test_the_api_server_is_its_endpoints_read_at_install() -> None:
    """`helm install` (a render against the cluster) reads the API server's endpoints and opens
    exactly those to the worker and the monitor; named CIDRs need no read."""
    from tests.fakes.kube_api import running_emulator

    with running_emulator([API_SERVER_SLICE]) as emu, \
            helm.Config(kube_apiserver=emu.base_url, kube_token="installer", namespace=NS) as config, \
            helm.Chart.load(str(CHART)) as chart:
        installed = config.render(chart, MINIMAL, name="taubot", namespace=NS, is_install=True)
        # One GET of the slice (and the discovery that maps its kind), for the policies and the notes each.
        assert {r.path for r in emu.requests_to("/apis/discovery.k8s.io/v1/")} == {
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes"}
        assert all(r.method == "GET" for r in emu.requests)
        emu.clear_requests()
        named = config.render(chart, {**MINIMAL, "networkPolicy": {"egress": {"apiServer": {
            "cidrs": ["10.224.0.0/28"], "ports": [443]}}}}, name="taubot", namespace=NS, is_install=True)
        assert not emu.requests_to("/apis/discovery.k8s.io/v1/namespaces")
    policies = {d["metadata"]["name"]: d for d in yaml.safe_load_all(installed["taubot/templates/networkpolicy.yaml"]) if d}
    endpoints = [{"ipBlock": {"cidr": "10.224.0.4/32"}}, {"ipBlock": {"cidr": "10.224.0.5/32"}}]
    for component in ("worker", "monitor"):
        assert _egress(policies[f"taubot-{component}"])[(6443,)] == endpoints
    assert not [ports for ports in _egress(policies["taubot-bot"]) if 6443 in ports]
    assert "10.224.0.4/32, 10.224.0.5/32 on 6443" in installed["taubot/templates/NOTES.txt"]
    assert "could not be read" not in installed["taubot/templates/NOTES.txt"]
    named_policies = {d["metadata"]["name"]: d for d in yaml.safe_load_all(named["taubot/templates/networkpolicy.yaml"])
                      if d}
    assert _egress(named_policies["taubot-worker"])[(443,)] == [{"ipBlock": {"cidr": "10.224.0.0/28"}}]
    # Offline (helm template): the private ranges, and the notes say what to set.
    notes = _notes(MINIMAL)
    assert "could not be read at install" in notes and "networkPolicy.egress.apiServer.cidrs" in notes


def test_buttons_are_signed_in_every_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Socket Mode has no signing secret to sign buttons with: the chart hands every process the
    Slack Secret's button-signing-key, so the settings taubot loads from the pod's files have a
    button key (a card without one carries no buttons). In http mode the signing secret does,
    unless slack.buttonSigningKeyKey names a key of its own; a key the config names wins, once."""
    socket = containers(render({**MINIMAL, "bot": {"replicas": 1, "mode": "socket"}}))
    for spec in socket.values():
        assert _env(spec)["TAUBOT_BUTTON_SIGNING_KEY_FILE"] == "/run/secrets/taubot-slack/button-signing-key"
    secret = {"bot-token": "xoxb-1-2-3", "app-token": "xapp-1-A1-2-3", "button-signing-key": "9f86d081884c7d65"}
    for key, value in secret.items():
        (tmp_path / key).write_text(value + "\n")
    for name, value in _env(socket["taubot-worker"]).items():
        if name.startswith("TAUBOT_SLACK_") or name.startswith("TAUBOT_BUTTON_"):
            monkeypatch.setenv(name, value.replace("/run/secrets/taubot-slack", str(tmp_path)))
    assert Settings().button_key() == b"9f86d081884c7d65"
    http = containers(render(MINIMAL))
    assert all("TAUBOT_BUTTON_SIGNING_KEY_FILE" not in _env(spec) for spec in http.values())  # the signing secret
    own = containers(render({**MINIMAL, "slack": {"buttonSigningKeyKey": "buttons"}}))
    assert {_env(spec)["TAUBOT_BUTTON_SIGNING_KEY_FILE"] for spec in own.values()} == {"/run/secrets/taubot-slack/buttons"}
    named = {**MINIMAL, "bot": {"replicas": 1, "mode": "socket"},
             "config": {"TAUBOT_BUTTON_SIGNING_KEY_FILE": "/etc/keys/buttons"}}
    for spec in containers(render(named)).values():
        names = [e["name"] for e in spec["containers"][0]["env"]]
        assert names.count("TAUBOT_BUTTON_SIGNING_KEY_FILE") == 1
        assert _env(spec)["TAUBOT_BUTTON_SIGNING_KEY_FILE"] == "/etc/keys/buttons"


def test_the_readme_install_creates_every_secret_the_chart_reads() -> None:
    """Followed as written, README "Install on a cluster" creates each Secret (and each key) the
    rendered chart mounts or names, besides the Redis password the chart makes itself: a pod
    would otherwise wait on a missing volume, or Slack meet a certificate nobody made."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Install on a cluster"):readme.index("**Metrics**")]
    command = section.replace("\\\n", " ")
    created: dict[str, set[str]] = {}
    for kind, name, rest in re.findall(r"kubectl -n taubot create secret (generic|tls) (\S+)(.*)", command):
        literals = set(re.findall(r"--from-literal=([^=\s]+)=", rest))
        created[name] = literals if kind == "generic" else {"tls.crt", "tls.key"}
    values = yaml.safe_load(re.search(r"cat > taubot-values.yaml <<'VALUES'\n(.*?)\nVALUES\n", readme, re.S).group(1))
    docs = render(values)
    generated = set(by_kind(docs, "Secret"))
    needed: dict[str, set[str]] = {}
    [ingress] = by_kind(docs, "Ingress").values()
    for tls in ingress["spec"]["tls"]:
        needed.setdefault(tls["secretName"], set()).update({"tls.crt", "tls.key"})
    for spec in containers(docs).values():
        mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
        for volume in spec["volumes"]:
            if "secret" in volume:
                keys = {v.rsplit("/", 1)[1] for v in _env(spec).values()
                        if v.startswith(mounts[volume["name"]] + "/")}
                needed.setdefault(volume["secret"]["secretName"], set()).update(keys)
        for entry in spec["containers"][0]["env"]:
            if ref := entry.get("valueFrom", {}).get("secretKeyRef"):
                needed.setdefault(ref["name"], set()).add(ref["key"])
    for name, keys in needed.items():
        if name not in generated:
            assert keys <= created.get(name, set()), (name, keys, created)
    assert needed["taubot-slack"] == {"bot-token", "signing-secret"} and "taubot-tls" in needed
