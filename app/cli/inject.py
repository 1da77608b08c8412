"""`tls-injector inject`: manifests with their pod templates injected as the webhook would."""

from __future__ import annotations

import argparse
import sys

from app.cli.command import EXIT_OK, Command, fail
from app.cli.flags import mode_flag
from app.injection import InjectionOptions


def add(inject: argparse.ArgumentParser) -> None:
    inject.add_argument("-f", "--filename", required=True, action="append",
                        help="a YAML or JSON file of one or more documents (kind: List included), a directory "
                             "(its *.yaml, *.yml and *.json, recursively, in sorted order), or - for stdin; "
                             "repeat for more")
    inject.add_argument("--all", action="store_true", dest="include_unlabelled",
                        help="inject every template not labelled false, as in an opted-in namespace")
    inject.add_argument("--pod-certificates", choices=["on", "off"], default="off",
                        help="whether the target cluster serves pod certificates and ClusterTrustBundles (1.35+ "
                             "with the beta, 1.37+); off: templates asking for them get the Secret")
    inject.add_argument("--allow-empty", action="store_true",
                        help="accept input that holds no Kubernetes object (by default an error: a failed "
                             "`helm template` must not pass as nothing to inject)")
    mode_flag(inject)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from app.offline import InputError, inject_locations  # noqa: PLC0415 - YAML only here

    if args.filename.count("-") > 1:
        parser.error("stdin (-) can be read only once")
    options = InjectionOptions(pod_certificates=args.pod_certificates == "on", default_mode=args.default_mode)
    try:  # nothing is printed unless every file could be injected
        result = inject_locations(args.filename, sys.stdin, options=options, include_unlabelled=args.include_unlabelled,
                                  allow_empty=args.allow_empty, progress_to=sys.stderr)
    except InputError as error:
        return fail("inject", str(error))
    for warning in result.warnings:
        print(f"tls-injector inject: warning: {warning}", file=sys.stderr)
    sys.stdout.write(result.text)
    return EXIT_OK


COMMAND = Command(name="inject", add=add, run=run,
                  help="print manifests with their pod templates injected as the webhook would")
