"""The `tls-injector` command: parse flags, build settings once, wire the parts together.

One module per command (serve, reconcile, bootstrap, doctor, inject, check, export-policy, status, renew,
version, completion), each with
`add` (its flags) and `run` (its body); `parser` wires them; `flags` holds what several commands share
and turns those flags into settings; `handlers` builds the admission handlers `serve` and `check` run.

Exit status, the same for every command: 0 ok; 1 findings or rejections (a rejected update, a pass that
did not converge, a webhook the API server would not trust); 2 usage or input error (bad flags, an
unreadable or invalid file, no cluster configured or none answering, a start-up failure).
"""

from __future__ import annotations

from tls_injector.cli.handlers import AdmissionHandlers, admission_handlers, build_handlers
from tls_injector.cli.parser import main

__all__ = ["AdmissionHandlers", "admission_handlers", "build_handlers", "main"]
