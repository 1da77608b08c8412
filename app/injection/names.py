"""The names users see (the contract): keep them stable; docs/injection.md lists them for users."""

from __future__ import annotations

DOMAIN = "tls-injector.io"
INJECT_LABEL = f"{DOMAIN}/inject"
POD_OPT_IN = "true"
POD_OPT_OUT = "false"
NAMESPACE_OPT_IN = "enabled"
SECRET_NAME_ANNOTATION = f"{DOMAIN}/secret-name"
SERVICE_NAMES_ANNOTATION = f"{DOMAIN}/service-names"
INJECTED_ANNOTATION = f"{DOMAIN}/injected"
TRUST_BUNDLE_CONFIGMAP = "tls-injector-trust-bundle"
BUNDLE_KEY = "ca-bundle.crt"
CERT_MOUNT_PATH = "/etc/tls-injector/certs"
TRUST_MOUNT_PATH = "/etc/tls-injector/trust"
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
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


# Per-pod choices (annotations on the Pod or its template), read by the mutating webhook only.
CERT_PATH_ANNOTATION = f"{DOMAIN}/cert-mount-path"
TRUST_PATH_ANNOTATION = f"{DOMAIN}/trust-mount-path"
CONTAINERS_ANNOTATION = f"{DOMAIN}/containers"  # comma list: inject only into these containers
ENV_ANNOTATION = f"{DOMAIN}/env"  # "true" for all TLS_ENV_VARS, or a comma list of some of them
# The variables common TLS stacks read for extra trust: OpenSSL/Go/Python ssl, Python requests, Node.js.
TLS_ENV_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")
CERT_VOLUME = "tls-injector-cert"
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
