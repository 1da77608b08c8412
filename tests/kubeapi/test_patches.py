"""The patch flavours on plain objects, checked against hand-computed results (jsonpatch is the oracle
for JSON patch: the emulator applies it with the library, so only errors are exercised here)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kubeapi import patches
from tests.kubeapi.errors import ApiError

SMP, MERGE, JSON = patches.STRATEGIC_PATCH, patches.MERGE_PATCH, patches.JSON_PATCH
POD = {"metadata": {"name": "p", "finalizers": ["a"]},
       "spec": {"containers": [{"name": "app", "image": "v1", "ports": [{"containerPort": 80, "name": "http"}]}],
                "volumes": [{"name": "data", "emptyDir": {}}, {"name": "tls", "secret": {"secretName": "x"}}]}}


@pytest.mark.parametrize(("kind", "patch", "expected"), [
    (MERGE, {"spec": {"volumes": [{"name": "new"}]}}, {**POD["spec"], "volumes": [{"name": "new"}]}),
    (SMP, {"spec": {"volumes": [{"name": "new", "emptyDir": {}}]}},
     {**POD["spec"], "volumes": [{"name": "new", "emptyDir": {}}, *POD["spec"]["volumes"]]}),  # new ones first
    (SMP, {"spec": {"volumes": [{"name": "tls", "$patch": "delete"}]}},
     {**POD["spec"], "volumes": [{"name": "data", "emptyDir": {}}]}),
    (SMP, {"spec": {"volumes": [{"name": "only"}, {"$patch": "replace"}]}},
     {**POD["spec"], "volumes": [{"name": "only"}]}),
    (SMP, {"spec": {"containers": [{"name": "app", "ports": [{"containerPort": 443}]}]}},
     {**POD["spec"], "containers": [{"name": "app", "image": "v1",
                                     "ports": [{"containerPort": 443}, {"containerPort": 80, "name": "http"}]}]}),
    (SMP, {"spec": {"containers": [{"name": "app", "image": None}]}},
     {**POD["spec"], "containers": [{"name": "app", "ports": [{"containerPort": 80, "name": "http"}]}]}),
])
def test_strategic_merge_merges_keyed_lists_where_merge_patch_replaces_them(kind: str, patch: dict[str, Any],
                                                                           expected: dict[str, Any]) -> None:
    assert patches.apply(kind, POD, patch, plural="pods")["spec"] == expected


def test_finalizers_merge_as_a_set_and_delete_from_primitive_list_removes() -> None:
    added = patches.apply(SMP, POD, {"metadata": {"finalizers": ["b", "a"]}}, plural="pods")
    assert added["metadata"]["finalizers"] == ["b", "a"], "in the patch's order, as the apiserver merges them"
    removed = patches.apply(SMP, added, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}, plural="pods")
    assert removed["metadata"]["finalizers"] == ["b"]


def test_the_original_object_is_never_modified() -> None:
    before = repr(POD)
    patches.apply(SMP, POD, {"spec": {"containers": [{"name": "app", "image": "v2"}]}}, plural="pods")
    patches.apply(MERGE, POD, {"spec": {"volumes": None}}, plural="pods")
    patches.apply(JSON, POD, [{"op": "remove", "path": "/spec/volumes/0"}], plural="pods")
    assert repr(POD) == before


@pytest.mark.parametrize(("kind", "patch", "code"), [
    (JSON, {"op": "add"}, 400),  # not a list of operations
    (JSON, [{"op": "frobnicate", "path": "/x"}], 400),
    (JSON, [{"op": "remove", "path": "/spec/nothing"}], 422),
    (MERGE, ["not", "an", "object"], 400),
    (SMP, {"spec": {"volumes": [{"emptyDir": {}}]}}, 400),  # a keyed list element without its key
    ("application/apply-patch+yaml", {}, 415),
])
def test_bad_patches_are_answered_like_the_real_api(kind: str, patch: Any, code: int) -> None:
    with pytest.raises(ApiError) as exc:
        patches.apply(kind, POD, patch, plural="pods")
    assert exc.value.code == code
