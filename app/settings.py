"""Settings, built once by the CLI and passed down (nothing reads the environment at import time)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# A review carries the object being written and, on UPDATE, the stored old one. The apiserver takes
# request bodies up to 3 MiB and etcd stores up to 1.5 MiB by default, but etcd's limit is configurable
# and an object sent as protobuf or YAML grows when the review re-encodes it as JSON: 2 x 3 MiB + 1 MiB
# for the envelope admits every review whatever the cluster's storage settings, and refuses anything
# larger before it is parsed. Held in memory for at most the body timeout.
MAX_BODY_BYTES = 7 * 1024 * 1024
# One call to the Kubernetes API must not hang a pass or a command: the API answers reads in
# milliseconds; 30 s covers a slow apiserver. The commands' --timeout sets it (kubectl's --request-timeout).
API_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class Limits:
    """Every bound of the admission port (tls_injector.web.http). docs/serving.md gives each value's reason."""

    # Request line + headers. The apiserver sends ~10 short headers (< 1 KiB); Go's own server allows
    # 1 MiB, nginx 8 KiB per line: 32 KiB is generous for any real client and small to hold.
    max_head_bytes: int = 32 * 1024
    # The apiserver sends about ten; a hundred leaves room for proxies' additions.
    max_headers: int = 100
    max_body_bytes: int = MAX_BODY_BYTES
    # From accept to a finished handshake: a few round trips, milliseconds in a cluster.
    handshake_seconds: float = 5.0
    # From the connection's start (or the first byte of a kept-alive request) to the end of the head:
    # the apiserver writes a request in one go, so seconds here is only ever a slow or hostile client.
    head_seconds: float = 5.0
    # From the end of the head to the end of the body: 7 MiB at a slow 10 Mbit/s takes 6 s.
    body_seconds: float = 10.0
    # Idle keep-alive. Go's http.Transport (the apiserver's client) drops idle connections after 90 s;
    # keeping ours longer means the client always closes first, so it never sends a review on a
    # connection this side is closing (a POST is not retried on that race).
    idle_seconds: float = 120.0
    # Open connections after the handshake, sized from memory: a connection whose client queues requests
    # and reads nothing holds up to ~0.2 MiB (measured, docs/serving.md "Memory": 1,000 such connections
    # took the process from 80 to 270 MiB, over the Deployment's 256 MiB limit). 500 hold ~100 MiB, which
    # leaves the limit room for the process (~80 MiB) and the largest review being decoded. An apiserver
    # keeps a few per webhook. When full, a newcomer may take the slot of a connection that has not
    # completed a request from the source holding the most; a connection that has completed one (the
    # apiserver's keep-alives) is never closed for it: the newcomer is (tls_injector.web.connections.ConnectionSet).
    max_connections: int = 500
    # Open connections from one client address. The apiserver opens a connection only when all its others
    # are busy, so it holds about its peak of concurrent calls to this replica; its mutating requests in
    # flight are capped at 200 by default (--max-mutating-requests-inflight), so 250 fits an apiserver
    # sending every one of them here, while one pod flooding the port holds at most half of the table
    # and ~50 MiB (measured: 314 MiB before a connection's holdings were bounded, 130 MiB after).
    max_connections_per_source: int = 250
    # After an error answered before the request's end, the rest of what the client sends is read and
    # dropped for this long before closing: closing with unread input resets the connection, and the
    # reset can destroy the answer before the client reads it.
    linger_seconds: float = 1.0

    @property
    def tick_seconds(self) -> float:
        """How often deadlines are checked: a quarter of the shortest, between 50 ms and 1 s."""
        shortest = min(self.handshake_seconds, self.head_seconds, self.body_seconds, self.idle_seconds,
                       self.linger_seconds)
        return max(0.05, min(1.0, shortest / 4))





@dataclass(frozen=True)
class ServeSettings:
    host: str = "0.0.0.0"  # noqa: S104 - a webhook must be reachable from the apiserver
    port: int = 8443
    tls_cert_file: Path | None = None
    tls_private_key_file: Path | None = None
    self_signed_dir: Path | None = None
    rules_file: Path | None = None
    # The trust bundle the reconciler mirrors, mounted as a file: its CA fingerprints go in /mutate's record.
    trust_bundle_file: Path | None = None
    # Mounted Secrets update within about a minute; a 10 s poll picks the change up well inside that.
    reload_interval_seconds: float = 10.0
    # Drain in-flight requests for up to this long after SIGTERM; the pod's grace period must exceed it.
    drain_seconds: int = 20
    log_level: str = "info"
    # Plain-HTTP /healthz, /readyz and /metrics on a port and thread of their own; None: not opened.
    probe_port: int | None = None
    # /mutate: whether pods may get pod certificates (the cluster serves them), and what pods that do not
    # choose get (names.MODES).
    pod_certificates: bool = False
    default_mode: str = "secret"
    # /validate: whether an update a transition rule refuses but whose object names it as the rule's
    # exception (tls-injector.io/tls-change) is let through, leaving the RBAC check to the exported
    # admission policies (docs/rules.md, "Exceptions"). Off: refused, whoever asks.
    tls_exceptions: bool = False
