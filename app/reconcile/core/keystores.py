"""JVM keystores in a workload's Secret (names.KEYSTORE_ANNOTATION: docs/injection.md, "Java keystores").

Pure: which Secrets must carry a keystore and under which password (`keystore_asks`, `resolve`, with the
reading of a password Secret passed in), and a Secret's data with its keystore keys made current
(`with_keystore`). A keystore is rebuilt only when what it holds differs from tls.crt, tls.key and ca.crt
(or no longer opens with the password): PKCS#12 bytes differ on every build (random salts), so comparing
bytes would rewrite the Secret at every pass.

The password comes from a Secret the workload names, in its own namespace, or is generated and kept beside
the keystore. What a tenant could do by naming another Secret, and why these checks stop it, is in
docs/security.md ("Keystore passwords"): the named Secret must be an Opaque Secret holding the key
`keystore.password`, not one of ours and not in the injector's namespace; its value is only ever used to
encrypt, never copied anywhere.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tls_injector import names
from tls_injector.injection import pod_workload, template_workload
from tls_injector.kubenames import shown, subdomain_problem
from tls_injector.pki import (
    fingerprint,
    keystore_holds,
    keystore_of,
    load_certificates,
    to_truststore,
    truststore_fingerprints,
)
from tls_injector.reconcile.core.discover import annotated, opted_in

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, Secret name)
# The keys of a workload's Secret that are the keystore's: dropped when nobody asks for it any more.
KEYSTORE_KEYS = (names.KEYSTORE_KEY, names.SECRET_TRUSTSTORE_KEY, names.KEYSTORE_PASSWORD_KEY)
# A password a person sets: printable ASCII (Java turns a password into UTF-16 and OpenSSL reads bytes as
# UTF-8, so outside ASCII the two may derive different keys), at least 6 characters (keytool refuses
# shorter store passwords) and at most 128 (far past any passphrase; it bounds what a message may quote).
MIN_PASSWORD, MAX_PASSWORD = 6, 128
# A generated password: 24 random bytes (192 bits), 32 URL-safe base64 characters, inside those bounds.
GENERATED_BYTES = 24


@dataclass(frozen=True)
class Ask:
    """Who asks for a keystore in one Secret, and the password Secrets they name ("" for generated)."""

    workloads: tuple[str, ...]
    password_secrets: frozenset[str]


@dataclass(frozen=True)
class Keystore:
    """How a Secret's keystore is made this pass: with `password` (the user's), or None for the generated
    one kept in the Secret; `problem` says why none can be made now (the stored keystore keys are then kept
    as they are, and the problem is reported on the workloads)."""

    password: bytes | None = None
    problem: str = ""


def keystore_asks(workloads: Iterable[tuple[str, Obj]], pods: Iterable[Obj], *, enabled: set[str]) -> dict[Key, Ask]:
    """The Secrets whose opted-in workloads (or bare pods) ask for a keystore, by (namespace, Secret)."""
    found: dict[Key, tuple[list[str], set[str]]] = {}
    for kind, obj, template, ours in annotated(workloads, pods):
        meta = _map(template, "metadata")
        namespace = str(_map(obj, "metadata").get("namespace") or "default")
        if _text(ours, names.KEYSTORE_ANNOTATION) != names.KEYSTORE_PKCS12:
            continue
        if not opted_in(_map(meta, "labels"), namespace_enabled=namespace in enabled):
            continue
        name = str(_map(obj, "metadata").get("name") or "")
        workload = pod_workload(meta) if kind == "Pod" else template_workload(kind, name, meta)
        if not workload.secret_name or subdomain_problem(workload.secret_name):
            continue  # no Secret, or a name that is none (refused with its target: discover.legal_targets)
        users, passwords = found.setdefault((namespace, workload.secret_name), ([], set()))
        users.append(f"{workload.kind}/{workload.name}")
        passwords.add(_text(ours, names.KEYSTORE_PASSWORD_SECRET_ANNOTATION))
    return {key: Ask(tuple(sorted(set(users))), frozenset(passwords)) for key, (users, passwords) in found.items()}


# What `resolve` is given to read a password Secret: (the Secret, or None when it does not exist; "" or
# why it could not be read).
Reader = Callable[[str, str], tuple[Obj | None, str]]


def resolve(asks: Mapping[Key, Ask], *, read: Reader, own_namespace: str) -> dict[Key, Keystore]:
    """Each asking Secret's keystore: the generated password, or the one its workloads name, read once."""
    return {key: _resolve(key, ask, read, own_namespace) for key, ask in sorted(asks.items())}


def _resolve(key: Key, ask: Ask, read: Reader, own_namespace: str) -> Keystore:
    namespace, secret = key
    where = f"Secret {namespace}/{secret}: the keystore of {', '.join(ask.workloads)}"
    if len(ask.password_secrets) > 1:
        listed = ", ".join(repr(n) if n else "(generated)" for n in sorted(ask.password_secrets))
        return Keystore(problem=f"{where} is not written: the workloads sharing the Secret name different "
                                f"{names.KEYSTORE_PASSWORD_SECRET_ANNOTATION} ({listed}); give them one")
    [name] = ask.password_secrets
    if not name:
        return Keystore()
    problem = _refused_name(name, namespace, secret, own_namespace)
    if problem:
        return Keystore(problem=f"{where} is not written: {problem}")
    found, error = read(namespace, name)
    if error:  # the API failed: what is stored is kept, and the next pass reads again
        return Keystore(problem=f"{where} is not updated: its password Secret {name} could not be read ({error})")
    password = password_of(found, name) if found is not None else f"its password Secret {name} does not exist"
    if isinstance(password, str):
        return Keystore(problem=f"{where} is not written: {password}")
    return Keystore(password=password)


def _refused_name(name: str, namespace: str, secret: str, own_namespace: str) -> str:
    """Why a password Secret may not be read at all, by name alone ("" when it may)."""
    if why := password_name_problem(name):
        return why
    if namespace == own_namespace:
        return (f"{names.KEYSTORE_PASSWORD_SECRET_ANNOTATION} is not read in the injector's own namespace "
                f"{own_namespace}, where its CA keys live")
    if name == secret:
        return f"{names.KEYSTORE_PASSWORD_SECRET_ANNOTATION} names the workload's own certificate Secret"
    return ""


def password_name_problem(name: str) -> str:
    """Why the value of KEYSTORE_PASSWORD_SECRET_ANNOTATION is no Secret name ("" when it is one): checked
    before anything is read, as `../../../secrets` in a path would be a read of every Secret of the cluster."""
    if why := subdomain_problem(name):
        return (f"{names.KEYSTORE_PASSWORD_SECRET_ANNOTATION} {shown(name)} is no Secret name: {why}; it names a "
                "Secret of the workload's own namespace by its name alone")
    return ""


def password_of(found: Obj, name: str) -> bytes | str:
    """The password held in a named Secret, or why it cannot be used (a person reads it: never the value)."""
    meta = _map(found, "metadata")
    ours = [k for k in (*_map(meta, "labels"), *_map(meta, "annotations")) if k.startswith(f"{names.DOMAIN}/")]
    if _map(meta, "labels").get(names.MANAGED_BY_LABEL) == names.MANAGER or ours:
        return f"its password Secret {name} is tls-injector's own; name a Secret of your own"
    kind = found.get("type") or "Opaque"
    if kind != "Opaque":
        return f"its password Secret {name} is of type {str(kind)[:80]}; only an Opaque Secret is read"
    raw = _map(found, "data").get(names.KEYSTORE_PASSWORD_KEY)
    if not isinstance(raw, str):
        return f"its password Secret {name} has no key {names.KEYSTORE_PASSWORD_KEY}"
    try:
        value = base64.b64decode(raw, validate=True)
    except (ValueError, binascii.Error):
        return f"its password Secret {name} holds an undecodable {names.KEYSTORE_PASSWORD_KEY}"
    return value if password_problem(value) == "" else \
        f"its password Secret {name}: {names.KEYSTORE_PASSWORD_KEY} {password_problem(value)}"


def password_problem(value: bytes) -> str:
    """Why `value` cannot be a keystore password ("" when it can)."""
    if not MIN_PASSWORD <= len(value) <= MAX_PASSWORD:
        return f"must be {MIN_PASSWORD} to {MAX_PASSWORD} characters long, not {len(value)}"
    if not all(0x21 <= b <= 0x7E for b in value):
        return "must be printable ASCII without spaces or a newline (a file written with echo ends in one)"
    return ""


def with_keystore(data: Mapping[str, str], keystore: Keystore | None) -> dict[str, str]:
    """A workload Secret's data (base64, as the API carries it) with its keystore keys current: removed when
    nobody asks; kept as stored on a problem; else the keystore and truststore of tls.crt, tls.key and
    ca.crt under the password, each rebuilt only when its contents differ from those."""
    if keystore is not None and keystore.problem:
        return dict(data)
    kept = {k: v for k, v in data.items() if k not in KEYSTORE_KEYS}
    if keystore is None:
        return kept
    plain = {k: v for k in (*KEYSTORE_KEYS, names.CERT_FILE, names.KEY_FILE, names.CA_FILE)
             if (v := _decoded(data.get(k))) is not None}
    cert, key = plain.get(names.CERT_FILE), plain.get(names.KEY_FILE)
    if not cert or not key:
        return kept  # no certificate yet: nothing to put in a keystore
    password = keystore.password or _generated(plain.get(names.KEYSTORE_PASSWORD_KEY))
    stored = plain.get(names.KEYSTORE_KEY, b"")
    fresh = {names.KEYSTORE_KEY: data[names.KEYSTORE_KEY] if stored and keystore_holds(
        stored, password=password, cert_pem=cert, key_pem=key) else _b64(keystore_of(cert, key, password=password))}
    cas = load_certificates(plain.get(names.CA_FILE, b""))
    if cas:
        stored = plain.get(names.SECRET_TRUSTSTORE_KEY, b"")
        same = stored and truststore_fingerprints(stored, password=password) == {fingerprint(c) for c in cas}
        fresh[names.SECRET_TRUSTSTORE_KEY] = data[names.SECRET_TRUSTSTORE_KEY] if same else \
            _b64(to_truststore(cas, password=password))
    if keystore.password is None:
        fresh[names.KEYSTORE_PASSWORD_KEY] = _b64(password)
    return {**kept, **fresh}


def _generated(stored: bytes | None) -> bytes:
    """The password kept beside the keystore while it is usable, else a new one."""
    if stored is not None and password_problem(stored) == "":
        return stored
    return secrets.token_urlsafe(GENERATED_BYTES).encode()


def _decoded(value: object) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        return None


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def _map(obj: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _text(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    return value.strip() if isinstance(value, str) else ""
