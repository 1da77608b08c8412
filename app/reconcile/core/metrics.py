"""Prometheus metrics of the reconciler, registered in the registry it is given (the server's, in `serve`).

Two kinds. Counters and the pass histogram count what this process did, leader or not, and only grow.
The gauges of the last pass (expiries, CA states, pods without the injection, conflicts, ...) describe the
cluster as this replica last saw it while it led: a replica that does not hold the Lease exports them
with no sample (declared, empty), so the alerts, which take the min or max over every replica scraped,
read the leader's values alone. Whether this replica leads is asked at each scrape (`follow`), not set
when a lease round ends: a round blocked on an API server that does not answer lasts up to two request
timeouts (60 s), far past the 10 s after which the replica stops writing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tls_injector.names import SIGNER_NAME

# A pass over a few thousand objects takes seconds; a stuck one (API timeouts) takes minutes.
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class ReconcileMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._counters(self.registry)
        self.leader = Gauge("tls_injector_leader", "1 while this replica holds the leader lease.",
                            registry=self.registry)
        # This process's own, leader or not now: a replica that led keeps the time of its last complete
        # pass, and max() over the replicas is the cluster's. 0 until one completes.
        self.last_complete_pass = Gauge(
            "tls_injector_last_successful_pass_timestamp_seconds",
            "Unix time a full reconcile pass of this process last ran to its end (converged or not; a pass that "
            "stopped does not count).", registry=self.registry)
        self.last_pass = LastPass(self._pass_gauges())
        self.registry.register(self.last_pass)
        # The last verdict on the served certificate, for /readyz: None until known (or when unreachable).
        self.serving_verdict: bool | None = None

    def follow(self, leading: Callable[[], bool]) -> None:
        """Ask `leading()` at each scrape: tls_injector_leader, and whether the last pass's gauges are shown."""
        self.last_pass.leading = leading
        self.leader.set_function(lambda: int(leading()))

    def forget(self) -> None:
        """The last pass's values, dropped (leadership lost: whoever leads next reports its own)."""
        self.last_pass.clear()

    def _counters(self, r: CollectorRegistry) -> None:
        # kind: leaf, ca, client-leaf, client-ca (the client certificates and their CA set, docs/mtls.md).
        self.rotations = Counter("tls_injector_rotations", "Certificates issued or renewed, and CA steps, by reason.",
                                 ["kind", "reason"], registry=r)
        # reason: the kind of object (secret, configmap, ...), client-secret for a client certificate's.
        self.failures = Counter("tls_injector_rotation_failures", "Objects that could not be converged, by reason.",
                                ["reason"], registry=r)
        self.duration = Histogram("tls_injector_reconcile_duration_seconds", "Wall time of a reconcile pass.",
                                  buckets=DURATION_BUCKETS, registry=r)
        self.api = Counter("tls_injector_kube_api_requests", "Kubernetes API requests by verb and outcome.",
                           ["verb", "outcome"], registry=r)
        self.pod_certificates = Counter("tls_injector_pod_certificate_requests",
                                        f"PodCertificateRequests answered by the signer {SIGNER_NAME}, "
                                        "by verdict (Issued, or the Denied/Failed reason).",
                                        ["verdict"], registry=r)

    def _pass_gauges(self) -> list[Collector]:
        """The gauges of the last pass, registered through LastPass (registry=None here)."""
        self.cert_expiry = ExpiryGauge()
        self.client_cert_expiry = ExpiryGauge(client=True)  # the client certificates' (docs/mtls.md)
        self.ca_expiry = Gauge("tls_injector_ca_expiry_timestamp_seconds",
                               "Expiry (Unix time) of each CA in the trust set, by trust state.",
                               ["fingerprint", "state"], registry=None)
        self.client_ca_expiry = Gauge("tls_injector_client_ca_expiry_timestamp_seconds",
                                      "Expiry (Unix time) of each CA in the client CA set, by trust state (none "
                                      "while no workload asks for a client certificate).",
                                      ["fingerprint", "state"], registry=None)
        self.conflicts = Gauge("tls_injector_ownership_conflicts",
                               "Objects in the way that tls-injector does not own (last pass).", registry=None)
        self.not_issued = Gauge(
            "tls_injector_certificates_not_issued",
            "Certificate Secrets the cluster needs that hold no certificate of ours (waiting for a CA, someone "
            "else's Secret in the way, a write refused, no valid name left; last pass).", registry=None)
        self.waiting = Gauge("tls_injector_certificates_waiting",
                             "Certificates to issue or renew that wait for a CA that may sign (last pass).",
                             registry=None)
        self.names_refused = Gauge(
            "tls_injector_service_names_refused",
            "Certificate Secrets whose workloads ask for names no certificate may carry (refused; last pass).",
            registry=None)
        self.profiles_refused = Gauge(
            "tls_injector_certificate_profiles_refused",
            "Certificate Secrets issued with the operator's default for a profile value their workloads ask for "
            "(out of bounds, malformed, or workloads sharing the Secret asking for different ones; last pass).",
            registry=None)
        self.key_algorithms = Gauge(
            "tls_injector_certificates_by_key_algorithm",
            "Certificate Secrets by the key algorithm of the profile they are issued with (last pass).",
            ["algorithm"], registry=None)
        self.nameless = Gauge(
            "tls_injector_certificates_without_names",
            "Certificate Secrets issued naming no Service: the workload's own name is no Service name and no "
            "Service selects its pods (last pass).", registry=None)
        self.bundles_excluded = Gauge(
            "tls_injector_bundles_excluded",
            "Namespaces whose trust bundle cannot be written, left out of CA rotation (last pass).", registry=None)
        self.serving_trusted = Gauge(
            "tls_injector_cabundle_trusts_serving_cert",
            "1 when every entry's caBundle verifies the certificate the webhook serves, 0 when one does not "
            "(every admission call to it then fails); checked after each pass, absent while unknown.",
            ["configuration"], registry=None)
        self.missing_injection = Gauge(
            "tls_injector_pods_missing_injection",
            "Opted-in pods without the injection (created while the webhook was down or before install), last pass.",
            registry=None)
        self.member_ready = Gauge(
            "tls_injector_federation_member_ready",
            "A hub: 1 when the member has current intermediates of both roles, 0 when not (the log, an Event "
            "on its Secret and `doctor` say why); last pass.", ["member"], registry=None)
        self.member_intermediate = Gauge(
            "tls_injector_federation_intermediate_in_use",
            "A member: 1 when the hub's intermediate of the role is found and usable, 0 when not; last pass.",
            ["role"], registry=None)
        return [self.cert_expiry, self.client_cert_expiry, self.ca_expiry, self.client_ca_expiry, self.conflicts,
                self.not_issued, self.waiting, self.names_refused, self.profiles_refused,
                self.key_algorithms, self.nameless, self.bundles_excluded,
                self.serving_trusted, self.missing_injection, self.member_ready, self.member_intermediate]

    def api_call(self, verb: str, outcome: str) -> None:
        self.api.labels(verb, outcome).inc()


class LastPass(Collector):
    """The gauges of the last pass, shown only while `leading()`: declared with no sample otherwise."""

    def __init__(self, parts: Iterable[Collector]) -> None:
        self._parts = tuple(parts)
        # Without a Lease (`reconcile --once`, tests of the pass alone) this process is the only writer.
        self.leading: Callable[[], bool] = lambda: True

    def collect(self) -> Iterator[Metric]:
        shown = self.leading()
        for part in self._parts:
            for family in part.collect():
                if not shown:
                    family.samples = []  # a fresh family per collect: nothing shared is changed
                yield family

    def describe(self) -> Iterator[Metric]:
        for part in self._parts:
            yield from part.describe()  # type: ignore[attr-defined]

    def clear(self) -> None:
        for part in self._parts:
            if isinstance(part, ExpiryGauge):
                part.replace({})
            elif isinstance(part, Gauge) and part._labelnames:
                part.clear()
            elif isinstance(part, Gauge):
                part.set(0)


class ExpiryGauge(Collector):
    """Workload certificates' expiry, replaced whole after each pass.

    By default two series without labels: the earliest expiry (`..._earliest_expiry_timestamp_seconds`,
    what an alert needs) and how many certificates there are. One series per Secret,
    `tls_injector_certificate_expiry_timestamp_seconds{namespace,secret}`, only when the pass asks for it
    (`reconcile --metrics-per-object`): those labels list every opted-in namespace and Secret name to
    whoever can scrape /metrics, and grow the series with the cluster.

    A collector rather than a labelled Gauge: a pass sets one value per workload Secret, and creating and
    validating a labelled child per Secret cost about 1 s per pass at 10,000 workloads; here a pass hands
    over one dict, and the samples are built only when /metrics is scraped.
    """

    NAME = "tls_injector_certificate_expiry_timestamp_seconds"
    EARLIEST = "tls_injector_certificates_earliest_expiry_timestamp_seconds"
    COUNT = "tls_injector_certificates"

    def __init__(self, *, client: bool = False) -> None:
        """`client`: the same three for client certificates' Secrets, named `..._client_certificate...`."""
        self._values: Mapping[tuple[str, str], float] = {}
        self._per_object = False
        if client:
            self.NAME, self.EARLIEST, self.COUNT = (n.replace("_certificate", "_client_certificate", 1)
                                                    for n in (self.NAME, self.EARLIEST, self.COUNT))
        self._what = "client certificate" if client else "workload certificate"

    def replace(self, values: Mapping[tuple[str, str], float], *, per_object: bool = False) -> None:
        # One reference swap each: a scrape sees the old pass or the new one (the flag never changes
        # within a process, so the two never disagree).
        self._values, self._per_object = dict(values), per_object

    def collect(self) -> Iterator[GaugeMetricFamily]:
        values = self._values
        earliest = GaugeMetricFamily(self.EARLIEST, f"Earliest expiry (Unix time) of the {self._what}s.")
        if values:
            earliest.add_metric([], min(values.values()))
        yield earliest
        yield GaugeMetricFamily(self.COUNT, f"{self._what.capitalize()} Secrets with a certificate (last pass).",
                                value=len(values))
        if self._per_object:
            family = self._per_object_family()
            for (namespace, secret), value in sorted(values.items()):
                family.add_metric([namespace, secret], value)
            yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self.EARLIEST, f"Earliest expiry (Unix time) of the {self._what}s.")
        yield GaugeMetricFamily(self.COUNT, f"{self._what.capitalize()} Secrets with a certificate (last pass).")

    def _per_object_family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self.NAME, f"Expiry (Unix time) of each {self._what} Secret.",
                                 labels=["namespace", "secret"])
