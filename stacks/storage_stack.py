"""StorageStack: FSx for Lustre (or an existing file system), the data and checkpoint buckets, the Hugging
Face token secret.

Nothing here is ever deleted."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from llm_infra.config import TrainingConfig
from llm_infra.constructs.hugging_face_token import HuggingFaceToken
from llm_infra.constructs.lustre_storage import ExistingLustreStorage, LustreStorage
from llm_infra.constructs.nag import acknowledge, bucket_objects_finding
from llm_infra.constructs.training_bucket import (
    READ_OBJECT_ACTIONS,
    READ_WRITE_OBJECT_ACTIONS,
    TrainingBucket,
    object_access_statements,
)


class StorageStack(cdk.Stack):
    """Storage of a training cluster, and the policy that training jobs need on it.

    ``training_access_policy`` (read the dataset prefix, read/write checkpoints) lives here, beside
    the buckets it names, and is attached to the training job's role by the cluster stack.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: TrainingConfig,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
        clients: ec2.IConnectable,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.data_bucket: s3.IBucket
        if config.data_bucket:
            self.data_bucket = s3.Bucket.from_bucket_name(self, "DataBucket", config.data_bucket)
        else:
            self.data_bucket = TrainingBucket(self, "Data").bucket
        self.checkpoints = TrainingBucket(self, "Checkpoints")
        self.lustre: LustreStorage | ExistingLustreStorage
        if config.existing_fsx_file_system_id:  # AWS's HyperPod template: CreateFsxStack, FsxFileSystemId
            assert config.existing_fsx_dns_name and config.existing_fsx_mount_name
            assert config.existing_fsx_security_group_id
            self.lustre = LustreStorage.from_existing(
                self,
                "Lustre",
                file_system_id=config.existing_fsx_file_system_id,
                dns_name=config.existing_fsx_dns_name,
                mount_name=config.existing_fsx_mount_name,
                security_group_id=config.existing_fsx_security_group_id,
            )
        else:
            self.lustre = LustreStorage(
                self,
                "Lustre",
                vpc=vpc,
                subnet=subnet,
                data_bucket=self.data_bucket,
                data_prefix=config.data_prefix,
                storage_capacity_gib=config.fsx_storage_gib,
                throughput_per_tib=config.fsx_throughput,
            )
        # The clients' groups come from the network stack, before this one: the rules live here.
        self.lustre.connections.allow_default_port_from(clients, "Lustre clients: GPU nodes")

        self.training_access_policy = iam.ManagedPolicy(
            self,
            "TrainingAccess",
            description="Training jobs: read the dataset prefix, read/write the checkpoint bucket",
            statements=[
                *object_access_statements(self.data_bucket, config.data_prefix, READ_OBJECT_ACTIONS),
                *object_access_statements(self.checkpoints.bucket, "", READ_WRITE_OBJECT_ACTIONS),
                # Tiered checkpointing's S3 tier (amzn-sagemaker-checkpointing 1.1.3 through
                # s3torchconnector) asks for the bucket's region first (the library's README lists it).
                iam.PolicyStatement(actions=["s3:GetBucketLocation"], resources=[self.checkpoints.bucket.bucket_arn]),
            ],
        )
        acknowledge(
            self.training_access_policy,
            "IAM5",
            "S3 object permissions need an object-ARN wildcard; it is scoped to the dataset prefix of "
            "the data bucket and to the checkpoint bucket.",
            findings=[
                bucket_objects_finding(self.data_bucket, f"{config.data_prefix}*"),
                bucket_objects_finding(self.checkpoints.bucket, "*"),
            ],
        )

        self.hf_token = HuggingFaceToken(self, "HuggingFaceToken", secret_name=config.hf_token_secret_name)

        cdk.CfnOutput(self, "FileSystemId", value=self.lustre.file_system_id)
        cdk.CfnOutput(self, "FileSystemDnsName", value=self.lustre.dns_name)
        cdk.CfnOutput(self, "FileSystemMountName", value=self.lustre.mount_name)
        cdk.CfnOutput(self, "DataBucketName", value=self.data_bucket.bucket_name)
        cdk.CfnOutput(self, "CheckpointBucketName", value=self.checkpoints.bucket_name)
        cdk.CfnOutput(self, "HuggingFaceTokenSecretName", value=self.hf_token.secret_name)
