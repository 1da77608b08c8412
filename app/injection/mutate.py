"""The /mutate handler: Pod CREATE in, the injection's JSON Patch out; Job CREATE of a CronJob's run in,
the pin of the CronJob's Secret out (see jobs.py).

No side effects and no Kubernetes API calls, so a dry-run gets exactly the patch a real request would.
The CA fingerprints for the record come from a callable (the reconciler keeps them current); the
webhook never asks the apiserver for them on the request path.

The namespace does not enter the plan: the Secret and ConfigMap a pod mounts are always in the pod's own
namespace, so nothing here reads metadata.namespace (empty on controller-created pods).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from app.admission import AdmissionRequest, AdmissionResponse, Handler, allowed, denied, patched
from app.injection import names
from app.injection.answers import Answers
from app.injection.choices import InjectionOptions, InjectionRefused
from app.injection.jobs import job_pin_ops
from app.injection.patch import patch_ops
from app.injection.plan import plan_injection
from app.injection.quick import QuickMutate

FingerprintSource = Callable[[], Sequence[str]]


def no_fingerprints() -> Sequence[str]:
    return ()


def make_mutate_handler(options: InjectionOptions, *, ca_fingerprints: FingerprintSource = no_fingerprints) -> Handler:
    """The handler for /mutate; `ca_fingerprints` returns the trust bundle's CA fingerprints right now."""
    answers = Answers()

    def mutate(request: AdmissionRequest) -> AdmissionResponse:
        pod = request.object
        if _is_create(request, "batch", "Job") and pod is not None:
            return patched(request.uid, job_pin_ops(pod))
        if not _is_create(request, "", "Pod") or pod is None or _opted_out(pod):
            return allowed(request.uid)
        fingerprints = ca_fingerprints()
        return answers.respond(request.uid, pod, fingerprints, lambda: _inject(request.uid, pod, fingerprints))

    def _inject(uid: str, pod: dict[str, Any], fingerprints: Sequence[str]) -> AdmissionResponse:
        try:
            plan = plan_injection(pod, options=options, ca_fingerprints=fingerprints)
        except InjectionRefused as refusal:
            # 422, as the apiserver answers an invalid object: the pod as written cannot be injected.
            return denied(uid, f"tls-injector: {refusal}", code=422, reason="Invalid")
        return patched(uid, patch_ops(plan), warnings=plan.warnings)

    mutate.answers = answers  # type: ignore[attr-defined]  # for tests and the benchmark
    # The HTTP endpoint tries this first: another replica's answer without decoding the pod, or, for a
    # new shape, the plan made from the pod's metadata and spec alone (what `_inject` reads), without the
    # rest of the review decoded and without this handler's own memo (the quick path remembers it).
    mutate.quick = QuickMutate(ca_fingerprints, _inject)  # type: ignore[attr-defined]
    return mutate


def _is_create(request: AdmissionRequest, group: str, kind: str) -> bool:
    return (
        request.operation == "CREATE"
        and request.kind["group"] == group and request.kind["kind"] == kind
        and not request.raw.get("subResource")  # pods/binding, pods/eviction: not an object being created
    )


def _opted_out(pod: dict[str, object]) -> bool:
    metadata = pod.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return isinstance(labels, dict) and labels.get(names.INJECT_LABEL) == names.POD_OPT_OUT
