"""Which changes of a deployed app CloudFormation can make only by replacing a resource, and what that
replacement would cost: read from the synthesized templates (``cdk.out``) and the deployed ones
(CloudFormation ``GetTemplate``). ``llm-infra preflight`` reports them (:mod:`llm_infra.preflight.checks`).

Sources of the contract encoded here (AWS's behaviour cannot be run offline):

- A property is create-only when the resource type's CloudFormation registry schema lists it in
  ``createOnlyProperties``; changing it replaces the resource. The lists come from the copy of those
  schemas that cfn-lint ships (``cfnlint/data/schemas/providers/<region>.json`` names each type's schema
  file in ``cfnlint/data/schemas/resources/``), read through cfn-lint's own
  ``cfnlint.schema.PROVIDER_SCHEMA_MANAGER``: no hand-kept list.
- A custom-named resource cannot be replaced under the same name: "You can't perform an update that causes
  a custom-named resource to be replaced. If you must replace the resource, specify a new name."
  (docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-name.html, "Important"),
  and the update fails with "CloudFormation cannot update a stack when a custom-named resource requires
  replacing" (repost.aws/knowledge-center/cloudformation-custom-name). A resource is taken as custom-named
  when the template sets a create-only property that names it: one of its schema's ``primaryIdentifier``
  properties, ``Name``, or ``<Type>Name`` (``ClusterName`` of ``AWS::SageMaker::Cluster``, ``BucketName``
  of ``AWS::S3::Bucket``, ``DashboardName``, ``RoleName``, ...).
- A replaced resource has a new physical ID, so every create-only property that refers to it (``Ref``,
  ``Fn::GetAtt``, ``Fn::Sub``, or ``Fn::ImportValue`` of an export that does) changes too: the replacement
  spreads, across stacks through their exports.
- HyperPod: "Once you create a cluster, you cannot modify its VpcConfig settings"
  (docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-prerequisites.html, "Setting up SageMaker
  HyperPod clusters across multiple AZs").
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_infra.input_files import BadInput

SCHEMA_SOURCE = "cfn-lint's CloudFormation registry schemas (createOnlyProperties)"
# Resources whose replacement loses what they hold, custom-named or not: the HyperPod cluster (every node
# and the jobs on them), the EKS cluster (every workload, and the HyperPod cluster it orchestrates), the
# file system and the buckets (a new one starts empty), the secret (its value is set by hand).
DATA_STORES: dict[str, str] = {
    "AWS::SageMaker::Cluster": "replacing the HyperPod cluster destroys every node and every job on it",
    "AWS::EKS::Cluster": "replacing the EKS cluster destroys every workload on it",
    "AWS::FSx::FileSystem": "a new file system starts empty",
    "AWS::S3::Bucket": "a new bucket starts empty",
    "AWS::SecretsManager::Secret": "a new secret holds no value",
}
_SUB_REFERENCE = re.compile(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z0-9.]+)?\}")


@dataclass(frozen=True)
class ResourceSchema:
    """What the registry schema of one resource type says about replacement."""

    create_only: tuple[tuple[str, ...], ...]  # property paths, e.g. ("VpcConfig",), ("Orchestrator", "Eks")
    primary_identifier: tuple[str, ...]  # top-level property names


def resource_schema(resource_type: str, region: str = "us-east-1") -> ResourceSchema | None:
    """The create-only properties and primary identifier of ``resource_type`` from cfn-lint's copy of the
    CloudFormation registry schemas (None: cfn-lint has no schema for the type)."""
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER, ResourceNotFoundError  # a dependency of llm-infra

    try:
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(region, resource_type).schema
    except KeyError:  # a region cfn-lint does not know: its us-east-1 schemas
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", resource_type).schema
    except ResourceNotFoundError:
        return None
    return ResourceSchema(
        create_only=tuple(_path(p) for p in schema.get("createOnlyProperties", []) if p.startswith("/properties/")),
        primary_identifier=tuple(
            _path(p)[0] for p in schema.get("primaryIdentifier", []) if p.startswith("/properties/")
        ),
    )


def create_only_properties(resource_type: str, region: str = "us-east-1") -> tuple[str, ...]:
    """The create-only properties of ``resource_type`` as ``A/B`` paths (empty when the type is unknown)."""
    schema = resource_schema(resource_type, region)
    return tuple("/".join(path) for path in schema.create_only) if schema else ()


def _path(pointer: str) -> tuple[str, ...]:
    return tuple(pointer.removeprefix("/properties/").split("/"))


# ---- the synthesized app ----------------------------------------------------------------------
@dataclass(frozen=True)
class Synthesized:
    """The stack templates of one cloud assembly (``cdk.out``), by stack name."""

    folder: Path
    templates: dict[str, dict[str, Any]]

    def project_stacks(self, project_name: str) -> dict[str, dict[str, Any]]:
        return {name: t for name, t in self.templates.items() if name.startswith(f"{project_name}-")}

    def resources(self, resource_type: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
        for stack, template in self.templates.items():
            for logical_id, resource in template.get("Resources", {}).items():
                if resource.get("Type") == resource_type:
                    yield stack, logical_id, resource


SYNTH_HINT = "synthesize with the same -c flags first (make synth, or npx cdk synth -c KEY=VALUE ...)"


def read_synthesized(cdk_out: Path) -> Synthesized:
    """The stack templates that ``cdk_out/manifest.json`` names; bad input (naming --cdk-out) when there are none."""
    manifest = cdk_out / "manifest.json"
    if not manifest.is_file():
        what = "does not exist" if not cdk_out.exists() else "has no manifest.json"
        raise BadInput(f"--cdk-out: {cdk_out} {what}: {SYNTH_HINT}, or pass --cdk-out DIR")
    try:
        artifacts = json.loads(manifest.read_text()).get("artifacts", {})
        templates = {
            str(artifact.get("properties", {}).get("stackName", name)): json.loads(
                (cdk_out / artifact["properties"]["templateFile"]).read_text()
            )
            for name, artifact in artifacts.items()
            if artifact.get("type") == "aws:cloudformation:stack"
        }
    except (OSError, ValueError, KeyError) as err:
        raise BadInput(f"--cdk-out: cannot read the templates of {cdk_out} ({err}): {SYNTH_HINT}") from None
    if not templates:
        raise BadInput(f"--cdk-out: {cdk_out} holds no stack template: {SYNTH_HINT}")
    return Synthesized(cdk_out, templates)


# ---- replacements ---------------------------------------------------------------------------------
Key = tuple[str, str]  # (stack name, logical id)


@dataclass(frozen=True)
class Change:
    """A create-only property of one resource whose value the deploy would change."""

    path: str  # "VpcConfig", "KubernetesNetworkConfig/IpFamily"
    old: Any
    new: Any
    because: Key | None = None  # the replaced resource it refers to; None: the templates differ


@dataclass
class Replacement:
    """A deployed resource the deploy would replace, and why."""

    stack: str
    logical_id: str
    resource_type: str
    changes: list[Change]
    names: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # its name properties: (deployed, new)
    retained: bool = False  # UpdateReplacePolicy Retain: the deployed one is kept, outside the stack

    @property
    def key(self) -> Key:
        return (self.stack, self.logical_id)

    @property
    def custom_named(self) -> bool:
        return bool(self.names)

    @property
    def renamed(self) -> bool:
        return any(_canonical(old) != _canonical(new) for old, new in self.names.values())

    @property
    def data_store(self) -> bool:
        return self.resource_type in DATA_STORES

    @property
    def refused(self) -> bool:
        """CloudFormation refuses the update: the resource keeps its custom name."""
        return self.custom_named and not self.renamed

    def label(self) -> str:
        """``stack/LogicalId (Type name)``, the name being the first literal one it has."""
        name = next((new for _, new in self.names.values() if isinstance(new, str)), "")
        return f"{self.stack}/{self.logical_id} ({self.resource_type}{' ' + name if name else ''})"


SchemaLookup = Callable[[str], ResourceSchema | None]


def replacements(
    deployed: Mapping[str, dict[str, Any]], synthesized: Mapping[str, dict[str, Any]], schema: SchemaLookup
) -> list[Replacement]:
    """Every resource of the ``deployed`` stacks that deploying ``synthesized`` would replace: a create-only
    property whose template value differs, or that refers to a resource that is replaced (to a fixed point)."""
    common: dict[Key, tuple[dict[str, Any], dict[str, Any]]] = {}
    for stack, template in synthesized.items():
        before = deployed.get(stack, {}).get("Resources", {})
        for logical_id, resource in template.get("Resources", {}).items():
            if logical_id in before:
                common[(stack, logical_id)] = (before[logical_id], resource)
    exports = _exports(synthesized)
    found: dict[Key, Replacement] = {}
    schemas = {key: schema(new["Type"]) for key, (_, new) in common.items()}

    def replace(key: Key, change: Change) -> None:
        old, new = common[key]
        found[key] = Replacement(
            key[0],
            key[1],
            new["Type"],
            [change],
            _names(old, new, schemas[key]),
            retained=new.get("UpdateReplacePolicy") == "Retain",
        )

    for key, (old, new) in common.items():
        if old.get("Type") != new["Type"]:
            replace(key, Change("Type", old.get("Type"), new["Type"]))
            continue
        resource_schema_ = schemas[key]
        for path in resource_schema_.create_only if resource_schema_ else ():
            before, after = _get(old.get("Properties", {}), path), _get(new.get("Properties", {}), path)
            if _canonical(before) != _canonical(after):
                if key in found:
                    found[key].changes.append(Change("/".join(path), before, after))
                else:
                    replace(key, Change("/".join(path), before, after))
    spreading = True
    while spreading:
        spreading = False
        for key, (old, new) in common.items():
            resource_schema_ = schemas[key]
            if key in found or resource_schema_ is None:
                continue
            for path in resource_schema_.create_only:
                value = _get(new.get("Properties", {}), path)
                hit = next((ref for ref in _references(key[0], value, exports) if ref in found and ref != key), None)
                if hit is not None:
                    replace(key, Change("/".join(path), _get(old.get("Properties", {}), path), value, because=hit))
                    spreading = True
                    break
    return list(found.values())


def root_change(replacement: Replacement, found: Mapping[Key, Replacement]) -> tuple[Replacement, Change]:
    """The change that starts the chain of replacements that reaches ``replacement``."""
    current, seen = replacement, {replacement.key}
    while True:
        change = current.changes[0]
        if change.because is None or change.because not in found or change.because in seen:
            return current, change
        seen.add(change.because)
        current = found[change.because]


def _names(old: dict[str, Any], new: dict[str, Any], schema: ResourceSchema | None) -> dict[str, tuple[Any, Any]]:
    """The create-only name properties the template sets: (deployed value, new value)."""
    if schema is None:
        return {}
    suffix = new["Type"].rsplit("::", 1)[-1]
    names: dict[str, tuple[Any, Any]] = {}
    for path in schema.create_only:
        if len(path) != 1:
            continue
        (prop,) = path
        if prop in schema.primary_identifier or prop in ("Name", f"{suffix}Name"):
            before, after = old.get("Properties", {}).get(prop), new.get("Properties", {}).get(prop)
            if after is not None:
                names[prop] = (before, after)
    return names


def _get(properties: Any, path: tuple[str, ...]) -> Any:
    value = properties
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _exports(templates: Mapping[str, dict[str, Any]]) -> dict[str, Key]:
    """Export name -> the resource (stack, logical id) whose Ref or Fn::GetAtt it exports."""
    found: dict[str, Key] = {}
    for stack, template in templates.items():
        for output in template.get("Outputs", {}).values():
            name = output.get("Export", {}).get("Name")
            refs = list(_references(stack, output.get("Value"), {}))
            if isinstance(name, str) and len(refs) == 1:
                found[name] = refs[0]
    return found


def _references(stack: str, value: Any, exports: Mapping[str, Key]) -> Iterator[Key]:
    """The resources ``value`` refers to: Ref, Fn::GetAtt, ${X} in Fn::Sub, Fn::ImportValue of an export."""
    if isinstance(value, list):
        for item in value:
            yield from _references(stack, item, exports)
        return
    if not isinstance(value, dict):
        return
    for function, argument in value.items():
        if function == "Ref" and isinstance(argument, str) and not argument.startswith("AWS::"):
            yield (stack, argument)
        elif function == "Fn::GetAtt":
            target = argument[0] if isinstance(argument, list) else str(argument).split(".")[0]
            yield (stack, str(target))
        elif function == "Fn::ImportValue" and isinstance(argument, str):
            if argument in exports:
                yield exports[argument]
        elif function == "Fn::Sub":
            text, variables = (argument, {}) if isinstance(argument, str) else (argument[0], argument[1])
            for name in _SUB_REFERENCE.findall(text):
                if name not in variables:
                    yield (stack, name)
            yield from _references(stack, list(variables.values()), exports)
        else:
            yield from _references(stack, argument, exports)


def show(value: Any, limit: int = 100) -> str:
    """A template value in one short line: a literal as it is, an intrinsic as compact JSON."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---- HyperPod VpcConfig ------------------------------------------------------------------------------
def hyperpod_subnets(deployed: Mapping[str, dict[str, Any]]) -> Iterator[tuple[str, str, str, list[Any]]]:
    """(stack, logical id, cluster name, subnet values) of every deployed HyperPod cluster."""
    for stack, template in deployed.items():
        for logical_id, resource in template.get("Resources", {}).items():
            if resource.get("Type") == "AWS::SageMaker::Cluster":
                properties = resource.get("Properties", {})
                subnets = properties.get("VpcConfig", {}).get("Subnets", [])
                yield stack, logical_id, show(properties.get("ClusterName", logical_id)), list(subnets)
