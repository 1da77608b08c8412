"""`tls-injector inject`: manifests in, the same manifests out with every opted-in pod template mutated
by the webhook's own plan and patch; other documents untouched, and a second run changes nothing."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any, Protocol

import jsonpatch
import pytest
import yaml

from tests.support.kube_schema import schema_errors
from tests.support.reviews import answer, review
from tls_injector.cli import main
from tls_injector.injection import InjectionOptions, make_mutate_handler
from tls_injector.names import INJECTED_ANNOTATION, SECRET_NAME_ANNOTATION

LABELS = 'labels: {app: web, tls-injector.io/inject: "true"}'
SERVICE = """# the Service stays exactly as written, comments included
apiVersion: v1
kind: Service
metadata: {name: web}   # flow style kept
spec: {ports: [{port: 443}]}
"""


def workload(kind: str, api: str, *, nest: str = "template") -> str:
    body = f"""apiVersion: {api}
kind: {kind}
metadata: {{name: web}}
spec:
  selector: {{matchLabels: {{app: web}}}}
  {nest}:
    metadata:
      {LABELS}
    spec:
      containers: [{{name: app, image: nginx}}]
"""
    return body


CRONJOB = f"""apiVersion: batch/v1
kind: CronJob
metadata: {{name: nightly}}
spec:
  schedule: "@daily"
  jobTemplate:
    spec:
      template:
        metadata:
          {LABELS}
        spec:
          restartPolicy: OnFailure
          containers: [{{name: job, image: busybox}}]
"""
POD = f"""apiVersion: v1
kind: Pod
metadata:
  name: debug
  {LABELS}
spec:
  containers: [{{name: app, image: nginx}}]
"""
UNLABELLED = """apiVersion: apps/v1
kind: Deployment
metadata: {name: plain}
spec:
  selector: {matchLabels: {app: plain}}
  template:
    metadata: {labels: {app: plain}}
    spec:
      containers: [{name: app, image: nginx}]
"""
KINDS = [("Deployment", "apps/v1"), ("StatefulSet", "apps/v1"), ("DaemonSet", "apps/v1"),
         ("ReplicaSet", "apps/v1"), ("Job", "batch/v1")]
MANIFESTS = "---\n".join([SERVICE, *(workload(k, a) for k, a in KINDS), CRONJOB, POD, UNLABELLED])


class Cli(Protocol):
    def __call__(self, *argv: str, stdin: str = "") -> tuple[int, str, str]: ...


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """`tls-injector inject ARGV` in process: (exit code, stdout, stderr)."""

    def invoke(*argv: str, stdin: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = main(["inject", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def templates(text: str) -> dict[str, dict[str, Any]]:
    found = {}
    for doc in yaml.safe_load_all(text):
        spec = doc.get("spec", {})
        found.setdefault(doc["kind"], doc if doc["kind"] == "Pod" else (
            spec["jobTemplate"]["spec"]["template"] if doc["kind"] == "CronJob" else spec.get("template")))
    return found


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    path = tmp_path / "app.yaml"
    path.write_text(MANIFESTS)
    return path


def test_every_kind_of_pod_template_is_injected_and_other_documents_are_untouched(
    run: Cli, manifests: Path
) -> None:
    code, out, err = run("-f", str(manifests))
    assert (code, err) == (0, "")
    assert out.startswith(SERVICE), "untouched, and no `---` added in front"
    injected = templates(out)
    for kind in ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod"]:
        template = injected[kind]
        assert [m["mountPath"] for m in template["spec"]["containers"][0]["volumeMounts"]] == [
            "/etc/tls-injector/certs", "/etc/tls-injector/trust"], kind
        record = json.loads(template["metadata"]["annotations"][INJECTED_ANNOTATION])
        assert record["secret"] == {"CronJob": "nightly-tls", "Pod": "debug-tls"}.get(kind, "web-tls"), kind
    assert injected["CronJob"]["metadata"]["annotations"][SECRET_NAME_ANNOTATION] == "nightly-tls"
    assert UNLABELLED.strip() in out
    for doc in yaml.safe_load_all(out):
        assert schema_errors(doc) == [], doc["kind"]


def test_a_second_run_changes_nothing(run: Cli, manifests: Path) -> None:
    _, first, _ = run("-f", str(manifests))
    code, second, _ = run("-f", "-", stdin=first)
    assert code == 0
    assert second == first


def test_the_pod_is_mutated_exactly_as_the_webhook_mutates_it(
    run: Cli, manifests: Path
) -> None:
    _, out, _ = run("-f", str(manifests))
    pod = yaml.safe_load(POD)
    response = answer(make_mutate_handler(InjectionOptions()), review(obj=pod))
    webhook = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    assert templates(out)["Pod"] == webhook


def test_all_injects_unlabelled_templates_as_an_opted_in_namespace_would(
    run: Cli, tmp_path: Path
) -> None:
    opted_out = UNLABELLED.replace("{app: plain}}", '{app: plain, tls-injector.io/inject: "false"}}')
    path = tmp_path / "m.yaml"
    path.write_text(UNLABELLED + "---\n" + opted_out.replace("name: plain", "name: out"))
    _, out, _ = run("--all", "-f", str(path))
    plain, out_doc = yaml.safe_load_all(out)
    assert "volumes" in plain["spec"]["template"]["spec"]
    assert "volumes" not in out_doc["spec"]["template"]["spec"]


def test_a_namespace_the_input_opts_in_injects_its_unlabelled_templates(run: Cli, tmp_path: Path) -> None:
    namespace = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: {tls-injector.io/inject: enabled}}\n"
    inside = UNLABELLED.replace("{name: plain}", "{name: plain, namespace: shop}")
    elsewhere = UNLABELLED.replace("{name: plain}", "{name: other, namespace: default}")
    opted_out = inside.replace("name: plain,", "name: out,").replace(
        "{app: plain}}", '{app: plain, tls-injector.io/inject: "false"}}')
    path = tmp_path / "m.yaml"
    path.write_text("---\n".join([namespace, inside, elsewhere, opted_out]))
    code, out, _ = run("-f", str(path))
    assert code == 0
    _, shop, other, out_doc = yaml.safe_load_all(out)
    assert shop["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == "plain-tls"
    assert "volumes" not in other["spec"]["template"]["spec"]
    assert "volumes" not in out_doc["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("kind: [unclosed", "bad.yaml:1:16: expected ',' or ']', but got '<stream end>'"),
        (POD.replace("name: app", "name: app, volumeMounts: [{name: x, mountPath: /etc/tls-injector/certs}]"),
         "Pod debug: container 'app' already mounts volume 'x'"),
    ],
)
def test_bad_input_is_an_error_message_and_no_output(
    run: Cli, tmp_path: Path, content: str, says: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    code, out, err = run("-f", str(path))
    assert (code, out) == (2, "")
    assert says in err
    assert err.startswith(f"tls-injector inject: {path}:")
    assert err.count("\n") == 1


def test_a_missing_file_is_an_error_message(run: Cli, tmp_path: Path) -> None:
    code, out, err = run("-f", str(tmp_path / "absent.yaml"))
    assert (code, out) == (2, "")
    assert "absent.yaml" in err


def test_warnings_go_to_stderr_and_the_output_stays_clean(run: Cli) -> None:
    pod = POD.replace("name: app, image: nginx", "name: app, image: nginx, envFrom: [{configMapRef: {name: c}}]")
    pod = pod.replace("  name: debug\n", "  name: debug\n  annotations: {tls-injector.io/env: 'true'}\n")
    code, out, err = run("-f", "-", stdin=pod)
    assert code == 0
    assert "warning: <stdin>: Pod debug: container 'app' uses envFrom" in err
    assert yaml.safe_load(out)["spec"]["containers"][0].get("env") is None


COMMENTED = """# header: kept
---
# the workload, commented
apiVersion: apps/v1
kind: Deployment
metadata:
    name: web    # four-space indents, kept
    labels: {app: web}
spec:
    selector:
        matchLabels: {app: web}
    template:
        metadata:
            labels:
                app: web
                tls-injector.io/inject: "true"   # opted in
        spec:
            containers:
              - name: app   # the app
                image: 'nginx:1.27'
                ports: [{containerPort: 8443}]
"""


def test_a_changed_document_keeps_its_comments_quotes_flow_styles_and_indentation(run: Cli, tmp_path: Path) -> None:
    path = tmp_path / "web.yaml"
    path.write_text(COMMENTED)
    code, out, _ = run("-f", str(path))
    assert code == 0
    assert out.startswith("# header: kept\n---\n# the workload, commented\napiVersion: apps/v1\n")
    for kept in ("    name: web    # four-space indents, kept\n", "    labels: {app: web}\n",
                 '                tls-injector.io/inject: "true"   # opted in\n',
                 "              - name: app   # the app\n", "                image: 'nginx:1.27'\n",
                 "                ports: [{containerPort: 8443}]\n"):
        assert kept in out
    # What was added follows the document's own layout: four-space maps, dashes two in.
    assert "            volumes:\n              - name: tls-injector-cert\n" in out
    assert "                volumeMounts:\n                  - name: tls-injector-cert\n" in out
    (doc,) = yaml.safe_load_all(out)
    assert schema_errors(doc) == []
    assert doc["spec"]["template"]["spec"]["containers"][0]["ports"] == [{"containerPort": 8443}]
    assert run("-f", "-", stdin=out)[1] == out


def test_a_list_is_injected_item_by_item_and_untouched_items_stay_as_they_were(run: Cli) -> None:
    listing = {"apiVersion": "v1", "kind": "List",
               "items": [yaml.safe_load(POD), yaml.safe_load(UNLABELLED), yaml.safe_load(SERVICE)]}
    code, out, _ = run("-f", "-", stdin=json.dumps(listing))
    assert code == 0
    (result,) = yaml.safe_load_all(out)
    pod, plain, service = result["items"]
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["tls-injector-cert", "tls-injector-trust"]
    assert (plain, service) == (yaml.safe_load(UNLABELLED), yaml.safe_load(SERVICE))
    assert schema_errors(pod) == []


def test_a_list_of_lists_is_followed_a_few_levels_and_refused_beyond(run: Cli) -> None:
    nested: dict[str, Any] = yaml.safe_load(POD)
    for _ in range(4):
        nested = {"apiVersion": "v1", "kind": "List", "items": [nested]}
    code, out, _ = run("-f", "-", stdin=json.dumps(nested))
    assert code == 0
    assert "tls-injector-cert" in out
    code, out, err = run("-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [nested]}))
    assert (code, out) == (2, "")
    assert "nested more than 4 deep" in err


def test_a_directory_is_read_recursively_in_sorted_order_yaml_yml_and_json_only(run: Cli, tmp_path: Path) -> None:
    (tmp_path / "b" / "deeper").mkdir(parents=True)
    (tmp_path / "b" / "deeper" / "pod.yml").write_text(POD)
    (tmp_path / "a.json").write_text(json.dumps(yaml.safe_load(UNLABELLED)))
    (tmp_path / "c.yaml").write_text(SERVICE)
    (tmp_path / "notes.txt").write_text("kind: [not yaml")
    code, out, err = run("-f", str(tmp_path))
    assert (code, err) == (0, "")
    kinds = [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out)]
    assert kinds == [("Deployment", "plain"), ("Pod", "debug"), ("Service", "web")]
    assert "tls-injector-cert" in out
    assert out.endswith(SERVICE)


def test_aliases_cannot_blow_a_small_file_up_into_a_huge_template(run: Cli) -> None:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
              f"*a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 9)]
    bomb = "\n".join(["apiVersion: v1", "kind: Pod", "metadata:", "  name: debug",
                      '  labels: {tls-injector.io/inject: "true"}', "spec:",
                      *(f"  {line}" for line in lines), "  containers: [{name: app, image: nginx}]"])
    code, out, err = run("-f", "-", stdin=bomb)
    assert (code, out) == (2, "")
    assert "larger than 100000 nodes" in err


def test_stdin_can_be_named_only_once(run: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run("-f", "-", "-f", "-")
    assert exit_info.value.code == 2
    assert "usage: tls-injector inject" in capsys.readouterr().err


def test_offline_pod_certificates_project_what_the_webhook_projects_and_a_second_run_adds_nothing(
    run: Cli, tmp_path: Path
) -> None:
    pod = yaml.safe_load(POD)
    pod["metadata"].setdefault("annotations", {})["tls-injector.io/mode"] = "pod-certificate"
    source = tmp_path / "pod.yaml"
    source.write_text(yaml.safe_dump(pod))
    _, without, _ = run("-f", str(source))  # a cluster not known to serve them: the Secret
    assert "secret" in templates(without)["Pod"]["spec"]["volumes"][-2]
    code, out, _ = run("-f", str(source), "--pod-certificates", "on")
    assert code == 0
    options = InjectionOptions(pod_certificates=True)
    response = answer(make_mutate_handler(options), review(obj=pod))
    assert templates(out)["Pod"] == jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    assert "podCertificate" in str(templates(out)["Pod"]["spec"]["volumes"])
    assert run("-f", "-", "--pod-certificates", "on", stdin=out)[1] == out
