"""Three years of daily reconcile decisions: CA and leaf rotations never leave a leaf untrusted."""

from __future__ import annotations

import random
from datetime import timedelta

from tests.pki.conftest import NOW
from tests.pki.sim import WORKLOAD_NAMES, Cluster
from tls_injector.pki import CaState, decode

DAYS = 3 * 365


def test_three_years_of_daily_passes_with_crashes_keep_every_leaf_trusted_in_every_namespace() -> None:
    rng = random.Random(5)
    cluster = Cluster.bootstrap(NOW)
    states_seen: set[CaState] = set()
    cas_kept: set[str] = set()  # a CA made by a pass that then crashed is never stored: not counted
    for _ in range(DAYS):
        # A pass fails before its CA Secret write one day in five, and writes only half of its bundles
        # and leaves, so every transition is also exercised from a half-finished previous pass.
        cluster.reconcile(rng, write_state=0.8, propagate=0.5, reissue=0.5)
        records = decode(cluster.ca_secret).records
        states_seen.update(r.state for r in records)
        cas_kept.update(r.fingerprint for r in records)
        assert cluster.untrusted_pairs() == [], cluster.now
        cluster.tick(timedelta(days=1))
    # The run did what it claims: a CA rotation about every 305 days, leaves renewed every ~55 days.
    assert len(cas_kept) == 4
    assert states_seen == set(CaState)
    assert cluster.reasons["ca-rotated"] >= 3
    assert cluster.reasons["expiring"] >= len(WORKLOAD_NAMES) * DAYS // 90
