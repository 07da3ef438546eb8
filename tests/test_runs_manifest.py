"""The Slack app manifest carries the App Home tab and its event (issue 37), in the template
(`deploy/slack-app-manifest.yaml`) and in what `taubot config init` writes from it
(`workers/cli/config.py` `slack_manifest`), for both modes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from workers.cli.config import slack_manifest

TEMPLATE = Path(__file__).resolve().parents[1] / "deploy" / "slack-app-manifest.yaml"


@pytest.mark.parametrize(("mode", "host"), [("http", "tau.example.org"), ("socket", None)])
def test_the_manifest_has_the_home_tab_and_app_home_opened(mode: str, host: str | None) -> None:
    for manifest in (yaml.safe_load(TEMPLATE.read_text()), yaml.safe_load(slack_manifest(mode, host))):
        assert manifest["features"]["app_home"]["home_tab_enabled"] is True
        events = manifest["settings"]["event_subscriptions"]
        assert "app_home_opened" in events["bot_events"]
        assert events["request_url"].endswith("/slack/events")
        assert "runs" in manifest["features"]["slash_commands"][0]["usage_hint"]
    written = yaml.safe_load(slack_manifest(mode, host))
    if host:
        assert written["settings"]["event_subscriptions"]["request_url"] == f"https://{host}/slack/events"
    else:
        assert written["settings"]["socket_mode_enabled"] is True
