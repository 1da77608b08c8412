"""One pass report, each kind of trouble where it belongs, from the pass through the metrics, the `--once`
summary, the status API's model and the page: an object too large is its own refusal (not a conflict: it
is in nobody's way), and a certificate naming no Service is issued, converged, and told as a condition
beside Ready and as the workload's names_problem, with its gauge among the last pass's (empty on a
replica without the Lease)."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, deployment, namespace, reconciler
from tls_injector.reconcile.core.read import MAX_SERVICE_BYTES
from tls_injector.reconcile.loop.runner import summary
from tls_injector.web.page import attention_items
from tls_injector.web.status import Status

NAMELESS = "tls_injector_certificates_without_names"


def samples(text: bytes) -> dict[str, list[float]]:
    """Every sample by family name (a family declared with no sample maps to [])."""
    return {f.name: [s.value for s in f.samples if s.name == f.name]
            for f in text_string_to_metric_families(text.decode())}


def test_an_oversized_service_is_refused_as_too_large_and_counted_as_no_conflict(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "shop")
    deployment(kubeapi, "web", "shop")
    selector = {"app": "web", **{f"k{i}": f"v{i}" for i in range(1_000)}}  # ~15 KB of selector
    kubeapi.add({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "huge", "namespace": "shop"},
                 "spec": {"selector": selector, "ports": [{"port": 443}]}})
    rec = reconciler(kubeapi, Clock())
    report = rec.run_pass()
    [said] = report.oversized
    assert "Service shop/huge" in said
    assert str(MAX_SERVICE_BYTES) in said
    assert report.conflicts == []
    assert report.refused == [said]  # the union the log and `converged` read
    assert not report.converged
    assert samples(generate_latest(rec.metrics.registry))["tls_injector_ownership_conflicts"] == [0.0]
    line = summary(report)
    assert line.startswith("NOT converged: ")
    assert "; 1 object too large, left out" in line
    assert "in the way" not in line  # no conflict
    assert "{" not in line  # and no Python dict


def test_a_certificate_naming_no_service_is_ready_with_its_trouble_beside_it_everywhere(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "team-a")
    deployment(kubeapi, "web.v2", "team-a")  # a legal Deployment name, no Service name; no Service selects it
    rec = reconciler(kubeapi, Clock(datetime.now(UTC)))
    report = rec.run_pass()
    assert report.converged, summary(report)
    [told] = report.nameless
    assert summary(report).endswith("; 1 certificate names no Service")

    assert rec.status is not None
    model = Status.model_validate(rec.status)  # as /api/v1/status and the page read it
    [workload] = model.workloads
    assert workload.names_problem == told
    assert [(c.type, c.status, c.reason) for c in workload.conditions] == [
        ("Ready", "True", "Issued"), ("NoServiceName", "True", "NoServiceName")]
    assert workload.conditions[1].message == told
    said = [text for _, text in attention_items(model, datetime.now(UTC)) if told in text]
    assert len(said) == 1  # told once, by its condition, not again as names_problem

    assert samples(generate_latest(rec.metrics.registry))[NAMELESS] == [1.0]
    rec.metrics.follow(lambda: False)  # a replica without the Lease: declared, no sample
    assert samples(generate_latest(rec.metrics.registry))[NAMELESS] == []
    rec.metrics.follow(lambda: True)
    rec.metrics.forget()  # leadership lost: whoever leads next reports its own
    assert samples(generate_latest(rec.metrics.registry))[NAMELESS] == [0.0]
