"""``llm-infra plan`` and ``llm-infra simulate``: what failures cost a job, analytic and Monte-Carlo."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from llm_infra.measured_run import Measurement, RunMeasurements, read_runs
from llm_infra.planner import (
    FAILURE_PRESETS,
    MODELS,
    PRICE_PRESETS,
    RECOVERY_PRESETS,
    STALL_PRESETS,
    JobSpec,
    Outcome,
    Plan,
    PlanError,
    Preset,
    gpu_hours_for,
    plan,
    plot,
    simulate,
)
from llm_infra.terminal import print_table

DEFAULT_STALL_SECONDS = 60.0
DEFAULT_RECOVERY_AUTO = "hyperpod-auto"
DEFAULT_RECOVERY_MANUAL = "manual"


def register(commands: Any) -> None:
    plan_parser = commands.add_parser("plan", help="analytic goodput, wall time and cost, auto vs manual recovery")
    add_job_flags(plan_parser)
    plan_parser.add_argument(
        "--plot", metavar="FILE.png", help="also plot wall time vs cluster size and interval, saving vs cluster size"
    )
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
    parser.add_argument(
        "--checkpoint-stall",
        metavar="SECONDS|PRESET",
        help=f"training stall per checkpoint save; presets: {', '.join(STALL_PRESETS)} "
        f"(default {DEFAULT_STALL_SECONDS:g} s, or measured with --from-run)",
    )
    presets = ", ".join(f"{name} ({p.value:g})" for name, p in RECOVERY_PRESETS.items())
    parser.add_argument(
        "--recovery-auto",
        metavar="MINUTES|PRESET",
        help=f"downtime per failure with automatic recovery; presets: {presets} "
        f"(default {DEFAULT_RECOVERY_AUTO}, or measured with --from-run)",
    )
    parser.add_argument(
        "--recovery-manual",
        metavar="MINUTES|PRESET",
        help=f"downtime per failure with manual recovery (default {DEFAULT_RECOVERY_MANUAL})",
    )
    parser.add_argument(
        "--lost-work-minutes",
        type=float,
        default=0.0,
        help="linear model: work lost per failure, added to the downtime (Daly's model derives it from the interval)",
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--gpu-hours", type=float, help="job size; without one, only ratios (goodput, saving)")
    size.add_argument("--tokens", type=float, help="with --params, --mfu, --peak-tflops, or --from-run's tokens/s")
    parser.add_argument("--params", type=float)
    parser.add_argument("--mfu", type=float, default=0.4)
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="per GPU (H100/H200 dense bf16: 989)")
    price = parser.add_mutually_exclusive_group()
    price.add_argument("--price", type=float, help="$ per instance-hour")
    price.add_argument("--price-preset", choices=sorted(PRICE_PRESETS), default="p5.48xlarge")
    parser.add_argument("--model", choices=MODELS, default="daly", help="the model --json carries (the table has both)")
    parser.add_argument(
        "--from-run",
        metavar="FILE",
        action="append",
        help="payload JSON lines (train.py's stdout+stderr) or an llm-infra drill report; plan with what it "
        "measured (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object")


@dataclass(frozen=True)
class Inputs:
    """The job to plan and what of it the run measured."""

    job: JobSpec
    measured: dict[str, Measurement]  # input (in the unit its name says) -> the measurement used
    overridden: list[str]  # measurements a flag overrode, in words
    step_seconds: Measurement | None
    shutdown_budget_seconds: Measurement | None = None  # from a stop signal to the launcher's SIGKILL
    notes: tuple[str, ...] = ()  # what the run's stops tell (skipped final saves, saves too long)


def _number_or_preset(flag: str, text: str, presets: dict[str, Preset]) -> float:
    if text in presets:
        return presets[text].value
    try:
        return float(text)
    except ValueError:
        raise PlanError(f"{flag}: {text!r} is neither a number nor a preset ({', '.join(presets)})") from None


def inputs_from(args: argparse.Namespace) -> Inputs:
    """The job from the flags; what a flag leaves open comes from --from-run, else from its default."""
    runs = read_runs(args.from_run) if args.from_run else RunMeasurements()
    measured: dict[str, Measurement] = {}
    overridden: list[str] = []

    def choose(
        name: str, flag: str, given: str | None, presets: dict[str, Preset], *, run: Measurement | None, default: float
    ) -> float:
        if given is not None:
            if run is not None:
                overridden.append(f"{name} = {run.value:g} ({run.how}): {flag} given")
            return _number_or_preset(flag, given, presets)
        if run is not None:
            measured[name] = run
            return run.value
        return default

    recovery = runs.recovery_seconds
    recovery_minutes = Measurement(recovery.value / 60, recovery.how) if recovery else None
    stall_s = choose(
        "checkpoint_stall_seconds",
        "--checkpoint-stall",
        args.checkpoint_stall,
        STALL_PRESETS,
        run=runs.checkpoint_seconds,
        default=DEFAULT_STALL_SECONDS,
    )
    auto_min = choose(
        "recovery_auto_minutes",
        "--recovery-auto",
        args.recovery_auto,
        RECOVERY_PRESETS,
        run=recovery_minutes,
        default=RECOVERY_PRESETS[DEFAULT_RECOVERY_AUTO].value,
    )
    manual_min = _number_or_preset(
        "--recovery-manual", args.recovery_manual or DEFAULT_RECOVERY_MANUAL, RECOVERY_PRESETS
    )
    job = JobSpec(
        instances=args.instances,
        gpus_per_instance=args.gpus_per_instance,
        instance_mtbf_hours=_instance_mtbf_hours(args),
        checkpoint_stall_hours=stall_s / 3600,
        recovery_auto_hours=auto_min / 60,
        recovery_manual_hours=manual_min / 60,
        lost_work_hours=args.lost_work_minutes / 60,
        gpu_hours=_gpu_hours(args, runs, measured),
        price_per_instance_hour=args.price if args.price is not None else PRICE_PRESETS[args.price_preset],
    )
    job.validate()
    return Inputs(job, measured, overridden, runs.step_seconds, runs.shutdown_budget_seconds, runs.notes)


def _instance_mtbf_hours(args: argparse.Namespace) -> float:
    if args.failure_preset:
        return 100.0 / FAILURE_PRESETS[args.failure_preset]
    if args.failure_rate is not None:
        if args.failure_rate <= 0:
            raise PlanError(f"--failure-rate: {args.failure_rate} must be > 0 (% per instance-hour)")
        return 100.0 / args.failure_rate
    if args.mtbf_hours <= 0:
        raise PlanError(f"--mtbf-hours: {args.mtbf_hours} must be > 0")
    return float(args.mtbf_hours)


def _gpu_hours(args: argparse.Namespace, runs: RunMeasurements, measured: dict[str, Measurement]) -> float | None:
    """The job size: --gpu-hours; --tokens at 6ND FLOPs with --params, else at the run's tokens/s; or None."""
    if args.gpu_hours is not None:
        return float(args.gpu_hours)
    if args.tokens is None:
        return None
    if args.params is not None:
        return gpu_hours_for(args.tokens, args.params, args.mfu, args.peak_tflops)
    if runs.tokens_per_gpu_second is None:
        raise PlanError("--tokens needs --params (or --from-run with measured tokens/s)")
    if not args.tokens > 0:
        raise PlanError(f"--tokens: {args.tokens} must be > 0")
    measured["tokens_per_gpu_second"] = runs.tokens_per_gpu_second
    return args.tokens / runs.tokens_per_gpu_second.value / 3600


def run_plan(args: argparse.Namespace) -> int:
    inputs = inputs_from(args)
    job = inputs.job
    result = plan(job)
    if args.plot:
        plot(job, args.plot)
    if args.json:
        payload = result.as_dict(args.model)
        if args.from_run:
            payload["measured"] = {name: m.value for name, m in inputs.measured.items()}
            if inputs.step_seconds:
                payload["daly_interval_steps"] = result.daly_interval_minutes * 60 / inputs.step_seconds.value
            if inputs.shutdown_budget_seconds:
                payload["shutdown_budget_seconds"] = inputs.shutdown_budget_seconds.value
            payload["notes"] = list(inputs.notes)
        print(json.dumps(payload))
        return 0
    print_plan(inputs, result, args.model)
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


def print_plan(inputs: Inputs, result: Plan, chosen: str) -> None:
    job = inputs.job
    size = f"{job.gpu_hours:,.0f} GPU-hours" if job.gpu_hours is not None else "no job size (ratios only)"
    print(
        f"job: {job.instances} instances x {job.gpus_per_instance} GPUs, {size}, instance MTBF "
        f"{job.instance_mtbf_hours:,.0f} h ({100 / job.instance_mtbf_hours:.4g} %/instance-hour), "
        f"${job.price_per_instance_hour:,.2f}/instance-hour"
    )
    every_steps = ""
    if inputs.step_seconds:
        every_steps = f" = {result.daly_interval_minutes * 60 / inputs.step_seconds.value:,.0f} steps"
    print(
        f"job MTBF: {result.job_mtbf_hours:.2f} h;  checkpoint every {result.daly_interval_minutes:.1f} min"
        f"{every_steps} (Daly; Young: {result.young_interval_minutes:.1f} min), "
        f"stall {job.checkpoint_stall_hours * 3600:g} s"
    )
    if inputs.measured or inputs.step_seconds or inputs.overridden or inputs.shutdown_budget_seconds or inputs.notes:
        print("from the run:")
        for name, measurement in inputs.measured.items():
            print(f"  {name} = {measurement.value:.4g}  (measured: {measurement.how})")
        if inputs.step_seconds:
            print(f"  step_seconds = {inputs.step_seconds.value:.4g}  ({inputs.step_seconds.how})")
        if inputs.shutdown_budget_seconds:
            budget = inputs.shutdown_budget_seconds
            print(f"  shutdown_budget_seconds = {budget.value:.4g}  ({budget.how})")
        for line in inputs.overridden:
            print(f"  not used: {line}")
        for note in inputs.notes:
            print(f"  note: {note}")
    sized = job.gpu_hours is not None
    header = ["model", "recovery", "downtime/failure", "$/failure", "goodput"] + (["wall days", "cost $"] * sized)
    rows = []
    if sized and result.wall_days_ideal is not None and result.cost_ideal is not None:
        rows.append(["no failures", "", "", "", "1.000", f"{result.wall_days_ideal:.2f}", f"{result.cost_ideal:,.0f}"])
    for model in MODELS:
        outcome = result.outcome(model)
        for mode in ("auto", "manual"):
            row = [
                model + (" *" if model == chosen else ""),
                mode,
                f"{getattr(outcome, f'downtime_per_failure_minutes_{mode}'):.1f} min",
                f"{getattr(outcome, f'cost_per_failure_{mode}'):,.0f}",
                f"{getattr(outcome, f'goodput_{mode}'):.3f}",
            ]
            if sized:
                row += [f"{getattr(outcome, f'wall_days_{mode}'):.2f}", f"{getattr(outcome, f'cost_{mode}'):,.0f}"]
            rows.append(row)
    print_table(header, rows)
    for model in MODELS:
        print(f"{model}: automatic recovery saves {_saving(result.outcome(model))}")
    print(
        f"(* the model --json carries; downtime/failure: linear = recovery + --lost-work-minutes "
        f"({job.lost_work_hours * 60:g}); Daly = recovery + expected work lost since the last checkpoint)"
    )


def _saving(outcome: Outcome) -> str:
    text = f"{outcome.saving_fraction:.1%} of wall time"
    if outcome.cost_manual is not None and outcome.cost_auto is not None:
        text += f" (${outcome.cost_manual - outcome.cost_auto:,.0f})"
    return text


def run_simulate(args: argparse.Namespace) -> int:
    if args.trials < 2:
        raise PlanError(f"--trials: {args.trials} must be >= 2")
    job = inputs_from(args).job
    result = simulate(job, trials=args.trials, seed=args.seed)
    analytic = plan(job)
    if args.json:
        print(json.dumps({"simulated": result, "analytic": analytic.as_dict(args.model)}))
        return 0
    print_table(
        ["", "simulated wall days", "± stderr", "Daly wall days", "linear wall days"],
        [
            [
                mode,
                f"{result[f'wall_days_{mode}']:.3f}",
                f"{result[f'wall_days_{mode}_stderr']:.3f}",
                f"{getattr(analytic.daly, f'wall_days_{mode}'):.3f}",
                f"{getattr(analytic.linear, f'wall_days_{mode}'):.3f}",
            ]
            for mode in ("auto", "manual")
        ],
    )
    return 0
