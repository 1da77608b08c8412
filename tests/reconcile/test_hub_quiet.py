"""A converged federation costs zero writes (docs/multicluster.md): once every cluster's pass says
converged with no write, the next round of passes changes no object anywhere, the member's report on
the hub's roots (tls-injector-federation-status) included: it is built from what the pass leaves in the
cluster, not from what it read before its own writes, and its write is counted with the others."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, reconciler
from tests.reconcile.test_hub_members import CLIENT, OPTED_IN, Federation, federation, run, webhook
from tests.support.workloads import Shape
from tls_injector.kube import KubeApi
from tls_injector.reconcile.parts.reconciler import PassReport, Reconciler, ReconcileSettings

__all__ = ["federation", "webhook"]  # fixtures


def versions(emu: Emulator) -> dict[tuple[str, str, str], str]:
    """Every object's resourceVersion, by (kind, namespace, name)."""
    return {(kind, o["metadata"].get("namespace", ""), o["metadata"]["name"]): o["metadata"]["resourceVersion"]
            for kind in ("secrets", "configmaps") for o in emu.objects(kind)}


def test_a_converged_federation_round_writes_nothing_anywhere_report_included(
        federation: Federation, webhook: httpx.Client) -> None:
    hub, members = federation.hub, federation.members
    for emu in members.values():
        for name in ("api", "caller"):
            run(emu, webhook, Shape("Deployment", name, OPTED_IN, {CLIENT: "true"}), service_account=f"{name}-sa")
    clock = Clock(datetime.now(UTC))
    the_hub = Reconciler(KubeApi(hub.api_client()), ReconcileSettings(namespace=OWN_NS, hub=True), clock=clock)
    passes = {name: reconciler(emu, clock, trust_domain=f"{name}.mesh") for name, emu in members.items()}

    def round_of() -> dict[str, PassReport]:
        return {"hub": the_hub.run_pass(), **{name: p.run_pass() for name, p in passes.items()}}

    reports = round_of()  # the first round issues everything; the member reports counted among its writes
    assert all(r.converged for r in reports.values()), reports
    for name in members:
        assert reports[name].reasons["federation-status"] == 1, reports[name]
    before = {name: versions(emu) for name, emu in (("hub", hub), *members.items())}
    reports = round_of()
    after = {name: versions(emu) for name, emu in (("hub", hub), *members.items())}
    # Before: every report said 0 writes, yet each member rewrote its federation-status (the report was
    # made from the bundles and leaves read before the first round's writes).
    assert {name: r.write_count for name, r in reports.items()} == {"hub": 0, "east": 0, "west": 0}
    assert after == before
    assert all(r.converged for r in reports.values()), reports
