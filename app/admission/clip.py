"""Bounding what a client sent before it is echoed into a response or a log.

Anything in a review can be as large as the body cap allows; a 1 MB `kind` or `name` echoed whole
would make every error response and log line that large. Every echoed value goes through `clip`.
"""

from __future__ import annotations

# Enough for any real Kubernetes name (at most 253 characters) or field path, with room to spare.
MAX_ECHO_CHARS = 256


def clip(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """`text` itself when short enough; else its head and how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...(+{len(text) - limit} characters)"


def shown(value: object, limit: int = MAX_ECHO_CHARS) -> str:
    """A JSON value as an error message quotes it: scalars as written (clipped), containers by type only,
    so a megabyte object is never turned into text just to be cut."""
    if isinstance(value, str):
        return repr(clip(value, limit))
    if value is None or isinstance(value, bool | int | float):
        return clip(repr(value), limit)
    return "an object" if isinstance(value, dict) else "an array" if isinstance(value, list) else "a value"
