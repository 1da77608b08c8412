"""Federation (docs/multicluster.md), pure but for hub.py: the hub's registrations of its members
(registry.py), what a hub issues its members (issuance.py), what a member takes from it (member.py), the
member's report on the hub's roots (report.py) and how the hub holds a root rotation on those reports
(holds.py); and the hub reaching each member through a bounded client (hub.py).

The member side and the hub side of a pass live in parts/members.py; this package holds what they decide
with and never knows a pass. Imports only tls_injector.reconcile.core and .ca; independent of .native.
"""
