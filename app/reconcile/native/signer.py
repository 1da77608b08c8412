"""The pod-certificate side of a pass: find the APIs, read requests, publish the CAs, answer requests.

API calls only; every decision is in podcerts.py. Status writes go to the `/status` subresource with the
request's resourceVersion as the precondition; a 409 re-reads that request and decides again (someone
else may have answered it, in which case it is left alone).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from tls_injector import names
from tls_injector.kube import (
    NODES,
    SERVICE_ACCOUNTS,
    Conflict,
    KubeApi,
    KubeError,
    NotFound,
    Obj,
    Resource,
    cluster_trust_bundles,
    pod_certificate_requests,
)
from tls_injector.kube.api import CERTIFICATES_GROUP
from tls_injector.kubenames import subdomain_problem
from tls_injector.pki import CaSet, CertKey
from tls_injector.reconcile.core import events
from tls_injector.reconcile.core.discover import WorkloadRef
from tls_injector.reconcile.native import podcerts

log = logging.getLogger("tls_injector.signer")
PodCertificates = Literal["auto", "on", "off"]
# Newest first: a 1.37 cluster serves v1 (and may still serve v1beta1); 1.35/1.36 only v1beta1.
VERSIONS = ("v1", "v1beta1")
_NEEDED = frozenset({"podcertificaterequests", "podcertificaterequests/status", "clustertrustbundles"})
# Discovery answers change only when the cluster is upgraded or a feature gate flips: asking once per
# resync period (10 minutes) costs two small GETs and notices such a change within one period.
DISCOVERY_TTL_SECONDS = 600.0
MAX_ATTEMPTS = 3  # per request: a 409 three times in a row means a hot object; the next pass tries again


class NativeApis:
    """Which certificates.k8s.io version serves pod certificates and ClusterTrustBundles, if any; cached."""

    def __init__(self, api: KubeApi, *, mode: PodCertificates = "auto", ttl: float = DISCOVERY_TTL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.mode, self.ttl, self.clock = api, mode, ttl, clock
        self._cached: tuple[float, str | None] | None = None

    def version(self) -> str | None:
        if self.mode == "off":
            return None
        now = self.clock()
        if self._cached is None or now - self._cached[0] >= self.ttl:
            found = self._discover()
            if self._cached is None or self._cached[1] != found:
                self._log(found)
            self._cached = (now, found)
        return self._cached[1]

    def _discover(self) -> str | None:
        for version in VERSIONS:
            served = self.api.served_resources(CERTIFICATES_GROUP, version)
            if served is not None and served >= _NEEDED:
                return version
        return None

    def _log(self, found: str | None) -> None:
        if found:
            log.info("pod certificates served: signing and publishing the trust bundle",
                     extra={"api": f"{CERTIFICATES_GROUP}/{found}", "signer": names.SIGNER_NAME})
        elif self.mode == "on":
            log.error("pod certificates forced on, but the cluster serves no PodCertificateRequest and "
                      "ClusterTrustBundle API (certificates.k8s.io v1 or v1beta1): workloads get Secrets")
        else:
            log.info("the cluster serves no PodCertificateRequest and ClusterTrustBundle API "
                     "(certificates.k8s.io v1 or v1beta1): every workload gets the Secret path")


@dataclass
class NativeView:
    """What a pass read of the native path: None when the cluster does not serve it."""

    version: str
    bundle: Obj | None = None
    requests: list[Obj] = field(default_factory=list)

    @property
    def requests_resource(self) -> Resource:
        return pod_certificate_requests(self.version)

    @property
    def bundles_resource(self) -> Resource:
        return cluster_trust_bundles(self.version)


@dataclass
class Outcome:
    writes: int = 0
    issued: int = 0
    denied: int = 0
    failed: list[str] = field(default_factory=list)
    verdicts: Counter[str] = field(default_factory=Counter)  # Issued, or the reason of a denial


# The requests of a version's resource as the running loop's cache holds them (only those pending for our
# signer), or None when it holds none for that resource (no cache, or its first list is not in yet).
Held = Callable[[Resource], "list[Obj] | None"]


def observe(api: KubeApi, native: NativeApis, held: Held | None = None) -> NativeView | None:
    """Our ClusterTrustBundle and every request addressed to our signer."""
    view = pending(api, native, held)
    if view is None:
        return None
    try:
        view.bundle = api.get(view.bundles_resource, podcerts.TRUST_BUNDLE_NAME)
    except NotFound:
        view.bundle = None
    return view


def pending(api: KubeApi, native: NativeApis, held: Held | None = None) -> NativeView | None:
    """The requests addressed to our signer, without the bundle: from the cache when it holds them (no call),
    else listed (selected server-side)."""
    version = native.version()
    if version is None:
        return None
    view = NativeView(version)
    cached = held(view.requests_resource) if held is not None else None
    view.requests = cached if cached is not None else api.list_objects(
        view.requests_resource, field_selector=f"spec.signerName={names.SIGNER_NAME}").items
    return view


def publish(api: KubeApi, view: NativeView, cas: CaSet, *, now: datetime, guard: Callable[[], None]) -> int:
    """Converge the ClusterTrustBundle on the CA set; returns the writes made (0 or 1)."""
    desired = podcerts.trust_bundle_object(cas, version=view.version, now=now)
    existing = view.bundle
    for _ in range(MAX_ATTEMPTS):
        body = podcerts.bundle_write(existing, desired)
        if body is None:
            return 0
        guard()
        try:
            if existing is None:
                view.bundle = api.create(view.bundles_resource, body)
            else:
                view.bundle = api.replace(view.bundles_resource, body)
        except Conflict:  # AlreadyExists is a Conflict too: someone wrote it in between
            existing = _get_optional(api, view.bundles_resource, podcerts.TRUST_BUNDLE_NAME)
            continue
        log.info("object written", extra={"action": "create" if existing is None else "update",
                                          "kind": "ClusterTrustBundle", "object": podcerts.TRUST_BUNDLE_NAME,
                                          "reason": "bundle"})
        return 1
    raise Conflict(f"ClusterTrustBundle {podcerts.TRUST_BUNDLE_NAME} kept changing under us; next pass")


def sign(api: KubeApi, view: NativeView, *, signer: CertKey, pods: Mapping[tuple[str, str], Obj],
         enabled: set[str], now: datetime, guard: Callable[[], None], cluster_domain: str) -> Outcome:
    """Answer every pending request of our signer. `pods` are the opted-in candidates of this pass by
    (namespace, name), read after the requests were listed, so a request's pod is there if it exists."""
    outcome = Outcome()
    for request in view.requests:
        if not podcerts.is_ours(request):
            continue
        try:
            _answer(api, view, request, signer=signer, pods=pods, enabled=enabled, now=now, guard=guard,
                    cluster_domain=cluster_domain, outcome=outcome)
        except KubeError as e:
            meta = request.get("metadata") or {}
            outcome.failed.append(f"PodCertificateRequest {meta.get('namespace')}/{meta.get('name')}: {e}")
    return outcome


def _answer(api: KubeApi, view: NativeView, request: Obj, *, signer: CertKey, pods: Mapping[tuple[str, str], Obj],
            enabled: set[str], now: datetime, guard: Callable[[], None], cluster_domain: str,
            outcome: Outcome) -> None:
    meta = request.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    spec = request.get("spec") or {}
    pod = pods.get((namespace, str(spec.get("podName") or "")))
    # The Node and ServiceAccount the request names, read by name for this request only (never listed,
    # never kept across passes: a re-created one has a new UID). Without a pod the request is denied anyway.
    node = account = None
    if pod is not None:
        node = _get_named(api, NODES, spec.get("nodeName"), None)
        account = _get_named(api, SERVICE_ACCOUNTS, spec.get("serviceAccountName"), namespace)
    for _ in range(MAX_ATTEMPTS):
        verdict = podcerts.decide(request, pod=pod, namespace_enabled=namespace in enabled, signer=signer,
                                  now=now, node=node, account=account, cluster_domain=cluster_domain)
        guard()
        try:
            api.replace_status(view.requests_resource, podcerts.status_update(request, verdict, now=now))
        except Conflict:
            try:
                request = api.get(view.requests_resource, str(meta.get("name")), namespace=namespace)
            except NotFound:
                return  # the kubelet gave up on it (the pod went away): nothing to answer
            if not podcerts.is_ours(request):
                return  # answered by another signer process in between
            continue
        except NotFound:
            return
        outcome.writes += 1
        _record(api, request, pod, verdict, now=now, outcome=outcome)
        return
    raise Conflict("kept conflicting; next pass")


def _record(api: KubeApi, request: Obj, pod: Obj | None, verdict: podcerts.Verdict, *, now: datetime,
            outcome: Outcome) -> None:
    meta = request.get("metadata") or {}
    issued = isinstance(verdict, podcerts.Issue)
    outcome.issued += issued
    outcome.denied += not issued
    message = (f"PodCertificateRequest {meta.get('name')}: issued until {verdict.not_after:%Y-%m-%dT%H:%M:%SZ}"
               if isinstance(verdict, podcerts.Issue) else
               f"PodCertificateRequest {meta.get('name')}: {verdict.reason}: {verdict.message}")
    verdict_name = "Issued" if isinstance(verdict, podcerts.Issue) else verdict.reason
    outcome.verdicts[verdict_name] += 1
    log.info("pod certificate request answered", extra={"namespace": meta.get("namespace"), "object": meta.get("name"),
                                                        "verdict": verdict_name})
    if pod is not None:
        pod_meta = pod.get("metadata") or {}
        ref = WorkloadRef("Pod", str(pod_meta.get("namespace") or meta.get("namespace")), str(pod_meta.get("name")),
                          str(pod_meta.get("uid") or ""), "v1")
        events.emit(api, (ref,), reason="PodCertificateIssued" if issued else "PodCertificateDenied",
                    kind="Normal" if issued else "Warning", message=message, now=now)


def _get_optional(api: KubeApi, resource: Resource, name: str) -> Obj | None:
    try:
        return api.get(resource, name)
    except NotFound:
        return None


def _get_named(api: KubeApi, resource: Resource, name: object, namespace: str | None) -> Obj | None:
    """The object a request's spec names (a Node, a ServiceAccount: DNS-1123 subdomains), None when there is
    none or the name is none, which is not read (the decision then denies the request)."""
    if not isinstance(name, str) or subdomain_problem(name):
        return None
    try:
        return api.get(resource, name, namespace=namespace)
    except NotFound:
        return None
