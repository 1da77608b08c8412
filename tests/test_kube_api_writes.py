"""The client's writes (app/kube/api.py): bodies are encoded by us (orjson) and sent through the official
client's own connection pool; the answer, the errors and the bounds are as for every other call."""

from __future__ import annotations

import socket
from typing import Any

import kubernetes.client
import pytest

from tests.kubeapi import Emulator
from tls_injector.kube import CONFIG_MAPS, AlreadyExists, Conflict, KubeApi, NotFound, Unavailable
from tls_injector.kube.bounded import Deadline
from tls_injector.names import FIELD_MANAGER

# Any text a ConfigMap may hold: non-ASCII, quotes, backslashes, control characters; ~0.5 MiB (a
# ConfigMap holds up to 1 MiB).
TEXT = "é漢字🙂 \"quoted\" back\\slash\ttab\nline\u0000" * 12_000


def _cm(name: str, value: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
            "data": {"v": value}}


@pytest.mark.parametrize("deadline", [None, 30.0], ids=["own cluster", "a member's deadline"])
def test_what_we_write_is_what_is_stored_and_read_back(kubeapi: Emulator, deadline: float | None) -> None:
    api = KubeApi(kubeapi.api_client(), deadline=Deadline(deadline) if deadline else None)
    created = api.create(CONFIG_MAPS, _cm("a", TEXT), namespace="default")
    assert created["data"] == {"v": TEXT} == kubeapi.get("configmaps", "a", "default")["data"]
    replaced = api.replace(CONFIG_MAPS, {**created, "data": {"v": "ü"}})
    assert api.get(CONFIG_MAPS, "a", namespace="default")["data"] == {"v": "ü"}
    with pytest.raises(Conflict):  # the version it was read at is gone
        api.replace(CONFIG_MAPS, {**created, "data": {"v": "stale"}})
    with pytest.raises(AlreadyExists):
        api.create(CONFIG_MAPS, _cm("a", "again"), namespace="default")
    with pytest.raises(Conflict):
        api.delete(CONFIG_MAPS, "a", namespace="default", resource_version=created["metadata"]["resourceVersion"])
    api.delete(CONFIG_MAPS, "a", namespace="default", resource_version=replaced["metadata"]["resourceVersion"])
    with pytest.raises(NotFound):
        api.get(CONFIG_MAPS, "a", namespace="default")
    assert (api.calls["create"], api.calls["update"], api.errors["Conflict"]) == (2, 2, 2)


def test_a_write_to_a_server_that_is_not_there_is_unavailable_and_counted() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = kubernetes.client.Configuration(host=f"http://127.0.0.1:{port}")
    config.retries = 0
    api = KubeApi(kubernetes.client.ApiClient(config), timeout=2)
    with pytest.raises(Unavailable):
        api.create(CONFIG_MAPS, _cm("a", "x"), namespace="default")
    assert api.errors["Unavailable"] == 1
    with pytest.raises(Unavailable):  # an answer dropped unread fails as loudly, counted once
        api.post(CONFIG_MAPS, _cm("a", "x"), namespace="default")
    assert api.errors["Unavailable"] == 2


def test_every_write_names_our_field_manager_and_no_other_call_does(kubeapi: Emulator) -> None:
    """The apiserver records the fields each write sets under its fieldManager (tests/cluster/test_contract.py
    reads them back from kube-apiserver); a read or a delete sets no field and names none."""
    client = kubeapi.api_client()
    sent: list[tuple[str, str | None]] = []
    serialize = client.param_serialize

    def spy(method: str, resource_path: str, **kwargs: Any) -> Any:
        sent.append((method, dict(kwargs.get("query_params") or []).get("fieldManager")))
        return serialize(method, resource_path, **kwargs)

    client.param_serialize = spy  # type: ignore[method-assign]
    api = KubeApi(client)
    created = api.create(CONFIG_MAPS, _cm("a", "1"), namespace="default")
    api.replace(CONFIG_MAPS, {**created, "data": {"v": "2"}})
    api.overwrite(CONFIG_MAPS, {**created, "data": {"v": "3"}})
    assert api.post(CONFIG_MAPS, _cm("b", "1"), namespace="default") is None
    assert kubeapi.get("configmaps", "b", "default")["data"] == {"v": "1"}
    api.get(CONFIG_MAPS, "a", namespace="default")
    api.delete(CONFIG_MAPS, "a", namespace="default")
    assert sent == [("POST", FIELD_MANAGER), ("PUT", FIELD_MANAGER), ("PUT", FIELD_MANAGER), ("POST", FIELD_MANAGER),
                    ("GET", None), ("DELETE", None)]
    assert FIELD_MANAGER == "tls-injector"
