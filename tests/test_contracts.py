"""The shape of the code: contracts importable alone, front ends light, no import cycles."""

from __future__ import annotations

import ast
import graphlib
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


def project_imports() -> dict[str, set[str]]:
    """Each module of bot/, workers/ and shell/ and the project modules it imports (module level
    and inside functions), resolved to modules that exist."""
    files = {}
    for top in ("bot", "workers", "shell"):
        for path in (REPO / top).rglob("*.py"):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            files[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
        graph[name] = {f for f in found if f in files and f != name}
    return graph


def test_no_import_cycles_and_workers_never_import_a_front_end() -> None:
    """Checked here with the standard library, so a clone works alone; the shared checker
    (`../shared/tools/import_cycles.py`) is run too when it lies beside the repository."""
    graph = project_imports()
    assert len(graph) > 50 and graph["bot.app"], "the import graph was not read"
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        raise AssertionError(f"import cycle: {' -> '.join(exc.args[1])}") from None
    into_bot = {m for m, deps in graph.items() if m.startswith("workers.") and not m.startswith("workers.cli")
                and any(d == "bot" or d.startswith("bot.") for d in deps)}
    assert into_bot == set()
    tool = REPO.parent / "shared" / "tools" / "import_cycles.py"
    if tool.exists():
        done = subprocess.run([sys.executable, str(tool)], capture_output=True, text=True, cwd=REPO)
        assert done.returncode == 0 and "0 problem(s)" in done.stdout, done.stdout + done.stderr
