"""The native path: Kubernetes PodCertificateRequests answered by our signer (docs/reconcile.md), the pure
verdict on each request (podcerts.py) and the signer's reads and answers (signer.py).

The signer's turn in a pass lives in parts/signer_pass.py. Imports only tls_injector.reconcile.core;
independent of .ca and .federation.
"""
