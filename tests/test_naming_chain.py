"""One naming across the chain: for every way pods are made, the Secret /mutate mounts is the Secret the
reconciler's discovery issues and the Secret `inject` renders for the template, with the services users
are promised. Pods are built as the cluster builds them (tests/support/workloads.py); a CronJob's run
passes through /mutate's Job pinning first, as in the cluster."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.kube_schema import schema_errors
from tests.support.reviews import answer, review
from tests.support.workloads import INJECT, KINDS, SECRET, SERVICES, Obj, Shape, build, manifest, stored_name
from tls_injector.injection import InjectionOptions, make_mutate_handler, template_of
from tls_injector.offline.inject import inject_manifests
from tls_injector.reconcile.core.discover import discover

NAMESPACE = "shop"
OPTIONS = InjectionOptions()
MUTATE = make_mutate_handler(OPTIONS)

# DNS labels short enough that `<name>-<hash>-tls` stays a valid name; some end in digits like a
# CronJob run's Job (`backup-20261122`), some contain the template hash's own shape.
label = st.from_regex(r"[a-z]([a-z0-9]{0,5})(-[a-z0-9]{1,8}){0,2}", fullmatch=True)
services = st.lists(label, min_size=1, max_size=3).map(" , ".join)


@st.composite
def shapes(draw: st.DrawFn) -> tuple[Shape, bool]:
    """A shape and whether its namespace is opted in (then the pod label may be absent)."""
    enabled = draw(st.booleans())
    labels = {INJECT: "true"} if not enabled or draw(st.booleans()) else {}
    annotations: dict[str, str] = {}
    if draw(st.booleans()):
        annotations[SECRET] = draw(label) + "-certs"
    if draw(st.booleans()):
        annotations[SERVICES] = draw(services)
    if draw(st.booleans()):
        annotations["example.com/note"] = "kept"
    shape = Shape(draw(st.sampled_from(KINDS)), draw(label), labels, annotations,
                  generate_name=draw(st.booleans()), name_filled=draw(st.booleans()), hash_label=draw(st.booleans()))
    return shape, enabled


def mutated(obj: Obj, kind: tuple[str, str, str] = ("", "v1", "Pod")) -> Obj:
    """The object after /mutate's patch, applied as the apiserver applies it."""
    response = answer(MUTATE, review(obj=obj, kind=kind, namespace=NAMESPACE))
    assert response["allowed"], response
    ops = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    result: Obj = jsonpatch.apply_patch(obj, ops)
    return result


def admit_job(job: Obj) -> Obj:
    return mutated(job, ("batch", "v1", "Job"))


class Cluster:
    """What the cluster stores: objects with uids, in creation order."""

    def __init__(self) -> None:
        self.objects: list[Obj] = []

    def create(self, obj: Obj) -> Obj:
        stored = copy.deepcopy(obj)
        stored["metadata"]["uid"] = f"uid-{len(self.objects)}"
        self.objects.append(stored)
        return stored

    def listed(self) -> list[tuple[str, Obj]]:
        return [(o["kind"], o) for o in self.objects if o["kind"] in template_kinds()]


def template_kinds() -> set[str]:
    return {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"}


def mounted_secret(pod: Obj) -> str:
    [secret] = [v["secret"]["secretName"] for v in pod["spec"]["volumes"] if v["name"] == "tls-injector-cert"]
    assert isinstance(secret, str)
    return secret


def injected_secret(shape: Shape, enabled: bool) -> str | None:
    """The Secret `inject` renders into the template of the manifest the user applies."""
    document = manifest(shape, NAMESPACE)
    if document is None:
        return None  # a CRD's template is not one `inject` knows
    [out] = yaml.safe_load_all(inject_manifests(yaml.safe_dump(document), options=OPTIONS,
                                                include_unlabelled=enabled).text)
    rendered = template_of(shape.kind, out)
    assert rendered is not None
    return mounted_secret(rendered)


def chain(shape: Shape, enabled: bool) -> tuple[str, list[Any], str | None]:
    """(Secret /mutate mounts, discovery's targets, Secret `inject` renders)."""
    cluster = Cluster()
    pod = mutated(build(shape, NAMESPACE, create=cluster.create, admit_job=admit_job))
    assert schema_errors(pod) == []
    stored = cluster.create(stored_name(pod))
    targets = discover(cluster.listed(), [stored], enabled={NAMESPACE} if enabled else set())
    return mounted_secret(pod), targets, injected_secret(shape, enabled)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(shapes())
def test_mutate_discovery_and_inject_agree_on_the_secret_and_its_services(drawn: tuple[Shape, bool]) -> None:
    shape, enabled = drawn
    mounted, targets, injected = chain(shape, enabled)
    assert mounted == shape.expected_secret()
    assert [t.secret_name for t in targets] == [mounted], f"{shape}: discovery must issue exactly what is mounted"
    assert injected in (None, mounted)
    dns = targets[0].dns_names
    assert set(dns) == {f"{s}{suffix}" for s in shape.expected_services()
                        for suffix in (f".{NAMESPACE}.svc", f".{NAMESPACE}.svc.cluster.local")}


OPTED_IN = {INJECT: "true"}
# The table in docs/injection.md, each row once, so a failure names the shape.
TABLE = [
    (Shape("Deployment", "web", OPTED_IN), "web-tls"),
    (Shape("StatefulSet", "db", OPTED_IN), "db-tls"),
    (Shape("DaemonSet", "agent", OPTED_IN), "agent-tls"),
    (Shape("Job", "backup-20261122", OPTED_IN), "backup-20261122-tls"),
    (Shape("CronJob", "nightly", OPTED_IN), "nightly-tls"),
    (Shape("ReplicaSet", "cache", OPTED_IN), "cache-tls"),
    (Shape("Pod", "debug", OPTED_IN, generate_name=False), "debug-tls"),
    (Shape("Pod", "dbg", OPTED_IN, generate_name=True), "dbg-tls"),
    (Shape("Pod", "dbg", OPTED_IN, generate_name=True, name_filled=True), "dbg-tls"),
    (Shape("Cluster", "node-1", OPTED_IN), "node-1-tls"),
]


@pytest.mark.parametrize(("shape", "secret"), TABLE, ids=[str(shape) for shape, _ in TABLE])
@pytest.mark.parametrize("enabled", [False, True], ids=["pod-label", "namespace-too"])
def test_every_shape_of_the_documented_table_gets_its_secret_everywhere(shape: Shape, secret: str,
                                                                        enabled: bool) -> None:
    mounted, targets, injected = chain(shape, enabled)
    assert (mounted, [t.secret_name for t in targets], injected) == (
        secret, [secret], None if shape.kind == "Cluster" else secret)


def test_every_run_of_a_cronjob_shares_one_secret_and_a_run_is_pinned_once() -> None:
    shape = Shape("CronJob", "nightly", {INJECT: "true"})
    first, second = Cluster(), Cluster()
    pods = [mutated(build(shape, NAMESPACE, create=c.create, admit_job=admit_job)) for c in (first, second)]
    assert {mounted_secret(p) for p in pods} == {"nightly-tls"}
    [job] = [o for o in first.objects if o["kind"] == "Job"]
    assert job["spec"]["template"]["metadata"]["annotations"] == {SECRET: "nightly-tls", SERVICES: "nightly"}
    assert admit_job(job) == job
