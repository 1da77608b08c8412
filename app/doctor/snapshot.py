"""Everything the checks look at, read once: plain data, so every check is a pure function of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tls_injector.injection.profile import ProfileBounds
from tls_injector.kube import Obj
from tls_injector.names import LEASE_NAME, RECONCILER_ACCOUNT
from tls_injector.pki import SETTLE, CaRole
from tls_injector.reconcile.core.inputs import Observed
from tls_injector.reconcile.federation.hub import MemberOutcome
from tls_injector.reconcile.parts.served import Served
from tls_injector.reconcile.parts.webhook_plan import WebhookSettings


@dataclass(frozen=True)
class DoctorSettings:
    """The names to look for, from the same flags (and the same defaults) as `reconcile` and `serve`."""

    namespace: str
    cluster_domain: str
    webhook: WebhookSettings
    ca_secret: str
    trust_domain: str = ""  # of client certificates' SPIFFE IDs; "" = the cluster domain, as the reconciler's
    webhook_address: tuple[str, int] | None = None  # where to reach the webhook (e.g. a port-forward)
    reconciler_account: str = RECONCILER_ACCOUNT
    lease_name: str = LEASE_NAME
    hub: bool = False  # `doctor --hub`: also reach every registered member (docs/multicluster.md)
    # The user's own CA Secrets the reconciler is given (--ca-secret, --client-ca-secret), by role.
    user_ca_secrets: tuple[tuple[CaRole, str], ...] = ()
    # The reconciler's bounds of certificate profiles (its profile flags), which the profile checks judge by.
    profiles: ProfileBounds = field(default_factory=ProfileBounds)
    # The reconciler's settle (--ca-settle): how long a hub waits for its members' bundles (federation.gate_roots).
    ca_settle: timedelta = SETTLE
    # The exported admission policies that check RBAC for a TLS exception (rules.exception_policy_names of
    # the built-in rules): what must stand wherever the webhook runs with `--tls-exceptions policy`.
    exception_policies: tuple[str, ...] = ()


@dataclass(frozen=True)
class Access:
    """One SubjectAccessReview answer for the reconciler's service account."""

    verb: str
    group: str
    resource: str
    namespace: str | None
    name: str | None
    allowed: bool

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else " cluster-wide"
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {self.resource}{'.' + self.group if self.group else ''}{named}{where}"


@dataclass
class Exceptions:
    """The webhook's Deployments (`namespace/name`) that grant TLS exceptions, and, read only when one does,
    the policies and bindings that must guard them, by name (None: not installed)."""

    granting: list[str] = field(default_factory=list)
    policies: dict[str, Obj | None] = field(default_factory=dict)
    bindings: dict[str, Obj | None] = field(default_factory=dict)


@dataclass
class Snapshot:
    """What `read` found. An entry is None when the API confirmed the object does not exist; a section
    that could not be read at all has its error in `errors` (keyed by section name)."""

    settings: DoctorSettings
    now: datetime
    configs: dict[tuple[str, str], Obj | None] = field(default_factory=dict)  # (kind, name)
    serving_secret: Obj | None = None
    served: list[Served] = field(default_factory=list)
    ca_secrets: dict[str, Obj | None] = field(default_factory=dict)  # Secret name -> Secret
    observed: Observed = field(default_factory=Observed)
    secrets: dict[tuple[str, str], Obj | None] = field(default_factory=dict)  # read by name, beyond ours
    config_maps: dict[tuple[str, str], Obj | None] = field(default_factory=dict)
    lease: Obj | None = None
    pod_certificates: bool = False  # the cluster serves pod certificates: workloads asking for them get no Secret
    access: list[Access] = field(default_factory=list)
    # Multi-cluster: a hub's members as `inspect_member` found them; a member's intermediate Secrets by name.
    members: list[MemberOutcome] = field(default_factory=list)
    intermediates: dict[str, Obj | None] = field(default_factory=dict)
    exceptions: Exceptions = field(default_factory=Exceptions)
    errors: dict[str, str] = field(default_factory=dict)

    def secret(self, namespace: str, name: str) -> Obj | None:
        return self.observed.leaves.get((namespace, name)) or self.secrets.get((namespace, name))

    def config_map(self, namespace: str, name: str) -> Obj | None:
        found = self.observed.bundles.get(namespace)
        if found is not None and found["metadata"]["name"] == name:
            return found
        return self.config_maps.get((namespace, name))
