"""The three PATCH flavours the API accepts for built-in kinds.

- JSON merge patch (RFC 7386): maps merge, ``null`` deletes, lists are replaced.
- Strategic merge patch: as merge, except the lists Kubernetes declares ``patchStrategy: merge`` are
  merged element by element on their merge key (containers and volumes by ``name``, volumeMounts by
  ``mountPath``, webhooks by ``name``, ...), ``metadata.finalizers`` is merged as a set, and the
  ``$patch: delete|replace`` and ``$deleteFromPrimitiveList`` directives are honoured. The merge keys come
  from a table of field-path suffixes rather than the OpenAPI schema: enough for the kinds served here.
  ``$setElementOrder`` and ``$retainKeys`` are accepted and ignored; a merged list is ordered as the
  apiserver orders one without ``$setElementOrder``: the patch's elements in its order, a new one first.
- JSON patch (RFC 6902), applied by the ``jsonpatch`` library.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from tests.kubeapi.errors import ApiError, bad_request

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# Field-path suffix -> merge key, for lists with patchStrategy "merge" (from the k8s.io/api struct tags).
# Longer suffixes win: container ports merge on containerPort, Service ports on port.
_MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("containers",): "name", ("initContainers",): "name", ("ephemeralContainers",): "name",
    ("volumes",): "name", ("env",): "name", ("volumeMounts",): "mountPath", ("volumeDevices",): "devicePath",
    ("imagePullSecrets",): "name", ("hostAliases",): "ip", ("topologySpreadConstraints",): "topologyKey",
    ("containers", "ports"): "containerPort", ("initContainers", "ports"): "containerPort",
    ("spec", "ports"): "port", ("webhooks",): "name", ("ownerReferences",): "uid", ("conditions",): "type",
    ("serviceaccounts", "secrets"): "name", ("schedulingGates",): "name", ("resourceClaims",): "name",
}
_SET_LISTS = {("metadata", "finalizers")}  # primitive lists merged as sets


def apply(content_type: str, current: dict[str, Any], patch: Any, *, plural: str) -> dict[str, Any]:
    """Return the patched copy of ``current``; ``current`` itself is never modified."""
    if content_type == JSON_PATCH:
        return _json_patch(current, patch)
    if content_type not in (MERGE_PATCH, STRATEGIC_PATCH):
        raise ApiError(415, "UnsupportedMediaType",
                       f"the body of the request was in an unknown format - accepted media types include: "
                       f"{JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_PATCH}")
    if not isinstance(patch, dict):
        raise bad_request("a merge patch must be a JSON object")
    if content_type == MERGE_PATCH:
        merged: dict[str, Any] = merge(current, patch)
        return merged
    # The root path carries the plural so ServiceAccount ``secrets`` is told apart from other lists.
    strategic = _strategic_map(current, patch, (plural,))
    return strategic if isinstance(strategic, dict) else {}


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


def _json_patch(current: dict[str, Any], patch: Any) -> dict[str, Any]:
    if not isinstance(patch, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    try:
        result = jsonpatch.apply_patch(current, patch)
    except jsonpatch.InvalidJsonPatch as exc:
        raise bad_request(str(exc)) from exc
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                       f"{exc}") from exc
    if not isinstance(result, dict):
        raise ApiError(422, "Invalid", "the patched object is not a JSON object")
    return result


def _merge_key(path: tuple[str, ...]) -> str | None:
    for size in (2, 1):
        if len(path) >= size and (key := _MERGE_KEYS.get(path[-size:])):
            return key
    return None


def _strategic_map(target: Any, patch: dict[str, Any], path: tuple[str, ...]) -> Any:
    directive = patch.get("$patch")
    body = {k: v for k, v in patch.items() if not k.startswith("$") and not k.startswith("$setElementOrder")}
    if directive == "delete":
        return None
    if directive == "replace" or not isinstance(target, dict):
        return {k: v for k, v in _strip(body).items() if v is not None}
    result = dict(target)
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
    for key, value in body.items():
        merged = _strategic_value(result.get(key), value, (*path, key))
        if merged is None:
            result.pop(key, None)
        else:
            result[key] = merged
    return result


def _strategic_value(target: Any, patch: Any, path: tuple[str, ...]) -> Any:
    if isinstance(patch, dict):
        return _strategic_map(target, patch, path)
    if isinstance(patch, list) and isinstance(target, list):
        if path[-2:] in _SET_LISTS:
            merged = target + [v for v in patch if v not in target]
            return element_order(merged, patch, target, lambda v: v)
        if (key := _merge_key(path)) is not None:
            return _merge_list(target, patch, key, path)
    return _strip(patch)


def _merge_list(target: list[Any], patch: list[Any], key: str, path: tuple[str, ...]) -> list[Any]:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_strip(item) for item in patch if not (isinstance(item, dict) and "$patch" in item)]
    result = list(target)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise bad_request(f"map: {item} does not contain declared merge key: {key}")
        index = next((i for i, old in enumerate(result) if isinstance(old, dict) and old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            result = [old for old in result if not (isinstance(old, dict) and old.get(key) == item[key])]
        elif index is None:
            result.append(_strip(item))
        else:
            result[index] = _strategic_map(result[index], item, path)
    kept = [item for item in patch if not (isinstance(item, dict) and "$patch" in item)]
    return element_order(result, kept, target, lambda item: item.get(key) if isinstance(item, dict) else None)


def element_order(merged: list[Any], patch: list[Any], stored: list[Any], ident: Any) -> list[Any]:
    """The order the apiserver gives a merged list (strategicpatch.normalizeElementOrder): the elements the
    patch names, in the patch's order, and the others in their stored order, each of those placed before
    a patch element that comes after it in the stored list. So a new element comes first, not last."""
    patch_ids, stored_ids = [ident(v) for v in patch], [ident(v) for v in stored]
    named = sorted((v for v in merged if ident(v) in patch_ids), key=lambda v: patch_ids.index(ident(v)))
    others = [v for v in merged if ident(v) not in patch_ids]

    def before(left: Any, right: Any) -> bool:
        return ident(left) in stored_ids and ident(right) in stored_ids and (
            stored_ids.index(ident(left)) < stored_ids.index(ident(right)))

    ordered: list[Any] = []
    while others or named:
        take_other = not named or (others and before(others[0], named[0]))
        ordered.append((others if take_other else named).pop(0))
    return ordered


def _strip(value: Any) -> Any:
    """Remove directives from a value that is stored as given (a new list element, a replaced map)."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value
