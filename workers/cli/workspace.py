"""`taubot workspace connection|status|check`: layers 1 and 2 on their own, as `--as`."""

from __future__ import annotations

from typing import Any

from .registry import Parser, subcommand


def cmd_workspace(args: Any) -> int:
    from .live import cmd_workspace as run  # the live checks pull in the Kubernetes client

    return run(args)


@subcommand
def add(sub: Any) -> None:
    w = sub.add_parser("workspace", help="layer 1–2 checks of a workspace")
    wsub = w.add_subparsers(dest="workspace_command", required=True, parser_class=Parser)
    conn = wsub.add_parser("connection", help="layer 1: descriptor, reachability, access")
    conn.add_argument("--workspace", help="workspace name (default: the only descriptor)")
    conn.add_argument("--offline", action="store_true", help="check only local descriptor resolution")
    for name, text in (("status", "layer 2: TauWorkspace readiness and PVC blob-training"),
                       ("check", "like status, but exit non-zero unless Ready")):
        p = wsub.add_parser(name, help=text)
        p.add_argument("name", help="workspace name")
    for p in (conn, wsub.choices["status"], wsub.choices["check"]):
        p.add_argument("--workspaces-dir", help="directory of WorkspaceConnection descriptors")
        p.add_argument("--as", dest="as_user", metavar="USER", help="impersonate USER")
        p.add_argument("--as-group", dest="as_groups", action="append", default=[], metavar="GROUP")
        p.add_argument("--format", choices=("text", "json"), default="text")
    w.set_defaults(func=cmd_workspace)

