"""The status page: one server-rendered HTML document, its style inline, no script, nothing fetched.

Attention first (a stopped pass, certificates expiring or overdue for renewal, certificates waiting for
a CA, pods running without the injection, a CA rotation under way), then the CAs with their rotation
step, then every workload, sortable by links (`?sort=`), so the page needs no JavaScript. Tables scroll
sideways inside their box on a narrow screen; the text wraps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from html import escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tls_injector.web.status import Status, Workload

EXPIRING_WITHIN = timedelta(days=7)
_FAR = datetime.max.replace(tzinfo=None)

STYLE = """
body{font:15px/1.4 system-ui,sans-serif;margin:0;padding:12px;color:#1b1b1b;background:#fafafa}
h1{font-size:1.3em;margin:0 0 4px}h2{font-size:1.1em;margin:20px 0 6px}
.meta{color:#555;margin:0 0 12px}
.box{overflow-x:auto;background:#fff;border:1px solid #ddd;border-radius:6px}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #eee;
vertical-align:top}th{background:#f0f0f0;white-space:nowrap}th a{color:inherit}
ul.attention{list-style:none;padding:0;margin:0}ul.attention li{padding:8px 10px;margin:0 0 6px;
border-radius:6px;background:#fff3f0;border-left:4px solid #c62828}
ul.attention li.warn{background:#fffbea;border-left-color:#b26a00}
.ok{padding:8px 10px;border-radius:6px;background:#edf7ed;border-left:4px solid #2e7d32}
.muted{color:#666}code{font-size:.9em;word-break:break-all}
"""


def render_page(status: Status | None, *, sort: str, now: datetime) -> str:
    if status is None:
        body = ("<p class='meta'>No reconcile pass to show: this replica does not hold the leader Lease, or has "
                "not finished a pass since it took it.</p>")
        return _document(body)
    parts = [f"<p class='meta'>Last pass {_when(status.pass_at, now)}; "
             f"{'converged' if status.converged else 'not converged'}</p>",
             "<h2 id='attention'>Needs attention</h2>", _attention(status, now),
             "<h2 id='cas'>Certificate authorities</h2>", _cas(status, now),
             f"<h2 id='workloads'>Workloads ({len(status.workloads)})</h2>", _workloads(status.workloads, sort, now)]
    return _document("".join(parts))


def _document(body: str) -> str:
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width,initial-scale=1'>"
            f"<title>tls-injector status</title><style>{STYLE}</style></head>"
            f"<body><h1>tls-injector status</h1>{body}</body></html>")


def attention_items(status: Status, now: datetime) -> list[tuple[str, str]]:
    """(severity, text) for everything a person should look at, in the order the docs give: a stopped
    pass; certificates expiring or overdue (the one that ends first first); certificates waiting or not
    issued; pods without the injection; a CA rotation under way. A certificate not issued has no date:
    it is not "due now" and is never sorted among the dated ones."""
    items: list[tuple[str, str]] = []
    if status.aborted:
        items.append(("crit", f"The last pass stopped: {status.aborted}"))
    items += _due(status.workloads, now)
    items += _not_current(status.workloads)
    for p in status.pods_missing_injection:
        items.append(("warn", f"Pod {p.namespace}/{p.name} (workload {p.workload}) runs without the injection: "
                              "restart its workload"))
    for ca in status.cas:
        if ca.waits_for and ca.state in ("untrusted", "trusted-unused"):
            items.append(("warn", f"CA rotation in {ca.ca_set}: {ca.fingerprint} is {ca.state}, waiting for "
                                  f"{ca.waits_for}"))
    return items


def _name(w: Workload) -> str:
    return f"{w.namespace}/{w.secret} ({', '.join(w.workloads)})"


def _due(workloads: Sequence[Workload], now: datetime) -> list[tuple[str, str]]:
    """Certificates that end within EXPIRING_WITHIN or are past their renewal time, the first to end first."""
    items = []
    dated = sorted((w.not_after, w.namespace, w.secret, w) for w in workloads if w.not_after is not None)
    for not_after, _, _, w in dated:
        if not_after - now <= EXPIRING_WITHIN:
            items.append(("crit", f"Certificate {_name(w)} expires {_when(not_after, now)}"))
        elif w.renew_at is not None and w.renew_at <= now:
            items.append(("crit", f"Certificate {_name(w)} is overdue for renewal (due {_when(w.renew_at, now)})"))
    return items


# How an attention item words a certificate's Ready reason: "Certificate ns/web-tls (Deployment/web) <...>: <message>".
READY_WORDS = {"SecretConflict": "is in conflict with another object", "CertificateFailed": "could not be written",
               "CertificateWaiting": "waits", "ServiceNamesRefused": "is refused", "NotIssued": "is not issued yet"}


def _not_current(workloads: Sequence[Workload]) -> list[tuple[str, str]]:
    """Certificates that are not Ready, then every other trouble told on a workload, by namespace and Secret."""
    items = []
    troubles = []
    for w in sorted(workloads, key=lambda w: (w.namespace, w.secret)):
        items += [("warn", f"Certificate {_name(w)} {READY_WORDS.get(c.reason, c.reason)}: {c.message}")
                  for c in w.conditions if c.type == "Ready" and c.status == "False"]
        troubles += [("warn", f"Certificate {_name(w)}: {c.reason}: {c.message}") for c in w.conditions
                     if c.type != "Ready"]
        if w.names_problem and all(c.message != w.names_problem for c in w.conditions):
            troubles.append(("warn", w.names_problem))  # told by no condition (a status without its Events)
    return items + troubles


def _condition(w: Workload) -> str:
    """The workloads table's cell: the Ready reason (with its message when not Ready), then the others."""
    shown = [c.reason if c.status == "True" and c.type == "Ready" else f"{c.reason}: {c.message}"
             for c in w.conditions]
    return "; ".join(shown) or "-"


def _attention(status: Status, now: datetime) -> str:
    items = attention_items(status, now)
    if not items:
        return "<p class='ok'>Nothing: every certificate is issued and current, and no pod misses the injection.</p>"
    return "<ul class='attention'>" + "".join(
        f"<li class='{'warn' if level == 'warn' else 'crit'}'>{escape(text)}</li>" for level, text in items) + "</ul>"


def _cas(status: Status, now: datetime) -> str:
    rows = [[ca.ca_set, ca.state + (" (signs)" if ca.signs else ""), ca.waits_for or "-",
             ca.subject, "root" if ca.root else "intermediate", _when(ca.not_after, now), ca.fingerprint]
            for ca in status.cas]
    return _table(["CA set", "step", "waits for", "subject", "kind", "not after", "fingerprint"], rows)


SORTS: dict[str, tuple[str, Callable[[Workload], Any]]] = {
    "namespace": ("namespace", lambda w: (w.namespace, w.secret)),
    "workload": ("workload", lambda w: (w.workloads, w.namespace)),
    "secret": ("Secret", lambda w: (w.secret, w.namespace)),
    "not_after": ("not after", lambda w: (_naive(w.not_after), w.namespace, w.secret)),
    "renew_at": ("renew at", lambda w: (_naive(w.renew_at), w.namespace, w.secret)),
    "waiting": ("waiting", lambda w: (not w.waiting, w.namespace, w.secret)),
    "ready": ("condition", lambda w: (_ready(w), w.namespace, w.secret)),
}


def _ready(w: Workload) -> bool:
    """Sorts the certificates that are not Ready, or carry another trouble, first."""
    return all(c.status == ("True" if c.type == "Ready" else "False") for c in w.conditions)


def _workloads(workloads: Sequence[Workload], sort: str, now: datetime) -> str:
    _, key = SORTS.get(sort, SORTS["not_after"])
    header = [f"<a href='?sort={name}#workloads'>{escape(title)}</a>" + (" &#9662;" if name == sort else "")
              for name, (title, _) in SORTS.items()]
    rows = [[w.namespace, ", ".join(w.workloads), w.secret, _when(w.not_after, now), _when(w.renew_at, now),
             w.waiting or "-", _condition(w)] for w in sorted(workloads, key=key)]
    return _table(header, rows, raw_header=True)


def _table(header: Iterable[str], rows: list[list[str]], *, raw_header: bool = False) -> str:
    head = "".join(f"<th>{h if raw_header else escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<div class='box'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _naive(when: datetime | None) -> datetime:
    return _FAR if when is None else when.replace(tzinfo=None)


def _when(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "-"
    delta = when - now
    span = _span(abs(delta))
    return f"{when:%Y-%m-%d %H:%M} UTC ({'in ' + span if delta >= timedelta(0) else span + ' ago'})"


def _span(delta: timedelta) -> str:
    if delta >= timedelta(days=2):
        return f"{delta / timedelta(days=1):.0f} d"
    if delta >= timedelta(hours=2):
        return f"{delta / timedelta(hours=1):.0f} h"
    return f"{delta / timedelta(minutes=1):.0f} min"
