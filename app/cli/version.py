"""`tls-injector version`: this program's version (kubectl's `version --client`), also as JSON or YAML."""

from __future__ import annotations

import argparse
import platform
import sys
from importlib import metadata

import orjson

from tls_injector.cli.command import EXIT_OK, Command
from tls_injector.cli.output import output_flag, structured
from tls_injector.names import NAME


def installed_version() -> str:
    try:
        return metadata.version(NAME)
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def add(version: argparse.ArgumentParser) -> None:
    output_flag(version)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.output == "text":
        sys.stdout.write(f"{NAME} {installed_version()}\n")
        return EXIT_OK
    body = {"version": installed_version(), "python": platform.python_version()}
    sys.stdout.write(structured(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n", args.output))
    return EXIT_OK


COMMAND = Command(
    name="version", add=add, run=run, help="print the version (as --version does; -o json or yaml for a script)",
    description="Print this program's version. It reads no cluster: what the cluster runs is in `tls-injector "
                "doctor` and the pods' images.",
    examples=("tls-injector version -o json                          # {\"version\": ..., \"python\": ...}",))
