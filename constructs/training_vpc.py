"""TrainingVpc: the network of a training cluster."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from llm_infra.constructs.nag import acknowledge

INTERFACE_ENDPOINTS = {
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "Sts": ec2.InterfaceVpcEndpointAwsService.STS,
    "CloudWatchLogs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "SageMakerApi": ec2.InterfaceVpcEndpointAwsService.SAGEMAKER_API,
    # EKS Pod Identity: the agent on every node exchanges tokens at eks-auth; the HyperPod training
    # operator's install needs it (with sagemaker.api) from private subnets (docs:
    # sagemaker-eks-operator-install, prerequisites).
    "EksAuth": ec2.InterfaceVpcEndpointAwsService.EKS_AUTH,
}


class TrainingVpc(Construct):
    """A VPC for distributed training.

    - private subnets in ``max_azs`` (>= 2) AZs for the EKS control plane and the system nodes,
      public subnets for the NAT gateways;
    - one large, dedicated GPU subnet on a secondary CIDR block, placed by **AZ ID** (P5 capacity is
      per AZ ID; AZ names map to different IDs in every account). All GPU nodes and the FSx file
      system live in it, so EFA traffic never crosses subnets;
    - an S3 gateway endpoint (routes of every private subnet including the GPU subnet), interface
      endpoints for ECR api/dkr, STS, CloudWatch Logs, the SageMaker API and EKS Auth (Pod Identity),
      and VPC flow logs.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        gpu_az_id: str,
        cidr: str = "10.0.0.0/16",
        gpu_subnet_cidr: str = "10.1.0.0/16",
        max_azs: int = 2,
        nat_gateways: int = 1,
        flow_log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
    ) -> None:
        super().__init__(scope, construct_id)
        if max_azs < 2:
            raise ValueError(f"max_azs: {max_azs} must be >= 2 (EKS needs subnets in two AZs)")
        if nat_gateways < 1:
            raise ValueError(f"nat_gateways: {nat_gateways} must be >= 1 (nodes pull images through NAT)")

        self._nat = ec2.NatProvider.gateway()
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            max_azs=max_azs,
            nat_gateways=nat_gateways,
            nat_gateway_provider=self._nat,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                ec2.SubnetConfiguration(name="Private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=20),
            ],
        )
        for subnet in self.vpc.private_subnets:
            cdk.Tags.of(subnet).add("kubernetes.io/role/internal-elb", "1")

        self.gpu_subnet = self._add_gpu_subnet(gpu_az_id, gpu_subnet_cidr)

        self.vpc.add_gateway_endpoint(
            "S3",
            service=ec2.GatewayVpcEndpointAwsService.S3,
            subnets=[ec2.SubnetSelection(subnets=[*self.vpc.private_subnets, self.gpu_subnet])],
        )
        for name, service in INTERFACE_ENDPOINTS.items():
            endpoint = self.vpc.add_interface_endpoint(name, service=service, private_dns_enabled=True)
            # The default rule admits the primary CIDR only; GPU nodes live on the secondary one.
            endpoint.connections.allow_default_port_from(ec2.Peer.ipv4(gpu_subnet_cidr), "GPU subnet")
            acknowledge(
                endpoint,
                "EC23",
                "Interface endpoints admit HTTPS (443) from the VPC's own CIDR blocks only; cdk-nag "
                "cannot evaluate the CIDR, which is a reference to the VPC.",
            )

        flow_log_group = logs.LogGroup(
            self, "FlowLogs", retention=flow_log_retention, removal_policy=cdk.RemovalPolicy.RETAIN
        )
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )

    def _add_gpu_subnet(self, az_id: str, cidr: str) -> ec2.PrivateSubnet:
        cidr_block = ec2.CfnVPCCidrBlock(self, "GpuCidr", vpc_id=self.vpc.vpc_id, cidr_block=cidr)
        # The L2 subnet takes an AZ *name*; CloudFormation also takes an AZ *ID*, which is what
        # capacity (reservations, capacity blocks) is tied to. Swap the property.
        subnet = ec2.PrivateSubnet(
            self,
            "GpuSubnet",
            vpc_id=self.vpc.vpc_id,
            cidr_block=cidr,
            availability_zone=az_id,
            map_public_ip_on_launch=False,
        )
        cfn_subnet = subnet.node.default_child
        assert isinstance(cfn_subnet, ec2.CfnSubnet)
        cfn_subnet.add_property_deletion_override("AvailabilityZone")
        cfn_subnet.add_property_override("AvailabilityZoneId", az_id)
        cfn_subnet.add_resource_dependency(cidr_block)
        subnet.add_default_nat_route(self._nat.configured_gateways[0].gateway_id)
        cdk.Tags.of(subnet).add("Name", f"{cdk.Stack.of(self).stack_name}/gpu-{az_id}")
        cdk.Tags.of(subnet).add("llm-infra/subnet", "gpu")
        return subnet

    @property
    def private_subnets(self) -> list[ec2.ISubnet]:
        """The subnets of the control plane and the system nodes (one per AZ)."""
        return list(self.vpc.private_subnets)
