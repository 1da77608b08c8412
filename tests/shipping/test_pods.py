"""The webhook and reconciler Deployments and the bootstrap Job: hardened, highly available, wired to each
other, and only the reconciler with API credentials."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

from tests.shipping.support import (
    RECONCILER,
    RENDERINGS,
    ROOT,
    WEBHOOK,
    Obj,
    installed,
    of_kind,
    only,
    reconciler,
    render,
    webhook,
)
from tls_injector.cli.parser import build_parser as _parser
from tls_injector.offline.rulesfile import load_rule_set
from tls_injector.settings import ServeSettings


def _pod_specs() -> list[tuple[str, Obj]]:
    objects = installed()
    return [(f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"])
            for kind in ("Deployment", "Job") for o in of_kind(objects, kind)]


def _deployment() -> Obj:
    return webhook()


def _container(pod: Obj) -> Obj:
    containers: list[Obj] = pod["containers"]
    assert len(containers) == 1
    return containers[0]


def _parsed(pod: Obj) -> argparse.Namespace:
    """The container's args as the real CLI parses them: a typo in a flag fails here, not in the cluster."""
    return _parser().parse_args(_container(pod)["args"])


@pytest.mark.parametrize(("name", "pod"), _pod_specs(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_pod_runs_non_root_read_only_without_privileges_or_capabilities(name: str, pod: Obj) -> None:
    context = pod["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["runAsUser"] > 0
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    container = _container(pod)["securityContext"]
    assert container["allowPrivilegeEscalation"] is False
    assert container["readOnlyRootFilesystem"] is True
    assert container["capabilities"] == {"drop": ["ALL"]}
    assert container.get("privileged") is not True
    assert not {"hostNetwork", "hostPID", "hostIPC"} & {k for k, v in pod.items() if v}


@pytest.mark.parametrize(("name", "pod"), _pod_specs(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_pod_has_requests_and_a_memory_limit_and_a_writable_tmp(name: str, pod: Obj) -> None:
    resources = _container(pod)["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"])
    assert "memory" in resources["limits"]
    mounts = {m["mountPath"]: m["name"] for m in _container(pod)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


@pytest.mark.parametrize(("name", "pod"), _pod_specs(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_container_command_line_is_accepted_by_the_real_cli(name: str, pod: Obj) -> None:
    assert hasattr(_parsed(pod), "run")


@pytest.mark.parametrize("directory", RENDERINGS)
def test_the_webhook_runs_at_least_two_replicas_and_a_drain_never_takes_the_last(directory: str) -> None:
    objects = render(ROOT / directory)
    deployment = webhook(objects)
    replicas = deployment["spec"]["replicas"]
    budget = only(objects, "PodDisruptionBudget")["spec"]
    assert replicas >= 2
    assert 1 <= budget["minAvailable"] < replicas, "minAvailable == replicas would block every node drain"
    assert budget["selector"] == deployment["spec"]["selector"]
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_replicas_prefer_different_nodes() -> None:
    template = _deployment()["spec"]["template"]
    terms = template["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    term = terms[0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()


def test_probes_use_readyz_for_readiness_and_healthz_for_liveness_on_the_probe_port() -> None:
    """The probe listener has its own thread and port, so a saturated HTTPS port cannot starve probes."""
    container = _container(_deployment()["spec"]["template"]["spec"])
    https, probes = container["ports"]
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"),
                        ("startupProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert get == {"path": path, "port": probes["name"]}  # plain HTTP: the kubelet's default scheme
    parsed = _parsed(_deployment()["spec"]["template"]["spec"])
    assert https["containerPort"] == parsed.port
    assert probes["containerPort"] == parsed.probe_port


def test_the_tls_flags_point_into_the_serving_secret_mounted_whole_without_subpath() -> None:
    pod = _deployment()["spec"]["template"]["spec"]
    args = _parsed(pod)
    mounts = {m["mountPath"]: m for m in _container(pod)["volumeMounts"]}
    assert not any("subPath" in m or "subPathExpr" in m for m in mounts.values())
    assert args.tls_cert_file.parent == args.tls_private_key_file.parent
    mount = mounts[str(args.tls_cert_file.parent)]
    assert mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert "items" not in volume["secret"], "the kubernetes.io/tls keys are used as they are"
    assert (args.tls_cert_file.name, args.tls_private_key_file.name) == ("tls.crt", "tls.key")
    assert volume["secret"]["defaultMode"] & 0o007 == 0, "the key must not be world-readable"
    # The Secret mounted is the one the reconciler keeps current and the bootstrap Job creates.
    job_flags = _parsed(only(installed(), "Job")["spec"]["template"]["spec"])
    assert volume["secret"]["secretName"] == args.webhook_secret == job_flags.webhook_secret


def test_the_grace_period_outlasts_the_pre_stop_pause_plus_the_server_drain() -> None:
    pod = _deployment()["spec"]["template"]["spec"]
    drain = _parsed(pod).drain_seconds
    assert drain == ServeSettings().drain_seconds  # the flag says out loud what the default is
    pause = _container(pod)["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > pause + drain


def test_the_bootstrap_job_and_the_reconciler_name_the_objects_that_ship() -> None:
    objects = installed()
    job = only(objects, "Job")
    namespace = only(objects, "Namespace")["metadata"]["name"]
    for pod in (job["spec"]["template"]["spec"], reconciler()["spec"]["template"]["spec"]):
        flags = _parsed(pod)
        assert flags.namespace in (None, namespace)  # None: the pod's service-account namespace
        assert only(objects, "Service", flags.webhook_service)["metadata"]["namespace"] == namespace
        assert flags.cluster_domain is None  # both detect it from the pod's resolv.conf, so they agree
        for name in flags.webhook_configurations.split(","):
            assert only(objects, "MutatingWebhookConfiguration", name)
            assert only(objects, "ValidatingWebhookConfiguration", name)
    assert job["metadata"]["namespace"] == namespace
    assert _parsed(job["spec"]["template"]["spec"]).namespace == namespace


def test_the_injector_namespace_enforces_the_restricted_pod_security_standard() -> None:
    labels = only(installed(), "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_sidecar_tls_example_overlay_mounts_a_rules_file_that_the_server_loads(tmp_path: Path) -> None:
    objects = render(ROOT / "examples/sidecar-tls/overlay")
    pod = webhook(objects)["spec"]["template"]["spec"]
    rules = _parsed(pod).rules
    mount = next(m for m in _container(pod)["volumeMounts"] if m["mountPath"] == str(rules.parent))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    config_map = only(objects, "ConfigMap", volume["configMap"]["name"])
    assert config_map["metadata"]["namespace"] == webhook(objects)["metadata"]["namespace"]
    copy = tmp_path / rules.name
    copy.write_text(config_map["data"][rules.name])
    rule_set = load_rule_set(copy)
    assert any(match.kind == "SeiNode" for rule in rule_set for match in rule.match)


@pytest.mark.parametrize("directory", [*RENDERINGS, "certs-bootstrap", "manifests/overlays/example/bootstrap"])
def test_every_image_is_pinned_to_a_version_tag_and_never_latest(directory: str) -> None:
    for controller in [o for o in render(ROOT / directory) if o["kind"] in ("Deployment", "Job")]:
        for container in controller["spec"]["template"]["spec"]["containers"]:
            name, _, tag = container["image"].rpartition(":")
            assert name, f"{container['image']}: no tag"
            assert tag not in ("", "latest")
            assert container["imagePullPolicy"] == "IfNotPresent"


# What an operator applies to a cluster: the image pinned by digest (a tag can be moved to other bytes).
OVERLAYS = ("manifests/overlays/example", "manifests/overlays/example/bootstrap", "examples/sidecar-tls/overlay")
DIGEST_PINNED = re.compile(r"[a-z0-9.\-/]+(:[\w.\-]+)?@sha256:[0-9a-f]{64}")


@pytest.mark.parametrize("directory", OVERLAYS)
def test_every_image_of_an_overlay_is_pinned_by_digest(directory: str) -> None:
    controllers = [o for o in render(ROOT / directory) if o["kind"] in ("Deployment", "Job")]
    assert controllers
    for controller in controllers:
        for container in controller["spec"]["template"]["spec"]["containers"]:
            assert DIGEST_PINNED.fullmatch(container["image"]), f"{container['image']}: not pinned by digest"


def test_the_digest_pattern_refuses_a_tag_alone() -> None:
    assert not DIGEST_PINNED.fullmatch("registry.example.com/platform/tls-injector:0.1.0")
    assert not DIGEST_PINNED.fullmatch("registry.example.com/platform/tls-injector@sha256:abc")
    assert DIGEST_PINNED.fullmatch("registry.example.com/platform/tls-injector:0.1.0@sha256:" + "ab" * 32)


@pytest.mark.parametrize(("webhook", "job"), [("manifests/base", "certs-bootstrap"),
                                             ("manifests/overlays/example", "manifests/overlays/example/bootstrap")])
def test_the_bootstrap_job_runs_the_same_image_as_the_webhook(webhook: str, job: str) -> None:
    controllers = [*of_kind(render(ROOT / webhook), "Deployment"), only(render(ROOT / job), "Job")]
    assert len(controllers) == 3
    images = {c["image"] for o in controllers for c in o["spec"]["template"]["spec"]["containers"]}
    assert len(images) == 1


def test_the_image_is_set_once_for_every_overlay() -> None:
    """One `images:` entry in the whole tree (besides none in base): every overlay inherits it."""
    entries = [(d, i) for d in (ROOT / "manifests", ROOT / "examples") for k in d.rglob("kustomization.yaml")
               for i in (yaml.safe_load(k.read_text()).get("images") or [])]
    assert len(entries) == 1, entries
    assert entries[0][1]["name"] == "tls-injector"


def test_the_webhook_pods_have_no_api_credentials_and_never_start_the_reconciler() -> None:
    objects = installed()
    pod = webhook()["spec"]["template"]["spec"]
    account = only(objects, "ServiceAccount", pod["serviceAccountName"])
    assert pod["automountServiceAccountToken"] is False
    assert account["automountServiceAccountToken"] is False
    bound = [b["metadata"]["name"] for kind in ("RoleBinding", "ClusterRoleBinding") for b in of_kind(objects, kind)
             if any(s["name"] == account["metadata"]["name"] for s in b["subjects"])]
    assert bound == [], "the webhook's service account must be bound to nothing"
    flags = _parsed(pod)
    assert flags.no_reconciler is True
    assert (flags.kubeconfig, flags.server) == (None, None)
    assert not any(m["mountPath"].startswith("/var/run/secrets") for m in _container(pod)["volumeMounts"])


def test_the_reconciler_runs_alone_with_its_own_account_two_leader_elected_replicas_and_probes() -> None:
    deployment = reconciler()
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["serviceAccountName"] == RECONCILER != webhook()["spec"]["template"]["spec"]["serviceAccountName"]
    assert pod["automountServiceAccountToken"] is True
    flags = _parsed(pod)
    assert flags.run.__module__ == "tls_injector.cli.reconcile"
    assert flags.once is False
    container = _container(pod)
    (port,) = container["ports"]
    assert port["containerPort"] == flags.metrics_port
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    # The reconciler's pods are not the webhook's: the Service and the PDB select only the webhook.
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = only(installed(), "Service", WEBHOOK)["spec"]["selector"]
    assert not service.items() <= labels.items()
    assert labels["tls-injector.io/inject"] == "false"


@pytest.mark.parametrize("directory", RENDERINGS)
def test_every_deployment_uses_the_shipped_priority_class_which_is_not_a_system_one(directory: str) -> None:
    objects = render(ROOT / directory)
    (priority,) = of_kind(objects, "PriorityClass")
    assert 0 < priority["value"] <= 1_000_000_000, "user-defined classes may not exceed one billion"
    assert priority["globalDefault"] is False
    assert not priority["metadata"]["name"].startswith("system-")
    for deployment in of_kind(objects, "Deployment"):
        assert deployment["spec"]["template"]["spec"]["priorityClassName"] == priority["metadata"]["name"]


def _selects(selector: Obj, labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


@pytest.mark.parametrize("name", [WEBHOOK, RECONCILER])
def test_a_network_policy_admits_exactly_the_ports_each_deployment_serves(name: str) -> None:
    objects = installed()
    template = only(objects, "Deployment", name)["spec"]["template"]
    (policy,) = [p for p in of_kind(objects, "NetworkPolicy")
                 if _selects(p["spec"]["podSelector"], template["metadata"]["labels"])]
    admitted = {(port["protocol"], port["port"]) for rule in policy["spec"]["ingress"] for port in rule["ports"]}
    served = {(p["protocol"], p["containerPort"]) for c in template["spec"]["containers"] for p in c["ports"]}
    assert admitted == served
    assert "Ingress" in policy["spec"]["policyTypes"]


def test_the_webhook_pods_may_not_open_any_connection() -> None:
    objects = installed()
    labels = webhook()["spec"]["template"]["metadata"]["labels"]
    (policy,) = [p for p in of_kind(objects, "NetworkPolicy") if _selects(p["spec"]["podSelector"], labels)]
    assert "Egress" in policy["spec"]["policyTypes"]
    assert not policy["spec"].get("egress")


@pytest.mark.parametrize("directory", [d for d in RENDERINGS if d.startswith("manifests/")])
def test_no_injector_overlay_installs_a_crd_so_deleting_it_never_deletes_anyones_objects(directory: str) -> None:
    assert not list(of_kind(render(ROOT / directory), "CustomResourceDefinition"))


def test_every_shipped_pod_template_opts_out_although_its_namespace_is_enabled() -> None:
    """The namespace is labelled enabled for the trust bundle's mirror; each template says "false" too, so
    the intent is on the object itself (the reconciler also ignores unlabelled objects there)."""
    objects = installed()
    assert only(objects, "Namespace")["metadata"]["labels"]["tls-injector.io/inject"] == "enabled"
    for name, _ in _pod_specs():
        kind, _, short = name.partition("/")
        template = only(objects, kind, short)["spec"]["template"]
        assert template["metadata"]["labels"]["tls-injector.io/inject"] == "false", name
