"""AdmissionReviews: the vendored fixtures, and small ones built for a case."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from tls_injector.admission import AdmissionResponse, Envelope, Route, decode_review, decoder

# Vendored under tests/fixtures (see its README for origin and version): a clone needs nothing beside it.
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def fixture(relative: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / relative).read_text())
    return data


def review(
    *,
    operation: str = "CREATE",
    obj: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
    kind: tuple[str, str, str] = ("", "v1", "Pod"),
    namespace: str = "default",
    dry_run: bool = False,
) -> dict[str, Any]:
    group, version, kind_name = kind
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": kind_name},
            "resource": {"group": group, "version": version, "resource": kind_name.lower() + "s"},
            "operation": operation,
            "namespace": namespace,
            "name": (obj or old or {}).get("metadata", {}).get("name", ""),
            "object": obj,
            "oldObject": old,
            "dryRun": dry_run,
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
        },
    }


def answer(route: Route[Any], sent: object) -> AdmissionResponse:
    """`route`'s answer to a review given as JSON-able data: its one path, decode and handler, as served."""
    return route.answer(json.dumps(sent).encode())  # json: any depth and integer, as a client may send


def decode(sent: object) -> Envelope:
    """A review given as JSON-able data, through the edge's decode of the envelope; BadReview when refused."""
    return decode_review(decoder(Envelope), json.dumps(sent).encode())  # json: any integer, as a client may send
