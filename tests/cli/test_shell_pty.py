"""`taubot shell` at a terminal: Ctrl-C drops the line, or stops the command, never the shell (issue 38.6).

Driven through a real pseudo-terminal (the prompt appears only when stdin is a tty), with SIGINT
sent to the process as a terminal sends it for Ctrl-C. Each step waits for what the shell prints
(the timeout only bounds a failure). The cluster is the Kubernetes API emulator, held mid-answer
(`hang`) so that a command is certainly running when the signal comes.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.kube_api import running_emulator
from tests.live.conftest import workspace_objects, write_descriptor

REPO = Path(__file__).resolve().parents[2]
PROMPT = "› "
READ_SYSCALL = {"x86_64": "0", "aarch64": "63"}  # the syscall number /proc/PID/syscall shows first


class Terminal:
    """A process on a pseudo-terminal: type into it, read what it printed."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.controller, terminal = pty.openpty()
        self.proc = subprocess.Popen([sys.executable, "-m", "workers.cli", *args], stdin=terminal,
                                     stdout=terminal, stderr=terminal, cwd=REPO, env=env, close_fds=True)
        os.close(terminal)
        self.out = ""

    def type(self, text: str) -> None:
        os.write(self.controller, text.encode())

    def wait_for(self, needle: str, *, count: int = 1, timeout: float = 60) -> str:
        """Read until ``needle`` has been printed ``count`` times in all; everything printed so far."""
        deadline = time.monotonic() + timeout  # bounds a failure only
        while self.out.count(needle) < count:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.controller], [], [], max(left, 0))
            if not ready:
                raise AssertionError(f"{needle!r} ×{count} never came; printed:\n{self.out[-3000:]}")
            try:
                chunk = os.read(self.controller, 4096)
            except OSError:  # EIO: the process closed the terminal
                chunk = b""
            if not chunk:
                raise AssertionError(f"the shell ended before {needle!r} ×{count}; printed:\n{self.out[-3000:]}")
            self.out += chunk.decode(errors="replace").replace("\r\n", "\n")
        return self.out

    def interrupt(self, *, at_prompt: bool = True) -> None:
        """SIGINT, as a terminal sends it for Ctrl-C. At the prompt, only once the shell is blocked
        reading its terminal: a signal that comes between the prompt's print and that read is
        handled when the read returns (CPython's `input()`), a window no typist can hit."""
        if at_prompt:
            self._blocked_reading()
        self.proc.send_signal(signal.SIGINT)

    def _blocked_reading(self) -> None:
        """Until the shell's main thread is in `read(0, …)` (Linux: /proc/PID/syscall)."""
        number = READ_SYSCALL.get(os.uname().machine)
        if number is None or not Path("/proc/self/syscall").exists():
            pytest.skip("reads Linux's /proc/PID/syscall, and knows read's number on x86_64 and aarch64")
        deadline = time.monotonic() + 60  # bounds a failure only
        while Path(f"/proc/{self.proc.pid}/syscall").read_text().split()[:2] != [number, "0x0"]:
            assert time.monotonic() < deadline, f"the shell never waited for input:\n{self.out[-2000:]}"
            time.sleep(0.005)

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=60)
        finally:
            os.close(self.controller)


@pytest.fixture
def own_cluster(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "ws").mkdir()
    (tmp_path / "identity.yaml").write_text("users:\n  U012ALICE: {user: alice@example.com}\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("TAUBOT_")}
    return {**base, "TAUBOT_WORKSPACES_DIR": str(tmp_path / "ws"),
            "TAUBOT_IDENTITY_FILE": str(tmp_path / "identity.yaml")}


def test_ctrl_c_drops_the_line_or_stops_the_command_and_ctrl_d_ends_the_shell(own_cluster: dict[str, str]) -> None:
    with running_emulator(workspace_objects()) as emu:
        write_descriptor(Path(own_cluster["TAUBOT_WORKSPACES_DIR"]), emu.base_url)
        shell = Terminal(["shell", "--user", "U012ALICE", "--channel", "C012VISION", "--redis", "memory"],
                         own_cluster)
        try:
            shell.wait_for(PROMPT)
            # Ctrl-C at the prompt: the half-typed line is dropped, a fresh prompt comes.
            shell.type("/tau stat")
            shell.interrupt()
            shell.wait_for(PROMPT, count=2)
            shell.type("/tau help status\n")
            shell.wait_for("Example: `/tau status llama-ft-7b`")
            # Ctrl-C while a manifest is being pasted drops the whole entry: the blank line that
            # would have ended it runs nothing.
            shell.type("/tau validate\n")
            shell.wait_for("… ")
            shell.type("kind: Job\n")
            shell.wait_for("… ", count=2)
            shell.interrupt()
            shell.wait_for(PROMPT, count=4)
            # Ctrl-C while a command runs (the API server holds its requests): that command stops.
            emu.hang(100)
            shell.type("/tau status resnet-sweep-3\n")
            assert emu.hung.wait(60), shell.out[-2000:]
            shell.interrupt(at_prompt=False)
            shell.wait_for("/tau status resnet-sweep-3 was interrupted")
            emu.release()
            shell.type("\n/tau help logs\n")
            shell.wait_for("Example: `/tau logs llama-ft-7b --tail 500`")
            shell.type("\x04")  # Ctrl-D: end of input
            code = shell.close()
        finally:
            if shell.proc.poll() is None:
                shell.proc.kill()
                shell.close()
    out = shell.out
    assert code == 0, out
    assert "unknown command" not in out and "Traceback" not in out
    assert "Manifest validation" not in out and "no manifest" not in out
    assert out.count("was interrupted") == 1
