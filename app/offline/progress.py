"""A progress line on stderr for a command that runs long, and only where a person is watching."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Never, TextIO

from tqdm import tqdm

# A pause longer than this without output is one a person notices; quicker runs print no line at all.
SHOW_AFTER_SECONDS = 1.0
# The size taken on a terminal that reports none (0 by 0: a fresh pseudo-terminal, such as `script` or a CI
# runner's allocated tty give), where following the terminal's would cut the line to nothing (0 columns) or
# leave it no row to stand on (tqdm counts rows from the bottom).
UNSIZED_COLUMNS, UNSIZED_ROWS = 80, 24


class Progress:
    def __init__(self, bar: tqdm[Never]) -> None:
        self._bar = bar

    def advance(self, count: int = 1) -> None:
        self._bar.update(count)

    def phase(self, what: str, *, total: int | None) -> None:
        """Count again from zero, for the next step of the same command."""
        self._bar.reset(total=total)
        self._bar.set_description(what, refresh=False)


@contextmanager
def progress(stream: TextIO | None, *, what: str, unit: str) -> Iterator[Progress]:
    """A line on `stream` only when it is a terminal and the run takes longer than SHOW_AFTER_SECONDS
    (a pipe or a CI log gets nothing); cleared when done, so only the command's own output stays."""
    shown = stream is not None and stream.isatty()
    sized = shown and min(_size(stream)) > 0
    with tqdm(desc=what, unit=unit, file=stream, disable=not shown, delay=SHOW_AFTER_SECONDS, leave=False,
              dynamic_ncols=sized, ncols=None if sized else UNSIZED_COLUMNS,
              nrows=None if sized else UNSIZED_ROWS) as bar:
        yield Progress(bar)


def _size(stream: TextIO | None) -> tuple[int, int]:
    """The terminal's columns and rows; 0 where it reports none."""
    try:
        size = os.get_terminal_size(stream.fileno()) if stream is not None else None
    except (OSError, ValueError):
        size = None
    return (size.columns, size.lines) if size is not None else (0, 0)
