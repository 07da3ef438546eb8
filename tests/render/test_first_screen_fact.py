"""The first incomplete phase's key fact stays on the first screen in every edit of the card
(issue 38, Build item 4): the demo's `llama-ft-xid` card is posted, then edited to link its chart
(an edit with one more line, which the card's shortening used to pay for with `Xid 79`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_xid_79_is_on_the_first_screen_of_every_edit() -> None:
    done = subprocess.run([sys.executable, "-m", "workers.cli", "shell", "--demo"], cwd=REPO,
                          input="/tau status llama-ft-xid\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    focus = [line for line in done.stdout.splitlines() if "First incomplete:" in line]
    assert len(focus) >= 2, done.stdout  # the card, and its edit with the chart's link
    assert "card updated" in done.stdout
    for line in focus:
        assert "Xid 79" in line and not line.rstrip().endswith("…"), line
    nexts = [line for line in done.stdout.splitlines() if line.strip().startswith("Next:")]
    assert nexts and all(line.rstrip().endswith("healthy nodes.") for line in nexts), nexts
