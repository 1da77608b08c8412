"""The admission handlers, built from settings: what `serve` answers and `check` judges with."""

from __future__ import annotations

import dataclasses

from app.admission import Handler
from app.injection import FingerprintSource, InjectionOptions, make_mutate_handler, no_fingerprints
from app.injection.preview import with_preview
from app.rules import SCOPE_ENABLED_NAMESPACES, make_validate_handler
from app.rulesfile import load_rule_set
from app.settings import ServeSettings


@dataclasses.dataclass(frozen=True)
class AdmissionHandlers:
    """One handler per admission path: /mutate, /validate, /validate/enabled-namespace."""

    mutate: Handler
    validate: Handler
    validate_enabled_namespace: Handler


def build_handlers(
    settings: ServeSettings, *, ca_fingerprints: FingerprintSource = no_fingerprints
) -> tuple[Handler, Handler]:
    """The /mutate and /validate handlers; raises RulesFileError for a bad `settings.rules_file`."""
    handlers = admission_handlers(settings, ca_fingerprints=ca_fingerprints)
    return handlers.mutate, handlers.validate


def admission_handlers(
    settings: ServeSettings, *, ca_fingerprints: FingerprintSource = no_fingerprints
) -> AdmissionHandlers:
    """Every admission handler; raises RulesFileError for a bad `settings.rules_file`.

    /validate enforces the built-in transition rules plus the rules file's that hold outside enabled
    namespaces, /validate/enabled-namespace those that hold in them (the shipped entries send each
    workload update to one of the two, by the namespace's label). /mutate injects; its record carries
    the CA fingerprints `ca_fingerprints` returns (serve feeds it from --trust-bundle-file). Both
    validate paths add the dry-run preview line: a workload update reaches only one of them.
    """
    options = InjectionOptions(pod_certificates=settings.pod_certificates, default_mode=settings.default_mode)
    rule_set = load_rule_set(settings.rules_file)
    return AdmissionHandlers(
        mutate=make_mutate_handler(options, ca_fingerprints=ca_fingerprints),
        validate=with_preview(make_validate_handler(rule_set), options),
        validate_enabled_namespace=with_preview(make_validate_handler(rule_set, SCOPE_ENABLED_NAMESPACES),
                                                options, namespace_enabled=True),
    )
