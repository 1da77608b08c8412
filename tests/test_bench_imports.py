"""No two modules of bench/ import each other, directly or round a longer circle: a bench module is run
as a command (`python -m bench.x`), and a circle makes which one loads first decide what the other sees.
Imports inside functions count too (a circle closed late is still one)."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def bench_imports(folder: Path) -> dict[str, set[str]]:
    """Each module of `folder` (as bench.<name>) and the modules of bench it imports, anywhere in it."""
    graph: dict[str, set[str]] = {}
    for path in sorted(folder.glob("*.py")):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bench."):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("bench.")}
        graph[f"bench.{path.stem}"] = found
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle of imports, each once, as the modules along it."""
    found: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == path[0]:
                if path[0] == min(path):  # each circle once, from its least module
                    found.append([*path, nxt])
            elif nxt not in path and nxt in graph:
                walk([*path, nxt])

    for start in sorted(graph):
        walk([start])
    return found


def test_no_module_of_bench_imports_itself_round_a_circle() -> None:
    assert circles(bench_imports(BENCH)) == []


def test_a_circle_is_found_however_late_it_is_closed(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from bench.b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from bench.c import y\n")
    (tmp_path / "c.py").write_text("import bench.a\n")
    (tmp_path / "d.py").write_text("from bench.a import z\n")
    assert circles(bench_imports(tmp_path)) == [["bench.a", "bench.b", "bench.c", "bench.a"]]
