"""The one home of the CEL library (cel-expr-python, the C++ implementation behind a Python binding).

Chosen on semantics first, measured here: `has()` on map keys, map equality independent of key order
and exact on extra keys, heterogeneous number equality (1 == 1.0) all behave as in Kubernetes; one
evaluation of the seed rule costs ~8 us (common-expression-language ~70 us, cel-python ~1 ms and its
compiled runner fails on `!has()`). Its one trap: an evaluation error is *returned* as a value of type
ERROR rather than raised, so every result is checked to be a BOOL before it is trusted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_strings

# Kubernetes' CEL environment includes the strings extension (trim, lowerAscii, ...) since 1.27.
_EXTENSIONS = (ext_strings.ExtStrings,)


class CelCompileError(ValueError):
    """The expression does not parse or type-check; the message carries CEL's line:column caret."""


@dataclass(frozen=True, slots=True)
class EvalError:
    """An evaluation that produced an error (no such key, no matching overload, ...) instead of a bool."""

    message: str


class Environment:
    """Declared variables (all dynamically typed: objects arrive as plain JSON) and the compiler."""

    def __init__(self, variables: Sequence[str]) -> None:
        declared = dict.fromkeys(variables, cel.Type.DYN)
        self.variables = tuple(variables)
        self._env = cel.NewEnv(variables=declared, extensions=[make() for make in _EXTENSIONS])

    def compile_bool(self, source: str) -> Program:
        """Compile once; a syntax error, an unknown name or a non-bool result raises CelCompileError."""
        program = self.compile_any(source)
        result_type = program.result_type
        if result_type not in (cel.Type.BOOL, cel.Type.DYN):
            raise CelCompileError(f"the expression must evaluate to a bool, not {result_type.name().lower()}")
        return program

    def compile_any(self, source: str) -> Program:
        """Compile an expression of any type (e.g. a ValidatingAdmissionPolicy variable)."""
        try:
            return Program(source, self._env.compile(source))
        except RuntimeError as error:
            raise CelCompileError(_strip_status(str(error))) from None

    def compile_batch(self, programs: Sequence[Program]) -> Batch | None:
        """The programs as one list-valued program, or None when that does not compile."""
        # Each source on its own lines and in parentheses: a trailing `// comment` ends at its newline,
        # and a source that parses alone parses the same inside ( ) — so element i is program i.
        source = "[\n" + ",\n".join(f"(\n{program.source}\n)" for program in programs) + "\n]"
        try:
            return Batch(self._env.compile(source), len(programs))
        except RuntimeError:
            return None


class Batch:
    """Several boolean programs over the same variables, evaluated in one call.

    Why: every evaluation converts what it reads of the variables from Python into CEL again (~3 us per
    call plus ~0.5 us per map entry read of a pod template's metadata), so a rule and its warnWhen, or
    two rules on the same `self`, cost one conversion instead of up to four: about half the time.

    Exact: CEL has no side effects, so element i of the list literal has the value program i has alone.
    When any element is an error (the list is then an error) or not a bool, `evaluate` answers None and
    the caller evaluates each program alone, which yields each one's own value or error.
    """

    __slots__ = ("_expression", "size")

    def __init__(self, expression: cel.Expression, size: int) -> None:
        self._expression, self.size = expression, size

    def evaluate(self, variables: Mapping[str, Any]) -> tuple[bool, ...] | None:
        try:
            result = self._expression.eval(data=variables)
        except (RuntimeError, TypeError, ValueError):
            return None
        if result.type() == cel.Type.ERROR:
            return None
        values = result.plain_value()
        if not isinstance(values, list) or len(values) != self.size or any(type(v) is not bool for v in values):
            return None
        return tuple(values)


class Program:
    """A compiled boolean expression."""

    __slots__ = ("_expression", "source")

    def __init__(self, source: str, expression: cel.Expression) -> None:
        self.source, self._expression = source, expression

    @property
    def result_type(self) -> cel.Type:
        return self._expression.return_type()

    def value(self, variables: Mapping[str, Any]) -> object:
        """The result as plain Python data, or an EvalError."""
        result = self._expression.eval(data=variables)
        if result.type() == cel.Type.ERROR:
            return EvalError(_strip_status(str(result.value())))
        return result.plain_value()

    def evaluate(self, variables: Mapping[str, Any]) -> bool | EvalError:
        try:
            result = self._expression.eval(data=variables)
        except (RuntimeError, TypeError, ValueError) as error:  # the binding reports errors as values, but
            return EvalError(str(error))                         # a conversion bug must not become a 500
        if result.type() == cel.Type.BOOL:
            return bool(result.value())
        if result.type() == cel.Type.ERROR:
            return EvalError(_strip_status(str(result.value())))
        return EvalError(f"the expression returned {result.type().name().lower()}, not a bool")


def to_cel(value: object) -> object:
    """JSON data as CEL sees it: null-valued object keys are dropped, so `tls: null` counts as absent.

    That is what the apiserver stores: a null for a non-nullable CRD field is pruned before validation
    and a null in a built-in type decodes to the unset zero value — so a rule sees the same thing here
    as in a CRD's x-kubernetes-validations or a ValidatingAdmissionPolicy.
    """
    if isinstance(value, dict):  # parsed JSON: plain dicts (an ABC check per node cost more than the rule)
        return {key: to_cel(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [to_cel(item) for item in value]
    return value


def _strip_status(message: str) -> str:
    """CEL prefixes absl status codes (`INVALID_ARGUMENT: ERROR: <input>:1:16: ...`); keep the rest."""
    for prefix in ("INVALID_ARGUMENT: ", "NOT_FOUND: ", "UNKNOWN: ", "ERROR: "):
        message = message.removeprefix(prefix)
    return re.sub(r"\s*\[[A-Z_]+\]$", "", message.replace("<input>:", ""))
