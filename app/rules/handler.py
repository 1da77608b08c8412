"""The /validate handler: the rule set's verdict as an AdmissionResponse (never a patch).

Status code 422 (reason Invalid) for a denial, not 403: the request is well-formed and the user may
make it — it is this *change* that is not allowed, exactly like the apiserver's own "field is
immutable" errors and a failing CRD x-kubernetes-validations rule, which are both 422 Invalid. So a
user sees the same code whether the webhook, the exported ValidatingAdmissionPolicy (reason: Invalid)
or a CRD rule refused the change, and kubectl prints "is invalid" for all three.
"""

from __future__ import annotations

from app.admission import AdmissionRequest, AdmissionResponse, Handler, allowed, denied
from app.rules.judge import Verdict, judge
from app.rules.model import SCOPE_OTHER_NAMESPACES, RuleSet
from app.rules.quick import QuickValidate

DENIED_CODE = 422
DENIED_REASON = "Invalid"


def make_validate_handler(rule_set: RuleSet, namespaces: str = SCOPE_OTHER_NAMESPACES) -> Handler:
    """Only UPDATE is judged: CREATE and DELETE are always allowed, CONNECT is ignored (allowed).

    Only the rules that hold in `namespaces` run (see RuleSet.scoped): /validate serves the namespaces
    not labelled enabled, /validate/enabled-namespace the enabled ones.

    dryRun is not looked at: the handler has no side effects, so a server-side dry run gets the very
    verdict, message and warnings of the real request.
    """
    rules = rule_set.scoped(namespaces)
    rules.prepare()

    def validate(request: AdmissionRequest) -> AdmissionResponse:
        if request.operation != "UPDATE" or request.object is None or request.old_object is None:
            return allowed(request.uid)
        verdict = judge(rules, request.kind, old=request.old_object, new=request.object)
        if verdict.allowed:
            return allowed(request.uid, warnings=verdict.warnings)
        return denied(request.uid, denial_message(request, verdict), code=DENIED_CODE, reason=DENIED_REASON)

    # The HTTP endpoint tries this first: the same answer from the values the rules read, without
    # building the two objects (app.rules.quick); None when only this handler may answer.
    validate.quick_answer = QuickValidate(rules).answer  # type: ignore[attr-defined]
    return validate


def denial_message(request: AdmissionRequest, verdict: Verdict) -> str:
    """One line per failing rule, after a line naming the object, so each can be acted on."""
    kind = request.kind
    group_version = f"{kind['group']}/{kind['version']}" if kind["group"] else kind["version"]
    # For a Namespace the apiserver sends its own name as the namespace: "shop", not "shop/shop".
    where = f"{request.namespace}/{request.name}" if request.namespace not in ("", request.name) else request.name
    head = f"update of {group_version} {kind['kind']} {where} rejected by {len(verdict.failures)} rule(s):"
    return "\n".join([head, *(f"- {failure.describe()}" for failure in verdict.failures)])
