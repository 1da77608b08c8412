"""What a process answers besides reviews: health, readiness and metrics, on every port that serves them."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import orjson

from tls_injector.web.metrics import ServerMetrics

BackgroundTask = Callable[[], Coroutine[Any, Any, None]]
# (status, content type, body)
Plain = tuple[int, bytes, bytes]

JSON = b"application/json"
PROMETHEUS = b"text/plain; version=0.0.4; charset=utf-8"
# The event loop beats at least once a second (the connection sweeper); a loop that has not for this long
# is wedged, and /healthz on the probe listener says so. Handling the largest review (7 MiB) takes well
# under a second, so 5 s is never a busy loop, and a kubelet liveness probe (10 s period, 3 failures)
# restarts a wedged pod within about 30 s.
STALL_SECONDS = 5.0
# Connections the kernel queues on the operator port before they are accepted (capped at
# net.core.somaxconn): its clients are a kubelet and a Prometheus or two (tls_injector.web.operator.PortLimits).
OPERATOR_BACKLOG = 128


def listen(host: str, port: int) -> socket.socket:
    """The operator port's socket, bound now (OSError when the port cannot be had). Kept apart from
    tls_injector.web.operator so a process can claim the port before it pays for importing FastAPI."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=OPERATOR_BACKLOG)


def _unknown() -> bool | None:
    return None


@dataclass
class Health:
    """What /readyz reports: ready once a certificate is loaded and the server is not shutting down, and,
    when the reconciler runs in this process, unless its last pass found that the live caBundle does not
    trust the certificate served here (None: not known, which does not hold readiness back)."""

    certificate_loaded: bool = False
    shutting_down: bool = False
    serving_trusted: Callable[[], bool | None] = _unknown
    heartbeat: float = field(default_factory=time.monotonic)
    stall_seconds: float = STALL_SECONDS

    @property
    def ready(self) -> bool:
        return self.certificate_loaded and not self.shutting_down and self.serving_trusted() is not False

    def stalled_for(self) -> float:
        return max(0.0, time.monotonic() - self.heartbeat)


@dataclass(frozen=True)
class Probes:
    """What /healthz, /readyz and /metrics report, from whichever process serves them (a webhook, the
    supervisor of its workers, the reconciler): each check answers (ok, details for a person)."""

    healthy: Callable[[], tuple[bool, dict[str, Any]]]
    ready: Callable[[], tuple[bool, dict[str, Any]]]
    metrics: Callable[[], bytes]


def plain_routes(probes: Probes) -> dict[bytes, Callable[[], Plain]]:
    """The three routes, one definition for every port that serves them: 200 or 503 with a JSON body."""

    def check(answer: Callable[[], tuple[bool, dict[str, Any]]]) -> Callable[[], Plain]:
        def route() -> Plain:
            ok, body = answer()
            return (200 if ok else 503), JSON, orjson.dumps(body)

        return route

    def metrics_endpoint() -> Plain:
        return 200, PROMETHEUS, probes.metrics()

    return {b"/healthz": check(probes.healthy), b"/readyz": check(probes.ready), b"/metrics": metrics_endpoint}


def webhook_probes(health: Health, metrics: ServerMetrics) -> Probes:
    """A single webhook process: healthy while its event loop beats, ready as `Health` says."""

    def healthy() -> tuple[bool, dict[str, Any]]:
        stalled = health.stalled_for()
        if stalled > health.stall_seconds:
            return False, {"status": "event loop stalled", "seconds": round(stalled, 1)}
        return True, {"status": "ok"}

    def ready() -> tuple[bool, dict[str, Any]]:
        return health.ready, {"ready": health.ready, "certificate_loaded": health.certificate_loaded,
                              "shutting_down": health.shutting_down,
                              "ca_bundle_trusts_serving_cert": health.serving_trusted()}

    return Probes(healthy=healthy, ready=ready, metrics=metrics.render)
