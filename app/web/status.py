"""The reconciler's status: `GET /api/v1/status` (typed, in the OpenAPI schema) and the page at `/`.

Both read the snapshot the last pass recorded (tls_injector.reconcile.parts.status), handed over as a function, so a
request makes no API call. The models here are the API's contract; they are filled from the snapshot's
attributes by name (a test checks the two agree field for field). Read-only, no key material.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict

from tls_injector.web.health import Probes, plain_routes
from tls_injector.web.operator import create_app
from tls_injector.web.page import render_page

SortKey = Literal["namespace", "workload", "secret", "not_after", "renew_at", "waiting", "ready"]


class _Model(BaseModel):
    model_config = ConfigDict(from_attributes=True, frozen=True)


class CertificateAuthority(_Model):
    ca_set: str
    role: Literal["serving", "client"]
    fingerprint: str
    subject: str
    root: bool
    not_after: datetime
    state: str
    signs: bool
    waits_for: str
    next_step_at: datetime | None


class Condition(_Model):
    """cert-manager's style: `Ready` first (True: `Issued`; False: the reason that stops it), then each
    other trouble that lasts; reasons are those of the Events (docs/operations.md, "Conditions")."""

    type: str
    status: Literal["True", "False"]
    reason: str
    message: str


class Workload(_Model):
    namespace: str
    workloads: tuple[str, ...]
    secret: str
    not_after: datetime | None
    renew_at: datetime | None
    waiting: str
    conditions: tuple[Condition, ...]
    names_problem: str = ""  # refused names, or none at all (the certificate names no Service)


class Pod(_Model):
    namespace: str
    name: str
    workload: str


class Member(_Model):
    name: str
    ready: bool = True  # a hub: the member has current intermediates of both roles
    reason: str = ""  # why not, when not


class Status(_Model):
    pass_at: datetime
    converged: bool
    aborted: str
    cas: tuple[CertificateAuthority, ...]
    workloads: tuple[Workload, ...]
    pods_missing_injection: tuple[Pod, ...]
    members: tuple[Member, ...]


class NoPass(_Model):
    detail: str


NOT_YET = ("no reconcile pass to show: this replica does not hold the leader Lease, or has not finished a pass "
           "since it took it")


def add_status_routes(app: FastAPI, snapshot: Callable[[], object | None],
                      clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
    """`/api/v1/status` and `/` on `app`, from `snapshot()` (None until a pass has run)."""

    async def status() -> Status | JSONResponse:
        found = snapshot()
        if found is None:
            return JSONResponse({"detail": NOT_YET}, status_code=503)
        return Status.model_validate(found)

    async def page(sort: SortKey = "not_after") -> HTMLResponse:
        found = snapshot()
        model = None if found is None else Status.model_validate(found)
        return HTMLResponse(render_page(model, sort=sort, now=clock()), status_code=200 if model else 503)

    app.add_api_route("/api/v1/status", status, methods=["GET"], response_model=Status,
                      responses={503: {"model": NoPass, "description": NOT_YET}},
                      summary="What the reconciler's last pass saw")
    app.add_api_route("/", page, methods=["GET"], response_class=HTMLResponse, summary="The status page",
                      responses={503: {"description": NOT_YET, "content": {"text/html": {}}}})


def status_app(probes: Probes, snapshot: Callable[[], object | None] | None) -> FastAPI:
    """The reconciler's operator port: the three probe routes and, when given a snapshot, the status API
    and the page (they name every opted-in namespace, workload and Secret: `reconcile --status`)."""
    app = create_app(plain_routes(probes), title="tls-injector reconciler")
    if snapshot is not None:
        add_status_routes(app, snapshot)
    return app
