"""`taubot mcp`: taubot's diagnosis as Model Context Protocol tools, over stdio (issue 37).

An AI assistant (an MCP client: Claude Desktop, an IDE, k8sgpt's or HolmesGPT's hosts) starts
`taubot mcp --as you@example.com [--as-group G]… [--workspace W]` as a subprocess and calls:

* `diagnose(run, workspace?)` — what `taubot diagnose RUN --workspace W --format json` prints;
* `runs(workspace?, all?)` — `{"runs": <taubot runs --format json>, "could_not_read": {kind: why}}`;
* `logs(run, tail?)` — what `taubot logs RUN --format json` prints;
* `validate(manifest)` — what `taubot validate FILE --format json` prints, for the text given.

Who reads: exactly as the CLI — the kubeconfig's credentials impersonating the `--as` identity
given when the server was started, never an identity a tool call names (a model can ask for a
run, not for another person's RBAC), and never the bot's Slack-side credentials. A read the
identity may not make says "permission denied" in the answer, as on a card.

Every string of an answer passes the same door as Slack's (`workers.outside.text.outside`:
controls stripped, secrets redacted) before it reaches the client: a model's context is as much
"outside" as a channel. Bad input (a run name that is not a DNS-1123 label, a workspace that
does not resolve) is the tool's error, one line, never a traceback.

Built on the official `mcp` SDK's `MCPServer` (mcp 2.x; FastMCP in 1.x). The SDK is imported
only when the command runs.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .errors import UsageError
from .registry import subcommand

INSTRUCTIONS = (
    "taubot diagnoses TauGrid training runs (Kubernetes Jobs and KubeRay RayJobs queued by Kueue), "
    "layer by layer: `runs` lists the runs with the first lifecycle phase that is not done; `diagnose` "
    "walks one run's phases and says who owns the fix and what to do next; `logs` reads its log; "
    "`validate` checks a manifest and dry-runs it. Everything is read as the user who started this "
    "server, with their RBAC.")


def scrubbed(value: Any) -> Any:
    """Every string of a JSON document through the one door for outside text."""
    from workers.outside.text import outside

    if isinstance(value, str):
        return str(outside(value))
    if isinstance(value, list):
        return [scrubbed(v) for v in value]
    if isinstance(value, dict):
        return {str(outside(k)): scrubbed(v) for k, v in value.items()}
    return value


def _dumps(doc: Any) -> str:
    return json.dumps(scrubbed(doc), indent=2, ensure_ascii=False)


def build_server(args: argparse.Namespace) -> Any:
    """The MCP server with taubot's four tools, reading as the `--as` identity."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from workers.collect.investigate import diagnose_live
    from workers.collect.logs.sources import logs_live
    from workers.contracts.commands import DNS1123_LABEL, MAX_LOG_TAIL
    from workers.flows.runs import live_runs
    from workers.kube.client import KubeClients
    from workers.plumbing.clock import SystemClock
    from workers.validation.live import validate_text
    from workers.validation.manifest import MAX_MANIFEST_BYTES

    from .live import _identity_or_self, identity_from, registry_from

    identity = _identity_or_self(identity_from(args))  # the CLI's rule: --as, or no live reads
    default_workspace = args.workspace
    server = MCPServer("taubot", instructions=INSTRUCTIONS)

    def name(value: str | None, what: str) -> str | None:
        if value is None or value == "":
            return None
        if not DNS1123_LABEL.match(value):
            raise ToolError(f"invalid {what} {value[:80]!r}: a DNS-1123 label "
                            "(lowercase letters, digits, '-')")
        return value

    @server.tool(description="Diagnose one training run: its lifecycle phases, the first that is not done, "
                 "the owner of the fix and the next action (the JSON of `taubot diagnose --format json`).")
    async def diagnose(run: str, workspace: str | None = None) -> str:
        run_name = name(run, "run name")
        report = await diagnose_live(registry_from(args), run=run_name or "", identity=identity,
                                     now=SystemClock().now(),
                                     workspace=name(workspace, "workspace name") or default_workspace)
        return _dumps(report.diagnosis.contract())

    @server.tool(description="List the runs of a workspace's namespace, stuck and failed first, one verdict "
                 "each (yours, by the taugrid.io/submitted-by annotation; all=true for everyone's).")
    async def runs(workspace: str | None = None, all: bool = False) -> str:  # noqa: A002 - the tool's word
        listed = await live_runs(registry_from(args), KubeClients(), identity, SystemClock().now(),
                                 workspace=name(workspace, "workspace name") or default_workspace,
                                 everyone=all)
        if listed.layer_report is not None:
            raise ToolError(f"layer {listed.layer_report.layer} failed: {listed.layer_report.summary}")
        return _dumps({"runs": listed.as_json(), "could_not_read": listed.gaps})

    @server.tool(description="The log of a run: the Ray driver log, the Job pod's, or Azure Data Explorer "
                 "(the JSON of `taubot logs --format json`).")
    async def logs(run: str, tail: int = 200) -> str:
        if not 1 <= tail <= MAX_LOG_TAIL:
            raise ToolError(f"invalid tail {tail}: between 1 and {MAX_LOG_TAIL} lines")
        result = await logs_live(registry_from(args), run=name(run, "run name") or "", identity=identity,
                                 now=SystemClock().now(), workspace=default_workspace, tail=tail)
        return _dumps(result.contract())

    @server.tool(description="Check a Job or RayJob manifest (YAML or JSON) before submitting it, and "
                 "dry-run it on the API server (the JSON of `taubot validate --format json`).")
    async def validate(manifest: str) -> str:
        if len(manifest.encode("utf-8", errors="replace")) > MAX_MANIFEST_BYTES:
            raise ToolError(f"the manifest is over {MAX_MANIFEST_BYTES // 1024} KiB")
        report = await validate_text(registry_from(args), manifest, workspace=default_workspace,
                                     identity=identity)
        return _dumps(report.model_dump(mode="json"))

    return server


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        server = build_server(args)
    except ModuleNotFoundError as exc:
        raise UsageError(f"taubot mcp needs the mcp package ({exc.name} is missing): "
                         "pip install mcp") from None
    server.run("stdio")
    return 0


@subcommand
def add(sub: Any) -> None:
    p = sub.add_parser("mcp", help="serve taubot's diagnosis as MCP tools over stdio (for AI assistants)")
    p.add_argument("--as", dest="as_user", metavar="USER", help="impersonate USER (as kubectl): whose RBAC "
                   "every tool reads with")
    p.add_argument("--as-group", dest="as_groups", action="append", default=[], metavar="GROUP")
    p.add_argument("--workspace", help="the default workspace of the tools (default: the only descriptor)")
    p.add_argument("--workspaces-dir", help="directory of WorkspaceConnection descriptors")
    p.set_defaults(func=cmd_mcp)
