"""The CA state machine: each CA set's Secret stepped through its rotation (machine.py), pure.

What a pass signs with, and the user CAs, are kept by the CA keeper (parts/trust.py), which drives this
machine; federation builds its intermediates on it. Imports only tls_injector.reconcile.core.
"""
