"""Reading a request's head: which of its fields the admission port reads, and how its target is routed.

The parser (httptools, in tls_injector.web.http) hands each field to the connection, which only keeps it; the
head is read once it is complete, in one loop over the fields, with the tables here: the names looked up
as clients spell them first (one dict lookup, no lowering), lowered only when not found. The connection
checks the head's limits in that loop (docs/serving.md); the helpers here are the pure parts of what it
does next: an absolute-form target's path, an Upgrade request's head parsed again without its Upgrade,
and whether Expect asks for 100 Continue.
"""

from __future__ import annotations

import httptools

# The request headers the server reads (RFC 9110: names are case-insensitive, so looked up lowered). The
# parser hands each header to `on_header`, which only keeps it; the head is read once it is complete
# (`HttpConnection._read_head`), in one loop, where a Python call per header cost ~3k instructions each.
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
as_sent = AS_SENT.get


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
