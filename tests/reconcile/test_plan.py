"""The pure plan: what would be written for each stored state, without any server."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tls_injector.pki import CaSet, CaState, TrustFacts, add_ca, advance, fingerprint, issue_leaf, make_ca
from tls_injector.reconcile.core.bundles import decide_bundle
from tls_injector.reconcile.core.discover import Target, WorkloadRef
from tls_injector.reconcile.core.inputs import Observed, Signing
from tls_injector.reconcile.core.leaves import decide_leaf
from tls_injector.reconcile.core.objects import Refused, Write, secret_data
from tls_injector.reconcile.core.plan import plan

NOW = datetime(2026, 1, 1, tzinfo=UTC)
OWNED = {"app.kubernetes.io/managed-by": "tls-injector", "tls-injector.io/role": "leaf"}
DNS = ("web", "web.apps", "web.apps.svc", "web.apps.svc.cluster.local")
TARGET = Target("apps", "web-tls", DNS, (WorkloadRef("Deployment", "apps", "web"),))


def signing(now: datetime = NOW) -> Signing:
    return Signing.of(add_ca(CaSet(), make_ca(common_name="test CA", now=now), now=now), now=now)


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def stored_from(write: Write | Refused | None, rv: str = "7") -> dict[str, Any]:
    """What the API would hold after the write (plus a resourceVersion)."""
    assert isinstance(write, Write)
    assert write.body is not None
    body = dict(write.body)
    body["metadata"] = {**body["metadata"], "resourceVersion": rv}
    return body


@pytest.fixture(scope="module")
def sign() -> Signing:
    return signing()


def test_a_missing_secret_is_issued_with_chain_key_and_bundle(sign: Signing) -> None:
    write = decide_leaf(TARGET, None, sign)
    assert isinstance(write, Write)
    assert (write.action, write.reason) == ("create", "issued:missing")
    data = secret_data(write.body)
    assert set(data) == {"tls.crt", "tls.key", "ca.crt"}
    assert data["ca.crt"].decode() == sign.bundle_pem
    assert write.body is not None
    assert write.body["type"] == "kubernetes.io/tls"
    assert write.body["metadata"]["labels"] == OWNED


def test_a_converged_secret_plans_nothing(sign: Signing) -> None:
    stored = stored_from(decide_leaf(TARGET, None, sign))
    assert decide_leaf(TARGET, stored, sign) is None


def _mutated(sign: Signing, change: str) -> dict[str, Any]:
    stored = stored_from(decide_leaf(TARGET, None, sign))
    data = dict(stored["data"])
    if change == "sans":
        leaf = issue_leaf(issuer=sign.signer, dns_names=["other"], now=NOW)
        data["tls.crt"] = b64(leaf.chain_pem)
        data["tls.key"] = b64(leaf.key_pem)
    elif change == "key":
        data["tls.key"] = b64(issue_leaf(issuer=sign.signer, dns_names=list(DNS), now=NOW).key_pem)
    elif change == "garbage":
        data["tls.crt"] = "not base64!"
    elif change == "deleted-key":
        del data["tls.key"]
    elif change == "expiring":
        leaf = issue_leaf(issuer=sign.signer, dns_names=list(DNS), now=NOW, validity=timedelta(days=10))
        data["tls.crt"], data["tls.key"] = b64(leaf.chain_pem), b64(leaf.key_pem)
    elif change == "foreign-ca":
        other = make_ca(common_name="someone else", now=NOW)
        leaf = issue_leaf(issuer=other, dns_names=list(DNS), now=NOW)
        data["tls.crt"], data["tls.key"] = b64(leaf.chain_pem), b64(leaf.key_pem)
    stored["data"] = data
    return stored


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("sans", "renewed:sans-changed"),
        ("key", "renewed:key-mismatch"),
        ("garbage", "renewed:missing"),
        ("deleted-key", "renewed:missing"),
        ("expiring", "renewed:expiring"),
        ("foreign-ca", "renewed:untrusted-issuer"),
    ],
)
def test_a_tampered_or_stale_secret_is_reissued_for_the_right_reason(sign: Signing, change: str, reason: str) -> None:
    write = decide_leaf(TARGET, _mutated(sign, change), sign)
    assert isinstance(write, Write)
    assert (write.action, write.reason, write.resource_version) == ("update", reason, "7")
    assert decide_leaf(TARGET, stored_from(write), sign) is None  # and then it is converged


def test_a_leaf_of_a_phased_out_ca_is_reissued_by_the_new_signer(sign: Signing) -> None:
    stored = stored_from(decide_leaf(TARGET, None, sign))
    successor = make_ca(common_name="next", now=NOW)
    cas = add_ca(sign.cas, successor, now=NOW)
    everywhere = TrustFacts(frozenset(r.fingerprint for r in cas.records), frozenset())
    cas = advance(advance(cas, everywhere, now=NOW + timedelta(hours=1)), everywhere, now=NOW + timedelta(hours=2))
    assert cas.states() == {fingerprint(sign.signer.cert): CaState.PHASE_OUT,
                            fingerprint(successor.cert): CaState.TRUSTED_USED}
    write = decide_leaf(TARGET, stored, Signing.of(cas, now=NOW))
    assert isinstance(write, Write)
    assert write.reason == "renewed:ca-rotated"


def test_force_renew_reissues_once_and_drops_the_annotation(sign: Signing) -> None:
    stored = stored_from(decide_leaf(TARGET, None, sign))
    stored["metadata"]["annotations"] = {**stored["metadata"]["annotations"], "tls-injector.io/force-renew": "true"}
    write = decide_leaf(TARGET, stored, sign)
    assert isinstance(write, Write)
    assert write.reason == "renewed:force-renew"
    assert write.body is not None
    assert "tls-injector.io/force-renew" not in write.body["metadata"]["annotations"]
    assert secret_data(write.body)["tls.crt"] != secret_data(stored)["tls.crt"]


def test_a_stale_trust_bundle_is_refreshed_without_reissuing(sign: Signing) -> None:
    stored = stored_from(decide_leaf(TARGET, None, sign))
    stored["data"] = {**stored["data"], "ca.crt": b64("old bundle")}
    write = decide_leaf(TARGET, stored, sign)
    assert isinstance(write, Write)
    assert write.reason == "refreshed"
    assert secret_data(write.body)["tls.crt"] == secret_data(stored)["tls.crt"]
    assert secret_data(write.body)["ca.crt"].decode() == sign.bundle_pem


def test_other_writers_keys_labels_and_annotations_survive_an_update(sign: Signing) -> None:
    stored = _mutated(sign, "sans")
    stored["data"]["extra"] = b64("theirs")
    stored["metadata"]["labels"] = {**stored["metadata"]["labels"], "team": "x"}
    stored["metadata"]["annotations"] = {**stored["metadata"]["annotations"], "note": "keep"}
    write = decide_leaf(TARGET, stored, sign)
    assert isinstance(write, Write)
    assert write.body is not None
    assert write.body["data"]["extra"] == b64("theirs")
    assert write.body["metadata"]["labels"]["team"] == "x"
    assert write.body["metadata"]["annotations"]["note"] == "keep"


def test_a_secret_we_do_not_own_is_refused_not_written(sign: Signing) -> None:
    theirs = {"metadata": {"name": "web-tls", "namespace": "apps", "resourceVersion": "1"}, "data": {}}
    assert isinstance(decide_leaf(TARGET, theirs, sign), Refused)
    assert isinstance(decide_bundle("apps", {**theirs, "metadata": {**theirs["metadata"], "labels": {}}}, sign),
                      Refused)


def test_the_bundle_replaces_our_keys_and_keeps_everyone_elses(sign: Signing) -> None:
    created = decide_bundle("apps", None, sign)
    assert isinstance(created, Write)
    stored = stored_from(created)
    assert decide_bundle("apps", stored, sign) is None
    stored["data"] = {**stored["data"], "ca-0123456789abcdef.crt": "a CA that left", "mine.crt": "keep"}
    write = decide_bundle("apps", stored, sign)
    assert isinstance(write, Write)
    assert write.body is not None
    assert write.body["data"] == {**sign.bundle, "mine.crt": "keep"}


def test_the_plan_deletes_our_objects_that_nothing_needs_any_more(sign: Signing) -> None:
    leaf = stored_from(decide_leaf(Target("gone", "old-tls", ("old",), ()), None, sign))
    bundle = stored_from(decide_bundle("gone", None, sign))
    observed = Observed(leaves={("gone", "old-tls"): leaf}, bundles={"gone": bundle})
    items = list(plan([TARGET], observed, sign))
    outcomes = {(i.resource.kind, i.namespace, i.name): i.decide(observed.lookup(i)) for i in items}
    actions = {k: (o.action if isinstance(o, Write) else o) for k, o in outcomes.items()}
    assert actions == {
        ("Secret", "apps", "web-tls"): "create",
        ("ConfigMap", "apps", "tls-injector-trust-bundle"): "create",
        ("Secret", "gone", "old-tls"): "delete",
        ("ConfigMap", "gone", "tls-injector-trust-bundle"): "delete",
    }


def test_an_enabled_namespace_without_workloads_still_gets_the_bundle(sign: Signing) -> None:
    items = list(plan([], Observed(enabled={"empty"}), sign))
    assert [(i.resource.kind, i.namespace) for i in items] == [("ConfigMap", "empty")]
