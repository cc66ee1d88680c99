"""The plain values every chart takes: what to run, where, with which resources."""

from __future__ import annotations

from dataclasses import dataclass

from llm_infra.config import TrainingConfig
from llm_infra.instance_types import InstanceProfile
from llm_infra.k8s_manifests.dlc import dlc_image_uri


def ray_version(image: str) -> str:
    """``rayproject/ray:2.60.0-py312-gpu`` -> ``2.60.0`` (KubeRay wants the Ray version)."""
    version = image.rsplit(":", 1)[-1].split("-", 1)[0]
    if not version[:1].isdigit():
        raise ValueError(f"ray_image: cannot read a Ray version from {image!r}; tag it like 2.60.0-py312-gpu")
    return version


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
    ray_image: str
    ray_version: str
    hugepages_2mib: int
    region: str
    hf_token_secret: str
    recipe: str = "llama2-7b"
    # Jobs as HyperPodPyTorchJob (HyperPod training operator) instead of Kubeflow PyTorchJob.
    hyperpod_training_operator: bool = False
    fsx: FsxVolume | None = None
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

    @property
    def efa_devices(self) -> int:
        return self.profile.efa_interfaces if self.efa else 0

    @property
    def hyperpod(self) -> bool:
        return self.compute == "hyperpod"

    @classmethod
    def from_config(cls, config: TrainingConfig, *, fsx: FsxVolume | None = None) -> WorkloadValues:
        """Values for ``config``; the region of the image is the region of ``gpu_az_id``."""
        region = config.region or config.gpu_az_region
        if region is None:
            raise ValueError(f"region: cannot tell the region of gpu_az_id {config.gpu_az_id!r}; set region")
        return cls(
            compute=config.compute,
            profile=config.gpu_profile,
            efa=config.efa_enabled,
            gpu_nodes=config.gpu_nodes,
            gpu_nodes_min=max(1, config.gpu_min),
            gpu_nodes_max=config.gpu_max,
            image=dlc_image_uri(region, config.dlc_image_tag),
            ray_image=config.ray_image,
            ray_version=ray_version(config.ray_image),
            hugepages_2mib=config.hugepages_2mib,
            region=region,
            hf_token_secret=config.hf_token_secret_name,
            recipe=config.recipe,
            hyperpod_training_operator=config.uses_hyperpod_training_operator,
            fsx=fsx,
        )
