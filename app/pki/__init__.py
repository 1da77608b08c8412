"""PKI: keys, CAs, leaves, bundles and rotation decisions. Pure: `now` is always a parameter.

Ed25519 is selectable (`key_type="ed25519"`), but the web-PKI profile of cryptography.x509.verification
and most TLS 1.2 clients reject it; chains holding it are verified here by a plain walk instead. Prefer
the ECDSA P-256 default, or RSA for old clients.
"""

from app.pki.bundle import BUNDLE_KEY, bundle_certificates, trust_bundle
from app.pki.certs import (
    BACKDATE,
    CA_VALIDITY,
    LEAF_VALIDITY,
    CertKey,
    fingerprint,
    is_self_signed,
    issue_leaf,
    issued_by,
    load_cert_key,
    load_certificates,
    make_ca,
    not_after,
    to_pem,
)
from app.pki.domains import (
    BUNDLE_PREFIX,
    CaRole,
    intermediate_renewal,
    issue_client,
    make_intermediate,
    make_root,
)
from app.pki.keys import KEY_TYPES, KeyType, PrivateKey, generate_key
from app.pki.names import DEFAULT_CLUSTER_DOMAIN, cluster_domain_from_resolv_conf, dns_names_for_services
from app.pki.pkcs12 import KDF_ROUNDS, to_pkcs12
from app.pki.renewal import (
    CA_LOOKAHEAD,
    LEAF_LOOKAHEAD,
    RENEWAL_REASONS,
    Decision,
    RenewalReason,
    ca_renewal,
    leaf_renewal,
    load_user_ca,
)
from app.pki.trust import (
    SETTLE,
    CaRecord,
    CaSet,
    CaState,
    TrustFacts,
    add_ca,
    adopt_orphans,
    advance,
    decode,
    encode,
    observe,
    rotation_due,
)
from app.pki.verify import UntrustedChain, verify_client, verify_server

__all__ = [
    "BACKDATE",
    "BUNDLE_KEY",
    "BUNDLE_PREFIX",
    "CA_LOOKAHEAD",
    "CA_VALIDITY",
    "DEFAULT_CLUSTER_DOMAIN",
    "KDF_ROUNDS",
    "KEY_TYPES",
    "LEAF_LOOKAHEAD",
    "LEAF_VALIDITY",
    "RENEWAL_REASONS",
    "SETTLE",
    "CaRecord",
    "CaRole",
    "CaSet",
    "CaState",
    "CertKey",
    "Decision",
    "KeyType",
    "PrivateKey",
    "RenewalReason",
    "TrustFacts",
    "UntrustedChain",
    "add_ca",
    "adopt_orphans",
    "advance",
    "bundle_certificates",
    "ca_renewal",
    "cluster_domain_from_resolv_conf",
    "decode",
    "dns_names_for_services",
    "encode",
    "fingerprint",
    "generate_key",
    "intermediate_renewal",
    "is_self_signed",
    "issue_client",
    "issue_leaf",
    "issued_by",
    "leaf_renewal",
    "load_cert_key",
    "load_certificates",
    "load_user_ca",
    "make_ca",
    "make_intermediate",
    "make_root",
    "not_after",
    "observe",
    "rotation_due",
    "to_pem",
    "to_pkcs12",
    "trust_bundle",
    "verify_client",
    "verify_server",
]
