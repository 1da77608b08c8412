"""`-o text|json|yaml`: the report formats of the commands that print one (check, doctor, status, version).

The YAML is the JSON report itself, read back and written as YAML (kubectl's `-o yaml` beside its `-o json`),
so the two never say different things: one report, two spellings.
"""

from __future__ import annotations

import argparse

import orjson

from tls_injector.cli.flags import Flags

FORMATS = ("text", "json", "yaml")


def output_flag(command: Flags, *, json_help: str = "") -> None:
    command.add_argument("-o", "--output", choices=FORMATS, default="text",
                         help="report format" + (f": {json_help}" if json_help else "")
                              + "; yaml is the same report as json, written as YAML")


def structured(json_text: str, output: str) -> str:
    """A JSON report as `-o` asks for it: as it is for json, as YAML for yaml."""
    if output != "yaml":
        return json_text
    from tls_injector.offline.yamltext import dump  # noqa: PLC0415 - the one YAML library (tls_injector.offline), loaded when asked

    text: str = dump(orjson.loads(json_text))
    return text


def wants_structure(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "output", "text") in ("json", "yaml"))
