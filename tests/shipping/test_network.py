"""The example overlay's NetworkPolicies: every port admits named sources only (no tenant pod reaches the
admission port), the reconciler's egress is the API server, the webhook pods and DNS, and the two
values only the operator knows are placeholders the apiserver refuses until set (docs/install.md)."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from tests.shipping.support import RECONCILER, ROOT, WEBHOOK, Obj, of_kind, only, render

OVERLAY = ROOT / "manifests" / "overlays" / "example"
PLACEHOLDERS = {"SET-control-plane-CIDR", "SET-API-server-endpoint-CIDR"}
INSTALL_DOC = ROOT / "docs" / "install.md"


def policy_of(objects: list[Obj], deployment: str) -> Obj:
    labels = only(objects, "Deployment", deployment)["spec"]["template"]["metadata"]["labels"]
    [policy] = [p for p in of_kind(objects, "NetworkPolicy")
                if all(labels.get(k) == v for k, v in p["spec"]["podSelector"]["matchLabels"].items())]
    return policy


def ports(rule: Obj) -> set[tuple[str, int]]:
    return {(p["protocol"], p["port"]) for p in rule["ports"]}


def cidrs(peers: list[Obj]) -> set[str]:
    return {p["ipBlock"]["cidr"] for p in peers if "ipBlock" in p}


def selects_namespace(peer: Obj, name: str) -> bool:
    return peer.get("namespaceSelector", {}).get("matchLabels") == {"kubernetes.io/metadata.name": name}


def component(peer: Obj) -> Any:
    return None if "namespaceSelector" in peer else peer.get("podSelector", {}).get("matchLabels", {}).get(
        "app.kubernetes.io/component")


@pytest.mark.parametrize("deployment", [WEBHOOK, RECONCILER])
def test_every_port_of_the_overlay_admits_only_named_sources(deployment: str) -> None:
    policy = policy_of(render(OVERLAY), deployment)
    base = policy_of(render(ROOT / "manifests" / "base"), deployment)
    served = set().union(*(ports(rule) for rule in base["spec"]["ingress"]))
    assert set().union(*(ports(rule) for rule in policy["spec"]["ingress"])) == served, "the same ports as the base"
    for rule in policy["spec"]["ingress"]:
        assert rule.get("from"), f"{deployment}: a rule admits every source on {ports(rule)}"


def test_only_the_control_plane_and_the_reconciler_reach_the_admission_port() -> None:
    [admission] = [r for r in policy_of(render(OVERLAY), WEBHOOK)["spec"]["ingress"] if ("TCP", 8443) in ports(r)]
    assert cidrs(admission["from"]) == {"SET-control-plane-CIDR"}
    assert {component(p) for p in admission["from"] if "ipBlock" not in p} == {"reconciler"}


@pytest.mark.parametrize(("deployment", "port"), [(WEBHOOK, 8081), (RECONCILER, 8080)])
def test_metrics_are_reachable_from_the_monitoring_namespace_only(deployment: str, port: int) -> None:
    [metrics] = [r for r in policy_of(render(OVERLAY), deployment)["spec"]["ingress"] if ("TCP", port) in ports(r)]
    assert len(metrics["from"]) == 1
    assert selects_namespace(metrics["from"][0], "monitoring")
    assert "podSelector" not in metrics["from"][0]


@pytest.mark.parametrize(("deployment", "port"), [(WEBHOOK, 8081), (RECONCILER, 8080)])
def test_even_the_base_admits_the_operator_ports_from_the_monitoring_namespace_only(deployment: str, port: int) -> None:
    """The base leaves the admission port open (only the operator knows the apiserver's address), but the
    operator ports need no such address: the kubelet's probes come from the node, always admitted. Open,
    any pod could scrape them or flood them (docs/security.md, "The operator ports")."""
    [rule] = [r for r in policy_of(render(ROOT / "manifests" / "base"), deployment)["spec"]["ingress"]
              if ("TCP", port) in ports(r)]
    assert ports(rule) == {("TCP", port)}
    assert [selects_namespace(peer, "monitoring") for peer in rule.get("from", [])] == [True]


def test_the_reconciler_may_connect_only_to_the_api_server_the_webhook_pods_and_dns() -> None:
    policy = policy_of(render(OVERLAY), RECONCILER)
    assert "Egress" in policy["spec"]["policyTypes"]
    rules = policy["spec"]["egress"]
    assert all(rule.get("to") for rule in rules), "an egress rule without `to` opens every destination"
    outside = [r for r in rules if cidrs(r["to"])]
    assert [cidrs(r["to"]) for r in outside] == [{"SET-API-server-endpoint-CIDR"}]
    assert ports(outside[0]) == {("TCP", 6443), ("TCP", 443)}
    inside = [r for r in rules if not cidrs(r["to"])]
    assert {(component(p), frozenset(ports(r))) for r in inside for p in r["to"] if component(p)} == {
        ("webhook", frozenset({("TCP", 8443)}))}
    [dns] = [p for r in inside for p in r["to"] if selects_namespace(p, "kube-system")]
    assert dns["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}


def test_the_placeholders_are_not_cidrs_so_the_apiserver_refuses_them_until_set() -> None:
    objects = render(OVERLAY)
    found = set().union(*(cidrs(r.get("from", [])) for p in of_kind(objects, "NetworkPolicy")
                          for r in p["spec"].get("ingress", [])),
                        *(cidrs(r.get("to", [])) for p in of_kind(objects, "NetworkPolicy")
                          for r in p["spec"].get("egress", [])))
    assert found == PLACEHOLDERS
    for value in found:
        with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 network"):
            ipaddress.ip_network(value)
    doc = INSTALL_DOC.read_text()
    assert all(f"`{value}`" in doc for value in PLACEHOLDERS), "docs/install.md says what to put in each"


def test_the_base_stays_portable_the_admission_port_open_and_no_placeholder() -> None:
    objects = render(ROOT / "manifests" / "base")
    for policy in of_kind(objects, "NetworkPolicy"):
        assert all("from" not in rule for rule in policy["spec"]["ingress"] if ("TCP", 8443) in ports(rule))
        assert "SET-" not in str(policy)
