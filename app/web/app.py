"""What the server answers besides reviews: health, readiness and metrics, for both listeners."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.web.metrics import ServerMetrics

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


def plain_routes(health: Health, metrics: ServerMetrics) -> dict[bytes, Callable[[], Plain]]:
    def healthz() -> Plain:
        stalled = health.stalled_for()
        if stalled > health.stall_seconds:
            return 503, JSON, orjson.dumps({"status": "event loop stalled", "seconds": round(stalled, 1)})
        return 200, JSON, b'{"status":"ok"}'

    def readyz() -> Plain:
        body = {"ready": health.ready, "certificate_loaded": health.certificate_loaded,
                "shutting_down": health.shutting_down, "ca_bundle_trusts_serving_cert": health.serving_trusted()}
        return (200 if health.ready else 503), JSON, orjson.dumps(body)

    def metrics_endpoint() -> Plain:
        return 200, PROMETHEUS, metrics.render()

    return {b"/healthz": healthz, b"/readyz": readyz, b"/metrics": metrics_endpoint}
