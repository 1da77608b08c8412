"""Every shipped manifest is a valid Kubernetes object for the newest schema kubernetes-validate has."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.shipping.monitoring_schemas import SCHEMAS as MONITORING_SCHEMAS
from tests.shipping.support import (
    KUSTOMIZATION,
    ROOT,
    Obj,
    generator_files,
    is_manifest,
    kustomization_dirs,
    load_docs,
    patch_files,
    render,
    resource_files,
    yaml_files,
)
from tls_injector.offline.rulesfile import load_rule_set
from tls_injector.rules import export_documents

VERSION = kubernetes_validate.latest_version()


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@functools.cache
def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema of every CRD that ships, for its example objects, and of the
    Prometheus Operator's kinds the monitoring component uses (their CRDs are the cluster's own)."""
    schemas: dict[tuple[str, str], dict[str, Any]] = dict(MONITORING_SCHEMAS)
    for path in resource_files():
        for doc in load_docs(path):
            if doc.get("kind") == "CustomResourceDefinition":
                spec = doc["spec"]
                for version in spec["versions"]:
                    key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                    schemas[key] = version["schema"]["openAPIV3Schema"]
    return schemas


def _strict(schema: Any) -> Any:
    """Unknown fields are errors (as with `kubectl apply`'s strict field validation), except where the
    schema says x-kubernetes-preserve-unknown-fields."""
    if not isinstance(schema, dict):
        return [_strict(s) for s in schema] if isinstance(schema, list) else schema
    out = {k: _strict(v) for k, v in schema.items()}
    if "properties" in out and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    return out


def validate(doc: Obj, crds: dict[tuple[str, str], dict[str, Any]] | None = None) -> None:
    """Strict schema validation; an object of a shipped CRD is checked against that CRD's schema."""
    crds = _crd_schemas() if crds is None else crds
    schema = crds.get((doc.get("apiVersion", ""), doc.get("kind", "")))
    if schema is None:
        kubernetes_validate.validate(doc, VERSION, strict=True)
        return
    # apiVersion, kind and metadata are checked by the apiserver itself, not by the CRD's schema.
    properties = {k: v for k, v in schema.get("properties", {}).items() if k not in ("apiVersion", "kind", "metadata")}
    body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
    jsonschema.validate(body, _strict({**schema, "properties": properties}))


@pytest.mark.parametrize("path", resource_files(), ids=_rel)
def test_every_shipped_manifest_file_validates_strictly_against_the_kubernetes_schema(path: Path) -> None:
    docs = load_docs(path)
    assert docs, f"{_rel(path)} holds no object"
    for doc in docs:
        validate(doc)


@pytest.mark.parametrize("directory", kustomization_dirs(), ids=_rel)
def test_every_kustomization_renders_and_its_output_validates_strictly(directory: Path) -> None:
    objects = render(directory)
    # A Component only changes what includes it (the image component adds nothing by itself).
    assert objects or load_docs(directory / KUSTOMIZATION)[0]["kind"] == "Component"
    for obj in objects:
        validate(obj)


@pytest.mark.parametrize("directory", kustomization_dirs(), ids=_rel)
def test_a_rendering_holds_no_two_objects_with_the_same_identity(directory: Path) -> None:
    keys = [(o["apiVersion"].split("/")[0], o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
            for o in render(directory)]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def test_every_yaml_file_is_used_by_a_kustomization_so_none_is_forgotten_at_apply_time() -> None:
    used: set[Path] = patch_files() | generator_files()
    for directory in kustomization_dirs():
        spec = load_docs(directory / KUSTOMIZATION)[0]
        for entry in (spec.get("resources") or []) + (spec.get("components") or []):
            target = (directory / entry).resolve()
            assert target.exists(), f"{_rel(directory)} lists missing {entry}"
            used.add(target)
    orphans = [_rel(p) for p in yaml_files()
               if p.name != KUSTOMIZATION and p.resolve() not in used and p.parent.resolve() not in used]
    assert not orphans, "list these in a kustomization.yaml (resources, patches or a generator's files)"


def test_every_resource_file_holds_only_kubernetes_objects() -> None:
    assert [_rel(p) for p in resource_files() if not is_manifest(p)] == []


def test_the_shipped_tree_has_the_expected_kustomizations() -> None:
    # Guards the parametrized tests above against silently finding nothing to check.
    found = {_rel(d) for d in kustomization_dirs()}
    assert {"manifests/base", "manifests/overlays/example", "manifests/overlays/example/bootstrap",
            "manifests/overlays/example/image", "certs-bootstrap", "manifests/components/admission-policy",
            "examples/sidecar-tls/webhook", "examples/sidecar-tls/crd", "examples/sidecar-tls/overlay"} <= found


@pytest.mark.parametrize(
    ("mistake", "edit"),
    [
        ("an unknown field", lambda d: d["spec"]["template"]["spec"].__setitem__("hostNetwrok", True)),
        ("a wrong type", lambda d: d["spec"].__setitem__("replicas", "two")),
        ("a missing required field", lambda d: d["spec"].pop("selector")),
    ],
)
def test_the_validator_rejects_a_deployment_with(mistake: str, edit: Any) -> None:
    deployment = copy.deepcopy(load_docs(ROOT / "manifests" / "base" / "deployment.yaml")[0])
    validate(deployment)
    edit(deployment)
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)


SEINODE_CRD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"spec": {"type": "object", "properties": {
        "sidecar": {"type": "object", "properties": {"tls": {"type": "object", "properties": {
            "secretName": {"type": "string"}}}}},
        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }}},
}


@pytest.mark.parametrize(
    ("spec", "ok"),
    [
        ({"sidecar": {"tls": {"secretName": "a"}}}, True),
        ({"extra": {"anything": 1}}, True),
        ({"sidecar": {"tls": {"secretName": 7}}}, False),
        ({"sidecar": {"tsl": {}}}, False),
    ],
)
def test_a_custom_resource_is_checked_strictly_against_its_crd_schema(spec: Obj, ok: bool) -> None:
    crds = {("example.com/v1", "SeiNode"): SEINODE_CRD_SCHEMA}
    doc = {"apiVersion": "example.com/v1", "kind": "SeiNode", "metadata": {"name": "n"}, "spec": spec}
    if ok:
        validate(doc, crds)
    else:
        with pytest.raises(jsonschema.ValidationError):
            validate(doc, crds)


def test_an_object_of_a_kind_without_schema_or_shipped_crd_fails_validation() -> None:
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        validate({"apiVersion": "example.com/v1", "kind": "SeiNode", "metadata": {"name": "n"}}, {})


def test_the_shipped_admission_policies_are_exactly_what_export_policy_prints_for_the_built_in_rules() -> None:
    shipped = load_docs(ROOT / "manifests/components/admission-policy/policies.yaml")
    assert shipped == export_documents(load_rule_set(None), fmt="vap"), (
        "stale: regenerate with `tls-injector export-policy` (see the file's header)"
    )
