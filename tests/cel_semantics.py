"""The rules' verdicts worked out in Python from CEL's stated semantics, for the judge to be checked against.

What CEL does that Python does not (as Kubernetes' CEL and the library behind app/rules/cel.py do):
- an object's null-valued keys are absent (the apiserver prunes them before validation);
- `a && b` is false when either is false, else an error when either is an error, else true: both sides
  count whatever their order (and `||` the same with true); `!` and `?:` pass an error on;
- equality across types is false, not an error, and a bool is never a number (`true != 1`, `1 == 1.0`);
- `has(x.f)` and `x.f` on anything but an object, `k in x` on anything but an object or a list, and a
  missing key are errors.
Each term is written as a function of no arguments so an error in it (a Python exception) is CEL's
error value, and `&&`/`||` see every term, as CEL's commutative operators do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class _Error:
    def __repr__(self) -> str:
        return "ERROR"


ERROR: Any = _Error()  # CEL's error value
Value = Any  # True, False or ERROR
Term = Callable[[], Any]


def view(value: Any) -> Any:
    """A JSON value as a rule sees it: null-valued keys dropped, at every depth."""
    if isinstance(value, dict):
        return {key: view(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [view(item) for item in value]
    return value


def term(make: Term) -> Any:
    try:
        return make()
    except (KeyError, TypeError, IndexError):
        return ERROR


def all_of(*terms: Term) -> Value:
    values = [term(t) for t in terms]
    if any(v is False for v in values):
        return False
    return ERROR if any(v is not True for v in values) else True


def any_of(*terms: Term) -> Value:
    values = [term(t) for t in terms]
    if any(v is True for v in values):
        return True
    return ERROR if any(v is not False for v in values) else False


def negated(value: Value) -> Value:
    return ERROR if value is ERROR else not value


def has(obj: Any, field: str) -> bool:
    if not isinstance(obj, dict):
        raise TypeError("has() of a non-object")
    return field in obj


def member(key: str, container: Any) -> bool:
    if isinstance(container, dict):
        return key in container
    if isinstance(container, list):
        return any(equal(item, key) for item in container)
    raise TypeError("`in` of neither an object nor a list")


def field(obj: Any, name: str) -> Any:
    if not isinstance(obj, dict):
        raise TypeError("a field of a non-object")
    return obj[name]


def equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def cel_equal(left: Term, right: Term) -> Value:
    a, b = term(left), term(right)
    return ERROR if a is ERROR or b is ERROR else equal(a, b)


def choose(condition: Value, then: Term, otherwise: Term) -> Any:
    """`condition ? then : otherwise`."""
    if condition is ERROR:
        return ERROR
    return term(then) if condition else term(otherwise)


def entry_is(obj: Any, where: str, key: str, value: str) -> Value:
    """has(obj.where) && key in obj.where && obj.where[key] == value"""
    return all_of(lambda: has(obj, where), lambda: member(key, field(obj, where)),
                  lambda: equal(field(obj, where)[key], value))


def entry_or_empty(obj: Any, where: str, key: str) -> Any:
    """has(obj.where) && key in obj.where ? obj.where[key] : ''"""
    return choose(all_of(lambda: has(obj, where), lambda: member(key, field(obj, where))),
                  lambda: field(obj, where)[key], lambda: "")
