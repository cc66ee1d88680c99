"""The pieces every GPU pod shares: resources, NCCL/EFA environment, volumes, placement."""

from __future__ import annotations

from typing import Any

from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import GPU_TOLERATION, HEALTH_STATUS_KEY, NODE_ROLE_LABEL

WORKLOADS_CONFIGMAP = "llm-infra-workloads"
WORKLOADS_MOUNT = "/workloads"
# HyperPod's node-health-status values that must not receive new pods (nodes without the label,
# e.g. on plain EKS, are fine).
UNHEALTHY_STATUSES = ["Unschedulable", "UnschedulablePendingReplacement", "UnschedulablePendingReboot"]
# torchrun's own teardown after its workers exit (rendezvous shutdown, agent exit), on top of the
# shutdown budget: the kubelet's SIGKILL must come after torchrun's.
TORCHRUN_TEARDOWN_SECONDS = 30
# HyperPod job auto-resume (https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-resiliency.html)
AUTO_RESUME_ANNOTATION = "sagemaker.amazonaws.com/enable-job-auto-resume"
MAX_RETRY_ANNOTATION = "sagemaker.amazonaws.com/job-max-retry-count"


def gpu_resources(values: WorkloadValues) -> dict[str, Any]:
    """All GPUs, all EFA devices and the hugepages of one node, as requests = limits."""
    resources: dict[str, Any] = {"nvidia.com/gpu": values.profile.gpus}
    if values.efa_devices:
        resources["vpc.amazonaws.com/efa"] = values.efa_devices
    if values.hugepages_2mib:
        resources["hugepages-2Mi"] = f"{values.hugepages_2mib * 2}Mi"
    # Kubernetes needs a memory request beside hugepages; leave the rest to the node.
    resources["memory"] = f"{values.profile.gpu_memory_gib * values.profile.gpus}Gi"
    return {"requests": dict(resources), "limits": dict(resources)}


def nccl_env(values: WorkloadValues) -> list[dict[str, str]]:
    """The minimal NCCL/EFA environment for current DLC images (aws-ofi-nccl >= 1.7).

    aws-ofi-nccl and libfabric detect EFA, GPUDirect RDMA and the right protocol themselves;
    obsolete knobs (FI_EFA_USE_DEVICE_RDMA, NCCL_PROTO, NCCL_ALGO, FI_EFA_FORK_SAFE) are not set.
    """
    env = {
        # torchrun SIGKILLs its workers this long after forwarding SIGTERM (newer torch reads it, 2.13 does; older
        # torch uses 30 s, and train.py then skips a final save that does not fit).
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(values.shutdown_budget_seconds),
        "NCCL_DEBUG": "WARN",
        # Tear the process down on a collective error or timeout so torchrun restarts it.
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
        "PYTHONUNBUFFERED": "1",
    }
    if values.efa_devices:
        env["FI_PROVIDER"] = "efa"
    return [{"name": k, "value": v} for k, v in env.items()]


def volumes(values: WorkloadValues) -> list[dict[str, Any]]:
    return [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{values.profile.gpus * 16}Gi"}},
        {"name": "fsx", "persistentVolumeClaim": {"claimName": values.pvc_name}},
        {"name": "workloads", "configMap": {"name": WORKLOADS_CONFIGMAP, "defaultMode": 0o555}},
    ]


def volume_mounts(values: WorkloadValues) -> list[dict[str, Any]]:
    return [
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "fsx", "mountPath": values.fsx_mount_path},
        {"name": "workloads", "mountPath": WORKLOADS_MOUNT, "readOnly": True},
    ]


def gpu_node_affinity() -> dict[str, Any]:
    """Only GPU nodes, and never a node that HyperPod marked unhealthy."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": NODE_ROLE_LABEL, "operator": "In", "values": ["gpu"]},
                            {"key": HEALTH_STATUS_KEY, "operator": "NotIn", "values": UNHEALTHY_STATUSES},
                        ]
                    }
                ]
            }
        }
    }


def one_pod_per_node(selector_labels: dict[str, str]) -> dict[str, Any]:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": selector_labels}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }


def gpu_pod_spec(
    values: WorkloadValues,
    *,
    container_name: str,
    command: list[str] | None,
    image: str | None = None,
    restart_policy: str | None = "OnFailure",
    extra_env: dict[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
    shutdown_seconds: int | None = None,
) -> dict[str, Any]:
    """A pod spec that takes a whole GPU node: every GPU and EFA device, shm, FSx, the payload.

    ``shutdown_seconds``: what the pod's launcher gives its workers from SIGTERM to SIGKILL (default
    the values' budget); the grace period adds the launcher's own teardown."""
    # AWS SDKs in the pod (tiered checkpointing's S3 tier, boto3) need the region; Pod Identity gives
    # credentials only.
    env = [
        {"name": "AWS_REGION", "value": values.region},
        *nccl_env(values),
        *({"name": k, "value": v} for k, v in (extra_env or {}).items()),
    ]
    container: dict[str, Any] = {
        "name": container_name,
        "image": image or values.image,
        "imagePullPolicy": "IfNotPresent",
        "env": env,
        "resources": gpu_resources(values),
        "volumeMounts": volume_mounts(values),
    }
    if command is not None:  # None: the image's (or the operator's) entrypoint, e.g. KubeRay's `ray start`
        container["command"] = command
    spec: dict[str, Any] = {
        "serviceAccountName": values.service_account,
        # SIGTERM -> torchrun -> the payload's final checkpoint within the shutdown budget, then
        # torchrun's teardown; only then may the kubelet SIGKILL.
        "terminationGracePeriodSeconds": (shutdown_seconds or values.shutdown_budget_seconds)
        + TORCHRUN_TEARDOWN_SECONDS,
        "tolerations": [GPU_TOLERATION],
        "affinity": {**gpu_node_affinity(), **(affinity or {})},
        "volumes": volumes(values),
        "containers": [container],
    }
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    return spec


def resilience_annotations(values: WorkloadValues) -> dict[str, str]:
    """HyperPod job auto-resume: restart the job after a faulty node is replaced."""
    if not values.hyperpod:
        return {}
    return {AUTO_RESUME_ANNOTATION: "true", MAX_RETRY_ANNOTATION: str(values.job_max_retries)}
