"""The mutating injector: a pure plan from a pod to the volumes, mounts and env it needs, and its patch."""

from app.injection.choices import InjectionOptions, InjectionRefused
from app.injection.mutate import FingerprintSource, make_mutate_handler, no_fingerprints
from app.injection.patch import patch_ops, pointer
from app.injection.plan import Plan, plan_injection
from app.injection.workload import TEMPLATE_KINDS, template_workload_name, workload_name

__all__ = [
    "TEMPLATE_KINDS",
    "FingerprintSource",
    "InjectionOptions",
    "InjectionRefused",
    "Plan",
    "make_mutate_handler",
    "no_fingerprints",
    "patch_ops",
    "plan_injection",
    "pointer",
    "template_workload_name",
    "workload_name",
]
