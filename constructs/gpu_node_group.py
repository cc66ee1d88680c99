"""GpuNodeGroup: an EKS managed node group of GPU instances with every EFA interface attached."""

from __future__ import annotations

import re

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from llm_infra.config import DEFAULT_GPU_NODES, DEFAULT_GPU_ROOT_VOLUME_GIB, DEFAULT_HUGEPAGES_2MIB
from llm_infra.constructs.nag import use_aws_managed_policies
from llm_infra.constructs.nic_layout import network_interfaces
from llm_infra.constructs.validation import ConstructValidationError, is_token, require_literal
from llm_infra.instance_types import EfaLayout, InstanceProfile
from llm_infra.node_labels import EFA_LABEL, GPU_TAINT_KEY, NODE_ROLE_LABEL

CAPACITY_TYPES = ("on-demand", "capacity-reservation", "capacity-block")
# EC2: a capacity reservation (or capacity block) id, cr- and 8 or 17 hex digits.
CAPACITY_RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8}([0-9a-f]{9})?$")


class GpuNodeGroup(Construct):
    """GPU worker nodes for training, as an EKS managed node group with a launch template.

    - network interfaces derived from the instance profile's network cards in a versioned
      :class:`~llm_infra.instance_types.EfaLayout` (p5.48xlarge: 32 EFA interfaces), the EFA
      security group on each of them;
    - a cluster placement group (``placement_group``: ``"create"`` a new one, the name of an
      existing one, or ``None``; reserved capacity made in a placement group launches only into that
      one), optional capacity reservation or capacity block;
    - IMDSv2 required with a hop limit of 1 (pods get AWS credentials from EKS Pod Identity,
      never from the node role);
    - the NVIDIA-accelerated EKS AMI (AL2023), an encrypted gp3 root volume, 2 MiB hugepages for
      libfabric, the ``nvidia.com/gpu`` NoSchedule taint and node labels;
    - EKS node auto repair on, so unhealthy nodes are replaced.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        subnet: ec2.ISubnet,
        profile: InstanceProfile,
        security_groups: list[ec2.ISecurityGroup],
        efa_security_group: ec2.ISecurityGroup | None = None,
        nic_layout: EfaLayout | None = None,
        desired_size: int = DEFAULT_GPU_NODES,
        min_size: int | None = None,
        max_size: int | None = None,
        capacity: str = "on-demand",
        capacity_reservation_id: str | None = None,
        root_volume_gib: int = DEFAULT_GPU_ROOT_VOLUME_GIB,
        hugepages_2mib: int = DEFAULT_HUGEPAGES_2MIB,
        labels: dict[str, str] | None = None,
        placement_group: str | None = "create",
    ) -> None:
        super().__init__(scope, construct_id)
        min_size = desired_size if min_size is None else min_size
        max_size = desired_size if max_size is None else max_size
        sizes = (min_size, desired_size, max_size)
        if not any(is_token(size) for size in sizes) and (
            not 0 <= min_size <= desired_size <= max_size or max_size < 1
        ):
            raise ConstructValidationError(
                self,
                f"min_size/desired_size/max_size: need 0 <= min <= desired <= max and max >= 1, "
                f"got {min_size}/{desired_size}/{max_size}",
            )
        require_literal(self, "capacity", capacity, "it decides the node group's capacity type and market")
        if capacity not in CAPACITY_TYPES:
            raise ConstructValidationError(
                self, f"capacity: {capacity!r} is not allowed; allowed: {', '.join(CAPACITY_TYPES)}"
            )
        if capacity != "on-demand" and not capacity_reservation_id:
            raise ConstructValidationError(self, f"capacity_reservation_id: required when capacity is {capacity}")
        reservation = capacity_reservation_id
        if reservation and not is_token(reservation) and not CAPACITY_RESERVATION_ID.match(reservation):
            raise ConstructValidationError(
                self, f"capacity_reservation_id: {reservation!r} is not an id such as cr-0123456789abcdef0"
            )
        if not is_token(root_volume_gib) and root_volume_gib < 1:
            raise ConstructValidationError(self, f"root_volume_gib: {root_volume_gib} must be >= 1")
        require_literal(self, "hugepages_2mib", hugepages_2mib, "it is written into the nodes' user data")
        if hugepages_2mib < 0:
            raise ConstructValidationError(self, f"hugepages_2mib: {hugepages_2mib} must be >= 0")
        if not security_groups:
            raise ConstructValidationError(
                self, "security_groups: at least one (the cluster security group) is required"
            )

        self.profile = profile
        self.efa_enabled = efa_security_group is not None
        if self.efa_enabled and not profile.efa_supported:
            raise ConstructValidationError(self, f"efa_security_group: {profile.instance_type} has no EFA; pass None")

        if placement_group == "create":
            created = ec2.PlacementGroup(self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER)
            self.placement_group_name: str | None = created.placement_group_name
        else:
            self.placement_group_name = placement_group
        self.node_role = self._node_role()
        self.launch_template = self._launch_template(
            security_groups,
            efa_security_group,
            nic_layout or profile.default_efa_layout,
            capacity,
            capacity_reservation_id,
            root_volume_gib,
            hugepages_2mib,
        )
        node_labels = {NODE_ROLE_LABEL: "gpu", EFA_LABEL: str(self.efa_enabled).lower(), **(labels or {})}
        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=cluster,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
            capacity_type=eks.CapacityType.CAPACITY_BLOCK
            if capacity == "capacity-block"
            else eks.CapacityType.ON_DEMAND,
            subnets=ec2.SubnetSelection(subnets=[subnet]),
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.ref, version=self.launch_template.attr_latest_version_number
            ),
            node_role=self.node_role,
            min_size=min_size,
            max_size=max_size,
            desired_size=desired_size,
            labels=node_labels,
            taints=[eks.TaintSpec(key=GPU_TAINT_KEY, value="true", effect=eks.TaintEffect.NO_SCHEDULE)],
            enable_node_auto_repair=True,
        )

    def _node_role(self) -> iam.Role:
        role = iam.Role(
            self,
            "NodeRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="GPU nodes: join the cluster and pull images; pods use Pod Identity roles",
        )
        use_aws_managed_policies(
            role,
            [
                "AmazonEKSWorkerNodePolicy",
                "AmazonEC2ContainerRegistryPullOnly",
                "AmazonSSMManagedInstanceCore",
            ],
            "The documented minimum for EKS nodes (the CNI policy is on a Pod Identity role instead), plus "
            "SSM Session Manager to debug GPU nodes without SSH keys or open ports.",
        )
        return role

    def _launch_template(
        self,
        security_groups: list[ec2.ISecurityGroup],
        efa_security_group: ec2.ISecurityGroup | None,
        layout: EfaLayout,
        capacity: str,
        capacity_reservation_id: str | None,
        root_volume_gib: int,
        hugepages_2mib: int,
    ) -> ec2.CfnLaunchTemplate:
        # L1: the L2 LaunchTemplate cannot express per-card network interfaces.
        # The instance type lives in the launch template: aws-cdk-lib's AMI/architecture check
        # does not know every GPU family (it rejects p5 with the NVIDIA AMI type).
        data = ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
            instance_type=self.profile.instance_type,
            metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                http_tokens="required", http_put_response_hop_limit=1, http_endpoint="enabled"
            ),
            block_device_mappings=[
                ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                    device_name="/dev/xvda",
                    ebs=ec2.CfnLaunchTemplate.EbsProperty(
                        volume_size=root_volume_gib,
                        volume_type="gp3",
                        encrypted=True,
                        iops=6000,
                        throughput=500,
                        delete_on_termination=True,
                    ),
                )
            ],
            placement=(
                ec2.CfnLaunchTemplate.PlacementProperty(group_name=self.placement_group_name)
                if self.placement_group_name
                else None
            ),
            user_data=cdk.Fn.base64(_user_data(hugepages_2mib)),
            capacity_reservation_specification=(
                ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
                    capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
                        capacity_reservation_id=capacity_reservation_id
                    )
                )
                if capacity_reservation_id
                else None
            ),
            instance_market_options=(
                ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="capacity-block")
                if capacity == "capacity-block"
                else None
            ),
            security_group_ids=(None if efa_security_group else [sg.security_group_id for sg in security_groups]),
        )
        template = ec2.CfnLaunchTemplate(self, "LaunchTemplate", launch_template_data=data)
        if efa_security_group is not None:
            interfaces = network_interfaces(
                self.profile,
                layout,
                primary_security_group_ids=[sg.security_group_id for sg in security_groups],
                efa_security_group_id=efa_security_group.security_group_id,
            )
            template.add_property_override("LaunchTemplateData.NetworkInterfaces", interfaces)
        return template


def _user_data(hugepages_2mib: int) -> str:
    """MIME user data that EKS merges with its own nodeadm configuration."""
    script = "\n".join(
        [
            "#!/bin/bash",
            "set -euo pipefail",
            "# 2 MiB hugepages for libfabric/EFA, before kubelet starts so it advertises them.",
            f"echo 'vm.nr_hugepages = {hugepages_2mib}' > /etc/sysctl.d/90-llm-infra-hugepages.conf",
            f"sysctl -w vm.nr_hugepages={hugepages_2mib}",
        ]
    )
    boundary = "==LLMINFRA=="
    return (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{boundary}"\n\n'
        f"--{boundary}\n"
        'Content-Type: text/x-shellscript; charset="us-ascii"\n\n'
        f"{script}\n\n"
        f"--{boundary}--\n"
    )
