"""What a pass says beyond its writes: names refused, certificates naming no Service, objects too large to
read, and the gauges of CA and certificate expiry.

The findings part holds no state of its own between passes: it is handed the announcer (Events once
while a condition lasts) and the metrics, and says each finding in the log, the report and an Event."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from tls_injector import names
from tls_injector.injection import tls_change
from tls_injector.kube import SECRETS
from tls_injector.pki import CaSet, load_certificates
from tls_injector.reconcile.core.discover import LISTED_KINDS, Target, WorkloadRef, annotated
from tls_injector.reconcile.core.inputs import Observed, Signing
from tls_injector.reconcile.core.leaves import leaf_renewal_time, leaf_window
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.core.objects import Item, Obj, secret_data
from tls_injector.reconcile.core.ownership import is_owned
from tls_injector.reconcile.parts.announcer import Announcer
from tls_injector.reconcile.parts.state import PassReport

_OVERSIZED_HINT = (f"a Service is read as its name and selector, a workload as its pod template's labels, "
                   f"{names.DOMAIN} annotations and service account (docs/security.md, \"The reconciler's memory\")")

log = logging.getLogger("tls_injector.reconcile")



@dataclass
class Expiries:
    """The expiries of the Secrets a pass leaves, noted as it goes (`note`): a pass need not hold every
    Secret it wrote until its end (at 100,000 workloads, hundreds of MiB)."""

    targets: dict[tuple[str, str], Target]
    signing: Signing
    leaves: dict[tuple[str, str], datetime] = field(default_factory=dict)
    # When each leaf is due for renewal: its end less the renew-before of the life it got (leaves.leaf_renewal_time).
    renewals: dict[tuple[str, str], datetime] = field(default_factory=dict)
    clients: dict[tuple[str, str], float] = field(default_factory=dict)

    def note(self, item: Item, obj: Obj | None) -> None:
        if item.resource is not SECRETS:
            return
        key = (item.namespace, item.name)
        if item.client:
            chain = load_certificates(secret_data(obj, keys=("tls.crt",)).get("tls.crt", b""))
            if chain:
                self.clients[key] = chain[0].not_valid_after_utc.timestamp()
            return
        target = self.targets.get(key)
        # Someone else's Secret in the way is no certificate of ours, whatever it holds.
        if target is not None and is_owned(obj, "leaf") and \
                (window := leaf_window(target, obj, self.signing)) is not None:
            self.leaves[key] = window[1]
            self.renewals[key] = leaf_renewal_time(target, window, self.signing)


class Findings:
    """The pass's findings about its targets, in the log, the report, Events and metrics."""

    def __init__(self, metrics: ReconcileMetrics, announcer: Announcer, *, per_object_metrics: bool = False) -> None:
        self._metrics = metrics
        self._announcer = announcer
        self._per_object_metrics = per_object_metrics

    def report_secret_names(self, illegal: list[Target], report: PassReport, now: datetime) -> None:
        """Targets refused whole because their Secret name is none (discover.legal_targets): said in the log
        and the report at every pass, in a `SecretNameRefused` Event on the workloads once while it lasts."""
        for target in illegal:
            message = target.secret_name_refusal()
            report.secret_names_refused.append(message)
            log.warning("secret name refused", extra={"namespace": target.namespace, "reason": message})
            self._announcer.announce(target.workloads, f"{target.namespace}/{target.secret_name}",
                                     reason="SecretNameRefused", message=message, now=now)

    def report_refused_names(self, targets: list[Target], report: PassReport, now: datetime) -> None:
        """Names a workload asked for that no certificate may carry: the rest are issued; these are said
        in the log and the report at every pass, and in an Event on the workload once while it lasts."""
        refused = [t for t in targets if t.refused]
        self._metrics.names_refused.set(len(refused))
        for target in refused:
            message = target.refusal()
            report.names_refused.append(message)
            log.warning("service names refused", extra={"namespace": target.namespace, "object": target.secret_name,
                                                        "reason": message})
            self._announcer.announce(target.workloads, f"{target.namespace}/{target.secret_name}",
                                     reason="ServiceNamesRefused", message=message, now=now)
        nameless = [t for t in targets if not t.dns_names]
        self._metrics.nameless.set(len(nameless))
        for target in nameless:
            message = target.namelessness()
            report.nameless.append(message)
            log.warning("certificate names no Service", extra={"namespace": target.namespace,
                                                               "object": target.secret_name, "reason": message})
            self._announcer.announce(target.workloads, f"{target.namespace}/{target.secret_name}",
                                     reason="NoServiceName", message=message, now=now)

    def report_oversized(self, observed: Observed, report: PassReport, now: datetime) -> None:
        """Objects the pass left out as larger than their kind holds (read.py): said in the log and the
        report at every pass, and in an Event on the object once while it lasts; the rest goes on."""
        for kind, big, cap in observed.oversized:
            what = "its selector names no certificate" if kind == "Service" else "it gets no certificate"
            message = (f"{kind} {big.namespace}/{big.name}: {big.size} bytes of what tls-injector reads, over the "
                       f"{cap} a {kind} may take: left out ({what}); {_OVERSIZED_HINT}")
            report.oversized.append(message)
            log.warning("object too large; left out", extra={"namespace": big.namespace, "object": big.name,
                                                              "kind": kind, "reason": message})
            ref = WorkloadRef(kind, big.namespace, big.name, "", "v1" if kind == "Service" else LISTED_KINDS[kind])
            self._announcer.announce((ref,), f"{kind}/{big.namespace}/{big.name}", reason="ObjectTooLarge",
                                     message=message, now=now)

    def report_tls_changes(self, observed: Observed, now: datetime) -> None:
        """A workload whose pod template carries tls-injector.io/tls-change: the admission rules stored it
        only with an update they allowed, so the TLS change it names was made as a sanctioned exception, or
        it rode along an update that changed no TLS (docs/rules.md, "Exceptions"). Said in the log at every
        pass and in a Normal Event on the workload once per value, so the exception is seen where the
        workload is."""
        for kind, obj, _, _ in annotated(observed.workloads, ()):  # only a template with annotations names one
            value = tls_change(kind, obj)
            if value is None:
                continue
            meta = obj.get("metadata") or {}
            namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
            message = (f"the pod template names the TLS change {value!r} ({names.TLS_CHANGE_ANNOTATION}): made in "
                       f"place as a sanctioned exception when the update changed TLS; it allows no other change")
            log.info("TLS exception named", extra={"namespace": namespace, "object": name, "kind": kind,
                                                   "reason": message})
            ref = WorkloadRef(kind, namespace, name, str(meta.get("uid") or ""), LISTED_KINDS[kind])
            self._announcer.announce((ref,), f"tls-change/{kind}/{namespace}/{name}/{value}",
                                     reason="TLSChangeException", message=message, now=now, kind="Normal")

    def ca_metrics(self, cas: CaSet, *, client: bool = False) -> None:
        """Each CA of the set by its trust state: the workload CA's gauge, or the client CA set's."""
        gauge = self._metrics.client_ca_expiry if client else self._metrics.ca_expiry
        gauge.clear()
        for record in cas.records:
            gauge.labels(record.fingerprint[:16], str(record.state)).set(record.cert.not_valid_after_utc.timestamp())

    def cert_metrics(self, found: Expiries) -> None:
        """Each stored leaf's expiry into the metric (the status snapshot reads them too)."""
        self._metrics.cert_expiry.replace({key: expiry.timestamp() for key, expiry in found.leaves.items()},
                                         per_object=self._per_object_metrics)
        self._metrics.client_cert_expiry.replace(found.clients, per_object=self._per_object_metrics)
