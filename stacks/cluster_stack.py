"""ClusterStack: the EKS cluster, its GPU nodes and the training job's identity."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from llm_infra.constructs.gpu_node_group import GpuNodeGroup
from llm_infra.constructs.training_cluster import TrainingCluster
from llm_infra.constructs.training_job_role import TrainingJobRole

from constructs import Construct
from llm_infra.config import TrainingConfig


class ClusterStack(cdk.Stack):
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
        training_access_policy: iam.IManagedPolicy,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
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
        )
        self.gpu_nodes = GpuNodeGroup(
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
        )
        self.job_role = TrainingJobRole(
            self,
            "TrainingJob",
            cluster=self.training_cluster,
            access_policies=[training_access_policy],
        )
        cdk.CfnOutput(self, "ClusterName", value=self.training_cluster.cluster_name)
        cdk.CfnOutput(self, "ClusterArn", value=self.training_cluster.cluster_arn)
        cdk.CfnOutput(self, "TrainingJobRoleArn", value=self.job_role.role_arn)
        cdk.CfnOutput(
            self,
            "UpdateKubeconfig",
            value=f"aws eks update-kubeconfig --region {self.region} "
            f"--name {self.training_cluster.cluster_name}",
        )
