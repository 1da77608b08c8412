"""The mutating injector: a pure plan from a pod to the volumes, mounts and env it needs, and its patch."""

from app.injection.choices import InjectionOptions, InjectionRefused
from app.injection.mutate import FingerprintSource, make_mutate_handler, no_fingerprints
from app.injection.patch import patch_ops, pointer
from app.injection.plan import Plan, plan_injection, plan_pod
from app.injection.podspec import PodSpec, pod_spec
from app.injection.workload import (
    TEMPLATE_KINDS,
    TEMPLATE_PATHS,
    Workload,
    client_secret_name_for,
    controller_of,
    cronjob_pins,
    pod_workload,
    secret_name_for,
    template_of,
    template_workload,
    tls_change,
)

__all__ = [
    "TEMPLATE_KINDS",
    "TEMPLATE_PATHS",
    "FingerprintSource",
    "InjectionOptions",
    "InjectionRefused",
    "Plan",
    "PodSpec",
    "Workload",
    "client_secret_name_for",
    "controller_of",
    "cronjob_pins",
    "make_mutate_handler",
    "no_fingerprints",
    "patch_ops",
    "plan_injection",
    "plan_pod",
    "pod_spec",
    "pod_workload",
    "pointer",
    "secret_name_for",
    "template_of",
    "template_workload",
    "tls_change",
]
