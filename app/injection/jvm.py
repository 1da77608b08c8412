"""What a pod's keystore and public-roots choices mean for its injection (issue 39 points 4 and 5): the
warnings /mutate, `inject` and the dry-run preview give, and the preview's lines. The keystore itself is
the reconciler's (app/reconcile/core/keystores.py): the pod mounts it with its Secret, so nothing is injected
for it; a value the reconciler will not act on is said here, where the user sees it first."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tls_injector import names
from tls_injector.injection.choices import Choices, shown
from tls_injector.kubenames import subdomain_problem


def keystore_warnings(annotations: Mapping[str, Any], choices: Choices) -> list[str]:
    """Why a pod asking for a keystore will not find one ([] when it will, or does not ask)."""
    asked = annotations.get(names.KEYSTORE_ANNOTATION)
    if asked is None:
        return []
    value = asked.strip() if isinstance(asked, str) else asked
    if value != names.KEYSTORE_PKCS12:
        return [f"{names.KEYSTORE_ANNOTATION}: {shown(asked)} is not \"{names.KEYSTORE_PKCS12}\"; no keystore is "
                f"written (PKCS#12 is the JDK's default keystore type since Java 9; docs/injection.md)"]
    if choices.mode != names.MODE_SECRET:
        return [f"{names.KEYSTORE_ANNOTATION}: no keystore in the {choices.mode} mode: it is written into the "
                f"workload's Secret, which this pod does not mount"]
    password = annotations.get(names.KEYSTORE_PASSWORD_SECRET_ANNOTATION)
    why = subdomain_problem(password.strip()) if isinstance(password, str) and password.strip() else ""
    if why:  # the reconciler refuses it by name and reads nothing (app/reconcile/core/keystores.py)
        return [f"{names.KEYSTORE_PASSWORD_SECRET_ANNOTATION}: {shown(password)} is no Secret name ({why}); no "
                "keystore is written: name a Secret of this namespace by its name alone"]
    return []


def keystore_line(annotations: Mapping[str, Any], choices: Choices) -> str:
    """The preview's line for a pod that will find a keystore ("" for one that will not)."""
    asked = annotations.get(names.KEYSTORE_ANNOTATION)
    if not isinstance(asked, str) or asked.strip() != names.KEYSTORE_PKCS12 or choices.mode != names.MODE_SECRET \
            or keystore_warnings(annotations, choices):
        return ""
    password = annotations.get(names.KEYSTORE_PASSWORD_SECRET_ANNOTATION)
    source = (f"the password in key {names.KEYSTORE_PASSWORD_KEY} of your Secret {shown(password.strip())}"
              if isinstance(password, str) and password.strip()
              else f"a generated password beside them ({names.KEYSTORE_PASSWORD_KEY})")
    return (f"tls-injector: and a JVM keystore: {choices.cert_path}/{names.KEYSTORE_KEY} and "
            f"{names.SECRET_TRUSTSTORE_KEY} (PKCS#12), {source}")


def public_roots_line(choices: Choices) -> str:
    """The preview's line for a pod whose TLS variables name the bundle with the public roots."""
    if not choices.public_roots:
        return ""
    env = ", ".join(choices.env) or f"no variable ({names.ENV_ANNOTATION})"
    return (f"tls-injector: and the public roots: {choices.trust_path}/{names.PUBLIC_BUNDLE_KEY} (our CAs and "
            f"certifi's roots), named by {env}")
