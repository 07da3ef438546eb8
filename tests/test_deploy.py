"""Contracts of deploy/: RBAC, Slack app manifest and the Helm chart's names.

helm is not available where these tests run, so templates are not rendered;
plain YAML files are parsed and templates are checked as text for the names
other parts of taubot rely on (commands, paths, TAUBOT_* variables).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from workers.settings import ENV_PREFIX, Settings

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
CHART = DEPLOY / "helm" / "taubot"
TEMPLATES = CHART / "templates"
EVENTS_URL = "https://taubot.example.com/slack/events"


def load_all(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def template(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def plain_yaml_files() -> list[Path]:
    return sorted(
        p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml") and TEMPLATES not in p.parents
    )


@pytest.mark.parametrize("path", plain_yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_plain_yaml_parses(path: Path) -> None:
    assert load_all(path), f"{path} is empty"


def test_expected_files_exist() -> None:
    names = {str(p.relative_to(DEPLOY)) for p in plain_yaml_files()}
    assert {
        "rbac.yaml",
        "slack-app-manifest.yaml",
        "helm/taubot/Chart.yaml",
        "helm/taubot/values.yaml",
    } <= names


# --- RBAC ------------------------------------------------------------------------------


def cluster_role(name: str) -> dict[str, Any]:
    roles = [d for d in load_all(DEPLOY / "rbac.yaml") if d["kind"] == "ClusterRole"]
    return next(r for r in roles if r["metadata"]["name"] == name)


def test_impersonation_role_impersonates_users_and_groups_only() -> None:
    rules = cluster_role("taubot-impersonator")["rules"]
    granted = {(res, verb) for r in rules for res in r["resources"] for verb in r["verbs"]}
    assert granted == {("users", "impersonate"), ("groups", "impersonate")}
    assert all(r["apiGroups"] == [""] for r in rules)


def test_stall_monitor_role_is_read_only_and_complete() -> None:
    rules = cluster_role("taubot-stall-monitor")["rules"]
    assert {v for r in rules for v in r["verbs"]} == {"get", "list", "watch"}
    resources = {res for r in rules for res in r["resources"]}
    assert {
        "workloads",
        "pods",
        "events",
        "rayjobs",
        "rayclusters",
        "jobs",
        "resourceclaims",
    } <= resources


def test_both_roles_are_bound_to_the_chart_service_account() -> None:
    values = load_all(CHART / "values.yaml")[0]
    bindings = [d for d in load_all(DEPLOY / "rbac.yaml") if d["kind"] == "ClusterRoleBinding"]
    assert {b["roleRef"]["name"] for b in bindings} == {
        "taubot-impersonator",
        "taubot-stall-monitor",
    }
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": values["serviceAccount"]["name"], "namespace": "taubot"}
        ]


# --- Slack app manifest ----------------------------------------------------------------


def test_slack_manifest_contract() -> None:
    manifest = load_all(DEPLOY / "slack-app-manifest.yaml")[0]
    (command,) = manifest["features"]["slash_commands"]
    assert command["command"] == "/tau"
    assert command["url"] == EVENTS_URL
    assert command["usage_hint"].startswith("status <run>")
    settings = manifest["settings"]
    assert settings["interactivity"] == {"is_enabled": True, "request_url": EVENTS_URL}
    assert settings["socket_mode_enabled"] is False
    assert set(manifest["oauth_config"]["scopes"]["bot"]) == {
        "commands",
        "chat:write",
        "chat:write.public",
        "users:read",
        "users:read.email",
        "usergroups:read",
        "im:write",
        "files:write",  # /tau logs attaches the tail (files_upload_v2)
        "files:read",  # /tau validate <file link> (files.info + url_private_download)
    }


def test_slack_manifest_usage_hint_names_every_command_of_the_grammar() -> None:
    from workers.contracts.commands import USAGE

    manifest = load_all(DEPLOY / "slack-app-manifest.yaml")[0]
    (command,) = manifest["features"]["slash_commands"]
    hint = command["usage_hint"]
    for verb in USAGE:
        head = " ".join(verb.split()[:2]) if verb.startswith("cluster") else verb
        assert head in hint, f"/tau {verb} is missing from the manifest's usage_hint"


# --- Helm chart ------------------------------------------------------------------------


def test_chart_metadata_and_no_bundled_redis() -> None:
    chart = load_all(CHART / "Chart.yaml")[0]
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "taubot"
    assert "dependencies" not in chart
    assert load_all(CHART / "values.yaml")[0]["redis"]["url"].startswith("redis://")


def test_bot_deployment_serves_http_on_3000_with_healthz() -> None:
    text = template("deployment-bot.yaml")
    assert "name: taubot-bot" in text
    assert 'command: ["taubot", "serve", "http", "--port", "{{ .Values.bot.port }}"]' in text
    assert text.count("path: /healthz") == 2, "readiness and liveness"
    assert load_all(CHART / "values.yaml")[0]["bot"]["port"] == 3000


def test_worker_deployment_runs_the_worker() -> None:
    text = template("deployment-worker.yaml")
    assert "name: taubot-worker" in text
    assert 'command: ["taubot", "worker"]' in text


def test_ingress_exposes_only_slack_events() -> None:
    text = template("ingress.yaml")
    assert re.findall(r"path: (\S+)", text) == ["/slack/events"]


def test_secrets_are_files_not_env_values() -> None:
    helpers = template("_helpers.tpl")
    for variable in (
        "TAUBOT_SLACK_BOT_TOKEN_FILE",
        "TAUBOT_SLACK_SIGNING_SECRET_FILE",
        "TAUBOT_SLACK_APP_TOKEN_FILE",
    ):
        assert f"name: {variable}" in helpers
    assert "name: TAUBOT_SLACK_BOT_TOKEN\n" not in helpers


def test_every_taubot_variable_in_the_chart_is_a_setting() -> None:
    """A misspelt variable would be silently ignored by pydantic-settings; catch it here."""
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    known |= {name + "_FILE" for name in known}
    values = load_all(CHART / "values.yaml")[0]
    used = set(values["config"])
    for path in TEMPLATES.iterdir():
        used |= set(re.findall(r"\bTAUBOT_[A-Z_]+\b", path.read_text(encoding="utf-8")))
    assert used - known == set()


@pytest.mark.parametrize("path", sorted(TEMPLATES.iterdir()), ids=lambda p: p.name)
def test_template_actions_are_balanced(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count("{{") == text.count("}}"), path.name
