"""An admission call's access line (AdmissionEndpoint.answer): the keys of the error log's fields
(`_fields`), then its verdict and latency, in that order, as one JSON line."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from tests.support.reviews import review
from tls_injector.admission import Envelope, allowed, decode_review, decoder, envelope_route
from tls_injector.logs import AccessLog
from tls_injector.web.endpoints import AdmissionEndpoint, _fields
from tls_injector.web.metrics import ServerMetrics


@pytest.fixture
def endpoint() -> Iterator[tuple[AdmissionEndpoint, io.StringIO]]:
    logging.getLogger("tls_injector.admission").setLevel(logging.INFO)
    stream = io.StringIO()
    target = AdmissionEndpoint(name="validate", route=envelope_route(lambda request: allowed(request.uid)),
                               metrics=ServerMetrics())
    target.access_log = AccessLog("tls_injector.admission", stream)
    yield target, stream
    logging.getLogger("tls_injector.admission").setLevel(logging.NOTSET)


def test_the_access_line_has_the_error_logs_fields_then_the_verdict_and_latency(
        endpoint: tuple[AdmissionEndpoint, io.StringIO]) -> None:
    target, stream = endpoint
    body = orjson.dumps(review(operation="UPDATE", namespace="shop"))
    assert target.answer(b"POST", b"application/json", body)[0] == 200
    line = orjson.loads(stream.getvalue())
    request = decode_review(decoder(Envelope), body)
    expected = _fields("validate", request)
    assert list(line) == ["time", "level", "logger", "msg", *expected, "verdict", "latency_ms"]
    assert {k: line[k] for k in expected} == expected
    assert line["verdict"] == "allowed"
    assert isinstance(line["latency_ms"], float)
    assert 0 <= line["latency_ms"] < 10_000
    assert line["latency_ms"] == round(line["latency_ms"], 3)  # to the microsecond
