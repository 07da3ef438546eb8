"""The house's drawing in three figures: rooms, floors and the imports between rooms.

A *room* is a folder of `bot/`, `shell/` or `workers/` (a loose module directly under `workers/`
is a room of its own: it has no folder to live in). An *import* is one room importing another
(counted once however many of its modules do). A *floor* is a room's height in that drawing:
a room that imports no other room is on floor 1; any other room is one floor above the highest
room it imports. `--largest N` lists the N largest files and functions too.

    python scripts/structure.py [--largest 10] [--edges]
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOPS = ("bot", "shell", "workers")


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def _room(module: str, path: Path) -> str:
    parts = module.split(".")
    if path.name == "__init__.py":
        return module
    if parts[0] == "workers" and len(parts) == 2:
        return module  # a loose module at the root of workers/
    return ".".join(parts[:-1])


def _imports(path: Path, module: str) -> set[str]:
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            found.add(stem)
            found.update(f"{stem}.{a.name}" for a in node.names)
    return found


def measure() -> tuple[dict[str, set[str]], dict[str, Path]]:
    modules = {_module_name(p): p for top in TOPS for p in (REPO / top).rglob("*.py")}
    rooms = {m: _room(m, p) for m, p in modules.items()}
    edges: dict[str, set[str]] = {r: set() for r in rooms.values()}
    for name, path in modules.items():
        for imported in _imports(path, name):
            if imported in modules and rooms[imported] != rooms[name]:
                edges[rooms[name]].add(rooms[imported])
    return edges, modules


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Rooms that import each other, directly or round a loop (Tarjan's strongly connected
    components of more than one room)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(room: str) -> None:
        index[room] = low[room] = len(index)
        stack.append(room)
        for other in edges[room]:
            if other not in index:
                visit(other)
                low[room] = min(low[room], low[other])
            elif other in stack:
                low[room] = min(low[room], index[other])
        if low[room] == index[room]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == room:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for room in sorted(edges):
        if room not in index:
            visit(room)
    return found


def floors(edges: dict[str, set[str]]) -> dict[str, int]:
    """Each room's floor; the rooms of a circle share one floor (the drawing's condensation)."""
    together = {room: min(c) for c in circles(edges) for room in c}
    height: dict[str, int] = {}

    def visit(room: str) -> int:
        key = together.get(room, room)
        if key in height:
            return height[key]
        height[key] = 0  # a circle's own rooms do not lift it
        members = [r for r, k in together.items() if k == key] or [room]
        below = [visit(r) for m in members for r in edges[m] if together.get(r, r) != key]
        height[key] = 1 + max(below, default=0)
        return height[key]

    return {room: visit(room) for room in edges}


def largest(modules: dict[str, Path], n: int) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    files, functions = [], []
    for name, path in modules.items():
        text = path.read_text()
        files.append((text.count("\n"), str(path.relative_to(REPO))))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append((node.end_lineno - node.lineno + 1, f"{name}.{node.name}"))
    return sorted(files, reverse=True)[:n], sorted(functions, reverse=True)[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--largest", type=int, default=0)
    parser.add_argument("--edges", action="store_true")
    args = parser.parse_args()
    edges, modules = measure()
    height = floors(edges)
    print(f"rooms {len(edges)} · floors {max(height.values())} · imports {sum(map(len, edges.values()))}"
          f" · circles {len(circles(edges))}")
    for circle in circles(edges):
        print("circle:", " ↔ ".join(circle))
    loose = sorted(r for r in edges if r.count(".") == 1 and r.startswith("workers.")
                   and not (REPO / r.replace(".", "/")).is_dir())
    names = ", ".join(r.split(".")[1] for r in loose)
    print(f"loose modules at the root of workers/: {len(loose)} ({names})")
    if args.edges:
        for room in sorted(edges, key=lambda r: (height[r], r)):
            print(f"  {height[room]:>2} {room} → {', '.join(sorted(edges[room])) or '—'}")
    if args.largest:
        files, functions = largest(modules, args.largest)
        print("largest files:", ", ".join(f"{p} {n}" for n, p in files))
        print("largest functions:", ", ".join(f"{f} {n}" for n, f in functions))


if __name__ == "__main__":
    main()
