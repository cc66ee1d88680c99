"""The plain values every chart takes: what to run, where, with which resources."""

from __future__ import annotations

from dataclasses import dataclass

from llm_infra.config import TrainingConfig
from llm_infra.instance_types import InstanceProfile
from llm_infra.k8s_manifests.dlc import dlc_image_uri
from llm_infra.queueing import (
    HUGEPAGES,
    HYPERPOD_NAMESPACE_PREFIX,
    QueueValues,
    cluster_queue_flavors,
    eks_queue_values,
    hyperpod_queue_values,
)

# The checkpoint bucket's prefix for tiered checkpoints' S3 copies (one folder per job below it).
TIERED_PREFIX = "tiered"
# torchrun's shutdown: configurable (LaunchConfig.shutdown_timeout, TORCH_ELASTIC_SHUTDOWN_TIMEOUT) from torch
# 2.13; before, PContext.close(timeout=30) SIGKILLs the workers 30 s after SIGTERM (torch 2.8, torch
# issue 119856).
TORCHRUN_CONFIGURABLE_SHUTDOWN_SINCE = (2, 13)
TORCHRUN_FIXED_SHUTDOWN_SECONDS = 30


def dlc_torch_version(dlc_image_tag: str) -> tuple[int, int]:
    """The PyTorch (major, minor) a DLC ``pytorch-training`` tag names: ``2.8.0-gpu-...`` is (2, 8)."""
    major, minor = dlc_image_tag.split("-", 1)[0].split(".")[:2]
    return int(major), int(minor)


@dataclass(frozen=True)
class FsxVolume:
    """The FSx for Lustre file system that the PersistentVolume points at.

    Plain strings for YAML; inside the CDK app they may be CDK tokens (the one bridge between the
    two worlds: :func:`llm_infra.stacks.workloads.workload_values`).
    """

    file_system_id: str
    dns_name: str
    mount_name: str
    storage_gib: int


@dataclass(frozen=True)
class WorkloadValues:
    """Everything the charts need; built from the config, never from stacks."""

    compute: str
    profile: InstanceProfile
    efa: bool
    gpu_nodes: int
    gpu_nodes_min: int
    gpu_nodes_max: int
    image: str
    # The Ray pods' image (torch, Ray ray_version, the EFA libraries); None while unknown: no explicit
    # ray_image and no image built by image_asset, and then no Ray chart is rendered.
    ray_image: str | None
    ray_version: str
    hugepages_2mib: int
    region: str
    hf_token_secret: str
    recipe: str = "llama2-7b"
    # Jobs as HyperPodPyTorchJob (HyperPod training operator) instead of Kubeflow PyTorchJob.
    hyperpod_training_operator: bool = False
    fsx: FsxVolume | None = None
    # The Kueue queue the jobs go through and the labels they carry (None: queueing=none).
    queues: QueueValues | None = None
    namespace: str = "training"
    service_account: str = "training"
    data_prep_service_account: str = "data-prep"
    pvc_name: str = "fsx-data"
    fsx_mount_path: str = "/fsx"
    # The FSx folder linked to s3://<data bucket>/<data_prefix> (the data repository association).
    dataset_dir: str = "/fsx/data"
    job_max_retries: int = 3
    max_restarts: int = 3
    pg_timeout_seconds: int = 600
    # Seconds from SIGTERM to torchrun's SIGKILL of the workers: room for a final checkpoint. The
    # pods' grace period follows from it.
    shutdown_budget_seconds: int = 300
    # The image's torch (major, minor): torchrun honours TORCH_ELASTIC_SHUTDOWN_TIMEOUT only from 2.13.
    torch_version: tuple[int, int] = (2, 8)
    # HyperPodPyTorchJob restart policy: at most ``max_restarts`` process-level restarts within this
    # window before the operator restarts the whole job, at most ``full_job_restarts`` times.
    restart_eval_period_seconds: int = 21600
    full_job_restarts: int = 1
    # HyperPodPyTorchJob log monitoring: seconds to the payload's start line (process group, model
    # build, checkpoint restore), then at most this long between two step lines; and how long the
    # throughput heartbeat may report no finished step before the operator marks the job slow.
    start_timeout_seconds: int = 1200
    hang_timeout_seconds: int = 900
    stall_minutes: int = 10
    # HyperPod managed tiered checkpointing: where every ``tiered_s3_every``-th save also goes
    # (s3://<checkpoint bucket>/<prefix>); None: the cluster has no memory tier, checkpoints go to FSx.
    tiered_checkpoint_s3_uri: str | None = None
    tiered_s3_every: int = 10

    def __post_init__(self) -> None:
        if self.gpu_nodes < 1:
            raise ValueError(f"gpu_nodes: {self.gpu_nodes} must be >= 1")
        if not 1 <= self.gpu_nodes_min <= self.gpu_nodes <= self.gpu_nodes_max:
            raise ValueError(
                f"gpu_nodes: training jobs need 1 <= gpu_nodes_min <= gpu_nodes <= gpu_nodes_max, got "
                f"{self.gpu_nodes_min} <= {self.gpu_nodes} <= {self.gpu_nodes_max}"
            )
        if not self.image:
            raise ValueError("image: required (a DLC pytorch-training image URI)")
        if self.hyperpod_training_operator and not self.hyperpod:
            raise ValueError("hyperpod_training_operator: needs compute=hyperpod")
        if self.efa and not self.profile.efa_supported:
            raise ValueError(f"efa: {self.profile.instance_type} has no EFA; set efa=false")
        positive = {
            "restart_eval_period_seconds": self.restart_eval_period_seconds,
            "start_timeout_seconds": self.start_timeout_seconds,
            "hang_timeout_seconds": self.hang_timeout_seconds,
            "stall_minutes": self.stall_minutes,
            "tiered_s3_every": self.tiered_s3_every,
        }
        for key, value in positive.items():
            if value < 1:
                raise ValueError(f"{key}: {value} must be >= 1")
        if self.full_job_restarts < 0:
            raise ValueError(f"full_job_restarts: {self.full_job_restarts} must be >= 0")
        if self.tiered_checkpoint_s3_uri is not None and not self.hyperpod:
            raise ValueError("tiered_checkpoint_s3_uri: needs compute=hyperpod (HyperPod nodes run the memory tier)")

    @property
    def pod_hugepages_2mib(self) -> int:
        """The 2 MiB hugepages a GPU pod requests: ``hugepages_2mib``, unless the jobs' queue does not cover
        hugepages (task governance's, :data:`llm_infra.queueing.TASK_GOVERNANCE_RESOURCES`), where a pod that
        requested them would never be admitted: then none, and libfabric keeps its buffers in regular pages."""
        if self.queues is not None and HUGEPAGES not in self.queues.covered_resources:
            return 0
        return self.hugepages_2mib

    def queue_labels(self, kind: str) -> dict[str, str]:
        """The Kueue labels of a ``kind`` job (``training`` or ``validation``) and its pods: its queue and
        priority class; none without a queue."""
        return self.queues.labels(kind) if self.queues is not None else {}

    @property
    def node_agents_namespace(self) -> str:
        """Where our node agents (the Xid monitor's DaemonSet) run: the jobs' namespace, except a task governance
        team namespace (``hyperpod-ns-<team>``), whose admission policy takes only queued pods: there kube-system
        (docs/hyperpod.md, "What runs in the team namespace")."""
        return "kube-system" if self.namespace.startswith(HYPERPOD_NAMESPACE_PREFIX) else self.namespace

    @property
    def efa_devices(self) -> int:
        return self.profile.efa_interfaces if self.efa else 0

    @property
    def hyperpod(self) -> bool:
        return self.compute == "hyperpod"

    @property
    def torchrun_shutdown_seconds(self) -> int:
        """What torchrun gives its workers from SIGTERM to SIGKILL with this image: the budget where
        its LaunchConfig takes ``shutdown_timeout`` (torch >= 2.13, from TORCH_ELASTIC_SHUTDOWN_TIMEOUT),
        else its fixed 30 s (torch 2.8's ``PContext.close(timeout=30)``, the DLC's default)."""
        if self.torch_version >= TORCHRUN_CONFIGURABLE_SHUTDOWN_SINCE:
            return self.shutdown_budget_seconds
        return min(self.shutdown_budget_seconds, TORCHRUN_FIXED_SHUTDOWN_SECONDS)

    @classmethod
    def from_config(
        cls, config: TrainingConfig, *, fsx: FsxVolume | None = None, checkpoint_bucket: str | None = None
    ) -> WorkloadValues:
        """Values for ``config``; the region of the image is the region of ``gpu_az_id``.

        ``checkpoint_bucket`` (the storage stack's checkpoint bucket: a name, or its CDK token) receives
        the S3 copies of tiered checkpoints when the cluster has the memory tier
        (``hyperpod_tiered_checkpointing_percent``).
        """
        region = config.region or config.gpu_az_region
        if region is None:
            raise ValueError(f"region: cannot tell the region of gpu_az_id {config.gpu_az_id!r}; set region")
        tiered = config.compute == "hyperpod" and config.hyperpod_tiered_checkpointing_percent is not None
        tiered_uri = f"s3://{checkpoint_bucket}/{TIERED_PREFIX}" if tiered and checkpoint_bucket else None
        return cls(
            compute=config.compute,
            profile=config.gpu_profile,
            efa=config.efa_enabled,
            gpu_nodes=config.gpu_nodes,
            gpu_nodes_min=max(1, config.gpu_min),
            gpu_nodes_max=config.gpu_max,
            image=dlc_image_uri(region, config.dlc_image_tag),
            ray_image=config.ray_image,
            ray_version=config.ray_version,
            hugepages_2mib=config.hugepages_2mib,
            region=region,
            hf_token_secret=config.hf_token_secret_name,
            recipe=config.recipe,
            hyperpod_training_operator=config.uses_hyperpod_training_operator,
            fsx=fsx,
            queues=queue_values(config),
            namespace=config.jobs_namespace,
            stall_minutes=config.stall_minutes,
            tiered_checkpoint_s3_uri=tiered_uri,
            torch_version=dlc_torch_version(config.dlc_image_tag),
        )


def queue_values(config: TrainingConfig) -> QueueValues | None:
    """The jobs' queue for ``config``: this app's Kueue with the GPU and system node groups' quota (plain EKS),
    task governance's team queue (HyperPod), or none."""
    if config.queueing_mode == "task-governance":
        return hyperpod_queue_values(config.hyperpod_team)
    if config.queueing_mode == "none":
        return None
    return eks_queue_values(
        cluster_queue_flavors(
            profile=config.gpu_profile,
            gpu_nodes=config.gpu_nodes,
            efa=config.efa_enabled,
            hugepages_2mib=config.hugepages_2mib,
            system_instance_type=config.system_instance_type,
            system_nodes=config.system_nodes,
            installed=config.installs,
        )
    )
