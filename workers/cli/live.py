"""The live half of the CLI: `diagnose --workspace` and `workspace connection|status|check`.

Kept apart from `cli.py` so `--from-file` never imports the Kubernetes client.
As kubectl does, `--as`/`--as-group` choose whom to impersonate; without
`--as` the CLI runs as the kubeconfig's own user (the operator at a terminal).
In Slack the identity always comes from the mapping instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from workers.collect.investigate import diagnose_live as collect_and_evaluate
from workers.collect.workspace import check_connection, workspace_status
from workers.config.workspaces import Registry, load_descriptors
from workers.diagnosis.checks import LayerReport
from workers.diagnosis.models import Diagnosis
from workers.diagnosis.snapshot import as_kube_list
from workers.kube.client import Identity
from workers.render.profile import render_profile_text

from .charts import write_charts
from .errors import UsageError

STATE_MARKS = {"ok": "✔", "failed": "✖", "warning": "!", "skipped": "–"}


CliInputError = UsageError  # reported by cli.main as one line, exit 2


def registry_from(args: argparse.Namespace) -> Registry:
    directory = getattr(args, "workspaces_dir", None) or os.environ.get("TAUBOT_WORKSPACES_DIR")
    return load_descriptors(directory)


def identity_from(args: argparse.Namespace) -> Identity | None:
    if getattr(args, "as_groups", None) and not getattr(args, "as_user", None):
        raise CliInputError("--as-group needs --as USER (as with kubectl)")
    if not getattr(args, "as_user", None):
        return None
    return Identity(user=args.as_user, groups=tuple(args.as_groups))


def _identity_or_self(identity: Identity | None) -> Identity:
    """Without --as the CLI speaks for the kubeconfig user; that is still an explicit identity."""
    if identity is not None:
        return identity
    user = os.environ.get("USER") or "cli-user"
    raise CliInputError(f"live checks need --as USER [--as-group G]… (e.g. --as {user}@example.com); "
                        "taubot never acts under its own identity for a user")


def diagnose_live(args: argparse.Namespace, run: str, now: datetime,
                  emit: Callable[[Diagnosis, str], None]) -> int:
    identity = _identity_or_self(identity_from(args))
    want_profile = bool(getattr(args, "run_profile", False))
    result = asyncio.run(collect_and_evaluate(registry_from(args), run=run, identity=identity, now=now,
                                              workspace=args.workspace, profile=want_profile))
    if args.save_snapshot:
        Path(args.save_snapshot).write_text(json.dumps(as_kube_list(result.objects), indent=2) + "\n")
    write_charts(args, result.diagnosis, now, profile=result.profile, linked=result.linked,
                 objects=result.objects)
    # Exit 1 when the cluster could not be read at all (layer 1 failed): the answer says why, and a
    # script must not take "unreachable" for a diagnosis of the run.
    code = 1 if result.diagnosis.unreachable_from is not None and result.diagnosis.layer == 1 else 0
    if code:
        d = result.diagnosis
        why = "; ".join(str(e) for e in d.evidence[:1]) or d.first_incomplete or "layer 1"
        print(f"taubot: error: could not read the cluster: {why}: {d.next_action}", file=sys.stderr)
    if not want_profile or result.profile is None:
        emit(result.diagnosis, args.format)
        return code
    # The profile is an addition: the base contract's keys stay exactly as they are.
    if args.format == "json":
        doc = {**result.diagnosis.contract(), "profile": result.profile.model_dump(mode="json")}
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        emit(result.diagnosis, args.format)
        print()
        print(render_profile_text(result.profile))
    return code


def render_report(report: LayerReport) -> str:
    head = "✔" if report.ok else "✖"
    lines = [f"{head} layer {report.layer} — workspace {report.workspace or '?'}: {report.summary}"]
    lines += [f"  {STATE_MARKS[c.state]} {c.name}: {c.detail}" for c in report.checks]
    if not report.ok:
        transient = "" if report.transient is None else f" · transient: {str(report.transient).lower()}"
        lines.append(f"  owner: {report.owner}{transient}")
        lines.append(f"  next action: {report.next_action}")
    return "\n".join(lines)


def _print(report: LayerReport, fmt: str) -> None:
    print(report.model_dump_json(indent=2) if fmt == "json" else render_report(report))


def cmd_workspace(args: argparse.Namespace) -> int:
    registry = registry_from(args)
    if args.workspace_command == "connection":
        identity = None if args.offline else _identity_or_self(identity_from(args))
        report = asyncio.run(check_connection(registry, workspace=args.workspace, identity=identity,
                                              offline=args.offline))
        _print(report, args.format)
        return 0 if report.ok else 1
    identity = _identity_or_self(identity_from(args))
    report = asyncio.run(workspace_status(registry, args.name, identity=identity))
    _print(report, args.format)
    if args.workspace_command == "check":
        return 0 if report.ok and report.layer == 2 else 1
    return 1 if report.layer == 1 and not report.ok else 0  # layer 2 was never read
