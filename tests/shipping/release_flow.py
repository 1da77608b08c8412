"""docs/release.md's steps run as written against a registry of the suite's own: the offline blocks in a
copy of the release tree, the image archive tools/image.py builds from the Dockerfile, a release key
made with cosign, then the registry block (push, pin the chart to the digest, push the chart, SBOMs,
signatures). Shared by the registry test (tests/shipping/test_release_registry.py) and the node tier's
install from the registry (tests/node/test_install_paths.py)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.image.oci import image_tool
from tests.shipping.install_doc import Block, blocks, run, run_block
from tests.shipping.registry import Registry, client_env, release_tools
from tests.shipping.support import ROOT, release_tree
from tools import release

RELEASE_DOC = ROOT / "docs" / "release.md"
INSTALL_DOC = ROOT / "docs" / "install.md"
PASSWORD = "release-test-password"
# The release block pushes ~100 MB, runs two syft scans and four cosign signatures: ~1-2 min on 2 busy
# cores; bounded well above that.
BLOCK_SECONDS = 900.0
TOOL_SECONDS = 300.0


@dataclass(frozen=True)
class Released:
    root: Path  # the release's working tree: dist/, cosign.key, cosign.pub
    registry: Registry
    prefix: str  # 127.0.0.1:PORT/platform, the docs' REGISTRY
    digest: str  # the image's, as the release block recorded it
    archive: Path
    env: dict[str, str]

    @property
    def tools(self) -> tuple[Path, ...]:
        return (Path(release_tools().bin_dir()),)

    def sh(self, script: str, **more: str) -> subprocess.CompletedProcess[str]:
        return run(script, cwd=self.root, tools_first=self.tools, timeout=TOOL_SECONDS,
                   **{**self.env, "REGISTRY": self.prefix, "DIGEST": self.digest, **more})


def the_block(doc: Path, where: str) -> Block:
    """The one block of `doc` marked `where`."""
    (found,) = [b for b in blocks(doc) if b.where == where]
    return found


def release_to(registry: Registry, *, tree: Path, home: Path, archive: Path | None = None) -> Released:
    """docs/release.md run as written in a copy of the release tree under `tree`, pushing to `registry`
    (clients' configs and caches under `home`); `archive` is the image archive to release, tools/image.py's
    build of the Dockerfile unless given."""
    version = release.version()
    tools = release_tools()
    assert tools.built(), "the release tools are not built: python3.11 tools/release_tools.py build"
    root = release_tree(tree)
    for block in (b for b in blocks(RELEASE_DOC) if b.where == "offline"):
        run_block(block, cwd=root, doc="docs/release.md", VERSION=version)
    # The network block's archive, made by the suite's build of the same Dockerfile (docs/release.md).
    released = root / "dist" / f"tls-injector-{version}.oci.tar"
    shutil.copyfile(archive or image_tool().build(), released)
    home.mkdir(parents=True, exist_ok=True)
    env = {**client_env(registry, home), "COSIGN_PASSWORD": PASSWORD}
    keys = run("cosign generate-key-pair", cwd=root, tools_first=(Path(tools.bin_dir()),), **env)
    assert keys.returncode == 0, keys.stderr
    prefix = f"{registry.host}/platform"
    run_block(the_block(RELEASE_DOC, "registry"), cwd=root, doc="docs/release.md", tools_first=(
        Path(tools.bin_dir()),), timeout=BLOCK_SECONDS, REGISTRY=prefix, VERSION=version, **env)
    digest = (root / "dist" / "image.digest").read_text().strip()
    return Released(root, registry, prefix, digest, released, env)
