"""Where the cluster is and what the reconciler owns: the flags of the commands that call the API
(`serve`, `reconcile`, `bootstrap`, `doctor`), and the settings they make."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tls_injector import names
from tls_injector.cli import flags
from tls_injector.injection.profile import ProfileBounds, ProfileError, format_duration, key_algorithms, parse_duration
from tls_injector.pki import MAX_SETTLE, MIN_SETTLE, SETTLE
from tls_injector.settings import API_TIMEOUT_SECONDS

if TYPE_CHECKING:
    from tls_injector.kube import ClusterConfig
    from tls_injector.reconcile.parts.reconciler import ReconcileSettings

NO_CLUSTER = "no cluster configured (no in-cluster account, no kubeconfig)"


def connection_flags(command: flags.Flags, *, request_timeout: str = "--timeout") -> None:
    """Where the cluster is and how long one request may take (`request_timeout` names that flag: `renew`
    keeps --timeout for its wait, as `kubectl wait` does, and calls this one --request-timeout)."""
    command.add_argument("--kubeconfig", type=Path,
                         help="kubeconfig file (default: in-cluster service account, then $KUBECONFIG/~/.kube/config)")
    where = command.add_mutually_exclusive_group()
    where.add_argument("--context", type=context_name,
                       help="the kubeconfig context to use, as kubectl's --context (default: the kubeconfig's "
                            "current context)")
    where.add_argument("--server", type=flags.server_url,
                       help="API server URL without credentials (for tests against an emulator)")
    command.add_argument("--namespace", type=flags.namespace,
                         help="the injector's own namespace, where its CAs live (default: the pod's service-account "
                              "namespace)")
    command.add_argument("--cluster-domain", type=flags.cluster_domain,
                         help="DNS domain of the cluster, for SANs (default: from the search path of the pod's "
                              f"/etc/resolv.conf, else {names.DEFAULT_CLUSTER_DOMAIN})")
    command.add_argument(request_timeout, dest="timeout", type=flags.duration,
                         default=flags.duration_text(API_TIMEOUT_SECONDS), metavar="DURATION",
                         help="how long one request to the API server may take before the command gives up on it "
                              "(a Go duration such as 500ms, 10s, 1m30s or 1.5h, or plain seconds; kubectl's "
                              "--request-timeout)")
    command.set_defaults(timeout_flag=request_timeout)


# A kubeconfig context is named by whoever wrote the file (kubectl allows any string); bounded only so that a
# megabyte of argument is not carried into messages. 253 is the longest Kubernetes object name.
MAX_CONTEXT_CHARS = 253


def context_name(value: str) -> str:
    if not value or len(value) > MAX_CONTEXT_CHARS or not value.isprintable():
        raise argparse.ArgumentTypeError(f"expected a kubeconfig context's name (1-{MAX_CONTEXT_CHARS} printable "
                                         f"characters), got {flags.quoted(value)}")
    return value


def webhook_flags(command: flags.Flags) -> None:
    """The webhook's own TLS: shared by `serve`/`reconcile` (which keep it current) and `bootstrap`."""
    command.add_argument("--webhook-configurations", default=names.WEBHOOK_CONFIGURATION,
                         help="comma list of webhook configuration names whose caBundle is kept current "
                              "(both kinds; empty = no webhook self-care)")
    command.add_argument("--webhook-service", default=names.WEBHOOK_SERVICE,
                         help="the webhook's Service (its cert's SANs)")
    command.add_argument("--webhook-secret", default=names.WEBHOOK_SECRET,
                         help="the webhook's serving certificate Secret in --namespace")


def cluster_flags(command: flags.Flags) -> None:
    """Where the cluster is and what the reconciler owns; shared by `serve` and `reconcile`."""
    connection_flags(command)
    command.add_argument("--webhook-address", type=flags.host_port,
                         help="HOST:PORT where each pass checks that every caBundle trusts the certificate the webhook "
                              "serves (default: serve: its own port on loopback; reconcile: "
                              "<webhook-service>.<namespace>.svc:443)")
    user_ca_flags(command)
    command.add_argument("--pod-certificates", choices=["auto", "on", "off"], default="auto",
                         help=f"act as the signer {names.SIGNER_NAME} and publish the CAs as a ClusterTrustBundle: "
                              "auto = when the cluster serves certificates.k8s.io v1 or v1beta1 pod certificates "
                              "(found by discovery), on = the same but an error in the log when it does not, "
                              "off = never (pods asking for them get the Secret path)")
    command.add_argument("--trust-domain", type=flags.trust_domain,
                         help="SPIFFE trust domain of client certificates' URI SANs, spiffe://<trust domain>/ns/"
                              "<namespace>/sa/<service account> (default: the cluster domain)")
    command.add_argument("--metrics-per-object", action="store_true",
                         help="also one certificate-expiry series per workload Secret, labelled with its namespace "
                              "and name (default: only the earliest expiry and the count, so /metrics does not list "
                              "the cluster's namespaces and Secrets)")
    ca_settle_flag(command, "how long each CA rotation step waits for every kubelet to sync a changed bundle: a "
                            "new CA signs this long after every trust bundle in use holds it, an old one leaves the "
                            "bundles this long after no certificate chains to it (every CA set: workloads', "
                            "clients', the webhook's)")
    webhook_flags(command)
    profile_flags(command)


def ca_settle_flag(command: flags.Flags, what: str) -> None:
    """--ca-settle: the reconciler's (`serve`, `reconcile`), and `doctor`'s to judge as its passes do."""
    command.add_argument("--ca-settle", type=ca_settle, default=flags.duration_text(SETTLE.total_seconds()),
                         metavar="DURATION",
                         help=f"{what}; from {flags.duration_text(MIN_SETTLE.total_seconds())} to "
                              f"{flags.duration_text(MAX_SETTLE.total_seconds())}, why in docs/reconcile.md")


def ca_settle(value: str) -> float:
    """--ca-settle's seconds: a duration (flags.duration) from MIN_SETTLE to MAX_SETTLE, whose reasons are
    written beside them (app/pki/trust.py): shorter could outrun a kubelet at its defaults, longer would
    keep every rotation past the shipped alert's wait."""
    low, high = MIN_SETTLE.total_seconds(), MAX_SETTLE.total_seconds()
    seconds = flags.duration(value)
    if not low <= seconds <= high:
        raise argparse.ArgumentTypeError(
            f"expected a settle from {flags.duration_text(low)} (a kubelet's sync period plus its cache TTL at "
            f"their defaults) to {flags.duration_text(high)} (the CA rotation alert's wait), got {flags.quoted(value)}")
    return seconds


def profile_flags(command: flags.Flags) -> None:
    """The bounds of workloads' certificate profiles (docs/injection.md, "Certificate profiles"); each
    default is the reason written beside app/injection/profile.py's ProfileBounds."""
    default = ProfileBounds()
    # What a workload may ask for with names.PROFILE_ANNOTATIONS: a value outside these is refused (an Event on
    # the workload says why) and the default used. Flags of the command itself (`serve` passes a group, and
    # argparse groups do not nest).
    group = command
    for flag, value, what in (("--default-duration", default.default_duration, "a certificate's lifetime when "
                               f"{names.DURATION_ANNOTATION} is not set"),
                              ("--min-duration", default.min_duration, "the shortest lifetime a workload may ask for"),
                              ("--max-duration", default.max_duration, "the longest lifetime a workload may ask for "
                               "(a certificate never outlives its CA, whatever is asked)"),
                              ("--min-renew-before", default.min_renew_before, "the least time before its end a "
                               "certificate may be renewed; the most is 2/3 of its duration, and unset it is 35/90")):
        group.add_argument(flag, type=_profile_duration, default=format_duration(value), metavar="DURATION",
                           help=f"{what} (a Go duration, as --timeout's: 2160h, 90m, 1h30m, 1.5h)")
    group.add_argument("--default-key-algorithm", choices=names.KEY_ALGORITHMS, default=default.default_key_algorithm,
                       help=f"a certificate's key algorithm when {names.KEY_ALGORITHM_ANNOTATION} is not set")
    group.add_argument("--allowed-key-algorithms", type=_key_algorithms, default=",".join(names.KEY_ALGORITHMS),
                       metavar="LIST", help="comma list of the key algorithms a workload may ask for")


def _profile_duration(value: str) -> str:
    try:
        parse_duration(value)
    except ProfileError as error:
        raise argparse.ArgumentTypeError(f"{flags.quoted(value)} {error}") from error
    return value


def _key_algorithms(value: str) -> str:
    try:
        key_algorithms(value)
    except ProfileError as error:
        raise argparse.ArgumentTypeError(str(error)) from error
    return value


def profile_bounds(args: argparse.Namespace) -> ProfileBounds:
    """The bounds the profile flags give (ProfileError when they contradict each other)."""
    if not hasattr(args, "default_duration"):
        return ProfileBounds()
    return ProfileBounds(default_duration=parse_duration(args.default_duration),
                         min_duration=parse_duration(args.min_duration),
                         max_duration=parse_duration(args.max_duration),
                         min_renew_before=parse_duration(args.min_renew_before),
                         default_key_algorithm=args.default_key_algorithm,
                         allowed_key_algorithms=key_algorithms(args.allowed_key_algorithms))


def profile_problem(args: argparse.Namespace) -> str | None:
    """Why the profile flags cannot be used together, or None."""
    try:
        profile_bounds(args)
    except ProfileError as error:
        return f"the certificate profile flags contradict each other: {error}"
    return None


def same_ca_secrets(args: argparse.Namespace) -> str | None:
    """Why the CA flags cannot be used together, or None: one Secret named as both roots would let its key
    sign serving and client certificates alike (a different Secret holding the same key is refused by
    every pass, since a Secret's contents change while the command runs)."""
    if args.ca_secret and args.ca_secret == getattr(args, "client_ca_secret", None):
        return (f"--ca-secret and --client-ca-secret both name the Secret {args.ca_secret}: the client CA must be a "
                "CA of its own, with its own key")
    return None


def user_ca_flags(command: flags.Flags) -> None:
    """Your own CAs: `serve` and `reconcile` sign with them; `doctor` checks them."""
    command.add_argument("--ca-secret", help="a kubernetes.io/tls Secret in --namespace holding a CA you provide "
                                             "(default: tls-injector creates and rotates its own)")
    command.add_argument("--client-ca-secret",
                         help="a kubernetes.io/tls Secret in --namespace holding the client CA you provide, which "
                              "signs client certificates: never the --ca-secret Secret nor its key (default: "
                              "tls-injector creates and rotates its own)")


def find_cluster(args: argparse.Namespace) -> ClusterConfig | None:
    """The cluster --kubeconfig/--server name, else the in-cluster account or $KUBECONFIG (in the
    --context given); None: none. Its requests time out after --timeout."""
    from tls_injector.kube import TlsUnverifiedWarning  # noqa: PLC0415 - only the commands that call the API load the client
    from tls_injector.kube import find_cluster as find  # noqa: PLC0415

    # The HTTP library warns on every request to a server whose certificate goes unchecked (a kubeconfig's
    # insecure-skip-tls-verify), a block of lines each time, before the report: the commands say it once
    # instead (`unverified_tls`).
    warnings.simplefilter("ignore", TlsUnverifiedWarning)
    found = find(kubeconfig=args.kubeconfig, server=args.server, context=getattr(args, "context", None))
    return dataclasses.replace(found, timeout=args.timeout) if found else None


def unverified_tls(cluster: ClusterConfig, client: Any = None) -> str | None:
    """What to say, once, when the configuration does not check the API server's certificate; else None
    (a configuration that does not load is said by the command's own use of it). `client`: the one
    already made from `cluster`, if any."""
    from tls_injector.kube import KubeError, api_client, verifies_tls  # noqa: PLC0415

    try:
        if verifies_tls(client or api_client(cluster)):
            return None
    except KubeError:
        return None
    return (f"warning: TLS verification is off for {cluster.describe} (insecure-skip-tls-verify): the API server's "
            "certificate is not checked, so anyone on the path can read and answer these requests")


def unreachable(cluster: ClusterConfig, command: str, *, flag: str = "--timeout") -> str | None:
    """Why the API cannot be used, or None: a configuration that does not load, or an API server that
    does not answer GET /version within the timeout (`flag` names the flag that set it). One-shot
    commands ask this first, so an API that never answers costs one timeout and one line, not a silent
    wait per call. Any other answer (even 403) says the server is there; the command's own calls then
    say what they may not do. A configuration that skips TLS verification is said here, in one line."""
    from tls_injector.kube import KubeApi, KubeError, Unavailable, api_client  # noqa: PLC0415

    try:
        client = api_client(cluster)
    except KubeError as error:
        return str(error)
    if notice := unverified_tls(cluster, client):
        print(f"tls-injector {command}: {notice}", file=sys.stderr, flush=True)
    try:
        KubeApi(client, timeout=cluster.timeout).server_version()
    except Unavailable as error:
        return (f"cannot reach the API server ({cluster.describe}; {flag} "
                f"{flags.duration_text(cluster.timeout)}): {error}")
    except KubeError:
        pass
    return None


def settings_for(args: argparse.Namespace, *, loop: bool = False, resolv_conf: Path | None = None) -> ReconcileSettings:
    """The reconciler's settings from the flags `cluster_flags` defines (or the part a command has);
    `loop`: for the long-running loop (`reconcile` without --once, `serve`), whose passes bound what one
    namespace may cost (budget.NAMESPACE_TURN_SECONDS); a one-shot pass has no other namespace waiting.
    `resolv_conf` where the cluster domain is looked up when --cluster-domain is not given (tests)."""
    from tls_injector.kube import own_namespace  # noqa: PLC0415 - only the commands that call the API load the client
    from tls_injector.reconcile.ca.machine import CaPolicy  # noqa: PLC0415
    from tls_injector.reconcile.core.budget import NAMESPACE_TURN_SECONDS  # noqa: PLC0415
    from tls_injector.reconcile.loop.runner import RESOLV_CONF, cluster_domain  # noqa: PLC0415
    from tls_injector.reconcile.parts.reconciler import ReconcileSettings  # noqa: PLC0415
    from tls_injector.reconcile.parts.webhook_plan import WebhookSettings  # noqa: PLC0415

    namespace = own_namespace(args.namespace)
    domain = cluster_domain(args.cluster_domain, namespace=namespace, resolv_conf=resolv_conf or RESOLV_CONF)
    configurations = tuple(n.strip() for n in (args.webhook_configurations or "").split(",") if n.strip())
    # One settle for every CA set the pass steps (the client CA's follows the workload CA's policy): the
    # same kubelets sync the webhook pods' files as the workloads'.
    settle = timedelta(seconds=getattr(args, "ca_settle", None) or SETTLE.total_seconds())
    webhook_ca = dataclasses.replace(WebhookSettings().ca, settle=settle)
    webhook = WebhookSettings(service=args.webhook_service, secret_name=args.webhook_secret,
                              configurations=configurations, cluster_domain=domain, ca=webhook_ca,
                              served_address=served_address(args, namespace))
    return ReconcileSettings(namespace=namespace, cluster_domain=domain, ca=CaPolicy(settle=settle),
                             user_ca_secret=args.ca_secret or None,
                             user_client_ca_secret=getattr(args, "client_ca_secret", None) or None,
                             webhook=webhook if configurations else None,
                             pod_certificates=getattr(args, "pod_certificates", "auto"),
                             per_object_metrics=getattr(args, "metrics_per_object", False),
                             trust_domain=getattr(args, "trust_domain", "") or "",
                             hub=getattr(args, "hub", False), profiles=profile_bounds(args),
                             turn_seconds=NAMESPACE_TURN_SECONDS if loop else None)


def served_address(args: argparse.Namespace, namespace: str) -> tuple[str, int] | None:
    """Where a pass checks what the webhook serves: --webhook-address; else, inside `serve`, its own
    port on loopback (it is the webhook); else (`reconcile`) the Service, as the API server dials it."""
    if getattr(args, "webhook_address", None):
        address: tuple[str, int] = args.webhook_address
        return address
    if hasattr(args, "port") and hasattr(args, "host"):
        return ("127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host), args.port  # noqa: S104
    if hasattr(args, "webhook_address"):
        return f"{args.webhook_service}.{namespace}.svc", 443
    return None  # bootstrap: its Job runs before any webhook pod can
