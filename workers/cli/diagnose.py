"""`taubot diagnose` and `taubot examples`: the phase tree from a dump, a bundled example, or live.

Bad input is the user's, not a crash: it exits 2 with one line on stderr and
no traceback. A diagnosis that was made exits 0 whatever it found.
`--from-file` never imports the Kubernetes client (cold start matters here).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from workers.collect.dumps import load_snapshot_file, parse_snapshot, with_queue_position
from workers.collect.logs.files import read_log, read_log_file, read_pod_logs
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.models import Diagnosis, LogEvidence
from workers.diagnosis.snapshot import SnapshotError
from workers.plumbing.clock import SystemClock
from workers.render.tree_text import render_text

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


def example_names() -> list[str]:
    folder = resources.files("workers") / "examples"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def load_example(name: str) -> tuple[str, str | None, list[dict]]:
    """An example dump, the run it is about and the time it is meant to be judged at.

    Both come from the List's `taugrid.io/example-run` / `example-now` annotations.
    """
    if name not in example_names():
        raise UsageError(f"no example {name!r}; examples: {', '.join(example_names())}")
    text = (resources.files("workers") / "examples" / f"{name}.json").read_text(encoding="utf-8")
    doc = json.loads(text)
    notes = (doc.get("metadata") or {}).get("annotations") or {}
    run = notes.get("taugrid.io/example-run") or name
    return run, notes.get("taugrid.io/example-now"), parse_snapshot(text, source=f"example {name}")


def _emit(d: Diagnosis, fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(d.contract(), indent=2, ensure_ascii=False))
    else:
        print(render_text(d))


def _require_one_namespace(objects: list[dict], run: str, namespace: str | None) -> None:
    """Two runs of one name in different namespaces: which one was meant is the user's to say."""
    if namespace is not None:
        return
    found = sorted({(o.get("metadata") or {}).get("namespace") or "" for o in objects
                    if o.get("kind") in ("RayJob", "Job") and (o.get("metadata") or {}).get("name") == run})
    if len(found) > 1:
        raise UsageError(f"the dump holds runs named {run} in namespaces {', '.join(found)}: "
                         "pass --namespace to say which")


_POD_FILE = re.compile(r"^(?P<pod>[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?)=(?P<file>.+)$")


def _log_evidence(args: argparse.Namespace) -> LogEvidence | None:
    """``--logs FILE`` as `kubectl logs --timestamps` printed it (`-` is standard input), streamed:
    a run's whole log stays bounded in memory (workers/collect/logs/files.py). ``--logs POD=FILE``,
    once per pod, gives every rank's log (SPEC §5c); the two forms are not mixed."""
    values = args.logs or []
    if not values:
        return None
    per_pod = [_POD_FILE.match(v) for v in values]
    if any(per_pod) and not all(per_pod):
        raise UsageError("--logs takes either one LOGFILE (the run's log) or POD=FILE once per pod, not both")
    if not all(per_pod):
        if len(values) > 1:
            raise UsageError("--logs LOGFILE is the run's one log: give it once (or POD=FILE for each pod)")
        return _one_log(values[0])
    pairs = [(m["pod"], m["file"]) for m in per_pod if m]
    if len({pod for pod, _f in pairs}) != len(pairs):
        raise UsageError("--logs POD=FILE names a pod twice")
    streams = []
    try:
        for pod, name in pairs:
            try:
                streams.append((pod, Path(name).open("rb")))  # noqa: SIM115 - closed below
            except OSError as exc:
                raise UsageError(f"cannot read --logs {pod}={name}: {exc.strerror or exc}") from None
        return read_pod_logs(streams)
    finally:
        for _pod, stream in streams:
            stream.close()


def _one_log(name: str) -> LogEvidence:
    try:
        if name == "-":
            return read_log(sys.stdin.buffer, name="-")
        with Path(name).open("rb") as stream:
            return read_log_file(stream, name=name)
    except OSError as exc:
        raise UsageError(f"cannot read --logs {name}: {exc.strerror or exc}") from None


def cmd_diagnose(args: argparse.Namespace) -> int:
    if args.run_profile and (args.from_file or args.example is not None or not args.workspace):
        raise UsageError("--run-profile needs a live cluster (--workspace)")
    if args.example is not None:
        run, example_now, objects = load_example(args.example)
        now = parse_now(args.now or example_now)
        if args.run:
            run = valid_run_name(args.run)
        print(f"# example {args.example!r} (a bundled dump); run: {run}", file=sys.stderr)
        _emit(with_queue_position(evaluate(objects, run, now, args.namespace)), args.format)
        return 0
    now = parse_now(args.now)
    if not args.run:
        raise UsageError("diagnose needs RUN (or --example [NAME] for a bundled dump)")
    run = valid_run_name(args.run)
    if args.from_file:
        try:
            objects = load_snapshot_file(args.from_file)
        except SnapshotError as exc:
            raise UsageError(str(exc)) from None
        _require_one_namespace(objects, run, args.namespace)
        d = with_queue_position(evaluate(objects, run, now, args.namespace, logs=_log_evidence(args),
                                         stall_seconds=args.stall_minutes * 60))
        _emit(d, args.format)
        write_charts(args, d, now)
        return 0
    if not args.workspace:
        raise UsageError("diagnose needs --from-file DUMP or --workspace W")
    from .live import diagnose_live  # the live path pulls in the Kubernetes client

    return diagnose_live(args, run, now, _emit)



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
    e.set_defaults(func=lambda args: print("\n".join(example_names())) or 0)

