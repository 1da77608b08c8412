"""The injection plan and its patch, case by case: every patch is applied with jsonpatch (the oracle),
the result checked against the Kubernetes Pod schema, and a second pass must plan nothing."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest

from tests.support.kube_schema import schema_errors
from tls_injector.injection import (
    InjectionOptions,
    InjectionRefused,
    Plan,
    patch_ops,
    plan_pod,
    pointer,
    template_workload,
)
from tls_injector.names import (
    CERT_PATH_ANNOTATION,
    CLIENT_CERT_ANNOTATION,
    CONTAINERS_ANNOTATION,
    ENV_ANNOTATION,
    INJECTED_ANNOTATION,
    KEY_MODE_ANNOTATION,
    MODE_ANNOTATION,
    MODE_POD_CERTIFICATE,
    SECRET_NAME_ANNOTATION,
    TRUST_PATH_ANNOTATION,
)

OPTIONS = InjectionOptions()
CERT = {"name": "tls-injector-cert", "mountPath": "/etc/tls-injector/certs", "readOnly": True}
TRUST = {"name": "tls-injector-trust", "mountPath": "/etc/tls-injector/trust", "readOnly": True}
BUNDLE = "/etc/tls-injector/trust/ca-bundle.crt"


def make_pod(*containers: dict[str, Any], annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "web", "labels": {"tls-injector.io/inject": "true"}}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": list(containers) or [{"name": "app", "image": "nginx"}], **spec}}


def inject(pod: dict[str, Any], **kwargs: Any) -> tuple[list[Any], dict[str, Any], Plan]:
    """Plan, patch, apply; prove the result is a valid Pod and that injecting it again changes nothing."""
    before = copy.deepcopy(pod)
    plan = plan_pod(pod, options=OPTIONS, **kwargs)
    assert pod == before, "planning must not modify the pod it reads"
    ops = list(patch_ops(plan))
    result = jsonpatch.apply_patch(pod, ops)
    assert schema_errors(result) == []
    assert patch_ops(plan_pod(result, options=OPTIONS, **kwargs)) == []
    return ops, result, plan


def record(result: dict[str, Any]) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(result["metadata"]["annotations"][INJECTED_ANNOTATION])
    return value


def test_a_pod_with_volumes_and_mounts_gets_ours_appended_after_the_users() -> None:
    user_volume = {"name": "data", "emptyDir": {}}
    user_mount = {"name": "data", "mountPath": "/data"}
    pod = make_pod({"name": "app", "image": "nginx", "volumeMounts": [user_mount]}, volumes=[user_volume])
    ops, result, _ = inject(pod)
    assert [op["path"] for op in ops] == ["/spec/volumes/-", "/spec/volumes/-", "/spec/containers/0/volumeMounts/-",
                                          "/spec/containers/0/volumeMounts/-", "/metadata/annotations"]
    assert result["spec"]["volumes"] == [
        user_volume,
        {"name": "tls-injector-cert", "secret": {"secretName": "web-tls"}},
        {"name": "tls-injector-trust", "configMap": {"name": "tls-injector-trust-bundle"}},
    ]
    assert result["spec"]["containers"][0]["volumeMounts"] == [user_mount, CERT, TRUST]


def test_missing_lists_and_maps_are_created_whole_rather_than_added_under() -> None:
    pod = make_pod(initContainers=[{"name": "init", "image": "busybox"},
                                   {"name": "proxy", "image": "envoy", "restartPolicy": "Always"}])
    del pod["metadata"]  # as in a manifest's pod template, whose workload the caller names
    ops, result, _ = inject(pod, workload=template_workload("Deployment", "web", {}))
    assert [(op["op"], op["path"]) for op in ops] == [
        ("add", "/spec/volumes"),
        ("add", "/spec/initContainers/0/volumeMounts"),
        ("add", "/spec/initContainers/1/volumeMounts"),
        ("add", "/spec/containers/0/volumeMounts"),
        ("add", "/metadata"),
    ]
    assert record(result)["containers"] == ["init", "proxy", "app"]


def test_explicit_nulls_are_replaced_like_missing_lists() -> None:
    pod = make_pod({"name": "app", "image": "nginx", "volumeMounts": None, "env": None},
                   annotations=None, volumes=None)
    pod["metadata"]["annotations"] = None
    ops, result, _ = inject(pod)
    assert {op["path"] for op in ops} >= {"/spec/volumes", "/spec/containers/0/volumeMounts", "/metadata/annotations"}
    assert result["spec"]["containers"][0]["volumeMounts"] == [CERT, TRUST]


def test_an_annotation_key_with_a_slash_is_escaped_in_the_pointer() -> None:
    ops, result, _ = inject(make_pod(annotations={"team": "a"}))
    assert ops[-1] == {"op": "add", "path": "/metadata/annotations/tls-injector.io~1injected",
                       "value": result["metadata"]["annotations"][INJECTED_ANNOTATION]}
    assert result["metadata"]["annotations"]["team"] == "a"


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [(("metadata", "annotations", "a/b"), "/metadata/annotations/a~1b"),
     (("x", "~1"), "/x/~01"),
     (("spec", "containers", 0, "env", "-"), "/spec/containers/0/env/-"),
     (("",), "/")],
)
def test_pointer_tokens_are_escaped_tilde_first(tokens: tuple[str | int, ...], expected: str) -> None:
    assert pointer(*tokens) == expected
    document = {"metadata": {"annotations": {"a/b": "v"}}, "x": {"~1": "v"}, "": "v",
                "spec": {"containers": [{"env": []}]}}
    if not expected.endswith("-"):
        assert jsonpatch.JsonPointer(expected).resolve(document) == "v"


def test_a_stale_record_is_replaced_and_nothing_else_is_touched() -> None:
    _, injected, _ = inject(make_pod())
    injected["metadata"]["annotations"][INJECTED_ANNOTATION] = '{"v":0}'
    ops, _, _ = inject(injected)
    assert [(op["op"], op["path"]) for op in ops] == [("replace", "/metadata/annotations/tls-injector.io~1injected")]


def test_new_ca_fingerprints_change_only_the_record_and_are_sorted_without_duplicates() -> None:
    _, injected, _ = inject(make_pod(), ca_fingerprints=["bb", "aa"])
    assert record(injected)["cas"] == ["aa", "bb"]
    ops, rotated, _ = inject(injected, ca_fingerprints=["cc", "aa", "cc"])
    assert [op["op"] for op in ops] == ["replace"]
    assert record(rotated)["cas"] == ["aa", "cc"]


def test_reinvocation_after_the_apiserver_defaulted_our_volumes_changes_nothing() -> None:
    _, injected, _ = inject(make_pod())
    for volume in injected["spec"]["volumes"]:
        next(iter(v for k, v in volume.items() if k != "name"))["defaultMode"] = 420
    assert patch_ops(plan_pod(injected, options=OPTIONS)) == []


def test_a_users_volume_with_our_name_makes_ours_take_the_next_free_name() -> None:
    pod = make_pod(volumes=[{"name": "tls-injector-cert", "emptyDir": {}}])
    _, result, _ = inject(pod)
    names = [v["name"] for v in result["spec"]["volumes"]]
    assert names == ["tls-injector-cert", "tls-injector-cert-2", "tls-injector-trust"]
    assert result["spec"]["containers"][0]["volumeMounts"][0] == {**CERT, "name": "tls-injector-cert-2"}


@pytest.mark.parametrize("path", ["/etc/tls-injector/certs", "/etc/tls-injector/certs/", "/etc/tls-injector//trust"])
def test_a_users_mount_at_our_path_is_refused_with_the_way_out(path: str) -> None:
    mount = {"name": "mine", "mountPath": path}
    pod = make_pod({"name": "app", "image": "nginx", "volumeMounts": [mount]},
                   volumes=[{"name": "mine", "emptyDir": {}}])
    with pytest.raises(InjectionRefused, match=r"container 'app' already mounts volume 'mine'") as refused:
        plan_pod(pod, options=OPTIONS)
    assert CERT_PATH_ANNOTATION in str(refused.value)
    assert CONTAINERS_ANNOTATION in str(refused.value)


def test_a_user_mount_of_a_parent_directory_is_not_a_clash() -> None:
    pod = make_pod({"name": "app", "image": "nginx", "volumeMounts": [{"name": "etc", "mountPath": "/etc"}]},
                   volumes=[{"name": "etc", "emptyDir": {}}])
    _, result, _ = inject(pod)
    assert result["spec"]["containers"][0]["volumeMounts"][1:] == [CERT, TRUST]


def test_annotations_move_the_mount_paths_and_the_env_follows() -> None:
    pod = make_pod(annotations={CERT_PATH_ANNOTATION: "/tls/", TRUST_PATH_ANNOTATION: "/ca", ENV_ANNOTATION: "true"})
    _, result, _ = inject(pod)
    container = result["spec"]["containers"][0]
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/tls", "/ca"]
    assert container["env"] == [{"name": n, "value": "/ca/ca-bundle.crt"}
                                for n in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")]


def test_env_never_overrides_a_variable_the_container_sets_and_skips_envfrom_containers() -> None:
    own = {"name": "SSL_CERT_FILE", "value": "/mine.pem"}
    pod = make_pod({"name": "app", "image": "nginx", "env": [own]},
                   {"name": "cfg", "image": "nginx", "envFrom": [{"configMapRef": {"name": "settings"}}]},
                   annotations={ENV_ANNOTATION: "SSL_CERT_FILE, NODE_EXTRA_CA_CERTS"})
    _, result, plan = inject(pod)
    app, cfg = result["spec"]["containers"]
    assert app["env"] == [own, {"name": "NODE_EXTRA_CA_CERTS", "value": BUNDLE}]
    assert "env" not in cfg
    assert plan.warnings == ("container 'cfg' uses envFrom: TLS environment variables not added",)
    assert record(result)["env"] == ["SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS"]


def test_the_containers_annotation_restricts_injection_to_those_named() -> None:
    pod = make_pod({"name": "app", "image": "nginx"}, {"name": "metrics", "image": "exporter"},
                   annotations={CONTAINERS_ANNOTATION: "metrics"})
    _, result, _ = inject(pod)
    app, metrics = result["spec"]["containers"]
    assert "volumeMounts" not in app
    assert metrics["volumeMounts"] == [CERT, TRUST]
    assert record(result)["containers"] == ["metrics"]


def test_ephemeral_containers_are_left_alone() -> None:
    debug = {"name": "debug", "image": "busybox", "targetContainerName": "app"}
    _, result, _ = inject(make_pod(ephemeralContainers=[debug]))
    assert result["spec"]["ephemeralContainers"] == [debug]


def test_a_pod_without_containers_still_gets_its_volumes() -> None:
    pod = make_pod()
    pod["spec"]["containers"] = []
    _, result, _ = inject(pod)
    assert [v["name"] for v in result["spec"]["volumes"]] == ["tls-injector-cert", "tls-injector-trust"]
    assert record(result)["containers"] == []


def test_the_secret_name_annotation_names_the_secret() -> None:
    _, result, plan = inject(make_pod(annotations={SECRET_NAME_ANNOTATION: " shared-tls "}))
    assert plan.secret_name == "shared-tls"
    assert result["spec"]["volumes"][0]["secret"] == {"secretName": "shared-tls"}


def test_pins_are_written_as_given_beside_the_record() -> None:
    pins = {SECRET_NAME_ANNOTATION: "nightly-tls", "tls-injector.io/service-names": "nightly"}
    _, result, _ = inject(make_pod(), workload=template_workload("CronJob", "nightly", {}), pins=pins)
    assert result["metadata"]["annotations"].items() >= pins.items()
    assert record(result)["secret"] == "nightly-tls"


@pytest.mark.parametrize(
    ("annotations", "says"),
    [
        ({CERT_PATH_ANNOTATION: "certs"}, "must be an absolute directory path"),
        ({CERT_PATH_ANNOTATION: "/etc/../certs"}, "without '..'"),
        ({TRUST_PATH_ANNOTATION: "/"}, "other than /"),
        ({CERT_PATH_ANNOTATION: "/tls", TRUST_PATH_ANNOTATION: "/tls/ca"}, "not inside one another"),
        ({CERT_PATH_ANNOTATION: "/tls", TRUST_PATH_ANNOTATION: "/tls/"}, "must be distinct"),
        ({ENV_ANNOTATION: "SSL_CERT_FILE,JAVA_HOME"}, "unknown variable(s) 'JAVA_HOME'"),
        ({CONTAINERS_ANNOTATION: "app,sidecar"}, "does not have: 'sidecar'"),
        ({SECRET_NAME_ANNOTATION: "Web_TLS"}, "'Web_TLS' is not a valid Secret name"),
    ],
)
def test_a_malformed_annotation_is_refused_naming_it(annotations: dict[str, str], says: str) -> None:
    with pytest.raises(InjectionRefused) as refused:
        plan_pod(make_pod(annotations=annotations), options=OPTIONS)
    assert says in str(refused.value)


@pytest.mark.parametrize(
    ("pod", "says"),
    [
        ({"metadata": {}, "spec": {"containers": []}}, "cannot tell which workload"),
        ({"metadata": {"name": "p"}}, "the pod has no spec"),
        ({"metadata": {"name": "p"}, "spec": {"containers": "app"}}, "got `str` - at `spec.containers`"),
        ({"metadata": {"name": "p"}, "spec": {"containers": [{"image": "x"}]}},
         "missing required field `name` - at `spec.containers\\[0\\]`"),
        ({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "volumeMounts": [{"name": 1}]}]}},
         "got `int` - at `spec.containers\\[0\\].volumeMounts\\[0\\].name`"),
        ({"metadata": {"name": "p", "annotations": []}, "spec": {"containers": []}}, "annotations must be a map"),
        ({"metadata": {"name": "p"}, "spec": {"containers": [], "volumes": {}}}, "got `object` - at `spec.volumes`"),
        ({"metadata": {"name": "p"}, "spec": "x"}, "got `str`$"),
    ],
)
def test_a_pod_of_the_wrong_shape_is_refused_not_crashed_on(pod: dict[str, Any], says: str) -> None:
    with pytest.raises(InjectionRefused, match=says):
        plan_pod(pod, options=OPTIONS)


def test_the_operators_options_set_the_default_paths_and_bundle() -> None:
    options = InjectionOptions(cert_mount_path="/run/tls", trust_mount_path="/run/ca", trust_bundle_configmap="cas")
    result = jsonpatch.apply_patch(make_pod(), patch_ops(plan_pod(make_pod(), options=options)))
    assert result["spec"]["volumes"][1] == {"name": "tls-injector-trust", "configMap": {"name": "cas"}}
    assert [m["mountPath"] for m in result["spec"]["containers"][0]["volumeMounts"]] == ["/run/tls", "/run/ca"]
    assert schema_errors(result) == []


# The key's mode (names.KEY_MODE_ANNOTATION): the closed set, each value the certificate volumes' defaultMode.
@pytest.mark.parametrize(("value", "octal"), [("0400", 0o400), ("0440", 0o440), ("0600", 0o600), ("0640", 0o640)])
def test_a_key_mode_becomes_the_certificate_volumes_default_mode_and_is_recorded(value: str, octal: int) -> None:
    pod = make_pod(annotations={KEY_MODE_ANNOTATION: value, CLIENT_CERT_ANNOTATION: "true"},
                   securityContext={"fsGroup": 2000})
    _, result, plan = inject(pod)
    volumes = {v["name"]: v for v in result["spec"]["volumes"]}
    assert volumes["tls-injector-cert"]["secret"] == {"secretName": "web-tls", "defaultMode": octal}
    assert volumes["tls-injector-client"]["secret"]["defaultMode"] == octal
    assert "defaultMode" not in volumes["tls-injector-trust"]["configMap"]  # the bundle is public
    assert record(result)["keyMode"] == value
    assert plan.warnings == ()


def test_without_a_key_mode_the_volume_keeps_the_apis_default_and_the_record_says_nothing() -> None:
    _, result, _ = inject(make_pod())
    volumes = {v["name"]: v for v in result["spec"]["volumes"]}
    assert volumes["tls-injector-cert"]["secret"] == {"secretName": "web-tls"}
    assert "keyMode" not in record(result)


def test_a_key_mode_without_fs_group_is_injected_with_a_warning_naming_fs_group() -> None:
    _, result, plan = inject(make_pod(annotations={KEY_MODE_ANNOTATION: "0400"}))
    assert result["spec"]["volumes"][0]["secret"]["defaultMode"] == 0o400
    (warning,) = plan.warnings
    assert "fsGroup" in warning
    assert "root:root 0400" in warning


def test_a_key_mode_with_pod_certificates_sets_the_projected_volumes_default_mode() -> None:
    options = InjectionOptions(pod_certificates=True)
    pod = make_pod(annotations={KEY_MODE_ANNOTATION: "0440", MODE_ANNOTATION: MODE_POD_CERTIFICATE},
                   securityContext={"fsGroup": 1})
    plan = plan_pod(pod, options=options)
    cert = next(v for v in plan.volumes if v["name"] == "tls-injector-cert")
    assert cert["projected"]["defaultMode"] == 0o440
    # What the node tier saw the kubelet do (tests/node/test_modes.py): the warning says it, and does not
    # call the files root's, as it does for a Secret volume.
    (warning,) = plan.warnings
    assert "the kubelet gives the files to the pod's user itself" in warning
    assert "root:root" not in warning
    result = jsonpatch.apply_patch(pod, patch_ops(plan))
    assert patch_ops(plan_pod(result, options=options)) == []


def test_an_injected_pod_whose_cert_volume_has_another_mode_is_not_taken_for_ours() -> None:
    _, result, _ = inject(make_pod(annotations={KEY_MODE_ANNOTATION: "0400"}))
    result["metadata"]["annotations"][KEY_MODE_ANNOTATION] = "0440"
    with pytest.raises(InjectionRefused, match="already mounts volume 'tls-injector-cert'"):
        plan_pod(result, options=OPTIONS)


@pytest.mark.parametrize("value", ["", "400", "0644", "0777", "0o400", "0401", "0460", "256", " 0400x", "0400 0"])
def test_a_key_mode_outside_the_closed_set_is_refused_naming_the_set(value: str) -> None:
    with pytest.raises(InjectionRefused) as refused:
        plan_pod(make_pod(annotations={KEY_MODE_ANNOTATION: value}), options=OPTIONS)
    assert str(refused.value).startswith(f"{KEY_MODE_ANNOTATION}: ")
    assert "is not one of 0400, 0440, 0600, 0640" in str(refused.value)


def test_a_key_mode_on_a_trust_only_pod_is_refused() -> None:
    with pytest.raises(InjectionRefused, match="trust-only pod gets no key"):
        plan_pod(make_pod(annotations={KEY_MODE_ANNOTATION: "0400", MODE_ANNOTATION: "trust-only"}), options=OPTIONS)
