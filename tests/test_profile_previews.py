"""Issue 39, point 3: what a certificate profile will give is said before the pods exist, judged by the same
bounds the reconciler holds it to: a server-side dry run's warnings (through /validate's real route) and
`tls-injector inject`'s warnings. In the pod-certificate mode, where the kubelet makes the key, the profile
does not apply, and that is said."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.reviews import review
from tls_injector import names
from tls_injector.cli import admission_handlers
from tls_injector.injection import InjectionOptions
from tls_injector.injection.preview import what_pods_get
from tls_injector.injection.profile import ProfileBounds
from tls_injector.settings import ServeSettings

ROOT = Path(__file__).resolve().parents[1]
NARROW = ProfileBounds(allowed_key_algorithms=("ecdsa-p256", "rsa-3072"))


def _template(annotations: dict[str, str]) -> dict[str, Any]:
    return {"labels": {"app": "billing", names.INJECT_LABEL: "true"}, "annotations": annotations}


def _deployment(annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "billing", "namespace": "team-a"},
            "spec": {"selector": {"matchLabels": {"app": "billing"}},
                     "template": {"metadata": _template(annotations),
                                  "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}}}}


def test_the_dry_run_says_the_profile_and_each_refusal() -> None:
    asked = {names.KEY_ALGORITHM_ANNOTATION: "rsa-2048", names.DURATION_ANNOTATION: "720h"}
    lines = what_pods_get("Deployment", "billing", _template(asked), InjectionOptions(profiles=NARROW))
    assert lines[1] == ("tls-injector: the certificate profile key-algorithm=ecdsa-p256,duration=720h,"
                        "renew-before=280h")
    assert lines[2].startswith("tls-injector: tls-injector.io/key-algorithm 'rsa-2048' refused: is not allowed")
    assert all(len(line) <= 256 for line in lines)


def test_no_profile_asked_adds_no_line() -> None:
    assert len(what_pods_get("Deployment", "billing", _template({}), InjectionOptions())) == 1


def test_in_the_pod_certificate_mode_the_profile_is_said_not_to_apply() -> None:
    asked = {names.KEY_ALGORITHM_ANNOTATION: "rsa-3072", names.MODE_ANNOTATION: names.MODE_POD_CERTIFICATE}
    lines = what_pods_get("Deployment", "billing", _template(asked), InjectionOptions(pod_certificates=True))
    assert "do not apply to pod certificates" in lines[1]
    assert len(lines) == 2


@pytest.mark.parametrize("value", ["x" * (1 << 20), "１h", "-1h"])
def test_a_hostile_value_is_a_short_warning(value: str) -> None:
    lines = what_pods_get("Deployment", "billing", _template({names.DURATION_ANNOTATION: value}), InjectionOptions())
    assert "refused" in lines[2]
    assert all(len(line) <= 256 for line in lines)


def test_a_server_side_dry_run_through_validate_carries_the_warnings() -> None:
    handlers = admission_handlers(ServeSettings(), memo=False, profiles=NARROW)
    new = _deployment({names.KEY_ALGORITHM_ANNOTATION: "rsa-2048"})
    body = json.dumps(review(operation="CREATE", obj=new, kind=("apps", "v1", "Deployment"), namespace="team-a",
                             dry_run=True)).encode()
    response = handlers.validate.answer(body)
    assert response["allowed"] is True
    warnings = response.get("warnings", [])
    assert any("key-algorithm 'rsa-2048' refused" in w for w in warnings), warnings


def test_inject_warns_of_a_refused_profile_under_the_bounds_it_is_given(tmp_path: Path) -> None:
    manifest = tmp_path / "billing.json"
    manifest.write_text(json.dumps(_deployment({names.KEY_ALGORITHM_ANNOTATION: "rsa-2048",
                                                names.DURATION_ANNOTATION: "10000000h"})))
    narrow = subprocess.run([sys.executable, "-m", "tls_injector", "inject", "-f", str(manifest),
                             "--allowed-key-algorithms=ecdsa-p256,rsa-3072"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert narrow.returncode == 0, narrow.stderr
    assert "tls-injector.io/key-algorithm 'rsa-2048' refused" in narrow.stderr
    assert "tls-injector.io/duration '10000000h' refused" in narrow.stderr
    contradictory = subprocess.run([sys.executable, "-m", "tls_injector", "inject", "-f", str(manifest),
                                    "--min-duration=100h", "--default-duration=50h"],
                                   cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert contradictory.returncode == 2
    assert "contradict" in contradictory.stderr


def test_check_says_a_changed_profile_the_reconciler_will_refuse(tmp_path: Path) -> None:
    """`tls-injector check` judges an update as a server-side dry run does, profile lines included."""
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(_deployment({})))
    new.write_text(json.dumps(_deployment({names.KEY_ALGORITHM_ANNOTATION: "rsa-2048"})))
    done = subprocess.run([sys.executable, "-m", "tls_injector", "check", "--old", str(old), "--new", str(new),
                           "--allowed-key-algorithms=ecdsa-p256,rsa-3072"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr  # allowed: no /validate rule on profiles (injection.md)
    assert "tls-injector.io/key-algorithm 'rsa-2048' refused" in done.stdout


def test_the_dry_run_says_the_key_mode_and_refuses_one_outside_the_set() -> None:
    lines = what_pods_get("Deployment", "billing", _template({names.KEY_MODE_ANNOTATION: "0440"}), InjectionOptions())
    said = [line for line in lines if names.KEY_MODE_ANNOTATION in line]
    assert len(said) == 1
    assert "mode 0440" in said[0]
    assert "fsGroup" in said[0]
    assert all(len(line) <= 256 for line in lines)
    pod_certs = what_pods_get("Deployment", "billing", _template(
        {names.KEY_MODE_ANNOTATION: "0440", names.MODE_ANNOTATION: names.MODE_POD_CERTIFICATE}),
        InjectionOptions(pod_certificates=True))
    (said,) = [line for line in pod_certs if names.KEY_MODE_ANNOTATION in line]
    assert "only where the kubelet knows neither the pod's one user nor its fsGroup" in said
    assert len(said) <= 256
    refused = what_pods_get("Deployment", "billing", _template({names.KEY_MODE_ANNOTATION: "644"}), InjectionOptions())
    assert len(refused) == 1
    assert "will be refused: tls-injector.io/key-mode: '644' is not one of" in refused[0]
    assert not any(names.KEY_MODE_ANNOTATION in line for line in what_pods_get(
        "Deployment", "billing", _template({}), InjectionOptions()))
