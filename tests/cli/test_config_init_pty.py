"""`taubot config init` at a terminal keeps its answers (issue 38, Build item 3).

Driven through a real pseudo-terminal (the prompts only appear when stdin is a tty): one bad
answer — `#ml-vision`, a channel's name where its id belongs — is explained and asked again,
every earlier answer is kept, the next steps list every command to a working install, and the
values sign buttons in Socket Mode too.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def run_at_a_terminal(args: list[str], answers: str) -> tuple[int, str]:
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "workers.cli", *args], stdin=terminal, stdout=terminal,
                            stderr=terminal, cwd=REPO, close_fds=True)
    os.close(terminal)
    os.write(controller, answers.encode())  # the line discipline hands them out one line per read
    out = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: the child closed the terminal (it exited)
            break
        if not chunk:
            break
        out += chunk
    os.close(controller)
    return proc.wait(timeout=60), out.decode(errors="replace").replace("\r\n", "\n")


def test_a_bad_channel_answer_is_asked_again_and_nothing_is_lost(tmp_path: Path) -> None:
    # image, mode (default socket), redis (default), workspace, namespace, queue (defaults),
    # channel: a name first, then the id; the first user
    answers = ("registry.example.com/taubot:0.1.0\n\n\nvision\n\n\n#ml-vision\nC012ABCDEF\n"
               "U012ALICE=alice@example.com:team-vision\n")
    code, out = run_at_a_terminal(["config", "init", "--out-dir", str(tmp_path)], answers)
    assert code == 0, out
    assert "Traceback" not in out
    assert "'#ml-vision': that is a channel name; give its id" in out and "Channel ID" in out
    assert out.count("Slack channel id it answers in") == 2  # asked again, once
    values = yaml.safe_load((tmp_path / "taubot-values.yaml").read_text())
    descriptor = yaml.safe_load(values["workspaces"]["vision.yaml"])
    assert descriptor["spec"]["slack"]["channels"] == ["C012ABCDEF"]
    assert descriptor["spec"]["namespace"] == "team-vision"  # the answers before it were kept
    assert values["image"] == {"repository": "registry.example.com/taubot", "tag": "0.1.0"}
    assert values["bot"]["mode"] == "socket"
    assert values["slack"]["buttonSigningKeyKey"] == "button-signing-key"
    for step in ("kubectl create namespace taubot", "create secret generic taubot-slack",
                 "--from-literal=button-signing-key=", "helm install taubot", "/invite"):
        assert step in out, step


def test_a_bad_channel_flag_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "workers.cli", "config", "init", "--out-dir", str(tmp_path),
                           "--image", "r.example.com/taubot", "--workspace", "vision", "--channel", "#ml-vision",
                           "--user", "U012ALICE=alice@example.com"], capture_output=True, text=True,
                          timeout=60, cwd=REPO, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--channel '#ml-vision': that is a channel name" in lines[0]
    assert not list(tmp_path.iterdir())
