"""The admission port's reading of a request head: the one-loop read of the usual head gives what the
field-by-field walk gives, for every head (limits broken or not), a connection answers the limit a head
breaks, and the lengths checked without int() are the lengths the cap allows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tls_injector.settings import Limits
from tls_injector.web import request_head
from tls_injector.web.connections import ConnectionSet
from tls_injector.web.endpoints import HttpError
from tls_injector.web.http import HttpConnection, Routes
from tls_injector.web.metrics import ServerMetrics
from tls_injector.web.request_head import Head, read_head, walk_head

# Small limits, so that generated heads break each of them often.
LIMITS = Limits(max_head_bytes=160, max_headers=6, max_body_bytes=7 * 1024 * 1024)
NAMES = [b"Host", b"host", b"HOST", b"Content-Type", b"content-type", b"CONTENT-TYPE", b"Content-Length",
         b"content-length", b"Expect", b"expect", b"Transfer-Encoding", b"transfer-encoding",
         b"TRANSFER-ENCODING", b"Accept", b"User-Agent", b"X-Other", b"x-other"]
VALUES = [b"", b"127.0.0.1", b"application/json", b"5825", b"100-continue", b"chunked", b" Chunked ", b"gzip",
          b"gzip, chunked", b"x" * 40, b"y" * 120]


@dataclass
class Written:
    """A transport that keeps what the connection writes."""

    data: list[bytes] = field(default_factory=list)
    closed: bool = False

    def write(self, data: bytes) -> None:
        self.data.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 40000) if name == "peername" else None

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def set_read_buffer_limits(self, high: int) -> None:
        pass


class Endpoint:
    """An admission endpoint answering every call with an empty JSON object."""

    name = "mutate"

    def answer(self, method: bytes, content_type: bytes, body: bytes) -> tuple[int, bytes, tuple[()]]:
        return 200, b"{}", ()

    def refuse(self, error: object, started: float | None = None) -> tuple[int, bytes, tuple[()]]:
        status = getattr(error, "status", 400)
        return status, b'{"error":"refused"}', ()


def connection(limits: Limits = LIMITS) -> tuple[HttpConnection, Written]:
    made = HttpConnection(ConnectionSet(limits, ServerMetrics()),
                          Routes(admission={b"/mutate": Endpoint()}, plain={}))  # type: ignore[dict-item]
    transport = Written()
    made.connection_made(transport)  # type: ignore[arg-type]
    return made, transport


def read(reading: Callable[..., Head | HttpError], url: bytes, fields: list[tuple[bytes, bytes]]) -> object:
    """What one of the two readings gives for this head: its values, or the refusal it answers with."""
    result = reading(url, list(fields), LIMITS.max_head_bytes, LIMITS.max_headers)
    if isinstance(result, tuple):
        return result
    return type(result), result.status, result.message, result.headers


@settings(max_examples=600, deadline=None)
@given(url=st.sampled_from([b"/mutate", b"/mutate?timeout=10s", b"/" + b"u" * 150]),
       fields=st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(VALUES)), max_size=9))
def test_the_usual_heads_read_is_the_walks_read(url: bytes, fields: list[tuple[bytes, bytes]]) -> None:
    # Same values (the last of each, the Host fields counted), same refusal of the first limit broken.
    assert read(read_head, url, fields) == read(walk_head, url, fields)


def test_the_usual_head_is_read_without_walking_it(monkeypatch: pytest.MonkeyPatch) -> None:
    fields = [(b"Host", b"127.0.0.1"), (b"Content-Length", b"5825"), (b"Content-Type", b"application/json")]
    monkeypatch.setattr(request_head, "walk_head", lambda *_: pytest.fail("walked"))
    assert read_head(b"/mutate?timeout=10s", fields, LIMITS.max_head_bytes, LIMITS.max_headers) \
        == (b"application/json", b"5825", 1, b"", False)


@pytest.mark.parametrize(("head", "answer", "counted"), [
    (b"GET /" + b"u" * 200 + b" HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 431 ", 1),  # over the size cap
    (b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % n for n in range(7)) + b"\r\n", b"HTTP/1.1 431 ", 0),
    (b"POST /mutate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", b"HTTP/1.1 501 ", 0),
    (b"GET /" + b"u" * 200, b"HTTP/1.1 431 ", 1),  # a read ending inside a head already over the cap
])
def test_a_head_over_a_limit_is_answered_with_the_limit_it_breaks(head: bytes, answer: bytes, counted: int) -> None:
    made, transport = connection()
    made.connections.read_buffer[:len(head)] = head
    made.buffer_updated(len(head))
    assert transport.data[0].startswith(answer), transport.data
    assert made.phase == "linger"
    assert made.connections.metrics.connections_closed.labels("head_too_large")._value.get() == counted


def send_head(length: bytes) -> bytes:
    """The server's first answer to a /mutate head declaring `length` and expecting 100 Continue."""
    made, transport = connection(Limits())
    head = (b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
            b"Content-Length: " + length + b"\r\n\r\n")
    buffer = made.connections.read_buffer
    buffer[:len(head)] = head
    made.buffer_updated(len(head))
    return transport.data[0]


@pytest.mark.parametrize(("length", "answer"), [
    (b"1", b"HTTP/1.1 100 Continue"),
    (b"999999", b"HTTP/1.1 100 Continue"),  # fewer digits than the cap's: under it without int()
    (b"0000005", b"HTTP/1.1 100 Continue"),  # as many digits as the cap's: read as a number
    (b"7340032", b"HTTP/1.1 100 Continue"),  # the cap itself (7 MiB)
    (b"7340033", b"HTTP/1.1 413"),
    (b"10000000", b"HTTP/1.1 413"),
])
def test_a_declared_length_is_refused_only_past_the_cap(length: bytes, answer: bytes) -> None:
    assert send_head(length).startswith(answer)
