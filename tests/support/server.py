"""Run the real server (uvloop + TLS) in a thread on an ephemeral loopback port."""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tls_injector.admission import AdmissionResponse, Envelope, Route, allowed, envelope_route
from tls_injector.settings import Limits, ServeSettings
from tls_injector.web.metrics import ServerMetrics
from tls_injector.web.server import WebhookServer, build_server


def _allow(request: Envelope) -> AdmissionResponse:
    return allowed(request.uid)


allow_all = envelope_route(_allow)


@dataclass
class RunningServer:
    url: str
    ca_file: Path
    server: WebhookServer
    metrics: ServerMetrics
    thread: threading.Thread  # the one that runs the server's event loop

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def probe_url(self) -> str:
        assert self.server.probes is not None, "started without a probe port"
        return f"http://127.0.0.1:{self.server.probes.port}"

    def client_context(self) -> ssl.SSLContext:
        """What a careful client (the apiserver) does: verify the chain and the host name."""
        return ssl.create_default_context(cafile=str(self.ca_file))

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=self.client_context(), timeout=10, **kwargs)  # type: ignore[arg-type]


@contextmanager
def running_server(
    tmp_path: Path,
    *,
    mutate: Route[Any] = allow_all,
    validate: Route[Any] = allow_all,
    validate_enabled_namespace: Route[Any] | None = None,
    cert_file: Path | None = None,
    key_file: Path | None = None,
    ca_file: Path | None = None,
    reload_interval: float = 0.05,
    drain_seconds: int = 5,
    limits: Limits | None = None,
    probes: bool = False,
) -> Iterator[RunningServer]:
    """Serve until the block ends. With no cert files the server makes its own self-signed CA."""
    settings = ServeSettings(
        host="127.0.0.1",
        port=0,
        tls_cert_file=cert_file,
        tls_private_key_file=key_file,
        self_signed_dir=tmp_path / "self-signed",
        reload_interval_seconds=reload_interval,
        drain_seconds=drain_seconds,
        probe_port=0 if probes else None,
    )
    metrics = ServerMetrics()
    server = build_server(settings, mutate=mutate, validate=validate,
                          validate_enabled_namespace=validate_enabled_namespace, metrics=metrics, limits=limits)
    thread = threading.Thread(target=server.run, name="webhook", daemon=True)
    thread.start()
    try:
        _wait_for_start(server, thread)
        ca = ca_file or settings.self_signed_dir / "ca.crt"  # type: ignore[operator]
        yield RunningServer(f"https://localhost:{server.port}", ca, server, metrics, thread)
    finally:
        server.stop()
        thread.join(timeout=15)


def _wait_for_start(server: WebhookServer, thread: threading.Thread) -> None:
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
