"""Objects and transitions shared by the rules tests: workloads with TLS states, and SeiNodes."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tls_injector.names import INJECT_LABEL, SECRET_NAME_ANNOTATION

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_RULES = ROOT / "examples" / "sidecar-tls" / "webhook" / "rules.yaml"
EXAMPLE_CRD = ROOT / "examples" / "sidecar-tls" / "crd" / "crd.yaml"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
FIX = "delete and recreate the object"
ROLL = "pods will roll"

# A TLS state of a pod template: (inject label value or None, secret-name annotation or None).
TlsState = tuple[str | None, str | None]
OFF: TlsState = (None, None)
ON_DEFAULT: TlsState = ("true", None)
ON_X: TlsState = ("true", "x-tls")
ON_Y: TlsState = ("true", "y-tls")
OPTED_OUT_X: TlsState = ("false", "x-tls")


@dataclass(frozen=True)
class Transition:
    name: str
    old: TlsState
    new: TlsState
    allowed: bool
    warns: bool = False


WORKLOAD_TRANSITIONS = [
    Transition("off stays off", OFF, OFF, allowed=True),
    Transition("enable with a named secret", OFF, ON_X, allowed=True, warns=True),
    Transition("enable with the default secret", OFF, ON_DEFAULT, allowed=True, warns=True),
    Transition("enable from an explicit opt-out", OPTED_OUT_X, ON_X, allowed=True, warns=True),
    Transition("unchanged", ON_X, ON_X, allowed=True),
    Transition("disable by removing the label", ON_X, OFF, allowed=False),
    Transition("disable by opting out", ON_X, OPTED_OUT_X, allowed=False),
    Transition("swap the secret", ON_X, ON_Y, allowed=False),
    Transition("swap from the default secret", ON_DEFAULT, ON_X, allowed=False),
    Transition("swap to the default secret", ON_X, ON_DEFAULT, allowed=False),
]


def workload(kind: str, state: TlsState, *, name: str = "web", image: str = "nginx:1.27") -> dict[str, Any]:
    label, secret = state
    labels = {"app": name} | ({INJECT_LABEL: label} if label is not None else {})
    annotations = {SECRET_NAME_ANNOTATION: secret} if secret is not None else {}
    template_meta: dict[str, Any] = {"labels": labels}
    if annotations:
        template_meta["annotations"] = annotations
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": template_meta,
                     "spec": {"containers": [{"name": "app", "image": image}]}},
    }
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": "shop"}, "spec": spec}


def with_image(obj: dict[str, Any], image: str) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = image
    return changed


# The seed rule's matrix for spec.sidecar.tls: None = absent.
X = {"secretName": "x-tls"}
Y = {"secretName": "y-tls"}
SIDECAR_MATRIX: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None, bool]] = [
    ("nil -> nil", None, None, True),
    ("nil -> X", None, X, True),
    ("X -> nil", X, None, False),
    ("X -> Y", X, Y, False),
    ("X -> X", X, dict(X), True),
]


def sei_node(tls: dict[str, Any] | None, *, sidecar: bool = True, name: str = "node-0") -> dict[str, Any]:
    spec: dict[str, Any] = {"image": "sei:1"}
    if sidecar:
        spec["sidecar"] = {"image": "proxy:1"} | ({"tls": tls} if tls is not None else {})
    return {"apiVersion": "example.com/v1", "kind": "SeiNode", "metadata": {"name": name, "namespace": "chain"},
            "spec": spec}


def cronjob(state: TlsState, *, name: str = "nightly", image: str = "busybox:1.36") -> dict[str, Any]:
    """A batch/v1 CronJob whose jobTemplate's pod template carries `state`."""
    template = workload("Deployment", state, name=name, image=image)["spec"]["template"]
    template["spec"]["restartPolicy"] = "OnFailure"
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name, "namespace": "shop"},
            "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": template}}}}


def namespace(label: str | None, *, name: str = "shop", team: str = "payments") -> dict[str, Any]:
    """A Namespace with the opt-in label at `label` (None = absent), beside the labels any namespace has."""
    labels = {"kubernetes.io/metadata.name": name, "team": team} | ({INJECT_LABEL: label} if label else {})
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


NAMESPACE_FIX = "delete and recreate the namespace without the label"
NAMESPACE_ENABLED_WARNING = "TLS enabled for the namespace"
# A Namespace's opt-in label: None = absent.
NAMESPACE_TRANSITIONS: list[tuple[str, str | None, str | None, bool]] = [
    ("off stays off", None, None, True),
    ("enable", None, "enabled", True),
    ("enable from another value", "disabled", "enabled", True),
    ("unchanged", "enabled", "enabled", True),
    ("disable by removing the label", "enabled", None, False),
    ("disable by changing the label", "enabled", "disabled", False),
]

# Pod-template TLS states in a namespace labelled enabled, where TLS is on unless the label is "false".
UNLABELLED_X: TlsState = (None, "x-tls")
UNLABELLED_Y: TlsState = (None, "y-tls")
OPTED_OUT: TlsState = ("false", None)
OPTED_OUT_Y: TlsState = ("false", "y-tls")

ENABLED_NAMESPACE_TRANSITIONS = [
    Transition("unlabelled stays unlabelled", OFF, OFF, allowed=True),
    Transition("unlabelled, named secret unchanged", UNLABELLED_X, UNLABELLED_X, allowed=True),
    Transition("opted out stays opted out while its name changes", OPTED_OUT_X, OPTED_OUT_Y, allowed=True),
    Transition("enable by dropping the opt-out", OPTED_OUT_X, UNLABELLED_X, allowed=True, warns=True),
    Transition("enable by turning the opt-out to true", OPTED_OUT_X, ON_X, allowed=True, warns=True),
    # TLS is on either way in an enabled namespace: "true" <-> absent changes nothing, so no warning.
    Transition("label an unlabelled template true", OFF, ON_DEFAULT, allowed=True),
    Transition("drop a redundant true", ON_X, UNLABELLED_X, allowed=True),
    Transition("drop a redundant true, default secret", ON_DEFAULT, OFF, allowed=True),
    Transition("disable an unlabelled template", OFF, OPTED_OUT, allowed=False),
    Transition("disable a named unlabelled template", UNLABELLED_X, OPTED_OUT_X, allowed=False),
    Transition("disable a template labelled true", ON_X, OPTED_OUT_X, allowed=False),
    Transition("swap on an unlabelled template", UNLABELLED_X, UNLABELLED_Y, allowed=False),
    Transition("name the default secret", OFF, UNLABELLED_X, allowed=False),
    Transition("swap on a template labelled true", ON_X, ON_Y, allowed=False),
]
ENABLED_NAMESPACE_RULES = {"CronJob": "enabled-namespace-cronjob-tls-transition"} | {
    kind: "enabled-namespace-workload-tls-transition" for kind in WORKLOAD_KINDS}


def templated(kind: str, state: TlsState) -> dict[str, Any]:
    """A workload of `kind` (the three apps kinds or CronJob) whose pod template carries `state`."""
    return cronjob(state) if kind == "CronJob" else workload(kind, state)
