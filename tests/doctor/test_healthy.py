"""The doctor on a healthy cluster: every check passes and the exit status is 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doctor.cluster import healthy_cluster, run
from tests.kubeapi import Emulator


def test_a_healthy_cluster_passes_every_check(kubeapi: Emulator, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with healthy_cluster(kubeapi, tmp_path) as cluster:
        code, out = run(cluster.doctor(), capsys)
    assert code == 0, out
    # The client CA's two and the client certificates' one pass too (no workload asks: "not needed"), the
    # three of certificate profiles (none asked for), the keystores' and the public roots' (none asked for), and
    # every workload's Secret name.
    assert sum(text.startswith("✔ ") for text in out.splitlines()) == 27, out
    assert "✖" not in out
    assert "⚠" not in out
