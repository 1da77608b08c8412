"""The CA keeper: the CA sets and the facts they are stepped on (docs/reconcile.md, "The CA trust state
machine"): the user's own CAs, the bundles and leaves in use, the bundles that cannot be written, and
what a pass signs with.

It holds only its own state (each CA set's step this pass, the user's CAs as read, what the last full
pass signed with) and is handed what it uses: the API, the settings, the metrics, the writer (a CA
Secret's write, and which writes are backing off) and the announcer. What federation adds to a step (a
member's intermediate, a hub's gate on its members' reports) is handed to each step by the pass."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NoReturn

from tls_injector import names
from tls_injector.kube import CONFIG_MAPS, SECRETS, Conflict, KubeApi, NotFound
from tls_injector.names import BUNDLE_KEY, CLIENT_BUNDLE_KEY
from tls_injector.pki import (
    CaRole,
    CaSet,
    CertKey,
    Chains,
    TrustFacts,
    bundle_certificates,
    load_certificates,
    load_user_ca,
)
from tls_injector.reconcile.ca.machine import CaPolicy, CaStep, CaUnusable, decide_ca, other_role, shared_key_problem
from tls_injector.reconcile.core.discover import Target, WorkloadRef
from tls_injector.reconcile.core.inputs import CLIENT_PREFIX, Observed, Signing
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.core.objects import Obj, secret_data
from tls_injector.reconcile.core.plan import bundle_namespaces, client_secrets
from tls_injector.reconcile.native import podcerts, signer
from tls_injector.reconcile.parts.announcer import Announcer
from tls_injector.reconcile.parts.state import PassReport, ReconcileSettings, read_optional
from tls_injector.reconcile.parts.writes import MAX_ATTEMPTS, Writer

log = logging.getLogger("tls_injector.reconcile")



# How the log, the Events and `reconcile --once` name the user's own CA Secret of each role.
_USER_CA: dict[CaRole, str] = {"serving": "user-provided CA Secret", "client": "user-provided client CA Secret"}


# A hub's gate on a CA set's facts (HubSide.gate): the facts with its members' reports.
Gate = Callable[[CaSet, TrustFacts], TrustFacts]


class CaKeeper:
    """Stepping the CA sets of a pass, and keeping what the last full pass signed with."""

    def __init__(self, api: KubeApi, settings: ReconcileSettings, metrics: ReconcileMetrics, writer: Writer,
                 announcer: Announcer) -> None:
        self._api = api
        self._settings = settings
        self._metrics = metrics
        self._writer = writer
        self._announcer = announcer
        self._steps: dict[str, CaStep] = {}  # by CA Secret, as the pass stepped them
        self._user: dict[CaRole, CertKey] = {}  # the user's own CAs by role, as read at the start of this pass
        # What the last full pass signed with: a keyed pass (run_namespaces_pass) signs with the same,
        # stepping no CA set (None: no full pass yet, or the last stopped before its CA sets were stepped).
        self._signing: Signing | None = None

    @property
    def steps(self) -> dict[str, CaStep]:
        """Each CA set as this pass stepped it, by its Secret."""
        return self._steps

    def begin(self) -> None:
        """A full pass starts: no CA set stepped yet. Keyed passes sign with what this pass steps; one that
        stops before (a user CA that cannot be used, say) leaves them nothing to sign with, so they wait
        for a full pass that succeeds."""
        self._steps, self._signing = {}, None

    @property
    def signing(self) -> Signing | None:
        """What the last full pass signed with (None: nothing a keyed pass may sign with)."""
        return self._signing

    def keep(self, signing: Signing) -> None:
        """This full pass signs with `signing`: keyed passes sign with the same until the next."""
        self._signing = signing

    def forget(self) -> None:
        """This replica no longer leads: nothing to sign with until its next full pass."""
        self._signing = None

    def user(self, role: CaRole) -> CertKey | None:
        """The user's own CA of `role`, as this pass read it (read_user_cas)."""
        return self._user.get(role)

    def rotating(self) -> bool:
        """A CA set of the last full pass is mid-rotation (more than one CA, or none may sign): then what a
        pass writes (a bundle with the new CA, a leaf from it) is a fact its next step waits on, and the
        loop calls a full pass after any write instead of waiting for the resync. (A set with no CA at all,
        the webhook's before its configurations exist, waits on nothing a pass writes.)"""
        return any(step.waiting or len(step.cas.records) > 1 for step in self._steps.values())

    def step_ca(self, policy: CaPolicy, *, bundles: Sequence[Sequence[Any]], leaves: Sequence[Sequence[Any]],
                 user_ca: CertKey | None, now: datetime, report: PassReport,
                 external: Callable[[CaSet, TrustFacts], TrustFacts] | None = None) -> CaStep:
        """Step a CA set and persist it before anything is signed with it; a 409 re-reads and re-decides."""
        for _ in range(MAX_ATTEMPTS):
            existing = read_optional(self._api, SECRETS, policy.secret_name, self._settings.namespace)
            step: CaStep = decide_ca(existing, namespace=self._settings.namespace, bundles=bundles, leaves=leaves,
                                     now=now, policy=policy, user_ca=user_ca, external=external)
            if step.write is not None:
                try:
                    self._writer.write_stored(step.write, report, existing=existing)
                except Conflict:
                    continue  # another reconciler stepped first: use what it stored
                kind = "client-ca" if policy.secret_name == names.CLIENT_CA_SECRET else "ca"
                self._metrics.rotations.labels(kind, step.write.reason.partition(":")[0]).inc()
                log.info("CA set stored", extra={"secret": policy.secret_name, "reason": step.write.reason,
                                                 "states": step.cas.states()})
            self._steps[policy.secret_name] = step
            if step.next_step_at is not None:
                report.next_ca_step = min(step.next_step_at, report.next_ca_step or step.next_step_at)
            return step
        raise Conflict(f"the CA Secret {policy.secret_name} kept changing under us; next pass")

    def read_user_cas(self, now: datetime) -> dict[CaRole, CertKey]:
        """The user's own CAs by role (kept for this pass), each checked (`user_ca`), and checked apart
        (`shared_key_problem`): neither may share a key with the other, nor with a CA the other role's set
        holds (the generated one, or one on its way in or out). Raises CaUnusable, before anything is
        stepped or written."""
        roles: tuple[CaRole, CaRole] = ("client", "serving")  # both given and alike: the client one is refused
        found = {role: ca for role in roles if (ca := self.user_ca(now, role)) is not None}
        for role, ca in found.items():
            other = other_role(role)
            secret = names.CLIENT_CA_SECRET if other == "client" else self._settings.ca.secret_name
            if problem := shared_key_problem(role, ca, other_user_ca=found.get(other),
                                             other_set=self._read(SECRETS, secret)):
                self._refuse_user_ca(role, problem, now)
        self._user = found
        return found

    def _read(self, resource: Any, name: str) -> Obj | None:
        return read_optional(self._api, resource, name, self._settings.namespace)

    def user_ca(self, now: datetime, role: CaRole = "serving") -> CertKey | None:
        """The user's own CA of `role` from its Secret (--ca-secret, --client-ca-secret), checked: a CA
        (CA:TRUE, keyCertSign), valid now, its key matching. Read at every pass, never stored elsewhere."""
        name = self._settings.user_secret(role)
        if not name:
            return None
        try:
            secret = self._api.get(SECRETS, name, namespace=self._settings.namespace)
        except NotFound as e:
            raise CaUnusable(f"{_USER_CA[role]} {self._settings.namespace}/{name} does not exist") from e
        data = secret_data(secret)
        try:
            return load_user_ca(data.get("tls.crt", b""), data.get("tls.key", b""), now=now)
        except ValueError as e:
            self._refuse_user_ca(role, str(e), now, secret=secret, cause=e)

    def _refuse_user_ca(self, role: CaRole, why: str, now: datetime, *, secret: Obj | None = None,
                        cause: Exception | None = None) -> NoReturn:
        """The pass stops (nothing may be signed with it, and no other CA is minted in its place); the log,
        the exit status, the failures metric and a Warning Event `CaUnusable` on the Secret say why."""
        name = self._settings.user_secret(role) or ""
        message = f"{_USER_CA[role]} {self._settings.namespace}/{name}: {why}"
        if secret is None:
            secret = self._read(SECRETS, name) or {"metadata": {}}
        ref = WorkloadRef("Secret", self._settings.namespace, name, secret["metadata"].get("uid", ""), "v1")
        self._announcer.announce((ref,), f"ca/{name}", reason="CaUnusable", message=message, now=now)
        raise CaUnusable(message) from cause

    def ensure_ca(self, observed: Observed, targets: list[Target], now: datetime, report: PassReport, *,
                  native: signer.NativeView | None = None, intermediate: CertKey | None = None,
                  gate: Gate | None = None) -> tuple[CaStep, set[str]]:
        """The workloads' CA set, stepped on what this pass observed of bundles and leaves in use; with the
        namespaces whose bundles it was stepped on (a member's report speaks of those). `intermediate`: a
        member's from the hub, used when the user gave no CA of their own; `gate`: a hub's."""
        namespaces = bundle_namespaces(targets, observed.bundle_wanted)
        excluded = self._unwritable_bundles(namespaces, observed, targets, report, now)
        namespaces -= set(excluded)
        bundles, leaves = self._serving_facts(observed, targets, namespaces, native, now)
        return self.step_ca(self._settings.workload_ca_policy, bundles=bundles, leaves=leaves,
                            user_ca=self._user.get("serving") or intermediate, now=now,
                            report=report, external=gate), namespaces

    def facts(self, role: CaRole, observed: Observed, targets: list[Target], namespaces: set[str], *,
              native: signer.NativeView | None, now: datetime) -> tuple[Sequence[Any], Sequence[Any]]:
        """The bundles and leaves of `role` in use in `namespaces`: what its CA set is stepped on, and what
        a member's report on the hub's roots is made of."""
        if role == "serving":
            return self._serving_facts(observed, targets, namespaces, native, now)
        return self._client_facts(observed, targets, namespaces)

    def _serving_facts(self, observed: Observed, targets: list[Target], namespaces: set[str],
                       native: signer.NativeView | None, now: datetime) -> tuple[list[list[Any]], Sequence[list[Any]]]:
        """The serving bundles and leaves in use: what the workload CA is stepped on, and a member's report."""
        # Client Secrets too: their ca.crt is a bundle of the serving CAs in use (their tls.crt chains to no
        # serving CA, so it changes no fact about one).
        wanted = {(t.namespace, t.secret_name) for t in targets} | client_secrets(targets)
        served, held = [], set()
        for key in [key for key in observed.leaves if key in wanted]:
            data = observed.leaves[key].get("data") or {}
            served.append(data.get("tls.crt"))  # decoded and parsed only when read (Chains)
            # A leaf Secret whose last write failed keeps serving (its leaf counts), but its ca.crt cannot
            # be brought up to date, so it is no bundle the new CA must wait for.
            if not self._writer.backing_off((SECRETS.kind, *key)):
                held.add(data.get("ca.crt"))  # as stored: nearly always one text, decoded once below
        # The facts depend on which distinct bundles are in use, not on how many hold each: the bundles of
        # all namespaces, and every leaf Secret's ca.crt, are nearly always one and the same text.
        # (A leaf Secret's ca.crt is a bundle too: a client may trust its peers through its own mount.)
        bundles = [bundle_certificates({BUNDLE_KEY: pem}) for pem in
                   {((observed.bundles.get(ns) or {}).get("data") or {}).get(BUNDLE_KEY, "") for ns in namespaces}]
        bundles += [load_certificates(secret_data({"data": {"ca.crt": pem}}).get("ca.crt", b"")) for pem in held]
        pod_chains: list[bytes] = []
        if native is not None:  # the ClusterTrustBundle is a bundle in use; issued pod certificates are leaves
            bundles.append(load_certificates(str(((native.bundle or {}).get("spec") or {}).get("trustBundle") or "")
                                        .encode()))
            pod_chains = podcerts.issued_chains(native.requests, now=now)
        return bundles, Chains(encoded=served, pem=pod_chains)

    def ensure_client_ca(self, observed: Observed, targets: list[Target], now: datetime, report: PassReport, *,
                         intermediate: CertKey | None = None, gate: Gate | None = None) -> tuple[CaStep, set[str]]:
        """The client CA set, stepped by the same trust state machine as the workload CA, on its own facts:
        the bundles in use are the `client-ca-bundle.crt` of every namespace's trust bundle (those left out
        of the serving CA's facts are left out here too), the leaves the client Secrets' certificates.
        Refused client Secrets (users of one Secret with different service accounts) are reported here."""
        for target in targets:
            if message := target.client_refusal():
                report.clients_refused.append(message)
                log.warning("client certificate refused", extra={"namespace": target.namespace,
                                                                 "object": target.client_secret, "reason": message})
                self._announcer.announce(target.workloads, f"{target.namespace}/{target.client_secret}",
                                         reason="ClientCertificateRefused", message=message, now=now)
        namespaces = bundle_namespaces(targets, observed.bundle_wanted) - set(report.excluded)
        bundles, leaves = self._client_facts(observed, targets, namespaces)
        base = self._settings.ca
        policy = CaPolicy(secret_name=names.CLIENT_CA_SECRET, common_name="tls-injector client CA",
                          validity=base.validity, lookahead=base.lookahead, settle=base.settle,
                          path_length=1 if self._settings.hub else 0)
        return self.step_ca(policy, bundles=bundles, leaves=leaves,
                            user_ca=self._user.get("client") or intermediate, now=now, report=report,
                            external=gate), namespaces

    @staticmethod
    def _client_facts(observed: Observed, targets: list[Target],
                      namespaces: set[str]) -> tuple[list[list[Any]], list[list[Any]]]:
        """The client bundles and leaves in use: what the client CA is stepped on, and a member's report."""
        pems = {((observed.bundles.get(ns) or {}).get("data") or {}).get(CLIENT_BUNDLE_KEY, "") for ns in namespaces}
        bundles = [bundle_certificates({CLIENT_BUNDLE_KEY: pem}, prefix=CLIENT_PREFIX) for pem in pems]
        wanted = client_secrets(targets)
        leaves = [load_certificates(secret_data(observed.leaves[key], keys=("tls.crt",)).get("tls.crt", b""))
                  for key in wanted if key in observed.leaves]
        return bundles, leaves

    def _unwritable_bundles(self, namespaces: set[str], observed: Observed, targets: list[Target],
                            report: PassReport, now: datetime) -> dict[str, str]:
        """Namespaces whose bundle this reconciler cannot write, by why: a ConfigMap of the bundle's name
        that is not ours, or one whose last write the API server refused. They are left out of the CA's
        rotation facts, so the new CA does not wait for them forever (and every leaf with it); their own
        pods are told why, as is the log, the metric, the report and `doctor`."""
        excluded = {ns: f"ConfigMap {ns}/{names.TRUST_BUNDLE_CONFIGMAP} exists and is not managed by tls-injector"
                    for ns in sorted(namespaces & observed.squatted)}
        excluded |= {ns: f"ConfigMap {ns}/{names.TRUST_BUNDLE_CONFIGMAP} could not be written"
                     for ns in sorted(namespaces - observed.squatted)
                     if self._writer.backing_off((CONFIG_MAPS.kind, ns, names.TRUST_BUNDLE_CONFIGMAP))}
        self._metrics.bundles_excluded.set(len(excluded))
        for ns, why in excluded.items():
            message = (f"{why}: pods in {ns} do not get tls-injector's trust bundle and will not trust the "
                       f"next CA; CA rotation goes on without this namespace. Delete or rename that ConfigMap.")
            report.excluded[ns] = message
            log.error("trust bundle cannot be written; namespace left out of CA rotation",
                      extra={"namespace": ns, "reason": why})
            users = tuple(ref for t in targets if t.namespace == ns for ref in t.workloads)
            self._announcer.announce(users, f"bundle/{ns}", reason="TrustBundleExcluded", message=message, now=now)
        return excluded
