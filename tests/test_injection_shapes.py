"""Pods of any shape: the planner either plans a patch that applies or refuses with a short message.

The apiserver only sends objects it decoded as Pods, but the webhook must not rely on it: a type error in
the planner would be a 500 and leave the decision to failurePolicy. Pods are damaged at one to three
places (a wrong type, an odd or huge string, deep nesting, a deleted field).
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.reviews import fixture
from tests.support.shapes import DELETE, damage, paths
from tls_injector.injection import InjectionOptions, InjectionRefused, Plan, patch_ops, plan_pod

OPTIONS = InjectionOptions()
BASES: list[dict[str, Any]] = [
    fixture("synthetic/pod-create-from-replicaset.json")["request"]["object"],
    fixture("synthetic/pod-create-no-volumes-with-init-and-native-sidecar.json")["request"]["object"],
    fixture("k8s-api-testdata/core.v1.Pod.json"),
]
BASES[2]["metadata"]["annotations"]["tls-injector.io/secret-name"] = "fixture-tls"
BASES[0]["metadata"]["annotations"] |= {"tls-injector.io/env": "true", "tls-injector.io/containers": "app"}
BASES[0]["spec"]["containers"][0]["env"] = [{"name": "PORT", "value": "8443"}, {"name": "SSL_CERT_FILE", "value": "/x"}]


# What the planner reads, at most down to a mount's or env entry's fields: damage elsewhere (probes,
# resources, the hundreds of fields of the API fixture) would only dilute the examples.
READ = {"metadata", "spec", "annotations", "labels", "ownerReferences", "name", "generateName", "volumes",
        "containers", "initContainers", "volumeMounts", "env", "envFrom", "mountPath", "secret", "configMap",
        "secretName", "kind", "controller"}


def read_by_planner(path: tuple[Any, ...]) -> bool:
    return len(path) <= 6 and all(isinstance(key, int) or key in READ or key.startswith("tls-injector.io/")
                                  for key in path)


PATHS = [[p for p in paths(base) if p and read_by_planner(p)] for base in BASES]
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
hostile = st.one_of(
    st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=3), max_leaves=8),
    st.integers(1000, 100_000).map(lambda n: "a" * n),
    st.sampled_from(["", "/", "~1", "..", "/etc/tls-injector/certs", "true", "false", "app", "tls-injector-cert"]),
    st.just(DELETE),
)


@st.composite
def damaged_pods(draw: st.DrawFn) -> dict[str, Any]:
    index = draw(st.integers(0, len(BASES) - 1))
    pod = copy.deepcopy(BASES[index])
    for _ in range(draw(st.integers(1, 3))):
        damage(pod, draw(st.sampled_from(PATHS[index])), draw(hostile))
    return pod


def plan_or_refusal(pod: dict[str, Any]) -> Plan | str:
    try:
        return plan_pod(pod, options=OPTIONS, ca_fingerprints=["aa"])
    except InjectionRefused as refusal:
        return str(refusal)


@settings(max_examples=600, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(damaged_pods())
def test_any_pod_gets_a_patch_that_applies_or_a_short_refusal(pod: dict[str, Any]) -> None:
    plan = plan_or_refusal(pod)
    if isinstance(plan, str):
        assert 0 < len(plan) < 600
        return
    jsonpatch.apply_patch(pod, patch_ops(plan))  # raises when an op does not apply
    assert all(len(w) < 300 for w in plan.warnings)
