"""The one typed configuration of the app, read from CDK context and validated in one place.

Every key is flat snake_case so that ``cdk synth -c gpu_nodes=4`` works. Values given with ``-c``
arrive as strings and are parsed here. Invalid input raises :class:`ConfigError` at synth time,
naming each offending key and what it allows, before anything could be deployed.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, get_type_hints

from llm_infra.instance_types import (
    INSTANCE_PROFILES,
    EfaLayout,
    InstanceProfile,
    instance_profile,
    ultraserver_refusal,
)
from llm_infra.queueing import SYSTEM_INSTANCE_TYPES
from llm_infra.service_limits import (
    FSX_PERSISTENT_2_CAPACITY_RULE,
    FSX_PERSISTENT_2_THROUGHPUTS,
    HYPERPOD_DEEP_HEALTH_CHECKS,
    HYPERPOD_ELASTIC_AGENT_TORCH,
    HYPERPOD_NODE_PROVISIONING,
    HYPERPOD_NODE_RECOVERY,
    HYPERPOD_REGIONS,
    fsx_persistent_2_capacity_ok,
)
from llm_infra.versions import (
    EFA_DEVICE_PLUGIN,
    EKS_ADDONS,
    HYPERPOD_TASK_GOVERNANCE_ADDONS,
    HYPERPOD_TRAINING_OPERATOR_ADDONS,
    KUBERAY_OPERATOR,
    KUEUE,
    NVIDIA_DEVICE_PLUGIN,
)

# ---- defaults ------------------------------------------------------------------------------------
# The one home of every default that a config key shares with a construct's keyword argument: the
# dataclass below and the constructs' signatures (TrainingVpc, TrainingCluster, GpuNodeGroup,
# LustreStorage, HyperPodCluster, HyperPodInstanceGroup, TrainingObservability) both read these, and
# tests/test_defaults.py holds them equal.
DEFAULT_VPC_CIDR = "10.0.0.0/16"
DEFAULT_GPU_SUBNET_CIDR = "10.1.0.0/16"
DEFAULT_GPU_AZ_ID = "use1-az4"
DEFAULT_KUBERNETES_VERSION = "1.34"
DEFAULT_GPU_INSTANCE_TYPE = "p5.48xlarge"
DEFAULT_GPU_NODES = 2
DEFAULT_GPU_ROOT_VOLUME_GIB = 500
DEFAULT_HUGEPAGES_2MIB = 5120
DEFAULT_SYSTEM_INSTANCE_TYPE = "m7i.xlarge"
DEFAULT_SYSTEM_NODES = 2
DEFAULT_ENDPOINT_ACCESS = "public-and-private"
DEFAULT_FSX_STORAGE_GIB = 1200
DEFAULT_FSX_THROUGHPUT = 250
DEFAULT_DATA_PREFIX = "datasets/"
DEFAULT_HYPERPOD_NODE_RECOVERY = "Automatic"
DEFAULT_HYPERPOD_NODE_PROVISIONING = "continuous"
DEFAULT_STALL_PERCENT = 50
DEFAULT_STALL_MINUTES = 10
DEFAULT_FSX_FREE_ALARM_PERCENT = 10

COMPUTE_MODES = ("eks", "hyperpod")
# Gang admission: kueue (this app's Kueue on plain EKS, AWS's task governance on HyperPod) or none.
QUEUEING = ("kueue", "none")
DEFAULT_HYPERPOD_TEAM = "training"
# Where the jobs run on plain EKS, and the service account their pods use (Pod Identity's association names both).
TRAINING_NAMESPACE = "training"
TRAINING_SERVICE_ACCOUNT = "training"
# AWS::SageMaker::ComputeQuota ComputeQuotaTarget.TeamName (CloudFormation's schema; the namespace hyperpod-ns-<team>).
_TEAM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9]){0,39}?$")
# Both compute modes: "SageMaker HyperPod supports Kubernetes versions 1.30, 1.31, 1.32, 1.33, 1.34,
# and 1.35" (docs: sagemaker-hyperpod-eks-prerequisites).
KUBERNETES_VERSIONS = ("1.34", "1.35")
GPU_CAPACITY_TYPES = ("on-demand", "capacity-reservation", "capacity-block")
ENDPOINT_ACCESS = ("public-and-private", "private")

# AZ IDs start with a region code: use1-az4 lies in us-east-1. Used to check gpu_az_id against
# the region when one is configured, and by a CloudFormation rule at deploy time when not.
AZ_ID_REGION_CODES = {
    "use1": "us-east-1",
    "use2": "us-east-2",
    "usw1": "us-west-1",
    "usw2": "us-west-2",
    "cac1": "ca-central-1",
    "sae1": "sa-east-1",
    "euw1": "eu-west-1",
    "euw2": "eu-west-2",
    "euw3": "eu-west-3",
    "euc1": "eu-central-1",
    "eun1": "eu-north-1",
    "euc2": "eu-central-2",
    "aps1": "ap-south-1",
    "apse1": "ap-southeast-1",
    "apse2": "ap-southeast-2",
    "apne1": "ap-northeast-1",
    "apne2": "ap-northeast-2",
    "apne3": "ap-northeast-3",
}
_AZ_ID = re.compile(r"^(?P<code>[a-z]{2,4}[a-z]?\d)-az(?P<n>\d{1,2})$")
_CAPACITY_RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8}([0-9a-f]{9})?$")
_ACCOUNT = re.compile(r"^\d{12}$")
_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_DLC_TAG = re.compile(r"^\d+\.\d+(\.\d+)?-gpu-py\d{2,3}-cu\d{3}-[a-z]+\d+\.\d+-(ec2|sagemaker)(-v[\w.-]+)?$")
_RAY_VERSION = re.compile(r"\d+\.\d+\.\d+")
RAY_MIN_VERSION = (2, 52, 0)
# The Ray version in an image tag: a dash-separated part "ray2.60.0", else a leading "2.60.0" (rayproject style).
_RAY_IN_TAG = re.compile(r"(?:^|-)ray(\d+\.\d+\.\d+)(?=-|$)")
_LEADING_VERSION_IN_TAG = re.compile(r"^(\d+\.\d+\.\d+)(?=-|$)")
_EMAIL = re.compile(r"^[^@\s,]+@[^@\s,]+\.[^@\s,]+$")
RECIPES = ("llama2-7b", "llama3-8b")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
# SageMaker CreateCluster, TrainingPlanArn: arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:training-plan/.*
_TRAINING_PLAN_ARN = re.compile(r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]*:[0-9]{12}:training-plan/.+$")
# Who installs the Kubeflow training operator (PyTorchJob) and, on HyperPod, HyperPod's resilience
# components: AWS's HyperPod Helm-chart stack, or you (none).
OPERATOR_SOURCES = ("aws-helm-stack", "none")
# AWS's per-region cluster-setup bucket that aws-helm-stack's nested stack loads its template (this key),
# Lambda and layer from (constructs/hyperpod_dependencies.py; `llm-infra preflight` checks it).
HYPERPOD_SETUP_BUCKET = "aws-sagemaker-hyperpod-cluster-setup-{region}-prod"
HYPERPOD_HELM_TEMPLATE_KEY = "templates/helm-chart-template.yaml"
# The HyperPod CPU instance group's instance type (compute=hyperpod, hyperpod_cpu_nodes of them).
HYPERPOD_CPU_INSTANCE_TYPE = "ml.m5.2xlarge"
_PLACEMENT_GROUP_NAME = re.compile(r"^[\w.:/+=@-]{1,255}$")
_CONTEXT_KEY = re.compile(r"^[a-z][a-z0-9_]*$")
# Bring your own: the ids of existing resources (EC2 ids are 8 or 17 hex digits after the prefix).
_VPC_ID = re.compile(r"^vpc-[0-9a-f]{8}([0-9a-f]{9})?$")
_SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8}([0-9a-f]{9})?$")
_SECURITY_GROUP_ID = re.compile(r"^sg-[0-9a-f]{8}([0-9a-f]{9})?$")
_NAT_GATEWAY_ID = re.compile(r"^nat-[0-9a-f]{8}([0-9a-f]{9})?$")
_FSX_ID = re.compile(r"^fs-[0-9a-f]{8}([0-9a-f]{9})?$")
_FSX_DNS_NAME = re.compile(r"^fs-[0-9a-f]{8,17}\.fsx\.[a-z]{2}(-gov)?-[a-z]+-\d\.amazonaws\.com(\.cn)?$")
_FSX_MOUNT_NAME = re.compile(r"^[a-z0-9]{1,8}$")
# EKS CreateCluster: "The unique name to give to your cluster" (1-100, ^[0-9A-Za-z][A-Za-z0-9\-_]*).
_EKS_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")

# What the app installs in its EKS cluster: EKS add-ons by add-on name, Helm charts by chart name. On a
# cluster it creates, all of them (the HyperPod ones with the HyperPod training operator); on an existing
# cluster only those install_addons names, since its owner may run any of them already (AWS's Helm-chart
# stack of the Kubeflow training operator follows `operators`).
BOOTSTRAP_ADDONS = ("vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent")
HYPERPOD_ADDONS = tuple(HYPERPOD_TRAINING_OPERATOR_ADDONS[DEFAULT_KUBERNETES_VERSION])
TASK_GOVERNANCE_ADDON = "amazon-sagemaker-hyperpod-taskgovernance"
INSTALLABLE = (
    *EKS_ADDONS[DEFAULT_KUBERNETES_VERSION],
    NVIDIA_DEVICE_PLUGIN.chart,
    EFA_DEVICE_PLUGIN.chart,
    KUBERAY_OPERATOR.chart,
    KUEUE.chart,
    *HYPERPOD_ADDONS,
    *HYPERPOD_TASK_GOVERNANCE_ADDONS[DEFAULT_KUBERNETES_VERSION],
)


class ConfigError(ValueError):
    """Invalid configuration; the message names every bad key and what it allows."""


@dataclass(frozen=True)
class TrainingConfig:
    """Configuration of a training cluster. Field names are the CDK context keys."""

    project_name: str = "llm-infra"
    account: str | None = None
    region: str | None = None
    compute: str = "eks"
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    vpc_cidr: str = DEFAULT_VPC_CIDR
    gpu_subnet_cidr: str = DEFAULT_GPU_SUBNET_CIDR
    gpu_az_id: str = DEFAULT_GPU_AZ_ID
    gpu_instance_type: str = DEFAULT_GPU_INSTANCE_TYPE
    gpu_nodes: int = DEFAULT_GPU_NODES
    gpu_nodes_min: int | None = None
    gpu_nodes_max: int | None = None
    gpu_capacity: str | None = None
    capacity_reservation_id: str | None = None
    efa: bool | None = None
    efa_layout: str | None = None
    gpu_root_volume_gib: int = DEFAULT_GPU_ROOT_VOLUME_GIB
    hugepages_2mib: int = DEFAULT_HUGEPAGES_2MIB
    system_instance_type: str = DEFAULT_SYSTEM_INSTANCE_TYPE
    system_nodes: int = DEFAULT_SYSTEM_NODES
    endpoint_access: str = DEFAULT_ENDPOINT_ACCESS
    admin_role_arn: str | None = None
    fsx_storage_gib: int = DEFAULT_FSX_STORAGE_GIB
    fsx_throughput: int = DEFAULT_FSX_THROUGHPUT
    data_bucket: str | None = None
    data_prefix: str = DEFAULT_DATA_PREFIX
    dlc_image_tag: str = "2.8.0-gpu-py312-cu129-ubuntu22.04-ec2"
    # The Ray head and workers' image: torch, Ray ray_version (named in its tag) and the EFA libraries,
    # i.e. workloads/Dockerfile built and pushed (unset: the image that image_asset=true builds from it).
    ray_image: str | None = None
    ray_version: str = "2.60.0"
    hyperpod_node_recovery: str = DEFAULT_HYPERPOD_NODE_RECOVERY
    hyperpod_deep_health_checks: str = ",".join(HYPERPOD_DEEP_HEALTH_CHECKS)
    # HyperPod CPU instance group (HYPERPOD_CPU_INSTANCE_TYPE); unset: 1 with the HyperPod training operator (its
    # controller runs there), else 0.
    hyperpod_cpu_nodes: int | None = None
    hyperpod_training_plan_arn: str | None = None
    hyperpod_tiered_checkpointing_percent: int | None = None
    # continuous: NodeProvisioningMode Continuous (partial provisioning, retries, BatchAddClusterNodes);
    # standard: HyperPod's all-or-nothing scaling.
    hyperpod_node_provisioning: str = DEFAULT_HYPERPOD_NODE_PROVISIONING
    # Jobs as HyperPodPyTorchJob under the HyperPod training operator (EKS add-on); unset: on with
    # compute=hyperpod. false keeps Kubeflow PyTorchJobs there too.
    hyperpod_training_operator: bool | None = None
    # Who installs the Kubeflow training operator (and, on HyperPod, its resilience components): unset =
    # aws-helm-stack on a cluster this app creates, none on an existing one (its owner's). Always a string
    # once constructed (__post_init__).
    operators: str | None = None
    # Gang admission (QUEUEING): kueue puts every training job through a Kueue queue (plain EKS: this app's Kueue,
    # HyperPod: AWS's task governance); none lets the scheduler place pods as they come.
    queueing: str = "kueue"
    # HyperPod task governance: the team whose compute allocation (and namespace hyperpod-ns-<team>) the jobs use.
    hyperpod_team: str = DEFAULT_HYPERPOD_TEAM
    gpu_placement_group: str | None = None
    apply_jobs: bool = False
    image_asset: bool = False
    manifests_dir: str | None = None
    alarm_email: str | None = None
    stall_percent: int = DEFAULT_STALL_PERCENT
    stall_minutes: int = DEFAULT_STALL_MINUTES
    fsx_free_alarm_percent: int = DEFAULT_FSX_FREE_ALARM_PERCENT
    recipe: str = "llama2-7b"
    # ---- bring your own (AWS's HyperPod template: CreateVPCStack, CreatePrivateSubnetStack,
    # CreateEKSClusterStack, CreateFsxStack false with the ids they then need); ids are given, never
    # looked up, so synth stays offline. docs/configuration.md#bring-your-own-vpc-cluster-or-file-system
    existing_vpc_id: str | None = None
    # comma list: the control plane's (or the existing cluster's) private subnets, >= 2 in two AZs
    existing_private_subnet_ids: str | None = None
    # the GPU subnet, in gpu_az_id; unset: created in the VPC on gpu_subnet_cidr, routed through...
    existing_gpu_subnet_id: str | None = None
    # ...this NAT gateway
    existing_nat_gateway_id: str | None = None
    existing_cluster_name: str | None = None
    existing_cluster_security_group_id: str | None = None
    # comma list: the add-ons and charts this app installs on an existing cluster (unset: none)
    install_addons: str | None = None
    existing_fsx_file_system_id: str | None = None
    existing_fsx_dns_name: str | None = None
    existing_fsx_mount_name: str | None = None
    existing_fsx_security_group_id: str | None = None

    def __post_init__(self) -> None:
        if self.operators is None:  # derived; with_() derives it again (an attribute, not a config key)
            object.__setattr__(self, "_operators_unset", True)
            object.__setattr__(self, "operators", "none" if self.existing_cluster_name else "aws-helm-stack")

    # ---- derived values -------------------------------------------------------------------
    @property
    def gpu_profile(self) -> InstanceProfile:
        return instance_profile(self.gpu_instance_type)

    @property
    def efa_enabled(self) -> bool:
        return self.gpu_profile.efa_supported if self.efa is None else self.efa

    @property
    def nic_layout(self) -> EfaLayout:
        return EfaLayout(self.efa_layout) if self.efa_layout else self.gpu_profile.default_efa_layout

    @property
    def gpu_min(self) -> int:
        return self.gpu_nodes if self.gpu_nodes_min is None else self.gpu_nodes_min

    @property
    def gpu_max(self) -> int:
        return self.gpu_nodes if self.gpu_nodes_max is None else self.gpu_nodes_max

    @property
    def max_cluster_nodes(self) -> int:
        """The most nodes the cluster holds: the system nodes, the GPU nodes at their most and, on HyperPod, its
        CPU instance group (an existing cluster's own nodes are not counted)."""
        hyperpod_cpu = self.hyperpod_cpu_count if self.compute == "hyperpod" else 0
        return self.system_nodes + self.gpu_max + hyperpod_cpu

    @property
    def capacity(self) -> str:
        if self.gpu_capacity:
            return self.gpu_capacity
        return "capacity-reservation" if self.capacity_reservation_id else "on-demand"

    @property
    def placement_group(self) -> str | None:
        """``"create"``, ``None`` (no placement group) or the name of an existing one.

        Unset: a new cluster placement group for on-demand nodes, none with a capacity reservation or
        block (reserved capacity lands where it was reserved; an ODCR made in a placement group cannot
        launch into another one).
        """
        choice = self.gpu_placement_group
        if choice is None:
            return "create" if self.capacity == "on-demand" else None
        return None if choice == "none" else choice

    @property
    def uses_hyperpod_training_operator(self) -> bool:
        """Whether jobs run as HyperPodPyTorchJob under the HyperPod training operator."""
        if self.hyperpod_training_operator is None:
            return self.compute == "hyperpod"
        return self.hyperpod_training_operator

    @property
    def hyperpod_cpu_count(self) -> int:
        """Instances in the HyperPod CPU instance group (0: no such group)."""
        if self.hyperpod_cpu_nodes is None:
            return 1 if self.uses_hyperpod_training_operator else 0
        return self.hyperpod_cpu_nodes

    @property
    def hyperpod_health_checks(self) -> tuple[str, ...]:
        return tuple(c.strip() for c in self.hyperpod_deep_health_checks.split(",") if c.strip())

    @property
    def alarm_emails(self) -> tuple[str, ...]:
        """``alarm_email`` split on commas: the addresses subscribed to the alarm topic."""
        return tuple(e.strip() for e in (self.alarm_email or "").split(",") if e.strip())

    @property
    def hf_token_secret_name(self) -> str:
        """The Secrets Manager secret that holds the Hugging Face token (CDK creates it, you set it)."""
        return f"{self.project_name}/huggingface-token"

    @property
    def gpu_az_region(self) -> str | None:
        """The region that gpu_az_id belongs to, when its region code is known."""
        match = _AZ_ID.match(self.gpu_az_id)
        return AZ_ID_REGION_CODES.get(match["code"]) if match else None

    @property
    def deploy_region(self) -> str | None:
        """Where the stacks go: ``region``, else the region of ``gpu_az_id`` (None when neither says)."""
        return self.region or self.gpu_az_region

    @property
    def private_subnet_ids(self) -> tuple[str, ...]:
        """``existing_private_subnet_ids`` split on commas."""
        return _split(self.existing_private_subnet_ids)

    @property
    def existing_cluster(self) -> bool:
        """Whether the EKS cluster exists already (``existing_cluster_name``): the app creates none."""
        return self.existing_cluster_name is not None

    @property
    def installs(self) -> frozenset[str]:
        """The add-ons and charts this app installs in the cluster: on a cluster it creates, all of them
        (:data:`INSTALLABLE`, the HyperPod ones where they apply); on an existing one, ``install_addons``."""
        if self.existing_cluster:
            return frozenset(_split(self.install_addons))
        hyperpod_operator = self.compute == "hyperpod" and self.uses_hyperpod_training_operator
        return frozenset(
            name
            for name in INSTALLABLE
            if (hyperpod_operator or name not in HYPERPOD_ADDONS)
            and (name != KUEUE.chart or self.queueing_mode == "kueue")
            and (name != TASK_GOVERNANCE_ADDON or self.queueing_mode == "task-governance")
        )

    @property
    def queueing_mode(self) -> str:
        """Who queues the jobs: ``kueue`` (this app's Kueue, plain EKS), ``task-governance`` (AWS's, HyperPod) or
        ``none``."""
        if self.queueing == "none":
            return "none"
        return "task-governance" if self.compute == "hyperpod" else "kueue"

    @property
    def jobs_namespace(self) -> str:
        """Where the jobs (and what they mount) live: task governance's team namespace on HyperPod, else
        ``training``."""
        if self.queueing_mode == "task-governance":
            return f"hyperpod-ns-{self.hyperpod_team}"
        return TRAINING_NAMESPACE

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> TrainingConfig:
        """Build and validate a config from CDK context (``cdk.json`` plus ``-c key=value``).

        Keys that look like config keys (flat snake_case) but are not fields are errors, so a
        typo such as ``-c gpu_node=4`` never passes silently. Other context (feature flags such as
        ``@aws-cdk/...``, lookups such as ``availability-zones:...``) is left to CDK.
        """
        types = get_type_hints(cls)
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        errors: list[str] = []
        for key, raw in context.items():
            if not _CONTEXT_KEY.match(key):
                continue
            if key not in known:
                errors.append(f"{key}: unknown config key; known keys: {', '.join(sorted(known))}")
                continue
            try:
                values[key] = _parse(raw, types[key], unset_words=("",) if key in _NONE_IS_A_VALUE else _UNSET)
            except ValueError as err:
                errors.append(f"{key}: {err}")
        config = cls(**values)
        _raise_if_any(errors + _check(config))
        return config

    def validate(self) -> None:
        """Raise :class:`ConfigError` listing every invalid key, or return quietly."""
        _raise_if_any(_check(self))

    def with_(self, **changes: Any) -> TrainingConfig:
        """A validated copy with some fields changed (handy in tests and user apps); a key left unset
        keeps its derived default (``operators`` follows ``existing_cluster_name``)."""
        if getattr(self, "_operators_unset", False):
            changes.setdefault("operators", None)
        config = dataclasses.replace(self, **changes)
        config.validate()
        return config


def _raise_if_any(errors: list[str]) -> None:
    if errors:
        raise ConfigError("invalid llm-infra configuration:\n  - " + "\n  - ".join(errors))


# What unsets an optional key given as a string (`-c key=`); for the keys in _NONE_IS_A_VALUE only the
# empty string does, since `none` is one of their values (operators=none).
_UNSET = ("", "none", "null")
_NONE_IS_A_VALUE = frozenset({"operators"})


def _parse(raw: Any, annotation: Any, unset_words: tuple[str, ...] = _UNSET) -> Any:
    """Parse a context value (a JSON value from cdk.json, or a string from ``-c``)."""
    text = str(annotation)
    optional = "None" in text
    if raw is None or (optional and isinstance(raw, str) and raw.strip().lower() in unset_words):
        if not optional:
            raise ValueError("a value is required")
        return None
    if "bool" in text:
        if isinstance(raw, bool):
            return raw
        lowered = str(raw).strip().lower()
        if lowered in ("true", "yes", "1", "on"):
            return True
        if lowered in ("false", "no", "0", "off"):
            return False
        raise ValueError(f"expected true or false, got {raw!r}")
    if "int" in text:
        if isinstance(raw, bool):
            raise ValueError(f"expected an integer, got {raw!r}")
        if isinstance(raw, int):
            return raw
        try:
            return int(str(raw).strip())
        except ValueError:
            raise ValueError(f"expected an integer, got {raw!r}") from None
    return str(raw).strip()


def _split(value: str | None) -> tuple[str, ...]:
    """A comma list: its items, stripped, empty ones dropped."""
    return tuple(item.strip() for item in (value or "").split(",") if item.strip())


def _one_of(key: str, value: Any, allowed: tuple[Any, ...]) -> list[str]:
    if value in allowed:
        return []
    return [f"{key}: {value!r} is not allowed; allowed: {', '.join(map(str, allowed))}"]


def _check(c: TrainingConfig) -> list[str]:
    errors: list[str] = []
    if not re.fullmatch(r"[a-z][a-z0-9-]{1,30}", c.project_name):
        errors.append(f"project_name: {c.project_name!r} must be 2-31 chars of a-z, 0-9, '-'")
    if c.account is not None and not _ACCOUNT.match(c.account):
        errors.append(f"account: {c.account!r} must be a 12-digit AWS account id")
    if c.region is not None and not _REGION.match(c.region):
        errors.append(f"region: {c.region!r} is not an AWS region name such as us-east-1")
    errors += _one_of("compute", c.compute, COMPUTE_MODES)
    errors += _one_of("kubernetes_version", c.kubernetes_version, KUBERNETES_VERSIONS)
    errors += _one_of("endpoint_access", c.endpoint_access, ENDPOINT_ACCESS)
    errors += _check_network(c)
    errors += _check_gpu_nodes(c)
    if c.system_nodes < 1:
        errors.append(f"system_nodes: {c.system_nodes} must be >= 1 (CoreDNS and the operators run there)")
    if c.gpu_root_volume_gib < 100:
        errors.append(f"gpu_root_volume_gib: {c.gpu_root_volume_gib} must be >= 100 (DLC images are ~20 GiB)")
    if c.hugepages_2mib < 0:
        errors.append(f"hugepages_2mib: {c.hugepages_2mib} must be >= 0")
    if c.admin_role_arn is not None and not _ROLE_ARN.match(c.admin_role_arn):
        errors.append(f"admin_role_arn: {c.admin_role_arn!r} must be an IAM role ARN")
    errors += _check_storage(c)
    errors += _check_existing(c)
    errors += _check_operators(c)
    errors += _check_observability(c)
    errors += _one_of("recipe", c.recipe, RECIPES)
    errors += _check_queueing(c)
    if c.compute == "hyperpod":
        errors += _check_hyperpod(c)
    elif c.hyperpod_training_operator:
        errors.append("hyperpod_training_operator: needs compute=hyperpod (plain EKS runs Kubeflow PyTorchJobs)")
    errors += _check_ray(c)
    if not c.dlc_image_tag:
        errors.append("dlc_image_tag: required, e.g. 2.8.0-gpu-py312-cu129-ubuntu22.04-ec2")
    elif not _DLC_TAG.match(c.dlc_image_tag):
        errors.append(
            f"dlc_image_tag: {c.dlc_image_tag!r} is not a DLC pytorch-training GPU tag such as "
            "2.8.0-gpu-py312-cu129-ubuntu22.04-ec2"
        )
    return errors


def _check_network(c: TrainingConfig) -> list[str]:
    errors: list[str] = []
    match = _AZ_ID.match(c.gpu_az_id)
    if not match:
        errors.append(
            f"gpu_az_id: {c.gpu_az_id!r} is not an AZ ID such as use1-az4 (an AZ ID, not an AZ name like us-east-1a)"
        )
    elif c.region and c.gpu_az_region and c.gpu_az_region != c.region:
        errors.append(f"gpu_az_id: {c.gpu_az_id!r} lies in {c.gpu_az_region}, not in region {c.region}")
    nets = {}
    for key in ("vpc_cidr", "gpu_subnet_cidr"):
        try:
            net = ipaddress.IPv4Network(getattr(c, key))
        except ValueError as err:
            errors.append(f"{key}: {err}")
            continue
        if not net.is_private or not 16 <= net.prefixlen <= 20:
            errors.append(f"{key}: {net} must be a private (RFC 1918) block between /16 and /20")
        nets[key] = net
    if len(nets) == 2 and nets["vpc_cidr"].overlaps(nets["gpu_subnet_cidr"]):
        errors.append(f"gpu_subnet_cidr: {nets['gpu_subnet_cidr']} overlaps vpc_cidr {nets['vpc_cidr']}")
    return errors


def _check_gpu_nodes(c: TrainingConfig) -> list[str]:
    errors: list[str] = []
    if c.gpu_instance_type.removeprefix("ml.") not in INSTANCE_PROFILES:
        why = ultraserver_refusal(c.gpu_instance_type) or f"{c.gpu_instance_type!r} is not supported"
        errors.append(f"gpu_instance_type: {why}; allowed: " + ", ".join(sorted(INSTANCE_PROFILES)))
    elif c.efa and not c.gpu_profile.efa_supported:
        efa_types = sorted(p.instance_type for p in INSTANCE_PROFILES.values() if p.efa_supported)
        errors.append(f"efa: {c.gpu_instance_type} has no EFA; set efa=false or pick one of: {', '.join(efa_types)}")
    if c.efa_layout is not None:
        errors += _one_of("efa_layout", c.efa_layout, tuple(layout.value for layout in EfaLayout))
    if c.gpu_nodes < 1:
        errors.append(f"gpu_nodes: {c.gpu_nodes} must be >= 1")
    if c.gpu_nodes_min is not None and c.gpu_nodes_min < 0:
        errors.append(f"gpu_nodes_min: {c.gpu_nodes_min} must be >= 0")
    if c.gpu_nodes_max is not None and c.gpu_nodes_max < 1:
        errors.append(f"gpu_nodes_max: {c.gpu_nodes_max} must be >= 1")
    if c.gpu_nodes_min is not None and c.gpu_nodes_max is not None and c.gpu_nodes_min > c.gpu_nodes_max:
        errors.append(f"gpu_nodes_min: {c.gpu_nodes_min} is greater than gpu_nodes_max {c.gpu_nodes_max}")
    elif c.gpu_nodes > c.gpu_max:
        errors.append(f"gpu_nodes: {c.gpu_nodes} is greater than gpu_nodes_max {c.gpu_max}")
    elif c.gpu_nodes < c.gpu_min:
        errors.append(f"gpu_nodes: {c.gpu_nodes} is less than gpu_nodes_min {c.gpu_min}")
    if c.gpu_capacity is not None:
        errors += _one_of("gpu_capacity", c.gpu_capacity, GPU_CAPACITY_TYPES)
    if c.capacity_reservation_id is not None and not _CAPACITY_RESERVATION_ID.match(c.capacity_reservation_id):
        errors.append(f"capacity_reservation_id: {c.capacity_reservation_id!r} must look like cr-0123456789abcdef0")
    if c.capacity in ("capacity-reservation", "capacity-block") and not c.capacity_reservation_id:
        errors.append(f"capacity_reservation_id: required when gpu_capacity is {c.capacity}")
    if c.gpu_placement_group is not None and not _PLACEMENT_GROUP_NAME.match(c.gpu_placement_group):
        errors.append(
            f"gpu_placement_group: {c.gpu_placement_group!r} is not allowed; allowed: create, none or the name "
            "of an existing cluster placement group"
        )
    if c.capacity == "on-demand" and c.capacity_reservation_id:
        errors.append("gpu_capacity: on-demand contradicts capacity_reservation_id; use capacity-reservation")
    return errors


def _check_storage(c: TrainingConfig) -> list[str]:
    errors: list[str] = []
    if c.existing_fsx_file_system_id is not None:
        # Its size, for the volume and the free-capacity alarm; whatever deployment type it has.
        if c.fsx_storage_gib < 1:
            errors.append(f"fsx_storage_gib: {c.fsx_storage_gib} must be the existing file system's size in GiB")
    elif not fsx_persistent_2_capacity_ok(c.fsx_storage_gib):
        errors.append(
            f"fsx_storage_gib: {c.fsx_storage_gib} is not allowed for PERSISTENT_2; "
            f"allowed: {FSX_PERSISTENT_2_CAPACITY_RULE}"
        )
    errors += _one_of("fsx_throughput", c.fsx_throughput, FSX_PERSISTENT_2_THROUGHPUTS)
    if c.data_bucket is not None and not _BUCKET.match(c.data_bucket):
        errors.append(f"data_bucket: {c.data_bucket!r} is not a valid S3 bucket name")
    if c.data_prefix.startswith("/") or not c.data_prefix.endswith("/"):
        errors.append(f"data_prefix: {c.data_prefix!r} must be a key prefix ending in '/', e.g. datasets/")
    return errors


# The id keys of existing resources: their pattern and an example.
_EXISTING_IDS = {
    "existing_vpc_id": (_VPC_ID, "vpc-0123456789abcdef0"),
    "existing_gpu_subnet_id": (_SUBNET_ID, "subnet-0123456789abcdef0"),
    "existing_nat_gateway_id": (_NAT_GATEWAY_ID, "nat-0123456789abcdef0"),
    "existing_cluster_security_group_id": (_SECURITY_GROUP_ID, "sg-0123456789abcdef0"),
    "existing_fsx_file_system_id": (_FSX_ID, "fs-0123456789abcdef0"),
    "existing_fsx_security_group_id": (_SECURITY_GROUP_ID, "sg-0123456789abcdef0"),
}


def _needs(c: TrainingConfig, key: str, *required: str, why: str) -> list[str]:
    """``key`` is set: each of ``required`` must be too."""
    if getattr(c, key) is None:
        return []
    return [f"{other}: required with {key} ({why})" for other in required if getattr(c, other) is None]


def _check_existing(c: TrainingConfig) -> list[str]:
    """Bring your own VPC, cluster or file system: the ids, and what each needs beside it (AWS's HyperPod
    template asks the same when its Create*Stack switches are false: VpcId, PrivateSubnetIds, NatGatewayIds,
    EKSClusterName, SecurityGroupIds, FsxFileSystemId)."""
    errors: list[str] = []
    for key, (pattern, example) in _EXISTING_IDS.items():
        value = getattr(c, key)
        if value is not None and not pattern.match(value):
            errors.append(f"{key}: {value!r} is not an id such as {example}")
    errors += [
        f"existing_private_subnet_ids: {subnet!r} is not a subnet id such as subnet-0123456789abcdef0"
        for subnet in c.private_subnet_ids
        if not _SUBNET_ID.match(subnet)
    ]
    if c.existing_fsx_dns_name is not None and not _FSX_DNS_NAME.match(c.existing_fsx_dns_name):
        errors.append(
            f"existing_fsx_dns_name: {c.existing_fsx_dns_name!r} is not a file system's DNS name such as "
            "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com"
        )
    if c.existing_fsx_mount_name is not None and not _FSX_MOUNT_NAME.match(c.existing_fsx_mount_name):
        errors.append(f"existing_fsx_mount_name: {c.existing_fsx_mount_name!r} is not a mount name such as abcdefgh")
    if c.existing_cluster_name is not None and not _EKS_CLUSTER_NAME.match(c.existing_cluster_name):
        errors.append(
            f"existing_cluster_name: {c.existing_cluster_name!r} is not an EKS cluster name (1-100 letters, digits, "
            "'-' and '_', starting with a letter or digit)"
        )
    errors += _check_existing_network(c)
    errors += _needs(c, "existing_cluster_name", "existing_vpc_id", why="its VPC: the GPU subnet and nodes go there")
    errors += _needs(
        c,
        "existing_cluster_name",
        "existing_cluster_security_group_id",
        why="the cluster security group EKS made: the GPU nodes, HyperPod and the Lustre rules use it",
    )
    errors += _needs(c, "existing_cluster_security_group_id", "existing_cluster_name", why="whose group it is")
    errors += _check_install_addons(c)
    fsx_keys = ("existing_fsx_dns_name", "existing_fsx_mount_name", "existing_fsx_security_group_id")
    errors += _needs(
        c, "existing_fsx_file_system_id", "existing_vpc_id", why="its VPC: the groups it admits must be there"
    )
    errors += _needs(c, "existing_fsx_file_system_id", *fsx_keys, why="what the nodes mount and what admits them")
    for key in fsx_keys:
        errors += _needs(c, key, "existing_fsx_file_system_id", why="the file system it belongs to")
    return errors


def _check_existing_network(c: TrainingConfig) -> list[str]:
    errors = _needs(c, "existing_vpc_id", "existing_private_subnet_ids", why="the private subnets, >= 2 in two AZs")
    for key in ("existing_private_subnet_ids", "existing_gpu_subnet_id", "existing_nat_gateway_id"):
        errors += _needs(c, key, "existing_vpc_id", why="the VPC they belong to")
    if c.existing_private_subnet_ids is not None and len(set(c.private_subnet_ids)) < 2:
        errors.append(
            f"existing_private_subnet_ids: {c.existing_private_subnet_ids!r} names {len(set(c.private_subnet_ids))}; "
            "give >= 2 private subnets in two AZs, comma-separated"
        )
    if c.existing_vpc_id is not None and c.existing_gpu_subnet_id is None and c.existing_nat_gateway_id is None:
        errors.append(
            "existing_nat_gateway_id: required with existing_vpc_id when the GPU subnet is created in it (its route "
            "to the internet); or give the GPU subnet with existing_gpu_subnet_id"
        )
    if c.existing_gpu_subnet_id is not None and c.existing_nat_gateway_id is not None:
        errors.append("existing_nat_gateway_id: only for a GPU subnet this app creates; existing_gpu_subnet_id is set")
    return errors


def _check_install_addons(c: TrainingConfig) -> list[str]:
    if c.install_addons is None:
        return []
    if not c.existing_cluster:
        return ["install_addons: only with existing_cluster_name (a cluster this app creates gets all of them)"]
    names = _split(c.install_addons)
    errors = [
        f"install_addons: {name!r} is not one this app installs; allowed: {', '.join(INSTALLABLE)}"
        for name in names
        if name not in INSTALLABLE
    ]
    if KUEUE.chart in names and c.queueing_mode != "kueue":
        errors.append(
            f"install_addons: {KUEUE.chart} is this app's Kueue for compute=eks with queueing=kueue (on HyperPod the "
            f"task-governance add-on {TASK_GOVERNANCE_ADDON} brings its own); allowed here: "
            + ", ".join(n for n in INSTALLABLE if n != KUEUE.chart)
        )
    if TASK_GOVERNANCE_ADDON in names and c.queueing_mode != "task-governance":
        errors.append(f"install_addons: {TASK_GOVERNANCE_ADDON} needs compute=hyperpod and queueing=kueue")
    hyperpod_only = [name for name in names if name in HYPERPOD_ADDONS]
    if hyperpod_only and not (c.compute == "hyperpod" and c.uses_hyperpod_training_operator):
        errors.append(
            f"install_addons: {', '.join(hyperpod_only)} belong to the HyperPod training operator, which needs "
            "compute=hyperpod (and hyperpod_training_operator not false)"
        )
    return errors


def _check_queueing(c: TrainingConfig) -> list[str]:
    errors = _one_of("queueing", c.queueing, QUEUEING)
    if c.queueing_mode == "kueue" and c.system_instance_type not in SYSTEM_INSTANCE_TYPES:
        errors.append(
            f"system_instance_type: {c.system_instance_type!r} has no vCPU and memory figures for Kueue's quota of the "
            f"system nodes; allowed: {', '.join(SYSTEM_INSTANCE_TYPES)} (or queueing=none)"
        )
    if not _TEAM_NAME.match(c.hyperpod_team):
        errors.append(
            f"hyperpod_team: {c.hyperpod_team!r} is not allowed; allowed: 1-41 of a-z, 0-9 and '-', starting and "
            "ending with a letter or digit (the namespace hyperpod-ns-<team>)"
        )
    elif c.hyperpod_team != DEFAULT_HYPERPOD_TEAM and c.queueing_mode != "task-governance":
        errors.append("hyperpod_team: only with compute=hyperpod and queueing=kueue (HyperPod task governance)")
    return errors


def _check_operators(c: TrainingConfig) -> list[str]:
    errors = _one_of("operators", c.operators, OPERATOR_SOURCES)
    if c.operators == "aws-helm-stack" and c.endpoint_access == "private":
        errors.append(
            "operators: aws-helm-stack installs from a Lambda outside the VPC and needs the public API endpoint; "
            "with endpoint_access=private set operators=none and install the training operator yourself"
        )
    if c.operators == "none" and c.apply_jobs:
        errors.append("apply_jobs: the jobs are PyTorchJobs and operators=none installs no training operator")
    region = c.deploy_region
    if c.operators == "aws-helm-stack" and region and region not in HYPERPOD_REGIONS:
        errors.append(
            f"operators: aws-helm-stack loads AWS's Helm-chart stack from {HYPERPOD_SETUP_BUCKET.format(region=region)}"
            f", which exists only in SageMaker HyperPod regions and not in {region}; set "
            f"operators=none (and install the training operator yourself) or deploy to one of: "
            f"{', '.join(HYPERPOD_REGIONS)}"
        )
    return errors


def _check_observability(c: TrainingConfig) -> list[str]:
    errors = [f"alarm_email: {email!r} is not an email address" for email in c.alarm_emails if not _EMAIL.match(email)]
    if not 1 <= c.stall_percent <= 99:
        errors.append(f"stall_percent: {c.stall_percent} must lie in 1..99 (% of the recent median tokens/s)")
    if c.stall_minutes < 5 or c.stall_minutes % 5:
        errors.append(f"stall_minutes: {c.stall_minutes} must be a multiple of 5, >= 5 (the alarm period)")
    if not 1 <= c.fsx_free_alarm_percent <= 99:
        errors.append(f"fsx_free_alarm_percent: {c.fsx_free_alarm_percent} must lie in 1..99")
    return errors


def _check_hyperpod(c: TrainingConfig) -> list[str]:
    errors = _one_of("hyperpod_node_recovery", c.hyperpod_node_recovery, HYPERPOD_NODE_RECOVERY)
    if c.deploy_region and c.deploy_region not in HYPERPOD_REGIONS:
        errors.append(
            f"compute: hyperpod is not offered in {c.deploy_region}; set compute=eks or deploy to one of: "
            f"{', '.join(HYPERPOD_REGIONS)}"
        )
    unknown = [check for check in c.hyperpod_health_checks if check not in HYPERPOD_DEEP_HEALTH_CHECKS]
    if unknown:
        errors.append(
            f"hyperpod_deep_health_checks: unknown {', '.join(unknown)}; "
            f"allowed: {', '.join(HYPERPOD_DEEP_HEALTH_CHECKS)}"
        )
    if c.hyperpod_cpu_count < 0:
        errors.append(f"hyperpod_cpu_nodes: {c.hyperpod_cpu_nodes} must be >= 0")
    if c.capacity_reservation_id or c.gpu_capacity not in (None, "on-demand"):
        errors.append(
            "capacity_reservation_id: HyperPod takes reserved capacity as a training plan; "
            "set hyperpod_training_plan_arn instead"
        )
    if c.gpu_placement_group is not None:
        errors.append("gpu_placement_group: HyperPod places its instances itself; leave it unset with compute=hyperpod")
    plan = c.hyperpod_training_plan_arn
    if plan is not None and not _TRAINING_PLAN_ARN.match(plan):
        errors.append(
            f"hyperpod_training_plan_arn: {plan!r} is not a SageMaker training plan ARN such as "
            "arn:aws:sagemaker:us-east-1:123456789012:training-plan/my-plan"
        )
    pct = c.hyperpod_tiered_checkpointing_percent
    if pct is not None and not 1 <= pct <= 100:
        errors.append(f"hyperpod_tiered_checkpointing_percent: {pct} must lie in 1..100")
    errors += _one_of("hyperpod_node_provisioning", c.hyperpod_node_provisioning, HYPERPOD_NODE_PROVISIONING)
    if c.uses_hyperpod_training_operator:
        errors += _check_hyperpod_training_operator(c)
    return errors


def _check_hyperpod_training_operator(c: TrainingConfig) -> list[str]:
    """The operator add-on exists for some Kubernetes versions; its launcher for some torch releases."""
    errors: list[str] = []
    way_out = "or set hyperpod_training_operator=false to run Kubeflow PyTorchJobs"
    if c.hyperpod_cpu_count == 0:
        errors.append(
            "hyperpod_cpu_nodes: 0 leaves the HyperPod training operator's controller no node (it runs on the "
            f"HyperPod CPU instance group); allowed: 1 or more ({way_out})"
        )
    if c.kubernetes_version in KUBERNETES_VERSIONS and c.kubernetes_version not in HYPERPOD_TRAINING_OPERATOR_ADDONS:
        errors.append(
            f"kubernetes_version: {c.kubernetes_version!r} has no HyperPod training operator add-on; "
            f"allowed: {', '.join(HYPERPOD_TRAINING_OPERATOR_ADDONS)} ({way_out})"
        )
    torch = re.match(r"(\d+)\.(\d+)[.-]", c.dlc_image_tag)
    low, high = HYPERPOD_ELASTIC_AGENT_TORCH
    if torch and not low <= (int(torch[1]), int(torch[2])) < high:
        errors.append(
            f"dlc_image_tag: {c.dlc_image_tag!r} has PyTorch {torch[1]}.{torch[2]}, which the HyperPod elastic "
            f"agent (hyperpodrun) does not support; allowed: PyTorch {low[0]}.{low[1]} up to, not including, "
            f"{high[0]}.{high[1]} ({way_out})"
        )
    return errors


def _check_ray(c: TrainingConfig) -> list[str]:
    """The Ray version, and an explicit Ray image: it must say which Ray it holds, and hold torch."""
    if not _RAY_VERSION.fullmatch(c.ray_version):
        return [f"ray_version: {c.ray_version!r} must be a Ray release such as 2.60.0"]
    if tuple(map(int, c.ray_version.split("."))) < RAY_MIN_VERSION:
        minimum = ".".join(map(str, RAY_MIN_VERSION))
        return [f"ray_version: {c.ray_version} is older than {minimum} (KubeRay's token authentication, Ray Train v2)"]
    if c.ray_image is None:
        return []
    example = f"<account>.dkr.ecr.<region>.amazonaws.com/llm-infra-training:{c.dlc_image_tag}-ray{c.ray_version}"
    if not re.fullmatch(r"[\w./-]+:[\w.-]+", c.ray_image):
        return [f"ray_image: {c.ray_image!r} must be an image reference with a tag, e.g. {example}"]
    if c.ray_image.split(":", 1)[0].endswith("rayproject/ray"):
        return [
            f"ray_image: {c.ray_image!r} has neither torch nor the EFA libraries; build workloads/Dockerfile "
            f"(the DLC training image with Ray baked in), push it and name it here, e.g. {example}"
        ]
    tag = c.ray_image.rsplit(":", 1)[1]
    versions = _RAY_IN_TAG.findall(tag) or _LEADING_VERSION_IN_TAG.findall(tag)
    if c.ray_version not in versions:
        named = f"names Ray {', '.join(versions)}" if versions else "names no Ray version"
        return [
            f"ray_image: the tag of {c.ray_image!r} {named}; the cluster runs Ray {c.ray_version} (ray_version): "
            f"tag the image with the Ray it holds, e.g. {example}"
        ]
    return []
