"""The pieces every GPU pod shares: resources, NCCL/EFA environment, volumes, placement."""

from __future__ import annotations

from typing import Any

from llm_infra.k8s_manifests.payload import WORKLOADS_MOUNT, workloads_volume
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import GPU_TOLERATION, HEALTH_STATUS_KEY, NODE_ROLE_LABEL

# HyperPod's node-health-status values that must not receive new pods (nodes without the label,
# e.g. on plain EKS, are fine).
UNHEALTHY_STATUSES = ["Unschedulable", "UnschedulablePendingReplacement", "UnschedulablePendingReboot"]
# torchrun's own teardown after its workers exit (rendezvous shutdown, agent exit), on top of the
# shutdown budget: the kubelet's SIGKILL must come after torchrun's.
TORCHRUN_TEARDOWN_SECONDS = 30
# HyperPod job auto-resume (https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-resiliency.html)
AUTO_RESUME_ANNOTATION = "sagemaker.amazonaws.com/enable-job-auto-resume"
MAX_RETRY_ANNOTATION = "sagemaker.amazonaws.com/job-max-retry-count"


# ---- pod security: every pod that is not privileged by design (issue 28) ------------------------------
# The pod's seccomp profile is the container runtime's default filter. Under containerd's (contrib/seccomp/
# seccomp_default.go at 301026e5, L688-698 and L727-736) pidfd_getfd needs CAP_SYS_PTRACE, and get_mempolicy,
# mbind and set_mempolicy need CAP_SYS_NICE, which no pod of ours has. NCCL needs neither: it passes its cuMem
# file descriptors over a Unix socket (SCM_RIGHTS; NVIDIA/nccl 5067397c, src/os/linux_ipcsocket.cc L195-215), and
# when its NUMA host allocations fail it falls back to /dev/shm ("Docker in particular is known to disable
# get_mempolicy", src/misc/cudawrap.cc L71-95, since NCCL 2.26.3), which every GPU pod mounts. The
# payload binds no memory to NUMA nodes. A privileged container runs unconfined whatever the pod says, so the
# privileged pods (the health check, the Xid monitor) carry no profile.
RUNTIME_DEFAULT_SECCOMP = "RuntimeDefault"


def pod_security_context() -> dict[str, Any]:
    """The pod-level security context of every pod that is not privileged: the runtime's default seccomp
    filter. The users stay the images' (root in AWS's Deep Learning Containers, tests/checkov_accepted.py)."""
    return {"seccompProfile": {"type": RUNTIME_DEFAULT_SECCOMP}}


def container_security_context(*, add: tuple[str, ...] = (), **fields: Any) -> dict[str, Any]:
    """No privilege escalation (no_new_privs: a setuid binary gains nothing) and no capability but ``add``.

    What the containers that run as root give up is the runtime's default set (CHOWN, DAC_OVERRIDE, FOWNER,
    FSETID, KILL, SETUID, SETGID, NET_RAW, ...: the EKS AMI's containerd, awslabs/amazon-eks-ami
    nodeadm/internal/containerd/base-runtime-spec.json at 81fec2e8 L108-123). None is used: they write only
    files and directories root owns (the image, /tmp, the emptyDirs, what the jobs create on FSx); torchrun
    and hyperpodrun signal their workers, which run under the same uid (no CAP_KILL needed); no port below
    1024 is bound. EFA needs no capability: libfabric opens the /dev/infiniband/uverbs* devices the EFA
    device plugin passes to the pod and pins memory within the container's RLIMIT_MEMLOCK, which the node
    sets; IPC_LOCK is not in that default set, so the training pods never had it, and AWS's EFA training
    manifests add none and are not privileged (aws-samples/awsome-distributed-training 7217859f,
    3.test_cases/pytorch/FSDP/kubernetes/llama3_1_8b-fsdp.yaml and llama3_1_8b-fsdp-hpto.yaml: no
    securityContext). ``fields``: more container settings (a user, a read-only root)."""
    capabilities: dict[str, Any] = {"drop": ["ALL"]}
    if add:
        capabilities["add"] = list(add)
    return {"allowPrivilegeEscalation": False, "capabilities": capabilities, **fields}


def gpu_resources(values: WorkloadValues) -> dict[str, Any]:
    """All GPUs, all EFA devices and the hugepages of one node (where the queue covers them), as requests = limits."""
    resources: dict[str, Any] = {"nvidia.com/gpu": values.profile.gpus}
    if values.efa_devices:
        resources["vpc.amazonaws.com/efa"] = values.efa_devices
    if values.pod_hugepages_2mib:
        resources["hugepages-2Mi"] = f"{values.pod_hugepages_2mib * 2}Mi"
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
        if not values.pod_hugepages_2mib:
            # libfabric's EFA provider takes its internal buffers from the hugepage pool by default (fi_efa(7),
            # FI_EFA_USE_HUGE_PAGE); a pod granted no hugepages has a hugetlb cgroup limit of 0 there.
            env["FI_EFA_USE_HUGE_PAGE"] = "0"
    return [{"name": k, "value": v} for k, v in env.items()]


def volumes(values: WorkloadValues) -> list[dict[str, Any]]:
    return [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{values.profile.gpus * 16}Gi"}},
        {"name": "fsx", "persistentVolumeClaim": {"claimName": values.pvc_name}},
        workloads_volume(),
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
    privileged: bool = False,
) -> dict[str, Any]:
    """A pod spec that takes a whole GPU node: every GPU and EFA device, shm, FSx, the payload.

    ``shutdown_seconds``: what the pod's launcher gives its workers from SIGTERM to SIGKILL (default
    the values' budget); the grace period adds the launcher's own teardown. The container drops every
    capability and may not escalate, under the runtime's seccomp filter (:func:`container_security_context`),
    unless ``privileged`` (the health check, which reads the kernel log and runs DCGM diagnostics).

    No Kubernetes API token is mounted: nothing in these pods calls the API (torchrun, hyperpodrun, the
    payload, a Ray worker). Their AWS credentials come from EKS Pod Identity, which does not use that token:
    its webhook injects a projected token of its own (volume ``eks-pod-identity-token``, audience
    ``pods.eks.amazonaws.com``) into every pod whose service account has an association, whatever
    ``automountServiceAccountToken`` says (Amazon EKS User Guide, "Understand how EKS Pod Identity works";
    aws/amazon-eks-pod-identity-webhook 3bf80a34, pkg/handler/handler.go L347-361 and L440-459: keyed by the
    pod's namespace and service account alone). hyperpodrun calls nothing either: the operator calls its
    server (PyPI hyperpod-elastic-agent 1.1.3: no Kubernetes client, no outbound request in its sources)."""
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
    container["securityContext"] = {"privileged": True} if privileged else container_security_context()
    spec: dict[str, Any] = {
        "serviceAccountName": values.service_account,
        "automountServiceAccountToken": False,
        # SIGTERM -> torchrun -> the payload's final checkpoint within the shutdown budget, then
        # torchrun's teardown; only then may the kubelet SIGKILL.
        "terminationGracePeriodSeconds": (shutdown_seconds or values.shutdown_budget_seconds)
        + TORCHRUN_TEARDOWN_SECONDS,
        "tolerations": [GPU_TOLERATION],
        "affinity": {**gpu_node_affinity(), **(affinity or {})},
        "volumes": volumes(values),
        "containers": [container],
    }
    if not privileged:
        spec["securityContext"] = pod_security_context()
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    return spec


def resilience_annotations(values: WorkloadValues) -> dict[str, str]:
    """HyperPod job auto-resume: restart the job after a faulty node is replaced."""
    if not values.hyperpod:
        return {}
    return {AUTO_RESUME_ANNOTATION: "true", MAX_RETRY_ANNOTATION: str(values.job_max_retries)}
