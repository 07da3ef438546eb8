"""The seams that keep taubot's engine pure and its renderer light (issue 23; CONVENTIONS "Shape").

* `workers/diagnosis/` — phases, evaluate, checks, recovery, podfacts, linkage,
  patterns — imports only itself, the contracts, pydantic and the standard
  library: no kube, logs, experiments, workspaces, flows, monitor, surfaces,
  services, render, no kubernetes_asyncio, aiohttp, redis, rq or Slack.
* Rendering a card loads no Kubernetes client, HTTP client, Redis or rq.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENGINE = REPO / "workers" / "diagnosis"
ALLOWED_THIRD_PARTY = {"pydantic", "pydantic_core"}  # the contracts' modelling library


def _imports(path: Path) -> set[str]:
    """Absolute names of every module the file imports, at module level or inside functions."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.add(".".join(base + ([node.module] if node.module else [])))
            else:
                found.add(node.module or "")
    return found


def test_the_engine_imports_only_itself_the_contracts_pydantic_and_the_standard_library() -> None:
    foreign: dict[str, list[str]] = {}
    for path in sorted(ENGINE.rglob("*.py")):
        for name in _imports(path):
            top = name.split(".")[0]
            ok = (name == "workers.diagnosis" or name.startswith(("workers.diagnosis.", "workers.contracts"))
                  or top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY or top == "__future__")
            if not ok:
                foreign.setdefault(str(path.relative_to(REPO)), []).append(name)
    assert foreign == {}


HEAVY = ("kubernetes_asyncio", "aiohttp", "redis", "rq")


@pytest.mark.parametrize("module", ["workers.render.cards", "workers.diagnosis.evaluate",
                                    "workers.render.tree_text"])
def test_judging_and_rendering_load_no_client_library(module: str) -> None:
    """Checked in a fresh interpreter: what importing the module pulls in, and nothing else."""
    probe = (f"import sys, {module}; "
             f"print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.split() == []
