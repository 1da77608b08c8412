"""What every part of the reconciler shares, and none of it a pass's state: who opted in (discover.py), each
object's pure `decide` (plan.py lists the objects of a pass; leaves.py decides a leaf Secret, bundles.py a
bundle ConfigMap, keystores.py the JVM keystores; objects.py is what a decision gives, inputs.py what it
reads), what a pass lists (read.py), how our objects are
marked (ownership.py), the Events outbox (events.py), the metrics and the profile report (metrics.py,
profile.py), and what one namespace's turn may cost (budget.py, keypool.py).

Imports nothing else of tls_injector.reconcile: every other sub-package builds on it.
"""
