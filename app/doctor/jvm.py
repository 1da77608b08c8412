"""Checks of the keystores and public roots workloads asked for (issue 39 points 4 and 5): every keystore
asked for is in its Secret and, where its password is the generated one, opens with it and holds the
Secret's own key and chain; every namespace whose bundle should carry the public roots has them, and from
which certifi release (the reconciler's image and this doctor may pin different ones).

A password the workload keeps in a Secret of its own is never read by the doctor: the check then says
only that the files are there."""

from __future__ import annotations

from tls_injector import names
from tls_injector.doctor.model import Result, error, ok, warning
from tls_injector.doctor.snapshot import Snapshot
from tls_injector.pki import keystore_holds, public_roots
from tls_injector.reconcile.core.discover import Target
from tls_injector.reconcile.core.keystores import keystore_asks, password_name_problem
from tls_injector.reconcile.core.objects import secret_data

CATEGORY = "workloads"


def check_keystores(snap: Snapshot, wanted: list[Target]) -> Result:
    title = "every JVM keystore asked for is in its Secret and holds its certificate"
    issued = {(t.namespace, t.secret_name) for t in wanted}
    asks = {key: ask for key, ask in keystore_asks(snap.observed.workloads, snap.observed.pods,
                                                   enabled=snap.observed.enabled).items() if key in issued}
    problems = []
    for (namespace, secret), ask in sorted(asks.items()):
        stored = secret_data(snap.secret(namespace, secret))
        named = next((why for n in sorted(ask.password_secrets) if n and (why := password_name_problem(n))), "")
        problem = named or _problem(stored, generated=ask.password_secrets == frozenset({""}))
        if problem:
            problems.append(f"{namespace}/{secret} ({', '.join(ask.workloads)}): {problem}")
    if problems:
        return error(CATEGORY, title, f"{len(problems)} of {len(asks)} keystores missing or stale", details=problems,
                     hint="the reconciler writes them at its next pass; `reconcile --once` and the workload's "
                          "Events (KeystoreRefused) say why one is refused, e.g. a password Secret that is not an "
                          f"Opaque Secret of the namespace holding {names.KEYSTORE_PASSWORD_KEY}")
    return ok(CATEGORY, title, f"{len(asks)} keystores")


def _problem(stored: dict[str, bytes], *, generated: bool) -> str:
    if names.KEYSTORE_KEY not in stored or names.SECRET_TRUSTSTORE_KEY not in stored:
        return f"no {names.KEYSTORE_KEY} and {names.SECRET_TRUSTSTORE_KEY}"
    if not generated:
        return ""  # the password is the workload's own: not read here
    password = stored.get(names.KEYSTORE_PASSWORD_KEY, b"")
    if not keystore_holds(stored[names.KEYSTORE_KEY], password=password, cert_pem=stored.get(names.CERT_FILE, b""),
                          key_pem=stored.get(names.KEY_FILE, b"")):
        return f"{names.KEYSTORE_KEY} does not open with {names.KEYSTORE_PASSWORD_KEY} or holds another certificate"
    return ""


def check_public_roots(snap: Snapshot) -> Result:
    title = "every namespace asking for public roots has them in its trust bundle"
    mine = public_roots().source
    missing, sources = [], set()
    for namespace in sorted(snap.observed.public_roots):
        bundle = snap.config_map(namespace, names.TRUST_BUNDLE_CONFIGMAP)
        if bundle is None:
            continue  # no bundle at all: the workloads checks say so
        if names.PUBLIC_BUNDLE_KEY not in (bundle.get("data") or {}):
            missing.append(namespace)
            continue
        sources.add((bundle["metadata"].get("annotations") or {}).get(names.PUBLIC_ROOTS_SOURCE_ANNOTATION) or "?")
    if missing:
        return error(CATEGORY, title, f"{len(missing)} namespaces lack {names.PUBLIC_BUNDLE_KEY}", details=missing,
                     hint=f"pods there asking for {names.PUBLIC_ROOTS} read a file that is not there; the reconciler "
                          "adds it at its next pass: check that it runs (reconciler checks)")
    others = sorted(sources - {mine})
    if others:
        return warning(CATEGORY, title, f"the bundles' roots come from {', '.join(others)}; this doctor has {mine}",
                       hint="the reconciler's image pins its own certifi: upgrade the one that is behind "
                            "(docs/release.md, \"Public roots\")")
    return ok(CATEGORY, title, f"{len(snap.observed.public_roots)} namespaces, {mine} ({public_roots().count} roots)")
