"""Each part of the reconciler alone, with small fakes of what it is handed (app/reconcile/parts/reconciler.py
composes them): the announcer with a recording outbox, the writer with an API that answers as told and no
CA, the hub side with a list of registrations and no cache, the member side with no intermediate, the
CA keeper with a writer and no federation. The chain tests beside this file run them together."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, cast

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, reconciler
from tls_injector import names
from tls_injector.kube import CONFIG_MAPS, SECRETS, Conflict, KubeApi, NotFound, Resource, Unavailable
from tls_injector.kube.api import ObjectList
from tls_injector.reconcile.ca.machine import CaPolicy
from tls_injector.reconcile.core.discover import WorkloadRef
from tls_injector.reconcile.core.events import Outbox, issued_message
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.core.objects import Item, Obj, Write
from tls_injector.reconcile.parts.announcer import Announcer
from tls_injector.reconcile.parts.members import HubSide, MemberSide
from tls_injector.reconcile.parts.state import NotLeader, PassReport, ReconcileSettings
from tls_injector.reconcile.parts.trust import CaKeeper
from tls_injector.reconcile.parts.writes import BACKOFF_FIRST, MAX_ATTEMPTS, UNAVAILABLE_STREAK, Writer

NOW = datetime(2026, 1, 1, tzinfo=UTC)
REF = WorkloadRef("Deployment", "ns", "web", "uid-1", "apps/v1")


@dataclass
class Told:
    """An outbox that keeps what it is given: (reason, kind, message) per Event, and its flushes."""

    events: list[tuple[str, str, str]] = field(default_factory=list)
    flushes: int = 0

    def emit(self, refs: tuple[WorkloadRef, ...], *, reason: str, message: str,
             kind: Literal["Normal", "Warning"], now: datetime) -> None:
        self.events += [(reason, kind, message) for _ in refs]

    def tell_issued(self, namespace: str, told: list[str], now: datetime) -> None:
        self.events.append(("CertificatesIssued", "Normal", issued_message(told)))

    def flush(self) -> None:
        self.flushes += 1


def announcer() -> tuple[Announcer, Told]:
    told = Told()
    # No API: with an outbox, every Event goes through it.
    return Announcer(cast(KubeApi, None), outbox=cast(Outbox, told)), told


# ---- the announcer --------------------------------------------------------------------------------------

def test_a_condition_is_announced_once_while_it_lasts_and_again_when_it_comes_back() -> None:
    part, told = announcer()
    for _ in range(3):  # three complete passes that each find it
        part.begin()
        part.announce((REF,), "ns/web-tls", reason="CertificateWaiting", message="waits", now=NOW)
        assert part.facts == {REF: [("CertificateWaiting", "waits")]}  # the status's conditions, every pass
        part.end(complete=True)
    assert told.events == [("CertificateWaiting", "Warning", "waits")]
    assert told.flushes == 3  # each pass ends with its Events written
    part.begin()
    part.end(complete=True)  # a complete pass without it: it ended
    part.begin()
    part.announce((REF,), "ns/web-tls", reason="CertificateWaiting", message="waits", now=NOW)
    assert len(told.events) == 2


def test_a_pass_that_saw_part_of_the_cluster_forgets_no_condition() -> None:
    part, told = announcer()
    part.begin()
    part.announce((REF,), "ns/web-tls", reason="SecretConflict", message="in the way", now=NOW)
    part.end(complete=True)
    part.begin()  # a keyed pass of another namespace, or one that stopped: it did not see the condition
    part.end(complete=False)
    part.begin()
    part.announce((REF,), "ns/web-tls", reason="SecretConflict", message="in the way", now=NOW)
    part.end(complete=True)
    assert [reason for reason, _, _ in told.events] == ["SecretConflict"]


def test_an_event_is_posted_through_the_outbox_with_its_kind() -> None:
    part, told = announcer()
    part.emit((REF, REF), reason="CertificateIssued", message="Secret web-tls: certificate issued", kind="Normal",
              now=NOW)
    assert told.events == [("CertificateIssued", "Normal", "Secret web-tls: certificate issued")] * 2


# ---- the writer -----------------------------------------------------------------------------------------

@dataclass
class Api:
    """The calls a writer makes, answered from `objects`; `fail` raises, in order, for the next writes."""

    objects: dict[tuple[str, str], Obj] = field(default_factory=dict)
    fail: list[Exception] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    def _write(self, verb: str) -> None:
        self.calls.append(verb)
        if self.fail:
            raise self.fail.pop(0)

    def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        self.calls.append("get")
        if (namespace or "", name) not in self.objects:
            raise NotFound(f"{name} not found")
        return self.objects[namespace or "", name]

    def create(self, resource: Resource, body: Obj, *, namespace: str | None = None) -> Obj:
        self._write("create")
        self.objects[namespace or "", body["metadata"]["name"]] = body
        return body

    def replace(self, resource: Resource, body: Obj) -> Obj:
        self._write("update")
        self.objects[body["metadata"].get("namespace") or "", body["metadata"]["name"]] = body
        return body

    def delete(self, resource: Resource, name: str, *, namespace: str | None = None,
               resource_version: str = "") -> None:
        self._write("delete")
        self.objects.pop((namespace or "", name), None)


def secret(name: str, version: str = "1") -> Obj:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version}, "data": {}}


def create_item(name: str = "web-tls") -> Item:
    """A Secret to create while none is there; once one is, nothing to do."""

    def decide(existing: Obj | None) -> Write | None:
        if existing is not None:
            return None
        return Write("create", SECRETS, "ns", name, body=secret(name), reason="issued:missing")

    return Item(SECRETS, "ns", name, decide, workloads=(REF,))


def writer(api: Api, *, may_write: Callable[[], bool] = lambda: True) -> tuple[Writer, Told, ReconcileMetrics]:
    part, told = announcer()
    metrics = ReconcileMetrics()
    return Writer(cast(KubeApi, api), metrics, part, namespace=OWN_NS, may_write=may_write), told, metrics


def test_a_create_is_written_counted_and_told_once() -> None:
    api = Api()
    part, told, _ = writer(api)
    report = PassReport()
    stored: list[Obj | None] = []
    part.converge_all([(create_item(), None)], report, NOW, lambda item, obj: stored.append(obj))
    assert stored == [secret("web-tls")]
    assert (report.writes, report.reasons) == ({"create": 1}, {"issued:missing": 1})
    # Routine issuance is kept for its namespace's one Event, told when the pass ends (tell_issued).
    assert told.events == []
    assert report.issued == {"ns": ["Secret web-tls: certificate issued (missing)"]}
    part.tell_issued(report, NOW)
    assert told.events == [("CertificatesIssued", "Normal", "1 certificate issued or renewed: "
                                                            "Secret web-tls: certificate issued (missing)")]


def test_a_write_that_keeps_failing_backs_off_and_says_when_it_is_tried_again() -> None:
    api = Api(fail=[Conflict("changed")] * MAX_ATTEMPTS)
    part, told, metrics = writer(api)
    report = PassReport()
    assert part.converge_cached(create_item(), None, report, NOW) is None
    assert report.failed == ["Secret ns/web-tls: kept conflicting"]
    assert part.backing_off(("Secret", "ns", "web-tls"))
    assert part.retries() == {"ns": NOW}  # the first failure: tried again at the next pass
    assert [reason for reason, _, _ in told.events] == ["CertificateFailed"]
    # The second failure in a row: held back BACKOFF_FIRST, and the pass says so without a call.
    api.fail = [Conflict("changed")] * MAX_ATTEMPTS
    part.converge_cached(create_item(), None, PassReport(), NOW)
    assert part.retries({"ns"}) == {"ns": NOW + BACKOFF_FIRST}
    calls, held = len(api.calls), PassReport()
    part.converge_cached(create_item(), None, held, NOW + BACKOFF_FIRST / 2)
    assert len(api.calls) == calls
    assert "writes failed in a row; next try at" in held.failed[0]
    # Past its time it is tried, written, and forgotten.
    part.converge_cached(create_item(), None, PassReport(), NOW + BACKOFF_FIRST)
    assert part.retries() == {}
    assert metrics.failures.labels("secret")._value.get() == 3


def test_a_409_reads_the_object_again_and_decides_on_what_is_stored() -> None:
    api = Api(fail=[Conflict("someone wrote first")])
    part, _, _ = writer(api)
    api.objects["ns", "web-tls"] = secret("web-tls", "7")  # what the other writer stored
    report = PassReport()
    assert part.converge_cached(create_item(), None, report, NOW) == secret("web-tls", "7")
    assert api.calls == ["create", "get"]
    assert not report.failed
    assert not report.writes


def test_several_unavailable_answers_in_a_row_stop_the_pass() -> None:
    api = Api(fail=[Unavailable("503")] * UNAVAILABLE_STREAK)
    part, _, _ = writer(api)
    report = PassReport()
    items = [(create_item(f"s{i}"), None) for i in range(UNAVAILABLE_STREAK)]
    with pytest.raises(Unavailable):
        part.converge_all(items, report, NOW, lambda item, obj: None)
    assert len(report.failed) == UNAVAILABLE_STREAK - 1  # the last one stopped the pass instead


def test_a_replica_that_lost_the_lease_writes_nothing() -> None:
    api = Api()
    part, _, _ = writer(api, may_write=lambda: False)
    with pytest.raises(NotLeader):
        part.converge_all([(create_item(), None)], PassReport(), NOW, lambda item, obj: None)
    with pytest.raises(NotLeader):
        part.write(Write("delete", SECRETS, "ns", "x"), PassReport())
    assert api.calls == []


# ---- the hub side ---------------------------------------------------------------------------------------

@dataclass
class Registrations:
    """An API holding the hub's member registrations and nothing else."""

    secrets: list[Obj]

    def list_objects(self, resource: Resource, **_: Any) -> ObjectList:
        assert resource is SECRETS
        return ObjectList(self.secrets, "1")


def test_a_member_registration_without_a_kubeconfig_is_reported_with_why_and_visited_not() -> None:
    registration = {"metadata": {"name": "member-east", "namespace": OWN_NS, "uid": "u-east",
                                 "labels": {names.MEMBER_LABEL: "east"}}, "data": {}}
    part, told = announcer()
    metrics = ReconcileMetrics()
    hub = HubSide(cast(KubeApi, Registrations([registration])), ReconcileSettings(namespace=OWN_NS, hub=True),
                  metrics, part, clock=lambda: NOW, guard=lambda: None)
    hub.begin()
    hub.read()
    report = PassReport()
    hub.converge_members(report, steps={})  # no CA set stepped: nothing to issue, and none is visited
    assert "has no" in report.federation["east"]
    assert hub.members == {"east": report.federation["east"]}
    assert told.events == []  # an unusable registration is no member yet: the report and the log say it
    assert metrics.member_ready.labels("east")._value.get() == 0


# ---- the member side ------------------------------------------------------------------------------------

@dataclass
class Nothing:
    """An API where nothing exists."""

    def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        raise NotFound(name)


def test_a_member_side_without_the_hubs_intermediates_signs_alone_and_reports_nothing() -> None:
    metrics = ReconcileMetrics()
    member = MemberSide(cast(KubeApi, Nothing()), ReconcileSettings(namespace=OWN_NS), metrics)
    report = PassReport()
    member.read(report, NOW, user_roles=())
    member.stepped("serving", {"ns"})
    assert not member.federated
    assert (member.ca("serving"), member.roots("client")) == (None, ())
    assert report == PassReport()
    assert metrics.member_intermediate.labels("serving")._value.get() == 0


# ---- the CA keeper --------------------------------------------------------------------------------------

def test_the_ca_keeper_stores_a_new_ca_set_before_it_signs_and_keeps_its_step() -> None:
    api = Api()
    part, _, _ = writer(api)
    settings = ReconcileSettings(namespace="ns", ca=CaPolicy(settle=timedelta(minutes=5)))
    keeper = CaKeeper(cast(KubeApi, api), settings, ReconcileMetrics(), part, announcer()[0])
    report = PassReport()
    step = keeper.step_ca(settings.workload_ca_policy, bundles=[], leaves=[], user_ca=None, now=NOW, report=report)
    assert step.cas.signer() is not None
    assert api.calls == ["get", "create"]  # read, then stored
    assert ("ns", settings.ca.secret_name) in api.objects
    assert keeper.steps == {settings.ca.secret_name: step}
    assert not keeper.rotating()  # one CA, nothing waits
    keeper.begin()
    assert keeper.steps == {}
    assert keeper.signing is None


# ---- the composition ------------------------------------------------------------------------------------

def test_only_a_hub_has_a_hub_side_and_only_a_non_hub_a_member_side(kubeapi: Emulator) -> None:
    alone = reconciler(kubeapi, Clock())
    assert alone.hub is None
    assert alone.member is not None
    hub = reconciler(kubeapi, Clock(), hub=True)
    assert hub.hub is not None
    assert hub.member is None
    # The settings each part is handed are the ones the reconciler was built with, never replaced.
    assert alone.settings.turn_seconds is None


def test_an_object_of_no_namespace_is_read_back_in_our_own_namespace_after_a_409() -> None:
    api = Api()
    part, _, _ = writer(api)
    api.objects[OWN_NS, "cfg"] = {"metadata": {"name": "cfg"}}
    # A 409 on an object of no namespace reads it back in our own namespace, as a pass reads it.
    api.fail = [Conflict("changed")]
    item = Item(CONFIG_MAPS, "", "cfg", lambda existing: None if existing else
                Write("create", CONFIG_MAPS, "", "cfg", body={"metadata": {"name": "cfg"}}, reason="bundle"))
    assert part.converge_cached(item, None, PassReport(), NOW) == {"metadata": {"name": "cfg"}}


# ---- how the parts hold together ------------------------------------------------------------------------

RECONCILE = Path(__file__).resolve().parents[2] / "app" / "reconcile"
PARTS = ("announcer", "writes", "reports", "targets", "trust", "members", "signer_pass", "webhook_pass", "reconciler")


def reaches(source: str) -> list[str]:
    """Where code reads or writes a private field of another object (`x._f`, `self.part._f`), or writes a
    field of a part it holds (`self.part.f = ...`): each part is reached through its methods only."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            for sub in target.elts if isinstance(target, ast.Tuple) else [target]:
                # The metrics are no part: what a pass reports is set on them (serving_verdict, say).
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute) and \
                        sub.value.attr not in ("metrics", "_metrics"):
                    found.append(f"line {sub.lineno}: {ast.unparse(sub)} =")
    return sorted(found)


def test_no_part_reaches_into_another_parts_fields() -> None:
    for part in PARTS:
        assert reaches((RECONCILE / "parts" / f"{part}.py").read_text()) == [], part


def test_reaching_into_another_objects_fields_is_found() -> None:
    source = ("def f(self, other, d):\n    other._told.add(1)\n    self.keeper.signing, x = None, 1\n    self._ok = 1\n"
              "    d[other.kind] = self.keeper.steps\n")
    assert reaches(source) == ["line 2: other._told", "line 3: self.keeper.signing ="]


def test_no_class_of_the_reconciler_inherits_from_another_of_its_classes() -> None:
    defined = {path.stem: [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)]
               for path in RECONCILE.rglob("*.py")}
    ours = {cls.name for classes in defined.values() for cls in classes}
    inherits = [f"{module}.{cls.name}({ast.unparse(base)})" for module, classes in defined.items() for cls in classes
                for base in cls.bases if ast.unparse(base).rsplit(".", 1)[-1] in ours]
    assert inherits == []


SUBPACKAGES = ("loop", "parts", "federation", "native", "ca", "core")


def test_the_folder_is_its_sub_packages_each_opened_by_what_it_holds() -> None:
    # No module left loose beside the sub-packages: a newcomer finds each concern in its folder.
    assert sorted(p.name for p in RECONCILE.glob("*.py")) == ["__init__.py"]
    assert sorted(p.name for p in RECONCILE.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(SUBPACKAGES)
    for name in SUBPACKAGES:
        doc = ast.get_docstring(ast.parse((RECONCILE / name / "__init__.py").read_text()))
        assert doc, f"{name}/ opens with no docstring"
        # The docstring names every module of its package (the opening comment is the package's map).
        modules = sorted(p.name for p in (RECONCILE / name).glob("*.py") if p.name != "__init__.py")
        assert [m for m in modules if m not in doc] == [], name
