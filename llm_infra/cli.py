"""The ``llm-infra`` command: plan what failures cost, simulate it, operate HyperPod nodes.

llm-infra plan --instances 256 --failure-preset llama3-16k-h100 --gpu-hours 2e6 --price-preset p5.48xlarge
llm-infra simulate ... (same flags) --trials 2000
llm-infra nodes list --cluster NAME [--unhealthy]
llm-infra nodes replace|reboot --cluster NAME --node ID [--node ID ...] [--yes]
llm-infra cluster status --cluster NAME
llm-infra dashboard --template cdk.out/llm-infra-cluster.template.json --out docs/dashboard.png
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llm_infra.planner import FAILURE_PRESETS, PRICE_PRESETS, JobSpec, PlanError, gpu_hours_for, plan, plot, simulate

EXIT_BAD_INPUT = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except PlanError as err:
        print(f"llm-infra: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llm-infra", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)

    plan_parser = commands.add_parser("plan", help="analytic goodput, wall time and cost, auto vs manual recovery")
    add_job_flags(plan_parser)
    plan_parser.add_argument("--plot", metavar="FILE.png", help="also plot wall time vs cluster size and interval")
    plan_parser.set_defaults(handler=run_plan)

    sim_parser = commands.add_parser("simulate", help="Monte-Carlo of the same job, to cross-check the plan")
    add_job_flags(sim_parser)
    sim_parser.add_argument("--trials", type=int, default=2000)
    sim_parser.add_argument("--seed", type=int, default=0)
    sim_parser.set_defaults(handler=run_simulate)

    nodes = commands.add_parser("nodes", help="HyperPod cluster nodes").add_subparsers(
        dest="nodes_command", required=True
    )
    list_parser = nodes.add_parser("list", help="all nodes (paginated), or only unhealthy ones")
    add_aws_flags(list_parser)
    list_parser.add_argument("--unhealthy", action="store_true", help="only nodes whose status is not Running")
    list_parser.set_defaults(handler=run_nodes_list)
    for action in ("replace", "reboot"):
        act = nodes.add_parser(action, help=f"{action} nodes (BatchReplace/BatchRebootClusterNodes), then wait")
        add_aws_flags(act)
        act.add_argument("--node", dest="nodes", action="append", required=True, metavar="ID", help="repeatable")
        act.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        act.add_argument("--no-wait", action="store_true", help="return once the API accepted the request")
        act.add_argument("--timeout-minutes", type=float, default=60)
        act.add_argument("--poll-seconds", type=float, default=30)
        act.set_defaults(handler=run_nodes_action, action=action)

    cluster = commands.add_parser("cluster", help="HyperPod cluster").add_subparsers(
        dest="cluster_command", required=True
    )
    status = cluster.add_parser("status", help="the HyperPod and EKS clusters, and the stacks' outputs")
    add_aws_flags(status)
    status.add_argument("--stack-prefix", default="llm-infra", help="the app's project_name")
    status.set_defaults(handler=run_cluster_status)

    dashboard = commands.add_parser("dashboard", help="draw the CloudWatch dashboard of a synthesized cluster stack")
    dashboard.add_argument("--template", type=Path, required=True, help="cdk.out/<project>-cluster.template.json")
    dashboard.add_argument("--out", type=Path, required=True, metavar="FILE.png")
    dashboard.set_defaults(handler=run_dashboard)
    return parser


def add_job_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instances", type=int, required=True)
    parser.add_argument("--gpus-per-instance", type=int, default=8)
    rate = parser.add_mutually_exclusive_group(required=True)
    rate.add_argument("--failure-rate", type=float, help="%% failures per instance-hour")
    rate.add_argument("--mtbf-hours", type=float, help="MTBF of one instance, hours")
    rate.add_argument("--failure-preset", choices=sorted(FAILURE_PRESETS), help="a published failure rate")
    parser.add_argument("--checkpoint-stall", type=float, default=60, help="seconds training stalls per checkpoint")
    parser.add_argument(
        "--recovery-auto", type=float, default=10, help="minutes: detect + replace + restart (HyperPod)"
    )
    parser.add_argument("--recovery-manual", type=float, default=120, help="minutes: detect + page + replace + restart")
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--gpu-hours", type=float)
    size.add_argument("--tokens", type=float, help="with --params, --mfu, --peak-tflops")
    parser.add_argument("--params", type=float)
    parser.add_argument("--mfu", type=float, default=0.4)
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="per GPU (H100/H200 dense bf16: 989)")
    price = parser.add_mutually_exclusive_group()
    price.add_argument("--price", type=float, help="$ per instance-hour")
    price.add_argument("--price-preset", choices=sorted(PRICE_PRESETS), default="p5.48xlarge")
    parser.add_argument("--json", action="store_true", help="one JSON object")


def job_from(args: argparse.Namespace) -> JobSpec:
    if args.failure_preset:
        rate = FAILURE_PRESETS[args.failure_preset]
    elif args.failure_rate is not None:
        rate = args.failure_rate
    else:
        rate = None
    if rate is not None:
        if rate <= 0:
            raise PlanError(f"--failure-rate: {rate} must be > 0 (% per instance-hour)")
        mtbf = 100.0 / rate
    else:
        if args.mtbf_hours <= 0:
            raise PlanError(f"--mtbf-hours: {args.mtbf_hours} must be > 0")
        mtbf = args.mtbf_hours
    if args.tokens is not None:
        if args.params is None:
            raise PlanError("--tokens needs --params")
        gpu_hours = gpu_hours_for(args.tokens, args.params, args.mfu, args.peak_tflops)
    else:
        gpu_hours = args.gpu_hours
    job = JobSpec(
        instances=args.instances,
        gpus_per_instance=args.gpus_per_instance,
        instance_mtbf_hours=mtbf,
        checkpoint_stall_hours=args.checkpoint_stall / 3600,
        recovery_auto_hours=args.recovery_auto / 60,
        recovery_manual_hours=args.recovery_manual / 60,
        gpu_hours=gpu_hours,
        price_per_instance_hour=args.price if args.price is not None else PRICE_PRESETS[args.price_preset],
    )
    job.validate()
    return job


def run_plan(args: argparse.Namespace) -> int:
    job = job_from(args)
    result = plan(job).as_dict()
    if args.plot:
        plot(job, args.plot)
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"job: {job.instances} instances x {job.gpus_per_instance} GPUs, {job.gpu_hours:,.0f} GPU-hours, "
        f"instance MTBF {job.instance_mtbf_hours:,.0f} h, ${job.price_per_instance_hour:,.2f}/instance-hour"
    )
    print(
        f"job MTBF: {result['job_mtbf_hours']:.2f} h;  checkpoint every {result['daly_interval_minutes']:.1f} min "
        f"(Daly; Young: {result['young_interval_minutes']:.1f} min)"
    )
    print_table(
        ["", "goodput", "wall days", "cost $"],
        [
            ["no failures", "1.000", f"{result['wall_days_ideal']:.2f}", f"{result['cost_ideal']:,.0f}"],
            [
                "auto recovery",
                f"{result['goodput_auto']:.3f}",
                f"{result['wall_days_auto']:.2f}",
                f"{result['cost_auto']:,.0f}",
            ],
            [
                "manual recovery",
                f"{result['goodput_manual']:.3f}",
                f"{result['wall_days_manual']:.2f}",
                f"{result['cost_manual']:,.0f}",
            ],
        ],
    )
    print(f"auto recovery saves {result['saving_fraction']:.1%} (${result['cost_manual'] - result['cost_auto']:,.0f})")
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


def run_simulate(args: argparse.Namespace) -> int:
    if args.trials < 2:
        raise PlanError(f"--trials: {args.trials} must be >= 2")
    job = job_from(args)
    result = simulate(job, trials=args.trials, seed=args.seed)
    analytic = plan(job).as_dict()
    if args.json:
        print(json.dumps({"simulated": result, "analytic": analytic}))
        return 0
    print_table(
        ["", "simulated wall days", "± stderr", "analytic wall days"],
        [
            [
                mode,
                f"{result[f'wall_days_{mode}']:.3f}",
                f"{result[f'wall_days_{mode}_stderr']:.3f}",
                f"{analytic[f'wall_days_{mode}']:.3f}",
            ]
            for mode in ("auto", "manual")
        ],
    )
    return 0


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print(
            "  ".join(
                str(cell).rjust(w) if i else str(cell).ljust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )


# ---- AWS ---------------------------------------------------------------------------------------------
def add_aws_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", required=True, help="HyperPod cluster name")
    parser.add_argument("--profile", help="AWS profile (default: the standard credential chain)")
    parser.add_argument("--region", help="AWS region (default: the profile's or AWS_REGION)")
    parser.add_argument("--endpoint-url", help="a local AWS endpoint, e.g. for tests")
    parser.add_argument("--json", action="store_true", help="JSON output")


def aws_client(args: argparse.Namespace, service: str) -> Any:
    import boto3
    from botocore.config import Config

    session = boto3.Session(profile_name=args.profile, region_name=args.region)
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
        pending = wait_until_running(
            sagemaker,
            args.cluster,
            result.successful,
            timeout_seconds=args.timeout_minutes * 60,
            poll_seconds=args.poll_seconds,
            on_progress=progress_bar,
        )
        print(file=sys.stderr)
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


def progress_bar(done: int, total: int, width: int = 30) -> None:
    filled = width * done // total if total else width
    print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} running", end="", file=sys.stderr, flush=True)


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


def run_dashboard(args: argparse.Namespace) -> int:
    from llm_infra.dashboard_diagram import dashboard_body, render

    if not args.template.is_file():
        raise PlanError(f"--template: {args.template} does not exist; run `make synth` first")
    template = json.loads(args.template.read_text())
    try:
        dashboard_body(template)
    except ValueError as err:
        raise PlanError(f"--template {args.template}: {err}") from None
    titles = render(template, args.out, title=args.template.name.removesuffix(".template.json") + " dashboard")
    print(json.dumps({"dashboard": str(args.out), "widgets": titles}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
