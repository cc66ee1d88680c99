"""Gang admission with Kueue: the queue every training job goes through, and the quota behind it.

Plain EKS (``compute=eks``): this app's Kueue (the pinned chart, ``llm_infra.versions.KUEUE``) with a
ResourceFlavor per node group, one ClusterQueue whose nominal quota is what the nodes give pods, and a
LocalQueue named ``default`` in the jobs' namespace (Kueue >= 0.17 labels every job created there without a
queue with ``default``: LocalQueueDefaulting, GA; kueue v0.17.0 pkg/features/kube_features.go,
pkg/controller/jobframework/defaults.go ApplyDefaultLocalQueue).

HyperPod (``compute=hyperpod``): AWS's task governance, whose Kueue, queues and priority classes follow the team
of a compute allocation (``AWS::SageMaker::ComputeQuota``): TeamName is "materialized as Kubernetes namespace
'hyperpod-ns-<TeamName>'" (CloudFormation's resource schema, as cfn-lint 1.58 ships it); its LocalQueue is
``hyperpod-ns-<team>-localqueue`` and its ClusterQueue ``hyperpod-ns-<team>-clusterqueue`` (PyPI
sagemaker-hyperpod 3.12.0, ``sagemaker/hyperpod/cli/constants/command_constants.py``: HYPERPOD_NAMESPACE_PREFIX,
SAGEMAKER_MANAGED_LOCAL_QUEUE_SUFFIX, SAGEMAKER_MANAGED_CLUSTER_QUEUE_SUFFIX); a job names a cluster policy's
priority class as ``kueue.x-k8s.io/priority-class: <name>-priority`` (aws-samples/awsome-distributed-training
2ca3e6e, 1.architectures/7.sagemaker-hyperpod-eks/task-governance/3-imagenet-gpu-team-b-higher-prio.yaml).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from llm_infra.instance_types import CPU_INSTANCE_TYPES, InstanceProfile, kubelet_reserved_millicpu
from llm_infra.node_labels import GPU_TAINT_KEY, NODE_ROLE_LABEL

# Kueue's labels (sigs.k8s.io/kueue pkg/constants: QueueLabel, WorkloadPriorityClassLabel); the HyperPod CLI
# reads the same two (command_constants.py KUEUE_QUEUE_NAME_LABEL_KEY, KUEUE_WORKLOAD_PRIORITY_CLASS_LABEL_KEY).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"  # the CRDs' storage version at the pinned release
# The LocalQueue Kueue assigns to a job that names none (constants.DefaultLocalQueueName).
DEFAULT_LOCAL_QUEUE = "default"
CLUSTER_QUEUE = "llm-infra"
HYPERPOD_NAMESPACE_PREFIX = "hyperpod-ns-"
HYPERPOD_LOCAL_QUEUE_SUFFIX = "-localqueue"
HYPERPOD_CLUSTER_QUEUE_SUFFIX = "-clusterqueue"
HYPERPOD_PRIORITY_SUFFIX = "-priority"
# The priority classes of both modes, by what runs under them, with their weight (0-100: the range of
# AWS::SageMaker::ClusterSchedulerConfig PriorityClass.Weight; on EKS the WorkloadPriorityClass value). The
# validation gates go first: they are short and decide whether training may start. Neither preempts the other
# (no preemption in our ClusterQueue, PreemptTeamTasks Never on HyperPod): the weight orders the queue only.
PRIORITY_CLASSES: dict[str, int] = {"validation": 90, "training": 70}
# Kueue's all-or-nothing admission (Configuration.waitForPodsReady, kueue v0.17.0 apis/config/v1beta2): an
# admitted job whose pods are not all Ready within the timeout is evicted (its pods deleted, its GPUs freed) and
# requeued after backoffBaseSeconds * 2^(n-1), at most backoffMaxSeconds, without limit. The timeout covers a
# 256-node start: image pulls of a ~20 GiB DLC image and the EFA devices' allocation.
PODS_READY_TIMEOUT = "15m"
REQUEUE_BACKOFF_BASE_SECONDS = 60
REQUEUE_BACKOFF_MAX_SECONDS = 1800
# What Kueue never manages when a job names no queue (managedJobsNamespaceSelector): the cluster's and the
# operators' namespaces: kube-system, Kueue's own (KUEUE.namespace), KubeRay's (KUBERAY_OPERATOR.namespace), the
# Kubeflow training operator's (AWS's HyperPod Helm chart installs it in kubeflow), the CloudWatch add-on's.
UNMANAGED_NAMESPACES = ("kube-system", "kueue-system", "kuberay-system", "kubeflow", "amazon-cloudwatch")
# The integrations our jobs need: the PyTorchJob and RayJob operators', and batch/Job (the health check and the
# data preparation). Not ray.io/raycluster: see docs/cluster-software.md, "Gang admission" (the always-on
# RayCluster autoscales, which Kueue 0.17 refuses without the alpha ElasticJobsViaWorkloadSlices gate,
# pkg/controller/jobs/raycluster/raycluster_webhook.go).
KUEUE_INTEGRATIONS = ("batch/job", "kubeflow.org/pytorchjob", "ray.io/rayjob")

# ---- the node's allocatable, as the EKS-optimized AMI reserves it ------------------------------------------
# kube-reserved memory 11 MiB per pod + 255 MiB, eviction threshold 100 MiB (EKS AMI bootstrap; the same
# figures as llm_infra/rehearsal/deploy_workloads.py's nodes, which tests/test_queueing.py holds equal). Pods per
# node: the VPC CNI's limit capped at 110 on our GPU types.
MAX_PODS = 110
EVICTION_HARD_MIB = 100


def kubelet_reserved_memory_mib(max_pods: int) -> int:
    """The memory (MiB) the kubelet keeps from pods: kube-reserved plus the hard eviction threshold."""
    return 11 * max_pods + 255 + EVICTION_HARD_MIB


# ---- the DaemonSets on our nodes: (cpu millicores, memory MiB) requested per node ---------------------------
# Per add-on or chart (the names of config.INSTALLABLE), each DaemonSet's requests as the upstream charts set them
# (sources beside each model in llm_infra/rehearsal/upstream_charts.py; tests/test_queueing.py holds the two
# equal), on a GPU node and on a system node. The Xid monitor is ours (k8s_manifests/node_monitoring_chart.py).
GPU_NODE_DAEMONSETS: dict[str, tuple[int, int]] = {
    "vpc-cni": (50, 0),  # aws-node and its network-policy agent, 25m each
    "kube-proxy": (100, 0),
    "eks-pod-identity-agent": (0, 0),
    "aws-fsx-csi-driver": (30, 104),  # fsx-csi-node
    "amazon-cloudwatch-observability": (550, 281),  # cloudwatch-agent, fluent-bit, dcgm-exporter
    "eks-node-monitoring-agent": (10, 30),  # the agent; dcgm-server requests nothing
    "nvidia-device-plugin": (0, 0),
    "aws-efa-k8s-device-plugin": (10, 20),
}
SYSTEM_NODE_DAEMONSETS: dict[str, tuple[int, int]] = {
    "vpc-cni": (50, 0),
    "kube-proxy": (100, 0),
    "eks-pod-identity-agent": (0, 0),
    "aws-fsx-csi-driver": (30, 104),
    "amazon-cloudwatch-observability": (300, 153),  # cloudwatch-agent, fluent-bit (no DCGM exporter)
    "eks-node-monitoring-agent": (10, 30),
}
XID_MONITOR_REQUESTS = (10, 32)  # on every GPU node, always applied
# The system instance types the ClusterQueue's system flavour can be sized for: those whose vCPUs and memory we know.
SYSTEM_INSTANCE_TYPES = CPU_INSTANCE_TYPES
GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
HUGEPAGES = "hugepages-2Mi"
QUEUE_RESOURCES = ("cpu", "memory", GPU, EFA, HUGEPAGES)
# What task governance's ClusterQueues cover: every resource its flavours list in status.flavorsUsage
# (aws/sagemaker-hyperpod-cli 2ec6ec9, examples/end_to_end_walkthrough/03-task-governance/00-task-governance.md,
# `kubectl get clusterqueue hyperpod-ns-team-a-clusterqueue -o jsonpath='{.status.flavorsUsage[0]}'`). No 2 MiB
# hugepages: a pod that requests them is inadmissible there (kueue v0.17.0 flavorassigner: "resource
# hugepages-2Mi unavailable in ClusterQueue") unless AWS's Kueue configuration excludes them, which AWS does not
# publish; AWS's own HyperPod job templates request GPUs and EFA devices only (aws-samples/
# awsome-distributed-training 564ce38, 3.test_cases/pytorch/FSDP/kubernetes/llama3_1_8b-fsdp-hpto.yaml).
NEURON = "aws.amazon.com/neurondevice"
TASK_GOVERNANCE_RESOURCES = (NEURON, "cpu", "memory", GPU, EFA)


@dataclass(frozen=True)
class FlavorQuota:
    """One ResourceFlavor (a node group) and the ClusterQueue's nominal quota in it: every resource of
    :data:`QUEUE_RESOURCES`, as Kubernetes quantities."""

    name: str
    node_labels: dict[str, str]
    node_taints: tuple[dict[str, str], ...]
    quota: dict[str, str]


def _daemonset_requests(table: Mapping[str, tuple[int, int]], installed: Collection[str]) -> tuple[int, int]:
    cpu = sum(table[name][0] for name in installed if name in table)
    memory = sum(table[name][1] for name in installed if name in table)
    return cpu, memory


def node_group_quota(
    *,
    vcpus: int,
    memory_gib: int,
    nodes: int,
    daemonsets: tuple[int, int],
    gpus: int = 0,
    efa_devices: int = 0,
    hugepages_mib: int = 0,
) -> dict[str, str]:
    """The nominal quota of ``nodes`` identical nodes: each node's allocatable (capacity less what the
    kubelet reserves and the hugepages, which are their own resource) less ``daemonsets`` (cpu m, MiB), times
    ``nodes``. GPUs and EFA devices are whole devices, all free for pods."""
    cpu_m = vcpus * 1000 - int(kubelet_reserved_millicpu(vcpus)) - daemonsets[0]
    memory_mib = memory_gib * 1024 - kubelet_reserved_memory_mib(MAX_PODS) - hugepages_mib - daemonsets[1]
    if cpu_m <= 0 or memory_mib <= 0:
        raise ValueError(f"the DaemonSets ({daemonsets[0]}m, {daemonsets[1]}Mi) take a whole node's allocatable")
    return {
        "cpu": f"{nodes * cpu_m}m",
        "memory": f"{nodes * memory_mib}Mi",
        GPU: str(nodes * gpus),
        EFA: str(nodes * efa_devices),
        HUGEPAGES: f"{nodes * hugepages_mib}Mi",
    }


def cluster_queue_flavors(
    *,
    profile: InstanceProfile,
    gpu_nodes: int,
    efa: bool,
    hugepages_2mib: int,
    system_instance_type: str,
    system_nodes: int,
    installed: Collection[str],
) -> tuple[FlavorQuota, ...]:
    """The ClusterQueue's flavours in the order Kueue tries them: the system nodes first (a CPU-only job that
    does not ask for GPU nodes runs there; no GPU, EFA or hugepages), then the GPU node group (its taint: Kueue
    gives it only to pods that tolerate it). ``installed``: the add-ons and charts whose DaemonSets run on the
    nodes (config.installs)."""
    if system_instance_type not in SYSTEM_INSTANCE_TYPES:
        raise ValueError(
            f"system_instance_type: {system_instance_type!r} has no vCPU and memory figures for the Kueue quota; "
            f"allowed: {', '.join(SYSTEM_INSTANCE_TYPES)}"
        )
    vcpus, memory_gib = SYSTEM_INSTANCE_TYPES[system_instance_type]
    system = node_group_quota(
        vcpus=vcpus,
        memory_gib=memory_gib,
        nodes=system_nodes,
        daemonsets=_daemonset_requests(SYSTEM_NODE_DAEMONSETS, installed),
    )
    gpu_ds_cpu, gpu_ds_memory = _daemonset_requests(GPU_NODE_DAEMONSETS, installed)
    gpu = node_group_quota(
        vcpus=profile.vcpus,
        memory_gib=profile.memory_gib,
        nodes=gpu_nodes,
        daemonsets=(gpu_ds_cpu + XID_MONITOR_REQUESTS[0], gpu_ds_memory + XID_MONITOR_REQUESTS[1]),
        gpus=profile.gpus,
        efa_devices=profile.efa_interfaces if efa else 0,
        hugepages_mib=2 * hugepages_2mib,
    )
    gpu_taint = {"key": GPU_TAINT_KEY, "effect": "NoSchedule"}
    return (
        FlavorQuota("system", {NODE_ROLE_LABEL: "system"}, (), system),
        FlavorQuota(f"gpu-{profile.instance_type.replace('.', '-')}", {NODE_ROLE_LABEL: "gpu"}, (gpu_taint,), gpu),
    )


@dataclass(frozen=True)
class QueueValues:
    """Which queue the jobs name, and (on plain EKS) the queue objects this app renders."""

    local_queue: str
    # The priority class each kind of job names (kueue.x-k8s.io/priority-class), by PRIORITY_CLASSES' keys.
    priority_classes: dict[str, str]
    # The ClusterQueue's flavours and quota; empty where the queues are AWS's (HyperPod task governance).
    flavors: tuple[FlavorQuota, ...] = field(default=())
    # The resources the queue's ClusterQueue covers: a pod of ours requests no other.
    covered_resources: tuple[str, ...] = QUEUE_RESOURCES
    # Whether the queue's flavours are the GPU nodes' alone: task governance's are the compute allocation's
    # instance types (the team's GPU instance group), and Kueue adds a flavour's node labels to every pod it
    # admits, so a queued pod meant for the system nodes would match no node. Ours has a system flavour.
    gpu_nodes_only: bool = False

    def labels(self, kind: str) -> dict[str, str]:
        """The labels a job of ``kind`` (``training`` or ``validation``) and its pods carry."""
        return {QUEUE_LABEL: self.local_queue, PRIORITY_LABEL: self.priority_classes[kind]}


def hyperpod_team_namespace(team: str) -> str:
    return f"{HYPERPOD_NAMESPACE_PREFIX}{team}"


def eks_queue_values(flavors: tuple[FlavorQuota, ...]) -> QueueValues:
    """Our Kueue's queue: the LocalQueue ``default``, our WorkloadPriorityClasses (named as on HyperPod)."""
    return QueueValues(
        local_queue=DEFAULT_LOCAL_QUEUE,
        priority_classes={kind: f"{kind}{HYPERPOD_PRIORITY_SUFFIX}" for kind in PRIORITY_CLASSES},
        flavors=flavors,
    )


def hyperpod_queue_values(team: str) -> QueueValues:
    """Task governance's queue for ``team``, and the priority classes of our cluster policy."""
    return QueueValues(
        local_queue=f"{hyperpod_team_namespace(team)}{HYPERPOD_LOCAL_QUEUE_SUFFIX}",
        priority_classes={kind: f"{kind}{HYPERPOD_PRIORITY_SUFFIX}" for kind in PRIORITY_CLASSES},
        covered_resources=TASK_GOVERNANCE_RESOURCES,
        gpu_nodes_only=True,
    )
