"""Lambda handlers of HyperPodNodesReady, for an ``aws_cdk.custom_resources.Provider``: wait until
HyperPod instance groups have Running nodes. boto3 and the standard library only (the Lambda Python
runtime's); CloudFormation stores this file inline as ``index.py``.

Resource properties: ``ClusterArn`` and ``MinimumRunning``, a map of instance group name to the
least number of its nodes that must be Running (CloudFormation hands numbers to custom resources
as strings).

Provider framework contract (aws-cdk-lib 2.275.0, custom-resources/lib/provider-framework/runtime/
framework.js): ``on_event``'s answer may set the physical id; ``is_complete`` is called for every
request type until it answers ``{"IsComplete": True}`` or the provider's total timeout ends ("Operation
timed out"); an exception fails the resource at once with its message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import boto3

# ClusterInstanceStatus in the SageMaker API (ListClusterNodes ClusterNodeSummaries[].InstanceStatus,
# with Status and Message).
RUNNING = "Running"
FAILURE = "Failure"


class NodeFailure(RuntimeError):
    """A group falls short of its Running minimum and one of its nodes has failed."""


def on_event(event: Mapping[str, Any], context: object = None) -> dict[str, Any]:
    """Create and Update check the properties (bad ones fail at once, not after the timeout); Delete
    does nothing. The physical id stays the framework's default (the Create request's id)."""
    if event["RequestType"] != "Delete":
        minimums(event["ResourceProperties"])
    return {}


def is_complete(event: Mapping[str, Any], context: object = None, *, sagemaker: Any = None) -> dict[str, bool]:
    """Complete when every group has its minimum of Running nodes; Delete is complete at once. While
    incomplete, one line per poll says which groups fall short (in this function's log). A group that
    falls short with a node in ``Failure`` fails the resource at once with that node's status message
    (:class:`NodeFailure`), instead of polling until CloudFormation's hour is up."""
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    properties = event["ResourceProperties"]
    cluster_arn = properties["ClusterArn"]
    client = sagemaker or boto3.client("sagemaker")
    summaries = list(node_summaries(client, cluster_arn))
    minimum_running = minimums(properties)
    shortfalls = running_shortfalls(summaries, minimum_running)
    if shortfalls:
        raise_on_failed_nodes(summaries, minimum_running)
        print(f"waiting for {cluster_arn}: {'; '.join(shortfalls)}")
        return {"IsComplete": False}
    print(f"ready: {cluster_arn}")
    return {"IsComplete": True}


def minimums(properties: Mapping[str, Any]) -> dict[str, int]:
    """``MinimumRunning`` as group name -> int; a ValueError names what is wrong."""
    raw = properties.get("MinimumRunning")
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError(f"MinimumRunning: a non-empty map of instance group to node count is required, got {raw!r}")
    parsed = {}
    for group, count in raw.items():
        try:
            parsed[group] = int(count)
        except (TypeError, ValueError):
            raise ValueError(f"MinimumRunning[{group}]: {count!r} is not a whole number") from None
        if parsed[group] < 1:
            raise ValueError(f"MinimumRunning[{group}]: {count} must be >= 1")
    return parsed


def node_summaries(sagemaker: Any, cluster_arn: str) -> Iterable[Mapping[str, Any]]:
    """Every node of the cluster, all pages of ListClusterNodes (no group filter: the API's
    InstanceGroupNameContains matches substrings)."""
    for page in sagemaker.get_paginator("list_cluster_nodes").paginate(ClusterName=cluster_arn):
        yield from page["ClusterNodeSummaries"]


def running_shortfalls(summaries: Iterable[Mapping[str, Any]], minimum_running: Mapping[str, int]) -> list[str]:
    """One line per group with fewer Running nodes than its minimum, with its nodes' statuses."""
    statuses: dict[str, Counter[str]] = {group: Counter() for group in minimum_running}
    for summary in summaries:
        if summary["InstanceGroupName"] in statuses:
            statuses[summary["InstanceGroupName"]][summary["InstanceStatus"]["Status"]] += 1
    shortfalls = []
    for group, minimum in sorted(minimum_running.items()):
        counts = statuses[group]
        if counts[RUNNING] >= minimum:
            continue
        listed = ", ".join(f"{status} {n}" for status, n in sorted(counts.items())) or "no nodes listed yet"
        shortfalls.append(f"{group}: {counts[RUNNING]} of {minimum} Running ({listed})")
    return shortfalls


def raise_on_failed_nodes(summaries: Iterable[Mapping[str, Any]], minimum_running: Mapping[str, int]) -> None:
    """Raise :class:`NodeFailure` naming every failed node (with HyperPod's message) of each group that
    has fewer Running nodes than its minimum."""
    running: Counter[str] = Counter()
    failed: dict[str, list[str]] = {}
    for summary in summaries:
        group, status = summary["InstanceGroupName"], summary["InstanceStatus"]
        if group not in minimum_running:
            continue
        if status["Status"] == RUNNING:
            running[group] += 1
        elif status["Status"] == FAILURE:
            message = status.get("Message") or "no message"
            failed.setdefault(group, []).append(f"{summary['InstanceId']}: {message}")
    lines = [
        f"{group}: {running[group]} of {minimum_running[group]} Running; Failure on {'; '.join(nodes)}"
        for group, nodes in sorted(failed.items())
        if running[group] < minimum_running[group]
    ]
    if lines:
        raise NodeFailure("HyperPod nodes failed: " + " | ".join(lines))
