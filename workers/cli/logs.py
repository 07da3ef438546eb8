"""`taubot logs RUN --workspace W --as U …`: the CLI twin of `/tau logs` (SPEC §7a).

Exit 0 when a source answered (its lines printed), 1 when every source was
unavailable (the reasons on stderr, and in `unavailable` with
`--format json`), 2 on bad input.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .errors import UsageError
from .registry import subcommand


def cmd_logs(args: Any) -> int:
    import asyncio

    from workers.collect.logs.model import shareable
    from workers.collect.logs.sources import logs_live
    from workers.contracts.commands import DNS1123_LABEL, MAX_LOG_TAIL
    from workers.plumbing.clock import SystemClock

    from .live import identity_from, registry_from

    if not DNS1123_LABEL.match(args.run):
        raise UsageError(f"invalid run name {args.run!r}: a run name is a DNS-1123 label")
    if not 1 <= args.tail <= MAX_LOG_TAIL:
        raise UsageError(f"invalid --tail {args.tail}: between 1 and {MAX_LOG_TAIL} lines")
    identity = identity_from(args)
    if identity is None:
        raise UsageError("logs needs --as USER [--as-group G]… (taubot never reads logs as itself "
                         "for a user)")
    # The same door as Slack's and MCP's: a terminal's log is pasted into tickets and chats too.
    result = shareable(asyncio.run(logs_live(registry_from(args), run=args.run, identity=identity,
                                             now=SystemClock().now(), workspace=args.workspace,
                                             tail=args.tail, previous=args.previous)))
    if args.format == "json":
        print(json.dumps(result.contract(), ensure_ascii=False))
    else:
        if result.answered:
            where = "/".join(x for x in (result.pod, result.container) if x)
            print(f"# {result.run}: {result.source} {where}" + (" (older lines exist)" if result.truncated
                                                                  else ""), file=sys.stderr)
        for line in result.lines:
            print(f"{line.time} {line.text}" if line.time else line.text)
    for reason in result.unavailable:
        print(f"taubot: {'tried' if result.answered else 'unavailable'}: {reason}", file=sys.stderr)
    return 0 if result.answered else 1


@subcommand
def add(sub: Any) -> None:
    p = sub.add_parser("logs", help="a run's log: Ray driver log, Job pod log, or Azure Data Explorer")
    p.add_argument("run", help="run name (RayJob or Job)")
    p.add_argument("--workspace", required=True, help="the workspace of the run")
    p.add_argument("--workspaces-dir", help="directory of WorkspaceConnection descriptors")
    p.add_argument("--as", dest="as_user", metavar="USER", help="impersonate USER (as kubectl)")
    p.add_argument("--as-group", dest="as_groups", action="append", default=[], metavar="GROUP")
    p.add_argument("--tail", type=int, default=200, help="lines (default 200, at most 5000)")
    p.add_argument("--previous", action="store_true", help="the previous (crashed) container's log")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_logs)


__all__ = ["add"]
