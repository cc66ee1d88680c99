"""LustreStorage: FSx for Lustre linked to S3, for datasets and checkpoints."""

from __future__ import annotations

from typing import Protocol

import aws_cdk as cdk
import jsii
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_s3 as s3
from constructs import Construct

from llm_infra.config import DEFAULT_DATA_PREFIX, DEFAULT_FSX_STORAGE_GIB, DEFAULT_FSX_THROUGHPUT
from llm_infra.constructs.validation import ConstructValidationError, is_token, require_literal
from llm_infra.service_limits import (
    FSX_PERSISTENT_2_CAPACITY_RULE,
    FSX_PERSISTENT_2_THROUGHPUTS,
    fsx_persistent_2_capacity_ok,
)

# Lustre between file servers and clients (FSx for Lustre user guide, "Lustre client VPC security group
# rules"): TCP 988 and TCP 1018-1023, inbound and outbound.
LUSTRE_PORTS = (ec2.Port.tcp(988), ec2.Port.tcp_range(1018, 1023))
# One port for code that reads ``connections.default_port`` (a client's ``allow_to_default_port``): the
# range aws-cdk-lib's own ``fsx.LustreFileSystem.connections`` declares, which holds both of the above.
LUSTRE_PORT_RANGE = ec2.Port.tcp_range(988, 1023)


class LustreConnections(ec2.Connections):
    """The connections of a Lustre file system: its default port is Lustre's, both ways.

    ``allow_default_port_from(clients)`` opens exactly :data:`LUSTRE_PORTS` from the clients to the file
    system **and** from the file system back to the clients (the FSx user guide's client rules: the
    clients' groups admit the same ports from the file system's group; without that, server-initiated
    reconnects after a failover are dropped although client-initiated traffic works, since groups are
    stateful). As with any ``Connections``, the rules live with the group whose method is called, here in
    the file system's stack: use it when the clients' groups come from the same or an earlier stack. When
    the clients' stack depends on the file system's instead, call the clients' side
    (:func:`allow_lustre_from_clients_side`), or the rules would make the two stacks reference each other.

    ``default_port`` itself is one ``ec2.Port`` (the jsii API has no room for two ranges):
    :data:`LUSTRE_PORT_RANGE`, for aws-cdk-lib code that reads it, e.g. a client's
    ``allow_to_default_port(lustre)`` (one way, the whole range, as with aws-cdk-lib's LustreFileSystem).
    """

    def __init__(self, security_group: ec2.ISecurityGroup) -> None:
        super().__init__(security_groups=[security_group], default_port=LUSTRE_PORT_RANGE)
        self._security_group = security_group

    def allow_default_port_from(self, other: ec2.IConnectable, description: str | None = None) -> None:
        description = description or "Lustre clients"
        for port in LUSTRE_PORTS:
            self.allow_from(other, port, description)
            self.allow_to(other, port, f"{description}: from the file system")
        # allow_to adds the clients' ingress rule that matters, and an egress rule on the file system's group
        # that its allow-all egress makes redundant: CDK drops it with a warning `cdk synth` would print.
        cdk.Annotations.of(self._security_group).acknowledge_warning(
            "@aws-cdk/aws-ec2:ipv4IgnoreEgressRule", "the file system's group allows all outbound traffic already"
        )

    def allow_default_port_to(self, other: ec2.IConnectable, description: str | None = None) -> None:
        """From the file system to ``other`` on Lustre's ports (the servers' half of the client rules)."""
        for port in LUSTRE_PORTS:
            self.allow_to(other, port, description)

    def allow_default_port_internally(self, description: str | None = None) -> None:
        for port in LUSTRE_PORTS:
            self.allow_internally(port, description)

    def allow_default_port_from_any_ipv4(self, description: str | None = None) -> None:
        for port in LUSTRE_PORTS:
            self.allow_from_any_ipv4(port, description)


def allow_lustre_from_clients_side(
    clients: ec2.Connections, lustre: ec2.IConnectable, description: str = "Lustre clients"
) -> None:
    """Lustre's ports both ways between ``clients`` and ``lustre``, the rules in the clients' stack: for
    clients whose stack depends on the file system's (the default app's cluster stack), where
    ``lustre.connections.allow_default_port_from(clients)`` would put rules naming the clients' groups in
    the file system's stack and tie the two stacks into a cycle. The same rules as that call."""
    for port in LUSTRE_PORTS:
        clients.allow_to(lustre, port, description)
        clients.allow_from(lustre, port, f"{description}: from the file system")


class ILustreStorage(Protocol):
    """What a Lustre file system gives its clients: :class:`LustreStorage` and the existing file system
    :meth:`LustreStorage.from_existing` imports."""

    @property
    def connections(self) -> ec2.Connections: ...

    @property
    def file_system_id(self) -> str: ...

    @property
    def dns_name(self) -> str: ...

    @property
    def mount_name(self) -> str: ...


@jsii.implements(ec2.IConnectable)
class LustreStorage(Construct):
    """An FSx for Lustre PERSISTENT_2 file system in the GPU subnet, linked to an S3 prefix.

    - LZ4 compression, Lustre 2.15, ``RETAIN`` on stack update or delete;
    - a data repository association that maps ``file_system_path`` to ``s3://bucket/prefix`` with
      automatic import and export of new, changed and deleted objects;
    - its own security group: the L2 file system opens 988-1023 between its own servers. It is an
      ``IConnectable``: ``lustre.connections.allow_default_port_from(nodes)`` opens exactly TCP 988 and
      1018-1023 between it and its clients, both ways (:class:`LustreConnections`).

    ``data_prefix`` and ``file_system_path`` may be tokens (a ``CfnParameter``, an import); the size and
    throughput may not (aws-cdk-lib's ``LustreFileSystem`` checks them at synth).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
        data_bucket: s3.IBucket,
        data_prefix: str = DEFAULT_DATA_PREFIX,
        file_system_path: str = "/data",
        storage_capacity_gib: int = DEFAULT_FSX_STORAGE_GIB,
        throughput_per_tib: int = DEFAULT_FSX_THROUGHPUT,
    ) -> None:
        super().__init__(scope, construct_id)
        for prop, value in (("storage_capacity_gib", storage_capacity_gib), ("throughput_per_tib", throughput_per_tib)):
            require_literal(self, prop, value, "aws-cdk-lib's LustreFileSystem checks it at synth")
        if not fsx_persistent_2_capacity_ok(storage_capacity_gib):
            raise ConstructValidationError(
                self,
                f"storage_capacity_gib: {storage_capacity_gib} is not allowed for PERSISTENT_2; "
                f"allowed: {FSX_PERSISTENT_2_CAPACITY_RULE}",
            )
        if throughput_per_tib not in FSX_PERSISTENT_2_THROUGHPUTS:
            raise ConstructValidationError(
                self,
                f"throughput_per_tib: {throughput_per_tib} is not allowed; allowed: "
                + ", ".join(map(str, FSX_PERSISTENT_2_THROUGHPUTS)),
            )
        if not is_token(file_system_path) and (not file_system_path.startswith("/") or file_system_path == "/"):
            raise ConstructValidationError(
                self, f"file_system_path: {file_system_path!r} is not allowed; allowed: an absolute path below /"
            )

        security_group = ec2.SecurityGroup(
            self, "SecurityGroup", vpc=vpc, description="FSx for Lustre: LNET between servers and clients"
        )
        self._connections = LustreConnections(security_group)

        self.file_system = fsx.LustreFileSystem(
            self,
            "FileSystem",
            vpc=vpc,
            vpc_subnet=subnet,
            security_group=security_group,
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

    @staticmethod
    def from_existing(
        scope: Construct,
        construct_id: str,
        *,
        file_system_id: str,
        dns_name: str,
        mount_name: str,
        security_group_id: str,
    ) -> ExistingLustreStorage:
        """An existing FSx for Lustre file system, by its ids (nothing is looked up): the same interface
        as a new one (``connections``, ``file_system_id``, ``dns_name``, ``mount_name``). Its data
        repository links are its owner's; ``connections.allow_default_port_from(nodes)`` adds rules to
        its security group that admit the nodes."""
        return ExistingLustreStorage(
            scope,
            construct_id,
            file_system_id=file_system_id,
            dns_name=dns_name,
            mount_name=mount_name,
            security_group_id=security_group_id,
        )

    @property
    def connections(self) -> ec2.Connections:
        return self._connections

    @property
    def file_system_id(self) -> str:
        return self.file_system.file_system_id

    @property
    def dns_name(self) -> str:
        return self.file_system.dns_name

    @property
    def mount_name(self) -> str:
        return self.file_system.mount_name


@jsii.implements(ec2.IConnectable)
class ExistingLustreStorage(Construct):
    """An FSx for Lustre file system this app does not create (:meth:`LustreStorage.from_existing`):
    ``file_system`` is aws-cdk-lib's import (``LustreFileSystem.from_lustre_file_system_attributes``),
    ``connections`` a :class:`LustreConnections` on its security group. Ids may be tokens; literal ones
    are checked."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        file_system_id: str,
        dns_name: str,
        mount_name: str,
        security_group_id: str,
    ) -> None:
        super().__init__(scope, construct_id)
        ids = (("file_system_id", file_system_id, "fs-"), ("security_group_id", security_group_id, "sg-"))
        for prop, value, prefix in ids:
            if not is_token(value) and not value.startswith(prefix):
                raise ConstructValidationError(
                    self, f"{prop}: {value!r} is not an id such as {prefix}0123456789abcdef0"
                )
        if not is_token(mount_name) and not mount_name:
            raise ConstructValidationError(self, "mount_name: required (its LustreConfiguration.MountName)")
        security_group = ec2.SecurityGroup.from_security_group_id(self, "SecurityGroup", security_group_id)
        self.file_system = fsx.LustreFileSystem.from_lustre_file_system_attributes(
            self, "FileSystem", file_system_id=file_system_id, dns_name=dns_name, security_group=security_group
        )
        self._connections = LustreConnections(security_group)
        self._dns_name = dns_name
        self._mount_name = mount_name

    @property
    def connections(self) -> ec2.Connections:
        return self._connections

    @property
    def file_system_id(self) -> str:
        return self.file_system.file_system_id

    @property
    def dns_name(self) -> str:
        return self._dns_name

    @property
    def mount_name(self) -> str:
        return self._mount_name
