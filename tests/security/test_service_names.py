"""Issue 24, finding 1: a tenant's `service-names` cannot mint names for anyone else.

The real reconciler against the API emulator; certificates checked by real TLS clients (OpenSSL through
the ssl module) holding another tenant's trust bundle, as a team-b pod with SSL_CERT_FILE would.
"""

from __future__ import annotations

import base64
import ssl
from datetime import UTC, datetime

import pytest

from tests.kubeapi import Emulator
from tests.pki.tls import Party, handshake
from tests.reconcile.cluster import OWN_NS, Clock, data, deployment, namespace, reconciler
from tls_injector.pki import MAX_SERVICES, issue_leaf, load_certificates, make_ca
from tls_injector.pki.verify import dns_sans

# What a tenant asked for in the reproduction, and got signed before: other tenants' Services, the API
# server, the injector itself, wildcards, a public name and the API server's ClusterIP.
ATTACK = ["kubernetes.default.svc", "tls-injector.tls-injector.svc", "victim.team-b.svc.cluster.local",
          "*.team-b.svc.cluster.local", "*", "example.com", "10.96.0.1"]


def _cluster(emu: Emulator, services: str) -> None:
    namespace(emu, OWN_NS)
    namespace(emu, "team-a")
    namespace(emu, "team-b")
    deployment(emu, "web", "team-a", annotations={"tls-injector.io/service-names": services})
    deployment(emu, "victim", "team-b")


def _team_b_connects(emu: Emulator, secret: str, hostname: str) -> str:
    leaf = data(emu.get("secrets", secret, "team-a"))
    bundle = emu.get("configmaps", "tls-injector-trust-bundle", "team-b")["data"]["ca-bundle.crt"].encode()
    return handshake(Party(leaf["tls.crt"], leaf["tls.key"]), bundle_pem=bundle, hostname=hostname)


def test_names_outside_the_workloads_namespace_are_refused_and_the_rest_issued(kubeapi: Emulator) -> None:
    _cluster(kubeapi, ", ".join([*ATTACK, "web", "api"]))
    report = reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass()

    sans = dns_sans(load_certificates(data(kubeapi.get("secrets", "web-tls", "team-a"))["tls.crt"])[0])
    assert sorted(sans) == ["api.team-a.svc", "api.team-a.svc.cluster.local",
                            "web.team-a.svc", "web.team-a.svc.cluster.local"]
    for name in ATTACK:
        with pytest.raises(ssl.SSLCertVerificationError):
            _team_b_connects(kubeapi, "web-tls", name)
    assert _team_b_connects(kubeapi, "web-tls", "web.team-a.svc").startswith("TLSv1")

    # Reported: the pass (so `reconcile --once` exits 1), the log, and one Event on the workload.
    assert not report.converged
    [message] = [m for m in report.names_refused if "web-tls" in m]
    assert sum(repr(name) in message for name in ATTACK) == 5  # the first five, sorted
    assert "and 2 more" in message
    events = [e for e in kubeapi.objects("events") if e["reason"] == "ServiceNamesRefused"]
    assert [(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events] == [("Deployment", "web")]


@pytest.mark.parametrize(("asked", "why"), [
    ("web.team-b", "has dots"),
    ("*", "a wildcard"),
    ("10.96.0.1", "an IP address"),
    ("fd00::1", "an IP address"),
    ("a" * 64, "longer than 63"),
    ("Web", "not a Service name"),
    ("web-", "not a Service name"),
    ("web_1", "not a Service name"),
])
def test_each_kind_of_refusal_names_its_reason(kubeapi: Emulator, asked: str, why: str) -> None:
    _cluster(kubeapi, asked)
    report = reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass()
    assert any(why in m for m in report.names_refused), report.names_refused
    # Nothing valid was asked for: the workload's own name, as if it had asked for nothing.
    sans = dns_sans(load_certificates(data(kubeapi.get("secrets", "web-tls", "team-a"))["tls.crt"])[0])
    assert sorted(sans) == ["web.team-a.svc", "web.team-a.svc.cluster.local"]


def test_the_count_is_bounded(kubeapi: Emulator) -> None:
    asked = [f"s{i:02d}" for i in range(MAX_SERVICES + 3)]
    _cluster(kubeapi, ",".join(asked))
    report = reconciler(kubeapi, Clock(datetime.now(UTC))).run_pass()
    sans = dns_sans(load_certificates(data(kubeapi.get("secrets", "web-tls", "team-a"))["tls.crt"])[0])
    assert len(sans) == 2 * MAX_SERVICES
    assert any(f"over the limit of {MAX_SERVICES}" in m and "'s18'" in m for m in report.names_refused)


def test_a_workload_named_like_a_domain_gets_a_certificate_naming_nothing_and_an_old_one_is_replaced(
        kubeapi: Emulator) -> None:
    """A Deployment may be called `example.com` (a DNS-1123 subdomain), which is no Service name, and no
    Service selects its pods: its pods get a Secret all the same (issue 39: they waited for ever), whose
    certificate names nothing; an old one of ours for `example.com` does not outlive the pass."""
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "team-a")
    deployment(kubeapi, "example.com", "team-a")
    clock = Clock(datetime.now(UTC))
    old = issue_leaf(issuer=make_ca(common_name="old", now=clock.now), dns_names=["example.com"], now=clock.now)
    kubeapi.add({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                 "metadata": {"name": "example.com-tls", "namespace": "team-a", "labels": {
                     "app.kubernetes.io/managed-by": "tls-injector", "tls-injector.io/role": "leaf"}},
                 "data": {"tls.crt": _b64(old.cert_pem), "tls.key": _b64(old.key_pem)}})
    report = reconciler(kubeapi, clock).run_pass()
    leaf = data(kubeapi.get("secrets", "example.com-tls", "team-a"))
    assert dns_sans(load_certificates(leaf["tls.crt"])[0]) == []
    assert report.reasons["renewed:sans-changed"] == 1
    assert report.converged
    assert not report.names_refused
    assert any("Deployment/example.com: has dots" in m for m in report.nameless), report.nameless
    for hostname in ("example.com", "example.com.team-a.svc", "tls-injector"):
        with pytest.raises(ssl.SSLCertVerificationError):
            _team_a_connects(kubeapi, "example.com-tls", hostname)


def _team_a_connects(emu: Emulator, secret: str, hostname: str) -> str:
    leaf = data(emu.get("secrets", secret, "team-a"))
    bundle = emu.get("configmaps", "tls-injector-trust-bundle", "team-a")["data"]["ca-bundle.crt"].encode()
    return handshake(Party(leaf["tls.crt"], leaf["tls.key"]), bundle_pem=bundle, hostname=hostname)


def test_a_refusal_is_one_event_while_it_lasts(kubeapi: Emulator) -> None:
    _cluster(kubeapi, "example.com,web")
    rec = reconciler(kubeapi, Clock(datetime.now(UTC)))
    for _ in range(4):
        assert not rec.run_pass().converged
    assert len([e for e in kubeapi.objects("events") if e["reason"] == "ServiceNamesRefused"]) == 1


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def test_the_services_selecting_a_workloads_pods_are_named_and_a_new_one_reissues_the_certificate(
        kubeapi: Emulator) -> None:
    """Names from what the namespace really has: a Service added later is in the next certificate, and a
    client dialling it verifies; a Service of another namespace with the same selector is not."""
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "team-a")
    namespace(kubeapi, "team-b")
    deployment(kubeapi, "web", "team-a")  # pod template labels app=web
    clock = Clock(datetime.now(UTC))
    rec = reconciler(kubeapi, clock)
    assert rec.run_pass().converged
    for ns, name in (("team-a", "web-public"), ("team-b", "stolen")):
        kubeapi.add({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
                     "spec": {"selector": {"app": "web"}, "ports": [{"port": 443}]}})
    report = rec.run_pass()
    assert report.reasons["renewed:sans-changed"] == 1
    leaf = data(kubeapi.get("secrets", "web-tls", "team-a"))
    assert sorted(dns_sans(load_certificates(leaf["tls.crt"])[0])) == [
        "web-public.team-a.svc", "web-public.team-a.svc.cluster.local",
        "web.team-a.svc", "web.team-a.svc.cluster.local"]
    bundle = kubeapi.get("configmaps", "tls-injector-trust-bundle", "team-a")["data"]["ca-bundle.crt"].encode()
    assert handshake(Party(leaf["tls.crt"], leaf["tls.key"]), bundle_pem=bundle, hostname="web-public.team-a.svc")
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(Party(leaf["tls.crt"], leaf["tls.key"]), bundle_pem=bundle, hostname="stolen.team-b.svc")
