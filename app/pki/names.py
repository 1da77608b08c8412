"""The DNS names a Service is reached by inside the cluster, and the cluster's DNS domain."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from tls_injector.names import DEFAULT_CLUSTER_DOMAIN

# A Service's name is a DNS-1123 label (what the apiserver accepts for `metadata.name` of a Service since
# RelaxedServiceNameValidation, on in 1.36 and GA and locked on in 1.37: tests/cluster/test_contract.py):
# lower-case letters, digits and inner hyphens, 63 characters at most, a leading digit allowed. On an older
# cluster such a Service cannot exist, so a certificate naming one names nothing anyone can serve.
_SERVICE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# Services one certificate may name (docs/security.md). Each becomes two SANs sent in every handshake;
# 16 Services (32 names, ~1.5 KiB) is more than any workload we know serves, and far below what clients
# and the Secret's size tolerate. A list longer than that is a mistake or an attack, not a design.
MAX_SERVICES = 16
# The Services Kubernetes itself serves in-cluster, by namespace: a certificate our CA signs for one of them
# is believed by every client whose only trust is our bundle (SSL_CERT_FILE), so none is ever issued, whoever
# asks. `kubernetes` in `default` is the API server (the apiserver makes and keeps that Service itself), and
# `kube-dns` in `kube-system` the cluster DNS (the name the DNS add-on's Service has, CoreDNS included, as
# kubelets are told its address). Other Services of `kube-system` are the cluster operator's add-ons, in a
# namespace no tenant may write: an operator who opts one in gets its names.
_KUBERNETES_SERVES = {"default": frozenset({"kubernetes"}), "kube-system": frozenset({"kube-dns"})}
# Names quoted back in a reason are cut here, and at most this many refusals are listed one by one.
_SHOWN = 80
_LISTED = 5
# RFC 1035 limits: a name of at most 253 characters in labels of 1-63 letters, digits and inner hyphens.
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_MAX_NAME = 253
# Kubelet writes at most 32 search domains (its limit since Kubernetes 1.28; 6 before): looking at 32
# covers any file it writes, and bounds the work on a file someone else wrote.
_MAX_SEARCH = 32


def dns_names_for_services(
    service_names: Iterable[str], namespace: str, *, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
    short_forms: bool = False,
) -> list[str]:
    """`s.n.svc` and `s.n.svc.<domain>` for every Service `s` in namespace `n`; sorted, unique.

    The short forms `s` and `s.n` only with `short_forms` (the webhook's own certificate, under its own CA):
    a workload's certificate never carries them. `s` is the same name in every namespace (a certificate
    for team-a's `web` would be believed by a team-b client calling its own `web`), and `s.n` is a public
    name whenever a namespace is called like a top-level domain (`example` in namespace `com`). Neither fits
    the CA's name constraints (`svc`, `svc.<domain>`; docs/security.md), so clients call `s.n.svc`.
    """
    if not namespace.strip():
        raise ValueError("namespace must not be empty")
    domain = cluster_domain.strip().strip(".")
    names: set[str] = set()
    for raw in service_names:
        service = raw.strip()
        if not service:
            continue
        names.add(f"{service}.{namespace}.svc")
        names.update({service, f"{service}.{namespace}"} if short_forms else set())
        names.update({f"{service}.{namespace}.svc.{domain}"} if domain else set())
    return sorted(names)


def is_dns_label(name: object) -> bool:
    """A DNS-1123 label (what a pod's host name is): 1-63 lower-case letters, digits and inner hyphens."""
    return isinstance(name, str) and bool(_LABEL.match(name))


def peer_dns_names(service: str, namespace: str, *, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> list[str]:
    """`*.s.n.svc` and `*.s.n.svc.<domain>`: the per-pod names a StatefulSet's pods are dialled by through
    their governing Service `s` (`<pod>.s.n.svc`), as its members find each other. One label deep under
    that one Service only (a wildcard covers exactly one label), inside the CA's name constraints (`svc`,
    `svc.<domain>`); the caller checks that `s` is a Service of namespace `n` selecting the pods."""
    return [f"*.{name}" for name in dns_names_for_services([service], namespace, cluster_domain=cluster_domain)]


def service_name_constraints(cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> tuple[str, ...]:
    """The DNS subtrees a workload CA may sign names in: every name `dns_names_for_services` makes."""
    domain = cluster_domain.strip().strip(".")
    return ("svc", f"svc.{domain}") if domain else ("svc",)


@dataclass(frozen=True)
class ServiceNames:
    """Service names as asked for, split into those a certificate may carry and those refused (with why)."""

    kept: tuple[str, ...]
    refused: tuple[tuple[str, str], ...] = ()

    def reason(self) -> str:
        """The refusals for a person, one clause each (the first few, then how many more)."""
        shown = [f"{_shown(name)} ({why})" for name, why in self.refused[:_LISTED]]
        more = len(self.refused) - _LISTED
        return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def vet_service_names(asked: Iterable[str], *, namespace: str, limit: int = MAX_SERVICES) -> ServiceNames:
    """Keep what can be a Service of the workload's own namespace `namespace`; refuse the rest, each with a
    reason (a name Kubernetes itself serves there included: `served_by_kubernetes`).

    Order is kept (the caller sorts); past `limit` valid names the rest are refused as over the limit.
    """
    kept: list[str] = []
    refused: list[tuple[str, str]] = []
    for raw in asked:
        name = raw.strip()
        why = service_name_problem(name) or served_by_kubernetes(name, namespace)
        if not why and len(kept) >= limit:
            why = f"over the limit of {limit} Services per certificate"
        if why:
            refused.append((name, why))
        elif name not in kept:
            kept.append(name)
    return ServiceNames(tuple(kept), tuple(refused))


def service_name_problem(name: str) -> str:
    """Why `name` cannot be a Service name in a certificate, or "" when it can (the first reason that fits)."""
    if len(name) <= 63 and _SERVICE.match(name):  # a Service name passes every check below: a pass asks this
        return ""  # of every workload's names, ~3 times each, and building the checks was ~3% of its CPU
    checks = (
        (not name, "empty"),
        ("*" in name, "a wildcard; certificates name Services one by one"),
        (_is_ip(name), "an IP address; certificates carry Service names only"),
        ("." in name, "has dots; give the Service's own name, its namespace and domain are added"),
        (len(name) > 63, "longer than 63 characters"),
        (not _SERVICE.match(name),
         "not a Service name (a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a "
         "letter or digit)"),
    )
    return next((why for failed, why in checks if failed), "")


def served_by_kubernetes(service: str, namespace: str) -> str:
    """Why Service `service` of `namespace` is a name Kubernetes itself serves in-cluster (`kubernetes` in
    `default`, the API server; `kube-dns` in `kube-system`, the cluster DNS), or "" when it is not."""
    if service in _KUBERNETES_SERVES.get(namespace, ()):
        what = "the API server" if namespace == "default" else "the cluster DNS"
        return f"{what}'s own name in namespace {namespace}; Kubernetes serves it, no workload may"
    return ""


def _is_ip(name: str) -> bool:
    if "." not in name and ":" not in name:  # an address has one or the other; most names have neither, and
        return False  # ipaddress's exceptions cost a tenth of a converged pass at 10,000 workloads
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


def _shown(name: str) -> str:
    text = repr(name)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 4] + "...'"


def cluster_domain_from_resolv_conf(text: str, *, namespace: str | None = None) -> str | None:
    """The cluster's DNS domain from a pod's resolv.conf, or None when its search path does not say.

    Kubelet writes `search <namespace>.svc.<domain> svc.<domain> <domain> [the node's ...]` for pods with
    the ClusterFirst DNS policy. The `svc.<domain>` entry names the domain whatever the namespace;
    `<namespace>.svc.<domain>` does too when the namespace is known. The last `search` line wins, as
    for the resolver. A pod on the node's DNS (hostNetwork, dnsPolicy Default) has neither: None.
    """
    entries = _search_path(text)
    for entry in entries:
        if entry.startswith("svc.") and _is_domain(entry[4:]):
            return entry[4:]
    prefix = f"{namespace}.svc." if namespace else None
    for entry in entries:
        if prefix and entry.startswith(prefix) and _is_domain(entry[len(prefix):]):
            return entry[len(prefix):]
    return None


def _search_path(text: str) -> list[str]:
    entries: list[str] = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split(";", 1)[0].split()
        if words and words[0] == "search":
            entries = [w.lower().rstrip(".") for w in words[1:_MAX_SEARCH + 1]]
    return entries


def _is_domain(name: str) -> bool:
    return 0 < len(name) <= _MAX_NAME and all(_LABEL.match(label) for label in name.split("."))


def vet_cluster_domain(value: str) -> str:
    """A cluster domain as given by a person (`--cluster-domain`), normalised; ValueError if it is not one."""
    domain = value.strip().lower().rstrip(".")
    if not _is_domain(domain):
        raise ValueError(f"not a DNS domain (labels of letters, digits and inner hyphens): {value[:100]!r}")
    return domain
