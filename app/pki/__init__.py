"""PKI: keys, CAs, leaves, bundles and rotation decisions. Pure: `now` is always a parameter."""

from app.pki.certs import (
    CA_VALIDITY,
    LEAF_VALIDITY,
    CertKey,
    issue_leaf,
    load_cert_key,
    load_certificates,
    make_ca,
    not_after,
)
from app.pki.keys import KEY_TYPES, KeyType, PrivateKey, generate_key

__all__ = [
    "CA_VALIDITY",
    "KEY_TYPES",
    "LEAF_VALIDITY",
    "CertKey",
    "KeyType",
    "PrivateKey",
    "generate_key",
    "issue_leaf",
    "load_cert_key",
    "load_certificates",
    "make_ca",
    "not_after",
]
