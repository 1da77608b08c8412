"""The client certificate is guarded like the serving one: /validate over real HTTPS, the exported
ValidatingAdmissionPolicies, the shipped webhook entries' routing, `check` as a command, and the dry-run
preview naming the client Secret and its mount (docs/mtls.md)."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.rules_matrix import (
    FIX,
    OFF,
    ON_DEFAULT,
    ON_X,
    ON_Y,
    OPTED_OUT,
    OPTED_OUT_X,
    ROOT,
    UNLABELLED_X,
    UNLABELLED_Y,
    WORKLOAD_KINDS,
    TlsState,
    templated,
)
from tests.shipping.test_webhooks import ENABLED_NS, ENABLED_PATH, OTHER_NAMESPACES, RESOURCES, _sent_to
from tests.support.reviews import review
from tests.support.server import RunningServer, running_server
from tests.test_rules_export import exported
from tests.test_validate_https import post
from tls_injector.cli import admission_handlers
from tls_injector.names import CLIENT_CERT_ANNOTATION, MODE_ANNOTATION, MODE_POD_CERTIFICATE
from tls_injector.settings import ServeSettings

CLIENT_WARNING = "pick up their client certificate"
# (TLS state, client-certificate annotation or None) of a pod template.
ClientState = tuple[TlsState, str | None]


@dataclass(frozen=True)
class Case:
    name: str
    old: ClientState
    new: ClientState
    allowed: bool
    warns: bool = False
    client_rule: bool = True  # whether the client rule is among those that deny it


# Outside enabled namespaces: TLS is the label "true"; a client certificate is issued only with it.
OTHER_CASES = [
    Case("kept", (ON_X, "true"), (ON_X, "true"), allowed=True),
    Case("kept, written differently", (ON_X, "true"), (ON_X, " True "), allowed=True),
    Case("asked for in place", (ON_X, None), (ON_X, "true"), allowed=True, warns=True),
    Case("asked for from false", (ON_X, "false"), (ON_X, "true"), allowed=True, warns=True),
    Case("asked for together with TLS", (OFF, None), (ON_X, "true"), allowed=True, warns=True),
    Case("turned off by removing the annotation", (ON_X, "true"), (ON_X, None), allowed=False),
    Case("turned off by false", (ON_X, "true"), (ON_X, "false"), allowed=False),
    Case("turned off by a value /mutate refuses", (ON_X, "true"), (ON_X, "yes"), allowed=False),
    Case("swapped: the secret-name changes", (ON_X, "true"), (ON_Y, "true"), allowed=False),
    Case("swapped: the default name is written out", (ON_DEFAULT, "true"), (ON_X, "true"), allowed=False),
    Case("removed together with TLS", (ON_X, "true"), (OFF, None), allowed=False),
    # No client certificate was issued for these: nothing to break.
    Case("dropped where TLS is off", (OFF, "true"), (OFF, None), allowed=True),
    Case("dropped where the template opted out", (OPTED_OUT_X, "true"), (OPTED_OUT_X, None), allowed=True),
    Case("a refused value dropped", (ON_X, "yes"), (ON_X, None), allowed=True),
    # TLS itself is refused there (the serving rule), the client rule has nothing to add.
    Case("TLS swapped without a client certificate", (ON_X, None), (ON_Y, None), allowed=False, client_rule=False),
]
# In namespaces labelled enabled: TLS is on unless the label is "false".
ENABLED_CASES = [
    Case("kept on an unlabelled template", (OFF, "true"), (OFF, "true"), allowed=True),
    Case("kept while a redundant true is added", (OFF, "true"), (ON_DEFAULT, "true"), allowed=True),
    Case("asked for in place", (UNLABELLED_X, None), (UNLABELLED_X, "true"), allowed=True, warns=True),
    Case("asked for while the opt-out is dropped", (OPTED_OUT_X, None), (UNLABELLED_X, "true"), allowed=True,
         warns=True),
    Case("turned off on an unlabelled template", (OFF, "true"), (OFF, None), allowed=False),
    Case("turned off by false", (UNLABELLED_X, "true"), (UNLABELLED_X, "false"), allowed=False),
    Case("swapped on an unlabelled template", (UNLABELLED_X, "true"), (UNLABELLED_Y, "true"), allowed=False),
    Case("removed by opting the template out", (OFF, "true"), (OPTED_OUT, "true"), allowed=False),
    Case("dropped where the template opted out", (OPTED_OUT_X, "true"), (OPTED_OUT_X, None), allowed=True),
]
KINDS = (*WORKLOAD_KINDS, "CronJob")


def with_client(kind: str, state: ClientState) -> dict[str, Any]:
    tls, client = state
    obj = templated(kind, tls)
    if client is not None:
        spec = obj["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else obj["spec"]
        spec["template"]["metadata"].setdefault("annotations", {})[CLIENT_CERT_ANNOTATION] = client
    return obj


def rule_name(kind: str, *, enabled: bool) -> str:
    base = "cronjob-client-certificate-transition" if kind == "CronJob" else "workload-client-certificate-transition"
    return f"enabled-namespace-{base}" if enabled else base


def kind_of(kind: str) -> tuple[str, str, str]:
    return ("batch", "v1", kind) if kind == "CronJob" else ("apps", "v1", kind)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    handlers = admission_handlers(ServeSettings())
    with running_server(tmp_path_factory.mktemp("srv"), validate=handlers.validate,
                        validate_enabled_namespace=handlers.validate_enabled_namespace) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


def _assert_answer(answer: dict[str, Any], case: Case, kind: str, *, enabled: bool) -> None:
    assert answer["allowed"] is case.allowed, answer
    if case.allowed:
        assert any(CLIENT_WARNING in w for w in answer.get("warnings", [])) is case.warns, answer
        return
    message = answer["status"]["message"]
    assert answer["status"]["code"] == 422
    assert (f'rule "{rule_name(kind, enabled=enabled)}"' in message) is case.client_rule, message
    if case.client_rule:
        assert "every server that authenticates this workload's calls would refuse them" in message
    assert FIX in message


ALL = [(f"{kind}: {c.name}", kind, c, False) for kind in KINDS for c in OTHER_CASES] + [
    (f"{kind} in an enabled namespace: {c.name}", kind, c, True) for kind in KINDS for c in ENABLED_CASES]


@pytest.mark.parametrize("dry_run", [False, True], ids=["real", "dry-run"])
@pytest.mark.parametrize("each", ALL, ids=[a[0] for a in ALL])
def test_disabling_or_swapping_the_client_certificate_is_refused_over_https(
        client: httpx.Client, each: tuple[str, str, Case, bool], dry_run: bool) -> None:
    _, kind, case, enabled = each
    old, new = with_client(kind, case.old), with_client(kind, case.new)
    sent = review(operation="UPDATE", obj=new, old=old, kind=kind_of(kind), namespace="shop", dry_run=dry_run)
    _assert_answer(post(client, sent, ENABLED_PATH if enabled else "/validate"), case, kind, enabled=enabled)


@pytest.mark.parametrize(("case_id", "kind", "case", "enabled"), ALL, ids=[a[0] for a in ALL])
def test_the_exported_policies_agree_and_the_shipped_entries_send_what_matters_once(
        case_id: str, kind: str, case: Case, enabled: bool) -> None:
    old, new = with_client(kind, case.old), with_client(kind, case.new)
    judged = exported(old, new, enabled=enabled)
    assert judged[0] is case.allowed
    # The policies warn for the serving rule too (enable TLS and ask in one step): at least the client's.
    assert judged[1] is (case.warns or (case.allowed and judged[1]))
    matters = not case.allowed or case.warns
    path, others = (ENABLED_PATH, "/validate") if enabled else ("/validate", ENABLED_PATH)
    for ns_labels in [ENABLED_NS] if enabled else list(OTHER_NAMESPACES):
        sent = _sent_to(RESOURCES[kind], path, old, new, ns_labels)
        assert sent == 1 if matters else sent <= 1
        assert _sent_to(RESOURCES[kind], others, old, new, ns_labels) == 0


def test_an_unlabelled_template_dropping_only_the_client_annotation_in_an_enabled_namespace_is_sent() -> None:
    """Neither the label nor secret-name nor mode is on it: the client annotation alone must send it."""
    for kind in KINDS:
        old, new = with_client(kind, (OFF, "true")), with_client(kind, (OFF, None))
        assert _sent_to(RESOURCES[kind], ENABLED_PATH, old, new, ENABLED_NS) == 1


def test_a_denial_names_the_annotation_going_absent(client: httpx.Client) -> None:
    sent = review(operation="UPDATE", obj=with_client("Deployment", (ON_X, None)),
                  old=with_client("Deployment", (ON_X, "true")), kind=kind_of("Deployment"), namespace="shop")
    message = post(client, sent)["status"]["message"]
    assert 'spec.template.metadata.annotations["tls-injector.io/client-certificate"]: "true" -> (absent)' in message
    assert 'rule "workload-tls-transition"' not in message  # the serving certificate did not change


def _write(path: Path, obj: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(obj))
    return path


@pytest.mark.parametrize(("old", "new", "status"), [
    ((ON_X, "true"), (ON_X, None), 1),
    ((ON_X, "true"), (ON_Y, "true"), 1),
    ((ON_X, None), (ON_X, "true"), 0),
    ((ON_X, "true"), (ON_X, "true"), 0),
], ids=["disable", "swap", "ask", "unchanged"])
def test_check_refuses_a_client_certificate_disable_or_swap_as_a_command(
        tmp_path: Path, old: ClientState, new: ClientState, status: int) -> None:
    before = _write(tmp_path / "old.yaml", with_client("Deployment", old))
    after = _write(tmp_path / "new.yaml", with_client("Deployment", new))
    done = subprocess.run([sys.executable, "-m", "tls_injector", "check", "--old", str(before), "--new", str(after)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert done.returncode == status, done.stdout + done.stderr
    if status:
        assert "REJECTED: apps/v1 Deployment shop/web" in done.stdout
        assert 'rule "workload-client-certificate-transition"' in done.stdout
    else:
        assert "allowed: apps/v1 Deployment shop/web" in done.stdout


def test_check_judges_a_client_certificate_disable_in_an_enabled_namespace_by_the_enabled_rules(
        tmp_path: Path) -> None:
    before = _write(tmp_path / "old.yaml", with_client("CronJob", (OFF, "true")))
    after = _write(tmp_path / "new.yaml", with_client("CronJob", (OFF, None)))
    argv = [sys.executable, "-m", "tls_injector", "check", "--old", str(before), "--new", str(after)]
    plain = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert plain.returncode == 0, plain.stdout + plain.stderr  # TLS was off there: nothing was issued
    enabled = subprocess.run([*argv, "--namespace-enabled", "shop"], capture_output=True, text=True, cwd=ROOT,
                             timeout=120, check=False)
    assert enabled.returncode == 1, enabled.stdout + enabled.stderr
    assert 'rule "enabled-namespace-cronjob-client-certificate-transition"' in enabled.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_a_server_side_dry_run_names_the_client_secret_and_its_mount(client: httpx.Client, kind: str) -> None:
    obj = with_client(kind, (ON_X, "true"))
    for operation, old in (("CREATE", None), ("UPDATE", copy.deepcopy(obj))):
        sent = review(operation=operation, obj=obj, old=old, kind=kind_of(kind), namespace="shop", dry_run=True)
        answer = post(client, sent)
        assert answer["allowed"] is True
        line, client_line = [w for w in answer["warnings"] if w.startswith("tls-injector: ")]
        assert line.startswith("tls-injector: pods of")
        assert "the certificate of Secret x-tls at /etc/tls-injector/certs" in line
        # Its own warning: each is at most 256 characters, as the apiserver keeps them.
        assert client_line == ("tls-injector: and the client certificate (clientAuth only, from the client CA) of "
                               "Secret x-client-tls at /etc/tls-injector/client, and the client CAs at "
                               "/etc/tls-injector/trust/client-ca-bundle.crt")
    without = review(operation="CREATE", obj=with_client(kind, (ON_X, None)), kind=kind_of(kind), namespace="shop",
                     dry_run=True)
    assert not any("client" in w for w in post(client, without)["warnings"])


def test_a_dry_run_of_a_client_certificate_in_the_pod_certificate_mode_says_its_pods_will_be_refused(
        tmp_path: Path) -> None:
    handlers = admission_handlers(ServeSettings(pod_certificates=True))
    obj = with_client("Deployment", (ON_X, "true"))
    obj["spec"]["template"]["metadata"]["annotations"][MODE_ANNOTATION] = MODE_POD_CERTIFICATE
    with running_server(tmp_path, validate=handlers.validate) as server, server.client() as c:
        sent = review(operation="CREATE", obj=obj, kind=kind_of("Deployment"), namespace="shop", dry_run=True)
        (line,) = post(c, sent)["warnings"]
    assert line.startswith("tls-injector: pods of Deployment web will be refused: ")
    assert "client certificates are not issued in the pod-certificate mode" in line
