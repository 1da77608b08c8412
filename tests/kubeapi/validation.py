"""The subset of the apiserver's validation that code under test could plausibly get wrong.

Each check returns causes (reason, field, message); the store turns any into one 422 Invalid, as the
real API reports every problem at once. Covered: object names (DNS subdomain / label rules per kind, and
the shorter limits of StatefulSets, Jobs and CronJobs),
label keys and values, annotation keys and their 256 KiB total, Secret and ConfigMap keys and their
1 MiB, ``kubernetes.io/tls`` Secrets needing ``tls.crt`` and ``tls.key``, immutable Secrets/ConfigMaps
and Secret ``type``, workload selectors matching their pod template, pods needing containers, webhook
configuration entries, and events.k8s.io/v1 required fields.
Not covered: the rest of the schema (unknown fields are stored as given), defaulting.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.kubeapi.resources import Resource
from tests.kubeapi.selectors import Requirement

Cause = tuple[str, str, str]
# The apiserver's limits (k8s.io/apimachinery validation, pkg/apis/core/validation): a qualified name's
# prefix is a DNS subdomain of at most 253 characters and its name part at most 63; all annotations of an
# object together at most 256 KiB (keys and values); a Secret's or ConfigMap's data at most 1 MiB; a
# ConfigMap or Secret key at most 253 characters.
_MAX_PREFIX, _MAX_NAME_PART = 253, 63
TOTAL_ANNOTATION_SIZE = 256 * 1024
_MAX_KEY = 253
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_SECRET_MAX = 1024 * 1024  # the real limit on a Secret's total data size, 1 MiB
_IMMUTABLE = "field is immutable when `immutable` is set"


def _required(field: str, detail: str = "") -> Cause:
    return ("FieldValueRequired", field, f"Required value{': ' + detail if detail else ''}")


def _invalid(field: str, value: Any, detail: str) -> Cause:
    return ("FieldValueInvalid", field, f"Invalid value: {value!r}: {detail}")


# Kinds whose names the apiserver holds to less than a DNS subdomain's 253 characters (pkg/apis/*/validation):
# a StatefulSet's name is a DNS-1123 label (ValidateStatefulSetName: NameIsDNSLabel; its pods are
# `<name>-<ordinal>` and their host name is a label); a Job's name becomes the value of the labels the
# apiserver generates on its pod template (`batch.kubernetes.io/job-name`, `job-name`), and a label value is
# at most 63 characters; a CronJob's is at most 52, so the `-<minutes>` of its runs' Jobs fits in those 63.
_STATEFULSET = ("apps", "statefulsets")
_NAME_LIMITS = {("batch", "jobs"): (63, "spec.template.metadata.labels", "must be no more than 63 characters"),
                ("batch", "cronjobs"): (52, "metadata.name", "must be no more than 52 characters")}


def check_name(res: Resource, name: str) -> list[Cause]:
    limit = _NAME_LIMITS.get((res.group, res.plural))
    if limit is not None and len(name) > limit[0] and not _name_causes(res, name):
        return [_invalid(limit[1], name, limit[2])]
    return _name_causes(res, name)


def _name_causes(res: Resource, name: str) -> list[Cause]:
    if res.plural == "clustertrustbundles":  # `<signer with / as :>:<suffix>`: a path segment, checked in
        return [] if name and "/" not in name and "%" not in name and name not in (".", "..") else [  # certificates.py
            _invalid("metadata.name", name, "may not contain '/' or '%', nor be '.' or '..'")]
    if res.plural in ("namespaces", "services"):
        # A Service name is a DNS-1123 label since RelaxedServiceNameValidation (GA and locked on in 1.37):
        # a leading digit is accepted, as for a namespace; before, it was a DNS-1035 label.
        pattern, limit, what = _LABEL, 63, "a lowercase RFC 1123 label"
    elif (res.group, res.plural) == _STATEFULSET:
        pattern, limit, what = _LABEL, 63, "a lowercase RFC 1123 label"
    else:
        pattern, limit, what = _SUBDOMAIN, 253, "a lowercase RFC 1123 subdomain"
    if len(name) <= limit and pattern.match(name):
        return []
    return [_invalid("metadata.name", name, f"{what} must consist of lower case alphanumeric characters or '-' "
                     f"(and '.' for subdomains), start and end with an alphanumeric character, "
                     f"at most {limit} characters")]


def _qualified(key: str) -> bool:
    """IsQualifiedName: `[prefix/]name`, prefix a DNS subdomain <= 253, name <= 63 (the pattern's {0,61})."""
    prefix, _, name = key.rpartition("/")
    return bool(_QUALIFIED.match(key)) and len(prefix) <= _MAX_PREFIX and len(name) <= _MAX_NAME_PART and (
        not prefix or bool(_SUBDOMAIN.match(prefix)))


def _owner_references(refs: Any) -> list[Cause]:
    """ValidateOwnerReferences: apiVersion `<group>/<version>` or `<version>`, kind, name and uid set, at
    most one controller."""
    causes: list[Cause] = []
    controllers = 0
    for i, item in enumerate(refs if isinstance(refs, list) else []):
        at, ref = f"metadata.ownerReferences[{i}]", item if isinstance(item, dict) else {}
        api_version = str(ref.get("apiVersion") or "")
        group, slash, version = api_version.rpartition("/")
        if api_version and ("/" in group or not version or (slash and not group)):
            causes.append(_invalid(f"{at}.apiVersion", api_version, "must be <group>/<version> or <version>"))
        causes += [_required(f"{at}.{f}", "must not be empty") for f in ("apiVersion", "kind", "name", "uid")
                   if not ref.get(f)]
        controllers += bool(ref.get("controller"))
        if ref.get("controller") and controllers > 1:
            causes.append(_invalid("metadata.ownerReferences", "", "Only one reference can have Controller set to "
                                   "true"))
    return causes


def check_metadata(meta: dict[str, Any]) -> list[Cause]:
    causes = _owner_references(meta.get("ownerReferences"))
    for key, value in (meta.get("labels") or {}).items():
        if not _qualified(key):
            causes.append(_invalid("metadata.labels", key, "name part must consist of alphanumeric characters"))
        if not isinstance(value, str) or not _LABEL_VALUE.match(value):
            causes.append(_invalid("metadata.labels", value, "a valid label must be an empty string or consist "
                                   "of alphanumeric characters, '-', '_' or '.', at most 63 characters"))
    annotations = meta.get("annotations") or {}
    causes += [_invalid("metadata.annotations", key, "name part must consist of alphanumeric characters")
               for key in annotations if not _qualified(key.lower())]
    size = sum(len(key) + len(str(value)) for key, value in annotations.items())
    if size > TOTAL_ANNOTATION_SIZE:
        causes.append(("FieldValueTooLong", "metadata.annotations",
                       f"Too long: may not be more than {TOTAL_ANNOTATION_SIZE} bytes"))
    return causes


def _keys(obj: dict[str, Any], field: str) -> list[Cause]:
    return [_invalid(f"{field}[{key}]", key, "a valid config key must consist of alphanumeric characters, "
                     "'-', '_' or '.', at most 253 characters") for key in obj.get(field) or {}
            if not _CONFIG_KEY.match(key) or len(key) > _MAX_KEY or key in (".", "..") or key.startswith("..")]


def _decoded_size(values: dict[str, Any]) -> int:
    """Bytes once decoded (the API carries Secret data and ConfigMap binaryData base64-encoded)."""
    size = 0
    for value in values.values():
        text = str(value)
        size += len(text) * 3 // 4 - text[-2:].count("=")
    return size


def _immutable(obj: dict[str, Any], old: dict[str, Any] | None, fields: tuple[str, ...]) -> list[Cause]:
    if old is None or not old.get("immutable"):
        return []
    causes = [("FieldValueForbidden", f, f"Forbidden: {_IMMUTABLE}") for f in fields if obj.get(f) != old.get(f)]
    if not obj.get("immutable"):
        causes.append(("FieldValueForbidden", "immutable", f"Forbidden: {_IMMUTABLE}"))
    return causes


def _secret(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    data = obj.get("data") or {}
    causes = _keys(obj, "data") + _immutable(obj, old, ("data",))
    if obj.get("type") == "kubernetes.io/tls":
        causes += [_required(f"data[{key}]") for key in ("tls.crt", "tls.key") if key not in data]
    if old is not None and old.get("type") != obj.get("type"):
        causes.append(_invalid("type", obj.get("type"), "field is immutable"))
    if _decoded_size(data) > _SECRET_MAX:
        causes.append(("FieldValueTooLong", "data", f"Too long: must have at most {_SECRET_MAX} bytes"))
    return causes


def _configmap(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    causes = _keys(obj, "data") + _keys(obj, "binaryData") + _immutable(obj, old, ("data", "binaryData"))
    both = set(obj.get("data") or {}) & set(obj.get("binaryData") or {})
    causes += [_invalid(f"data[{k}]", k, "duplicate of key present in binaryData") for k in both]
    size = sum(len(str(v).encode()) for v in (obj.get("data") or {}).values()) + _decoded_size(
        obj.get("binaryData") or {})
    if size > _SECRET_MAX:  # the same 1 MiB as a Secret (MaxSecretSize), data and binaryData together; the
        # apiserver names the field with an empty path, which its cause reports as "[]"
        causes.append(("FieldValueTooLong", "[]", f"Too long: must have at most {_SECRET_MAX} bytes"))
    return causes


def selector_requirements(selector: dict[str, Any]) -> list[Requirement]:
    """A metav1.LabelSelector (matchLabels + matchExpressions) as selector requirements."""
    reqs = [Requirement(k, "in", frozenset([v])) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expr in selector.get("matchExpressions") or []:
        reqs.append(Requirement(expr.get("key", ""), ops.get(expr.get("operator", ""), "in"),
                                frozenset(expr.get("values") or [])))
    return reqs


def _workload(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    spec = obj.get("spec") or {}
    selector, template = spec.get("selector"), spec.get("template") or {}
    causes = [] if (template.get("spec") or {}).get("containers") else [_required("spec.template.spec.containers")]
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return [*causes, _required("spec.selector")]
    labels = (template.get("metadata") or {}).get("labels") or {}
    if not all(req.matches(labels) for req in selector_requirements(selector)):
        causes.append(_invalid("spec.template.metadata.labels", labels, "`selector` does not match template `labels`"))
    if old is not None and (old.get("spec") or {}).get("selector") != selector:
        causes.append(_invalid("spec.selector", selector, "field is immutable"))
    return causes


def _job(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    # The apiserver generates a Job's selector and labels (manualSelector unset): only containers are required,
    # and the pod template cannot change once the Job exists.
    template = (obj.get("spec") or {}).get("template") or {}
    causes = [] if (template.get("spec") or {}).get("containers") else [_required("spec.template.spec.containers")]
    if old is not None and (old.get("spec") or {}).get("template") != template:
        causes.append(_invalid("spec.template", "", "field is immutable"))
    return causes


def _cronjob(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    spec = obj.get("spec") or {}
    template = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}
    causes = [] if spec.get("schedule") else [_required("spec.schedule")]
    if not (template.get("spec") or {}).get("containers"):
        causes.append(_required("spec.jobTemplate.spec.template.spec.containers"))
    return causes


def _pod(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    return [] if (obj.get("spec") or {}).get("containers") else [_required("spec.containers")]


def _webhooks(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, hook in enumerate(obj.get("webhooks") or []):
        at, name = f"webhooks[{i}]", hook.get("name", "")
        if name.count(".") < 2 or not _SUBDOMAIN.match(name):
            causes.append(_invalid(f"{at}.name", name, "should be a domain with at least three segments "
                                   "separated by dots"))
        if name in seen:
            causes.append(("FieldValueDuplicate", f"{at}.name", f"Duplicate value: {name!r}"))
        seen.add(name)
        config = hook.get("clientConfig") or {}
        if ("url" in config) == ("service" in config):
            causes.append(_required(f"{at}.clientConfig", "exactly one of url or service is required"))
        if hook.get("sideEffects") is None:
            causes.append(_required(f"{at}.sideEffects", "must specify one of None, NoneOnDryRun"))
        elif hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            causes.append(("FieldValueNotSupported", f"{at}.sideEffects",
                           'Unsupported value: supported values: "None", "NoneOnDryRun"'))
        if not hook.get("admissionReviewVersions"):
            causes.append(_required(f"{at}.admissionReviewVersions", "must specify one of v1, v1beta1"))
    return causes


# Events (pkg/apis/core/validation/events.go): both APIs pass the legacy checks, which differ for a "new"
# Event (eventTime set: reporting fields required, 128 characters at most) and an old one (its namespace
# must be its object's); events.k8s.io/v1 adds its strict create checks. Its `regarding` is reported under
# the internal name, involvedObject, and its `note` under message.
_EVENT_FIELD_LIMIT = 128


def _event_namespace(obj: dict[str, Any], involved: str, *, new: bool) -> list[Cause]:
    namespace = (obj.get("metadata") or {}).get("namespace") or ""
    if new:
        fits = bool(involved) or namespace in ("default", "kube-system")
    else:
        fits = involved == namespace if involved else namespace in ("", "default")
    return [] if fits else [_invalid("involvedObject.namespace", involved, "does not match event.namespace")]


def _new_event(obj: dict[str, Any], controller_field: str) -> list[Cause]:
    controller = str(obj.get(controller_field) or "")
    causes = [] if controller else [_required(controller_field)]
    if not _qualified(controller):
        causes.append(_invalid(controller_field, controller, "must be a qualified name"))
    for name in ("reportingInstance", "action", "reason"):
        value = str(obj.get(name) or "")
        if not value:
            causes.append(_required(name))
        elif len(value) > _EVENT_FIELD_LIMIT:
            causes.append(_invalid(name, "", f"can have at most {_EVENT_FIELD_LIMIT} characters"))
    return causes


def _events_v1(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    involved = str((obj.get("regarding") or {}).get("namespace") or "")
    causes = _event_namespace(obj, involved, new=bool(obj.get("eventTime")))
    if obj.get("eventTime"):
        causes += _new_event(obj, "reportingController")
    else:
        causes.append(_required("eventTime"))
    if obj.get("type") not in ("Normal", "Warning"):
        causes.append(_invalid("type", "", f"has invalid value: {obj.get('type', '')}"))
    causes += [_invalid(f, "", "needs to be unset") for f in ("deprecatedFirstTimestamp", "deprecatedLastTimestamp",
                                                             "deprecatedCount", "deprecatedSource") if obj.get(f)]
    return causes


def _core_event(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    involved = str((obj.get("involvedObject") or {}).get("namespace") or "")
    new = bool(obj.get("eventTime"))
    return _event_namespace(obj, involved, new=new) + (_new_event(obj, "reportingComponent") if new else [])


def _lease(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    """ValidateLeaseSpec: a positive duration, a count of transitions that is not negative."""
    spec = obj.get("spec") or {}
    duration, transitions = spec.get("leaseDurationSeconds"), spec.get("leaseTransitions")
    causes = []
    if isinstance(duration, int) and duration <= 0:
        causes.append(_invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    if isinstance(transitions, int) and transitions < 0:
        causes.append(_invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0"))
    return causes


Check = Callable[[dict[str, Any], dict[str, Any] | None], list[Cause]]
_CHECKS: dict[tuple[str, str], Check] = {
    ("", "secrets"): _secret, ("", "configmaps"): _configmap, ("", "pods"): _pod, ("", "events"): _core_event,
    ("apps", "deployments"): _workload, ("apps", "statefulsets"): _workload, ("apps", "daemonsets"): _workload,
    ("apps", "replicasets"): _workload, ("events.k8s.io", "events"): _events_v1,
    ("batch", "jobs"): _job, ("batch", "cronjobs"): _cronjob, ("coordination.k8s.io", "leases"): _lease,
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): _webhooks,
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): _webhooks,
}


def validate(res: Resource, obj: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    """Every problem with ``obj`` (``old`` is the stored object on update, None on create)."""
    meta = obj.get("metadata") or {}
    causes = check_name(res, meta.get("name", "")) + check_metadata(meta)
    check = _CHECKS.get((res.group, res.plural))
    return causes + (check(obj, old) if check else [])
