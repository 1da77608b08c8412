"""tools/import_depth.py, the measure of a package's shape: its import depth counts the longest chain of the
package's own modules, every kind of import counts, a cycle is one floor, and the folders and lines are the
tree's."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_depth_tool", ROOT / "tools" / "import_depth.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """app/ with a package `pkg` of these modules (their text), each folder a package."""
    for name, text in {"__init__.py": "", "pkg/__init__.py": "", **files}.items():
        path = tmp_path / "app" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(text)
    return tmp_path / "app" / "pkg"


def measure(tool: ModuleType, tmp_path: Path, files: dict[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = tool.measure(tree(tmp_path, files))
    return found


def test_a_chain_of_three_kinds_of_import_is_three_floors_over_the_bottom(tool: ModuleType, tmp_path: Path) -> None:
    found = measure(tool, tmp_path, {
        "pkg/a.py": "from tls_injector.pkg.sub import b\n",  # a module through its package
        "pkg/sub/b.py": "def f() -> None:\n    import tls_injector.pkg.c\n",  # a late import counts
        "pkg/c.py": "from tls_injector.pkg.d import x\n",  # a name of a module
        "pkg/d.py": "x = 1\nimport json\n",  # another package's import does not
    })
    assert found["depth"] == 4
    assert found["chain"] == [["tls_injector.pkg.a"], ["tls_injector.pkg.sub.b"], ["tls_injector.pkg.c"],
                              ["tls_injector.pkg.d"]]
    assert found["cycles"] == []
    assert found["folders"] == {"app/pkg": 3, "app/pkg/sub": 1}
    assert found["lines"]["app/pkg/d.py"] == 2


def test_one_module_more_at_the_bottom_is_one_floor_more(tool: ModuleType, tmp_path: Path) -> None:
    found = measure(tool, tmp_path, {"pkg/a.py": "from tls_injector.pkg import b\n",
                                     "pkg/b.py": "from tls_injector.pkg import c\n",
                                     "pkg/c.py": "from . import d\n", "pkg/d.py": ""})
    assert found["depth"] == 4
    assert measure(tool, tmp_path, {"pkg/d.py": "from tls_injector.pkg import e\n", "pkg/e.py": ""})["depth"] == 5


def test_modules_in_a_cycle_are_one_floor_and_listed(tool: ModuleType, tmp_path: Path) -> None:
    found = measure(tool, tmp_path, {"pkg/a.py": "from tls_injector.pkg import b\n",
                                     "pkg/b.py": "from tls_injector.pkg import c\n",
                                     "pkg/c.py": "from tls_injector.pkg import b, d\n", "pkg/d.py": ""})
    assert found["cycles"] == [["tls_injector.pkg.b", "tls_injector.pkg.c"]]
    assert found["depth"] == 3
    assert found["chain"][1] == ["tls_injector.pkg.b", "tls_injector.pkg.c"]


def test_the_reconciler_is_measured(tool: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert tool.main([str(ROOT / "app" / "reconcile")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("import depth: ")
    assert "app/reconcile/core: " in out
