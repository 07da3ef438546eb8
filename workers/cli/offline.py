"""The offline half of `taubot diagnose`: a dump (`--from-file`), a bundled example (`--example`,
`taubot examples`), and the logs given with them (`--logs`).

Kept apart from `diagnose.py` as the live half is (`live.py`): a live status imports neither the
dump parsers (rapidyaml, the Kubernetes List readers) nor the log-file readers it never uses
(25 ms of a cold `taubot diagnose --workspace`, issue 36), and `--from-file` never imports the
Kubernetes client.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime
from importlib import resources
from pathlib import Path

from workers.collect.dumps import load_snapshot_file, parse_snapshot, with_queue_position
from workers.collect.logs.files import read_log, read_log_file, read_pod_logs
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.models import Diagnosis, LogEvidence
from workers.diagnosis.snapshot import SnapshotError

from .errors import UsageError


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


def read_dump(path: str, run: str, namespace: str | None) -> list[dict]:
    """The objects of a `kubectl get -o json|yaml` dump, for ``run``; bad input is a `UsageError`."""
    try:
        objects = load_snapshot_file(path)
    except SnapshotError as exc:
        raise UsageError(str(exc)) from None
    _require_one_namespace(objects, run, namespace)
    return objects


def judge(objects: list[dict], run: str, now: datetime, namespace: str | None, *,
          args: argparse.Namespace | None = None) -> Diagnosis:
    """The phase tree of ``run`` in ``objects`` as of ``now``, with its queue position; with
    ``args``, the logs (`--logs`) and the stall threshold (`--stall-minutes`) they give."""
    if args is None:
        return with_queue_position(evaluate(objects, run, now, namespace))
    return with_queue_position(evaluate(objects, run, now, namespace, logs=_log_evidence(args),
                                        stall_seconds=args.stall_minutes * 60))


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


__all__ = ["example_names", "judge", "load_example", "read_dump"]
