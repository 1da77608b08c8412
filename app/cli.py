"""The `tls-injector` command: parse flags, build settings once, wire the parts together.

Exit status, the same for every command: 0 ok; 1 findings or rejections (a rejected update, a pass that
did not converge, a webhook the API server would not trust); 2 usage or input error (bad flags, an
unreadable or invalid file, no cluster configured, a start-up failure).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from app.admission import Handler
from app.injection import FingerprintSource, InjectionOptions, make_mutate_handler, no_fingerprints
from app.injection.names import MODE_ANNOTATION, MODE_SECRET, MODES
from app.injection.preview import with_preview
from app.logs import configure_logging
from app.pki.serving import ServingPairError
from app.rules import SCOPE_ENABLED_NAMESPACES, export_documents, make_validate_handler
from app.rulesfile import RulesFileError, load_rule_set
from app.settings import Limits, ServeSettings

if TYPE_CHECKING:
    from app.web.app import BackgroundTask, Health
    from app.web.metrics import ServerMetrics
    from app.web.workers import WorkerSlot

log = logging.getLogger("tls_injector")
LOG_LEVELS = ["debug", "info", "warning", "error"]


def _version() -> str:
    try:
        return metadata.version("tls-injector")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # `serve --workers N` starts workers with it
    if not hasattr(args, "run"):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    # Each command gets its own parser, so `parser.error` prints that command's usage, not the top one.
    code: int = args.run(args, args.command_parser)
    return code


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's default in --help, except where there is none to show (None, a switch's False)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def _command(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str,
             **kwargs: Any) -> argparse.ArgumentParser:
    command = sub.add_parser(name, formatter_class=_HelpFormatter, **kwargs)
    command.set_defaults(command_parser=command)
    return command


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tls-injector", description=__doc__, formatter_class=_HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(title="commands")
    _add_serve(sub)
    _add_check(sub)
    _add_export_policy(sub)
    _add_reconcile(sub)
    _add_bootstrap(sub)
    _add_inject(sub)
    _add_doctor(sub)
    return parser


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = _command(sub, "serve", help="run the HTTPS admission webhook server")
    defaults = ServeSettings()
    serve.add_argument("--host", default=defaults.host, help="address to listen on")
    serve.add_argument("--port", type=_port, default=defaults.port, help="HTTPS port for the webhook")
    serve.add_argument("--tls-cert-file", type=Path, help="PEM certificate chain; reloaded when it changes")
    serve.add_argument("--tls-private-key-file", type=Path, help="PEM private key; reloaded when it changes")
    serve.add_argument("--self-signed-dir", type=Path,
                       help="where to write the self-signed CA when no certificate is given (default: a temp dir)")
    serve.add_argument("--rules", type=Path, help="YAML rules file for /validate")
    serve.add_argument("--trust-bundle-file", type=Path,
                       help="the mirrored trust bundle (ca-bundle.crt), mounted; its CA fingerprints are recorded "
                            "on injected pods; re-read when it changes")
    serve.add_argument("--reload-interval", type=float, default=defaults.reload_interval_seconds,
                       help="seconds between checks of the certificate files")
    serve.add_argument("--drain-seconds", type=int, default=defaults.drain_seconds,
                       help="how long in-flight requests may finish after SIGTERM")
    serve.add_argument("--log-level", default=defaults.log_level, choices=LOG_LEVELS, help="least severe level logged")
    serve.add_argument("--no-reconciler", action="store_true",
                       help="never run the reconciler here, even with a cluster configured: the webhook then makes "
                            "no API call (the split install runs `tls-injector reconcile` as its own Deployment)")
    serve.add_argument("--probe-port", type=int,
                       help="also serve /healthz, /readyz and /metrics over plain HTTP on this port, from a thread "
                            "of its own (probes keep an answer when the HTTPS port is saturated or its event loop "
                            "is stalled; /healthz there fails when the loop is); not opened when not given")
    serve.add_argument("--workers", type=_workers, default=1, metavar="N",
                       help="worker processes answering on the HTTPS port, one per core the pod is given ('auto': "
                            "the cores this process may run on); above 1 a supervisor process starts, restarts and "
                            "drains them, serves the probe port and sums their metrics; needs --no-reconciler")
    # How a supervisor starts a worker (app.web.workers); not for people.
    serve.add_argument("--worker-fd", type=int, help=argparse.SUPPRESS)
    serve.add_argument("--worker-state", type=Path, help=argparse.SUPPRESS)
    serve.add_argument("--worker-supervisor", type=int, help=argparse.SUPPRESS)
    _limit_flags(serve)
    _mode_flag(serve)
    _cluster_flags(serve)
    serve.set_defaults(run=_run_serve)


def _workers(value: str) -> int:
    from app.web.workers import worker_count  # noqa: PLC0415 - only serving loads the web stack

    try:
        return worker_count(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1 or 'auto', got {value!r}") from None


# (flag, Limits field, type, help): every bound of the HTTPS port; docs/serving.md gives each value's reason.
_LIMIT_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("--max-connections", "max_connections", int, "open connections; when full the longest-idle one is closed"),
    ("--max-header-bytes", "max_head_bytes", int, "request line + headers (431 beyond)"),
    ("--max-headers", "max_headers", int, "header fields per request (431 beyond)"),
    ("--max-body-bytes", "max_body_bytes", int, "request body (413 beyond)"),
    ("--handshake-timeout", "handshake_seconds", float, "seconds from accept to a finished TLS handshake"),
    ("--header-timeout", "head_seconds", float, "seconds for a request's head, from the connection's start or "
                                                "from a kept-alive request's first byte"),
    ("--body-timeout", "body_seconds", float, "seconds for a request's body, from the end of its head"),
    ("--idle-timeout", "idle_seconds", float, "seconds a kept-alive connection may stay idle"),
)


def _limit_flags(command: argparse.ArgumentParser) -> None:
    defaults = Limits()
    for flag, field, kind, text in _LIMIT_FLAGS:
        command.add_argument(flag, type=kind, default=getattr(defaults, field), help=text)


def _limits(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Limits:
    values = {field: getattr(args, flag[2:].replace("-", "_")) for flag, field, _, _ in _LIMIT_FLAGS}
    for flag, field, _, _ in _LIMIT_FLAGS:
        if values[field] <= 0:
            parser.error(f"{flag} must be positive")
    return Limits(**values)


def _mode_flag(command: argparse.ArgumentParser) -> None:
    command.add_argument("--default-mode", choices=list(MODES), default=MODE_SECRET,
                         help=f"what injected pods get when their {MODE_ANNOTATION} annotation does not say: the "
                              f"workload's Secret and the trust-bundle ConfigMap, or a per-pod key and certificate "
                              f"(projected podCertificate) and the ClusterTrustBundle, where served")


def _cluster_flags(command: argparse.ArgumentParser) -> None:
    """Where the cluster is and what the reconciler owns; shared by `serve` and `reconcile`."""
    _connection_flags(command)
    command.add_argument("--webhook-address", type=_host_port,
                         help="HOST:PORT where each pass checks that every caBundle trusts the certificate the webhook "
                              "serves (default: serve: its own port on loopback; reconcile: "
                              "<webhook-service>.<namespace>.svc:443)")
    command.add_argument("--ca-secret", help="a kubernetes.io/tls Secret in --namespace holding a CA you provide "
                                             "(default: tls-injector creates and rotates its own)")
    command.add_argument("--pod-certificates", choices=["auto", "on", "off"], default="auto",
                         help="act as the signer tls-injector.io/serving and publish the CAs as a ClusterTrustBundle: "
                              "auto = when the cluster serves certificates.k8s.io v1 or v1beta1 pod certificates "
                              "(found by discovery), on = the same but an error in the log when it does not, "
                              "off = never (pods asking for them get the Secret path)")
    _webhook_flags(command)


def _connection_flags(command: argparse.ArgumentParser) -> None:
    command.add_argument("--kubeconfig", type=Path,
                         help="kubeconfig file (default: in-cluster service account, then $KUBECONFIG/~/.kube/config)")
    command.add_argument("--server", type=_server_url,
                         help="API server URL without credentials (for tests against an emulator)")
    command.add_argument("--namespace", help="the injector's own namespace, where its CAs live "
                                             "(default: the pod's service-account namespace)")
    command.add_argument("--cluster-domain", type=_cluster_domain,
                         help="DNS domain of the cluster, for SANs (default: from the search path of the pod's "
                              "/etc/resolv.conf, else cluster.local)")


def _port(value: str) -> int:
    """A TCP port, 0 meaning any free one: out of range, the socket layer would wrap it (99999 binds 34463)."""
    if not value.isdigit() or int(value) > 65535:  # the largest TCP port
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {value[:20]!r}")
    return int(value)


def _server_url(value: str) -> str:
    """http(s)://HOST[:PORT][/path]: without a scheme urllib3 guesses plain HTTP (and warns on stderr)."""
    scheme, _, rest = value.partition("://")
    if scheme not in ("http", "https") or not rest.split("/", 1)[0]:
        raise argparse.ArgumentTypeError(f"expected http(s)://HOST[:PORT], got {value[:100]!r}")
    return value


def _cluster_domain(value: str) -> str:
    from app.pki.names import check_cluster_domain  # noqa: PLC0415 - loads the PKI only when the flag is given

    try:
        return check_cluster_domain(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _webhook_flags(command: argparse.ArgumentParser) -> None:
    """The webhook's own TLS: shared by `serve`/`reconcile` (which keep it current) and `bootstrap`."""
    command.add_argument("--webhook-configurations", default="tls-injector",
                         help="comma list of webhook configuration names whose caBundle is kept current "
                              "(both kinds; empty = no webhook self-care)")
    command.add_argument("--webhook-service", default="tls-injector", help="the webhook's Service (its cert's SANs)")
    command.add_argument("--webhook-secret", default="tls-injector-webhook-tls",
                         help="the webhook's serving certificate Secret in --namespace")


def _add_reconcile(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    reconcile = _command(sub, "reconcile", help="issue, renew and rotate certificates; mirror trust bundles")
    reconcile.add_argument("--once", action="store_true",
                           help="one full pass, then exit: 0 when everything converged, 1 otherwise")
    _cluster_flags(reconcile)
    reconcile.add_argument("--metrics-host", default="0.0.0.0",  # noqa: S104 - Prometheus and the kubelet
                           help="address of the plain-HTTP port serving /metrics and /healthz")
    reconcile.add_argument("--metrics-port", type=_port, default=8080,
                           help="port for /metrics and /healthz (0: none); not used with --once")
    reconcile.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="least severe level logged")
    reconcile.set_defaults(run=_run_reconcile)


def _run_reconcile(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from app.reconcile import runner  # noqa: PLC0415 - only the reconciling commands load the client

    configure_logging(args.log_level)
    cluster = runner.find_cluster(kubeconfig=args.kubeconfig, server=args.server)
    if cluster is None:
        print("tls-injector reconcile: no cluster configured (no in-cluster account, no kubeconfig)", file=sys.stderr)
        return 2
    settings = runner.settings_for(args)
    try:
        if args.once:
            report = runner.run_once(cluster, settings)
            print(runner.summary(report), flush=True)
            return 0 if report.converged else 1
        probe = (args.metrics_host, args.metrics_port) if args.metrics_port else None
        runner.run_until_signalled(cluster, settings, probe_address=probe)
    except OSError as error:  # the metrics port is taken or not ours to bind
        print(f"tls-injector reconcile: cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {error}",
              file=sys.stderr)
        return 2
    except runner.KubeError as error:  # configuration that cannot be loaded: a message, not a traceback
        print(f"tls-injector reconcile: {error}", file=sys.stderr)
        return 2
    return 0


def _add_bootstrap(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    boot = _command(
        sub, "bootstrap", help="create or renew the webhook's serving certificate and put its CA in every caBundle",
        description="Create the webhook CA and serving certificate Secrets when missing or invalid, put the CA "
                    "bundle into clientConfig.caBundle of every entry of the webhook configurations, then check "
                    "that each entry trusts the serving certificate. Safe to re-run: with nothing to do it "
                    "writes nothing. Exit status 0 when the API server will trust the webhook, 1 otherwise.")
    _connection_flags(boot)
    _webhook_flags(boot)
    boot.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="least severe level logged")
    # A user-provided CA (--ca-secret) is for the workloads' certificates, never the webhook's own.
    boot.set_defaults(run=_run_bootstrap, ca_secret=None)


def _run_bootstrap(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from app.reconcile import runner  # noqa: PLC0415 - only the commands that talk to a cluster load the client
    from app.reconcile.bootstrap import bootstrap, bootstrap_settings, connect  # noqa: PLC0415

    configure_logging(args.log_level)
    settings = bootstrap_settings(runner.settings_for(args))
    if settings is None:
        parser.error("--webhook-configurations must name at least one webhook configuration")
    cluster = runner.find_cluster(kubeconfig=args.kubeconfig, server=args.server)
    if cluster is None:
        print("tls-injector bootstrap: no cluster configured (no in-cluster account, no kubeconfig)", file=sys.stderr)
        return 2
    try:
        result = bootstrap(connect(cluster), settings, now=datetime.now(UTC))
    except runner.KubeError as error:  # configuration that cannot be loaded: a message, not a traceback
        print(f"tls-injector bootstrap: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(runner.summary(result.report), flush=True)
    for problem in result.problems:
        print(f"tls-injector bootstrap: {problem}", file=sys.stderr)
    return 0 if result.ok else 1


def _run_serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if (args.tls_cert_file is None) != (args.tls_private_key_file is None):
        parser.error("--tls-cert-file and --tls-private-key-file go together")
    settings = ServeSettings(
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
    )
    limits = _limits(args, parser)
    if args.workers > 1 and args.worker_fd is None:
        return _run_supervisor(args, settings)
    configure_logging(settings.log_level)
    pod_certificates, why = _webhook_pod_certificates(args)
    settings = dataclasses.replace(settings, pod_certificates=pod_certificates)
    log.info(f"pod certificates for /mutate: {why}", extra={"pod_certificates": why})
    from app.web.app import Health  # noqa: PLC0415 - only serving loads the web stack
    from app.web.fingerprints import BundleFingerprints  # noqa: PLC0415
    from app.web.metrics import ServerMetrics  # noqa: PLC0415
    from app.web.selfsigned import SelfSignedError  # noqa: PLC0415
    from app.web.server import build_server  # noqa: PLC0415

    bundle = BundleFingerprints(settings.trust_bundle_file) if settings.trust_bundle_file else None
    metrics, health = ServerMetrics(), Health()
    try:  # anything unusable stops the start in one line, before any request is served
        handlers = admission_handlers(settings, ca_fingerprints=bundle or no_fingerprints)
        background, reconciler = _reconciler_in_background(args, metrics, health)
        if bundle is not None:
            background.append(functools.partial(bundle.poll_forever, settings.reload_interval_seconds))
        server = build_server(settings, mutate=handlers.mutate, validate=handlers.validate,
                              validate_enabled_namespace=handlers.validate_enabled_namespace, metrics=metrics,
                              background=background, health=health, limits=limits, worker=_worker_slot(args))
    except (RulesFileError, ServingPairError, SelfSignedError, _UnusableCluster) as error:
        print(f"tls-injector serve: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the probe port is taken or not ours to bind
        print(f"tls-injector serve: cannot listen on probe port {settings.probe_port}: {error.strerror}",
              file=sys.stderr)
        return 2
    log.info(f"starting: webhook on https://{settings.host}:{settings.port}; reconciler {reconciler}",
             extra={"webhook": f"{settings.host}:{settings.port}", "reconciler": reconciler})
    # The server drains on SIGTERM and returns: exit status 0 tells the kubelet (and anyone reading the
    # exit code) that the shutdown was the orderly one.
    try:
        server.run()
    except OSError as error:
        if server.started:
            raise
        # the webhook port is taken or not ours to bind
        print(f"tls-injector serve: cannot listen on {settings.host}:{settings.port}: {error.strerror}",
              file=sys.stderr)
        return 2
    return 0


def _worker_slot(args: argparse.Namespace) -> WorkerSlot | None:
    if args.worker_fd is None:
        return None
    from app.web.workers import WorkerSlot  # noqa: PLC0415

    return WorkerSlot(args.worker_fd, args.worker_state, args.worker_supervisor or os.getppid())


def _run_supervisor(args: argparse.Namespace, settings: ServeSettings) -> int:
    """`serve --workers N`, N > 1: check what the workers will need, listen, then start and watch them."""
    from app.web.selfsigned import SelfSignedError, write_self_signed  # noqa: PLC0415
    from app.web.tls import CertReloader  # noqa: PLC0415
    from app.web.workers import Supervisor, strip_flags  # noqa: PLC0415

    def fail(message: str) -> int:
        print(f"tls-injector serve: {message}", file=sys.stderr)
        return 2

    if not args.no_reconciler:
        return fail("--workers above 1 needs --no-reconciler: run the reconciler as its own Deployment "
                    "(tls-injector reconcile), as the shipped manifests do")
    configure_logging(settings.log_level)
    extra: list[str] = []
    try:  # every worker would fail the same way: find it here, once, in one line
        admission_handlers(settings)
        if settings.tls_cert_file is None or settings.tls_private_key_file is None:
            files = write_self_signed(settings.self_signed_dir, now=datetime.now(UTC))
            print(f"tls-injector: self-signed CA written to {files.ca_file}", flush=True)
            extra = ["--tls-cert-file", str(files.cert_file), "--tls-private-key-file", str(files.key_file)]
            CertReloader(files.cert_file, files.key_file)
        else:
            CertReloader(settings.tls_cert_file, settings.tls_private_key_file)
    except (RulesFileError, ServingPairError, SelfSignedError) as error:
        return fail(str(error))
    passed_on = strip_flags(args.argv, {"--workers": 1, "--probe-port": 1})

    def worker_argv(index: int, fd: int, state: Path) -> list[str]:
        return [sys.executable, "-m", "app", *passed_on, *extra, "--worker-fd", str(fd), "--worker-state", str(state),
                "--worker-supervisor", str(os.getpid())]

    supervisor = Supervisor(count=args.workers, host=settings.host, port=settings.port,
                            probe_port=settings.probe_port, drain_seconds=settings.drain_seconds,
                            worker_argv=worker_argv)
    try:
        supervisor.bind()
    except OSError as error:
        return fail(f"cannot listen on {settings.host}:{settings.port} or probe port {settings.probe_port}: "
                    f"{error.strerror}")
    try:  # the workers' state and metrics files live in a directory of their own under $TMPDIR
        supervisor.make_state_dir()
    except OSError as error:
        return fail(f"cannot make the workers' directory in {error.filename or 'the temp directory'}: "
                    f"{error.strerror} (a read-only root file system needs an emptyDir at /tmp)")
    log.info(f"starting: {args.workers} workers on https://{settings.host}:{settings.port}",
             extra={"webhook": f"{settings.host}:{settings.port}", "workers": args.workers,
                    "state_dir": str(supervisor.state_dir)})
    return supervisor.run()


class _UnusableCluster(Exception):
    """The configured cluster cannot be reached with what was given (kubeconfig missing or malformed)."""


def _reconciler_in_background(args: argparse.Namespace, metrics: ServerMetrics,
                              health: Health) -> tuple[list[BackgroundTask], str]:
    """The reconciler runs inside `serve` only when a cluster is configured and --no-reconciler is not
    given; otherwise serve runs alone. Also returns what the start-up line says about it. With the
    reconciler here, /readyz also fails while its last pass found the live caBundle not trusting the
    certificate this server serves (checked once per pass, never per request)."""
    if args.no_reconciler:
        return [], "off (--no-reconciler)"
    from app.reconcile import runner  # noqa: PLC0415 - the client is loaded only when a cluster may be there

    cluster = runner.find_cluster(kubeconfig=args.kubeconfig, server=args.server)
    if cluster is None:
        return [], "off (no cluster configured: no in-cluster service account, no kubeconfig)"
    try:  # a configuration that cannot load stops the start, rather than failing every pass later
        runner.api_client(cluster)
    except runner.KubeError as error:
        raise _UnusableCluster(str(error)) from None
    from app.reconcile.metrics import ReconcileMetrics  # noqa: PLC0415

    settings = runner.settings_for(args)
    reconcile_metrics = ReconcileMetrics(metrics.registry)
    health.serving_trusted = lambda: reconcile_metrics.serving_verdict
    task = functools.partial(runner.run_reconciler, cluster, settings, metrics=reconcile_metrics)
    return [task], f"on ({cluster.describe}, namespace {settings.namespace})"


def _add_inject(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inject = _command(sub, "inject", help="print manifests with their pod templates injected as the webhook would")
    inject.add_argument("-f", "--filename", required=True, action="append",
                        help="a YAML or JSON file of one or more documents (kind: List included), a directory "
                             "(its *.yaml, *.yml and *.json, recursively, in sorted order), or - for stdin; "
                             "repeat for more")
    inject.add_argument("--all", action="store_true", dest="include_unlabelled",
                        help="inject every template not labelled false, as in an opted-in namespace")
    inject.add_argument("--pod-certificates", choices=["on", "off"], default="off",
                        help="whether the target cluster serves pod certificates and ClusterTrustBundles (1.35+ "
                             "with the beta, 1.37+); off: templates asking for them get the Secret")
    _mode_flag(inject)
    inject.set_defaults(run=_run_inject)


def _run_inject(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from app.manifests import ManifestError, inject_manifests, read_texts  # noqa: PLC0415 - YAML only here

    if args.filename.count("-") > 1:
        parser.error("stdin (-) can be read only once")
    outputs = []
    try:
        for name, text in read_texts(args.filename, sys.stdin):
            try:
                result = inject_manifests(text, options=_injection_options(args),
                                          include_unlabelled=args.include_unlabelled)
            except ManifestError as error:
                raise ManifestError(f"{name}: {error}") from None
            outputs.append(result.text)
            for warning in result.warnings:
                print(f"tls-injector inject: warning: {name}: {warning}", file=sys.stderr)
    except ManifestError as error:  # nothing is printed unless every file could be injected
        print(f"tls-injector inject: {error}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write("---\n".join(text for text in outputs if text))
    return EXIT_OK


@dataclasses.dataclass(frozen=True)
class AdmissionHandlers:
    """One handler per admission path: /mutate, /validate, /validate/enabled-namespace."""

    mutate: Handler
    validate: Handler
    validate_enabled_namespace: Handler


def build_handlers(
    settings: ServeSettings, *, ca_fingerprints: FingerprintSource = no_fingerprints
) -> tuple[Handler, Handler]:
    """The /mutate and /validate handlers; raises RulesFileError for a bad `settings.rules_file`."""
    handlers = admission_handlers(settings, ca_fingerprints=ca_fingerprints)
    return handlers.mutate, handlers.validate


def admission_handlers(
    settings: ServeSettings, *, ca_fingerprints: FingerprintSource = no_fingerprints
) -> AdmissionHandlers:
    """Every admission handler; raises RulesFileError for a bad `settings.rules_file`.

    /validate enforces the built-in transition rules plus the rules file's that hold outside enabled
    namespaces, /validate/enabled-namespace those that hold in them (the shipped entries send each
    workload update to one of the two, by the namespace's label). /mutate injects; its record carries
    the CA fingerprints `ca_fingerprints` returns (serve feeds it from --trust-bundle-file). Both
    validate paths add the dry-run preview line: a workload update reaches only one of them.
    """
    options = InjectionOptions(pod_certificates=settings.pod_certificates, default_mode=settings.default_mode)
    rule_set = load_rule_set(settings.rules_file)
    return AdmissionHandlers(
        mutate=make_mutate_handler(options, ca_fingerprints=ca_fingerprints),
        validate=with_preview(make_validate_handler(rule_set), options),
        validate_enabled_namespace=with_preview(make_validate_handler(rule_set, SCOPE_ENABLED_NAMESPACES),
                                                options, namespace_enabled=True),
    )


def _injection_options(args: argparse.Namespace) -> InjectionOptions:
    return InjectionOptions(pod_certificates=args.pod_certificates == "on", default_mode=args.default_mode)


def _webhook_pod_certificates(args: argparse.Namespace) -> tuple[bool, str]:
    """Whether /mutate may inject pod certificates, and why, for the start-up line. `auto` asks discovery
    once when a cluster is configured; the webhook of the split install has no API access, so there it
    must be told (`on`) and `auto` means off."""
    if args.pod_certificates != "auto":
        return args.pod_certificates == "on", f"{args.pod_certificates} (--pod-certificates)"
    if args.no_reconciler:
        return False, "off (auto, and no API access to find out: --pod-certificates on where they are served)"
    from app.reconcile import runner  # noqa: PLC0415 - the client is loaded only when a cluster may be there

    cluster = runner.find_cluster(kubeconfig=args.kubeconfig, server=args.server)
    if cluster is None:
        return False, "off (auto, no cluster configured)"
    try:
        version = runner.pod_certificates_version(cluster)
    except runner.KubeError as error:
        return False, f"off (auto, discovery failed: {error})"
    return (True, f"on (auto: certificates.k8s.io/{version})") if version else (False, "off (auto: not served)")


def _add_check(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = _command(
        sub, "check", help="offline: the /validate verdict for an update (exit 0 allowed, 1 rejected, 2 bad input)",
        description="Pair the objects of OLD and NEW by apiVersion, kind, namespace and name and judge each "
                    "pair as an UPDATE with the same handler as /validate. OLD and NEW are YAML/JSON files "
                    "(multi-document), directories of them, or - for stdin.")
    check.add_argument("--old", required=True, help="the manifests before the change")
    check.add_argument("--new", required=True, help="the manifests after the change")
    check.add_argument("--rules", type=Path, help="YAML rules file (added to the built-in rules)")
    check.add_argument("--namespace-enabled", action="append", default=[], metavar="NAMESPACE",
                       help="judge this namespace's objects as in a namespace labelled tls-injector.io/inject="
                            "enabled (also /validate/enabled-namespace's rules); repeat for more. A Namespace "
                            "object labelled so in OLD or NEW counts too")
    check.set_defaults(run=_run_check)


def _run_check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from app.check import InputError, check, enabled_namespaces, load_manifests, render  # noqa: PLC0415

    if args.old == "-" and args.new == "-":
        parser.error("only one of --old and --new can be read from stdin")
    try:
        handlers = admission_handlers(ServeSettings(rules_file=args.rules))
        old, new = load_manifests(args.old), load_manifests(args.new)
        enabled = enabled_namespaces(old, new, named=args.namespace_enabled)
        report = check(old, new, handlers.validate, enabled_handler=handlers.validate_enabled_namespace,
                       enabled=enabled)
    except (RulesFileError, InputError) as error:
        print(f"tls-injector check: {error}", file=sys.stderr)
        return 2
    print(render(report))
    return 1 if report.rejected else 0


def _add_export_policy(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = _command(
        sub, "export-policy", help="print the rule set as native Kubernetes validation (VAP or CRD snippets)",
        description="Render the transition rules as ValidatingAdmissionPolicy + ValidatingAdmissionPolicyBinding "
                    "objects (admissionregistration.k8s.io/v1, Kubernetes >= 1.30), or as the "
                    "x-kubernetes-validations entries to put on a CRD's schema node.")
    export.add_argument("--rules", type=Path, help="YAML rules file (added to the built-in rules)")
    export.add_argument("--format", choices=["vap", "crd"], default="vap",
                        help="vap: policies and bindings to kubectl apply; crd: snippets for CRD schemas")
    export.add_argument("--namespace", default="tls-injector",
                        help="the injector's own namespace, left out of the bindings with the system namespaces")
    export.set_defaults(run=_run_export_policy)


def _run_export_policy(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        rule_set = load_rule_set(args.rules)
    except RulesFileError as error:
        print(f"tls-injector export-policy: {error}", file=sys.stderr)
        return 2
    documents = export_documents(rule_set, fmt=args.format, own_namespace=args.namespace)
    if not documents:
        # Not a failure: with no rule on a custom resource there is simply nothing a CRD could carry.
        print(f"tls-injector export-policy: nothing to export: no rule matches a custom resource "
              f"(--format {args.format} covers rules on CRD kinds only)", file=sys.stderr)
        return EXIT_OK
    print(yaml.safe_dump_all(documents, sort_keys=False, width=120), end="")
    return EXIT_OK


def _add_doctor(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doctor = _command(
        sub, "doctor", help="check that the installation is healthy (exit 0 healthy, 1 a check failed)",
        description="Read the cluster and check, one line each: the webhook configurations and whether every "
                    "caBundle trusts the certificate the webhook serves, the CA sets, every opted-in workload's "
                    "certificate, pods that missed the injection or mount a missing Secret, the reconciler's RBAC "
                    "and its leader Lease. Exit status 0 when no check failed (warnings allowed), 1 when one did, "
                    "2 for a usage or configuration error.")
    _connection_flags(doctor)
    _webhook_flags(doctor)
    doctor.add_argument("--webhook-address", type=_host_port,
                        help="HOST:PORT where the webhook answers, e.g. 127.0.0.1:8443 after `kubectl -n tls-injector "
                             "port-forward svc/tls-injector 8443:443` (default: the Service's DNS name, which "
                             "resolves only inside the cluster)")
    doctor.add_argument("--reconciler-service-account", default="tls-injector-reconciler",
                        help="the reconciler's service account in --namespace, whose permissions are checked")
    doctor.add_argument("-o", "--output", choices=["text", "json"], default="text", help="report format")
    doctor.set_defaults(run=_run_doctor, ca_secret=None)


def _host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value[:100]!r}")
    return host.strip("[]"), int(port)


def _run_doctor(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from app.doctor import ApiUnreachable, DoctorSettings, api_unreachable, read, render_json, render_text, run_checks  # noqa: PLC0415
    from app.reconcile import runner  # noqa: PLC0415 - only the commands that talk to a cluster load the client
    from app.reconcile.bootstrap import connect  # noqa: PLC0415
    from app.reconcile.webhook_plan import WebhookSettings  # noqa: PLC0415

    configure_logging("warning")  # the report is the output; info lines would only interleave with it
    cluster = runner.find_cluster(kubeconfig=args.kubeconfig, server=args.server)
    if cluster is None:
        print("tls-injector doctor: no cluster configured (no in-cluster account, no kubeconfig)", file=sys.stderr)
        return EXIT_USAGE
    reconcile = runner.settings_for(args)
    webhook = reconcile.webhook or WebhookSettings(service=args.webhook_service, secret_name=args.webhook_secret,
                                                   configurations=(), cluster_domain=reconcile.cluster_domain)
    settings = DoctorSettings(namespace=reconcile.namespace, cluster_domain=reconcile.cluster_domain, webhook=webhook,
                              ca_secret=reconcile.ca.secret_name, webhook_address=args.webhook_address,
                              reconciler_account=args.reconciler_service_account)
    try:
        results = run_checks(read(connect(cluster), settings, now=datetime.now(UTC)))
    except runner.KubeError as error:  # the configuration itself cannot be loaded
        print(f"tls-injector doctor: {error}", file=sys.stderr)
        return EXIT_USAGE
    except ApiUnreachable as error:
        results = api_unreachable(str(error))
    sys.stdout.write(render_json(results) if args.output == "json" else render_text(results))
    return EXIT_FINDINGS if any(r.status == "error" for r in results) else EXIT_OK
