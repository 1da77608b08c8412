"""The reconciler's cache (app/reconcile/loop/cache.py) decides what the lists decide (read.read_cluster), on a
cluster with every kind of thing a pass reads: enabled and labelled namespaces, every workload kind,
bare pods and pods of other controllers, Services, our Secrets and bundles, someone else's bundle,
objects over the caps, the public-roots label; for the whole cluster and for a few namespaces (a keyed
pass); and after a namespace opts in once the cache is filled (its objects are read again whole)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, deployment, namespace, reconciler
from tests.reconcile.test_user_ca import put_user_ca
from tls_injector.kube import NAMESPACES, SECRETS, KubeApi
from tls_injector.kube.api import WatchEvent
from tls_injector.pki import CaSet, make_ca
from tls_injector.pki.trust import add_ca
from tls_injector.reconcile.ca.machine import CaStep
from tls_injector.reconcile.core.discover import Target, discover
from tls_injector.reconcile.core.inputs import Observed
from tls_injector.reconcile.core.read import read_cluster
from tls_injector.reconcile.loop.cache import CLUSTER, ClusterCache
from tls_injector.reconcile.loop.controller import Controller

INJECT = "tls-injector.io/inject"
BIG = {f"k{i}": "v" * 60 for i in range(600)}  # ~45 KB of labels: over both caps (4 KiB, 32 KiB)


def _pod(emu: Emulator, name: str, ns: str, *, labels: dict[str, str] | None = None,
         owner: dict[str, Any] | None = None, phase: str = "Running") -> None:
    emu.add({"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": name, "namespace": ns, "labels": labels or {},
                          "annotations": {"tls-injector.io/service-names": name, "other.io/x": "y"},
                          "ownerReferences": [owner] if owner else []},
             "spec": {"serviceAccountName": "default", "nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
             "status": {"phase": phase, "podIP": "10.0.0.1"}})


def _service(emu: Emulator, name: str, ns: str, selector: dict[str, str]) -> None:
    emu.add({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
             "spec": {"selector": selector, "ports": [{"port": 443}]}})


def _cluster(emu: Emulator) -> None:
    namespace(emu, OWN_NS)
    namespace(emu, "on", enabled=True)
    namespace(emu, "off")
    namespace(emu, "roots")
    emu.add({"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": "public", "labels": {INJECT: "enabled", "tls-injector.io/public-roots": "true"}}})
    for kind in ("Deployment", "StatefulSet", "DaemonSet"):
        deployment(emu, f"{kind.lower()}-in", "on", labels={}, kind=kind)
        deployment(emu, f"{kind.lower()}-labelled", "off", kind=kind)
        deployment(emu, f"{kind.lower()}-not", "off", labels={})
    deployment(emu, "opted-out", "on", labels={INJECT: "false"})
    deployment(emu, "roots-asker", "roots", annotations={"tls-injector.io/public-roots": "true"})
    deployment(emu, "big", "on", labels=BIG)
    deployment(emu, "big-not", "off", labels=BIG)  # not opted in: kept small, so not over the cap
    deployment(emu, "web", "public", labels={})
    _pod(emu, "bare", "on")
    _pod(emu, "bare-labelled", "off", labels={INJECT: "true"})
    _pod(emu, "bare-not", "off")
    _pod(emu, "done", "on", phase="Succeeded")
    _pod(emu, "of-operator", "on", owner={"apiVersion": "example.com/v1", "kind": "Cluster", "name": "pg",
                                          "uid": "u1", "controller": True})
    _pod(emu, "of-rs", "on", owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u2",
                                    "controller": True})
    _service(emu, "svc", "on", {"app": "deployment-in"})
    _service(emu, "svc-off", "off", {"app": "deployment-labelled"})
    _service(emu, "svc-nowhere", "roots", {"app": "nothing"})
    _service(emu, "svc-big", "on", BIG)
    emu.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tls-injector-trust-bundle",
                                                                   "namespace": "off"}, "data": {"x": "y"}})


def _filled(emu: Emulator, keys: list[str] | None = None) -> ClusterCache:
    cache = ClusterCache(KubeApi(emu.api_client()), on_key=(keys.append if keys is not None else lambda _: None))
    for informer in cache.informers:
        informer.relist()
    return cache


def _targets(observed: Observed) -> list[Target]:
    found = discover(observed.workloads, observed.pods, enabled=observed.enabled, cluster_domain="cluster.local",
                     services=observed.services, own_namespace=OWN_NS, trust_domain="", profiles=None)
    return sorted(found, key=lambda t: (t.namespace, t.secret_name))


def _facts(observed: Observed) -> dict[str, Any]:
    """What a pass decides on, comparable between a list's reading and the cache's."""
    return {"enabled": observed.enabled, "leaves": set(observed.leaves), "bundles": set(observed.bundles),
            "squatted": observed.squatted, "public_roots": observed.public_roots,
            "services": sorted((s["metadata"]["namespace"], s["metadata"]["name"], str(s["spec"]))
                               for s in observed.services),
            "oversized": sorted((kind, o.namespace, o.name) for kind, o, _ in observed.oversized),
            "pods": sorted((p["metadata"]["namespace"], p["metadata"]["name"]) for p in observed.pods),
            "targets": _targets(observed)}


def _in(observed: Observed, namespaces: set[str]) -> Observed:
    """What the lists read, cut to `namespaces`: what a keyed pass of them must see."""
    cut = Observed(enabled=observed.enabled & namespaces, squatted=observed.squatted & namespaces,
                   public_roots=observed.public_roots & namespaces)
    cut.workloads = [(k, w) for k, w in observed.workloads if w["metadata"]["namespace"] in namespaces]
    cut.pods = [p for p in observed.pods if p["metadata"]["namespace"] in namespaces]
    cut.services = [s for s in observed.services if s["metadata"]["namespace"] in namespaces]
    cut.leaves = {k: v for k, v in observed.leaves.items() if k[0] in namespaces}
    cut.bundles = {k: v for k, v in observed.bundles.items() if k in namespaces}
    cut.oversized = [(kind, o, cap) for kind, o, cap in observed.oversized if o.namespace in namespaces]
    return cut


@pytest.fixture
def cluster(kubeapi: Emulator) -> Emulator:
    _cluster(kubeapi)
    # A pass's writes, so that our Secrets and bundles are there to read too.
    assert reconciler(kubeapi, Clock()).run_pass().write_count > 0
    return kubeapi


def test_the_cache_reads_the_whole_cluster_as_the_lists_do(cluster: Emulator) -> None:
    listed = read_cluster(KubeApi(cluster.api_client()))
    cached = _filled(cluster).observed()
    assert _facts(cached) == _facts(listed)
    assert listed.oversized
    assert listed.squatted
    assert listed.public_roots >= {"public", "roots"}
    assert {"bare", "bare-labelled", "of-operator"} <= {n for _, n in _facts(cached)["pods"]}


@pytest.mark.parametrize("namespaces", [{"on"}, {"off"}, {"roots", "public"}, {"on", "off", "nowhere"}, set()])
def test_a_keyed_reading_is_the_lists_reading_of_those_namespaces(cluster: Emulator, namespaces: set[str]) -> None:
    listed = _in(read_cluster(KubeApi(cluster.api_client())), namespaces)
    assert _facts(_filled(cluster).observed(namespaces)) == _facts(listed)


def test_a_namespace_that_opts_in_after_the_cache_is_filled_is_read_again_whole(cluster: Emulator) -> None:
    keys: list[str] = []
    cache = _filled(cluster, keys)
    keys.clear()
    api = KubeApi(cluster.api_client())
    before = cluster.calls("list")
    labelled = api.get(NAMESPACES, "off")
    labelled["metadata"]["labels"] = {INJECT: "enabled"}
    # What the watch brings (told here by hand, so that no watch races the count of lists)
    cache.namespaces.apply(WatchEvent("MODIFIED", api.replace(NAMESPACES, labelled)))
    assert keys[-1] == "off"
    assert CLUSTER not in keys
    assert cluster.calls("list") - before == 7  # its workloads of each kind, and its pods: read again
    assert _facts(cache.observed()) == _facts(read_cluster(api))
    assert "deployment-not" in {w["metadata"]["name"] for _, w in cache.observed({"off"}).workloads
                                if w["spec"]["template"]["metadata"]["labels"].get("app")}


def test_only_a_ca_set_mid_rotation_calls_a_full_pass_after_writes(kubeapi: Emulator) -> None:
    """A keyed pass's writes call a full pass only while a CA set is rotating (its facts changed); a set
    with no CA yet (the webhook's, before its configurations exist) or with its one CA does not."""
    rec = reconciler(kubeapi, Clock())
    now = Clock().now
    one = add_ca(CaSet(), make_ca(common_name="one", now=now), now=now)
    rec.keeper._steps = {"empty": CaStep(CaSet(), None), "steady": CaStep(one, None)}
    assert not rec.rotating()
    rec.keeper._steps["steady"] = CaStep(add_ca(one, make_ca(common_name="two", now=now), now=now), None)
    assert rec.rotating()
    rec.keeper._steps = {"steady": CaStep(one, None, waiting="the user's CA is not trusted everywhere yet")}
    assert rec.rotating()


def test_a_namespace_whose_refill_failed_is_read_again_before_the_next_pass(cluster: Emulator) -> None:
    """The refill's list fails (a 503): the workloads of the namespace that opted in are not held whole,
    and a pass finds them so; `refill_missing`, which the loop calls before its passes, reads them again
    instead of leaving them out until a relist."""
    keys: list[str] = []
    cache = _filled(cluster, keys)
    api = KubeApi(cluster.api_client())
    labelled = api.get(NAMESPACES, "off")
    labelled["metadata"]["labels"] = {INJECT: "enabled"}
    cluster.fail_next("list", "deployments.apps", code=503)
    cache.namespaces.apply(WatchEvent("MODIFIED", api.replace(NAMESPACES, labelled)))
    missing = {w["metadata"]["name"] for _, w in cache.observed({"off"}).workloads}
    assert "deployment-not" not in missing  # held as not enabled, so left out
    keys.clear()
    cache.refill_missing()
    assert set(keys) == {"off"}
    assert _facts(cache.observed()) == _facts(read_cluster(api))


def test_keyed_passes_wait_for_a_full_pass_once_one_stopped_before_stepping_the_ca(kubeapi: Emulator) -> None:
    """A full pass that stops before the CA sets are stepped (the user's CA Secret is gone) leaves keyed
    passes nothing to sign with: they defer to a full pass instead of issuing from the CA set of before."""
    _cluster(kubeapi)
    clock = Clock()
    put_user_ca(kubeapi, make_ca(common_name="user CA", now=clock.now), "user-ca")
    rec = reconciler(kubeapi, clock, user_ca_secret="user-ca")
    rec.attach(_filled(kubeapi))
    assert not rec.run_pass().aborted
    assert rec.run_namespaces_pass({"on"}) is not None
    KubeApi(kubeapi.api_client()).delete(SECRETS, "user-ca", namespace=OWN_NS)
    assert "user-ca does not exist" in rec.run_pass().aborted
    assert rec.run_namespaces_pass({"on"}) is None


def test_a_write_backoff_past_its_time_does_not_queue_its_namespace_again_and_again(kubeapi: Emulator) -> None:
    """An object whose write failed and that then left the plan keeps its backoff entry past its time: the
    loop must not queue its namespace at once after every pass (a tight loop of keyed passes), only a
    backoff still to come."""
    rec = reconciler(kubeapi, Clock())
    loop = Controller(rec.api, rec, None)
    now = rec.clock()
    rec.writer._backoff = {("Secret", "gone", "web-tls"): (1, now - timedelta(seconds=1)),
                           ("Secret", "soon", "web-tls"): (1, now + timedelta(seconds=30))}
    loop._retry({"gone", "soon"}, 100.0)
    assert [(round(at), ns) for at, ns in loop._later] == [(130, "soon")]
    loop._retry(None, 100.0)  # after a full pass: every namespace's
    assert sorted(ns for _, ns in loop._later) == ["soon", "soon"]
