"""The plan of a pass: every object the reconciler converges, as an `Item` with its pure `decide` (a leaf
Secret per target, a client Secret per target that asks for one, a trust bundle per namespace that needs
it) and every one of ours no longer needed, to delete.

What each object's decision is lives beside: leaves.py (leaf Secrets), bundles.py (the bundle ConfigMap),
objects.py (what a decision gives), inputs.py (what it reads).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from tls_injector.kube import CONFIG_MAPS, SECRETS, Resource
from tls_injector.names import TRUST_BUNDLE_CONFIGMAP
from tls_injector.reconcile.core import ownership as own
from tls_injector.reconcile.core.bundles import decide_bundle
from tls_injector.reconcile.core.discover import Target
from tls_injector.reconcile.core.inputs import Observed, Signing
from tls_injector.reconcile.core.keystores import Keystore
from tls_injector.reconcile.core.leaves import decide_client_leaf, decide_leaf
from tls_injector.reconcile.core.objects import Item, Obj, Outcome, Write


def plan(targets: Iterable[Target], observed: Observed, signing: Signing) -> Iterator[Item]:
    """Every leaf Secret and bundle ConfigMap to converge, and every one of ours no longer needed: made one
    at a time as the pass takes them (an Item holds its decision's closure: ~0.45 KiB each, ~45 MiB at
    100,000 workloads if a pass held them all at once)."""
    targets = list(targets)
    # Bundles first: a pod mounts its namespace's bundle and its own Secret and starts when both exist, and
    # there are far fewer bundles than leaves (a first pass at 100,000 workloads wrote its 10,000 bundles
    # after 12 minutes of leaves, so every pod waited for the pass's end). A bundle's contents depend on
    # the CAs' phases, decided before the plan, not on the leaves.
    namespaces = bundle_namespaces(targets, observed.bundle_wanted)
    wanted = {(t.namespace, t.secret_name) for t in targets} | client_secrets(targets)
    # Only what is left sorted (nearly always nothing): sorting every leaf's key first cost ~1% of a resync.
    orphans = sorted(key for key in observed.leaves if key not in wanted)
    unwanted = sorted(ns for ns in observed.bundles if ns not in namespaces)
    for ns in sorted(namespaces):
        yield _bundle_item(ns, signing, truststore=ns in observed.truststores, public=ns in observed.public_roots)
    for t in targets:
        yield _leaf_item(t, signing, observed.keystores.get((t.namespace, t.secret_name)))
    if signing.client is not None:
        for t in targets:
            if t.client_wanted:
                yield _client_item(t, signing)
    for ns, name in orphans:
        yield _orphan(SECRETS, ns, name, "leaf")
    for ns in unwanted:
        yield _orphan(CONFIG_MAPS, ns, TRUST_BUNDLE_CONFIGMAP, "bundle")


def client_secrets(targets: Iterable[Target]) -> set[tuple[str, str]]:
    """(namespace, name) of every client Secret the targets want: one identity each. A refused one (users of
    different service accounts) is not wanted: one issued before is deleted, as a serving certificate whose
    names are all refused is, rather than kept unrefreshed (its ca.crt would hold CA rotations back)."""
    return {(t.namespace, t.client_secret) for t in targets if t.client_wanted}


def _client_item(target: Target, signing: Signing) -> Item:
    return Item(SECRETS, target.namespace, target.client_secret,
                lambda existing: decide_client_leaf(target, existing, signing), target.workloads, client=True)


def bundle_namespaces(targets: Iterable[Target], enabled: set[str]) -> set[str]:
    """Namespaces with opted-in workloads, plus those labelled enabled (pods may arrive there any time)."""
    return {t.namespace for t in targets} | enabled


def _leaf_item(target: Target, signing: Signing, keystore: Keystore | None = None) -> Item:
    """A target with no name left (its workload's own name is no Service name and no Service selects its
    pods) is issued all the same, a certificate naming nothing (certs.NAMELESS_SUBJECT), so its pods start
    rather than wait for a Secret; one issued before for other names is replaced, so no name that may not
    be named outlives the change, as when it was deleted."""
    return Item(SECRETS, target.namespace, target.secret_name,
                lambda existing: decide_leaf(target, existing, signing, keystore=keystore), target.workloads)


def _bundle_item(namespace: str, signing: Signing, *, truststore: bool = False, public: bool = False) -> Item:
    return Item(CONFIG_MAPS, namespace, TRUST_BUNDLE_CONFIGMAP,
                lambda existing: decide_bundle(namespace, existing, signing, truststore=truststore, public=public))


def _orphan(resource: Resource, namespace: str, name: str, role: own.Role) -> Item:
    def decide(existing: Obj | None) -> Outcome:
        if existing is None or not own.is_owned(existing, role):
            return None  # already gone, or someone took it over: not ours to delete any more
        rv = existing["metadata"].get("resourceVersion", "")
        return Write("delete", resource, namespace, name, resource_version=rv, reason="no longer needed")

    return Item(resource, namespace, name, decide)
