"""`tls-injector serve`: the HTTPS admission webhook server (and, with a cluster, the reconciler)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tls_injector.cli import flags
from tls_injector.cli.cluster import cluster_flags, profile_bounds, profile_problem, same_ca_secrets
from tls_injector.cli.command import EXIT_OK, LOG_LEVELS, Command, fail
from tls_injector.cli.handlers import admission_handlers
from tls_injector.cli.serve_cluster import UnusableCluster, reconciler_in_background, webhook_pod_certificates
from tls_injector.cli.startup import HeldLogs
from tls_injector.cli.supervise import run_supervisor, workers
from tls_injector.injection import no_fingerprints
from tls_injector.names import BUNDLE_KEY, TLS_CHANGE_ANNOTATION
from tls_injector.offline.rulesfile import RulesFileError
from tls_injector.pki.serving import ServingPairError
from tls_injector.settings import Limits, ServeSettings

if TYPE_CHECKING:
    from tls_injector.web.workers import WorkerSlot

log = logging.getLogger("tls_injector")

# (flag, Limits field, type, help): every bound of the HTTPS port; docs/serving.md gives each value's reason.
LIMIT_FLAGS: tuple[tuple[str, str, Callable[[str], float], str], ...] = (
    ("--max-connections", "max_connections", int, "open connections; when full a newcomer takes the slot of one "
                                                   "that has not completed a request, from the source holding the "
                                                   "most, or is closed"),
    ("--max-connections-per-source", "max_connections_per_source", int,
     "open connections from one client address; beyond it the newcomer is closed"),
    ("--max-header-bytes", "max_head_bytes", int, "request line + headers (431 beyond)"),
    ("--max-headers", "max_headers", int, "header fields per request (431 beyond)"),
    ("--max-body-bytes", "max_body_bytes", int, "request body (413 beyond)"),
    # The times are durations, as --timeout's (`5s`, `500ms`, or plain seconds).
    ("--handshake-timeout", "handshake_seconds", flags.duration, "from accept to a finished TLS handshake"),
    ("--header-timeout", "head_seconds", flags.duration, "for a request's head, from its first byte (a "
                                                         "connection that has sent nothing is idle)"),
    ("--body-timeout", "body_seconds", flags.duration, "for a request's body, from the end of its head"),
    ("--idle-timeout", "idle_seconds", flags.duration, "how long a connection may stay idle: between "
                                                       "requests, or from its handshake to its first byte"),
)


def add(serve: argparse.ArgumentParser) -> None:
    defaults = ServeSettings()
    serve.usage = "%(prog)s [flags]"  # the flags, grouped, are listed below; spelled out here they took 32 lines
    listen = serve.add_argument_group("listening and TLS")
    listen.add_argument("--host", default=defaults.host, help="address to listen on")
    listen.add_argument("--port", type=flags.port, default=defaults.port, help="HTTPS port for the webhook")
    listen.add_argument("--tls-cert-file", type=Path, help="PEM certificate chain; reloaded when it changes")
    listen.add_argument("--tls-private-key-file", type=Path, help="PEM private key; reloaded when it changes")
    listen.add_argument("--self-signed-dir", type=Path,
                        help="where to write the self-signed CA when no certificate is given (default: a temp dir)")
    listen.add_argument("--reload-interval", type=flags.duration, metavar="DURATION",
                        default=flags.duration_text(defaults.reload_interval_seconds),
                        help="time between checks of the certificate files")
    listen.add_argument("--drain-seconds", type=int, default=defaults.drain_seconds,
                        help="how long in-flight requests may finish after SIGTERM")
    listen.add_argument("--log-level", default=defaults.log_level, choices=LOG_LEVELS, help="least severe level logged")
    listen.add_argument("--probe-port", type=int,
                        help="also serve /healthz, /readyz and /metrics over plain HTTP on this port, from a thread "
                             "of its own (probes keep an answer when the HTTPS port is saturated or its event loop "
                             "is stalled; /healthz there fails when the loop is); not opened when not given")
    listen.add_argument("--workers", type=workers, default=1, metavar="N",
                        help="worker processes answering on the HTTPS port, one per core the pod is given ('auto': "
                             "the cores this process may run on); above 1 a supervisor process starts, restarts and "
                             "drains them, serves the probe port and sums their metrics; needs --no-reconciler")
    # How a supervisor starts a worker (tls_injector.web.workers); not for people.
    serve.add_argument("--worker-fd", type=int, help=argparse.SUPPRESS)
    serve.add_argument("--worker-state", type=Path, help=argparse.SUPPRESS)
    serve.add_argument("--worker-supervisor", type=int, help=argparse.SUPPRESS)
    admission = serve.add_argument_group("what /mutate and /validate do")
    admission.add_argument("--rules", type=Path, help="YAML rules file for /validate")
    admission.add_argument("--trust-bundle-file", type=Path,
                           help=f"the mirrored trust bundle ({BUNDLE_KEY}), mounted; its CA fingerprints are "
                                "recorded on injected pods; re-read when it changes")
    flags.mode_flag(admission)
    admission.add_argument("--tls-exceptions", choices=["off", "policy"], default="off",
                           help=f"an update the TLS rules refuse whose object names it in {TLS_CHANGE_ANNOTATION}: "
                                "off = refused; policy = let through, the exported admission policies (the "
                                "admission-policy component) refusing it to anyone not granted the exception by RBAC. "
                                "Only with those policies installed: this webhook cannot see RBAC (docs/rules.md)")
    cluster = serve.add_argument_group(
        "the cluster and the reconciler", "With a cluster reachable (in-cluster or a kubeconfig), serve also runs "
        "the reconciler in the background, unless --no-reconciler.")
    cluster.add_argument("--no-reconciler", action="store_true",
                         help="never run the reconciler here, even with a cluster configured: the webhook then makes "
                              "no API call (the split install runs `tls-injector reconcile` as its own Deployment)")
    cluster_flags(cluster)
    limits = Limits()
    bounds = serve.add_argument_group("limits of the HTTPS port",
                                      "Each value's reason is in docs/serving.md; the defaults suit a webhook.")
    for flag, field, kind, text in LIMIT_FLAGS:
        default = getattr(limits, field)
        if not field.endswith("_seconds"):
            bounds.add_argument(flag, type=kind, default=default, help=text)
        else:  # a duration: its default as one (5s, 2m), not as a float of seconds
            bounds.add_argument(flag, type=kind, default=flags.duration_text(default), metavar="DURATION", help=text)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if (args.tls_cert_file is None) != (args.tls_private_key_file is None):
        parser.error("--tls-cert-file and --tls-private-key-file go together")
    if problem := same_ca_secrets(args) or profile_problem(args):
        return fail("serve", problem)
    settings = serve_settings(args)
    limits = limits_from(args, parser)
    if args.workers > 1 and args.worker_fd is None:
        return run_supervisor(args, settings)
    with HeldLogs(settings.log_level) as start:  # a start-up error is the only line printed
        return _serve(args, settings, limits, start)


def _serve(args: argparse.Namespace, settings: ServeSettings, limits: Limits, start: HeldLogs) -> int:
    pod_certificates, why = webhook_pod_certificates(args)
    settings = dataclasses.replace(settings, pod_certificates=pod_certificates)
    log.info(f"pod certificates for /mutate: {why}", extra={"pod_certificates": why})
    exceptions = "policy (the admission policies check RBAC)" if settings.tls_exceptions else "off"
    log.info(f"TLS exceptions for /validate: {exceptions}", extra={"tls_exceptions": exceptions})
    from tls_injector.web.fingerprints import BundleFingerprints  # noqa: PLC0415
    from tls_injector.web.health import Health  # noqa: PLC0415 - only serving loads the web stack
    from tls_injector.web.metrics import ServerMetrics  # noqa: PLC0415
    from tls_injector.web.selfsigned import SelfSignedError  # noqa: PLC0415
    from tls_injector.web.server import build_server  # noqa: PLC0415

    bundle = BundleFingerprints(settings.trust_bundle_file) if settings.trust_bundle_file else None
    metrics, health = ServerMetrics(), Health()
    try:  # anything unusable stops the start in one line, before any request is served
        handlers = admission_handlers(settings, ca_fingerprints=bundle or no_fingerprints,
                                      profiles=profile_bounds(args))
        background, reconciler = reconciler_in_background(args, metrics, health)
        if bundle is not None:
            background.append(functools.partial(bundle.poll_forever, settings.reload_interval_seconds))
        server = build_server(settings, mutate=handlers.mutate, validate=handlers.validate,
                              validate_enabled_namespace=handlers.validate_enabled_namespace, metrics=metrics,
                              background=background, health=health, limits=limits, worker=worker_slot(args))
    except (RulesFileError, ServingPairError, SelfSignedError, UnusableCluster) as error:
        return start.failed("serve", str(error))
    except OSError as error:  # the probe port is taken or not ours to bind
        return start.failed("serve", f"cannot listen on probe port {settings.probe_port}: {error.strerror}")
    log.info(f"starting: webhook on https://{settings.host}:{settings.port}; reconciler {reconciler}",
             extra={"webhook": f"{settings.host}:{settings.port}", "reconciler": reconciler})
    # The server drains on SIGTERM and returns: exit status 0 tells the kubelet (and anyone reading the
    # exit code) that the shutdown was the orderly one.
    server.on_started = start.started
    try:
        server.run()
    except OSError as error:
        if server.started:
            raise
        # the webhook port is taken or not ours to bind
        return start.failed("serve", f"cannot listen on {settings.host}:{settings.port}: {error.strerror}")
    return EXIT_OK


def serve_settings(args: argparse.Namespace) -> ServeSettings:
    return ServeSettings(
        host=args.host,
        port=args.port,
        tls_cert_file=args.tls_cert_file,
        tls_private_key_file=args.tls_private_key_file,
        self_signed_dir=args.self_signed_dir,
        rules_file=args.rules,
        trust_bundle_file=args.trust_bundle_file,
        reload_interval_seconds=args.reload_interval,
        drain_seconds=args.drain_seconds,
        log_level=args.log_level,
        default_mode=args.default_mode,
        probe_port=args.probe_port,
        tls_exceptions=args.tls_exceptions == "policy",
    )


def limits_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Limits:
    values = {field: getattr(args, flag[2:].replace("-", "_")) for flag, field, _, _ in LIMIT_FLAGS}
    for flag, field, _, _ in LIMIT_FLAGS:
        if values[field] <= 0:
            parser.error(f"{flag} must be positive")
    return Limits(**values)


def worker_slot(args: argparse.Namespace) -> WorkerSlot | None:
    if args.worker_fd is None:
        return None
    from tls_injector.web.workers import WorkerSlot  # noqa: PLC0415

    return WorkerSlot(args.worker_fd, args.worker_state, args.worker_supervisor or os.getppid())


COMMAND = Command(
    name="serve", add=add, run=run, help="run the HTTPS admission webhook server",
    description="Serve /mutate (inject certificates into opted-in pods), /validate (the TLS transition rules), "
                "/healthz, /readyz and /metrics over HTTPS. With no certificate given it makes a self-signed one, "
                "so it starts anywhere, with or without a cluster. Stops, draining, on SIGTERM.",
    examples=(
        "tls-injector serve                                   # port 8443, self-signed CA in a temp dir",
        "tls-injector serve --self-signed-dir ./dev-ca        # the CA kept where curl --cacert can find it",
        "tls-injector serve --tls-cert-file tls.crt --tls-private-key-file tls.key --rules rules.yaml",
        "tls-injector serve --no-reconciler --workers auto    # the webhook alone, one worker per core",
    ))
