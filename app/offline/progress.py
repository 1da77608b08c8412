"""A progress line on stderr for a command that runs long, and only where a person is watching."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from tqdm import tqdm

# A pause longer than this without output is one a person notices; quicker runs print no line at all.
SHOW_AFTER_SECONDS = 1.0


@contextmanager
def progress(stream: TextIO | None, *, total: int, what: str, unit: str) -> Iterator[Callable[[int], object]]:
    """`advance(n)` for the caller; a line on `stream` only when it is a terminal and the run takes longer
    than SHOW_AFTER_SECONDS (a pipe or a CI log gets nothing); cleared when done."""
    shown = stream is not None and stream.isatty()
    with tqdm(total=total, desc=what, unit=unit, file=stream, disable=not shown, delay=SHOW_AFTER_SECONDS,
              leave=False, dynamic_ncols=True) as bar:
        yield bar.update
