"""The shape of a package as its imports draw it: lines per module, modules per folder, and its import
depth (the longest chain of modules each importing the next, inside the package).

    python3.11 tools/import_depth.py app/reconcile

Every `import` and `from ... import` of the package's own modules counts, wherever it stands in a module
(a function's late import binds the two modules as much as one at the top); `from pkg import name` counts
as an import of the module pkg/name.py when there is one, else of pkg. A package's __init__.py is a module
like any other. Modules in an import cycle are one floor together (the cycles are listed): a chain is then
counted over the cycles as units, and a tree with no cycle counts each module once.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from functools import cache
from pathlib import Path

PACKAGE = "tls_injector"  # the import name of app/ (docs/architecture.md)


def module_name(path: Path, app: Path) -> str:
    parts = list(path.relative_to(app).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The modules of `known` that the module at `path` (import name `name`) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known and m != name}


def measure(root: Path) -> dict[str, object]:
    app = next(p for p in (root, *root.parents) if (p / "__init__.py").exists() and
               not (p.parent / "__init__.py").exists())
    paths = {module_name(p, app): p for p in sorted(root.rglob("*.py"))}
    graph = {name: imports(path, name, set(paths)) for name, path in paths.items()}
    unit = components(graph)
    units: dict[int, set[int]] = {}
    for name, targets in graph.items():
        units.setdefault(unit[name], set()).update(unit[t] for t in targets if unit[t] != unit[name])
    sizes = Counter(unit.values())

    @cache
    def depth(u: int) -> int:
        return 1 + max((depth(v) for v in units.get(u, ())), default=0)

    top = max(units, key=depth)
    chain, u = [], top
    while True:
        chain.append(sorted(n for n in graph if unit[n] == u))
        if not units.get(u):
            break
        u = max(units[u], key=depth)
    folders = Counter(p.parent.relative_to(app.parent).as_posix() for p in paths.values() if p.name != "__init__.py")
    return {
        "depth": depth(top),
        "chain": chain,
        "cycles": sorted(sorted(n for n in graph if unit[n] == u) for u, size in sizes.items() if size > 1),
        "folders": dict(sorted(folders.items())),
        "lines": {p.relative_to(app.parent).as_posix(): len(p.read_text().splitlines()) for p in paths.values()},
    }


def components(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each module's strongly connected component (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    comp: dict[str, int] = {}
    for start, targets in graph.items():
        if start in index:
            continue
        work = [(start, iter(sorted(targets)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        comp[member] = index[node]
                        if member == node:
                            break
    return comp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a package folder of app/, e.g. app/reconcile")
    parser.add_argument("--lines", action="store_true", help="also list each module's lines")
    args = parser.parse_args(argv)
    found = measure(args.folder.resolve())
    print(f"import depth: {found['depth']} modules")
    for step in found["chain"]:  # type: ignore[attr-defined]
        print("  " + " = ".join(step))
    for cycle in found["cycles"]:  # type: ignore[attr-defined]
        print("cycle: " + " <-> ".join(cycle))
    for folder, count in found["folders"].items():  # type: ignore[attr-defined]
        print(f"{folder}: {count} modules")
    if args.lines:
        for path, count in sorted(found["lines"].items()):  # type: ignore[attr-defined]
            print(f"{count:6d} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
