"""Checks of what the workloads get: a certificate their namespace's bundle trusts for their Service
names, and pods that carry the injection and mount only objects that exist.

Which workloads opted in, and which Secret each needs, is the reconciler's own discovery (the same
function, on the same reads), so the doctor and the reconciler never disagree about a name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tls_injector import names
from tls_injector.doctor.model import Result, error, ok, warning
from tls_injector.doctor.profiles import check_profiles_accepted, check_profiles_applied, check_profiles_apply
from tls_injector.doctor.snapshot import Snapshot
from tls_injector.injection import pod_workload, template_of, tls_change
from tls_injector.kube import Obj
from tls_injector.pki import (
    ServiceNames,
    UntrustedChain,
    a_host_for,
    bundle_certificates,
    dns_sans,
    load_certificates,
    verify_nameless,
    verify_server,
)
from tls_injector.reconcile.core import ownership as own
from tls_injector.reconcile.core.discover import (
    Target,
    discover,
    legal_targets,
    missing_injection,
    should_be_injected,
    trust_only_split,
    wants_pod_certificates,
)
from tls_injector.reconcile.core.objects import secret_data
from tls_injector.reconcile.core.plan import bundle_namespaces

CATEGORY = "workloads"
_RENEW = "kubectl -n {ns} annotate secret {name} " + names.FORCE_RENEW_ANNOTATION + "=now"


def targets(snap: Snapshot) -> list[Target]:
    """The Secrets the reconciler issues, decided as its pass decides them: never one whose name is none
    (those are refused, and nothing is read under their name: `check_secret_names`)."""
    return legal_targets(discovered(snap))[0]


def discovered(snap: Snapshot) -> list[Target]:
    """Every Secret the opted-in workloads ask for, those with a name that is none included."""
    workloads, pods = snap.observed.workloads, snap.observed.pods
    if snap.pod_certificates:
        workloads = [(k, w) for k, w in workloads if not wants_pod_certificates(template_of(k, w) or {})]
        pods = [p for p in pods if not wants_pod_certificates(p)]
    workloads, pods, snap.observed.trust_only = trust_only_split(workloads, pods, enabled=snap.observed.enabled)
    return discover(workloads, pods, enabled=snap.observed.enabled, cluster_domain=snap.settings.cluster_domain,
                    services=snap.observed.services, own_namespace=snap.settings.namespace,
                    trust_domain=snap.settings.trust_domain, profiles=snap.settings.profiles)


def _who(target: Target) -> str:
    return f"{target.namespace}/{target.secret_name} ({', '.join(str(w) for w in target.workloads)})"


def check_secrets_exist(snap: Snapshot, wanted: list[Target]) -> Result:
    title = "every opted-in workload has its certificate Secret"
    problems = []
    for target in wanted:
        secret = snap.secret(target.namespace, target.secret_name)
        if secret is None:
            problems.append(f"{_who(target)}: the Secret does not exist")
        elif not own.is_owned(secret, "leaf"):
            problems.append(f"{_who(target)}: the Secret exists but tls-injector does not manage it")
        elif not load_certificates(secret_data(secret).get("tls.crt", b"")):
            problems.append(f"{_who(target)}: the Secret holds no certificate")
    if problems:
        return error(CATEGORY, title, f"{len(problems)} of {len(wanted)} missing or unusable", details=problems,
                     hint="the reconciler issues them within a pass: check that it runs (reconciler checks) and "
                          "the workload's events (kubectl describe); a Secret someone else owns must be renamed or "
                          f"removed, or the workload pointed elsewhere with {names.SECRET_NAME_ANNOTATION}")
    return ok(CATEGORY, title, f"{len(wanted)} Secrets")


def _leaves(snap: Snapshot, wanted: list[Target]) -> Iterator[tuple[Target, list[Any]]]:
    """The parsed chain of every wanted Secret that is ours and holds one (the others are reported above)."""
    for target in wanted:
        secret = snap.secret(target.namespace, target.secret_name)
        chain = load_certificates(secret_data(secret).get("tls.crt", b"")) if own.is_owned(secret, "leaf") else []
        if chain:
            yield target, chain


def check_trusted_by_bundle(snap: Snapshot, wanted: list[Target]) -> Result:
    title = "every certificate verifies against its namespace's trust bundle"
    checked, problems, bad = _leaf_problems(snap, wanted, lambda target, chain: _untrusted(snap, target, chain))
    if problems:
        example = _RENEW.format(ns=bad[0].namespace, name=bad[0].secret_name)
        return error(CATEGORY, title, f"{len(problems)} of {checked} not trusted", details=problems,
                     hint="clients in that namespace refuse these servers. The reconciler re-issues a certificate its "
                          "CA set does not trust and rewrites the bundles each pass; to force one now: " + example)
    return ok(CATEGORY, title, f"{checked} certificates")


def _leaf_problems(
    snap: Snapshot, wanted: list[Target], problem_of: Callable[[Target, list[Any]], str]
) -> tuple[int, list[str], list[Target]]:
    """(leaves checked, one line per leaf with a problem, their targets) for one per-leaf check."""
    checked, problems, bad = 0, [], []
    for target, chain in _leaves(snap, wanted):
        checked += 1
        problem = problem_of(target, chain)
        if problem:
            problems.append(f"{_who(target)}: {problem}")
            bad.append(target)
    return checked, problems, bad


def _untrusted(snap: Snapshot, target: Target, chain: list[Any]) -> str:
    bundle = snap.observed.bundles.get(target.namespace)
    if bundle is None:
        return f"no {names.TRUST_BUNDLE_CONFIGMAP} ConfigMap in {target.namespace}"
    sans = dns_sans(chain[0])  # names are the next check's concern: verify trust under a name it has
    trusted = bundle_certificates(bundle.get("data") or {})
    try:
        if sans or target.dns_names:
            verify_server(chain[0], chain[1:], trusted=trusted, dns_name=a_host_for(sans) or target.secret_name,
                          now=snap.now)
        else:  # a certificate naming nothing, as wanted (check_names_given says so): its chain alone
            verify_nameless(chain[0], chain[1:], trusted=trusted, now=snap.now)
    except UntrustedChain as e:
        return str(e)
    return ""


def check_service_names(snap: Snapshot, wanted: list[Target]) -> Result:
    title = "every certificate covers its workload's Service names"
    checked, problems, bad = _leaf_problems(snap, wanted, _missing_names)
    if problems:
        return error(CATEGORY, title, f"{len(problems)} of {checked} lack names", details=problems,
                     hint="clients calling those names fail the host name check. The reconciler renews a certificate "
                          "whose names changed on its next pass; to force it: "
                          + _RENEW.format(ns=bad[0].namespace, name=bad[0].secret_name))
    return ok(CATEGORY, title, f"{checked} certificates")


def check_secret_names(snap: Snapshot) -> Result:
    title = "every workload's Secret name is a Secret name"
    refused = legal_targets(discovered(snap))[1]
    if refused:
        return error(CATEGORY, title, f"{len(refused)} workload Secrets refused",
                     details=[t.secret_name_refusal() for t in refused],
                     hint=f"{names.SECRET_NAME_ANNOTATION} names a Secret of the workload's own namespace by its name "
                          "alone (a DNS-1123 subdomain); no certificate is issued and nothing is read under any "
                          "other value. docs/security.md")
    return ok(CATEGORY, title, "all valid")


def check_names_accepted(wanted: list[Target]) -> Result:
    title = "every Service name asked for may be issued"
    refused = [f"{_who(t)}: {ServiceNames((), t.refused).reason()}" for t in wanted if t.refused]
    if refused:
        return error(CATEGORY, title, f"{len(refused)} of {len(wanted)} ask for names no certificate may carry",
                     details=refused,
                     hint=f"{names.SERVICE_NAMES_ANNOTATION} lists Services of the workload's own namespace by their "
                          "own names (DNS-1123 labels, at most 16); the rest are issued. docs/security.md")
    return ok(CATEGORY, title, f"{len(wanted)} certificates")


def check_names_given(wanted: list[Target]) -> Result:
    title = "every certificate names a Service its clients can dial"
    nameless = [_who(t) for t in wanted if not t.dns_names]
    if nameless:
        return warning(CATEGORY, title, f"{len(nameless)} of {len(wanted)} name no Service", details=nameless,
                       hint="their workload's own name is no Service name (a Deployment may be called web.v2, 1web "
                            "or longer than 63 characters) and no Service of the namespace selects their pods: the "
                            "certificate is issued, so the pods start, but no client can verify it. Add a Service "
                            f"selecting the pods, or name one with {names.SERVICE_NAMES_ANNOTATION}; the next pass "
                            "re-issues it. docs/injection.md")
    return ok(CATEGORY, title, f"{len(wanted)} certificates")


def check_trust_only_bundles(snap: Snapshot) -> Result:
    title = f"every namespace with a {names.MODE_TRUST_ONLY} client has its trust bundle"
    missing = sorted(ns for ns in snap.observed.trust_only if snap.config_map(ns, names.TRUST_BUNDLE_CONFIGMAP) is None)
    if missing:
        return error(CATEGORY, title, f"{len(missing)} of {len(snap.observed.trust_only)} namespaces have none",
                     details=missing,
                     hint=f"pods asking for trust alone ({names.MODE_ANNOTATION}: {names.MODE_TRUST_ONLY}) mount "
                          f"{names.TRUST_BUNDLE_CONFIGMAP} and cannot start without it; the reconciler writes it "
                          "within a pass: check that it runs (reconciler checks)")
    return ok(CATEGORY, title, f"{len(snap.observed.trust_only)} namespaces")


def check_bundles_writable(snap: Snapshot, wanted: list[Target]) -> Result:
    title = "every namespace that needs the trust bundle can get it"
    squatted = sorted(bundle_namespaces(wanted, snap.observed.bundle_wanted) & snap.observed.squatted)
    if squatted:
        return error(CATEGORY, title, f"{len(squatted)} namespaces hold a {names.TRUST_BUNDLE_CONFIGMAP} ConfigMap "
                     "that is not tls-injector's", details=squatted,
                     hint="their pods do not get the trust bundle and will not trust the next CA; CA rotation goes on "
                          f"without them. Delete or rename that ConfigMap: kubectl -n {squatted[0]} delete configmap "
                          f"{names.TRUST_BUNDLE_CONFIGMAP}")
    return ok(CATEGORY, title)


def _missing_names(target: Target, chain: list[Any]) -> str:
    missing = sorted(set(target.dns_names) - set(dns_sans(chain[0])))
    return f"no SAN for {', '.join(missing)}" if missing else ""


def _should_be_injected(snap: Snapshot, pod: Obj) -> bool:
    return should_be_injected(pod, enabled=snap.observed.enabled, own_namespace=snap.settings.namespace)


def _pod(pod: Obj) -> str:
    meta = pod["metadata"]
    workload = pod_workload(meta)
    return f"{meta.get('namespace')}/{meta.get('name')} ({workload.kind}/{workload.name or '?'})"


def _restart(pod: Obj) -> str:
    workload = pod_workload(pod["metadata"])
    namespace = pod["metadata"].get("namespace") or "default"
    if workload.kind in ("Deployment", "StatefulSet", "DaemonSet") and workload.name:
        return f"kubectl -n {namespace} rollout restart {workload.kind.lower()}/{workload.name}"
    return f"kubectl -n {namespace} rollout restart deployment/<name>"


def check_pods_injected(snap: Snapshot) -> Result:
    title = "opted-in pods carry the injection"
    missing = missing_injection(snap.observed.pods, enabled=snap.observed.enabled,
                                own_namespace=snap.settings.namespace)
    if missing:
        count = f"{len(missing)} {'pod' if len(missing) == 1 else 'pods'}"
        return error(CATEGORY, title, f"{count} without it", details=[_pod(p) for p in missing],
                     hint="they were created while the webhook was down or before it was installed, and run without "
                          f"their certificate: restart their workloads ({_restart(missing[0])}), or delete bare pods "
                          "and create them again")
    return ok(CATEGORY, title, f"{sum(_should_be_injected(snap, p) for p in snap.observed.pods)} pods")


def mounted(pod: Obj) -> Iterator[tuple[str, str]]:
    """("Secret" | "ConfigMap", name) of the certificate and bundle volumes the webhook added to a pod.

    Ours are recognised by name: `tls-injector-cert`/`-client`/`-trust`, or `-<n>` after a clash
    (app/injection/plan.py).
    """
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        name = str(volume.get("name") or "")
        if (_ours(name, names.CERT_VOLUME) or _ours(name, names.CLIENT_VOLUME)) and isinstance(volume.get("secret"),
                                                                                             dict):
            yield "Secret", str(volume["secret"].get("secretName") or "")
        elif _ours(name, names.TRUST_VOLUME) and isinstance(volume.get("configMap"), dict):
            yield "ConfigMap", str(volume["configMap"].get("name") or "")


def _ours(name: str, base: str) -> bool:
    return name == base or (name.startswith(f"{base}-") and name.removeprefix(f"{base}-").isdigit())


def check_pod_mounts(snap: Snapshot) -> Result:
    title = "pods mount only certificate Secrets and bundles that exist"
    problems = []
    for pod in snap.observed.pods:
        namespace = pod["metadata"].get("namespace") or "default"
        for kind, name in mounted(pod):
            found = snap.secret(namespace, name) if kind == "Secret" else snap.config_map(namespace, name)
            if found is None:
                problems.append(f"{_pod(pod)}: {kind} {name} does not exist")
    if problems:
        return error(CATEGORY, title, f"{len(problems)} mounts of missing objects", details=problems,
                     hint="such a pod cannot start (FailedMount, ContainerCreating). The reconciler creates the "
                          "Secret and bundle of every opted-in workload: check that it runs and that the workload "
                          "still opts in; a pod whose workload stopped opting in must be restarted")
    return ok(CATEGORY, title)


def checks(snap: Snapshot) -> list[Result]:
    if "cluster" in snap.errors:
        return [error(CATEGORY, "the opted-in workloads and pods can be read", snap.errors["cluster"],
                      hint="doctor needs list on namespaces, pods, Services, Deployments, StatefulSets, DaemonSets "
                           "and the Secrets and ConfigMaps tls-injector manages")]
    wanted = targets(snap)
    return [check_secret_names(snap), check_secrets_exist(snap, wanted), check_trusted_by_bundle(snap, wanted),
            check_service_names(snap, wanted), check_names_accepted(wanted), check_names_given(wanted),
            check_profiles_accepted(wanted), check_profiles_applied(snap, wanted), check_profiles_apply(snap),
            check_trust_only_bundles(snap), check_bundles_writable(snap, wanted),
            check_pods_injected(snap), check_pod_mounts(snap), check_tls_exceptions(snap)]


def check_tls_exceptions(snap: Snapshot) -> Result:
    """Workloads whose pod template names a TLS change (names.TLS_CHANGE_ANNOTATION): the sanctioned
    exception to the TLS rules was taken, or may be (docs/rules.md, "Exceptions"). Nothing is broken by it:
    a warning, so an operator sees where exceptions are in use; a leftover annotation allows nothing more."""
    title = "no workload names a TLS exception"
    found = []
    for kind, obj in snap.observed.workloads:
        if (change := tls_change(kind, obj)) is not None:
            meta = obj.get("metadata") or {}
            found.append(f"{kind} {meta.get('namespace')}/{meta.get('name')}: {change}")
    found.sort()
    if found:
        which = "workload names" if len(found) == 1 else "workloads name"
        said = f"{len(found)} {which} a TLS change in {names.TLS_CHANGE_ANNOTATION}"
        return warning(CATEGORY, title, said, details=found,
                       hint="each was let through (or may be) as the exception its annotation names, for a subject "
                            f"granted {names.EXCEPTION_VERB} on {names.EXCEPTION_RESOURCE}.{names.EXCEPTION_GROUP}; "
                            "check that the change was meant, "
                            "then the annotation may stay (it allows no other change) or go (which rolls the pods)")
    return ok(CATEGORY, title, f"none among the {len(snap.observed.workloads)} workloads read")
