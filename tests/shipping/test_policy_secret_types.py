"""The reach policies restrict the Secret's type as well as its name and labels, in every shipped rendering.

With the reconciler's token (it reads every Secret) a labelled Secret of type
`kubernetes.io/service-account-token` is a token of any account of that namespace once the token controller
fills it in, and a `bootstrap.kubernetes.io/token` one lets a node join; with the hub's token in a member,
an intermediate annotated force-replace could be deleted and recreated as a token for the member's
reconciler. Each policy now admits only the types its writer really writes (the reconciler: kubernetes.io/tls
and Opaque; the bootstrap Job: its two Secrets, the same two types; the hub: kubernetes.io/tls), on CREATE
and on UPDATE. The policies are evaluated by tests/shipping/test_reconciler_policy.py's `refusals`, as the
apiserver does (match rules, matchConditions, variables in order, each validation; an error refuses), on
the objects each rendering ships: the kustomize base, the base with the member component, and the chart
with default values and with federation.role=member. Every case is an AdmissionRequest-shaped dict, so
the same list can be sent to a real kube-apiserver with these policies installed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest

from tests.shipping.support import ROOT, Obj, of_kind, render, render_with_components
from tests.shipping.test_chart import template, values
from tests.shipping.test_reconciler_policy import BOOTSTRAP, RECONCILER, changed, refusals, request, thing
from tls_injector.names import CLIENT_INTERMEDIATE_CA_SECRET, FORCE_REPLACE_ANNOTATION, INTERMEDIATE_CA_SECRET
from tls_injector.reconcile.core.ownership import owner_labels

# The first rendering through the chart may fetch helm (tests/shipping/helm.py).
pytestmark = pytest.mark.timeout(300)

NS = "tls-injector"
HUB = f"system:serviceaccount:{NS}:tls-injector-hub"
TLS, OPAQUE = "kubernetes.io/tls", "Opaque"
# The two token types a stolen token must not write (each a credential the API server honours).
TOKEN_TYPES = ("kubernetes.io/service-account-token", "bootstrap.kubernetes.io/token")
TOKEN_FOR_RECONCILER = {"kubernetes.io/service-account.name": "tls-injector-reconciler"}


@functools.cache
def _policies(rendering: str) -> tuple[Obj, ...]:
    render_of: dict[str, Callable[[], list[Obj]]] = {
        "kustomize base": lambda: render(ROOT / "manifests/base"),
        "kustomize member": lambda: render_with_components("manifests/base", "manifests/components/member"),
        "chart default": template,
        "chart member": lambda: template(*values(federation={"role": "member"})),
    }
    return tuple(of_kind(render_of[rendering](), "ValidatingAdmissionPolicy"))


RENDERINGS = ["kustomize base", "kustomize member", "chart default", "chart member"]
MEMBER_RENDERINGS = ["kustomize member", "chart member"]


def judged(review: Obj, rendering: str) -> list[str]:
    return refusals(review, list(_policies(rendering)))


def token(name: str, namespace: str, secret_type: str, labels: dict[str, str] | None) -> Obj:
    annotations = TOKEN_FOR_RECONCILER if secret_type == TOKEN_TYPES[0] else {}
    return thing("Secret", name, namespace, labels, secret_type=secret_type, annotations=annotations)


LEAF_LABELS = owner_labels("leaf")
RECONCILER_REFUSED = [
    *[(f"the reconciler creates a labelled {t} Secret",
       request("CREATE", RECONCILER, new=token("web-tls", "team-a", t, LEAF_LABELS))) for t in TOKEN_TYPES],
    *[(f"the reconciler creates a labelled {t} Secret in its own namespace",
       request("CREATE", RECONCILER, new=token("x", NS, t, owner_labels("ca")))) for t in TOKEN_TYPES],
    *[(f"the reconciler updates a labelled {t} Secret (keeping its type, which is immutable)",
       request("UPDATE", RECONCILER, new=changed(token("web-tls", "team-a", t, LEAF_LABELS), data={"token": "eA=="}),
               old=token("web-tls", "team-a", t, LEAF_LABELS))) for t in TOKEN_TYPES],
    *[(f"the bootstrap Job creates its CA Secret's name as an unlabelled {t} Secret",
       request("CREATE", BOOTSTRAP, new=token("tls-injector-webhook-ca", NS, t, None))) for t in TOKEN_TYPES],
    *[(f"the bootstrap Job creates its serving Secret's name as a labelled {t} Secret",
       request("CREATE", BOOTSTRAP, new=token("tls-injector-webhook-tls", NS, t, owner_labels("webhook"))))
      for t in TOKEN_TYPES],
    ("the bootstrap Job creates another Secret", request("CREATE", BOOTSTRAP, new=thing("Secret", "x", NS))),
]
RECONCILER_ALLOWED = [
    ("the reconciler creates a certificate Secret",
     request("CREATE", RECONCILER, new=thing("Secret", "web-tls", labels=LEAF_LABELS, secret_type=TLS))),
    ("the reconciler creates its CA set", request("CREATE", RECONCILER, new=thing(
        "Secret", "tls-injector-ca", NS, owner_labels("ca"), secret_type=OPAQUE))),
    ("the reconciler renews an Opaque certificate Secret of ours", request(
        "UPDATE", RECONCILER, new=thing("Secret", "web-tls", labels=LEAF_LABELS),
        old=thing("Secret", "web-tls", labels=LEAF_LABELS))),
    ("the reconciler creates a bundle", request("CREATE", RECONCILER, new=thing(
        "ConfigMap", "tls-injector-trust-bundle", labels=owner_labels("bundle")))),
    ("the reconciler deletes a certificate Secret", request(
        "DELETE", RECONCILER, old=thing("Secret", "web-tls", labels=LEAF_LABELS, secret_type=TLS))),
    ("the bootstrap Job creates the webhook CA", request("CREATE", BOOTSTRAP, new=thing(
        "Secret", "tls-injector-webhook-ca", NS, owner_labels("ca"), secret_type=OPAQUE))),
    ("the bootstrap Job creates the webhook's serving Secret", request("CREATE", BOOTSTRAP, new=thing(
        "Secret", "tls-injector-webhook-tls", NS, owner_labels("webhook"), secret_type=TLS))),
]
INTERMEDIATE = thing("Secret", INTERMEDIATE_CA_SECRET, NS, owner_labels("intermediate"), secret_type=TLS)
ASKED = changed(INTERMEDIATE, annotations={FORCE_REPLACE_ANNOTATION: "1"})
HUB_REFUSED = [
    *[(f"the hub recreates an intermediate as a {t} Secret for the member's reconciler",
       request("CREATE", HUB, new=token(INTERMEDIATE_CA_SECRET, NS, t, owner_labels("intermediate"))))
      for t in TOKEN_TYPES],
    ("the hub creates an Opaque intermediate", request("CREATE", HUB, new=thing(
        "Secret", CLIENT_INTERMEDIATE_CA_SECRET, NS, owner_labels("intermediate"), secret_type=OPAQUE))),
    *[(f"the hub updates a {t} Secret annotated force-replace",
       request("UPDATE", HUB, new=token(INTERMEDIATE_CA_SECRET, NS, t, owner_labels("intermediate")),
               old=changed(token(INTERMEDIATE_CA_SECRET, NS, t, None), annotations={FORCE_REPLACE_ANNOTATION: "1"})))
      for t in TOKEN_TYPES],
]
HUB_ALLOWED = [
    ("the hub creates an intermediate", request("CREATE", HUB, new=INTERMEDIATE)),
    ("the hub renews an intermediate", request("UPDATE", HUB, new=changed(INTERMEDIATE, data={"tls.crt": "eA=="}),
                                               old=INTERMEDIATE)),
    ("the hub deletes an intermediate annotated force-replace", request("DELETE", HUB, old=ASKED)),
]


@pytest.mark.parametrize("rendering", RENDERINGS)
@pytest.mark.parametrize(("case", "review"), RECONCILER_REFUSED, ids=[c for c, _ in RECONCILER_REFUSED])
def test_every_rendering_refuses_a_token_secret_from_the_reconciler_or_the_bootstrap_job(
        case: str, review: Obj, rendering: str) -> None:
    found = judged(review, rendering)
    assert found, f"{rendering}: {case}: allowed"


@pytest.mark.parametrize("rendering", RENDERINGS)
@pytest.mark.parametrize(("case", "review"), RECONCILER_ALLOWED, ids=[c for c, _ in RECONCILER_ALLOWED])
def test_every_rendering_lets_the_reconciler_and_the_bootstrap_job_write_their_own_types(
        case: str, review: Obj, rendering: str) -> None:
    assert judged(review, rendering) == [], f"{rendering}: {case}"


@pytest.mark.parametrize("rendering", MEMBER_RENDERINGS)
@pytest.mark.parametrize(("case", "review"), HUB_REFUSED, ids=[c for c, _ in HUB_REFUSED])
def test_every_member_rendering_refuses_the_hub_any_type_but_tls(case: str, review: Obj, rendering: str) -> None:
    found = judged(review, rendering)
    assert found, f"{rendering}: {case}: allowed"
    assert all("tls-injector hub" in text for text in found), found


@pytest.mark.parametrize("rendering", MEMBER_RENDERINGS)
@pytest.mark.parametrize(("case", "review"), HUB_ALLOWED, ids=[c for c, _ in HUB_ALLOWED])
def test_every_member_rendering_lets_the_hub_write_its_intermediates(case: str, review: Obj, rendering: str) -> None:
    assert judged(review, rendering) == [], f"{rendering}: {case}"


def test_a_type_refusal_says_which_types_the_reconciler_may_write() -> None:
    review = request("CREATE", RECONCILER, new=token("web-tls", "team-a", TOKEN_TYPES[0], LEAF_LABELS))
    [text] = judged(review, "kustomize base")
    assert "kubernetes.io/tls or Opaque" in text
