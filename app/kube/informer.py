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

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import orjson

from tls_injector.kube.api import KubeApi, Oversized, Resource, WatchEvent
from tls_injector.kube.errors import Gone, KubeError

log = logging.getLogger("tls_injector.informer")
Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); "" for a cluster-scoped object's namespace
# (key, what the cache held before, what it holds now): None on either side for an add or a removal.
Change = Callable[[Key, Obj | None, Obj | None], None]

# A watch the server holds open this long, then ends; resumed from its last version at no list's cost.
WATCH_TIMEOUT_SECONDS = 300
# After a failed watch or list (not a 410), wait this long before the next try: an apiserver in trouble
# is not hammered, and a change waits at most this long plus the watch's latency.
RETRY_SECONDS = 5.0


_NONE: Mapping[str, Obj] = MappingProxyType({})  # no namespace's objects


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
    lists: int = 0  # lists made: one at the start, one more per 410 Gone, one per refill
    # Set once the first list is in the cache: a reader that needs the whole resource waits for it.
    synced: threading.Event = field(default_factory=threading.Event)
    # namespace -> name -> object: a namespace's objects are read without the rest's, and no (namespace,
    # name) tuple is held per object (at 100,000 workloads with their ReplicaSets, pods and Secrets, the
    # flat index with a name set per namespace held ~25 MiB more: tracemalloc, bench.reconcile_memory).
    _objects: dict[str, dict[str, Obj]] = field(default_factory=dict)
    _oversized: dict[Key, Oversized] = field(default_factory=dict)
    # Keys a watch event touched while a refill's list was under way, one set per refill (see refill).
    _touched: list[set[Key]] = field(default_factory=list)
    _quiet: dict[Key, int] = field(default_factory=dict)  # keys being written by us (see writing), how often
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def oversized(self) -> tuple[Oversized, ...]:
        """The objects left out as over `max_object_bytes` once shaped, as the list or the watch last saw them."""
        with self._lock:
            return tuple(self._oversized.values())

    def objects(self, namespaces: Iterable[str] | None = None) -> list[Obj]:
        """What the cache holds now, of `namespaces` only when given (a copy of the index; the objects
        themselves are shared, never changed). A few namespaces cost what they hold, not the cluster."""
        with self._lock:
            if namespaces is None:
                return [obj for held in self._objects.values() for obj in held.values()]
            return [obj for ns in namespaces for obj in self._objects.get(ns, _NONE).values()]

    def oversized_in(self, namespaces: Iterable[str] | None = None) -> list[Oversized]:
        found = self.oversized
        return list(found) if namespaces is None else [o for o in found if o.namespace in set(namespaces)]

    def _put(self, key: Key, obj: Obj | None) -> None:
        """Hold `obj` under `key` (None: hold nothing), the namespace index with it; under the lock."""
        if obj is None:
            held = self._objects.get(key[0])
            if held is not None and held.pop(key[1], None) is not None and not held:
                del self._objects[key[0]]
            return
        self._objects.setdefault(key[0], {})[key[1]] = obj

    def _held(self, key: Key) -> Obj | None:
        """What is held at `key`; under the lock."""
        held = self._objects.get(key[0])
        return held.get(key[1]) if held is not None else None

    def get(self, key: Key) -> Obj | None:
        with self._lock:
            return self._held(key)

    def relist(self) -> None:
        """List anew; every difference from what the cache held is a change (a relist after a 410 may
        carry adds, updates and removals the lost events would have carried)."""
        listed = self.api.list_objects(self.resource, label_selector=self.label_selector,
                                       field_selector=self.field_selector, shape=self.shape,
                                       max_object_bytes=self.max_object_bytes)
        fresh: dict[str, dict[str, Obj]] = {}
        for obj in listed.items:
            ns, name = key_of(obj)
            fresh.setdefault(ns, {})[name] = obj
        with self._lock:
            old, self._objects = self._objects, fresh
            self.version = listed.resource_version
            self._oversized = {(o.namespace, o.name): o for o in listed.oversized}
            self.lists += 1
        for ns in old.keys() | fresh.keys():
            was, now = old.get(ns, _NONE), fresh.get(ns, _NONE)
            for name in was.keys() | now.keys():
                if (before := was.get(name)) != (after := now.get(name)):
                    self.on_change((ns, name), before, after)
        self.synced.set()  # after the changes are told: what they derive is in place when a reader starts

    def refill(self, namespace: str) -> None:
        """List one namespace again and keep what the watch has not told since: for a `shape` that keeps
        more of a namespace's objects from now on (it opted in), the objects it kept less of before.

        The watch goes on meanwhile. A key it touches while the list is under way keeps the watch's word
        (a deletion the list predates must not bring the object back); any other listed object replaces
        what the cache holds, which is at worst older than the list, and the watch's later events for it
        come after in order. So once the watch has caught up, the cache is what the watch says."""
        touched: set[Key] = set()
        with self._lock:
            self._touched.append(touched)
        try:
            listed = self.api.list_objects(self.resource, namespace=namespace, label_selector=self.label_selector,
                                           field_selector=self.field_selector, shape=self.shape,
                                           max_object_bytes=self.max_object_bytes)
        finally:
            with self._lock:
                self._touched.remove(touched)
        changes: list[tuple[Key, Obj | None, Obj | None]] = []
        with self._lock:
            self.lists += 1
            for obj in listed.items:
                key = key_of(obj)
                old = self._held(key)
                if key not in touched:
                    self._oversized.pop(key, None)
                    if old != obj:
                        self._put(key, obj)
                        changes.append((key, old, obj))
            for over in listed.oversized:
                key = (over.namespace, over.name)
                if key not in touched:
                    self._oversized[key] = over
                    if (old := self._held(key)) is not None:
                        self._put(key, None)
                        changes.append((key, old, None))
        for key, old, new in changes:
            self.on_change(key, old, new)

    def writing(self, key: Key) -> Writing:
        """While we write the object at `key`: its watch events still update the cache, but call no one. A
        write's own event may come before the writer has its answer (and `assume`s it); it is our own
        change, and must not queue work. Someone else's write to the same object within those milliseconds
        is not told either: it met our write (a 409 for one of the two), and the resync reads it."""
        return Writing([self], key)

    def _hush(self, key: Key) -> None:
        with self._lock:
            self._quiet[key] = self._quiet.get(key, 0) + 1

    def _unhush(self, key: Key) -> None:
        with self._lock:
            left = self._quiet.pop(key) - 1
            if left:
                self._quiet[key] = left

    def assume(self, key: Key, obj: Obj | None, *, was: str) -> None:
        """What our own write left (the server's answer, shaped here; None after a delete), put in the cache
        before its watch event comes, so that a decision made meanwhile does not decide the same write
        again. Only when the cache still holds the version the write was made on (`was`: its
        resourceVersion, "" for a create): otherwise the watch has told something newer, and keeps its word.
        The watch event of the write itself then finds the cache as it says, and tells no one."""
        shaped = None if obj is None else (self.shape(obj) if self.shape else obj)
        with self._lock:
            held = self._held(key)
            if str(((held or {}).get("metadata") or {}).get("resourceVersion") or "") != was:
                return
            self._put(key, shaped)

    def apply(self, event: WatchEvent) -> None:
        """One watch event into the cache; a change the shape cannot see (a status update of a pod whose
        metadata is kept, say) is no change, and calls no one."""
        meta = event.object.get("metadata")
        if not isinstance(meta, dict):  # no object the API server sends; nothing to keep of it
            return
        self.version = str(meta.get("resourceVersion") or self.version)
        if event.type == "BOOKMARK":
            return
        key = key_of(event.object)
        if event.type != "DELETED" and self._holds(key, meta.get("resourceVersion")):
            return
        shaped = None if event.type == "DELETED" else (self.shape(event.object) if self.shape else event.object)
        over = self._over(key, shaped)
        if over is not None:
            shaped = None
        with self._lock:
            for touched in self._touched:
                touched.add(key)
            old = self._held(key)
            self._oversized.pop(key, None)
            if over is not None:
                self._oversized[key] = over
            if old != shaped:  # the same again (our own write's event after its answer): keep what is held
                self._put(key, shaped)
            quiet = key in self._quiet
        if old != shaped and not quiet:
            self.on_change(key, old, shaped)

    def _holds(self, key: Key, version: object) -> bool:
        """Is the object held at this very resourceVersion already? Then the event is our own write's, whose
        answer was assumed: nothing to shape, compare or tell (a first pass's 100,000 creates come back as
        100,000 such events). A shape that keeps no resourceVersion is never held so."""
        with self._lock:
            held = self._held(key)
            if not version or held is None or (held.get("metadata") or {}).get("resourceVersion") != version:
                return False
            for touched in self._touched:  # as for any event: a refill in progress keeps it
                touched.add(key)
            return True

    def _over(self, key: Key, shaped: Obj | None) -> Oversized | None:
        """An object the watch brings that is over `max_object_bytes` once shaped: left out, as a list would."""
        if shaped is None or self.max_object_bytes is None:
            return None
        size = len(orjson.dumps(shaped))
        return Oversized(key[0], key[1], size) if size > self.max_object_bytes else None

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
            except KubeError as e:
                log.warning("watch failed; retrying", extra={"resource": self.resource.plural, "error": str(e)})
                stop.wait(RETRY_SECONDS)
            except Exception:  # a bug in a shape or a callback must not end the cache's updates for good
                log.exception("informer failed; listing anew", extra={"resource": self.resource.plural})
                self.version = ""
                stop.wait(RETRY_SECONDS)


class Writing:
    """Informer.writing over one or more informers (a class, not a generator: a full pass enters one per
    object it decides, 100,000 at 100,000 workloads, written or not)."""

    __slots__ = ("_informers", "_key")

    def __init__(self, informers: list[Informer], key: Key) -> None:
        self._informers, self._key = informers, key

    def __enter__(self) -> None:
        for informer in self._informers:
            informer._hush(self._key)

    def __exit__(self, *_: object) -> None:
        for informer in self._informers:
            informer._unhush(self._key)
