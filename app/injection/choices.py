"""What a pod asks for: the operator's defaults overridden by the pod's own annotations.

A malformed annotation is refused with a message naming it rather than ignored: a typo in a path or a
container name would otherwise give a pod without its certificate and nobody would know why.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tls_injector import names
from tls_injector.injection.profile import ProfileBounds
from tls_injector.injection.workload import client_secret_name_for
from tls_injector.kubenames import MAX_SUBDOMAIN, subdomain_problem

# DNS-1123 subdomain, what the apiserver requires of a Secret name (RFC 1123 labels, at most 253 chars).
# Enough for any real name or path (Secret names stop at 253) while a hostile value cannot flood a message.
_SHOWN = 80


class InjectionRefused(ValueError):
    """The pod cannot be injected as it stands; the message tells a person what to change."""


def shown(value: object) -> str:
    """A value from the pod, quoted for a message and cut short: kubectl prints the whole message. An
    object or array is named by its type: made into text, a deeply nested one would exceed the recursion
    limit (a 500 instead of the refusal), and a large one would be written out only to be cut."""
    if isinstance(value, dict | list):
        return "an object" if isinstance(value, dict) else "an array"
    text = repr(value) if isinstance(value, str) else repr(str(value))
    return text if len(text) <= _SHOWN else text[: _SHOWN - 4] + "...'"


@dataclass(frozen=True, slots=True)
class InjectionOptions:
    """The operator's settings for every pod; per-pod annotations override the paths."""

    cert_mount_path: str = names.CERT_MOUNT_PATH
    trust_mount_path: str = names.TRUST_MOUNT_PATH
    trust_bundle_configmap: str = names.TRUST_BUNDLE_CONFIGMAP
    # Whether the cluster serves pod certificates and ClusterTrustBundles. The webhook has no API access,
    # so it is told (`--pod-certificates on`), or finds out at start when it runs the reconciler itself.
    pod_certificates: bool = False
    default_mode: str = names.MODE_SECRET  # for pods whose annotations do not choose
    # The operator's bounds of certificate profiles: what a dry run's preview and `inject` judge them by (the
    # reconciler's own bounds decide; the chart gives both the same).
    profiles: ProfileBounds = field(default_factory=ProfileBounds)

    def __post_init__(self) -> None:
        # Every pod whose annotations do not choose a path gets these: checked and normalised once, here.
        object.__setattr__(self, "cert_mount_path", _checked_path("the certificate path", self.cert_mount_path))
        object.__setattr__(self, "trust_mount_path", _checked_path("the trust bundle path", self.trust_mount_path))


class Choices(NamedTuple):
    """What one pod gets (a NamedTuple, as the plan's records are: built once per review, see plan.py)."""

    secret_name: str
    cert_path: str
    trust_path: str
    containers: frozenset[str] | None  # None: every container and init container
    env: tuple[str, ...]
    mode: str = names.MODE_SECRET  # what the pod gets; asked for and served
    fallback: str = ""  # why a pod that asked for pod certificates gets the Secret, for a warning
    client_secret: str = ""  # the client certificate's Secret when the pod asks for one (docs/mtls.md)
    client_path: str = names.CLIENT_MOUNT_PATH
    # The TLS env vars point at names.PUBLIC_BUNDLE_KEY (our CAs and the public roots), not names.BUNDLE_KEY.
    public_roots: bool = False
    # The certificate volumes' defaultMode (names.KEY_MODE_ANNOTATION, as an int), None for the API's default.
    key_mode: int | None = None


# The annotations a pod chooses with (the Secret's name is the workload's, see tls_injector.injection.workload).
_CHOICE_ANNOTATIONS = frozenset({names.CERT_PATH_ANNOTATION, names.TRUST_PATH_ANNOTATION, names.MODE_ANNOTATION,
                                 names.CLIENT_CERT_ANNOTATION, names.CONTAINERS_ANNOTATION, names.ENV_ANNOTATION,
                                 names.PUBLIC_ROOTS, names.KEY_MODE_ANNOTATION})


def read_choices(secret_name: str, annotations: Mapping[str, Any], options: InjectionOptions) -> Choices:
    """What a pod whose workload's Secret is `secret_name` (its `Workload.secret_name`) and whose
    annotations are these gets."""
    # Most pods set none of the choice annotations: what they get is remembered (`_unchosen`). The others'
    # choices as text ("" for one it does not set, or sets to something else), found in one set
    # intersection rather than six lookups through a helper.
    if _CHOICE_ANNOTATIONS.isdisjoint(annotations):
        return _unchosen(secret_name, options)
    given = {key: _text(annotations, key) for key in annotations.keys() & _CHOICE_ANNOTATIONS}
    return _choices(secret_name, given, options)


# What a pod that sets none of the choice annotations gets depends on its Secret's name and the options
# alone, and every pod of a workload has the same: remembered by the name, for the options object it was
# made with (compared by identity: hashing the frozen options cost ~8k, more than the lookup saves). The
# checks of the name, the paths and the mode and the Choices built cost ~23k instructions a pod
# (callgrind), a remembered one, found from read_choices, ~3k. Bounded: at most 512 names of at most 253
# characters (a refused name raises and is not remembered); when full it starts again empty. Reads and
# writes are single dict operations (thread-safe).
_UNCHOSEN_MAX = 512
_unchosen_by_name: dict[str, tuple[InjectionOptions, Choices]] = {}


def _unchosen(secret_name: str, options: InjectionOptions) -> Choices:
    known = _unchosen_by_name.get(secret_name)
    if known is not None and known[0] is options:
        return known[1]
    choices = _choices(secret_name, {}, options)
    if len(_unchosen_by_name) >= _UNCHOSEN_MAX:
        _unchosen_by_name.clear()
    _unchosen_by_name[secret_name] = (options, choices)
    return choices


def _choices(secret_name: str, given: Mapping[str, str], options: InjectionOptions) -> Choices:
    """What a pod gets: `given`, its choice annotations as text (see read_choices)."""
    raw = given.get(names.CERT_PATH_ANNOTATION)
    cert_path = _checked_path(names.CERT_PATH_ANNOTATION, raw) if raw else options.cert_mount_path
    raw = given.get(names.TRUST_PATH_ANNOTATION)
    trust_path = _checked_path(names.TRUST_PATH_ANNOTATION, raw) if raw else options.trust_mount_path
    if _nested(cert_path, trust_path):
        raise InjectionRefused(
            f"the certificate path {cert_path} and the trust bundle path {trust_path} must be distinct and "
            f"not inside one another (see {names.CERT_PATH_ANNOTATION} and {names.TRUST_PATH_ANNOTATION})"
        )
    mode, fallback = _mode(given.get(names.MODE_ANNOTATION, ""), options)
    secret = _checked_secret_name(secret_name)
    raw = given.get(names.CLIENT_CERT_ANNOTATION)
    client = _client_secret(raw, secret, mode) if raw else ""
    for other in (cert_path, trust_path) if client else ():
        if _nested(names.CLIENT_MOUNT_PATH, other):
            raise InjectionRefused(
                f"{names.CLIENT_CERT_ANNOTATION}: the client certificate's path {names.CLIENT_MOUNT_PATH} and {other} "
                f"must be distinct and not inside one another (see {names.CERT_PATH_ANNOTATION} and "
                f"{names.TRUST_PATH_ANNOTATION})"
            )
    raw = given.get(names.CONTAINERS_ANNOTATION)
    containers = _containers(raw) if raw else None
    raw = given.get(names.PUBLIC_ROOTS)
    public = _public_roots(raw) and mode != names.MODE_POD_CERTIFICATE if raw else False
    raw = given.get(names.ENV_ANNOTATION)
    # A trust-only pod is a client: it gets the variables unless it says otherwise (what it asks for); so
    # is one asking for the public roots, whose point is the variables' file (names.PUBLIC_ROOTS).
    env = _env(raw) if raw else names.TLS_ENV_VARS if mode == names.MODE_TRUST_ONLY or public else ()
    raw = given.get(names.KEY_MODE_ANNOTATION)
    key_mode = _key_mode(raw, mode) if raw is not None else None
    # Positional, in the fields' order (a NamedTuple's keywords cost ~3.7k instructions more).
    return Choices(secret, cert_path, trust_path, containers, env, mode, fallback, client, names.CLIENT_MOUNT_PATH,
                   public, key_mode)


def may_add_env(annotations: Mapping[str, Any], options: InjectionOptions) -> bool:
    """Whether a pod with these annotations may get the TLS variables (`Choices.env` not empty): the one case
    in which its containers' env lists are read, to append to them. Errs towards yes: the variables come
    from the env annotation, the public roots' or the trust-only mode (asked for, or the operator's default),
    so a pod that sets any of those three annotations, or any pod when the default mode is trust-only, may
    get them. /mutate leaves every other pod's env lists unread (mutate.py); read wrongly as none, a list
    would be replaced by our variables rather than appended to. A test holds this to `_choices`."""
    return options.default_mode == names.MODE_TRUST_ONLY or not _ENV_SOURCES.isdisjoint(annotations)


_ENV_SOURCES = frozenset({names.ENV_ANNOTATION, names.PUBLIC_ROOTS, names.MODE_ANNOTATION})


def _key_mode(raw: str, mode: str) -> int:
    """names.KEY_MODE_ANNOTATION as a pod sets it: one of names.KEY_MODES, as the volume's defaultMode; any
    other value is refused, as is asking for it on a pod that gets no key."""
    if raw not in names.KEY_MODES:
        raise InjectionRefused(f"{names.KEY_MODE_ANNOTATION}: {shown(raw)} is not one of {', '.join(names.KEY_MODES)} "
                               f"(octal, the key file's mode)")
    if mode == names.MODE_TRUST_ONLY:
        raise InjectionRefused(f"{names.KEY_MODE_ANNOTATION}: a {names.MODE_TRUST_ONLY} pod gets no key; remove "
                               f"the annotation, or use {names.MODE_ANNOTATION}: \"{names.MODE_SECRET}\"")
    return int(raw, 8)


def _public_roots(raw: str) -> bool:
    """names.PUBLIC_ROOTS as a pod sets it: "true" or "false" (any case); anything else is refused."""
    if raw.lower() not in ("true", "false"):
        raise InjectionRefused(f"{names.PUBLIC_ROOTS}: {shown(raw)} must be \"true\" or \"false\"")
    return raw.lower() == "true"


def _client_secret(raw: str, secret: str, mode: str) -> str:
    """The client certificate's Secret when the pod asks for one ("true"), "" when it does not ("false";
    read_choices calls this only when the annotation is set); anything else is refused, as is asking for
    it with pod certificates (docs/mtls.md: the PodCertificateRequest API carries no client usage choice
    for this signer yet, so that mode has none)."""
    raw = raw.lower()
    if raw == "false":
        return ""
    if raw != "true":
        raise InjectionRefused(f"{names.CLIENT_CERT_ANNOTATION}: {shown(raw)} must be \"true\" or \"false\"")
    if mode == names.MODE_TRUST_ONLY:
        raise InjectionRefused(f"{names.CLIENT_CERT_ANNOTATION}: a {names.MODE_TRUST_ONLY} pod gets no certificate; "
                               f"use {names.MODE_ANNOTATION}: \"{names.MODE_SECRET}\" for a client certificate")
    if mode == names.MODE_POD_CERTIFICATE:
        raise InjectionRefused(f"{names.CLIENT_CERT_ANNOTATION}: client certificates are not issued in the "
                               f"{names.MODE_POD_CERTIFICATE} mode yet; use {names.MODE_ANNOTATION}: "
                               f"\"{names.MODE_SECRET}\" for this pod")
    return client_secret_name_for(secret)


def _mode(raw: str, options: InjectionOptions) -> tuple[str, str]:
    """The mode the pod gets, and the reason when it asked for pod certificates and gets the Secret."""
    asked = raw or options.default_mode
    if asked not in names.POD_MODES:
        raise InjectionRefused(f"{names.MODE_ANNOTATION}: {shown(asked)} is not one of {', '.join(names.POD_MODES)}")
    if asked == names.MODE_POD_CERTIFICATE and not options.pod_certificates:
        # Mixed and older clusters work: the pod still starts, with the Secret, and the warning says why.
        return names.MODE_SECRET, ("pod certificates are not served here (or the webhook is not told so: "
                                   "--pod-certificates on); the Secret is mounted instead")
    return asked, ""


def _checked_secret_name(secret: str) -> str:
    """The workload's Secret name as a pod may use it: refused, with what to set, when there is none or it is
    not a valid Secret name (as `_checked_path` checks a path)."""
    if not secret:
        raise InjectionRefused(
            f"cannot tell which workload this pod belongs to (no owner, name or generateName); "
            f"set the {names.SECRET_NAME_ANNOTATION} annotation"
        )
    if len(secret) > MAX_SUBDOMAIN:
        raise InjectionRefused(
            f"the Secret name {shown(secret)} is too long: {len(secret)} characters, at most {MAX_SUBDOMAIN}; "
            f"set a shorter {names.SECRET_NAME_ANNOTATION}"
        )
    if subdomain_problem(secret):
        raise InjectionRefused(
            f"{shown(secret)} is not a valid Secret name (lower-case DNS subdomain); set {names.SECRET_NAME_ANNOTATION}"
        )
    return secret


def _checked_path(what: str, raw: str) -> str:
    path = posixpath.normpath(raw)
    if not raw.startswith("/") or ".." in raw.split("/") or ":" in raw or path == "/":
        raise InjectionRefused(
            f"{what}: {shown(raw)} must be an absolute directory path other than /, without '..' or ':'"
        )
    return path


def _nested(first: str, second: str) -> bool:
    return first == second or first.startswith(second + "/") or second.startswith(first + "/")


def _containers(raw: str) -> frozenset[str] | None:
    listed = _comma_list(raw)
    return frozenset(listed) if listed else None


def _env(raw: str) -> tuple[str, ...]:
    if raw.lower() == "false":
        return ()
    if raw.lower() == "true":
        return names.TLS_ENV_VARS
    listed = _comma_list(raw)
    unknown = sorted(set(listed) - set(names.TLS_ENV_VARS))
    if unknown:
        raise InjectionRefused(
            f"{names.ENV_ANNOTATION}: unknown variable(s) {shown(', '.join(unknown))}; use \"true\" or a comma list of "
            f"{', '.join(names.TLS_ENV_VARS)}"
        )
    return tuple(v for v in names.TLS_ENV_VARS if v in listed)


def _comma_list(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


def _text(annotations: Mapping[str, Any], key: str) -> str:
    value = annotations.get(key)
    return value.strip() if isinstance(value, str) else ""
