"""JSON Patch (RFC 6902) operations derived from an injection plan.

Nothing is added under a list or map that does not exist: a missing one is created whole, with its
contents, by a single `add` (which also replaces an explicit null). Pointer tokens are escaped per
RFC 6901, so an annotation key such as `tls-injector.io/injected` becomes `tls-injector.io~1injected`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.admission import JsonPatchOp
from app.injection.plan import Plan


def pointer(*tokens: str | int) -> str:
    """An RFC 6901 JSON pointer: `~` becomes `~0` before `/` becomes `~1` (the order matters)."""
    return "/" + "/".join(map(_escape, tokens)) if tokens else ""


def _escape(token: str | int) -> str:
    text = token if isinstance(token, str) else str(token)
    # Most tokens need no escaping; testing first halves the cost of building a pointer.
    return text.replace("~", "~0").replace("/", "~1") if "~" in text or "/" in text else text


def patch_ops(plan: Plan) -> list[JsonPatchOp]:
    # The paths to volumes, mounts and env are made of our own field names and indexes, which need no
    # escaping, so they are written out directly; only annotation keys (the pod's own) go through pointer().
    ops = _append("/spec/volumes", plan.volumes, exists=plan.volumes_exist)
    for change in plan.containers:
        container = f"/spec/{change.field}/{change.position}"
        ops += _append(container + "/volumeMounts", change.mounts, exists=change.mounts_exist)
        ops += _append(container + "/env", change.env, exists=change.env_exist)
    return ops + _annotations(plan)


def _append(path: str, items: Sequence[dict[str, Any]], *, exists: bool) -> list[JsonPatchOp]:
    if not items:
        return []
    if not exists:
        return [{"op": "add", "path": path, "value": list(items)}]
    end = path + "/-"
    return [{"op": "add", "path": end, "value": item} for item in items]


def _annotations(plan: Plan) -> list[JsonPatchOp]:
    if not plan.annotations:
        return []
    values = {change.key: change.value for change in plan.annotations}
    if plan.metadata == "missing":
        return [JsonPatchOp(op="add", path="/metadata", value={"annotations": values})]
    if plan.metadata == "no-annotations":
        return [JsonPatchOp(op="add", path="/metadata/annotations", value=values)]
    return [
        JsonPatchOp(op="replace" if c.present else "add", path=pointer("metadata", "annotations", c.key), value=c.value)
        for c in plan.annotations
    ]
