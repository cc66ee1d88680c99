"""``llm-infra nodes ...`` and ``llm-infra cluster status``: HyperPod nodes and clusters on boto3."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from llm_infra.terminal import UsageError, print_table, progress_bar

Waited = TypeVar("Waited")


def register(commands: Any) -> None:
    nodes = commands.add_parser("nodes", help="HyperPod cluster nodes").add_subparsers(
        dest="nodes_command", required=True
    )
    list_parser = aws_subcommand(
        nodes, "list", help="all nodes (paginated), or only unhealthy ones", handler=run_nodes_list
    )
    list_parser.add_argument("--unhealthy", action="store_true", help="only nodes whose status is not Running")
    for action in ("replace", "reboot"):
        act = aws_subcommand(
            nodes,
            action,
            help=f"{action} nodes (BatchReplace/BatchRebootClusterNodes), then wait",
            handler=run_nodes_action,
            action=action,
        )
        act.add_argument("--node", dest="nodes", action="append", required=True, metavar="ID", help="repeatable")
        act.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        add_wait_flags(act)

    add = aws_subcommand(
        nodes,
        "add",
        help="add nodes to an instance group (BatchAddClusterNodes, Continuous provisioning), then wait",
        handler=run_nodes_add,
    )
    add.add_argument("--group", required=True, help="instance group name, e.g. gpu")
    add.add_argument("--count", type=int, required=True, help="nodes to add (requests of at most 50)")
    add_wait_flags(add)

    cluster = commands.add_parser("cluster", help="HyperPod cluster").add_subparsers(
        dest="cluster_command", required=True
    )
    status = aws_subcommand(
        cluster, "status", help="the HyperPod and EKS clusters, and the stacks' outputs", handler=run_cluster_status
    )
    status.add_argument("--stack-prefix", default="llm-infra", help="the app's project_name")


def aws_subcommand(
    subcommands: Any, name: str, *, help: str, handler: Callable[[argparse.Namespace], int], **defaults: Any
) -> argparse.ArgumentParser:
    """A subcommand that calls ``handler`` with its arguments, the AWS flags among them."""
    parser: argparse.ArgumentParser = subcommands.add_parser(name, help=help)
    add_aws_flags(parser)
    parser.set_defaults(handler=handler, **defaults)
    return parser


def add_aws_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", required=True, help="HyperPod cluster name")
    parser.add_argument("--profile", help="AWS profile (default: the standard credential chain)")
    parser.add_argument("--region", help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, then the profile's)")
    parser.add_argument("--endpoint-url", help="a local AWS endpoint, e.g. for tests")
    parser.add_argument("--json", action="store_true", help="JSON output")


def add_wait_flags(parser: argparse.ArgumentParser) -> None:
    """How a command waits for the nodes it asked for: --no-wait, or a poll with a timeout."""
    parser.add_argument("--no-wait", action="store_true", help="return once the API accepted the request")
    parser.add_argument("--timeout-minutes", type=float, default=60)
    parser.add_argument("--poll-seconds", type=float, default=30)


def wait_with_progress(args: argparse.Namespace, wait: Callable[..., Waited], *what: Any) -> Waited:
    """``wait(*what)`` (a poll of hyperpod_ops) under the command's --timeout-minutes and --poll-seconds,
    with a progress bar on stderr."""
    waited = wait(
        *what, timeout_seconds=args.timeout_minutes * 60, poll_seconds=args.poll_seconds, on_progress=progress_bar
    )
    print(file=sys.stderr)  # ends the progress bar's line
    return waited


def aws_client(args: argparse.Namespace, service: str) -> Any:
    import boto3
    from botocore.config import Config

    # As the AWS CLI: --region, then AWS_REGION, then AWS_DEFAULT_REGION and the profile (boto3's own order).
    session = boto3.Session(profile_name=args.profile, region_name=args.region or os.environ.get("AWS_REGION"))
    config = Config(retries={"mode": "standard", "max_attempts": 5})
    return session.client(service, endpoint_url=args.endpoint_url, config=config)


def run_nodes_list(args: argparse.Namespace) -> int:
    from llm_infra.hyperpod_ops import list_nodes

    nodes = list_nodes(aws_client(args, "sagemaker"), args.cluster, unhealthy_only=args.unhealthy)
    if args.json:
        print(json.dumps([n.__dict__ for n in nodes]))
    else:
        print_table(
            ["node", "group", "type", "status", "launched"],
            [[n.node_id, n.instance_group, n.instance_type, n.status, n.launch_time] for n in nodes],
        )
        print(f"{len(nodes)} nodes")
    return 0


def run_nodes_action(args: argparse.Namespace) -> int:
    from llm_infra.hyperpod_ops import batch_action, wait_until_running

    if not args.yes:
        answer = input(f"{args.action} {len(args.nodes)} node(s) of {args.cluster}: {', '.join(args.nodes)}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("aborted", file=sys.stderr)
            return 1
    sagemaker = aws_client(args, "sagemaker")
    result = batch_action(sagemaker, args.action, args.cluster, args.nodes)
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
        if args.json
        else f"{args.action}: {len(result.successful)} accepted, {len(result.failed)} failed, {len(pending)} not back"
    )
    return 0 if not result.failed and not pending else 1


def run_nodes_add(args: argparse.Namespace) -> int:
    from llm_infra.hyperpod_ops import add_nodes, wait_for_group

    if args.count < 1:
        raise UsageError(f"--count: {args.count} must be >= 1")
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
    if args.json:
        print(json.dumps(report))
    else:
        waited = "" if running is None else f", {running}/{result.target_count} running"
        print(f"add: {len(result.node_logical_ids)} of {args.count} accepted into {args.group}{waited}")
    reached = running is None or running >= result.target_count
    return 0 if len(result.node_logical_ids) == args.count and reached else 1


def run_cluster_status(args: argparse.Namespace) -> int:
    from llm_infra.hyperpod_ops import cluster_status

    status = cluster_status(
        aws_client(args, "sagemaker"),
        aws_client(args, "eks"),
        aws_client(args, "cloudformation"),
        args.cluster,
        args.stack_prefix,
    )
    print(json.dumps(status, indent=None if args.json else 2, default=str))
    return 0
