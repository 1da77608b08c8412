"""The offline tools: `inject` and `check` over manifests, and the rules files `serve`, `check` and
`export-policy` read.

Files in, text out: one reader of manifests (app/offline/manifests.py), one YAML library (ruamel.yaml,
app/offline/yamltext.py), one error for input that cannot be used (InputError, one line naming the
file). The deciding is done by the pure core (tls_injector.injection, tls_injector.rules,
tls_injector.admission); nothing here talks to a cluster or the network.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from tls_injector.injection import InjectionOptions
from tls_injector.offline.errors import InputError
from tls_injector.offline.inject import Injected, inject
from tls_injector.offline.manifests import read_each
from tls_injector.offline.progress import progress

__all__ = ["Injected", "InputError", "inject_locations"]


def inject_locations(locations: Sequence[str], stdin: TextIO, *, options: InjectionOptions,
                     include_unlabelled: bool = False, allow_empty: bool = False,
                     progress_to: TextIO | None = None) -> Injected:
    """`tls-injector inject -f ...`: every location read, then injected. A file that cannot be read or
    injected is left out and named in `errors`, one line each, and the others go on (as `kubectl apply
    -f DIR` goes on past a bad file): a directory with three broken files reports all three at once."""
    with progress(progress_to, what="tls-injector inject: reading", unit="document") as shown:
        sources, errors = read_each(locations, stdin, allow_empty=allow_empty, done=shown.advance)
        shown.phase("tls-injector inject", total=sum(len(source.documents) for source in sources))
        result = inject(sources, options=options, include_unlabelled=include_unlabelled, done=shown.advance)
    result.errors[:0] = errors
    return result
