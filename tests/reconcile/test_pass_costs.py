"""What a pass leaves behind of its cost-saving measures: the garbage collector as it found it."""

from __future__ import annotations

import gc

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import Clock, reconciler, small_cluster
from tls_injector.reconcile.parts.state import collector_paused


@pytest.mark.parametrize("outage", [False, True], ids=["converged", "aborted"])
def test_a_pass_pauses_the_collector_and_turns_it_back_on_however_it_ends(kubeapi: Emulator, outage: bool) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    during: list[bool] = []
    if outage:
        kubeapi.outage(code=503)
    assert gc.isenabled()
    report = reconciler(kubeapi, Clock(), may_write=lambda: during.append(gc.isenabled()) is None).run_pass()
    assert bool(report.aborted) is outage
    assert during == ([] if outage else [False] * report.write_count)
    assert gc.isenabled()


def test_the_collector_stays_off_when_it_was_off_before() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_is_back_on_after_an_exception() -> None:
    def fail_while_paused() -> None:
        with collector_paused():
            assert not gc.isenabled()
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fail_while_paused()
    assert gc.isenabled()
