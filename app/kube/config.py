"""Where the cluster is: in-cluster service account, a kubeconfig file, or an explicit URL (tests)."""

from __future__ import annotations

import base64
import binascii
import os
import re
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import urllib3
import yaml
from kubernetes import client, config

from tls_injector.kube.api import KubeApi
from tls_injector.kube.bounded import deadline_for
from tls_injector.kube.errors import KubeError
from tls_injector.names import DEFAULT_NAMESPACE
from tls_injector.settings import API_TIMEOUT_SECONDS

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# What the HTTP library warns on every request to a server whose certificate goes unchecked (`verifies_tls`).
TlsUnverifiedWarning = urllib3.exceptions.InsecureRequestWarning


@dataclass(frozen=True)
class ClusterConfig:
    """How to reach the API: exactly one of the three sources, `describe` says which (for logs)."""

    server: str | None = None
    kubeconfig: Path | None = None
    in_cluster: bool = False
    timeout: float = API_TIMEOUT_SECONDS  # seconds one request may take (KubeApi.timeout)
    context: str | None = None  # the kubeconfig's context to use (kubectl's --context); None: its current one

    @property
    def describe(self) -> str:
        if self.server:
            return f"server {self.server}"
        if self.kubeconfig:
            return f"kubeconfig {self.kubeconfig}" + (f", context {self.context}" if self.context else "")
        return "in-cluster service account"


def find_cluster(*, kubeconfig: Path | None = None, server: str | None = None,
                 context: str | None = None) -> ClusterConfig | None:
    """The first source that exists, or None when no cluster is configured (then nothing reconciles).
    A context names one of a kubeconfig's, so with one the in-cluster account is passed over, as kubectl
    does: `--context` asks for the kubeconfig (--kubeconfig, else $KUBECONFIG or ~/.kube/config)."""
    if server:
        return ClusterConfig(server=server)
    if kubeconfig:
        return ClusterConfig(kubeconfig=kubeconfig, context=context)
    if not context and os.environ.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT_DIR / "token").exists():
        return ClusterConfig(in_cluster=True)
    default = Path(os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0]).expanduser()
    return ClusterConfig(kubeconfig=default, context=context) if default.is_file() else None


def api_client(cluster: ClusterConfig) -> client.ApiClient:
    """A configured client; KubeError with a readable message when the configuration cannot be loaded."""
    configuration = client.Configuration()
    try:
        if cluster.server:
            configuration.host = cluster.server.rstrip("/")
        elif cluster.kubeconfig:
            if not cluster.kubeconfig.exists():  # the client would say "Invalid kube-config file"
                raise FileNotFoundError("no such file")
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(cluster.kubeconfig), context=cluster.context, client_configuration=configuration
            )
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    # RecursionError: the kubeconfig is YAML, composed recursively, so a crafted deep nesting ends here.
    except (config.ConfigException, OSError, ValueError, TypeError, KeyError, AttributeError, yaml.YAMLError,
            RecursionError) as e:
        # One line: YAML errors span several lines (the marker and the context).
        reason = " ".join(str(e).split())
        raise KubeError(f"cannot load the cluster configuration ({cluster.describe}): {reason}") from e
    # Our own loop retries a failed pass; urllib3's silent connection retries would only hide an outage.
    configuration.retries = False
    return client.ApiClient(configuration)


def verifies_tls(configured: client.ApiClient) -> bool:
    """False when the configuration skips checking the API server's certificate (a kubeconfig's
    insecure-skip-tls-verify) on an https:// server: the commands say so once, in place of the HTTP
    library's warning on every request (`TlsUnverifiedWarning`)."""
    settings = configured.configuration
    return bool(settings.verify_ssl) or not str(settings.host or "").lower().startswith("https://")


# A kubeconfig with inline certificates and a token is a few KiB; 64 KiB bounds what a member Secret may
# make the hub parse (YAML is composed recursively: the bound also keeps a crafted nesting short).
MEMBER_KUBECONFIG_LIMIT = 64 * 1024
# What a member's kubeconfig may not ask of the hub: running a program (exec, auth-provider plugins) or
# reading the hub's own files (paths instead of inline data) would let whoever registers a member act
# as the hub's pod; skipping TLS verification would hand CA keys to whoever answers on the address.
_REFUSED_USER_KEYS = ("exec", "auth-provider", "tokenFile", "client-certificate", "client-key")
_REFUSED_CLUSTER_KEYS = ("certificate-authority", "insecure-skip-tls-verify", "proxy-url")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")  # as urlsplit gives the host: [::1] without brackets


def member_client(kubeconfig: bytes) -> client.ApiClient:
    """A client for a member cluster from the kubeconfig stored in the hub (its current context).

    KubeError with a reason a person can act on when it is not one the hub will use: too large, not
    YAML, no current context, a program to run or a file to read, TLS verification off, or plain HTTP
    to anything but loopback (a local proxy): the hub sends a CA's private key over this connection.
    """
    if len(kubeconfig) > MEMBER_KUBECONFIG_LIMIT:
        raise KubeError(f"the kubeconfig is {len(kubeconfig)} bytes, over the limit of {MEMBER_KUBECONFIG_LIMIT}")
    try:
        loaded = yaml.safe_load(kubeconfig.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError) as e:
        raise KubeError(f"the kubeconfig is not YAML: {' '.join(str(e).split())[:200]}") from e
    if not isinstance(loaded, dict):
        raise KubeError("the kubeconfig is not a YAML mapping")
    _vet_member_kubeconfig(loaded)
    configuration = client.Configuration()
    try:
        config.load_kube_config_from_dict(loaded, client_configuration=configuration)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise KubeError(f"the kubeconfig does not load: {' '.join(str(e).split())[:200]}") from e
    # The URL the client will use, as the client holds it (what the loader made of the kubeconfig's).
    _vet_member_server(str(configuration.host or ""))
    configuration.retries = False
    return client.ApiClient(configuration)


@contextmanager
def member_api(kubeconfig: bytes, *, deadline: float, answer_limit: int, timeout: float) -> Iterator[KubeApi]:
    """A client for one visit of a member: every call ends within `deadline` seconds of the start, each
    socket wait within `timeout`, and no answer is read past `answer_limit` bytes (app/kube/bounded.py).
    KubeError as `member_client` when the kubeconfig is not one the hub will use."""
    configured = member_client(kubeconfig)
    try:
        with deadline_for(configured, deadline) as ends:
            yield KubeApi(configured, timeout=timeout, deadline=ends, answer_limit=answer_limit)
    finally:
        configured.close()  # type: ignore[no-untyped-call]


def _vet_member_kubeconfig(loaded: dict[str, object]) -> None:
    sections = (("users", "user", _REFUSED_USER_KEYS), ("clusters", "cluster", _REFUSED_CLUSTER_KEYS))
    for section, inner, refused in sections:
        entries = loaded.get(section) or []
        for entry in entries if isinstance(entries, list) else []:
            body = entry.get(inner) if isinstance(entry, dict) else None
            for key in refused if isinstance(body, dict) else ():
                if key in body and body[key] not in (None, False, ""):  # type: ignore[operator,index]
                    raise KubeError(f"the kubeconfig's {section} entry uses {key!r}, which a member kubeconfig "
                                    "may not (only inline data: a token or client certificate, and the CA)")
            if isinstance(body, dict) and inner == "cluster":
                _vet_member_server(str(body.get("server") or ""))
                _vet_member_ca(body)


def _vet_member_ca(cluster: dict[str, object]) -> None:
    """An https:// server must come with its CA (certificate-authority-data, base64 PEM): without one the
    client trusts every public CA in the hub's image, so anyone with a certificate for the address from
    any of them could take the intermediate keys the hub sends. (Plain HTTP is loopback only, no TLS.)"""
    if not str(cluster.get("server") or "").lower().startswith("https://"):
        return
    data = cluster.get("certificate-authority-data")
    try:
        pem = base64.b64decode(str(data or ""), validate=True)
    except (binascii.Error, ValueError) as e:
        raise KubeError("the kubeconfig's certificate-authority-data is not base64") from e
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise KubeError("the kubeconfig's cluster has no certificate-authority-data (a PEM certificate, base64): a "
                        "member kubeconfig must name the CA of the member's API server, not trust every public CA")


# A server URL is scheme://host[:port][/path]: no user info ("@"), no query or fragment, no backslash,
# space or control character. Each of those is read differently by urllib.parse and by urllib3 (which
# the client connects with): "http://10.0.0.9\\@127.0.0.1/" is 127.0.0.1 to the first and 10.0.0.9 to the
# second, so a loopback check on one sent the token and a CA key in clear to the other.
_SERVER_REFUSED = re.compile(r"[@?#\\\s\x00-\x1f\x7f]")


def _vet_member_server(server: str) -> None:
    """https://, or http:// to this machine's loopback by its exact name (a local proxy). Parsed, not
    compared as text: "HTTP://host", "http://localhost.example.org" and "host:port" (no scheme, which the
    HTTP client reads as http) each sent the key in the clear to another machine. Parsed by both parsers,
    urllib.parse's and the client's own (urllib3), which must read the same scheme, host and port."""
    refusal = KubeError(f"the kubeconfig's server {server[:100]!r} is not an https:// URL (plain HTTP is allowed "
                        "to 127.0.0.1, localhost and [::1] only)")
    if _SERVER_REFUSED.search(server):
        raise KubeError(f"the kubeconfig's server {server[:100]!r} holds a character a server URL may not "
                        "(user info '@', '?', '#', a backslash, a space or a control character)")
    url = urllib.parse.urlsplit(server)
    if url.scheme.lower() not in ("http", "https"):
        raise refusal
    try:
        host, port = url.hostname, url.port
        used = urllib3.util.parse_url(server)
    except ValueError as e:  # urllib3's LocationParseError is a ValueError
        raise refusal from e
    if (used.scheme, used.host and used.host.strip("[]"), used.port) != (url.scheme.lower() or None, host, port):
        raise KubeError(f"the kubeconfig's server {server[:100]!r} is read as two different addresses by two "
                        "URL parsers; refused")
    if url.scheme.lower() == "https" and host:
        return
    if url.scheme.lower() == "http" and host in _LOOPBACK:
        return
    raise refusal


def own_namespace(explicit: str | None) -> str:
    """--namespace, else the pod's service-account namespace, else the manifests' default."""
    if explicit:
        return explicit
    path = SERVICE_ACCOUNT_DIR / "namespace"
    return path.read_text().strip() if path.is_file() else DEFAULT_NAMESPACE
