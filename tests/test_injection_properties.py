"""Properties of the injection over generated pods: the patch always applies, the result is a valid Pod
with no duplicate names or paths, and injecting the result again plans nothing.

Pods are generated valid by the Kubernetes schema, in the shapes the apiserver sends: 0..4 containers,
init containers, native sidecars (init containers with restartPolicy Always), ephemeral containers,
volumes and mounts of the user's (some named or placed exactly like ours), env and envFrom, explicit
nulls and missing maps. 2,000 examples, every one schema-checked before and after (~1.5 ms each).
"""

from __future__ import annotations

import copy
import posixpath
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support.kube_schema import schema_errors
from tls_injector.injection import InjectionOptions, InjectionRefused, Plan, patch_ops, plan_pod
from tls_injector.injection.plan import _normalise, _normpath
from tls_injector.names import (
    CERT_PATH_ANNOTATION,
    CONTAINERS_ANNOTATION,
    ENV_ANNOTATION,
    INJECT_LABEL,
    SECRET_NAME_ANNOTATION,
    TLS_ENV_VARS,
    TRUST_PATH_ANNOTATION,
)

OPTIONS = InjectionOptions()
# derandomize: the same 2,000 pods on every run, so a failure in CI reproduces on a laptop; the suite's
# 60 s timeout needs no deadline per example on top.
PROPERTY = settings(max_examples=2000, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

CONTAINER_NAMES = ["app", "web", "init", "proxy", "log", "debug", "worker", "metrics", "migrate"]
VOLUME_NAMES = ["data", "config", "tls-injector-cert", "tls-injector-trust", "tls-injector-cert-2", "cache"]
# Our default and override paths, a trailing-slash spelling of ours, a parent of ours, and unrelated ones.
MOUNT_PATHS = ["/data", "/etc/tls-injector/certs", "/etc/tls-injector/trust/", "/etc/tls-injector", "/tmp",
               "/srv/tls", "/var/run/app"]
# Overrides: one pair collides (/srv/ca) and one nests (/srv/tls in /srv/tls/ca), both refused.
CERT_OVERRIDES = ["/srv/tls", "/etc/ssl/app", "/srv/ca"]
TRUST_OVERRIDES = ["/srv/ca", "/etc/ssl/trust", "/srv/tls/ca"]

VOLUME_SOURCES: list[dict[str, Any]] = [
    {"emptyDir": {}},
    {"secret": {"secretName": "web-tls"}},  # exactly our cert volume's contents
    {"secret": {"secretName": "web-tls", "defaultMode": 420}},  # ... as the apiserver defaults it
    {"configMap": {"name": "tls-injector-trust-bundle"}},  # exactly our bundle volume's contents
    {"configMap": {"name": "settings", "items": [{"key": "a", "path": "a"}]}},
]
ENV_NAMES = [*TLS_ENV_VARS, "HOME", "PORT"]
ENV_CHOICES = ["true", "false", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS,REQUESTS_CA_BUNDLE"]

# Each part of a pod is decoded from one drawn integer (bit fields below) rather than a draw per field:
# measured here, per-field draws cost ~7.7 ms of generation per pod, too slow for 2,000 examples in the
# suite's budget. Every field is 0 for the simplest choice, so Hypothesis still shrinks towards small pods.


class Bits:
    def __init__(self, value: int) -> None:
        self.value = value

    def take(self, width: int) -> int:
        field = self.value & ((1 << width) - 1)
        self.value >>= width
        return field

    def subset(self, items: list[Any], *, rarity: int = 1) -> list[Any]:
        """Each item kept with probability 2**-rarity (for uniform bits; Hypothesis favours zeros)."""
        every = (1 << rarity) - 1
        return [item for item in items if self.take(rarity) == every]


def set_optional(target: dict[str, Any], key: str, state: int, value: Any) -> None:
    """state 0-1: the value (the common case), 2: key missing, 3: explicit null."""
    if state == 3:
        target[key] = None
    elif state <= 1:
        target[key] = value


def container(name: str, shape: int, volume_names: list[str], *, init: bool) -> dict[str, Any]:
    bits = Bits(shape)
    result: dict[str, Any] = {"name": name, "image": "registry.example/app:1"}
    mounts_state, paths = bits.take(2), bits.subset(MOUNT_PATHS, rarity=2)[:3]
    mounts = [{"name": volume_names[(shape + i) % len(volume_names)], "mountPath": p}
              for i, p in enumerate(paths)] if volume_names else []
    set_optional(result, "volumeMounts", mounts_state, mounts)
    env_state, env = bits.take(2), bits.subset(ENV_NAMES)
    set_optional(result, "env", env_state, [{"name": n, "value": "user"} for n in env])
    if bits.take(2) == 3:
        result["envFrom"] = [{"configMapRef": {"name": "settings"}}]
    if init and bits.take(1):
        result["restartPolicy"] = "Always"  # a native sidecar
    return result


SHAPE = st.integers(0, 2**24 - 1)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    layout = Bits(draw(st.integers(0, 2**24 - 1)))
    names = layout.subset(CONTAINER_NAMES)
    n_init = min(layout.take(2), len(names))
    n_main = min(layout.take(3), 4, len(names) - n_init)
    volume_names = layout.subset(VOLUME_NAMES)[:4]
    spec: dict[str, Any] = {"containers": [container(n, draw(SHAPE), volume_names, init=False)
                                           for n in names[n_init : n_init + n_main]]}
    volumes = [{"name": v, **VOLUME_SOURCES[(layout.value + i) % len(VOLUME_SOURCES)]}
               for i, v in enumerate(volume_names)]
    set_optional(spec, "volumes", layout.take(2), volumes)
    if n_init:
        spec["initContainers"] = [container(n, draw(SHAPE), volume_names, init=True) for n in names[:n_init]]
    ephemeral = names[n_init + n_main :]
    if ephemeral and layout.take(1):
        spec["ephemeralContainers"] = [{"name": n, "image": "busybox", "targetContainerName": "app"}
                                       for n in ephemeral]
    targets = names[: n_init + n_main]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata(draw(SHAPE), targets), "spec": spec}


def metadata(shape: int, container_names: list[str]) -> dict[str, Any]:
    bits = Bits(shape)
    annotations: dict[str, str] = {}
    if env := bits.take(3):
        annotations[ENV_ANNOTATION] = ENV_CHOICES[env % len(ENV_CHOICES)]
    if cert := bits.take(2):
        annotations[CERT_PATH_ANNOTATION] = CERT_OVERRIDES[cert - 1]
    if trust := bits.take(2):
        annotations[TRUST_PATH_ANNOTATION] = TRUST_OVERRIDES[trust - 1]
    if bits.take(2) == 3 and (chosen := bits.subset(container_names)):
        annotations[CONTAINERS_ANNOTATION] = ",".join(chosen) if bits.take(1) else ""
    if bits.take(1):
        annotations[SECRET_NAME_ANNOTATION] = "web-tls"
    result: dict[str, Any] = {"generateName": "web-7d4b9c8f6d-",
                              "labels": {INJECT_LABEL: "true", "pod-template-hash": "7d4b9c8f6d"},
                              "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                   "name": "web-7d4b9c8f6d", "uid": "u", "controller": True}]}
    set_optional(result, "annotations", bits.take(2), annotations)
    return result


def annotation(pod: dict[str, Any], key: str, default: str) -> str:
    return posixpath.normpath(((pod["metadata"] or {}).get("annotations") or {}).get(key, default))


def our_paths(pod: dict[str, Any]) -> tuple[str, str]:
    return (annotation(pod, CERT_PATH_ANNOTATION, OPTIONS.cert_mount_path),
            annotation(pod, TRUST_PATH_ANNOTATION, OPTIONS.trust_mount_path))


def selected(pod: dict[str, Any]) -> list[dict[str, Any]]:
    listed = ((pod["metadata"] or {}).get("annotations") or {}).get(CONTAINERS_ANNOTATION) or ""
    every = (pod["spec"].get("initContainers") or []) + (pod["spec"].get("containers") or [])
    return [c for c in every if not listed or c["name"] in listed.split(",")]


def may_clash(pod: dict[str, Any]) -> bool:
    """Our two paths collide, or a selected container already mounts something at one of them.

    Necessary for a refusal; not sufficient (a mount of our own volume there is no clash). A clash that
    went unrefused would show up below as a duplicate mountPath.
    """
    cert, trust = our_paths(pod)
    if cert == trust or cert.startswith(trust + "/") or trust.startswith(cert + "/"):
        return True
    mounted = {posixpath.normpath(m["mountPath"]) for c in selected(pod) for m in c.get("volumeMounts") or []}
    return bool(mounted & {cert, trust})


def assert_unique(items: list[dict[str, Any]] | None, key: str, where: str) -> None:
    values = [posixpath.normpath(i[key]) if key == "mountPath" else i[key] for i in items or []]
    assert len(values) == len(set(values)), f"duplicate {key} in {where}: {values}"


def plan_or_refusal(pod: dict[str, Any]) -> Plan | str:
    try:
        return plan_pod(pod, options=OPTIONS)
    except InjectionRefused as refusal:
        return str(refusal)


@PROPERTY
@given(pods())
def test_injection_applies_yields_a_valid_pod_and_is_idempotent(pod: dict[str, Any]) -> None:
    assert schema_errors(pod) == [], "the generator must produce valid pods"
    before = copy.deepcopy(pod)
    plan = plan_or_refusal(pod)
    event("refused" if isinstance(plan, str) else "injected")
    if isinstance(plan, str):
        assert may_clash(pod), f"refused a pod without a clash: {plan}"
        return
    event(f"{len(selected(pod))} containers injected")
    renamed = any(v["name"] not in {"tls-injector-cert", "tls-injector-trust"} for v in plan.volumes)
    event("a volume renamed" if renamed else "no volume renamed")
    event("env added" if any(c.env for c in plan.containers) else "no env added")
    assert pod == before
    result = jsonpatch.apply_patch(pod, patch_ops(plan))  # raises on an add under a missing list or map
    assert schema_errors(result) == []
    spec = result["spec"]
    assert_unique(spec.get("volumes"), "name", "volumes")
    volumes = {v["name"]: v for v in spec["volumes"]}
    cert_path, trust_path = our_paths(result)
    for container in (spec.get("initContainers") or []) + spec["containers"]:
        assert_unique(container.get("volumeMounts"), "mountPath", container["name"])
        assert_unique(container.get("env"), "name", container["name"])
    for container in selected(result):
        mounted = {posixpath.normpath(m["mountPath"]): m["name"] for m in container["volumeMounts"]}
        assert volumes[mounted[cert_path]]["secret"]["secretName"] == "web-tls"
        assert volumes[mounted[trust_path]]["configMap"] == {"name": "tls-injector-trust-bundle"}
    assert spec.get("ephemeralContainers") == before["spec"].get("ephemeralContainers")
    assert patch_ops(plan_pod(result, options=OPTIONS)) == [], "a second injection must change nothing"


@PROPERTY
@given(st.text(alphabet="/.a", max_size=12))
def test_the_plans_mount_path_normalisation_is_posix_normpath(path: str) -> None:
    # The plan skips normpath for a path it would leave as is, and remembers what it found (savings); it
    # must be the same function, found or remembered.
    assert _normalise(path) == posixpath.normpath(path)
    assert _normpath(path) == _normpath(path) == posixpath.normpath(path)
