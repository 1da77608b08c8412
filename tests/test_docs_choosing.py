"""docs/choosing.md and docs/app-owners.md: reachable from README's "What it is", their links resolve, and
what the application owners' page states (paths, file names, variables, renewal times) is what the code does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tls_injector import names
from tls_injector.pki import LEAF_LOOKAHEAD, LEAF_VALIDITY

ROOT = Path(__file__).resolve().parent.parent
CHOOSING = ROOT / "docs" / "choosing.md"
OWNERS = ROOT / "docs" / "app-owners.md"


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_readme_starts_with_the_two_commands_then_says_what_it_is_and_links_both_pages() -> None:
    text = (ROOT / "README.md").read_text()
    assert text.split("```sh\n", 1)[1].startswith("python3.11 tools/dev.py serve\npython3.11 tools/dev.py test\n```")
    sections = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert sections[0] == "What it is"
    assert sections.index("Benchmarks") > sections.index("Install in a cluster")
    what_it_is = text.split("## What it is", 1)[1].split("\n## ", 1)[0]
    assert "(docs/choosing.md)" in what_it_is
    assert "(docs/app-owners.md)" in what_it_is


@pytest.mark.parametrize("page", [CHOOSING, OWNERS], ids=lambda p: p.name)
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    links = re.findall(r"\]\(([^)#]+\.md)(?:#([^)]+))?\)", page.read_text())
    assert links
    for target, anchor in links:
        path = page.parent / target
        assert path.exists(), target
        if anchor:
            assert anchor in _anchors(path), f"{target}#{anchor}"


def test_the_comparison_covers_each_alternative_and_both_directions_of_a_move() -> None:
    text = CHOOSING.read_text()
    header = next(line for line in text.splitlines() if line.startswith("| |"))
    for tool in ("tls-injector", "cert-manager + trust-manager", "csi-driver", "service-ca", "mesh", "Kyverno"):
        assert tool in header, tool
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith(("| |", "| ---"))]
    assert all(line.count(" | ") == header.count(" | ") for line in rows), "every row has a cell per tool"
    for heading in ("## When not to use tls-injector", "## From a cert-manager Certificate + trust-manager Bundle",
                    "## And back"):
        assert heading in text


def test_the_application_owners_page_states_what_the_code_does() -> None:
    text = OWNERS.read_text()
    for path in (f"{names.CERT_MOUNT_PATH}/tls.crt", f"{names.CERT_MOUNT_PATH}/tls.key",
                 f"{names.CERT_MOUNT_PATH}/ca.crt", f"{names.TRUST_MOUNT_PATH}/{names.BUNDLE_KEY}"):
        assert f"`{path}`" in text, path
    assert f"`{names.TRUST_BUNDLE_CONFIGMAP}`" in text
    assert all(f"`{var}`" in text for var in names.TLS_ENV_VARS)
    assert f"`{names.ENV_ANNOTATION}: \"true\"`" in text
    assert f"a leaf lives {LEAF_VALIDITY.days} days and is renewed with {LEAF_LOOKAHEAD.days} left" in text
    assert f"shorter than {LEAF_LOOKAHEAD.days} days" in text
    assert f"`{names.INJECT_LABEL}: \"true\"`" in text


def _cells(row_name: str) -> dict[str, str]:
    """One row of the comparison, as {tool column: cell}."""
    lines = CHOOSING.read_text().splitlines()
    header = [c.strip() for c in next(line for line in lines if line.startswith("| |")).strip("|").split(" | ")]
    row = next(line for line in lines if line.startswith(f"| {row_name} |"))
    return dict(zip(header[1:], [c.strip() for c in row.strip("|").split(" | ")[1:]], strict=True))


def test_the_offline_row_names_each_tools_own_offline_command_and_only_check_is_claimed_as_unique() -> None:
    offline = _cells("works offline on manifests")
    mesh = offline["a mesh's mTLS (Linkerd, Istio)"]
    assert "`linkerd inject`" in mesh, mesh
    assert "`istioctl kube-inject`" in mesh, mesh
    assert "`inject`" in offline["tls-injector"]
    assert "`check`" in offline["tls-injector"]
    only = CHOOSING.read_text().split("## What only tls-injector does", 1)[1].split("\n## ", 1)[0]
    offline_bullet = next(b for b in only.split("\n- ") if "offline" in b)
    assert "`tls-injector check --old --new`" in offline_bullet
    assert "is not unique" in offline_bullet, "inject has counterparts in the meshes' CLIs"
