"""`tls-injector doctor`: is the installation healthy? One line per check, with a hint for each failure.

The checks are pure functions of a `Snapshot` (read.py is the only module that reads); the order of
`run_checks` is the order of the report.
"""

from __future__ import annotations

from tls_injector.doctor import ca, clients, federation, jvm, reconciler, webhook, workloads
from tls_injector.doctor.model import Result, error, exit_code, render_json, render_text
from tls_injector.doctor.read import ApiUnreachable, read
from tls_injector.doctor.snapshot import DoctorSettings, Snapshot

__all__ = ["ApiUnreachable", "DoctorSettings", "Result", "Snapshot", "api_unreachable", "exit_code", "read",
           "render_json", "render_text", "run_checks"]


def run_checks(snap: Snapshot) -> list[Result]:
    cas = [("workload CA", snap.settings.ca_secret), ("webhook CA", snap.settings.webhook.ca.secret_name)]
    found = workloads.checks(snap)
    mtls = clients.checks(snap, workloads.targets(snap)) if "cluster" not in snap.errors else []
    # Issue 39 points 4 and 5: the keystores and public roots asked for.
    extras = [jvm.check_keystores(snap, workloads.targets(snap)), jvm.check_public_roots(snap)] \
        if "cluster" not in snap.errors else []
    return [*webhook.checks(snap), *ca.checks(snap, cas), *ca.user_checks(snap), *found, *mtls, *extras,
            *reconciler.checks(snap), *federation.checks(snap)]


def api_unreachable(why: str) -> list[Result]:
    return [error("kubernetes-api", "the Kubernetes API answers", why,
                  hint="check the kubeconfig or --server, your credentials, and that the API server is up")]
