"""`tls-injector status [NAMESPACE/WORKLOAD]` against the API emulator: what it shows of one workload, the
attention list of all, its JSON, its exit statuses (doctor's), and conditions that agree with the ones
the reconciler's own pass records for its status API."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, deployment, reconciler, small_cluster
from tls_injector.cli import main
from tls_injector.doctor.workload_status import told_by
from tls_injector.reconcile.core.discover import Target, WorkloadRef

FLAGS = ["--server", "", "--namespace", OWN_NS, "--cluster-domain", "cluster.local"]
NAMES = "tls-injector.io/service-names"


def pod(emu: Emulator, name: str, *, injected: bool) -> None:
    annotations = {"tls-injector.io/injected": "cert,bundle"} if injected else {}
    emu.add({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": "ns0", "generateName": "app0-7d9f8-", "annotations": annotations,
        "labels": {"tls-injector.io/inject": "true", "app": "app0", "pod-template-hash": "7d9f8"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "app0-7d9f8", "uid": "u",
                             "controller": True}]},
        "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}, "status": {"phase": "Running"}})


def converged_with_trouble(emu: Emulator, capsys: pytest.CaptureFixture[str]) -> None:
    """A converged cluster; then someone else's Secret in the way of `squat`, and `greedy` asking for a
    name in another namespace; two pods of app0, one created while the webhook was down."""
    small_cluster(emu, namespaces=1, per_namespace=2)
    pod(emu, "app0-7d9f8-aaaaa", injected=True)
    pod(emu, "app0-7d9f8-bbbbb", injected=False)
    assert main(["reconcile", "--once", "--server", emu.url, "--namespace", OWN_NS, "--webhook-configurations", "",
                 "--log-level", "error"]) == 0
    deployment(emu, "squat", "ns0")
    emu.add({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
             "metadata": {"name": "squat-tls", "namespace": "ns0"}, "data": {}})
    deployment(emu, "greedy", "ns0", annotations={NAMES: "greedy,kubernetes.default.svc"})
    capsys.readouterr()  # the --once line


def status(emu: Emulator, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The exit status and what was printed (stdout, then stderr)."""
    flags = [emu.url if f == "" else f for f in FLAGS]
    code = main(["status", *args, *flags])
    printed = capsys.readouterr()
    return code, printed.out + printed.err


def test_one_workload_shows_its_secret_certificate_ca_conditions_pods_and_events(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    converged_with_trouble(kubeapi, capsys)
    code, out = status(kubeapi, capsys, "ns0/app0")
    assert code == 0, out
    assert "Workload: ns0/Deployment/app0" in out
    assert "Secret: ns0/app0-tls (ours)" in out
    assert "DNS names: app0.ns0.svc, app0.ns0.svc.cluster.local" in out
    assert "issued by CN=tls-injector CA" in out
    assert "renewal from " in out
    assert ", trusted-used (signs)" in out  # the CA it chains to, and that CA's step
    assert "Ready: True (Issued) issued, valid until " in out
    assert "app0-7d9f8-aaaaa: injected" in out
    assert "app0-7d9f8-bbbbb: WITHOUT the injection" in out
    # The namespace's Event for the pass that issued it, naming its Secret among the others.
    assert re.search(r"Normal CertificatesIssued: \d certificates issued or renewed: .*Secret app0-tls: "
                     r"certificate issued \(missing\)", out), out


def test_a_workload_in_conflict_is_not_ready_and_exits_1_and_json_says_the_same(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    converged_with_trouble(kubeapi, capsys)
    code, out = status(kubeapi, capsys, "ns0/squat")
    assert code == 1
    assert "Secret: ns0/squat-tls (not ours)" in out
    assert "Ready: False (SecretConflict) Secret ns0/squat-tls exists and is not managed by tls-injector" in out
    code, out = status(kubeapi, capsys, "ns0/deployment/squat", "-o", "json")
    found: dict[str, Any] = json.loads(out)
    assert code == 1
    assert (found["ready"], found["secret_state"], found["certificate"]) == (False, "not ours", None)
    assert found["conditions"][0] == {"type": "Ready", "status": "False", "reason": "SecretConflict",
                                      "message": "Secret ns0/squat-tls exists and is not managed by tls-injector"}


def test_no_such_workload_and_a_malformed_name_exit_2(kubeapi: Emulator, capsys: pytest.CaptureFixture[str]) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    code, printed = status(kubeapi, capsys, "ns0/nothing")
    assert code == 2
    assert "tls-injector status: no opted-in workload ns0/nothing" in printed
    with pytest.raises(SystemExit) as exit_:
        status(kubeapi, capsys, "no-slash")
    assert exit_.value.code == 2


def test_without_a_workload_it_lists_what_needs_attention_in_the_pages_order(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    converged_with_trouble(kubeapi, capsys)
    code, out = status(kubeapi, capsys)
    assert code == 1  # a certificate not Ready fails it, as a missing one fails doctor
    lines = out.splitlines()
    assert lines[0].startswith("⚠ Certificate ns0/greedy-tls (Deployment/greedy) is not issued yet")
    assert lines[1].startswith("⚠ Certificate ns0/squat-tls (Deployment/squat) is in conflict with another object")
    assert any(line.startswith("⚠ Certificate ns0/greedy-tls (Deployment/greedy): ServiceNamesRefused:")
               for line in lines)
    assert lines[-1].startswith("⚠ Pod ns0/app0-7d9f8-bbbbb (workload app0) runs without the injection")
    code, out = status(kubeapi, capsys, "-o", "json")
    assert [i["severity"] for i in json.loads(out)["attention"]] == ["warning"] * len(lines)


def test_a_healthy_cluster_exits_0(kubeapi: Emulator, capsys: pytest.CaptureFixture[str]) -> None:
    small_cluster(kubeapi, namespaces=1, per_namespace=2)
    assert main(["reconcile", "--once", "--server", kubeapi.url, "--namespace", OWN_NS, "--webhook-configurations",
                 "", "--log-level", "error"]) == 0
    capsys.readouterr()
    code, out = status(kubeapi, capsys)
    assert (code, out) == (0, "Nothing needs attention: every certificate is issued and current, and no pod misses "
                              "the injection.\n")


def test_its_conditions_are_the_ones_the_reconcilers_pass_records(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    """The chain: the pass raises its Events and records its snapshot; `status`, reading the cluster and
    those Events, gives every workload the same conditions."""
    converged_with_trouble(kubeapi, capsys)
    rec = reconciler(kubeapi, Clock(datetime.now(UTC)))
    rec.run_pass()
    assert rec.status is not None
    recorded = {w.secret: [(c.type, c.status, c.reason, c.message) for c in w.conditions]
                for w in rec.status.workloads if w.conditions[0].status != "True"}
    recorded.update({w.secret: [(c.type, c.status, c.reason) for c in w.conditions] for w in rec.status.workloads
                     if w.conditions[0].status == "True"})  # the Issued message has the dates
    assert set(recorded) == {"app0-tls", "app1-tls", "squat-tls", "greedy-tls"}
    for secret, expected in recorded.items():
        _, out = status(kubeapi, capsys, f"ns0/{secret.removesuffix('-tls')}", "-o", "json")
        shown = json.loads(out)["conditions"]
        width = len(expected[0])
        assert [tuple(c[k] for k in ("type", "status", "reason", "message")[:width]) for c in shown] == expected


def test_a_failed_write_counts_when_told_after_the_stored_certificate_was_issued_and_not_before(
    kubeapi: Emulator,
) -> None:
    """What only an Event tells (a failed write, a wait) is weighed against the stored certificate's own
    issuance (its not_before, backdated 5 minutes): the issuance Event is one per namespace, not per Secret."""
    small_cluster(kubeapi, namespaces=1, per_namespace=1)
    clock = Clock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    reconciler(kubeapi, clock).run_pass()
    secret = kubeapi.get("secrets", "app0-tls", "ns0")
    target = Target("ns0", "app0-tls", ("app0.ns0.svc",), (WorkloadRef("Deployment", "ns0", "app0"),))

    def failed_at(when: str) -> list[dict[str, str]]:
        return [{"time": when, "type": "Warning", "reason": "CertificateFailed", "message": "create: 500"}]

    assert "CertificateFailed" not in told_by(target, secret, set(), failed_at("2026-03-01T11:59:59Z"))
    assert told_by(target, secret, set(), failed_at("2026-03-01T12:00:00Z"))["CertificateFailed"] == "create: 500"
