"""Settings, built once by the CLI and passed down (nothing reads the environment at import time)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
