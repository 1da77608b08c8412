"""The admission handlers, built from settings: what `serve` answers and `check` judges with."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from tls_injector.admission import Route
from tls_injector.injection import FingerprintSource, InjectionOptions, make_mutate_handler, no_fingerprints
from tls_injector.injection.answers import Answers
from tls_injector.injection.preview import PREVIEW_PATHS, preview_lines
from tls_injector.injection.profile import ProfileBounds
from tls_injector.offline.rulesfile import load_rule_set
from tls_injector.rules import SCOPE_ENABLED_NAMESPACES, Preview, make_validate_handler
from tls_injector.rules.memo import MEMO_ENTRIES
from tls_injector.settings import ServeSettings


@dataclasses.dataclass(frozen=True)
class AdmissionHandlers:
    """One route per admission path: /mutate, /validate, /validate/enabled-namespace."""

    mutate: Route[Any]
    validate: Route[Any]
    validate_enabled_namespace: Route[Any]


def build_handlers(
    settings: ServeSettings, *, ca_fingerprints: FingerprintSource = no_fingerprints
) -> tuple[Route[Any], Route[Any]]:
    """The /mutate and /validate routes; raises RulesFileError for a bad `settings.rules_file`."""
    handlers = admission_handlers(settings, ca_fingerprints=ca_fingerprints)
    return handlers.mutate, handlers.validate


def admission_handlers(
    settings: ServeSettings, *, ca_fingerprints: FingerprintSource = no_fingerprints, memo: bool = True,
    profiles: ProfileBounds | None = None,
) -> AdmissionHandlers:
    """Every admission route; raises RulesFileError for a bad `settings.rules_file`.

    /validate enforces the built-in transition rules plus the rules file's that hold outside enabled
    namespaces, /validate/enabled-namespace those that hold in them (the shipped entries send each
    workload update to one of the two, by the namespace's label). /mutate injects; its record carries
    the CA fingerprints `ca_fingerprints` returns (serve feeds it from --trust-bundle-file). Both
    validate paths add the dry-run preview line: a workload update reaches only one of them. Each route
    has one memo in front of its pure function (`memo=False`: none holds anything, for tests). `profiles`:
    the bounds of certificate profiles the dry-run preview judges by (the reconciler's; default its defaults).
    """
    options = InjectionOptions(pod_certificates=settings.pod_certificates, default_mode=settings.default_mode,
                               profiles=profiles or ProfileBounds())
    rule_set = load_rule_set(settings.rules_file)
    entries = MEMO_ENTRIES if memo else 0
    return AdmissionHandlers(
        mutate=make_mutate_handler(options, ca_fingerprints=ca_fingerprints,
                                   answers=None if memo else Answers(max_entries=0)),
        validate=make_validate_handler(rule_set, memo_entries=entries, exceptions=settings.tls_exceptions,
                                       preview=Preview(PREVIEW_PATHS, functools.partial(preview_lines, options))),
        validate_enabled_namespace=make_validate_handler(
            rule_set, SCOPE_ENABLED_NAMESPACES, memo_entries=entries, exceptions=settings.tls_exceptions,
            preview=Preview(PREVIEW_PATHS, functools.partial(preview_lines, options, namespace_enabled=True))),
    )
