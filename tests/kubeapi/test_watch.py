"""Watch through the official client's watch module: replay from a resourceVersion, live events,
selectors, 410 Expired, timeouts, bookmarks and dropped watches."""

from __future__ import annotations

import gc
import queue
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.client as k8s
import pytest
import urllib3
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import Emulator, running_emulator


def cm(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def take(stream: Iterator[dict[str, Any]], count: int) -> list[tuple[str, str]]:
    seen = []
    for event in stream:
        seen.append((event["type"], event["raw_object"]["metadata"].get("name", "")))
        if len(seen) == count:
            break
    return seen


@pytest.fixture(autouse=True)
def _collect_dropped_connections() -> Iterator[None]:
    """These tests drop and abort watches on purpose, and urllib3 forgets such a connection without
    closing its socket. Collect it when the test ends, where that is expected, so its ResourceWarning
    cannot surface (as an error) at whatever line of a later test the garbage collector runs."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


class Background:
    """A watch consumed on a thread, so the test can write while it runs."""

    def __init__(self, func: Any, *args: Any, **kwargs: Any) -> None:
        self.watch = watch.Watch()
        self.events: queue.Queue[tuple[str, str] | BaseException] = queue.Queue()
        self.thread = threading.Thread(target=self._run, args=(func, args, kwargs), daemon=True)
        self.thread.start()

    def _run(self, func: Any, args: Any, kwargs: Any) -> None:
        try:
            for event in self.watch.stream(func, *args, **kwargs):
                self.events.put((event["type"], event["raw_object"]["metadata"].get("name", "")))
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            self.events.put(exc)

    def next(self) -> tuple[str, str] | BaseException:
        return self.events.get(timeout=5)

    def stop(self) -> None:
        self.watch.stop()
        self.thread.join(timeout=5)


def test_watch_from_a_listed_version_replays_exactly_the_later_events(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_config_map("demo", cm("before"))
    version = core.list_namespaced_config_map("demo").metadata.resource_version
    core.create_namespaced_config_map("demo", cm("a"))
    core.patch_namespaced_config_map("a", "demo", {"data": {"k": "v"}})
    core.delete_namespaced_config_map("a", "demo")
    stream = watch.Watch().stream(core.list_namespaced_config_map, "demo", resource_version=version)
    assert take(stream, 3) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


def test_watch_without_a_version_starts_with_every_object_added(core: k8s.CoreV1Api) -> None:
    for name in ("x", "y"):
        core.create_namespaced_config_map("demo", cm(name))
    stream = watch.Watch().stream(core.list_namespaced_config_map, "demo")
    assert take(stream, 2) == [("ADDED", "x"), ("ADDED", "y")]


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 5
    while not condition():
        assert time.monotonic() < deadline, "condition not met within 5 s"
        time.sleep(0.01)


def test_a_live_watch_sees_writes_as_they_happen(core: k8s.CoreV1Api, kubeapi: Emulator) -> None:
    bg = Background(core.list_config_map_for_all_namespaces)  # no version: only what happens next
    wait_until(lambda: kubeapi.open_watches("configmaps") == 1)
    assert kubeapi.open_watches("secrets") == 0
    core.create_namespaced_config_map("demo", cm("live"))
    assert bg.next() == ("ADDED", "live")
    core.create_namespaced_config_map("default", cm("other-ns"))
    assert bg.next() == ("ADDED", "other-ns")
    bg.stop()
    wait_until(lambda: kubeapi.open_watches() == 0)  # the client's stop ends the server side too


def test_a_label_selector_watch_sees_objects_enter_and_leave_the_selection(core: k8s.CoreV1Api) -> None:
    version = core.list_namespaced_config_map("demo").metadata.resource_version
    core.create_namespaced_config_map("demo", cm("c", tls="on"))
    core.create_namespaced_config_map("demo", cm("ignored"))
    core.patch_namespaced_config_map("c", "demo", {"metadata": {"labels": {"tls": "off"}}})
    core.patch_namespaced_config_map("ignored", "demo", {"metadata": {"labels": {"tls": "on"}}})
    stream = watch.Watch().stream(core.list_namespaced_config_map, "demo", resource_version=version,
                                  label_selector="tls=on")
    assert take(stream, 3) == [("ADDED", "c"), ("DELETED", "c"), ("ADDED", "ignored")]


def test_a_watch_from_a_compacted_version_is_410_expired(core: k8s.CoreV1Api, kubeapi: Emulator) -> None:
    version = core.create_namespaced_config_map("demo", cm("a")).metadata.resource_version
    core.create_namespaced_config_map("demo", cm("b"))  # the event a watch from `version` needs
    kubeapi.compact()
    with pytest.raises(ApiException) as exc:
        take(watch.Watch().stream(core.list_namespaced_config_map, "demo", resource_version=version,
                                  timeout_seconds=5), 1)
    assert exc.value.status == 410


def test_the_history_window_is_configurable_and_older_versions_expire() -> None:
    with running_emulator(history=3, namespaces=("demo",)) as api:
        core = k8s.CoreV1Api(api.api_client())
        versions = [core.create_namespaced_config_map("demo", cm(f"c{i}")).metadata.resource_version for i in range(5)]
        recent = watch.Watch().stream(core.list_namespaced_config_map, "demo", resource_version=versions[2])
        assert take(recent, 2) == [("ADDED", "c3"), ("ADDED", "c4")]
        with pytest.raises(ApiException) as exc:
            take(watch.Watch().stream(core.list_namespaced_config_map, "demo", resource_version=versions[0],
                                      timeout_seconds=5), 1)
        assert exc.value.status == 410


def test_timeout_seconds_ends_the_stream(core: k8s.CoreV1Api) -> None:
    version = core.list_namespaced_config_map("demo").metadata.resource_version
    started = time.monotonic()
    events = list(watch.Watch().stream(core.list_namespaced_config_map, "demo", resource_version=version,
                                       timeout_seconds=1))
    assert events == []
    assert 0.9 < time.monotonic() - started < 4


def test_bookmarks_carry_the_current_version_when_asked_for(kubeapi: Emulator, core: k8s.CoreV1Api) -> None:
    kubeapi.bookmark_interval = 0.1
    version = core.list_namespaced_config_map("demo").metadata.resource_version
    core.create_namespaced_secret("demo", {"metadata": {"name": "unrelated"}})
    stream = watch.Watch().stream(core.list_namespaced_config_map, "demo", resource_version=version,
                                  allow_watch_bookmarks=True, timeout_seconds=5)
    event = next(iter(stream))
    assert event["type"] == "BOOKMARK"
    assert event["raw_object"]["metadata"]["resourceVersion"] == str(kubeapi.resource_version)


def test_a_cleanly_dropped_watch_is_resumed_by_the_client_from_its_last_version(kubeapi: Emulator,
                                                                               core: k8s.CoreV1Api) -> None:
    version = core.list_namespaced_config_map("demo").metadata.resource_version
    bg = Background(core.list_namespaced_config_map, "demo", resource_version=version)
    core.create_namespaced_config_map("demo", cm("first"))
    assert bg.next() == ("ADDED", "first")
    assert kubeapi.drop_watches() == 1
    core.create_namespaced_config_map("demo", cm("second"))
    assert bg.next() == ("ADDED", "second")  # not replayed "first": the client resumed after it
    assert kubeapi.calls("watch", "configmaps") == 2
    bg.stop()


def test_an_aborted_watch_surfaces_as_a_connection_error(kubeapi: Emulator, core: k8s.CoreV1Api) -> None:
    version = core.list_namespaced_config_map("demo").metadata.resource_version
    bg = Background(core.list_namespaced_config_map, "demo", resource_version=version)
    core.create_namespaced_config_map("demo", cm("first"))
    assert bg.next() == ("ADDED", "first")
    kubeapi.drop_watches(abort=True)
    assert isinstance(bg.next(), urllib3.exceptions.HTTPError)
    bg.stop()
