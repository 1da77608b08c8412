"""`tls-injector renew NAMESPACE/WORKLOAD`: the annotation the reconciler honours, and a wait for its
answer, bounded by --timeout."""

from __future__ import annotations

import time

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, data, small_cluster
from tests.reconcile.test_leader import _wait_for, running_loop
from tls_injector.cli import main
from tls_injector.cli.renew import wait_for

FORCE = "tls-injector.io/force-renew"


def renew(emu: Emulator, *args: str) -> int:
    return main(["renew", *args, "--server", emu.url, "--namespace", OWN_NS, "--cluster-domain", "cluster.local"])


def test_renew_puts_a_new_certificate_in_place_and_waits_for_it(kubeapi: Emulator,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=2)
    with running_loop(kubeapi, watch_timeout_seconds=30):
        # both leaves: the loop writes them one by one, and the second is read below
        _wait_for(lambda: all(kubeapi.get("secrets", f"app{i}-tls", "ns0") is not None for i in (0, 1)))
        before = data(kubeapi.get("secrets", "app0-tls", "ns0"))["tls.crt"]
        other = data(kubeapi.get("secrets", "app1-tls", "ns0"))["tls.crt"]
        started = time.monotonic()
        assert renew(kubeapi, "ns0/app0", "--timeout", "30s") == 0
        took = time.monotonic() - started
    after = kubeapi.get("secrets", "app0-tls", "ns0")
    assert data(after)["tls.crt"] != before
    assert FORCE not in (after["metadata"].get("annotations") or {})
    assert data(kubeapi.get("secrets", "app1-tls", "ns0"))["tls.crt"] == other  # only the one asked for
    assert took < 30
    assert "renewed: serial " in capsys.readouterr().out


def test_without_a_reconciler_it_gives_up_at_the_timeout_with_exit_1_and_the_request_stays(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    assert main(["reconcile", "--once", "--server", kubeapi.url, "--namespace", OWN_NS, "--webhook-configurations",
                 "", "--log-level", "error"]) == 0
    started = time.monotonic()
    assert renew(kubeapi, "ns0/app0", "--timeout", "1s") == 1
    assert 1 <= time.monotonic() - started < 10
    assert FORCE in kubeapi.get("secrets", "app0-tls", "ns0")["metadata"]["annotations"]
    assert "not renewed within 1s" in capsys.readouterr().out


def test_a_secret_that_is_not_ours_or_no_such_workload_is_exit_2(kubeapi: Emulator,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    kubeapi.add({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                 "metadata": {"name": "app0-tls", "namespace": "ns0"}, "data": {}})
    assert renew(kubeapi, "ns0/app0") == 2
    assert renew(kubeapi, "ns0/nothing") == 2
    err = capsys.readouterr().err
    assert "Secret ns0/app0-tls is not ours" in err
    assert "no opted-in workload ns0/nothing" in err
    assert kubeapi.writes() == []


def test_the_wait_is_bounded_by_its_deadline_on_the_clock_it_is_given() -> None:
    now = [0.0]
    calls = []

    def done() -> str | None:
        calls.append(now[0])
        return None

    def sleep(seconds: float) -> None:
        now[0] += seconds

    assert wait_for(done, 5.0, clock=lambda: now[0], sleep=sleep) is None
    assert calls == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert wait_for(lambda: "renewed", 5.0, clock=lambda: now[0], sleep=sleep) == "renewed"
