"""The command blocks of a doc (docs/install.md, docs/release.md): each says where it runs in an HTML
comment just above it, `<!-- run: offline|cluster|registry|docker|network[, exit N] -->`. The offline ones
are run by the suite as written (tests/shipping/test_install_commands.py, test_release.py); `blocks(doc)`
lists the cluster ones for the real control-plane tier (tests/cluster/), and the registry ones (a push
to, or a verify against, a container registry) run against a registry of the suite's own on loopback
(tests/shipping/test_release_registry.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.shipping.helm import helm
from tests.shipping.support import kubectl

PLACES = ("offline", "cluster", "registry", "docker", "network")
# What the docker block of docs/install.md defines: the user's registry (any name but the placeholder,
# which check-offline.sh refuses) and the digest of the pushed image (any well-formed one serves offline).
REGISTRY = "registry.test.invalid/platform"
DIGEST = "sha256:" + "5e" * 32
_MARKER = re.compile(r"<!-- run: (\w+)(?:, exit (\d+))? -->\s*\n```sh\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Block:
    where: str
    exit: int
    text: str
    line: int


def blocks(doc: Path) -> list[Block]:
    text = doc.read_text()
    return [Block(m[1], int(m[2] or 0), m[3], text[: m.start()].count("\n") + 1) for m in _MARKER.finditer(text)]


def run(script: str, *, cwd: Path, tools_first: tuple[Path, ...] = (), timeout: float = 240,
        **more: str) -> subprocess.CompletedProcess[str]:
    """`script` under bash -euo pipefail, with `tools_first`, the suite's python, kubectl and helm first on
    PATH."""
    tools = os.pathsep.join([*map(str, tools_first), str(Path(sys.executable).parent), str(Path(kubectl()).parent),
                             str(Path(helm()).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": tools, "REGISTRY": REGISTRY, "DIGEST": DIGEST, **more}
    env.pop("KUBECONFIG", None)
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, check=False, timeout=timeout)


def run_block(block: Block, *, cwd: Path, doc: str, tools_first: tuple[Path, ...] = (), timeout: float = 240,
              **more: str) -> subprocess.CompletedProcess[str]:
    """Run one block; fail naming the doc's line unless it ends with the exit status it states."""
    result = run(block.text, cwd=cwd, tools_first=tools_first, timeout=timeout, **more)
    assert result.returncode == block.exit, (
        f"{doc}:{block.line}: exit {result.returncode}, not {block.exit}\n"
        f"{block.text}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return result
