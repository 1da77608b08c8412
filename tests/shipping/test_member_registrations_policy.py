"""Member registrations (Secrets labelled tls-injector.io/member in the injector's namespace) are reserved
by `tls-injector.member-registrations` (manifests/base/member-registrations-policy.yaml and the chart's
copy): written by a person, not a service account; named tls-injector-member-<member>, so a member
cannot be registered twice; of type Opaque.

Before the policy, any account that may create Secrets there (the bootstrap Job's, the reconciler's)
registered a rogue member, which a hub then issued a root-signed intermediate, or a second Secret for a
real member's name, after which the hub served neither. Evaluated as the apiserver evaluates policies
(tests/shipping/test_reconciler_policy.py's `refusals`); the registration member-secret.sh prints is
judged as the person applying it.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import yaml

from tests.kubeapi import Emulator
from tests.shipping.support import ROOT, Obj, of_kind, render
from tests.shipping.test_chart import template, values
from tests.shipping.test_federation_install import NAMESPACE, _run_script, _token_secret
from tests.shipping.test_reconciler_policy import (
    ADMIN,
    BOOTSTRAP,
    RECONCILER,
    TENANT,
    changed,
    refusals,
    request,
    thing,
)
from tls_injector.names import MEMBER_LABEL
from tls_injector.reconcile.core.ownership import owner_labels

pytestmark = pytest.mark.timeout(300)

PERSON = "alice@example.org"  # an operator, as an OIDC or certificate user
GITOPS = "system:serviceaccount:argocd:argocd-application-controller"


@functools.cache
def _policies(rendering: str) -> tuple[Obj, ...]:
    if rendering == "kustomize base":
        objects = render(ROOT / "manifests/base")
    else:
        objects = template(*values(federation={"role": rendering.removeprefix("chart ")}))
    return tuple(of_kind(objects, "ValidatingAdmissionPolicy"))


RENDERINGS = ["kustomize base", "chart standalone", "chart hub"]


def registration(member: str, name: str | None = None, *, secret_type: str = "Opaque",
                 namespace: str = NAMESPACE) -> Obj:
    return thing("Secret", name or f"tls-injector-member-{member}", namespace, {MEMBER_LABEL: member},
                 secret_type=secret_type)


EAST = registration("east")
UNLABELLED = thing("Secret", "tls-injector-member-east", NAMESPACE, {})
REFUSED = [
    ("the reconciler's account registers a member", request("CREATE", RECONCILER, new=EAST)),
    ("the reconciler's account registers one labelled as ours",
     request("CREATE", RECONCILER, new=thing("Secret", "tls-injector-member-rogue", NAMESPACE,
                                             {MEMBER_LABEL: "rogue", **owner_labels("leaf")}))),
    ("the bootstrap Job's account registers a member", request("CREATE", BOOTSTRAP, new=EAST)),
    ("a service account granted Secrets in the namespace registers a member", request("CREATE", TENANT, new=EAST)),
    ("a GitOps controller's account registers a member (exempt it by name to allow it)",
     request("CREATE", GITOPS, new=EAST)),
    ("a service account points a real member's registration at its own server",
     request("UPDATE", TENANT, new=changed(EAST, data={"kubeconfig": "ZXZpbA=="}), old=EAST)),
    ("a service account labels a Secret of the namespace as a registration",
     request("UPDATE", BOOTSTRAP, new=EAST, old=UNLABELLED)),
    ("a service account strips the label off a registration", request("UPDATE", TENANT, new=UNLABELLED, old=EAST)),
    ("a person registers a member a second time under another name",
     request("CREATE", PERSON, new=registration("east", "east-again"))),
    ("a person registers a member as a service-account token Secret",
     request("CREATE", PERSON, new=registration("east", secret_type="kubernetes.io/service-account-token"))),
    ("a person relabels a registration to another member's name",
     request("UPDATE", PERSON, new=registration("west", "tls-injector-member-east"), old=EAST)),
]
ALLOWED = [
    ("a person registers a member", request("CREATE", PERSON, new=EAST)),
    ("a cluster admin registers a member", request("CREATE", ADMIN, new=registration("west"))),
    ("a person updates a member's kubeconfig",
     request("UPDATE", PERSON, new=changed(EAST, data={"kubeconfig": "bmV3"}), old=EAST)),
    ("a person unregisters a member by removing the label", request("UPDATE", PERSON, new=UNLABELLED, old=EAST)),
    ("a service account deletes a registration (not restricted: namespace deletion)",
     request("DELETE", TENANT, old=EAST)),
    ("the bootstrap Job writes its serving Secret", request("CREATE", BOOTSTRAP, new=thing(
        "Secret", "tls-injector-webhook-tls", NAMESPACE, owner_labels("webhook"), secret_type="kubernetes.io/tls"))),
    ("a tenant's Secret with the label in its own namespace (no hub reads it)",
     request("CREATE", TENANT, new=registration("east", namespace="team-a"))),
]


@pytest.mark.parametrize("rendering", RENDERINGS)
@pytest.mark.parametrize(("case", "review"), REFUSED, ids=[c for c, _ in REFUSED])
def test_every_rendering_refuses(case: str, review: Obj, rendering: str) -> None:
    found = refusals(review, list(_policies(rendering)))
    assert found, f"{rendering}: {case}: allowed"
    assert any("member" in text for text in found), found


@pytest.mark.parametrize("rendering", RENDERINGS)
@pytest.mark.parametrize(("case", "review"), ALLOWED, ids=[c for c, _ in ALLOWED])
def test_every_rendering_allows(case: str, review: Obj, rendering: str) -> None:
    assert refusals(review, list(_policies(rendering))) == [], f"{rendering}: {case}"


def test_a_refusal_names_the_writer_and_says_who_registers_members() -> None:
    [text] = refusals(request("CREATE", TENANT, new=EAST), list(_policies("kustomize base")))
    assert TENANT in text
    assert "person" in text


def test_the_registration_the_script_prints_passes_the_policy_as_the_person_who_applies_it(
        kubeapi: Emulator, tmp_path: Path) -> None:
    kubeapi.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    kubeapi.add(_token_secret({"token": b"eyJhbGciOi.hub.token", "ca.crt": b"x", "namespace": NAMESPACE.encode()}))
    result = _run_script(kubeapi, tmp_path, "member-a", "https://member-a.example:6443")
    assert result.returncode == 0, result.stderr
    printed = yaml.safe_load(result.stdout)
    # As admission sees it: the apiserver defaults the type before any policy runs.
    printed.setdefault("type", "Opaque")
    for rendering in RENDERINGS:
        assert refusals(request("CREATE", PERSON, new=printed), list(_policies(rendering))) == [], rendering
        assert refusals(request("CREATE", RECONCILER, new=printed), list(_policies(rendering))), rendering
