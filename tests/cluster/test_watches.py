"""The reconciler's long-running loop on real watches: a change is seen within seconds (the resync is 10
minutes, so only a watch explains it), and it still is after the apiserver restarts with its history
compacted away, when every watch's resourceVersion is too old (410 Gone) and must be listed anew."""

from __future__ import annotations

import threading
import time

import pytest

from tests.cluster.controlplane import ControlPlane
from tests.cluster.install import Installation, wait_until
from tests.cluster.test_mission import _secret, apply, deployment, make_namespace
from tls_injector.kube import SECRETS, Gone, KubeApi
from tls_injector.kube.config import ClusterConfig, api_client

# Far below the loop's 10-minute resync, far above a watch event's latency on a loaded machine.
SEEN_WITHIN_SECONDS = 45.0


def test_a_new_workload_is_issued_from_the_watch(cluster: ControlPlane, installed: Installation) -> None:
    make_namespace(cluster, installed.core, "watch-new")
    started = time.monotonic()
    assert apply(cluster, deployment("fresh", "watch-new", replicas=0)).returncode == 0
    wait_until("fresh-tls", lambda: _secret(installed.core, "watch-new", "fresh-tls"), timeout=SEEN_WITHIN_SECONDS)
    assert time.monotonic() - started < SEEN_WITHIN_SECONDS


def test_a_watch_from_a_compacted_version_is_gone_on_the_real_apiserver(
    cluster: ControlPlane, installed: Installation
) -> None:
    """Our client's reading of the real 410: after a restart over a compacted etcd, the apiserver answers
    a watch from the old version with an ERROR event in a 200 stream (or a 410), and KubeApi says Gone."""
    api = KubeApi(api_client(ClusterConfig(kubeconfig=cluster.admin_kubeconfig)))
    old = api.current_version(SECRETS)
    make_namespace(cluster, installed.core, "watch-gone")
    for n in range(5):
        installed.core.create_namespaced_config_map("watch-gone", {"metadata": {"name": f"c{n}"}})
    cluster.compact_etcd()
    cluster.restart_apiserver()
    with pytest.raises(Gone):
        for _ in api.watch(SECRETS, resource_version=old, timeout_seconds=5):
            pass


def test_the_loop_keeps_issuing_after_a_restarted_apiserver_and_a_410(
    cluster: ControlPlane, installed: Installation
) -> None:
    cluster.compact_etcd()
    cluster.restart_apiserver()
    make_namespace(cluster, installed.core, "watch-after")
    assert apply(cluster, deployment("later", "watch-after", replicas=0)).returncode == 0
    wait_until("later-tls", lambda: _secret(installed.core, "watch-after", "later-tls"), timeout=SEEN_WITHIN_SECONDS)
    assert installed.alive("reconciler")


def test_the_real_apiserver_sends_bookmarks_that_our_watch_reads_as_such(cluster: ControlPlane) -> None:
    """allowWatchBookmarks: the watch cache sends one every minute (and 2 s before the watch's end); our
    client passes them on as BOOKMARK with a resourceVersion to resume from, which wakes no pass. A minute
    is the apiserver's own period (measured here: bookmarks at 59.6 s and 73.1 s of a 75 s watch).

    Only with a resourceVersion newer than the watch's: the Secrets' watch cache learns of one from a
    Secret's change, or from etcd's progress notification, which a consistent list asks for. Nothing
    lists Secrets here any more (the installed reconciler watches them from its cache: no bookmark came
    in 64 s), so the test lists them, every 10 s, while it watches."""
    api = KubeApi(api_client(ClusterConfig(kubeconfig=cluster.admin_kubeconfig)))
    start = api.current_version(SECRETS)
    done = threading.Event()

    def list_now_and_then() -> None:
        while not done.wait(10):
            api.current_version(SECRETS)

    lister = threading.Thread(target=list_now_and_then, daemon=True)
    lister.start()
    try:
        bookmarks = [event for event in api.watch(SECRETS, resource_version=start, timeout_seconds=64)
                     if event.type == "BOOKMARK"]
    finally:
        done.set()
        lister.join(15)
    assert bookmarks, "no bookmark in 64 s"
    assert int(bookmarks[-1].object["metadata"]["resourceVersion"]) >= int(start)
