"""What a reconcile pass reads from the cluster: list calls only, no decision (discover.py decides)."""

from __future__ import annotations

from app import names
from app.kube import (
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
from app.reconcile import ownership as own
from app.reconcile.discover import enabled_namespaces
from app.reconcile.plan import Obj, Observed

# Every kind whose pod template discovery reads (discover.LISTED_KINDS); pods of other controllers are
# found from the pods themselves.
WORKLOAD_KINDS = (("Deployment", DEPLOYMENTS), ("StatefulSet", STATEFUL_SETS), ("DaemonSet", DAEMON_SETS),
                  ("ReplicaSet", REPLICA_SETS), ("Job", JOBS), ("CronJob", CRON_JOBS))


def read_candidate_pods(api: KubeApi, enabled: set[str]) -> list[Obj]:
    """Pods labelled in, anywhere, and every pod of the enabled namespaces (opt-outs are filtered later)."""
    pods = api.list_objects(PODS, label_selector=f"{names.INJECT_LABEL}={names.POD_OPT_IN}").items
    not_listed_yet = f"{names.INJECT_LABEL}!={names.POD_OPT_IN}"  # those were in the cluster-wide list
    for ns in sorted(enabled):
        pods += api.list_objects(PODS, namespace=ns, label_selector=not_listed_yet).items
    return pods


def read_cluster(api: KubeApi) -> Observed:
    """Everything a pass decides on. Workloads are listed whole (their pod template labels cannot be
    selected server-side); Secrets and ConfigMaps only by our ownership label."""
    observed = Observed()
    for kind, resource in WORKLOAD_KINDS:
        observed.workloads += [(kind, obj) for obj in api.list_objects(resource).items]
    selector = f"{names.INJECT_LABEL}={names.NAMESPACE_OPT_IN}"
    observed.enabled = enabled_namespaces(api.list_objects(NAMESPACES, label_selector=selector).items)
    observed.pods = read_candidate_pods(api, observed.enabled)
    observed.services = api.list_objects(SERVICES).items
    for obj in api.list_objects(SECRETS, label_selector=own.owned_selector("leaf")).items:
        observed.leaves[obj["metadata"]["namespace"], obj["metadata"]["name"]] = obj
    # By name, not by our label: a ConfigMap of that name that is not ours must be seen too (it decides
    # which namespaces cannot get a bundle), and the list costs the same one call.
    selector = f"metadata.name={names.TRUST_BUNDLE_CONFIGMAP}"
    for obj in api.list_objects(CONFIG_MAPS, field_selector=selector).items:
        if own.is_owned(obj, "bundle"):
            observed.bundles[obj["metadata"]["namespace"]] = obj
        else:
            observed.squatted.add(obj["metadata"]["namespace"])
    return observed
