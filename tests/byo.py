"""Bring-your-own configurations the tests synthesize: an existing VPC, EKS cluster and FSx for Lustre file
system by their ids (made up; synth is offline and looks nothing up)."""

from __future__ import annotations

from typing import Any

from llm_infra.config import TrainingConfig

VPC_ID = "vpc-0123456789abcdef0"
PRIVATE_SUBNETS = ("subnet-0123456789abcdef0", "subnet-0123456789abcdef1")
GPU_SUBNET = "subnet-0123456789abcdef2"
NAT_GATEWAY = "nat-0123456789abcdef0"
CLUSTER_NAME = "their-cluster"
CLUSTER_SG = "sg-0123456789abcdef0"
FSX_ID = "fs-0123456789abcdef0"
FSX_DNS = f"{FSX_ID}.fsx.us-east-1.amazonaws.com"
FSX_MOUNT = "abcdefgh"
FSX_SG = "sg-0123456789abcdef1"

VPC: dict[str, Any] = {
    "existing_vpc_id": VPC_ID,
    "existing_private_subnet_ids": ",".join(PRIVATE_SUBNETS),
    "existing_nat_gateway_id": NAT_GATEWAY,
}
CLUSTER: dict[str, Any] = {"existing_cluster_name": CLUSTER_NAME, "existing_cluster_security_group_id": CLUSTER_SG}
FSX: dict[str, Any] = {
    "existing_fsx_file_system_id": FSX_ID,
    "existing_fsx_dns_name": FSX_DNS,
    "existing_fsx_mount_name": FSX_MOUNT,
    "existing_fsx_security_group_id": FSX_SG,
}

# Each combination the default app supports, as AWS's HyperPod template's Create*Stack switches combine.
CONFIGS: dict[str, TrainingConfig] = {
    "byo-vpc": TrainingConfig(**VPC),
    "byo-vpc-given-gpu-subnet": TrainingConfig(
        **{k: v for k, v in VPC.items() if k != "existing_nat_gateway_id"}, existing_gpu_subnet_id=GPU_SUBNET
    ),
    "byo-vpc-cluster": TrainingConfig(**VPC, **CLUSTER),
    "byo-vpc-fsx": TrainingConfig(**VPC, **FSX),
    "byo-all": TrainingConfig(**VPC, **CLUSTER, **FSX),
    "byo-all-hyperpod": TrainingConfig(**VPC, **CLUSTER, **FSX, compute="hyperpod"),
}
