"""Signals against the real `python -m tls_injector serve` process, and many kept-alive connections at once."""

from __future__ import annotations

import json
import shutil
import signal
import ssl
import time
from pathlib import Path

import httpx
import pytest

from tests.support.attack import ProbeWatch, mutate_once, small_server, tls_connect
from tests.support.certs import write_serving_pair
from tests.support.process import post_head, serve_process
from tests.support.reviews import fixture
from tls_injector.settings import Limits

MANY = 2000


# 2,000 TLS handshakes by a client in this process: under 30 s on a quiet machine, over 60 s (the suite's
# default timeout) under three CPU burners. The timeout only catches a hang; it is not a speed bound.
@pytest.mark.timeout(300)
def test_two_thousand_kept_alive_connections_are_all_served_and_kept(tmp_path: Path) -> None:
    # All from one address here, so that address may hold them all (one source's cap is tested in test_transport).
    limits = Limits(max_connections=MANY + 100, max_connections_per_source=MANY + 100)
    with small_server(tmp_path, limits) as server, ProbeWatch(server) as probes:
        held: list[ssl.SSLSocket] = []
        try:
            for _ in range(MANY):
                held.append(tls_connect(server))
                assert mutate_once(held[-1]) == 200
            assert (server.metrics.registry.get_sample_value("tls_injector_http_connections_open") or 0) >= MANY
            for sock in held[:: MANY // 20]:  # the first ones are still alive and reusable
                assert mutate_once(sock) == 200
        finally:
            for sock in held:
                sock.close()
    probes.assert_healthy()


def test_sighup_serves_the_new_certificate_at_once_and_keeps_running(tmp_path: Path) -> None:
    first = write_serving_pair(tmp_path / "first", common_name="first CA")
    second = write_serving_pair(tmp_path / "second", common_name="second CA")
    live = write_serving_pair(tmp_path / "live")
    for name in ("tls.crt", "tls.key", "ca.crt"):
        shutil.copy(tmp_path / "first" / name, tmp_path / "live" / name)
    with serve_process(tmp_path, live, "--log-level", "warning", "--reload-interval", "3600") as server:
        kept = server.connect()
        assert mutate_once(kept) == 200
        for name in ("tls.crt", "tls.key"):
            shutil.copy(tmp_path / "second" / name, tmp_path / "live" / name)
        server.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        served = None
        while time.monotonic() < deadline and served != second.leaf.cert_pem:
            try:
                with httpx.Client(verify=ssl.create_default_context(cafile=str(second.ca_file))) as client:
                    served = second.leaf.cert_pem if client.get(f"{server.url}/healthz").status_code == 200 else None
            except httpx.ConnectError:
                time.sleep(0.05)
        assert served == second.leaf.cert_pem, "SIGHUP did not switch new connections to the new pair"
        assert server.process.poll() is None, "SIGHUP stopped the server"
        assert mutate_once(kept) == 200  # a kept connection keeps working
        kept.close()
    assert first.ca.cert_pem != second.ca.cert_pem


def test_sigterm_drain_is_bounded_by_drain_seconds_even_with_a_stuck_request(tmp_path: Path) -> None:
    files = write_serving_pair(tmp_path / "pair")
    body = json.dumps(fixture("synthetic/pod-create-from-replicaset.json")).encode()
    with serve_process(tmp_path, files, "--log-level", "warning", "--drain-seconds", "1",
                       "--body-timeout", "30") as server, server.connect() as stuck:
        stuck.sendall(post_head("/mutate", len(body)) + body[:100])  # and never the rest
        time.sleep(0.2)
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=10) == 0
        # The stuck request would hold the drain for its 30 s body timeout; the 10 s over --drain-seconds
        # is the process's exit on a loaded machine, and still far from those 30 s.
        assert time.monotonic() - started < 1 + 10.0, "the drain outlived --drain-seconds"
    assert "Traceback" not in server.stderr()
