"""HyperPodCluster: a SageMaker HyperPod cluster orchestrated by our EKS cluster (L2 over CfnCluster)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_deployment as s3_deployment
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from llm_infra.config import (
    DEFAULT_GPU_INSTANCE_TYPE,
    DEFAULT_GPU_NODES,
    DEFAULT_GPU_ROOT_VOLUME_GIB,
    DEFAULT_HYPERPOD_NODE_RECOVERY,
)
from llm_infra.constructs.nag import (
    CDK_S3_READ_FINDINGS,
    CDK_S3_WRITE_FINDINGS,
    acknowledge,
    asset_bucket_objects_finding,
    bucket_objects_finding,
    use_aws_managed_policies,
)
from llm_infra.constructs.training_bucket import TrainingBucket
from llm_infra.constructs.validation import ConstructValidationError, is_token, require_literal
from llm_infra.instance_types import INSTANCE_PROFILES, instance_profile, ultraserver_refusal
from llm_infra.node_labels import EFA_LABEL, GPU_TAINT_KEY, NODE_ROLE_LABEL
from llm_infra.service_limits import (
    HYPERPOD_DEEP_HEALTH_CHECK_FAMILIES,
    HYPERPOD_DEEP_HEALTH_CHECKS,
    HYPERPOD_NODE_RECOVERY,
)

LIFECYCLE_SCRIPTS = Path(__file__).resolve().parent / "hyperpod_lifecycle"
# The tag the HyperPod training operator needs on the cluster. AWS's install guide for the add-on
# (docs: sagemaker-eks-operator-install, "tag your HyperPod cluster with SageMaker:true ... otherwise
# the installation will fail"); AWS's HyperPod Terraform module tags the cluster the same way
# (awsome-distributed-ai, hyperpod-eks-tf/modules/hyperpod_cluster); the managed policy
# AmazonSageMakerHyperPodTrainingOperatorAccess is reported to condition on aws:ResourceTag/SageMaker.
SAGEMAKER_TAG = cdk.CfnTag(key="SageMaker", value="true")
CPU_INSTANCE_TYPES = ("ml.m5.xlarge", "ml.m5.2xlarge", "ml.m5.4xlarge", "ml.c5.2xlarge", "ml.c5.4xlarge")
HYPERPOD_INSTANCE_TYPES = tuple(sorted(f"ml.{name}" for name in INSTANCE_PROFILES)) + CPU_INSTANCE_TYPES
# SageMaker CreateCluster: TrainingPlanArn, arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:training-plan/.*
TRAINING_PLAN_ARN = re.compile(r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]*:[0-9]{12}:training-plan/.+$")
# SageMaker CreateCluster: ClusterName, ^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$
CLUSTER_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")


@dataclass(frozen=True)
class HyperPodInstanceGroup:
    """One HyperPod instance group. ``storage_volumes_gib``: at most one EBS volume (HyperPod's limit).

    GPU groups (``gpu=True``) carry the ``nvidia.com/gpu`` NoSchedule taint; CPU groups no taint. Each
    node is labelled ``llm-infra.aws/node-role`` (``node_role``: ``gpu`` or ``cpu`` unless ``labels``
    sets it) and ``llm-infra.aws/efa``, plus ``labels``. ``lifecycle_environment``: this group's
    settings for the lifecycle scripts, over the cluster's (e.g. ``HUGEPAGES_2MIB``).
    """

    name: str
    instance_type: str = f"ml.{DEFAULT_GPU_INSTANCE_TYPE}"
    count: int = DEFAULT_GPU_NODES
    threads_per_core: int = 1
    storage_volumes_gib: tuple[int, ...] = (DEFAULT_GPU_ROOT_VOLUME_GIB,)
    deep_health_checks: tuple[str, ...] = HYPERPOD_DEEP_HEALTH_CHECKS
    training_plan_arn: str | None = None
    image_id: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    gpu: bool = True
    lifecycle_environment: dict[str, str] = field(default_factory=dict)

    @property
    def node_role(self) -> str:
        """The nodes' ``llm-infra.aws/node-role`` label."""
        return self.labels.get(NODE_ROLE_LABEL, "gpu" if self.gpu else "cpu")

    def validate(self) -> None:
        """Raise ``ValueError`` naming the group's bad field; the cluster raises it scoped to itself.
        ``count``, sizes and ``training_plan_arn`` may be tokens; ``name`` and ``instance_type`` may not
        (they decide labels, taints, EFA and the lifecycle upload)."""
        where = f"instance_groups[{self.name}]"
        for prop, value in (("name", self.name), ("instance_type", self.instance_type)):
            if is_token(value):
                raise ValueError(f"{where}.{prop}: must be known at synth, not a token (labels, EFA, uploads)")
        if not self.instance_type.startswith("ml."):
            raise ValueError(
                f"{where}.instance_type: {self.instance_type!r} must carry the SageMaker 'ml.' prefix, "
                f"e.g. ml.{self.instance_type}"
            )
        refusal = ultraserver_refusal(self.instance_type)
        if refusal:
            raise ValueError(f"{where}.instance_type: {refusal}; allowed: " + ", ".join(HYPERPOD_INSTANCE_TYPES))
        if self.instance_type not in HYPERPOD_INSTANCE_TYPES:
            raise ValueError(
                f"{where}.instance_type: {self.instance_type!r} is not supported; allowed: "
                + ", ".join(HYPERPOD_INSTANCE_TYPES)
            )
        if self.gpu and self.instance_type.removeprefix("ml.") not in INSTANCE_PROFILES:
            raise ValueError(f"{where}.gpu: {self.instance_type} has no GPUs; set gpu=False")
        if not is_token(self.count) and self.count < 1:
            raise ValueError(f"{where}.count: {self.count} must be >= 1")
        if self.threads_per_core not in (1, 2):
            raise ValueError(f"{where}.threads_per_core: {self.threads_per_core} is not allowed; allowed: 1, 2")
        if len(self.storage_volumes_gib) > 1:
            raise ValueError(
                f"{where}.storage_volumes_gib: HyperPod allows one storage config per instance group, "
                f"got {len(self.storage_volumes_gib)}"
            )
        if any(not is_token(size) and not 1 <= size <= 16384 for size in self.storage_volumes_gib):
            raise ValueError(f"{where}.storage_volumes_gib: sizes must lie in 1..16384 GiB")
        unknown = [check for check in self.deep_health_checks if check not in HYPERPOD_DEEP_HEALTH_CHECKS]
        if unknown:
            raise ValueError(
                f"{where}.deep_health_checks: unknown {', '.join(unknown)}; "
                f"allowed: {', '.join(HYPERPOD_DEEP_HEALTH_CHECKS)}"
            )
        plan = self.training_plan_arn
        if plan is not None and not is_token(plan) and not TRAINING_PLAN_ARN.match(plan):
            raise ValueError(
                f"{where}.training_plan_arn: {plan!r} is not a SageMaker training plan ARN such as "
                "arn:aws:sagemaker:us-east-1:123456789012:training-plan/my-plan"
            )
        family = self.instance_type.removeprefix("ml.").split(".")[0]
        if self.deep_health_checks and family not in HYPERPOD_DEEP_HEALTH_CHECK_FAMILIES:
            raise ValueError(
                f"{where}.deep_health_checks: {self.instance_type} does not support deep health checks "
                f"(supported families: {', '.join(HYPERPOD_DEEP_HEALTH_CHECK_FAMILIES)}); pass ()"
            )


class HyperPodCluster(Construct):
    """SageMaker HyperPod with EKS as its orchestrator.

    - ``Orchestrator.Eks.ClusterArn`` points at the given EKS cluster; ``NodeRecovery: Automatic``
      by default, so HyperPod reboots or replaces instances that its health-monitoring agent or
      the deep health checks (``InstanceStress``, ``InstanceConnectivity``) find faulty;
    - ``NodeProvisioningMode: Continuous`` by default (``continuous_provisioning``): instance groups
      stay InService while they scale, HyperPod provisions what capacity it gets and keeps retrying
      the rest, and ``BatchAddClusterNodes`` works (it needs this mode); ``False`` leaves the
      property out, the standard all-or-nothing scaling;
    - ``VpcConfig``: the GPU subnet and the given security groups (the EFA group among them);
    - ``instance_groups`` (attribute): the groups, each with its labels and taints
      (``KubernetesConfig``); HyperPod adds its own labels, ``sagemaker.amazonaws.com/compute-type``
      among them;
    - lifecycle scripts from ``hyperpod_lifecycle/``, every file of the folder plus ``lifecycle.env``
      (``lifecycle_environment`` with the group's own over it), uploaded by ``cdk deploy`` for each
      instance group to ``hyperpod/lifecycle/<group>/`` in a bucket of the construct and referenced by
      that group's ``LifeCycleConfig``;
    - an execution role that trusts SageMaker, with AmazonSageMakerClusterInstanceRolePolicy plus
      what AWS's reference execution role grants, scoped as it scopes: ENI mutations on this
      account's instances and ENIs and the cluster's VPC, subnet and security groups, tags on ENIs,
      describe and ECR reads, Pod Identity, ``cloudwatch:DescribeAlarms``; listing the lifecycle
      bucket and reading the lifecycle prefix; HyperPod itself creates its EKS access entry;
    - optional managed tiered checkpointing (``TieredStorageConfig``);
    - the tag ``SageMaker=true``, which the HyperPod training operator's install and its managed
      policy require (:data:`SAGEMAKER_TAG`).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        subnet: ec2.ISubnet,
        security_groups: list[ec2.ISecurityGroup],
        instance_groups: list[HyperPodInstanceGroup],
        node_recovery: str = DEFAULT_HYPERPOD_NODE_RECOVERY,
        continuous_provisioning: bool = True,
        tiered_checkpointing_memory_percent: int | None = None,
        cluster_name: str,
        lifecycle_scripts: Path = LIFECYCLE_SCRIPTS,
        lifecycle_environment: dict[str, str] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if not instance_groups:
            raise ConstructValidationError(self, "instance_groups: at least one instance group is required")
        names = [group.name for group in instance_groups]
        if len(set(names)) != len(names):
            raise ConstructValidationError(self, f"instance_groups: names must be unique, got {names}")
        for group in instance_groups:
            try:
                group.validate()
            except ValueError as err:
                raise ConstructValidationError(self, str(err)) from None
        self.instance_groups = tuple(instance_groups)
        require_literal(self, "node_recovery", node_recovery, "one of two values, checked here")
        if node_recovery not in HYPERPOD_NODE_RECOVERY:
            raise ConstructValidationError(
                self, f"node_recovery: {node_recovery!r} is not allowed; allowed: {', '.join(HYPERPOD_NODE_RECOVERY)}"
            )
        pct = tiered_checkpointing_memory_percent
        if pct is not None and not is_token(pct) and not 1 <= pct <= 100:
            raise ConstructValidationError(self, f"tiered_checkpointing_memory_percent: {pct} must lie in 1..100")
        if not is_token(cluster_name) and not CLUSTER_NAME.match(cluster_name):
            raise ConstructValidationError(
                self, f"cluster_name: {cluster_name!r} must be 1-63 letters, digits and inner hyphens"
            )
        if not (lifecycle_scripts / "on_create.sh").is_file():
            raise ConstructValidationError(self, f"lifecycle_scripts: {lifecycle_scripts} has no on_create.sh")

        lifecycle_bucket = TrainingBucket(self, "Lifecycle")
        self.lifecycle_bucket = lifecycle_bucket.bucket
        self.lifecycle_prefix = "hyperpod/lifecycle/"
        deployments = {
            group.name: self._upload_lifecycle(
                group, lifecycle_scripts, {**(lifecycle_environment or {}), **group.lifecycle_environment}
            )
            for group in instance_groups
        }
        self._acknowledge_bucket_deployment()
        self.execution_role = self._execution_role(cluster, lifecycle_bucket, subnet, security_groups)
        # No access entry here: HyperPod creates the execution role's entry itself ("This is created by
        # HyperPod on your behalf", SageMaker API ClusterMetadata.EksRoleAccessEntries); a second one
        # from this stack would fail the create with a conflict.

        self.resource = sagemaker.CfnCluster(
            self,
            "Resource",
            cluster_name=cluster_name,
            orchestrator=sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(cluster_arn=cluster.cluster_arn)
            ),
            node_recovery=node_recovery,
            # The API's only value; absent = standard scaling (SageMaker API ClusterNodeProvisioningMode).
            node_provisioning_mode="Continuous" if continuous_provisioning else None,
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                subnets=[subnet.subnet_id],
                security_group_ids=[sg.security_group_id for sg in security_groups],
            ),
            instance_groups=[self._instance_group(group) for group in instance_groups],
            tiered_storage_config=(
                sagemaker.CfnCluster.TieredStorageConfigProperty(
                    mode="Enable", instance_memory_allocation_percentage=tiered_checkpointing_memory_percent
                )
                if tiered_checkpointing_memory_percent
                else None
            ),
            tags=[SAGEMAKER_TAG],
        )
        # Nodes download the scripts at creation: the uploads must finish first.
        self.resource.node.add_dependency(*deployments.values())

    @property
    def cluster_arn(self) -> str:
        return self.resource.attr_cluster_arn

    @property
    def cluster_name(self) -> str:
        assert self.resource.cluster_name is not None
        return self.resource.cluster_name

    def group_lifecycle_prefix(self, group_name: str) -> str:
        """The key prefix of ``group_name``'s lifecycle scripts in :attr:`lifecycle_bucket`."""
        return f"{self.lifecycle_prefix}{group_name}/"

    def _upload_lifecycle(
        self, group: HyperPodInstanceGroup, scripts: Path, environment: dict[str, str]
    ) -> s3_deployment.BucketDeployment:
        """The scripts and the group's ``lifecycle.env`` (sourced by on_create.sh) under its own prefix."""
        settings = "".join(f"{key}={value}\n" for key, value in sorted(environment.items()))
        return s3_deployment.BucketDeployment(
            self,
            f"LifecycleScripts-{group.name}",
            sources=[
                s3_deployment.Source.asset(str(scripts)),
                s3_deployment.Source.data("lifecycle.env", settings),
            ],
            destination_bucket=self.lifecycle_bucket,
            destination_key_prefix=self.group_lifecycle_prefix(group.name),
            prune=True,
        )

    def _instance_group(self, group: HyperPodInstanceGroup) -> sagemaker.CfnCluster.ClusterInstanceGroupProperty:
        efa = group.gpu and instance_profile(group.instance_type).efa_supported
        labels = {EFA_LABEL: str(efa).lower(), **group.labels, NODE_ROLE_LABEL: group.node_role}
        taints = (
            [sagemaker.CfnCluster.ClusterKubernetesTaintProperty(key=GPU_TAINT_KEY, value="true", effect="NoSchedule")]
            if group.gpu
            else None
        )
        return sagemaker.CfnCluster.ClusterInstanceGroupProperty(
            instance_group_name=group.name,
            instance_type=group.instance_type,
            instance_count=group.count,
            execution_role=self.execution_role.role_arn,
            life_cycle_config=sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(
                source_s3_uri=f"s3://{self.lifecycle_bucket.bucket_name}/{self.group_lifecycle_prefix(group.name)}",
                on_create="on_create.sh",
            ),
            threads_per_core=group.threads_per_core,
            instance_storage_configs=[
                sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty(
                    ebs_volume_config=sagemaker.CfnCluster.ClusterEbsVolumeConfigProperty(volume_size_in_gb=size)
                )
                for size in group.storage_volumes_gib
            ]
            or None,
            on_start_deep_health_checks=list(group.deep_health_checks) or None,
            training_plan_arn=group.training_plan_arn,
            image_id=group.image_id,
            kubernetes_config=sagemaker.CfnCluster.ClusterKubernetesConfigProperty(labels=labels, taints=taints),
        )

    def _execution_role(
        self,
        cluster: eks.ICluster,
        lifecycle_bucket: TrainingBucket,
        subnet: ec2.ISubnet,
        security_groups: list[ec2.ISecurityGroup],
    ) -> iam.Role:
        """AWS's reference execution role (aws/sagemaker-hyperpod-cluster-setup,
        eks/cloudformation/sagemaker-iam-role-template.yaml L178-572), scoped as it scopes: ENI mutations
        on this account's and region's instances and ENIs plus this cluster's VPC, subnet and security
        groups; tags on ENIs only; only the describe, ECR and DescribeAlarms reads on ``*``."""
        role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description="HyperPod instances: join the EKS cluster, manage their ENIs, pull images",
        )
        use_aws_managed_policies(
            role,
            ["AmazonSageMakerClusterInstanceRolePolicy"],
            "HyperPod's documented, AWS-maintained instance policy (health agent, logs, node registration).",
        )
        stack = cdk.Stack.of(self)

        def ec2_arn(resource: str, name: str) -> str:
            return stack.format_arn(service="ec2", resource=resource, resource_name=name)

        instances, interfaces = ec2_arn("instance", "*"), ec2_arn("network-interface", "*")
        # AWS's template L197-202 (Attach on instance/* and network-interface/*); Detach takes the same two
        # resource types (Service Authorization Reference, Amazon EC2: DetachNetworkInterface), where AWS's
        # template has it on * (L236-242) besides the subnet and security-group policies (L296).
        role.add_to_policy(
            iam.PolicyStatement(
                sid="AttachInterfaces",
                actions=["ec2:AttachNetworkInterface", "ec2:DetachNetworkInterface"],
                resources=[instances, interfaces],
            )
        )
        # AWS's template L223-235 (instance/*, network-interface/*, the VPC) and its per-subnet and
        # per-security-group policies (L283-572): CreateNetworkInterface is authorized on the new ENI, its
        # subnet and each of its security groups, here the cluster's VpcConfig.
        role.add_to_policy(
            iam.PolicyStatement(
                sid="InterfacesInTheClusterSubnet",
                actions=[
                    "ec2:AssignPrivateIpAddresses",
                    "ec2:CreateNetworkInterface",
                    "ec2:CreateNetworkInterfacePermission",
                    "ec2:DeleteNetworkInterface",
                    "ec2:DeleteNetworkInterfacePermission",
                    "ec2:ModifyNetworkInterfaceAttribute",
                    "ec2:UnassignPrivateIpAddresses",
                ],
                resources=[
                    instances,
                    interfaces,
                    ec2_arn("vpc", cluster.vpc.vpc_id),
                    ec2_arn("subnet", subnet.subnet_id),
                    *(ec2_arn("security-group", sg.security_group_id) for sg in security_groups),
                ],
            )
        )
        # AWS's template L212-217 and L256-259: the VPC CNI tags the ENIs it manages (AWS: any region and
        # account; here this stack's, where the ENIs live).
        role.add_to_policy(iam.PolicyStatement(sid="TagInterfaces", actions=["ec2:CreateTags"], resources=[interfaces]))
        # AWS's template L203-211 and L236-242. Describe* actions support no resource-level permissions
        # (Service Authorization Reference, Amazon EC2: no resource types for them), so they stay on *.
        role.add_to_policy(
            iam.PolicyStatement(
                sid="DescribeTheNetwork",
                actions=[
                    "ec2:DescribeDhcpOptions",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeInstances",
                    "ec2:DescribeNetworkInterfaces",
                    "ec2:DescribeSecurityGroups",
                    "ec2:DescribeSubnets",
                    "ec2:DescribeTags",
                    "ec2:DescribeVpcs",
                ],
                resources=["*"],
            )
        )
        # AWS's template L243-250: reads, on * (GetAuthorizationToken takes no resource; the images come
        # from AWS's DLC registry and the account's own).
        role.add_to_policy(
            iam.PolicyStatement(
                sid="PullImages",
                actions=[
                    "ecr:GetAuthorizationToken",
                    "ecr:BatchCheckLayerAvailability",
                    "ecr:BatchGetImage",
                    "ecr:GetDownloadUrlForLayer",
                ],
                resources=["*"],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(sid="ReadAlarms", actions=["cloudwatch:DescribeAlarms"], resources=["*"])
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="PodIdentity",
                actions=["eks-auth:AssumeRoleForPodIdentity"],
                resources=[cluster.cluster_arn],
            )
        )
        # AWS's template L260-272: s3:ListBucket on the lifecycle bucket without a prefix condition
        # (HyperPod may list from the bucket's root when it checks SourceS3Uri; the bucket holds only the
        # lifecycle scripts), objects read below the lifecycle prefix.
        role.add_to_policy(
            iam.PolicyStatement(
                sid="ListLifecycleBucket", actions=["s3:ListBucket"], resources=[lifecycle_bucket.bucket_arn]
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="ReadLifecycleScripts",
                actions=["s3:GetObject"],
                resources=[lifecycle_bucket.bucket.arn_for_objects(f"{self.lifecycle_prefix}*")],
            )
        )
        acknowledge(
            role,
            "IAM5",
            "EC2 describe, ECR and DescribeAlarms reads take no resource ARNs or pull from any registry (as in "
            "AWS's reference HyperPod execution role); ENI actions are on this account's and region's instances "
            "and ENIs (each is created at run time); object reads are limited to the lifecycle prefix.",
            findings=[
                "Resource::*",
                "Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:instance/*",
                "Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:network-interface/*",
                bucket_objects_finding(lifecycle_bucket.bucket, f"{self.lifecycle_prefix}*"),
            ],
        )
        return role

    def _acknowledge_bucket_deployment(self) -> None:
        """BucketDeployment's singleton Lambda lives at the stack root; acknowledge exactly its findings."""
        stack = cdk.Stack.of(self)
        handler = next(
            child for child in stack.node.children if child.node.id.startswith("Custom::CDKBucketDeployment")
        )
        acknowledge(
            handler,
            "IAM4",
            "BucketDeployment's Lambda uses the AWS-maintained basic execution policy for its logs.",
            findings=["Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"],
        )
        acknowledge(handler, "L1", "BucketDeployment's Lambda runtime is pinned by aws-cdk-lib.")
        acknowledge(
            handler,
            "IAM5",
            "BucketDeployment copies the lifecycle-script asset into the lifecycle bucket: CDK's grants "
            "on the asset bucket and the destination bucket use object wildcards.",
            findings=[
                *CDK_S3_READ_FINDINGS,
                *CDK_S3_WRITE_FINDINGS,
                asset_bucket_objects_finding(self),
                bucket_objects_finding(self.lifecycle_bucket, "*"),
            ],
        )
