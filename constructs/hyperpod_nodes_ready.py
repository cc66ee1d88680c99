"""HyperPodNodesReady: a deploy-time wait until HyperPod instance groups have Running nodes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from llm_infra.constructs.hyperpod_cluster import HyperPodCluster
from llm_infra.constructs.nag import acknowledge, attribute_finding, managed_policy_finding
from llm_infra.constructs.validation import ConstructValidationError

HANDLER_SOURCE = Path(__file__).resolve().parent / "hyperpod_nodes_ready_handler.py"
RESOURCE_TYPE = "Custom::HyperPodNodesReady"
QUERY_INTERVAL = cdk.Duration.seconds(30)
# CloudFormation waits at most 3600 s for a custom resource's answer (ServiceTimeout: 1..3600,
# AWS::CloudFormation::CustomResource reference). The provider must time out and answer before that.
MAX_TIMEOUT = cdk.Duration.minutes(55)
DEFAULT_TIMEOUT = cdk.Duration.minutes(50)


class HyperPodNodesReady(Construct):
    """Completes, at deploy, once each of ``instance_groups`` (group name -> least number of nodes)
    of ``hyperpod`` has that many nodes whose SageMaker status is Running (``ListClusterNodes``).

    With ``NodeProvisioningMode: Continuous`` the HyperPod cluster's CloudFormation create ends before
    any node has joined EKS. Whatever needs HyperPod nodes to become healthy (an EKS add-on whose pods
    only run there) depends on ``resource``: ``node.add_dependency(nodes_ready.resource)``. AWS's HyperPod
    EKS Terraform waits the same way before its add-ons (awsome-distributed-training,
    1.architectures/7.sagemaker-hyperpod-eks/terraform-modules/hyperpod-eks-tf/scripts/
    wait-for-hyperpod-nodes.sh: at least one node labelled with the cluster's name, 30 s polls).

    - a custom resource (``Custom::HyperPodNodesReady``) served by an ``aws_cdk.custom_resources.Provider``:
      ``is_complete`` polls every 30 s up to ``timeout`` (default 50 minutes, at most 55: CloudFormation
      gives a custom resource one hour); Delete does nothing;
    - the handlers (``hyperpod_nodes_ready_handler.py``, boto3 only) inline in the template, each with
      its own role: the poller may call ``sagemaker:ListClusterNodes`` on this cluster only;
    - ``log_group``: the handlers' log, where each poll writes which groups still fall short;
    - ``provider``, ``resource``: the provider and the custom resource.

    SageMaker's Running is the signal here; AWS's script watches the Kubernetes node objects instead,
    which this wait cannot see (it has no Kubernetes access).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        hyperpod: HyperPodCluster,
        instance_groups: Mapping[str, int],
        timeout: cdk.Duration = DEFAULT_TIMEOUT,
    ) -> None:
        super().__init__(scope, construct_id)
        try:
            _validate(hyperpod, instance_groups, timeout)
        except ValueError as err:
            raise ConstructValidationError(self, str(err)) from None
        self.log_group = logs.LogGroup(
            self, "Logs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=cdk.RemovalPolicy.DESTROY
        )
        code = lambda_.Code.from_inline(HANDLER_SOURCE.read_text())
        on_event = self._handler("OnEvent", "on_event", code, "Checks the wait's properties; Delete is a no-op")
        is_complete = self._handler("IsComplete", "is_complete", code, "Polls ListClusterNodes for Running nodes")
        # ListClusterNodes takes the cluster resource type (AWS's HyperPod IAM examples grant it on
        # arn:aws:sagemaker:<region>:<account>:cluster/*; docs: sagemaker-hyperpod-prerequisites-iam).
        is_complete.add_to_role_policy(
            iam.PolicyStatement(actions=["sagemaker:ListClusterNodes"], resources=[hyperpod.cluster_arn])
        )
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=on_event,
            is_complete_handler=is_complete,
            query_interval=QUERY_INTERVAL,
            total_timeout=timeout,
            log_group=self.log_group,
        )
        self.resource = cdk.CustomResource(
            self,
            "Resource",
            service_token=self.provider.service_token,
            resource_type=RESOURCE_TYPE,
            # The ARN (a GetAtt) also orders this after the HyperPod cluster.
            properties={"ClusterArn": hyperpod.cluster_arn, "MinimumRunning": dict(sorted(instance_groups.items()))},
        )
        self._acknowledge_provider_framework(on_event, is_complete)

    def _handler(self, construct_id: str, entry: str, code: lambda_.Code, description: str) -> lambda_.Function:
        role = iam.Role(self, f"{construct_id}Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        self.log_group.grant_write(role)
        return lambda_.Function(
            self,
            construct_id,
            runtime=lambda_.Runtime.PYTHON_3_14,
            handler=f"index.{entry}",
            code=code,
            role=role,
            timeout=cdk.Duration.seconds(60),
            log_group=self.log_group,
            description=f"HyperPodNodesReady: {description}",
        )

    def _acknowledge_provider_framework(self, *handlers: lambda_.Function) -> None:
        """Acknowledge, finding by finding, what aws-cdk-lib's provider framework generates around the
        handlers (its own Lambdas' roles, its waiter state machine)."""
        acknowledge(
            self.provider,
            "IAM4",
            "The custom-resource provider framework's Lambdas use the AWS-maintained basic execution policy.",
            findings=[managed_policy_finding("service-role/AWSLambdaBasicExecutionRole")],
        )
        framework = [self.provider.node.find_child(f"framework-{name}") for name in ("isComplete", "onTimeout")]
        invoked = [_function_resource(function) for function in (*handlers, *framework)]
        acknowledge(
            self.provider,
            "IAM5",
            "The provider framework may invoke exactly these functions, any version of each (ARN:*).",
            findings=[attribute_finding(resource, "Arn", ":*") for resource in invoked],
        )
        acknowledge(
            self.provider,
            "SF1",
            "The framework's waiter state machine only retries the isComplete task; each poll's result is "
            "written to this construct's log group by the handler.",
        )
        acknowledge(
            self.provider,
            "SF2",
            "aws-cdk-lib's Provider offers no X-Ray tracing for its waiter state machine (one retried task).",
        )


def _function_resource(function: object) -> cdk.CfnResource:
    resource = function.node.default_child if isinstance(function, Construct) else None
    assert isinstance(resource, cdk.CfnResource), f"{function} has no CloudFormation resource"
    return resource


def _validate(hyperpod: HyperPodCluster, instance_groups: Mapping[str, int], timeout: cdk.Duration) -> None:
    groups = {group.name: group for group in hyperpod.instance_groups}
    if not instance_groups:
        raise ValueError(f"instance_groups: name at least one of {', '.join(groups)} with its least Running count")
    for name, minimum in instance_groups.items():
        if name not in groups:
            raise ValueError(
                f"instance_groups: {name!r} is not an instance group of the HyperPod cluster; allowed: "
                + ", ".join(groups)
            )
        if not 1 <= minimum <= groups[name].count:
            raise ValueError(
                f"instance_groups[{name}]: {minimum} Running nodes must lie in 1..{groups[name].count} "
                "(the group's instance count)"
            )
    seconds = timeout.to_seconds()
    if not QUERY_INTERVAL.to_seconds() * 2 <= seconds <= MAX_TIMEOUT.to_seconds():
        raise ValueError(
            f"timeout: {timeout.to_human_string()} must lie in 1..55 minutes (CloudFormation waits one hour "
            "for a custom resource)"
        )
