"""Which workloads opted in, and what certificate each namespace needs. Pure: plain dicts in, targets out.

Every way pods are made is covered, with the Secret and service names of app/injection/workload.py (the
naming `/mutate` and `inject` use, so the Secret a pod mounts is the one issued here):

- listed kinds by their pod template: Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob. A
  ReplicaSet run by a listed Deployment, or a Job run by a listed CronJob, is covered by its owner when
  both name the same Secret (a CronJob's runs are pinned to it when created; a run created before that
  pin existed keeps a Secret of its own, which its pods mount);
- pods: a bare pod by itself, a pod whose controller is not a listed kind (any operator's CRD) grouped
  under that controller; a pod of a listed kind is covered by that kind.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tls_injector import names
from tls_injector.injection import (
    Workload,
    client_secret_name_for,
    controller_of,
    pod_workload,
    template_of,
    template_workload,
)
from tls_injector.injection.profile import BUILT_IN, Profile, ProfileBounds, Resolved, resolve_profile, shared_profile
from tls_injector.kubenames import shown, subdomain_problem
from tls_injector.pki import (
    MAX_SERVICES,
    ServiceNames,
    dns_names_for_services,
    peer_dns_names,
    served_by_kubernetes,
    service_name_problem,
    spiffe_id,
    vet_service_names,
)

Obj = dict[str, Any]
# The kinds the reconciler lists (group, kind) with their apiVersion; pods owned by one of them are
# covered by that object's template, not by the pods.
LISTED_KINDS: Mapping[str, str] = {
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "ReplicaSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
}
# An object of the first kind run by one of the second is covered by its owner's template.
COVERED_BY = {"ReplicaSet": "Deployment", "Job": "CronJob"}


@dataclass(frozen=True, order=True, slots=True)
class WorkloadRef:
    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = "apps/v1"

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True, slots=True)
class Target:
    """One certificate Secret the cluster needs: where, for which names, for whom."""

    namespace: str
    secret_name: str
    dns_names: tuple[str, ...]
    workloads: tuple[WorkloadRef, ...]
    # Service names asked for that no certificate may carry, each with why (docs/security.md): reported,
    # never issued. The rest are issued; when nothing valid is left, the workload's own name is used.
    refused: tuple[tuple[str, str], ...] = ()
    # The SPIFFE IDs of the users that asked for a client certificate (docs/mtls.md), sorted: none, no
    # client certificate; one, the client Secret names it; more (users of one Secret running as different
    # service accounts), refused with `client_refusal`, as one certificate must name one identity.
    client_ids: tuple[str, ...] = ()
    # Why the client certificate is refused though one identity asks for it ("" when it is not): its
    # Secret's name is another workload's serving Secret, or its service account does not exist.
    client_problem: str = ""
    # The workloads whose own name is no Service name (`web.v2`, `1web`, 64+ characters: legal for every
    # kind but a Service), with why: not a refusal (they asked for nothing), but when nothing else names
    # the certificate it is why it names nothing (`namelessness`).
    own_names: tuple[tuple[str, str], ...] = ()
    # The certificate profile it is issued with (app/injection/profile.py), and its users' refused profile
    # values (who, why): each refused value was replaced by the operator's default, and a conflict between
    # users sharing the Secret by the whole default profile; never a reason not to issue.
    profile: Profile = BUILT_IN
    profile_problems: tuple[tuple[str, str], ...] = ()
    # Why `secret_name` (from names.SECRET_NAME_ANNOTATION, a value the workload's author writes) is no
    # Secret name ("" when it is one): such a target is refused whole (`secret_name_refusal`), and nothing is
    # read or written under that name (`../../../secrets` would be a path to every Secret of the cluster).
    name_problem: str = ""

    def secret_name_refusal(self) -> str:
        """Why no certificate is issued under this name, for a person ("" when one is)."""
        if not self.name_problem:
            return ""
        return (f"Secret {self.namespace}/{shown(self.secret_name)} of {', '.join(str(w) for w in self.workloads)}: "
                f"not issued, {self.name_problem}; set {names.SECRET_NAME_ANNOTATION} to a Secret name of "
                "the workload's own namespace (a DNS-1123 subdomain)")

    def profile_refusal(self) -> str:
        """The refused profile values for a person ("" when none)."""
        if not self.profile_problems:
            return ""
        said = "; ".join(f"{who}: {why}" for who, why in self.profile_problems[:_LISTED])
        more = f" (+{len(self.profile_problems) - _LISTED} more)" if len(self.profile_problems) > _LISTED else ""
        return (f"Secret {self.namespace}/{self.secret_name}: certificate profile refused, {said}{more}; issued "
                f"with {self.profile.note()}")

    @property
    def client_secret(self) -> str:
        return client_secret_name_for(self.secret_name) if self.client_ids else ""

    @property
    def client_wanted(self) -> bool:
        """One identity asks for a client certificate and nothing refuses it."""
        return len(self.client_ids) == 1 and not self.client_problem

    def client_refused(self, why: str) -> Target:
        """This target with its client certificate refused, saying `why`."""
        return dataclasses.replace(self, client_problem=(
            f"Secret {self.namespace}/{self.client_secret}: the client certificate of "
            f"{', '.join(str(w) for w in self.workloads)} is not issued: {why}"))

    def client_refusal(self) -> str:
        if self.client_problem and self.client_ids:
            return self.client_problem
        if len(self.client_ids) <= 1:
            return ""
        return (f"Secret {self.namespace}/{self.client_secret}: the workloads sharing Secret {self.secret_name} run "
                f"as different service accounts ({', '.join(self.client_ids)}); a client certificate names one: "
                f"give them one service account, or each its own {names.SECRET_NAME_ANNOTATION}")

    def refusal(self) -> str:
        """The refused names for a person ("" when none)."""
        if not self.refused:
            return ""
        return (f"Secret {self.namespace}/{self.secret_name}: {names.SERVICE_NAMES_ANNOTATION} refused "
                f"{ServiceNames((), self.refused).reason()}; a certificate names only Services of its own namespace")

    def namelessness(self) -> str:
        """Why the certificate names no DNS name, for a person ("" when it names some). It is issued all the
        same, so the pods start; no client can verify it for any host until a Service selects them."""
        if self.dns_names:
            return ""
        own = "; ".join(f"{w}: {why}" for w, why in self.own_names[:_LISTED]) or "nothing valid was asked for"
        return (f"Secret {self.namespace}/{self.secret_name}: the certificate names no Service, so no client can "
                f"verify it: no Service of namespace {self.namespace} selects the pods and the workload's own name "
                f"is not a Service name ({own}); add a Service selecting the pods, or name one with "
                f"{names.SERVICE_NAMES_ANNOTATION}, and the next pass re-issues it")


_NOTHING_ASKED = Resolved(BUILT_IN)


@dataclass(frozen=True, slots=True)
class Use:
    """What one workload brings to the Secret it uses: its names, its client identity ("" for none), and
    the Services of its namespace that select its pods."""

    workload: Workload
    client_id: str = ""
    selected: tuple[str, ...] = ()
    # A StatefulSet's governing Service (spec.serviceName) when it is one of `selected`: its pods' per-pod
    # names `<pod>.<service>.<namespace>.svc[.<domain>]` are named by wildcard (pki.peer_dns_names).
    peers: tuple[str, ...] = ()
    # The certificate profile its pod template asks for, under the operator's bounds.
    profile: Resolved = _NOTHING_ASKED


Wanted = dict[tuple[str, str], dict[WorkloadRef, Use]]
# Workloads quoted one by one in a message; the rest are left out (the Event names each on its own object).
_LISTED = 3


def opted_in(pod_labels: Mapping[str, str], *, namespace_enabled: bool) -> bool:
    """The pod label "true" opts in; a namespace labelled "enabled" opts in all pods not labelled "false"."""
    value = pod_labels.get(names.INJECT_LABEL)
    if value == names.POD_OPT_IN:
        return True
    return namespace_enabled and value != names.POD_OPT_OUT


def enabled_namespaces(namespaces: Iterable[Obj]) -> set[str]:
    return {
        ns["metadata"]["name"]
        for ns in namespaces
        if (ns["metadata"].get("labels") or {}).get(names.INJECT_LABEL) == names.NAMESPACE_OPT_IN
    }


def discover(
    workloads: Iterable[tuple[str, Obj]],
    pods: Iterable[Obj],
    *,
    enabled: set[str],
    cluster_domain: str = names.DEFAULT_CLUSTER_DOMAIN,
    own_namespace: str = "",
    services: Iterable[Obj] = (),
    trust_domain: str = "",
    profiles: ProfileBounds | None = None,
) -> list[Target]:
    """Targets for opted-in (kind, object) workloads and pods; workloads sharing a Secret share it.

    The injector's own namespace is labelled enabled for the trust bundle's mirror (its webhook mounts
    it), not for its objects: there only the pod label "true" asks for a certificate, so the bootstrap Job
    and anything else run beside the injector get none unless asked.
    """
    enabled = enabled - {own_namespace}
    bounds = profiles or ProfileBounds()
    selectors = service_selectors(services)
    listed = {(kind, _namespace(obj), obj["metadata"]["name"]): obj for kind, obj in workloads}
    wanted: Wanted = defaultdict(dict)
    for (kind, namespace, name), obj in listed.items():
        template = template_of(kind, obj)
        if template is None or not _opted_in(template, namespace, enabled):
            continue
        workload = template_workload(kind, name, _map(template, "metadata"))
        if not _covered_by_owner(kind, obj, workload, listed):
            ref = WorkloadRef(kind, namespace, name, obj["metadata"].get("uid") or "", LISTED_KINDS[kind])
            selected = _selected(workload, template, selectors.get(namespace, ()))
            _want(wanted, namespace, ref, Use(workload, _client_id(template, namespace, trust_domain or cluster_domain),
                                              selected, _peers(kind, obj, selected), _profile(template, bounds)))
    for pod in pods:
        namespace = _namespace(pod)
        owner = controller_of(pod["metadata"])
        if _listed_kind(owner) or not _opted_in(pod, namespace, enabled):
            continue
        workload = pod_workload(pod["metadata"])
        _want(wanted, namespace, _pod_user(pod, namespace, owner),
              Use(workload, _client_id(pod, namespace, trust_domain or cluster_domain),
                  _selected(workload, pod, selectors.get(namespace, ())), (), _profile(pod, bounds)))
    del listed, selectors
    # Each Secret's users are let go as its target is made: at 100,000 workloads what was read to find
    # them (the listed index, each workload's Use) and the targets were otherwise all held at once, the
    # peak of a full pass (~1.3 KiB a workload by tracemalloc).
    targets = []
    for key in sorted(wanted):
        targets.append(_target(*key, wanted.pop(key), cluster_domain, bounds))
    return _clashes_refused(targets)


def _profile(template: Obj, bounds: ProfileBounds) -> Resolved:
    return resolve_profile(_map(_map(template, "metadata"), "annotations"), bounds)


def _profiled(users: Mapping[WorkloadRef, Use], bounds: ProfileBounds) -> tuple[Profile, tuple[tuple[str, str], ...]]:
    """The profile a Secret's users agree on (each refused value replaced by the default), or the
    operator's default when they differ (profile.shared_profile), and every refusal with who made it."""
    problems = [(str(ref), use.profile.reason()) for ref, use in sorted(users.items()) if use.profile.refused]
    profile, conflict = shared_profile([(ref, use.profile) for ref, use in users.items()], bounds)
    if conflict:
        problems.append((", ".join(str(ref) for ref in sorted(users)[:_LISTED]), conflict))
    return profile, tuple(problems)


def _clashes_refused(targets: list[Target]) -> list[Target]:
    """A client Secret named as another target's serving Secret is refused, whatever the order they were
    found in: the serving Secret keeps its name (pods mount it under the name their template gives), the
    client certificate is not issued, and the pass settles instead of rewriting that Secret each time."""
    clients = {(t.namespace, t.client_secret) for t in targets if t.client_ids}
    if not clients:  # most passes: nothing to look up, and no name written for each serving Secret
        return targets
    serving = {(t.namespace, t.secret_name): ", ".join(str(w) for w in t.workloads) for t in targets
               if (t.namespace, t.secret_name) in clients}
    return [t.client_refused(f"that Secret is the serving Secret of {serving[t.namespace, t.client_secret]}; give "
                             f"one of them another {names.SECRET_NAME_ANNOTATION}")
            if t.client_ids and (t.namespace, t.client_secret) in serving else t for t in targets]


def service_selectors(services: Iterable[Obj]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """(name, selector) of every Service with a selector, by namespace (one without selects no pods)."""
    found: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for service in services:
        selector = _map(_map(service, "spec"), "selector")
        name = _map(service, "metadata").get("name")
        if selector and isinstance(name, str):
            found[_namespace(service)].append((name, selector))
    return found


def _selected(workload: Workload, template: Obj, selectors: Iterable[tuple[str, dict[str, Any]]]) -> tuple[str, ...]:
    """Every Service of the workload's namespace whose selector picks its pods (the names its clients
    actually call, as OpenShift's service CA finds them), sorted."""
    if not workload.secret_name:
        return ()
    labels = _map(_map(template, "metadata"), "labels")
    return tuple(sorted(name for name, selector in selectors if all(labels.get(k) == v for k, v in selector.items())))


def _peers(kind: str, obj: Obj, selected: tuple[str, ...]) -> tuple[str, ...]:
    """A StatefulSet's governing Service, when it is a Service of its namespace selecting its pods: the one
    through which its pods have per-pod DNS names (nothing when spec.serviceName names another or none)."""
    service = _map(obj, "spec").get("serviceName")
    return (service,) if kind == "StatefulSet" and isinstance(service, str) and service in selected else ()


def pod_may_need_a_secret(pod: Obj) -> bool:
    """A pod whose Secret comes from the pod itself (bare, or an unlisted controller), unless opted out.
    Cheap on purpose: it decides which of the cluster's pod events wake a pass."""
    metadata = pod.get("metadata")
    if not isinstance(metadata, dict):
        return False
    labels = _map(metadata, "labels")
    return labels.get(names.INJECT_LABEL) != names.POD_OPT_OUT and not _listed_kind(controller_of(metadata))


def _covered_by_owner(kind: str, obj: Obj, workload: Workload, listed: Mapping[tuple[str, str, str], Obj]) -> bool:
    owner = controller_of(obj["metadata"])
    owner_kind = COVERED_BY.get(kind)
    if owner is None or owner_kind is None or not _listed_kind(owner) or owner.get("kind") != owner_kind:
        return False
    owner_obj = listed.get((owner_kind, _namespace(obj), owner["name"]))
    template = template_of(owner_kind, owner_obj) if owner_obj is not None else None
    if template is None:
        return False  # the owner is gone (orphaned with --cascade=orphan): the object stands alone
    return template_workload(owner_kind, owner["name"], _map(template, "metadata")).secret_name == workload.secret_name


def _pod_user(pod: Obj, namespace: str, owner: Mapping[str, Any] | None) -> WorkloadRef:
    """The object a pod's Secret is kept for: the pod itself when bare, else its (unlisted) controller."""
    if owner is None:
        meta = pod["metadata"]
        return WorkloadRef("Pod", namespace, meta.get("name") or "", meta.get("uid") or "", "v1")
    return WorkloadRef(str(owner.get("kind") or ""), namespace, owner["name"], str(owner.get("uid") or ""),
                       str(owner.get("apiVersion") or ""))


def _listed_kind(owner: Mapping[str, Any] | None) -> bool:
    """An owner of a kind the reconciler lists; the group counts, as another group's `Job` is another kind."""
    if owner is None:
        return False
    api_version = LISTED_KINDS.get(str(owner.get("kind") or ""))
    return api_version is not None and _group(str(owner.get("apiVersion") or "")) == _group(api_version)


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _opted_in(template: Obj, namespace: str, enabled: set[str]) -> bool:
    labels = _map(_map(template, "metadata"), "labels")
    return opted_in(labels, namespace_enabled=namespace in enabled)


def _want(wanted: Wanted, namespace: str, ref: WorkloadRef, use: Use) -> None:
    if use.workload.secret_name:
        wanted[namespace, use.workload.secret_name][ref] = use


def _client_id(template: Obj, namespace: str, trust_domain: str) -> str:
    """The SPIFFE ID of a pod template that asks for a client certificate ("" when it does not): its
    service account is `serviceAccountName`, else the deprecated `serviceAccount`, else "default", as the
    apiserver's ServiceAccount admission sets it."""
    annotations = _map(_map(template, "metadata"), "annotations")
    asked = annotations.get(names.CLIENT_CERT_ANNOTATION)
    if not isinstance(asked, str) or asked.strip().lower() != "true":
        return ""
    spec = _map(template, "spec")
    account = next((v for v in (spec.get("serviceAccountName"), spec.get("serviceAccount"))
                    if isinstance(v, str) and v), "default")
    return spiffe_id(trust_domain, namespace, account)


def _target(namespace: str, secret: str, users: Mapping[WorkloadRef, Use], domain: str,
            bounds: ProfileBounds) -> Target:
    services, refused = service_names(users.values(), namespace=namespace)
    peers = sorted({peer for use in users.values() for peer in use.peers
                    if not served_by_kubernetes(peer, namespace)})[:MAX_SERVICES]
    dns = sorted({*dns_names_for_services(services, namespace, cluster_domain=domain),
                  *(name for peer in peers for name in peer_dns_names(peer, namespace, cluster_domain=domain))})
    client_ids = tuple(sorted({use.client_id for use in users.values() if use.client_id}))
    own = tuple((str(ref), why) for ref, use in sorted(users.items())
                if (why := service_name_problem(use.workload.name)))
    profile, problems = _profiled(users, bounds)
    why = subdomain_problem(secret)
    return Target(namespace, secret, tuple(dns), tuple(sorted(users)), refused, client_ids, own_names=own,
                  profile=profile, profile_problems=problems, name_problem=f"no Secret name: {why}" if why else "")


def legal_targets(targets: Iterable[Target]) -> tuple[list[Target], list[Target]]:
    """The targets whose Secret name is one, and those refused for it (Target.secret_name_refusal): only the
    first may be read, planned or written."""
    kept: list[Target] = []
    refused: list[Target] = []
    for target in targets:
        (refused if target.name_problem else kept).append(target)
    return kept, refused


def service_names(uses: Iterable[Use], *, namespace: str) -> tuple[list[str], tuple[tuple[str, str], ...]]:
    """The Services a Secret's certificate names, and those refused with why (sorted, unique).

    Each workload's asked-for list is checked, and refusals reported; one with nothing valid left falls back
    to its own name, as if it had asked for nothing. Its own name counts only when it is a Service name: a
    Deployment may be called `web.v2`, `1web` or 253 characters long, none a Service name, and it asked for
    no name, so nothing is refused. Services selecting its pods are named too. Over `MAX_SERVICES` in all,
    the rest are refused. Nothing left: the certificate names nothing (Target.namelessness).
    """
    kept: set[str] = set()
    refused: dict[tuple[str, str], None] = {}
    for use in uses:
        own: tuple[str, ...] = () if service_name_problem(use.workload.name) else (use.workload.name,)
        if use.workload.asked:
            checked = vet_service_names(use.workload.service_names, namespace=namespace)
            refused.update(dict.fromkeys(checked.refused))
            own = checked.kept or own
        kept.update(own, use.selected)
    # Its own name too is refused when Kubernetes serves it there (a Deployment `kubernetes` in `default`).
    final = vet_service_names(sorted(kept), namespace=namespace)
    refused.update(dict.fromkeys(final.refused))
    return list(final.kept), tuple(sorted(refused))


def _namespace(obj: Obj) -> str:
    return str(obj["metadata"].get("namespace") or "default")


def _map(obj: Mapping[str, Any], key: str) -> Obj:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


# The shipped webhook configurations exclude these namespaces by name (manifests/base), with the
# injector's own: pods there are never injected, by design, so they are never counted as missing it.
SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
_DONE_PHASES = frozenset({"Succeeded", "Failed"})


def should_be_injected(pod: Obj, *, enabled: set[str], own_namespace: str) -> bool:
    """An opted-in pod the mutating webhook should have seen: running or about to, outside the excluded
    namespaces (finished or terminating pods are left alone: a restart would not help them)."""
    meta = pod["metadata"]
    namespace = _namespace(pod)
    if namespace in SYSTEM_NAMESPACES or namespace == own_namespace or meta.get("deletionTimestamp"):
        return False
    if (pod.get("status") or {}).get("phase") in _DONE_PHASES:
        return False
    return opted_in(_map(meta, "labels"), namespace_enabled=namespace in enabled)


def missing_injection(pods: Iterable[Obj], *, enabled: set[str], own_namespace: str) -> list[Obj]:
    """Opted-in pods without the injection record: created while the webhook was down, or before install."""
    return [pod for pod in pods if should_be_injected(pod, enabled=enabled, own_namespace=own_namespace)
            and names.INJECTED_ANNOTATION not in _map(pod["metadata"], "annotations")]


def wants_pod_certificates(obj: Obj) -> bool:
    """A pod (or pod template) in the pod-certificate mode: where the webhook recorded what it injected, the
    record's mode (a webhook not told that the cluster serves pod certificates mounts the Secret even for a
    pod that asked for them, and that Secret must then be issued, or the pod never starts); otherwise
    what the annotations ask for."""
    return pod_mode(obj) == names.MODE_POD_CERTIFICATE


# A pass asks each pod's mode several times (discover, the signer, trust-only, keystores), and a template's
# pods carry one record: its mode is read once. The webhook's records are 150-400 bytes; a longer one (a pod
# annotated afterwards: records are written at CREATE only) is read each time, so what is remembered stays
# under REMEMBERED_RECORDS x MAX_REMEMBERED_RECORD (1 MiB) whatever a tenant writes.
MAX_REMEMBERED_RECORD = 1024  # bytes of one record
REMEMBERED_RECORDS = 1024  # records whose mode is remembered (the last used)


def _read_mode(record: str) -> str | None:
    """The mode the webhook's record says, or None when it is no record."""
    try:
        recorded = json.loads(record)
    except ValueError:
        return None
    return str(recorded.get("mode") or names.MODE_SECRET) if isinstance(recorded, dict) else None


_recorded_mode = functools.lru_cache(maxsize=REMEMBERED_RECORDS)(_read_mode)


def pod_mode(obj: Obj) -> str:
    """The mode of a pod (or pod template): the webhook's record's where it recorded one (what the pod
    really got), else what its annotations ask for ("" when they ask for nothing)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if not isinstance(annotations, dict):
        return ""
    record = annotations.get(names.INJECTED_ANNOTATION)
    if isinstance(record, str):
        recorded = _recorded_mode(record) if len(record) <= MAX_REMEMBERED_RECORD else _read_mode(record)
        if recorded is not None:
            return recorded
    mode = annotations.get(names.MODE_ANNOTATION)
    return mode.strip() if isinstance(mode, str) else ""


def trust_only_split(workloads: list[tuple[str, Obj]], pods: list[Obj], *, enabled: set[str],
                     ) -> tuple[list[tuple[str, Obj]], list[Obj], set[str]]:
    """The workloads and pods that need a certificate, and the namespaces of the opted-in ones that asked
    for trust alone (names.MODE_TRUST_ONLY): they get no Secret, but their namespace needs the bundle. A
    workload keeps its Secret while a pod of its own still mounts one (moving to trust-only rolls its pods;
    the validating rule refuses that move for a workload that serves, so this is the rollout of one that
    was off)."""
    def trust_only(obj: Obj) -> bool:
        return pod_mode(obj) == names.MODE_TRUST_ONLY

    asking = [(w, template) for _, w, template, _ in annotated(workloads, ()) if trust_only(template)]
    asking_pods = [p for _, p, _, _ in annotated((), pods) if trust_only(p)]
    namespaces = {_namespace(obj) for obj, template in [*asking, *((p, p) for p in asking_pods)]
                  if _opted_in(template, _namespace(obj), enabled)}
    left = {id(p) for p in asking_pods}
    pods = [p for p in pods if id(p) not in left]
    return _unless_mounted(workloads, {id(w) for w, _ in asking}, pods), pods, namespaces


def _unless_mounted(workloads: list[tuple[str, Obj]], leaving: set[int], pods: list[Obj]) -> list[tuple[str, Obj]]:
    """`workloads` without those in `leaving` (by identity) but for any a pod of its own in `pods` still
    mounts the Secret of. Which pods mount what is read only when a workload leaves: most passes have none."""
    if not leaving:
        return list(workloads)
    mounting = {(p["metadata"].get("namespace") or "", pod_workload(p["metadata"]).name) for p in pods}
    return [(k, w) for k, w in workloads if id(w) not in leaving
            or (w["metadata"].get("namespace") or "", w["metadata"]["name"]) in mounting]


def secret_users(workloads: list[tuple[str, Obj]], pods: list[Obj]) -> tuple[list[tuple[str, Obj]], list[Obj]]:
    """Where the cluster serves pod certificates: the workloads and pods that still need a Secret.

    Pods that asked for pod certificates get none; a workload that asked keeps its Secret while a pod of
    its own still mounts it (moving from the Secret rolls its pods one by one, and an old pod that
    restarts must still find its Secret).
    """
    pods = [p for p in pods if not wants_pod_certificates(p)]
    leaving = {id(w) for k, w in workloads if wants_pod_certificates(template_of(k, w) or {})}
    return _unless_mounted(workloads, leaving, pods), pods


def truststore_namespaces(workloads: list[tuple[str, Obj]], pods: list[Obj], *, enabled: set[str]) -> set[str]:
    """Namespaces where an opted-in Secret-mode workload (or bare pod) asks for the PKCS#12 truststore."""
    return {namespace for _, obj, template, ours in annotated(workloads, pods)
            if ours.get(names.TRUSTSTORE_ANNOTATION) == names.TRUSTSTORE_PKCS12
            and _opted_in(template, namespace := _namespace(obj), enabled)}


def public_roots_namespaces(workloads: list[tuple[str, Obj]], pods: list[Obj], *, enabled: set[str],
                            labelled: Iterable[Obj] = ()) -> set[str]:
    """Namespaces whose trust bundle carries the public roots too (names.PUBLIC_ROOTS "true"): labelled so
    (`labelled`: the Namespaces listed by that label), or where an opted-in workload or pod asks."""
    found = {str(ns["metadata"]["name"]) for ns in labelled
             if (ns["metadata"].get("labels") or {}).get(names.PUBLIC_ROOTS) == names.PUBLIC_ROOTS_ON}
    for _, obj, template, ours in annotated(workloads, pods):
        asked = ours.get(names.PUBLIC_ROOTS)
        if isinstance(asked, str) and asked.strip().lower() == names.PUBLIC_ROOTS_ON and \
                _opted_in(template, namespace := _namespace(obj), enabled):
            found.add(namespace)
    return found


def annotated(workloads: Iterable[tuple[str, Obj]], pods: Iterable[Obj]) -> Iterator[tuple[str, Obj, Obj, Obj]]:
    """(kind, object, pod template, its annotations) of each workload, and of each pod (kind "Pod", its own
    template), whose template carries annotations: what asks for a truststore, a keystore, a mode or the
    public roots is found among these alone. A workload is held with our annotations only (read.py, the
    cache), so nearly every template has none, and each of a pass's walks for one of them passed over
    every workload in full (~15 % of a resync, at 20,000 workloads, before it was read this way)."""
    for kind, obj in workloads:
        template = template_of(kind, obj)
        if template is not None and (annotations := _annotations(template)):
            yield kind, obj, template, annotations
    for pod in pods:
        if annotations := _annotations(pod):
            yield "Pod", pod, pod, annotations


def _annotations(template: Obj) -> Obj:
    meta = template.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return annotations if isinstance(annotations, dict) else {}
