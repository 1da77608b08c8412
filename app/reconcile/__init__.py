"""The reconciler: keeps every opted-in workload's certificate Secret and trust bundle, the CA sets behind
them, the pod-certificate signer's answers and the webhook's own certificate and caBundle current.

A pass reads the cluster (read.py), decides purely (discover.py, plan.py, ca.py, webhook_plan.py) and
writes with preconditions (reconciler.py); controller.py runs passes on watches, the lease and a resync.
docs/reconcile.md tells the passes in order.
"""
