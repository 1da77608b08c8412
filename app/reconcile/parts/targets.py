"""The targets finder: the certificate Secrets the observed workloads and pods need (discover.py), with
what is refused of them reported (Secret names that are none, service accounts that do not exist,
keystores that cannot be made, names no certificate may carry, profiles, objects too large, TLS changes).

It holds only what the pass under way refused whole (for the status) and is handed what it uses: the
API (a service account's or a keystore password's read), the settings, the metrics, the findings and
the announcer."""

from __future__ import annotations

import logging
from datetime import datetime

from tls_injector.kube import SECRETS, SERVICE_ACCOUNTS, KubeApi, KubeError, NotFound
from tls_injector.kubenames import shown, subdomain_problem
from tls_injector.reconcile.core import keystores
from tls_injector.reconcile.core.discover import (
    Target,
    discover,
    legal_targets,
    secret_users,
    trust_only_split,
    truststore_namespaces,
)
from tls_injector.reconcile.core.inputs import Observed
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.core.objects import Obj
from tls_injector.reconcile.core.profile import report_profiles
from tls_injector.reconcile.parts.announcer import Announcer
from tls_injector.reconcile.parts.reports import Findings
from tls_injector.reconcile.parts.state import PassReport, ReconcileSettings

log = logging.getLogger("tls_injector.reconcile")


class TargetFinder:
    """What the observed workloads and pods need, each refusal said once per pass."""

    def __init__(self, api: KubeApi, settings: ReconcileSettings, metrics: ReconcileMetrics, findings: Findings,
                 announcer: Announcer) -> None:
        self._api = api
        self._settings = settings
        self._metrics = metrics
        self._findings = findings
        self._announcer = announcer
        # The targets of the pass under way refused whole for a Secret name that is none: never planned,
        # shown in the status with their SecretNameRefused condition.
        self._refused: list[Target] = []

    @property
    def refused(self) -> list[Target]:
        """The targets the last `find` refused whole (their Secret name is none)."""
        return self._refused

    def find(self, observed: Observed, native_served: bool, report: PassReport, now: datetime) -> list[Target]:
        """The certificate Secrets the observed workloads and pods need (discover), with what is refused
        of them reported; fills in the observed namespaces' truststores, trust-only asks and keystores."""
        workloads, pods = observed.workloads, observed.pods
        if native_served:  # pod certificates served: who asked for them gets no Secret
            workloads, pods = secret_users(workloads, pods)
        observed.truststores = truststore_namespaces(workloads, pods, enabled=observed.enabled)
        # Who asked for trust alone gets no Secret; their namespaces get the bundle (names.MODE_TRUST_ONLY).
        workloads, pods, observed.trust_only = trust_only_split(workloads, pods, enabled=observed.enabled)
        targets = discover(workloads, pods, enabled=observed.enabled, cluster_domain=self._settings.cluster_domain,
                           services=observed.services, own_namespace=self._settings.namespace,
                           trust_domain=self._settings.trust_domain, profiles=self._settings.profiles)
        targets, self._refused = legal_targets(targets)
        self._findings.report_secret_names(self._refused, report, now)
        targets = self._accounts_checked(targets)
        observed.keystores = self._keystores(workloads, pods, targets, observed=observed, report=report, now=now)
        self._findings.report_refused_names(targets, report, now)
        report_profiles(targets, report.profiles_refused, self._metrics,
                        lambda t, m: self._announcer.announce(t.workloads, f"{t.namespace}/{t.secret_name}",
                                                             reason="ProfileRefused", message=m, now=now))
        self._findings.report_oversized(observed, report, now)
        self._findings.report_tls_changes(observed, now)
        return targets

    def _accounts_checked(self, targets: list[Target]) -> list[Target]:
        """A client certificate names its workload's service account (its SPIFFE ID): one that does not
        exist is no identity to vouch for, and whoever creates it later gets a certificate already made
        for that name. So that client certificate is refused (reported with the other client refusals,
        the rest go on), and one issued before is removed. One `get` per account asked for, per pass."""
        exists: dict[tuple[str, str], bool] = {}
        checked = []
        for target in targets:
            key = (target.namespace, target.client_ids[0].rsplit("/sa/", 1)[-1]) if target.client_wanted else None
            if key is not None and (why := subdomain_problem(key[1])):  # the pod spec's, as its author wrote it
                checked.append(target.client_refused(f"its service account {shown(key[1])} is no ServiceAccount "
                                                     f"name: {why}"))
                continue
            if key is not None and key not in exists:
                exists[key] = self._account_exists(*key)
            checked.append(target if key is None or exists[key] else target.client_refused(
                f"its service account {key[1]} does not exist in namespace {key[0]}; create it, or run the "
                "workload as one that exists"))
        return checked

    def _keystores(self, workloads: list[tuple[str, Obj]], pods: list[Obj], targets: list[Target], *,
                   observed: Observed, report: PassReport, now: datetime) -> dict[tuple[str, str], keystores.Keystore]:
        """The JVM keystores asked for, each password Secret read once (one `get` per name a pass); a
        keystore that cannot be made is reported and told on its workloads, the rest go on."""
        asks = keystores.keystore_asks(workloads, pods, enabled=observed.enabled)
        found = keystores.resolve(asks, read=self._read_password_secret, own_namespace=self._settings.namespace)
        for (namespace, secret), keystore in found.items():
            if keystore.problem:
                report.keystores_refused.append(keystore.problem)
                log.warning("keystore refused", extra={"namespace": namespace, "object": secret,
                                                       "reason": keystore.problem})
                refs = next((t.workloads for t in targets if (t.namespace, t.secret_name) == (namespace, secret)), ())
                self._announcer.announce(refs, f"{namespace}/{secret}", reason="KeystoreRefused",
                                        message=keystore.problem, now=now)
        return found

    def _read_password_secret(self, namespace: str, name: str) -> tuple[Obj | None, str]:
        try:
            return self._api.get(SECRETS, name, namespace=namespace), ""
        except NotFound:
            return None, ""
        except KubeError as e:
            return None, str(e)[:200]

    def _account_exists(self, namespace: str, name: str) -> bool:
        """False only when the API confirmed it missing: an API error keeps what is issued (one failed read
        must not remove every client certificate of the namespace)."""
        try:
            self._api.get(SERVICE_ACCOUNTS, name, namespace=namespace)
        except NotFound:
            return False
        except KubeError as e:
            log.warning("service account not checked", extra={"namespace": namespace, "object": name,
                                                               "error": str(e)})
        return True
