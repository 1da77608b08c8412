"""`tls-injector inject` as a command on manifests asking for a client certificate (docs/mtls.md): every
kind of pod template gets the client volume and its read-only mount beside the serving ones, the result is
valid against the Kubernetes schema, a second run changes nothing, and `check` then refuses dropping it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.rules_matrix import ROOT
from tests.support.kube_schema import schema_errors
from tests.test_inject_cli import CRONJOB, KINDS, POD, templates, workload


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tls_injector", *argv], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=False)


@pytest.mark.parametrize(("kind", "source"), [*[(k, workload(k, a)) for k, a in KINDS], ("CronJob", CRONJOB),
                                              ("Pod", POD)], ids=[*(k for k, _ in KINDS), "CronJob", "Pod"])
def test_inject_adds_the_client_volume_and_mount_where_the_template_asks(tmp_path: Path, kind: str,
                                                                         source: str) -> None:
    indent = {"CronJob": 10, "Pod": 2}.get(kind, 6)
    asking = source.replace('tls-injector.io/inject: "true"}',
                            'tls-injector.io/inject: "true"}\n' + " " * indent
                            + 'annotations: {tls-injector.io/client-certificate: "true"}', 1)
    path = tmp_path / "in.yaml"
    path.write_text(asking)
    done = _cli("inject", "-f", str(path))
    assert done.returncode == 0, done.stderr
    template = templates(done.stdout)[kind]
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    secret = "debug-client-tls" if kind == "Pod" else ("nightly-client-tls" if kind == "CronJob" else "web-client-tls")
    assert volumes["tls-injector-client"] == {"name": "tls-injector-client", "secret": {"secretName": secret}}
    for container in template["spec"]["containers"]:
        assert {"name": "tls-injector-client", "mountPath": "/etc/tls-injector/client", "readOnly": True} in \
            container["volumeMounts"]
        assert {"name": "tls-injector-cert", "mountPath": "/etc/tls-injector/certs", "readOnly": True} in \
            container["volumeMounts"]
    for doc in yaml.safe_load_all(done.stdout):
        assert schema_errors(doc) == [], doc
    again = tmp_path / "out.yaml"
    again.write_text(done.stdout)
    second = _cli("inject", "-f", str(again))
    assert (second.returncode, second.stdout) == (0, done.stdout), "a second run changes nothing"
    # Without the annotation, no client volume.
    path.write_text(source)
    plain = _cli("inject", "-f", str(path))
    assert "tls-injector-client" not in plain.stdout


def test_check_refuses_dropping_the_client_certificate_from_injected_manifests(tmp_path: Path) -> None:
    source = workload("Deployment", "apps/v1")
    asking = source.replace('tls-injector.io/inject: "true"}', 'tls-injector.io/inject: "true"}\n' + " " * 6
                            + 'annotations: {tls-injector.io/client-certificate: "true"}', 1)
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(_cli("inject", "-f", str(_write(tmp_path / "a.yaml", asking))).stdout)
    new.write_text(_cli("inject", "-f", str(_write(tmp_path / "b.yaml", source))).stdout)
    done = _cli("check", "--old", str(old), "--new", str(new))
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'rule "workload-client-certificate-transition"' in done.stdout


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
