"""docs/architecture.md stays a true map: every module of app/ has its line, and the layers are the contract's."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()


def package_paragraphs(doc: str) -> dict[str, str]:
    """Each package's paragraph of the map, by package name: it opens with **`tls_injector.<name>`**."""
    return dict(re.findall(r"^\*\*`tls_injector\.(\w+)`\*\*(.*?)(?=^\s*$)", doc, flags=re.MULTILINE | re.DOTALL))


def unnamed(doc: str, app: Path) -> list[str]:
    """Modules the map does not name: a package's module under that package's paragraph, a loose module
    (app/x.py) anywhere by its path, and a package without a paragraph as the package itself."""
    paragraphs = package_paragraphs(doc)
    missing = []
    for path in sorted(app.rglob("*.py")):
        parts = path.relative_to(app).parts
        if len(parts) == 1:
            if path.name != "__init__.py" and f"`app/{path.name}`" not in doc:
                missing.append(f"app/{path.name}")
        elif parts[0] not in paragraphs:
            missing.append(f"app/{parts[0]}/")
        elif path.name != "__init__.py" and f"`{'/'.join(parts[1:])}`" not in paragraphs[parts[0]]:
            missing.append(path.relative_to(app.parent).as_posix())
    return sorted(set(missing))


def test_every_module_of_app_is_named() -> None:
    assert unnamed(DOC, ROOT / "app") == [], "give each module its words in docs/architecture.md"


def test_a_module_named_only_under_another_package_is_unnamed(tmp_path: Path) -> None:
    for name in ("pkg/__init__.py", "pkg/plan.py", "pkg/read.py", "other/__init__.py", "other/read.py",
                 "fresh/__init__.py", "fresh/x.py", "loose.py"):
        (tmp_path / "app" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "app" / name).write_text("")
    doc = "**`tls_injector.pkg`**: `plan.py`.\n\n**`tls_injector.other`**: `read.py`, and `app/loose.py`.\n\n"
    assert unnamed(doc, tmp_path / "app") == ["app/fresh/", "app/pkg/read.py"]


def test_the_layers_are_the_contracts_layers() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    # The app-wide layers; the reconciler's sub-packages have their own (a contract with containers).
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers" and "containers" not in c]
    rows = re.findall(r"^\| \d+ \| (.*?) \|", DOC, flags=re.MULTILINE)
    table = [re.findall(r"`(tls_injector\.\w+)`", row) for row in rows]
    assert table == [[p.strip() for p in layer.split("|")] for layer in layers]
