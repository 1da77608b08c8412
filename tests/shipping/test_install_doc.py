"""docs/install.md tells the truth: its RBAC tables list exactly the grants that ship, and its commands
name paths and objects that exist."""

from __future__ import annotations

import re

import pytest

from tests.shipping.rbac import Grant, grants_for
from tests.shipping.support import ROOT, Obj, installed, only, reconciler

DOC = ROOT / "docs" / "install.md"


def tables() -> list[list[dict[str, str]]]:
    """Every markdown table of the RBAC section, as rows keyed by header."""
    section = DOC.read_text().split("### RBAC", 1)[1]
    found: list[list[dict[str, str]]] = []
    for block in re.findall(r"((?:^\|.*\|\n)+)", section, flags=re.MULTILINE):
        lines = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in block.splitlines()]
        header, rows = lines[0], lines[2:]
        found.append([dict(zip(header, row, strict=True)) for row in rows])
    return found


def documented(rows: list[dict[str, str]]) -> set[Grant]:
    grants: set[Grant] = set()
    for row in rows:
        group = "" if row["API group"] == "core" else row["API group"]
        pinned = row["only these names"]
        names = None if pinned == "—" else frozenset(n.strip() for n in pinned.split(","))
        where = None if row["where"] == "all namespaces" else row["where"]
        for resource in row["resources"].split(","):
            for verb in row["verbs"].split(","):
                grants.add(Grant(where, group, resource.strip(), verb.strip(), names))
    return grants


def _accounts() -> list[Obj]:
    objects = installed()
    return [reconciler(objects), only(objects, "Job")]


@pytest.mark.parametrize("index", [0, 1], ids=["reconciler pods", "bootstrap Job"])
def test_the_rbac_table_lists_exactly_what_the_service_account_is_granted(index: int) -> None:
    controller = _accounts()[index]
    account = controller["spec"]["template"]["spec"]["serviceAccountName"]
    shipped = set(grants_for(installed(), namespace=controller["metadata"]["namespace"], account=account))
    rows = tables()[index]
    assert all(row["why"] for row in rows), "every grant says why"
    assert documented(rows) == shipped


def test_every_path_the_doc_applies_exists() -> None:
    paths = set(re.findall(r"-k ([\w./-]+)", DOC.read_text()))
    assert paths
    for path in paths:  # my-cluster: the doc's copy of the example (tests/shipping/test_install_commands.py)
        shipped = path.replace("overlays/my-cluster", "overlays/example")
        assert (ROOT / shipped / "kustomization.yaml").exists(), path


def test_the_break_glass_commands_delete_the_configurations_that_ship() -> None:
    text = DOC.read_text()
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        name = only(installed(), kind)["metadata"]["name"]
        assert f"kubectl delete {kind.lower()} {name}" in text
    assert "--dry-run=server" in text
