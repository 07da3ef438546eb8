"""The `/tau` commands as typed values: what a front end parses and a job receives.

Pydantic models because a parsed command travels through Redis inside a
request and must round-trip through JSON unchanged (CONVENTIONS).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MIN_INTERVAL_SECONDS = 5
MAX_INTERVAL_SECONDS = 600

Dns1123 = Annotated[str, Field(pattern=DNS1123_LABEL.pattern, max_length=63)]


class _Command(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StatusCommand(_Command):
    """`/tau status <run> [--watch] [--run-profile] [--workspace W] [--interval N]`."""

    verb: Literal["status"] = "status"
    run: Dns1123
    watch: bool = False
    run_profile: bool = False
    workspace: Dns1123 | None = None
    interval: int | None = Field(default=None, ge=MIN_INTERVAL_SECONDS, le=MAX_INTERVAL_SECONDS)

    def display(self) -> str:
        """The command as the user would retype it, for the parent message and error cards."""
        parts = ["/tau status", self.run]
        if self.workspace:
            parts += ["--workspace", self.workspace]
        if self.watch:
            parts.append("--watch")
        if self.interval is not None:
            parts += ["--interval", str(self.interval)]
        if self.run_profile:
            parts.append("--run-profile")
        return " ".join(parts)


class HelpCommand(_Command):
    """`/tau help [<command>]` (also an empty `/tau`): every command, or one with its flags."""

    verb: Literal["help"] = "help"
    topic: str | None = None  # a key of USAGE, or "workspace" / "cluster validate" for a family


class WorkspaceConnectionCommand(_Command):
    """`/tau workspace connection [--workspace W]`: layer 1 on its own."""

    verb: Literal["workspace connection"] = "workspace connection"
    workspace: Dns1123 | None = None

    def display(self) -> str:
        return "/tau workspace connection" + (f" --workspace {self.workspace}" if self.workspace else "")


class WorkspaceStatusCommand(_Command):
    """`/tau workspace status <name>`: layer 2 on its own."""

    verb: Literal["workspace status"] = "workspace status"
    workspace: Dns1123

    def display(self) -> str:
        return f"/tau workspace status {self.workspace}"


DEFAULT_LOG_TAIL = 200
MAX_LOG_TAIL = 5000


class LogsCommand(_Command):
    """`/tau logs <run> [--tail N] [--previous] [--workspace W]`: the run's log (SPEC §7a)."""

    verb: Literal["logs"] = "logs"
    run: Dns1123
    tail: int = Field(default=DEFAULT_LOG_TAIL, ge=1, le=MAX_LOG_TAIL)
    previous: bool = False
    workspace: Dns1123 | None = None

    def display(self) -> str:
        parts = ["/tau logs", self.run]
        if self.workspace:
            parts += ["--workspace", self.workspace]
        if self.tail != DEFAULT_LOG_TAIL:
            parts += ["--tail", str(self.tail)]
        if self.previous:
            parts.append("--previous")
        return " ".join(parts)


class TopologyValidateCommand(_Command):
    """`/tau cluster validate topology [--profile P] [--workspace W]` (layer 6, read-only)."""

    verb: Literal["cluster validate topology"] = "cluster validate topology"
    profile: Dns1123 | None = None
    workspace: Dns1123 | None = None

    def display(self) -> str:
        parts = ["/tau cluster validate topology"]
        if self.profile:
            parts += ["--profile", self.profile]
        if self.workspace:
            parts += ["--workspace", self.workspace]
        return " ".join(parts)


# Kubernetes label selector syntax: equality (`k=v`, `k==v`, `k!=v`), existence (`k`, `!k`) and
# set-based (`k in (a,b)`, `k notin (a)`) terms, comma-separated — the set-based form is what a
# card suggests for "these nodes" (`kubernetes.io/hostname in (a,b)`).
_KEY, _VALUE = r"[A-Za-z0-9./_-]+", r"[A-Za-z0-9._-]*"
_SELECTOR_TERM = (rf"(?:{_KEY} +(?:in|notin) +\( *{_VALUE}(?: *, *{_VALUE})* *\)"
                  rf"|{_KEY} *(?:==|!=|=) *{_VALUE}|!?{_KEY})")
SELECTOR = re.compile(rf"^{_SELECTOR_TERM}(?: *, *{_SELECTOR_TERM})*$")
LabelSelector = Annotated[str, Field(pattern=SELECTOR.pattern, max_length=300)]


class NodesValidateCommand(_Command):
    """`/tau cluster validate nodes --gpu-class C | --selector S [--min-healthy N] [--timeout 2m]`."""

    verb: Literal["cluster validate nodes"] = "cluster validate nodes"
    selector: LabelSelector
    min_healthy: int | None = Field(default=None, ge=0, le=10000)
    timeout_seconds: int = Field(default=120, ge=10, le=1800)
    workspace: Dns1123 | None = None

    def display(self) -> str:
        parts = ["/tau cluster validate nodes", "--selector", self.selector]
        if self.min_healthy is not None:
            parts += ["--min-healthy", str(self.min_healthy)]
        if self.timeout_seconds != 120:
            parts += ["--timeout", f"{self.timeout_seconds}s"]
        if self.workspace:
            parts += ["--workspace", self.workspace]
        return " ".join(parts)


MAX_MANIFEST_BYTES = 256 * 1024
SLACK_FILE_ID = re.compile(r"^F[A-Z0-9]{6,20}$")


class ValidateCommand(_Command):
    """`/tau validate [--workspace W]` with a manifest pasted in a code block, or a link to a file
    shared in the channel: layer 3 before submitting (a dry run as the user)."""

    verb: Literal["validate"] = "validate"
    workspace: Dns1123 | None = None
    manifest: str | None = Field(default=None, max_length=MAX_MANIFEST_BYTES)
    file_id: str | None = Field(default=None, pattern=SLACK_FILE_ID.pattern)

    def display(self) -> str:
        parts = ["/tau validate"]
        if self.workspace:
            parts += ["--workspace", self.workspace]
        if self.file_id:
            parts.append(f"(file {self.file_id})")
        elif self.manifest is not None:
            lines = self.manifest.count("\n") + 1
            parts.append(f"(pasted manifest, {lines} line{'s' if lines != 1 else ''})")
        return " ".join(parts)


class RunsCommand(_Command):
    """`/tau runs [--workspace W] [--all] [--stuck]`: the caller's runs (``everyone``: all of the
    namespace's), one line each (issue 37)."""

    verb: Literal["runs"] = "runs"
    workspace: Dns1123 | None = None
    everyone: bool = False
    stuck: bool = False

    def display(self) -> str:
        parts = ["/tau runs"]
        if self.workspace:
            parts += ["--workspace", self.workspace]
        if self.everyone:
            parts.append("--all")
        if self.stuck:
            parts.append("--stuck")
        return " ".join(parts)


Command = (StatusCommand | RunsCommand | HelpCommand
           | WorkspaceConnectionCommand | WorkspaceStatusCommand | LogsCommand
           | TopologyValidateCommand | NodesValidateCommand | ValidateCommand)

USAGE: dict[str, str] = {
    "status": "/tau status <run> [--workspace W] [--watch [--interval N]] [--run-profile]",
    "runs": "/tau runs [--workspace W] [--all] [--stuck]",
    "logs": "/tau logs <run> [--tail N] [--previous] [--workspace W]",
    "workspace connection": "/tau workspace connection [--workspace W]",
    "workspace status": "/tau workspace status <workspace>",
    "cluster validate topology": "/tau cluster validate topology [--profile P] [--workspace W]",
    "cluster validate nodes": "/tau cluster validate nodes --gpu-class C | --selector S [--min-healthy N] "
                              "[--timeout 2m]",
    "validate": "/tau validate [--workspace W] <manifest in a code block> | <link to a file shared here>",
    "help": "/tau help [<command>]",
}
DESCRIPTIONS: dict[str, str] = {
    "status": "diagnose a run: the first lifecycle phase that is not done, who owns it, what to do",
    "runs": "your runs at a glance: one line each, stuck and failed first (`--all`: everyone's)",
    "logs": "the run's log: the Ray driver log, the Job pod's, or Azure Data Explorer once they are gone",
    "workspace connection": "check that taubot can reach your workspace's cluster as you (layer 1)",
    "workspace status": "check that a TauWorkspace is Ready (layer 2)",
    "cluster validate topology": "each ready profile's ResourceFlavors have matching Ready nodes (layer 6)",
    "cluster validate nodes": "operator-only: validation pods on GPU nodes, created as you (layer 6)",
    "validate": "before you submit: check a Job or RayJob manifest and dry-run it on the API server as you",
    "help": "this list; `/tau help <command>` explains one command, its flags and an example",
}
