"""The webhook configurations are safe: scoped, excluded where they must be, never called twice."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from cel_expr_python import cel

from tests.rules_matrix import (
    ENABLED_NAMESPACE_TRANSITIONS,
    NAMESPACE_TRANSITIONS,
    OFF,
    WORKLOAD_KINDS,
    WORKLOAD_TRANSITIONS,
    Transition,
    templated,
    with_image,
    workload,
)
from tests.rules_matrix import (
    namespace as namespace_object,
)
from tests.shipping.support import RENDERINGS, ROOT, Obj, installed, of_kind, only, render, webhook
from tests.support.reviews import answer, review
from tls_injector.cli import admission_handlers
from tls_injector.names import (
    INJECT_LABEL,
    MODE_ANNOTATION,
    MODE_POD_CERTIFICATE,
    NAMESPACE_OPT_IN,
    POD_OPT_IN,
    POD_OPT_OUT,
)
from tls_injector.offline.rulesfile import load_rule_set
from tls_injector.settings import ServeSettings

SYSTEM_NAMESPACES = {"kube-system", "kube-node-lease", "kube-public"}
NAME_LABEL = "kubernetes.io/metadata.name"


def _webhooks(rendering: str = "manifests/base") -> list[tuple[str, Obj]]:
    objects = render(ROOT / rendering)
    kinds = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    return [(c["kind"], hook) for kind in kinds for c in of_kind(objects, kind) for hook in c["webhooks"]]


def _every_entry() -> list[tuple[str, Obj]]:
    """Every entry of every rendering, each once (the base's reappear in the overlay)."""
    seen: dict[str, tuple[str, Obj]] = {}
    for rendering in RENDERINGS:
        for kind, hook in _webhooks(rendering):
            seen.setdefault(f"{kind}/{hook['name']}", (kind, hook))
    return list(seen.values())


def _injector_namespace() -> str:
    name: str = only(installed(), "Namespace")["metadata"]["name"]
    return name


def matches(selector: Obj | None, labels: dict[str, str]) -> bool:
    """metav1.LabelSelector semantics; an absent selector matches everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression(e, labels) for e in selector.get("matchExpressions") or [])


def _expression(expr: Obj, labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    tests = {
        "In": lambda: key in labels and labels[key] in values,
        "NotIn": lambda: key not in labels or labels[key] not in values,
        "Exists": lambda: key in labels,
        "DoesNotExist": lambda: key not in labels,
    }
    return bool(tests[op]())


@pytest.mark.parametrize(("rendering", "validating"), [("manifests/base", 5), ("manifests/overlays/example", 5),
                                                      ("examples/sidecar-tls/overlay", 6)])
def test_each_rendering_has_four_mutating_entries_and_its_validating_ones(rendering: str, validating: int) -> None:
    kinds = [kind for kind, _ in _webhooks(rendering)]
    assert kinds.count("MutatingWebhookConfiguration") == 4
    assert kinds.count("ValidatingWebhookConfiguration") == validating


@pytest.mark.parametrize(("kind", "hook"), _every_entry(), ids=lambda x: x if isinstance(x, str) else x["name"])
def test_every_webhook_entry_is_safe_for_dry_run_and_fully_explicit(kind: str, hook: Obj) -> None:
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["matchPolicy"] == "Equivalent"
    assert hook["failurePolicy"] in ("Fail", "Ignore")
    # Below the 10 s default and the 30 s maximum: a hung replica must not stall the apiserver.
    assert 1 <= hook["timeoutSeconds"] <= 10
    assert "caBundle" not in hook["clientConfig"], "caBundle is the bootstrap's job; a static one goes stale"
    assert "url" not in hook["clientConfig"]


@pytest.mark.parametrize(("kind", "hook"), _every_entry(), ids=lambda x: x if isinstance(x, str) else x["name"])
def test_every_webhook_entry_excludes_the_control_plane_and_the_injector_by_unforgeable_name(kind: str,
                                                                                             hook: Obj) -> None:
    excluded = SYSTEM_NAMESPACES | {_injector_namespace()}
    selector = hook["namespaceSelector"]
    name_rules = [e for e in selector.get("matchExpressions") or [] if e["key"] == NAME_LABEL]
    assert [(e["operator"], set(e["values"])) for e in name_rules] == [("NotIn", excluded)]
    for namespace, ns_label in itertools.product(excluded, [None, NAMESPACE_OPT_IN]):
        ns_labels = {NAME_LABEL: namespace} | ({INJECT_LABEL: ns_label} if ns_label else {})
        assert not matches(selector, ns_labels), f"{namespace} ({ns_label}) reaches {hook['name']}"


@pytest.mark.parametrize(("kind", "hook"), _every_entry(), ids=lambda x: x if isinstance(x, str) else x["name"])
def test_every_webhook_entry_calls_the_shipped_service_on_443_which_reaches_the_container(kind: str,
                                                                                          hook: Obj) -> None:
    objects = installed()
    ref = hook["clientConfig"]["service"]
    service = only(objects, "Service", ref["name"])
    assert service["metadata"]["namespace"] == ref["namespace"] == _injector_namespace()
    paths = {"MutatingWebhookConfiguration": {"/mutate"},
             "ValidatingWebhookConfiguration": {"/validate", "/validate/enabled-namespace"}}
    assert ref["path"] in paths[kind]
    port = next(p for p in service["spec"]["ports"] if p["port"] == ref.get("port", 443))
    pod = webhook(objects)["spec"]["template"]
    assert matches({"matchLabels": service["spec"]["selector"]}, pod["metadata"]["labels"])
    container_ports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c["ports"]}
    assert container_ports[port["targetPort"]] == 8443


def _mutating(resource: str = "pods") -> list[Obj]:
    return [hook for kind, hook in _webhooks() if kind == "MutatingWebhookConfiguration"
            and hook["rules"][0]["resources"] == [resource]]


@pytest.mark.parametrize(("group", "resource"), [("", "pods"), ("batch", "jobs")])
def test_the_mutating_entries_take_pod_and_job_create_only_and_allow_reinvocation(group: str, resource: str) -> None:
    assert len(_mutating(resource)) == 2
    for hook in _mutating(resource):
        assert hook["rules"] == [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"],
                                  "resources": [resource], "scope": "Namespaced"}]
        assert hook["reinvocationPolicy"] == "IfNeeded"


NS_LABELS = [None, NAMESPACE_OPT_IN, "disabled", "true"]
POD_LABELS = [None, POD_OPT_IN, POD_OPT_OUT, "yes"]


@pytest.mark.parametrize(("ns_label", "pod_label"), list(itertools.product(NS_LABELS, POD_LABELS)))
def test_a_pod_is_sent_to_the_mutating_webhook_once_exactly_when_it_opted_in(ns_label: str | None,
                                                                             pod_label: str | None) -> None:
    ns_labels = {NAME_LABEL: "shop"} | ({INJECT_LABEL: ns_label} if ns_label else {})
    pod_labels = {"app": "web"} | ({INJECT_LABEL: pod_label} if pod_label else {})
    calls = sum(matches(h["namespaceSelector"], ns_labels) and matches(h.get("objectSelector"), pod_labels)
                for h in _mutating())
    wanted = pod_label != POD_OPT_OUT if ns_label == NAMESPACE_OPT_IN else pod_label == POD_OPT_IN
    assert calls == int(wanted)


def _job(template_labels: dict[str, str] | None, owner: str | None = "CronJob",
         api_version: str = "batch/v1", *, controller: bool = True) -> Obj:
    template: Obj = {"spec": {}} | ({"metadata": {"labels": template_labels}} if template_labels is not None else {})
    references = [{"apiVersion": api_version, "kind": owner, "name": "nightly", "uid": "u"}
                  | ({"controller": True} if controller else {})] if owner else []
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "nightly-29400000", "namespace": "shop"} | ({"ownerReferences": references}
                                                                            if references else {}),
            "spec": {"template": template}}


@pytest.mark.parametrize(("ns_label", "pod_label"), list(itertools.product(NS_LABELS, [*POD_LABELS, "no-labels"])))
@pytest.mark.parametrize("owner", [
    ("CronJob", "batch/v1", True, True), ("CronJob", "batch/v1", False, False),
    ("CronJob", "example.com/v1", True, False), ("Workflow", "example.com/v1", True, False), (None, "", True, False),
], ids=["cronjob", "not-controller", "other-group", "other-kind", "no-owner"])
def test_a_job_is_sent_once_exactly_when_a_cronjob_runs_it_and_its_template_opted_in(
    ns_label: str | None, pod_label: str | None, owner: tuple[str | None, str, bool, bool]
) -> None:
    kind, api_version, controller, a_run = owner
    ns_labels = {NAME_LABEL: "shop"} | ({INJECT_LABEL: ns_label} if ns_label else {})
    labels = None if pod_label == "no-labels" else {"app": "web"} | ({INJECT_LABEL: pod_label} if pod_label else {})
    job = _job(labels, kind, api_version, controller=controller)
    calls = sum(matches(h["namespaceSelector"], ns_labels) and matches(h.get("objectSelector"), {})
                and reaches_webhook({}, job, h) for h in _mutating("jobs"))
    opted = pod_label != POD_OPT_OUT if ns_label == NAMESPACE_OPT_IN else pod_label == POD_OPT_IN
    assert calls == int(a_run and opted)


def _validating(name: str = "tls-transitions.workloads.tls-injector.io") -> Obj:
    return next(hook for _, hook in _every_entry() if hook["name"] == name)


def test_the_validating_entry_takes_updates_and_creates_of_the_three_workload_kinds_only() -> None:
    """CREATEs only for dry runs (test_a_dry_run_create_of_a_workload_gets_the_preview_...)."""
    assert _validating()["rules"] == [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                                       "resources": ["deployments", "statefulsets", "daemonsets"],
                                       "scope": "Namespaced"}]
    assert "objectSelector" not in _validating(), "the opt-in label sits on the pod template, not the object"


def _workload(template_labels: dict[str, str] | None, *, deleting: bool = False) -> Obj:
    metadata: Obj = {"name": "web", "namespace": "shop"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    template: Obj = {"metadata": {} if template_labels is None else {"labels": template_labels}, "spec": {}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata, "spec": {"template": template}}


def reaches_webhook(old: Obj | None, new: Obj, hook: Obj | None = None, *, dry_run: bool = False) -> bool:
    """All matchConditions true, evaluated with a real CEL implementation, as the apiserver does: an UPDATE
    from `old`, or a CREATE when `old` is None (oldObject is then null), dry run or not."""
    env = cel.NewEnv(variables={"object": cel.Type.DYN, "oldObject": cel.Type.DYN, "request": cel.Type.DYN})
    request = {"operation": "CREATE" if old is None else "UPDATE", "dryRun": dry_run}
    for condition in (hook or _validating())["matchConditions"]:
        result = env.compile(condition["expression"]).eval(data={"object": new, "oldObject": old, "request": request})
        assert result.type() == cel.Type.BOOL, f"{condition['name']}: {result.value()}"
        if not result.value():
            return False
    return True


OPTED = {"app": "web", INJECT_LABEL: POD_OPT_IN}
PLAIN = {"app": "web"}


@pytest.mark.parametrize(
    ("old", "new", "sent"),
    [
        (_workload(PLAIN), _workload(PLAIN), False),
        (_workload(None), _workload(None), False),
        (_workload(PLAIN), _workload(OPTED), True),
        (_workload(OPTED), _workload(PLAIN), True),
        (_workload(OPTED), _workload(OPTED), True),
        (_workload(OPTED), _workload({**OPTED, INJECT_LABEL: POD_OPT_OUT}), True),
        (_workload(None), _workload(OPTED), True),
        (_workload(OPTED), _workload(OPTED, deleting=True), False),
    ],
    ids=["plain", "no-labels", "enable", "disable", "unchanged", "to-false", "labels-added", "terminating"],
)
def test_only_updates_whose_old_or_new_template_carries_the_opt_in_label_reach_the_validating_webhook(
    old: Obj, new: Obj, sent: bool
) -> None:
    assert reaches_webhook(old, new) is sent


def _seinode(sidecar: Obj | None, *, deleting: bool = False) -> Obj:
    node = _workload(None, deleting=deleting) | {"apiVersion": "example.com/v1", "kind": "SeiNode"}
    node["spec"] = {"image": "sei"} | ({"sidecar": sidecar} if sidecar is not None else {})
    return node


TLS = {"tls": {"secretName": "node-tls"}}


@pytest.mark.parametrize(
    ("old", "new", "sent"),
    [
        (_seinode(None), _seinode(TLS), False),
        (_seinode({"image": "s"}), _seinode(TLS), False),
        (_seinode(TLS), _seinode(None), True),
        (_seinode(TLS), _seinode(TLS), True),
        (_seinode(TLS), _seinode(TLS, deleting=True), False),
    ],
    ids=["enable", "enable-with-sidecar", "disable", "unchanged", "terminating"],
)
def test_only_seinode_updates_that_could_break_the_rule_reach_the_example_entry(old: Obj, new: Obj,
                                                                               sent: bool) -> None:
    assert reaches_webhook(old, new, _validating("tls-transitions.seinodes.tls-injector.io")) is sent


@pytest.mark.parametrize(("kind", "hook"), _every_entry(), ids=lambda x: x if isinstance(x, str) else x["name"])
def test_match_conditions_fit_the_apiserver_limit_and_have_unique_names(kind: str, hook: Obj) -> None:
    conditions: list[Any] = hook.get("matchConditions") or []
    names = [c["name"] for c in conditions]
    assert len(names) == len(set(names))
    assert len(conditions) <= 64


def test_the_admission_policy_bindings_skip_the_same_namespaces_as_the_webhooks() -> None:
    objects = render(ROOT / "manifests/overlays/example")
    scopes = {rule.name: rule.scope for rule in load_rule_set(None)}
    # The rules' policies; the reconciler's own (reconciler-admission-policy.yaml) bind everywhere on purpose.
    bindings = [b for b in of_kind(objects, "ValidatingAdmissionPolicyBinding")
                if b["spec"]["policyName"].removeprefix("tls-injector.").removesuffix(".warnings") in scopes]
    assert bindings
    excluded = SYSTEM_NAMESPACES | {_injector_namespace()}
    assert set(scopes.values()) == {"all", "enabled-namespaces", "other-namespaces"}
    for binding in bindings:
        selector = binding["spec"]["matchResources"]["namespaceSelector"]
        first = selector["matchExpressions"][0]
        assert (first["key"], first["operator"], set(first["values"])) == (NAME_LABEL, "NotIn", excluded)
        for namespace in excluded:
            for inject in ({}, {INJECT_LABEL: NAMESPACE_OPT_IN}):
                assert not matches(selector, {NAME_LABEL: namespace} | inject)
        # Like their webhook entries, the scoped policies bind in enabled namespaces only, or outside them.
        scope = scopes[binding["spec"]["policyName"].removeprefix("tls-injector.").removesuffix(".warnings")]
        assert matches(selector, ENABLED_NS) is (scope != "other-namespaces")
        for other in OTHER_NAMESPACES:
            assert matches(selector, other) is (scope != "enabled-namespaces")


ENABLED_PATH = "/validate/enabled-namespace"


def _entries_for(resource: str, path: str) -> list[Obj]:
    return [hook for kind, hook in _webhooks() if kind == "ValidatingWebhookConfiguration"
            and hook["clientConfig"]["service"]["path"] == path
            and any(resource in rule["resources"] for rule in hook["rules"])]


def _sent_to(resource: str, path: str, old: Obj | None, new: Obj, ns_labels: dict[str, str], *,
             dry_run: bool = False) -> int:
    """How many entries send this update (a CREATE when `old` is None) to `path`: the rules' operations,
    the namespaceSelector, then the matchConditions."""
    operation = "CREATE" if old is None else "UPDATE"
    return sum(any(operation in rule["operations"] for rule in h["rules"])
               and matches(h["namespaceSelector"], ns_labels) and reaches_webhook(old, new, h, dry_run=dry_run)
               for h in _entries_for(resource, path))


def _answer(handler_path: str, kind: str, old: Obj | None, new: Obj, *, dry_run: bool = False) -> Obj:
    """What the handler serve mounts at `handler_path` answers an UPDATE (a CREATE when `old` is None)."""
    handlers = admission_handlers(ServeSettings())
    handler = handlers.validate if handler_path == "/validate" else handlers.validate_enabled_namespace
    group, _, version = new["apiVersion"].rpartition("/")
    sent = review(operation="CREATE" if old is None else "UPDATE", obj=new, old=old, kind=(group, version, kind),
                  namespace="shop", dry_run=dry_run)
    return dict(answer(handler, sent))


def _judged(handler_path: str, kind: str, old: Obj, new: Obj) -> tuple[bool, bool]:
    """(allowed, warned) from the handler serve mounts at `handler_path`."""
    got = _answer(handler_path, kind, old, new)
    return got["allowed"], bool(got.get("warnings"))


PLAIN_NS = {NAME_LABEL: "shop"}
ENABLED_NS = PLAIN_NS | {INJECT_LABEL: NAMESPACE_OPT_IN}
OTHER_NAMESPACES = (PLAIN_NS, PLAIN_NS | {INJECT_LABEL: "disabled"})
TEMPLATE_CASES = [(f"{kind}: {t.name}", kind, t) for kind in ("Deployment", "CronJob") for t in WORKLOAD_TRANSITIONS]
ENABLED_CASES = [(f"{kind}: {t.name}", kind, t) for kind in (*WORKLOAD_KINDS, "CronJob")
                 for t in ENABLED_NAMESPACE_TRANSITIONS]
RESOURCES = {"Deployment": "deployments", "StatefulSet": "statefulsets", "DaemonSet": "daemonsets",
             "CronJob": "cronjobs"}


@pytest.mark.parametrize(("case", "kind", "transition"), TEMPLATE_CASES, ids=[c[0] for c in TEMPLATE_CASES])
def test_every_template_update_that_matters_reaches_validate_once(case: str, kind: str,
                                                                 transition: Transition) -> None:
    """Denied or warned -> outside enabled namespaces the shipped entries send it to /validate, exactly
    once, and never to /validate/enabled-namespace; from an enabled namespace never to /validate."""
    old, new = templated(kind, transition.old), templated(kind, transition.new)
    resource = RESOURCES[kind]
    matters = _judged("/validate", kind, old, new) != (True, False)
    assert matters is (not transition.allowed or transition.warns)
    for ns_labels in OTHER_NAMESPACES:
        sent = _sent_to(resource, "/validate", old, new, ns_labels)
        assert sent == 1 if matters else sent <= 1
        assert _sent_to(resource, ENABLED_PATH, old, new, ns_labels) == 0
    assert _sent_to(resource, "/validate", old, new, ENABLED_NS) == 0


@pytest.mark.parametrize(("case", "kind", "transition"), ENABLED_CASES, ids=[c[0] for c in ENABLED_CASES])
def test_every_update_in_an_enabled_namespace_that_matters_reaches_the_enabled_path_once(
    case: str, kind: str, transition: Transition
) -> None:
    """/validate's rules take TLS to be the label "true", which is wrong here (dropping a "true" changes
    nothing): the update must reach the enabled path, which judges it alone."""
    old, new = templated(kind, transition.old), templated(kind, transition.new)
    resource = RESOURCES[kind]
    verdict = _judged(ENABLED_PATH, kind, old, new)
    assert verdict == (transition.allowed, transition.warns)
    sent = _sent_to(resource, ENABLED_PATH, old, new, ENABLED_NS)
    assert sent == 1 if verdict != (True, False) else sent <= 1
    assert _sent_to(resource, "/validate", old, new, ENABLED_NS) == 0
    # Outside an enabled namespace the path is never called: its rules take the namespace as enabled.
    for ns_labels in OTHER_NAMESPACES:
        assert _sent_to(resource, ENABLED_PATH, old, new, ns_labels) == 0


def test_an_enabled_namespace_template_without_label_or_annotations_is_not_sent() -> None:
    """Nothing to judge there (TLS on with the default name and mode on both sides), so an outage cannot
    block it."""
    old, new = with_image(workload("Deployment", OFF), "a:1"), with_image(workload("Deployment", OFF), "a:2")
    assert _sent_to("deployments", ENABLED_PATH, old, new, ENABLED_NS) == 0
    assert _judged(ENABLED_PATH, "Deployment", old, new) == (True, False)


def test_an_unlabelled_template_moving_back_from_pod_certificates_in_an_enabled_namespace_is_sent() -> None:
    """It has TLS there without the label, so the mode rule must see it: the mode annotation alone sends it."""
    old, new = workload("Deployment", OFF), workload("Deployment", OFF)
    old["spec"]["template"]["metadata"]["annotations"] = {MODE_ANNOTATION: MODE_POD_CERTIFICATE}
    assert _judged(ENABLED_PATH, "Deployment", old, new) == (False, False)
    assert _sent_to("deployments", ENABLED_PATH, old, new, ENABLED_NS) == 1


@pytest.mark.parametrize("case", NAMESPACE_TRANSITIONS, ids=lambda case: case[0])
def test_every_namespace_update_that_matters_reaches_validate(case: tuple[str, str | None, str | None, bool]) -> None:
    """For a Namespace the selector sees the object's own new labels: the entry must not select on the
    opt-in label, or the update removing it would never be sent."""
    _, old_label, new_label, allowed = case
    old, new = namespace_object(old_label), namespace_object(new_label, team="checkout")
    verdict = _judged("/validate", "Namespace", old, new)
    assert verdict[0] is allowed
    sent = _sent_to("namespaces", "/validate", old, new, new["metadata"]["labels"])
    assert sent == 1 if verdict != (True, False) else sent <= 1
    assert _sent_to("namespaces", ENABLED_PATH, old, new, new["metadata"]["labels"]) == 0


def test_a_namespace_update_without_the_opt_in_label_on_either_side_is_not_sent() -> None:
    old, new = namespace_object(None), namespace_object(None, team="checkout")
    assert _sent_to("namespaces", "/validate", old, new, new["metadata"]["labels"]) == 0


@pytest.mark.parametrize("name", sorted(SYSTEM_NAMESPACES))
def test_a_system_namespace_object_is_never_sent(name: str) -> None:
    old, new = namespace_object("enabled", name=name), namespace_object(None, name=name)
    assert _sent_to("namespaces", "/validate", old, new, new["metadata"]["labels"]) == 0


def _created(kind: str, label: str | None) -> Obj:
    """A new workload as `kubectl apply` sends it, its pod template labelled `label` (or not at all)."""
    template = {"metadata": {"labels": {"app": "web"} | ({INJECT_LABEL: label} if label else {})},
                "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}}
    if kind == "CronJob":
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": {"name": "web", "namespace": "shop"},
                "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": template}}}}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template}}


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "real"])
@pytest.mark.parametrize("label", [POD_OPT_IN, None, POD_OPT_OUT], ids=["true", "unlabelled", "false"])
@pytest.mark.parametrize("enabled", [False, True], ids=["other-namespace", "enabled-namespace"])
@pytest.mark.parametrize("kind", [*WORKLOAD_KINDS, "CronJob"])
def test_a_dry_run_create_of_a_workload_gets_the_preview_and_a_real_one_never_calls(
    kind: str, enabled: bool, label: str | None, dry_run: bool
) -> None:
    """A workload that does not exist yet: its dry run reaches one path exactly when its pods will be
    injected, and that path's answer says what they will get; a real CREATE reaches no path at all, so a
    webhook outage never blocks creating anything. Routed by the shipped entries, CEL included."""
    new, resource = _created(kind, label), RESOURCES[kind]
    ns_labels = ENABLED_NS if enabled else PLAIN_NS
    path, other = (ENABLED_PATH, "/validate") if enabled else ("/validate", ENABLED_PATH)
    injected = label != POD_OPT_OUT if enabled else label == POD_OPT_IN
    sent = _sent_to(resource, path, None, new, ns_labels, dry_run=dry_run)
    assert _sent_to(resource, other, None, new, ns_labels, dry_run=dry_run) == 0
    if not dry_run:
        assert sent == 0
        return
    assert sent == 1 if injected else sent <= 1
    if not sent:
        return
    answer = _answer(path, kind, None, new, dry_run=True)
    assert answer["allowed"] is True
    lines = [w for w in answer.get("warnings", []) if w.startswith(f"tls-injector: pods of {kind} web")]
    assert len(lines) == int(injected), lines
    if injected:
        assert "will get the certificate of Secret web-tls at /etc/tls-injector/certs" in lines[0]
        assert ("if the namespace is labelled" in lines[0]) is False
