"""Requests: who asked what, where — the payload of every queued job.

Each request names the job that serves it (``job``, a dotted path that rq and
the shell's inline queue both resolve), so a front end enqueues by name and
never imports worker code. No secrets travel here: the identity is the user's
Kubernetes name and groups, which the cluster's audit log records anyway.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from .commands import (
    LogsCommand,
    NodesValidateCommand,
    RunsCommand,
    StatusCommand,
    TopologyValidateCommand,
    ValidateCommand,
    WorkspaceConnectionCommand,
    WorkspaceStatusCommand,
)
from .identity import Identity
from .ids import RECORD_ID, SLACK_CHANNEL, SLACK_USER, WATCH_ID

JOBS = "workers.jobs"


class CommandRequest(BaseModel):
    """A slash command as a job receives it."""

    model_config = ConfigDict(frozen=True)
    job: ClassVar[str]
    retried: ClassVar[bool] = True

    identity: Identity
    channel: str = Field(pattern=SLACK_CHANNEL.pattern)
    user: str = Field(pattern=SLACK_USER.pattern, description="Mentioned in the parent message")
    response_url: str | None = None
    requested_at: datetime

    def display(self) -> str:
        return self.command.display()  # type: ignore[attr-defined]


class StatusRequest(CommandRequest):
    job: ClassVar[str] = f"{JOBS}.status_job"
    command: StatusCommand


class RunsRequest(CommandRequest):
    """`/tau runs`: LISTs only, so a retry after an outage is harmless."""

    job: ClassVar[str] = f"{JOBS}.runs_job"
    command: RunsCommand


class HomeRequest(BaseModel):
    """An App Home visit (or its Refresh): publish the user's runs list in their Home tab."""

    model_config = ConfigDict(frozen=True)
    job: ClassVar[str] = f"{JOBS}.home_job"
    retried: ClassVar[bool] = False  # the next visit publishes again

    user: str = Field(pattern=SLACK_USER.pattern)
    identity: Identity
    workspace: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    refresh: bool = False  # the Refresh button: past the minute's cache
    requested_at: datetime
    response_url: str | None = None  # a visit has none; the failure callback reads the field

    def display(self) -> str:
        return f"home {self.user}"


class WorkspaceRequest(CommandRequest):
    job: ClassVar[str] = f"{JOBS}.workspace_job"
    command: WorkspaceConnectionCommand | WorkspaceStatusCommand


class LogsRequest(CommandRequest):
    job: ClassVar[str] = f"{JOBS}.logs_job"
    command: LogsCommand


class ClusterRequest(CommandRequest):
    job: ClassVar[str] = f"{JOBS}.cluster_job"
    retried: ClassVar[bool] = False  # a retry of `validate nodes` would create its pods again
    command: TopologyValidateCommand | NodesValidateCommand


class ValidateRequest(CommandRequest):
    """`/tau validate`: reads and a dry run only, so a retry after an outage is harmless."""

    job: ClassVar[str] = f"{JOBS}.validate_job"
    command: ValidateCommand


class EscalateRequest(BaseModel):
    """One Escalate press: the signed record id, the clicker and as whom they act."""

    model_config = ConfigDict(frozen=True)
    job: ClassVar[str] = f"{JOBS}.escalate_job"
    retried: ClassVar[bool] = False  # a retry after a half-done escalation could post twice

    record_id: str = Field(pattern=RECORD_ID.pattern)
    user: str = Field(pattern=SLACK_USER.pattern)
    identity: Identity
    response_url: str | None = None
    channel: str | None = None
    message_ts: str | None = None
    thread_ts: str | None = None
    pressed_at: datetime

    def display(self) -> str:
        return f"escalate {self.record_id}"


class RecordPressRequest(BaseModel):
    """A press on a button whose value is a signed record id: the id, the presser and as whom
    they act. Not retried: each press job acts once (a mute, validation pods)."""

    model_config = ConfigDict(frozen=True)
    job: ClassVar[str]
    retried: ClassVar[bool] = False
    verb: ClassVar[str]

    record_id: str = Field(pattern=RECORD_ID.pattern)
    user: str = Field(pattern=SLACK_USER.pattern)
    identity: Identity
    response_url: str | None = None
    channel: str | None = None
    message_ts: str | None = None  # where the press was: checked against where the button was offered
    thread_ts: str | None = None

    def display(self) -> str:
        return f"{self.verb} {self.record_id}"


class ValidateNodesRequest(RecordPressRequest):
    """*Validate these nodes* on a layer-6 card: the pods are created as the presser, never as
    the bot; a retry would create them again."""

    job: ClassVar[str] = f"{JOBS}.validate_nodes_press_job"
    verb: ClassVar[str] = "validate nodes"


class MuteRequest(RecordPressRequest):
    """*Mute 24 h* on an auto-post."""

    job: ClassVar[str] = f"{JOBS}.mute_job"
    verb: ClassVar[str] = "mute"


class DetailsRequest(RecordPressRequest):
    """*Details* on a phase card (issue 27): the rest of the card, posted in its thread."""

    job: ClassVar[str] = f"{JOBS}.details_job"
    verb: ClassVar[str] = "details"


class StopRequest(BaseModel):
    """A Stop watching press: who pressed, and as whom they act (None when unmapped)."""

    model_config = ConfigDict(frozen=True)
    job: ClassVar[str] = f"{JOBS}.stop_job"
    retried: ClassVar[bool] = False

    watch: str = Field(pattern=WATCH_ID.pattern)
    user: str = Field(pattern=SLACK_USER.pattern)
    channel: str
    identity: Identity | None = None
    response_url: str | None = None
    message_ts: str | None = None  # the card pressed on: only the watch's own card stops it

    def display(self) -> str:
        return f"stop {self.watch}"


Request = (StatusRequest | RunsRequest | HomeRequest
           | WorkspaceRequest | LogsRequest | ClusterRequest | EscalateRequest
           | StopRequest | MuteRequest | ValidateNodesRequest | DetailsRequest)

__all__ = ["ClusterRequest", "CommandRequest", "DetailsRequest", "EscalateRequest", "HomeRequest",
           "LogsRequest", "RunsRequest",
           "MuteRequest",
           "RecordPressRequest", "Request", "StatusRequest", "StopRequest", "ValidateNodesRequest",
           "WorkspaceRequest"]
