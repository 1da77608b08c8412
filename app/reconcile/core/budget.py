"""What one namespace may cost the loop per turn (docs/reconcile.md, "One namespace per turn").

The loop converges namespaces on one thread, and issuing is what costs: a key (RSA-4096 ~0.3 s, made ahead
on a thread of its own by keypool.py; P-256 ~0.02 ms, inline), the certificate signed and written. A tenant
with 1,000 `rsa-4096` workloads, or one who toggles `force-renew` on them in a loop, held the loop ~5 minutes
per wave, and every other namespace's new workload with it. So each pass the loop runs gives each namespace
a budget of time: what
its objects cost the pass (decisions, key generation, the wait for each write's answer) is charged to it, and once it is
spent the namespace's certificates that need issuing wait for the next turn (the Secret kept, its `ca.crt`
refreshed: objects.Deferred). The loop takes a namespace left over again at once, after the namespaces queued
meanwhile, so it converges at nearly full speed while nothing else waits longer than about one budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

# Why 0.5 s: a new workload elsewhere waits for the turn under way (at most this, plus the one item that
# crossed it) and the keyed pass's debounce (0.25 s) before its own pass takes it first: ~1 s of the 2 s
# goal for a new workload's Secret, leaving the rest for a loaded machine. A namespace left over pays its
# own re-reading each turn (its workloads discovered and its kept leaves decided again from their seals:
# ~0.05 s at 1,000 workloads), a tenth of the budget, so one namespace alone still converges at about
# nine tenths of the loop's speed. Tens of thousands of P-256 issues (0.24 ms with signing) fit in it, so no
# namespace of ordinary size ever meets it; a force-renew churn (~2.6 ms per re-issue with its writes) does.
NAMESPACE_TURN_SECONDS = 0.5


@dataclass
class TurnBudget:
    """The time each namespace spent of one pass, and the namespaces left over (`deferred`)."""

    seconds: float = NAMESPACE_TURN_SECONDS
    clock: Callable[[], float] = time.monotonic
    spent: dict[str, float] = field(default_factory=dict)
    deferred: set[str] = field(default_factory=set)

    def allows(self, namespace: str) -> bool:
        """Whether `namespace` may still issue in this pass (the issue that crosses the line is let through)."""
        return self.spent.get(namespace, 0.0) < self.seconds

    def charge(self, namespace: str, seconds: float) -> None:
        self.spent[namespace] = self.spent.get(namespace, 0.0) + seconds

    def defer(self, namespace: str) -> None:
        """Something in `namespace` waits for the next turn."""
        self.deferred.add(namespace)
