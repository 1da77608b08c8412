"""Two reconciler replicas on one cluster, as the shipped install runs them: only the one holding the Lease
reports the cluster. A replica cut off from the API server stops claiming to lead, and stops exporting its
last pass (expiries, pods without the injection) and answering its old status, within the renew deadline:
otherwise the alerts, which take the min or max over every replica scraped, page on a healthy cluster."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.kubeapi import Emulator
from tests.operator.scene import bare_pod
from tests.reconcile.cluster import OWN_NS, small_cluster
from tests.support.partition import partition
from tests.test_cli_serve import free_port
from tls_injector.cli.cluster import settings_for
from tls_injector.cli.parser import build_parser
from tls_injector.kube import find_cluster
from tls_injector.kube.lease import LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD
from tls_injector.reconcile.loop.runner import run_until_signalled

FLAGS = ["--namespace", OWN_NS, "--webhook-configurations", "", "--log-level", "error"]
PASS_GAUGES = ("tls_injector_pods_missing_injection", "tls_injector_certificates_earliest_expiry_timestamp_seconds",
               "tls_injector_ca_expiry_timestamp_seconds")


@dataclass
class Replica:
    base: str

    def metrics(self) -> dict[str, list[float]]:
        """Every sample of the exposition by name (a family declared with no sample maps to [])."""
        text = httpx.get(self.base + "/metrics", timeout=5).text
        return {f.name: [s.value for s in f.samples if s.name == f.name] for f in text_string_to_metric_families(text)}

    def status_code(self) -> int:
        return httpx.get(self.base + "/api/v1/status", timeout=5).status_code

    def reports(self) -> bool:
        """Leads and shows the cluster: leader 1, the pass's gauges filled, the status answered."""
        found = self.metrics()
        return found["tls_injector_leader"] == [1.0] and all(found[name] for name in PASS_GAUGES) and (
            self.status_code() == 200)

    def silent(self) -> bool:
        """Leader 0, every gauge of the last pass declared but empty, the status 503."""
        found = self.metrics()
        return found["tls_injector_leader"] == [0.0] and not any(found[name] for name in PASS_GAUGES) and (
            self.status_code() == 503)


@contextlib.contextmanager
def replica(server: str, identity: str) -> Iterator[Replica]:
    args = build_parser().parse_args(["reconcile", "--server", server, *FLAGS])
    cluster = find_cluster(server=server)
    assert cluster is not None
    stop, port = threading.Event(), free_port()
    loop = threading.Thread(target=run_until_signalled, args=(cluster, settings_for(args, loop=True)), daemon=True,
                            kwargs={"probe_address": ("127.0.0.1", port), "stop": stop, "status": True,
                                    "identity": identity})
    loop.start()
    try:
        yield Replica(f"http://127.0.0.1:{port}")
    finally:
        stop.set()
        loop.join(timeout=10)


def wait_for(condition: Callable[[], bool], *, within: float) -> float:
    """Seconds until `condition()` held, read when the look that found it began (a look is two HTTP calls:
    on a loaded machine its own length would otherwise count); fails after `within`."""
    started = time.monotonic()
    while True:
        looked = time.monotonic()
        if _holds(condition):
            return looked - started
        assert looked - started < within, f"not within {within:.0f} s"
        time.sleep(0.1)


def _holds(condition: Callable[[], bool]) -> bool:
    try:
        return condition()
    except (httpx.HTTPError, KeyError):
        return False


def test_a_replica_cut_off_from_the_api_server_stops_reporting_within_the_renew_deadline_and_the_other_takes_over(
    kubeapi: Emulator,
) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=2)
    bare_pod(kubeapi, "orphan", "ns0")
    with partition(kubeapi.url) as link, replica(link.url, "a") as a:
        wait_for(a.reports, within=30)
        with replica(kubeapi.url, "b") as b:
            wait_for(b.silent, within=10)  # started, and waiting for the Lease: nothing to report
            link.cut.set()
            # a renewed at most one retry period before the cut; it stops leading RENEW_DEADLINE after that
            # renewal, whatever its blocked API calls do (they wait for the 30 s request timeout).
            took = wait_for(a.silent, within=(RENEW_DEADLINE + RETRY_PERIOD).total_seconds())
            # + one look and its pause (the look before the one that found it may have begun just before)
            assert took <= RENEW_DEADLINE.total_seconds() + 1.5
            # b takes the Lease once it has seen it unchanged for the lease duration, then passes.
            wait_for(b.reports, within=(LEASE_DURATION + 3 * RETRY_PERIOD).total_seconds())
            assert a.silent()  # the healthy picture: one replica reports, the other says nothing
            link.reset()  # a's hanging calls fail now, so it stops at once
