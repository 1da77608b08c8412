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
    mode_flag(inject)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from app.manifests import ManifestError, inject_manifests, read_texts  # noqa: PLC0415 - YAML only here

    if args.filename.count("-") > 1:
        parser.error("stdin (-) can be read only once")
    options = InjectionOptions(pod_certificates=args.pod_certificates == "on", default_mode=args.default_mode)
    outputs = []
    try:
        for name, text in read_texts(args.filename, sys.stdin):
            try:
                result = inject_manifests(text, options=options, include_unlabelled=args.include_unlabelled)
            except ManifestError as error:
                raise ManifestError(f"{name}: {error}") from None
            outputs.append(result.text)
            for warning in result.warnings:
                print(f"tls-injector inject: warning: {name}: {warning}", file=sys.stderr)
    except ManifestError as error:  # nothing is printed unless every file could be injected
        return fail("inject", str(error))
    sys.stdout.write("---\n".join(text for text in outputs if text))
    return EXIT_OK


COMMAND = Command(name="inject", add=add, run=run,
                  help="print manifests with their pod templates injected as the webhook would")
