"""The signer tls-injector.io/serving against the API emulator: requests issued, denied, ignored; the CA set
published as a ClusterTrustBundle; discovery of the API version."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from tests.kubeapi import Emulator, running_emulator
from tests.pki.tls import Party, handshake
from tests.reconcile import podcert_cluster as kubelet
from tests.reconcile.cluster import OWN_NS, Clock, deployment, namespace, reconciler
from tests.reconcile.test_rotation import ca_states, force_replace
from tls_injector.kube import KubeApi, pod_certificate_requests
from tls_injector.pki import (
    bundle_certificates,
    fingerprint,
    issued_by,
    load_certificates,
    verify_nameless,
    verify_server,
)
from tls_injector.reconcile.core.budget import NAMESPACE_TURN_SECONDS
from tls_injector.reconcile.loop.cache import MAX_REQUEST_BYTES, ClusterCache
from tls_injector.reconcile.loop.controller import Controller
from tls_injector.reconcile.native.signer import DISCOVERY_TTL_SECONDS, NativeApis


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cluster(clock: Clock) -> Iterator[Emulator]:
    """A 1.37 cluster (certificates.k8s.io/v1) whose apiserver clock is the test's clock."""
    with running_emulator(seed=0, certificates=("v1",), now=clock) as emu:
        namespace(emu, OWN_NS)
        namespace(emu, "demo")
        yield emu


def test_an_opted_in_pods_request_is_issued_for_its_workloads_names_and_verifies_against_the_bundle(
        cluster: Emulator, clock: Clock) -> None:
    pod = kubelet.pod(cluster, "web", "demo", annotations={"tls-injector.io/service-names": "web,api"})
    req = kubelet.request(cluster, pod)
    rec = reconciler(cluster, clock)
    report = rec.run_pass()
    assert report.converged, report
    assert rec.metrics.registry.get_sample_value("tls_injector_pod_certificate_requests_total",
                                                 {"verdict": "Issued"}) == 1
    status = kubelet.status(cluster, req)
    assert kubelet.condition(cluster, req)["type"] == "Issued"
    chain = load_certificates(status["certificateChain"].encode())
    leaf = chain[0]
    assert leaf.public_key() == req.key.public_key()
    assert status["notBefore"] == f"{leaf.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ}"
    assert status["notAfter"] == f"{leaf.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(sans.get_values_for_type(x509.DNSName)) == sorted(
        f"{s}{suffix}" for s in ("web", "api") for suffix in (".demo.svc", ".demo.svc.cluster.local"))
    for name in ("web.demo.svc", "api.demo.svc.cluster.local"):
        verify_server(leaf, chain[1:], trusted=kubelet.bundle_anchors(cluster), dns_name=name, now=clock.now)
    # A Deployment of the pod-certificate mode gets no Secret: its key never leaves the node.
    assert not [s for s in cluster.objects("secrets", "demo")]


def test_the_issued_chain_and_the_kubelets_key_serve_tls_to_a_client_trusting_only_the_bundle() -> None:
    clock = Clock(datetime.now(UTC))  # the ssl module checks validity against the real clock
    with running_emulator(seed=0, certificates=("v1",), now=clock) as emu:
        namespace(emu, OWN_NS)
        namespace(emu, "demo")
        req = kubelet.request(emu, kubelet.pod(emu, "web", "demo"))
        assert reconciler(emu, clock).run_pass().converged
        key_pem = req.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption())
        served = Party(kubelet.status(emu, req)["certificateChain"].encode(), key_pem)
        bundle_pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in kubelet.bundle_anchors(emu))
        assert handshake(served, bundle_pem=bundle_pem, hostname="web.demo.svc") in ("TLSv1.2", "TLSv1.3")


def test_requests_for_other_signers_are_left_alone(cluster: Emulator, clock: Clock) -> None:
    req = kubelet.request(cluster, kubelet.pod(cluster, "web", "demo"), signer="example.com/other")
    cluster.reset_log()
    assert reconciler(cluster, clock).run_pass().converged
    assert kubelet.status(cluster, req) == {}
    assert not [w for w in cluster.writes() if w.resource.startswith("podcertificaterequests")]


@pytest.mark.parametrize(("case", "reason"), [
    ("not-opted-in", "NotOptedIn"),
    ("opted-out-in-enabled-namespace", "NotOptedIn"),
    ("pod-gone", "NotOptedIn"),
    ("other-uid", "PodMismatch"),
    ("other-node-uid", "NodeMismatch"),
    ("other-account-uid", "ServiceAccountMismatch"),
    ("node-recreated", "NodeMismatch"),
    ("account-gone", "ServiceAccountMismatch"),
    ("bad-service-names", "InvalidNames"),
    ("ed25519", "UnsupportedKeyType"),
    ("p521", "UnsupportedKeyType"),
    ("user-annotation", "UnknownUserAnnotations"),
])
def test_requests_the_signer_cannot_vouch_for_are_denied_with_a_reason(
        cluster: Emulator, clock: Clock, case: str, reason: str) -> None:
    if case == "opted-out-in-enabled-namespace":
        namespace(cluster, "open", enabled=True)
        pod = kubelet.pod(cluster, "web", "open", opted_in=False)
        pod = cluster.add({**pod, "metadata": {**pod["metadata"], "name": pod["metadata"]["name"] + "x",
                                               "labels": {"tls-injector.io/inject": "false"}}})
    else:
        notes = {"tls-injector.io/service-names": "Not_A_Service"} if case == "bad-service-names" else None
        pod = kubelet.pod(cluster, "web", "demo", opted_in=case != "not-opted-in", annotations=notes)
    key_type = {"ed25519": "ED25519", "p521": "ECDSAP521"}.get(case, "ECDSAP256")
    req = kubelet.request(cluster, pod, key_type=key_type, uid="another-uid" if case == "other-uid" else None,
                          user_annotations={"example.com/wish": "x"} if case == "user-annotation" else None,
                          node_uid="another-node" if case == "other-node-uid" else None,
                          account_uid="another-account" if case == "other-account-uid" else None)
    if case == "pod-gone":
        cluster.store.delete(cluster.resource("pods"), pod["metadata"]["namespace"], pod["metadata"]["name"])
    if case == "node-recreated":  # the same name, another Node: the UID the request names is gone
        cluster.store.delete(cluster.resource("nodes"), None, kubelet.NODE)
        cluster.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": kubelet.NODE}})
    if case == "account-gone":
        cluster.store.delete(cluster.resource("serviceaccounts"), pod["metadata"]["namespace"], "default")
    rec = reconciler(cluster, clock)
    assert rec.run_pass().converged
    cond = kubelet.condition(cluster, req)
    assert (cond["type"], cond["reason"]) == ("Denied", reason)
    assert rec.metrics.registry.get_sample_value("tls_injector_pod_certificate_requests_total",
                                                 {"verdict": reason}) == 1
    assert cond["message"]
    assert set(kubelet.status(cluster, req)) == {"conditions"}
    if reason == "UnsupportedKeyType":
        assert "ECDSAP256" in cond["message"]  # the API asks signers to suggest a key type that works


def test_an_answered_request_is_not_written_again(cluster: Emulator, clock: Clock) -> None:
    kubelet.request(cluster, kubelet.pod(cluster, "web", "demo"))
    assert reconciler(cluster, clock).run_pass().converged
    cluster.reset_log()
    clock.advance(timedelta(minutes=1))
    assert reconciler(cluster, clock).run_pass().write_count == 0
    assert not [w for w in cluster.writes() if w.resource != "events"]


def test_a_conflicting_status_write_is_decided_again_on_the_fresh_request(cluster: Emulator, clock: Clock) -> None:
    req = kubelet.request(cluster, kubelet.pod(cluster, "web", "demo"))
    cluster.conflict_on_first_write(verbs=("update",), touch=True)
    assert reconciler(cluster, clock).run_pass().converged
    assert kubelet.condition(cluster, req)["type"] == "Issued"


def test_the_lifetime_respects_max_expiration_and_refresh_lies_inside_it(cluster: Emulator, clock: Clock) -> None:
    req = kubelet.request(cluster, kubelet.pod(cluster, "web", "demo"), max_expiration_seconds=7_200)
    assert reconciler(cluster, clock).run_pass().converged
    status = kubelet.status(cluster, req)
    begin, refresh, end = (datetime.fromisoformat(status[k].replace("Z", "+00:00"))
                           for k in ("notBefore", "beginRefreshAt", "notAfter"))
    assert end - begin == timedelta(hours=2)
    assert begin + timedelta(minutes=10) <= refresh <= end - timedelta(minutes=10)


def test_a_beta_only_cluster_is_served_through_v1beta1_with_a_pkix_key(clock: Clock) -> None:
    with running_emulator(seed=0, certificates=("v1beta1",), now=clock) as emu:
        namespace(emu, OWN_NS)
        namespace(emu, "demo")
        req = kubelet.request(emu, kubelet.pod(emu, "web", "demo"), version="v1beta1", pkix=True)
        assert reconciler(emu, clock).run_pass().converged
        found = emu.get("podcertificaterequests.certificates.k8s.io", req.name, req.namespace)
        assert found is not None
        assert found["apiVersion"] == "certificates.k8s.io/v1beta1"
        assert found["status"]["conditions"][0]["type"] == "Issued"
        assert [b["apiVersion"] for b in emu.objects("clustertrustbundles")] == ["certificates.k8s.io/v1beta1"]


def test_a_cluster_without_the_apis_gets_the_secret_path_and_a_log_line_saying_so(
        kubeapi: Emulator, caplog: pytest.LogCaptureFixture) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "demo")
    deployment(kubeapi, "web", "demo", annotations={"tls-injector.io/mode": "pod-certificate"})
    with caplog.at_level(logging.INFO, logger="tls_injector.signer"):
        assert reconciler(kubeapi, Clock()).run_pass().converged
    assert any("every workload gets the Secret path" in r.getMessage() for r in caplog.records)
    assert kubeapi.get("secrets", "web-tls", "demo") is not None


def test_pod_certificates_off_keeps_the_secret_path_even_where_served(cluster: Emulator, clock: Clock) -> None:
    deployment(cluster, "web", "demo", annotations={"tls-injector.io/mode": "pod-certificate"})
    req = kubelet.request(cluster, kubelet.pod(cluster, "web", "demo"))
    assert reconciler(cluster, clock, pod_certificates="off").run_pass().converged
    assert cluster.get("secrets", "web-tls", "demo") is not None
    assert kubelet.status(cluster, req) == {}
    assert not cluster.objects("clustertrustbundles")


def test_discovery_is_asked_once_per_period_not_once_per_pass(cluster: Emulator) -> None:
    api, elapsed = KubeApi(cluster.api_client()), [0.0]
    native = NativeApis(api, clock=lambda: elapsed[0])
    assert native.version() == "v1"
    asked = api.calls["get"]
    elapsed[0] += DISCOVERY_TTL_SECONDS - 1
    assert native.version() == "v1"
    assert api.calls["get"] == asked
    elapsed[0] += 1
    assert native.version() == "v1"
    assert api.calls["get"] > asked


def _issued_in_use(emu: Emulator, now: datetime) -> list[list[x509.Certificate]]:
    """Every issued pod certificate chain not yet expired (the kubelet may still be serving any of them)."""
    chains = []
    for req in emu.objects("podcertificaterequests.certificates.k8s.io"):
        chain = (req.get("status") or {}).get("certificateChain")
        if chain and load_certificates(chain.encode())[0].not_valid_after_utc > now:
            chains.append(load_certificates(chain.encode()))
    return chains


def _assert_pod_certificates_trusted_everywhere(emu: Emulator, now: datetime) -> int:
    bundles = [kubelet.bundle_anchors(emu)] + [
        bundle_certificates(cm.get("data") or {}) for cm in emu.objects("configmaps")
        if cm["metadata"]["name"] == "tls-injector-trust-bundle"]
    chains = _issued_in_use(emu, now)
    for chain in chains:
        service = chain[0].subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        for trusted in bundles:
            verify_server(chain[0], chain[1:], trusted=trusted, dns_name=str(service), now=now)  # the first name
    return len(chains)


def _kubelet_refreshes(emu: Emulator, pods: list[dict[str, Any]], latest: dict[str, kubelet.Request],
                       now: datetime) -> None:
    """Each pod asks again once its current certificate passed beginRefreshAt, as the kubelet does."""
    for pod in pods:
        current = latest.get(pod["metadata"]["name"])
        refresh = kubelet.status(emu, current).get("beginRefreshAt") if current else None
        if current is None or (refresh and datetime.fromisoformat(refresh.replace("Z", "+00:00")) <= now):
            latest[pod["metadata"]["name"]] = kubelet.request(emu, pod)


def test_a_ca_rotation_keeps_every_issued_pod_certificate_trusted_by_every_published_bundle(
        cluster: Emulator, clock: Clock) -> None:
    deployment(cluster, "classic", "demo")  # a Secret-path workload beside them: its ConfigMap is a bundle too
    pods = [kubelet.pod(cluster, f"web{i}", "demo") for i in range(3)]
    latest: dict[str, kubelet.Request] = {}
    _kubelet_refreshes(cluster, pods, latest, clock.now)
    assert reconciler(cluster, clock).run_pass().converged
    (old,) = ca_states(cluster)
    force_replace(cluster)
    history = [ca_states(cluster)]
    for _ in range(80):
        clock.advance(timedelta(minutes=30))
        _kubelet_refreshes(cluster, pods, latest, clock.now)
        report = reconciler(cluster, clock).run_pass()
        assert report.converged, report
        assert _assert_pod_certificates_trusted_everywhere(cluster, clock.now) >= len(pods)
        assert all(kubelet.condition(cluster, r)["type"] == "Issued" for r in latest.values())
        if history[-1] != ca_states(cluster):
            history.append(ca_states(cluster))
        if old not in ca_states(cluster) and report.write_count == 0:
            break
    else:
        raise AssertionError(f"the rotation did not finish: {history}")
    assert [h.get(old, "removed") for h in history] == [
        "trusted-used", "trusted-used", "trusted-used", "phase-out", "zombie", "removed"]
    (new,) = ca_states(cluster)
    (anchor,) = kubelet.bundle_anchors(cluster)
    assert fingerprint(anchor).startswith(new)
    assert all(issued_by(chain[0], anchor) for chain in _issued_in_use(cluster, clock.now))


def test_a_workload_moving_to_pod_certificates_keeps_its_secret_until_no_pod_mounts_it(
        cluster: Emulator, clock: Clock) -> None:
    deployment(cluster, "web", "demo")
    old_pod = kubelet.pod(cluster, "web", "demo", native=False)
    assert reconciler(cluster, clock).run_pass().converged
    assert cluster.get("secrets", "web-tls", "demo") is not None
    moved = cluster.get("deployments", "web", "demo") or {}
    moved["spec"]["template"]["metadata"]["annotations"] = {"tls-injector.io/mode": "pod-certificate"}
    cluster.store.update(cluster.resource("deployments"), "demo", "web", moved)
    kubelet.request(cluster, kubelet.pod(cluster, "web", "demo"))  # the first pod of the new ReplicaSet
    assert reconciler(cluster, clock).run_pass().converged
    assert cluster.get("secrets", "web-tls", "demo") is not None  # the old pod may restart and mount it
    cluster.store.delete(cluster.resource("pods"), "demo", old_pod["metadata"]["name"])
    assert reconciler(cluster, clock).run_pass().converged
    assert cluster.get("secrets", "web-tls", "demo") is None


def test_the_running_loop_answers_a_new_request_at_once_not_at_the_resync(cluster: Emulator, clock: Clock) -> None:
    rec = reconciler(cluster, clock, turn_seconds=NAMESPACE_TURN_SECONDS)  # as the loop's command builds them
    loop = Controller(rec.api, rec, None, resync_seconds=3600, debounce_seconds=0.05, watch_timeout_seconds=2,
                      min_pass_gap_seconds=0.1)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        # The first pass (it publishes the bundle) is over and the requests are watched: from here only the
        # watch can wake the loop.
        while not (cluster.open_watches("podcertificaterequests.certificates.k8s.io")
                   and cluster.objects("clustertrustbundles.certificates.k8s.io")):
            assert time.monotonic() < deadline, "the loop never watched the requests"
            time.sleep(0.05)
        time.sleep(1.5)  # and the passes its own writes woke are over too
        req = kubelet.request(cluster, kubelet.pod(cluster, "web", "demo"))
        while kubelet.status(cluster, req) == {}:  # only the watch can wake it: the resync is an hour away
            assert time.monotonic() < deadline, "the request was not answered"
            time.sleep(0.05)
        assert kubelet.condition(cluster, req)["type"] == "Issued"
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_a_signer_pass_answers_requests_with_a_few_reads_and_writes_nothing_else(
        cluster: Emulator, clock: Clock) -> None:
    deployment(cluster, "classic", "demo")
    assert reconciler(cluster, clock).run_pass().converged  # the CA exists, the bundles are out
    req = kubelet.request(cluster, kubelet.pod(cluster, "web", "demo"))
    cluster.reset_log()
    assert reconciler(cluster, clock).run_signer_pass().converged
    assert kubelet.condition(cluster, req)["type"] == "Issued"
    written = {(w.verb, w.resource) for w in cluster.writes()}
    assert written == {("update", "podcertificaterequests/status.certificates.k8s.io"), ("create", "events")}
    read = {e.resource for e in cluster.log if e.verb in ("get", "list")}
    assert "deployments.apps" not in read  # no workload listing: that is what makes it fast
    # The request's Node and ServiceAccount, each read once by name to compare UIDs; never listed.
    named = sorted((e.verb, e.resource, e.name) for e in cluster.log if e.resource in ("nodes", "serviceaccounts"))
    assert named == [("get", "nodes", kubelet.NODE), ("get", "serviceaccounts", "default")]
    cluster.reset_log()
    assert reconciler(cluster, clock).run_signer_pass().converged  # nothing pending: reads only the requests
    assert [(e.verb, e.resource) for e in cluster.log] == [("list", "podcertificaterequests.certificates.k8s.io")]


def test_the_cache_holds_pending_requests_only_and_lets_the_signer_list_past_its_cap(
        cluster: Emulator, clock: Clock) -> None:
    """What the loop's cache holds of the requests: ours while pending, as the signer reads them; an answered
    one, another signer's, none; and one over MAX_REQUEST_BYTES (the pod author's unverifiedUserAnnotations)
    makes the cache say it holds nothing, so that the signer lists them all rather than never answer it."""
    resource = pod_certificate_requests("v1")
    cache = ClusterCache(KubeApi(cluster.api_client()), on_key=lambda _: None)
    told: list[int] = []
    informer = cache.follow_requests(resource, on_request=lambda: told.append(1))
    assert cache.pending_requests(resource) is None  # not listed yet: the signer lists
    mine = kubelet.request(cluster, kubelet.pod(cluster, "web", "demo"))
    kubelet.request(cluster, kubelet.pod(cluster, "other", "demo"), signer="example.com/other")
    informer.relist()
    held = cache.pending_requests(resource)
    assert held is not None
    assert [r["metadata"]["name"] for r in held] == [mine.name]
    assert set(held[0]["metadata"]) == {"name", "namespace", "uid", "resourceVersion"}  # no managedFields
    assert told == [1]
    assert cache.pending_requests(pod_certificate_requests("v1beta1")) is None  # not the version followed
    deployment(cluster, "classic", "demo")
    assert reconciler(cluster, clock).run_pass().converged  # answers it
    informer.relist()
    assert cache.pending_requests(resource) == []
    assert told == [1]
    big = {"example.com/blob": "x" * MAX_REQUEST_BYTES}
    large = kubelet.request(cluster, kubelet.pod(cluster, "big", "demo"), user_annotations=big)
    informer.relist()
    assert cache.pending_requests(resource) is None
    assert [o.name for o in informer.oversized] == [large.name]
    rec = reconciler(cluster, clock)
    rec.attach(cache)
    assert rec.run_signer_pass().converged
    assert kubelet.status(cluster, large) != {}  # listed by the signer, answered


def test_the_running_loop_holds_pending_requests_so_no_pass_lists_them(
        cluster: Emulator, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 54: a quiet minute makes no list. The loop's informer lists the requests once; after that a
    signer pass and a full pass read them from the cache, and an answered one leaves it. The requests'
    informer starts after the cache's, so a first pass may begin before its list is in, and then lists
    the requests itself: once, and counted here as such (a CI run on a busy machine met it)."""
    missed: list[int] = []  # a pass read the cache before the requests' first list was in: it lists
    held = ClusterCache.pending_requests

    def pending_requests(self: ClusterCache, resource: Any) -> Any:
        found = held(self, resource)
        if found is None:
            missed.append(1)
        return found

    monkeypatch.setattr(ClusterCache, "pending_requests", pending_requests)
    deployment(cluster, "classic", "demo")
    rec = reconciler(cluster, clock, turn_seconds=NAMESPACE_TURN_SECONDS)
    loop = Controller(rec.api, rec, None, resync_seconds=3600, debounce_seconds=0.05, watch_timeout_seconds=2,
                      min_pass_gap_seconds=0.1)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    requests = "podcertificaterequests.certificates.k8s.io"
    try:
        deadline = time.monotonic() + 15
        while not (cluster.open_watches(requests) and cluster.objects("clustertrustbundles.certificates.k8s.io")
                   and loop.passes >= 1):
            assert time.monotonic() < deadline, "the loop never followed the requests"
            time.sleep(0.05)
        cache = rec.cache
        assert cache is not None
        assert cache.requests is not None
        while not cache.requests.synced.is_set():
            assert time.monotonic() < deadline, "the requests' first list never came in"
            time.sleep(0.05)
        assert cache.requests.lists == 1  # the informer's first list, and no other
        assert len(missed) <= 1  # only a first pass that began before that list was in
        listed_at_start = [e for e in cluster.log if e.verb == "list" and e.resource == requests]
        assert len(listed_at_start) == 1 + len(missed), listed_at_start
        cluster.reset_log()
        req = kubelet.request(cluster, kubelet.pod(cluster, "web", "demo"))
        while kubelet.status(cluster, req) == {}:
            assert time.monotonic() < deadline, "the request was not answered"
            time.sleep(0.05)
        assert kubelet.condition(cluster, req)["type"] == "Issued"
        while cache.pending_requests(pod_certificate_requests("v1")) != []:
            assert time.monotonic() < deadline, "the answered request stayed in the cache"
            time.sleep(0.05)
        passes = loop.passes
        loop._queue("")  # a change that concerns the whole cluster: a full pass
        while loop.passes == passes:
            assert time.monotonic() < deadline, "no full pass ran"
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert [e for e in cluster.log if e.verb == "list"] == []


@pytest.mark.parametrize("workload", ["web.v2", "1.2.3", "api.team-a.example"])
def test_a_pod_whose_workload_name_is_no_service_name_is_issued_a_certificate_naming_nothing(
        cluster: Emulator, clock: Clock, workload: str) -> None:
    """Issue 39: such a pod asked for no name, so its request is not denied (its pod would never start): the
    certificate names no DNS name, and chains to the bundle."""
    req = kubelet.request(cluster, kubelet.pod(cluster, workload, "demo"))
    assert reconciler(cluster, clock).run_pass().converged
    assert kubelet.condition(cluster, req)["type"] == "Issued"
    chain = load_certificates(kubelet.status(cluster, req)["certificateChain"].encode())
    with pytest.raises(x509.ExtensionNotFound):
        chain[0].extensions.get_extension_for_class(x509.SubjectAlternativeName)
    verify_nameless(chain[0], chain[1:], trusted=kubelet.bundle_anchors(cluster), now=clock.now)
