"""`taubot diagnose` and `taubot examples`: the phase tree from a dump, a bundled example, or live.

Bad input is the user's, not a crash: it exits 2 with one line on stderr and
no traceback. A diagnosis that was made exits 0 whatever it found.
Each half imports only what it reads (cold start matters here): a dump or an example
`offline.py` (never the Kubernetes client), a live status `live.py` (never the dump parsers).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import UTC, datetime
from typing import Any

from workers.diagnosis.models import Diagnosis
from workers.plumbing.clock import SystemClock

from .charts import write_charts
from .errors import UsageError
from .registry import subcommand

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DEFAULT_EXAMPLE = "l5-rayjob-head-crashloop"


def valid_run_name(name: str) -> str:
    if not DNS1123_LABEL.match(name):
        raise UsageError(
            f"invalid run name {name!r}: a run name is a DNS-1123 label (lowercase letters, "
            "digits and '-', starting and ending with a letter or digit, at most 63 characters)"
        )
    return name


def parse_now(text: str | None) -> datetime:
    if text is None:
        return SystemClock().now()
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"invalid --now {text!r}: expected ISO 8601, e.g. 2026-11-30T10:30:00Z") from None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def _emit(d: Diagnosis, fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(d.contract(), indent=2, ensure_ascii=False))
    else:
        from workers.render.tree_text import render_text  # the text form only

        print(render_text(d))


def cmd_diagnose(args: argparse.Namespace) -> int:
    if args.run_profile and (args.from_file or args.example is not None or not args.workspace):
        raise UsageError("--run-profile needs a live cluster (--workspace)")
    if args.example is not None:
        from .offline import judge, load_example  # each half imports only what it reads

        run, example_now, objects = load_example(args.example)
        now = parse_now(args.now or example_now)
        if args.run:
            run = valid_run_name(args.run)
        print(f"# example {args.example!r} (a bundled dump); run: {run}", file=sys.stderr)
        _emit(judge(objects, run, now, args.namespace), args.format)
        return 0
    now = parse_now(args.now)
    if not args.run:
        raise UsageError("diagnose needs RUN (or --example [NAME] for a bundled dump)")
    run = valid_run_name(args.run)
    if args.from_file:
        from .offline import judge, read_dump

        d = judge(read_dump(args.from_file, run, args.namespace), run, now, args.namespace, args=args)
        _emit(d, args.format)
        write_charts(args, d, now)
        return 0
    if not args.workspace:
        raise UsageError("diagnose needs --from-file DUMP or --workspace W")
    from .live import diagnose_live  # the live path pulls in the Kubernetes client

    return diagnose_live(args, run, now, _emit)


def _list_examples(_args: argparse.Namespace) -> int:
    from .offline import example_names

    print("\n".join(example_names()))
    return 0



@subcommand
def add(sub: Any) -> None:
    d = sub.add_parser("diagnose", help="walk a run's lifecycle phase tree")
    d.add_argument("run", nargs="?", help="run name (RayJob or Job)")
    d.add_argument("--from-file", metavar="DUMP", help="kubectl get -o json|yaml output")
    d.add_argument("--example", nargs="?", const=DEFAULT_EXAMPLE, metavar="NAME",
                   help=f"diagnose a bundled example dump (default {DEFAULT_EXAMPLE})")
    d.add_argument("--namespace", "-n", help="namespace of the run (default: any)")
    d.add_argument("--now", help="judge time-based rules as of this ISO 8601 time")
    d.add_argument("--format", choices=("text", "json"), default="text")
    d.add_argument("--workspace", help="collect live from this workspace's cluster")
    d.add_argument("--workspaces-dir", help="directory of WorkspaceConnection descriptors")
    d.add_argument("--as", dest="as_user", metavar="USER", help="impersonate USER (as kubectl)")
    d.add_argument("--as-group", dest="as_groups", action="append", default=[], metavar="GROUP",
                   help="impersonate GROUP (repeatable)")
    d.add_argument("--save-snapshot", metavar="FILE", help="write the collected snapshot here")
    d.add_argument("--logs", metavar="LOGFILE|POD=FILE", action="append",
                   help="the run's log as `kubectl logs --timestamps` prints it (Runtime progress); or "
                   "POD=FILE, repeated once per pod, for every rank's log (the culprit rank)")
    d.add_argument("--stall-minutes", type=int, default=20,
                   help="no progress for longer than this is a stall (default 20)")
    d.add_argument("--charts", metavar="DIR",
                   help="write the loss curve (and with --run-profile the GPU strip) as PNGs into DIR")
    d.add_argument("--run-profile", action="store_true",
                   help="add live GPU telemetry from dcgm-exporter (needs --workspace)")
    d.set_defaults(func=cmd_diagnose)

    e = sub.add_parser("examples", help="list the bundled example dumps")
    e.set_defaults(func=_list_examples)

