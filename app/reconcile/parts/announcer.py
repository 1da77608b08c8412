"""The announcer: Events on workloads, and the conditions a pass found on each (the status's conditions).

One object with its own state, handed the API and, in the loop, the outbox (events.Outbox) its Events go
through. A condition is announced once while it lasts, not once per pass: a broken workload must not
grow the Event list. The log and the pass report say it at every pass; that is their callers' part.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from tls_injector.reconcile.core import events

if TYPE_CHECKING:
    from datetime import datetime

    from tls_injector.kube import KubeApi
    from tls_injector.reconcile.core.discover import WorkloadRef


class Announcer:
    """Events, through the loop's outbox when there is one, and each condition's dedup across passes."""

    def __init__(self, api: KubeApi, outbox: events.Outbox | None = None) -> None:
        self._api = api
        # The loop's Events, posted beside the pass (events.Outbox); None: each posted at once.
        self._outbox = outbox
        # Conditions (reason, object) an Event already announced and that lasted into the last pass: each is
        # announced once while it lasts, not once per pass (a broken workload must not grow the Event list).
        self._told: set[tuple[str, str]] = set()
        self._lasting: set[tuple[str, str]] = set()  # the conditions of the pass under way
        # The same conditions by the workloads they are told on, (reason, message): the status's conditions.
        self._facts: dict[WorkloadRef, list[tuple[str, str]]] = {}

    def use_outbox(self, outbox: events.Outbox | None) -> None:
        """The loop's outbox, which Events go through from now on (None: each posted at once)."""
        self._outbox = outbox

    def forget(self) -> None:
        """This replica no longer leads: the issuance its outbox still holds is not told (Outbox.drop_held)."""
        if self._outbox is not None:
            self._outbox.drop_held()

    @property
    def facts(self) -> dict[WorkloadRef, list[tuple[str, str]]]:
        """The conditions of the pass under way, by the workload they are told on."""
        return self._facts

    def begin(self) -> None:
        """A pass starts: it has told of no condition yet."""
        self._lasting, self._facts = set(), {}

    def end(self, *, complete: bool) -> None:
        """A pass ended: its Events are written. A condition that ended and starts again is announced again;
        a pass that was not `complete` (aborted, or keyed: a few namespaces) saw only part of them, so the
        ended ones are forgotten by the next complete pass."""
        if self._outbox is not None:
            self._outbox.flush()  # a pass ends with its Events written
        self._told = self._lasting if complete else self._told | self._lasting

    def emit(self, refs: tuple[WorkloadRef, ...], *, reason: str, message: str,
             kind: Literal["Normal", "Warning"], now: datetime) -> None:
        """Through the loop's outbox when there is one (posted beside the pass), else at once."""
        if self._outbox is not None:
            self._outbox.emit(refs, reason=reason, kind=kind, message=message, now=now)
        else:
            events.emit(self._api, refs, reason=reason, kind=kind, message=message, now=now)

    def tell_issued(self, namespace: str, told: list[str], now: datetime) -> None:
        """Routine issuance in `namespace`: through the outbox's tally in the loop (at most one Event per
        namespace per window, events.ISSUED_WINDOW), else one Event at once (a one-shot pass)."""
        if self._outbox is not None:
            self._outbox.tell_issued(namespace, told, now)
        else:
            events.emit(self._api, (events.issued_ref(namespace),), reason="CertificatesIssued", kind="Normal",
                        now=now, message=events.issued_message(told))

    def announce(self, refs: tuple[WorkloadRef, ...], key: str, *, reason: str, message: str, now: datetime,
                 kind: Literal["Normal", "Warning"] = "Warning") -> None:
        """A Warning Event for a condition of `key`, once while it lasts: the log and the report say it at
        every pass; the Event list says it once (and again if it ends and comes back)."""
        condition = (reason, key)
        self._lasting.add(condition)
        for ref in refs:
            self._facts.setdefault(ref, []).append((reason, message))
        if condition not in self._told:
            self._told.add(condition)
            self.emit(refs, reason=reason, kind=kind, message=message, now=now)
