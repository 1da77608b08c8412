"""bench.reconcile_live's cluster on the cluster tier's real kube-apiserver + etcd (tests/cluster/controlplane.py).

The reconciler gets a client certificate of its own (user `bench:reconciler` in `system:masters`), and the
apiserver writes an audit log of that user's requests only, at their RequestReceived stage: one line per
request, so its calls are counted exactly by verb and resource, apart from the harness's own (as admin)
and the controller manager's. The apiserver's and etcd's CPU are read from /proc.

The harness talks to the apiserver with a thread-local keep-alive HTTPS connection per thread and at most
WORKERS requests in flight: enough to create 10,000 workloads in a few minutes without starving the
apiserver (2 shared cores) or tripping its 400-request in-flight limit.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from bench.live_cluster import BUNDLE, PROFILE_ANNOTATION, ROLE_LABEL, Target, proc_cpu
from bench.reconcile import populate
from tests.cluster.controlplane import ControlPlane

RECONCILER_USER = "bench:reconciler"
CONTROLLER_QPS = 400
WORKERS = 8
# A request's whole deadline: the apiserver answers a create in milliseconds, a 500-item page in well
# under a second; 60 s is a stuck server, not a slow one.
REQUEST_TIMEOUT = 60.0
RETRIES = 5  # 429 (priority and fairness), 5xx and dropped connections: each retried after RETRY_PAUSE
RETRY_PAUSE = 1.0
# Where a look at more targets than this lists them (metadata only) rather than getting each.
GET_AT_MOST = 20
PAGE = 500
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
MERGE_PATCH = "application/merge-patch+json"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
    "omitStages": ["ResponseStarted", "ResponseComplete", "Panic"],  # RequestReceived: once per request
    "rules": [{"level": "Metadata", "users": [RECONCILER_USER]}, {"level": "None"}],
}
# After populating, the controller manager makes ReplicaSets and Pods for the workloads: wait until the
# apiserver uses less than this share of a core, for at most SETTLE_LIMIT seconds, before measuring.
IDLE_SHARE = 0.25
IDLE_SAMPLE = 5.0
IDLE_SAMPLES = 3
SETTLE_LIMIT = 600.0
# ... or this long per workload where that is longer: at 400 requests/s the controller manager's
# ReplicaSets, Pods and their status writes for 100,000 workloads take over 15 minutes alone.
SETTLE_PER_WORKLOAD = 0.02
ETCD_QUOTA = 8 * 1024**3


class AuditedControlPlane(ControlPlane):
    """The cluster tier's control plane, its apiserver writing the reconciler's requests to an audit log."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.audit_log = folder / "audit.log"
        self.audit_policy = folder / "audit-policy.json"
        self.audit_policy.write_text(json.dumps(AUDIT_POLICY))  # JSON is YAML: the apiserver reads it
        pair = self.pki.client("bench-reconciler", RECONCILER_USER, "system:masters")
        self.reconciler_kubeconfig = self._write_kubeconfig("bench-reconciler", {
            "client-certificate": str(pair.cert), "client-key": str(pair.key)})

    def _spawn(self, name: str, argv: list[str]) -> None:
        if name == "kube-apiserver" and not any(a.startswith("--audit-") for a in argv):
            argv = [*argv, f"--audit-policy-file={self.audit_policy}", f"--audit-log-path={self.audit_log}",
                    "--audit-log-format=json", "--audit-log-mode=blocking"]
        if name == "etcd":
            # 100,000 workloads with their ReplicaSets, Pods, Secrets and history pass etcd's default
            # 2 GiB backend quota ("database space exceeded"); the bench's etcd may use 8 GiB of this disk.
            argv = [*argv, f"--quota-backend-bytes={ETCD_QUOTA}"]
        if name == "kube-controller-manager":
            # Its client's default 20 requests/s made the ReplicaSets and Pods of 10,000 workloads take
            # over 15 minutes (measured: 1,396 of 3,334 ReplicaSets after 4); a large cluster's is raised so.
            argv = [*argv, f"--kube-api-qps={CONTROLLER_QPS}", f"--kube-api-burst={2 * CONTROLLER_QPS}"]
        super()._spawn(name, argv)

    def pid(self, name: str) -> int:
        return self._processes[name].pid

    def ssl_context(self) -> ssl.SSLContext:
        return self._ssl_context()


class Rest:
    """Admin requests, one keep-alive connection per thread."""

    def __init__(self, plane: AuditedControlPlane) -> None:
        url = urlsplit(plane.url)
        self._host, self._port = url.hostname or "127.0.0.1", url.port or 443
        self._context = plane.ssl_context()
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self._host, self._port, context=self._context, timeout=REQUEST_TIMEOUT)
            self._local.conn = conn
        return conn

    def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
             accept: str = "application/json") -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(RETRIES + 1):
            conn = self._connection()
            try:
                conn.request(method, path, body=data, headers={"Content-Type": content_type, "Accept": accept})
                answer = conn.getresponse()
                raw = answer.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt == RETRIES:
                    raise
                time.sleep(RETRY_PAUSE)
                continue
            if (answer.status == 429 or answer.status >= 500) and attempt < RETRIES:
                time.sleep(RETRY_PAUSE)
                continue
            return answer.status, json.loads(raw) if raw else None
        raise AssertionError("unreachable")

    def must(self, method: str, path: str, body: Any = None, **kwargs: str) -> Any:
        status, answer = self.call(method, path, body, **kwargs)
        if status >= 300 and not (method == "POST" and status == 409):  # already there: a retried create
            raise RuntimeError(f"{method} {path}: {status} {answer}")
        return answer


def path_of(obj: dict[str, Any]) -> str:
    """The collection a body is created in."""
    kind, meta = obj["kind"], obj["metadata"]
    if kind == "Namespace":
        return "/api/v1/namespaces"
    return f"/apis/apps/v1/namespaces/{meta['namespace']}/{kind.lower()}s"


def _lacks(target: Target, note: str | None) -> bool:
    """Absent (None), or present without the profile it needs (`note`: its profile annotation)."""
    return note is None or target.needs not in note


class _Collector:
    """Stands in for the emulator in bench.reconcile.populate: keeps the bodies, in order."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(obj)
        return obj


class ApiserverCluster:
    """bench.reconcile_live's Cluster on the real apiserver: the harness acts as admin, the audit log
    holds the reconciler's calls."""

    poll_seconds = 0.2

    def __init__(self, plane: AuditedControlPlane) -> None:
        self.plane = plane
        self.rest = Rest(plane)
        self._audit = plane.audit_log.open("rb") if plane.audit_log.exists() else None
        self._partial = b""

    def reconciler_args(self) -> list[str]:
        return ["--kubeconfig", str(self.plane.reconciler_kubeconfig)]

    # ---- building the cluster ---------------------------------------------------------------------

    def create_all(self, bodies: list[dict[str, Any]]) -> None:
        namespaces = [b for b in bodies if b["kind"] == "Namespace"]
        with ThreadPoolExecutor(WORKERS) as pool:
            for group in (namespaces, [b for b in bodies if b["kind"] != "Namespace"]):
                list(pool.map(lambda b: self.rest.must("POST", path_of(b), b), group))

    def add_namespace(self, name: str, labels: dict[str, str]) -> None:
        self.rest.must("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": name, "labels": labels}})

    def add_workload(self, body: dict[str, Any]) -> None:
        self.rest.must("POST", path_of(body), body)

    def annotate_templates(self, workloads: list[tuple[str, str, str]], key: str, value: str) -> None:
        patch = {"spec": {"template": {"metadata": {"annotations": {key: value}}}}}
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(lambda w: self.rest.must(
                "PATCH", f"/apis/apps/v1/namespaces/{w[1]}/{w[0].lower()}s/{w[2]}", patch,
                content_type=MERGE_PATCH), workloads))

    # ---- reading it ---------------------------------------------------------------------------------

    def missing(self, targets: list[Target], *, exhaustive: bool) -> list[Target]:
        """Every look is exhaustive: one metadata-only list of all the leaf Secrets (or bundles) costs the
        apiserver less than a get for each, until only a few are left."""
        if len(targets) <= GET_AT_MOST:
            return [t for t in targets if not self._get_present(t)]
        notes: dict[Target, str] = {}
        for resource in {t.resource for t in targets}:
            selector = (f"labelSelector={quote(ROLE_LABEL + '=leaf')}" if resource == "secrets"
                        else f"fieldSelector={quote('metadata.name=' + BUNDLE)}")
            for meta in self._metadata(f"/api/v1/{resource}?{selector}"):
                notes[Target(resource, meta["namespace"], meta["name"])] = (meta.get("annotations") or {}).get(
                    PROFILE_ANNOTATION, "")
        return [t for t in targets if _lacks(t, notes.get(Target(t.resource, t.namespace, t.name)))]

    def _get_present(self, target: Target) -> bool:
        status, obj = self.rest.call("GET", f"/api/v1/namespaces/{target.namespace}/{target.resource}/{target.name}",
                                     accept=METADATA)
        note = ((obj.get("metadata") or {}).get("annotations") or {}).get(PROFILE_ANNOTATION, "")
        return status == 200 and not _lacks(target, note)

    def _metadata(self, path: str) -> Iterator[dict[str, Any]]:
        token = ""
        for _ in range(100_000):  # pages: far more than any cluster here holds
            page = self.rest.must("GET", f"{path}&limit={PAGE}" + (f"&continue={quote(token)}" if token else ""),
                                  accept=METADATA_LIST)
            for item in page.get("items") or []:
                yield item["metadata"]
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return

    def new_calls(self) -> list[tuple[str, str, float]]:
        """The reconciler's calls since the last look: (verb, resource, when the apiserver received it, as
        time.time()), read from the audit log: a write's own time, not the look's."""
        if self._audit is None:
            if not self.plane.audit_log.exists():
                return []
            self._audit = self.plane.audit_log.open("rb")
        data = self._partial + self._audit.read()
        lines = data.split(b"\n")
        self._partial = lines.pop()  # a line the apiserver is still writing
        calls = []
        for line in lines:
            if line.strip():
                event = json.loads(line)
                calls.append((*_call(event), _received(event)))
        return calls

    def server_cpu(self) -> dict[str, float]:
        return {name: proc_cpu(self.plane.pid(name)) for name in ("kube-apiserver", "etcd")}

    def settle(self, pods: int, limit: float = SETTLE_LIMIT) -> float:
        """Wait until the controller manager's work on the new objects is done: the `pods` the workloads
        ask for exist (a Deployment's and a StatefulSet's one replica each; no node runs a DaemonSet's),
        then the apiserver idles for IDLE_SAMPLES samples in a row. Its ReplicaSets and Pods appearing
        wake today's reconciler: measured before they are done, a quiet minute is not quiet."""
        started = time.monotonic()
        before, idle = self.server_cpu()["kube-apiserver"], 0
        while time.monotonic() - started < limit and idle < IDLE_SAMPLES:
            time.sleep(IDLE_SAMPLE)
            now = self.server_cpu()["kube-apiserver"]
            quiet = now - before < IDLE_SAMPLE * IDLE_SHARE and self.count("/api/v1/pods") >= pods
            idle, before = (idle + 1 if quiet else 0), now
        return time.monotonic() - started

    def count(self, path: str) -> int:
        page = self.rest.must("GET", f"{path}?limit=1", accept=METADATA_LIST)
        return len(page.get("items") or []) + int((page.get("metadata") or {}).get("remainingItemCount") or 0)


def _call(event: dict[str, Any]) -> tuple[str, str]:
    """An audit event as (verb, resource) named as the emulator logs it: `deployments.apps`,
    `pods/status`; a request for no resource (discovery, /version) by its path."""
    ref = event.get("objectRef") or {}
    if not ref.get("resource"):
        return event.get("verb", ""), urlsplit(event.get("requestURI", "")).path
    resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    return event.get("verb", ""), resource + (f".{ref['apiGroup']}" if ref.get("apiGroup") else "")


def _received(event: dict[str, Any]) -> float:
    """When the apiserver received the request (its audit clock, microseconds), as time.time()."""
    stamp = event.get("requestReceivedTimestamp") or event.get("stageTimestamp")
    return datetime.fromisoformat(stamp).timestamp() if stamp else time.time()


@contextmanager
def running_apiserver(folder: Path, *, workloads: int, namespaces: int) -> Iterator[ApiserverCluster]:
    plane = AuditedControlPlane(folder / "control-plane")
    try:
        started = time.perf_counter()
        plane.start()
        print(f"control plane up in {time.perf_counter() - started:.1f} s", flush=True)
        cluster = ApiserverCluster(plane)
        collector = _Collector()
        populate(collector, workloads=workloads, namespaces=namespaces)  # type: ignore[arg-type]
        started = time.perf_counter()
        cluster.create_all(collector.bodies)
        made = time.perf_counter() - started
        waited = cluster.settle(sum(b["kind"] in ("Deployment", "StatefulSet") for b in collector.bodies),
                                max(SETTLE_LIMIT, workloads * SETTLE_PER_WORKLOAD))
        print(f"cluster: {workloads} workloads in {namespaces} namespaces (kube-apiserver), created in {made:.1f} s, "
              f"controller manager done and apiserver idle after {waited:.0f} s", flush=True)
        yield cluster
    finally:
        plane.stop()
