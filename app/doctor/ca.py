"""Checks of the two CA sets (the workloads' and the webhook's): present, usable, where a rotation stands,
and how long the signing CA has left."""

from __future__ import annotations

from datetime import datetime, timedelta

from tls_injector.doctor.model import Result, error, ok, warning
from tls_injector.doctor.snapshot import Snapshot
from tls_injector.names import CLIENT_CA_SECRET, FORCE_REPLACE_ANNOTATION
from tls_injector.pki import CA_LOOKAHEAD, CaRole, CaSet, CaState, CertKey, load_user_ca, rotation_due
from tls_injector.reconcile.ca.machine import CaUnusable, load_ca_set, other_role, shared_key_problem
from tls_injector.reconcile.core.objects import secret_data

CATEGORY = "certificate authorities"
# Each rotation step waits for the 5-minute settle and then for a pass, which comes within the 10-minute
# resync: any step older than an hour is a reconciler that stopped, or a bundle it cannot write.
STUCK_AFTER = timedelta(hours=1)
_STEP = {
    CaState.UNTRUSTED: "new CA {fp} is being added to every trust bundle",
    CaState.TRUSTED_UNUSED: "new CA {fp} is trusted everywhere and signs from the next pass",
    CaState.PHASE_OUT: "old CA {fp} is phasing out: its certificates are being re-issued",
    CaState.ZOMBIE: "old CA {fp} stays in the bundles until pods have reloaded, then goes",
}


def check_ca(snap: Snapshot, *, label: str, secret_name: str) -> list[Result]:
    """Two results: the set is usable (and where a rotation stands), and the signer is not expiring."""
    title = f"the {label} Secret holds a usable CA set"
    where = f"{snap.settings.namespace}/{secret_name}"
    if secret_name in snap.errors:
        return [error(CATEGORY, title, f"cannot read Secret {where}: {snap.errors[secret_name]}",
                      hint="doctor needs get on Secrets in the injector's namespace")]
    secret = snap.ca_secrets.get(secret_name)
    if secret is None:
        return [error(CATEGORY, title, f"Secret {where} does not exist",
                      hint="the reconciler creates it on its first pass (the webhook's, the bootstrap Job): check "
                           "that it runs (see the reconciler checks)")]
    try:
        cas = load_ca_set(secret)
    except CaUnusable as e:
        return [error(CATEGORY, title, f"Secret {where}: {e}",
                      hint="the reconciler stops rather than mint a CA that would distrust every certificate: "
                           "restore the Secret from a backup, or delete it to start a new CA (the old one stays "
                           "trusted while certificates move)")]
    return [_state(snap.now, title, where, cas), _expiry(snap.now, label, cas)]


def _state(now: datetime, title: str, where: str, cas: CaSet) -> Result:
    if not cas.records:
        return error(CATEGORY, title, f"Secret {where} holds no CA", hint="delete it: the reconciler starts a new CA")
    steps = [_STEP[r.state].format(fp=r.fingerprint[:12]) + f" (since {r.since:%Y-%m-%d %H:%M} UTC)"
             for r in cas.records if r.state in _STEP]
    stuck = [r for r in cas.records if r.state in _STEP and now - r.since > STUCK_AFTER]
    if stuck:
        hours = f"{STUCK_AFTER.total_seconds() / 3600:g} h"
        return warning(CATEGORY, title, f"a rotation has not moved for over {hours}", details=steps,
                       hint="each step needs a reconcile pass after every trust bundle carries the new CA: check "
                            "that the reconciler runs, and its log and events for bundles it cannot write")
    if cas.signer() is None:
        return warning(CATEGORY, title, "no CA may sign yet: new certificates wait", details=steps,
                       hint="a provided CA joins the bundles first; it signs once every bundle has carried it for "
                            "the settle time")
    summary = f"{len(cas.records)} CA{'s' if len(cas.records) > 1 else ''}"
    message = f"{summary}; rotating: " + "; ".join(steps) if steps else f"{summary}, no rotation"
    return ok(CATEGORY, title, message)


def _expiry(now: datetime, label: str, cas: CaSet) -> Result:
    title = f"the {label} is not expiring"
    signer = cas.signer()
    if signer is None:
        return ok(CATEGORY, title, "no signer yet (see above)")
    ends = signer.cert.not_valid_after_utc
    left = ends - now
    if left <= timedelta(0):
        return error(CATEGORY, title, f"the signing CA expired {ends:%Y-%m-%d %H:%M} UTC: nothing it signed verifies",
                     hint=f"annotate the CA Secret {FORCE_REPLACE_ANNOTATION}=now and let the reconciler rotate "
                          "(clients fail until their pods have the new bundle and certificates)")
    if rotation_due(cas, now=now, lookahead=CA_LOOKAHEAD):
        return warning(CATEGORY, title, f"the signing CA expires in {left.days} days and no successor is on its way",
                       hint=f"the reconciler starts a rotation {CA_LOOKAHEAD.days} days before expiry: check that "
                            "it runs")
    return ok(CATEGORY, title, f"signer expires {ends:%Y-%m-%d} (in {left.days} days)")


def checks(snap: Snapshot, ca_secrets: list[tuple[str, str]]) -> list[Result]:
    return [r for label, name in ca_secrets for r in check_ca(snap, label=label, secret_name=name)]



# Your own CAs (--ca-secret, --client-ca-secret): the reconciler reads them at every pass and stops the pass
# when one cannot be used; the doctor says which and why, from the same checks.
_FLAG: dict[CaRole, str] = {"serving": "--ca-secret", "client": "--client-ca-secret"}
_USER_HINT = ("the reconciler stops every pass until it is fixed: put a CA certificate (CA:TRUE, keyCertSign, valid "
              "now) and its own key in the Secret (kubectl create secret tls NAME --cert=ca.crt --key=ca.key), a key "
              "the other role's CA does not use")


def _user_ca(snap: Snapshot, name: str) -> CertKey | str:
    """Your CA from its Secret, or why it cannot be used (the reconciler's own check)."""
    where = f"{snap.settings.namespace}/{name}"
    if name in snap.errors:
        return f"cannot read Secret {where}: {snap.errors[name]}"
    secret = snap.ca_secrets.get(name)
    if secret is None:
        return f"Secret {where} does not exist"
    data = secret_data(secret)
    try:
        return load_user_ca(data.get("tls.crt", b""), data.get("tls.key", b""), now=snap.now)
    except ValueError as e:
        return f"Secret {where}: {e}"


def check_user_ca(snap: Snapshot, *, role: CaRole, name: str) -> Result:
    """Your own CA of `role` is usable: the Secret is there, holds a CA valid now with its own key, a key
    that neither your other CA nor the other role's CA set uses."""
    title = f"your own {role} CA ({_FLAG[role]}) is usable"
    ca = _user_ca(snap, name)
    if isinstance(ca, str):
        return error(CATEGORY, title, ca, hint=_USER_HINT)
    other = other_role(role)
    users = [c for n in _names(snap, other) if not isinstance(c := _user_ca(snap, n), str)]
    if problem := shared_key_problem(role, ca, other_user_ca=users[0] if users else None,
                                     other_set=snap.ca_secrets.get(_set_of(snap, other))):
        return error(CATEGORY, title, f"Secret {snap.settings.namespace}/{name}: {problem}", hint=_USER_HINT)
    return ok(CATEGORY, title, f"{ca.cert.subject.rfc4514_string()}, expires {ca.cert.not_valid_after_utc:%Y-%m-%d}")


def _names(snap: Snapshot, role: CaRole) -> list[str]:
    return [name for r, name in snap.settings.user_ca_secrets if r == role]


def _set_of(snap: Snapshot, role: CaRole) -> str:
    return CLIENT_CA_SECRET if role == "client" else snap.settings.ca_secret


def user_checks(snap: Snapshot) -> list[Result]:
    return [check_user_ca(snap, role=role, name=name) for role, name in snap.settings.user_ca_secrets]
