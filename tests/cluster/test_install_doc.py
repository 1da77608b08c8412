"""docs/install.md's verify step, run as written against the real control plane with the shipped install
running (the `installed` fixture): the blocks marked `<!-- run: cluster -->` that need no kubelet.

The others need what this tier does not run: `rollout status` and `port-forward` wait for pods that a
kubelet would start, and the uninstall blocks would remove the session's install; the same objects'
acceptance and removal are proven by test_mission.py (server-side apply) and the chart's install and
uninstall test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.cluster.controlplane import ControlPlane
from tests.cluster.install import ROOT, Installation
from tests.shipping.install_doc import Block, blocks

DOC = ROOT / "docs" / "install.md"


def the_block(starting: str) -> Block:
    (found,) = [b for b in blocks(DOC) if b.where == "cluster" and b.text.startswith(starting)]
    return found


def run_in_cluster(block: Block, cluster: ControlPlane) -> subprocess.CompletedProcess[str]:
    """bash -euo pipefail, as the offline blocks run; this release's kubectl and our CLI first on PATH."""
    path = os.pathsep.join([str(cluster.bin), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path, "KUBECONFIG": str(cluster.admin_kubeconfig)}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False, timeout=300)


def test_the_verify_step_runs_as_written_and_shows_what_it_promises(
    cluster: ControlPlane, installed: Installation
) -> None:
    block = the_block("kubectl create namespace demo")
    result = run_in_cluster(block, cluster)
    assert result.returncode == block.exit, (
        f"docs/install.md:{block.line}: exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    # The dry-run Pod came back with our volumes; every webhook entry carries a caBundle.
    assert "tls-injector" in result.stdout
    assert "secretName: probe-tls" in result.stdout or "probe-tls" in result.stdout
    lines = [line for line in result.stdout.splitlines() if line.startswith("tls-injector.io") or ": LS0t" in line]
    assert all(": LS0t" in line for line in lines if ": " in line)


def test_the_verify_steps_refusal_is_refused_as_written(cluster: ControlPlane, installed: Installation) -> None:
    """Runs after the block above, which applied examples/verify/web in namespace demo."""
    block = the_block("kubectl apply --dry-run=server -k examples/verify/web-tls-off")
    result = run_in_cluster(block, cluster)
    assert result.returncode == block.exit == 1, result.stderr
    said = " ".join(result.stderr.split())
    assert "would break every client at once. In place, it takes a sanctioned exception" in said
    assert "Otherwise delete and recreate the object" in said
