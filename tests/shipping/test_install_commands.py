"""Every command block of docs/install.md runs as written. Each block says where it runs (an HTML comment
`<!-- run: offline|cluster|registry|docker|network[, exit N] -->` just above it); the offline ones run here, in
order, in a copy of the repository, with the kubectl, tls-injector and helm the suite installs, and
must end with the exit status they state. The cluster ones are listed by `cluster_blocks()` for the real
control-plane tier (tests/cluster/) to run; here their paths and files are checked to exist after the
offline steps, and the copy-the-example step is checked to build.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.shipping import install_doc
from tests.shipping.install_doc import DIGEST, PLACES, REGISTRY, Block, run_block
from tests.shipping.support import ROOT, kubectl
from tools import release

DOC = ROOT / "docs" / "install.md"
# Enough of the repository for every offline block: what the overlays, the chart and the examples name.
COPIED = ("manifests", "certs-bootstrap", "charts", "examples")

pytestmark = pytest.mark.timeout(300)


def blocks() -> list[Block]:
    return install_doc.blocks(DOC)


def cluster_blocks() -> list[Block]:
    """The blocks that need a real cluster, in the doc's order (for tests/cluster/)."""
    return [b for b in blocks() if b.where == "cluster"]


def _run(script: str, *, cwd: Path) -> subprocess.CompletedProcess[str]:
    return install_doc.run(script, cwd=cwd)


def test_every_command_block_says_where_it_runs() -> None:
    text = DOC.read_text()
    assert len(blocks()) == text.count("```sh"), "a ```sh block without its <!-- run: ... --> line"
    assert {b.where for b in blocks()} <= set(PLACES)
    assert {b.where for b in blocks()} >= {"offline", "cluster"}


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository's manifests, chart and examples after every offline block ran."""
    root = tmp_path_factory.mktemp("clone")
    for name in COPIED:
        shutil.copytree(ROOT / name, root / name)
    for block in blocks():
        if block.where == "offline":
            run_block(block, cwd=root, doc="docs/install.md")
    return root


def test_the_offline_blocks_run_as_written(clone: Path) -> None:
    overlay = clone / "manifests/overlays/my-cluster"
    assert DIGEST in (overlay / "image/kustomization.yaml").read_text()
    cidrs = [line.strip() for line in (overlay / "network.yaml").read_text().splitlines() if "  cidr:" in line]
    assert cidrs == ["cidr: 10.0.0.0/24", "cidr: 10.0.0.1/32"]


def test_the_cluster_blocks_name_paths_and_files_that_exist_once_the_offline_steps_ran(clone: Path) -> None:
    for block in cluster_blocks():
        for path in re.findall(r"-k (\S+)", block.text):
            assert (clone / path / "kustomization.yaml").exists(), f"docs/install.md:{block.line}: {path}"
        for path in re.findall(r"-f (\S+\.ya?ml)", block.text):
            assert (clone / path).exists(), f"docs/install.md:{block.line}: {path}"


def test_the_copied_overlay_builds_like_the_example_with_only_the_placeholders_changed(clone: Path) -> None:
    mine = subprocess.run([kubectl(), "kustomize", str(clone / "manifests/overlays/my-cluster")],
                          capture_output=True, text=True, check=True).stdout
    example = subprocess.run([kubectl(), "kustomize", str(ROOT / "manifests/overlays/example")],
                             capture_output=True, text=True, check=True).stdout
    replaced = (example.replace("sha256:" + "0" * 64, DIGEST).replace("registry.example.com/platform", REGISTRY)
                .replace("SET-control-plane-CIDR", "10.0.0.0/24")
                .replace("SET-API-server-endpoint-CIDR", "10.0.0.1/32"))
    assert mine == replaced


ZEROS = "sha256:" + "0" * 64
CIDRS = {"SET-control-plane-CIDR", "SET-API-server-endpoint-CIDR"}
# Each copy of the example with some placeholders set, and what check-offline.sh must still list. The
# image's four lines are its three containers (webhook, reconciler, bootstrap Job) and the one name.
LEFT = {
    "example": {ZEROS, "registry.example.com"} | CIDRS,
    "digest-only": {"registry.example.com"} | CIDRS,
    "image-set": CIDRS,
    # The documented sed run with DIGEST unset: `digest: ` empty, rendered with the base's tag alone.
    "digest-unset": {f"no digest: {REGISTRY}/tls-injector:{release.version()}"} | CIDRS,
    "all-set": set(),
}


def _overlay(clone: Path, case: str) -> Path:
    if case == "example":
        return clone / "manifests/overlays/example"
    target = clone / f"manifests/overlays/{case}"
    shutil.copytree(clone / "manifests/overlays/example", target)
    image = target / "image/kustomization.yaml"
    digest = {"digest-unset": ""}.get(case, DIGEST)
    text = image.read_text().replace(ZEROS, digest)
    if case != "digest-only":
        text = text.replace("registry.example.com/platform", REGISTRY)
    image.write_text(text)
    if case == "all-set":
        network = target / "network.yaml"
        network.write_text(network.read_text().replace("SET-control-plane-CIDR", "10.0.0.0/24")
                           .replace("SET-API-server-endpoint-CIDR", "10.0.0.1/32"))
    return target


@pytest.mark.parametrize("case", sorted(LEFT))
def test_the_offline_check_fails_loudly_on_each_placeholder_left(clone: Path, case: str) -> None:
    """The shipped example itself, and copies with some of its placeholders set: every one left is
    listed (the registry's placeholder name and an image without a digest too), exit 1; none left, exit 0."""
    target = _overlay(clone, case)
    result = _run(f"sh {target.relative_to(clone)}/check-offline.sh", cwd=clone)
    listed = {line.strip() for line in result.stderr.splitlines()[1:]}
    assert listed == LEFT[case], result.stderr
    if LEFT[case]:
        assert result.returncode == 1
        assert "placeholders not set yet" in result.stderr
    else:
        assert result.returncode == 0, result.stderr
        assert "every image pinned by digest, no placeholder left" in result.stdout


def test_an_overlay_that_does_not_build_is_exit_2(clone: Path) -> None:
    broken = clone / "manifests/overlays/broken"
    shutil.copytree(clone / "manifests/overlays/example", broken)
    (broken / "kustomization.yaml").write_text((broken / "kustomization.yaml").read_text().replace(
        "../../base", "../../no-such-base"))
    result = _run("sh manifests/overlays/broken/check-offline.sh", cwd=clone)
    assert result.returncode == 2
    assert "does not build" in result.stderr


def test_the_doc_needs_no_binary_it_does_not_install_and_no_cluster_for_its_offline_check() -> None:
    text = DOC.read_text()
    commands = "\n".join(b.text for b in blocks())
    assert not re.search(r"(^|[|;&(]\s*)kustomize ", commands, re.MULTILINE), "kubectl kustomize only"
    assert "--dry-run=client" not in commands
    assert "my-deployment-without-tls.yaml" not in text


def test_the_helm_example_pins_the_image_by_digest_as_the_overlay_does() -> None:
    helm_blocks = [b.text for b in blocks() if "helm template" in b.text or "helm upgrade" in b.text]
    assert helm_blocks
    for text in helm_blocks:
        assert "image.tag" not in text
        assert text.count('image.digest="$DIGEST"') == text.count("image.repository=")
    overlay_image = (ROOT / "manifests/overlays/example/image/kustomization.yaml").read_text()
    assert "newTag" not in overlay_image
    assert "digest: sha256:" in overlay_image
