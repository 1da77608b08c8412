"""The client certificate in the injection plan (docs/mtls.md): its own volume and read-only directory in
every injected container, idempotent like the rest, and every malformed or impossible ask refused with a
message naming the annotation (the webhook answers it as a denial, never a 500)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.test_injection_plan import inject, make_pod, record
from tls_injector.cli import main
from tls_injector.injection import InjectionOptions, InjectionRefused, plan_pod
from tls_injector.names import CERT_PATH_ANNOTATION, CONTAINERS_ANNOTATION, MODE_ANNOTATION
from tls_injector.offline.inject import inject_manifests

CLIENT = "tls-injector.io/client-certificate"
CLIENT_MOUNT = {"name": "tls-injector-client", "mountPath": "/etc/tls-injector/client", "readOnly": True}


def test_every_container_mounts_the_client_secret_read_only_at_its_own_directory() -> None:
    pod = make_pod({"name": "app", "image": "a"}, {"name": "side", "image": "b"}, annotations={CLIENT: "true"},
                   initContainers=[{"name": "init", "image": "c"}])
    _, result, _ = inject(pod)
    volumes = {v["name"]: v for v in result["spec"]["volumes"]}
    assert volumes["tls-injector-client"] == {"name": "tls-injector-client", "secret": {"secretName": "web-client-tls"}}
    for container in (*result["spec"]["initContainers"], *result["spec"]["containers"]):
        assert CLIENT_MOUNT in container["volumeMounts"], container["name"]
    assert record(result)["client"] == "web-client-tls"
    assert record(result)["clientPath"] == "/etc/tls-injector/client"


@pytest.mark.parametrize("value", ["false", "", "FALSE"])
def test_no_client_certificate_unless_asked(value: str) -> None:
    _, result, _ = inject(make_pod(annotations={CLIENT: value}))
    assert "tls-injector-client" not in {v["name"] for v in result["spec"]["volumes"]}
    assert "client" not in record(result)


def test_only_the_listed_containers_get_it_and_a_user_volume_of_our_name_is_left_alone() -> None:
    users = {"name": "tls-injector-client", "emptyDir": {}}
    pod = make_pod({"name": "app", "image": "a"}, {"name": "side", "image": "b"},
                   annotations={CLIENT: "true", CONTAINERS_ANNOTATION: "app"}, volumes=[users])
    _, result, _ = inject(pod)
    assert users in result["spec"]["volumes"]
    assert {"name": "tls-injector-client-2", "secret": {"secretName": "web-client-tls"}} in result["spec"]["volumes"]
    [app, side] = result["spec"]["containers"]
    assert {**CLIENT_MOUNT, "name": "tls-injector-client-2"} in app["volumeMounts"]
    assert "volumeMounts" not in side


@pytest.mark.parametrize(("annotations", "options", "says"), [
    ({CLIENT: "yes"}, InjectionOptions(), "must be \"true\" or \"false\""),
    ({CLIENT: "true", MODE_ANNOTATION: "pod-certificate"}, InjectionOptions(pod_certificates=True),
     "not issued in the pod-certificate mode"),
    ({CLIENT: "true", CERT_PATH_ANNOTATION: "/etc/tls-injector/client/certs"}, InjectionOptions(),
     "not inside one another"),
])
def test_an_ask_that_cannot_be_met_is_refused_naming_the_annotation(annotations: dict[str, str],
                                                                     options: InjectionOptions, says: str) -> None:
    with pytest.raises(InjectionRefused, match=CLIENT) as refused:
        plan_pod(make_pod(annotations=annotations), options=options)
    assert says in str(refused.value)


def test_a_user_mount_at_the_client_path_is_refused() -> None:
    container: dict[str, Any] = {"name": "app", "image": "a",
                                 "volumeMounts": [{"name": "mine", "mountPath": "/etc/tls-injector/client"}]}
    with pytest.raises(InjectionRefused, match="already mounts volume 'mine'"):
        plan_pod(make_pod(container, annotations={CLIENT: "true"}, volumes=[{"name": "mine", "emptyDir": {}}]),
                       options=InjectionOptions())


def test_inject_renders_the_client_volume_into_a_template_as_mutate_does() -> None:
    manifest = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "caller", "namespace": "shop"},
                "spec": {"selector": {"matchLabels": {"app": "caller"}}, "template": {
                    "metadata": {"labels": {"app": "caller", "tls-injector.io/inject": "true"},
                                 "annotations": {CLIENT: "true"}},
                    "spec": {"containers": [{"name": "app", "image": "a"}]}}}}
    [out] = yaml.safe_load_all(inject_manifests(yaml.safe_dump(manifest), options=InjectionOptions()).text)
    template = out["spec"]["template"]
    assert {"name": "tls-injector-client", "secret": {"secretName": "caller-client-tls"}} in template["spec"]["volumes"]
    assert CLIENT_MOUNT in template["spec"]["containers"][0]["volumeMounts"]


@pytest.mark.parametrize("value", ["Example.org", "spiffe://example.org", "a b", ""])
def test_a_trust_domain_that_spiffe_refuses_stops_the_command_with_one_line(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["reconcile", "--once", "--trust-domain", value])
    assert stop.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert errors == [f"tls-injector reconcile: error: argument --trust-domain: a SPIFFE trust domain is 1-255 of "
                      f"a-z 0-9 . - _, got \"{value}\""]
