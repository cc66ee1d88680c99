"""A model of the deployed cluster, derived from the synthesized templates: its nodes (labels and
taints that EKS and HyperPod add, allocatable resources from the instance table, security groups),
the pods of every object we apply or render, and a scheduler that places them the way
kube-scheduler's filters do (nodeSelector, required node affinity, taints, resource requests,
required pod anti-affinity per hostname). DaemonSet pods go to every node they are admitted to.

Sources of what the real components add:
- EKS managed node groups label nodes ``node.kubernetes.io/instance-type`` (EC2 name),
  ``eks.amazonaws.com/nodegroup``, ``eks.amazonaws.com/capacityType``, ``kubernetes.io/os|arch|hostname``
  and attach the cluster security group when the launch template names no groups (EKS user guide,
  managed node groups / launch templates); no ``eks.amazonaws.com/compute-type`` (only Auto Mode and
  Fargate set it).
- HyperPod labels nodes ``node.kubernetes.io/instance-type`` (``ml.``-prefixed, as the HyperPod
  Helm chart's affinities expect), ``sagemaker.amazonaws.com/compute-type`` (see upstream_charts)
  and ``sagemaker.amazonaws.com/node-health-status`` (Schedulable
  once deep health checks pass; docs: sagemaker-hyperpod-eks-resiliency-node-labels), and puts
  ``VpcConfig.SecurityGroupIds`` on the instance's interfaces.
- Allocatable = capacity minus the EKS AMI's reservation (kube-reserved memory 11 MiB × max pods +
  255 MiB, eviction threshold 100 MiB; CPU 6 % of the first core, 1 % of the second, 0.5 % of the
  next two, 0.25 % of the rest) minus hugepages. Extended resources (``nvidia.com/gpu``,
  ``vpc.amazonaws.com/efa``) exist only where the device plugin that advertises them runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from upstream_charts import (
    HELM_MERGE,
    HYPERPOD_COMPUTE_TYPE,
    HYPERPOD_COMPUTE_TYPE_LABEL,
    PodTemplate,
    addon_pods,
    chart_model,
    hyperpod_chart,
)

from llm_infra.instance_types import INSTANCE_PROFILES
from llm_infra.node_labels import INSTANCE_TYPE_LABEL

GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
HUGEPAGES = "hugepages-2Mi"
# vCPUs, GiB of the non-GPU instance types the stacks use (EC2 instance-type documentation).
CPU_INSTANCE_TYPES = {
    "m7i.xlarge": (4, 16),
    "m7i.2xlarge": (8, 32),
    "m5.xlarge": (4, 16),
    "m5.2xlarge": (8, 32),
    "m5.4xlarge": (16, 64),
    "c5.2xlarge": (8, 16),
    "c5.4xlarge": (16, 32),
}
# Pods per node (the VPC CNI's limit for the type, capped at 110 on large instances).
MAX_PODS = {"m7i.xlarge": 58, "m5.xlarge": 58, "m5.2xlarge": 58, "c5.2xlarge": 58}
# KubeRay's default submitter pod for a RayJob (ray-operator/controllers/ray/common/job.go,
# GetDefaultSubmitterTemplate): `ray job submit` in the head's image, no placement, 500m and 200Mi
# requested; it lands on a node without taints.
RAY_JOB_SUBMITTER = {
    "containers": [
        {
            "name": "ray-job-submitter",
            "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        }
    ]
}
TAINT_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}
BUILTIN_GROUPS = {"", "apps", "batch", "networking.k8s.io", "policy", "rbac.authorization.k8s.io", "storage.k8s.io"}


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
        raise AssertionError(f"cannot resolve {value}")

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


# ---- quantities ------------------------------------------------------------------------------
_UNITS = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024, "": 1 / (1024 * 1024)}


def quantity(resource: str, value: Any) -> int:
    """CPU in millicores, memory and hugepages in MiB, devices as counts."""
    text = str(value)
    if resource == "cpu":
        return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)
    if resource == "memory" or resource.startswith("hugepages"):
        match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|)", text)
        assert match, f"{resource}: cannot read {value!r}"
        return int(int(match[1]) * _UNITS[match[2]])
    return int(text)


def pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """What the scheduler charges for a pod: the sum over containers (requests, else limits), at
    least the largest init container."""

    def of(container: Mapping[str, Any]) -> dict[str, int]:
        resources = container.get("resources") or {}
        given = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {name: quantity(name, amount) for name, amount in given.items()}

    total: dict[str, int] = {}
    for container in spec.get("containers", []):
        for name, amount in of(container).items():
            total[name] = total.get(name, 0) + amount
    for container in spec.get("initContainers", []):
        for name, amount in of(container).items():
            total[name] = max(total.get(name, 0), amount)
    return total


# ---- nodes -----------------------------------------------------------------------------------
@dataclass
class Node:
    name: str
    labels: dict[str, str]
    taints: list[dict[str, str]]
    capacity: dict[str, int]  # cpu (m), memory (MiB), hugepages-2Mi (MiB), pods
    gpus: int = 0  # hardware; advertised as nvidia.com/gpu only where the NVIDIA device plugin runs
    efa_devices: int = 0  # hardware; advertised as vpc.amazonaws.com/efa only where the EFA plugin runs
    security_groups: frozenset[str] = frozenset()
    efa_security_groups: frozenset[str] = frozenset()  # the groups on its EFA interfaces
    used: dict[str, int] = field(default_factory=dict)
    pods: list[PodTemplate] = field(default_factory=list)

    def free(self, resource: str) -> int:
        return self.capacity.get(resource, 0) - self.used.get(resource, 0)


def _allocatable(instance_type: str, vcpus: int, memory_gib: int, hugepages_mib: int) -> dict[str, int]:
    max_pods = MAX_PODS.get(instance_type, 110)
    reserved_cpu = 60 + (10 if vcpus > 1 else 0) + 5 * min(max(vcpus - 2, 0), 2) + 2.5 * max(vcpus - 4, 0)
    reserved_memory = 11 * max_pods + 255 + 100
    return {
        "cpu": vcpus * 1000 - int(reserved_cpu),
        "memory": memory_gib * 1024 - reserved_memory - hugepages_mib,
        HUGEPAGES: hugepages_mib,
        "pods": max_pods,
    }


def _hardware(instance_type: str) -> tuple[int, int, int]:
    """vCPUs, GiB, GPUs of an EC2 or ml. instance type."""
    name = instance_type.removeprefix("ml.")
    if name in INSTANCE_PROFILES:
        profile = INSTANCE_PROFILES[name]
        return profile.vcpus, profile.memory_gib, profile.gpus
    vcpus, memory = CPU_INSTANCE_TYPES[name]
    return vcpus, memory, 0


def nodes(templates: Templates, *, hyperpod_hugepages_mib: int | Mapping[str, int] = 0) -> list[Node]:
    """Every node of the cluster at its desired size, as the kubelet registers it. HyperPod nodes'
    hugepages: per instance group (as its lifecycle.env reserves them), or one figure for GPU groups."""
    found: list[Node] = []
    (cluster_sg,) = [
        templates.identity(stack, {"Fn::GetAtt": [logical_id, "ClusterSecurityGroupId"]})
        for stack, logical_id, _ in templates.resources("AWS::EKS::Cluster")
    ]
    launch_templates = {
        (stack, logical_id): resource["Properties"]["LaunchTemplateData"]
        for stack, logical_id, resource in templates.resources("AWS::EC2::LaunchTemplate")
    }
    for stack, logical_id, resource in templates.resources("AWS::EKS::Nodegroup"):
        props = resource["Properties"]
        data = launch_templates.get((stack, props.get("LaunchTemplate", {}).get("Id", {}).get("Ref")), {})
        instance_type = data.get("InstanceType") or props["InstanceTypes"][0]
        vcpus, memory_gib, gpus = _hardware(instance_type)
        hugepages = re.search(r"vm\.nr_hugepages = (\d+)", json.dumps(data.get("UserData", "")))
        interfaces = data.get("NetworkInterfaces", [])
        groups = {templates.identity(stack, g) for i in interfaces for g in i["Groups"]}
        groups |= {templates.identity(stack, g) for g in data.get("SecurityGroupIds", [])}
        efa_interfaces = [i for i in interfaces if i.get("InterfaceType") in ("efa", "efa-only")]
        for index in range(props["ScalingConfig"]["DesiredSize"]):
            name = f"{logical_id}-{index}"
            found.append(
                Node(
                    name=name,
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
                    capacity=_allocatable(instance_type, vcpus, memory_gib, 2 * int(hugepages[1]) if hugepages else 0),
                    gpus=gpus,
                    efa_devices=len(efa_interfaces),
                    # No groups in the launch template: EKS attaches the cluster security group.
                    security_groups=frozenset(groups or {cluster_sg}),
                    efa_security_groups=frozenset(
                        templates.identity(stack, g) for i in efa_interfaces for g in i["Groups"]
                    ),
                )
            )
    for stack, logical_id, resource in templates.resources("AWS::SageMaker::Cluster"):
        props = resource["Properties"]
        groups = frozenset(templates.identity(stack, g) for g in props["VpcConfig"]["SecurityGroupIds"])
        for group in props["InstanceGroups"]:
            instance_type = group["InstanceType"]
            vcpus, memory_gib, gpus = _hardware(instance_type)
            vcpus = vcpus * group.get("ThreadsPerCore", 2) // 2
            profile = INSTANCE_PROFILES.get(instance_type.removeprefix("ml."))
            efa = profile.efa_interfaces if profile and gpus else 0
            config = group.get("KubernetesConfig", {})
            for index in range(group["InstanceCount"]):
                name = f"{logical_id}-{group['InstanceGroupName']}-{index}"
                found.append(
                    Node(
                        name=name,
                        labels={
                            **config.get("Labels", {}),
                            INSTANCE_TYPE_LABEL: instance_type,
                            HYPERPOD_COMPUTE_TYPE_LABEL: HYPERPOD_COMPUTE_TYPE,
                            "sagemaker.amazonaws.com/node-health-status": "Schedulable",
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                            "kubernetes.io/hostname": name,
                        },
                        taints=[
                            {"key": t["Key"], "value": t.get("Value", ""), "effect": t["Effect"]}
                            for t in config.get("Taints", [])
                        ],
                        capacity=_allocatable(
                            instance_type, vcpus, memory_gib, _group_hugepages(hyperpod_hugepages_mib, group, gpus)
                        ),
                        gpus=gpus,
                        efa_devices=efa,
                        security_groups=groups,
                        efa_security_groups=groups if efa else frozenset(),
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


# ---- pods ------------------------------------------------------------------------------------
def pod_templates(obj: Mapping[str, Any]) -> list[PodTemplate]:
    """The pods an object creates (those that need a node), by kind."""
    kind, spec = obj["kind"], obj.get("spec", {})
    name = obj["metadata"]["name"]

    def template(t: Mapping[str, Any], replicas: int = 1, daemon: bool = False, suffix: str = "") -> PodTemplate:
        labels = (t.get("metadata") or {}).get("labels") or {}
        return PodTemplate(f"{kind}/{name}{suffix}", t["spec"], replicas=replicas, daemon=daemon, labels=labels)

    if kind == "Deployment":
        return [template(spec["template"], spec.get("replicas", 1))]
    if kind == "DaemonSet":
        return [template(spec["template"], daemon=True)]
    if kind == "Job":
        return [template(spec["template"], spec.get("parallelism", 1))]
    if kind == "PyTorchJob":
        return [
            template(replica["template"], replica.get("replicas", 1), suffix=f"/{role}")
            for role, replica in spec["pytorchReplicaSpecs"].items()
        ]
    if kind == "HyperPodPyTorchJob":  # replicaSpecs: a list of named replica sets (replicas default 0)
        return [
            template(replica["template"], replica.get("replicas", 0), suffix=f"/{replica['name']}")
            for replica in spec["replicaSpecs"]
        ]
    if kind == "RayCluster":
        head = template(spec["headGroupSpec"]["template"], suffix="/head")
        workers = [
            template(group["template"], group.get("replicas", 0), suffix=f"/{group['groupName']}")
            for group in spec.get("workerGroupSpecs", [])
        ]
        return [head, *workers]
    if kind == "RayJob":  # KubeRay makes a RayCluster from rayClusterSpec, and a submitter Job (K8sJobMode)
        cluster = pod_templates(
            {"kind": "RayCluster", "metadata": {"name": f"{name}-cluster"}, "spec": spec["rayClusterSpec"]}
        )
        return [*cluster, PodTemplate(f"{kind}/{name}/submitter", RAY_JOB_SUBMITTER)]
    return []


def helm_operator_switches(stack: Mapping[str, Any]) -> dict[str, bool]:
    """The switches AWS's HyperPod Helm-chart stack (``AWS::CloudFormation::Stack``) is given."""
    pairs = stack["Properties"]["Parameters"]["HelmOperators"].split(",")
    return {key: value == "true" for key, value in (pair.split("=") for pair in pairs)}


def installed_pods(templates: Templates, *, merge: str = HELM_MERGE) -> list[PodTemplate]:
    """The pods of every EKS add-on (its configuration values combined with its defaults by ``merge``),
    pinned Helm chart and AWS's HyperPod chart the stacks install."""
    pods = [
        pod
        for _, _, addon in templates.resources("AWS::EKS::Addon")
        for pod in addon_pods(
            addon["Properties"]["AddonName"],
            addon["Properties"]["AddonVersion"],
            addon["Properties"].get("ConfigurationValues"),
            merge=merge,
        )
    ]
    for _, _, chart in templates.resources("Custom::AWSCDK-EKS-HelmChart"):
        props = chart["Properties"]
        pods += chart_model(props["Chart"], props["Version"]).render(json.loads(props.get("Values", "{}")))
    for _, _, stack in templates.resources("AWS::CloudFormation::Stack"):
        pods += hyperpod_chart(helm_operator_switches(stack))[0]
    return pods


def deploy_pods(templates: Templates) -> list[PodTemplate]:
    """Every pod ``cdk deploy`` leaves running: what the stacks install and the manifests they apply."""
    return installed_pods(templates) + [p for _, _, obj in applied_objects(templates) for p in pod_templates(obj)]


def applied_objects(templates: Templates) -> list[tuple[str, str, dict[str, Any]]]:
    """(stack, logical id, object) of every manifest ``cdk deploy`` applies."""
    found = []
    for stack, logical_id, resource in templates.resources("Custom::AWSCDK-EKS-KubernetesResource"):
        for obj in json.loads(flatten(resource["Properties"]["Manifest"])):
            found.append((stack, logical_id, obj))
    return found


def yaml_objects(files: Iterable[Path]) -> list[dict[str, Any]]:
    return [doc for path in files for doc in yaml.safe_load_all(path.read_text()) if doc]


def custom_kind(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    group = obj["apiVersion"].rpartition("/")[0]
    return None if group in BUILTIN_GROUPS else (group, obj["kind"])


# ---- the scheduler's filters -----------------------------------------------------------------
def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = expression["key"], expression["operator"]
    values = expression.get("values", [])
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"node affinity operator {operator} is not modelled")


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, str]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint["key"]
    return toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get("value", "")


def admission_problem(node: Node, spec: Mapping[str, Any]) -> str | None:
    """Why the node's labels or taints keep the pod off it, or None."""
    for key, value in (spec.get("nodeSelector") or {}).items():
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value}"
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms and not any(
        all(_expression_matches(e, node.labels) for e in term.get("matchExpressions", [])) for term in terms
    ):
        return "required node affinity"
    for taint in node.taints:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not any(
            _tolerates(t, taint) for t in spec.get("tolerations") or []
        ):
            return f"untolerated taint {taint['key']}"
    return None


def _anti_affinity_problem(node: Node, pod: PodTemplate) -> str | None:
    anti = ((pod.spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", []
    )
    for term in anti:
        assert term["topologyKey"] == "kubernetes.io/hostname", "only per-node anti-affinity is modelled"
        selector = term["labelSelector"]["matchLabels"]
        if any(all(other.labels.get(k) == v for k, v in selector.items()) for other in node.pods):
            return "pod anti-affinity"
    return None


def _advertised(node: Node, resource: str) -> int:
    if resource == GPU:
        return node.gpus if any(p.name.startswith("nvidia-device-plugin") for p in node.pods) else 0
    if resource == EFA:
        return node.efa_devices if any(p.name.startswith("aws-efa-k8s-device-plugin") for p in node.pods) else 0
    return node.capacity.get(resource, 0)


def fit_problem(node: Node, pod: PodTemplate) -> str | None:
    """Why ``pod`` cannot run on ``node`` now, or None."""
    problem = admission_problem(node, pod.spec) or _anti_affinity_problem(node, pod)
    if problem:
        return problem
    wanted = {**pod_requests(pod.spec), "pods": 1}
    for resource, amount in wanted.items():
        free = _advertised(node, resource) - node.used.get(resource, 0)
        if amount > free:
            return f"{resource}: wants {amount}, free {free}"
    return None


def _bind(node: Node, pod: PodTemplate) -> None:
    for resource, amount in {**pod_requests(pod.spec), "pods": 1}.items():
        node.used[resource] = node.used.get(resource, 0) + amount
    node.pods.append(pod)


class Unschedulable(AssertionError):
    pass


def schedule(pods: Iterable[PodTemplate], cluster: list[Node]) -> dict[str, list[str]]:
    """Place ``pods`` (daemons first, then in order, first fit) on ``cluster``; raise on the first
    pod that cannot be placed, with each node's reason. Returns pod name -> node names."""
    placed: dict[str, list[str]] = {}
    ordered = sorted(pods, key=lambda p: not p.daemon)
    for pod in ordered:
        if pod.daemon:
            targets = [n for n in cluster if admission_problem(n, pod.spec) is None]
            for node in targets:
                problem = fit_problem(node, pod)
                if problem:
                    raise Unschedulable(f"{pod.name} on {node.name}: {problem}")
                _bind(node, pod)
            placed[pod.name] = [n.name for n in targets]
            continue
        placed[pod.name] = []
        for replica in range(pod.replicas):
            reasons = {n.name: fit_problem(n, pod) for n in cluster}
            fitting = [n for n in cluster if reasons[n.name] is None]
            if not fitting:
                detail = "; ".join(f"{name}: {reason}" for name, reason in reasons.items())
                raise Unschedulable(f"{pod.name} replica {replica} fits no node ({detail})")
            _bind(fitting[0], pod)
            placed[pod.name].append(fitting[0].name)
    return placed
