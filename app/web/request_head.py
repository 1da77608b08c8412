"""Reading a request's head: which of its fields the admission port reads, and how its target is routed.

The parser (httptools, in tls_injector.web.http) hands each field to the connection, which only keeps it; the
head is read once it is complete (`read_head`), in one loop over the fields: the names looked up as
clients spell them first (one dict lookup, no lowering), lowered only when not found, and the head's
limits (docs/serving.md) checked on the way; a head that breaks one is walked again (`walk_head`) to name
the first it breaks, which the connection answers. Then what a head's values ask: a body the endpoint
takes (`check_head`), an absolute-form target's path, an Upgrade request's head parsed again without its
Upgrade, and whether Expect asks for 100 Continue. Everything here is a function of the head's bytes and
the limits: no connection state, no writes.
"""

from __future__ import annotations

import httptools

from tls_injector.web.endpoints import HttpError, check_call

# The request headers the server reads (RFC 9110: names are case-insensitive, so looked up lowered). The
# parser hands each header to `on_header`, which only keeps it; the head is read once it is complete
# (`read_head`), in one loop, where a Python call per header cost ~3k instructions each.
CONTENT_TYPE, CONTENT_LENGTH, HOST, EXPECT, TRANSFER_ENCODING = "type", "length", "host", "expect", "coding"
READ_HEADERS = {b"content-type": CONTENT_TYPE, b"content-length": CONTENT_LENGTH, b"host": HOST,
                b"expect": EXPECT, b"transfer-encoding": TRANSFER_ENCODING}
# The names as clients spell them most (Go's canonical form, as the apiserver and wrk send them, and lower
# case), the others among them marked OTHER: found as sent, without lowering them first.
OTHER = "other"
AS_SENT: dict[bytes, str] = {**READ_HEADERS, **{name.title(): read for name, read in READ_HEADERS.items()},
           **{name: OTHER for name in (b"accept", b"accept-encoding", b"user-agent", b"connection", b"authorization",
                                        b"content-encoding", b"traceparent")},
           **{name.title(): OTHER for name in (b"accept", b"accept-encoding", b"user-agent", b"connection",
                                                b"authorization", b"content-encoding", b"traceparent")}}


# Bound once: `AS_SENT.get(name)` looks the method up on every call (~500 instructions of ~950).
_as_sent = AS_SENT.get

# (content type, content length, Host fields, Expect, chunked): what the connection reads from a head.
Head = tuple[bytes, bytes, int, bytes, bool]


class HeadTooLarge(HttpError):
    """The head is over its size cap: a 431, counted apart (`head_too_large`) from the other refusals."""

    def __init__(self, limit: int) -> None:
        super().__init__(431, f"request head larger than {limit} bytes")


def read_head(url: bytes, fields: list[tuple[bytes, bytes]], max_head_bytes: int, max_headers: int) -> Head | HttpError:
    """(content type, content length, Host fields, Expect, chunked) of the head read so far, or the first
    limit it breaks, for the connection to answer. Called when the head is complete, when a read ends
    inside it, and when a field passes the count or is a Transfer-Encoding.

    One loop takes the values (the last of each) and sums the head's size; only a head that breaks a
    limit, or has a Transfer-Encoding, is walked again (`walk_head`), to answer the limit it breaks
    first: ~1.3k instructions less for wrk's three fields than checking every limit at every field."""
    size = len(url) + 4 * len(fields)  # each field is `name: value` and CRLF
    content_type = content_length = expect = coding = b""
    hosts = 0
    for name, value in fields:
        size += len(name) + len(value)
        read = _as_sent(name)
        if read is None:
            read = READ_HEADERS.get(name.lower())
        if read is CONTENT_TYPE:
            content_type = value
        elif read is CONTENT_LENGTH:
            content_length = value
        elif read is HOST:
            hosts += 1
        elif read is EXPECT:
            expect = value
        elif read is TRANSFER_ENCODING:
            coding = b"?"  # each value is checked by the walk
    if coding or size > max_head_bytes or len(fields) > max_headers:
        return walk_head(url, fields, max_head_bytes, max_headers)
    return content_type, content_length, hosts, expect, False


def walk_head(url: bytes, fields: list[tuple[bytes, bytes]], max_head_bytes: int, max_headers: int) -> Head | HttpError:
    """`read_head`, each limit checked as its field arrives, in the order they were sent, so the first
    broken is the one answered: the head's size (the target, then each field as `name: value` and
    CRLF), the number of fields, a transfer coding other than chunked (RFC 9112 6.1: a 501)."""
    limit = max_head_bytes
    size = len(url)
    if size > limit:
        return HeadTooLarge(limit)
    content_type = content_length = expect = b""
    hosts = count = 0
    chunked = False
    for name, value in fields:
        size += len(name) + len(value) + 4
        count += 1
        if size > limit:
            return HeadTooLarge(limit)
        if count > max_headers:
            return HttpError(431, f"more than {max_headers} header fields")
        read = AS_SENT.get(name)
        if read is None:
            read = READ_HEADERS.get(name.lower())
        if read is OTHER or read is None:
            continue
        if read is CONTENT_TYPE:
            content_type = value
        elif read is CONTENT_LENGTH:
            content_length = value
        elif read is HOST:
            hosts += 1
        elif read is EXPECT:
            expect = value
        else:
            chunked = value.strip().lower() == b"chunked"
            if not chunked:
                return HttpError(501, "transfer codings other than chunked are not served")
    return content_type, content_length, hosts, expect, chunked


def check_head(method: bytes, content_type: bytes, content_length: bytes, max_body_bytes: int) -> None:
    """Raises the HttpError of an admission call whose head the endpoint refuses: a wrong method or
    content type (`check_call`), a length over the body cap (413) or not a number (400)."""
    check_call(method, content_type)
    if content_length and (not content_length.isdigit() or int(content_length) > max_body_bytes):
        raise HttpError(413 if content_length.isdigit() else 400, "body larger than the limit or invalid length")


def absolute_path(url: bytes) -> bytes:
    """A target not in origin form: in absolute form (RFC 9112 3.2.2) routed by its path."""
    if url.startswith((b"http://", b"https://")):
        return httptools.parse_url(url).path or b"/"
    return url


def without_upgrade(method: bytes, url: bytes, version: str, fields: list[tuple[bytes, bytes]]) -> bytes:
    """The request's head as sent, less Upgrade, the `upgrade` option of Connection and Expect (its 100
    Continue was sent for the head as first parsed)."""
    kept = []
    for name, value in fields:
        lowered = name.lower()
        options = value
        if lowered == b"connection":
            options = b", ".join(t.strip() for t in value.split(b",") if t.strip().lower() != b"upgrade")
        if options and lowered not in (b"upgrade", b"expect"):
            kept.append(b"%s: %s\r\n" % (name, options))
    return b"%s %s HTTP/%s\r\n%s\r\n" % (method, url, version.encode(), b"".join(kept))


def expects_continue(expect: bytes) -> bool:
    return expect.lower() == b"100-continue"
