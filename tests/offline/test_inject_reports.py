"""`tls-injector inject` tells a person what happened: when nothing opted in it says so, and a directory
with bad files reports every one of them, injects the rest and fails at the end."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from tls_injector.cli import main

LABELLED = """apiVersion: apps/v1
kind: Deployment
metadata: {name: web.v2}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web, tls-injector.io/inject: "true"}
    spec:
      containers: [{name: app, image: nginx}]
"""
UNLABELLED = LABELLED.replace(', tls-injector.io/inject: "true"', "")
SERVICE = "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 443}]}\n"
# Refused by the plan: the container already mounts a volume at the certificate's path.
REFUSED = LABELLED.replace("name: app, image: nginx",
                           "name: app, image: nginx, volumeMounts: [{name: x, mountPath: /etc/tls-injector/certs}]")


def run(capsys: pytest.CaptureFixture[str], *argv: str, stdin: str = "") -> tuple[int, str, str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdin", io.StringIO(stdin))
        code = main(["inject", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_unlabelled_templates_are_printed_unchanged_and_the_run_says_none_opted_in(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "-f", "-", stdin=UNLABELLED + "---\n" + UNLABELLED.replace("web.v2", "api"))
    assert code == 0
    assert out == UNLABELLED + "---\n" + UNLABELLED.replace("web.v2", "api")
    assert err == ('tls-injector inject: 0 templates opted in: none of the 2 pod templates is labelled '
                   'tls-injector.io/inject: "true" (--all injects every template not labelled "false", as in a '
                   'namespace that opted in); printed unchanged\n')


def test_input_without_pod_templates_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "-f", "-", stdin=SERVICE)
    assert (code, out) == (0, SERVICE)
    assert err.startswith("tls-injector inject: 0 templates opted in: the input has no pod template")


def test_a_run_that_injects_says_nothing_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "-f", "-", stdin=UNLABELLED + "---\n" + LABELLED.replace("web.v2", "api"))
    assert (code, err) == (0, "")
    assert "volumes" in out


def test_a_directory_with_bad_files_reports_each_injects_the_rest_and_fails_at_the_end(
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    (tmp_path / "a-good.yaml").write_text(LABELLED)
    (tmp_path / "b-broken.yaml").write_text("kind: [unclosed\n")
    (tmp_path / "c-list.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "d-refused.yaml").write_text(REFUSED)
    (tmp_path / "e-empty.json").write_text("{")
    (tmp_path / "f-service.yaml").write_text(SERVICE)
    code, out, err = run(capsys, "-f", str(tmp_path))
    assert code == 2
    good, service = yaml.safe_load_all(out)
    assert good["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == "web.v2-tls"
    assert service == yaml.safe_load(SERVICE)
    lines = err.splitlines()
    assert [line.split(":")[1].strip().rsplit("/", 1)[-1] for line in lines] == [
        "b-broken.yaml", "c-list.yaml", "e-empty.json", "d-refused.yaml"]
    assert all(line.startswith(f"tls-injector inject: {tmp_path}/") for line in lines)
    assert "Deployment web.v2: container 'app' already mounts volume 'x'" in err, "named as written, no repr"


def test_every_location_is_tried_and_a_missing_one_fails_the_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    (tmp_path / "good.yaml").write_text(LABELLED)
    code, out, err = run(capsys, "-f", str(tmp_path / "missing.yaml"), "-f", str(tmp_path / "good.yaml"))
    assert code == 2
    assert "volumes" in out
    assert err == f"tls-injector inject: {tmp_path / 'missing.yaml'}: cannot read: No such file or directory\n"


def test_a_refused_file_leaves_no_warning_or_count_behind(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    env_from = LABELLED.replace("name: app, image: nginx",
                                "name: app, image: nginx, envFrom: [{configMapRef: {name: c}}]")
    env_from = env_from.replace("    metadata:\n", "    metadata:\n      annotations: {tls-injector.io/env: 'true'}\n")
    (tmp_path / "mixed.yaml").write_text(env_from + "---\n" + REFUSED.replace("web.v2", "other"))
    code, out, err = run(capsys, "-f", str(tmp_path))
    assert (code, out) == (2, "")
    assert "warning" not in err
    assert "opted in" not in err
    assert err.count("\n") == 1
