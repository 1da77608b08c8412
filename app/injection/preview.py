"""What a workload's pods will get, said before they exist: a warning on a server-side dry run.

`kubectl apply --dry-run=server` of a Deployment (StatefulSet, DaemonSet, CronJob), new or changed, reaches
/validate (the shipped entries send dry-run CREATEs for this, and real CREATEs never); the answer
then carries one line naming the certificate source (the Secret, or a pod certificate from our signer),
the trust source (the ConfigMap, or the ClusterTrustBundle) and, when asked for, the client certificate's
Secret and directory and the client CA bundle's file, worked out by the same choices the
mutating webhook will make for the pods. Only dry runs get it: a real apply would print it every time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tls_injector import names
from tls_injector.admission import GroupVersionKind
from tls_injector.injection.choices import Choices, InjectionOptions, InjectionRefused, read_choices
from tls_injector.injection.jvm import keystore_line, keystore_warnings, public_roots_line
from tls_injector.injection.profile import profile_lines
from tls_injector.injection.workload import TEMPLATE_PATHS, template_workload

# (group, kind) of the workloads whose dry runs get the line: those the shipped validating entries send.
WORKLOAD_KINDS = frozenset({("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet"),
                            ("batch", "CronJob")})
# What the line reads of the object, read by /validate's one decode: its name and its pod template's metadata.
NAME = ("metadata", "name")
TEMPLATE_METADATA = {kind: (*TEMPLATE_PATHS[kind], "metadata") for _, kind in WORKLOAD_KINDS}
PREVIEW_PATHS = (NAME, *sorted(set(TEMPLATE_METADATA.values())))


def preview_lines(options: InjectionOptions, kind: GroupVersionKind, values: Mapping[tuple[str, ...], object], *,
                  namespace_enabled: bool = False) -> tuple[str, ...]:
    """The lines for a workload kind given the values at PREVIEW_PATHS (anything but a str or a dict where
    absent); none for other kinds."""
    if (kind["group"], kind["kind"]) not in WORKLOAD_KINDS:
        return ()
    name, template_meta = values.get(NAME), values.get(TEMPLATE_METADATA[kind["kind"]])
    return what_pods_get(kind["kind"], name if isinstance(name, str) else "",
                         template_meta if isinstance(template_meta, dict) else {}, options,
                         namespace_enabled=namespace_enabled)


def what_pods_get(kind: str, name: str, template_meta: Mapping[str, Any], options: InjectionOptions, *,
                  namespace_enabled: bool = False) -> tuple[str, ...]:
    """Lines for people, each within a warning's 256 characters: what the pods get, then their client
    certificate when they ask for one; none when the pods will not be injected (opted out)."""
    labels = template_meta.get("labels") or {}
    label = labels.get(names.INJECT_LABEL) if isinstance(labels, dict) else None
    if label == names.POD_OPT_OUT:
        return ()
    who = f"tls-injector: pods of {kind} {name}"
    if label != names.POD_OPT_IN and not namespace_enabled:
        who += f" (if the namespace is labelled {names.INJECT_LABEL}={names.NAMESPACE_OPT_IN})"
    annotations = template_meta.get("annotations") or {}
    try:
        choices = read_choices(template_workload(kind, name, template_meta).secret_name,
                               annotations if isinstance(annotations, dict) else {}, options)
    except InjectionRefused as refusal:
        return (f"{who} will be refused: {refusal}",)
    if choices.mode == names.MODE_TRUST_ONLY:
        env = f", and {', '.join(choices.env)} set to it" if choices.env else ""
        return (f"{who} will get trust alone ({names.MODE_ANNOTATION}: {names.MODE_TRUST_ONLY}): ConfigMap "
                f"{options.trust_bundle_configmap} at {choices.trust_path}{env}; no certificate, no Secret",
                *filter(None, [public_roots_line(choices)]))
    if choices.mode == names.MODE_POD_CERTIFICATE:
        gets = (f"a per-pod {names.POD_KEY_TYPE} key and certificate from signer {names.SIGNER_NAME} "
                f"(projected podCertificate) at {choices.cert_path}, and trust from the ClusterTrustBundle "
                f"{names.CLUSTER_TRUST_BUNDLE} at {choices.trust_path}")
    else:
        gets = (f"the certificate of Secret {choices.secret_name} at {choices.cert_path}, and trust from "
                f"ConfigMap {options.trust_bundle_configmap} at {choices.trust_path}")
    line = f"{who} will get {gets}" + (f" ({choices.fallback})" if choices.fallback else "")
    given = annotations if isinstance(annotations, dict) else {}
    lines = (line, *(f"tls-injector: {said}" for said in profile_lines(given, options.profiles, mode=choices.mode)))
    extra = [keystore_line(given, choices), public_roots_line(choices), *keystore_warnings(given, choices),
             _key_mode_line(choices)]
    if not choices.client_secret:
        return (*lines, *filter(None, extra))
    # Refused above in the pod-certificate mode, so always a Secret's.
    return *lines, (f"tls-injector: and the client certificate (clientAuth only, from the client CA) of Secret "
                  f"{choices.client_secret} at {choices.client_path}, and the client CAs at "
                  f"{choices.trust_path}/{names.CLIENT_BUNDLE_KEY}"), *filter(None, extra)


def _key_mode_line(choices: Choices) -> str:
    """What names.KEY_MODE_ANNOTATION gives ("" when unset): the files stay root's, so a non-root container
    reads them through the pod's fsGroup only (the template's spec is not read here; /mutate warns per pod)."""
    if choices.key_mode is None:
        return ""
    if choices.mode == names.MODE_POD_CERTIFICATE:
        return (f"tls-injector: its pod certificate's files with mode {choices.key_mode:04o} "
                f"({names.KEY_MODE_ANNOTATION}) only where the kubelet knows neither the pod's one user nor its "
                f"fsGroup; otherwise the kubelet gives them to that user (0600, 0640 with fsGroup)")
    return (f"tls-injector: its certificate's files with mode {choices.key_mode:04o} ({names.KEY_MODE_ANNOTATION}), "
            f"owned by root: a non-root container reads them only with securityContext.fsGroup (the kubelet "
            f"then gives that group read)")
