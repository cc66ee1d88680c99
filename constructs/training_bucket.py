"""TrainingBucket: an S3 bucket for training data or checkpoints, hardened and never destroyed."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from llm_infra.constructs.nag import acknowledge
from llm_infra.constructs.validation import ConstructValidationError, require_literal

READ_OBJECT_ACTIONS = ["s3:GetObject", "s3:GetObjectVersion"]
READ_WRITE_OBJECT_ACTIONS = [
    *READ_OBJECT_ACTIONS,
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
]


class TrainingBucket(Construct):
    """An S3 bucket that holds datasets or checkpoints.

    Encrypted (SSE-S3, which FSx data repository associations can read without a KMS grant),
    versioned, TLS-only, all public access blocked, ``RETAIN`` on stack update or delete, incomplete
    multipart uploads aborted (large checkpoint writes that die midway leave parts behind), and old
    object versions expired after ``noncurrent_version_days``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        noncurrent_version_days: int = 30,
        abort_incomplete_upload_days: int = 7,
    ) -> None:
        super().__init__(scope, construct_id)
        for prop, days in (
            ("noncurrent_version_days", noncurrent_version_days),
            ("abort_incomplete_upload_days", abort_incomplete_upload_days),
        ):
            require_literal(self, prop, days, "a lifecycle rule's Duration is built from it")
            if days < 1:
                raise ConstructValidationError(self, f"{prop}: {days} must be >= 1")
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=cdk.RemovalPolicy.RETAIN,
            lifecycle_rules=[
                s3.LifecycleRule(
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(abort_incomplete_upload_days),
                    noncurrent_version_expiration=cdk.Duration.days(noncurrent_version_days),
                )
            ],
        )
        acknowledge(
            self.bucket,
            "S1",
            "Object-level access is audited with CloudTrail S3 data events, which the account owns; "
            "server access logs would need one more bucket per training bucket.",
        )

    @property
    def bucket_name(self) -> str:
        return self.bucket.bucket_name

    @property
    def bucket_arn(self) -> str:
        return self.bucket.bucket_arn

    def grant_read(self, grantee: iam.IGrantable, key_prefix: str = "") -> iam.Grant:
        """Allow listing ``key_prefix`` and reading the objects below it; nothing else."""
        return grant(grantee, object_access_statements(self.bucket, key_prefix, READ_OBJECT_ACTIONS))

    def grant_read_write(self, grantee: iam.IGrantable, key_prefix: str = "") -> iam.Grant:
        """Allow listing, reading, writing and deleting objects below ``key_prefix``.

        Checkpoint rotation deletes old checkpoints, and multipart uploads of large shards may need
        to be aborted.
        """
        return grant(grantee, object_access_statements(self.bucket, key_prefix, READ_WRITE_OBJECT_ACTIONS))


def object_access_statements(bucket: s3.IBucket, key_prefix: str, actions: list[str]) -> list[iam.PolicyStatement]:
    """``actions`` on the objects below ``key_prefix``, and listing of that prefix only."""
    return [
        iam.PolicyStatement(
            actions=["s3:ListBucket"],
            resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{key_prefix}*"]}} if key_prefix else None,
        ),
        iam.PolicyStatement(actions=actions, resources=[bucket.arn_for_objects(f"{key_prefix}*")]),
    ]


def grant(grantee: iam.IGrantable, statements: list[iam.PolicyStatement]) -> iam.Grant:
    """Add ``statements`` to the grantee's identity policy."""
    grants = [
        iam.Grant.add_to_principal(
            grantee=grantee, actions=s.actions, resource_arns=s.resources, conditions=s.conditions or None
        )
        for s in statements
    ]
    combined = grants[0]
    for other in grants[1:]:
        combined = combined.combine(other)
    return combined
