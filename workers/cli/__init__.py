"""`taubot` command line: subcommands register themselves (`registry.py`), one module each.

Bad input is the user's, not a crash: every subcommand raises `UsageError`
for it, printed here as one line with exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile

from workers.kube.errors import KubeconfigError

from .errors import UsageError
from .registry import REGISTERED, Parser

MODULES = ("diagnose", "runs", "workspace", "logs", "cluster", "validate", "monitor", "services", "shell",
           "config", "mcp")


# Which module registers each subcommand: `taubot diagnose …` imports the diagnose module only
# (a cold live status paid ~0.2 s importing the Slack front end, the monitor, the shell and the
# rest it never runs, issue 36). Anything else (`--help`, a typo) imports them all, so the usage
# lists every command.
COMMAND_MODULES = {"diagnose": "diagnose", "examples": "diagnose", "runs": "runs", "workspace": "workspace",
                   "logs": "logs", "cluster": "cluster", "validate": "validate", "monitor": "monitor",
                   "serve": "services", "worker": "services", "shell": "shell", "demo": "shell",
                   "config": "config", "mcp": "mcp"}


def build_parser(argv: list[str] | None = None) -> Parser:
    """The parser for ``argv``'s subcommand (importing only its module), or for all of them."""
    wanted = COMMAND_MODULES.get(argv[0]) if argv else None
    for name in [wanted] if wanted in MODULES else MODULES:
        importlib.import_module(f"{__name__}.{name}")
    parser = Parser(prog="taubot", description="Diagnose stuck TauGrid training runs.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for add in dict.fromkeys(REGISTERED):
        add(sub)
    return parser


def _forks(argv: list[str]) -> bool:
    """Whether this command runs in several processes: `taubot worker` (a work horse per job) or
    `taubot serve http --processes N` with N > 1."""
    if argv[:1] == ["worker"]:
        return True
    if argv[:2] != ["serve", "http"]:
        return False
    from .services import DEFAULT_SERVE_PROCESSES  # the module `serve` is registered by, loaded for it anyway

    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--processes", default=str(DEFAULT_SERVE_PROCESSES))
    known, _ = early.parse_known_args(argv[2:])
    return known.processes.strip().isdigit() and int(known.processes) > 1


def _multiprocess_metrics(argv: list[str]) -> None:
    """prometheus_client counts across processes only if `PROMETHEUS_MULTIPROC_DIR` is set before
    it is first imported, which is here, before any subcommand module loads (workers/plumbing/metrics.py);
    every process then writes its samples there and any one's `/metrics` merges them."""
    if _forks(argv) and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="taubot-metrics-")


def main(argv: list[str] | None = None) -> int:
    args_given = list(sys.argv[1:] if argv is None else argv)
    _multiprocess_metrics(args_given)
    parser = build_parser(args_given)
    try:
        args = parser.parse_args(argv)
        return int(args.func(args) or 0)
    except (UsageError, KubeconfigError) as exc:
        print(f"taubot: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `taubot diagnose … | head -1`: the reader left; say nothing more.
        sys.stderr.close()
        return 0


__all__ = ["UsageError", "build_parser", "main"]
