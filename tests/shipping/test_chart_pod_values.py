"""The chart's per-component pod values operators expect (nodeSelector, tolerations, affinity,
topologySpreadConstraints, priorityClassName, podAnnotations, podLabels, extraEnv) and the webhooks'
timeoutSeconds: each lands where it says, the objects stay valid Kubernetes objects, the defaults stay
the kustomize base (tests/shipping/test_chart.py), and the schema refuses what would break a selector.
Also: `helm lint --strict` without -n says nothing about the release namespace."""

from __future__ import annotations

from typing import Any

import pytest

from tests.shipping.helm import CHART, run_helm
from tests.shipping.support import Obj
from tests.shipping.test_chart import _refused, template, values
from tests.shipping.test_schema import validate

pytestmark = pytest.mark.timeout(300)

COMPONENTS = {"webhook": ("Deployment", "tls-injector"), "reconciler": ("Deployment", "tls-injector-reconciler"),
              "bootstrap": ("Job", "tls-injector-bootstrap")}


def pod_values(component: str) -> dict[str, Any]:
    chosen: dict[str, Any] = {
        "nodeSelector": {"kubernetes.io/os": "linux", "example.com/pool": component},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "platform", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "example.com/pool", "operator": "In", "values": [component]}]}]}}},
        "priorityClassName": f"{component}-critical",
        "podAnnotations": {"example.com/owner": "platform", "prometheus.io/scrape": "false"},
        "podLabels": {"team": "platform", "example.com/tier": component},
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
                     {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
    }
    if component != "bootstrap":
        chosen["topologySpreadConstraints"] = [{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname",
                                                "whenUnsatisfiable": "DoNotSchedule",
                                                "labelSelector": {"matchLabels": {"team": "platform"}}}]
    return chosen


SET = {component: pod_values(component) for component in COMPONENTS} | {
    "webhook": pod_values("webhook") | {"timeoutSeconds": 12}}


@pytest.fixture(scope="module")
def rendered() -> list[Obj]:
    return template(*values(**SET))


def _named(objects: list[Obj], kind: str, name: str) -> Obj:
    return next(o for o in objects if (o["kind"], o["metadata"]["name"]) == (kind, name))


@pytest.mark.parametrize("component", list(COMPONENTS))
def test_each_pod_value_lands_in_its_components_pod(rendered: list[Obj], component: str) -> None:
    obj = _named(rendered, *COMPONENTS[component])
    chosen = SET[component]
    template_ = obj["spec"]["template"]
    spec = template_["spec"]
    assert spec["nodeSelector"] == chosen["nodeSelector"]
    assert spec["tolerations"] == chosen["tolerations"]
    assert spec["affinity"] == chosen["affinity"], "replaces the chart's default, not merged into it"
    assert spec.get("topologySpreadConstraints") == chosen.get("topologySpreadConstraints")
    assert spec["priorityClassName"] == chosen["priorityClassName"]
    assert template_["metadata"]["annotations"] == chosen["podAnnotations"]
    labels = template_["metadata"]["labels"]
    assert labels.items() >= chosen["podLabels"].items()
    assert labels["tls-injector.io/inject"] == "false", "the chart's own pods never opt in"
    (container,) = spec["containers"]
    assert container["env"] == chosen["extraEnv"]
    if obj["kind"] == "Deployment":
        assert not set(chosen["podLabels"]) & set(obj["spec"]["selector"]["matchLabels"]), "never in the selector"
        assert obj["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_the_objects_with_every_pod_value_set_are_valid_kubernetes_objects(rendered: list[Obj]) -> None:
    for kind, name in COMPONENTS.values():
        validate(_named(rendered, kind, name))


def test_every_webhook_entry_takes_the_timeout(rendered: list[Obj]) -> None:
    entries = [entry for o in rendered if o["kind"].endswith("WebhookConfiguration") for entry in o["webhooks"]]
    assert len(entries) == 9
    assert {entry["timeoutSeconds"] for entry in entries} == {12}
    assert {entry["timeoutSeconds"] for o in template() if o["kind"].endswith("WebhookConfiguration")
            for entry in o["webhooks"]} == {5}


def test_with_the_values_left_empty_each_pod_keeps_the_charts_own_placement() -> None:
    objects = template()
    webhook = _named(objects, "Deployment", "tls-injector")["spec"]["template"]["spec"]
    assert webhook["priorityClassName"] == "tls-injector"
    assert "podAntiAffinity" in webhook["affinity"]
    assert webhook["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    for kind, name in COMPONENTS.values():
        spec = _named(objects, kind, name)["spec"]["template"]
        assert not {"nodeSelector", "tolerations"} & set(spec["spec"])
        assert "annotations" not in spec["metadata"]
        assert "env" not in spec["spec"]["containers"][0]


@pytest.mark.parametrize(("given", "where"), [
    ({"webhook": {"podLabels": {"app.kubernetes.io/component": "x"}}}, "invalid propertyName"),
    ({"reconciler": {"podLabels": {"tls-injector.io/inject": "true"}}}, "invalid propertyName"),
    ({"webhook": {"timeoutSeconds": 31}}, "at '/webhook/timeoutSeconds': maximum"),
    ({"webhook": {"timeoutSeconds": 0}}, "at '/webhook/timeoutSeconds': minimum"),
    ({"bootstrap": {"tolerations": [{"key": "x", "operator": "Maybe"}]}}, "at '/bootstrap/tolerations/0/operator'"),
    ({"webhook": {"affinity": {"podAntiAfinity": {}}}}, "at '/webhook/affinity'"),
    ({"reconciler": {"extraEnv": [{"value": "no name"}]}}, "at '/reconciler/extraEnv/0'"),
    ({"webhook": {"priorityClassName": "Not_A_Name"}}, "at '/webhook/priorityClassName'"),
    ({"bootstrap": {"topologySpreadConstraints": []}}, "additional properties 'topologySpreadConstraints'"),
    ({"webhook": {"nodeSelector": {"zone": 1}}}, "at '/webhook/nodeSelector/zone'"),
])
def test_the_schema_refuses_pod_values_that_would_break_the_install(given: dict[str, Any], where: str) -> None:
    error = _refused(*values(**given))
    assert "values don't meet the specifications of the schema" in error, error
    assert where in error, error


def test_a_strict_lint_without_a_namespace_prints_no_template_failure() -> None:
    """`helm lint` renders in "default" when no -n is given; the chart's "namespace of its own" check is
    for installs and upgrades (helm template too), so lint prints no `funcMap fail`."""
    result = run_helm("lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "funcMap" not in result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout
    assert "namespace of its own" in _refused(namespace="default")
