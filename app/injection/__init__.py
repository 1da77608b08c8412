"""The mutating injector: a pure plan from a pod to the volumes, mounts and env it needs, and its patch."""

from tls_injector.injection.choices import InjectionOptions, InjectionRefused
from tls_injector.injection.mutate import FingerprintSource, make_mutate_handler, no_fingerprints
from tls_injector.injection.patch import patch_ops, pointer
from tls_injector.injection.plan import Plan, plan_injection, plan_pod
from tls_injector.injection.podspec import PodSpec, pod_spec
from tls_injector.injection.workload import (
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
