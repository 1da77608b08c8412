"""Whether the TLS exception is guarded: a webhook run with `--tls-exceptions policy` lets through a TLS
change the pod template names and leaves RBAC to the exported admission policies (docs/rules.md,
"Exceptions"). Without those policies, anyone who may update a workload could turn its TLS off by naming
the change; this check finds the webhook's Deployments that grant exceptions and the policies that
must then stand, each with its Deny binding and the RBAC check in its expression."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tls_injector import names
from tls_injector.doctor.model import Result, error, ok, warning
from tls_injector.doctor.snapshot import Snapshot
from tls_injector.kube import Obj
from tls_injector.rules.export import EXCEPTION_GRANTED

CATEGORY = "tls-injector webhook"
# `serve`'s flag and the value that grants exceptions (tests/doctor/test_exceptions.py parses both with
# serve's own parser, so this reading and the flag cannot drift apart).
FLAG = "--tls-exceptions"
GRANTING = "policy"


def grants_exceptions(argv: Sequence[str]) -> bool:
    """The command line asks for `--tls-exceptions policy`, written either way argparse takes it; the last
    one given wins, as it does for argparse."""
    granted = False
    for i, arg in enumerate(argv):
        if arg == FLAG and i + 1 < len(argv):
            granted = argv[i + 1] == GRANTING
        elif arg.startswith(FLAG + "="):
            granted = arg.split("=", 1)[1] == GRANTING
    return granted


def granting_deployments(deployments: Iterable[Obj]) -> list[str]:
    """`namespace/name` of every Deployment one of whose containers runs with exceptions granted."""
    found = []
    for deployment in deployments:
        spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in spec.get("containers") or []:
            argv = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
            if grants_exceptions(argv):
                meta = deployment.get("metadata") or {}
                found.append(f"{meta.get('namespace')}/{meta.get('name')}")
                break
    return sorted(found)


def _policy_problem(name: str, policy: Obj | None, binding: Obj | None) -> str | None:
    if policy is None:
        return f"ValidatingAdmissionPolicy {name} is not installed"
    validations: list[dict[str, Any]] = (policy.get("spec") or {}).get("validations") or []
    if not any(EXCEPTION_GRANTED in str(v.get("expression", "")) for v in validations):
        return (f"ValidatingAdmissionPolicy {name} does not ask RBAC for "
                f"{names.EXCEPTION_VERB} on {names.EXCEPTION_RESOURCE}.{names.EXCEPTION_GROUP} (an older version?)")
    if binding is None:
        return f"ValidatingAdmissionPolicyBinding {name} is not installed: the policy is never evaluated"
    spec = binding.get("spec") or {}
    if spec.get("policyName") != name or "Deny" not in (spec.get("validationActions") or []):
        return f"ValidatingAdmissionPolicyBinding {name} does not bind policy {name} with the action Deny"
    return None


def check_exceptions_guarded(snap: Snapshot) -> Result:
    title = "TLS exceptions are granted only with the admission policies that check RBAC"
    if "exceptions" in snap.errors:
        return warning(CATEGORY, title, f"cannot tell: {snap.errors['exceptions']}",
                       hint=f"doctor needs list on Deployments in {snap.settings.namespace} and get on "
                            "validatingadmissionpolicies and validatingadmissionpolicybindings")
    granting = snap.exceptions.granting
    if not granting:
        return ok(CATEGORY, title, f"no webhook Deployment in {snap.settings.namespace} runs with "
                                   f"{FLAG} {GRANTING}: a TLS change is refused whoever asks")
    problems = [problem for name in snap.settings.exception_policies
                if (problem := _policy_problem(name, snap.exceptions.policies.get(name),
                                               snap.exceptions.bindings.get(name))) is not None]
    if problems:
        return error(CATEGORY, title,
                     f"{', '.join(granting)} run with {FLAG} {GRANTING}, but {len(problems)} of the "
                     f"{len(snap.settings.exception_policies)} policies that check RBAC are not in force: anyone "
                     "who may update a workload can turn its TLS off by naming the change", details=problems,
                     hint="install the admission policies (the admission-policy component, or the chart's "
                          f"policies) or run the webhook with {FLAG} off")
    return ok(CATEGORY, title, f"{', '.join(granting)} run with {FLAG} {GRANTING}; the "
                               f"{len(snap.settings.exception_policies)} policies that check RBAC are installed "
                               "and bound with Deny")


__all__ = ["FLAG", "GRANTING", "check_exceptions_guarded", "granting_deployments", "grants_exceptions"]
