"""Rotation across clusters (docs/multicluster.md, issue 28 parts 2-3): a running standalone cluster turning
member, a renewed intermediate, and a root rotation over a hub and two members. The reconcilers run in
process on one clock (the API servers' clocks moved with it), after a first pass of the real CLI where it
matters, so the settle times pass in a few steps. After every pass, every leaf in use verifies against
every bundle in use: a rotation never leaves a pod untrusted by a peer, in its cluster or another."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
from cryptography import x509

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, data, reconciler
from tests.reconcile.test_hub_members import (
    CLIENT,
    INTERMEDIATES,
    NS,
    OPTED_IN,
    Federation,
    cli,
    federation,
    finished,
    run,
    webhook,
)
from tests.support.workloads import Shape
from tls_injector.kube import SECRETS, KubeApi
from tls_injector.pki import UntrustedChain, fingerprint, load_certificates, verify_client, verify_server
from tls_injector.reconcile.parts.reconciler import PassReport, Reconciler, ReconcileSettings

__all__ = ["federation", "webhook"]  # fixtures


def leaves_of(emu: Emulator) -> dict[str, list[x509.Certificate]]:
    return {s["metadata"]["name"]: load_certificates(data(s)["tls.crt"]) for s in emu.objects("secrets", NS)}


def bundles_of(emu: Emulator) -> tuple[list[list[x509.Certificate]], list[x509.Certificate]]:
    """Every serving bundle in use (the namespace's, each leaf Secret's ca.crt) and the client bundle."""
    serving = [load_certificates(data(s)["ca.crt"]) for s in emu.objects("secrets", NS)]
    bundle = emu.get("configmaps", "tls-injector-trust-bundle", NS)["data"]
    serving.append(load_certificates(bundle["ca-bundle.crt"].encode()))
    return serving, load_certificates(bundle["client-ca-bundle.crt"].encode())


def untrusted(fed: Federation, now: datetime) -> list[str]:
    """Every (leaf of one member, bundle of any member) pair where the bundle does not verify the leaf."""
    bad = []
    for source, src in fed.members.items():
        for target, dst in fed.members.items():
            serving, client = bundles_of(dst)
            for name, chain in leaves_of(src).items():
                for i, trusted in enumerate([client] if "-client-" in name else serving):
                    try:
                        if "-client-" in name:
                            verify_client(chain[0], chain[1:], trusted=trusted, now=now)
                        else:
                            verify_server(chain[0], chain[1:], trusted=trusted,
                                          dns_name=f"{name.removesuffix('-tls')}.{NS}.svc", now=now)
                    except UntrustedChain as e:
                        bad.append(f"{source} {name} against {target} bundle {i}: {e}")
    return bad


def root_states(hub: Emulator) -> dict[str, str]:
    """The hub's serving roots by 16 hex digits of their fingerprint, with their trust state."""
    found = {}
    for key in data(hub.get("secrets", "tls-injector-ca", OWN_NS)):
        fp, _, suffix = key.partition(".")
        if suffix not in ("crt", "key"):
            found[fp[:16]] = suffix
    return found


def test_a_new_root_reaches_every_member_bundle_before_it_signs_and_a_member_down_holds_it(
    federation: Federation, webhook: httpx.Client
) -> None:
    hub, east, west = federation.hub, federation.members["east"], federation.members["west"]
    for emu in (east, west):
        for name in ("api", "caller"):
            run(emu, webhook, Shape("Deployment", name, OPTED_IN, {CLIENT: "true"}), service_account=f"{name}-sa")
    clock = Clock(datetime.now(UTC))

    def later(minutes: int) -> None:
        clock.now += timedelta(minutes=minutes)
        federation.shift[0] += timedelta(minutes=minutes)

    the_hub = Reconciler(KubeApi(hub.api_client()), ReconcileSettings(namespace=OWN_NS, hub=True), clock=clock)
    members = {name: reconciler(emu, clock, trust_domain=f"{name}.mesh")
               for name, emu in (("east", east), ("west", west))}

    def round_of(*names: str) -> PassReport:
        report = the_hub.run_pass()
        assert not report.aborted, report
        for name in names:
            assert not members[name].run_pass().aborted
        assert untrusted(federation, clock.now) == [], clock.now
        return report

    round_of("east", "west")
    round_of("east", "west")
    [old] = root_states(hub)

    # A replacement of the serving root, asked for on the hub's CA Secret.
    ca = KubeApi(hub.api_client()).get(SECRETS, "tls-injector-ca", namespace=OWN_NS)
    ca["metadata"].setdefault("annotations", {})["tls-injector.io/force-replace"] = "now"
    KubeApi(hub.api_client()).replace(SECRETS, ca)
    later(1)
    round_of("east", "west")
    [new] = set(root_states(hub)) - {old}
    assert root_states(hub) == {old: "trusted-used", new: "untrusted"}
    for emu in (east, west):  # published to both members at once, before it signs anything
        # In the hub's record beside the Secret: a roots change rewrites no key (docs/multicluster.md).
        record = emu.get("configmaps", INTERMEDIATES[0] + "-public", OWN_NS) or {}
        roots = load_certificates(record["data"]["ca.crt"].encode())
        assert sorted(fingerprint(r)[:16] for r in roots) == sorted([old, new])

    # West goes down: however long, the new root stays untrusted (it signs nothing) and the reason says why.
    west.outage(refuse=True)
    for _ in range(4):
        later(6)
        report = round_of("east")
        assert root_states(hub)[new] == "untrusted"
    assert "unreachable" in report.federation["west"]
    assert f"the new serving root {new} waits for it" in report.federation["west"], report.federation

    # West is back: the rotation goes on, one safe step after another, until the new root signs.
    west.end_outage()
    for _ in range(10):
        later(6)
        round_of("east", "west")
        if root_states(hub)[new] == "trusted-used":
            break
    assert root_states(hub) == {old: "phase-out", new: "trusted-used"}

    # Now east goes down: its leaves still chain to the old root, so the old root stays in the hub's set,
    # published to west, whose pods keep trusting east's however long east is away.
    east.outage(refuse=True)
    for _ in range(4):
        later(6)
        round_of("west")
        assert root_states(hub)[old] == "phase-out"
    east.end_outage()
    for _ in range(30):
        later(6)
        report = round_of("east", "west")
        inter = {n: load_certificates(data(e.get("secrets", INTERMEDIATES[0], OWN_NS))["tls.crt"])[0]
                 for n, e in federation.members.items()}
        done = root_states(hub) == {new: "trusted-used"} and all(
            all(fingerprint(c)[:16] == new for b in bundles_of(e)[0] for c in b) and
            all(chain[1:] == [inter[n]] for name, chain in leaves_of(e).items() if "-client-" not in name)
            for n, e in federation.members.items())
        if done:
            break
    else:
        raise AssertionError(f"the rotation did not finish: {root_states(hub)}, {report}")
    assert report.converged, report


def serving_and_client_chains(emu: Emulator) -> tuple[dict[str, list[x509.Certificate]], list[list[x509.Certificate]]]:
    """The member's leaves in use by workload (serving `<w>`, client `<w>-client`) and every bundle a pod
    of it may trust peers with: the namespace's bundle and each leaf Secret's ca.crt (serving role)."""
    leaves, bundles = {}, []
    for secret in emu.objects("secrets", NS):
        name, stored = secret["metadata"]["name"], data(secret)
        leaves[name.removesuffix("-tls")] = load_certificates(stored["tls.crt"])
        bundles.append(load_certificates(stored["ca.crt"]))
    bundle = emu.get("configmaps", "tls-injector-trust-bundle", NS)["data"]
    bundles.append(load_certificates(bundle["ca-bundle.crt"].encode()))
    return leaves, bundles


def untrusted_pairs(emu: Emulator, now: datetime) -> list[str]:
    """Every (leaf in use, bundle in use) pair of the member where the bundle does not verify the leaf."""
    bad = []
    leaves, bundles = serving_and_client_chains(emu)
    client_bundle = load_certificates(
        emu.get("configmaps", "tls-injector-trust-bundle", NS)["data"]["client-ca-bundle.crt"].encode())
    for name, chain in leaves.items():
        trusted_sets = [client_bundle] if name.endswith("-client") else bundles
        for i, trusted in enumerate(trusted_sets):
            try:
                if name.endswith("-client"):
                    verify_client(chain[0], chain[1:], trusted=trusted, now=now)
                else:
                    verify_server(chain[0], chain[1:], trusted=trusted, dns_name=f"{name}.{NS}.svc", now=now)
            except UntrustedChain as e:
                bad.append(f"{name} against bundle {i}: {e}")
    return bad


def test_a_running_standalone_cluster_turns_member_without_a_moment_of_untrust(
    federation: Federation, webhook: httpx.Client
) -> None:
    """West runs alone first (its own CAs); then the hub registers it. West keeps signing with its own
    CAs while the roots join every bundle, and moves to the intermediates only once every bundle in use
    has carried the roots for the settle time; its old CAs leave the bundles only once no leaf uses them.
    After every pass, every leaf in use verifies against every bundle in use. The first passes are the CLI;
    the later ones run in process with a clock moved past each settle time (5 minutes)."""
    west = federation.members["west"]
    for name in ("api", "caller"):
        run(west, webhook, Shape("Deployment", name, OPTED_IN, {CLIENT: "true"}), service_account=f"{name}-sa")
    [(code, out, err)] = finished(cli(west.url, "--trust-domain", "west.mesh"))
    assert code == 0, (out, err)
    local = load_certificates(data(west.get("secrets", "api-tls", NS))["tls.crt"])[1:]
    assert local == [], "standalone: the leaf is signed by the local CA directly"
    assert untrusted_pairs(west, datetime.now(UTC)) == []
    before = {name: chain[0] for name, chain in serving_and_client_chains(west)[0].items()}

    assert federation.pass_hub()[0] == 0
    [(code, out, err)] = finished(cli(west.url, "--trust-domain", "west.mesh"))
    assert code == 0, (out, err)
    serving_root, client_root = federation.roots("tls-injector-ca")[0], federation.roots("tls-injector-client-ca")[0]
    leaves, bundles = serving_and_client_chains(west)
    assert {name: chain[0] for name, chain in leaves.items()} == before, "no leaf moves before the roots settle"
    assert all(serving_root in b and len(b) == 2 for b in bundles), "the roots join the bundles, the local CA stays"
    assert untrusted_pairs(west, datetime.now(UTC)) == []

    clock = Clock(datetime.now(UTC))
    member = reconciler(west, clock, trust_domain="west.mesh")
    inter = {role: load_certificates(data(west.get("secrets", s, OWN_NS))["tls.crt"])[0]
             for role, s in zip(("serving", "client"), INTERMEDIATES, strict=True)}
    for _ in range(8):
        clock.now += timedelta(minutes=6)
        report = member.run_pass()
        assert not report.aborted, report
        assert untrusted_pairs(west, clock.now) == [], clock.now
        leaves, bundles = serving_and_client_chains(west)
        if all(len(b) == 1 for b in bundles) and all(chain[1:] == [inter["client" if name.endswith("-client")
                                                                         else "serving"]]
                                                      for name, chain in leaves.items()):
            break
    else:
        raise AssertionError(f"west did not finish moving to the intermediates: {member.status}")
    assert all(b == [serving_root] for b in bundles)
    client_bundle = west.get("configmaps", "tls-injector-trust-bundle", NS)["data"]["client-ca-bundle.crt"]
    assert load_certificates(client_bundle.encode()) == [client_root]
    assert member.run_pass().write_count == 0


def test_a_renewed_intermediate_changes_no_bundle_and_signs_at_once(federation: Federation,
                                                                   webhook: httpx.Client) -> None:
    """Part 3: 125 days on, the hub renews east's intermediates (each ends 60 days later); east moves every
    leaf to the new ones in the same pass, with no certificate waiting, and no bundle changes by a byte."""
    hub, east = federation.hub, federation.members["east"]
    for name in ("api", "caller"):
        run(east, webhook, Shape("Deployment", name, OPTED_IN, {CLIENT: "true"}), service_account=f"{name}-sa")
    assert federation.pass_hub()[0] == 0
    [(code, out, err)] = finished(cli(east.url, "--trust-domain", "east.mesh"))
    assert code == 0, (out, err)
    bundle = east.get("configmaps", "tls-injector-trust-bundle", NS)["data"]
    old = {s: load_certificates(data(east.get("secrets", s, OWN_NS))["tls.crt"])[0] for s in INTERMEDIATES}

    federation.shift[0] = timedelta(days=125)
    clock = Clock(datetime.now(UTC) + federation.shift[0])
    report = Reconciler(KubeApi(hub.api_client()), ReconcileSettings(namespace=OWN_NS, hub=True),
                        clock=clock).run_pass()
    assert sum(n for r, n in report.reasons.items() if r.startswith("member:") and ":renewed:" in r) == 4, report
    new = {s: load_certificates(data(east.get("secrets", s, OWN_NS))["tls.crt"])[0] for s in INTERMEDIATES}
    assert all(new[s] != old[s] and new[s].issuer == old[s].issuer for s in INTERMEDIATES)

    report = reconciler(east, clock, trust_domain="east.mesh").run_pass()
    assert report.converged, report
    assert not report.waiting, report
    assert east.get("configmaps", "tls-injector-trust-bundle", NS)["data"] == bundle, "no bundle changed"
    for name in ("api", "caller"):
        assert load_certificates(data(east.get("secrets", f"{name}-tls", NS))["tls.crt"])[1:] == [new[INTERMEDIATES[0]]]
        assert load_certificates(data(east.get("secrets", f"{name}-client-tls", NS))["tls.crt"])[1:] == [
            new[INTERMEDIATES[1]]]
    assert untrusted_pairs(east, clock.now) == []


def test_a_standalone_cluster_turned_hub_rotates_to_a_root_that_signs_intermediates(federation: Federation) -> None:
    """The hub ran standalone first: its CA signs leaves only (path length 0). With --hub it rotates to a
    root that may sign intermediates; its members, which have none yet and so trust none of its roots, do
    not hold that rotation, and get their intermediates once the new root signs."""
    hub, east = federation.hub, federation.members["east"]
    clock = Clock(datetime.now(UTC))
    standalone = Reconciler(KubeApi(hub.api_client()), ReconcileSettings(namespace=OWN_NS), clock=clock)
    assert not standalone.run_pass().aborted
    [first] = root_states(hub)
    the_hub = Reconciler(KubeApi(hub.api_client()), ReconcileSettings(namespace=OWN_NS, hub=True), clock=clock)
    report = the_hub.run_pass()
    assert "the root has path length 0" in report.federation["east"], report.federation
    for _ in range(6):
        clock.now += timedelta(minutes=6)
        federation.shift[0] += timedelta(minutes=6)
        report = the_hub.run_pass()
        if east.get("secrets", INTERMEDIATES[0], OWN_NS) is not None:
            break
    [new] = set(root_states(hub)) - {first}
    assert root_states(hub)[new] == "trusted-used", root_states(hub)
    issued = load_certificates(data(east.get("secrets", INTERMEDIATES[0], OWN_NS))["tls.crt"])[0]
    [root] = [r for r in federation.roots("tls-injector-ca") if fingerprint(r)[:16] == new]
    issued.verify_directly_issued_by(root)
    assert report.federation == {}, report.federation
