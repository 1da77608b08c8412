"""Checks of the two CA sets (the workloads' and the webhook's): present, usable, where a rotation stands,
and how long the signing CA has left."""

from __future__ import annotations

from datetime import datetime, timedelta

from app.doctor.model import Result, error, ok, warning
from app.doctor.snapshot import Snapshot
from app.names import FORCE_REPLACE_ANNOTATION
from app.pki import CA_LOOKAHEAD, CaSet, CaState, rotation_due
from app.reconcile.ca import CaUnusable, load_ca_set

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

