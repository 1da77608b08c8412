"""docs/pki.md says which PKI pieces no feature uses yet. This keeps that true: the first use of one outside
app/pki fails here until the doc's "library only" section is updated (and this list with it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY_ONLY = {"make_root", "to_pkcs12", "BUNDLE_PREFIX"}


def _names_used(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    found |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    return found | {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def test_no_product_code_outside_app_pki_uses_the_library_only_pieces() -> None:
    users = {str(p.relative_to(ROOT)): sorted(_names_used(p) & LIBRARY_ONLY)
             for p in (ROOT / "app").rglob("*.py") if "pki" not in p.relative_to(ROOT / "app").parts[:1]}
    assert {path: names for path, names in users.items() if names} == {}, (
        "a feature now uses a library-only PKI piece: say so in docs/pki.md and update LIBRARY_ONLY")


def test_the_doc_names_every_library_only_piece() -> None:
    section = (ROOT / "docs" / "pki.md").read_text().split("library only", 1)[1]
    for name in LIBRARY_ONLY - {"intermediate_renewal", "BUNDLE_PREFIX"}:
        assert f"`{name}(" in section or f"`{name}`" in section, name


def test_the_pieces_exist_in_app_pki() -> None:
    """Guards the first test against passing on names that were renamed away."""
    defined: set[str] = set()
    for path in (ROOT / "app" / "pki").rglob("*.py"):
        tree = ast.parse(path.read_text())
        defined |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        defined |= {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets
                    if isinstance(t, ast.Name)}
        defined |= {n.target.id for n in ast.walk(tree)
                    if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    assert defined >= LIBRARY_ONLY
