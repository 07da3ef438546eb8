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
        "slack-app-manifest.yaml",
        "helm/taubot/Chart.yaml",
        "helm/taubot/values.yaml",
    } <= names


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
        "channels:history",  # the monitor's reconciliation after a crash mid-post
        "groups:history",
    }


def test_slack_manifest_usage_hint_names_every_command_of_the_grammar() -> None:
    from workers.contracts.commands import USAGE

    manifest = load_all(DEPLOY / "slack-app-manifest.yaml")[0]
    (command,) = manifest["features"]["slash_commands"]
    hint = command["usage_hint"]
    for verb in USAGE:
        head = " ".join(verb.split()[:2]) if verb.startswith("cluster") else verb
        assert head in hint, f"/tau {verb} is missing from the manifest's usage_hint"


