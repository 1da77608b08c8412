"""Fault injection and the request log.

Rules are matched before a request touches the store, in the order: outage, then ``fail_next`` rules
(oldest first), then the first-write conflict. Resources are named by plural (``secrets``) or, where a
plural exists in two groups, by qualified name (``events.events.k8s.io``); either form matches.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from tests.kubeapi import errors
from tests.kubeapi.resources import RESOURCES, Resource, lookup_qualified

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
VERBS = WRITE_VERBS | {"get", "list", "watch"}


@dataclass(frozen=True)
class Request:
    """One request as the emulator saw it, with the status code it answered."""

    verb: str
    resource: str  # qualified: "secrets", "deployments.apps"
    namespace: str | None
    name: str | None
    code: int


@dataclass
class _Rule:
    verb: str
    resource: str
    name: str | None
    namespace: str | None
    code: int
    remaining: int


_AMBIGUOUS = {p for p, n in Counter(r.plural for r in RESOURCES).items() if n > 1}


def names_of(res: Resource) -> tuple[str, ...]:
    """The names a test may use for a resource: qualified always, the bare plural when it is unambiguous
    (``deployments`` for deployments.apps; ``events`` means only the core kind)."""
    return (res.qualified,) if res.plural in _AMBIGUOUS and res.group else (res.qualified, res.plural)


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self._first_write: tuple[frozenset[str], bool] | None = None
        self._written: set[tuple[str, str | None, str]] = set()
        self.outage_code: int | None = None
        self.log: list[Request] = []
        self.counts: Counter[tuple[str, str]] = Counter()

    def fail_next(self, verb: str, resource: str, name: str | None = None, *, count: int = 1, code: int = 500,
                  namespace: str | None = None) -> None:
        """The next ``count`` requests matching verb/resource (``"*"`` for any) [/name/namespace] get ``code``."""
        if verb != "*" and verb not in VERBS:
            raise ValueError(f"unknown verb {verb!r}; one of {sorted(VERBS)} or '*'")
        with self._lock:
            self._rules.append(_Rule(verb, resource, name, namespace, code, count))

    def conflict_on_first_write(self, *, verbs: tuple[str, ...] = ("update", "patch"), touch: bool = False) -> None:
        """The first write (of ``verbs``) to each object meets a concurrent writer.

        ``touch=False``: it is answered 409 Conflict and nothing changes. ``touch=True``: the emulator first
        bumps an annotation on the object, as another client would, then serves the request normally, so a
        request carrying the old resourceVersion gets the real 409 and an unconditional one overwrites.
        """
        if not set(verbs) <= {"update", "patch", "delete"}:
            raise ValueError("the first-write conflict applies to update, patch and delete")
        with self._lock:
            self._first_write = (frozenset(verbs), touch)
            self._written.clear()

    def clear(self) -> None:
        """Remove every rule and the outage (the log and counters are kept)."""
        with self._lock:
            self._rules.clear()
            self._first_write = None
            self.outage_code = None

    def check(self, verb: str, res: Resource, namespace: str | None, name: str | None,
              touch: Callable[[], None]) -> None:
        """Raise the ApiError a fault calls for, if any; ``touch`` performs the concurrent write."""
        if self.outage_code is None and not self._rules and self._first_write is None:
            # No fault set (a benchmark's every request): no lock. Faults are set between requests, so a
            # request that reads none here came before the fault was set, as it would have with the lock.
            return
        with self._lock:
            if self.outage_code is not None:
                raise errors.injected(self.outage_code, "the emulated API server is unavailable (outage)")
            rule = next((r for r in self._rules if self._matches(r, verb, res, namespace, name)), None)
            if rule is not None:
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self._rules.remove(rule)
                raise _injected(rule.code, verb, res, name)
            do_touch = self._first_write_fault(verb, res, namespace, name)
        if do_touch:
            touch()

    def _first_write_fault(self, verb: str, res: Resource, namespace: str | None, name: str | None) -> bool:
        if self._first_write is None or name is None or verb not in self._first_write[0]:
            return False
        key = (res.qualified, namespace, name)
        if key in self._written:
            return False
        self._written.add(key)
        if not self._first_write[1]:
            raise errors.conflict(res, name, errors.STALE)
        return True

    @staticmethod
    def _matches(rule: _Rule, verb: str, res: Resource, namespace: str | None, name: str | None) -> bool:
        return (rule.verb in ("*", verb) and rule.resource in ("*", *names_of(res))
                and rule.name in (None, name) and rule.namespace in (None, namespace))

    def record(self, verb: str, res: Resource, namespace: str | None, name: str | None, code: int,
               *, subresource: str | None = None) -> None:
        """Log a request; a subresource is logged as RBAC names it: ``podcertificaterequests/status.<group>``."""
        qualified = res.qualified if not subresource else (
            f"{res.plural}/{subresource}" + (f".{res.group}" if res.group else ""))
        with self._lock:
            self.log.append(Request(verb, qualified, namespace, name, code))
            self.counts[(verb, qualified)] += 1

    def calls(self, verb: str | None = None, resource: str | None = None) -> int:
        """How many requests were served, optionally only of a verb and/or resource (plural or qualified)."""
        with self._lock:
            return sum(n for (v, r), n in self.counts.items()
                       if verb in (None, v) and (resource is None or resource in names_of(lookup_qualified(r))))

    def writes(self) -> list[Request]:
        """Every write request (create/update/patch/delete/deletecollection) served, failed ones included."""
        with self._lock:
            return [r for r in self.log if r.verb in WRITE_VERBS]

    def reset_log(self) -> None:
        with self._lock:
            self.log.clear()
            self.counts.clear()


def _injected(code: int, verb: str, res: Resource, name: str | None) -> errors.ApiError:
    """The answer the real API would give with that code, where there is one: a 409 on create is
    AlreadyExists, on other writes a stale-version Conflict; a 404 names the object."""
    if code == 409 and name:
        return errors.already_exists(res, name) if verb == "create" else errors.conflict(res, name, errors.STALE)
    if code == 404 and name:
        return errors.not_found(res, name)
    return errors.injected(code, f"injected fault for {verb} {res.qualified}")
