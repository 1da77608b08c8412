"""`inject` over commented manifests: the output is the input plus lines, and no comment leaves the
thing it was written next to."""

from __future__ import annotations

import difflib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube_schema import schema_errors
from tls_injector.cli import main

CORPUS = Path(__file__).parent / "corpus"


class KubernetesLoader(yaml.SafeLoader):
    """YAML read as Kubernetes reads it (converted to JSON): an unquoted 2030-01-01 stays a string."""


KubernetesLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
FILES = sorted(CORPUS.glob("*.yaml"))
CERTS = "/etc/tls-injector/certs"


def inject(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["inject", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def content(line: str) -> bool:
    """A line that is neither blank nor a comment (a `---` or `...` marker counts)."""
    return bool(line.strip()) and not line.lstrip().startswith("#")


def column(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def comment_neighbours(lines: list[str]) -> dict[int, tuple[str, int]]:
    """For each full-line comment: ("heads", i) with the content line it stands before, or ("trails", i)
    with the line that opens the block it closes. A comment heads the next line when it is not indented
    deeper than that line (`# The Service` before `---`, `# the main container` before `- name: api`);
    otherwise it trails the block above at its own indentation (`# more steps later` under the items
    of `command:`, before the shallower `containers:`), opened by the nearest line above not deeper."""
    found = {}
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("#"):
            continue
        after = next((j for j in range(i + 1, len(lines)) if content(lines[j])), None)
        if after is not None and column(line) <= column(lines[after]):
            found[i] = ("heads", after)
        else:
            found[i] = ("trails", opener(lines, i))
    return found


def opener(lines: list[str], i: int) -> int:
    return next(j for j in range(i - 1, -1, -1) if content(lines[j]) and column(lines[j]) <= column(lines[i]))


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_injecting_a_commented_manifest_only_adds_lines_and_every_comment_stays_where_it_was(
    capsys: pytest.CaptureFixture[str], path: Path
) -> None:
    code, out, err = inject(capsys, "-f", str(path))
    assert (code, err) == (0, "")
    source, result = path.read_text().splitlines(), out.splitlines()
    matcher = difflib.SequenceMatcher(a=source, b=result, autojunk=False)
    changes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    assert changes, "something was injected"
    assert {op[0] for op in changes} == {"insert"}, "\n".join(difflib.unified_diff(source, result, lineterm=""))
    # Where each input line went: the output, read without the inserted lines, is the input.
    position = {}
    for tag, a0, a1, b0, _ in matcher.get_opcodes():
        if tag == "equal":
            position.update({a0 + k: b0 + k for k in range(a1 - a0)})
    for i, (how, j) in comment_neighbours(source).items():
        at = position[i]
        if how == "heads":
            following = next(k for k in range(at + 1, len(result)) if content(result[k]))
            assert following == position[j], f"{source[i]!r} no longer stands before {source[j]!r}"
        else:
            assert opener(result, at) == position[j], f"{source[i]!r} no longer closes the block of {source[j]!r}"
    for document in yaml.load_all(out, Loader=KubernetesLoader):
        if document is not None:
            assert schema_errors(document) == [], document["kind"]


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_opted_in_template_of_the_corpus_is_injected_and_a_second_run_changes_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, path: Path
) -> None:
    _, out, _ = inject(capsys, "-f", str(path))
    opted_in = [d for d in yaml.safe_load_all(path.read_text()) if _template(d) is not None]
    assert opted_in
    for document in yaml.safe_load_all(out):
        template = _template(document)
        if template is not None:
            mounts = [m["mountPath"] for c in template["spec"]["containers"] for m in c.get("volumeMounts", [])]
            assert CERTS in mounts, document["metadata"]["name"]
    monkeypatch.setattr("sys.stdin", io.StringIO(out))
    assert inject(capsys, "-f", "-") == (0, out, "")


def _template(document: Any) -> dict[str, Any] | None:
    if not isinstance(document, dict):
        return None
    spec = document.get("spec") or {}
    found = {"Pod": document, "CronJob": (spec.get("jobTemplate") or {}).get("spec", {}).get("template")}.get(
        document["kind"], spec.get("template"))
    return found if isinstance(found, dict) and "containers" in (found.get("spec") or {}) else None


DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"}},
    "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
        "metadata": {"labels": {"app": "web", "tls-injector.io/inject": "true"}},
        "spec": {"containers": [{"name": "app", "image": "nginx", "ports": [], "env": [{"name": "X", "value": "é"}]}]},
    }},
}


@pytest.mark.parametrize(
    ("style", "write"),
    [
        ("kubectl -o json (4 spaces)", lambda v: json.dumps(v, indent=4, ensure_ascii=False) + "\n"),
        ("jq (2 spaces)", lambda v: json.dumps(v, indent=2, ensure_ascii=False) + "\n"),
        ("one line", lambda v: json.dumps(v, ensure_ascii=False)),
        ("one line, compact", lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)),
        ("ASCII escapes", lambda v: json.dumps(v, indent=4) + "\n"),
    ],
)
def test_json_in_gives_json_out_written_the_same_way(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, style: str, write: Any
) -> None:
    source = tmp_path / "deploy.json"
    source.write_text(write(DEPLOYMENT))
    as_yaml = tmp_path / "deploy.yaml"
    as_yaml.write_text(yaml.safe_dump(DEPLOYMENT))
    code, out, err = inject(capsys, "-f", str(source))
    assert (code, err) == (0, "")
    injected = json.loads(out)
    assert injected == yaml.safe_load(inject(capsys, "-f", str(as_yaml))[1]), "the same injection as for YAML"
    assert injected != DEPLOYMENT
    assert out == write(injected).rstrip("\n") + "\n", style  # a line break at the end, always


def test_several_json_files_give_a_stream_of_json_values(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / f"{name}.json").write_text(json.dumps(DEPLOYMENT | {"metadata": {"name": name}}, indent=2))
    code, out, _ = inject(capsys, "-f", str(tmp_path))
    assert code == 0
    decoder, values, at = json.JSONDecoder(), [], 0
    while at < len(out):
        value, at = decoder.raw_decode(out, at)
        values.append(value["metadata"]["name"])
        at += len(out[at:]) - len(out[at:].lstrip())
    assert values == ["a", "b"]


def test_a_document_with_anchors_is_written_whole_and_keeps_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = tmp_path / "anchors.yaml"
    source.write_text("""apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector:
    matchLabels: &labels
      app: web
  template:
    metadata:
      labels:
        <<: *labels
        tls-injector.io/inject: "true"
    spec:
      containers:
      - name: app   # the app
        image: nginx
""")
    code, out, err = inject(capsys, "-f", str(source))
    assert (code, err) == (0, "")
    assert "    matchLabels: &labels\n" in out
    assert "        <<: *labels\n" in out
    assert "      - name: app   # the app\n" in out
    (document,) = yaml.safe_load_all(out)
    assert document["spec"]["template"]["metadata"]["labels"] == {"app": "web", "tls-injector.io/inject": "true"}
    assert schema_errors(document) == []
    assert CERTS in str(document["spec"]["template"]["spec"]["containers"][0]["volumeMounts"])


FLOW = """apiVersion: apps/v1
kind: Deployment
metadata: {name: api, labels: {app: "api"}}
spec:
  selector: {matchLabels: {app: 'api'}}
  template:
    metadata: {labels: {app: "api", tls-injector.io/inject: "true"}}   # flow, double-quoted
    spec:
      containers: [{name: api, image: "example/api:1",  ports: [{containerPort: 8443}]}]
      volumes: [ ]
"""


def test_what_is_added_to_a_flow_collection_keeps_every_character_of_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A flow line must change to take what is added; the characters already on it (quotes, spacing, the
    comment) all stay: compared character by character, the output only inserts."""
    source = tmp_path / "flow.yaml"
    source.write_text(FLOW)
    code, out, err = inject(capsys, "-f", str(source))
    assert (code, err) == (0, "")
    matcher = difflib.SequenceMatcher(a=FLOW, b=out, autojunk=False)
    assert {op[0] for op in matcher.get_opcodes()} == {"equal", "insert"}, out
    document = yaml.load(out, Loader=KubernetesLoader)
    spec = document["spec"]["template"]["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["tls-injector-cert", "tls-injector-trust"]
    assert spec["containers"][0]["volumeMounts"][0]["mountPath"] == CERTS
    assert schema_errors(document) == []
