"""HyperPod task governance's queues, for the real Kueue to stand in for AWS's in a rehearsal (issue 31).

AWS's add-on (``amazon-sagemaker-hyperpod-taskgovernance``) is closed: it turns the cluster policy
(``AWS::SageMaker::ClusterSchedulerConfig``) and each compute allocation (``AWS::SageMaker::ComputeQuota``) into
Kueue objects in the cluster. :func:`stand_in_objects` makes those objects from the synthesized templates, as
AWS's published material shows them:

- names: the team's namespace ``hyperpod-ns-<team>``, its LocalQueue ``hyperpod-ns-<team>-localqueue`` and its
  ClusterQueue ``hyperpod-ns-<team>-clusterqueue``; a priority class ``<name>`` as the WorkloadPriorityClass
  ``<name>-priority`` (PyPI sagemaker-hyperpod 3.12.0, ``sagemaker/hyperpod/cli/constants/command_constants.py``;
  aws/sagemaker-hyperpod-cli 2ec6ec9, ``examples/end_to_end_walkthrough/03-task-governance/00-task-governance.md``;
  aws-samples/awsome-distributed-training 1cd090a, ``1.architectures/7.sagemaker-hyperpod-eks/task-governance/
  README.md``), the weight as its value;
- the namespace's labels ``sagemaker.amazonaws.com/sagemaker-managed-queue: "true"`` and
  ``sagemaker.amazonaws.com/quota-allocation-id``, by which the HyperPod CLI finds the team's ClusterQueue
  (``command_constants.py``, ``commands/cluster.py``);
- one resource group whose flavours are named after the instance types (the README: "borrowing limit for
  nvidia.com/gpu in flavor ml.g5.8xlarge exceeded"; the CLI reads ``spec.resourceGroups[0].flavors`` by the
  nodes' ``node.kubernetes.io/instance-type``), covering :data:`llm_infra.queueing.TASK_GOVERNANCE_RESOURCES`;
- each flavour's nominal quota: ``Count`` times the instance's vCPUs, memory and accelerators. The walkthrough's
  usage shows it: a team given one ml.g5.12xlarge borrows 40 of the 88 cpu, 136Gi of the 328Gi and 4 of the 8
  GPUs its job uses, so its quota is 48 cpu, 192Gi and 4 GPUs, the instance's whole figures;
- ``PreemptTeamTasks``: ``Never`` as Kueue's ``withinClusterQueue: Never``, ``LowerPriority`` as itself.

What AWS does not publish, and what the stand-in takes instead (docs/hyperpod.md says so too):

- the flavours' node labels: the instance type label whose value names the flavour;
- the EFA quota: the instance's EFA interfaces, ``Count`` times (the walkthrough's instance uses none);
- its Kueue Configuration: the app's own (:func:`llm_infra.rehearsal.kueue.configuration`), no resource
  excluded;
- anything but whole instances: an allocation of ``Accelerators``, ``VCpu`` or ``MemoryInGiB``, or one that
  lends or borrows (a cohort of the teams), is not modelled and refused (:class:`NoModel`).
"""

from __future__ import annotations

from typing import Any

from llm_infra.node_labels import INSTANCE_TYPE_LABEL
from llm_infra.queueing import (
    EFA,
    GPU,
    HYPERPOD_CLUSTER_QUEUE_SUFFIX,
    HYPERPOD_LOCAL_QUEUE_SUFFIX,
    HYPERPOD_PRIORITY_SUFFIX,
    KUEUE_API_VERSION,
    NEURON,
    TASK_GOVERNANCE_RESOURCES,
    hyperpod_team_namespace,
)
from llm_infra.rehearsal.deploy_workloads import Templates, instance_efa_interfaces, instance_hardware
from llm_infra.rehearsal.upstream_charts import NoModel

CLUSTER_POLICY_TYPE = "AWS::SageMaker::ClusterSchedulerConfig"
COMPUTE_QUOTA_TYPE = "AWS::SageMaker::ComputeQuota"
MANAGED_QUEUE_LABEL = "sagemaker.amazonaws.com/sagemaker-managed-queue"
QUOTA_ALLOCATION_LABEL = "sagemaker.amazonaws.com/quota-allocation-id"
PREEMPTION = {"Never": "Never", "LowerPriority": "LowerPriority"}  # PreemptTeamTasks -> withinClusterQueue
MODELLED_RESOURCE_FIELDS = {"InstanceType", "Count"}


def _kueue(kind: str, name: str, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": KUEUE_API_VERSION, "kind": kind, "metadata": metadata, **body}


def instance_quota(instance_type: str, count: int) -> dict[str, str]:
    """The nominal quota of ``count`` whole instances of ``instance_type`` (``ml.`` prefixed), every resource
    of :data:`TASK_GOVERNANCE_RESOURCES`: the instances' own figures, not what their nodes give pods."""
    vcpus, memory_gib, gpus = instance_hardware(instance_type)
    quota = {
        NEURON: "0",
        "cpu": str(count * vcpus),
        "memory": f"{count * memory_gib}Gi",
        GPU: str(count * gpus),
        EFA: str(count * instance_efa_interfaces(instance_type)),
    }
    return {name: quota[name] for name in TASK_GOVERNANCE_RESOURCES}


def _allocation(logical_id: str, props: dict[str, Any]) -> tuple[str, list[tuple[str, int]], str]:
    """(team, [(instance type, count)], preemption) of a ComputeQuota's properties; NoModel if not whole
    instances kept by the team."""
    config = props["ComputeQuotaConfig"]
    sharing = (config.get("ResourceSharingConfig") or {}).get("Strategy", "LendAndBorrow")
    if sharing != "DontLend":
        raise NoModel(f"{logical_id}: ResourceSharingConfig {sharing} (a cohort of teams) is not modelled: DontLend")
    instances = []
    for resource in config.get("ComputeQuotaResources", []):
        extra = set(resource) - MODELLED_RESOURCE_FIELDS
        if extra or "Count" not in resource:
            raise NoModel(f"{logical_id}: {', '.join(sorted(extra)) or 'no Count'}: only whole instances are modelled")
        instances.append((str(resource["InstanceType"]), int(resource["Count"])))
    preempt = config.get("PreemptTeamTasks", "Never")
    if preempt not in PREEMPTION:
        raise NoModel(f"{logical_id}: PreemptTeamTasks {preempt}; modelled: {', '.join(PREEMPTION)}")
    return str(props["ComputeQuotaTarget"]["TeamName"]), instances, PREEMPTION[preempt]


def stand_in_objects(templates: Templates) -> list[dict[str, Any]]:
    """The objects task governance would make for the templates' cluster policy and compute allocations:
    WorkloadPriorityClasses, then per team its namespace, ResourceFlavors, ClusterQueue and LocalQueue. None
    without a compute allocation."""
    objects = []
    for _, _, resource in templates.resources(CLUSTER_POLICY_TYPE):
        for priority in resource["Properties"]["SchedulerConfig"].get("PriorityClasses", []):
            name = f"{priority['Name']}{HYPERPOD_PRIORITY_SUFFIX}"
            objects.append(_kueue("WorkloadPriorityClass", name, {"value": int(priority["Weight"])}))
    flavors: dict[str, dict[str, Any]] = {}
    for _, logical_id, resource in templates.resources(COMPUTE_QUOTA_TYPE):
        team, instances, preemption = _allocation(logical_id, resource["Properties"])
        namespace = hyperpod_team_namespace(team)
        labels = {MANAGED_QUEUE_LABEL: "true", QUOTA_ALLOCATION_LABEL: team}
        objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}})
        for instance_type, _ in instances:
            labels_spec = {"spec": {"nodeLabels": {INSTANCE_TYPE_LABEL: instance_type}}}
            flavors.setdefault(instance_type, _kueue("ResourceFlavor", instance_type, labels_spec))
        group = {
            "coveredResources": list(TASK_GOVERNANCE_RESOURCES),
            "flavors": [
                {
                    "name": instance_type,
                    "resources": [
                        {"name": name, "nominalQuota": quota}
                        for name, quota in instance_quota(instance_type, count).items()
                    ],
                }
                for instance_type, count in instances
            ],
        }
        cluster_queue = f"{namespace}{HYPERPOD_CLUSTER_QUEUE_SUFFIX}"
        spec: dict[str, Any] = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [group],
            "preemption": {"withinClusterQueue": preemption},
        }
        objects.append(_kueue("ClusterQueue", cluster_queue, {"spec": spec}))
        local_queue = f"{namespace}{HYPERPOD_LOCAL_QUEUE_SUFFIX}"
        objects.append(_kueue("LocalQueue", local_queue, {"spec": {"clusterQueue": cluster_queue}}, namespace))
    return [*flavors.values(), *objects]
