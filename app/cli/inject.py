"""`tls-injector inject`: manifests with their pod templates injected as the webhook would."""

from __future__ import annotations

import argparse
import sys

from tls_injector.cli.cluster import profile_bounds, profile_flags, profile_problem
from tls_injector.cli.command import EXIT_OK, EXIT_USAGE, Command, fail
from tls_injector.cli.flags import mode_flag
from tls_injector.injection import InjectionOptions
from tls_injector.names import INJECT_LABEL, POD_OPT_IN, POD_OPT_OUT


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
    profile_flags(inject)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tls_injector.offline import inject_locations  # noqa: PLC0415 - YAML only here

    if args.filename.count("-") > 1:
        parser.error("stdin (-) can be read only once")
    if problem := profile_problem(args):
        parser.error(problem)
    options = InjectionOptions(pod_certificates=args.pod_certificates == "on", default_mode=args.default_mode,
                               profiles=profile_bounds(args))
    result = inject_locations(args.filename, sys.stdin, options=options, include_unlabelled=args.include_unlabelled,
                              allow_empty=args.allow_empty, progress_to=sys.stderr)
    for warning in result.warnings:
        print(f"tls-injector inject: warning: {warning}", file=sys.stderr)
    sys.stdout.write(result.text)
    # Said unless the input was allowed to be empty and holds no template: a run told to expect nothing.
    if result.opted_in == 0 and (result.text or not result.errors) and not (args.allow_empty and not result.templates):
        print(f"tls-injector inject: {nothing_opted_in(result.templates)}", file=sys.stderr)
    for error in result.errors:  # last, where a person reading the terminal looks
        fail("inject", error)
    # The files that could be injected are printed; a bad one makes the whole run fail, so a pipeline
    # (`set -o pipefail`) or CI step stops even though most of the output is there.
    return EXIT_USAGE if result.errors else EXIT_OK


def nothing_opted_in(templates: int) -> str:
    """Why the output is the input: said, so an unlabelled workload is not mistaken for an injected one."""
    if templates == 0:
        return "0 templates opted in: the input has no pod template (Pod, Deployment, StatefulSet, DaemonSet, " \
               "ReplicaSet, Job, CronJob); printed unchanged"
    which = "the pod template is not" if templates == 1 else f"none of the {templates} pod templates is"
    return (f"0 templates opted in: {which} labelled {INJECT_LABEL}: \"{POD_OPT_IN}\" (--all injects every "
            f"template not labelled \"{POD_OPT_OUT}\", as in a namespace that opted in); printed unchanged")


COMMAND = Command(
    name="inject", add=add, run=run, help="print manifests with their pod templates injected as the webhook would",
    description="Offline, no cluster needed: print the manifests with the volumes and mounts /mutate would add to "
                f"each pod template labelled {INJECT_LABEL}: \"{POD_OPT_IN}\" (every workload kind, kind: List "
                "included); everything else is printed as it came, comments kept. When no template opted in, "
                "it says so on stderr. A file that cannot be read or injected is reported on stderr and left "
                "out; the others are still printed, and the exit status is then 2.",
    examples=(
        f"tls-injector inject -f deploy.yaml             # only templates labelled {INJECT_LABEL}: \"{POD_OPT_IN}\"",
        "tls-injector inject -f manifests/ --all        # every template, as in an opted-in namespace",
        "helm template my-app ./chart | tls-injector inject -f - | kubectl diff -f -",
    ))
