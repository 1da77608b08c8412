"""The one function that reads: the cluster through tls_injector.kube, and the webhook over TLS.

Each section is read on its own: a section the doctor may not read (403) or that is broken is recorded
in `Snapshot.errors` and reported by its checks, and the other sections are still checked. Only an API
server that cannot be reached or will not authenticate us stops the run (`ApiUnreachable`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime

from tls_injector.doctor.exceptions import granting_deployments
from tls_injector.doctor.reconciler import required_permissions
from tls_injector.doctor.snapshot import Access, DoctorSettings, Snapshot
from tls_injector.doctor.webhook import served_targets
from tls_injector.doctor.workloads import mounted, targets
from tls_injector.kube import (
    CONFIG_MAPS,
    DEPLOYMENTS,
    LEASES,
    SECRETS,
    SUBJECT_ACCESS_REVIEWS,
    VALIDATING_ADMISSION_POLICIES,
    VALIDATING_ADMISSION_POLICY_BINDINGS,
    KubeApi,
    KubeError,
    NotFound,
    Obj,
    Resource,
    Unauthorized,
    Unavailable,
)
from tls_injector.kubenames import subdomain_problem
from tls_injector.names import CLIENT_CA_SECRET, MEMBER_LABEL
from tls_injector.pki import CaRole
from tls_injector.reconcile.ca.machine import CaUnusable, load_ca_set
from tls_injector.reconcile.core.read import read_cluster
from tls_injector.reconcile.federation.holds import overdue_holds
from tls_injector.reconcile.federation.hub import MemberOutcome, each_member, inspect_member, member_ack
from tls_injector.reconcile.federation.issuance import INTERMEDIATE_SECRETS, Roots, roots_from
from tls_injector.reconcile.federation.registry import Member, members_from, rotation_excluded
from tls_injector.reconcile.native.signer import NativeApis
from tls_injector.reconcile.parts.served import Served, fetch_served
from tls_injector.reconcile.parts.webhook_plan import WEBHOOK_KINDS

Fetch = Callable[..., Served]


class ApiUnreachable(Exception):
    """The API server cannot be reached, or does not accept our credentials: nothing can be checked."""


def read(api: KubeApi, settings: DoctorSettings, *, now: datetime, fetch: Fetch = fetch_served) -> Snapshot:
    snap = Snapshot(settings, now)
    _section(snap, "configs", lambda: _configs(api, snap))
    _section(snap, "serving_secret", lambda: _serving_secret(api, snap))
    users = tuple(name for _, name in settings.user_ca_secrets)
    for name in (settings.ca_secret, settings.webhook.ca.secret_name, CLIENT_CA_SECRET, *users):
        _section(snap, name, functools.partial(_ca_secret, api, snap, name))
    _section(snap, "cluster", lambda: _cluster(api, snap))
    _section(snap, "lease", lambda: setattr(snap, "lease", _optional(api, LEASES, settings.lease_name,
                                                                          settings.namespace)))
    _section(snap, "access", lambda: _access(api, snap))
    _section(snap, "exceptions", lambda: _exceptions(api, snap))
    _section(snap, "federation", lambda: _federation(api, snap))
    snap.served = _served(snap, fetch)
    return snap


def _exceptions(api: KubeApi, snap: Snapshot) -> None:
    """The Deployments in our namespace that grant TLS exceptions; only if one does, the policies and
    bindings that must guard them (cluster-scoped, by name)."""
    deployments = api.list_objects(DEPLOYMENTS, namespace=snap.settings.namespace).items
    snap.exceptions.granting = granting_deployments(deployments)
    if snap.exceptions.granting:
        for name in snap.settings.exception_policies:
            snap.exceptions.policies[name] = _optional(api, VALIDATING_ADMISSION_POLICIES, name)
            snap.exceptions.bindings[name] = _optional(api, VALIDATING_ADMISSION_POLICY_BINDINGS, name)


def _federation(api: KubeApi, snap: Snapshot) -> None:
    """A hub: each registered member, visited read-only with its kubeconfig (`inspect_member`, side by side,
    each visit within its deadline); a member: the hub's intermediate Secrets in its namespace."""
    settings = snap.settings
    if not settings.hub:
        for name in INTERMEDIATE_SECRETS.values():
            snap.intermediates[name] = _optional(api, SECRETS, name, settings.namespace)
        return
    client_secret = _optional(api, SECRETS, CLIENT_CA_SECRET, settings.namespace)
    roots = (_roots("serving", snap.ca_secrets.get(settings.ca_secret), snap.now),
             _roots("client", client_secret, snap.now))
    registered = api.list_objects(SECRETS, namespace=settings.namespace, label_selector=MEMBER_LABEL).items
    members, problems = members_from(registered)
    snap.members = each_member(members, lambda m: inspect_member(m, namespace=settings.namespace, roots=roots,
                                                                 clock=lambda: snap.now))
    snap.members += [MemberOutcome(name, problem) for name, problem in problems.items()]
    _overdue(snap, members, {"serving": snap.ca_secrets.get(settings.ca_secret), "client": client_secret})


def _overdue(snap: Snapshot, members: list[Member], secrets: dict[CaRole, Obj | None]) -> None:
    """Add to each member's reason the root rotations it has held past the deadline, from its report as
    the hub's pass reads it (federation.overdue_holds)."""
    sets = {}
    for role, secret in secrets.items():
        try:
            sets[role] = load_ca_set(secret)
        except CaUnusable:
            continue  # said by the CA checks
    reports = each_member(members, lambda m: member_ack(m, namespace=snap.settings.namespace)[0])
    acks = {m.name: ack for m, ack in zip(members, reports, strict=True)}
    held = overdue_holds(sets, acks, now=snap.now, settle=snap.settings.ca_settle,
                         excluded=rotation_excluded(members))
    for outcome in snap.members:
        if reasons := held.get(outcome.name):
            outcome.problem = "; ".join([p for p in (outcome.problem,) if p] + reasons)


def _roots(role: CaRole, secret: Obj | None, now: datetime) -> Roots:
    try:
        return roots_from(role, load_ca_set(secret), now=now)
    except CaUnusable as e:
        return Roots(role, None, (), f"the hub's {role} CA Secret cannot be used: {e}")


def _section(snap: Snapshot, name: str, work: Callable[[], object]) -> None:
    try:
        work()
    except (Unavailable, Unauthorized) as e:
        raise ApiUnreachable(f"{type(e).__name__}: {e}") from e
    except KubeError as e:
        snap.errors[name] = f"{type(e).__name__}: {e}"


def _optional(api: KubeApi, resource: Resource, name: str, namespace: str | None = None) -> Obj | None:
    try:
        return api.get(resource, name, namespace=namespace)
    except NotFound:
        return None


def _ca_secret(api: KubeApi, snap: Snapshot, name: str) -> None:
    snap.ca_secrets[name] = _optional(api, SECRETS, name, snap.settings.namespace)


def _configs(api: KubeApi, snap: Snapshot) -> None:
    for resource in WEBHOOK_KINDS:
        for name in snap.settings.webhook.configurations:
            snap.configs[resource.kind, name] = _optional(api, resource, name)


def _serving_secret(api: KubeApi, snap: Snapshot) -> None:
    snap.serving_secret = _optional(api, SECRETS, snap.settings.webhook.secret_name, snap.settings.namespace)


def read_workloads(api: KubeApi, snap: Snapshot) -> None:
    """The workloads' part of the reading alone (`tls-injector status`): what `_cluster` reads."""
    _cluster(api, snap)


def _cluster(api: KubeApi, snap: Snapshot) -> None:
    """The reconciler's own read, then by name whatever it would not list: a wanted Secret without our
    label (someone else's, in the way) and the objects pods mount, to tell "missing" from "not ours"."""
    snap.observed = read_cluster(api)
    snap.pod_certificates = NativeApis(api).version() is not None
    for target in targets(snap):
        _by_name(api, snap, "Secret", target.namespace, target.secret_name)
        if target.client_wanted:
            _by_name(api, snap, "Secret", target.namespace, target.client_secret)
    for pod in snap.observed.pods:
        for kind, name in mounted(pod):
            _by_name(api, snap, kind, pod["metadata"].get("namespace") or "default", name)


def _by_name(api: KubeApi, snap: Snapshot, kind: str, namespace: str, name: str) -> None:
    if subdomain_problem(name):  # a pod's volume names it, as its author wrote it: not read (it is missing)
        return
    if kind == "Secret":
        if (namespace, name) not in snap.observed.leaves and (namespace, name) not in snap.secrets:
            snap.secrets[namespace, name] = _optional(api, SECRETS, name, namespace)
    elif snap.config_map(namespace, name) is None and (namespace, name) not in snap.config_maps:
        snap.config_maps[namespace, name] = _optional(api, CONFIG_MAPS, name, namespace)


def _access(api: KubeApi, snap: Snapshot) -> None:
    settings = snap.settings
    user = f"system:serviceaccount:{settings.namespace}:{settings.reconciler_account}"
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{settings.namespace}", "system:authenticated"]
    for permission in required_permissions(settings.webhook.configurations, settings.lease_name):
        namespace = settings.namespace if permission.scope == "own" else None
        for name in permission.names or (None,):
            resource, _, subresource = permission.resource.partition("/")
            attributes = {"verb": permission.verb, "group": permission.group, "resource": resource,
                          **({"subresource": subresource} if subresource else {}),
                          **({"namespace": namespace} if namespace else {}), **({"name": name} if name else {})}
            review = api.create(SUBJECT_ACCESS_REVIEWS, {
                "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": groups, "resourceAttributes": attributes}})
            allowed = bool((review.get("status") or {}).get("allowed"))
            snap.access.append(Access(permission.verb, permission.group, permission.resource, namespace, name, allowed))


def _served(snap: Snapshot, fetch: Fetch) -> list[Served]:
    """One connection per distinct host the entries call; to --webhook-address when given."""
    found = []
    for server_name, service_port in served_targets(snap):
        host, port = snap.settings.webhook_address or (server_name, service_port)
        found.append(fetch(host, port, server_name=server_name, explicit=snap.settings.webhook_address is not None))
    return found
