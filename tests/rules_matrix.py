"""Objects and transitions shared by the rules tests: workloads with TLS states, and SeiNodes."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.injection.names import INJECT_LABEL, SECRET_NAME_ANNOTATION

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_RULES = ROOT / "examples" / "sidecar-tls" / "webhook" / "rules.yaml"
EXAMPLE_CRD = ROOT / "examples" / "sidecar-tls" / "crd" / "crd.yaml"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
FIX = "delete and recreate the object; its PVCs are kept"
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
