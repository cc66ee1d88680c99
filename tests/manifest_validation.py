"""Validate Kubernetes objects offline: built-in kinds with kubernetes-validate (strict), custom
resources against the upstream CRD's served openAPIV3Schema (strict: unknown fields rejected), and
HyperPodPyTorchJob, whose CRD AWS does not publish, against the schema derived in
``llm_infra/schemas/hyperpodpytorchjob.schema.json`` (its sources in its ``$comment``), its pod templates
against Kubernetes' PodTemplate schema."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from llm_infra.rehearsal.crds import CRD_SOURCES, read_crd

CRD_FILES = {(source.group, source.kind): name for name, source in CRD_SOURCES.items()}
SCHEMAS_DIR = Path(__file__).resolve().parent.parent / "llm_infra" / "schemas"
# Kinds without a published CRD: the JSON schema derived from their sources (group, kind) -> file.
DERIVED_SCHEMAS = {("sagemaker.amazonaws.com", "HyperPodPyTorchJob"): "hyperpodpytorchjob.schema.json"}


def _structural_to_jsonschema(node: Any) -> Any:
    """Kubernetes structural-schema extensions -> plain JSON schema, and strict objects."""
    if isinstance(node, list):
        return [_structural_to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = {k: _structural_to_jsonschema(v) for k, v in node.items()}
    if node.pop("x-kubernetes-int-or-string", False):
        node.pop("type", None)
        node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    preserve = node.pop("x-kubernetes-preserve-unknown-fields", False)
    if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node and not preserve:
        node["additionalProperties"] = False
    return node


@cache
def crd_validator(group: str, version: str, kind: str) -> jsonschema.Draft7Validator:
    (crd,) = [d for d in yaml.safe_load_all(read_crd(CRD_FILES[(group, kind)])) if d]
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version and v.get("served")]
    schema = _structural_to_jsonschema(copy.deepcopy(served["schema"]["openAPIV3Schema"]))
    schema["properties"]["metadata"] = {"type": "object"}  # the API server validates metadata itself
    return jsonschema.Draft7Validator(schema)


@cache
def derived_validator(file_name: str) -> jsonschema.Draft7Validator:
    schema = json.loads((SCHEMAS_DIR / file_name).read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _validate_derived(obj: dict[str, Any], file_name: str, kubernetes_version: str) -> str:
    errors = sorted(derived_validator(file_name).iter_errors(obj), key=str)
    if errors:
        raise AssertionError(f"{obj['kind']}/{obj['metadata']['name']}: {errors[0].message} at {list(errors[0].path)}")
    for replica in obj["spec"].get("replicaSpecs", []):
        if "template" in replica:  # the pod template, as the API server checks a PodTemplate's
            pod_template = {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": f"{obj['metadata']['name']}-{replica['name']}"},
                "template": replica["template"],
            }
            kubernetes_validate.validate(pod_template, kubernetes_version, strict=True)
    return f"schema:{file_name}"


def validate_object(obj: dict[str, Any], kubernetes_version: str) -> str:
    """Raise on an invalid object; return which validator checked it."""
    group, _, version = obj["apiVersion"].rpartition("/")
    if (group, obj["kind"]) in DERIVED_SCHEMAS:
        return _validate_derived(obj, DERIVED_SCHEMAS[(group, obj["kind"])], kubernetes_version)
    if (group, obj["kind"]) in CRD_FILES:
        errors = sorted(crd_validator(group, version, obj["kind"]).iter_errors(obj), key=str)
        if errors:
            raise AssertionError(
                f"{obj['kind']}/{obj['metadata']['name']}: {errors[0].message} at {list(errors[0].path)}"
            )
        return f"crd:{CRD_FILES[(group, obj['kind'])]}"
    kubernetes_validate.validate(obj, kubernetes_version, strict=True)
    return f"kubernetes:{kubernetes_version}"


def load_documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]
