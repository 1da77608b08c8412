"""The hub's account in a member, as the member install ships it, on the real kube-apiserver: the hub
(an in-process reconciler, its own cluster an emulator) visits a real member with a token of
`tls-injector-hub` and issues, then re-issues, both intermediates there, writing each Secret without ever
reading one; the member's RBAC says that account may not get the intermediate Secret
(`kubectl auth can-i`), and its tls-injector.hub-reach refuses the hub's overwrite of a Secret the hub did
not write. Its own control plane (a second one, ~10 s), with the base and the member component applied.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import kubernetes.client
import pytest
import yaml

from tests.cluster.controlplane import ControlPlane
from tests.cluster.controlplane import api_client as cluster_client
from tests.cluster.install import NS, Installation, wait_until
from tests.kubeapi import Emulator, running_emulator
from tests.reconcile.cluster import OWN_NS, Clock, namespace
from tests.reconcile.test_hub_members import register
from tests.shipping.support import render_with_components
from tls_injector.kube import KubeApi
from tls_injector.pki import load_certificates
from tls_injector.reconcile.parts.reconciler import Reconciler, ReconcileSettings

HUB = f"system:serviceaccount:{NS}:tls-injector-hub"
SECRETS = ("tls-injector-intermediate-ca", "tls-injector-client-intermediate-ca")
RECORDS = tuple(f"{s}-public" for s in SECRETS)


class Member:
    def __init__(self, plane: ControlPlane, install: Installation, folder: Path) -> None:
        self.plane, self.install = plane, install
        self.core = install.core
        plane.wait_for_service_account(NS, "tls-injector-hub")
        token = self.core.create_namespaced_service_account_token(
            "tls-injector-hub", NS, {"spec": {"expirationSeconds": 3600}}).status.token
        ca = Path(plane.pki.ca.cert).read_bytes()
        self.kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "member",
                           "clusters": [{"name": "member", "cluster": {
                               "server": plane.url, "certificate-authority-data": base64.b64encode(ca).decode()}}],
                           "users": [{"name": "hub", "user": {"token": token}}],
                           "contexts": [{"name": "member", "context": {"cluster": "member", "user": "hub"}}]}

    def secret(self, name: str) -> dict[str, bytes]:
        found = self.core.read_namespaced_secret(name, NS)
        return {k: base64.b64decode(v) for k, v in (found.data or {}).items()}

    def can_i(self, verb: str, what: str) -> str:
        done = self.plane.kubectl("auth", "can-i", verb, what, "-n", NS, f"--as={HUB}", check=False)
        return done.stdout.strip()


@pytest.fixture(scope="module")
def member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Member]:
    plane = ControlPlane(tmp_path_factory.mktemp("hub-member-plane")).start()
    try:
        admin = cluster_client(plane.admin_kubeconfig)
        install = Installation(plane, admin, Path(tmp_path_factory.mktemp("hub-member-install")))
        install.apply_manifests()
        rendered = render_with_components("manifests/base", "manifests/components/member")
        plane.kubectl("apply", "--server-side", "--field-manager=tls-injector-install", "-f", "-",
                      stdin=yaml.safe_dump_all(rendered))
        # Admission policies take effect a moment after they are created: wait for both that judge here.
        wait_until("tls-injector.hub-reach in force", lambda: "hub-reach" in plane.kubectl(
            "create", "configmap", "probe", "-n", NS, "--dry-run=server", f"--as={HUB}", check=False).stderr)
        wait_until("tls-injector.reserved-objects in force", lambda: _reserved(plane))
        yield Member(plane, install, Path(tmp_path_factory.mktemp("hub-member")))
    finally:
        plane.stop()


def _reserved(plane: ControlPlane) -> bool:
    """A labelled ConfigMap created by the admin (a dry run) is refused by tls-injector.reserved-objects."""
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "probe", "namespace": NS, "labels": {"app.kubernetes.io/managed-by": "tls-injector"}}}
    done = plane.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(probe), check=False)
    return "reserved-objects" in done.stderr


def hub_pass(hub: Emulator) -> dict[str, str]:
    """One pass of a new hub reconciler (as a new `reconcile --once --hub` process), on the wall clock (the
    member's API server is real: its Date is compared with the hub's clock)."""
    the_hub = Reconciler(KubeApi(hub.api_client()), ReconcileSettings(namespace=OWN_NS, hub=True),
                         clock=Clock(datetime.now(UTC)))
    return dict(the_hub.run_pass().federation)


def test_the_shipped_member_rbac_gives_the_hub_no_read_of_any_secret(member: Member) -> None:
    for verb in ("get", "list", "watch", "patch"):
        assert member.can_i(verb, f"secrets/{SECRETS[0]}") == "no", verb
        assert member.can_i(verb, "secrets") == "no", verb
    assert member.can_i("update", f"secrets/{SECRETS[0]}") == "yes"
    assert member.can_i("get", f"configmaps/{RECORDS[0]}") == "yes"
    assert member.can_i("get", "configmaps/tls-injector-trust-bundle") == "no"


def test_a_hub_with_the_shipped_token_issues_and_reissues_without_reading_a_secret(member: Member) -> None:
    with running_emulator(seed=3) as hub:
        namespace(hub, OWN_NS)
        register(hub, "east", json.dumps(member.kubeconfig).encode())
        # Before: the hub's first call, GET of the intermediate Secret, was refused (403) by this Role.
        assert hub_pass(hub) == {}
        first = {name: member.secret(name) for name in SECRETS}
        assert all(load_certificates(s["tls.crt"]) and s["tls.key"] for s in first.values())
        records = {name: member.core.read_namespaced_config_map(name, NS) for name in RECORDS}
        assert all("tls.key" not in r.data for r in records.values())
        assert hub_pass(hub) == {}  # converged: nothing rewritten
        assert {name: member.secret(name) for name in SECRETS} == first

        # The member's own policy keeps even its admin from editing the record (tls-injector.reserved-objects).
        record = records[RECORDS[0]]
        record.data["tls.crt"] = "forged"
        with pytest.raises(kubernetes.client.ApiException) as refused:
            member.core.replace_namespaced_config_map(RECORDS[0], NS, record)
        assert refused.value.status == 403
        # Its admin may delete it, though: a hub with no memory of issuing one re-issues at once; its create
        # is answered AlreadyExists and it overwrites the Secret by a PUT without resourceVersion.
        member.core.delete_namespaced_config_map(RECORDS[0], NS)
        assert hub_pass(hub) == {}
        renewed = member.secret(SECRETS[0])
        assert renewed["tls.key"] != first[SECRETS[0]]["tls.key"]
        assert member.secret(SECRETS[1]) == first[SECRETS[1]]


def test_a_secret_the_hub_did_not_write_is_refused_by_the_member_and_left_untouched(member: Member) -> None:
    """The hub cannot read it to tell: it writes over it, and the member's tls-injector.hub-reach refuses."""
    for name in RECORDS[1:]:
        member.core.delete_namespaced_config_map(name, NS)
    member.core.delete_namespaced_secret(SECRETS[1], NS)
    planted = member.core.create_namespaced_secret(NS, {"metadata": {"name": SECRETS[1]}, "type": "Opaque",
                                                        "data": {"x": base64.b64encode(b"someone's").decode()}})
    with running_emulator(seed=4) as hub:
        namespace(hub, OWN_NS)
        register(hub, "east", json.dumps(member.kubeconfig).encode())
        problems = hub_pass(hub)
    assert "refused to let the hub overwrite" in problems["east"], problems
    assert "tls-injector.io/force-replace" in problems["east"]
    after = member.core.read_namespaced_secret(SECRETS[1], NS)
    assert after.metadata.resource_version == planted.metadata.resource_version
