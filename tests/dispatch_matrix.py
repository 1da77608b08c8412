"""Every built-in rule's forbidden transition, for every kind it covers, in every namespace shape, and
allowed transitions beside them: the table the dispatch tests send (tests/shipping/test_dispatch.py
through the shipped matchConditions evaluated here, tests/cluster/test_dispatch.py through the real
apiserver).

A shape is where the workload lives and what its pod template says:
- `enabled`: a namespace labelled tls-injector.io/inject=enabled, the template without the label;
- `labelled`: a namespace without that label, the template labelled tls-injector.io/inject "true";
- `neither`: neither.
Rules scoped to other namespaces refuse only templates labelled "true" (TLS is off otherwise), so they
have no forbidden transition in `neither`; there the same edits are listed as allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tls_injector.names import INJECT_LABEL, SECRET_NAME_ANNOTATION

KS, KP = "tls-injector.io/keystore", "tls-injector.io/keystore-password-secret"
PR, MODE, CC = "tls-injector.io/public-roots", "tls-injector.io/mode", "tls-injector.io/client-certificate"
SN, L = SECRET_NAME_ANNOTATION, INJECT_LABEL
SHAPES = ("enabled", "labelled", "neither")
APPS_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
KINDS = (*APPS_KINDS, "CronJob")

# A template's tls-injector keys: labels and annotations in one map (the label is the only label).
Keys = dict[str, str]


@dataclass(frozen=True)
class Case:
    family: str          # the rule family: the rule is <workload|cronjob>-<family>-transition (scoped ones
    shape: str           # prefixed enabled-namespace- in enabled namespaces)
    name: str
    old: Keys
    new: Keys
    allowed: bool
    image_change: bool = field(default=False)  # the new template also runs another image

    @property
    def id(self) -> str:
        return f"{self.family}/{self.shape}/{self.name}"


SCOPED = ("tls", "client-certificate", "trust-only")  # one rule per kind of namespace
EVERYWHERE = ("tls-mode", "keystore", "public-roots")  # one rule, scope all


def rule_name(family: str, kind: str, shape: str) -> str:
    owner = "cronjob" if kind == "CronJob" else "workload"
    prefix = "enabled-namespace-" if family in SCOPED and shape == "enabled" else ""
    return f"{prefix}{owner}-{family}-transition"


def _everywhere(family: str, name: str, old: Keys, new: Keys, *, allowed: bool) -> list[Case]:
    """The same edit in each shape: the labelled shape adds the label "true" on both sides."""
    label = {"labelled": {L: "true"}}
    return [Case(family, shape, name, label.get(shape, {}) | old, label.get(shape, {}) | new, allowed)
            for shape in SHAPES]


CASES: list[Case] = [
    # TLS itself: disable and swap.
    Case("tls", "labelled", "disable by dropping the label", {L: "true", SN: "a-tls"}, {SN: "a-tls"}, False),
    Case("tls", "labelled", "swap the secret", {L: "true", SN: "a-tls"}, {L: "true", SN: "b-tls"}, False),
    Case("tls", "labelled", "enable", {}, {L: "true"}, True),
    Case("tls", "enabled", "disable by opting out", {SN: "a-tls"}, {L: "false", SN: "a-tls"}, False),
    Case("tls", "enabled", "swap the secret", {SN: "a-tls"}, {SN: "b-tls"}, False),
    Case("tls", "enabled", "enable by dropping the opt-out", {L: "false"}, {}, True),
    Case("tls", "neither", "rename an unused secret", {SN: "a-tls"}, {SN: "b-tls"}, True),
    # The client certificate: turned off.
    Case("client-certificate", "labelled", "turn off", {L: "true", CC: "true"}, {L: "true"}, False),
    Case("client-certificate", "labelled", "ask for it", {L: "true"}, {L: "true", CC: "true"}, True),
    Case("client-certificate", "enabled", "turn off", {CC: "true"}, {CC: "false"}, False),
    Case("client-certificate", "enabled", "ask for it", {}, {CC: "true"}, True),
    Case("client-certificate", "neither", "drop it where TLS is off", {CC: "true"}, {}, True),
    # Trust alone on a template that serves.
    Case("trust-only", "labelled", "a server becomes trust-only", {L: "true"}, {L: "true", MODE: "trust-only"},
         False),
    Case("trust-only", "labelled", "leave trust-only", {L: "true", MODE: "trust-only"}, {L: "true"}, True),
    Case("trust-only", "enabled", "a server becomes trust-only", {}, {MODE: "trust-only"}, False),
    Case("trust-only", "enabled", "leave trust-only", {MODE: "trust-only"}, {}, True),
    Case("trust-only", "neither", "a template without TLS asks for trust", {}, {MODE: "trust-only"}, True),
    # Pod certificates: moving back to the Secret.
    *_everywhere("tls-mode", "move back to the Secret", {MODE: "pod-certificate"}, {}, allowed=False),
    *_everywhere("tls-mode", "move to pod certificates", {}, {MODE: "pod-certificate"}, allowed=True),
    # The JVM keystore: dropped, or its password's source switched.
    *_everywhere("keystore", "drop the keystore", {KS: "pkcs12"}, {}, allowed=False),
    *_everywhere("keystore", "switch the password secret", {KS: "pkcs12", KP: "a-pass"},
                 {KS: "pkcs12", KP: "b-pass"}, allowed=False),
    *_everywhere("keystore", "ask for a keystore", {}, {KS: "pkcs12", KP: "a-pass"}, allowed=True),
    # The public roots: turned off.
    *_everywhere("public-roots", "turn off", {PR: "true"}, {PR: "false"}, allowed=False),
    *_everywhere("public-roots", "ask for them", {}, {PR: "true"}, allowed=True),
]
# With every key a rule reads present and unchanged, another edit (the image) is allowed everywhere.
ALL_KEYS: Keys = {SN: "a-tls", CC: "true", KS: "pkcs12", KP: "a-pass", PR: "true", MODE: "pod-certificate"}
CASES += [Case("image", shape, "another image, every key unchanged", ({L: "true"} if shape == "labelled" else {})
               | ALL_KEYS, ({L: "true"} if shape == "labelled" else {}) | ALL_KEYS, True, image_change=True)
          for shape in SHAPES]

# Namespaces: the two rules on the Namespace itself (its labels; None = the label absent).
NAMESPACE_CASES: list[tuple[str, Keys, Keys, bool]] = [
    ("namespace-tls-transition", {L: "enabled"}, {}, False),
    ("namespace-public-roots-transition", {PR: "true"}, {PR: "false"}, False),
    ("namespace-public-roots-transition", {}, {PR: "true"}, True),
]


def template_metadata(keys: Keys, *, app: str) -> dict[str, Any]:
    labels = {"app": app} | {k: v for k, v in keys.items() if k == L}
    annotations = {k: v for k, v in keys.items() if k != L}
    return {"labels": labels} | ({"annotations": annotations} if annotations else {})


def manifest(kind: str, name: str, namespace: str, keys: Keys, *,
             image: str = "registry.invalid/app:1") -> dict[str, Any]:
    """A workload of `kind` that starts nothing (no replicas, a suspended CronJob; a DaemonSet has no node
    to run on here) whose pod template carries `keys`."""
    template = {"metadata": template_metadata(keys, app=name),
                "spec": {"containers": [{"name": "app", "image": image}]}}
    metadata = {"name": name, "namespace": namespace}
    if kind == "CronJob":
        template["spec"]["restartPolicy"] = "OnFailure"
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": metadata,
                "spec": {"schedule": "0 3 * * *", "suspend": True, "jobTemplate": {"spec": {"template": template}}}}
    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": name}}, "template": template}
    if kind != "DaemonSet":
        spec["replicas"] = 0
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": metadata, "spec": spec}


def expected_rule(case: Case, kind: str) -> str | None:
    """The rule whose refusal the case expects (None: allowed)."""
    return None if case.allowed else rule_name(case.family, kind, case.shape)
