"""The /validate handler: the rule set's verdict as an AdmissionResponse (never a patch).

One path. The review is decoded once at the edge along the rules' `self` paths (tls_injector.rules.reader): the
handler gets the envelope and, per path, the JSON text of oldSelf and self, and judges those
(`judge_texts`, which finds a pair's results in the rules' memo or decodes just the two texts).

Status code 422 (reason Invalid) for a denial, not 403: the request is well-formed and the user may
make it — it is this *change* that is not allowed, exactly like the apiserver's own "field is
immutable" errors and a failing CRD x-kubernetes-validations rule, which are both 422 Invalid. So a
user sees the same code whether the webhook, the exported ValidatingAdmissionPolicy (reason: Invalid)
or a CRD rule refused the change, and kubectl prints "is invalid" for all three.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from tls_injector.admission import (
    AdmissionResponse,
    BadReview,
    GroupVersionKind,
    Request,
    Review,
    Route,
    allowed,
    denied,
)
from tls_injector.rules.judge import Verdict, judge_texts
from tls_injector.rules.memo import MEMO_ENTRIES
from tls_injector.rules.model import SCOPE_OTHER_NAMESPACES, RuleSet
from tls_injector.rules.paths import MISSING, Path
from tls_injector.rules.reader import Reader, request_type

log = logging.getLogger("tls_injector.rules")

DENIED_CODE = 422
DENIED_REASON = "Invalid"


@dataclass(frozen=True, slots=True)
class Preview:
    """Lines added to an allowed dry run (tls_injector.injection.preview): the paths of the object it reads, and
    the lines for a kind given the values at those paths (MISSING where absent); none for no line."""

    paths: tuple[Path, ...]
    lines: Callable[[GroupVersionKind, Mapping[Path, object]], tuple[str, ...]]


def make_validate_handler(rule_set: RuleSet, namespaces: str = SCOPE_OTHER_NAMESPACES, *,
                          preview: Preview | None = None, memo_entries: int = MEMO_ENTRIES,
                          exceptions: bool = False) -> Route[Any]:
    """Only UPDATE is judged: CREATE and DELETE are always allowed, CONNECT is ignored (allowed).

    Only the rules that hold in `namespaces` run (see RuleSet.scoped): /validate serves the namespaces
    not labelled enabled, /validate/enabled-namespace the enabled ones.

    dryRun is not looked at by the rules: the handler has no side effects, so a server-side dry run gets
    the very verdict, message and warnings of the real request (plus `preview`'s lines when allowed).
    `memo_entries` bounds each group of rules' memo of results (0: nothing remembered).

    `exceptions`: an update a rule refuses but whose object names it as that rule's exception is let
    through with a warning (the exported policies decide by RBAC whether its requester may take it);
    without, it is refused and the message says why (judge_texts).
    """
    rules = rule_set.scoped(namespaces, memo_entries=memo_entries)
    rules.prepare()
    reader = Reader(frozenset(rule.self_path for rule in rules) | frozenset(preview.paths if preview else ()))
    request_class = request_type(reader.type)

    def validate(request: Any) -> AdmissionResponse:
        new, old = reader.top(request.object, "object"), reader.top(request.oldObject, "oldObject")
        response = allowed(request.uid)
        if request.operation == "UPDATE" and new is not None and old is not None:
            kind = request.kind.gvk()
            verdict = judge_texts(rules, kind, lambda path: (reader.text(old, path), reader.text(new, path)),
                                  exceptions=exceptions)
            if not verdict.allowed:
                return denied(request.uid, denial_message(request, kind, verdict), code=DENIED_CODE,
                              reason=DENIED_REASON)
            response = allowed(request.uid, warnings=verdict.warnings)
            if verdict.excepted:
                _log_exception(request, kind, verdict)
        if preview is None or not request.dryRun or new is None or request.operation not in ("CREATE", "UPDATE"):
            return response
        lines = preview.lines(request.kind.gvk(), {path: _value(reader.text(new, path)) for path in preview.paths})
        return allowed(request.uid, warnings=[*response.get("warnings", []), *lines]) if lines else response

    reviews: msgspec.json.Decoder[Review[Any]] = msgspec.json.Decoder(Review[request_class])  # type: ignore[valid-type]
    return Route(reviews, validate)


def _log_exception(request: Request, kind: GroupVersionKind, verdict: Verdict) -> None:
    """One line per update let through as an exception: which object, which rules, dry run or not (the
    policy, not this webhook, knows whether its requester was granted it; the audit log says who)."""
    where = f"{request.namespace or ''}/{request.name or ''}"
    log.warning(f"TLS exception: update of {kind['kind']} {where} let through as the exception it names "
                f"({', '.join(verdict.excepted)}); the admission policies check the requester's grant",
                extra={"namespace": request.namespace, "workload": request.name, "kind": kind["kind"],
                       "rules": list(verdict.excepted), "dry_run": bool(request.dryRun)})


def _value(text: bytes) -> object:
    try:
        return MISSING if text == b"" else msgspec.json.decode(text)
    except msgspec.DecodeError as error:  # checked by the edge's decode: only a number past a double's range
        raise BadReview(f"invalid JSON in request.object: {error}") from None


def denial_message(request: Request, kind: GroupVersionKind, verdict: Verdict) -> str:
    """One line per failing rule, after a line naming the object, so each can be acted on."""
    group_version = f"{kind['group']}/{kind['version']}" if kind["group"] else kind["version"]
    namespace, name = request.namespace or "", request.name or ""
    # For a Namespace the apiserver sends its own name as the namespace: "shop", not "shop/shop".
    where = f"{namespace}/{name}" if namespace not in ("", name) else name
    head = f"update of {group_version} {kind['kind']} {where} rejected by {len(verdict.failures)} rule(s):"
    return "\n".join([head, *(f"- {failure.describe()}" for failure in verdict.failures)])
