"""The DNS names a Service is reached by inside the cluster, and the cluster's DNS domain."""

from __future__ import annotations

import re
from collections.abc import Iterable

DEFAULT_CLUSTER_DOMAIN = "cluster.local"
# RFC 1035 limits: a name of at most 253 characters in labels of 1-63 letters, digits and inner hyphens.
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_MAX_NAME = 253
# Kubelet writes at most 32 search domains (its limit since Kubernetes 1.28; 6 before): looking at 32
# covers any file it writes, and bounds the work on a file someone else wrote.
_MAX_SEARCH = 32


def dns_names_for_services(
    service_names: Iterable[str], namespace: str, *, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
) -> list[str]:
    """`s`, `s.n`, `s.n.svc`, `s.n.svc.<domain>` for every Service `s` in namespace `n`; sorted, unique.

    All four forms, because clients resolve through the pod's DNS search path and may name the Service
    by any of them; the certificate must match whichever one they used.
    """
    if not namespace.strip():
        raise ValueError("namespace must not be empty")
    domain = cluster_domain.strip().strip(".")
    names: set[str] = set()
    for raw in service_names:
        service = raw.strip()
        if not service:
            continue
        names.update({service, f"{service}.{namespace}", f"{service}.{namespace}.svc"})
        names.update({f"{service}.{namespace}.svc.{domain}"} if domain else set())
    return sorted(names)


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


def check_cluster_domain(value: str) -> str:
    """A cluster domain as given by a person (`--cluster-domain`), normalised; ValueError if it is not one."""
    domain = value.strip().lower().rstrip(".")
    if not _is_domain(domain):
        raise ValueError(f"not a DNS domain (labels of letters, digits and inner hyphens): {value[:100]!r}")
    return domain
