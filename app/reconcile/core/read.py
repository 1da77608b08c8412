"""What a reconcile pass reads from the cluster: list calls only, no decision (discover.py decides)."""

from __future__ import annotations

import functools
from typing import Any

from tls_injector import names
from tls_injector.injection import template_of
from tls_injector.injection.workload import TEMPLATE_PATHS
from tls_injector.kube import (
    CONFIG_MAPS,
    CRON_JOBS,
    DAEMON_SETS,
    DEPLOYMENTS,
    JOBS,
    NAMESPACES,
    PODS,
    REPLICA_SETS,
    SECRETS,
    SERVICES,
    STATEFUL_SETS,
    KubeApi,
)
from tls_injector.reconcile.core import ownership as own
from tls_injector.reconcile.core.bundles import public_digest
from tls_injector.reconcile.core.discover import enabled_namespaces, opted_in, public_roots_namespaces
from tls_injector.reconcile.core.inputs import Observed
from tls_injector.reconcile.core.objects import Obj

# Every kind whose pod template discovery reads (discover.LISTED_KINDS); pods of other controllers are
# found from the pods themselves.
WORKLOAD_KINDS = (("Deployment", DEPLOYMENTS), ("StatefulSet", STATEFUL_SETS), ("DaemonSet", DAEMON_SETS),
                  ("ReplicaSet", REPLICA_SETS), ("Job", JOBS), ("CronJob", CRON_JOBS))
# What a pass keeps of an object is what discovery reads (the shapes below); one whose kept part is over
# these is too large to be what it claims, and is left out with its reason (docs/security.md, "The
# reconciler's memory"). A Service is kept as its name and selector: a selector matches pod labels, and
# 4 KiB of JSON holds 10 labels of the longest legal key and value (317 + 63 bytes) or ~100 usual ones.
# A workload is kept as its name, owners and pod template's labels, our annotations and service account
# (a StatefulSet also its spec.serviceName, under the same cap): 32 KiB holds ~80 labels of the longest
# legal size, ~1,000 usual ones. Parsed, each takes ~8x (api.py), so 1,000 opted-in workloads at the cap
# hold ~256 MiB at most; usual ones (~1 KiB kept) ~8 MiB.
MAX_SERVICE_BYTES = 4 * 1024
# Services are listed per namespace where something opted in, up to this many namespaces: 20 lists are
# about what the rest of a pass lists (6 workload kinds, pods, Secrets, ConfigMaps, namespaces, ...),
# each a few milliseconds against the apiserver's watch cache. Past it one cluster-wide list, 500 to a
# page, costs less than a call per namespace (at 1,000 opted-in namespaces, 1,000 calls a pass).
SERVICE_LISTS = 20
MAX_WORKLOAD_BYTES = 32 * 1024
_OURS = f"{names.DOMAIN}/"


def read_candidate_pods(api: KubeApi, enabled: set[str]) -> list[Obj]:
    """Pods labelled in, anywhere, and every pod of the enabled namespaces (opt-outs are filtered later)."""
    pods = api.list_objects(PODS, label_selector=f"{names.INJECT_LABEL}={names.POD_OPT_IN}").items
    not_listed_yet = f"{names.INJECT_LABEL}!={names.POD_OPT_IN}"  # those were in the cluster-wide list
    for ns in sorted(enabled):
        pods += api.list_objects(PODS, namespace=ns, label_selector=not_listed_yet).items
    return pods


def read_cluster(api: KubeApi) -> Observed:
    """Everything a pass decides on. Workloads are listed whole (their pod template labels cannot be
    selected server-side) but kept as discovery reads them, a page at a time; Services only in namespaces
    where something opted in; Secrets and ConfigMaps only by our ownership label."""
    observed = Observed()
    selector = f"{names.INJECT_LABEL}={names.NAMESPACE_OPT_IN}"
    observed.enabled = enabled_namespaces(api.list_objects(NAMESPACES, label_selector=selector).items)
    opted: set[str] = set()  # namespaces where a workload, a pod or the namespace itself opted in
    for kind, resource in WORKLOAD_KINDS:
        listed = api.list_objects(resource, max_object_bytes=MAX_WORKLOAD_BYTES,
                                  shape=functools.partial(workload_shape, kind, enabled=observed.enabled, opted=opted))
        observed.workloads += [(kind, obj) for obj in listed.items]
        observed.oversized += [(kind, o, MAX_WORKLOAD_BYTES) for o in listed.oversized]
    observed.pods = read_candidate_pods(api, observed.enabled)
    # One more list a pass: the Namespaces labelled for public roots (names.PUBLIC_ROOTS), few by nature.
    labelled = api.list_objects(NAMESPACES, label_selector=f"{names.PUBLIC_ROOTS}={names.PUBLIC_ROOTS_ON}").items
    observed.public_roots = public_roots_namespaces(observed.workloads, observed.pods, enabled=observed.enabled,
                                                    labelled=labelled)
    opted |= observed.enabled | {str(p["metadata"].get("namespace") or "") for p in observed.pods}
    # A list per namespace reads nothing of the others; past SERVICE_LISTS namespaces, one cluster-wide
    # list costs fewer calls, and a Service of any other namespace is dropped as its page is read.
    shape = functools.partial(service_shape, only=opted)
    for ns in sorted(opted) if len(opted) <= SERVICE_LISTS else [None]:
        listed = api.list_objects(SERVICES, namespace=ns, shape=shape, max_object_bytes=MAX_SERVICE_BYTES)
        observed.services += listed.items
        observed.oversized += [("Service", o, MAX_SERVICE_BYTES) for o in listed.oversized]
    observed.leaves = {(obj["metadata"]["namespace"], obj["metadata"]["name"]): obj
                       for obj in api.list_objects(SECRETS, label_selector=own.owned_selector("leaf")).items}
    # By name, not by our label: a ConfigMap of that name that is not ours must be seen too (it decides
    # which namespaces cannot get a bundle), and the list costs the same one call.
    selector = f"metadata.name={names.TRUST_BUNDLE_CONFIGMAP}"
    for obj in api.list_objects(CONFIG_MAPS, field_selector=selector, shape=bundle_shape).items:
        if own.is_owned(obj, "bundle"):
            observed.bundles[obj["metadata"]["namespace"]] = obj
        else:
            observed.squatted.add(obj["metadata"]["namespace"])
    return observed


def bundle_shape(config_map: Obj) -> Obj:
    """A bundle ConfigMap as a pass keeps it: whole, but for the public bundle (names.PUBLIC_BUNDLE_KEY,
    ~180 KB of certifi's roots) kept as its digest, which bundles.decide_bundle compares: 1,000 namespaces
    asking would otherwise hold ~180 MB for the length of a pass. A write sends the text whole."""
    data = config_map.get("data")
    value = data.get(names.PUBLIC_BUNDLE_KEY) if isinstance(data, dict) else None
    if not isinstance(value, str) or not isinstance(data, dict):
        return config_map
    return {**config_map, "data": {**data, names.PUBLIC_BUNDLE_KEY: public_digest(value)}}


def service_shape(service: Obj, *, only: set[str] | None = None) -> Obj | None:
    """A Service as discovery reads it: which one, and the pods it selects; None when it is not in one of
    the namespaces `only` (None: any)."""
    meta, spec = _map(service, "metadata"), _map(service, "spec")
    if only is not None and meta.get("namespace") not in only:
        return None
    return {"metadata": _some(meta, "name", "namespace", "uid"), "spec": _some(spec, "selector")}


def workload_shape(kind: str, obj: Obj, *, enabled: set[str], opted: set[str]) -> Obj:
    """A workload as discovery reads it: which one, its owners, and of its pod template the labels, our
    annotations and the service account. One that did not opt in keeps only what tells whether it covers
    an object it owns (its template's opt-in and pod-template-hash labels and our annotations); the
    namespace of one that did is added to `opted`."""
    meta = _map(obj, "metadata")
    template = template_of(kind, obj) or {}
    labels = _map(_map(template, "metadata"), "labels")
    namespace = str(meta.get("namespace") or "")
    joined = opted_in(labels, namespace_enabled=namespace in enabled)
    if joined:
        opted.add(namespace)
    else:
        labels = _some(labels, names.INJECT_LABEL, names.POD_TEMPLATE_HASH_LABEL)
    annotations = {k: v for k, v in _map(_map(template, "metadata"), "annotations").items() if k.startswith(_OURS)}
    kept: Obj = {"metadata": {"labels": labels, "annotations": annotations}}
    if joined:
        kept["spec"] = _some(_map(template, "spec"), "serviceAccountName", "serviceAccount")
    for key in reversed(TEMPLATE_PATHS[kind]):
        kept = {key: kept}
    service = _map(obj, "spec").get("serviceName")
    if joined and isinstance(service, str):  # a StatefulSet's governing Service: its pods' peer names
        kept["spec"]["serviceName"] = service
    return {"apiVersion": obj.get("apiVersion"), "kind": kind,
            "metadata": _some(meta, "name", "namespace", "uid", "ownerReferences"), **kept}


def _map(obj: Any, key: str) -> dict[str, Any]:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


def _some(obj: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: obj[k] for k in keys if k in obj}
