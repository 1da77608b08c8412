"""Where the cluster is: in-cluster service account, a kubeconfig file, or an explicit URL (tests)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes import client, config

from app.kube.errors import KubeError
from app.names import DEFAULT_NAMESPACE
from app.settings import API_TIMEOUT_SECONDS

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class ClusterConfig:
    """How to reach the API: exactly one of the three sources, `describe` says which (for logs)."""

    server: str | None = None
    kubeconfig: Path | None = None
    in_cluster: bool = False
    timeout: float = API_TIMEOUT_SECONDS  # seconds one request may take (KubeApi.timeout)

    @property
    def describe(self) -> str:
        if self.server:
            return f"server {self.server}"
        return f"kubeconfig {self.kubeconfig}" if self.kubeconfig else "in-cluster service account"


def find_cluster(*, kubeconfig: Path | None = None, server: str | None = None) -> ClusterConfig | None:
    """The first source that exists, or None when no cluster is configured (then nothing reconciles)."""
    if server:
        return ClusterConfig(server=server)
    if kubeconfig:
        return ClusterConfig(kubeconfig=kubeconfig)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT_DIR / "token").exists():
        return ClusterConfig(in_cluster=True)
    default = Path(os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0]).expanduser()
    return ClusterConfig(kubeconfig=default) if default.is_file() else None


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
                config_file=str(cluster.kubeconfig), client_configuration=configuration
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


def own_namespace(explicit: str | None) -> str:
    """--namespace, else the pod's service-account namespace, else the manifests' default."""
    if explicit:
        return explicit
    path = SERVICE_ACCOUNT_DIR / "namespace"
    return path.read_text().strip() if path.is_file() else DEFAULT_NAMESPACE
