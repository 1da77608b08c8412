"""The doctor on a healthy cluster: every check passes and the exit status is 0."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.doctor.cluster import block, healthy_cluster, run
from tests.kubeapi import Emulator


def test_a_healthy_cluster_passes_every_check(kubeapi: Emulator, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with healthy_cluster(kubeapi, tmp_path) as cluster:
        code, out = run(cluster.doctor(), capsys)
    assert code == 0, out
    # The client CA's two and the client certificates' one pass too (no workload asks: "not needed"), the
    # three of certificate profiles (none asked for), the keystores' and the public roots' (none asked for), and
    # every workload's Secret name, that no workload names a TLS exception, and that the webhook grants none
    # without the policies that check RBAC (it grants none here).
    assert sum(text.startswith("✔ ") for text in out.splitlines()) == 29, out
    assert "✖" not in out
    assert "⚠" not in out


def test_a_workload_naming_a_tls_exception_is_a_warning_and_the_run_still_passes(
    kubeapi: Emulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sanctioned exception (docs/rules.md, "Exceptions") is seen in doctor's report, as a note."""
    with healthy_cluster(kubeapi, tmp_path) as cluster:
        deployment = cluster.emu.get("deployments.apps", "api", "plain")
        assert deployment is not None
        deployment["spec"]["template"]["metadata"]["annotations"] = {"tls-injector.io/tls-change": "(off)->(default)"}
        cluster.replace("deployments.apps", "plain", "api", deployment)
        code, out = run(cluster.doctor(), capsys)
        json_code, as_json = run(cluster.doctor("-o", "json"), capsys)
    assert code == json_code == 0, out
    found = block(out, "no workload names a TLS exception")
    assert found.startswith("⚠ no workload names a TLS exception: 1 workload names a TLS change in "
                            "tls-injector.io/tls-change"), found
    assert "    Deployment plain/api: (off)->(default)" in found.splitlines()
    assert "⚠" not in out.replace(found, "")  # the only warning
    check = next(c for c in orjson.loads(as_json)["checks"] if c["title"] == "no workload names a TLS exception")
    assert (check["status"], check["details"]) == ("warning", ["Deployment plain/api: (off)->(default)"])
