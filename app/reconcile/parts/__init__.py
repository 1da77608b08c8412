"""One pass: the Reconciler (reconciler.py) and the parts it composes, each an object with its own state,
handed what it uses, none reaching into another's fields.

The shared ones: state.py (settings and the pass report every part is handed), announcer.py (Events and
conditions), writes.py (the Writer), reports.py (the findings), targets.py (the Secrets workloads need),
status.py (what the last pass saw). The ones that take turns: trust.py (the CA keeper), members.py (the
member side and the hub side), signer_pass.py (the pod-certificate signer's turn) and webhook_pass.py (the
webhook's own certificate and caBundles, decided by webhook_plan.py, checked against served.py).

No part imports the loop (tls_injector.reconcile.loop) nor the Reconciler that composes it.
"""
