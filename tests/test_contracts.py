"""The shape of the code: contracts importable alone, front ends light, no import cycles."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("kubernetes_asyncio", "rq", "slack_sdk", "slack_bolt")


def imported_after(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(sorted(m.split('.')[0] for m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    return set(done.stdout.split())


def test_contracts_import_without_kubernetes_rq_or_slack() -> None:
    loaded = imported_after("workers.contracts.requests, workers.contracts.grammar, "
                            "workers.contracts.signing")
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_the_slack_front_end_does_not_load_the_kubernetes_client() -> None:
    loaded = imported_after("bot.app")
    assert "kubernetes_asyncio" not in loaded
    assert "slack_bolt" in loaded  # it is the Bolt app: the check above is not vacuous


def test_no_import_cycles_and_workers_never_import_a_front_end() -> None:
    tool = REPO.parent / "shared" / "tools" / "import_cycles.py"
    assert tool.exists(), "the shared import-cycle checker lies beside the repository"
    done = subprocess.run([sys.executable, str(tool)], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 problem(s)" in done.stdout
