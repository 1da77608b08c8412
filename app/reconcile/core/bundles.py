"""The trust bundle ConfigMap of a namespace, decided purely (`decide_bundle`): our CA keys replaced
wholesale and anyone else's kept, the bundle with the public roots (made once per CA set, held by its
digest), and the PKCS#12 truststores, rebuilt only when their CAs change.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re

from tls_injector import names
from tls_injector.kube import CONFIG_MAPS
from tls_injector.names import (
    BUNDLE_KEY,
    CLIENT_BUNDLE_KEY,
    CLIENT_TRUSTSTORE_KEY,
    TRUST_BUNDLE_CONFIGMAP,
    TRUSTSTORE_KEY,
)
from tls_injector.pki import (
    fingerprint,
    load_certificates,
    public_roots,
    to_truststore,
    truststore_fingerprints,
    with_public_roots,
)
from tls_injector.reconcile.core import ownership as own
from tls_injector.reconcile.core.inputs import Signing
from tls_injector.reconcile.core.objects import Obj, Outcome, Refused, base_body, same_body, write_if_changed

# Keys of the bundle ConfigMap that are ours: the whole bundle and one per CA (16 hex digits of SHA-256),
# for the serving CAs (`ca-`) and the client CAs (`client-ca-`, docs/mtls.md).
_BUNDLE_KEYS = re.compile(r"^(client-)?ca-(bundle|[0-9a-f]{16})\.crt$")


def decide_bundle(namespace: str, existing: Obj | None, signing: Signing, *, truststore: bool = False,
                  public: bool = False) -> Outcome:
    """Our keys replaced wholesale (a removed CA's key disappears), anyone else's keys kept; with
    `truststore`, binaryData `truststore.p12` holds the same CAs as PKCS#12; with `public`, the key
    names.PUBLIC_BUNDLE_KEY holds them followed by the public roots, the annotation saying their source."""
    if existing is not None and not own.is_owned(existing, "bundle"):
        return Refused(f"ConfigMap {namespace}/{TRUST_BUNDLE_CONFIGMAP} exists and is not managed by tls-injector")
    body = base_body(existing, CONFIG_MAPS, namespace, TRUST_BUNDLE_CONFIGMAP, role="bundle")
    kept = {k: v for k, v in ((existing or {}).get("data") or {}).items()
            if not _BUNDLE_KEYS.match(k) and k != names.PUBLIC_BUNDLE_KEY}
    body["data"] = {**kept, **signing.bundle, **signing.client_bundle}
    body["metadata"]["annotations"].pop(names.PUBLIC_ROOTS_SOURCE_ANNOTATION, None)
    if public:
        text, digest = public_bundle(signing.bundle_pem)
        body["data"][names.PUBLIC_BUNDLE_KEY] = text
        body["metadata"]["annotations"][names.PUBLIC_ROOTS_SOURCE_ANNOTATION] = public_roots().source
        stored = ((existing or {}).get("data") or {}).get(names.PUBLIC_BUNDLE_KEY)
        if existing is not None and stored == digest and same_body(existing, _with_public(body, digest)):
            return None  # read as its digest (read.bundle_shape): the same text, nothing else changed
    binary = _binary_data(existing, signing, truststore=truststore)
    if binary:
        body["binaryData"] = binary
    else:
        body.pop("binaryData", None)
    return write_if_changed(CONFIG_MAPS, existing, body, reason="bundle")


# What a pass holds of the public bundle it read: its digest, not its ~180 KB (read.bundle_shape).
DIGEST_PREFIX = "sha256:"


def public_digest(text: str) -> str:
    return DIGEST_PREFIX + hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=8)
def public_bundle(bundle_pem: str) -> tuple[str, str]:
    """Our CAs and the public roots as one file, and its digest: made once per CA set, not per namespace
    (a pass has one bundle, two while a member's federation roots differ; 8 is ample)."""
    text = with_public_roots(bundle_pem)
    return text, public_digest(text)


def _with_public(body: Obj, value: str) -> Obj:
    return {**body, "data": {**body["data"], names.PUBLIC_BUNDLE_KEY: value}}


def _binary_data(existing: Obj | None, signing: Signing, *, truststore: bool) -> dict[str, str]:
    """Anyone else's binaryData kept; ours are the truststores, each rebuilt only when its CAs differ from
    its PEM bundle's (PKCS#12 bytes change on every build: random salts), dropped when nobody asks for them:
    `truststore.p12` the serving CAs, `client-truststore.p12` the client CAs while a client CA set is in use."""
    binary = dict((existing or {}).get("binaryData") or {})
    current = {key: binary.pop(key, None) for key in (TRUSTSTORE_KEY, CLIENT_TRUSTSTORE_KEY)}
    if not truststore:
        return binary
    for key, pem in ((TRUSTSTORE_KEY, signing.bundle.get(BUNDLE_KEY, "")),
                     (CLIENT_TRUSTSTORE_KEY, signing.client_bundle.get(CLIENT_BUNDLE_KEY, ""))):
        cas = load_certificates(pem.encode())
        if not cas:
            continue
        kept = current[key]
        stored = base64.b64decode(kept, validate=False) if isinstance(kept, str) else b""
        if stored and truststore_fingerprints(stored) == {fingerprint(c) for c in cas}:
            binary[key] = str(kept)
        else:
            binary[key] = base64.b64encode(to_truststore(cas)).decode()
    return binary
