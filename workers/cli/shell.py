"""`taubot shell [--demo] [--blocks]` and `taubot demo`: taubot without Slack (SPEC §7c).

Which Redis a session uses is always said in its banner, and never guessed:
the demo (and `--redis memory`) use fakeredis in process; otherwise the one
`--redis URL` or `TAUBOT_REDIS_URL` names, and if that does not answer the
shell says so and stops — it never falls back to whatever answers on :6379,
which may be someone else's. Bad configuration is one line, never a
traceback.
"""

from __future__ import annotations

import contextlib
import secrets
import sys
import termios
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .errors import UsageError
from .registry import subcommand

BANNER = """taubot shell — type /tau commands as in Slack (`/tau help`), a button's number to press it,
or `exit`. Kubernetes is read as {user} ({identity}). Redis: {redis}."""
MEMORY = "memory"


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _note(text: str) -> None:
    """With `--blocks`, everything but the payloads: stdout stays JSON Lines (see TerminalSurface)."""
    sys.stderr.write(text)
    sys.stderr.flush()


def _notes_audit(blocks: bool) -> dict[str, Any]:
    """With `--blocks`, the escalation audit line (stdout when no TAUBOT_AUDIT_LOG is set) goes with
    the notes to stderr, so stdout is only Block Kit payloads."""
    return {"audit_log": Path("/dev/stderr")} if blocks else {}


@contextlib.contextmanager
def demo_session(write: Callable[[str], None] = _write, *, blocks: bool = False,
                 write_json: Callable[[str], None] | None = None) -> Iterator[Any]:
    """A shell on the bundled demo cluster (in process), with fakeredis and the demo's clock;
    ``write_json`` takes the Block Kit payloads with ``blocks`` (``write`` the rest)."""
    from shell.demo_cluster import CHANNEL, IDENTITY, START, USER, demo_cluster, run_table
    from shell.repl import Shell, in_process_redis
    from workers.config.settings import load_settings
    from workers.plumbing.clock import ManualClock

    clock = ManualClock(START)
    with demo_cluster(clock.now) as cluster:
        settings = load_settings(workspaces_dir=cluster.workspaces_dir, identity_file=cluster.identity_file,
                                 button_signing_key=secrets.token_hex(16), **_notes_audit(blocks))
        write(BANNER.format(user=USER, identity=IDENTITY["user"], redis="fakeredis in process (the demo's)")
              + "\n")
        write("Demo cluster (in process):\n" + "\n".join(run_table()) + "\n")
        shell = Shell(settings, user=USER, channel=CHANNEL, write=write, conn=in_process_redis(),
                      clock=clock, blocks_json=blocks, on_time=cluster.advance, demo=cluster,
                      write_json=write_json)
        with contextlib.closing(shell):
            yield shell


def _redis(args: Any, settings: Any) -> tuple[Any, str]:
    """The session's Redis and how the banner names it (see the module docstring)."""
    from shell.repl import in_process_redis, named_redis, redacted

    if args.redis == MEMORY:
        return in_process_redis(), "fakeredis in process (--redis memory: shared with no bot or worker)"
    if args.redis:
        url, source = args.redis, "--redis"
    elif "redis_url" in settings.model_fields_set:  # given (TAUBOT_REDIS_URL or its _FILE), not the default
        url, source = settings.redis_url, "TAUBOT_REDIS_URL"
    else:
        raise UsageError("taubot shell needs a Redis: set TAUBOT_REDIS_URL, or pass --redis URL, or "
                         "--redis memory (fakeredis in process); it does not use whatever answers on :6379")
    try:
        return named_redis(url), f"{redacted(url)} ({source})"
    except ConnectionError as exc:
        raise UsageError(f"{exc} (--redis memory runs one in process)") from None


@contextlib.contextmanager
def _session(args: Any) -> Iterator[Any]:
    write = _note if args.blocks else _write
    if args.demo:
        with demo_session(write, blocks=args.blocks, write_json=_write) as shell:
            yield shell
        return
    from bot.identity import IdentityConfigError, load_identity_map
    from shell.repl import Shell
    from workers.config.settings import SettingsError, load_settings
    from workers.plumbing.clock import SystemClock

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
    if not settings.workspaces_dir.is_dir():
        raise UsageError(f"TAUBOT_WORKSPACES_DIR: {settings.workspaces_dir} is not a directory")
    if settings.audit_log is None:
        settings = settings.model_copy(update=_notes_audit(args.blocks))
    conn, where = _redis(args, settings)
    try:
        shell = Shell(settings, user=args.user, channel=args.channel, write=write, conn=conn,
                      clock=SystemClock(), blocks_json=args.blocks, write_json=_write)
    except IdentityConfigError as exc:
        raise UsageError(f"TAUBOT_IDENTITY_FILE: {exc}") from None
    mapping = load_identity_map(settings.identity_file)
    entry = mapping.users.get(args.user)
    if entry is not None:
        identity = entry.user
    elif mapping.map_by_email:
        identity = "mapped by e-mail: resolved at the first command"
    else:  # said now, not at the first refusal: the banner never claims a mapping that is not there
        identity = f"not mapped: {settings.identity_file} does not list {args.user}, so commands are refused"
    write(BANNER.format(user=args.user, identity=identity, redis=where) + "\n")
    with contextlib.closing(shell):
        yield shell


class _Prompt:
    """`input()` lines for a terminal, with "…" while an entry takes more lines. Ctrl-C at the
    prompt drops the line (or the entry) being typed and prompts again, as bash and python do;
    Ctrl-D (end of input) ends the session. With `--blocks` the prompt goes to stderr with the
    other notes, so stdout stays JSON Lines."""

    def __init__(self, note: Callable[[str], None] | None = None) -> None:
        self.more = False
        self.note = note

    def continuing(self, more: bool) -> None:
        self.more = more

    def __iter__(self) -> Iterator[str]:
        from shell.repl import CANCEL

        while True:
            prompt = "… " if self.more else "› "
            try:
                if self.note is None:
                    line = input(prompt)
                else:
                    self.note(prompt)
                    line = input()
            except EOFError:
                (self.note or _write)("\n")
                return
            except KeyboardInterrupt:
                # A terminal's Ctrl-C also flushes the line it holds; a SIGINT from elsewhere does
                # not, and the half-typed line would be glued to the next one.
                with contextlib.suppress(termios.error, OSError, ValueError):
                    termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)
                (self.note or _write)("\n")
                yield CANCEL
                continue
            yield line


def cmd_shell(args: Any) -> int:
    with _session(args) as shell:
        if sys.stdin.isatty():
            prompt = _Prompt(_note if args.blocks else None)
            return shell.run(prompt, echo=False, continuing=prompt.continuing, background=True)
        return shell.run(sys.stdin, echo=True)


def cmd_demo(args: Any) -> int:
    from shell.demo import play

    with demo_session() as shell:
        return play(shell)


@subcommand
def add(sub: Any) -> None:
    shell = sub.add_parser("shell", help="type /tau commands in a terminal; cards print as text")
    shell.add_argument("--demo", action="store_true",
                       help="serve a bundled demo cluster in process (no cluster, Slack or Redis needed)")
    shell.add_argument("--blocks", action="store_true", help="print Block Kit JSON instead of text")
    shell.add_argument("--user", help="your Slack user id, as the identity file maps it (not with --demo)")
    shell.add_argument("--channel", help="the channel to act in (not with --demo)")
    shell.add_argument("--redis", metavar="URL|memory",
                       help="the Redis to use (default TAUBOT_REDIS_URL, which must then be set); "
                       "`memory`: fakeredis in process (not with --demo)")
    shell.set_defaults(func=cmd_shell)
    demo = sub.add_parser("demo", help="play a scripted taubot session on the demo cluster")
    demo.set_defaults(func=cmd_demo)


__all__ = ["add", "demo_session"]
