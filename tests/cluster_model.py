"""A scheduler model of the deployed cluster: the nodes and the pods of what the stacks install
(``llm_infra.ops.deploy_workloads``, from the synthesized templates), the pods of every object we apply or
render, and a scheduler that places them the way kube-scheduler's filters do (nodeSelector, required
node affinity, taints, resource requests, required pod anti-affinity per hostname). DaemonSet pods go
to every node they are admitted to. Extended resources (``nvidia.com/gpu``, ``vpc.amazonaws.com/efa``)
exist only where the device plugin that advertises them runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llm_infra.ops.deploy_workloads import EFA, GPU, Templates, applied_objects, releases, template_nodes
from llm_infra.ops.upstream_charts import HELM_MERGE, PodTemplate

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
BUILTIN_GROUPS = {"", "apps", "batch", "networking.k8s.io", "policy", "rbac.authorization.k8s.io", "storage.k8s.io"}


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


def nodes(templates: Templates, *, hyperpod_hugepages_mib: int | Mapping[str, int] = 0) -> list[Node]:
    """Every node of the cluster at its desired size (``template_nodes``), with nothing placed yet."""
    return [
        Node(
            name=spec.name,
            labels=spec.labels,
            taints=spec.taints,
            capacity=dict(spec.allocatable),
            gpus=spec.gpus,
            efa_devices=spec.efa_devices,
            security_groups=spec.security_groups,
            efa_security_groups=spec.efa_security_groups,
        )
        for spec in template_nodes(templates, hyperpod_hugepages_mib=hyperpod_hugepages_mib)
    ]


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


def installed_pods(templates: Templates, *, merge: str = HELM_MERGE) -> list[PodTemplate]:
    """The pods of every EKS add-on (its configuration values combined with its defaults by ``merge``),
    pinned Helm chart and AWS's HyperPod chart the stacks install; a release without a model fails."""
    found = []
    for release in releases(templates, merge=merge):
        assert release.unmodelled is None, release.unmodelled
        found += [pod for _, pod in release.pods]
    return found


def deploy_pods(templates: Templates) -> list[PodTemplate]:
    """Every pod ``cdk deploy`` leaves running: what the stacks install and the manifests they apply."""
    return installed_pods(templates) + [p for _, _, obj in applied_objects(templates) for p in pod_templates(obj)]


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
