"""What each half of a cold `taubot diagnose` imports (issue 36: a cold live status took 0.6 s,
most of it imports): a live status neither the dump parsers nor the Slack front end, a dump or an
example no Kubernetes or HTTP client. Each probe is a fresh interpreter, as a user's command is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def loaded_by(modules: str) -> set[str]:
    code = f"import sys, {modules}; print(' '.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    return set(done.stdout.split())


@pytest.mark.parametrize(("half", "never", "always"), [
    ("workers.cli.live", ("ryml", "workers.collect.dumps", "workers.collect.logs.files", "slack_bolt", "rq",
                          "workers.render.tree_text"), "workers.collect.investigate"),
    ("workers.cli.offline", ("kubernetes_asyncio", "aiohttp", "workers.kube.client", "slack_bolt", "rq"),
     "workers.collect.dumps"),
])
def test_each_half_of_diagnose_imports_only_what_it_reads(half: str, never: tuple[str, ...], always: str) -> None:
    loaded = loaded_by(f"workers.cli, workers.cli.diagnose, {half}")
    assert sorted(m for m in loaded if m in never) == []
    assert always in loaded  # the half itself is there: not vacuous
