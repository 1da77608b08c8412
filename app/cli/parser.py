"""The argparse wiring: one sub-parser per command, and `main`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tls_injector.cli import (
    bootstrap,
    check,
    completion,
    doctor,
    export_policy,
    inject,
    reconcile,
    renew,
    serve,
    status,
    version,
)
from tls_injector.cli.command import EXIT_USAGE, Command
from tls_injector.cli.flags import HelpFormatter
from tls_injector.names import INJECT_LABEL, NAME, NAMESPACE_OPT_IN, POD_OPT_IN

DESCRIPTION = f"""Give every workload that opts in working TLS, and keep it working through certificate and CA
rotation: a mutating webhook mounts each pod's certificate Secret and the trust bundle, a validating
webhook refuses updates that would turn TLS off or swap it under running clients, and a reconciler
issues, renews and rotates the certificates. A workload opts in with the label
{INJECT_LABEL}: "{POD_OPT_IN}" on its pod template (or its namespace's {INJECT_LABEL}: {NAMESPACE_OPT_IN}).

Exit status, the same for every command: 0 ok; 1 findings or rejections (a rejected update, a pass that
did not converge, a webhook the API server would not trust); 2 usage or input error (bad flags, an
unreadable or invalid file, no cluster configured or none answering, a start-up failure).
"""
EPILOG = """a first look, without a cluster:
  tls-injector serve                              # the webhook on port 8443, self-signed, no cluster needed
  tls-injector inject -f deploy.yaml              # what the webhook would add to these pod templates
  tls-injector check --old before.yaml --new after.yaml   # would the validating webhook allow the update?

`tls-injector COMMAND --help` describes each command; docs/install.md installs it in a cluster.
"""
# In the order `tls-injector --help` lists them.
COMMANDS: tuple[Command, ...] = (serve.COMMAND, check.COMMAND, export_policy.COMMAND, reconcile.COMMAND,
                                 bootstrap.COMMAND, inject.COMMAND, doctor.COMMAND, status.COMMAND, renew.COMMAND,
                                 version.COMMAND, completion.COMMAND)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # `serve --workers N` starts workers with it
    if not hasattr(args, "run"):
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    # Each command gets its own parser, so `parser.error` prints that command's usage, not the top one:
    # an unknown flag too (parse_args would report it as the top parser's, with the top usage).
    if unknown:
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    code: int = args.run(args, args.command_parser)
    return code


def build_parser() -> argparse.ArgumentParser:
    # allow_abbrev=False on every parser: a long flag is taken only as spelled (`--time` is not --timeout),
    # as kubectl takes them, so a script that works today keeps its meaning when a flag is added tomorrow.
    parser = argparse.ArgumentParser(prog=NAME, description=DESCRIPTION, epilog=EPILOG, formatter_class=HelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version.installed_version()}")
    sub = parser.add_subparsers(title="commands")
    for command in COMMANDS:
        child = sub.add_parser(command.name, help=command.help, description=command.description or command.help,
                               epilog=command.epilog, formatter_class=HelpFormatter, allow_abbrev=False)
        command.add(child)
        child.set_defaults(run=command.run, command_parser=child)
    return parser

