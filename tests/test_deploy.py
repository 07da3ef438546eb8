"""Contracts of deploy/ that are plain files: the Slack app manifest, Chart.yaml and values.yaml.

The chart itself is rendered and linted in tests/test_helm_chart.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

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
        "slack-app-manifest-http.yaml",
        "slack-app-manifest-socket.yaml",
        "helm/taubot/Chart.yaml",
        "helm/taubot/values.yaml",
    } <= names


# --- Slack app manifests: one app, two ways to reach it ----------------------------------------

MODES = ("http", "socket")
SCOPES = {
    "commands",
    "chat:write",
    "chat:write.public",
    "users:read",
    "users:read.email",
    "usergroups:read",
    "im:write",
    "files:write",  # /tau logs attaches the tail (files_upload_v2)
    "files:read",  # /tau validate <file link> (files.info + url_private_download)
    "channels:history",  # the monitor's reconciliation after a crash mid-post
    "groups:history",
}


def manifest(mode: str) -> dict[str, Any]:
    return load_all(DEPLOY / f"slack-app-manifest-{mode}.yaml")[0]


def urls(node: Any, path: str = "") -> dict[str, str]:
    """Every url / request_url key in the manifest, by its path."""
    found: dict[str, str] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("url", "request_url"):
                found[f"{path}.{key}"] = value
            found |= urls(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            found |= urls(item, f"{path}[{i}]")
    return found


@pytest.mark.parametrize("mode", MODES)
def test_each_manifest_carries_what_its_mode_needs(mode: str) -> None:
    app = manifest(mode)
    (command,) = app["features"]["slash_commands"]
    assert command["command"] == "/tau" and command["usage_hint"].startswith("status <run>")
    assert app["features"]["app_home"]["home_tab_enabled"] is True  # the Home tab (issue 37)
    settings = app["settings"]
    assert settings["event_subscriptions"]["bot_events"] == ["app_home_opened"]
    assert settings["interactivity"]["is_enabled"] is True  # buttons
    assert set(app["oauth_config"]["scopes"]["bot"]) == SCOPES
    if mode == "http":
        assert settings["socket_mode_enabled"] is False
        assert urls(app) == {".features.slash_commands[0].url": EVENTS_URL,
                             ".settings.event_subscriptions.request_url": EVENTS_URL,
                             ".settings.interactivity.request_url": EVENTS_URL}
    else:  # Slack delivers everything over the socket and takes no request URL from such an app
        assert settings["socket_mode_enabled"] is True
        assert urls(app) == {}


def test_the_two_manifests_are_one_app() -> None:
    """Apart from how Slack reaches it, the HTTP and the Socket Mode app are the same: a scope or an
    event added to one and not the other fails here."""

    def without_transport(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: without_transport(v) for k, v in node.items()
                    if k not in ("url", "request_url", "socket_mode_enabled")}
        if isinstance(node, list):
            return [without_transport(v) for v in node]
        return node

    assert without_transport(manifest("http")) == without_transport(manifest("socket"))


@pytest.mark.parametrize("mode", MODES)
def test_slack_manifest_usage_hint_names_every_command_of_the_grammar(mode: str) -> None:
    from workers.contracts.commands import USAGE

    (command,) = manifest(mode)["features"]["slash_commands"]
    hint = command["usage_hint"]
    for verb in USAGE:
        head = " ".join(verb.split()[:2]) if verb.startswith("cluster") else verb
        assert head in hint, f"/tau {verb} is missing from the manifest's usage_hint"
