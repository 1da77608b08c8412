"""The names users see (the contract): keep them stable; docs/injection.md lists them for users.

Their one home: every package imports them from here (the bottom layer), and a test fails on a second
spelling of any of them anywhere in app/.
"""

from __future__ import annotations

from typing import Literal, get_args

NAME = "tls-injector"  # the project's name, and the default name of its own objects
DOMAIN = "tls-injector.io"
INJECT_LABEL = f"{DOMAIN}/inject"
POD_OPT_IN = "true"
POD_OPT_OUT = "false"
NAMESPACE_OPT_IN = "enabled"
SECRET_NAME_ANNOTATION = f"{DOMAIN}/secret-name"
SERVICE_NAMES_ANNOTATION = f"{DOMAIN}/service-names"
# A sanctioned exception to the TLS transition rules (docs/rules.md, "Exceptions"): the pod template's
# annotation names the one change, `<old>-><new>` (a Secret name, or one of the two states below), and
# RBAC says who may take it: the verb on the virtual resource, in the namespace, named as the workload.
TLS_CHANGE_ANNOTATION = f"{DOMAIN}/tls-change"
TLS_CHANGE_DEFAULT = "(default)"  # the secret-name annotation absent: `<workload>-tls`
TLS_CHANGE_OFF = "(off)"  # TLS off; parentheses are in no Secret's name, so neither can be mistaken for one
EXCEPTION_GROUP = DOMAIN
EXCEPTION_RESOURCE = "tlsexceptions"
EXCEPTION_VERB = "change-tls"
INJECTED_ANNOTATION = f"{DOMAIN}/injected"
TRUST_BUNDLE_CONFIGMAP = "tls-injector-trust-bundle"
BUNDLE_KEY = "ca-bundle.crt"
CERT_MOUNT_PATH = "/etc/tls-injector/certs"
TRUST_MOUNT_PATH = "/etc/tls-injector/trust"
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
# The CA fingerprints the reconciler has seen in every bundle, on the CA Secret: `<prefix><16 hex>`.
IN_EVERY_BUNDLE_SINCE_PREFIX = f"{DOMAIN}/in-every-bundle-since-"
# The signer the reconciler acts as for PodCertificateRequests (pods' `podCertificate` volumes) and whose
# CAs it publishes as the ClusterTrustBundle CLUSTER_TRUST_BUNDLE.
SIGNER_NAME = f"{DOMAIN}/serving"
# The one ClusterTrustBundle the reconciler publishes for SIGNER_NAME, holding every CA of the set: the API
# requires a signer's bundles to be named `<signer, / as :>:<suffix>`. Pods project it by this name
# (docs/injection.md says why a name rather than signerName + labelSelector).
CLUSTER_TRUST_BUNDLE = SIGNER_NAME.replace("/", ":") + ":cas"
# Per pod (template): how the certificate arrives. "pod-certificate": a per-pod key made by the kubelet and
# a certificate from SIGNER_NAME (projected `podCertificate`), trust from the ClusterTrustBundle;
# "secret" (the default): the workload's Secret and the trust-bundle ConfigMap.
MODE_ANNOTATION = f"{DOMAIN}/mode"
MODE_SECRET = "secret"  # noqa: S105 - a mode's name, not a password
MODE_POD_CERTIFICATE = "pod-certificate"
MODES = (MODE_SECRET, MODE_POD_CERTIFICATE)
# "trust-only": a pure client (a Job calling an internal API) that serves nothing: the trust bundle and the
# TLS env vars (all of TLS_ENV_VARS unless ENV_ANNOTATION says otherwise), no certificate, no Secret. Chosen
# per pod (template) only, never as --default-mode: a serving workload must not lose its certificate by default.
MODE_TRUST_ONLY = "trust-only"
POD_MODES = (*MODES, MODE_TRUST_ONLY)
# The key the kubelet makes for a pod certificate: P-256 is fast to generate on the node and accepted by
# every TLS stack; the signer also issues for P-384 and RSA-3072/4096, and refuses Ed25519 and P-521.
POD_KEY_TYPE = "ECDSAP256"
# File names inside the volumes, the same in both modes so applications need no change: the certificate
# directory holds tls.crt (leaf + intermediates), tls.key and ca.crt, as a kubernetes.io/tls Secret does.
CERT_FILE, KEY_FILE, CA_FILE = "tls.crt", "tls.key", "ca.crt"
# On a pod template: "pkcs12" asks for a PKCS#12 truststore (password "changeit") beside the PEM bundle, as
# binaryData `truststore.p12` of the namespace's trust-bundle ConfigMap, for JVM and .NET clients.
TRUSTSTORE_ANNOTATION = f"{DOMAIN}/truststore"
TRUSTSTORE_PKCS12 = "pkcs12"
TRUSTSTORE_KEY = "truststore.p12"
# Beside it, where a workload of the cluster asks for a client certificate: the client CAs as PKCS#12, what
# a JVM server verifies client certificates with (docs/mtls.md).
CLIENT_TRUSTSTORE_KEY = "client-truststore.p12"

# --- JVM keystores and public roots (issue 39 points 4 and 5; docs/injection.md) ---
# On a pod template: "pkcs12" puts a PKCS#12 keystore (the key and tls.crt's chain) and a truststore (ca.crt's
# CAs) into the workload's own Secret beside tls.crt, both under one password: generated and stored beside
# them as KEYSTORE_PASSWORD_KEY (as Strimzi hands Kafka clients user.p12 and user.password), or the value of
# KEYSTORE_PASSWORD_KEY in the Secret of the workload's namespace that KEYSTORE_PASSWORD_SECRET_ANNOTATION
# names (never copied: docs/security.md, "Keystore passwords").
KEYSTORE_ANNOTATION = f"{DOMAIN}/keystore"
KEYSTORE_PKCS12 = "pkcs12"
KEYSTORE_PASSWORD_SECRET_ANNOTATION = f"{DOMAIN}/keystore-password-secret"
KEYSTORE_KEY = "keystore.p12"
SECRET_TRUSTSTORE_KEY = TRUSTSTORE_KEY  # the same file name in the Secret as in the bundle ConfigMap
KEYSTORE_PASSWORD_KEY = "keystore.password"  # noqa: S105 - a key's name, not a password
# On a pod template (annotation) or a Namespace (label): "true" adds PUBLIC_BUNDLE_KEY to the namespace's
# trust-bundle ConfigMap: our CAs followed by the public roots of the certifi package the release pins; on a
# pod template the TLS env vars also point at it. Not a `.crt` key: a consumer trusting every `*.crt` of the
# bundle (the per-CA keys' purpose) must not start trusting every public CA. The ConfigMap's
# PUBLIC_ROOTS_SOURCE_ANNOTATION says which certifi release the roots come from.
PUBLIC_ROOTS = f"{DOMAIN}/public-roots"
PUBLIC_ROOTS_ON = "true"
PUBLIC_BUNDLE_KEY = "ca-bundle-with-public-roots.pem"
PUBLIC_ROOTS_SOURCE_ANNOTATION = f"{DOMAIN}/public-roots-source"
# --- end of issue 39 points 4 and 5 ---


# Per-pod choices (annotations on the Pod or its template), read by the mutating webhook only.
CERT_PATH_ANNOTATION = f"{DOMAIN}/cert-mount-path"
TRUST_PATH_ANNOTATION = f"{DOMAIN}/trust-mount-path"
CONTAINERS_ANNOTATION = f"{DOMAIN}/containers"  # comma list: inject only into these containers
ENV_ANNOTATION = f"{DOMAIN}/env"  # "true" for all TLS_ENV_VARS, or a comma list of some of them
# The mode of the files of the certificate's volume (tls.key, tls.crt, ca.crt, and the client certificate's),
# for servers that refuse a group- or world-readable key (PostgreSQL): the volume's `defaultMode`. A closed
# set, written as octal text; unset, the API's default 0644. With the pod's `fsGroup` the kubelet makes the
# files root:<fsGroup> and adds group read (0400 -> 0440, 0600 -> 0640): docs/injection.md, "The key's mode".
KEY_MODE_ANNOTATION = f"{DOMAIN}/key-mode"
KEY_MODES = ("0400", "0440", "0600", "0640")
# The variables common TLS stacks read for extra trust: OpenSSL/Go/Python ssl, Python requests, Node.js.
TLS_ENV_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")
CERT_VOLUME = "tls-injector-cert"
# A workload's certificate profile (docs/injection.md, "Certificate profiles"), on its pod template, each
# bounded by the operator's reconcile flags: how long the certificate lives and how long before its end it is
# renewed (durations as `kubectl` and Go read them: `2160h`, `90m`, `1h30m`, `1.5h`), and its key's algorithm.
DURATION_ANNOTATION = f"{DOMAIN}/duration"
RENEW_BEFORE_ANNOTATION = f"{DOMAIN}/renew-before"
KEY_ALGORITHM_ANNOTATION = f"{DOMAIN}/key-algorithm"
PROFILE_ANNOTATIONS = (DURATION_ANNOTATION, RENEW_BEFORE_ANNOTATION, KEY_ALGORITHM_ANNOTATION)
KeyAlgorithm = Literal["ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072", "rsa-4096", "ed25519"]
KEY_ALGORITHMS: tuple[KeyAlgorithm, ...] = get_args(KeyAlgorithm)
DEFAULT_KEY_ALGORITHM: KeyAlgorithm = KEY_ALGORITHMS[0]
# On a leaf Secret: the profile its certificate was issued with, when it is not the built-in one (ECDSA
# P-256, 90 days, renewed 35 days before its end), so doctor and status read the renewal time from it.
PROFILE_ANNOTATION = f"{DOMAIN}/profile"
# On a pod template: "true" gives the workload an mTLS client certificate too (docs/mtls.md): its own
# Secret (workload.client_secret_name_for), EKU clientAuth only, from the client CA, with the URI SAN
# spiffe://<trust domain>/ns/<namespace>/sa/<service account>; mounted read-only at CLIENT_MOUNT_PATH with
# the same file names as the serving one (tls.crt, tls.key, and ca.crt: the serving CAs, to verify servers).
CLIENT_CERT_ANNOTATION = f"{DOMAIN}/client-certificate"
CLIENT_MOUNT_PATH = "/etc/tls-injector/client"
CLIENT_VOLUME = "tls-injector-client"
# The trust bundle ConfigMap's key holding the client CAs: what a server verifies client certificates with.
CLIENT_BUNDLE_KEY = "client-ca-bundle.crt"
TRUST_VOLUME = "tls-injector-trust"
# Deployment pods carry this label; its value is the suffix of their ReplicaSet's name.
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"

# How the reconciler marks the objects it owns: the well-known managed-by label (RBAC docs rely on it)
# plus a role label, so lists and watches select exactly ours.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGER = NAME
ROLE_LABEL = f"{DOMAIN}/role"
WORKLOADS_ANNOTATION = f"{DOMAIN}/workloads"  # which workloads a leaf Secret serves, for people and events
ISSUER_ANNOTATION = f"{DOMAIN}/issuer"  # SHA-256 of the CA that signed the leaf
# On a leaf Secret: proof that its certificate and key passed the full check (app/pki/seal.py).
SEAL_ANNOTATION = f"{DOMAIN}/seal"
FORCE_RENEW_ANNOTATION = f"{DOMAIN}/force-renew"  # on a leaf Secret: re-issue it now (then removed)
FORCE_REPLACE_ANNOTATION = f"{DOMAIN}/force-replace"  # on the CA Secret: rotate to a new CA key

# The objects of the injector's own namespace (manifests/base): the defaults of their flags.
DEFAULT_NAMESPACE = NAME
CA_SECRET = f"{NAME}-ca"
# The client CA set (docs/mtls.md): its own Secret and trust state machine, rotating apart from the serving CA.
CLIENT_CA_SECRET = f"{NAME}-client-ca"
# Multi-cluster (docs/multicluster.md). In a hub, a member is a Secret of the hub's namespace labelled
# MEMBER_LABEL=<member name> whose MEMBER_KUBECONFIG_KEY holds a kubeconfig for the hub's account in the
# member. In a member's namespace, the hub writes one intermediate CA per role (chain and key in one Secret,
# `ca.crt` the role's roots), each annotated with the SHA-256 of the hub root that signed it.
MEMBER_LABEL = f"{DOMAIN}/member"
MEMBER_KUBECONFIG_KEY = "kubeconfig"
# The SPIFFE trust domain a member's client intermediate may sign (its URI name constraint), on the member
# Secret; default <member name>.mesh. One trust domain per member: the member runs with that --trust-domain.
MEMBER_TRUST_DOMAIN_ANNOTATION = f"{DOMAIN}/trust-domain"
INTERMEDIATE_CA_SECRET = f"{NAME}-intermediate-ca"
CLIENT_INTERMEDIATE_CA_SECRET = f"{NAME}-client-intermediate-ca"
# Beside each, the hub's public record of what it wrote there (a ConfigMap: `tls.crt` the intermediate's
# certificate, `ca.crt` the role's roots as they are now, no key): the hub decides renewals from it, so its
# account in a member never reads a Secret, and a member takes its roots from it (docs/multicluster.md).
INTERMEDIATE_CA_RECORD = f"{INTERMEDIATE_CA_SECRET}-public"
CLIENT_INTERMEDIATE_CA_RECORD = f"{CLIENT_INTERMEDIATE_CA_SECRET}-public"
ISSUING_ROOT_ANNOTATION = f"{DOMAIN}/issuing-root"
# A member's own ConfigMap in its namespace, which the hub reads before it moves a root rotation on: per root
# of the hub, IN_EVERY_BUNDLE_SINCE_PREFIX<16 hex> = since when every bundle in use in the member carries it,
# and ROOTS_IN_USE_ANNOTATION = the roots (16 hex each, comma-separated) some leaf in use chains to.
FEDERATION_STATUS_CONFIGMAP = f"{NAME}-federation-status"
ROOTS_IN_USE_ANNOTATION = f"{DOMAIN}/roots-in-use"
# ... and CLUSTER_ID_ANNOTATION = the uid of the member's kube-system Namespace: which cluster it is, so the
# hub can refuse a second registration of one cluster under another name.
CLUSTER_ID_ANNOTATION = f"{DOMAIN}/cluster-id"
# Where a member's registration is annotated to be left out of the hub's root rotations (a member that
# holds one, and will not come back or is being cut off: docs/multicluster.md, "Revoking a member").
ROTATION_EXCLUDED_ANNOTATION = f"{DOMAIN}/excluded-from-rotation"
WEBHOOK_SERVICE = NAME
WEBHOOK_CONFIGURATION = NAME  # the Mutating- and ValidatingWebhookConfiguration
WEBHOOK_SECRET = f"{NAME}-webhook-tls"
WEBHOOK_CA_SECRET = f"{NAME}-webhook-ca"
LEASE_NAME = f"{NAME}-leader"  # pinned by resourceNames in manifests/base/rbac.yaml
RECONCILER_ACCOUNT = f"{NAME}-reconciler"  # manifests/base/reconciler.yaml
EVENT_COMPONENT = NAME  # source.component and reportingComponent of the Events the reconciler writes
# The fieldManager of every write the program makes: the manager metadata.managedFields names for the
# fields it set (`kubectl get -o yaml --show-managed-fields`), in place of the client library's user agent.
FIELD_MANAGER = NAME
# ValidatingAdmissionPolicies (and bindings) `export-policy` writes are named `<prefix><rule name>`.
POLICY_NAME_PREFIX = f"{NAME}."
