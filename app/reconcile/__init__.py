"""The reconciler: keeps every opted-in workload's certificate Secret and trust bundle, the CA sets behind
them, the pod-certificate signer's answers and the webhook's own certificate and caBundle current.

Six sub-packages, in layers (each may import only those below it; pyproject.toml's import contracts):
  loop/        what runs passes: the controller (lease, queue, resync), its cache, the wiring, bootstrap
  parts/       one pass: the Reconciler and the parts it composes (writer, announcer, CA keeper, ...)
  federation/  what a hub issues its members and how it reaches them     } independent
  native/      the pod-certificate signer's verdicts and answers         } of each other
  ca/          the CA state machine
  core/        what all share: discovery, each object's pure decide, the reads, ownership, Events, metrics
docs/reconcile.md tells the passes in order; docs/architecture.md names every module.
"""
