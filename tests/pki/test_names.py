from __future__ import annotations

import pytest

from tls_injector.pki import dns_names_for_services


@pytest.mark.parametrize(
    ("services", "namespace", "domain", "expected"),
    [
        (["web"], "shop", "cluster.local", ["web.shop.svc", "web.shop.svc.cluster.local"]),
        (["b", "a", "b"], "n", "cluster.local",
         ["a.n.svc", "a.n.svc.cluster.local", "b.n.svc", "b.n.svc.cluster.local"]),
        (["web"], "shop", "corp.example.", ["web.shop.svc", "web.shop.svc.corp.example"]),
        ([" web ", ""], "shop", "cluster.local", ["web.shop.svc", "web.shop.svc.cluster.local"]),
        ([], "shop", "cluster.local", []),
    ],
)
def test_each_service_gets_its_two_cluster_names_sorted_and_unique(
    services: list[str], namespace: str, domain: str, expected: list[str]
) -> None:
    assert dns_names_for_services(services, namespace, cluster_domain=domain) == expected


def test_the_short_forms_only_when_asked_for_the_webhooks_own_certificate() -> None:
    assert dns_names_for_services(["web"], "shop", short_forms=True) == [
        "web", "web.shop", "web.shop.svc", "web.shop.svc.cluster.local"]


def test_the_cluster_domain_defaults_to_cluster_local() -> None:
    assert dns_names_for_services(["s"], "n")[-1] == "s.n.svc.cluster.local"


def test_an_empty_namespace_is_refused() -> None:
    with pytest.raises(ValueError, match="namespace"):
        dns_names_for_services(["s"], " ")
