"""SageMaker HyperPod node operations on boto3: list, add, replace, reboot, wait, describe."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

HEALTHY = "Running"
BATCH_LIMIT = 25  # the batch node APIs take at most this many node ids per call
# BatchAddClusterNodes: "up to 5 instance groups in a single request, with a maximum of 50 nodes total
# across all instance groups", and only for clusters whose NodeProvisioningMode is Continuous
# (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_BatchAddClusterNodes.html; botocore
# 1.44.8 sagemaker model: IncrementTargetCountBy 1..50).
ADD_LIMIT = 50
CONTINUOUS = "Continuous"


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


@dataclass(frozen=True)
class AddResult:
    """What BatchAddClusterNodes accepted: one logical id per node, and the group's new target."""

    node_logical_ids: list[str]
    failed: list[dict[str, Any]]  # InstanceGroupName, ErrorCode, FailedCount, Message
    target_count: int


def list_nodes(
    sagemaker: Any, cluster: str, *, unhealthy_only: bool = False, instance_group: str | None = None
) -> list[Node]:
    """All nodes of ``cluster`` (every page of ListClusterNodes), or of one instance group."""
    nodes = []
    filters = {"InstanceGroupNameContains": instance_group} if instance_group else {}
    for page in sagemaker.get_paginator("list_cluster_nodes").paginate(ClusterName=cluster, **filters):
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
    if instance_group:  # the API filter matches substrings: gpu would match gpu-spare too
        nodes = [n for n in nodes if n.instance_group == instance_group]
    return [n for n in nodes if not n.healthy] if unhealthy_only else nodes


def describe_cluster(sagemaker: Any, cluster: str) -> dict[str, Any]:
    """DescribeCluster; an unknown cluster is a ValueError that names it."""
    try:
        return dict(sagemaker.describe_cluster(ClusterName=cluster))
    except sagemaker.exceptions.ClientError as err:
        # The API answers ResourceNotFound; moto (and a malformed name) ValidationException.
        if err.response["Error"]["Code"] not in ("ResourceNotFound", "ValidationException"):
            raise
        raise ValueError(f"cluster: no HyperPod cluster {cluster!r}: {err.response['Error']['Message']}") from None


def add_nodes(sagemaker: Any, cluster: str, group: str, count: int) -> AddResult:
    """BatchAddClusterNodes: raise ``group``'s target count by ``count`` (in requests of at most 50).

    Checks first what the API would refuse with a less helpful message: an unknown cluster or group,
    and a cluster not in Continuous provisioning mode.
    """
    if count < 1:
        raise ValueError(f"count: {count} must be >= 1")
    description = describe_cluster(sagemaker, cluster)
    groups = {g["InstanceGroupName"]: g for g in description.get("InstanceGroups", [])}
    if group not in groups:
        raise ValueError(
            f"group: {group!r} is not an instance group of {cluster}; its groups: {', '.join(sorted(groups)) or 'none'}"
        )
    mode = description.get("NodeProvisioningMode")
    if mode != CONTINUOUS:
        raise ValueError(
            f"cluster: {cluster} has NodeProvisioningMode {mode or 'unset'}; BatchAddClusterNodes needs "
            f"{CONTINUOUS} (set it at creation or with UpdateCluster)"
        )
    before = groups[group].get("TargetCount", groups[group].get("CurrentCount", 0))
    logical_ids: list[str] = []
    failed: list[dict[str, Any]] = []
    for start in range(0, count, ADD_LIMIT):
        response = sagemaker.batch_add_cluster_nodes(
            ClusterName=cluster,
            # One token per request: a retried request adds its nodes once (the token holds 8 hours).
            ClientToken=str(uuid.uuid4()),
            NodesToAdd=[{"InstanceGroupName": group, "IncrementTargetCountBy": min(ADD_LIMIT, count - start)}],
        )
        logical_ids += [n["NodeLogicalId"] for n in response.get("Successful", [])]
        failed += response.get("Failed", [])
    return AddResult(node_logical_ids=logical_ids, failed=failed, target_count=before + len(logical_ids))


def wait_for_group(
    sagemaker: Any,
    cluster: str,
    group: str,
    target: int,
    *,
    timeout_seconds: float = 3600,
    poll_seconds: float = 30,
    on_progress: Callable[[int, int], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Poll ListClusterNodes until ``target`` nodes of ``group`` are Running; the count at the end."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        running = sum(n.healthy for n in list_nodes(sagemaker, cluster, instance_group=group))
        if on_progress:
            on_progress(min(running, target), target)
        if running >= target or time.monotonic() >= deadline:
            return running
        sleep(poll_seconds)


def batch_action(sagemaker: Any, action: str, cluster: str, node_ids: list[str]) -> BatchResult:
    """BatchReplaceClusterNodes or BatchRebootClusterNodes in chunks; every node ends up in one list."""
    if action not in ("replace", "reboot"):
        raise ValueError(f"action: {action!r} is not allowed; allowed: replace, reboot")
    if not node_ids:
        raise ValueError("instance ids: give at least one --instance-id")
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


# Labelling a node's health status this way starts the same HyperPod recovery as the batch APIs; the
# cluster needs automatic node recovery on (docs: "Manually quarantine, replace, or reboot a node",
# https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-resiliency-manual.html).
PENDING_REPLACEMENT = "UnschedulablePendingReplacement"
PENDING_REBOOT = "UnschedulablePendingReboot"


def request_node_recovery(kube: Any, node: str, status: str) -> None:
    """Label Kubernetes node ``node`` for replacement or reboot (``kube``: :class:`llm_infra.ops.kube.Kube`)."""
    from llm_infra.node_labels import HEALTH_STATUS_KEY

    if status not in (PENDING_REPLACEMENT, PENDING_REBOOT):
        raise ValueError(f"status: {status!r} is not allowed; allowed: {PENDING_REPLACEMENT}, {PENDING_REBOOT}")
    kube.patch("v1", "Node", node, {"metadata": {"labels": {HEALTH_STATUS_KEY: status}}})
