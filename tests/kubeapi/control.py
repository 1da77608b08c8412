"""Control endpoints under ``/_emulator/``, for an emulator running in another process.

A benchmark that runs ``tls-injector reconcile --once`` as its own process needs the emulator
elsewhere (so that the reconciler's time and memory are its own), and still wants to seed objects,
read the call counters and inject faults. These paths are outside the Kubernetes URL space, so no
client of the real API can reach them by accident.

    GET  /_emulator/calls                 {"total": n, "writes": n, "by": {"create secrets": n, ...}}
    POST /_emulator/add                   body {"items": [objects]}: stored directly, not logged
    POST /_emulator/<control>             body: keyword arguments of the Emulator method of that name
                                          (fail_next, conflict_on_first_write, outage, end_outage,
                                          drop_watches, compact, clear_faults, reset_log)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.kubeapi.errors import ApiError, bad_request

if TYPE_CHECKING:
    from tests.kubeapi import Emulator

PREFIX = "/_emulator/"
_CONTROLS = frozenset({"fail_next", "conflict_on_first_write", "outage", "end_outage", "drop_watches", "compact",
                       "clear_faults", "reset_log"})


def handle(emulator: Emulator, method: str, path: str, body: Any) -> dict[str, Any]:
    """Serve one control request; raises ApiError (404 for unknown paths, 400 for bad arguments)."""
    action = path.removeprefix(PREFIX).strip("/")
    if method == "GET" and action == "calls":
        return _calls(emulator)
    if method == "POST" and action == "add":
        items = body.get("items") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise bad_request('expected {"items": [objects]}')
        return {"added": len([emulator.add(item) for item in items])}
    if method == "POST" and action in _CONTROLS:
        kwargs = body if isinstance(body, dict) else {}
        if action == "outage" and kwargs.get("refuse"):
            raise bad_request("a refusing outage cannot be ended through the server it stops; use code=503")
        try:
            result = getattr(emulator, action)(**kwargs)
        except (TypeError, ValueError) as exc:
            raise bad_request(str(exc)) from exc
        return {"result": result}
    raise ApiError(404, "NotFound", f"no emulator control {method} {path}")


def _calls(emulator: Emulator) -> dict[str, Any]:
    counts = emulator.faults.counts.copy()
    return {"total": sum(counts.values()), "writes": len(emulator.writes()),
            "by": {f"{verb} {resource}": n for (verb, resource), n in sorted(counts.items())}}
