"""Prometheus metrics of the server, in a registry of its own (no process-global state).

With `serve --workers N` every worker process counts into files of its own in one directory, and a
scrape of any worker (or of the supervisor's probe port) sums them: prometheus_client's multiprocess
mode. Counters and histograms add up over every worker that ever ran, so they never go backwards when
a worker is restarted; `connections_open` adds up the live workers; the certificate expiry is the
earliest any live worker serves.

The admission calls' two series (requests by endpoint and outcome, and their latency histogram) are
counted on every call. In one process they are plain numbers that a collector of this module reads at
scrape time (`AdmissionSeries`): prometheus_client's Counter and Histogram took ~17k instructions per
call (a lock per value, the label child, the bucket loop in Python), about a twentieth of a /mutate
answered from the memo over HTTPS. A worker of `serve --workers N` counts into the shared files on every
call as before, so a worker killed between two ticks loses nothing it counted.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

# Set by the supervisor of `serve --workers N` in each worker's environment (prometheus_client's own name).
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"

OUTCOMES = ("allowed", "patched", "denied", "bad_request", "error")
ENDPOINTS = ("mutate", "validate", "validate/enabled-namespace")
# Admission calls cost well under a millisecond; the apiserver times out at 10 s by default.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 10.0)
REQUESTS_NAME, REQUESTS_HELP = "tls_injector_admission_requests", "Admission requests by endpoint and outcome."
LATENCY_NAME, LATENCY_HELP = ("tls_injector_admission_duration_seconds",
                              "Time to answer an admission request, body read to response.")


class AdmissionSeries(Collector):
    """The admission calls' counts and latency histogram as plain numbers, exposed as a Counter and a
    Histogram of the same names, labels and buckets as prometheus_client's own would be (see the module
    docstring for why). Counted by the event loop's thread only; a scrape from another thread reads
    numbers that are each whole, as prometheus_client's own values are."""

    def __init__(self) -> None:
        self.counts = {(e, o): 0 for e in ENDPOINTS for o in OUTCOMES}
        # Per endpoint: observations per bucket (not cumulative; the last is +Inf), and their sum.
        self.buckets = {e: [0] * (len(LATENCY_BUCKETS) + 1) for e in ENDPOINTS}
        self.sums = dict.fromkeys(ENDPOINTS, 0.0)

    def observe(self, endpoint: str, outcome: str, seconds: float) -> None:
        self.counts[endpoint, outcome] += 1
        self.buckets[endpoint][bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1  # le: seconds <= bound
        self.sums[endpoint] += seconds

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(REQUESTS_NAME, REQUESTS_HELP, labels=["endpoint", "outcome"])
        for (endpoint, outcome), count in list(self.counts.items()):
            requests.add_metric([endpoint, outcome], count)
        latency = HistogramMetricFamily(LATENCY_NAME, LATENCY_HELP, labels=["endpoint"])
        bounds = [*map(floatToGoString, LATENCY_BUCKETS), "+Inf"]
        for endpoint, counts in self.buckets.items():
            cumulative, total = [], 0
            for bound, count in zip(bounds, list(counts), strict=True):
                total += count
                cumulative.append((bound, total))
            latency.add_metric([endpoint], cumulative, sum_value=self.sums[endpoint])
        yield requests
        yield latency


class ServerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.shared_dir = os.environ.get(MULTIPROCESS_ENV) or None
        if self.shared_dir is not None:  # a worker: values live in the shared files (see the module docstring)
            values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
        if self.shared_dir is None:
            series = AdmissionSeries()
            self.registry.register(series)
            self.observe: Callable[[str, str, float], None] = series.observe
        else:
            requests = Counter(REQUESTS_NAME, REQUESTS_HELP, ["endpoint", "outcome"], registry=self.registry)
            latency = Histogram(LATENCY_NAME, LATENCY_HELP, ["endpoint"], buckets=LATENCY_BUCKETS,
                                registry=self.registry)
            # Bound children up front: label lookup per request costs more than the increment itself.
            self._count = {(e, o): requests.labels(e, o) for e in ENDPOINTS for o in OUTCOMES}
            self._time = {e: latency.labels(e) for e in ENDPOINTS}
            self.observe = self._observe_shared
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
        for result in ("success", "failure"):
            self.reloads.labels(result)

    def _observe_shared(self, endpoint: str, outcome: str, seconds: float) -> None:
        """One admission call, counted into the shared files (a worker of `serve --workers N`)."""
        self._count[endpoint, outcome].inc()
        self._time[endpoint].observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry) if self.shared_dir is None else render_shared(Path(self.shared_dir))


def render_shared(directory: Path) -> bytes:
    """Every worker's metrics in `directory`, summed as the module docstring says."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
    return generate_latest(registry)
