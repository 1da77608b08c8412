"""A reconciler with something to show: running on the emulator, its operator port on loopback.

Two namespaces of opted-in Deployments converged under a user CA; then the CA is replaced (so the new
one waits to be trusted everywhere and no CA may sign), a new Deployment arrives (its certificate waits),
a bare pod runs without the injection (created while the webhook was down), a Deployment finds someone
else's Secret in its place, and another asks for a service name outside its namespace.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, deployment, small_cluster
from tests.reconcile.test_user_ca import put_user_ca
from tests.test_cli_serve import free_port
from tls_injector.cli import main
from tls_injector.cli.cluster import settings_for
from tls_injector.cli.parser import build_parser as _parser
from tls_injector.kube import find_cluster
from tls_injector.pki import make_ca
from tls_injector.reconcile.loop.runner import run_until_signalled

FLAGS = ["--namespace", OWN_NS, "--ca-secret", "my-ca", "--webhook-configurations", "", "--log-level", "error"]


@dataclass
class Scene:
    base: str
    emulator: Emulator

    def status(self) -> dict[str, object]:
        found: dict[str, object] = httpx.get(self.base + "/api/v1/status", timeout=5).json()
        return found


def bare_pod(emu: Emulator, name: str, ns: str) -> None:
    emu.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns,
             "labels": {"tls-injector.io/inject": "true"}},
             "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}, "status": {"phase": "Running"}})


@contextlib.contextmanager
def running_scene(emu: Emulator) -> Iterator[Scene]:
    small_cluster(emu, namespaces=2, per_namespace=2)
    now = datetime.now(UTC)
    put_user_ca(emu, make_ca(common_name="user CA 1", now=now))
    assert main(["reconcile", "--once", "--server", emu.url, *FLAGS]) == 0
    put_user_ca(emu, make_ca(common_name="user CA 2", now=now))
    deployment(emu, "late", "ns0")
    bare_pod(emu, "orphan", "ns1")
    # Someone else's Secret where "squat" wants its own, and a workload asking for a name in another
    # namespace: each must say why on the status, not "waits" or "not issued yet".
    deployment(emu, "squat", "ns0")
    emu.add({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
             "metadata": {"name": "squat-tls", "namespace": "ns0"}, "data": {}})
    deployment(emu, "greedy", "ns1", annotations={"tls-injector.io/service-names": "greedy,kubernetes.default.svc"})
    args = _parser().parse_args(["reconcile", "--server", emu.url, *FLAGS])  # settings only: --status is below
    cluster = find_cluster(server=emu.url)
    assert cluster is not None
    stop, port = threading.Event(), free_port()
    loop = threading.Thread(target=run_until_signalled, args=(cluster, settings_for(args, loop=True)),
                            kwargs={"probe_address": ("127.0.0.1", port), "stop": stop, "status": True})
    loop.start()
    scene = Scene(f"http://127.0.0.1:{port}", emu)
    try:
        deadline = time.monotonic() + 30
        while not _settled(scene):
            assert time.monotonic() < deadline, "no pass put the new CA in every bundle within 30 s"
            time.sleep(0.1)
        yield scene
    finally:
        stop.set()
        loop.join(timeout=10)


def _settled(scene: Scene) -> bool:
    """The scene the tests read: a pass has run since the new CA reached every bundle in use. The first pass
    writes it into the bundles; the one after (at least the pass floor later) sees it there and starts the
    wait before it signs. Until then the status honestly says it is being added."""
    try:
        answer = httpx.get(scene.base + "/api/v1/status", timeout=5)
    except httpx.ConnectError:
        return False
    if answer.status_code != 200:
        return False
    cas: list[dict[str, str]] = answer.json()["cas"]
    return any("is in every trust bundle in use since" in ca["waits_for"] for ca in cas)
