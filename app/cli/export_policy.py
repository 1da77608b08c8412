"""`tls-injector export-policy`: the rule set as native Kubernetes validation (VAP or CRD snippets)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tls_injector.cli import flags
from tls_injector.cli.command import EXIT_OK, Command, fail
from tls_injector.names import DEFAULT_NAMESPACE
from tls_injector.offline.rulesfile import RulesFileError, load_rule_set
from tls_injector.offline.yamltext import dump_all
from tls_injector.rules import export_documents


def add(export: argparse.ArgumentParser) -> None:
    export.add_argument("--rules", type=Path, help="YAML rules file (added to the built-in rules)")
    export.add_argument("--format", choices=["vap", "crd", "conditions"], default="vap",
                        help="vap: policies and bindings to kubectl apply; crd: snippets for CRD schemas; "
                             "conditions: the matchCondition a webhook entry needs per kind and path")
    export.add_argument("--namespace", default=DEFAULT_NAMESPACE, type=flags.namespace,
                        help="the injector's own namespace, left out of the bindings with the system namespaces")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        rule_set = load_rule_set(args.rules)
    except RulesFileError as error:
        return fail("export-policy", str(error))
    documents = export_documents(rule_set, fmt=args.format, own_namespace=args.namespace)
    if not documents:
        # Not a failure: with no rule on a custom resource there is simply nothing a CRD could carry.
        reason = ("no rule matches a custom resource (--format crd covers rules on CRD kinds only)"
                  if args.format == "crd" else "the rule set is empty")
        print(f"tls-injector export-policy: nothing to export: {reason}", file=sys.stderr)
        return EXIT_OK
    print(dump_all(documents), end="")
    return EXIT_OK


COMMAND = Command(
    name="export-policy", add=add, run=run,
    help="print the rule set as native Kubernetes validation (VAP or CRD snippets)",
    description="Render the transition rules as ValidatingAdmissionPolicy + ValidatingAdmissionPolicyBinding "
                "objects (admissionregistration.k8s.io/v1, Kubernetes >= 1.30), or as the "
                "x-kubernetes-validations entries to put on a CRD's schema node, or as the matchCondition "
                "each validating webhook entry needs so that every update a rule refuses reaches it.")
