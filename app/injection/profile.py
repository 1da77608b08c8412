"""A workload's certificate profile: its duration, renew-before and key algorithm, asked for by annotations on
its pod template and bounded by the operator (docs/injection.md, "Certificate profiles"). Pure.

A value outside the operator's bounds, or one that does not parse, is refused with a reason and the
default is used in its place: the certificate is always issued (a refusal never stalls a workload), and
the refusal is said where its owner looks (an Event on the workload, `status`, `doctor`, a dry run).

Why here, in the pure core's injection package: the reconciler (which issues), the webhook's dry-run
preview, `inject`, `doctor` and `status` all read the same annotations the same way, and this is the
lowest package all of them may import (tls_injector.pki, beside it, only takes the resolved values as parameters).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from fractions import Fraction
from typing import Any, TypeVar

from tls_injector import names
from tls_injector.names import DEFAULT_KEY_ALGORITHM, KEY_ALGORITHMS, KeyAlgorithm

# The built-in profile: the External Secrets proposal's table (app/pki/renewal.py says why 90 and 35 days).
# Spelled here rather than imported from tls_injector.pki (same layer): tests hold them equal to LEAF_VALIDITY and
# LEAF_LOOKAHEAD.
BUILT_IN_DURATION = timedelta(days=90)
BUILT_IN_RENEW_BEFORE = timedelta(days=35)
# When a profile sets a duration but no renew-before, renewal comes at the built-in share of the lifetime
# (35 of 90 days, ~39 %): a 24-hour certificate is renewed 9h20m before its end, not 35 days.
RENEW_SHARE = (35, 90)
# A renew-before of at most two thirds of the duration: a certificate is used for at least a third of its
# life before it is replaced, so renewals come at most once per third of a lifetime. At or past the whole
# duration it would be due the moment it is issued, and re-issued at every pass for ever.
MAX_RENEW_SHARE = (2, 3)
# The longest annotation value read: "8760h" is 5 characters and "2562047h47m16s" (Go's longest) 14; 32
# leaves room for spaces and leading zeros while a megabyte of text is refused before any regex runs.
MAX_VALUE_CHARS = 32
# Durations as Go's time.ParseDuration reads them (and kubectl's --request-timeout, the commands' --timeout):
# decimal numbers, each with a unit, `2160h`, `1h30m`, `1.5h`, `500ms`; units ns, us (µs, μs), ms, s, m, h and
# nothing longer (no `d`); no sign (every duration here is positive). ASCII digits only: Python's \d and
# isdigit() also take other scripts' digits, such as fullwidth digits. Go refuses what overflows its int64 of
# nanoseconds (2562047h47m16.854775807s), and so does this.
_DURATION = re.compile(r"(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+")
_PART = re.compile(r"([0-9]*\.?[0-9]*)(ns|us|µs|μs|ms|s|m|h)")
_NANOS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
MAX_GO_NANOS = 2**63 - 1
# Up to this many characters of a refused value are quoted in a message (the Event's note is 1 KiB).
_SHOWN = 40


T = TypeVar("T")
_UNSET = object()  # an annotation not set at all (a null or "" one is set, and refused)


class ProfileError(ValueError):
    """A malformed or out-of-bounds value; the message says why and what is accepted."""


@dataclass(frozen=True, slots=True)
class Profile:
    """What a certificate is issued with."""

    key_algorithm: KeyAlgorithm = DEFAULT_KEY_ALGORITHM
    duration: timedelta = BUILT_IN_DURATION
    renew_before: timedelta = BUILT_IN_RENEW_BEFORE

    def note(self) -> str:
        """The profile in one line, as recorded on the Secret (names.PROFILE_ANNOTATION) and printed."""
        return (f"key-algorithm={self.key_algorithm},duration={format_duration(self.duration)},"
                f"renew-before={format_duration(self.renew_before)}")

    @property
    def built_in(self) -> bool:
        return self is BUILT_IN or self == BUILT_IN  # `is`: the usual case (ProfileBounds.default), no __eq__ call


BUILT_IN = Profile()


@dataclass(frozen=True, slots=True)
class ProfileBounds:
    """The operator's bounds (flags of `tls-injector reconcile`, the chart's `profiles` values). Defaults:

    - duration 2160h (90 days), between 24h and 8760h (365 days). 24h: a day is what the pod-certificate
      signer issues and what a workload restarted once a day needs at least; below it a certificate lives
      through few passes (resync 10 minutes) and kubelet Secret refreshes (about a minute each). 8760h: the
      CA's own lifetime, which caps every leaf anyway (a leaf never outlives its CA);
    - renew-before at least 1h (a few passes and a kubelet refresh before the old certificate ends) and at
      most two thirds of the duration (MAX_RENEW_SHARE); unset, the built-in share (RENEW_SHARE);
    - key algorithms: all six, ECDSA P-256 the default (fast and accepted everywhere). Narrow the list to
      refuse RSA-2048 (still allowed by NIST until 2030) or Ed25519 (TLS 1.3 clients only) in your cluster;
      RSA-4096 costs the reconciler 0.3 s of CPU per issue (median key generation measured here; the random
      prime search makes single ones vary up to several times that), RSA-3072 0.09-0.25 s, P-256 0.01 ms.
    """

    default_duration: timedelta = BUILT_IN_DURATION
    min_duration: timedelta = timedelta(hours=24)
    max_duration: timedelta = timedelta(hours=8760)
    min_renew_before: timedelta = timedelta(hours=1)
    default_key_algorithm: KeyAlgorithm = DEFAULT_KEY_ALGORITHM
    allowed_key_algorithms: tuple[KeyAlgorithm, ...] = KEY_ALGORITHMS
    # The default profile, made once from the fields above.
    default: Profile = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        """An operator's bounds that contradict themselves are refused when the reconciler starts."""
        if not timedelta(0) < self.min_duration <= self.default_duration <= self.max_duration:
            raise ProfileError(f"the durations must be 0 < min {format_duration(self.min_duration)} <= default "
                               f"{format_duration(self.default_duration)} <= max {format_duration(self.max_duration)}")
        if self.min_renew_before > default_renew_before(self.min_duration):
            raise ProfileError(f"the minimum renew-before {format_duration(self.min_renew_before)} is over the "
                               f"default renew-before of the shortest duration "
                               f"({format_duration(default_renew_before(self.min_duration))})")
        if self.default_key_algorithm not in self.allowed_key_algorithms:
            raise ProfileError(f"the default key algorithm {self.default_key_algorithm} is not one of the allowed "
                               f"ones ({', '.join(self.allowed_key_algorithms)})")
        renew_before = default_renew_before(self.default_duration)
        default = Profile(self.default_key_algorithm, self.default_duration, renew_before)
        # BUILT_IN itself when equal, so Profile.built_in, asked of every leaf at every pass, is an identity.
        object.__setattr__(self, "default", BUILT_IN if default == BUILT_IN else default)

    def describe(self) -> str:
        """The bounds in one line, for a message and the reconciler's start log."""
        return (f"duration {format_duration(self.min_duration)}..{format_duration(self.max_duration)} (default "
                f"{format_duration(self.default_duration)}), renew-before at least "
                f"{format_duration(self.min_renew_before)} and at most 2/3 of the duration, key algorithms "
                f"{', '.join(self.allowed_key_algorithms)} (default {self.default_key_algorithm})")


@dataclass(frozen=True, slots=True)
class Resolved:
    """A pod template's profile under the bounds: what it gets, what was refused (annotation, why), and
    whether it asked for anything."""

    profile: Profile
    refused: tuple[tuple[str, str], ...] = ()
    asked: bool = False

    def reason(self) -> str:
        """The refusals for a person ("" when none)."""
        return "; ".join(f"{name} {why}" for name, why in self.refused)


def default_renew_before(duration: timedelta) -> timedelta:
    """The renew-before of a profile that sets none: the built-in share of the duration, in whole seconds."""
    return timedelta(seconds=duration.total_seconds() * RENEW_SHARE[0] // RENEW_SHARE[1])


@functools.lru_cache(maxsize=8)
def _unasked(bounds: ProfileBounds) -> Resolved:
    """What a template that asks for nothing gets: one object for every such template of a pass (a pass
    over 100,000 workloads otherwise made 100,000 equal ones, ~5 MiB held at its peak)."""
    return Resolved(bounds.default)


def resolve_profile(annotations: Mapping[str, Any], bounds: ProfileBounds) -> Resolved:
    """The profile asked for by these annotations, each value within `bounds` or refused and the default used.

    The duration is decided first (renew-before is bounded by it), then renew-before, then the key."""
    asked = [key for key in names.PROFILE_ANNOTATIONS if key in annotations]
    if not asked:
        return _unasked(bounds)
    refused: list[tuple[str, str]] = []
    duration = _decided(annotations.get(names.DURATION_ANNOTATION, _UNSET), names.DURATION_ANNOTATION, refused,
                        default=bounds.default_duration, read=lambda text: _bounded_duration(text, bounds),
                        shown=format_duration)
    fallback = max(default_renew_before(duration), bounds.min_renew_before)
    renew_before = _decided(annotations.get(names.RENEW_BEFORE_ANNOTATION, _UNSET), names.RENEW_BEFORE_ANNOTATION,
                            refused, default=fallback, read=lambda text: _bounded_renew_before(text, duration, bounds),
                            shown=format_duration)
    key: KeyAlgorithm = _decided(annotations.get(names.KEY_ALGORITHM_ANNOTATION, _UNSET),
                                 names.KEY_ALGORITHM_ANNOTATION, refused, default=bounds.default_key_algorithm,
                                 read=lambda text: _allowed_key(text, bounds), shown=str)
    return Resolved(Profile(key, duration, renew_before), tuple(refused), True)


def _decided(value: object, key: str, refused: list[tuple[str, str]], *, default: T, read: Callable[[str], T],
             shown: Callable[[T], str]) -> T:
    """The `value` of annotation `key` read by `read`, or `default` (and the refusal noted) when it is refused
    or unset."""
    if value is _UNSET:
        return default
    try:
        if not isinstance(value, str):
            raise ProfileError("is not text")
        if len(value) > MAX_VALUE_CHARS:
            raise ProfileError(f"is {len(value)} characters long, over {MAX_VALUE_CHARS}")
        return read(value.strip())
    except ProfileError as e:
        quoted = f" {_quoted(value)}" if isinstance(value, str) else ""
        refused.append((f"{key}{quoted}", f"refused: {e}; the default {shown(default)} is used"))
        return default


def go_duration(text: str) -> Fraction:
    """Seconds, exactly, of a duration written as Go's time.ParseDuration reads it: `2160h`, `1h30m`, `1.5h`,
    `500ms`; ProfileError when it is not one (or not above zero). The one reader of durations: the
    annotation, the profile flags and the commands' --timeout flags all take what it takes."""
    if not text:
        raise ProfileError("is empty")
    if not _DURATION.fullmatch(text):
        raise ProfileError("is not a duration: write it as Go does, a number and a unit (h, m, s, ms, us, ns) "
                           "for each part, as 2160h, 90m, 1h30m or 1.5h")
    nanos = sum((Fraction(number) * _NANOS[unit] for number, unit in _PART.findall(text)), Fraction(0))
    if nanos > MAX_GO_NANOS:
        raise ProfileError("is longer than any duration Go can hold (2562047h)")
    if nanos <= 0:
        raise ProfileError("is not a positive duration")
    return Fraction(int(nanos), 10**9)  # Go keeps whole nanoseconds: a finer fraction is dropped, as there


def parse_duration(text: str) -> timedelta:
    """A positive duration written as Go does (`go_duration`), in whole seconds as certificates count
    time: `1.5h` is 5400 s, and a fraction of a second is dropped (`500ms` is then not positive)."""
    seconds = int(go_duration(text))
    if seconds <= 0:
        raise ProfileError("is under a second: a certificate's times are whole seconds")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """A duration as Go writes one, its zero parts left out: 2160h, 1h30m, 90s, 1.5s, 500ms; `go_duration`
    reads it back."""
    micros = value // timedelta(microseconds=1)
    if 0 < micros < 1_000_000:
        return f"{micros / 1000:g}ms"
    seconds, fraction = divmod(micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    second_text = f"{seconds}.{fraction:06d}".rstrip("0") if fraction else str(seconds)
    text = "".join(f"{n}{u}" for n, u in ((hours, "h"), (minutes, "m"), (second_text, "s")) if n and n != "0")
    return text or "0s"


def _bounded_duration(text: str, bounds: ProfileBounds) -> timedelta:
    duration = parse_duration(text)
    if not bounds.min_duration <= duration <= bounds.max_duration:
        raise ProfileError(f"is outside the operator's bounds {format_duration(bounds.min_duration)}.."
                           f"{format_duration(bounds.max_duration)}")
    return duration


def _bounded_renew_before(text: str, duration: timedelta, bounds: ProfileBounds) -> timedelta:
    renew_before = parse_duration(text)
    if renew_before < bounds.min_renew_before:
        raise ProfileError(f"is under the operator's minimum {format_duration(bounds.min_renew_before)}")
    most = max_renew_before(duration)
    if renew_before > most:
        raise ProfileError(f"is over two thirds of the duration {format_duration(duration)} "
                           f"({format_duration(most)}): the certificate would be renewed too soon after issue")
    return renew_before


def max_renew_before(duration: timedelta) -> timedelta:
    return timedelta(seconds=duration.total_seconds() * MAX_RENEW_SHARE[0] // MAX_RENEW_SHARE[1])


def _allowed_key(text: str, bounds: ProfileBounds) -> KeyAlgorithm:
    wanted = text.lower()
    if not wanted:
        raise ProfileError("is empty")
    for algorithm in KEY_ALGORITHMS:
        if algorithm == wanted:
            if algorithm not in bounds.allowed_key_algorithms:
                allowed = ", ".join(bounds.allowed_key_algorithms)
                raise ProfileError(f"is not allowed by the operator (allowed: {allowed})")
            return algorithm
    raise ProfileError(f"is not a key algorithm (one of {', '.join(KEY_ALGORITHMS)})")


def key_algorithms(text: str) -> tuple[KeyAlgorithm, ...]:
    """A comma list of key algorithm names (the operator's flag), in names.KEY_ALGORITHMS' order."""
    wanted = {part.strip().lower() for part in text.split(",") if part.strip()}
    unknown = wanted - set(KEY_ALGORITHMS)
    if unknown or not wanted:
        raise ProfileError(f"{', '.join(sorted(unknown)) or 'nothing'} is not a key algorithm "
                           f"(one of {', '.join(KEY_ALGORITHMS)})")
    return tuple(a for a in KEY_ALGORITHMS if a in wanted)


def shared_profile(resolved: Iterable[tuple[object, Resolved]], bounds: ProfileBounds) -> tuple[Profile, str]:
    """The profile of a Secret that several workloads share, with why it is not theirs ("" when it is).
    Each workload (`who`) is named, by str(), only in a conflict's message.

    All agree (or one uses it): their profile. They differ: the conflict is refused and the operator's
    default used, whatever the order the workloads were read in, so the Secret never flips between two
    profiles from one pass to the next (and no workload imposes its profile on another's pods)."""
    every = list(resolved)
    if not every:
        return bounds.default, ""
    first = every[0][1].profile
    # Compared, not put in a set: one user (nearly every Secret, at every pass) compares nothing and hashes
    # no Profile (a dataclass's hash, a Python call).
    if all(r.profile == first for _, r in every[1:]):
        return first, ""
    listed = "; ".join(f"{who}: {r.profile.note()}" for who, r in sorted(every, key=lambda pair: str(pair[0]))[:3])
    more = f" (+{len(every) - 3} more)" if len(every) > 3 else ""
    return bounds.default, (f"the workloads sharing it ask for different certificate profiles ({listed}{more}); "
                            f"the default {bounds.default.note()} is used: give them one profile, or each its "
                            f"own {names.SECRET_NAME_ANNOTATION}")


def _quoted(value: str) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 4] + "...'"


# A warning's text is at most 256 characters (what kubectl shows of an admission warning); the prefix
# "tls-injector: " and a workload's kind and name come before what these lines say, so each is cut here.
_LINE = 200


def profile_lines(annotations: Mapping[str, Any], bounds: ProfileBounds, *, mode: str) -> tuple[str, ...]:
    """What a pod template's profile annotations will give, for a dry run's warning and `inject`: nothing when
    it asks for none; in the pod-certificate and trust-only modes, one line: they do not apply (there the
    kubelet makes the key, and the signer decides the lifetime); else the profile it gets, then each refusal."""
    if not any(key in annotations for key in names.PROFILE_ANNOTATIONS):
        return ()
    if mode == names.MODE_POD_CERTIFICATE:
        return (f"the certificate profile annotations do not apply to pod certificates (the kubelet makes a "
                f"{names.POD_KEY_TYPE} key; the signer sets the lifetime); use {names.MODE_ANNOTATION}: "
                f"{names.MODE_SECRET} for a profile")[:_LINE],
    if mode == names.MODE_TRUST_ONLY:
        return (f"the certificate profile annotations do not apply: {names.MODE_TRUST_ONLY} gets no certificate",)
    resolved = resolve_profile(annotations, bounds)
    gets = f"the certificate profile {resolved.profile.note()}"
    return (gets, *(f"{name} {why}"[:_LINE] for name, why in resolved.refused))


def parse_note(text: object) -> Profile | None:
    """The profile recorded on a Secret (`Profile.note`), None when there is none or it does not parse: the
    built-in profile is recorded by no annotation at all."""
    if not isinstance(text, str) or not text or len(text) > 4 * MAX_VALUE_CHARS:
        return None
    fields = dict(part.partition("=")[::2] for part in text.split(","))
    try:
        key = next(a for a in KEY_ALGORITHMS if a == fields.get("key-algorithm"))
        return Profile(key, parse_duration(fields.get("duration", "")), parse_duration(fields.get("renew-before", "")))
    except (StopIteration, ProfileError):
        return None
