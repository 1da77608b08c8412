"""One test per way a client can try to hurt the HTTPS port: each must be bounded by a limit, answered
with a status where one can still be read, and must not slow anyone else down. The server's limits are
set small (tests.support.attack.SMALL); /healthz on the probe listener is watched throughout."""

from __future__ import annotations

import dataclasses
import itertools
import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from tests.support import attack
from tests.support.attack import SMALL, ProbeWatch, closed, closed_within, mutate_once, small_server, tls_connect
from tests.support.process import post_head, read_response
from tests.support.reviews import review
from tests.support.server import RunningServer, running_server
from tls_injector.cli import build_handlers
from tls_injector.settings import ServeSettings

# For the connection-cap tests: deadlines far from the few seconds it takes to open the flood, so only
# the cap closes connections.
PATIENT = dataclasses.replace(SMALL, handshake_seconds=30, head_seconds=30, body_seconds=30, idle_seconds=60)


def test_a_huge_header_is_431_within_milliseconds_and_others_are_not_held_up(tmp_path: Path) -> None:
    with small_server(tmp_path) as server, ProbeWatch(server) as probes, tls_connect(server) as other:
        assert mutate_once(other) == 200
        with tls_connect(server) as attacker:
            started = time.monotonic()
            attacker.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (SMALL.max_head_bytes * 4))
            status, _ = read_response(attacker)
            answered = time.monotonic() - started
            assert status == 431
            assert answered < 1.0, f"431 after {answered:.2f} s"
            assert closed_within(attacker, 2) is not None
        assert mutate_once(other) == 200
    probes.assert_healthy()


def test_too_many_header_fields_is_431(tmp_path: Path) -> None:
    with small_server(tmp_path) as server, tls_connect(server) as attacker:
        fields = b"".join(b"X-%d: y\r\n" % i for i in range(SMALL.max_headers + 1))
        attacker.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n")
        assert read_response(attacker)[0] == 431


def test_slowloris_on_the_head_is_closed_at_the_head_timeout(tmp_path: Path) -> None:
    with small_server(tmp_path) as server, ProbeWatch(server) as probes:
        connected = time.monotonic()  # the head's deadline runs from its first byte, sent at once
        with tls_connect(server) as attacker:
            trickled_head_closes(server, attacker, connected)
    probes.assert_healthy()


def trickled_head_closes(server: RunningServer, attacker: ssl.SSLSocket, connected: float) -> None:
    """One header byte every 50 ms, so the head never ends; the close is watched between the bytes. One
    thread does both: a TLS socket written and read from two threads at once can fail in OpenSSL, which
    looked like an early close."""
    attacker.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\n")
    attacker.settimeout(0.05)
    closed_at = None
    while closed_at is None and time.monotonic() - connected < 5:
        try:
            if not attacker.recv(65536):  # EOF; what comes before it (the 408) is read and dropped
                closed_at = time.monotonic()
        except TimeoutError:
            try:
                attacker.sendall(b"X")
            except OSError:
                closed_at = time.monotonic()
        except (ssl.SSLError, ConnectionError):
            closed_at = time.monotonic()
    assert closed_at is not None, "a trickled head kept its connection"
    assert SMALL.head_seconds * 0.9 <= closed_at - connected < SMALL.head_seconds + 2.0
    with tls_connect(server) as other:
        assert mutate_once(other) == 200


def test_slowloris_on_the_body_is_closed_at_the_body_timeout(tmp_path: Path) -> None:
    with small_server(tmp_path) as server, ProbeWatch(server) as probes, tls_connect(server) as attacker:
        attacker.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100000\r\n\r\n{")
        started = time.monotonic()
        for _ in range(5):
            attacker.sendall(b" ")
            time.sleep(0.05)
        status, _ = read_response(attacker)
        assert status == 408
        assert closed_within(attacker, 2) is not None
        assert SMALL.body_seconds * 0.9 <= time.monotonic() - started < SMALL.body_seconds + 2.0
    probes.assert_healthy()


def test_a_connection_that_never_completes_its_handshake_is_closed_at_the_handshake_timeout(tmp_path: Path) -> None:
    with small_server(tmp_path) as server, ProbeWatch(server) as probes:
        with socket.create_connection(("127.0.0.1", server.port)) as raw:
            raw.sendall(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
            elapsed = closed_within(raw, 5)
        assert elapsed is not None, "a stalled handshake kept its connection"
        assert SMALL.handshake_seconds * 0.9 <= elapsed < SMALL.handshake_seconds + 2.0
    probes.assert_healthy()


def test_a_connection_that_says_nothing_after_its_handshake_is_idle_and_closed_at_the_idle_timeout(
        tmp_path: Path) -> None:
    """Go's http.Transport keeps spare connections it dialled in its idle pool unused: closing one at the
    head timeout raced with the apiserver's next review on it. The head timeout starts at the first byte."""
    with small_server(tmp_path) as server, tls_connect(server) as silent, tls_connect(server) as slow:
        slow.sendall(b"POST /mutate HTTP/1.1\r\n")  # a head begun and never finished
        slow_closed = closed_within(slow, 5)
        elapsed = closed_within(silent, 5)
        assert slow_closed is not None
        assert elapsed is not None
        assert slow_closed < SMALL.head_seconds + 1.0
        assert SMALL.idle_seconds * 0.9 <= elapsed + slow_closed < SMALL.idle_seconds + 2.0


def test_an_idle_kept_alive_connection_is_closed_at_the_idle_timeout(tmp_path: Path) -> None:
    with small_server(tmp_path) as server, tls_connect(server) as idle:
        assert mutate_once(idle) == 200
        elapsed = closed_within(idle, 5)
        assert elapsed is not None
        assert SMALL.idle_seconds * 0.9 <= elapsed < SMALL.idle_seconds + 2.0


def wait_until(condition: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the server did not get there in time"
        time.sleep(0.02)


def open_from(server: RunningServer, source: str, count: int, *, served: bool = False) -> list[ssl.SSLSocket]:
    """`count` connections from `source`; with `served`, each completes a request and stays kept alive."""
    sockets = [tls_connect(server, source=source) for _ in range(count)]
    for sock in sockets if served else ():
        assert mutate_once(sock) == 200
    return sockets


def close_all(*groups: list[ssl.SSLSocket]) -> None:
    for group in groups:
        for sock in group:
            sock.close()


@pytest.mark.parametrize("per_source", [PATIENT.max_connections_per_source, PATIENT.max_connections],
                         ids=["per-source cap", "per-source cap as large as the table"])
def test_a_flood_from_one_source_cannot_evict_a_kept_alive_connection_that_completed_a_request(
        tmp_path: Path, per_source: int) -> None:
    limits = dataclasses.replace(PATIENT, max_connections_per_source=per_source)
    with small_server(tmp_path, limits) as server, ProbeWatch(server) as probes, tls_connect(server) as apiserver:
        assert mutate_once(apiserver) == 200  # the apiserver's connection, kept alive after its review
        flood = open_from(server, "127.0.0.2", limits.max_connections * 2)
        try:
            held = min(per_source, limits.max_connections - 1)
            wait_until(lambda: len(server.server.connections.open) == 1 + held
                       and closed(server, "over_capacity") + closed(server, "source_over_capacity")
                       >= len(flood) - held)
            assert closed(server, "evicted_idle") == 0
            assert mutate_once(apiserver) == 200, "the kept-alive connection was closed for the flood"
        finally:
            close_all(flood)
    probes.assert_healthy()


def test_one_source_holds_at_most_its_cap_and_another_source_still_gets_in(tmp_path: Path) -> None:
    cap = PATIENT.max_connections_per_source
    with small_server(tmp_path, PATIENT) as server, ProbeWatch(server) as probes:
        flood = open_from(server, "127.0.0.2", cap + 8)
        try:
            wait_until(lambda: closed(server, "source_over_capacity") >= 8)
            assert len(server.server.connections.by_source["127.0.0.2"]) == cap
            for extra in flood[cap:]:
                assert closed_within(extra, 2) is not None, "a connection over its source's cap was kept"
            for admitted in flood[:cap]:
                assert mutate_once(admitted) == 200
            with tls_connect(server, source="127.0.0.3") as other:
                assert mutate_once(other) == 200
            assert closed(server, "source_over_capacity") == 8
        finally:
            close_all(flood)
    probes.assert_healthy()


def test_a_full_table_makes_room_only_from_the_heaviest_sources_connections_that_sent_no_request(
        tmp_path: Path) -> None:
    cap = PATIENT.max_connections_per_source
    with small_server(tmp_path, PATIENT) as server, ProbeWatch(server) as probes:
        silent = open_from(server, "127.0.0.2", cap)  # each awaits its first head
        trickling = open_from(server, "127.0.0.3", cap)
        for sock in trickling:
            sock.sendall(b"POST /mutate HTTP/1.1\r\n")  # a first head that never ends
        kept_alive = open_from(server, "127.0.0.4", PATIENT.max_connections - 2 * cap, served=True)
        try:
            wait_until(lambda: len(server.server.connections.open) == PATIENT.max_connections)
            with tls_connect(server, source="127.0.0.5") as newcomer:
                assert mutate_once(newcomer) == 200
            assert closed(server, "evicted_unproven") == 1
            assert closed_within(silent[0], 2) is not None, "the oldest silent connection of the heaviest source"
            for sock in kept_alive:
                assert mutate_once(sock) == 200
        finally:
            close_all(silent, trickling, kept_alive)
    probes.assert_healthy()


def test_a_table_full_of_connections_that_completed_requests_closes_the_newcomer_instead(tmp_path: Path) -> None:
    cap = PATIENT.max_connections_per_source
    with small_server(tmp_path, PATIENT) as server, ProbeWatch(server) as probes:
        kept_alive = [*open_from(server, "127.0.0.2", cap, served=True),
                      *open_from(server, "127.0.0.3", cap, served=True),
                      *open_from(server, "127.0.0.4", PATIENT.max_connections - 2 * cap, served=True)]
        try:
            with tls_connect(server, source="127.0.0.5") as extra:
                assert closed_within(extra, 2) is not None, "a connection over the cap was kept"
            assert closed(server, "over_capacity") == 1
            for sock in kept_alive:
                assert mutate_once(sock) == 200
        finally:
            close_all(kept_alive)
    probes.assert_healthy()


def test_a_big_body_in_flight_does_not_hold_up_other_reviews(tmp_path: Path) -> None:
    with small_server(tmp_path) as server, ProbeWatch(server) as probes, tls_connect(server) as big, \
            tls_connect(server) as other:
        size = SMALL.max_body_bytes - 1024
        big.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % size)
        loop_cpu = attack.thread_cpu_clock(server.thread)
        sent, marks = 0, [loop_cpu()]
        deadline = time.monotonic() + SMALL.body_seconds * 0.6
        while time.monotonic() < deadline:  # the big body arrives in slices, a review between each
            big.sendall(b" " * (size // 20))
            sent += size // 20
            assert mutate_once(other) == 200
            marks.append(loop_cpu())
        # The loop's CPU between two answers, which load does not stretch (a 0.5 s wall-clock bound did):
        # a slice of body and a review cost it under 3 ms; 0.1 s is over thirty times that.
        held = max(later - earlier for earlier, later in itertools.pairwise(marks))
        assert held < 0.1, f"the loop spent {held:.3f} s of CPU between two reviews beside a big body"
        big.sendall(b" " * (size - sent))  # all whitespace: a 400 after the whole body, not a hang
        assert read_response(big)[0] == 400
    probes.assert_healthy()


def test_a_body_over_the_cap_is_413_and_the_answer_survives_the_unread_rest(tmp_path: Path) -> None:
    with small_server(tmp_path) as server, tls_connect(server) as attacker:
        attacker.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 65536
        try:
            for _ in range(SMALL.max_body_bytes // len(chunk) + 4):
                attacker.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except (ssl.SSLError, ConnectionError):
            pass  # the server may close once its linger ends; the answer is already on the wire
        assert read_response(attacker)[0] == 413


def big_update(labels: int, *, width: int = 40) -> bytes:
    """A Deployment UPDATE whose pod template carries `labels` labels of `width` characters: megabytes
    to judge."""
    template = {"labels": {"tls-injector.io/inject": "true", **{f"k{i}": "v" * width for i in range(labels)}}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "d"},
                  "spec": {"template": {"metadata": template, "spec": {"containers": [{"name": "a"}]}}}}
    return orjson.dumps(review(operation="UPDATE", obj=deployment, old=deployment, kind=("apps", "v1", "Deployment")))


def test_a_multi_megabyte_review_holds_the_event_loop_little_longer_than_decoding_it(tmp_path: Path) -> None:
    """One connection's huge review must not hold the event loop for its whole judgement, starving the
    others. Measured on the loop thread's CPU clock, not the wall clock: a loaded machine stretches the
    wall time of everything, but not the CPU time the loop spends between two answers to the other
    connection. And compared with a figure measured here, on this machine: the time this process takes
    to decode the same body, which the server must do on its loop anyway."""
    _, validate = build_handlers(ServeSettings())
    # Deadlines far from anything a loaded machine reaches: only the review's handling is under test.
    limits = dataclasses.replace(SMALL, max_body_bytes=8 * 1024 * 1024, body_seconds=60, idle_seconds=120)
    body = big_update(200_000, width=1)  # 5.4 MB of short labels: many values for its bytes
    decode = min(attack.cpu_seconds(lambda: orjson.loads(body)) for _ in range(3))
    with running_server(tmp_path, validate=validate, limits=limits, probes=True) as server, \
            ProbeWatch(server) as probes, tls_connect(server, 60) as big, tls_connect(server, 60) as other:
        loop_cpu = attack.thread_cpu_clock(server.thread)
        assert mutate_once(other) == 200
        answer_box: list[tuple[int, bytes]] = []
        reader = threading.Thread(target=lambda: answer_box.append(read_response(big)), daemon=True)
        marks = [loop_cpu()]
        big.sendall(post_head("/validate", len(body)) + body)
        reader.start()
        while reader.is_alive() or len(marks) < 4:  # reviews until after the big one's answer
            assert mutate_once(other) == 200
            marks.append(loop_cpu())
        [(status, answer)] = answer_box
        verdict = orjson.loads(answer[answer.index(b"{"):])["response"]
        assert status == 200
        assert verdict["allowed"] is False
        assert "holds more than 20,000 values" in verdict["status"]["message"]
        # The longest the loop worked without answering the other connection. Bounded, it is reading the
        # body, decoding it and counting values up to the limit: 1.2-1.5 times this process's decode on a
        # quiet machine, up to 2.1 with three CPU burners on two cores (CPU time moves little under load,
        # but cache and GIL hand-overs do). Judged in full (the value limit disabled) it was 3.4-4.3 times.
        # 2.75 lies between the two.
        held = max(later - earlier for earlier, later in itertools.pairwise(marks))
        assert held < 2.75 * decode, f"the loop held other reviews for {held:.2f} s of CPU; decoding: {decode:.2f} s"
    probes.assert_healthy()
