"""The two API servers of the contract test side by side: the real kube-apiserver and the emulator
(tests/kubeapi), each seen through the official client with a namespace of its own, and a request's
verdict reduced to what a caller branches on.

Requests go out raw (method, path, JSON body), not through the generated typed methods, so the very
same bytes reach both servers and a refusal comes back as the Status object, not an exception.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import kubernetes.client
from kubernetes.client.exceptions import ApiException

Obj = dict[str, Any]
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Verdict:
    """What a caller of the API sees of an answer: the HTTP status, the Status reason and, for a 422,
    each cause's (reason, field). `seen` is what a case chose to compare of an accepted write."""

    code: int
    reason: str = ""
    causes: frozenset[tuple[str, str]] = frozenset()
    seen: Any = None


@dataclass(frozen=True)
class Reply:
    code: int
    body: Obj

    def verdict(self, *, causes: bool = True, seen: Any = None) -> Verdict:
        if 200 <= self.code <= 299:
            return Verdict(self.code, seen=seen)
        details = self.body.get("details") or {}
        found = frozenset((str(c.get("reason", "")), str(c.get("field", ""))) for c in details.get("causes") or [])
        return Verdict(self.code, str(self.body.get("reason") or ""), found if causes else frozenset())


@dataclass
class Server:
    """One API server as a case sees it: `namespace` exists and is the case's alone; cluster-scoped
    objects a case creates are named with `unique(...)` and deleted by `cleanup()`."""

    label: str
    client: kubernetes.client.ApiClient
    namespace: str
    created: list[str] = field(default_factory=list)  # cluster-scoped paths to delete afterwards

    def unique(self, stem: str) -> str:
        return f"{stem}-{self.namespace}"

    def send(self, method: str, path: str, body: Any = None, *, content_type: str = JSON) -> Reply:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        method_, url, headers_, body_, _ = self.client.param_serialize(
            method, path, header_params=headers, body=body, auth_settings=["BearerToken"])
        raw: str | bytes
        try:
            response = self.client.call_api(method_, url, headers_, body_, _request_timeout=60)
            code, raw = int(response.status), response.read()  # type: ignore[no-untyped-call]
        except ApiException as error:
            code, raw = int(error.status or 0), error.body or b""
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {"raw": raw[:200]}
        reply = Reply(code, parsed if isinstance(parsed, dict) else {"value": parsed})
        name = (reply.body.get("metadata") or {}).get("name")
        if method == "POST" and code == 201 and name and path.startswith("/apis/") and "/namespaces/" not in path:
            self.created.append(f"{path}/{name}")  # cluster-scoped: ours to delete
        return reply

    def ok(self, method: str, path: str, body: Any = None, *, content_type: str = JSON) -> Obj:
        """A step a case needs to succeed (setup): fails the case, naming the server, when it does not."""
        reply = self.send(method, path, body, content_type=content_type)
        assert 200 <= reply.code <= 299, f"{self.label}: {method} {path} answered {reply.code}: {reply.body}"
        return reply.body

    def cleanup(self) -> None:
        for path in self.created:
            self.send("DELETE", path)
        self.created.clear()


def namespaced(server: Server, plural: str, name: str = "", *, group: str = "") -> str:
    prefix = f"/apis/{group}" if group else "/api/v1"
    return f"{prefix}/namespaces/{server.namespace}/{plural}" + (f"/{name}" if name else "")


def fresh_namespace_name(test: str) -> str:
    """A DNS label from the test's name, unique per run: the real cluster keeps every namespace a
    session made (deleting one is asynchronous), so a rerun must not find its old one Terminating."""
    stem = "".join(c if c.isalnum() else "-" for c in test.lower()).strip("-")[:40].strip("-")
    return f"c-{stem}-{uuid.uuid4().hex[:6]}"
