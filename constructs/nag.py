"""Acknowledging cdk-nag (AwsSolutions) findings, always with a specific reason.

cdk-nag 3 reports IAM4/IAM5 findings with the exact policy or resource in the rule id
(``AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSWorkerNodePolicy]``)
and honours an acknowledgment only for that exact id. The helpers here build those ids, so each
acknowledgment names precisely what it accepts; nothing is waived for a whole rule.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import IConstruct


def acknowledge(scope: IConstruct, rule: str, reason: str, *, findings: list[str] | None = None) -> None:
    """Acknowledge AwsSolutions ``rule`` (e.g. ``"IAM5"``) for ``scope`` and everything under it.

    With ``findings``, only those granular findings of the rule are acknowledged.
    """
    if len(reason) < 20:
        raise ValueError(f"reason for AwsSolutions-{rule} must explain the exception, got {reason!r}")
    ids = [f"AwsSolutions-{rule}[{finding}]" for finding in findings] if findings else [f"AwsSolutions-{rule}"]
    cdk.Validations.of(scope).acknowledge(*(cdk.Acknowledgment(id=id_, reason=reason) for id_ in ids))


def managed_policy_finding(name: str) -> str:
    """The IAM4 finding of an AWS managed policy, e.g. ``service-role/AWSLambdaBasicExecutionRole``."""
    return f"Policy::arn:<AWS::Partition>:iam::aws:policy/{name}"


def attribute_finding(resource: cdk.CfnResource, attribute: str, suffix: str = "") -> str:
    """The IAM5 finding of a wildcard ARN built from a same-stack ``Fn::GetAtt``."""
    logical_id = cdk.Stack.of(resource).get_logical_id(resource)
    return f"Resource::<{logical_id}.{attribute}>{suffix}"


def bucket_objects_finding(bucket: s3.IBucket, key_pattern: str) -> str:
    """The IAM5 finding of ``bucket.arn_for_objects(key_pattern)`` seen from the bucket's stack."""
    if isinstance(bucket.node.default_child, cdk.CfnResource):
        return attribute_finding(bucket.node.default_child, "Arn", f"/{key_pattern}")
    # A bucket imported by name renders as a plain ARN.
    return f"Resource::arn:<AWS::Partition>:s3:::{bucket.bucket_name}/{key_pattern}"


def use_aws_managed_policies(role: iam.Role, names: list[str], reason: str) -> None:
    """Attach AWS managed policies to ``role`` and acknowledge IAM4 for exactly those."""
    for name in names:
        role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(name))
    acknowledge(role, "IAM4", reason, findings=[managed_policy_finding(name) for name in names])


# The actions that aws-cdk-lib's own grant_read / grant_read_write expand to (asset reads, copies).
CDK_S3_READ_FINDINGS = ["Action::s3:GetObject*", "Action::s3:GetBucket*", "Action::s3:List*"]
CDK_S3_WRITE_FINDINGS = ["Action::s3:DeleteObject*", "Action::s3:Abort*"]


def asset_bucket_objects_finding(scope: IConstruct) -> str:
    """The IAM5 finding of the CDK bootstrap assets bucket's objects (``cdk bootstrap`` creates it)."""
    qualifier = (
        scope.node.try_get_context("@aws-cdk/core:bootstrapQualifier") or cdk.DefaultStackSynthesizer.DEFAULT_QUALIFIER
    )
    return f"Resource::arn:<AWS::Partition>:s3:::cdk-{qualifier}-assets-<AWS::AccountId>-<AWS::Region>/*"
