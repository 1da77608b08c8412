"""A small Kubernetes API server emulator for tests and benchmarks (see README.md in this folder).

    with running_emulator() as api:
        core = kubernetes.client.CoreV1Api(api.api_client())
        core.create_namespace({"metadata": {"name": "demo"}})
        api.fail_next("create", "secrets", code=503)
        assert api.calls("create", "secrets") == 0
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from tests.kubeapi import resources
from tests.kubeapi.errors import ApiError
from tests.kubeapi.faults import Faults, Request
from tests.kubeapi.resources import Resource
from tests.kubeapi.server import EmulatorHTTPServer, serve_in_thread
from tests.kubeapi.store import DEFAULT_NAMESPACES, Store

if TYPE_CHECKING:  # imported when a client is asked for: a standalone emulator process starts without it
    import kubernetes.client

__all__ = ["ApiError", "Emulator", "Request", "running_emulator"]


class Emulator:
    """The running server plus its controls. Build it with ``running_emulator()`` or the ``kubeapi`` fixture."""

    touch_annotation = "kubeapi.emulator/concurrent-writes"
    # Seconds in the Retry-After header of a 429, as the apiserver's priority-and-fairness sends (1).
    # urllib3 under the official client honours it and retries up to 3 times: tests may set 0.
    retry_after = 1

    def __init__(self, *, history: int = 10_000, namespaces: tuple[str, ...] = DEFAULT_NAMESPACES,
                 bookmark_interval: float = 1.0, now: Callable[[], datetime] | None = None,
                 seed: int | None = None, host: str = "127.0.0.1", port: int = 0,
                 certificates: tuple[str, ...] = ()) -> None:
        unknown = set(certificates) - set(resources.OPTIONAL_VERSIONS)
        if unknown:
            raise ValueError(f"certificates.k8s.io versions must be among {resources.OPTIONAL_VERSIONS}: {unknown}")
        # The certificates.k8s.io versions of PodCertificateRequest and ClusterTrustBundle served: ("v1",)
        # is a 1.37 cluster, ("v1beta1",) a 1.35/1.36 one with the beta enabled, () an older one.
        self.certificates = tuple(certificates)
        self.store = Store(history=history, namespaces=namespaces, now=now, seed=seed)
        self.faults = Faults()
        self.bookmark_interval = bookmark_interval
        self.refusing = False
        # When set, a username (`system:serviceaccount:<ns>:<name>`): every API request is authorized as that
        # user by the stored Roles and bindings (authz.py), 403 Forbidden otherwise, as kube-apiserver's RBAC
        # authorizer answers a client holding that account's token. None: every request is allowed.
        self.acting_as: str | None = None
        self._address = (host, port)
        self._server: EmulatorHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._clients: list[kubernetes.client.ApiClient] = []

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._server = EmulatorHTTPServer(self._address, self)
        host, port = self._server.server_address[:2]
        self._address = (str(host), int(port))  # keep the port: an outage re-binds the same one
        self._thread = serve_in_thread(self._server)

    def stop(self) -> None:
        for client in self._clients:
            closer: Any = client.close  # untyped in the client library
            closer()
        self._clients.clear()
        self.store.drop_watches()
        self._close_listener()

    def _close_listener(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.cut_connections()
            self._server = None

    @property
    def url(self) -> str:
        return f"http://{self._address[0]}:{self._address[1]}"

    def kubeconfig(self) -> dict[str, Any]:
        """A kubeconfig for this server (no credentials: the emulator does not authenticate)."""
        name = "kubeapi-emulator"
        return {"apiVersion": "v1", "kind": "Config", "current-context": name,
                "clusters": [{"name": name, "cluster": {"server": self.url}}],
                "users": [{"name": name, "user": {}}],
                "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}]}

    def write_kubeconfig(self, path: Path) -> Path:
        """Write ``kubeconfig()`` (JSON, which kubeconfig loaders read as YAML) to ``path``."""
        path.write_bytes(orjson.dumps(self.kubeconfig(), option=orjson.OPT_INDENT_2))
        return path

    def api_client(self) -> kubernetes.client.ApiClient:
        """A new official-client ApiClient for this server (closed when the emulator stops)."""
        import kubernetes.client
        config = kubernetes.client.Configuration(host=self.url)
        client = kubernetes.client.ApiClient(config)
        self._clients.append(client)
        return client

    # ---- faults ----------------------------------------------------------------------------------

    def fail_next(self, verb: str, resource: str, name: str | None = None, *, count: int = 1, code: int = 500,
                  namespace: str | None = None) -> None:
        """The next ``count`` requests of ``verb`` on ``resource`` (``"*"`` = any) [named ``name``] get ``code``."""
        self.faults.fail_next(verb, resource, name, count=count, code=code, namespace=namespace)

    def conflict_on_first_write(self, *, verbs: tuple[str, ...] = ("update", "patch"), touch: bool = False) -> None:
        self.faults.conflict_on_first_write(verbs=verbs, touch=touch)

    def outage(self, *, refuse: bool = False, code: int = 503) -> None:
        """Every request fails with ``code``; or, with ``refuse``, connections are refused (listener closed,
        open connections reset) until ``end_outage()``."""
        if refuse:
            self.refusing = True
            self._close_listener()
        else:
            self.faults.outage_code = code

    def end_outage(self) -> None:
        self.faults.outage_code = None
        if self.refusing:
            self.refusing = False
            self.start()

    def drop_watches(self, *, abort: bool = False) -> int:
        """End every open watch cleanly (or cut its connection, ``abort``); returns how many were open."""
        return self.store.drop_watches(abort=abort)

    def open_watches(self, resource: str | None = None) -> int:
        """Watches being served now (of one resource, by plural or qualified name): a test can wait for the
        code under test to be watching before it changes something."""
        return self.store.open_watches(self.resource(resource) if resource else None)

    def compact(self) -> None:
        """Forget the event history: a watch from any earlier resourceVersion gets 410 Expired."""
        self.store.compact()

    def clear_faults(self) -> None:
        self.faults.clear()
        self.end_outage()

    # ---- observation -----------------------------------------------------------------------------

    def calls(self, verb: str | None = None, resource: str | None = None) -> int:
        return self.faults.calls(verb, resource)

    def writes(self) -> list[Request]:
        return self.faults.writes()

    @property
    def log(self) -> list[Request]:
        return list(self.faults.log)

    def reset_log(self) -> None:
        self.faults.reset_log()

    @property
    def resource_version(self) -> int:
        return self.store.resource_version

    # ---- direct access (no request counted, no fault applied) ------------------------------------

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an object straight in the store (test setup); returns it as stored."""
        res = _resource_of(obj)
        namespace = (obj.get("metadata") or {}).get("namespace") if res.namespaced else None
        return _full(self.store.create(res, namespace or ("default" if res.namespaced else None), obj))

    def get(self, resource: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The stored object (with kind/apiVersion), or None."""
        try:
            return _full(self.store.get(self.resource(resource), namespace, name))
        except ApiError:
            return None

    def objects(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every stored object of a resource (plural or qualified name), optionally in one namespace."""
        found = [_full(s) for s in self.store.objects(self.resource(resource))]
        return [o for o in found if namespace is None or o["metadata"].get("namespace") == namespace]


    def resource(self, resource: str) -> Resource:
        """A resource by plural or qualified name, in the version this emulator serves."""
        rows = [r for r in resources.RESOURCES if resources.served(r, self.certificates)]
        for res in rows:
            if resource == res.qualified or (resource == res.plural and not res.group) or (
                    resource == res.plural and sum(r.plural == resource for r in rows) == 1):
                return res
        raise ValueError(f"unknown resource {resource!r}")


def _full(stored: Any) -> dict[str, Any]:
    obj: dict[str, Any] = orjson.loads(stored.full())
    return obj


def _resource_of(obj: dict[str, Any]) -> Resource:
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    group, _, version = api_version.rpartition("/")
    found = [r for r in resources.RESOURCES if (r.group, r.version, r.kind) == (group, version, kind)]
    if not found:
        raise ValueError(f"the emulator does not serve {api_version} {kind}")
    return found[0]


@contextmanager
def running_emulator(**options: Any) -> Iterator[Emulator]:
    """Start an emulator on 127.0.0.1 with an ephemeral port; stop it (and its clients) on exit.

    ``options`` are Emulator's keyword arguments: history, namespaces, bookmark_interval, now, seed, host, port.
    """
    emulator = Emulator(**options)
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()
