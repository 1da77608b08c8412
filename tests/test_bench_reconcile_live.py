"""bench.reconcile_live's phases end to end on a small cluster, so the benchmark cannot rot: the real
`reconcile` command against the emulator, 20 workloads, every phase converging and counted."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bench.live_apiserver import _received
from bench.reconcile_live import (
    EmulatorCluster,
    Plan,
    Reconciler,
    Target,
    expected,
    leaf,
    open_window,
    run_phases,
    running_populated_emulator,
    wait_for,
)


def test_every_phase_converges_and_is_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # settle 0.5 s and quiet 2 s keep it short; today's loop waits at least 5 s between passes, so each
    # change phase takes about 5 s whatever the harness does.
    plan = Plan(20, 5, timeout=30.0, settle=0.5, quiet=2.0, burst=5)
    with running_populated_emulator(plan) as cluster:
        figures = run_phases(cluster, plan, tmp_path)
        secrets = {Target("secrets", s["metadata"]["namespace"], s["metadata"]["name"])
                   for s in cluster.emu.objects("secrets")}
        profiles = [(s["metadata"].get("annotations") or {}).get("tls-injector.io/profile", "")
                    for s in cluster.emu.objects("secrets")]
    values = figures.values
    for key in ("first_s", "new_ns_s", "existing_ns_s", "burst_s", "rss_mib"):
        assert values[key] is not None, (key, figures.lines)
    assert {t for t in expected(plan) if t.resource == "secrets"} <= secrets
    assert leaf("live-new", "live-new-app") in secrets
    assert leaf("ns1", "live-app-b") in secrets
    # The burst re-issued the 5 changed workloads' certificates, and the window counted those writes.
    assert sum("duration=1000h" in p for p in profiles) == 5
    assert (values["burst_calls"] or 0) >= 5
    assert (values["rss_mib"] or 0) > 10
    out = capsys.readouterr().out
    for label in ("a. first convergence", "b. quiet 2 s", "c1.", "c2.", "d. burst of 5", "e. resync", "peak RSS"):
        assert label in out
    assert "NOT CONVERGED" not in out
    # A new workload's calls are its own: the Lease's renewals that fall in the wait are told apart.
    assert "calls until present (and " in out
    assert values["new_ns_calls"] is not None
    assert values["new_ns_calls"] <= 10  # the namespace's refill (7 lists), its Secret, bundle and Event


@pytest.fixture
def idle_process() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def test_a_wait_that_times_out_says_what_is_missing(tmp_path: Path, idle_process: subprocess.Popen[bytes]) -> None:
    plan = Plan(2, 1, timeout=10.0)
    with running_populated_emulator(plan) as cluster:
        assert isinstance(cluster, EmulatorCluster)
        reconciler = Reconciler(idle_process, tmp_path / "log", time.monotonic())
        window = open_window(cluster, reconciler)
        started = time.monotonic()
        outcome = wait_for(window, expected(plan), timeout=0.5, settle=0.1)
        assert time.monotonic() - started < 3
    assert outcome.converged is None
    assert outcome.present is None
    assert outcome.missing == expected(plan)


class _Refused(EmulatorCluster):
    def reconciler_args(self) -> list[str]:
        return [*super().reconciler_args(), "--no-such-flag"]


def test_a_reconciler_that_exits_is_reported_and_stops_the_run(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    plan = Plan(2, 1, timeout=20.0, settle=0.2, quiet=1.0, burst=1)
    with running_populated_emulator(plan) as cluster:
        started = time.monotonic()
        figures = run_phases(_Refused(cluster.emu), plan, tmp_path)
        assert time.monotonic() - started < 15  # not the phases' timeouts, one after another
    out = capsys.readouterr().out
    assert "NOT CONVERGED" in out
    assert "the reconciler exited with 2" in out
    assert "--no-such-flag" in out
    assert figures.values["first_s"] is None
    assert "c1." not in out


def test_controller_objects_are_what_the_controller_manager_adds_with_no_node() -> None:
    plan = Plan(6, 2, controller_objects=True)
    with running_populated_emulator(plan) as cluster:
        objects = {kind: cluster.emu.objects(kind) for kind in ("deployments", "statefulsets", "daemonsets",
                                                                   "replicasets", "pods")}
    by_uid = {o["metadata"]["uid"]: o for kind in ("deployments", "statefulsets", "replicasets") for o in objects[kind]}
    assert (len(objects["deployments"]), len(objects["statefulsets"]), len(objects["daemonsets"])) == (2, 2, 2)
    assert len(objects["replicasets"]) == 2  # one a Deployment; none for a DaemonSet (no node)
    assert len(objects["pods"]) == 4  # one a ReplicaSet, one a StatefulSet
    for obj in objects["replicasets"] + objects["pods"]:
        (owner,) = obj["metadata"]["ownerReferences"]
        parent = by_uid[owner["uid"]]
        assert (owner["kind"], owner["name"]) == (parent["kind"], parent["metadata"]["name"])
        template_labels = parent["spec"]["template"]["metadata"]["labels"]
        assert template_labels.items() <= obj["metadata"]["labels"].items()  # the template's labels, and its hash
    assert {p["status"]["phase"] for p in objects["pods"]} == {"Pending"}
    assert {p["metadata"]["ownerReferences"][0]["kind"] for p in objects["pods"]} == {"ReplicaSet", "StatefulSet"}


class _Stamped:
    """A cluster whose one write the server received 1.0 s after the window opened, told at a later look."""

    poll_seconds = 0.05

    def __init__(self) -> None:
        self.at: float | None = None

    def new_calls(self) -> list[tuple[str, str, float]]:
        if self.at is None:
            return []
        at, self.at = self.at, None
        return [("update", "secrets", at), ("update", "leases.coordination.k8s.io", at + 0.5)]

    def missing(self, targets: Any, *, exhaustive: bool) -> list[Target]:
        return []

    def server_cpu(self) -> dict[str, float]:
        return {}


def test_converged_is_the_last_writes_own_time_by_the_servers_clock(
        tmp_path: Path, idle_process: subprocess.Popen[bytes]) -> None:
    """The apiserver's audit log dates each write: the burst's end is its last write, not the look (a look
    at 10,000 Secrets takes a second, and the next waits four times that). A Lease renewal is not a write."""
    cluster = _Stamped()
    window = open_window(cluster, Reconciler(idle_process, tmp_path / "log", time.monotonic()))  # type: ignore[arg-type]
    cluster.at = time.time() + 1.0
    outcome = wait_for(window, {leaf("ns0", "app0")}, timeout=10.0, settle=0.2)
    assert outcome.converged == pytest.approx(1.0, abs=0.05)
    assert window.first_wrote_at == pytest.approx(1.0, abs=0.05)  # the only write: first and last
    assert outcome.present is not None
    assert outcome.present < 0.5  # the look that found it all present came first


def test_an_audit_events_time_is_when_the_apiserver_received_it() -> None:
    event = {"verb": "update", "requestReceivedTimestamp": "2026-12-07T11:20:36.250000Z",
             "stageTimestamp": "2026-12-07T11:20:36.250000Z"}
    assert _received(event) == datetime(2026, 12, 7, 11, 20, 36, 250000, tzinfo=UTC).timestamp()
