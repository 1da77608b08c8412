"""What a workload's pods will get, said before they exist: a warning on a server-side dry run.

`kubectl apply --dry-run=server` of a Deployment (StatefulSet, DaemonSet, CronJob), new or changed, reaches
/validate (the shipped entries send dry-run CREATEs for this, and real CREATEs never); the answer
then carries one line naming the certificate source (the Secret, or a pod certificate from our signer)
and the trust source (the ConfigMap, or the ClusterTrustBundle), worked out by the same choices the
mutating webhook will make for the pods. Only dry runs get it: a real apply would print it every time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.admission import AdmissionRequest, AdmissionResponse, Handler, allowed
from app.admission.quick import Envelope
from app.injection import names
from app.injection.choices import InjectionOptions, InjectionRefused, read_choices
from app.injection.workload import template_of, template_workload

# (group, kind) of the workloads whose dry runs get the line: those the shipped validating entries send.
WORKLOAD_KINDS = frozenset({("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet"),
                            ("batch", "CronJob")})


def what_pods_get(kind: str, obj: Mapping[str, Any], options: InjectionOptions, *,
                  namespace_enabled: bool = False) -> str | None:
    """One line for people; None when the pods will not be injected (opted out, or no template)."""
    meta, template = obj.get("metadata") or {}, template_of(kind, obj) or {}
    template_meta = template.get("metadata") or {}
    if not isinstance(meta, dict) or not isinstance(template_meta, dict):
        return None
    labels = template_meta.get("labels") or {}
    label = labels.get(names.INJECT_LABEL) if isinstance(labels, dict) else None
    if label == names.POD_OPT_OUT:
        return None
    name = str(meta.get("name") or "")
    who = f"tls-injector: pods of {kind} {name}"
    if label != names.POD_OPT_IN and not namespace_enabled:
        who += f" (if the namespace is labelled {names.INJECT_LABEL}={names.NAMESPACE_OPT_IN})"
    annotations = template_meta.get("annotations") or {}
    try:
        choices = read_choices(template_workload(kind, name, template_meta),
                               annotations if isinstance(annotations, dict) else {}, options)
    except InjectionRefused as refusal:
        return f"{who} will be refused: {refusal}"
    if choices.mode == names.MODE_POD_CERTIFICATE:
        gets = (f"a per-pod {names.POD_KEY_TYPE} key and certificate from signer {names.SIGNER_NAME} "
                f"(projected podCertificate) at {choices.cert_path}, and trust from the ClusterTrustBundle "
                f"{names.CLUSTER_TRUST_BUNDLE} at {choices.trust_path}")
    else:
        gets = (f"the certificate of Secret {choices.secret_name} at {choices.cert_path}, and trust from "
                f"ConfigMap {options.trust_bundle_configmap} at {choices.trust_path}")
    return f"{who} will get {gets}" + (f" ({choices.fallback})" if choices.fallback else "")


def with_preview(validate: Handler, options: InjectionOptions, *, namespace_enabled: bool = False) -> Handler:
    """`validate`, plus the preview line on allowed dry runs of workload CREATE and UPDATE; with
    `namespace_enabled` for the path that only requests from enabled namespaces reach."""

    def handler(request: AdmissionRequest) -> AdmissionResponse:
        response = validate(request)
        if not (request.dry_run and response.get("allowed") and request.operation in ("CREATE", "UPDATE")
                and (request.kind["group"], request.kind["kind"]) in WORKLOAD_KINDS
                and request.object is not None):
            return response
        line = what_pods_get(request.kind["kind"], request.object, options, namespace_enabled=namespace_enabled)
        if line is None:
            return response
        return allowed(request.uid, warnings=[*response.get("warnings", []), line])

    # `validate`'s quick path (app.rules.quick) knows nothing of the preview line, so it answers no dry run.
    quick = getattr(validate, "quick_answer", None)
    if quick is not None:

        def quick_answer(body: bytes) -> tuple[Envelope, AdmissionResponse] | None:
            found: tuple[Envelope, AdmissionResponse] | None = quick(body)
            return None if found is None or found[0].dry_run else found

        handler.quick_answer = quick_answer  # type: ignore[attr-defined]
    return handler
