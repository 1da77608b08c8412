"""Prometheus metrics of the server, in a registry of its own (no process-global state).

With `serve --workers N` every worker process counts into files of its own in one directory, and a
scrape of any worker (or of the supervisor's probe port) sums them: prometheus_client's multiprocess
mode. Counters and histograms add up over every worker that ever ran, so they never go backwards when
a worker is restarted; `connections_open` adds up the live workers; the certificate expiry is the
earliest any live worker serves.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector

# Set by the supervisor of `serve --workers N` in each worker's environment (prometheus_client's own name).
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"

OUTCOMES = ("allowed", "patched", "denied", "bad_request", "error")
ENDPOINTS = ("mutate", "validate", "validate/enabled-namespace")
# Admission calls cost well under a millisecond; the apiserver times out at 10 s by default.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 10.0)


class ServerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.shared_dir = os.environ.get(MULTIPROCESS_ENV) or None
        if self.shared_dir is not None:  # a worker: values live in the shared files (see the module docstring)
            values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
        self.requests = Counter(
            "tls_injector_admission_requests",
            "Admission requests by endpoint and outcome.",
            ["endpoint", "outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tls_injector_admission_duration_seconds",
            "Time to answer an admission request, body read to response.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.cert_expiry = Gauge(
            "tls_injector_serving_cert_expiry_timestamp_seconds",
            "Expiry (Unix time) of the serving certificate currently in use.",
            registry=self.registry,
            multiprocess_mode="livemin",
        )
        self.reloads = Counter(
            "tls_injector_serving_cert_reloads",
            "Serving certificate reloads by result.",
            ["result"],
            registry=self.registry,
        )
        self.connections_closed = Counter(
            "tls_injector_http_connections_closed",
            "Connections the server closed on a limit, a timeout or shutdown, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.connections_open = Gauge(
            "tls_injector_http_connections_open",
            "Connections open on the admission port (handshake done).",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        # Per admission call, the three values an observation changes, taken from the children up front:
        # the call's count, and its latency's sum and bucket. They are prometheus_client's own values (in
        # one process a number under a lock, in a worker of `--workers N` a slot of its shared file), so
        # this is the one way of counting either way; only the wrappers are skipped: Counter.inc and
        # Histogram.observe check their labels and exemplars and find the bucket with a loop in Python,
        # ~16k instructions a call for three additions.
        latency = {e: self.latency.labels(e) for e in ENDPOINTS}
        self._values = {(e, o): (self.requests.labels(e, o)._value, latency[e]._sum, latency[e]._buckets)
                        for e in ENDPOINTS for o in OUTCOMES}
        # The histogram's bounds as it keeps them (the last is +Inf): bisect_left finds the first bound at or
        # above a value, the bucket Histogram.observe increments.
        self._bounds = tuple(self.latency.labels(ENDPOINTS[0])._upper_bounds)
        for result in ("success", "failure"):
            self.reloads.labels(result)
        # In one process the values are prometheus_client's MutexValue: a float that `inc` adds to under a
        # lock of its own, ~3k instructions a call for the method and the `with`. Only the event loop's
        # thread counts admission calls (the operator port's thread only reads them, and reading a float
        # attribute is atomic), so the additions are made to the floats themselves, in the order `inc`
        # makes them: the same values, ~8k instructions less a call. A worker's values are slots of its
        # shared file, written by their own `inc`.
        direct = all(type(value) is values.MutexValue for count, latency_sum, buckets in self._values.values()
                     for value in (count, latency_sum, *buckets))
        self.observe: Callable[[str, str, float], None] = self._add if direct else self._inc

    def _inc(self, endpoint: str, outcome: str, seconds: float) -> None:
        """`observe`: what `requests.labels(endpoint, outcome).inc()` and `latency.labels(endpoint)
        .observe(seconds)` do (a test holds them to it), with the children and the bucket found without
        Python loops."""
        count, latency_sum, buckets = self._values[endpoint, outcome]
        count.inc(1)
        latency_sum.inc(seconds)
        buckets[bisect_left(self._bounds, seconds)].inc(1)

    def _add(self, endpoint: str, outcome: str, seconds: float) -> None:
        """`_inc` in one process, where only the event loop's thread counts: each `inc` as the addition it
        makes (`MutexValue.inc`: `self._value += amount`)."""
        count, latency_sum, buckets = self._values[endpoint, outcome]
        count._value += 1
        latency_sum._value += seconds
        buckets[bisect_left(self._bounds, seconds)]._value += 1

    def render(self) -> bytes:
        return generate_latest(self.registry) if self.shared_dir is None else render_shared(Path(self.shared_dir))


def render_shared(directory: Path) -> bytes:
    """Every worker's metrics in `directory`, summed as the module docstring says."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
    return generate_latest(registry)
