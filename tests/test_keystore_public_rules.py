"""Issue 39 points 4 and 5: the transitions of the keystore and public-roots choices, judged by `check`
(the same built-in rules /validate and the exported admission policies carry): asking for either in place
is allowed; turning the keystore off, changing where its password comes from, turning the public roots
off, or removing a Namespace's public-roots label is refused with the reason."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tls_injector.cli import main
from tls_injector.injection import InjectionOptions
from tls_injector.injection.preview import what_pods_get

KEYSTORE, PASSWORD = "tls-injector.io/keystore", "tls-injector.io/keystore-password-secret"
PUBLIC = "tls-injector.io/public-roots"


def _deployment(annotations: dict[str, str], *, kind: str = "Deployment") -> dict[str, Any]:
    template = {"metadata": {"labels": {"app": "web", "tls-injector.io/inject": "true"}, "annotations": annotations},
                "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}}
    if kind == "CronJob":
        return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "web", "namespace": "shop"},
                "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": template}}}}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template}}


def _namespace(labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": labels}}


def _check(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: dict[str, Any],
           new: dict[str, Any]) -> tuple[int, str]:
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old))
    (tmp_path / "new.yaml").write_text(yaml.safe_dump(new))
    code = main(["check", "--old", str(tmp_path / "old.yaml"), "--new", str(tmp_path / "new.yaml")])
    out, err = capsys.readouterr()
    return code, out + err


ON = {KEYSTORE: "pkcs12"}
ON_PW = {KEYSTORE: "pkcs12", PASSWORD: "web-keystore-password"}


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "DaemonSet", "CronJob"])
@pytest.mark.parametrize("case", [
    ({}, ON, True), ({}, ON_PW, True), (ON, ON, True), (ON, {KEYSTORE: " pkcs12 "}, True), (ON_PW, ON_PW, True),
    (ON, {}, False), (ON_PW, {PASSWORD: "web-keystore-password"}, False), (ON, ON_PW, False), (ON_PW, ON, False),
    (ON_PW, {**ON_PW, PASSWORD: "another-workloads-password"}, False), (ON, {KEYSTORE: "jks"}, False),
    ({PUBLIC: "true"}, {PUBLIC: " True "}, True), ({}, {PUBLIC: "true"}, True), ({PUBLIC: "false"}, {}, True),
    ({PUBLIC: "true"}, {}, False), ({PUBLIC: "true"}, {PUBLIC: "false"}, False),
])
def test_keystore_and_public_roots_may_be_asked_for_in_place_but_not_dropped_or_swapped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str,
        case: tuple[dict[str, str], dict[str, str], bool]) -> None:
    old, new, allowed = case
    code, said = _check(tmp_path, capsys, _deployment(old, kind=kind), _deployment(new, kind=kind))
    assert code == (0 if allowed else 1), said
    if not allowed:
        assert ("tls-injector.io/keystore" in said) if KEYSTORE in old else ("tls-injector.io/public-roots" in said)
        assert "delete and recreate" in said


@pytest.mark.parametrize(("old", "new", "allowed"), [
    ({}, {PUBLIC: "true"}, True), ({PUBLIC: "true"}, {PUBLIC: "true"}, True),
    ({PUBLIC: "true"}, {}, False), ({PUBLIC: "true"}, {PUBLIC: "false"}, False),
])
def test_a_namespaces_public_roots_label_may_be_added_but_not_removed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], old: dict[str, str], new: dict[str, str],
        allowed: bool) -> None:
    code, said = _check(tmp_path, capsys, _namespace(old), _namespace(copy.deepcopy(new)))
    assert code == (0 if allowed else 1), said


def _preview(annotations: dict[str, str]) -> tuple[str, ...]:
    template = _deployment(annotations)["spec"]["template"]["metadata"]
    return what_pods_get("Deployment", "web", template, InjectionOptions())


def test_the_dry_run_preview_and_inject_say_what_the_keystore_and_public_roots_give() -> None:
    _, keystore = _preview(ON)
    assert keystore == ("tls-injector: and a JVM keystore: /etc/tls-injector/certs/keystore.p12 and truststore.p12 "
                        "(PKCS#12), a generated password beside them (keystore.password)")
    _, named = _preview(ON_PW)
    assert "key keystore.password of your Secret 'web-keystore-password'" in named
    _, public = _preview({PUBLIC: "true"})
    assert public == ("tls-injector: and the public roots: /etc/tls-injector/trust/ca-bundle-with-public-roots.pem "
                      "(our CAs and certifi's roots), named by SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS")
    [_, jks] = _preview({KEYSTORE: "jks"})
    assert "'jks' is not \"pkcs12\"; no keystore is written" in jks
    [trust_only] = _preview({**ON, "tls-injector.io/mode": "trust-only"})  # no Secret: no keystore line
    assert "trust alone" in trust_only


def test_inject_warns_of_a_keystore_that_will_not_be_written(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "web.yaml"
    manifest.write_text(yaml.safe_dump(_deployment({KEYSTORE: "pkcs12", "tls-injector.io/mode": "trust-only"})))
    assert main(["inject", "-f", str(manifest)]) == 0
    out, err = capsys.readouterr()
    assert "tls-injector.io/keystore: no keystore in the trust-only mode" in out + err
