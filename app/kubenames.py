"""What Kubernetes accepts as an object's name, and what may stand as one segment of an API path.

Two uses, both against names a tenant writes into an object (an annotation, a label, a spec field):
where such a value is read, it is vetted as the name it must be (a Secret's name is a DNS-1123 subdomain,
a Service's or a namespace's a DNS-1123 label) and refused with the reason these functions give; and the
API client (app/kube/api.py) builds no request path from a segment `path_segment_problem` refuses, so a
value that slipped past the first fence still cannot step out of the path it was meant for (`..` is
folded away by the HTTP client before sending: `secrets/../../../secrets` is GET /api/v1/secrets).

Each function answers "" for a good name, else the reason, for a person (docs/security.md, "Names a
tenant writes").
"""

from __future__ import annotations

import re

# The apiserver's rules (k8s.io/apimachinery/pkg/util/validation): a DNS-1123 label is 1-63 lower-case
# letters, digits and inner '-'; a DNS-1123 subdomain is at most 253 characters of such labels joined by '.'
# (the labels of a subdomain may be of any length within the whole, as the apiserver checks only the whole).
MAX_LABEL = 63
MAX_SUBDOMAIN = 253
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# What may never be in one segment of a request path: '/' starts another segment, '%' an escape the
# server decodes, '?' the query, '#' a fragment, '\' a separator some clients fold into '/'; and nothing
# outside printable ASCII (controls, spaces, DEL, non-ASCII), which no object name of any kind holds.
_PATH_BREAKERS = frozenset("/%?#\\")
# The same as one character class (printable ASCII, 0x21-0x7e, less those five), for the fast answer on the
# call path: one match of a request's whole path costs ~1 us, against ~9 for a walk of its characters (measured
# here on a Secret's path), and a first pass at 100,000 workloads makes ~200,000 calls.
_SEGMENT = r'[!"$&-.0->@-\[\]-~]+'
_GOOD_SEGMENT = re.compile(_SEGMENT)
_GOOD_PATH = re.compile(rf"(?:/(?!\.\.?(?:/|$)){_SEGMENT})+")
# A reason quotes at most this much of the value (a tenant's value may be long).
_SHOWN = 80


def label_problem(name: object) -> str:
    """Why `name` is no DNS-1123 label (a namespace's, a Service's name), or ""."""
    if not isinstance(name, str) or not name:
        return "empty"
    if len(name) > MAX_LABEL:
        return f"longer than {MAX_LABEL} characters"
    if not _LABEL.fullmatch(name):
        return "not a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit)"
    return ""


def subdomain_problem(name: object) -> str:
    """Why `name` is no DNS-1123 subdomain (the name of a Secret, ConfigMap, ServiceAccount, Node...), or ""."""
    if not isinstance(name, str) or not name:
        return "empty"
    if len(name) > MAX_SUBDOMAIN:
        return f"longer than {MAX_SUBDOMAIN} characters"
    if not _SUBDOMAIN.fullmatch(name):
        return ("not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', each part starting and ending "
                "with a letter or digit)")
    return ""


def path_segment_problem(segment: object) -> str:
    """Why `segment` may not be one segment of an API request path, or "": empty, `.` or `..`, or holding
    `/`, `%`, `?`, `#`, `\\` or anything outside printable ASCII. Looser than any kind's name rule (a
    ClusterTrustBundle's name holds ':'), so it holds for every kind; each kind's own rule is checked where
    a name is read."""
    if isinstance(segment, str) and _GOOD_SEGMENT.fullmatch(segment) and segment not in (".", ".."):
        return ""
    if not isinstance(segment, str) or not segment:
        return "empty"
    if segment in (".", ".."):
        return f"{segment!r} is a step in a path, not a name"
    bad = next((c for c in segment if c in _PATH_BREAKERS or not "!" <= c <= "~"), None)
    if bad is not None:
        return f"holds {bad!r}, which no object name holds"
    return ""


def path_problem(path: str) -> str:
    """Why the absolute request path `path` holds a segment that can be none (`path_segment_problem`), or ""."""
    if _GOOD_PATH.fullmatch(path):
        return ""
    if not path.startswith("/"):
        return "not absolute"
    return next((why for segment in path[1:].split("/") if (why := path_segment_problem(segment))), "")


def shown(value: object) -> str:
    """`value` quoted for a message, cut to a bounded length."""
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 4] + "...'"
