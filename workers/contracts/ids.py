"""Slack and taubot ids, as patterns: validated wherever they enter a request."""

from __future__ import annotations

import hashlib
import re
from typing import Annotated

from pydantic import Field

SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,}$")
SLACK_CHANNEL = re.compile(r"^[CGD][A-Z0-9]{2,}$")
RECORD_ID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
WATCH_ID = re.compile(r"^watch-[0-9a-f]{24}$")

SlackUserId = Annotated[str, Field(pattern=SLACK_USER.pattern)]
SlackChannelId = Annotated[str, Field(pattern=SLACK_CHANNEL.pattern)]


def watch_id(channel: str, workspace: str, run: str) -> str:
    """One watch per (channel, workspace, run): two workspaces may each have a run of one
    name, and a watch must never be joined across them. An rq-safe id (`[A-Za-z0-9_-]`)."""
    return "watch-" + hashlib.sha256(f"{channel}\0{workspace}\0{run}".encode()).hexdigest()[:24]



# Block Kit action ids of taubot's card buttons (the front end routes presses by them).
ESCALATE_ACTION = "taubot_escalate"
MUTE_ACTION = "taubot_mute"
VALIDATE_NODES_ACTION = "taubot_validate_nodes"
STOP_WATCHING_ACTION = "stop_watching"
DETAILS_ACTION = "taubot_details"  # issue 27: the rest of a phase card, posted in its thread
OPEN_STATUS_ACTION = "taubot_open_status"  # issue 37: a runs list's menu, `/tau status <run>` as the presser
HOME_REFRESH_ACTION = "taubot_home_refresh"  # issue 37: the App Home tab's Refresh


__all__ = ["DETAILS_ACTION", "ESCALATE_ACTION", "HOME_REFRESH_ACTION", "MUTE_ACTION", "OPEN_STATUS_ACTION",
           "RECORD_ID", "SLACK_CHANNEL", "SLACK_USER",
           "STOP_WATCHING_ACTION", "VALIDATE_NODES_ACTION", "WATCH_ID",
           "SlackChannelId", "SlackUserId", "watch_id"]
