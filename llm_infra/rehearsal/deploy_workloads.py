"""What a deploy creates in the cluster, read from the synthesized templates (``cdk.out``): its nodes
(labels and taints that EKS and HyperPod add, capacity and allocatable from the instance table), the
pods of every EKS add-on, pinned Helm chart and AWS's HyperPod chart (as :mod:`llm_infra.rehearsal.upstream_charts`
models them), and the manifests the stacks apply. ``llm-infra rehearse`` and the contract tests use it.

Sources of what the real components add:
- EKS managed node groups label nodes ``node.kubernetes.io/instance-type`` (EC2 name),
  ``eks.amazonaws.com/nodegroup``, ``eks.amazonaws.com/capacityType``, ``kubernetes.io/os|arch|hostname``
  and attach the cluster security group when the launch template names no groups (EKS user guide,
  managed node groups / launch templates); no ``eks.amazonaws.com/compute-type`` (only Auto Mode and
  Fargate set it).
- HyperPod labels nodes ``node.kubernetes.io/instance-type`` (``ml.``-prefixed, as the HyperPod
  Helm chart's affinities expect), ``sagemaker.amazonaws.com/compute-type`` (see upstream_charts)
  and ``sagemaker.amazonaws.com/node-health-status`` (Schedulable once deep health checks pass; docs:
  sagemaker-hyperpod-eks-resiliency-node-labels), and puts ``VpcConfig.SecurityGroupIds`` on the
  instance's interfaces.
- Allocatable = capacity minus the EKS AMI's reservation (kube-reserved memory 11 MiB × max pods +
  255 MiB, eviction threshold 100 MiB; CPU 6 % of the first core, 1 % of the second, 0.5 % of the
  next two, 0.25 % of the rest) minus hugepages. Extended resources (``nvidia.com/gpu``,
  ``vpc.amazonaws.com/efa``) exist only where the device plugin that advertises them runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_infra.instance_types import CPU_INSTANCE_TYPES, INSTANCE_PROFILES, kubelet_reserved_millicpu
from llm_infra.node_labels import HEALTH_STATUS_KEY, HEALTH_STATUS_SCHEDULABLE, INSTANCE_TYPE_LABEL
from llm_infra.rehearsal.upstream_charts import (
    ADDON_NAMESPACES,
    HELM_MERGE,
    HYPERPOD_CHART_NAMESPACES,
    HYPERPOD_COMPUTE_TYPE,
    HYPERPOD_COMPUTE_TYPE_LABEL,
    NoModel,
    PodTemplate,
    addon_pods,
    chart_model,
    hyperpod_chart,
)

GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
HUGEPAGES = "hugepages-2Mi"
# Pods per node (the VPC CNI's limit for the type, capped at 110 on large instances).
MAX_PODS = {"m7i.xlarge": 58, "m5.xlarge": 58, "m5.2xlarge": 58, "c5.2xlarge": 58}
TAINT_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


# ---- templates -------------------------------------------------------------------------------
class Templates:
    """All stacks of one synthesis, with cross-stack references resolved to resource identities."""

    def __init__(self, templates: Mapping[str, dict[str, Any]]) -> None:
        self.templates = templates
        self.exports: dict[str, tuple[str, Any]] = {}
        for stack, template in templates.items():
            for output in template.get("Outputs", {}).values():
                if "Export" in output:
                    self.exports[output["Export"]["Name"]] = (stack, output["Value"])

    def resources(self, resource_type: str) -> Iterable[tuple[str, str, dict[str, Any]]]:
        for stack, template in self.templates.items():
            for logical_id, resource in template["Resources"].items():
                if resource["Type"] == resource_type:
                    yield stack, logical_id, resource

    def identity(self, stack: str, value: Any) -> str:
        """A stable name for what ``value`` refers to: ``stack/LogicalId[.Attribute]``, or the literal."""
        if isinstance(value, str):
            return value
        if "Fn::ImportValue" in value:
            exporter, exported = self.exports[value["Fn::ImportValue"]]
            return self.identity(exporter, exported)
        if "Ref" in value:
            return f"{stack}/{value['Ref']}"
        if "Fn::GetAtt" in value:
            logical_id, attribute = value["Fn::GetAtt"]
            return f"{stack}/{logical_id}.{attribute}"
        raise ValueError(f"cannot resolve {value}")

    def depends_on(self, stack: str, logical_id: str) -> set[str]:
        """Every resource that ``logical_id`` waits for, transitively (DependsOn and references)."""
        resources = self.templates[stack]["Resources"]
        seen: set[str] = set()
        todo = [logical_id]
        while todo:
            current = resources[todo.pop()]
            direct = set(current.get("DependsOn", [])) | set(_references(current.get("Properties", {})))
            for dependency in direct - seen:
                if dependency in resources:
                    seen.add(dependency)
                    todo.append(dependency)
        return seen


def _references(value: Any) -> Iterable[str]:
    if isinstance(value, dict):
        if "Ref" in value and isinstance(value["Ref"], str):
            yield value["Ref"]
        if "Fn::GetAtt" in value:
            yield value["Fn::GetAtt"][0]
        for item in value.values():
            yield from _references(item)
    elif isinstance(value, list):
        for item in value:
            yield from _references(item)


def flatten(value: Any) -> str:
    """A template string with its CDK tokens (Fn::Join parts that are references) as ``TOKEN``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(flatten(part) for part in parts)
    return "TOKEN"


# ---- nodes -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeSpec:
    """One node as its kubelet would register it. Resources: cpu in millicores, memory and
    hugepages-2Mi in MiB, pods as a count; ``allocatable`` is what the scheduler may hand out."""

    name: str
    group: str  # the node group's logical id, or "<cluster logical id>/<instance group>"
    instance_type: str
    labels: dict[str, str]
    taints: list[dict[str, str]]
    capacity: dict[str, int]
    allocatable: dict[str, int]
    gpus: int = 0  # hardware; advertised as nvidia.com/gpu only where the NVIDIA device plugin runs
    efa_devices: int = 0  # hardware; advertised as vpc.amazonaws.com/efa only where the EFA plugin runs
    security_groups: frozenset[str] = frozenset()
    efa_security_groups: frozenset[str] = frozenset()  # the groups on its EFA interfaces


def _resources(instance_type: str, vcpus: int, memory_gib: int, hugepages_mib: int) -> tuple[dict[str, int], ...]:
    """(capacity, allocatable) of a node."""
    max_pods = MAX_PODS.get(instance_type.removeprefix("ml."), 110)
    reserved_memory = 11 * max_pods + 255 + 100
    capacity = {"cpu": vcpus * 1000, "memory": memory_gib * 1024, HUGEPAGES: hugepages_mib, "pods": max_pods}
    allocatable = {
        **capacity,
        "cpu": vcpus * 1000 - int(kubelet_reserved_millicpu(vcpus)),
        "memory": memory_gib * 1024 - reserved_memory - hugepages_mib,
    }
    return capacity, allocatable


def instance_hardware(instance_type: str) -> tuple[int, int, int]:
    """vCPUs, GiB, GPUs of an EC2 or ml. instance type."""
    name = instance_type.removeprefix("ml.")
    if name in INSTANCE_PROFILES:
        profile = INSTANCE_PROFILES[name]
        return profile.vcpus, profile.memory_gib, profile.gpus
    if name not in CPU_INSTANCE_TYPES:
        known = ", ".join(sorted([*INSTANCE_PROFILES, *CPU_INSTANCE_TYPES]))
        raise ValueError(f"no vCPU and memory figures for instance type {instance_type}; known: {known}")
    vcpus, memory = CPU_INSTANCE_TYPES[name]
    return vcpus, memory, 0


def instance_efa_interfaces(instance_type: str) -> int:
    """The EFA interfaces of an EC2 or ml. GPU instance type (its profile's); 0 for any other."""
    profile = INSTANCE_PROFILES.get(instance_type.removeprefix("ml."))
    return profile.efa_interfaces if profile and profile.gpus else 0


def template_nodes(
    templates: Templates,
    *,
    hyperpod_hugepages_mib: int | Mapping[str, int] = 0,
    existing_cluster_security_groups: Iterable[str] = (),
) -> list[NodeSpec]:
    """Every node of the cluster at its desired size. HyperPod nodes' hugepages: per instance group (as
    its lifecycle.env reserves them, :func:`hyperpod_hugepages`), or one figure for GPU groups. The cluster
    security group is the templates' cluster's, else (an existing cluster) ``existing_cluster_security_groups``."""
    found: list[NodeSpec] = []
    cluster_sgs = [
        templates.identity(stack, {"Fn::GetAtt": [logical_id, "ClusterSecurityGroupId"]})
        for stack, logical_id, _ in templates.resources("AWS::EKS::Cluster")
    ] or list(existing_cluster_security_groups)
    launch_templates = {
        (stack, logical_id): resource["Properties"]["LaunchTemplateData"]
        for stack, logical_id, resource in templates.resources("AWS::EC2::LaunchTemplate")
    }
    for stack, logical_id, resource in templates.resources("AWS::EKS::Nodegroup"):
        props = resource["Properties"]
        data = launch_templates.get((stack, props.get("LaunchTemplate", {}).get("Id", {}).get("Ref")), {})
        instance_type = data.get("InstanceType") or props["InstanceTypes"][0]
        vcpus, memory_gib, gpus = instance_hardware(instance_type)
        hugepages = re.search(r"vm\.nr_hugepages = (\d+)", json.dumps(data.get("UserData", "")))
        capacity, allocatable = _resources(instance_type, vcpus, memory_gib, 2 * int(hugepages[1]) if hugepages else 0)
        interfaces = data.get("NetworkInterfaces", [])
        groups = {templates.identity(stack, g) for i in interfaces for g in i["Groups"]}
        groups |= {templates.identity(stack, g) for g in data.get("SecurityGroupIds", [])}
        efa_interfaces = [i for i in interfaces if i.get("InterfaceType") in ("efa", "efa-only")]
        for index in range(props["ScalingConfig"]["DesiredSize"]):
            name = f"{logical_id}-{index}"
            found.append(
                NodeSpec(
                    name=name,
                    group=logical_id,
                    instance_type=instance_type,
                    labels={
                        **props.get("Labels", {}),
                        INSTANCE_TYPE_LABEL: instance_type,
                        "eks.amazonaws.com/nodegroup": logical_id,
                        "eks.amazonaws.com/capacityType": props.get("CapacityType", "ON_DEMAND"),
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "kubernetes.io/hostname": name,
                    },
                    taints=[
                        {"key": t["Key"], "value": t.get("Value", ""), "effect": TAINT_EFFECTS[t["Effect"]]}
                        for t in props.get("Taints", [])
                    ],
                    capacity=capacity,
                    allocatable=allocatable,
                    gpus=gpus,
                    efa_devices=len(efa_interfaces),
                    # No groups in the launch template: EKS attaches the cluster security group.
                    security_groups=frozenset(groups or cluster_sgs),
                    efa_security_groups=frozenset(
                        templates.identity(stack, g) for i in efa_interfaces for g in i["Groups"]
                    ),
                )
            )
    for stack, logical_id, resource in templates.resources("AWS::SageMaker::Cluster"):
        props = resource["Properties"]
        vpc_groups = frozenset(templates.identity(stack, g) for g in props["VpcConfig"]["SecurityGroupIds"])
        for group in props["InstanceGroups"]:
            instance_type = group["InstanceType"]
            vcpus, memory_gib, gpus = instance_hardware(instance_type)
            vcpus = vcpus * group.get("ThreadsPerCore", 2) // 2
            efa = instance_efa_interfaces(instance_type)
            config = group.get("KubernetesConfig", {})
            hugepages_mib = _group_hugepages(hyperpod_hugepages_mib, group, gpus)
            capacity, allocatable = _resources(instance_type, vcpus, memory_gib, hugepages_mib)
            for index in range(group["InstanceCount"]):
                name = f"{logical_id}-{group['InstanceGroupName']}-{index}"
                found.append(
                    NodeSpec(
                        name=name,
                        group=f"{logical_id}/{group['InstanceGroupName']}",
                        instance_type=instance_type,
                        labels={
                            **config.get("Labels", {}),
                            INSTANCE_TYPE_LABEL: instance_type,
                            HYPERPOD_COMPUTE_TYPE_LABEL: HYPERPOD_COMPUTE_TYPE,
                            HEALTH_STATUS_KEY: HEALTH_STATUS_SCHEDULABLE,
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                            "kubernetes.io/hostname": name,
                        },
                        taints=[
                            {"key": t["Key"], "value": t.get("Value", ""), "effect": t["Effect"]}
                            for t in config.get("Taints", [])
                        ],
                        capacity=capacity,
                        allocatable=allocatable,
                        gpus=gpus,
                        efa_devices=efa,
                        security_groups=vpc_groups,
                        efa_security_groups=vpc_groups if efa else frozenset(),
                    )
                )
    return found


def _group_hugepages(hugepages_mib: int | Mapping[str, int], group: Mapping[str, Any], gpus: int) -> int:
    if isinstance(hugepages_mib, Mapping):
        return hugepages_mib.get(group["InstanceGroupName"], 0)
    return hugepages_mib if gpus else 0


def hyperpod_lifecycle_settings(templates: Templates, outdir: Path) -> dict[str, dict[str, str]]:
    """Each HyperPod instance group's lifecycle.env, as cdk deploy uploads it: the BucketDeployment
    whose prefix the group's LifeCycleConfig names, and the staged asset with lifecycle.env among
    its sources."""
    settings: dict[str, dict[str, str]] = {}
    deployments = [r["Properties"] for _, _, r in templates.resources("Custom::CDKBucketDeployment")]
    for _, _, cluster in templates.resources("AWS::SageMaker::Cluster"):
        for group in cluster["Properties"]["InstanceGroups"]:
            prefix = flatten(group["LifeCycleConfig"]["SourceS3Uri"]).split("/", 3)[3]
            (deployment,) = [d for d in deployments if d["DestinationBucketKeyPrefix"] == prefix]
            assets = [outdir / f"asset.{key.removesuffix('.zip')}" for key in deployment["SourceObjectKeys"]]
            (env,) = [a / "lifecycle.env" for a in assets if (a / "lifecycle.env").is_file()]
            settings[group["InstanceGroupName"]] = dict(line.split("=", 1) for line in env.read_text().splitlines())
    return settings


def hyperpod_hugepages(templates: Templates, outdir: Path) -> dict[str, int]:
    """MiB of 2 MiB hugepages each HyperPod instance group's lifecycle script reserves."""
    return {
        group: 2 * int(settings.get("HUGEPAGES_2MIB", 0))
        for group, settings in hyperpod_lifecycle_settings(templates, outdir).items()
    }


# ---- what the stacks install and apply --------------------------------------------------------
@dataclass(frozen=True)
class Release:
    """An EKS add-on or Helm release the stacks install: its pods as modelled, each with its namespace,
    or why no model applies."""

    source: str  # "EKS add-on coredns v1.12.4-eksbuild.1", "Helm chart ...", "AWS's HyperPod Helm chart"
    pods: tuple[tuple[str, PodTemplate], ...] = ()
    unmodelled: str | None = None


def helm_operator_switches(stack: Mapping[str, Any]) -> dict[str, bool]:
    """The switches AWS's HyperPod Helm-chart stack (``AWS::CloudFormation::Stack``) is given."""
    pairs = stack["Properties"]["Parameters"]["HelmOperators"].split(",")
    return {key: value == "true" for key, value in (pair.split("=") for pair in pairs)}


def releases(templates: Templates, *, merge: str = HELM_MERGE) -> list[Release]:
    """Every EKS add-on (its configuration values combined with its defaults by ``merge``), pinned Helm
    chart and AWS's HyperPod chart the stacks install."""
    found: list[Release] = []
    for _, _, addon in templates.resources("AWS::EKS::Addon"):
        props = addon["Properties"]
        name, version = props["AddonName"], props["AddonVersion"]
        namespace = ADDON_NAMESPACES.get(name, "kube-system")
        try:
            pods = addon_pods(name, version, props.get("ConfigurationValues"), merge=merge)
        except NoModel as err:
            found.append(Release(f"EKS add-on {name} {version}", unmodelled=str(err)))
        else:
            found.append(Release(f"EKS add-on {name} {version}", tuple((namespace, pod) for pod in pods)))
    for _, _, chart in templates.resources("Custom::AWSCDK-EKS-HelmChart"):
        props = chart["Properties"]
        source = f"Helm chart {props['Chart']} {props['Version']}"
        try:
            model = chart_model(props["Chart"], props["Version"])
        except NoModel as err:
            found.append(Release(source, unmodelled=str(err)))
            continue
        pods = model.render(json.loads(props.get("Values", "{}")))
        found.append(Release(source, tuple((props.get("Namespace", "default"), pod) for pod in pods)))
    for _, _, stack in templates.resources("AWS::CloudFormation::Stack"):
        namespace = stack["Properties"]["Parameters"].get("Namespace", "kube-system")
        pods = hyperpod_chart(helm_operator_switches(stack))[0]
        found.append(
            Release(
                "AWS's HyperPod Helm chart (its dependencies release)",
                tuple((HYPERPOD_CHART_NAMESPACES.get(pod.name, namespace), pod) for pod in pods),
            )
        )
    return found


def applied_objects(templates: Templates) -> list[tuple[str, str, dict[str, Any]]]:
    """(stack, logical id, object) of every manifest ``cdk deploy`` applies."""
    found = []
    for stack, logical_id, resource in templates.resources("Custom::AWSCDK-EKS-KubernetesResource"):
        for obj in json.loads(flatten(resource["Properties"]["Manifest"])):
            found.append((stack, logical_id, obj))
    return found
