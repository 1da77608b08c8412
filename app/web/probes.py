"""The probe listener: /healthz, /readyz and /metrics over plain HTTP on a port of its own.

It runs in its own thread with its own sockets, so neither a wedged event loop nor a full admission
port (connection cap reached, slow clients) keeps the kubelet's probes or Prometheus from an answer;
/healthz here reports the event loop's heartbeat, which the admission port cannot do about itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from app.web.app import Plain

log = logging.getLogger("tls_injector.probes")

# A probe is one small request; a client that takes longer than this to send it is dropped.
PROBE_SOCKET_TIMEOUT_SECONDS = 5.0


class ProbeListener:
    def __init__(self, host: str, port: int, routes: dict[bytes, Callable[[], Plain]]) -> None:
        handler = _handler_class(routes)
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2},
                                       name="probes", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler_class(routes: dict[bytes, Callable[[], Plain]]) -> type[BaseHTTPRequestHandler]:
    class ProbeHandler(BaseHTTPRequestHandler):
        timeout = PROBE_SOCKET_TIMEOUT_SECONDS
        protocol_version = "HTTP/1.1"
        server_version = "tls-injector"
        sys_version = ""

        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0].encode())
            status, content_type, body = route() if route else (404, b"application/json", b'{"error":"not found"}')
            self.send_response(status)
            self.send_header("Content-Type", content_type.decode())
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # probes every few seconds would drown the log; failures show in the kubelet's events

    return ProbeHandler
