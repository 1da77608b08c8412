"""Webhook self-care, the pure part: the serving certificate Secret and `caBundle` in every webhook entry.

The webhook has a CA of its own (its own trust domain: only the API server trusts it, through caBundle),
rotated by the same trust state machine: here the "bundles in use" are the caBundle of every entry of
both webhook configurations, and the "leaf in use" is the serving Secret. So the API server trusts the
old and the new CA together while the serving certificate moves from one to the other.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tls_injector import names
from tls_injector.kube import MUTATING_WEBHOOKS, SECRETS, VALIDATING_WEBHOOKS, Resource
from tls_injector.pki import UntrustedChain, dns_names_for_services, load_certificates, verify_server
from tls_injector.reconcile.ca.machine import CaPolicy
from tls_injector.reconcile.core.discover import Target
from tls_injector.reconcile.core.inputs import Signing
from tls_injector.reconcile.core.leaves import decide_leaf
from tls_injector.reconcile.core.objects import Item, Obj, Outcome, Write, secret_data

WEBHOOK_KINDS: tuple[Resource, ...] = (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS)


def _webhook_ca_policy() -> CaPolicy:
    return CaPolicy(secret_name=names.WEBHOOK_CA_SECRET, common_name=f"{names.NAME} webhook CA", adopt_orphans=True)


@dataclass(frozen=True)
class WebhookSettings:
    service: str = names.WEBHOOK_SERVICE
    secret_name: str = names.WEBHOOK_SECRET
    configurations: tuple[str, ...] = (names.WEBHOOK_CONFIGURATION,)  # names looked up among both webhook kinds
    ca: CaPolicy = field(default_factory=_webhook_ca_policy)
    cluster_domain: str = names.DEFAULT_CLUSTER_DOMAIN
    # Where a pass connects to check that every caBundle trusts what the webhook serves; None: not checked.
    served_address: tuple[str, int] | None = None


def serving_target(ws: WebhookSettings, namespace: str) -> Target:
    # Under its own CA, trusted by the API server alone: the short forms harm nobody there.
    dns = dns_names_for_services([ws.service], namespace, cluster_domain=ws.cluster_domain, short_forms=True)
    return Target(namespace, ws.secret_name, tuple(dns), ())


def webhook_items(ws: WebhookSettings, namespace: str, configs: dict[tuple[str, str], Obj],
                  signing: Signing) -> list[Item]:
    """The serving Secret, then every webhook configuration found (keyed by (kind, name))."""
    target = serving_target(ws, namespace)
    items = [Item(SECRETS, namespace, ws.secret_name, lambda e: decide_leaf(target, e, signing, role="webhook"))]
    bundle = signing.bundle_pem.encode()
    for resource in WEBHOOK_KINDS:
        for name in ws.configurations:
            if (resource.kind, name) in configs:
                items.append(Item(resource, "", name, functools.partial(decide_ca_bundle, resource, bundle_pem=bundle)))
    return items


def decide_ca_bundle(resource: Resource, existing: Obj | None, *, bundle_pem: bytes) -> Outcome:
    """Every entry's clientConfig.caBundle = all CAs of the set; nothing else of the object changes."""
    if existing is None:
        return None  # not installed (yet): nothing to keep current
    encoded = base64.b64encode(bundle_pem).decode()
    entries = existing.get("webhooks") or []
    if all((w.get("clientConfig") or {}).get("caBundle") == encoded for w in entries):
        return None
    body = {**existing, "apiVersion": "admissionregistration.k8s.io/v1", "kind": resource.kind,
            "webhooks": [{**w, "clientConfig": {**(w.get("clientConfig") or {}), "caBundle": encoded}}
                         for w in entries]}
    meta = existing["metadata"]
    return Write("update", resource, "", meta["name"], body, meta["resourceVersion"], reason="ca-bundle")


def bundles_in_use(configs: Iterable[Obj]) -> list[Sequence[Any]]:
    """The CAs the API server trusts, one list per webhook entry (an entry without caBundle trusts none)."""
    return [load_certificates(decode_ca_bundle((w.get("clientConfig") or {}).get("caBundle") or ""))
            for config in configs for w in config.get("webhooks") or []]


def leaves_in_use(serving: Obj | None) -> list[Sequence[Any]]:
    chain = secret_data(serving).get("tls.crt", b"")
    return [load_certificates(chain)] if chain else []


def decode_ca_bundle(value: str) -> bytes:
    """A caBundle as stored; an undecodable one trusts nothing (and is rewritten)."""
    try:
        return base64.b64decode(value, validate=True)
    except (ValueError, TypeError):
        return b""



def entry_trust_problem(entry: Obj, chain: Sequence[Any], *, dns_name: str, now: datetime) -> str | None:
    """Why the API server would refuse `chain` when calling this webhook entry, or None when it trusts it:
    the entry's caBundle must verify the chain for `dns_name`, at `now`, as the API server's client does."""
    if not chain:
        return "no certificate to verify"
    trusted = load_certificates(decode_ca_bundle((entry.get("clientConfig") or {}).get("caBundle") or ""))
    if not trusted:
        return "its caBundle is empty or holds no certificate"
    try:
        verify_server(chain[0], chain[1:], trusted=trusted, dns_name=dns_name, now=now)
    except UntrustedChain as e:
        if all(ca.subject != chain[0].issuer for ca in trusted):  # the usual case: say it plainly
            held = "; ".join(ca.subject.rfc4514_string() for ca in trusted)
            return (f"its caBundle does not hold the issuer of the certificate for {dns_name} (issued by "
                    f"{chain[0].issuer.rfc4514_string()}; caBundle holds {held})")
        return f"its caBundle does not verify the certificate for {dns_name}: {e}"
    return None


def entry_dns_name(entry: Obj, *, default: str) -> str:
    """The host name the API server dials for an entry: `<service>.<namespace>.svc`, or the URL's host."""
    client = entry.get("clientConfig") or {}
    service = client.get("service") or {}
    if service.get("name") and service.get("namespace"):
        return f"{service['name']}.{service['namespace']}.svc"
    url = str(client.get("url") or "")
    host = url.partition("://")[2].split("/", 1)[0].rsplit(":", 1)[0] if "://" in url else ""
    return host or default


def configurations_trusting(configs: dict[tuple[str, str], Obj], chain: Sequence[Any], *, default_dns: str,
                            now: datetime) -> dict[str, bool]:
    """Per configuration (`Kind/name`): True when every entry's caBundle verifies `chain` for the host
    name that entry calls, as the API server will verify it."""
    return {f"{kind}/{name}": all(entry_trust_problem(entry, chain, dns_name=entry_dns_name(entry, default=default_dns),
                                                      now=now) is None
                                  for entry in config.get("webhooks") or [])
            for (kind, name), config in sorted(configs.items())}
