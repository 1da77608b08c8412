"""What every decision of a pass reads: what the pass read of the cluster (`Observed`) and the CA set it
signs with (`Signing`, with the turn's budget and the keys made ahead).
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tls_injector.kube import SECRETS, Oversized
from tls_injector.names import BUNDLE_KEY, CLIENT_BUNDLE_KEY, TRUST_BUNDLE_CONFIGMAP
from tls_injector.pki import CaSet, CertKey, Sealed, seal_key, trust_bundle
from tls_injector.reconcile.core.budget import TurnBudget
from tls_injector.reconcile.core.keypool import KeyPool
from tls_injector.reconcile.core.keystores import Keystore
from tls_injector.reconcile.core.objects import Item, Obj

CLIENT_PREFIX = CLIENT_BUNDLE_KEY.removesuffix("-bundle.crt")


@dataclass(frozen=True)
class Signing:
    """The CA set of this pass with its signer; `bundle` is the trust bundle's ConfigMap data.

    `signer` is None while no CA may sign (a replaced user CA whose successor is not trusted everywhere
    yet); `waiting` then says why, and certificates that need a signature wait (`Waiting`).
    """

    cas: CaSet
    signer: CertKey | None
    bundle: dict[str, str]
    now: datetime
    waiting: str = ""
    seal_key: bytes | None = None  # the signer's key for leaf seals (app/pki/seal.py)
    # Seals opened in this pass, by what they were opened on: a pass decides a leaf, then reports its expiry
    # (or decides it again after a 409), so only the last few are read again; at most MAX_OPENED are held.
    opened: dict[tuple[Any, ...], Sealed | None] = field(default_factory=dict, compare=False, repr=False)
    # The client CA set's bundle keys (`client-ca-bundle.crt`, ...) the trust bundle ConfigMap carries too,
    # and the client CA set itself (None while no workload asks for a client certificate; docs/mtls.md).
    client: Signing | None = None
    # What each namespace may still spend of this turn of the loop (budget.py); None: no bound (`--once`).
    budget: TurnBudget | None = field(default=None, compare=False, repr=False)
    # The loop's keys made ahead (keypool.py); None: each key made at the call.
    keys: KeyPool | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def of(cas: CaSet, *, now: datetime, waiting: str = "", prefix: str = "ca",
           anchors: Sequence[Any] = ()) -> Signing:
        """`anchors`: roots every bundle carries besides the set's own (a member's federation roots)."""
        signer = cas.signer()
        why = "" if signer is not None else waiting or "no CA may sign yet"
        key = seal_key(signer) if signer is not None else None
        return Signing(cas, signer, trust_bundle([*cas.bundle(), *anchors], now=now, prefix=prefix), now, why, key)

    @property
    def client_bundle(self) -> dict[str, str]:
        return self.client.bundle if self.client is not None else {}

    @property
    def bundle_pem(self) -> str:
        return self.bundle[BUNDLE_KEY]

    # Each leaf decision of a pass reads these two; computed once per Signing (a pass makes a few), not per
    # leaf: the bundle base64-encoded again, and the end parsed from the certificate again (cryptography
    # makes a new datetime at each read), cost ~3% of a resync's CPU at 20,000 leaves.
    @functools.cached_property
    def ca_data(self) -> str:
        """The bundle as a leaf Secret's `ca.crt` carries it (base64, as the API does)."""
        return base64.b64encode(self.bundle_pem.encode()).decode()

    @functools.cached_property
    def signer_end(self) -> datetime | None:
        """When the CA that signs ends (None while none may sign)."""
        return self.signer.cert.not_valid_after_utc if self.signer is not None else None


@dataclass
class Observed:
    """What a pass read: opted-in candidates and the objects we own, keyed by namespace (and name)."""

    workloads: list[tuple[str, Obj]] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)
    enabled: set[str] = field(default_factory=set)
    # Our leaf Secrets by (namespace, name): a dict from a list; the loop's cache reads each when asked.
    leaves: Mapping[tuple[str, str], Obj] = field(default_factory=dict)
    bundles: dict[str, Obj] = field(default_factory=dict)
    # Namespaces where a ConfigMap of the bundle's name exists that is not ours: never written, and left
    # out of the CA's rotation facts (docs/security.md), so one tenant cannot hold every rotation back.
    squatted: set[str] = field(default_factory=set)
    # The Services of namespaces where something opted in: their selectors name workloads' pods.
    services: list[Obj] = field(default_factory=list)
    truststores: set[str] = field(default_factory=set)  # namespaces where a workload asks for truststore.p12
    # Objects left out as larger than what their kind holds (read.py): (kind, which, the cap it is over).
    oversized: list[tuple[str, Oversized, int]] = field(default_factory=list)
    # Namespaces where an opted-in workload or pod asks for trust alone (names.MODE_TRUST_ONLY): no Secret,
    # but the bundle, as in an enabled namespace.
    trust_only: set[str] = field(default_factory=set)
    # Secrets whose workloads ask for a JVM keystore (names.KEYSTORE_ANNOTATION), with its password.
    keystores: dict[tuple[str, str], Keystore] = field(default_factory=dict)
    # Namespaces whose bundle carries the public roots too (names.PUBLIC_ROOTS: labelled so, or a workload asks).
    public_roots: set[str] = field(default_factory=set)

    @property
    def bundle_wanted(self) -> set[str]:
        """Namespaces that need the bundle whatever their workloads' Secrets (bundle_namespaces adds those)."""
        return self.enabled | self.trust_only

    def lookup(self, item: Item) -> Obj | None:
        if item.resource is SECRETS:
            return self.leaves.get((item.namespace, item.name))
        return self.bundles.get(item.namespace) if item.name == TRUST_BUNDLE_CONFIGMAP else None
