"""The user's own client CA (`--client-ca-secret`, docs/mtls.md), as `--ca-secret` is for the serving CA:
checked the same way, never sharing a key with a serving CA, rotated in through the same trust state
machine (the client bundle carries a new CA before any client certificate it signs is handed out), picked
up by the loop's watch at once, and, in a hub, the root its members' client intermediates chain to."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, START, Clock, ca_fingerprints, data, deployment, namespace, reconciler
from tests.reconcile.test_chain_emulator import NS
from tests.reconcile.test_hub_members import (
    FEDERATION_MATRIX,
    INTERMEDIATES,
    Federation,
    cli,
    federation,
    finished,
    handshakes,
)
from tests.reconcile.test_leader import _wait_for as wait_for
from tests.reconcile.test_leader import running_loop
from tests.reconcile.test_mtls_chain import CLIENT, OPTED_IN, mounted, run, webhook
from tests.reconcile.test_reconcile_safety import assert_no_ca_key_outside_its_secret
from tests.reconcile.test_user_ca import issuers, leaves, put_user_ca
from tests.support.cli import exit_of
from tests.support.workloads import Shape
from tls_injector.pki import (
    bundle_certificates,
    extended_key_usages,
    fingerprint,
    issue_leaf,
    issued_by,
    load_cert_key,
    load_certificates,
    make_ca,
    verify_client,
)
from tls_injector.reconcile.core.inputs import CLIENT_PREFIX

__all__ = ["federation", "webhook"]  # fixtures, shared with test_hub_members and test_mtls_chain
PASS_EVERY = timedelta(minutes=1)
MINE = "my-client-ca"


def callers(emu: Emulator, *, namespaces: int = 2, per_namespace: int = 2) -> None:
    """Workloads asking for a client certificate (and so getting a serving one too)."""
    namespace(emu, OWN_NS)
    for n in range(namespaces):
        namespace(emu, f"ns{n}")
        for w in range(per_namespace):
            deployment(emu, f"app{w}", f"ns{n}", annotations={CLIENT: "true"})


def client_leaves(emu: Emulator) -> list[dict[str, Any]]:
    found = [s for s in leaves(emu) if s["metadata"]["name"].endswith("-client-tls")]
    for secret in found:
        assert extended_key_usages(load_certificates(data(secret)["tls.crt"])[0]) == ["clientAuth"]
    return found


def client_bundles(emu: Emulator) -> list[list[Any]]:
    """Every `client-ca-bundle.crt` in use: what a server requiring client certificates verifies with."""
    return [bundle_certificates(cm.get("data") or {}, prefix=CLIENT_PREFIX) for cm in emu.objects("configmaps")
            if cm["metadata"]["name"] == "tls-injector-trust-bundle"]


def client_ca_fingerprints(emu: Emulator) -> set[str]:
    return {k.split(".")[0] for k in data(emu.get("secrets", "tls-injector-client-ca", OWN_NS)) if k.endswith(".crt")}


def assert_every_client_leaf_verifies_against_every_client_bundle(emu: Emulator, now: datetime) -> None:
    bundles = client_bundles(emu)
    assert bundles
    for secret in client_leaves(emu):
        chain = load_certificates(data(secret)["tls.crt"])
        for trusted in bundles:
            verify_client(chain[0], chain[1:], trusted=trusted, now=now)


def test_a_replaced_user_client_ca_is_in_every_client_bundle_before_it_signs_and_every_client_leaf_moves(
    kubeapi: Emulator,
) -> None:
    callers(kubeapi)
    old, new = make_ca(common_name="client CA 1", now=START), make_ca(common_name="client CA 2", now=START)
    put_user_ca(kubeapi, old, MINE)
    clock = Clock()
    rec = reconciler(kubeapi, clock, user_client_ca_secret=MINE)
    assert rec.run_pass().converged
    assert set(issuers(kubeapi, old, new, secrets=client_leaves).values()) == {fingerprint(old.cert)}
    assert len(issuers(kubeapi, old, secrets=client_leaves)) == 4
    serving = ca_fingerprints(kubeapi)
    assert fingerprint(old.cert) not in serving  # the serving CA is the generated one, apart

    clock.advance(timedelta(days=30))
    put_user_ca(kubeapi, new, MINE)  # the old key is gone from the cluster from this moment on
    deployment(kubeapi, "late", "ns0", annotations={CLIENT: "true"})  # needs a client certificate meanwhile
    replaced_at, waited, moved_at, first_signed = clock.now, [], None, None
    for _ in range(30):
        report = rec.run_pass()
        assert not report.aborted, report
        assert_every_client_leaf_verifies_against_every_client_bundle(kubeapi, clock.now)
        waited.append(dict(report.waiting))
        chained_to = issuers(kubeapi, old, new, secrets=client_leaves)
        if fingerprint(new.cert) in chained_to.values():
            first_signed = first_signed or clock.now
            # Handed out only once every client bundle carries the new CA.
            assert all(fingerprint(new.cert) in {fingerprint(c) for c in b} for b in client_bundles(kubeapi))
        if moved_at is None and set(chained_to.values()) == {fingerprint(new.cert)} and len(chained_to) == 5:
            moved_at = clock.now
        if moved_at and fingerprint(old.cert) not in client_ca_fingerprints(kubeapi) and report.converged:
            break
        clock.advance(PASS_EVERY)

    assert moved_at is not None, waited
    assert first_signed is not None
    assert first_signed - replaced_at >= timedelta(minutes=5)  # the settle, at least
    assert moved_at - replaced_at <= timedelta(minutes=30)
    assert client_ca_fingerprints(kubeapi) == {fingerprint(new.cert)}
    assert {fingerprint(c) for b in client_bundles(kubeapi) for c in b} == {fingerprint(new.cert)}
    assert ca_fingerprints(kubeapi) == serving, "the serving CA set is not touched by the client one's rotation"
    # The new workload's client certificate waited, saying why, while no client CA could sign; its serving
    # certificate did not wait.
    assert "not yet in every trust bundle" in waited[0]["ns0/late-client-tls"]
    assert "ns0/late-tls" not in waited[0]
    assert not waited[-1]
    assert_no_ca_key_outside_its_secret(kubeapi, {old.key_pem, new.key_pem}, home=(MINE,))
    assert rec.run_pass().write_count == 0


def test_the_loop_starts_rotating_a_replaced_user_client_ca_in_at_once_not_at_the_resync(kubeapi: Emulator) -> None:
    callers(kubeapi, namespaces=1, per_namespace=1)
    old, new = make_ca(common_name="client CA 1", now=START), make_ca(common_name="client CA 2", now=START)
    put_user_ca(kubeapi, old, MINE)
    with running_loop(kubeapi, watch_timeout_seconds=30, user_client_ca_secret=MINE):  # resync an hour away
        wait_for(lambda: client_ca_fingerprints(kubeapi) == {fingerprint(old.cert)})
        wait_for(lambda: kubeapi.open_watches("secrets") >= 3)  # ours by label (leaves, the others), the user's by name
        put_user_ca(kubeapi, new, MINE)
        wait_for(lambda: client_ca_fingerprints(kubeapi) == {fingerprint(old.cert), fingerprint(new.cert)})


def _argv(url: str, *extra: str) -> list[str]:
    return ["reconcile", "--once", "--server", url, "--namespace", OWN_NS, "--webhook-configurations", "",
            "--log-level", "error", "--pod-certificates", "off", *extra]


def _bad_inputs(emu: Emulator, case: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Sets up `case`; returns what the refusal says after `user-provided client CA Secret <ns>/<name>`."""
    now = datetime.now(UTC)
    ca = make_ca(common_name="client CA", now=now)
    if case == "not a CA":
        leaf = issue_leaf(issuer=ca, dns_names=["not-a-ca.example"], now=now)
        put_user_ca(emu, leaf, MINE)
        return ": the certificate is not a CA (basic constraints CA:TRUE and keyCertSign are required)"
    if case == "key mismatch":
        put_user_ca(emu, ca, MINE, key_pem=make_ca(common_name="other", now=now).key_pem)
        return ": the private key does not belong to the CA certificate"
    if case == "the user's serving CA's key":
        put_user_ca(emu, ca, "my-ca")
        put_user_ca(emu, ca, MINE)
        return ": its key is also the serving CA's: a client CA must have a key of its own"
    if case == "the generated serving CA's key":
        assert exit_of(_argv(emu.url), capsys)[0] == 0  # a running cluster, its serving CA made by tls-injector
        stored = data(emu.get("secrets", "tls-injector-ca", OWN_NS))
        (fp,) = {k.split(".")[0] for k in stored if k.endswith(".crt")}
        put_user_ca(emu, load_cert_key(stored[f"{fp}.crt"], stored[f"{fp}.key"]), MINE)
        return ": its key is also the serving CA's"
    assert case == "missing"
    return " does not exist"


@pytest.mark.parametrize("case", ["not a CA", "key mismatch", "the user's serving CA's key",
                                  "the generated serving CA's key", "missing"])
def test_an_unusable_user_client_ca_stops_the_pass_with_its_reason_and_writes_no_client_chain(
    kubeapi: Emulator, case: str, capsys: pytest.CaptureFixture[str],
) -> None:
    callers(kubeapi, namespaces=1, per_namespace=1)
    words = _bad_inputs(kubeapi, case, capsys)
    before = {(s["metadata"]["namespace"], s["metadata"]["name"]): s["metadata"]["resourceVersion"]
              for s in kubeapi.objects("secrets")}
    extra = ("--ca-secret", "my-ca") if case == "the user's serving CA's key" else ()
    code, out, err = exit_of(_argv(kubeapi.url, "--client-ca-secret", MINE, *extra), capsys)
    assert code == 1, (out, err)
    last = out.splitlines()[-1]
    assert f"stopped: CaUnusable: user-provided client CA Secret {OWN_NS}/{MINE}{words}" in last, last
    # Refused before anything was stepped or written: no CA set, no leaf, no bundle changed.
    after = {(s["metadata"]["namespace"], s["metadata"]["name"]): s["metadata"]["resourceVersion"]
             for s in kubeapi.objects("secrets")}
    assert after == before
    assert not kubeapi.objects("configmaps", "ns0") or case == "the generated serving CA's key"
    events = [e for e in kubeapi.objects("events", OWN_NS) if e["reason"] == "CaUnusable"]
    if case != "missing":
        [event] = events
        assert event["involvedObject"]["name"] == MINE
        assert words.lstrip(": ") in event["message"]


def test_one_secret_named_as_both_roots_is_a_one_line_usage_error(
    kubeapi: Emulator, capsys: pytest.CaptureFixture[str],
) -> None:
    callers(kubeapi, namespaces=1, per_namespace=1)
    put_user_ca(kubeapi, make_ca(common_name="one CA", now=datetime.now(UTC)), "my-ca")
    code, out, err = exit_of(_argv(kubeapi.url, "--ca-secret", "my-ca", "--client-ca-secret", "my-ca"), capsys)
    assert (code, out) == (2, "")
    assert err == ("tls-injector reconcile: --ca-secret and --client-ca-secret both name the Secret my-ca: the "
                   "client CA must be a CA of its own, with its own key\n")
    assert kubeapi.get("secrets", "tls-injector-ca", OWN_NS) is None  # nothing done
    # `serve` runs the same reconciler: it refuses the same way before it starts anything.
    code, out, err = exit_of(["serve", "--server", kubeapi.url, "--namespace", OWN_NS, "--ca-secret", "my-ca",
                              "--client-ca-secret", "my-ca"], capsys)
    assert (code, out) == (2, "")
    assert err.startswith("tls-injector serve: --ca-secret and --client-ca-secret both name the Secret my-ca: ")
    assert err.count("\n") == 1


def test_a_hub_with_the_users_client_root_chains_every_members_client_intermediate_to_it_and_pods_log_in_across(
    federation: Federation, webhook: httpx.Client, tmp_path: Path,
) -> None:
    hub, now = federation.hub, datetime.now(UTC)
    root = make_ca(common_name="example org client root", now=now)
    put_user_ca(hub, root, "my-client-root")
    pods = {(member, name): run(emu, webhook, Shape("Deployment", name, OPTED_IN, {CLIENT: "true"}),
                                service_account=f"{name}-sa")
            for member, emu in federation.members.items() for name in ("api", "caller")}

    code, out, err = finished(cli(hub.url, "--hub", "--client-ca-secret", "my-client-root"))[0]
    assert code == 0, (out, err)
    assert federation.roots("tls-injector-client-ca") == [root.cert]
    (serving_root,) = federation.roots("tls-injector-ca")  # generated, apart
    assert fingerprint(serving_root) != fingerprint(root.cert)
    for name, emu in federation.members.items():
        stored = data(emu.get("secrets", INTERMEDIATES[1], OWN_NS))
        (inter,) = load_certificates(stored["tls.crt"])
        inter.verify_directly_issued_by(root.cert)
        assert load_certificates(stored["ca.crt"]) == [root.cert], name
    passes = federation.pass_members()
    assert all(code == 0 for code, _, _ in passes.values()), passes
    for name, emu in federation.members.items():
        bundle = (emu.get("configmaps", "tls-injector-trust-bundle", NS) or {})["data"]
        assert load_certificates(bundle["client-ca-bundle.crt"].encode()) == [root.cert], name
        assert load_certificates(bundle["ca-bundle.crt"].encode()) == [serving_root], name
        client = load_certificates(data(emu.get("secrets", "caller-client-tls", NS))["tls.crt"])
        verify_client(client[0], client[1:], trusted=[root.cert], now=datetime.now(UTC))
        # The user's root key is in no member, and in the hub only in the user's own Secret.
        assert_no_ca_key_outside_its_secret(emu, {root.key_pem}, home=())
    assert_no_ca_key_outside_its_secret(hub, {root.key_pem}, home=("my-client-root",))

    files = {key: mounted(federation.members[key[0]], pod, tmp_path / "-".join(key)) for key, pod in pods.items()}
    matrix = handshakes(files, tmp_path)
    assert {case: o.accepted for case, o in matrix.items()} == FEDERATION_MATRIX, matrix
    assert matrix["west caller -> east api"].version == "TLSv1.3"
    assert matrix["west caller -> east api"].server == f"accepted ['spiffe://west.mesh/ns/{NS}/sa/caller-sa']"


def test_a_member_given_its_own_client_ca_signs_client_certificates_with_it_and_serving_ones_with_the_hub(
    federation: Federation,
) -> None:
    """The user's CA of a role wins over the hub's intermediate of that role, for that role only; the log
    says, at every pass, that the hub's intermediate is not used (docs/multicluster.md)."""
    east = federation.members["east"]
    own = make_ca(common_name="east's own client CA", now=datetime.now(UTC))
    put_user_ca(east, own, MINE)
    deployment(east, "caller", NS, annotations={CLIENT: "true"})
    assert federation.pass_hub()[0] == 0
    ((code, out, err),) = finished(cli(east.url, "--client-ca-secret", MINE))
    assert code == 0, (out, err)
    serving_inter = load_certificates(data(east.get("secrets", INTERMEDIATES[0], OWN_NS))["tls.crt"])[0]
    (serving_root,) = federation.roots("tls-injector-ca")
    serving = load_certificates(data(east.get("secrets", "caller-tls", NS))["tls.crt"])
    assert serving[1:] == [serving_inter]
    client = load_certificates(data(east.get("secrets", "caller-client-tls", NS))["tls.crt"])
    assert issued_by(client[0], own.cert)
    bundle = (east.get("configmaps", "tls-injector-trust-bundle", NS) or {})["data"]
    assert load_certificates(bundle["client-ca-bundle.crt"].encode()) == [own.cert]
    assert load_certificates(bundle["ca-bundle.crt"].encode()) == [serving_root]
    logged = [json.loads(line) for line in err.splitlines()]
    ignored = [entry for entry in logged if entry["msg"].startswith("the hub's intermediate is not used")]
    assert [(e["role"], e["secret"], e["user_secret"]) for e in ignored] == [
        ("client", INTERMEDIATES[1], MINE)], err
