"""The standalone reconciler's plain-HTTP port: /metrics for Prometheus, /healthz for the kubelet.

A small WSGI app on the standard library's server, one thread per connection: the port serves a
scraper and a kubelet, a few requests a minute. Nothing secret is served (metric names, counts and
expiry times), so it is plain HTTP; the NetworkPolicy admits only this port to the reconciler pods.
"""

from __future__ import annotations

import logging
import socketserver
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

log = logging.getLogger("tls_injector.reconcile")
StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
# A client that opens a connection and sends nothing (or trickles) holds one thread for at most this
# long; the kubelet's probe timeout is 2 s and a scrape of this registry takes milliseconds.
CLIENT_TIMEOUT_SECONDS = 10.0


def probe_app(registry: CollectorRegistry, healthy: Callable[[], bool]) -> WsgiApp:
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            ok = healthy()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"ok\n" if ok else b"reconcile loop not running\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics or /healthz\n"]

    return app


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a hung client never keeps the process from exiting


class _QuietHandler(WSGIRequestHandler):
    timeout = CLIENT_TIMEOUT_SECONDS

    def log_message(self, format: str, *args: Any) -> None:
        """No access log: a probe every 10 s would drown the reconciler's own lines."""


class ProbeServer:
    """Started on construction, in a daemon thread; `close()` stops it and frees the port."""

    def __init__(self, host: str, port: int, app: WsgiApp) -> None:
        self._server = make_server(host, port, app, server_class=_Server, handler_class=_QuietHandler)
        self.port: int = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="probe-http", daemon=True)
        self._thread.start()
        log.info("metrics and health on plain HTTP", extra={"address": f"{host}:{self.port}"})

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
