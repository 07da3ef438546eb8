"""`taubot runs`: the runs of a workspace's namespace (or of a dump), one line each (issue 37).

The same lines as `/tau runs`: live as the `--as` identity (the CLI's rule: taubot never reads
for a user under its own identity), or `--from-file DUMP [--now T]`, every run of the dump
(`--all` implied: a dump says nothing about who is asking). `--format json` prints a list of
`{run, namespace, kind, first_incomplete, state, layer, owner, summary, …}`. The kinds that could
not be read are named on stderr and in the text; layers 1–2 failing exits 1. The flow (and with it
the Kubernetes client) is imported only when the command runs: building the parser of any
subcommand loads no client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from workers.collect.dumps import load_snapshot_file
from workers.diagnosis.snapshot import SnapshotError
from workers.render.runs_card import age

from .diagnose import parse_now
from .errors import UsageError
from .registry import subcommand

if TYPE_CHECKING:
    from workers.flows.runs import RunsList


def runs_from_file(path: str, now: datetime, *, namespace: str | None = None,
                   stuck_only: bool = False) -> RunsList:
    """Every run of a dump, judged as `/tau runs --all` judges a namespace's."""
    from workers.flows.runs import RunsList, arrange, judge_runs  # imported when run: parsing loads no client

    try:
        objects = load_snapshot_file(path)
    except SnapshotError as exc:
        raise UsageError(str(exc)) from None
    lines, counts = arrange(judge_runs(objects, {}, now, namespace=namespace), now, user=None, everyone=True,
                            stuck_only=stuck_only)
    return RunsList(workspace=None, namespace=namespace, lines=lines, everyone=True,
                    old_finished=counts["old_finished"])


def runs_live(args: argparse.Namespace, now: datetime) -> RunsList:
    """As the `--as` identity, exactly as `taubot diagnose --workspace` reads."""
    from workers.flows.runs import live_runs
    from workers.kube.client import KubeClients

    from .live import _identity_or_self, identity_from, registry_from

    identity = _identity_or_self(identity_from(args))
    return asyncio.run(live_runs(registry_from(args), KubeClients(), identity, now, workspace=args.workspace,
                                 everyone=args.all, stuck_only=args.stuck))


def text_lines(listed: RunsList, now: datetime) -> list[str]:
    out = []
    for line in listed.lines:
        phase = line.first_incomplete or ("succeeded" if line.group == "finished" else "all phases done")
        by = f"  by {line.submitted_by}" if line.submitted_by else ""
        out.append(f"{line.group:<8} {line.run}  {line.kind}  {age(line.created, now)}  "
                   f"{phase} ({line.state}): {line.summary}  [owner {line.owner}]{by}")
    for kind, why in listed.gaps.items():
        out.append(f"could not read {kind}: {why}")
    if listed.old_finished:
        out.append(f"{listed.old_finished} finished more than 24 h ago not shown")
    if not listed.lines:
        if listed.suggest_all:
            out.append("no run carries taugrid.io/submitted-by, so yours cannot be told: try --all")
        elif listed.others:
            out.append(f"none of the {listed.others} runs here is yours: try --all")
        else:
            out.append("no runs")
    return out


def as_document(listed: RunsList) -> list[dict[str, Any]]:
    return listed.as_json()


def cmd_runs(args: argparse.Namespace) -> int:
    now = parse_now(args.now)
    if args.from_file:
        listed = runs_from_file(args.from_file, now, namespace=args.namespace, stuck_only=args.stuck)
    elif args.workspace or args.as_user:
        listed = runs_live(args, now)
    else:
        raise UsageError("runs needs --workspace W (live, with --as USER) or --from-file DUMP")
    if listed.layer_report is not None:
        report = listed.layer_report
        print(f"taubot: layer {report.layer} failed: {report.summary}", file=sys.stderr)
        if args.format == "json":
            print(json.dumps({"error": report.model_dump(mode="json")}, indent=2, ensure_ascii=False))
        return 1
    for kind, why in listed.gaps.items():
        print(f"taubot: could not read {kind}: {why}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps(as_document(listed), indent=2, ensure_ascii=False))
    else:
        print("\n".join(text_lines(listed, now)))
    return 0


@subcommand
def add(sub: Any) -> None:
    r = sub.add_parser("runs", help="the runs of a workspace (or a dump), one line each, stuck first")
    r.add_argument("--workspace", help="the workspace whose namespace to list (live)")
    r.add_argument("--workspaces-dir", help="directory of WorkspaceConnection descriptors")
    r.add_argument("--as", dest="as_user", metavar="USER", help="impersonate USER (as kubectl)")
    r.add_argument("--as-group", dest="as_groups", action="append", default=[], metavar="GROUP",
                   help="impersonate GROUP (repeatable)")
    r.add_argument("--all", action="store_true", help="everyone's runs, not only those submitted by --as")
    r.add_argument("--stuck", action="store_true", help="only the stuck and failed runs")
    r.add_argument("--from-file", metavar="DUMP", help="kubectl get -o json|yaml output: every run in it")
    r.add_argument("--namespace", "-n", help="with --from-file: only this namespace")
    r.add_argument("--now", help="judge time-based rules as of this ISO 8601 time")
    r.add_argument("--format", choices=("text", "json"), default="text")
    r.set_defaults(func=cmd_runs)
