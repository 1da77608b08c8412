"""Every name Kubernetes accepts for each kind that runs pods, and the first names past each rule.

Written from the apiserver's own validation (k8s.io/apimachinery NameIsDNSSubdomain / NameIsDNSLabel and
the per-kind rules of pkg/apis/apps and pkg/apis/batch validation), independently of the emulator's
tests/kubeapi/validation.py: tests/reconcile/test_legal_names.py checks that the emulator, and a real
apiserver when one is given, agree with this table.

| kind | rule | at most |
| --- | --- | --- |
| Deployment, DaemonSet, ReplicaSet, Pod | DNS-1123 subdomain (dots, leading digits) | 253 |
| StatefulSet | DNS-1123 label (no dots; its pods' host names are `<name>-<ordinal>`) | 63 |
| Job | DNS-1123 subdomain; the value of the labels generated on its template, so | 63 |
| CronJob | DNS-1123 subdomain; its runs' Jobs are `<name>-<minutes>`, so | 52 |
"""

from __future__ import annotations

LIMITS = {"Deployment": 253, "DaemonSet": 253, "ReplicaSet": 253, "Pod": 253, "StatefulSet": 63, "Job": 63,
          "CronJob": 52}
KINDS = tuple(LIMITS)
DOTS = {kind: kind != "StatefulSet" for kind in KINDS}  # subdomains may have dots, labels not


def _longest(limit: int, *, dots: bool) -> str:
    """A name of exactly `limit` characters: labels of 63 joined by dots where allowed, else one label."""
    if not dots:
        return "a" + "0" * (limit - 2) + "z"
    labels, left = [], limit
    while left > 0:
        size = min(63, left if left <= 63 else min(63, left - 2))  # never leave a label of 0 after a dot
        labels.append("l" + "1" * (size - 2) + "9" if size > 1 else "x")
        left -= size + 1
    return ".".join(labels)[:limit]


def legal_names(kind: str) -> list[str]:
    """Names the apiserver accepts for `kind`: the short, the odd (leading digit, all digits, dots) and
    the longest; the ones that are no Service name (a DNS-1123 label of at most 63, so: dots or 64+
    characters) are most of them."""
    limit, dots = LIMITS[kind], DOTS[kind]
    names = ["web", "1web", "0", "a-1", "web-" + "x" * (min(limit, 63) - 4), _longest(limit, dots=dots)]
    if limit > 63:
        names += ["b" * 64]
    if dots:
        names += ["web.v2", "1.2.3", "example.com"]
    return sorted(set(names), key=lambda n: (len(n), n))


def illegal_names(kind: str) -> list[str]:
    """The first names past each rule: one character too long, and characters or shapes no name may have."""
    limit, dots = LIMITS[kind], DOTS[kind]
    names = [_longest(limit, dots=dots) + "q", "Web", "web_1", "-web", "web-", "web..v2", ".web"]
    if not dots:
        names += ["web.v2"]
    return names
