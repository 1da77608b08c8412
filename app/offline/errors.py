"""The one error of the offline tools: input that cannot be used, named by file (and line:column)."""

from __future__ import annotations


class InputError(ValueError):
    """Input the offline tools cannot use; exit status 2.

    The message is one line and starts with where: `FILE: ...`, `FILE:LINE:COL: ...` or
    `FILE: document N: ...`, so a command prints it as `tls-injector <command>: <message>`.
    """
