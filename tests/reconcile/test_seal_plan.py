"""The reconciler's use of leaf seals: a sealed, unchanged leaf is kept without the full check; anything
else about it (a missing, copied or forged seal, changed bytes) gets the full check, as before seals."""

from __future__ import annotations

import base64
import copy
import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import generate_latest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import Clock, data, reconciler, small_cluster
from tests.reconcile.test_plan import NOW, TARGET, stored_from
from tls_injector.kube import SECRETS, KubeApi
from tls_injector.pki import (
    CaSet,
    CaState,
    SealedLeaf,
    TrustFacts,
    add_ca,
    advance,
    issue_leaf,
    load_certificates,
    make_ca,
    open_seal,
    seal,
    seal_key,
)
from tls_injector.reconcile.core import leaves
from tls_injector.reconcile.core.discover import Target, WorkloadRef
from tls_injector.reconcile.core.inputs import Signing
from tls_injector.reconcile.core.leaves import decide_leaf, leaf_expiry
from tls_injector.reconcile.core.metrics import ReconcileMetrics
from tls_injector.reconcile.core.objects import Write, secret_data

SEAL = "tls-injector.io/seal"


@pytest.fixture(scope="module")
def sign() -> Signing:
    return Signing.of(add_ca(CaSet(), make_ca(common_name="test CA", now=NOW), now=NOW), now=NOW)


def issued(sign: Signing) -> dict[str, Any]:
    return stored_from(decide_leaf(TARGET, None, sign))


def sealed_leaf(target: Target, stored: dict[str, Any]) -> SealedLeaf:
    data = secret_data(stored)
    return SealedLeaf(target.namespace, target.secret_name, data["tls.crt"], data["tls.key"], target.dns_names)


def test_an_issued_leaf_is_sealed_and_then_kept_as_it_is(sign: Signing) -> None:
    stored = issued(sign)
    assert sign.seal_key is not None
    assert open_seal(sign.seal_key, sealed_leaf(TARGET, stored), stored["metadata"]["annotations"][SEAL]) is not None
    assert decide_leaf(TARGET, stored, sign) is None
    later = Signing.of(sign.cas, now=NOW + timedelta(days=54))  # 36 days left: still outside the 35-day window
    assert decide_leaf(TARGET, stored, later) is None


def test_a_sealed_leaf_is_renewed_when_the_sealed_window_says_so(sign: Signing) -> None:
    write = decide_leaf(TARGET, issued(sign), Signing.of(sign.cas, now=NOW + timedelta(days=56)))
    assert isinstance(write, Write)
    assert write.reason == "renewed:expiring"


def test_a_leaf_without_a_seal_is_checked_in_full_then_sealed_once(sign: Signing) -> None:
    stored = issued(sign)
    expected = stored["metadata"]["annotations"].pop(SEAL)
    write = decide_leaf(TARGET, stored, sign)
    assert isinstance(write, Write)
    assert write.reason == "refreshed"
    assert write.body is not None
    assert write.body["metadata"]["annotations"][SEAL] == expected
    assert write.body["data"] == stored["data"]  # the certificate is kept
    assert decide_leaf(TARGET, stored_from(write), sign) is None


def test_a_seal_copied_from_another_secret_does_not_open_and_the_leaf_gets_its_own(sign: Signing) -> None:
    other = Target("apps", "api-tls", TARGET.dns_names, (WorkloadRef("Deployment", "apps", "api"),))
    theirs = stored_from(decide_leaf(other, None, sign))
    mine = issued(sign)
    forged = copy.deepcopy(mine)
    forged["data"] = dict(theirs["data"])  # their certificate (same names), their key and their seal
    forged["metadata"]["annotations"][SEAL] = theirs["metadata"]["annotations"][SEAL]
    write = decide_leaf(TARGET, forged, sign)
    assert isinstance(write, Write)
    assert write.reason == "refreshed"  # it does verify in full: same CA, same names
    assert write.body is not None
    assert write.body["metadata"]["annotations"][SEAL] != theirs["metadata"]["annotations"][SEAL]


def test_a_foreign_certificate_with_a_seal_of_its_own_making_is_replaced(sign: Signing) -> None:
    stranger = make_ca(common_name="test CA", now=NOW)
    leaf = issue_leaf(issuer=stranger, dns_names=list(TARGET.dns_names), now=NOW)
    stored = issued(sign)
    stored["data"] = {**stored["data"], "tls.crt": base64.b64encode(leaf.chain_pem).decode(),
                      "tls.key": base64.b64encode(leaf.key_pem).decode()}
    window = {"not_before": leaf.cert.not_valid_before_utc, "not_after": leaf.cert.not_valid_after_utc}
    stored["metadata"]["annotations"][SEAL] = seal(seal_key(stranger), sealed_leaf(TARGET, stored), **window)
    write = decide_leaf(TARGET, stored, sign)
    assert isinstance(write, Write)
    assert write.reason == "renewed:untrusted-issuer"


def test_a_changed_key_under_an_intact_seal_is_caught(sign: Signing) -> None:
    stored = issued(sign)
    other_key = issue_leaf(issuer=sign.signer, dns_names=["x"], now=NOW).key_pem  # type: ignore[arg-type]
    stored["data"] = {**stored["data"], "tls.key": base64.b64encode(other_key).decode()}
    write = decide_leaf(TARGET, stored, sign)
    assert isinstance(write, Write)
    assert write.reason == "renewed:key-mismatch"


def test_a_new_signer_opens_no_old_seal_and_every_leaf_moves_to_it(sign: Signing) -> None:
    stored = issued(sign)
    rotated = make_ca(common_name="next", now=NOW)
    assert seal_key(rotated) != sign.seal_key
    cas = add_ca(sign.cas, rotated, now=NOW)
    everywhere = TrustFacts(frozenset(r.fingerprint for r in cas.records), frozenset())
    cas = advance(advance(cas, everywhere, now=NOW + timedelta(hours=1)), everywhere, now=NOW + timedelta(hours=2))
    assert CaState.TRUSTED_USED in cas.states().values()
    write = decide_leaf(TARGET, stored, Signing.of(cas, now=NOW + timedelta(hours=2)))
    assert isinstance(write, Write)
    assert write.reason == "renewed:ca-rotated"


def test_the_expiry_metric_gives_each_leafs_own_end_sealed_or_not(kubeapi: Emulator) -> None:
    secrets = small_cluster(kubeapi, namespaces=2, per_namespace=2)
    clock = Clock()
    rec = reconciler(kubeapi, clock, metrics=ReconcileMetrics(), per_object_metrics=True)
    assert rec.run_pass().converged
    api = KubeApi(kubeapi.api_client())
    unsealed = api.get(SECRETS, "app0-tls", namespace="ns0")
    del unsealed["metadata"]["annotations"][SEAL]
    api.replace(SECRETS, unsealed)
    clock.advance(timedelta(days=3))
    report = rec.run_pass()
    assert report.reasons == {"refreshed": 1}  # sealed again, nothing re-issued
    for ns, name in secrets:
        leaf = load_certificates(data(kubeapi.get("secrets", name, ns))["tls.crt"])[0]
        sample = rec.metrics.registry.get_sample_value("tls_injector_certificate_expiry_timestamp_seconds",
                                                       {"namespace": ns, "secret": name})
        assert sample == leaf.not_valid_after_utc.timestamp()


def test_by_default_metrics_name_no_namespace_or_secret_only_the_earliest_expiry_and_the_count(
        kubeapi: Emulator) -> None:
    secrets = small_cluster(kubeapi, namespaces=2, per_namespace=2)
    rec = reconciler(kubeapi, Clock(), metrics=ReconcileMetrics())
    assert rec.run_pass().converged
    text = generate_latest(rec.metrics.registry).decode()
    for ns, name in secrets:
        assert f'"{ns}"' not in text
        assert name not in text
    assert "tls_injector_certificate_expiry_timestamp_seconds{" not in text
    ends = [load_certificates(data(kubeapi.get("secrets", name, ns))["tls.crt"])[0].not_valid_after_utc.timestamp()
            for ns, name in secrets]
    registry = rec.metrics.registry
    assert registry.get_sample_value("tls_injector_certificates_earliest_expiry_timestamp_seconds") == min(ends)
    assert registry.get_sample_value("tls_injector_certificates") == len(secrets)


def test_the_expiry_of_a_leaf_just_issued_is_read_from_its_seal_without_opening_it_again(
        sign: Signing, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = dataclasses.replace(sign, opened={})
    stored = stored_from(decide_leaf(TARGET, None, fresh))
    cert = load_certificates(secret_data(stored)["tls.crt"])[0]
    monkeypatch.setattr(leaves, "open_seal", lambda *_: pytest.fail("a seal made in this pass was opened again"))
    assert leaf_expiry(TARGET, stored, fresh) == cert.not_valid_after_utc
    # What it remembered is what opening it gives: a pass that did not make it opens it, to the same end.
    monkeypatch.undo()
    assert leaf_expiry(TARGET, stored, dataclasses.replace(sign, opened={})) == cert.not_valid_after_utc


def test_a_pass_holds_at_most_max_opened_seals_whatever_the_number_of_leaves(sign: Signing) -> None:
    fresh = dataclasses.replace(sign, opened={})
    for n in range(leaves.MAX_OPENED + 50):
        target = dataclasses.replace(TARGET, secret_name=f"web-{n}-tls")
        stored = stored_from(decide_leaf(target, None, fresh))
        assert leaf_expiry(target, stored, fresh) is not None
        assert len(fresh.opened) <= leaves.MAX_OPENED
