"""The DNS names a Service is reached by inside the cluster."""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_CLUSTER_DOMAIN = "cluster.local"


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
