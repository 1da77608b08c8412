"""What a pass says about workloads' certificate profiles (app/injection/profile.py): the refused values, in
the log, the pass report and an Event on each workload (once while it lasts, through the reconciler's
`announce`), and the metrics of profiles. Kept apart from reconciler.py, which only threads the values."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable

from tls_injector.names import KEY_ALGORITHMS
from tls_injector.reconcile.core.discover import Target
from tls_injector.reconcile.core.metrics import ReconcileMetrics

log = logging.getLogger(__name__)


def report_profiles(targets: Iterable[Target], refused: list[str], metrics: ReconcileMetrics,
                    announce: Callable[[Target, str], None]) -> None:
    """Each target whose profile was refused in part or whole is reported (its certificate is issued with the
    default in place of each refused value: never held back), and the profiles counted by key algorithm."""
    targets = list(targets)
    count = 0
    for target in targets:
        message = target.profile_refusal()
        if not message:
            continue
        count += 1
        refused.append(message)
        log.warning("certificate profile refused", extra={"namespace": target.namespace,
                                                          "object": target.secret_name, "reason": message})
        announce(target, message)
    metrics.profiles_refused.set(count)
    algorithms = Counter(t.profile.key_algorithm for t in targets)
    for algorithm in KEY_ALGORITHMS:  # every one, 0 included, so a dashboard sees an algorithm go out of use
        metrics.key_algorithms.labels(algorithm).set(algorithms[algorithm])
