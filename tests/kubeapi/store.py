"""The object store: what etcd plus the apiserver's registry do, in memory, behind one lock.

- One global resourceVersion counter, bumped by every write, stamped on the written object; a write that
  changes nothing keeps the old resourceVersion and emits no event (as the real API skips no-op updates).
- Objects indexed by resource -> namespace -> name, so a request costs the same with 10 or 10,000 objects.
- Every write appends to a bounded event history; a watch from resourceVersion N replays the retained
  events after N, or gets a 410 Expired when N has fallen out of the window (like etcd compaction).
- Objects are kept without ``kind``/``apiVersion`` (list items carry neither on the wire) together with
  their serialized bytes, so reads do not re-encode.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import collections
import random
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from tests.kubeapi import certificates, errors, patches, validation
from tests.kubeapi.resources import NAMESPACES, RESOURCES, Resource
from tests.kubeapi.selectors import Matcher

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# generateName suffix: the apiserver's 5 characters from an alphabet without vowels or look-alikes.
GENERATE_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
MAX_GENERATED_PREFIX = 63 - 5  # names.SimpleNameGenerator's maxGeneratedNameLength


@dataclass(frozen=True)
class Stored:
    res: Resource
    obj: dict[str, Any]  # never mutated once stored
    raw: bytes  # orjson.dumps(obj), without kind/apiVersion

    def full(self) -> bytes:
        """The object as returned by get/create/update: kind and apiVersion first."""
        return orjson.dumps({"kind": self.res.kind, "apiVersion": self.res.api_version})[:-1] + b"," + self.raw[1:]

    @property
    def rv(self) -> str:
        return str(self.obj["metadata"]["resourceVersion"])


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    new: Stored
    old: Stored | None
    namespace: str


@dataclass(eq=False)
class Watcher:
    """One open watch; the server drains ``queue`` (event lines, or None when the watch is dropped)."""

    res: Resource
    namespace: str | None
    match: Matcher
    queue: collections.deque[bytes | None] = field(default_factory=collections.deque)
    ready: threading.Condition = field(default_factory=threading.Condition)
    abort: bool = False  # dropped by a fault: cut the connection rather than end the stream cleanly

    def push(self, line: bytes | None) -> None:
        with self.ready:
            self.queue.append(line)
            self.ready.notify()

    def offer(self, event: Event) -> None:
        """Queue the event as this watch sees it: with a selector, an object that stops matching is DELETED
        for this watch and one that starts matching is ADDED, as the real API's watch cache reports."""
        if self.namespace is not None and event.namespace != self.namespace:
            return
        now = self.match(event.new.obj)
        was = event.old is not None and self.match(event.old.obj)
        if event.type == "DELETED":
            kind = "DELETED" if now else ""
        else:
            kind = event.type if was and now else "ADDED" if now else "DELETED" if was else ""
        if kind:
            self.push(event_line(kind, event.new.full()))


def event_line(kind: str, obj: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + obj + b"}\n"


class Store:
    def __init__(self, *, history: int = 10_000, now: Callable[[], datetime] | None = None,
                 namespaces: tuple[str, ...] = DEFAULT_NAMESPACES, seed: int | None = None) -> None:
        self._lock = threading.RLock()
        self._rv = 0
        self._objects: dict[Resource, dict[str, dict[str, Stored]]] = {r: {} for r in RESOURCES}
        self._history: collections.deque[Event] = collections.deque(maxlen=history)
        self._compacted = 0  # events with rv <= this are no longer retained
        self._watchers: dict[Resource, set[Watcher]] = {r: set() for r in RESOURCES}
        self._now = now or (lambda: datetime.now(UTC))
        self._random = random.Random(seed)
        for name in namespaces:
            self.create(NAMESPACES, None, {"metadata": {"name": name}})

    # ---- reads -----------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def now(self) -> datetime:
        """The emulator's clock (what it stamps and dates answers with)."""
        return self._now()

    def get(self, res: Resource, namespace: str | None, name: str) -> Stored:
        found = self.find(res, namespace, name)
        if found is None:
            raise errors.not_found(res, name)
        return found

    def find(self, res: Resource, namespace: str | None, name: str) -> Stored | None:
        """The stored object or None: a benchmark polling for many absent objects pays no exception each."""
        return self._objects[res].get(namespace or "", {}).get(name)

    def list(self, res: Resource, namespace: str | None, match: Matcher) -> tuple[list[Stored], int]:
        """Matching objects in key order (namespace, name) and the resourceVersion they are current at."""
        with self._lock:
            spaces = self._objects[res]
            keys = [namespace or ""] if namespace is not None or not res.namespaced else sorted(spaces)
            items = [spaces[ns][n] for ns in keys if ns in spaces for n in sorted(spaces[ns])]
            return [s for s in items if match(s.obj)], self._rv

    def page(self, res: Resource, namespace: str | None, match: Matcher, *, after: tuple[str, str] | None,
             limit: int, selected: bool) -> tuple[list[Stored], int | None, int]:
        """One page of `list`: at most `limit` (0: no limit) matching objects with keys after `after`, how
        many more there are, and the resourceVersion. Like the real API, the count is None when a selector
        is in use (it would take matching every remaining object); the scan stops at the page's end, so
        reading a whole list page by page costs one pass over it, not one per page."""
        with self._lock:
            spaces = self._objects[res]
            keys = [namespace or ""] if namespace is not None or not res.namespaced else sorted(spaces)
            if after is not None:
                keys = keys[bisect.bisect_left(keys, after[0]):]
            found: list[Stored] = []
            for index, ns in enumerate(keys):
                names = sorted(spaces.get(ns, {}))
                if after is not None and ns == after[0]:
                    names = names[bisect.bisect_right(names, after[1]):]
                for position, name in enumerate(names):
                    stored = spaces[ns][name]
                    if not match(stored.obj):
                        continue
                    if limit and len(found) == limit:
                        rest = None if selected else len(names) - position + sum(
                            len(spaces.get(later, {})) for later in keys[index + 1:])
                        return found, rest, self._rv
                    found.append(stored)
            return found, 0, self._rv

    def objects(self, res: Resource) -> Iterator[Stored]:
        """Every stored object of a kind (for test assertions; no request is counted)."""
        with self._lock:
            snapshot = [s for names in self._objects[res].values() for s in names.values()]
        return iter(snapshot)

    # ---- writes ----------------------------------------------------------------------------------

    def create(self, res: Resource, namespace: str | None, body: Any, *, dry_run: bool = False) -> Stored:
        obj = _object_body(body)
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise errors.bad_request("the namespace of the provided object does not match the namespace "
                                         "sent on the request")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        with self._lock:
            if res.namespaced and not self._objects[NAMESPACES].get("", {}).get(namespace or ""):
                raise errors.namespace_not_found(namespace or "")
            self._name(res, namespace, meta)
            if meta["name"] in self._objects[res].get(namespace or "", {}):
                raise errors.already_exists(res, meta["name"])
            self._prepare_create(res, obj)
            _check(res, obj, None, now=self._now())
            return self._stage(obj, res) if dry_run else self._commit(res, obj, None, "ADDED")

    def update(self, res: Resource, namespace: str | None, name: str, body: Any, *, dry_run: bool = False,
               status_only: bool = False) -> Stored:
        obj = _object_body(body)
        meta = obj.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise errors.bad_request(f"the name of the object ({meta.get('name')}) does not match the name on "
                                     f"the URL ({name})")
        with self._lock:
            old = self.get(res, namespace, name)
            return self._replace(res, old, obj, dry_run=dry_run, status_only=status_only)

    def patch(self, res: Resource, namespace: str | None, name: str, *, content_type: str, body: Any,
              dry_run: bool = False, status_only: bool = False) -> Stored:
        with self._lock:
            old = self.get(res, namespace, name)
            obj = patches.apply(content_type, orjson.loads(old.raw), body, plural=res.plural)
            if (obj.get("metadata") or {}).get("name", name) != name:
                raise errors.bad_request("metadata.name cannot be changed by a patch")
            return self._replace(res, old, obj, dry_run=dry_run, status_only=status_only)

    def delete(self, res: Resource, namespace: str | None, name: str, *,
               preconditions: dict[str, Any] | None = None, dry_run: bool = False) -> Stored:
        with self._lock:
            old = self.get(res, namespace, name)
            _preconditions(res, old, preconditions or {})
            if dry_run:
                return old
            if res is NAMESPACES:
                self._empty_namespace(name)
                old = self._stage(_terminating(old.obj, self._timestamp()), res)
            self._commit(res, old.obj, old, "DELETED")
            return old

    def touch(self, res: Resource, namespace: str | None, name: str, *, annotation: str) -> None:
        """A concurrent writer's change: bump an annotation's counter (used by the conflict fault)."""
        with self._lock:
            old = self.get(res, namespace, name)
            obj = orjson.loads(old.raw)
            notes = obj["metadata"].setdefault("annotations", {})
            notes[annotation] = str(int(notes.get(annotation, "0")) + 1)
            self._commit(res, obj, old, "MODIFIED")

    # ---- watch -----------------------------------------------------------------------------------

    def watch(self, res: Resource, namespace: str | None, match: Matcher, resource_version: str | None) -> Watcher:
        """Register a watch: replay what it missed (or every object, when no version is given), then live."""
        watcher = Watcher(res, namespace, match)
        with self._lock:
            if not resource_version or resource_version == "0":
                for stored in self.list(res, namespace, match)[0]:
                    watcher.push(event_line("ADDED", stored.full()))
            else:
                start = _parse_rv(resource_version)
                if start < self._compacted:
                    status = errors.expired(f"too old resource version: {start} ({self._compacted + 1})").status()
                    watcher.push(event_line("ERROR", orjson.dumps(status)))
                    watcher.push(None)
                    return watcher
                for event in self._history:
                    if event.rv > start and event.new.res is res:
                        watcher.offer(event)
            self._watchers[res].add(watcher)
        return watcher

    def bookmark(self, watcher: Watcher) -> None:
        """Queue a BOOKMARK at the current version: under the lock, every earlier event is already queued."""
        with self._lock:
            meta = {"kind": watcher.res.kind, "apiVersion": watcher.res.api_version,
                    "metadata": {"resourceVersion": str(self._rv)}}
            watcher.push(event_line("BOOKMARK", orjson.dumps(meta)))

    def unwatch(self, watcher: Watcher) -> None:
        with self._lock:
            self._watchers[watcher.res].discard(watcher)

    def open_watches(self, res: Resource | None = None) -> int:
        with self._lock:
            return sum(len(ws) for r, ws in self._watchers.items() if res in (None, r))

    def drop_watches(self, *, abort: bool = False) -> int:
        """End every open watch (``abort``: cut the connections instead); returns how many."""
        with self._lock:
            open_ = [w for ws in self._watchers.values() for w in ws]
            for watchers in self._watchers.values():
                watchers.clear()
        for watcher in open_:
            watcher.abort = abort
            watcher.push(None)
        return len(open_)

    def compact(self) -> None:
        """Forget all history, as etcd compaction does: any watch from an older version gets 410."""
        with self._lock:
            self._history.clear()
            self._compacted = self._rv

    # ---- internals -------------------------------------------------------------------------------

    def _timestamp(self) -> str:
        return self._now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _name(self, res: Resource, namespace: str | None, meta: dict[str, Any]) -> None:
        if meta.get("name"):
            return
        prefix = meta.get("generateName")
        if not prefix:
            raise errors.invalid(res, "", [("FieldValueRequired", "metadata.name",
                                            "Required value: name or generateName is required")])
        # The apiserver keeps a generated name within 63 characters: a longer prefix is cut to 58.
        prefix = prefix[:MAX_GENERATED_PREFIX]
        taken = self._objects[res].get(namespace or "", {})
        while (name := prefix + "".join(self._random.choices(GENERATE_NAME_ALPHABET, k=5))) in taken:
            pass
        meta["name"] = name

    def _prepare_create(self, res: Resource, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
            meta.pop(key, None)
        meta.update(uid=str(uuid.UUID(int=self._random.getrandbits(128), version=4)),
                    creationTimestamp=self._timestamp())
        if res.uses_generation:
            meta["generation"] = 1
        if res.status_subresource:
            obj["status"] = _initial_status(res)
        _normalize(res, obj)

    def _replace(self, res: Resource, old: Stored, obj: dict[str, Any], *, dry_run: bool,
                 status_only: bool = False) -> Stored:
        if status_only:  # the status subresource: only status (and the precondition) is taken from the body
            obj = {**old.obj, "status": obj.get("status", {}), "metadata": {
                **old.obj["metadata"], "resourceVersion": (obj.get("metadata") or {}).get("resourceVersion")}}
        meta, old_meta = obj.setdefault("metadata", {}), old.obj["metadata"]
        if meta.get("resourceVersion") not in (None, "", old.rv):
            raise errors.conflict(res, old_meta["name"], errors.STALE)
        if meta.get("uid") not in (None, "", old_meta["uid"]):
            raise errors.conflict(res, old_meta["name"], f"Precondition failed: UID in precondition: "
                                  f"{meta['uid']}, UID in object meta: {old_meta['uid']}")
        for key in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp", "generation"):
            if key in old_meta:
                meta[key] = old_meta[key]
        meta["resourceVersion"] = old.rv
        if res.status_subresource and not status_only:
            obj["status"] = old.obj.get("status", {})
        if res.uses_generation and obj.get("spec") != old.obj.get("spec"):
            meta["generation"] = old_meta.get("generation", 0) + 1
        _normalize(res, obj)
        _check(res, obj, old.obj, now=self._now())
        if obj == old.obj or dry_run:
            return old if obj == old.obj else self._stage(obj, res)
        return self._commit(res, obj, old, "MODIFIED")

    def _stage(self, obj: dict[str, Any], res: Resource) -> Stored:
        return Stored(res, obj, orjson.dumps(obj))

    def _commit(self, res: Resource, obj: dict[str, Any], old: Stored | None, kind: str) -> Stored:
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self._rv + 1)}}
        stored = self._stage(obj, res)
        if kind != "DELETED" and stored_size(stored) > errors.MAX_STORED_OBJECT:
            raise errors.too_large_to_store()  # etcd refuses the write: nothing changes, no event
        self._rv += 1
        namespace, name = obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
        spaces = self._objects[res]
        if kind == "DELETED":
            del spaces[namespace][name]
            if not spaces[namespace]:
                del spaces[namespace]
        else:
            spaces.setdefault(namespace, {})[name] = stored
        self._record(Event(self._rv, kind, stored, old, namespace))
        return stored

    def _record(self, event: Event) -> None:
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].rv
        self._history.append(event)
        for watcher in self._watchers[event.new.res]:
            watcher.offer(event)

    def _empty_namespace(self, namespace: str) -> None:
        """Simplification: the real API empties a Terminating namespace asynchronously; here, at once."""
        for res in RESOURCES:
            for stored in list(self._objects[res].get(namespace, {}).values()) if res.namespaced else ():
                self._commit(res, stored.obj, stored, "DELETED")


def _object_body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise errors.bad_request("the request body must be a JSON object")
    obj = {k: v for k, v in body.items() if k not in ("kind", "apiVersion")}
    if not isinstance(obj.get("metadata", {}), dict):
        raise errors.bad_request("metadata must be an object")
    obj["metadata"] = dict(obj.get("metadata") or {})
    return obj


def stored_size(stored: Stored) -> int:
    """The bytes etcd would be asked to store, estimated from the JSON: what the apiserver stores is
    protobuf, where a Secret's data and a ConfigMap's binaryData are raw bytes (here base64) and field
    names are tags, so the JSON with those counted decoded is the estimate. It is a little larger than
    the protobuf (key names), so the emulator refuses no later than a cluster would."""
    encoded = {("", "secrets"): "data", ("", "configmaps"): "binaryData"}.get((stored.res.group, stored.res.plural))
    values = (stored.obj.get(encoded) or {}).values() if encoded else ()
    return len(stored.raw) - sum(len(str(v)) - len(str(v)) * 3 // 4 for v in values)


def _parse_rv(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise errors.bad_request(f'resourceVersion: Invalid value: "{text}": strconv.ParseUint: '
                                 f'invalid syntax') from None


_INITIAL_STATUS: dict[str, dict[str, Any]] = {
    "namespaces": {"phase": "Active"}, "pods": {"phase": "Pending"}, "services": {"loadBalancer": {}},
}


def _initial_status(res: Resource) -> dict[str, Any]:
    """What create leaves in ``status`` (the rest is the controllers' to fill, and none run here)."""
    return dict(_INITIAL_STATUS.get(res.plural, {})) if not res.group else {}


def _terminating(obj: dict[str, Any], now: str) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": now}, "status": {"phase": "Terminating"}}


def _normalize(res: Resource, obj: dict[str, Any]) -> None:
    """What the registry does to every write of a kind: Secret stringData folded into base64 data, etc."""
    if res is NAMESPACES:
        name = obj["metadata"]["name"]
        obj["metadata"]["labels"] = {**(obj["metadata"].get("labels") or {}), "kubernetes.io/metadata.name": name}
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
    certificates.default(res.plural, obj, version=res.version)
    if (res.group, res.plural) == ("", "secrets"):
        strings = obj.pop("stringData", None) or {}
        encoded = {k: base64.b64encode(str(v).encode()).decode() for k, v in strings.items()}
        data = {**(obj.get("data") or {}), **encoded}
        _check_base64(data)
        if data:
            obj["data"] = data
        obj.setdefault("type", "Opaque")


def _check_base64(data: dict[str, Any]) -> None:
    for key, value in data.items():
        try:
            base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raise errors.bad_request(f"Secret in version \"v1\" cannot be handled as a Secret: illegal base64 "
                                     f"data in data[{key}]") from None


def _check(res: Resource, obj: dict[str, Any], old: dict[str, Any] | None, *, now: datetime) -> None:
    causes = validation.validate(res, obj, old)
    if res.group == "certificates.k8s.io":
        causes += certificates.validate(res.plural, obj, old, now=now)
    if causes:
        raise errors.invalid(res, obj["metadata"].get("name", ""), causes)


def _preconditions(res: Resource, old: Stored, pre: dict[str, Any]) -> None:
    name, meta = old.obj["metadata"]["name"], old.obj["metadata"]
    if pre.get("uid") not in (None, meta["uid"]):
        raise errors.conflict(res, name, f"Precondition failed: UID in precondition: {pre['uid']}, UID in object "
                              f"meta: {meta['uid']}")
    if pre.get("resourceVersion") not in (None, old.rv):
        raise errors.conflict(res, name, f"Precondition failed: ResourceVersion in precondition: "
                              f"{pre['resourceVersion']}, ResourceVersion in object meta: {old.rv}")
