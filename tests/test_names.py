"""The names users see have one home, app/names.py: anywhere else in app/ they are imported, never spelled.

A second spelling drifts: the opt-in label once lived as a string in one module and a tuple in another,
the default cluster domain in two packages. This reads every string literal of every module (f-string
parts included; docstrings are prose and left out) and fails on any that spells one of the names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tls_injector import names

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "app" / "names.py"
# Kubernetes' own names, not ours (the kubernetes.io/tls Secret's keys, a podCertificate key type, the
# variables TLS stacks read) and words too common to be a name (true, secret, enabled...): not checked.
NOT_OURS = {names.CERT_FILE, names.KEY_FILE, names.CA_FILE, names.POD_KEY_TYPE, *names.TLS_ENV_VARS}


def _contract() -> dict[str, str]:
    """Every name of app/names.py worth checking: value -> constant."""
    found: dict[str, str] = {}
    for constant, value in vars(names).items():
        for text in value if isinstance(value, tuple) else (value,):
            if constant.isupper() and isinstance(text, str) and text not in NOT_OURS and not text.isalpha():
                found.setdefault(text, constant)
    return found


def _literals(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def second_spellings(source: str, where: str, contract: dict[str, str]) -> list[str]:
    """`where:line: CONSTANT spelled in '...'` for each literal that spells a name: anywhere in the literal
    for names with a dot or a slash or our prefix (labels, annotations, paths, our objects), as the whole
    literal for single words (the project's name starts every error line, "tls-injector serve: ...";
    "pod-certificate" is also in "--pod-certificates")."""
    found = []
    for line, text in _literals(source):
        for value, constant in contract.items():
            distinctive = "." in value or "/" in value or value.startswith(f"{names.NAME}-")
            spelled = value in text if distinctive else text == value
            if spelled:
                found.append(f"{where}:{line}: {constant} spelled in {text[:80]!r}")
    return found


def test_no_module_but_app_names_spells_a_name_users_see() -> None:
    contract = _contract()
    assert {"INJECT_LABEL", "DOMAIN", "DEFAULT_CLUSTER_DOMAIN", "MANAGED_BY_LABEL", "TRUST_BUNDLE_CONFIGMAP",
            "SECRET_NAME_ANNOTATION", "INJECTED_ANNOTATION", "NAME"} <= set(contract.values())
    found = [hit for path in sorted((ROOT / "app").rglob("*.py")) if path != HOME
             for hit in second_spellings(path.read_text(), str(path.relative_to(ROOT)), contract)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        'LABEL = "tls-injector.io/inject"',
        'PAIR = ("tls-injector.io/inject", "enabled")',
        'def f(d: str = "cluster.local") -> str:\n    return d',
        'HELP = f"labelled tls-injector.io/inject={x}"',
        'BUNDLE = "tls-injector-trust-bundle"',
        'OWNER = {"app.kubernetes.io/managed-by": "x"}',
        'DEFAULT = "tls-injector"',
    ],
)
def test_the_check_finds_each_kind_of_second_spelling(source: str) -> None:
    assert second_spellings(source, "probe.py", _contract())


def test_the_check_leaves_docstrings_and_error_prefixes_alone() -> None:
    source = '"""Pods labelled tls-injector.io/inject get TLS."""\nERROR = "tls-injector serve: cannot listen"\n'
    assert second_spellings(source, "prose.py", _contract()) == []
