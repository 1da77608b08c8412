"""A small simulated cluster for CA rotation: namespaces hold trust bundles, workloads hold leaves.

It plays the reconciler's order of writes (CA Secret, then bundles, then leaves) and lets each pass
stop part-way, the way a crash or a conflict would, so tests can check the trust invariant after each.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cryptography import x509

from tls_injector.pki import (
    CaSet,
    CertKey,
    add_ca,
    advance,
    decode,
    encode,
    fingerprint,
    issue_leaf,
    leaf_renewal,
    load_certificates,
    make_ca,
    observe,
    rotation_due,
    verify_server,
)

WORKLOAD_NAMES = {"api": ["api", "api.a"], "web": ["web", "web.b"]}


@dataclass
class Cluster:
    now: datetime
    ca_secret: dict[str, bytes] = field(default_factory=dict)
    bundles: dict[str, list[x509.Certificate]] = field(default_factory=dict)
    leaves: dict[str, CertKey] = field(default_factory=dict)
    cas_made: int = 0
    leaves_issued: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    @classmethod
    def bootstrap(cls, now: datetime, *, namespaces: int = 3, ca_age: timedelta = timedelta(0)) -> Cluster:
        """A converged cluster at `now` whose CA was made `ca_age` ago (to start close to a rotation)."""
        cluster = cls(now - ca_age)
        cas = add_ca(CaSet(), cluster.new_ca(), now=cluster.now)
        cluster.now = now
        cluster.ca_secret = encode(cas)
        cluster.bundles = {f"ns{i}": cas.bundle() for i in range(namespaces)}
        signer = cas.signer()
        assert signer is not None
        cluster.leaves = {w: cluster.issue(signer, names) for w, names in WORKLOAD_NAMES.items()}
        return cluster

    def new_ca(self) -> CertKey:
        self.cas_made += 1
        return make_ca(common_name="tls-injector CA", now=self.now)

    def issue(self, signer: CertKey, names: list[str]) -> CertKey:
        self.leaves_issued += 1
        return issue_leaf(issuer=signer, dns_names=names, now=self.now)

    def reconcile(self, rng: random.Random, *, write_state: float, propagate: float, reissue: float) -> None:
        """One pass; each write happens with the given probability (the rest: crashed or conflicted)."""
        cas = decode(self.ca_secret)
        facts = observe(cas, bundles=self.bundles.values(), leaves=[_served(c) for c in self.leaves.values()])
        if rotation_due(cas, now=self.now):
            cas = add_ca(cas, self.new_ca(), now=self.now)
        cas = advance(cas, facts, now=self.now)
        if rng.random() >= write_state:
            return  # crashed before the CA Secret write: nothing else happens either
        self.ca_secret = encode(cas)
        for namespace in self.bundles:
            if rng.random() < propagate:
                self.bundles[namespace] = cas.bundle()
        self._renew_leaves(cas, rng, reissue)

    def _renew_leaves(self, cas: CaSet, rng: random.Random, reissue: float) -> None:
        signer = cas.signer()
        assert signer is not None, cas.states()
        for workload, leaf in self.leaves.items():
            decision = leaf_renewal(cert_pem=leaf.chain_pem, key_pem=leaf.key_pem, desired_dns=WORKLOAD_NAMES[workload],
                                    trusted=cas.bundle(), issuer=signer.cert, now=self.now)
            if decision.renew and rng.random() < reissue:
                self.reasons[str(decision.reason)] = self.reasons.get(str(decision.reason), 0) + 1
                self.leaves[workload] = self.issue(signer, WORKLOAD_NAMES[workload])

    def untrusted_pairs(self) -> list[tuple[str, str, str]]:
        """(workload, namespace, why) for every leaf in use that a bundle in use does not trust."""
        failures = []
        # Namespaces holding the same bundle get the same verdict: verify each distinct bundle once.
        distinct = {tuple(fingerprint(c) for c in b): (ns, b) for ns, b in self.bundles.items()}
        for workload, leaf in self.leaves.items():
            chain = _served(leaf)
            for namespace, bundle in distinct.values():
                try:
                    verify_server(chain[0], chain[1:], trusted=bundle, dns_name=WORKLOAD_NAMES[workload][0],
                                  now=self.now)
                except ValueError as e:
                    failures.append((workload, namespace, str(e)))
        return failures

    def tick(self, step: timedelta) -> None:
        self.now += step


def _served(leaf: CertKey) -> list[x509.Certificate]:
    """What a client receives: parsed back from the Secret's tls.crt, as the reconciler would read it."""
    return load_certificates(leaf.chain_pem)
