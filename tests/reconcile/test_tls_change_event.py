"""The sanctioned TLS exception seen where the workload is (docs/rules.md, "Exceptions"): a pod template
carrying tls-injector.io/tls-change gets one Normal Event per value, whether TLS is still on (a swap) or
off (the label gone: the workload no longer opted in)."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, deployment, namespace, reconciler
from tls_injector.names import TLS_CHANGE_ANNOTATION
from tls_injector.reconcile.loop.runner import summary

NS = "shop"


def test_a_named_tls_change_is_an_event_on_its_workload_once_per_value(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    deployment(kubeapi, "swapped", NS, annotations={"tls-injector.io/secret-name": "api-v2-tls",
                                                    TLS_CHANGE_ANNOTATION: "api-tls->api-v2-tls"})
    deployment(kubeapi, "off", NS, labels={}, annotations={TLS_CHANGE_ANNOTATION: "(default)->(off)"})
    deployment(kubeapi, "plain", NS)
    rec = reconciler(kubeapi, Clock(datetime.now(UTC)))
    report = rec.run_pass()
    assert report.converged, summary(report)
    events = [e for e in kubeapi.objects("events", NS) if e["reason"] == "TLSChangeException"]
    assert sorted(e["involvedObject"]["name"] for e in events) == ["off", "swapped"]
    assert {e["type"] for e in events} == {"Normal"}
    [swapped] = [e for e in events if e["involvedObject"]["name"] == "swapped"]
    assert "'api-tls->api-v2-tls'" in swapped["message"]
    assert swapped["involvedObject"]["kind"] == "Deployment"
    rec.run_pass()
    again = [e for e in kubeapi.objects("events", NS) if e["reason"] == "TLSChangeException"]
    assert len(again) == 2, "told once per value, not at every pass"
