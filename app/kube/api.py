"""A thin adapter over the official client: plain dicts in and out, typed errors, calls counted by verb.

It goes through the client's ApiClient (configuration, auth, TLS, connection pool) but not through the
generated typed methods: those validate every argument with pydantic and turn every object into a model,
which costs more than the request itself for the thousands of small objects a pass reads. Bodies are
sent as plain JSON dicts and answers parsed with orjson.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import orjson
import urllib3
from kubernetes import client
from kubernetes.client import rest
from kubernetes.client.exceptions import ApiException

from tls_injector.kube.bounded import Deadline, read_capped
from tls_injector.kube.errors import IllegalName, KubeError, NotFound, Unavailable, error_for
from tls_injector.kubenames import label_problem, path_problem, path_segment_problem, shown
from tls_injector.names import FIELD_MANAGER
from tls_injector.settings import API_TIMEOUT_SECONDS

Obj = dict[str, Any]
# Lists come in pages so one answer never holds the whole cluster in memory at once.
PAGE_SIZE = 500
# A page's JSON is read whole, then parsed, and parsed objects take ~8x their JSON (measured: a Service
# whose selector has 40,000 labels, 682 KiB of JSON, is 5.4 MiB parsed): 40 such Services in one page of
# 500 took a pass to 415 MiB. So a page may hold at most PAGE_BYTES of JSON (~32 MiB parsed, whatever its
# objects hold): one over it is dropped unread past the cap and asked again with a quarter of the limit,
# and the next page's limit doubles back towards PAGE_SIZE while pages come back under half the budget
# (so a list of large objects settles on a limit that fits, rather than overshooting every other page).
# 4 MiB holds 500 objects of 8 KiB, more than most Services and workloads are, so a usual cluster's lists
# are read as before.
PAGE_BYTES = 4 * 1024 * 1024
_READ_CHUNK = 64 * 1024  # what one read of a list page asks the socket for
# On every create and update: the API server records the fields we set under our name (managedFields), not
# under the client library's user agent ("OpenAPI-Generator"), so whoever reads an object sees who wrote it.
_WRITER = (("fieldManager", FIELD_MANAGER),)


@dataclass(frozen=True)
class Resource:
    kind: str
    prefix: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The collection's path (all namespaces when `namespace` is None), or one object's when `name` is
        given. IllegalName, before any request, for a namespace that is no DNS-1123 label, a name that
        cannot be one path segment (`..`, `a/b`, "", ...), or a namespaced object named without its
        namespace: each would make the path name something else (`secrets/../../../secrets` is every
        Secret of the cluster, `secrets/` the namespace's list)."""
        scope = ""
        if self.namespaced and namespace is not None:
            if why := label_problem(namespace):
                raise IllegalName(f"{self.kind} namespace {shown(namespace)}: {why}; no request made")
            scope = f"/namespaces/{namespace}"
        if name is None:
            return f"{self.prefix}{scope}/{self.plural}"
        if why := path_segment_problem(name):
            raise IllegalName(f"{self.kind} name {shown(name)}: {why}; no request made")
        if self.namespaced and not scope:
            raise IllegalName(f"{self.kind} {shown(name)}: a {self.kind} is named within a namespace, and none "
                              "was given; no request made")
        return f"{self.prefix}{scope}/{self.plural}/{name}"


SECRETS = Resource("Secret", "/api/v1", "secrets")
CONFIG_MAPS = Resource("ConfigMap", "/api/v1", "configmaps")
PODS = Resource("Pod", "/api/v1", "pods")
SERVICES = Resource("Service", "/api/v1", "services")
EVENTS = Resource("Event", "/api/v1", "events")
NAMESPACES = Resource("Namespace", "/api/v1", "namespaces", namespaced=False)
NODES = Resource("Node", "/api/v1", "nodes", namespaced=False)
SERVICE_ACCOUNTS = Resource("ServiceAccount", "/api/v1", "serviceaccounts")
DEPLOYMENTS = Resource("Deployment", "/apis/apps/v1", "deployments")
STATEFUL_SETS = Resource("StatefulSet", "/apis/apps/v1", "statefulsets")
DAEMON_SETS = Resource("DaemonSet", "/apis/apps/v1", "daemonsets")
REPLICA_SETS = Resource("ReplicaSet", "/apis/apps/v1", "replicasets")
JOBS = Resource("Job", "/apis/batch/v1", "jobs")
CRON_JOBS = Resource("CronJob", "/apis/batch/v1", "cronjobs")
LEASES = Resource("Lease", "/apis/coordination.k8s.io/v1", "leases")
MUTATING_WEBHOOKS = Resource(
    "MutatingWebhookConfiguration", "/apis/admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", False
)
# Create-only: asks whether a subject may make a call (the doctor asks for the reconciler's account).
SUBJECT_ACCESS_REVIEWS = Resource(
    "SubjectAccessReview", "/apis/authorization.k8s.io/v1", "subjectaccessreviews", namespaced=False
)
VALIDATING_WEBHOOKS = Resource(
    "ValidatingWebhookConfiguration", "/apis/admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", False
)
# Read by doctor only: the exported admission policies that guard a TLS exception, and their bindings.
VALIDATING_ADMISSION_POLICIES = Resource(
    "ValidatingAdmissionPolicy", "/apis/admissionregistration.k8s.io/v1", "validatingadmissionpolicies", False
)
VALIDATING_ADMISSION_POLICY_BINDINGS = Resource(
    "ValidatingAdmissionPolicyBinding", "/apis/admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings",
    False,
)


CERTIFICATES_GROUP = "certificates.k8s.io"


def pod_certificate_requests(version: str) -> Resource:
    """PodCertificateRequests in `version` of certificates.k8s.io (v1 from 1.37, v1beta1 on 1.35/1.36)."""
    return Resource("PodCertificateRequest", _group_path(CERTIFICATES_GROUP, version), "podcertificaterequests")


def cluster_trust_bundles(version: str) -> Resource:
    return Resource("ClusterTrustBundle", _group_path(CERTIFICATES_GROUP, version), "clustertrustbundles", False)


def _group_path(group: str, version: str) -> str:
    """`/apis/<group>/<version>`; IllegalName when either is no path segment (`a/b` would be two)."""
    for what, part in (("group", group), ("version", version)):
        if why := path_segment_problem(part):
            raise IllegalName(f"API {what} {shown(part)}: {why}; no request made")
    return f"/apis/{group}/{version}"


@dataclass(frozen=True)
class Oversized:
    """An object a list left out as larger than what its kind holds: `size` bytes of JSON (at least)."""

    namespace: str
    name: str
    size: int


@dataclass(frozen=True)
class ObjectList:
    items: list[Obj]
    resource_version: str
    oversized: tuple[Oversized, ...] = ()


class ListTooLarge(KubeError):
    """One object alone is over the page budget and the answer did not say how to go on past it."""


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: Obj


@dataclass
class KubeApi:
    """Every call the program makes to the API server. Thread-safe: the client pools connections."""

    api_client: client.ApiClient
    timeout: float = API_TIMEOUT_SECONDS
    page_bytes: int = PAGE_BYTES
    calls: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    on_call: Callable[[str, str], None] | None = None  # (verb, "ok" or error class name), for metrics
    # A server we do not trust to answer well (a member cluster): every call ends by `deadline`, and every
    # answer is read in pieces, refused when compressed or over `answer_limit` bytes (app/kube/bounded.py).
    deadline: Deadline | None = None
    answer_limit: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        return self._json("get", "GET", resource.path(namespace, name))

    def list_objects(
        self, resource: Resource, *, namespace: str | None = None, label_selector: str | None = None,
        field_selector: str | None = None, shape: Callable[[Obj], Obj | None] | None = None,
        max_object_bytes: int | None = None,
    ) -> ObjectList:
        """Every object, a page at a time (at most `page_bytes` of JSON each). `shape` keeps of each object
        only what the caller reads (None: not at all) before the next page is read, so the list is never
        held whole as sent; an object whose kept part is over `max_object_bytes` of JSON, or that alone is
        over a page, is left out and named in `oversized`. Without `max_object_bytes` the caller has no way
        to report a left-out object, so one alone over a page raises ListTooLarge instead."""
        items: list[Obj] = []
        oversized: list[Oversized] = []
        query: list[tuple[str, str]] = [("labelSelector", label_selector)] if label_selector else []
        query += [("fieldSelector", field_selector)] if field_selector else []
        token, limit = "", PAGE_SIZE
        while True:
            paging = [("limit", str(limit))] + ([("continue", token)] if token else [])
            body, complete = self._bounded(resource.path(namespace), query + paging)
            if not complete and limit > 1:
                limit = max(1, limit // 4)
                continue
            if complete:
                page: Obj = orjson.loads(body)
                # Only a page over the cap can hold an object over it: most pages are not measured at all.
                cap = max_object_bytes if max_object_bytes is not None and len(body) > max_object_bytes else None
                kept, over = _kept(page.get("items") or [], shape, cap)
                items += kept
                oversized += over
            else:
                page, alone = _past_one_object(body, resource, skip=max_object_bytes is not None)
                oversized.append(alone)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or ""
            limit = min(PAGE_SIZE, limit * 2) if len(body) < self.page_bytes // 2 else limit
            if not token:
                return ObjectList(items, str(meta.get("resourceVersion") or ""), tuple(oversized))

    def current_version(self, resource: Resource, *, label_selector: str | None = None,
                        field_selector: str | None = None) -> str:
        """The collection's resourceVersion, to watch from: one page of one item, not the whole list
        (a watch on every Pod of a large cluster would otherwise read them all to start)."""
        query = [("limit", "1")] + ([("labelSelector", label_selector)] if label_selector else [])
        query += [("fieldSelector", field_selector)] if field_selector else []
        page = self._json("list", "GET", resource.path(), query=query)
        return str((page.get("metadata") or {}).get("resourceVersion") or "")

    def create(self, resource: Resource, body: Obj, *, namespace: str | None = None) -> Obj:
        return self._json("create", "POST", resource.path(namespace), query=_WRITER, body=body)

    def post(self, resource: Resource, body: Obj, *, namespace: str | None = None) -> None:
        """Create, the answer read and dropped unparsed: for an object nothing reads again (an Event)."""
        path = resource.path(namespace)
        response = self._call("create", "POST", path, query=_WRITER, body=body)
        try:
            self._read(response, f"POST {path}")
        except KubeError as e:  # the call was counted; its answer failed
            self._count("", type(e).__name__)
            raise

    def replace(self, resource: Resource, body: Obj) -> Obj:
        """PUT with the body's metadata.resourceVersion as the precondition: a stale version is a Conflict."""
        meta = body["metadata"]
        if not meta.get("resourceVersion"):
            raise ValueError("replace needs metadata.resourceVersion: an unconditional update could overwrite")
        return self._json("update", "PUT", resource.path(meta.get("namespace"), meta["name"]), query=_WRITER, body=body)

    def overwrite(self, resource: Resource, body: Obj) -> None:
        """PUT without a resourceVersion: an unconditional update, for a writer that may not read what it
        replaces (the hub in a member: its account has no get on Secrets, so it never learns a version).
        The answer, the object as written, is read within the bounds and not kept. NotFound when there is
        none (a Secret is never created by a PUT)."""
        meta = {k: v for k, v in body["metadata"].items() if k != "resourceVersion"}
        self._json("update", "PUT", resource.path(meta.get("namespace"), meta["name"]), query=_WRITER,
                   body={**body, "metadata": meta})

    def replace_status(self, resource: Resource, body: Obj) -> Obj:
        """PUT to the status subresource, with the same resourceVersion precondition as `replace`."""
        meta = body["metadata"]
        if not meta.get("resourceVersion"):
            raise ValueError("replace_status needs metadata.resourceVersion: an unconditional update could overwrite")
        return self._json("update", "PUT", resource.path(meta.get("namespace"), meta["name"]) + "/status",
                          query=_WRITER, body=body)

    def server_version(self) -> Obj:
        """GET /version: the cheapest call every API server answers (any authenticated user may), so a
        one-shot command learns at once, within the timeout, whether the API answers at all."""
        return self._json("get", "GET", "/version")

    def server_date(self) -> datetime | None:
        """The API server's clock: the Date header of its answer to GET /version (1 s resolution), None
        when the answer has none. For comparing clocks between clusters."""
        response = self._call("get", "GET", "/version")
        self._read(response, "GET /version")
        header = response.getheader("Date")
        try:
            date = parsedate_to_datetime(header) if header else None
        except (TypeError, ValueError):
            return None
        # An HTTP date is always UTC (RFC 9110, 5.6.7); one written with "-0000" parses naive, and a naive
        # time compared with the hub's aware clock raised TypeError out of a whole pass.
        return date.replace(tzinfo=UTC) if date is not None and date.tzinfo is None else date

    def served_resources(self, group: str, version: str) -> set[str] | None:
        """The resource names (plurals, and `x/status` subresources) a group-version serves; None when the
        server does not serve that group-version at all (discovery answers 404)."""
        try:
            doc = self._json("get", "GET", _group_path(group, version))
        except NotFound:
            return None
        return {str(r.get("name")) for r in doc.get("resources") or [] if isinstance(r, dict)}

    def delete(
        self, resource: Resource, name: str, *, namespace: str | None = None, resource_version: str = ""
    ) -> None:
        """Delete, only if still at `resource_version` when given (a Conflict otherwise)."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if resource_version:
            body["preconditions"] = {"resourceVersion": resource_version}
        path = resource.path(namespace, name)
        self._read(self._call("delete", "DELETE", path, body=body), f"DELETE {path}")

    def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> Iterator[WatchEvent]:
        """Events after `resource_version` until the server ends the watch; Gone when it is too old."""
        query = [("watch", "true"), ("resourceVersion", resource_version), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(timeout_seconds))]
        query += [("labelSelector", label_selector)] if label_selector else []
        query += [("fieldSelector", field_selector)] if field_selector else []
        # The read timeout outlives the server-side timeout so a healthy watch is never cut by us.
        response = self._call("watch", "GET", resource.path(namespace), query=query, timeout=(10, timeout_seconds + 30))
        return _events(response.response)

    def _json(self, verb: str, method: str, path: str, *, query: Sequence[tuple[str, str]] | None = None,
              body: Obj | None = None) -> Obj:
        response = self._call(verb, method, path, query=query, body=body)
        try:
            answer = self._read(response, f"{method} {path}")
        except KubeError as e:  # the call was counted; its answer failed
            self._count("", type(e).__name__)
            raise
        data: Obj = orjson.loads(answer)
        return data

    def _bounded(self, path: str, query: list[tuple[str, str]]) -> tuple[bytes, bool]:
        """A list page's body and True; or, when it is over `page_bytes`, what was read up to there and
        False (the rest is never read, and the connection is closed rather than drained)."""
        response = self._call("list", "GET", path, query=query)
        if self.answer_limit is not None:  # a member's answer: capped, never inflated, by its deadline
            return self._read(response, f"GET {path}"), True
        raw, chunks, size = response.response, [], 0
        try:
            for chunk in raw.stream(_READ_CHUNK, decode_content=True):
                chunks.append(chunk)
                size += len(chunk)
                if size > self.page_bytes:
                    raw.close()
                    return b"".join(chunks), False
            return b"".join(chunks), True
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise self._failed("list", Unavailable(f"GET {path}: {e}")) from e
        finally:
            raw.release_conn()

    def _read(self, response: Any, what: str) -> bytes:
        """The answer's body: whole (the client's own read) from our own cluster; in capped pieces from
        a server with an answer limit."""
        if self.answer_limit is None:
            body: bytes = response.read()  # RESTResponse.read is untyped in the client
            return body
        try:
            body = read_capped(response.response, limit=self.answer_limit, what=what)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            body = b""
            failure: Exception | None = e
        else:
            failure = None
        # A connection cut by the deadline can look like an answer that ended (headers cut short parse as
        # complete, a body without a length as read to its end): after the deadline, nothing read counts.
        if self.deadline is not None and self.deadline.passed:
            raise Unavailable(f"{what}: the visit's deadline of {self.deadline.seconds:g}s passed")
        if failure is not None:
            raise Unavailable(f"{what}: {failure}") from failure
        return body

    def _call(self, verb: str, method: str, path: str, *, query: Sequence[tuple[str, str]] | None = None,
              body: Obj | None = None, timeout: float | tuple[float, float] | None = None) -> Any:
        _check_path(path)
        # identity: no compressed answers (an inflating one weighs far more than its bytes on the wire)
        headers = {"Accept": "application/json", "Content-Type": "application/json", "Accept-Encoding": "identity"}
        # The body is not handed to the client: it would walk it (sanitize_for_serialization) and encode it
        # with the json module, ~60 of the ~320 us of client CPU a Secret's create costs; orjson encodes it
        # in a few (a first pass at 100,000 workloads makes ~200,000 such calls).
        request = self.api_client.param_serialize(method, path, query_params=list(query or ()), header_params=headers,
                                                  auth_settings=["BearerToken"])
        limit = timeout or self.timeout
        if self.deadline is not None:  # each socket wait at most what is left (the timer cuts the rest)
            try:
                left = self.deadline.remaining(f"{method} {path}")
            except Unavailable as e:
                raise self._failed(verb, e) from e
            limit = (min(self.timeout, left), min(self.timeout, left))
        try:
            if body is None:
                response = self.api_client.call_api(*request, _request_timeout=limit)
            else:
                response = self._send(method, request[1], request[2], orjson.dumps(body), limit)
        except ApiException as e:
            raise self._failed(verb, error_for(e.status or 0, e.body, fallback=str(e.reason))) from e
        except urllib3.exceptions.HTTPError as e:
            raise self._failed(verb, Unavailable(f"{method} {path}: {e}")) from e
        if not 200 <= response.status <= 299:
            try:
                answer = self._read(response, f"{method} {path}")
            except KubeError as e:
                raise self._failed(verb, e) from e
            raise self._failed(verb, error_for(response.status, answer, fallback=f"{method} {path}"))
        self._count(verb, "ok")
        return response

    def _send(self, method: str, url: str, headers: dict[str, str], body: bytes,
              limit: float | tuple[float, float]) -> rest.RESTResponse:
        """A call with a JSON body already encoded, through the client's own pool (its TLS and
        connections), as its RESTClientObject.request sends one; a failure raises urllib3's errors."""
        timeout = (urllib3.Timeout(total=limit) if isinstance(limit, (int, float))
                   else urllib3.Timeout(connect=limit[0], read=limit[1]))
        raw = self.api_client.rest_client.pool_manager.request(method, url, body=body, timeout=timeout,
                                                               headers=headers, preload_content=False)
        return rest.RESTResponse(raw)

    def _failed(self, verb: str, error: KubeError) -> KubeError:
        self._count(verb, type(error).__name__)
        return error

    def _count(self, verb: str, outcome: str) -> None:
        with self._lock:
            if verb:
                self.calls[verb] += 1
            if outcome != "ok":
                self.errors[outcome] += 1
        if self.on_call and verb:
            self.on_call(verb, outcome)


def _check_path(path: str) -> None:
    """The last fence before a request: every segment of `path` can be one (no `..`, `%`, `?`, empty...),
    whatever built it. Resource.path checks each name where it goes in, with what it is; this holds the
    paths built elsewhere (discovery's `/apis/<group>/<version>`, a subresource) to the same rule."""
    if why := path_problem(path):
        raise IllegalName(f"request path {shown(path)}: {why}; no request made")


def _kept(items: list[Obj], shape: Callable[[Obj], Obj | None] | None,
          cap: int | None) -> tuple[list[Obj], list[Oversized]]:
    kept, over = [], []
    for item in items:
        shaped = shape(item) if shape is not None else item
        if shaped is None:
            continue
        size = len(orjson.dumps(shaped)) if cap is not None else 0
        if size > (cap or 0):
            meta = item.get("metadata") or {}
            over.append(Oversized(str(meta.get("namespace") or ""), str(meta.get("name") or ""), size))
        else:
            kept.append(shaped)
    return kept, over


# An object's name and namespace come first in its metadata, which comes first in a list item, as the
# apiserver encodes them (Go struct order); the list's own metadata (continue token included) comes before
# its items. So the first bytes of a page that holds one object too large to read say how to go on.
_ITEMS = b'"items":['
_NAME = re.compile(rb'"metadata":\{"name":"([^"\\]{1,253})"(?:,"namespace":"([^"\\]{1,63})")?')


def _past_one_object(prefix: bytes, resource: Resource, *, skip: bool) -> tuple[Obj, Oversized]:
    """The list's metadata from the first bytes of a page holding one object alone over the page budget,
    and that object as Oversized (its name when the bytes read say it)."""
    if not skip:
        raise ListTooLarge(f"a {resource.kind} alone is over the list page budget of {len(prefix)} bytes")
    at = prefix.find(_ITEMS)
    try:
        head: Obj = orjson.loads(prefix[:at] + b'"items":[]}') if at > 0 else {}
    except orjson.JSONDecodeError:
        head = {}
    if "metadata" not in head:
        raise ListTooLarge(f"a {resource.kind} list page of one object is over the page budget, and its head "
                           "does not say how to go on past it")
    found = _NAME.search(prefix, at, at + 4096)
    name, namespace = (found.group(1).decode(), (found.group(2) or b"").decode()) if found else ("?", "")
    return head, Oversized(namespace, name, len(prefix))


def _events(raw: urllib3.BaseHTTPResponse) -> Iterator[WatchEvent]:
    try:
        for line in _lines(raw):
            event = orjson.loads(line)
            if event.get("type") == "ERROR":
                status = event.get("object") or {}
                raise error_for(int(status.get("code") or 0), orjson.dumps(status))
            yield WatchEvent(str(event.get("type")), event.get("object") or {})
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise Unavailable(f"watch interrupted: {e}") from e
    finally:
        raw.release_conn()


def _lines(raw: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    pending = b""
    for chunk in raw.stream(amt=None, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line.strip())
    if pending.strip():
        yield pending
