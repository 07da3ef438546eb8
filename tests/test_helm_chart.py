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
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import helm_python as helm  # helm-python-sdk, in the test extras: a missing one fails, never skips
import pytest
import yaml

from workers.cli import build_parser
from workers.config.settings import ENV_PREFIX, Settings
from workers.monitor.cache import KINDS

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
        "Ingress/taubot-bot", "NetworkPolicy/taubot", "NetworkPolicy/taubot-redis",
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
    [binding] = by_kind(minimal, "ClusterRoleBinding").values()
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "taubot-worker", "namespace": NS}]
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
    assert "no user to impersonate is named" in str(refused.value)
    assert "rbac.impersonate.unbounded: true" in str(refused.value)
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
    ({**MINIMAL, "identity": {"users": {"U1": {"user": "a@example.com", "groups": ["system:masters"]}}}},
     'impersonating group "system:masters" is refused'),
    ({**MINIMAL, "identity": {"users": {"U1": {"user": "a@example.com"}}, "usergroups": {"S1": "system:nodes"}}},
     'impersonating group "system:nodes" is refused'),
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
    to_redis = next(r for r in by_kind(minimal, "NetworkPolicy")["taubot"]["spec"]["egress"]
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
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "taubot"]
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


def test_network_policy_and_pdbs(minimal: list[dict[str, Any]], full: list[dict[str, Any]]) -> None:
    policy = by_kind(minimal, "NetworkPolicy")["taubot"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    egress_ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert egress_ports == {53, 6379, 443, 6443}
    ingress_ports = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert ingress_ports == {"http", "metrics"}
    [full_policy] = by_kind(full, "NetworkPolicy").values()  # the platform's Redis: no policy of its own
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
    ({**MINIMAL, "redis": {"enabled": False, "url": "http://redis:6379"}}, "/redis/url"),
    ({**MINIMAL, "bot": {"replicas": 1, "mode": "websocket"}}, "/bot/mode"),
    ({"workspaces": MINIMAL["workspaces"], "identity": IDENTITY}, "image.repository is required"),
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


@pytest.mark.parametrize(("mlflow", "said"), [
    ({"existingSecret": "taubot-mlflow", "usernameKey": "username"}, "go together"),
    ({"usernameKey": "username", "passwordKey": "password"}, "mlflow.existingSecret is required"),
    ({"existingSecret": "taubot-mlflow"}, "needs mlflow.usernameKey and passwordKey, or tokenKey"),
    ({"existingSecret": "taubot-mlflow", "user": "x"}, "/mlflow"),
])
def test_half_an_mlflow_configuration_fails_at_install(mlflow: dict[str, Any], said: str) -> None:
    with pytest.raises(helm.HelmError) as failed:
        render({**MINIMAL, "mlflow": mlflow})
    assert said in str(failed.value)


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


def test_the_platforms_redis_takes_tls_and_a_password_from_a_secret() -> None:
    values = {**MINIMAL, "redis": {"enabled": False, "url": "rediss://redis.platform.svc:6380/1",
                                   "auth": {"existingSecret": "platform-redis"}}}
    docs = render(values)
    assert not by_kind(docs, "StatefulSet") and not by_kind(docs, "Secret")
    for name, spec in containers(docs).items():
        assert _redis_password_ref(spec) == {"name": "platform-redis", "key": "password"}, name
        assert _env(spec)["TAUBOT_REDIS_URL"] == "rediss://:$(TAUBOT_REDIS_PASSWORD)@redis.platform.svc:6380/1"
    plain = containers(render({**MINIMAL, "redis": {"enabled": False, "url": "rediss://redis.platform.svc:6380/1"}}))
    assert all("TAUBOT_REDIS_PASSWORD" not in _env(spec) for spec in plain.values())
    with pytest.raises(helm.HelmError) as failed:
        render({**MINIMAL, "redis": {"enabled": False, "url": "redis://:old@redis.platform.svc:6379/0",
                                     "auth": {"existingSecret": "platform-redis"}}})
    assert "with no password in it" in str(failed.value)
    with pytest.raises(helm.HelmError) as failed:
        render({**MINIMAL, "redis": {"enabled": False, "urlSecret": {"name": "taubot-redis"},
                                     "auth": {"existingSecret": "platform-redis"}}})
    assert "exclusive" in str(failed.value)


@pytest.mark.parametrize("mode", ["http", "socket"])
@pytest.mark.parametrize("base", [MINIMAL, FULL], ids=["minimal", "full"])
def test_every_network_policy_ingress_rule_names_who_may_connect(base: dict[str, Any], mode: str) -> None:
    docs = render({**base, "bot": {"replicas": 1, "mode": mode}})
    policies = by_kind(docs, "NetworkPolicy")
    assert policies
    for name, policy in policies.items():
        for rule in policy["spec"].get("ingress", []):
            assert rule.get("from"), (name, rule)
    ports = {p["port"]: rule["from"] for rule in policies["taubot"]["spec"]["ingress"] for p in rule["ports"]}
    assert ports["metrics"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}}]
    if mode == "socket":
        assert set(ports) == {"metrics"}  # no rule at all for a port nobody calls
    else:
        assert ports["http"] == [{"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": "ingress-nginx"}}}]


def test_network_policy_peers_come_from_values() -> None:
    controller = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress"}},
                   "podSelector": {"matchLabels": {"app.kubernetes.io/name": "traefik"}}}]
    prometheus = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    docs = render({**MINIMAL, "networkPolicy": {"botFrom": controller, "metricsFrom": prometheus}})
    ports = {p["port"]: rule["from"] for rule in by_kind(docs, "NetworkPolicy")["taubot"]["spec"]["ingress"]
             for p in rule["ports"]}
    assert ports == {"http": controller, "metrics": prometheus}
    with pytest.raises(helm.HelmError) as failed:
        render({**MINIMAL, "networkPolicy": {"botFrom": []}})
    assert "networkPolicy.botFrom must name who may reach the bot's port" in str(failed.value)
    render({**MINIMAL, "bot": {"replicas": 1, "mode": "socket"}, "networkPolicy": {"botFrom": []}})  # unused there
