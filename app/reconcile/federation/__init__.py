"""Federation (docs/multicluster.md): what a hub issues its members and a member takes from it
(issuance.py, pure) and the hub reaching each member through a bounded client (hub.py).

The member side and the hub side of a pass live in parts/members.py; this package holds what they decide
with and never knows a pass. Imports only tls_injector.reconcile.core and .ca; independent of .native.
"""
