"""What every command is made of, the exit statuses they share, and their one-line error."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
LOG_LEVELS = ["debug", "info", "warning", "error"]


@dataclass(frozen=True)
class Command:
    """One `tls-injector <name>`: its flags (`add`) and its body (`run`, which returns the exit status;
    the parser is the command's own, so `parser.error` prints that command's usage)."""

    name: str
    help: str
    add: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, argparse.ArgumentParser], int]
    description: str | None = None
    # `tls-injector <name> --help` ends with these, each `command  # what it does`, ready to paste.
    examples: tuple[str, ...] = ()

    @property
    def epilog(self) -> str | None:
        return "examples:\n" + "\n".join(f"  {example}" for example in self.examples) if self.examples else None


def fail(command: str, message: str) -> int:
    """Print `tls-injector <command>: <message>` on stderr; return the usage/input-error status."""
    print(f"tls-injector {command}: {message}", file=sys.stderr)
    return EXIT_USAGE
