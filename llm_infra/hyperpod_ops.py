"""SageMaker HyperPod node operations on boto3: list, replace, reboot, wait, describe."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

HEALTHY = "Running"
BATCH_LIMIT = 25  # the batch node APIs take at most this many node ids per call


@dataclass(frozen=True)
class Node:
    node_id: str
    instance_group: str
    instance_type: str
    status: str
    launch_time: str

    @property
    def healthy(self) -> bool:
        return self.status == HEALTHY


@dataclass(frozen=True)
class BatchResult:
    successful: list[str]
    failed: list[dict[str, str]]  # NodeId, ErrorCode, Message


def list_nodes(sagemaker: Any, cluster: str, *, unhealthy_only: bool = False) -> list[Node]:
    """All nodes of ``cluster`` (every page of ListClusterNodes)."""
    nodes = []
    for page in sagemaker.get_paginator("list_cluster_nodes").paginate(ClusterName=cluster):
        for summary in page["ClusterNodeSummaries"]:
            nodes.append(
                Node(
                    node_id=summary["InstanceId"],
                    instance_group=summary["InstanceGroupName"],
                    instance_type=summary["InstanceType"],
                    status=summary["InstanceStatus"]["Status"],
                    launch_time=summary["LaunchTime"].isoformat(),
                )
            )
    return [n for n in nodes if not n.healthy] if unhealthy_only else nodes


def batch_action(sagemaker: Any, action: str, cluster: str, node_ids: list[str]) -> BatchResult:
    """BatchReplaceClusterNodes or BatchRebootClusterNodes in chunks; every node ends up in one list."""
    if action not in ("replace", "reboot"):
        raise ValueError(f"action: {action!r} is not allowed; allowed: replace, reboot")
    if not node_ids:
        raise ValueError("node ids: give at least one --node")
    call = sagemaker.batch_replace_cluster_nodes if action == "replace" else sagemaker.batch_reboot_cluster_nodes
    successful: list[str] = []
    failed: list[dict[str, str]] = []
    for start in range(0, len(node_ids), BATCH_LIMIT):
        chunk = node_ids[start : start + BATCH_LIMIT]
        response = call(ClusterName=cluster, NodeIds=chunk)
        successful += response.get("Successful", [])
        failed += response.get("Failed", [])
        answered = set(response.get("Successful", [])) | {f["NodeId"] for f in response.get("Failed", [])}
        failed += [
            {"NodeId": n, "ErrorCode": "NoAnswer", "Message": "not in the API's answer"}
            for n in chunk
            if n not in answered
        ]
    return BatchResult(successful=successful, failed=failed)


def wait_until_running(
    sagemaker: Any,
    cluster: str,
    node_ids: list[str],
    *,
    timeout_seconds: float = 3600,
    poll_seconds: float = 30,
    on_progress: Callable[[int, int], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Poll until every node in ``node_ids`` is Running; returns those that are not at the timeout."""
    pending = list(node_ids)
    deadline = time.monotonic() + timeout_seconds
    while True:
        status = {n.node_id: n.status for n in list_nodes(sagemaker, cluster)}
        pending = [n for n in node_ids if status.get(n) != HEALTHY]
        if on_progress:
            on_progress(len(node_ids) - len(pending), len(node_ids))
        if not pending or time.monotonic() >= deadline:
            return pending
        sleep(poll_seconds)


def cluster_status(sagemaker: Any, eks: Any, cloudformation: Any, cluster: str, stack_prefix: str) -> dict[str, Any]:
    """The HyperPod cluster, its EKS orchestrator, and the outputs of the app's stacks."""
    hyperpod = sagemaker.describe_cluster(ClusterName=cluster)
    status: dict[str, Any] = {
        "cluster": hyperpod["ClusterName"],
        "status": hyperpod["ClusterStatus"],
        "instance_groups": [
            {
                "name": g["InstanceGroupName"],
                "type": g["InstanceType"],
                "count": g.get("CurrentCount"),
                "target": g.get("TargetCount"),
            }
            for g in hyperpod.get("InstanceGroups", [])
        ],
        "node_recovery": hyperpod.get("NodeRecovery"),
    }
    eks_arn = hyperpod.get("Orchestrator", {}).get("Eks", {}).get("ClusterArn")
    if eks_arn:
        eks_cluster = eks.describe_cluster(name=eks_arn.rsplit("/", 1)[-1])["cluster"]
        status["eks"] = {
            "name": eks_cluster["name"],
            "status": eks_cluster["status"],
            "version": eks_cluster["version"],
        }
    outputs: dict[str, str] = {}
    for suffix in ("network", "storage", "cluster"):
        try:
            stacks = cloudformation.describe_stacks(StackName=f"{stack_prefix}-{suffix}")["Stacks"]
        except cloudformation.exceptions.ClientError:
            continue
        outputs.update({o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])})
    status["stack_outputs"] = outputs
    return status
