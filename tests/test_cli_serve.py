"""`tls-injector serve` as a real process: starts anywhere, answers over TLS, drains on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.rules_matrix import workload
from tests.support.reviews import fixture, review
from tls_injector.cli import main

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serve_process(tmp_path: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[str], str, Path]]:
    port = free_port()
    argv = [sys.executable, "-m", "tls_injector", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--self-signed-dir", str(tmp_path / "ss"), *extra]
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        yield process, f"https://localhost:{port}", tmp_path / "ss" / "ca.crt"
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)  # also closes the pipes


def wait_ready(url: str, ca_file: Path, timeout: float = 20) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if ca_file.exists() and httpx.get(url + "/readyz", verify=ssl.create_default_context(
                    cafile=str(ca_file))).status_code == 200:
                return time.monotonic() - started
        except (httpx.HTTPError, ssl.SSLError, OSError):  # not listening yet, or the CA file half-written
            pass
        time.sleep(0.05)
    raise TimeoutError("server not ready")


def test_serve_with_no_certificate_starts_prints_the_ca_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    with serve_process(tmp_path) as (process, url, ca_file):
        wait_ready(url, ca_file)
        context = ssl.create_default_context(cafile=str(ca_file))
        with httpx.Client(base_url=url, verify=context) as kept_alive:  # left open across the shutdown
            body = fixture("synthetic/pod-create-from-replicaset.json")
            assert kept_alive.post("/mutate", json=body).json()["response"]["uid"] == body["request"]["uid"]
            # serve mounts the enabled-namespace rules on their own path: an opt-out there is refused.
            old, new = workload("Deployment", (None, None)), workload("Deployment", ("false", None))
            opt_out = review(operation="UPDATE", obj=new, old=old, kind=("apps", "v1", "Deployment"), namespace="shop")
            assert kept_alive.post("/validate/enabled-namespace", json=opt_out).json()["response"]["allowed"] is False
            assert kept_alive.post("/validate", json=opt_out).json()["response"]["allowed"] is True
            process.send_signal(signal.SIGTERM)
            stdout, stderr = process.communicate(timeout=15)
    assert process.returncode == 0, stderr
    assert f"self-signed CA written to {ca_file}" in stdout
    assert "Traceback" not in stderr
    log_lines = [line for line in stderr.splitlines() if '"msg":"admission"' in line and '"kind":"Pod"' in line]
    assert len(log_lines) == 1
    for field in ('"uid":', '"kind":"Pod"', '"operation":"CREATE"', '"verdict":', '"latency_ms":',
                  f'"namespace":"{body["request"]["namespace"]}"'):
        assert field in log_lines[0]


def test_an_in_flight_request_completes_during_shutdown(tmp_path: Path) -> None:
    with serve_process(tmp_path) as (process, url, ca_file):
        wait_ready(url, ca_file)
        host, port = "localhost", int(url.rsplit(":", 1)[1])
        review = fixture("synthetic/pod-create-from-replicaset.json")
        payload = httpx.Request("POST", url + "/mutate", json=review)
        body = payload.read()
        head = (f"POST /mutate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        context = ssl.create_default_context(cafile=str(ca_file))
        with socket.create_connection((host, port)) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(head + body[:10])  # the request is in flight: headers and part of the body sent
            time.sleep(0.3)
            process.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            tls.sendall(body[10:])
            answer = b""
            while chunk := tls.recv(65536):  # the server answers, then closes: no keep-alive while draining
                answer += chunk
            answer_text = answer.decode()
        process.communicate(timeout=15)
    assert answer_text.startswith("HTTP/1.1 200"), answer_text[:200]
    assert "connection: close" in answer_text.lower()
    assert review["request"]["uid"] in answer_text
    assert process.returncode == 0


def test_a_cert_without_its_key_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--tls-cert-file", "/nonexistent.crt"])
    assert exit_info.value.code == 2
    assert "go together" in capsys.readouterr().err


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert re.search(r"usage: tls-injector", capsys.readouterr().err)
