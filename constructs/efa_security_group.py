"""EfaSecurityGroup: the security group that EFA traffic needs on every GPU network interface."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from constructs import Construct


class EfaSecurityGroup(Construct):
    """A security group whose members exchange all traffic with each other, both ways.

    EFA's OS-bypass traffic is only allowed when the security group has an all-traffic **inbound
    and outbound** rule that references itself; a missing self egress rule is the most common EFA
    failure ("failed to open endpoint", NCCL falling back to sockets). Attach it to every network
    interface of a GPU node (the launch template of :class:`GpuNodeGroup` does). It allows nothing
    else: nodes reach the control plane, images and AWS APIs through their other security groups.
    """

    def __init__(self, scope: Construct, construct_id: str, *, vpc: ec2.IVpc) -> None:
        super().__init__(scope, construct_id)
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="EFA: all traffic between members, inbound and outbound",
            allow_all_outbound=False,
        )
        self.security_group.connections.allow_internally(
            ec2.Port.all_traffic(), "EFA traffic between members (self-referencing)"
        )

    @property
    def security_group_id(self) -> str:
        return self.security_group.security_group_id

    @property
    def connections(self) -> ec2.Connections:
        return self.security_group.connections
