"""`taubot shell --demo` and `taubot demo`, driven as a person would: lines on standard input.

The shell runs the real path — grammar, identity file, job functions through
the inline queue, live collection over HTTP from the in-process emulator,
rendering — with a terminal surface; these tests read what it printed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from slack_sdk.models.blocks import Block

from workers.render.cards import validate_blocks

REPO = Path(__file__).resolve().parents[1]


def taubot(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers.cli", *args], input=stdin, capture_output=True,
                          text=True, cwd=REPO, timeout=120)


def cards(output: str) -> list[str]:
    """The printed cards (a header line, then its ═ underline, up to the next prompt line)."""
    return re.findall(r"🔎 \S+ · .*?(?=\n› |\n# |\Z)", output, re.S)


def test_shell_answers_a_layer_4_and_a_layer_5_run_with_phase_and_owner() -> None:
    done = taubot("shell", "--demo", stdin="/tau status llama-ft-queued\n/tau status llama-ft-oom\n")
    assert done.returncode == 0, done.stderr
    queued, oom = cards(done.stdout)
    assert "⏳ First incomplete: Kueue admission (pending)" in queued and "layer 4: Queue admission" in queued
    assert "Owner: queue-owner" in queued and "[1] Escalate to queue-owner" in queued
    assert "⚠️ First incomplete: Container start (warning)" in oom and "layer 5: " in oom
    assert "OOMKilled" in oom and "Owner: researcher" in oom
    assert "Traceback" not in done.stdout + done.stderr


def test_pressing_a_button_number_escalates_and_prints_the_handoff_once() -> None:
    done = taubot("shell", "--demo", stdin="/tau status llama-ft-queued\n1\n1\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "▶ pressed [1] Escalate to queue-owner" in out
    assert out.count("📣 Escalation for queue-owner: `llama-ft-queued` is stuck at Kueue admission") == 1
    assert "escalated this to queue-owner in #C0QUEUE" in out
    assert "📣 Escalated to queue-owner by @U0DEMO" in out  # the card, re-rendered from its context
    assert "no button [1]" in out  # the edited card has no Escalate button left to press


def test_blocks_output_is_block_kit_that_slack_sdk_accepts() -> None:
    done = taubot("shell", "--demo", "--blocks", stdin="/tau status ray-pretrain-crash\n")
    assert done.returncode == 0, done.stderr
    documents = re.findall(r"^    \{\n.*?^    \}$", done.stdout, re.S | re.M)
    assert documents, done.stdout[:2000]
    blocks = json.loads("\n".join(line[4:] for line in documents[-1].splitlines()))["blocks"]
    validate_blocks(blocks)  # slack_sdk's block models plus Slack's limits taubot checks
    assert all(block is not None for block in Block.parse_all(blocks))
    assert any("RayCluster" in json.dumps(b) for b in blocks)


def test_watch_in_the_shell_follows_the_run_until_it_succeeds() -> None:
    done = taubot("shell", "--demo", stdin="/tau status resnet-watch --watch --interval 15\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.count("✎ card updated") >= 2
    assert "Kueue admission: pending → done after at least" in out
    assert "Watching stopped at 10:31:45 UTC: the run finished (succeeded)" in out


def test_unknown_input_gets_usage_not_a_traceback() -> None:
    done = taubot("shell", "--demo", stdin="/tau stauts x\nhello\n/tau status NOT_A_NAME\n")
    assert done.returncode == 0
    assert "unknown command 'stauts'" in done.stdout
    assert "type `/tau help`" in done.stdout
    assert "invalid run name 'NOT_A_NAME'" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_demo_plays_status_watch_and_escalation_and_exits_zero() -> None:
    done = taubot("demo")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "First incomplete: Kueue admission" in out and "First incomplete: RayCluster" in out
    assert "⚠️ First incomplete: Submitted (warning)" in out and "layer 3: " in out
    assert "the run finished (succeeded)" in out
    assert "📣 Escalation for queue-owner" in out
    assert "🚨 Auto-posted by taubot: stalled at Image pull" in out and "Mute 24 h" in out
