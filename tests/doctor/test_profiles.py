"""Issue 39, point 3: `doctor` and `status` follow each workload's certificate profile, judged by the bounds the
reconciler runs with (given to them as the same flags): a refused value is a warning and a condition, a
certificate not yet issued with its profile is a warning, a profile asked for in the pod-certificate mode is
said not to apply, and the renewal time shown is the profile's."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.doctor.cluster import block, healthy_cluster, line, run
from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, deployment, reconciler
from tls_injector import names
from tls_injector.injection.profile import ProfileBounds

NARROW = ["--allowed-key-algorithms=ecdsa-p256,rsa-3072"]
BOUNDS = ProfileBounds(allowed_key_algorithms=("ecdsa-p256", "rsa-3072"))
ACCEPTED = "every certificate profile asked for is within the operator's bounds"
APPLIED = "every certificate has its profile's key algorithm and lifetime"
APPLIES = "no certificate profile is asked for where it cannot apply"


def _profiled(emu: Emulator) -> None:
    deployment(emu, "billing", "plain", annotations={names.KEY_ALGORITHM_ANNOTATION: "rsa-3072",
                                                     names.DURATION_ANNOTATION: "720h",
                                                     names.RENEW_BEFORE_ANNOTATION: "100h"})
    deployment(emu, "legacy", "plain", annotations={names.KEY_ALGORITHM_ANNOTATION: "rsa-2048"})
    deployment(emu, "edge", "plain", annotations={names.KEY_ALGORITHM_ANNOTATION: "rsa-3072",
                                                  names.MODE_ANNOTATION: names.MODE_POD_CERTIFICATE})


def test_doctor_warns_of_refused_profiles_and_of_profiles_that_cannot_apply(
        kubeapi: Emulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with healthy_cluster(kubeapi, tmp_path) as cluster:
        _profiled(kubeapi)
        reconciler(kubeapi, Clock(cluster.now), profiles=BOUNDS).run_pass()
        _, out = run(cluster.doctor(*NARROW), capsys)
    assert line(out, ACCEPTED).startswith("⚠")
    assert "plain/legacy-tls" in block(out, ACCEPTED)
    assert "'rsa-2048' refused" in block(out, ACCEPTED)
    assert line(out, APPLIED).startswith("✔")
    assert line(out, APPLIES).startswith("⚠")
    assert "Deployment/plain/edge" in block(out, APPLIES)


def test_doctor_given_other_bounds_than_the_reconcilers_says_the_certificate_is_not_its_profile(
        kubeapi: Emulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with healthy_cluster(kubeapi, tmp_path) as cluster:
        _profiled(kubeapi)
        reconciler(kubeapi, Clock(cluster.now), profiles=BOUNDS).run_pass()
        _, out = run(cluster.doctor(), capsys)  # all six allowed: legacy's rsa-2048 would be issued
    assert line(out, APPLIED).startswith("⚠")
    assert "legacy-tls: its key is ecdsa-p256, its profile asks for rsa-2048" in block(out, APPLIED)


def test_status_shows_the_profiles_renewal_time_and_the_refusal(
        kubeapi: Emulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with healthy_cluster(kubeapi, tmp_path) as cluster:
        _profiled(kubeapi)
        reconciler(kubeapi, Clock(cluster.now), profiles=BOUNDS).run_pass()
        flags = ["--server", kubeapi.url, "--namespace", OWN_NS, *NARROW, "-o", "json"]
        code, out = run(["status", "plain/billing", *flags], capsys)
        assert code == 0, out
        certificate = json.loads(out)["certificate"]
        renew_at, not_after = (certificate[k] for k in ("renew_at", "not_after"))
        assert datetime.fromisoformat(not_after) - datetime.fromisoformat(renew_at) == timedelta(hours=100)
        _, out = run(["status", "plain/legacy", *flags], capsys)
    conditions = {c["reason"]: c for c in json.loads(out)["conditions"]}
    assert "not allowed by the operator" in conditions["ProfileRefused"]["message"]
