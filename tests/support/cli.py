"""Running the CLI in this process as a user's shell would, for tests of what it prints and returns."""

from __future__ import annotations

import pytest

from tls_injector.cli import main


def exit_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """main(argv) whether it returns or argparse exits: (status, stdout, stderr)."""
    try:
        code = main(argv)
    except SystemExit as stop:
        code = int(stop.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
