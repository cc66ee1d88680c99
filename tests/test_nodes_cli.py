"""`llm-infra nodes` / `cluster status` against a local AWS endpoint.

moto runs in server mode on 127.0.0.1 (conftest's ``aws_endpoint`` fixture); the CLI reaches it
through ``--endpoint-url`` like any AWS endpoint. moto 5.2.5 has no BatchReplace/BatchRebootClusterNodes
and always reports nodes Running: node states come from moto's own backend, and the batch calls
are tested with botocore's Stubber against the real SageMaker service model (said per test).
"""

from __future__ import annotations

import datetime
import json

import boto3
import pytest
from botocore.config import Config
from botocore.stub import ANY, Stubber

from conftest import ACCOUNT, REGION, run_cli
from llm_infra.cli.commands import hyperpod as hyperpod_commands
from llm_infra.ops.hyperpod import batch_action, list_nodes, wait_until_running


def sagemaker(endpoint: str):
    return boto3.client(
        "sagemaker",
        region_name=REGION,
        endpoint_url=endpoint,
        config=Config(retries={"mode": "standard", "max_attempts": 1}),
    )


@pytest.fixture(scope="module")
def cluster(aws_endpoint) -> str:
    client = sagemaker(aws_endpoint)
    groups = [
        {"InstanceGroupName": "gpu", "InstanceCount": 30, "InstanceType": "ml.p5.48xlarge"},
        {"InstanceGroupName": "cpu", "InstanceCount": 2, "InstanceType": "ml.m5.2xlarge"},
    ]
    client.create_cluster(
        ClusterName="hp",
        InstanceGroups=[
            {
                **g,
                "ExecutionRole": f"arn:aws:iam::{ACCOUNT}:role/hp",
                "ThreadsPerCore": 1,
                "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/hp/", "OnCreate": "on_create.sh"},
            }
            for g in groups
        ],
        VpcConfig={"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0"]},
    )
    return "hp"


def set_status(node_id: str, status: str) -> None:
    """Node health through moto's own backend (its API always reports Running)."""
    from moto.sagemaker.models import sagemaker_backends

    backend = sagemaker_backends[ACCOUNT][REGION]
    (node,) = [n for c in backend.clusters.values() for n in c.nodes.values() if n.instance_id == node_id]
    node.status = status


def test_list_all_nodes(aws_endpoint, cluster, capsys) -> None:
    """moto server: every node of both groups, as JSON."""
    code, out, _ = run_cli(capsys, "nodes", "list", "--cluster", cluster, "--endpoint-url", aws_endpoint, "--json")
    assert code == 0
    nodes = json.loads(out)
    assert len(nodes) == 32
    assert {n["instance_group"] for n in nodes} == {"gpu", "cpu"}
    assert all(n["status"] == "Running" for n in nodes)


def test_list_follows_next_tokens() -> None:
    """Stubber: moto answers in one page (and loops on NextToken when asked for smaller pages)."""
    client, stub = stubbed_client()
    stub.add_response(
        "list_cluster_nodes", {**node_page({"i-1": "Running"}), "NextToken": "page-2"}, {"ClusterName": "hp"}
    )
    stub.add_response("list_cluster_nodes", node_page({"i-2": "Failure"}), {"ClusterName": "hp", "NextToken": "page-2"})
    with stub:
        nodes = list_nodes(client, "hp")
    assert [(n.node_id, n.healthy) for n in nodes] == [("i-1", True), ("i-2", False)]


def test_unhealthy_filter(aws_endpoint, cluster, capsys) -> None:
    """moto server (node states set in its backend): only nodes that are not Running."""
    set_status("gpu-3", "Failure")
    set_status("gpu-7", "DeepHealthCheckInProgress")
    try:
        code, out, _ = run_cli(
            capsys, "nodes", "list", "--cluster", cluster, "--endpoint-url", aws_endpoint, "--unhealthy"
        )
        assert code == 0
        assert "gpu-3" in out and "gpu-7" in out and "gpu-4 " not in out
        assert out.strip().endswith("2 nodes")
    finally:
        set_status("gpu-3", "Running")
        set_status("gpu-7", "Running")


def test_no_credentials_are_printed(aws_endpoint, cluster, capsys) -> None:
    """moto server: the fake credentials never reach the output."""
    _, out, err = run_cli(capsys, "nodes", "list", "--cluster", cluster, "--endpoint-url", aws_endpoint)
    assert "testing" not in out + err


# ---- replace / reboot: botocore Stubber against the real service model (moto lacks these calls) ----
def stubbed_client():
    client = boto3.client("sagemaker", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    return client, Stubber(client)


def node_page(statuses: dict[str, str]) -> dict:
    now = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
    return {
        "ClusterNodeSummaries": [
            {
                "InstanceGroupName": "gpu",
                "InstanceId": node,
                "InstanceType": "ml.p5.48xlarge",
                "LaunchTime": now,
                "InstanceStatus": {"Status": status},
            }
            for node, status in statuses.items()
        ]
    }


def test_replace_reports_each_failed_node_and_waits_for_the_rest(capsys, monkeypatch) -> None:
    """Stubber (moto has no BatchReplaceClusterNodes): a refused node is reported, the rest waited for."""
    client, stub = stubbed_client()
    stub.add_response(
        "batch_replace_cluster_nodes",
        {
            "Successful": ["i-1", "i-2"],
            "Failed": [{"NodeId": "i-9", "ErrorCode": "InvalidNodeStatus", "Message": "node is being rebooted"}],
        },
        {"ClusterName": "hp", "NodeIds": ["i-1", "i-2", "i-9"]},
    )
    stub.add_response("list_cluster_nodes", node_page({"i-1": "Pending", "i-2": "Running"}), {"ClusterName": "hp"})
    stub.add_response("list_cluster_nodes", node_page({"i-1": "Running", "i-2": "Running"}), {"ClusterName": "hp"})
    monkeypatch.setattr(hyperpod_commands, "aws_client", lambda args, service: client)
    monkeypatch.setattr("llm_infra.ops.hyperpod.time.sleep", lambda seconds: None)
    with stub:
        code, out, err = run_cli(
            capsys,
            "nodes",
            "replace",
            "--cluster",
            "hp",
            "--instance-id",
            "i-1",
            "--instance-id",
            "i-2",
            "--instance-id",
            "i-9",
            "--yes",
            "--poll-seconds",
            "0.01",
            "--json",
        )
    assert code == 1  # a node failed: nothing is silently dropped
    report = json.loads(out)
    assert report["successful"] == ["i-1", "i-2"] and report["not_running_at_timeout"] == []
    assert report["failed"][0]["NodeId"] == "i-9"
    assert "failed: i-9: InvalidNodeStatus: node is being rebooted" in err
    assert "2/2 running" in err  # the progress bar
    stub.assert_no_pending_responses()


def test_reboot_needs_confirmation(capsys, monkeypatch) -> None:
    """No AWS call at all: a no at the prompt stops before any request."""
    monkeypatch.setattr("builtins.input", lambda: "n")
    monkeypatch.setattr(
        hyperpod_commands, "aws_client", lambda args, service: pytest.fail("no AWS call before confirmation")
    )
    code, _, err = run_cli(capsys, "nodes", "reboot", "--cluster", "hp", "--instance-id", "i-1")
    assert code == 1 and "aborted" in err


def test_batches_are_chunked_and_unanswered_nodes_count_as_failed() -> None:
    """Stubber: 30 nodes are two requests of at most 25; a node missing from the answer counts as failed."""
    client, stub = stubbed_client()
    nodes = [f"i-{n}" for n in range(30)]
    stub.add_response(
        "batch_reboot_cluster_nodes", {"Successful": nodes[:24]}, {"ClusterName": "hp", "NodeIds": nodes[:25]}
    )
    stub.add_response(
        "batch_reboot_cluster_nodes", {"Successful": nodes[25:]}, {"ClusterName": "hp", "NodeIds": nodes[25:]}
    )
    with stub:
        result = batch_action(client, "reboot", "hp", nodes)
    assert len(result.successful) == 29
    assert result.failed == [{"NodeId": "i-24", "ErrorCode": "NoAnswer", "Message": "not in the API's answer"}]
    with pytest.raises(ValueError, match="action: 'stop'"):
        batch_action(client, "stop", "hp", nodes)


def test_wait_gives_up_at_the_timeout(aws_endpoint, cluster) -> None:
    """moto server (node state set in its backend): the node still Pending at the timeout is returned."""
    set_status("gpu-5", "Pending")
    try:
        pending = wait_until_running(
            sagemaker(aws_endpoint), cluster, ["gpu-4", "gpu-5"], timeout_seconds=0, poll_seconds=0
        )
        assert pending == ["gpu-5"]
        assert [n.node_id for n in list_nodes(sagemaker(aws_endpoint), cluster, unhealthy_only=True)] == ["gpu-5"]
    finally:
        set_status("gpu-5", "Running")


def test_cluster_status_against_the_local_endpoint(aws_endpoint, cluster, capsys) -> None:
    """moto server: HyperPod cluster, instance groups and a stack's outputs."""
    cloudformation = boto3.client("cloudformation", region_name=REGION, endpoint_url=aws_endpoint)
    cloudformation.create_stack(
        StackName="llm-infra-storage",
        TemplateBody=json.dumps(
            {
                "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                "Outputs": {"FileSystemId": {"Value": "fs-0123456789abcdef0"}},
            }
        ),
    )
    code, out, _ = run_cli(capsys, "cluster", "status", "--cluster", cluster, "--endpoint-url", aws_endpoint, "--json")
    assert code == 0
    status = json.loads(out)
    assert status["cluster"] == "hp" and status["status"] == "InService"
    assert {g["name"] for g in status["instance_groups"]} == {"gpu", "cpu"}
    assert status["stack_outputs"] == {"FileSystemId": "fs-0123456789abcdef0"}


# ---- nodes add: BatchAddClusterNodes (not in moto: Stubber against the real service model) ----
def described(mode: str | None = "Continuous", target: int = 2) -> dict:
    groups = [
        {
            "InstanceGroupName": name,
            "InstanceType": "ml.p5.48xlarge",
            "CurrentCount": count,
            "TargetCount": count,
            "ExecutionRole": f"arn:aws:iam::{ACCOUNT}:role/hp",
            "ThreadsPerCore": 1,
            "LifeCycleConfig": {"SourceS3Uri": "s3://bucket/hp/", "OnCreate": "on_create.sh"},
        }
        for name, count in (("gpu", target), ("gpu-spare", 1))
    ]
    response = {
        "ClusterArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abcdefghijkl",
        "ClusterName": "hp",
        "ClusterStatus": "InService",
        "InstanceGroups": groups,
        "VpcConfig": {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0"]},
    }
    if mode:
        response["NodeProvisioningMode"] = mode
    return response


def group_page(statuses: dict[str, str], group: str = "gpu") -> dict:
    page = node_page(statuses)
    for summary in page["ClusterNodeSummaries"]:
        summary["InstanceGroupName"] = group
    return page


def added(count: int, group: str = "gpu") -> dict:
    return {
        "Successful": [
            {"NodeLogicalId": f"{group}-new-{n}", "InstanceGroupName": group, "Status": "Pending"} for n in range(count)
        ],
        "Failed": [],
    }


def test_add_raises_the_target_and_waits_until_the_group_runs_it(capsys, monkeypatch) -> None:
    """Stubber (moto has no BatchAddClusterNodes): add 3 to a group of 2, wait until 5 are Running;
    a node of the group gpu-spare (which ListClusterNodes' substring filter also returns) never counts."""
    client, stub = stubbed_client()
    stub.add_response("describe_cluster", described(target=2), {"ClusterName": "hp"})
    stub.add_response(
        "batch_add_cluster_nodes",
        added(3),
        {
            "ClusterName": "hp",
            "ClientToken": ANY,
            "NodesToAdd": [{"InstanceGroupName": "gpu", "IncrementTargetCountBy": 3}],
        },
    )
    listing = {"ClusterName": "hp", "InstanceGroupNameContains": "gpu"}
    spare = group_page({"i-s": "Running"}, "gpu-spare")["ClusterNodeSummaries"]
    first = group_page({"i-1": "Running", "i-2": "Running", "i-3": "Pending", "i-4": "Pending"})
    stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": first["ClusterNodeSummaries"] + spare}, listing)
    running = group_page({f"i-{n}": "Running" for n in range(1, 6)})
    stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": running["ClusterNodeSummaries"] + spare}, listing)
    monkeypatch.setattr(hyperpod_commands, "aws_client", lambda args, service: client)
    with stub:
        code, out, err = run_cli(
            capsys,
            "nodes",
            "add",
            "--cluster",
            "hp",
            "--group",
            "gpu",
            "--count",
            "3",
            "--poll-seconds",
            "0.01",
            "--json",
        )
    assert code == 0, err
    report = json.loads(out)
    assert report["target_count"] == 5 and report["running"] == 5
    assert report["added"] == ["gpu-new-0", "gpu-new-1", "gpu-new-2"]
    assert "2/5 running" in err and "5/5 running" in err  # the progress bar, spare node not counted
    stub.assert_no_pending_responses()


def test_add_splits_into_requests_of_50_and_reports_refused_nodes(capsys, monkeypatch) -> None:
    """Stubber: 60 nodes are two requests (50 + 10); nodes the API refuses are printed and fail the command."""
    client, stub = stubbed_client()
    stub.add_response("describe_cluster", described(target=0), {"ClusterName": "hp"})
    for increment, answer in (
        (50, added(50)),
        (
            10,
            {
                "Successful": [],
                "Failed": [
                    {
                        "InstanceGroupName": "gpu",
                        "ErrorCode": "InvalidInstanceGroupStatus",
                        "FailedCount": 10,
                        "Message": "instance group is updating",
                    }
                ],
            },
        ),
    ):
        stub.add_response(
            "batch_add_cluster_nodes",
            answer,
            {
                "ClusterName": "hp",
                "ClientToken": ANY,
                "NodesToAdd": [{"InstanceGroupName": "gpu", "IncrementTargetCountBy": increment}],
            },
        )
    monkeypatch.setattr(hyperpod_commands, "aws_client", lambda args, service: client)
    with stub:
        code, out, err = run_cli(
            capsys, "nodes", "add", "--cluster", "hp", "--group", "gpu", "--count", "60", "--no-wait"
        )
    assert code == 1
    assert "failed: 10 node(s) of gpu: InvalidInstanceGroupStatus: instance group is updating" in err
    assert out.strip() == "add: 50 of 60 accepted into gpu"
    stub.assert_no_pending_responses()


def test_add_gives_up_at_the_timeout(capsys, monkeypatch) -> None:
    """Stubber: the group never reaches its target: exit 1 with the count that did run."""
    client, stub = stubbed_client()
    stub.add_response("describe_cluster", described(target=1), {"ClusterName": "hp"})
    stub.add_response("batch_add_cluster_nodes", added(1), None)
    stub.add_response("list_cluster_nodes", group_page({"i-1": "Running", "i-2": "Pending"}), None)
    monkeypatch.setattr(hyperpod_commands, "aws_client", lambda args, service: client)
    with stub:
        code, out, _ = run_cli(
            capsys, "nodes", "add", "--cluster", "hp", "--group", "gpu", "--count", "1", "--timeout-minutes", "0"
        )
    assert code == 1
    assert out.strip() == "add: 1 of 1 accepted into gpu, 1/2 running"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cluster", "nope", "--group", "gpu"], "--cluster: no HyperPod cluster 'nope'"),
        (
            ["--cluster", "hp", "--group", "gpux"],
            "--group: 'gpux' is not an instance group of hp; its groups: cpu, gpu",
        ),
        # moto's DescribeCluster has no NodeProvisioningMode: as a cluster created without Continuous.
        (["--cluster", "hp", "--group", "gpu"], "BatchAddClusterNodes needs Continuous"),
    ],
)
def test_add_refuses_what_the_api_would_refuse(aws_endpoint, cluster, capsys, argv, message) -> None:
    """moto server: unknown cluster or group, and a cluster not in Continuous mode: exit 2, no node added."""
    code, out, err = run_cli(capsys, "nodes", "add", *argv, "--count", "2", "--endpoint-url", aws_endpoint)
    assert code == 2 and message in err and not out
    assert len(list_nodes(sagemaker(aws_endpoint), cluster)) == 32


def test_add_needs_a_positive_count(capsys, monkeypatch) -> None:
    """No AWS call: --count 0 is bad input."""
    monkeypatch.setattr(hyperpod_commands, "aws_client", lambda args, service: pytest.fail("no AWS call"))
    with pytest.raises(SystemExit) as exited:
        run_cli(capsys, "nodes", "add", "--cluster", "hp", "--group", "gpu", "--count", "0")
    assert exited.value.code == 2
    assert "argument --count: expected a whole number >= 1, got '0'" in capsys.readouterr().err
