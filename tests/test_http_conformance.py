"""The admission port's HTTP/1.1 against RFC 9110/9112, as a table: each case's bytes and the answer
expected, run against our server and, when TLS_INJECTOR_GO_REFERENCE names the Go reference webhook's
binary (net/http, the yardstick the benchmarks use), against it too.

Both servers answer every case alike except ALPN: offered only h2, Go refuses the handshake with
no_application_protocol (RFC 7301 3.2); Python's ssl module gives the server no say there (it goes on
without a protocol), so ours completes the handshake, selects nothing and answers HTTP/1.1.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from tests.support.process import free_port
from tests.support.reviews import fixture
from tests.support.server import running_server
from tls_injector.web.selfsigned import write_self_signed

GO_REFERENCE = os.environ.get("TLS_INJECTOR_GO_REFERENCE", "")
HOST = b"Host: localhost\r\n"


@dataclass(frozen=True)
class Target:
    name: str
    port: int
    ca_file: Path

    def context(self, alpn: list[str] | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if alpn:
            context.set_alpn_protocols(alpn)
        return context

    def connect(self, alpn: list[str] | None = None) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        return self.context(alpn).wrap_socket(raw, server_hostname="localhost")


def _targets() -> list[str]:
    return ["ours", "go"] if GO_REFERENCE else ["ours"]


@pytest.fixture(scope="module", params=_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    directory = tmp_path_factory.mktemp(request.param)
    if request.param == "ours":
        with running_server(directory) as server:
            yield Target("ours", server.port, server.ca_file)
        return
    files = write_self_signed(directory / "certs", now=datetime.now(UTC))
    port = free_port()
    process = subprocess.Popen([GO_REFERENCE, f"127.0.0.1:{port}", str(files.cert_file), str(files.key_file)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port)
        yield Target("go", port, files.ca_file)
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the reference did not start")


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


def read_answers(sock: ssl.SSLSocket, heads: list[bool], *, within: float = 3.0) -> tuple[list[Answer], bytes]:
    """One answer per entry of `heads` (True: to a HEAD, so no body whatever its content-length), then
    whatever else arrives within a short while (an extra answer would be a bug)."""
    data, answers = b"", []
    deadline = time.monotonic() + within
    sock.settimeout(0.2)
    while len(answers) < len(heads) and time.monotonic() < deadline:
        parsed = _one(data, heads[len(answers)])
        if parsed is not None:
            answer, data = parsed
            answers.append(answer)
            continue
        chunk = _recv(sock)
        data += chunk
        if chunk == b"<closed>" and _one(data, heads[len(answers)]) is None:
            break
    extra_until = time.monotonic() + 0.4
    while time.monotonic() < extra_until and not data.endswith(b"<closed>"):
        chunk = _recv(sock)
        if chunk == b"<closed>":
            break
        data += chunk
    return answers, data


def _recv(sock: ssl.SSLSocket) -> bytes:
    try:
        chunk = sock.recv(65536)
    except TimeoutError:
        return b""
    except (ssl.SSLError, ConnectionError):
        return b"<closed>"
    return chunk or b"<closed>"


def _one(data: bytes, head_only: bool) -> tuple[Answer, bytes] | None:
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = data[:end].split(b"\r\n")
    status = int(lines[0].split(b" ")[1])
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
    if b"content-length" not in fields and not head_only and status >= 200:  # delimited by the close
        closed = data.endswith(b"<closed>")
        return (Answer(status, data[end + 4:-len(b"<closed>")]), b"<closed>") if closed else None
    length = 0 if head_only or status in (100, 101, 204, 304) else int(fields[b"content-length"])
    if len(data) < end + 4 + length:
        return None
    return Answer(status, data[end + 4:end + 4 + length]), data[end + 4 + length:]


@dataclass(frozen=True)
class Case:
    """A request (or several) on one connection, the answers RFC 9110/9112 ask for (status; `head` for
    an answer to HEAD), and nothing more on the wire."""

    name: str
    sent: bytes
    statuses: tuple[int, ...]
    heads: tuple[bool, ...] = ()
    why: str = ""
    closes: bool = False  # the server closes the connection after its answers


# A pod's review as the apiserver sends it: both servers answer it 200 (the Go reference with its patch).
REVIEW = orjson.dumps(fixture("synthetic/pod-create-from-replicaset.json"))


def post(extra: bytes = b"", body: bytes = REVIEW) -> bytes:
    return (b"POST /mutate HTTP/1.1\r\n" + HOST + b"Content-Type: application/json\r\nContent-Length: %d\r\n"
            % len(body) + extra + b"\r\n" + body)


def get(path: bytes = b"/healthz", extra: bytes = b"", version: bytes = b"HTTP/1.1", host: bytes = HOST) -> bytes:
    return b"GET " + path + b" " + version + b"\r\n" + host + extra + b"\r\n"


CASES = [
    Case("HEAD then GET on one connection", b"HEAD /healthz HTTP/1.1\r\n" + HOST + b"\r\n" + get(), (200, 200),
         (True, False), "RFC 9110 9.3.2: HEAD is GET without the body; a body would be read as the next answer"),
    Case("Upgrade: websocket, then another request", get(extra=b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                                                        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                                        b"Sec-WebSocket-Version: 13\r\n") + get(),
         (200, 200), (), "RFC 9110 7.8: a server may ignore Upgrade; the connection goes on, no extra answer"),
    Case("Upgrade: h2c, then another request", get(extra=b"Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                                                   b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n") + get(),
         (200, 200), (), "RFC 9110 7.8, as above"),
    Case("POST with Upgrade: websocket, then another review", post(b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                                                                    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                                                    b"Sec-WebSocket-Version: 13\r\n") + post(),
         (200, 200), (), "RFC 9110 7.8: the Upgrade is ignored and the request, body and all, answered as usual"),
    Case("POST with Upgrade: h2c, then another review", post(b"Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                                                             b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n") + post(),
         (200, 200), (), "RFC 9110 7.8, as above"),
    Case("POST with Upgrade and a chunked body, then another review",
         b"POST /mutate HTTP/1.1\r\n" + HOST + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
         b"Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n" + b"%x\r\n" % len(REVIEW) + REVIEW + b"\r\n0\r\n\r\n"
         + post(), (200, 200), (), "RFC 9110 7.8, as above, the body framed by chunks"),
    Case("a request that cannot be parsed, then a review", b"GARBAGE\r\n\r\n" + post(), (400,), (),
         "RFC 9112 2.2: nothing after a message the server cannot parse can be framed: one answer, then close",
         closes=True),
    Case("Expect: 100-continue to an unknown path", b"POST /nowhere HTTP/1.1\r\n" + HOST +
         b"Content-Type: application/json\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n", (404,), (),
         "RFC 9110 10.1.1: answered at once (the final status: the body would not be read)"),
    Case("Expect: 100-continue to /mutate", b"POST /mutate HTTP/1.1\r\n" + HOST +
         b"Content-Type: application/json\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n", (100,), (),
         "RFC 9110 10.1.1: 100 Continue at once, then the body is awaited"),
    Case("no Host", get(host=b""), (400,), (), "RFC 9112 3.2: a request without Host is a 400"),
    Case("two Host fields", get(host=HOST + HOST), (400,), (), "RFC 9112 3.2: more than one Host is a 400"),
    Case("HTTP/1.0 without Host", get(version=b"HTTP/1.0", host=b""), (200,), (), "Host is HTTP/1.1's rule"),
    Case("absolute-form target", get(path=b"https://localhost/healthz"), (200,), (),
         "RFC 9112 3.2.2: a server must accept the absolute form"),
    Case("Transfer-Encoding: gzip", b"POST /mutate HTTP/1.1\r\n" + HOST +
         b"Content-Type: application/json\r\nTransfer-Encoding: gzip\r\n\r\n", (501,), (),
         "RFC 9112 6.1: a transfer coding the server does not understand is a 501"),
    Case("Transfer-Encoding: gzip, chunked", b"POST /mutate HTTP/1.1\r\n" + HOST +
         b"Content-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", (501,), (),
         "RFC 9112 6.1, as above: only chunked is served"),
    Case("HTTP/2.0 in the request line", get(version=b"HTTP/2.0"), (505,), (),
         "RFC 9110 15.6.6: a major version the server does not speak"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_request_gets_the_answer_the_rfcs_ask_for_and_nothing_more(target: Target, case: Case) -> None:
    with target.connect() as sock:
        sock.sendall(case.sent)
        heads = list(case.heads) or [False] * len(case.statuses)
        answers, rest = read_answers(sock, heads)
        closed = case.closes and (rest.endswith(b"<closed>") or _closed_within(sock, 3.0))
    assert tuple(a.status for a in answers) == case.statuses, (target.name, case.why, answers, rest[:200])
    assert rest in (b"", b"<closed>"), (target.name, case.why, rest[:200])  # no unasked-for answer
    for answer, head_only in zip(answers, heads, strict=True):
        if head_only:
            assert answer.body == b""
    if case.closes:  # within the linger after an early answer (1 s), where the client's input is drained
        assert closed, (target.name, case.why)


def test_an_upgrade_requests_body_arriving_after_its_head_is_read_whole_and_answered(target: Target) -> None:
    """The body of a POST carrying Upgrade comes in later reads (as a large review does): it is awaited
    as any body is, then the review is answered, and the connection goes on."""
    with target.connect() as sock:
        request = post(b"Upgrade: websocket\r\nConnection: Upgrade\r\n")
        head_end = request.index(b"\r\n\r\n") + 4
        for part in (request[:head_end], request[head_end:head_end + 100], request[head_end + 100:] + post()):
            sock.sendall(part)
            time.sleep(0.1)
        answers, rest = read_answers(sock, [False, False])
    assert [a.status for a in answers] == [200, 200], (target.name, answers, rest[:200])


def _closed_within(sock: ssl.SSLSocket, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        chunk = _recv(sock)
        if chunk == b"<closed>":
            return True
        assert not chunk, chunk[:200]  # nothing more may be answered
    return False


def test_alpn_offering_only_h2_never_gets_h2_from_a_server_without_it(target: Target) -> None:
    if target.name == "go":  # the fatal alert RFC 7301 asks for
        with pytest.raises(ssl.SSLError, match=r"(?i)no.application.protocol"):
            target.connect(alpn=["h2"])
        return
    with target.connect(alpn=["h2"]) as sock:  # ours: no protocol selected, and HTTP/1.1 is what is spoken
        assert target.name == "ours"
        assert sock.selected_alpn_protocol() is None
        sock.sendall(get())
        answers, _ = read_answers(sock, [False])
    assert [a.status for a in answers] == [200]


def test_a_client_initiated_renegotiation_is_refused(target: Target) -> None:
    """TLS 1.2 renegotiation, asked for by the client (`R` in s_client): both servers refuse it with an
    alert (OpenSSL: no_renegotiation; Go: unexpected_message) and serve nothing after."""
    script = b"R\n" + get()
    result = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{target.port}", "-tls1_2",
                             "-servername", "localhost", "-CAfile", str(target.ca_file)],
                            input=script, capture_output=True, timeout=30, check=False)
    output = (result.stdout + result.stderr).decode(errors="replace").lower()
    assert "renegotiation" in output or "unexpected message" in output, output[-500:]
    assert "error" in output, output[-500:]
    assert "http/1.1 200" not in output
