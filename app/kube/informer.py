"""One resource's cache, kept current by a watch (issue 42's informer, the first building block).

One list, then a watch from the list's resourceVersion; each event's object (bookmarks included) moves
that version on, so a watch the server ends after its timeout is resumed where it stopped, not listed
again. Only 410 Gone (the version is older than the server's history) lists anew. Built on our own
client (app/kube/api.py), not on kubernetes.watch: the list is read a page at a time and shaped page by
page (`shape` keeps only what the caller reads), with the client's whole-request deadlines and bounded
reads, which the official client's watch helper, decoding whole objects into models, does not give.

Memory: the cache holds one shaped object per object of the resource, so its size is the count times
what `shape` keeps (the caller sizes its shape; objects over `max_object_bytes` are left out and named
in `oversized`, as a list does). Nothing else is kept: no event history, no copy of the previous list.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.kube.api import KubeApi, Oversized, Resource, WatchEvent
from app.kube.errors import Gone, KubeError

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); "" for a cluster-scoped object's namespace
# (key, what the cache held before, what it holds now): None on either side for an add or a removal.
Change = Callable[[Key, Obj | None, Obj | None], None]

# A watch the server holds open this long, then ends; resumed from its last version at no list's cost.
WATCH_TIMEOUT_SECONDS = 300
# After a failed watch or list (not a 410), wait this long before the next try: an apiserver in trouble
# is not hammered, and a change waits at most this long plus the watch's latency.
RETRY_SECONDS = 5.0


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _ignore(_key: Key, _old: Obj | None, _new: Obj | None) -> None:
    return None


@dataclass
class Informer:
    """The objects of `resource` (those the selectors select), as `shape` keeps them, by (namespace, name)."""

    api: KubeApi
    resource: Resource
    shape: Callable[[Obj], Obj | None] | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    max_object_bytes: int | None = None
    on_change: Change = _ignore
    version: str = ""
    lists: int = 0  # lists made: one at the start, one more per 410 Gone
    oversized: tuple[Oversized, ...] = ()
    _objects: dict[Key, Obj] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def objects(self) -> list[Obj]:
        """What the cache holds now (a copy of the index; the objects themselves are shared, never changed)."""
        with self._lock:
            return list(self._objects.values())

    def get(self, key: Key) -> Obj | None:
        with self._lock:
            return self._objects.get(key)

    def relist(self) -> None:
        """List anew; every difference from what the cache held is a change (a relist after a 410 may
        carry adds, updates and removals the lost events would have carried)."""
        listed = self.api.list_objects(self.resource, label_selector=self.label_selector,
                                       field_selector=self.field_selector, shape=self.shape,
                                       max_object_bytes=self.max_object_bytes)
        fresh = {key_of(obj): obj for obj in listed.items}
        with self._lock:
            old, self._objects = self._objects, fresh
            self.version, self.oversized = listed.resource_version, listed.oversized
            self.lists += 1
        for key in old.keys() | fresh.keys():
            if old.get(key) != fresh.get(key):
                self.on_change(key, old.get(key), fresh.get(key))

    def apply(self, event: WatchEvent) -> None:
        """One watch event into the cache; a change the shape cannot see (a status update of a pod whose
        metadata is kept, say) is no change, and calls no one."""
        self.version = str((event.object.get("metadata") or {}).get("resourceVersion") or self.version)
        if event.type == "BOOKMARK":
            return
        shaped = None if event.type == "DELETED" else (self.shape(event.object) if self.shape else event.object)
        key = key_of(event.object)
        with self._lock:
            old = self._objects.get(key)
            if shaped is None:
                self._objects.pop(key, None)
            else:
                self._objects[key] = shaped
        if old != shaped:
            self.on_change(key, old, shaped)

    def watch_once(self, timeout_seconds: int = WATCH_TIMEOUT_SECONDS, stop: threading.Event | None = None) -> None:
        """List if the cache holds no version, then one watch until the server ends it (or `stop` is set
        at the next event); Gone forgets the version, so the next call lists anew."""
        if not self.version:
            self.relist()
        try:
            for event in self.api.watch(self.resource, resource_version=self.version,
                                        label_selector=self.label_selector, field_selector=self.field_selector,
                                        timeout_seconds=timeout_seconds):
                self.apply(event)
                if stop is not None and stop.is_set():
                    return
        except Gone:
            self.version = ""

    def run(self, stop: threading.Event, timeout_seconds: int = WATCH_TIMEOUT_SECONDS) -> None:
        """Watch until `stop`; a failure other than 410 waits RETRY_SECONDS and resumes from the version."""
        while not stop.is_set():
            try:
                self.watch_once(timeout_seconds, stop)
            except KubeError:
                stop.wait(RETRY_SECONDS)
