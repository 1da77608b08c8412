"""bench.cache_shapes measures what the reconciler's cache holds per object; held here so it cannot rot, and
so a change that stops a ReplicaSet's pods sharing what they repeat shows (2.9 KiB a pod before they did)."""

from __future__ import annotations

from bench.cache_shapes import held_per_object


def test_each_kind_is_measured_and_a_replica_sets_pods_share_what_they_repeat() -> None:
    held = held_per_object(2000)  # past the 1,024 parts it remembers, whose own keys a smaller run would count
    assert set(held) == {"Deployment", "ReplicaSet", "Pod"}
    assert all(size > 0 for size in held.values()), held
    assert held["Pod"] < 2048, held  # 1.5 KiB measured at 10,000; 2.9 KiB kept whole
