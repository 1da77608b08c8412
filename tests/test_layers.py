"""No module of app/ stands outside the import contracts of pyproject.toml, and the contracts name the
libraries the code really uses (lint-imports checks the imports; this checks the contracts themselves)."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"


def _contracts() -> list[dict[str, Any]]:
    contracts: list[dict[str, Any]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"]
    return contracts


def _top_level_modules() -> set[str]:
    """app's packages and modules by their import names, `tls_injector.x` for app/x/ and app/x.py (app/__init__.py
    is the root itself)."""
    packages = {f"tls_injector.{p.name}" for p in APP.iterdir() if (p / "__init__.py").is_file()}
    modules = {f"tls_injector.{p.stem}" for p in APP.glob("*.py") if p.stem != "__init__"}
    return packages | modules


def _layered() -> set[str]:
    [layers] = [c for c in _contracts() if c["type"] == "layers" and "containers" not in c]
    return {name.strip() for layer in layers["layers"] for name in layer.replace("|", ":").split(":")}


def test_every_module_of_app_sits_in_a_layer() -> None:
    assert _top_level_modules() - _layered() == set()
    assert _layered() - _top_level_modules() == set(), "a layer names a module that does not exist"


def test_each_only_x_contract_covers_every_module_but_x() -> None:
    everything = _top_level_modules() - {"tls_injector.__main__"}  # one line: it runs tls_injector.cli.main
    for contract in _contracts():
        if contract["type"] == "forbidden" and contract["name"].startswith("Only "):
            owner = contract["name"].split()[1]
            assert set(contract["source_modules"]) == everything - {owner}, contract["name"]


def _third_party_imports(paths: list[Path]) -> set[str]:
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    ours = ("tls_injector", "__future__")
    return {name for name in found if name not in sys.stdlib_module_names and name not in ours}


def test_the_http_contract_names_exactly_the_libraries_only_app_web_imports() -> None:
    [contract] = [c for c in _contracts() if c["name"].startswith("Only tls_injector.web ")]
    web = _third_party_imports(sorted((APP / "web").rglob("*.py")))
    elsewhere = _third_party_imports([p for p in APP.rglob("*.py") if (APP / "web") not in p.parents])
    assert {"httptools", "uvloop"} <= web - elsewhere
    assert set(contract["forbidden_modules"]) == web - elsewhere
