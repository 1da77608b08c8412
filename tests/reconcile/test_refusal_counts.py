"""What the counts say: one Secret in the way is one ownership conflict, and service names refused are
counted apart, in the metrics and in the one line `reconcile --once` prints."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, deployment, namespace, reconciler
from tls_injector.cli import main
from tls_injector.reconcile.loop.runner import summary

NAMES = "tls-injector.io/service-names"


def squatted_and_refused(emu: Emulator) -> None:
    """One Secret in the way of `web`, and two workloads asking for a name in another namespace."""
    namespace(emu, OWN_NS)
    namespace(emu, "shop")
    deployment(emu, "web", "shop")
    emu.add({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
             "metadata": {"name": "web-tls", "namespace": "shop"}, "data": {}})
    for name in ("api", "cart"):
        deployment(emu, name, "shop", annotations={NAMES: f"{name},kubernetes.default.svc"})


def gauges(text: str) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_one_secret_in_the_way_is_one_conflict_and_refused_names_are_counted_apart(kubeapi: Emulator) -> None:
    squatted_and_refused(kubeapi)
    rec = reconciler(kubeapi, Clock())
    report = rec.run_pass()
    found = gauges(generate_latest(rec.metrics.registry).decode())
    assert found["tls_injector_ownership_conflicts"] == 1
    assert found["tls_injector_service_names_refused"] == 2
    assert report.conflicts == ["Secret shop/web-tls exists and is not managed by tls-injector"]
    assert len(report.names_refused) == 2
    assert not report.converged
    line = summary(report)
    assert "1 object in the way, not ours" in line
    assert "2 Secrets with service names refused" in line


def test_the_once_summary_names_each_count(kubeapi: Emulator, capsys: pytest.CaptureFixture[str]) -> None:
    squatted_and_refused(kubeapi)
    code = main(["reconcile", "--once", "--server", kubeapi.url, "--namespace", OWN_NS,
                 "--webhook-configurations", "", "--log-level", "error"])
    line = capsys.readouterr().out.splitlines()[-1]
    assert code == 1
    assert line.startswith("NOT converged: ")
    assert "; 1 object in the way, not ours; 2 Secrets with service names refused" in line
    assert "3 objects" not in line
