"""HTTP front end: URL routing, query parameters, Status answers and watch streaming.

A ``ThreadingHTTPServer`` speaking HTTP/1.1 with keep-alive (the official client pools connections), one
thread per connection. Watches are chunked responses of JSON lines, like the apiserver's.
"""

from __future__ import annotations

import contextlib
import email.utils
import select
import socket
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import orjson

from tests.kubeapi import authz, control, errors, resources
from tests.kubeapi.errors import ApiError
from tests.kubeapi.faults import VERBS
from tests.kubeapi.resources import Resource
from tests.kubeapi.selectors import matcher
from tests.kubeapi.store import Stored, Watcher

if TYPE_CHECKING:
    from tests.kubeapi import Emulator

_JSON = "application/json"
# The apiserver ends a watch after a randomised 30-60 min when the client names no timeout; tests never
# wait that long, so the bound only has to outlive them.
_DEFAULT_WATCH_TIMEOUT = 1800.0
_IDLE_CHECK = 0.25  # seconds between checks that an idle watch's client is still connected


@dataclass(frozen=True)
class Route:
    res: Resource
    namespace: str | None  # None: cluster-scoped kind, or a namespaced kind across all namespaces
    name: str | None
    subresource: str | None


def route(path: str) -> Route | None:
    """Map ``/api/v1/namespaces/ns/secrets/x`` and friends onto the resource table."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespaced = resources.lookup(group, version, rest[2]) if len(rest) >= 3 and rest[0] == "namespaces" else None
    if namespaced is not None and namespaced.namespaced and len(rest) <= 5:
        return Route(namespaced, rest[1], _at(rest, 3), _at(rest, 4))
    res = resources.lookup(group, version, rest[0])
    if res is None or len(rest) > 3:
        return None
    return Route(res, None, _at(rest, 1), _at(rest, 2))


def _at(parts: list[str], index: int) -> str | None:
    return parts[index] if len(parts) > index else None


def verb_of(method: str, r: Route, query: dict[str, str]) -> str:
    if r.name is None:
        collection = {"GET": "watch" if query.get("watch") in ("true", "1") else "list", "POST": "create",
                      "DELETE": "deletecollection"}
        return collection.get(method, "")
    return {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, "")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small JSON answers must not wait for delayed ACKs (~40 ms each)
    server: EmulatorHTTPServer
    request_headers: dict[str, str]
    body_size = 0  # of the request being served
    raw_requestline: bytes  # set by the base class; missing from its type stubs

    def parse_request(self) -> bool:
        """The request line and headers into a plain dict (lower-case names). The base class's parser goes
        through the email package: measured ~50-190 us per request, most of the emulator's own CPU."""
        self.requestline = line = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        parts = line.split()
        if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
            self.request_version, self.close_connection = "HTTP/1.0", True
            self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request line {line!r}")
            return False
        self.command, self.path, self.request_version = parts
        headers: dict[str, str] = {}
        for _ in range(100):  # http.client's own cap on header lines
            raw = self.rfile.readline(65537)
            if raw in (b"\r\n", b"\n", b""):
                break
            name, _, value = raw.decode("iso-8859-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        self.request_headers = headers
        self.close_connection = parts[2] == "HTTP/1.0" or headers.get("connection", "").lower() == "close"
        return True

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, open_=True)

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The Date header from the emulator's clock (`Emulator(now=...)`), as an apiserver dates its answers
        by its own clock: a test can set one cluster's clock apart from another's."""
        return email.utils.format_datetime(self.server.emulator.store.now().astimezone(UTC), usegmt=True)

    def finish(self) -> None:
        self.server.track(self.connection, open_=False)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the request log on the emulator is the record tests read."""

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ---- dispatch --------------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        emulator = self.server.emulator
        if emulator.refusing:  # a reused keep-alive connection finds the server gone
            self._cut()
            return
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        body = self._body()
        r = route(url.path)
        if r is not None and not resources.served(r.res, emulator.certificates):
            r = None  # a kind this cluster's version does not serve: 404 like any unknown path
        if r is None:
            self._unrouted(method, url.path, body)
            return
        verb = verb_of(method, r, query) or method.lower()
        try:
            if verb not in VERBS or (r.res.namespaced and r.namespace is None and verb not in ("list", "watch")):
                raise errors.method_not_allowed()
            target = _body_name(body) if verb == "create" else r.name
            if emulator.acting_as is not None and r.res.plural != "subjectaccessreviews":
                authz.authorize(emulator.store, emulator.acting_as, verb=verb, res=r.res, namespace=r.namespace,
                                name=r.name)
            emulator.faults.check(verb, r.res, r.namespace, target,
                                  lambda: emulator.store.touch(r.res, r.namespace, r.name or "",
                                                               annotation=emulator.touch_annotation))
            if verb == "watch":
                self._watch(r, query)
                return
            code, payload = self._serve(verb, r, query, body)
        except ApiError as exc:
            code, payload = exc.code, orjson.dumps(exc.status())
        except Exception as exc:  # an emulator bug must still answer, as the apiserver's panic handler does
            code, payload = 500, orjson.dumps(errors.injected(500, f"emulator error: {exc!r}").status())
        # A created object's name (generateName); a review (SubjectAccessReview) has none and is not stored.
        name = orjson.loads(payload)["metadata"].get("name") if verb == "create" and code < 300 else r.name
        # Logged before the answer goes out: a client that has its answer finds the request in the log.
        emulator.faults.record(verb, r.res, r.namespace, name, code, subresource=r.subresource)
        self._send(code, payload, retry_after=code == 429)

    def _body(self) -> Any:
        try:
            length = int(self.request_headers.get("content-length") or 0)
        except ValueError:
            length = 0
        raw = self.rfile.read(length) if length else b""
        self.body_size = len(raw)  # read whole even when too large, so the connection stays usable
        if not raw:
            return None
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return _MALFORMED

    def _serve(self, verb: str, r: Route, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        if self.body_size > errors.MAX_REQUEST_BODY:  # the API's paths only: the emulator's controls seed more
            raise errors.body_too_large()
        if body is _MALFORMED:
            raise errors.bad_request("the request body is not valid JSON")
        if r.subresource not in (None, "status") or (r.subresource and not r.res.status_subresource):
            raise errors.not_found(r.res, f"{r.name}/{r.subresource}")
        if r.subresource and verb not in ("get", "update", "patch"):
            raise errors.method_not_allowed()
        serve = {"get": self._get, "list": self._list, "create": self._create, "update": self._update,
                 "patch": self._patch, "delete": self._delete, "deletecollection": self._delete_collection}[verb]
        return serve(r, query, body)

    def _get(self, r: Route, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        return 200, self.server.emulator.store.get(r.res, r.namespace, r.name or "").full()

    def _create(self, r: Route, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        dry_run = _dry_run(query)
        if r.res.plural == "subjectaccessreviews":
            return 201, orjson.dumps(authz.review(self.server.emulator.store, body))
        created = self.server.emulator.store.create(r.res, r.namespace, body, dry_run=dry_run)
        return (200 if dry_run else 201), created.full()

    def _update(self, r: Route, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        store = self.server.emulator.store
        updated = store.update(r.res, r.namespace, r.name or "", body, dry_run=_dry_run(query),
                               status_only=r.subresource == "status")
        return 200, updated.full()

    def _patch(self, r: Route, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        content_type = self.request_headers.get("content-type", "").split(";")[0].strip()
        patched = self.server.emulator.store.patch(r.res, r.namespace, r.name or "", content_type=content_type,
                                                   body=body, dry_run=_dry_run(query),
                                                   status_only=r.subresource == "status")
        return 200, patched.full()

    def _delete(self, r: Route, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        pre = body.get("preconditions") if isinstance(body, dict) else None
        deleted = self.server.emulator.store.delete(r.res, r.namespace, r.name or "", preconditions=pre,
                                                    dry_run=_dry_run(query))
        return 200, deleted.full() if r.res.delete_returns_object else _success(deleted)

    def _list(self, r: Route, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        match = matcher(query.get("labelSelector"), query.get("fieldSelector"), allowed=r.res.field_labels)
        selected = bool(query.get("labelSelector") or query.get("fieldSelector"))
        items, remaining, rv = self.server.emulator.store.page(
            r.res, r.namespace, match, after=_after(query), limit=max(0, int(query.get("limit") or 0)),
            selected=selected)
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if remaining != 0 and items:
            last = items[-1].obj["metadata"]
            meta["continue"] = f"{last.get('namespace', '')}/{last['name']}"
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        head = orjson.dumps({"kind": f"{r.res.kind}List", "apiVersion": r.res.api_version, "metadata": meta})
        return 200, head[:-1] + b',"items":[' + b",".join(s.raw for s in items) + b"]}"

    def _delete_collection(self, r: Route, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        store, dry_run = self.server.emulator.store, _dry_run(query)
        match = matcher(query.get("labelSelector"), query.get("fieldSelector"), allowed=r.res.field_labels)
        items, rv = store.list(r.res, r.namespace, match)
        for stored in items:
            meta = stored.obj["metadata"]
            try:
                store.delete(r.res, meta.get("namespace"), meta["name"], dry_run=dry_run)
            except ApiError as exc:
                if exc.code != 404:  # deleted meanwhile by someone else: what the caller asked for
                    raise
        head = orjson.dumps({"kind": f"{r.res.kind}List", "apiVersion": r.res.api_version,
                             "metadata": {"resourceVersion": str(rv)}})
        return 200, head[:-1] + b',"items":[' + b",".join(s.raw for s in items) + b"]}"

    # ---- watch -----------------------------------------------------------------------------------

    def _watch(self, r: Route, query: dict[str, str]) -> None:
        emulator = self.server.emulator
        match = matcher(query.get("labelSelector"), query.get("fieldSelector"), allowed=r.res.field_labels)
        timeout = float(query.get("timeoutSeconds") or _DEFAULT_WATCH_TIMEOUT)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        watcher = emulator.store.watch(r.res, r.namespace, match, query.get("resourceVersion"))
        emulator.faults.record("watch", r.res, r.namespace, r.name, 200)  # as it starts: tests look while it runs
        self.send_response(200)
        self.send_header("Content-Type", _JSON)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            ended = self._stream(watcher, deadline=time.monotonic() + timeout, bookmarks=bookmarks)
        except OSError:  # the client went away mid-stream
            ended = False
        finally:
            emulator.store.unwatch(watcher)
        if not ended:
            self._cut()
            return
        try:
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client left just as the watch ended
            self.close_connection = True

    def _cut(self) -> None:
        """Reset the connection without an answer, as a dying server does; the peer may be gone already."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _stream(self, watcher: Watcher, *, deadline: float, bookmarks: bool) -> bool:
        """Send events until timeout (True: end cleanly) or a drop / client disconnect (False: cut)."""
        interval = self.server.emulator.bookmark_interval
        next_bookmark = time.monotonic() + interval
        while (now := time.monotonic()) < deadline:
            if bookmarks and now >= next_bookmark:
                self.server.emulator.store.bookmark(watcher)
                next_bookmark = now + interval
            with watcher.ready:
                if not watcher.queue:
                    watcher.ready.wait(min(_IDLE_CHECK, max(deadline - now, 0.0)))
                lines = list(watcher.queue)
                watcher.queue.clear()
            for line in lines:
                if line is None:
                    return not watcher.abort
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            if not lines and self._client_gone():
                return False
        return True

    def _client_gone(self) -> bool:
        readable, _, _ = select.select([self.connection], [], [], 0)
        return bool(readable) and not self.connection.recv(1, socket.MSG_PEEK)

    # ---- small answers ---------------------------------------------------------------------------

    def _unrouted(self, method: str, path: str, body: Any) -> None:
        """Discovery documents, and the emulator's own controls."""
        if path.startswith(control.PREFIX):
            try:
                self._send(200, orjson.dumps(control.handle(self.server.emulator, method, path, body)))
            except ApiError as exc:
                self._send(exc.code, orjson.dumps(exc.status()))
            return
        emulator = self.server.emulator
        doc = discovery(path.rstrip("/") or "/", host=emulator.url.removeprefix("http://"),
                        certificates=emulator.certificates)
        if doc is None or method != "GET":
            status = ApiError(404, "NotFound", "the server could not find the requested resource").status()
            self._send(404, orjson.dumps(status))
        else:
            self._send(200, orjson.dumps(doc))

    def _send(self, code: int, payload: bytes, *, retry_after: bool = False) -> None:
        """Status line, headers and body in one write: with the client in the same process, each socket
        write is a GIL hand-over, and two of them measured ~2x the wall time of one."""
        extra = f"Retry-After: {self.server.emulator.retry_after}\r\n" if retry_after else ""
        head = (f"HTTP/1.1 {code} {HTTPStatus(code).phrase}\r\nContent-Type: {_JSON}\r\n"
                f"Date: {self.date_time_string()}\r\nContent-Length: {len(payload)}\r\n{extra}\r\n")
        self.wfile.write(head.encode() + payload)


_MALFORMED = object()


def _body_name(body: Any) -> str | None:
    """The name a create asks for, so faults can target it (None with generateName)."""
    meta = body.get("metadata") if isinstance(body, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) and name else None


def _dry_run(query: dict[str, str]) -> bool:
    value = query.get("dryRun")
    if value not in (None, "All"):
        raise errors.bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
    return value == "All"


def _success(deleted: Stored) -> bytes:
    meta, res = deleted.obj["metadata"], deleted.res
    details = {"name": meta["name"], "kind": res.plural, "uid": meta["uid"]}
    if res.group:
        details["group"] = res.group
    return orjson.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})


def _after(query: dict[str, str]) -> tuple[str, str] | None:
    """``continue``: the token is the last key served; the next page continues from the current state
    rather than a snapshot (a simplification: the real API serves the original snapshot or 410)."""
    token = query.get("continue")
    if not token:
        return None
    namespace, _, name = token.partition("/")
    return namespace, name


def discovery(path: str, *, host: str, certificates: tuple[str, ...] = ()) -> dict[str, Any] | None:
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]}
    if path == "/apis":
        return resources.api_group_list(certificates)
    if path == "/version":
        # The release that first served what is served: certificates.k8s.io/v1 pod certificates came in
        # 1.37, the v1beta1 ones in 1.35; without them the emulator is the 1.33 it has always been.
        minor = "37" if "v1" in certificates else "35" if certificates else "33"
        return {"major": "1", "minor": minor, "gitVersion": f"v1.{minor}.0-kubeapi-emulator", "gitCommit": "",
                "gitTreeState": "clean", "buildDate": "2025-04-23T00:00:00Z", "goVersion": "none",
                "compiler": "none", "platform": "linux/amd64"}
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) == 2:
        return resources.resource_list("", parts[1], certificates)
    if parts[0] == "apis" and len(parts) == 3:
        return resources.resource_list(parts[1], parts[2], certificates)
    return None


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # the refuse-connections outage closes and re-binds the same port
    request_queue_size = 128  # a benchmark opens many pooled connections at once; the default 5 drops some

    def __init__(self, address: tuple[str, int], emulator: Emulator) -> None:
        super().__init__(address, Handler)
        self.emulator = emulator
        self.connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that closes a connection mid-answer (the reconciler drops a list page over its byte
        budget unread) is normal, as it is for the apiserver: not a traceback on stderr."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def track(self, conn: socket.socket, *, open_: bool) -> None:
        with self._connections_lock:
            (self.connections.add if open_ else self.connections.discard)(conn)

    def cut_connections(self) -> None:
        """Reset every open connection, as a crashed or stopped apiserver would."""
        with self._connections_lock:
            conns = list(self.connections)
        for conn in conns:
            with contextlib.suppress(OSError):  # already closed by the client
                conn.shutdown(socket.SHUT_RDWR)


def serve_in_thread(server: EmulatorHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
                              name=f"kubeapi-{server.server_address[1]}")
    thread.start()
    return thread

