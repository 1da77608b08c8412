"""`tls-injector completion SHELL`: a shell completion script, as `kubectl completion SHELL` writes one.

Written by shtab from the parser itself, so every command, flag and choice the parser knows completes,
and a flag added later completes without anyone editing a script. The script is static: pressing TAB
runs no Python (argcomplete's way starts the program at every TAB). Flags that take a file complete
file names.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tls_injector.cli.command import EXIT_OK, Command

SHELLS = ("bash", "zsh", "tcsh")  # what shtab writes
# Flags whose value is a file (or -): completed with file names rather than nothing.
FILE_FLAGS = ("--old", "--new", "--filename")


def add(completion: argparse.ArgumentParser) -> None:
    completion.add_argument("shell", choices=SHELLS, help="the shell the script is for")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    sys.stdout.write(script(args.shell))
    return EXIT_OK


def script(shell: str) -> str:
    import shtab  # noqa: PLC0415 - only this command needs it

    from tls_injector.cli.parser import build_parser  # noqa: PLC0415 - the parser holds this command: built when run

    root = build_parser()
    for parser in _parsers(root):
        for action in parser._actions:
            if action.type is Path or any(flag in FILE_FLAGS for flag in action.option_strings):
                action.complete = shtab.FILE  # type: ignore[attr-defined]
    text: str = shtab.complete(root, shell=shell)
    return text if text.endswith("\n") else text + "\n"


def _parsers(root: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    subs = [a for a in root._actions if isinstance(a, argparse._SubParsersAction)]
    return [root, *(child for sub in subs for child in sub.choices.values())]


COMMAND = Command(
    name="completion", add=add, run=run, help="print a shell completion script (bash, zsh or tcsh)",
    description="Print a script that completes tls-injector's commands, flags and their choices in SHELL. Load "
                "it in the running shell, or install it where the shell looks for completions.",
    examples=(
        "source <(tls-injector completion bash)                # this bash session",
        "tls-injector completion bash > /etc/bash_completion.d/tls-injector",
        "tls-injector completion zsh > \"${fpath[1]}/_tls-injector\"   # zsh: a directory of $fpath",
    ))
