"""`taubot validate --workspace W --as U [--as-group G]… [--offline] FILE|-`: the CLI twin of `/tau validate`.

Exit 0 when every check passed, 1 when one failed (the card's first failure
decides), 2 on bad usage. Input that is not one Job or RayJob is a failed
check, printed like the rest, so `--format json` always gives a report.
"""

from __future__ import annotations

import sys
from typing import Any

from .errors import UsageError
from .registry import subcommand


def _read(path: str, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes: enough to say "too large" without reading a huge file."""
    try:
        if path == "-":
            return sys.stdin.buffer.read(limit + 1)
        with open(path, "rb") as handle:
            return handle.read(limit + 1)
    except OSError as err:
        raise UsageError(f"cannot read {path}: {err.strerror or err}") from None


def render(report: Any) -> str:
    from .live import render_report

    head = f"{report.manifest}" + (" (offline: nothing live checked)" if report.offline else "")
    lines = [head, render_report(report)]
    if report.server_message:
        lines.append(f"  the API server said: {report.server_message}")
    return "\n".join(lines)


def cmd_validate(args: Any) -> int:
    import asyncio

    from workers.validation.live import validate_text
    from workers.validation.manifest import MAX_MANIFEST_BYTES, ManifestError, decode
    from workers.validation.report import input_report

    from .live import _identity_or_self, identity_from, registry_from

    identity = None if args.offline else _identity_or_self(identity_from(args))
    data = _read(args.file, MAX_MANIFEST_BYTES)
    try:
        text = decode(data)
    except ManifestError as error:
        report = input_report(error, args.workspace, offline=args.offline)
    else:
        report = asyncio.run(validate_text(registry_from(args), text, workspace=args.workspace,
                                           identity=identity, offline=args.offline))
    print(report.model_dump_json(indent=2) if args.format == "json" else render(report))
    return 0 if report.ok else 1


@subcommand
def add(sub: Any) -> None:
    p = sub.add_parser("validate", help="layer 3 before submitting: check a Job/RayJob manifest, dry-run it "
                       "as --as")
    p.add_argument("file", metavar="FILE", help="the manifest (YAML or JSON, one document); - for stdin")
    p.add_argument("--workspace", help="workspace name (default: the only descriptor)")
    p.add_argument("--workspaces-dir", help="directory of WorkspaceConnection descriptors")
    p.add_argument("--offline", action="store_true", help="local checks only: no cluster, no dry run")
    p.add_argument("--as", dest="as_user", metavar="USER", help="impersonate USER")
    p.add_argument("--as-group", dest="as_groups", action="append", default=[], metavar="GROUP")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_validate)
