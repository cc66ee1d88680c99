"""``llm-infra plan`` and ``llm-infra simulate``: what failures cost a job, analytic and Monte-Carlo."""

from __future__ import annotations

import argparse
import json
from typing import Any

from llm_infra.planner import FAILURE_PRESETS, PRICE_PRESETS, JobSpec, PlanError, gpu_hours_for, plan, plot, simulate
from llm_infra.terminal import print_table


def register(commands: Any) -> None:
    plan_parser = commands.add_parser("plan", help="analytic goodput, wall time and cost, auto vs manual recovery")
    add_job_flags(plan_parser)
    plan_parser.add_argument("--plot", metavar="FILE.png", help="also plot wall time vs cluster size and interval")
    plan_parser.set_defaults(handler=run_plan)

    sim_parser = commands.add_parser("simulate", help="Monte-Carlo of the same job, to cross-check the plan")
    add_job_flags(sim_parser)
    sim_parser.add_argument("--trials", type=int, default=2000)
    sim_parser.add_argument("--seed", type=int, default=0)
    sim_parser.set_defaults(handler=run_simulate)


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
