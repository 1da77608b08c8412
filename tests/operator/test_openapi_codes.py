"""The operator port's OpenAPI schema names every status code a route can answer: /healthz, /readyz and
the page answer 503 too, and a client generated from the schema must expect it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from tls_injector.reconcile.parts import status as snapshot
from tls_injector.web.health import Probes, listen
from tls_injector.web.operator import OperatorPort
from tls_injector.web.status import status_app

STATUS = snapshot.Status(pass_at=datetime(2026, 6, 1, tzinfo=UTC), converged=True, aborted="", cas=(), workloads=(),
                         pods_missing_injection=())
QUERIES = {"/": ["", "?sort=ready", "?sort=nonsense"]}


@pytest.fixture(params=[True, False], ids=["healthy", "failing"])
def client(request: pytest.FixtureRequest) -> Iterator[httpx.Client]:
    ok: bool = request.param
    probes = Probes(healthy=lambda: (ok, {}), ready=lambda: (ok, {}), metrics=lambda: b"")
    port = OperatorPort(listen("127.0.0.1", 0), status_app(probes, lambda: STATUS if ok else None))
    port.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port.port}") as found:
            yield found
    finally:
        port.stop()


def test_every_code_a_route_answers_is_in_its_openapi_responses(client: httpx.Client) -> None:
    schema = client.get("/openapi.json").json()
    for path, operations in schema["paths"].items():
        documented = set(operations["get"]["responses"])
        for query in QUERIES.get(path, [""]):
            code = client.get(path + query).status_code
            assert str(code) in documented, f"GET {path}{query} answered {code}; the schema says {sorted(documented)}"
