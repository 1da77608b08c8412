"""What a check reports, and the two ways of printing a report: lines for people, JSON for machines."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import orjson

Status = Literal["ok", "warning", "error"]
SYMBOLS: dict[Status, str] = {"ok": "✔", "warning": "⚠", "error": "✖"}
# One line per offending object, cut here in the text output: enough to start fixing, and a cluster
# with 10,000 unready pods still prints a screenful. JSON carries up to JSON_DETAILS, then a count.
TEXT_DETAILS = 10
JSON_DETAILS = 500


@dataclass(frozen=True)
class Result:
    """One check: `title` says what should hold, `message` what was found, `hint` what to do about it."""

    category: str
    title: str
    status: Status
    message: str = ""
    details: tuple[str, ...] = ()
    hint: str = ""


@dataclass(frozen=True)
class Category:
    name: str
    results: list[Result] = field(default_factory=list)


def ok(category: str, title: str, message: str = "") -> Result:
    return Result(category, title, "ok", message)


def warning(category: str, title: str, message: str, *, hint: str, details: Sequence[str] = ()) -> Result:
    return Result(category, title, "warning", message, tuple(details), hint)


def error(category: str, title: str, message: str, *, hint: str, details: Sequence[str] = ()) -> Result:
    return Result(category, title, "error", message, tuple(details), hint)


def exit_code(results: Iterable[Result]) -> int:
    """1 when any check failed; warnings alone do not fail the run (the CLI's 0/1/2 convention)."""
    return 1 if any(r.status == "error" for r in results) else 0


def render_text(results: Sequence[Result]) -> str:
    """`linkerd check` style: a heading per category, one line per check, details and hint indented.

    Each category once, where it first appears: a check of one category may run among another's (the
    client CA's, with the client certificates it depends on), and a heading printed twice reads as two
    different things."""
    lines: list[str] = []
    category = None
    first = {c: i for i, c in enumerate(dict.fromkeys(r.category for r in results))}
    for r in sorted(results, key=lambda r: first[r.category]):  # stable: the checks' order within each
        if r.category != category:
            category = r.category
            lines += ["", category, "-" * len(category)] if lines else [category, "-" * len(category)]
        lines.append(f"{SYMBOLS[r.status]} {r.title}" + (f": {r.message}" if r.message else ""))
        lines += [f"    {d}" for d in r.details[:TEXT_DETAILS]]
        if len(r.details) > TEXT_DETAILS:
            lines.append(f"    ... and {len(r.details) - TEXT_DETAILS} more (-o json lists up to {JSON_DETAILS})")
        if r.hint and r.status != "ok":
            lines.append(f"    hint: {r.hint}")
    lines += ["", _summary(results)]
    return "\n".join(lines) + "\n"


def _summary(results: Sequence[Result]) -> str:
    errors = sum(r.status == "error" for r in results)
    warnings = _count(sum(r.status == "warning" for r in results), "warning")
    if errors:
        return f"Status check results are {SYMBOLS['error']}: {errors} failed, {warnings}"
    if warnings != _count(0, "warning"):
        return f"Status check results are {SYMBOLS['ok']} with {warnings}"
    return f"Status check results are {SYMBOLS['ok']}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def render_json(results: Sequence[Result]) -> str:
    checks = [
        {"category": r.category, "title": r.title, "status": r.status, "message": r.message,
         "details": list(r.details[:JSON_DETAILS]), "details_omitted": max(0, len(r.details) - JSON_DETAILS),
         "hint": r.hint}
        for r in results
    ]
    summary = {status: sum(r.status == status for r in results) for status in SYMBOLS}
    body = {"ok": exit_code(results) == 0, "summary": summary, "checks": checks}
    return orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n"
