"""`llm-infra nodes` / `cluster status` against a local AWS endpoint.

moto runs in server mode on 127.0.0.1 (started by the fixture); the CLI reaches it through
``--endpoint-url`` like any AWS endpoint. moto 5.2.5 has no BatchReplace/BatchRebootClusterNodes
and always reports nodes Running: node states come from moto's own backend, and the batch calls
are tested with botocore's Stubber against the real SageMaker service model (said per test).
"""

from __future__ import annotations

import datetime
import json

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber
from moto.server import ThreadedMotoServer

from llm_infra import cli
from llm_infra.commands import hyperpod as hyperpod_commands
from llm_infra.hyperpod_ops import batch_action, list_nodes, wait_until_running

REGION = "us-east-1"
ACCOUNT = "123456789012"


@pytest.fixture(scope="module")
def endpoint():
    """moto in server mode on loopback, with fake credentials for the clients."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        env.setenv("AWS_DEFAULT_REGION", REGION)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
        server.stop()


def sagemaker(endpoint: str):
    return boto3.client(
        "sagemaker",
        region_name=REGION,
        endpoint_url=endpoint,
        config=Config(retries={"mode": "standard", "max_attempts": 1}),
    )


@pytest.fixture(scope="module")
def cluster(endpoint) -> str:
    client = sagemaker(endpoint)
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


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_all_nodes(endpoint, cluster, capsys) -> None:
    code, out, _ = run(capsys, "nodes", "list", "--cluster", cluster, "--endpoint-url", endpoint, "--json")
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


def test_unhealthy_filter(endpoint, cluster, capsys) -> None:
    set_status("gpu-3", "Failure")
    set_status("gpu-7", "DeepHealthCheckInProgress")
    try:
        code, out, _ = run(capsys, "nodes", "list", "--cluster", cluster, "--endpoint-url", endpoint, "--unhealthy")
        assert code == 0
        assert "gpu-3" in out and "gpu-7" in out and "gpu-4 " not in out
        assert out.strip().endswith("2 nodes")
    finally:
        set_status("gpu-3", "Running")
        set_status("gpu-7", "Running")


def test_no_credentials_are_printed(endpoint, cluster, capsys) -> None:
    _, out, err = run(capsys, "nodes", "list", "--cluster", cluster, "--endpoint-url", endpoint)
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
    monkeypatch.setattr("llm_infra.hyperpod_ops.time.sleep", lambda seconds: None)
    with stub:
        code, out, err = run(
            capsys,
            "nodes",
            "replace",
            "--cluster",
            "hp",
            "--node",
            "i-1",
            "--node",
            "i-2",
            "--node",
            "i-9",
            "--yes",
            "--poll-seconds",
            "0",
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
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    monkeypatch.setattr(
        hyperpod_commands, "aws_client", lambda args, service: pytest.fail("no AWS call before confirmation")
    )
    code, _, err = run(capsys, "nodes", "reboot", "--cluster", "hp", "--node", "i-1")
    assert code == 1 and "aborted" in err


def test_batches_are_chunked_and_unanswered_nodes_count_as_failed() -> None:
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


def test_wait_gives_up_at_the_timeout(endpoint, cluster) -> None:
    set_status("gpu-5", "Pending")
    try:
        pending = wait_until_running(
            sagemaker(endpoint), cluster, ["gpu-4", "gpu-5"], timeout_seconds=0, poll_seconds=0
        )
        assert pending == ["gpu-5"]
        assert [n.node_id for n in list_nodes(sagemaker(endpoint), cluster, unhealthy_only=True)] == ["gpu-5"]
    finally:
        set_status("gpu-5", "Running")


def test_cluster_status_against_the_local_endpoint(endpoint, cluster, capsys) -> None:
    cloudformation = boto3.client("cloudformation", region_name=REGION, endpoint_url=endpoint)
    cloudformation.create_stack(
        StackName="llm-infra-storage",
        TemplateBody=json.dumps(
            {
                "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                "Outputs": {"FileSystemId": {"Value": "fs-0123456789abcdef0"}},
            }
        ),
    )
    code, out, _ = run(capsys, "cluster", "status", "--cluster", cluster, "--endpoint-url", endpoint, "--json")
    assert code == 0
    status = json.loads(out)
    assert status["cluster"] == "hp" and status["status"] == "InService"
    assert {g["name"] for g in status["instance_groups"]} == {"gpu", "cpu"}
    assert status["stack_outputs"] == {"FileSystemId": "fs-0123456789abcdef0"}
