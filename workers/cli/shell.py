"""`taubot shell [--demo] [--blocks]` and `taubot demo`: taubot without Slack (SPEC §7c)."""

from __future__ import annotations

import contextlib
import secrets
import sys
from collections.abc import Iterator
from typing import Any

from .errors import UsageError
from .registry import subcommand

BANNER = """taubot shell — type /tau commands as in Slack (`/tau help`), a button's number to press it,
or `exit`. Kubernetes is read as {user} ({identity})."""


@contextlib.contextmanager
def _session(args: Any, *, demo: bool) -> Iterator[Any]:
    from shell.repl import Shell, in_process_redis, local_redis
    from workers.clock import ManualClock
    from workers.settings import SettingsError, load_settings

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    if demo:
        from shell.demo_cluster import CHANNEL, IDENTITY, START, USER, demo_cluster, run_table

        with demo_cluster() as cluster:
            settings = load_settings(workspaces_dir=cluster.workspaces_dir,
                                     identity_file=cluster.identity_file,
                                     button_signing_key=secrets.token_hex(16))
            clock = ManualClock(START)
            write(BANNER.format(user=USER, identity=IDENTITY["user"]) + "\n")
            write("Demo cluster (in process; Redis: fakeredis in process):\n" + "\n".join(run_table()) + "\n")
            yield Shell(settings, user=USER, channel=CHANNEL, write=write, conn=in_process_redis(),
                        clock=clock, blocks_json=args.blocks, on_time=cluster.advance)
        return
    try:
        settings = load_settings()
    except SettingsError as exc:
        raise UsageError(str(exc)) from None
    if settings.workspaces_dir is None or settings.identity_file is None:
        raise UsageError("taubot shell needs TAUBOT_WORKSPACES_DIR and TAUBOT_IDENTITY_FILE "
                         "(or try `taubot shell --demo`)")
    if not args.user or not args.channel:
        raise UsageError("taubot shell needs --user U… (your Slack user id in the identity file) and "
                         "--channel C… (a channel a workspace descriptor lists)")
    conn = local_redis(settings.redis_url)
    if conn is None:
        write("(no Redis answers at TAUBOT_REDIS_URL: using fakeredis in process)\n")
        conn = in_process_redis()
    from workers.clock import SystemClock

    write(BANNER.format(user=args.user, identity="your mapped identity") + "\n")
    yield Shell(settings, user=args.user, channel=args.channel, write=write, conn=conn, clock=SystemClock(),
                blocks_json=args.blocks)


def cmd_shell(args: Any) -> int:
    with _session(args, demo=args.demo) as shell:
        interactive = sys.stdin.isatty()
        lines = _prompted() if interactive else sys.stdin
        return shell.run(lines, echo=not interactive)


def _prompted() -> Iterator[str]:
    while True:
        try:
            yield input("› ")
        except EOFError:
            return


def cmd_demo(args: Any) -> int:
    from shell.demo import play

    args.blocks = False
    with _session(args, demo=True) as shell:
        return play(shell)


@subcommand
def add(sub: Any) -> None:
    shell = sub.add_parser("shell", help="type /tau commands in a terminal; cards print as text")
    shell.add_argument("--demo", action="store_true",
                       help="serve a bundled demo cluster in process (no cluster, Slack or Redis needed)")
    shell.add_argument("--blocks", action="store_true", help="print Block Kit JSON instead of text")
    shell.add_argument("--user", help="your Slack user id, as the identity file maps it (not with --demo)")
    shell.add_argument("--channel", help="the channel to act in (not with --demo)")
    shell.set_defaults(func=cmd_shell)
    demo = sub.add_parser("demo", help="play a scripted taubot session on the demo cluster")
    demo.set_defaults(func=cmd_demo)


__all__ = ["add"]
