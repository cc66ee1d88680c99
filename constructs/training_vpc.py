"""TrainingVpc: the network of a training cluster."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from llm_infra.config import DEFAULT_GPU_SUBNET_CIDR, DEFAULT_VPC_CIDR
from llm_infra.constructs.nag import acknowledge
from llm_infra.constructs.validation import ConstructValidationError, is_token, require_literal

# An AZ ID: a region code and a zone number (use1-az4), not an AZ name (us-east-1a).
AZ_ID = re.compile(r"^[a-z]{2,5}\d-az\d{1,2}$")

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
        cidr: str = DEFAULT_VPC_CIDR,
        gpu_subnet_cidr: str = DEFAULT_GPU_SUBNET_CIDR,
        max_azs: int = 2,
        nat_gateways: int = 1,
        flow_log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
    ) -> None:
        super().__init__(scope, construct_id)
        require_literal(self, "max_azs", max_azs, "it decides how many subnets there are")
        require_literal(self, "nat_gateways", nat_gateways, "it decides how many NAT gateways there are")
        require_literal(self, "cidr", cidr, "the VPC's subnets are carved from it at synth")
        if max_azs < 2:
            raise ConstructValidationError(self, f"max_azs: {max_azs} must be >= 2 (EKS needs subnets in two AZs)")
        if nat_gateways < 1:
            raise ConstructValidationError(
                self, f"nat_gateways: {nat_gateways} must be >= 1 (nodes pull images through NAT)"
            )
        _check_cidr(self, "cidr", cidr)
        _check_gpu_subnet(self, gpu_az_id, gpu_subnet_cidr)

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

        self.gpu_subnet = add_gpu_subnet(
            self, self.vpc, gpu_az_id, gpu_subnet_cidr, self._nat.configured_gateways[0].gateway_id
        )

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

    @property
    def private_subnets(self) -> list[ec2.ISubnet]:
        """The subnets of the control plane and the system nodes (one per AZ)."""
        return list(self.vpc.private_subnets)

    @staticmethod
    def from_existing(
        scope: Construct,
        construct_id: str,
        *,
        vpc_id: str,
        private_subnet_ids: Sequence[str],
        gpu_subnet_id: str | None = None,
        gpu_az_id: str | None = None,
        gpu_subnet_cidr: str = DEFAULT_GPU_SUBNET_CIDR,
        nat_gateway_id: str | None = None,
    ) -> ExistingTrainingVpc:
        """A VPC this app does not create, by its ids (offline: nothing is looked up, unlike
        ``Vpc.from_lookup``): the same interface as a new one (``vpc``, ``private_subnets``,
        ``gpu_subnet``). The GPU subnet is ``gpu_subnet_id``, or created in the VPC as :class:`TrainingVpc`
        creates its own: ``gpu_subnet_cidr`` added as a secondary CIDR block, placed by ``gpu_az_id``,
        its default route through ``nat_gateway_id``, an S3 gateway endpoint on its route table."""
        return ExistingTrainingVpc(
            scope,
            construct_id,
            vpc_id=vpc_id,
            private_subnet_ids=private_subnet_ids,
            gpu_subnet_id=gpu_subnet_id,
            gpu_az_id=gpu_az_id,
            gpu_subnet_cidr=gpu_subnet_cidr,
            nat_gateway_id=nat_gateway_id,
        )


class ExistingTrainingVpc(Construct):
    """A VPC this app does not create (:meth:`TrainingVpc.from_existing`). ``vpc`` knows its id only (its
    subnets are not listed in it: select them through ``private_subnets`` and ``gpu_subnet``); its NAT,
    endpoints and flow logs are its owner's. Ids may be tokens; literal ones are checked."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc_id: str,
        private_subnet_ids: Sequence[str],
        gpu_subnet_id: str | None,
        gpu_az_id: str | None,
        gpu_subnet_cidr: str,
        nat_gateway_id: str | None,
    ) -> None:
        super().__init__(scope, construct_id)
        _check_id(self, "vpc_id", vpc_id, "vpc-")
        require_literal(
            self, "private_subnet_ids", private_subnet_ids, "a list of ids, each may be a token: their number counts"
        )
        if len(set(private_subnet_ids)) < 2:
            raise ConstructValidationError(
                self, f"private_subnet_ids: {len(set(private_subnet_ids))} given; allowed: >= 2 in two AZs"
            )
        for subnet_id in private_subnet_ids:
            _check_id(self, "private_subnet_ids", subnet_id, "subnet-")
        if gpu_subnet_id is None and (gpu_az_id is None or nat_gateway_id is None):
            raise ConstructValidationError(
                self,
                "gpu_subnet_id: required unless the GPU subnet is created here, which needs gpu_az_id and "
                "nat_gateway_id (its default route)",
            )
        if gpu_subnet_id is not None and nat_gateway_id is not None:
            raise ConstructValidationError(
                self, "nat_gateway_id: only for a GPU subnet created here; gpu_subnet_id is given"
            )

        # The list-token AZs are the region's; nothing here selects subnets from the VPC object.
        self.vpc = ec2.Vpc.from_vpc_attributes(self, "Vpc", vpc_id=vpc_id, availability_zones=cdk.Fn.get_azs())
        cdk.Annotations.of(self.vpc).acknowledge_warning(
            "@aws-cdk/aws-ec2:vpcAttributeIsListTokenavailabilityZones",
            "the subnets are given by id (private_subnets, gpu_subnet); none is selected from the VPC object",
        )
        self._private_subnets = [
            self._import_subnet(f"PrivateSubnet{i}", subnet_id) for i, subnet_id in enumerate(private_subnet_ids)
        ]
        self.gpu_subnet: ec2.ISubnet
        if gpu_subnet_id is not None:
            self.gpu_subnet = self._import_subnet("GpuSubnet", gpu_subnet_id)
        else:
            assert gpu_az_id is not None and nat_gateway_id is not None
            _check_id(self, "nat_gateway_id", nat_gateway_id, "nat-")
            _check_gpu_subnet(self, gpu_az_id, gpu_subnet_cidr)
            self.gpu_subnet = add_gpu_subnet(self, self.vpc, gpu_az_id, gpu_subnet_cidr, nat_gateway_id)
            # S3 traffic (datasets, checkpoints) stays off the NAT gateway, as in TrainingVpc.
            ec2.GatewayVpcEndpoint(
                self,
                "S3",
                vpc=self.vpc,
                service=ec2.GatewayVpcEndpointAwsService.S3,
                subnets=[ec2.SubnetSelection(subnets=[self.gpu_subnet])],
            )

    def _import_subnet(self, construct_id: str, subnet_id: str) -> ec2.ISubnet:
        subnet = ec2.Subnet.from_subnet_id(self, construct_id, subnet_id)
        cdk.Annotations.of(subnet).acknowledge_warning(
            "@aws-cdk/aws-ec2:noSubnetRouteTableId", "an existing subnet's routes are its owner's; none is read"
        )
        return subnet

    @property
    def private_subnets(self) -> list[ec2.ISubnet]:
        """The private subnets given: the control plane's (a new cluster), the system nodes', kubectl's."""
        return list(self._private_subnets)


def add_gpu_subnet(scope: Construct, vpc: ec2.IVpc, az_id: str, cidr: str, nat_gateway_id: str) -> ec2.PrivateSubnet:
    """The GPU subnet: ``cidr`` as a secondary CIDR block of ``vpc``, a private subnet on it placed by AZ
    **ID**, its default route through ``nat_gateway_id``."""
    cidr_block = ec2.CfnVPCCidrBlock(scope, "GpuCidr", vpc_id=vpc.vpc_id, cidr_block=cidr)
    # The L2 subnet takes an AZ *name*; CloudFormation also takes an AZ *ID*, which is what
    # capacity (reservations, capacity blocks) is tied to. Swap the property.
    subnet = ec2.PrivateSubnet(
        scope,
        "GpuSubnet",
        vpc_id=vpc.vpc_id,
        cidr_block=cidr,
        availability_zone=az_id,
        map_public_ip_on_launch=False,
    )
    cfn_subnet = subnet.node.default_child
    assert isinstance(cfn_subnet, ec2.CfnSubnet)
    cfn_subnet.add_property_deletion_override("AvailabilityZone")
    cfn_subnet.add_property_override("AvailabilityZoneId", az_id)
    cfn_subnet.add_resource_dependency(cidr_block)
    subnet.add_default_nat_route(nat_gateway_id)
    cdk.Tags.of(subnet).add("Name", f"{cdk.Stack.of(scope).stack_name}/gpu-{az_id}")
    cdk.Tags.of(subnet).add("llm-infra/subnet", "gpu")
    return subnet


def _check_id(scope: Construct, prop: str, value: str, prefix: str) -> None:
    if not is_token(value) and not re.fullmatch(rf"{prefix}[0-9a-f]{{8}}([0-9a-f]{{9}})?", value):
        raise ConstructValidationError(scope, f"{prop}: {value!r} is not an id such as {prefix}0123456789abcdef0")


def _check_cidr(scope: Construct, prop: str, cidr: str) -> None:
    if is_token(cidr):
        return
    try:
        network = ipaddress.IPv4Network(cidr)
    except ValueError as err:
        raise ConstructValidationError(scope, f"{prop}: {cidr!r} is not an IPv4 CIDR block ({err})") from None
    if not network.is_private or not 16 <= network.prefixlen <= 28:
        raise ConstructValidationError(
            scope, f"{prop}: {cidr} is not allowed; allowed: a private (RFC 1918) block between /16 and /28"
        )


def _check_gpu_subnet(scope: Construct, gpu_az_id: str, gpu_subnet_cidr: str) -> None:
    if not is_token(gpu_az_id) and not AZ_ID.match(gpu_az_id):
        raise ConstructValidationError(
            scope, f"gpu_az_id: {gpu_az_id!r} is not an AZ ID such as use1-az4 (an AZ ID, not an AZ name)"
        )
    _check_cidr(scope, "gpu_subnet_cidr", gpu_subnet_cidr)
