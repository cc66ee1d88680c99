"""ClusterStack: the EKS cluster, its GPU nodes, the jobs' identities, the dashboard and alarms."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct, DependencyGroup, IDependable

from llm_infra.config import HYPERPOD_CPU_INSTANCE_TYPE, TrainingConfig
from llm_infra.constructs.gpu_node_group import GpuNodeGroup
from llm_infra.constructs.hugging_face_token import HuggingFaceToken
from llm_infra.constructs.hyperpod_cluster import HyperPodCluster, HyperPodInstanceGroup
from llm_infra.constructs.hyperpod_dependencies import HyperPodDependencies, chart_switches
from llm_infra.constructs.hyperpod_task_governance import TASK_GOVERNANCE_ADDON, HyperPodTaskGovernance
from llm_infra.constructs.hyperpod_training_operator import (
    CERT_MANAGER_ADDON,
    OPERATOR_ADDON,
    HyperPodTrainingOperator,
)
from llm_infra.constructs.kueue import kueue_helm_values
from llm_infra.constructs.lustre_storage import LUSTRE_PORTS
from llm_infra.constructs.training_cluster import ExistingTrainingCluster, TrainingCluster
from llm_infra.constructs.training_job_role import TrainingJobRole
from llm_infra.constructs.training_observability import NODE_AUTO_REPAIR_XIDS, TrainingObservability
from llm_infra.constructs.validation import ConstructValidationError
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.stacks.workloads import ClusterWorkloads, training_image_tag_prefix
from llm_infra.versions import KUBERAY_OPERATOR, KUEUE

# The construct ID of AWS's Helm-chart stack in this stack (`llm-infra preflight` finds the deployed one by it).
OPERATORS_ID = "Operators"


class ClusterStack(cdk.Stack):
    """The EKS cluster with its GPU capacity (managed node group or HyperPod), the operators and charts
    applied at deploy (on HyperPod also the HyperPod training operator, unless configured off), the
    jobs' Pod Identity roles, the dashboard and alarms."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: TrainingConfig,
        vpc: ec2.IVpc,
        control_plane_subnets: list[ec2.ISubnet],
        gpu_subnet: ec2.ISubnet,
        efa_security_group: ec2.ISecurityGroup,
        lustre: ec2.IConnectable,
        training_access_policy: iam.IManagedPolicy,
        hf_token: HuggingFaceToken,
        workloads: WorkloadValues,
        **kwargs: object,
    ) -> None:
        if config.image_asset:  # the built image's tag names its Ray: ray2.60.0-<asset hash>
            kwargs.setdefault(
                "synthesizer",
                cdk.DefaultStackSynthesizer(docker_tag_prefix=training_image_tag_prefix(config.ray_version)),
            )
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.training_cluster: TrainingCluster | ExistingTrainingCluster
        if config.existing_cluster_name:
            # AWS's HyperPod template: CreateEKSClusterStack false, EKSClusterName and SecurityGroupIds.
            assert config.existing_cluster_security_group_id
            self.training_cluster = TrainingCluster.from_existing(
                self,
                "Eks",
                cluster_name=config.existing_cluster_name,
                cluster_security_group_id=config.existing_cluster_security_group_id,
                vpc=vpc,
                subnets=control_plane_subnets,
                kubernetes_version=config.kubernetes_version,
                install=config.installs,
                system_instance_type=config.system_instance_type,
                system_nodes=config.system_nodes,
                admin_role_arn=config.admin_role_arn,
                gpu_instance_types=[gpu_instance_type(config)],
                max_nodes=config.max_cluster_nodes,
            )
        else:
            self.training_cluster = TrainingCluster(
                self,
                "Eks",
                vpc=vpc,
                subnets=control_plane_subnets,
                kubernetes_version=config.kubernetes_version,
                system_instance_type=config.system_instance_type,
                system_nodes=config.system_nodes,
                endpoint_access=config.endpoint_access,
                admin_role_arn=config.admin_role_arn,
                gpu_instance_types=[gpu_instance_type(config)],
                max_nodes=config.max_cluster_nodes,
            )
        self._allow_lustre_from_cluster_nodes(lustre)
        self.operators: HyperPodDependencies | None = None
        if config.operators == "aws-helm-stack":
            self.operators = HyperPodDependencies(
                self,
                OPERATORS_ID,
                cluster_name=self.training_cluster.cluster_name,
                switches=chart_switches(hyperpod=config.compute == "hyperpod"),
                resource_name_prefix=config.project_name,
            )
            # The operators' pods need nodes; the CRDs must exist before any object that uses them.
            self.operators.node.add_dependency(self.training_cluster.system_nodegroup)
        self.gpu_nodes: GpuNodeGroup | None = None
        self.hyperpod: HyperPodCluster | None = None
        self.training_operator: HyperPodTrainingOperator | None = None
        self.task_governance: HyperPodTaskGovernance | None = None
        # Gang admission: this app's Kueue on plain EKS (unless the cluster's owner runs it: install_addons).
        self.kueue = (
            self.training_cluster.add_pinned_helm_chart("Kueue", KUEUE, kueue_helm_values())
            if KUEUE.chart in config.installs
            else None
        )
        if config.compute == "hyperpod":
            self.hyperpod = self._hyperpod(config, gpu_subnet, efa_security_group)
            cdk.CfnOutput(self, "HyperPodClusterName", value=self.hyperpod.cluster_name)
            # On an existing cluster only when install_addons names it (its owner may run it).
            if config.uses_hyperpod_training_operator and OPERATOR_ADDON in config.installs:
                self.training_operator = HyperPodTrainingOperator(
                    self,
                    "HyperPodTrainingOperator",
                    training_cluster=self.training_cluster,
                    hyperpod=self.hyperpod,
                    cert_manager=CERT_MANAGER_ADDON in config.installs,
                )
            if config.queueing_mode == "task-governance":
                self.task_governance = HyperPodTaskGovernance(
                    self,
                    "TaskGovernance",
                    training_cluster=self.training_cluster,
                    hyperpod=self.hyperpod,
                    team=config.hyperpod_team,
                    addon=TASK_GOVERNANCE_ADDON in config.installs,
                )
                if self.training_operator is not None and self.task_governance.addon is not None:
                    # The training operator works with task governance v1.3.0-eksbuild.1 or later only
                    # (docs: sagemaker-eks-operator-troubleshooting): install it on the pinned one.
                    self.training_operator.addon.node.add_dependency(self.task_governance.addon)
        else:
            self.gpu_nodes = self._gpu_node_group(config, gpu_subnet, efa_security_group)
        self.job_role = TrainingJobRole(
            self,
            "TrainingJob",
            cluster=self.training_cluster,
            access_policies=[training_access_policy],
            namespace=workloads.namespace,
            service_account=workloads.service_account,
        )
        # The data-preparation Job's identity: read the Hugging Face token, nothing else (it reads
        # and writes the dataset through FSx).
        self.data_prep_role = self.training_cluster.pod_identity_role(
            "DataPrep",
            namespace=workloads.namespace,
            service_account=workloads.data_prep_service_account,
            description="Data-preparation Job: read the Hugging Face token secret",
        )
        hf_token.grant_read(self.data_prep_role)
        self.workloads = ClusterWorkloads(
            self,
            "Workloads",
            training_cluster=self.training_cluster,
            values=workloads,
            apply_jobs=config.apply_jobs,
            training_operator=self._job_operators(),
            image_asset=config.image_asset,
            kuberay_operator=KUBERAY_OPERATOR.chart in config.installs,
            queues=self._queues(),
        )
        if self.workloads.training_image is not None:  # k8s_manifests/render.py reads it for the Ray pods
            cdk.CfnOutput(self, "TrainingImageUri", value=self.workloads.training_image.image_uri)
        self.observability = self._observability(config, workloads)
        cdk.CfnOutput(self, "ClusterName", value=self.training_cluster.cluster_name)
        cdk.CfnOutput(self, "ClusterArn", value=self.training_cluster.cluster_arn)
        cdk.CfnOutput(self, "TrainingJobRoleArn", value=self.job_role.role_arn)
        cdk.CfnOutput(
            self,
            "UpdateKubeconfig",
            value=f"aws eks update-kubeconfig --region {self.region} --name {self.training_cluster.cluster_name}",
        )

    def _queues(self) -> IDependable | None:
        """What the jobs' queue needs: our Kueue (its CRDs and webhooks), or task governance's add-on and the
        team's compute allocation (its namespace and LocalQueue)."""
        if self.kueue is not None:
            return self.kueue
        if self.task_governance is not None:
            return DependencyGroup(self.task_governance.compute_quota)
        return None

    def _job_operators(self) -> IDependable | None:
        """What applied jobs wait for: the Kubeflow training operator (PyTorchJob), and the HyperPod
        training operator (HyperPodPyTorchJob) where it is on."""
        installers: list[IDependable] = [self.operators] if self.operators is not None else []
        if self.training_operator is not None:
            installers.append(self.training_operator.addon)
        return DependencyGroup(*installers) if installers else None

    def _allow_lustre_from_cluster_nodes(self, lustre: ec2.IConnectable) -> None:
        """Lustre between the file system and every node that carries the cluster security group:
        system nodes (the data-prep Job, the Ray head and Redis mount FSx there), GPU nodes' primary
        interface, HyperPod. Both ways, as the FSx guide asks of every client group ("Lustre client VPC
        security group rules"): clients reach the servers, and the servers reach back (reconnects).

        The rules live in this stack, on the clients' side: the storage stack comes first and cannot
        name this group. They are what ``allow_lustre_from_clients_side(cluster_group, lustre)`` makes,
        written as L1 rules under the logical IDs deployed stacks already hold (CDK's own IDs for the
        same rules differ, and a renamed rule is created before the old one is deleted, which EC2
        refuses as a duplicate).
        """
        cluster_sg = self.training_cluster.cluster_security_group
        for group_index, fsx_group in enumerate(lustre.connections.security_groups):
            suffix = "" if group_index == 0 else f"Group{group_index}-"
            directions = (
                (
                    f"LustreFromClusterNodes{suffix}",
                    fsx_group,
                    cluster_sg,
                    "Lustre clients: EKS cluster security group (system, GPU and HyperPod nodes)",
                ),
                (
                    f"LustreToClusterNodes{suffix}",
                    cluster_sg,
                    fsx_group,
                    "Lustre servers to their clients on the EKS cluster security group",
                ),
            )
            for name, group, source, description in directions:
                for index, port in enumerate(LUSTRE_PORTS):
                    ports = port.to_rule_json()
                    ec2.CfnSecurityGroupIngress(
                        self,
                        f"{name}{index}",
                        group_id=group.security_group_id,
                        source_security_group_id=source.security_group_id,
                        ip_protocol="tcp",
                        from_port=ports["fromPort"],
                        to_port=ports["toPort"],
                        description=description,
                    )

    def _observability(self, config: TrainingConfig, workloads: WorkloadValues) -> TrainingObservability:
        if workloads.fsx is None:
            raise ConstructValidationError(
                self, "workloads: the cluster stack needs the FSx volume's ids (workload_values)"
            )
        dashboard_name = f"{config.project_name}-training"
        observability = TrainingObservability(
            self,
            "Observability",
            cluster_name=self.training_cluster.cluster_name,
            application_log_group=self.training_cluster.application_log_group,
            file_system_id=workloads.fsx.file_system_id,
            fsx_storage_gib=config.fsx_storage_gib,
            metric_namespace=f"LLMInfra/{config.project_name}",
            hyperpod=config.compute == "hyperpod",
            stall_fraction=config.stall_percent / 100,
            stall_minutes=config.stall_minutes,
            fsx_free_percent=config.fsx_free_alarm_percent,
            alarm_emails=config.alarm_emails,
            dashboard_name=dashboard_name,
            # On EKS GPU nodes the node monitoring agent marks these Xids and node auto repair acts on them;
            # HyperPod's nodes are its own health agent's (the agent's chart keeps off them).
            repaired_xids=NODE_AUTO_REPAIR_XIDS
            if config.compute == "eks" and "eks-node-monitoring-agent" in config.installs
            else (),
        )
        cdk.CfnOutput(self, "AlarmTopicArn", value=observability.alarm_topic.topic_arn)
        cdk.CfnOutput(
            self,
            "DashboardUrl",
            value=f"https://{self.region}.console.aws.amazon.com/cloudwatch/home?region={self.region}"
            f"#dashboards:name={dashboard_name}",
        )
        return observability

    def _gpu_node_group(
        self, config: TrainingConfig, gpu_subnet: ec2.ISubnet, efa_security_group: ec2.ISecurityGroup
    ) -> GpuNodeGroup:
        return GpuNodeGroup(
            self,
            "GpuNodes",
            cluster=self.training_cluster.cluster,
            subnet=gpu_subnet,
            profile=config.gpu_profile,
            security_groups=[self.training_cluster.cluster_security_group],
            efa_security_group=efa_security_group if config.efa_enabled else None,
            nic_layout=config.nic_layout,
            desired_size=config.gpu_nodes,
            min_size=config.gpu_min,
            max_size=config.gpu_max,
            capacity=config.capacity,
            capacity_reservation_id=config.capacity_reservation_id,
            root_volume_gib=config.gpu_root_volume_gib,
            hugepages_2mib=config.hugepages_2mib,
            placement_group=config.placement_group,
        )

    def _hyperpod(
        self, config: TrainingConfig, gpu_subnet: ec2.ISubnet, efa_security_group: ec2.ISecurityGroup
    ) -> HyperPodCluster:
        groups = [
            HyperPodInstanceGroup(
                name="gpu",
                instance_type=gpu_instance_type(config),
                count=config.gpu_nodes,
                storage_volumes_gib=(config.gpu_root_volume_gib,),
                deep_health_checks=config.hyperpod_health_checks,
                training_plan_arn=config.hyperpod_training_plan_arn,
                lifecycle_environment={"HUGEPAGES_2MIB": str(config.hugepages_2mib)},  # for EFA's libfabric
            )
        ]
        if config.hyperpod_cpu_count:
            groups.append(
                HyperPodInstanceGroup(
                    name="cpu",
                    instance_type=HYPERPOD_CPU_INSTANCE_TYPE,
                    count=config.hyperpod_cpu_count,
                    storage_volumes_gib=(),
                    deep_health_checks=(),
                    gpu=False,
                    lifecycle_environment={"HUGEPAGES_2MIB": "0"},  # no EFA: its 32 GiB stay for pods
                )
            )
        hyperpod = HyperPodCluster(
            self,
            "HyperPod",
            cluster_name=f"{config.project_name}-hyperpod",
            cluster=self.training_cluster.cluster,
            subnet=gpu_subnet,
            security_groups=[efa_security_group, self.training_cluster.cluster_security_group],
            instance_groups=groups,
            node_recovery=config.hyperpod_node_recovery,
            continuous_provisioning=config.hyperpod_node_provisioning == "continuous",
            tiered_checkpointing_memory_percent=config.hyperpod_tiered_checkpointing_percent,
        )
        if self.operators is not None:
            # AWS: install the dependencies before the HyperPod cluster joins the EKS cluster.
            hyperpod.node.add_dependency(self.operators)
        return hyperpod


def gpu_instance_type(config: TrainingConfig) -> str:
    """The GPU nodes' ``node.kubernetes.io/instance-type``: ``ml.``-prefixed on HyperPod."""
    return f"ml.{config.gpu_instance_type}" if config.compute == "hyperpod" else config.gpu_instance_type
