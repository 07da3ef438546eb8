"""The seams that keep taubot's engine pure and its renderer light (issue 23; CONVENTIONS "Shape").

* `workers/diagnosis/` — phases, evaluate, checks, recovery, podfacts, linkage,
  patterns — imports only itself, the contracts, pydantic and the standard
  library (and `workers.outside.text`, the pure door every outside sentence passes): no kube, logs, experiments, workspaces, flows, monitor, surfaces,
  services, render, no kubernetes_asyncio, aiohttp, redis, rq or Slack.
* Rendering a card loads no Kubernetes client, HTTP client, Redis or rq.
* No package imports back a package that imports it (flows ↔ monitor ↔ services, …).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENGINE = REPO / "workers" / "diagnosis"
ALLOWED_THIRD_PARTY = {"pydantic", "pydantic_core"}  # the contracts' modelling library
# Pure text parsers the engine may use on what was read (the GPU profile reads Prometheus text).
ALLOWED_PARSERS = {"prometheus_client.parser"}


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
            ok = (name == "workers.diagnosis"
                  or name.startswith(("workers.diagnosis.", "workers.contracts", "workers.outside.text"))
                  or top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY or name in ALLOWED_PARSERS
                  or top == "__future__")
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


def _package(module: str) -> str:
    """`workers.flows.status` → `workers.flows`; a module directly under a top package is its own."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _package_edges() -> dict[str, set[str]]:
    """Package → the packages its modules import (a package's imports of itself left out)."""
    modules = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p
               for top in ("bot", "workers", "shell") for p in (REPO / top).rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        for imported in _imports(path):
            target = next((m for m in (imported, imported.rsplit(".", 1)[0]) if m in modules), None)
            if target and _package(target) != _package(name):
                edges.setdefault(_package(name), set()).add(_package(target))
    return edges


def test_no_package_imports_back_a_package_that_imports_it() -> None:
    """No cycle between packages (workers.flows ↔ workers.monitor, workers.diagnosis ↔ workers.logs, …):
    an import graph by package, not by file, has no strongly connected component."""
    edges = _package_edges()

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(edges.get(node, ()))
        return False

    cycles = sorted({tuple(sorted((a, b))) for a, targets in edges.items() for b in targets if reaches(b, a)})
    assert cycles == []


def test_only_the_job_layer_imports_the_flows() -> None:
    """Issue 23: the monitor, the services and the shared record stores need nothing from a flow —
    the Escalate offer an auto-post carries lives in `workers.records.offers`. Only the rq job
    table and the CLI that runs jobs in process reach into `workers.flows`."""
    importers = sorted(a for a, targets in _package_edges().items() if "workers.flows" in targets)
    assert importers == ["workers.cli", "workers.jobs"]


def _imported_by(room: str) -> set[str]:
    """The packages a room's modules import (its own left out)."""
    return _package_edges().get(room, set())


def test_the_plumbing_imports_no_flow_and_nothing_above_it() -> None:
    """Issue 39: the process's plumbing (clock, loop, job queue, timed jobs, conditional writes,
    metrics, health, GC) is the ground floor: it needs only the contracts."""
    assert _imported_by("workers.plumbing") <= {"workers.contracts"}


def test_records_import_no_collect_layer_and_no_flow() -> None:
    """Issue 39: a record in Redis names the shapes it stores; it never reaches into the reads
    (workers.collect) or the flows that write it."""
    assert not _imported_by("workers.records") & {"workers.collect", "workers.flows", "workers.monitor",
                                                  "workers.services", "workers.jobs"}


def test_only_the_composition_stays_at_the_root_of_workers() -> None:
    """Issue 39: every module of workers/ lives in a room named for its purpose, but the three
    that put the process together."""
    loose = sorted(p.stem for p in (REPO / "workers").glob("*.py") if p.stem != "__init__")
    assert loose == ["jobs", "rq_worker", "services"]


def test_every_redis_key_family_of_the_records_is_spelled_in_one_module() -> None:
    """Issue 39: a `taubot:` key prefix is written as a string literal only in
    workers/records/keys.py (the plumbing's own timed-job and pace sets live with their mechanism)."""
    mechanisms = {REPO / "workers" / "plumbing" / "timed_jobs.py", REPO / "workers" / "surfaces" / "pacing.py"}
    spelled = []
    for path in sorted((REPO / "workers").rglob("*.py")) + sorted((REPO / "bot").rglob("*.py")):
        if path == REPO / "workers" / "records" / "keys.py" or path in mechanisms:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.match(r"taubot:[a-z-]+(:|$)", node.value):
                spelled.append(f"{path.relative_to(REPO)}: {node.value!r}")
    assert spelled == []
