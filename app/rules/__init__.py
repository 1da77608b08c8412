"""Transition rules in CEL over `self`/`oldSelf`, and the /validate handler that enforces them.

Pure: rule sets are built from plain data (the YAML is parsed at the edge, app/offline/rulesfile.py) and
compiled once; judging an update is a function of the rule set and the two objects.
"""

from tls_injector.rules.export import (
    crd_validation_snippets,
    exception_policy_names,
    export_documents,
    validating_admission_policies,
)
from tls_injector.rules.handler import DENIED_CODE, DENIED_REASON, Preview, denial_message, make_validate_handler
from tls_injector.rules.judge import Change, Failure, Verdict, judge, self_value
from tls_injector.rules.model import (
    SCOPE_ALL,
    SCOPE_ENABLED_NAMESPACES,
    SCOPE_OTHER_NAMESPACES,
    SCOPES,
    Match,
    Problem,
    Rule,
    RulesError,
    RuleSet,
    RuleWarning,
    build_rule_set,
)

__all__ = [
    "DENIED_CODE",
    "DENIED_REASON",
    "SCOPES",
    "SCOPE_ALL",
    "SCOPE_ENABLED_NAMESPACES",
    "SCOPE_OTHER_NAMESPACES",
    "Change",
    "Failure",
    "Match",
    "Preview",
    "Problem",
    "Rule",
    "RuleSet",
    "RuleWarning",
    "RulesError",
    "Verdict",
    "build_rule_set",
    "crd_validation_snippets",
    "denial_message",
    "exception_policy_names",
    "export_documents",
    "judge",
    "make_validate_handler",
    "self_value",
    "validating_admission_policies",
]
