"""The pods and nodes of the deployed cluster, for the checks a scheduler run cannot answer.

Where pods land and whether they fit is the real control plane's answer (tests/test_scheduling_real.py:
kube-scheduler, the controllers and the operators on KWOK nodes, through ``llm_infra.rehearsal.rehearse``); the
Python scheduler these tests ran on before is gone (issue 22). A scheduler reports the one node each pod
landed on, not every node a pod MAY land on, and these checks need the latter; each is one pod against
one node at a time, cheap enough to run for every pair:

- FSx CSI coverage: every node a pod that mounts FSx may run on runs the FSx CSI node plugin and is
  admitted by the FSx security group (tests/test_contracts.py);
- the chart-default affinity regressions: the NVIDIA chart's default affinity admits none of our nodes,
  the EFA chart's none of HyperPod's EFA nodes (tests/test_contracts.py);
- the HyperPod health-label predicates: a GPU pod is admitted on a node HyperPod marked Schedulable and
  on no node it marked unhealthy or has not checked yet (tests/test_hyperpod_jobs.py,
  tests/test_kuberay.py); cert-manager is admitted on exactly the untainted nodes
  (tests/test_training_operator.py).

``admission_problem`` is kube-scheduler's NodeAffinity and TaintToleration filters (nodeSelector, required
node affinity, NoSchedule and NoExecute taints) for one node as ``template_nodes`` derives it (the nodes the
rehearsal creates). The pods: ``pod_templates`` (an object's, by kind), ``installed_pods`` and
``deploy_pods`` (what the stacks install and apply, from ``llm_infra.rehearsal.upstream_charts``' models), and
``pod_requests`` (what a pod asks for, summed as the scheduler charges it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from llm_infra.rehearsal.deploy_workloads import NodeSpec, Templates, applied_objects, releases
from llm_infra.rehearsal.upstream_charts import HELM_MERGE, PodTemplate

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


# ---- pods ------------------------------------------------------------------------------------
def pod_templates(obj: Mapping[str, Any]) -> list[PodTemplate]:
    """An object's pod templates, by kind, each with the replica count its controller makes of it; not
    what KubeRay adds of its own (the head's autoscaler sidecar, the RayJob's submitter pod)."""
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
    if kind == "HyperPodPyTorchJob":  # replicaSpecs: named replica sets (no replicas: one, as job_state counts)
        return [
            template(replica["template"], int(replica.get("replicas") or 1), suffix=f"/{replica['name']}")
            for replica in spec["replicaSpecs"]
        ]
    if kind == "RayCluster":
        head = template(spec["headGroupSpec"]["template"], suffix="/head")
        workers = [
            template(group["template"], group.get("replicas", 0), suffix=f"/{group['groupName']}")
            for group in spec.get("workerGroupSpecs", [])
        ]
        return [head, *workers]
    if kind == "RayJob":  # KubeRay makes a RayCluster of rayClusterSpec
        return pod_templates(
            {"kind": "RayCluster", "metadata": {"name": f"{name}-cluster"}, "spec": spec["rayClusterSpec"]}
        )
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


# ---- kube-scheduler's NodeAffinity and TaintToleration filters ------------------------------
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


def admission_problem(node: NodeSpec, spec: Mapping[str, Any]) -> str | None:
    """Why the node's labels or taints keep a pod of ``spec`` off it, or None."""
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
