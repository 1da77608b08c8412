"""The bytes of the admission port's answers: status lines, the Date header and the two endings.

An answer is built whole and written with one `write` (tls_injector.web.http): a head of precomputed bytes,
the length, `Connection: close` or not, and the body. The head of a 200 JSON answer (every admission answer
the apiserver reads) is made once a second with the Date header (`Clock`), so per request only its length
is formatted; any other status (the 4xx and 5xx of a refused request, the plain routes) goes through
`response_bytes`.
"""

from __future__ import annotations

from email.utils import formatdate

from tls_injector.web.endpoints import Headers
from tls_injector.web.health import JSON

REASONS = {100: b"Continue", 200: b"OK", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed",
           408: b"Request Timeout", 413: b"Content Too Large", 415: b"Unsupported Media Type",
           431: b"Request Header Fields Too Large", 500: b"Internal Server Error", 501: b"Not Implemented",
           503: b"Service Unavailable", 505: b"HTTP Version Not Supported"}
# The end of an answer's head: kept alive, or the last answer of its connection.
KEEP, CLOSE = b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n"


class Clock:
    """The Date header, formatted once a second by the sweeper rather than once per response, and with it
    the head of a 200 JSON answer up to its length (`ok_json`): an admission answer's head is then that,
    the length and one of two endings."""

    date = b""
    ok_json = b""

    @classmethod
    def tick(cls) -> None:
        cls.date = formatdate(usegmt=True).encode()
        cls.ok_json = b"HTTP/1.1 200 OK\r\ndate: %s\r\ncontent-type: %s\r\ncontent-length: " % (cls.date, JSON)


Clock.tick()


def response_bytes(status: int, content_type: bytes, body: bytes, *, close: bool, headers: Headers = (),
                   head_only: bool = False) -> bytes:
    """The response; to a HEAD request (`head_only`) the same head, with the length GET's body would have,
    and no body (RFC 9110 9.3.2): a body there would be read as the start of the next response."""
    if status == 200 and content_type == JSON and not headers:  # an admission answer: the head made each second
        return b"".join((Clock.ok_json, b"%d" % len(body), CLOSE if close else KEEP, b"" if head_only else body))
    extra = b"".join(b"%s: %s\r\n" % pair for pair in headers)
    head = b"HTTP/1.1 %d %s\r\ndate: %s\r\ncontent-type: %s\r\n%scontent-length: %d" % (
        status, REASONS.get(status, b"Error"), Clock.date, content_type, extra, len(body))
    return b"".join((head, CLOSE if close else KEEP, b"" if head_only else body))
