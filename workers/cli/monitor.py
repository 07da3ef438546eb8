"""`taubot monitor [--once]` (SPEC §7b): the stall monitor as its own process."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from typing import Any

from .errors import UsageError
from .registry import subcommand


def cmd_monitor(args: Any) -> int:
    from workers.config.settings import SettingsError, load_settings
    from workers.monitor.run import run_forever, run_once
    from workers.outside.logsafe import install as install_logging
    from workers.services import Services, install

    install_logging(logging.INFO)
    try:
        settings = load_settings()
    except SettingsError as exc:
        raise UsageError(str(exc)) from None
    from .services import redis_given

    redis_given(settings, "taubot monitor")  # its once-per-run records live there
    if settings.workspaces_dir is None:
        raise UsageError("TAUBOT_WORKSPACES_DIR is not set: the monitor reads only the namespaces its "
                         "WorkspaceConnection descriptors name")
    services = Services.for_slack(settings)
    install(services)
    if not args.once:
        from workers.plumbing.gc_tuning import tune_gc

        from .services import _serve_health

        _serve_health(settings, services.redis)
        tune_gc()
    if args.once:
        report = asyncio.run(run_once(services))
        print(json.dumps({"runs": report.runs, "stalled": report.stalled, "posts": report.posts,
                          "log_reads": report.log_reads, "unread": report.unread,
                          "seconds": round(report.seconds, 3)}))
        if report.unread and not report.runs:
            # Nothing was judged because nothing could be read: a cron job or a readiness check must
            # see a failure, not a clean sweep of zero runs.
            print(f"taubot: error: monitor --once read nothing: {'; '.join(report.unread[:3])}"
                  f"{f' (+{len(report.unread) - 3} more)' if len(report.unread) > 3 else ''}: check the "
                  "monitor's access to the namespaces its descriptors name", file=sys.stderr)
            return 1
        return 0

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_forever(services, stop)

    asyncio.run(main())
    return 0


@subcommand
def add(sub: Any) -> None:
    p = sub.add_parser("monitor", help="the stall monitor: auto-post stuck runs (one active replica)")
    p.add_argument("--once", action="store_true", help="one sweep from fresh LISTs, then exit")
    p.set_defaults(func=cmd_monitor)


__all__ = ["add"]
