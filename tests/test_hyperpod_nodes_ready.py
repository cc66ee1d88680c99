"""HyperPodNodesReady: the deploy-time wait for Running HyperPod nodes that the training operator's
add-on depends on. The handlers run against botocore's Stubber with the real SageMaker service model
(requests and answers are checked against it); the construct through the synthesized templates."""

from __future__ import annotations

import ast
import datetime
import json
import sys
import types

import aws_cdk as cdk
import boto3
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from conftest import hyperpod_config
from llm_infra.config import TrainingConfig
from llm_infra.constructs import hyperpod_nodes_ready_handler as handler
from llm_infra.constructs.hyperpod_cluster import HyperPodCluster, HyperPodInstanceGroup
from llm_infra.constructs.hyperpod_nodes_ready import HANDLER_SOURCE, RESOURCE_TYPE, HyperPodNodesReady

CLUSTER_ARN = "arn:aws:sagemaker:us-east-1:123456789012:cluster/abcdef012345"
OPERATOR_ADDON = "amazon-sagemaker-hyperpod-training-operator"
# CloudFormation waits at most one hour for a custom resource (ServiceTimeout 1..3600).
CUSTOM_RESOURCE_LIMIT_SECONDS = 3600


def request(request_type: str, minimum_running: dict[str, str] | None = None) -> dict:
    """A Provider-framework request as CloudFormation sends it: property values arrive as strings."""
    return {
        "RequestType": request_type,
        "ResourceType": RESOURCE_TYPE,
        "ResourceProperties": {
            "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:framework-onEvent",
            "ClusterArn": CLUSTER_ARN,
            "MinimumRunning": minimum_running if minimum_running is not None else {"cpu": "1"},
        },
    }


def page(nodes: list[tuple[str, str]], next_token: str | None = None) -> dict:
    """A ListClusterNodes answer; ``nodes``: (instance group, status) pairs."""
    launched = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
    answer: dict = {
        "ClusterNodeSummaries": [
            {
                "InstanceGroupName": group,
                "InstanceId": f"i-{index:017x}",
                "InstanceType": "ml.m5.2xlarge",
                "LaunchTime": launched,
                "InstanceStatus": {"Status": status},
            }
            for index, (group, status) in enumerate(nodes)
        ]
    }
    if next_token:
        answer["NextToken"] = next_token
    return answer


@pytest.fixture
def sagemaker():
    client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


# ---- the handlers ------------------------------------------------------------------------------
def test_complete_once_the_group_has_its_running_nodes(sagemaker, capsys) -> None:
    client, stub = sagemaker
    stub.add_response(
        "list_cluster_nodes", page([("gpu", "Pending"), ("cpu", "Running")]), {"ClusterName": CLUSTER_ARN}
    )
    assert handler.is_complete(request("Create"), None, sagemaker=client) == {"IsComplete": True}
    assert capsys.readouterr().out.strip() == f"ready: {CLUSTER_ARN}"


def test_not_complete_while_nodes_are_not_running_and_says_which(sagemaker, capsys) -> None:
    client, stub = sagemaker
    nodes = [("cpu", "Pending"), ("cpu", "DeepHealthCheckInProgress"), ("cpu", "Running"), ("gpu", "Running")]
    stub.add_response("list_cluster_nodes", page(nodes), {"ClusterName": CLUSTER_ARN})
    result = handler.is_complete(request("Create", {"cpu": "2"}), None, sagemaker=client)
    # Data is not allowed with IsComplete false (the framework fails the resource if it sees it).
    assert result == {"IsComplete": False}
    assert capsys.readouterr().out.strip() == (
        f"waiting for {CLUSTER_ARN}: cpu: 1 of 2 Running (DeepHealthCheckInProgress 1, Pending 1, Running 1)"
    )


def test_every_page_counts(sagemaker) -> None:
    client, stub = sagemaker
    stub.add_response(
        "list_cluster_nodes",
        page([("gpu", "Running"), ("cpu", "Running")], next_token="page-2"),
        {"ClusterName": CLUSTER_ARN},
    )
    stub.add_response(
        "list_cluster_nodes", page([("cpu", "Running")]), {"ClusterName": CLUSTER_ARN, "NextToken": "page-2"}
    )
    assert handler.is_complete(request("Update", {"cpu": "2"}), None, sagemaker=client) == {"IsComplete": True}


def test_a_group_with_no_nodes_is_not_complete_and_named(sagemaker, capsys) -> None:
    """No node of the group listed yet (continuous provisioning still working, or a group name the
    cluster lacks): not complete, and the log line names the group."""
    client, stub = sagemaker
    # cpu-spare contains "cpu": the API's InstanceGroupNameContains would match it, the wait must not.
    stub.add_response(
        "list_cluster_nodes", page([("gpu", "Running"), ("cpu-spare", "Running")]), {"ClusterName": CLUSTER_ARN}
    )
    result = handler.is_complete(request("Create", {"gpu": "1", "cpu": "1"}), None, sagemaker=client)
    assert result == {"IsComplete": False}
    assert capsys.readouterr().out.strip() == f"waiting for {CLUSTER_ARN}: cpu: 0 of 1 Running (no nodes listed yet)"


def test_an_api_error_fails_at_once(sagemaker) -> None:
    """A missing cluster or a denied call is raised: the framework fails the resource with the message
    instead of polling until the timeout."""
    client, stub = sagemaker
    stub.add_client_error("list_cluster_nodes", "ResourceNotFound", "Resource being accessed is not found.")
    with pytest.raises(ClientError, match="ResourceNotFound"):
        handler.is_complete(request("Create"), None, sagemaker=client)


def test_a_failed_node_fails_at_once_with_its_message(sagemaker) -> None:
    """A group short of its minimum with a node in Failure: the resource fails now with HyperPod's
    message, not after CloudFormation's hour of polling."""
    client, stub = sagemaker
    answer = page([("cpu", "Failure"), ("cpu", "Pending"), ("gpu", "Failure")])
    answer["ClusterNodeSummaries"][0]["InstanceStatus"]["Message"] = "Lifecycle script did not run successfully."
    stub.add_response("list_cluster_nodes", answer, {"ClusterName": CLUSTER_ARN})
    with pytest.raises(handler.NodeFailure) as failure:
        handler.is_complete(request("Create", {"cpu": "1"}), None, sagemaker=client)
    # Only the waited-for group is named; the gpu group's failure is not this wait's business.
    assert str(failure.value) == (
        "HyperPod nodes failed: cpu: 0 of 1 Running; Failure on "
        "i-00000000000000000: Lifecycle script did not run successfully."
    )


def test_a_failed_node_beside_enough_running_ones_does_not_fail(sagemaker) -> None:
    client, stub = sagemaker
    stub.add_response(
        "list_cluster_nodes", page([("cpu", "Failure"), ("cpu", "Running")]), {"ClusterName": CLUSTER_ARN}
    )
    assert handler.is_complete(request("Create", {"cpu": "1"}), None, sagemaker=client) == {"IsComplete": True}


def test_delete_does_nothing(sagemaker) -> None:
    client, _ = sagemaker  # no stubbed answer: any API call would fail the test
    assert handler.on_event(request("Delete", {}), None) == {}
    assert handler.is_complete(request("Delete", {}), None, sagemaker=client) == {"IsComplete": True}


@pytest.mark.parametrize(
    ("minimum_running", "message"),
    [
        ({}, "MinimumRunning: a non-empty map"),
        ({"cpu": "one"}, r"MinimumRunning\[cpu\]: 'one' is not a whole number"),
        ({"cpu": "0"}, r"MinimumRunning\[cpu\]: 0 must be >= 1"),
    ],
)
def test_bad_properties_fail_the_create_at_once(minimum_running: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        handler.on_event(request("Create", minimum_running), None)
    assert handler.on_event(request("Create", {"cpu": "3"}), None) == {}


def test_the_handler_needs_nothing_beyond_the_lambda_runtime() -> None:
    """boto3 and the standard library: the Python Lambda runtime has both, and nothing else is packaged."""
    tree = ast.parse(HANDLER_SOURCE.read_text())
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported - set(sys.stdlib_module_names) == {"boto3"}


# ---- the construct in the HyperPod cluster stack -------------------------------------------------
@pytest.fixture(scope="module")
def hyperpod_app(synth):
    return synth(hyperpod_config())


def nodes_ready(app) -> tuple[str, dict]:
    ((logical_id, resource),) = app.resources("-cluster", RESOURCE_TYPE).items()
    return logical_id, resource


def functions(app) -> dict[str, dict]:
    """The wait's own Lambdas by handler entry (index.on_event, index.is_complete)."""
    return {
        r["Properties"]["Handler"]: r
        for r in app.resources("-cluster", "AWS::Lambda::Function").values()
        if r["Properties"].get("Description", "").startswith("HyperPodNodesReady")
    }


def test_operator_addon_waits_for_a_running_cpu_node(hyperpod_app) -> None:
    logical_id, resource = nodes_ready(hyperpod_app)
    (hyperpod_id,) = hyperpod_app.resources("-cluster", "AWS::SageMaker::Cluster")
    assert resource["Properties"]["ClusterArn"] == {"Fn::GetAtt": [hyperpod_id, "ClusterArn"]}
    assert resource["Properties"]["MinimumRunning"] == {"cpu": 1}
    (addon,) = [
        r
        for r in hyperpod_app.resources("-cluster", "AWS::EKS::Addon").values()
        if r["Properties"]["AddonName"] == OPERATOR_ADDON
    ]
    assert logical_id in addon["DependsOn"]


def test_the_deployed_code_is_the_tested_module(hyperpod_app, sagemaker) -> None:
    """The template carries the handler file inline (index.py), and that text works as a module."""
    deployed = functions(hyperpod_app)
    assert set(deployed) == {"index.on_event", "index.is_complete"}
    for function in deployed.values():
        assert function["Properties"]["Code"]["ZipFile"] == HANDLER_SOURCE.read_text()
        assert function["Properties"]["Runtime"].startswith("python3.")
    index = types.ModuleType("index")
    exec(compile(deployed["index.is_complete"]["Properties"]["Code"]["ZipFile"], "index.py", "exec"), index.__dict__)
    client, stub = sagemaker
    stub.add_response("list_cluster_nodes", page([("cpu", "Running")]), {"ClusterName": CLUSTER_ARN})
    assert index.is_complete(request("Create"), None, sagemaker=client) == {"IsComplete": True}


def test_only_the_poller_may_list_this_clusters_nodes(hyperpod_app) -> None:
    (hyperpod_id,) = hyperpod_app.resources("-cluster", "AWS::SageMaker::Cluster")
    deployed = functions(hyperpod_app)
    role_of = {entry: f["Properties"]["Role"]["Fn::GetAtt"][0] for entry, f in deployed.items()}
    statements: dict[str, list[dict]] = {role: [] for role in role_of.values()}
    sagemaker_grants = []
    for policy in hyperpod_app.resources("-cluster", "AWS::IAM::Policy").values():
        document = policy["Properties"]["PolicyDocument"]
        for role in policy["Properties"]["Roles"]:
            statements.get(role["Ref"], []).extend(document["Statement"])
        sagemaker_grants += [s for s in document["Statement"] if "sagemaker:ListClusterNodes" in json.dumps(s)]
    poller = statements[role_of["index.is_complete"]]
    assert [s for s in poller if "sagemaker" in json.dumps(s)] == [
        {
            "Action": "sagemaker:ListClusterNodes",
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [hyperpod_id, "ClusterArn"]},
        }
    ]
    assert sagemaker_grants == [s for s in poller if "sagemaker" in json.dumps(s)]
    assert not [s for s in statements[role_of["index.on_event"]] if "sagemaker" in json.dumps(s)]
    for role in role_of.values():
        assert "ManagedPolicyArns" not in hyperpod_app.template("-cluster")["Resources"][role]["Properties"]


def test_the_waiter_gives_up_before_cloudformation_does(hyperpod_app) -> None:
    """The provider's state machine polls every 30 s and times out (answering "Operation timed out")
    before CloudFormation's one-hour limit for a custom resource would cut it off unanswered."""
    waiters = [
        r
        for lid, r in hyperpod_app.resources("-cluster", "AWS::StepFunctions::StateMachine").items()
        if "NodesReady" in lid
    ]
    (waiter,) = waiters
    definition = json.loads(
        "".join(
            part if isinstance(part, str) else "ARN" for part in waiter["Properties"]["DefinitionString"]["Fn::Join"][1]
        )
    )
    (retry,) = definition["States"]["framework-isComplete-task"]["Retry"]
    assert retry["IntervalSeconds"] == 30
    assert 30 * 60 <= retry["IntervalSeconds"] * retry["MaxAttempts"] < CUSTOM_RESOURCE_LIMIT_SECONDS


@pytest.mark.parametrize(
    "config",
    [hyperpod_config(hyperpod_training_operator=False), TrainingConfig()],
    ids=["hyperpod-without-operator", "eks"],
)
def test_no_wait_without_the_operator(synth, config) -> None:
    assert synth(config).resources("-cluster", RESOURCE_TYPE) == {}


# ---- synth-time checks ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hyperpod() -> HyperPodCluster:
    stack = cdk.Stack(cdk.App(), "S")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=1)
    return HyperPodCluster(
        stack,
        "HyperPod",
        cluster=eks.Cluster(stack, "Eks", version=eks.KubernetesVersion.of("1.34"), vpc=vpc),
        subnet=vpc.private_subnets[0],
        security_groups=[],
        instance_groups=[
            HyperPodInstanceGroup(name="gpu", count=4),
            HyperPodInstanceGroup(
                name="cpu", instance_type="ml.m5.2xlarge", storage_volumes_gib=(), deep_health_checks=(), gpu=False
            ),
        ],
        cluster_name="hp",
    )


@pytest.mark.parametrize(
    ("groups", "timeout", "message"),
    [
        ({}, cdk.Duration.minutes(50), "instance_groups: name at least one of gpu, cpu"),
        (
            {"workers": 1},
            cdk.Duration.minutes(50),
            "instance_groups: 'workers' is not an instance group .* allowed: gpu, cpu",
        ),
        ({"cpu": 3}, cdk.Duration.minutes(50), r"instance_groups\[cpu\]: 3 Running nodes must lie in 1..2"),
        ({"gpu": 0}, cdk.Duration.minutes(50), r"instance_groups\[gpu\]: 0 Running nodes must lie in 1..4"),
        ({"cpu": 1}, cdk.Duration.minutes(60), "timeout: 1 hour must lie in 1..55 minutes"),
        ({"cpu": 1}, cdk.Duration.seconds(30), "timeout: 30 seconds must lie in 1..55 minutes"),
    ],
)
def test_bad_props_are_synth_errors(hyperpod, groups: dict[str, int], timeout: cdk.Duration, message: str) -> None:
    scope = cdk.Stack.of(hyperpod)
    with pytest.raises(ValueError, match=message):
        HyperPodNodesReady(
            scope, f"Wait{len(scope.node.children)}", hyperpod=hyperpod, instance_groups=groups, timeout=timeout
        )


def test_several_groups_each_with_its_minimum(hyperpod) -> None:
    scope = cdk.Stack.of(hyperpod)
    HyperPodNodesReady(scope, "AllNodes", hyperpod=hyperpod, instance_groups={"gpu": 4, "cpu": 2})
    Template.from_stack(scope).has_resource_properties(RESOURCE_TYPE, {"MinimumRunning": {"cpu": 2, "gpu": 4}})
