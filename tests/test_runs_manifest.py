"""The Slack app manifest carries the App Home tab and its event (issue 37), in the template
(`deploy/slack-app-manifest-{http,socket}.yaml`) and in what `taubot config init` writes from it
(`workers/cli/config.py` `slack_manifest`), for both modes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from workers.cli.config import slack_manifest

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


@pytest.mark.parametrize(("mode", "host"), [("http", "tau.example.org"), ("socket", None)])
def test_the_manifest_has_the_home_tab_and_app_home_opened(mode: str, host: str | None) -> None:
    template = yaml.safe_load((DEPLOY / f"slack-app-manifest-{mode}.yaml").read_text())
    for manifest in (template, yaml.safe_load(slack_manifest(mode, host))):
        assert manifest["features"]["app_home"]["home_tab_enabled"] is True
        events = manifest["settings"]["event_subscriptions"]
        assert "app_home_opened" in events["bot_events"]
        if mode == "http":
            assert events["request_url"].endswith("/slack/events")
        else:  # Socket Mode: the events come over the socket, no request URL
            assert "request_url" not in events
        assert "runs" in manifest["features"]["slash_commands"][0]["usage_hint"]
    written = yaml.safe_load(slack_manifest(mode, host))
    if host:
        assert written["settings"]["event_subscriptions"]["request_url"] == f"https://{host}/slack/events"
    else:
        assert written["settings"]["socket_mode_enabled"] is True
