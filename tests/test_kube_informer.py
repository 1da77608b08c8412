"""The informer cache (app/kube/informer.py) on the emulator's real HTTP watches: one list, then changes
from the watch alone (bookmarks move its version and change nothing), a relist only after 410 Gone."""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.kubeapi import Emulator
from tls_injector.kube import CONFIG_MAPS, KubeApi
from tls_injector.kube.api import WatchEvent
from tls_injector.kube.informer import Informer, Key

Obj = dict[str, Any]


def _cm(name: str, value: str, ns: str = "default") -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns},
            "data": {"v": value}}


def _data_only(obj: Obj) -> Obj | None:
    """A shape that keeps the name and data, and drops what it does not read (labels, say)."""
    meta = obj["metadata"]
    return {"metadata": {"name": meta["name"], "namespace": meta.get("namespace", "")}, "data": obj.get("data")}


def _informer(kubeapi: Emulator, changes: list[tuple[Key, Obj | None, Obj | None]]) -> Informer:
    return Informer(KubeApi(kubeapi.api_client()), CONFIG_MAPS, shape=_data_only,
                    on_change=lambda key, old, new: changes.append((key, old, new)))


def _until(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not seen in time"
        time.sleep(0.05)


def test_a_change_comes_from_the_watch_without_a_new_list(kubeapi: Emulator) -> None:
    kubeapi.add(_cm("a", "1"))
    changes: list[tuple[Key, Obj | None, Obj | None]] = []
    informer, stop = _informer(kubeapi, changes), threading.Event()
    informer.relist()
    assert informer.get(("default", "a")) == {"metadata": {"name": "a", "namespace": "default"}, "data": {"v": "1"}}
    watcher = threading.Thread(target=informer.run, args=(stop,), kwargs={"timeout_seconds": 2})
    watcher.start()
    try:
        api = KubeApi(kubeapi.api_client())
        api.create(CONFIG_MAPS, _cm("b", "2"), namespace="default")
        _until(lambda: informer.get(("default", "b")) is not None)
        time.sleep(2.5)  # past one watch's end (2 s): resumed from its version, not listed again
        stored = api.get(CONFIG_MAPS, "a", namespace="default")
        stored["metadata"]["labels"] = {"unread": "x"}  # the shape drops labels: no change to tell
        api.replace(CONFIG_MAPS, stored)
        api.delete(CONFIG_MAPS, "b", namespace="default")
        _until(lambda: informer.get(("default", "b")) is None)
    finally:
        stop.set()
        watcher.join(10)
    assert informer.lists == 1
    assert [(key, old is None, new is None) for key, old, new in changes] == [
        (("default", "a"), True, False), (("default", "b"), True, False), (("default", "b"), False, True)]


def test_a_watch_from_a_forgotten_version_lists_anew_and_tells_what_the_lost_events_carried(
    kubeapi: Emulator,
) -> None:
    kubeapi.add(_cm("a", "1"))
    kubeapi.add(_cm("gone", "1"))
    changes: list[tuple[Key, Obj | None, Obj | None]] = []
    informer = _informer(kubeapi, changes)
    informer.relist()
    changes.clear()
    api = KubeApi(kubeapi.api_client())
    api.delete(CONFIG_MAPS, "gone", namespace="default")
    api.create(CONFIG_MAPS, _cm("new", "1"), namespace="default")
    kubeapi.compact()
    informer.watch_once(timeout_seconds=1)  # 410 Gone: the version is forgotten
    assert informer.version == ""
    informer.watch_once(timeout_seconds=1)  # lists anew, then watches
    assert informer.lists == 2
    assert sorted((key[1], old is None, new is None) for key, old, new in changes) == [
        ("gone", False, True), ("new", True, False)]
    assert {o["metadata"]["name"] for o in informer.objects()} == {"a", "new"}


def test_an_object_the_watch_brings_over_the_cap_is_left_out_and_named_until_it_is_small_again(
        kubeapi: Emulator) -> None:
    changes: list[tuple[Key, Obj | None, Obj | None]] = []
    informer = _informer(kubeapi, changes)
    informer.max_object_bytes = 1024
    informer.apply(WatchEvent("ADDED", _cm("big", "x" * 2000)))
    assert informer.get(("default", "big")) is None
    assert [(o.name, o.size > 1024) for o in informer.oversized] == [("big", True)]
    assert changes == []
    informer.apply(WatchEvent("MODIFIED", _cm("big", "small")))
    assert informer.get(("default", "big")) is not None
    assert informer.oversized == ()


def test_our_own_write_is_assumed_only_over_the_version_it_was_made_on(kubeapi: Emulator) -> None:
    """A write's answer goes into the cache at once (its watch event then changes nothing and calls no one),
    but never over something newer the watch told meanwhile."""
    changes: list[tuple[Key, Obj | None, Obj | None]] = []
    informer = Informer(KubeApi(kubeapi.api_client()), CONFIG_MAPS,
                        on_change=lambda key, old, new: changes.append((key, old, new)))
    api = KubeApi(kubeapi.api_client())
    created = api.create(CONFIG_MAPS, _cm("a", "1"), namespace="default")
    informer.assume(("default", "a"), created, was="")
    assert informer.get(("default", "a")) == created
    informer.apply(WatchEvent("ADDED", created))  # the write's own event
    assert changes == []
    someone = api.replace(CONFIG_MAPS, {**created, "data": {"v": "theirs"}})
    informer.apply(WatchEvent("MODIFIED", someone))
    informer.assume(("default", "a"), {**created, "data": {"v": "stale"}}, was=created["metadata"]["resourceVersion"])
    assert informer.get(("default", "a")) == someone
    informer.assume(("default", "a"), None, was=someone["metadata"]["resourceVersion"])  # our delete
    assert informer.get(("default", "a")) is None


def test_the_watch_event_of_our_own_write_updates_the_cache_and_calls_no_one_even_before_the_answer(
        kubeapi: Emulator) -> None:
    changes: list[tuple[Key, Obj | None, Obj | None]] = []
    informer = Informer(KubeApi(kubeapi.api_client()), CONFIG_MAPS,
                        on_change=lambda key, old, new: changes.append((key, old, new)))
    api = KubeApi(kubeapi.api_client())
    with informer.writing(("default", "a")), informer.writing(("default", "a")):  # nested: counted
        created = api.create(CONFIG_MAPS, _cm("a", "1"), namespace="default")
        informer.apply(WatchEvent("ADDED", created))  # the event came first
    assert informer.get(("default", "a")) == created
    assert changes == []
    theirs = {**created, "metadata": {**created["metadata"], "resourceVersion": "999999"}, "data": {"v": "theirs"}}
    informer.apply(WatchEvent("MODIFIED", theirs))  # after: someone else's write, at a version of its own
    assert [key for key, _, _ in changes] == [("default", "a")]


def test_the_event_of_a_version_already_held_is_neither_shaped_nor_told(kubeapi: Emulator) -> None:
    changes: list[tuple[Key, Obj | None, Obj | None]] = []
    shaped: list[Obj] = []

    def counting(obj: Obj) -> Obj | None:
        shaped.append(obj)
        return obj

    informer = Informer(KubeApi(kubeapi.api_client()), CONFIG_MAPS, shape=counting,
                        on_change=lambda key, old, new: changes.append((key, old, new)))
    created = KubeApi(kubeapi.api_client()).create(CONFIG_MAPS, _cm("a", "1"), namespace="default")
    informer.assume(("default", "a"), created, was="")
    assert len(shaped) == 1
    informer.apply(WatchEvent("ADDED", created))  # our own write's event, after its answer
    assert len(shaped) == 1
    assert changes == []
    assert informer.version == created["metadata"]["resourceVersion"]
    newer = {**created, "metadata": {**created["metadata"], "resourceVersion": "999999"}, "data": {"v": "2"}}
    informer.apply(WatchEvent("MODIFIED", newer))  # anything at another version is shaped and told
    assert len(shaped) == 2
    assert [key for key, _, _ in changes] == [("default", "a")]
