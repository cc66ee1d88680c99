"""LustreStorage: FSx for Lustre linked to S3, for datasets and checkpoints."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_s3 as s3
from constructs import Construct

from llm_infra.service_limits import (
    FSX_PERSISTENT_2_CAPACITY_RULE,
    FSX_PERSISTENT_2_THROUGHPUTS,
    fsx_persistent_2_capacity_ok,
)

LUSTRE_PORTS = (ec2.Port.tcp(988), ec2.Port.tcp_range(1018, 1023))


class LustreStorage(Construct):
    """An FSx for Lustre PERSISTENT_2 file system in the GPU subnet, linked to an S3 prefix.

    - LZ4 compression, Lustre 2.15, ``RETAIN`` on stack update or delete;
    - a data repository association that maps ``file_system_path`` to ``s3://bucket/prefix`` with
      automatic import and export of new, changed and deleted objects;
    - its own security group: the L2 file system opens 988-1023 between its own servers, and
      :meth:`allow_clients` opens exactly TCP 988 and 1018-1023 between it and its clients, both ways
      (ingress here and on the clients' group, egress on the client's group when that group
      restricts egress, as the EFA group does).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
        data_bucket: s3.IBucket,
        data_prefix: str = "datasets/",
        file_system_path: str = "/data",
        storage_capacity_gib: int = 1200,
        throughput_per_tib: int = 250,
    ) -> None:
        super().__init__(scope, construct_id)
        if not fsx_persistent_2_capacity_ok(storage_capacity_gib):
            raise ValueError(
                f"storage_capacity_gib: {storage_capacity_gib} is not allowed for PERSISTENT_2; "
                f"allowed: {FSX_PERSISTENT_2_CAPACITY_RULE}"
            )
        if throughput_per_tib not in FSX_PERSISTENT_2_THROUGHPUTS:
            raise ValueError(
                f"throughput_per_tib: {throughput_per_tib} is not allowed; allowed: "
                + ", ".join(map(str, FSX_PERSISTENT_2_THROUGHPUTS))
            )
        if not file_system_path.startswith("/") or file_system_path == "/":
            raise ValueError(f"file_system_path: {file_system_path!r} must be an absolute path below /")

        self.security_group = ec2.SecurityGroup(
            self, "SecurityGroup", vpc=vpc, description="FSx for Lustre: LNET between servers and clients"
        )

        self.file_system = fsx.LustreFileSystem(
            self,
            "FileSystem",
            vpc=vpc,
            vpc_subnet=subnet,
            security_group=self.security_group,
            storage_capacity_gib=storage_capacity_gib,
            file_system_type_version=fsx.FileSystemTypeVersion.V_2_15,
            lustre_configuration=fsx.LustreConfiguration(
                deployment_type=fsx.LustreDeploymentType.PERSISTENT_2,
                per_unit_storage_throughput=throughput_per_tib,
                data_compression_type=fsx.LustreDataCompressionType.LZ4,
            ),
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        events = ["NEW", "CHANGED", "DELETED"]
        self.data_repository_association = fsx.CfnDataRepositoryAssociation(
            self,
            "S3Link",
            file_system_id=self.file_system.file_system_id,
            file_system_path=file_system_path,
            data_repository_path=f"s3://{data_bucket.bucket_name}/{data_prefix}",
            batch_import_meta_data_on_create=True,
            s3=fsx.CfnDataRepositoryAssociation.S3Property(
                auto_import_policy=fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(events=events),
                auto_export_policy=fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(events=events),
            ),
        )
        self.data_repository_association.apply_removal_policy(cdk.RemovalPolicy.RETAIN)
        self.file_system_path = file_system_path

    def allow_clients(self, clients: ec2.IConnectable, description: str = "Lustre clients") -> None:
        """Open the Lustre ports (TCP 988, 1018-1023) between the file system and ``clients`` (e.g. the
        GPU nodes), both ways: clients connect to the servers, and the servers connect back to clients
        (FSx for Lustre user guide, "Lustre client VPC security group rules": the clients' groups admit
        the same ports from the file system's group; without it, server-initiated reconnects after a
        failover are dropped although client-initiated traffic works, since groups are stateful)."""
        for port in LUSTRE_PORTS:
            self.security_group.connections.allow_from(clients, port, description)
            self.security_group.connections.allow_to(clients, port, f"{description}: from the file system")
        # allow_to adds the clients' ingress rule that matters, and an egress rule on this group that the
        # group's allow-all egress makes redundant: CDK drops it with a warning `cdk synth` would print.
        cdk.Annotations.of(self.security_group).acknowledge_warning(
            "@aws-cdk/aws-ec2:ipv4IgnoreEgressRule", "the file system's group allows all outbound traffic already"
        )

    @property
    def file_system_id(self) -> str:
        return self.file_system.file_system_id

    @property
    def dns_name(self) -> str:
        return self.file_system.dns_name

    @property
    def mount_name(self) -> str:
        return self.file_system.mount_name
