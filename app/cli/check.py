"""`tls-injector check`: offline, the /validate verdict for an update."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tls_injector.cli.cluster import profile_bounds, profile_flags, profile_problem
from tls_injector.cli.command import EXIT_FINDINGS, EXIT_OK, Command, fail
from tls_injector.cli.handlers import admission_handlers
from tls_injector.cli.output import output_flag, structured, wants_structure
from tls_injector.names import INJECT_LABEL, NAMESPACE_OPT_IN, TLS_CHANGE_ANNOTATION
from tls_injector.settings import ServeSettings


def add(check: argparse.ArgumentParser) -> None:
    check.add_argument("--old", required=True, help="the manifests before the change")
    check.add_argument("--new", required=True, help="the manifests after the change")
    check.add_argument("--rules", type=Path, help="YAML rules file (added to the built-in rules)")
    profile_flags(check)  # the reconciler's: a changed workload's dry-run lines judge its certificate profile by them
    check.add_argument("--namespace-enabled", action="append", default=[], metavar="NAMESPACE",
                       help=f"judge this namespace's objects as in a namespace labelled "
                            f"{INJECT_LABEL}={NAMESPACE_OPT_IN} (also /validate/enabled-namespace's rules); repeat "
                            "for more. A Namespace object labelled so in OLD or NEW counts too")
    check.add_argument("--tls-exceptions", choices=["off", "policy"], default="off",
                       help="judge as a webhook run with this --tls-exceptions: policy lets through a TLS change the "
                            f"pod template's {TLS_CHANGE_ANNOTATION} names (where the admission policies then ask "
                            "RBAC whether its requester is granted it; check cannot); off refuses it")
    check.add_argument("--allow-empty", action="store_true",
                       help="accept an OLD or NEW that holds no Kubernetes object (by default an error: a failed "
                            "`helm template` must not pass as everything deleted)")
    output_flag(check, json_help="json is one object with allowed, counts and each update's verdict")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tls_injector.offline import InputError  # noqa: PLC0415 - YAML only here
    from tls_injector.offline.check import check, enabled_namespaces, load_manifests, render, render_json  # noqa: PLC0415

    if args.old == "-" and args.new == "-":
        parser.error("only one of --old and --new can be read from stdin")
    if problem := profile_problem(args):
        parser.error(problem)
    try:
        settings = ServeSettings(rules_file=args.rules, tls_exceptions=args.tls_exceptions == "policy")
        handlers = admission_handlers(settings, profiles=profile_bounds(args))
        old = load_manifests(args.old, sys.stdin, allow_empty=args.allow_empty)
        new = load_manifests(args.new, sys.stdin, allow_empty=args.allow_empty)
        enabled = enabled_namespaces(old, new, named=args.namespace_enabled)
        report = check(old, new, handlers.validate, enabled_handler=handlers.validate_enabled_namespace,
                       enabled=enabled)
    except InputError as error:  # a rules file's error too
        return fail("check", str(error))
    print(structured(render_json(report), args.output).rstrip("\n") if wants_structure(args) else render(report))
    return EXIT_FINDINGS if report.rejected else EXIT_OK


COMMAND = Command(
    name="check", add=add, run=run,
    help="offline: the /validate verdict for an update (exit 0 allowed, 1 rejected, 2 bad input)",
    description="Pair the objects of OLD and NEW by apiVersion, kind, namespace and name and judge each "
                "pair as an UPDATE with the same handler as /validate. OLD and NEW are YAML/JSON files "
                "(multi-document), directories of them, or - for stdin. An object only in NEW is created and one "
                "only in OLD deleted: both always allowed, so they are only counted.",
    examples=(
        "tls-injector check --old before.yaml --new after.yaml",
        "git show HEAD~1:deploy.yaml | tls-injector check --old - --new deploy.yaml",
        "tls-injector check --old old/ --new new/ -o json       # one JSON object, for a CI step to read",
    ))
