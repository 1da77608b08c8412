"""Job CREATE: a CronJob's run is pinned to the CronJob's Secret and services.

A run's Job is `<cronjob>-<minutes>` and its pods carry nothing else that names the CronJob, so without a
pin every run would mount a Secret of its own. The pin is added to the Job's pod template when the
CronJob controller creates it: Jobs are generated objects (nobody applies them, so no GitOps drift),
and CronJobs created before the injector was installed are covered too. Only what the template does not
set is added, so a second call, or a CronJob whose template `inject` already pinned, changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tls_injector import names
from tls_injector.admission import JsonPatchOp
from tls_injector.injection.patch import pointer
from tls_injector.injection.podspec import JobPodTemplate
from tls_injector.injection.workload import controller_of, cronjob_pins


def job_pin_ops(metadata: object, template: JobPodTemplate | None) -> list[JsonPatchOp]:
    """The patch pinning a CronJob-owned Job's pod template (given the Job's metadata and, typed, its
    `spec.template`); none for any other Job or an opted-out one."""
    owner = controller_of(metadata) if isinstance(metadata, dict) else None
    if owner is None or owner.get("kind") != "CronJob" or template is None:
        return []
    pod_metadata = template.metadata
    if pod_metadata is None:
        return [_add(("spec", "template", "metadata"), {"annotations": cronjob_pins(owner["name"], {})})]
    if not isinstance(pod_metadata, dict) or _opted_out(pod_metadata):
        return []
    annotations = pod_metadata.get("annotations")
    if annotations is None:
        return [_add(("spec", "template", "metadata", "annotations"), cronjob_pins(owner["name"], {}))]
    if not isinstance(annotations, dict):
        return []  # the apiserver decodes no such Job; nothing sensible to pin into
    where = ("spec", "template", "metadata", "annotations")
    return [_add((*where, key), value) for key, value in cronjob_pins(owner["name"], annotations).items()]


def _opted_out(pod_metadata: Mapping[str, Any]) -> bool:
    labels = pod_metadata.get("labels")
    return isinstance(labels, dict) and labels.get(names.INJECT_LABEL) == names.POD_OPT_OUT


def _add(path: tuple[str, ...], value: object) -> JsonPatchOp:
    return JsonPatchOp(op="add", path=pointer(*path), value=value)
