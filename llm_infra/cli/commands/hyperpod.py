"""``llm-infra nodes ...`` and ``llm-infra cluster status``: HyperPod nodes and clusters on boto3."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from llm_infra.cli.aws import add_aws_flags, aws_client
from llm_infra.cli.terminal import (
    OUTPUT_JSON,
    Progress,
    RenamedFlag,
    UsageError,
    add_output_flag,
    confirm,
    number,
    print_table,
    whole_number,
)

Waited = TypeVar("Waited")

HYPERPOD_CLUSTER_HELP = "the HyperPod cluster (its name or ARN)"
REPLACE_HELP = (
    "replace nodes with new instances (BatchReplaceClusterNodes): each instance is terminated and its root and "
    "secondary volumes are lost; a new one of the same configuration takes its place; then wait until they are Running"
)
REBOOT_HELP = (
    "reboot nodes in place (BatchRebootClusterNodes, a graceful EC2 reboot): the instance and its volumes stay; "
    "then wait until they are Running again"
)


def register(commands: Any) -> None:
    nodes_help = "list, add, replace or reboot the nodes of a HyperPod cluster"
    nodes = commands.add_parser("nodes", help=nodes_help, description=nodes_help).add_subparsers(
        dest="nodes_command", required=True, metavar="COMMAND"
    )
    list_parser = aws_subcommand(
        nodes,
        "list",
        help="the cluster's nodes (every page of ListClusterNodes), or only the unhealthy ones",
        handler=run_nodes_list,
        json_holds="a list of nodes",
    )
    list_parser.add_argument(
        "--unhealthy", action="store_true", help="only nodes whose status is not Running (default: every node)"
    )
    for action, action_help in (("replace", REPLACE_HELP), ("reboot", REBOOT_HELP)):
        act = aws_subcommand(
            nodes,
            action,
            help=action_help,
            handler=run_nodes_action,
            json_holds="the nodes accepted, refused and not back",
            action=action,
        )
        act.add_argument(
            "--instance-id",
            dest="instance_ids",
            action="append",
            required=True,
            metavar="ID",
            help=f"the instance ID of a node to {action}, i-0123456789abcdef0, as 'llm-infra nodes list' shows it "
            "(repeatable; sent 25 per request)",
        )
        act.add_argument("--node", action=RenamedFlag, new="--instance-id ID (the node's HyperPod instance ID)")
        act.add_argument("--yes", action="store_true", help=f"{action} without asking (default: ask on the terminal)")
        add_wait_flags(act)

    add = aws_subcommand(
        nodes,
        "add",
        help="add nodes to an instance group (BatchAddClusterNodes, Continuous provisioning), then wait until they "
        "are Running",
        handler=run_nodes_add,
        json_holds="the nodes accepted and how many run",
    )
    add.add_argument("--group", required=True, help="the instance group to grow, e.g. gpu")
    add.add_argument(
        "--count", type=whole_number(minimum=1), required=True, metavar="N", help="nodes to add (sent 50 per request)"
    )
    add_wait_flags(add)

    cluster_help = "the state of a HyperPod cluster"
    cluster = commands.add_parser("cluster", help=cluster_help, description=cluster_help).add_subparsers(
        dest="cluster_command", required=True, metavar="COMMAND"
    )
    status = aws_subcommand(
        cluster,
        "status",
        help="the HyperPod cluster, its instance groups, its EKS cluster and the app's stack outputs",
        handler=run_cluster_status,
        json_holds="the same as one object",
    )
    status.add_argument(
        "--stack-prefix",
        default="llm-infra",
        help="the app's project_name, which starts its stacks' names (default: llm-infra)",
    )


def aws_subcommand(
    subcommands: Any,
    name: str,
    *,
    help: str,
    handler: Callable[[argparse.Namespace], int],
    json_holds: str,
    **defaults: Any,
) -> argparse.ArgumentParser:
    """A HyperPod subcommand that calls ``handler`` with its arguments: --cluster, the AWS flags, --output."""
    parser: argparse.ArgumentParser = subcommands.add_parser(name, help=help, description=help)
    parser.add_argument("--cluster", required=True, metavar="NAME", help=HYPERPOD_CLUSTER_HELP)
    add_aws_flags(parser)
    add_output_flag(parser, json_holds)
    parser.set_defaults(handler=handler, **defaults)
    return parser


def add_wait_flags(parser: argparse.ArgumentParser) -> None:
    """How a command waits for the nodes it asked for: --no-wait, or a poll with a timeout."""
    parser.add_argument(
        "--no-wait", action="store_true", help="return once the API accepted the request (default: wait)"
    )
    parser.add_argument(
        "--timeout-minutes",
        type=number(minimum=0),
        default=60,
        metavar="MINUTES",
        help="stop waiting for the nodes to be Running after this many minutes (default: 60)",
    )
    parser.add_argument(
        "--poll-seconds",
        type=number(above=0),
        default=30,
        metavar="SECONDS",
        help="seconds between looks at ListClusterNodes while waiting (default: 30)",
    )


def wait_with_progress(args: argparse.Namespace, wait: Callable[..., Waited], *what: Any) -> Waited:
    """``wait(*what)`` (a poll of hyperpod_ops) under the command's --timeout-minutes and --poll-seconds,
    with its progress on stderr."""
    progress = Progress()
    waited = wait(
        *what, timeout_seconds=args.timeout_minutes * 60, poll_seconds=args.poll_seconds, on_progress=progress
    )
    progress.close()
    return waited


def run_nodes_list(args: argparse.Namespace) -> int:
    from llm_infra.ops.hyperpod import list_nodes

    nodes = list_nodes(aws_client(args, "sagemaker"), args.cluster, unhealthy_only=args.unhealthy)
    if args.output == OUTPUT_JSON:
        print(json.dumps([n.__dict__ for n in nodes]))
    else:
        print_table(
            ["instance id", "group", "type", "status", "launched"],
            [[n.node_id, n.instance_group, n.instance_type, n.status, n.launch_time] for n in nodes],
            text_columns=5,
        )
        print(f"{len(nodes)} nodes")
    return 0


def run_nodes_action(args: argparse.Namespace) -> int:
    from llm_infra.ops.hyperpod import batch_action, wait_until_running

    if not args.yes:
        nodes = ", ".join(args.instance_ids)
        if not confirm(f"{args.action} {len(args.instance_ids)} node(s) of {args.cluster}: {nodes}?"):
            print("aborted", file=sys.stderr)
            return 1
    sagemaker = aws_client(args, "sagemaker")
    result = batch_action(sagemaker, args.action, args.cluster, args.instance_ids)
    for failure in result.failed:
        print(f"failed: {failure['NodeId']}: {failure.get('ErrorCode')}: {failure.get('Message')}", file=sys.stderr)
    pending: list[str] = []
    if result.successful and not args.no_wait:
        pending = wait_with_progress(args, wait_until_running, sagemaker, args.cluster, result.successful)
    report: dict[str, Any] = {
        "action": args.action,
        "successful": result.successful,
        "failed": result.failed,
        "not_running_at_timeout": pending,
    }
    print(
        json.dumps(report)
        if args.output == OUTPUT_JSON
        else f"{args.action}: {len(result.successful)} accepted, {len(result.failed)} failed, {len(pending)} not back"
    )
    return 0 if not result.failed and not pending else 1


def run_nodes_add(args: argparse.Namespace) -> int:
    from llm_infra.ops.hyperpod import add_nodes, wait_for_group

    sagemaker = aws_client(args, "sagemaker")
    try:
        result = add_nodes(sagemaker, args.cluster, args.group, args.count)
    except ValueError as err:
        raise UsageError(f"--{err}") from None
    for failure in result.failed:
        print(
            f"failed: {failure.get('FailedCount')} node(s) of {failure['InstanceGroupName']}: "
            f"{failure.get('ErrorCode')}: {failure.get('Message', '')}",
            file=sys.stderr,
        )
    running = None
    if result.node_logical_ids and not args.no_wait:
        running = wait_with_progress(args, wait_for_group, sagemaker, args.cluster, args.group, result.target_count)
    report: dict[str, Any] = {
        "group": args.group,
        "added": result.node_logical_ids,
        "failed": result.failed,
        "target_count": result.target_count,
        "running": running,
    }
    if args.output == OUTPUT_JSON:
        print(json.dumps(report))
    else:
        waited = "" if running is None else f", {running}/{result.target_count} running"
        print(f"add: {len(result.node_logical_ids)} of {args.count} accepted into {args.group}{waited}")
    reached = running is None or running >= result.target_count
    return 0 if len(result.node_logical_ids) == args.count and reached else 1


def run_cluster_status(args: argparse.Namespace) -> int:
    from llm_infra.ops.hyperpod import cluster_status

    status = cluster_status(
        aws_client(args, "sagemaker"),
        aws_client(args, "eks"),
        aws_client(args, "cloudformation"),
        args.cluster,
        args.stack_prefix,
    )
    if args.output == OUTPUT_JSON:
        print(json.dumps(status, default=str))
    else:
        print_cluster_status(status)
    return 0


def print_cluster_status(status: dict[str, Any]) -> None:
    recovery = status["node_recovery"] or "not set"
    print(f"HyperPod cluster {status['cluster']}: {status['status']}, node recovery {recovery}")
    eks = status.get("eks")
    if eks:
        print(f"EKS cluster {eks['name']}: {eks['status']}, Kubernetes {eks['version']}")
    print()
    print_table(
        ["instance group", "type", "nodes", "target"],
        [[g["name"], g["type"], str(g["count"]), str(g["target"])] for g in status["instance_groups"]],
        text_columns=2,
    )
    if status["stack_outputs"]:
        print()
        print_table(
            ["stack output", "value"], [list(item) for item in sorted(status["stack_outputs"].items())], text_columns=2
        )
