"""Pods created continuously through the apiserver, each create's result kept: what a disruption of the
webhook (a rollout, a killed pod, an eviction) costs the people creating pods.

Every create is a real `POST /api/v1/namespaces/<ns>/pods` as cluster-admin from the test process, of
a pod labelled `tls-injector.io/inject: "true"`, so the apiserver must call the mutating webhook (the
shipped `failurePolicy: Fail`): a create the webhook did not answer is refused, and counted as failed.
The pods are bound to a node that does not exist (`spec.nodeName`), so nothing is scheduled or run:
the node's kubelet and containerd are not loaded by hundreds of containers, and admission, the part
measured, is the same as for any pod. They share one Secret and one Service name: one certificate for
the reconciler to issue, whatever the number of pods.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tests.node.harness import Node

# "About 20 a second" (the figure). A create takes tens of milliseconds; one that waits on an
# unanswering webhook takes up to its timeoutSeconds (5 s as shipped): 32 workers keep the pace through
# 5 s of such waits at 20/s with room to spare, so the schedule, not the workers, sets the rate.
RATE_PER_SECOND = 20.0
WORKERS = 32
NOWHERE = "tls-injector-lifecycle-nowhere"
LOAD_LABEL = "tls-injector.test/load"
SECRET = "load-tls"
SERVICE = "load"
# A create that has no answer in this long is a failure too (the apiserver's own limit is 60 s).
REQUEST_SECONDS = 30.0
# Deleting a run's pods (up to ~1,000) on a loaded 2-core machine: measured tens of seconds.
CLEANUP_SECONDS = 300.0


@dataclass(frozen=True)
class Outcome:
    """One create: when it was sent (monotonic), how long it took, the HTTP status (0: no answer) and,
    for a refusal, the apiserver's message."""

    sent: float
    seconds: float
    status: int
    message: str
    injected: bool

    @property
    def admitted(self) -> bool:
        return self.status == 201 and self.injected


def pod(name: str, run: str, image: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"tls-injector.io/inject": "true", LOAD_LABEL: run},
                         "annotations": {"tls-injector.io/secret-name": SECRET,
                                         "tls-injector.io/service-names": SERVICE}},
            "spec": {"nodeName": NOWHERE, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never",
                                     "command": ["sleep", "1"]}]}}


class AdmissionLoad:
    """`start()`, then `stop()` returns every create's Outcome, in the order they were sent."""

    def __init__(self, node: Node, namespace: str, run: str, *, rate: float = RATE_PER_SECOND) -> None:
        self.node, self.namespace, self.run, self.rate = node, namespace, run, rate
        url = urlsplit(node.cp.url)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 443
        self.context = ssl.create_default_context(cafile=str(node.cp.pki.ca.cert))
        self.context.load_cert_chain(str(node.cp.pki.admin.cert), str(node.cp.pki.admin.key))
        self._due: queue.Queue[int | None] = queue.Queue()
        self._outcomes: list[Outcome] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> AdmissionLoad:
        self._threads = [threading.Thread(target=self._work, daemon=True) for _ in range(WORKERS)]
        self._threads.append(threading.Thread(target=self._schedule, daemon=True))
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> list[Outcome]:
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=REQUEST_SECONDS + 10)
        with self._lock:
            return sorted(self._outcomes, key=lambda o: o.sent)

    def call(self, method: str, path: str) -> tuple[int, bytes]:
        """One request on a connection of its own: (status, body)."""
        connection = http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                                 timeout=REQUEST_SECONDS * 4)
        try:
            connection.request(method, path)
            answer = connection.getresponse()
            return answer.status, answer.read()
        finally:
            connection.close()

    def _schedule(self) -> None:
        """Index n is due at start + n / rate, whatever the workers are doing."""
        began = time.monotonic()
        index = 0
        while not self._stopping.is_set():
            self._due.put(index)
            index += 1
            time.sleep(max(0.0, began + index / self.rate - time.monotonic()))
        for _ in range(WORKERS):
            self._due.put(None)

    def _work(self) -> None:
        connection: http.client.HTTPSConnection | None = None
        while (index := self._due.get()) is not None:
            if connection is None:
                connection = http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                                         timeout=REQUEST_SECONDS)
            outcome, keep = self._create(connection, index)
            with self._lock:
                self._outcomes.append(outcome)
            if not keep:
                connection.close()
                connection = None
        if connection is not None:
            connection.close()

    def _create(self, connection: http.client.HTTPSConnection, index: int) -> tuple[Outcome, bool]:
        body = json.dumps(pod(f"{self.run}-{index}", self.run, self.node.busybox.name)).encode()
        sent = time.monotonic()
        try:
            connection.request("POST", f"/api/v1/namespaces/{self.namespace}/pods", body=body,
                               headers={"Content-Type": "application/json", "Accept": "application/json"})
            answer = connection.getresponse()
            data = answer.read()
        except (OSError, http.client.HTTPException) as error:
            return Outcome(sent, time.monotonic() - sent, 0, f"no answer from the apiserver: {error!r}", False), False
        seconds = time.monotonic() - sent
        try:
            decoded = json.loads(data)
        except ValueError:
            decoded = {"message": data[:300].decode(errors="replace")}
        annotations = decoded.get("metadata", {}).get("annotations") or {}
        return Outcome(sent, seconds, answer.status, str(decoded.get("message", "")),
                       "tls-injector.io/injected" in annotations), True


def delete_load_pods(load: AdmissionLoad) -> None:
    """Every pod of the run, by one deletecollection (grace 0: no kubelet will ever confirm them), then
    waits until none is left. A loaded apiserver may answer 504 while it goes on deleting: then the list
    tells when it is done."""
    selector = f"labelSelector={LOAD_LABEL}%3D{load.run}"
    status, data = load.call("DELETE", f"/api/v1/namespaces/{load.namespace}/pods?{selector}&gracePeriodSeconds=0")
    if status not in (200, 504):
        raise AssertionError(f"deleting the pods of {load.run}: {status} {data[:500]!r}")
    deadline = time.monotonic() + CLEANUP_SECONDS
    while time.monotonic() < deadline:
        status, data = load.call("GET", f"/api/v1/namespaces/{load.namespace}/pods?{selector}&limit=1")
        if status == 200 and not json.loads(data)["items"]:
            return
        time.sleep(1)
    raise AssertionError(f"pods of {load.run} still there {CLEANUP_SECONDS:.0f} s after their deletion")


@dataclass(frozen=True)
class Tally:
    """What a run of creates came to, for assertions and for the numbers the docs give."""

    made: int
    failed: list[Outcome]
    seconds: float
    slowest: float

    @classmethod
    def of(cls, outcomes: list[Outcome]) -> Tally:
        failed = [o for o in outcomes if not o.admitted]
        span = (outcomes[-1].sent - outcomes[0].sent) if outcomes else 0.0
        return cls(len(outcomes), failed, span, max((o.seconds for o in outcomes), default=0.0))

    def rate(self) -> float:
        return self.made / self.seconds if self.seconds else 0.0

    def failures_shown(self, since: float = 0.0, limit: int = 8) -> str:
        """The first failures: when each was sent (seconds after `since`), its status and message."""
        shown = [f"  {o.sent - since:+.2f} s {o.status} {o.message[:300]}" for o in self.failed[:limit]]
        return "\n".join(shown)

    def line(self, what: str) -> str:
        return (f"{what}: {self.made} creates in {self.seconds:.1f} s ({self.rate():.1f}/s), "
                f"{len(self.failed)} failed, slowest {self.slowest:.2f} s")


@contextlib.contextmanager
def with_load(node: Node, namespace: str, run: str) -> Iterator[AdmissionLoad]:
    """A load that is stopped (and its pods deleted) however the block ends; `stop()` inside the block
    gives the outcomes."""
    load = AdmissionLoad(node, namespace, run).start()
    try:
        yield load
    finally:
        load.stop()
        delete_load_pods(load)
