"""``llm-infra plan`` and ``llm-infra simulate``: what failures cost a job, analytic and Monte-Carlo.

Flags the chosen inputs would ignore are usage errors, never dropped in silence: ``--params``, ``--mfu``
and ``--peak-tflops`` size a job given in ``--tokens`` (6 x parameters x tokens FLOPs) and are refused
without ``--tokens`` (with ``--gpu-hours``, or with no job size), and ``--mfu`` / ``--peak-tflops`` are
refused with ``--tokens`` but no ``--params`` (the run's measured tokens/s sizes the job then). A
measurement of ``--from-run`` that a flag overrides is a note ("not used: ..."): the flag wins, as asked.
What ``--from-run`` cannot vouch for is a warning, on stderr and in the JSON: a run on another device
(CPU) or of another model size than ``--params``, and a drill report whose ``recovery_seconds`` is null.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llm_infra.cli.terminal import OUTPUT_JSON, add_output_flag, print_table
from llm_infra.planner import (
    FAILURE_PRESETS,
    MODELS,
    MODES,
    PRICE_PRESETS,
    RECOVERY_PRESETS,
    STALL_PRESETS,
    JobSpec,
    Mode,
    Outcome,
    Plan,
    PlanError,
    Preset,
    gpu_hours_for,
    plan,
    plot,
    simulate,
)
from llm_infra.planner.measured_run import Measurement, RunMeasurements, read_runs

DEFAULT_STALL_SECONDS = 60.0
DEFAULT_RECOVERY_AUTO = "hyperpod-auto"
DEFAULT_RECOVERY_MANUAL = "manual"
DEFAULT_MFU = 0.4
DEFAULT_PEAK_TFLOPS = 989.0  # H100 / H200 SXM, dense bf16
DEFAULT_PRICE_PRESET = "p5.48xlarge"
CHECKPOINTLESS = "hyperpod-checkpointless"  # the recovery preset that resumes from the last step
FAILURE_SOURCES = {
    "opt-175b": "Meta's OPT-175B logbook",
    "llama3-16k-h100": "Llama 3.1 on 16k H100s, 419 interruptions in 54 days",
    "mpt-7b": "MosaicML's MPT-7B report",
}
# A run of a model this much larger or smaller than --params is another model's.
MODEL_SIZE_TOLERANCE = 1.1

PLAN_DESCRIPTION = """What failures cost a training job: goodput, wall time and dollars with automatic and with manual
recovery, in Daly's model and in AWS's linear model side by side, and how often to checkpoint (Daly's
optimum; with --checkpoint-interval, your own schedule beside it). Without a job size (--gpu-hours or
--tokens) only ratios: goodput, the cost of one failure, the saving.

A job that cannot finish is refused with the reason: a checkpoint stall not below the job MTBF, or an
automatic recovery (or checkpoint schedule) whose goodput is below 1 %, where the expected wall time
diverges. Manual recovery beyond that horizon is shown as such, without figures.

A checkpointless recovery (--recovery-auto hyperpod-checkpointless) resumes from the last step: Daly's
rows charge it no lost work, only the recovery and the checkpoint stalls of the job's schedule."""
SIMULATE_DESCRIPTION = """The job of llm-infra plan as a seeded Monte-Carlo of Daly's process (exponential failures,
the work since the last checkpoint lost, recoveries that a failure starts again), beside both analytic
models: the cross-check of the plan. It needs a job size; it runs at Daly's optimum interval, or at
--checkpoint-interval."""


def register(commands: Any) -> None:
    plan_parser = commands.add_parser(
        "plan",
        help="analytic goodput, wall time and cost, auto vs manual recovery",
        description=PLAN_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    output = add_job_flags(plan_parser, simulating=False)
    output.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also draw wall time vs cluster size and vs checkpoint interval, and the saving vs cluster size, "
        "into FILE.png (needs a job size; default: no plot)",
    )
    plan_parser.set_defaults(handler=run_plan)

    sim_parser = commands.add_parser(
        "simulate",
        help="Monte-Carlo of the same job, to cross-check the plan",
        description=SIMULATE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    output = add_job_flags(sim_parser, simulating=True)
    output.add_argument("--trials", type=int, default=2000, metavar="N", help="Monte-Carlo trials (default 2000)")
    output.add_argument(
        "--seed", type=int, default=0, metavar="N", help="random seed: the same seed, the same figures (default 0)"
    )
    sim_parser.set_defaults(handler=run_simulate)


def add_job_flags(parser: argparse.ArgumentParser, *, simulating: bool) -> argparse._ArgumentGroup:
    """The job's flags, in groups, the required ones first; ``simulating``: simulate's, which need a job
    size. Returns the last group (input and output), for the command's own flags."""
    required = parser.add_argument_group(
        "required",
        "--instances, and one of --failure-rate, --mtbf-hours, --failure-preset"
        + ("\nand one of --gpu-hours, --tokens" if simulating else ""),
    )
    size = parser.add_argument_group("job size" if simulating else "job size (without one, ratios only)")
    failures = parser.add_argument_group("failures, checkpoints and recovery")
    cost = parser.add_argument_group("cost")
    output = parser.add_argument_group("input and output")
    required.add_argument("--instances", type=int, required=True, metavar="N", help="instances in the cluster")
    rate = required.add_mutually_exclusive_group(required=True)
    rate.add_argument(
        "--failure-rate",
        type=float,
        metavar="PERCENT",
        help="failures per instance-hour, in %% (0.05: one failure per 2,000 instance-hours)",
    )
    rate.add_argument("--mtbf-hours", type=float, metavar="HOURS", help="mean time between failures of one instance")
    rate.add_argument(
        "--failure-preset",
        choices=sorted(FAILURE_PRESETS),
        help="a published failure rate, %% per instance-hour: "
        + "; ".join(f"{name} {FAILURE_PRESETS[name]:g} ({FAILURE_SOURCES[name]})" for name in sorted(FAILURE_PRESETS)),
    )
    one_size = (required if simulating else size).add_mutually_exclusive_group(required=simulating)
    one_size.add_argument(
        "--gpu-hours",
        type=float,
        metavar="GPU_HOURS",
        help="the job's size in GPU-hours of failure-free training" + ("" if simulating else " (default: none)"),
    )
    one_size.add_argument(
        "--tokens",
        type=float,
        metavar="TOKENS",
        help="the job's size in tokens to train: at 6 x --params x tokens FLOPs (--mfu, --peak-tflops), or at "
        "the tokens/s per GPU --from-run measured" + ("" if simulating else " (default: none)"),
    )
    size.add_argument(
        "--params",
        type=float,
        metavar="N",
        help="the model's parameter count (e.g. 8e9), to size a --tokens job at 6 FLOPs per parameter per token; "
        "only with --tokens (default: none)",
    )
    size.add_argument(
        "--mfu",
        type=float,
        metavar="FRACTION",
        help=f"model FLOPs utilization, a fraction of the GPU's peak; only with --tokens and --params "
        f"(default {DEFAULT_MFU:g})",
    )
    size.add_argument(
        "--peak-tflops",
        type=float,
        metavar="TFLOPS",
        help=f"a GPU's dense bf16 peak, TFLOP/s; only with --tokens and --params (default {DEFAULT_PEAK_TFLOPS:g}: "
        "H100 and H200 SXM)",
    )
    size.add_argument(
        "--gpus-per-instance", type=int, default=8, metavar="N", help="GPUs per instance (default 8: p5.48xlarge)"
    )
    stall_presets = ", ".join(
        f"{name} ({p.value:g} s, HyperPod managed tiered checkpointing)" for name, p in STALL_PRESETS.items()
    )
    failures.add_argument(
        "--checkpoint-stall",
        metavar="SECONDS|PRESET",
        help=f"seconds training stalls per checkpoint save, or a preset: {stall_presets}; "
        f"default {DEFAULT_STALL_SECONDS:g} s, or what --from-run measured",
    )
    failures.add_argument(
        "--checkpoint-interval",
        type=float,
        metavar="MINUTES",
        help=(
            "your fixed schedule: minutes of training between checkpoint saves, simulated instead of Daly's "
            "optimum (default: Daly's optimum)"
            if simulating
            else "your fixed schedule: minutes of training between checkpoint saves; the plan shows its goodput, "
            "wall time and cost in Daly's model beside Daly's optimum (default: none, Daly's optimum only)"
        ),
    )
    presets = ", ".join(f"{name} ({p.value:g})" for name, p in RECOVERY_PRESETS.items())
    failures.add_argument(
        "--recovery-auto",
        metavar="MINUTES|PRESET",
        help=f"minutes of downtime per failure with automatic recovery, or a preset: {presets}; "
        f"{CHECKPOINTLESS} resumes from the last step, so Daly's model charges it no lost work; "
        f"default {DEFAULT_RECOVERY_AUTO}, or what --from-run measured",
    )
    failures.add_argument(
        "--recovery-manual",
        metavar="MINUTES|PRESET",
        help=f"minutes of downtime per failure with manual recovery, or a preset as for --recovery-auto "
        f"(default {DEFAULT_RECOVERY_MANUAL}: {RECOVERY_PRESETS[DEFAULT_RECOVERY_MANUAL].value:g} min)",
    )
    failures.add_argument(
        "--lost-work-minutes",
        type=float,
        default=0.0,
        metavar="MINUTES",
        help="the linear model only: minutes of work lost per failure, added to its downtime; Daly's model "
        "derives the lost work from the checkpoint interval (default 0)",
    )
    price = cost.add_mutually_exclusive_group()
    price.add_argument(
        "--price",
        type=float,
        metavar="DOLLARS",
        help=("$ per instance-hour, for the cost in --output json" if simulating else "$ per instance-hour")
        + f" (default: the {DEFAULT_PRICE_PRESET} preset, ${PRICE_PRESETS[DEFAULT_PRICE_PRESET]:g})",
    )
    price.add_argument(
        "--price-preset",
        choices=sorted(PRICE_PRESETS),
        default=DEFAULT_PRICE_PRESET,
        help="On-Demand $ per instance-hour, us-east-1, Linux, after AWS's June 2025 P4/P5 price reduction: "
        + ", ".join(f"{name} {PRICE_PRESETS[name]:g}" for name in sorted(PRICE_PRESETS))
        + f" (default {DEFAULT_PRICE_PRESET}; prices differ by region, reservation and savings plan: pass yours "
        "with --price)",
    )
    output.add_argument(
        "--from-run",
        metavar="FILE",
        action="append",
        help="payload JSON lines (train.py's stdout and stderr) or an llm-infra drill report: plan with the "
        "checkpoint stall, recovery, step time and tokens/s it measured; repeatable (default: none)",
    )
    output.add_argument(
        "--model",
        choices=MODELS,
        default="daly",
        help=(
            "the model whose analytic figures --output json carries under analytic; the table marks its column "
            "with * (default daly)"
            if simulating
            else "the model --output json carries; the table shows both and marks it with * (default daly)"
        ),
    )
    add_output_flag(
        output,  # type: ignore[arg-type]  # an argument group takes the same add_argument
        "the simulated and the analytic figures" if simulating else "the chosen model's figures, one flat object",
    )
    return output


@dataclass(frozen=True)
class Inputs:
    """The job to plan and what of it the run measured."""

    job: JobSpec
    measured: dict[str, Measurement]  # input (in the unit its name says) -> the measurement used
    overridden: list[str]  # measurements a flag overrode, in words
    step_seconds: Measurement | None
    shutdown_budget_seconds: Measurement | None = None  # from a stop signal to the launcher's SIGKILL
    notes: tuple[str, ...] = ()  # what the run's stops tell (skipped final saves, saves too long)
    warnings: tuple[str, ...] = ()  # what --from-run cannot vouch for: printed on stderr, in the JSON


def _number_or_preset(flag: str, text: str, presets: Mapping[str, Preset]) -> float:
    if text in presets:
        return presets[text].value
    try:
        return float(text)
    except ValueError:
        raise PlanError(f"{flag}: {text!r} is neither a number nor a preset ({', '.join(presets)})") from None


def _given_text(flag: str, text: str, presets: Mapping[str, Preset], unit: str) -> str:
    """How a given flag reads in a message: ``--recovery-auto hyperpod-auto, 40 min`` or ``--checkpoint-stall 60``."""
    return f"{flag} {text}, {presets[text].value:g} {unit}" if text in presets else f"{flag} {text}"


def inputs_from(args: argparse.Namespace) -> Inputs:
    """The job from the flags; what a flag leaves open comes from --from-run, else from its default.
    Each input's source (the flag as given, the run, or the default) goes with the job, for its messages."""
    runs = read_runs(args.from_run) if args.from_run else RunMeasurements()
    measured: dict[str, Measurement] = {}
    overridden: list[str] = []
    sources: dict[str, str] = {"instances": f"--instances {args.instances}"}

    def choose(
        field: str,
        name: str,
        flag: str,
        given: str | None,
        presets: Mapping[str, Preset],
        *,
        unit: str,
        run: Measurement | None,
        default: str,
    ) -> float:
        if given is not None:
            if run is not None:
                overridden.append(f"{name} = {run.value:g} ({run.how}): {flag} given")
            sources[field] = _given_text(flag, given, presets, unit)
            return _number_or_preset(flag, given, presets)
        if run is not None:
            measured[name] = run
            sources[field] = f"{run.value:.3g} {unit} measured by --from-run: {run.how}"
            return run.value
        value = _number_or_preset(flag, default, presets)
        preset = f": the {default} preset," if default in presets else ""
        sources[field] = f"the default{preset} {value:g} {unit}; no {flag} given"
        return value

    recovery = runs.recovery_seconds
    recovery_minutes = Measurement(recovery.value / 60, recovery.how) if recovery else None
    stall_s = choose(
        "checkpoint_stall_hours",
        "checkpoint_stall_seconds",
        "--checkpoint-stall",
        args.checkpoint_stall,
        STALL_PRESETS,
        unit="s",
        run=runs.checkpoint_seconds,
        default=f"{DEFAULT_STALL_SECONDS:g}",
    )
    auto_min = choose(
        "recovery_auto_hours",
        "recovery_auto_minutes",
        "--recovery-auto",
        args.recovery_auto,
        RECOVERY_PRESETS,
        unit="min",
        run=recovery_minutes,
        default=DEFAULT_RECOVERY_AUTO,
    )
    manual_min = choose(
        "recovery_manual_hours",
        "recovery_manual_minutes",
        "--recovery-manual",
        args.recovery_manual,
        RECOVERY_PRESETS,
        unit="min",
        run=None,
        default=DEFAULT_RECOVERY_MANUAL,
    )
    checkpointless: set[Mode] = set()
    if args.recovery_auto == CHECKPOINTLESS:
        checkpointless.add("auto")
    if args.recovery_manual == CHECKPOINTLESS:
        checkpointless.add("manual")
    if args.checkpoint_interval is not None:
        sources["checkpoint_interval_hours"] = f"--checkpoint-interval {args.checkpoint_interval:g}"
    if args.lost_work_minutes:
        sources["lost_work_hours"] = f"--lost-work-minutes {args.lost_work_minutes:g}"
    mtbf_hours = _instance_mtbf_hours(args, sources)
    job = JobSpec(
        instances=args.instances,
        gpus_per_instance=args.gpus_per_instance,
        instance_mtbf_hours=mtbf_hours,
        checkpoint_stall_hours=stall_s / 3600,
        recovery_auto_hours=auto_min / 60,
        recovery_manual_hours=manual_min / 60,
        lost_work_hours=args.lost_work_minutes / 60,
        gpu_hours=_gpu_hours(args, runs, measured, overridden),
        price_per_instance_hour=args.price if args.price is not None else PRICE_PRESETS[args.price_preset],
        checkpoint_interval_hours=None if args.checkpoint_interval is None else args.checkpoint_interval / 60,
        checkpointless=frozenset(checkpointless),
        sources=sources,
    )
    job.validate()
    return Inputs(
        job,
        measured,
        overridden,
        runs.step_seconds,
        runs.shutdown_budget_seconds,
        runs.notes,
        _warnings(args, runs, job),
    )


def _warnings(args: argparse.Namespace, runs: RunMeasurements, job: JobSpec) -> tuple[str, ...]:
    """What --from-run cannot vouch for: a drill that measured no recovery, and runs of another job (on
    another device than GPUs, or of another model size than --params) whose measurements are scaled."""
    used = job.source("recovery_auto_hours")
    warnings = [
        f"--from-run {unrecovered}: it measures no automatic recovery; this plan's is {used}"
        for unrecovered in runs.drills_without_recovery
    ]
    cluster = f"{job.instances} instances x {job.gpus_per_instance} GPUs"
    for shape in runs.runs:
        other = []
        if any(device != "cuda" for device in shape.devices):
            other.append("not a GPU run")
        trained = shape.parameters
        if (
            args.params is not None
            and trained
            and abs(math.log(args.params / trained)) > math.log(MODEL_SIZE_TOLERANCE)
        ):
            other.append(f"not the model of --params {args.params:g}")
        if other:
            warnings.append(
                f"--from-run {shape.path} is {shape.describe()}, {' and '.join(other)}: what it measured is another "
                f"job's, scaled here as if it were this one's ({cluster})"
            )
    return tuple(warnings)


def _instance_mtbf_hours(args: argparse.Namespace, sources: dict[str, str]) -> float:
    if args.failure_preset:
        sources["instance_mtbf_hours"] = f"--failure-preset {args.failure_preset}"
        return 100.0 / FAILURE_PRESETS[args.failure_preset]
    if args.failure_rate is not None:
        if args.failure_rate <= 0:
            raise PlanError(f"--failure-rate: {args.failure_rate} must be > 0 (% per instance-hour)")
        sources["instance_mtbf_hours"] = f"--failure-rate {args.failure_rate:g}"
        return 100.0 / args.failure_rate
    if args.mtbf_hours <= 0:
        raise PlanError(f"--mtbf-hours: {args.mtbf_hours} must be > 0")
    sources["instance_mtbf_hours"] = f"--mtbf-hours {args.mtbf_hours:g}"
    return float(args.mtbf_hours)


def _gpu_hours(
    args: argparse.Namespace, runs: RunMeasurements, measured: dict[str, Measurement], overridden: list[str]
) -> float | None:
    """The job size: --gpu-hours; --tokens at 6ND FLOPs with --params, else at the run's tokens/s; or None.
    --params, --mfu and --peak-tflops where they would size nothing are refused."""
    sizing = [
        f
        for f, value in (("--params", args.params), ("--mfu", args.mfu), ("--peak-tflops", args.peak_tflops))
        if value is not None
    ]
    if args.tokens is None and sizing:
        them = "it" if len(sizing) == 1 else "them"
        where = (
            "--gpu-hours gives the job size here: drop"
            if args.gpu_hours is not None
            else "no --tokens given: pass --tokens or drop"
        )
        raise PlanError(
            f"{', '.join(sizing)}: only size a job given in --tokens (6 x parameters x tokens FLOPs); {where} {them}"
        )
    if args.gpu_hours is not None:
        return float(args.gpu_hours)
    if args.tokens is None:
        return None
    if args.params is not None:
        if runs.tokens_per_gpu_second is not None:
            rate = runs.tokens_per_gpu_second
            overridden.append(f"tokens_per_gpu_second = {rate.value:g} ({rate.how}): --params given")
        mfu = DEFAULT_MFU if args.mfu is None else args.mfu
        peak = DEFAULT_PEAK_TFLOPS if args.peak_tflops is None else args.peak_tflops
        return gpu_hours_for(args.tokens, args.params, mfu, peak)
    if runs.tokens_per_gpu_second is None:
        raise PlanError("--tokens needs --params (or --from-run with measured tokens/s)")
    if sizing:  # --mfu / --peak-tflops without --params
        raise PlanError(
            f"{', '.join(sizing)}: only used with --params (6 x parameters x tokens FLOPs); here the tokens/s "
            "--from-run measured size the job: pass --params or drop " + ("it" if len(sizing) == 1 else "them")
        )
    if not args.tokens > 0:
        raise PlanError(f"--tokens: {args.tokens} must be > 0")
    measured["tokens_per_gpu_second"] = runs.tokens_per_gpu_second
    return args.tokens / runs.tokens_per_gpu_second.value / 3600


def _warn(warnings: tuple[str, ...]) -> None:
    """Each warning in one line on stderr, before anything on stdout."""
    for warning in warnings:
        print(f"llm-infra: warning: {warning}", file=sys.stderr, flush=True)


def run_plan(args: argparse.Namespace) -> int:
    inputs = inputs_from(args)
    job = inputs.job
    result = plan(job)
    _warn(inputs.warnings)
    if args.plot:
        plot(job, args.plot)
    if args.output == OUTPUT_JSON:
        payload = result.as_dict(args.model)
        if args.from_run:
            payload["measured"] = {name: m.value for name, m in inputs.measured.items()}
            if inputs.step_seconds:
                payload["daly_interval_steps"] = result.daly_interval_minutes * 60 / inputs.step_seconds.value
            if inputs.shutdown_budget_seconds:
                payload["shutdown_budget_seconds"] = inputs.shutdown_budget_seconds.value
            payload["notes"] = list(inputs.notes)
            payload["warnings"] = list(inputs.warnings)
        print(json.dumps(payload))
        return 0
    print_plan(inputs, result, args.model)
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


def _figure(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _rows(label: str, outcome: Outcome, sized: bool) -> list[list[str]]:
    rows = []
    for mode in MODES:
        row = [
            label,
            mode,
            f"{getattr(outcome, f'downtime_per_failure_minutes_{mode}'):.1f} min",
            f"{getattr(outcome, f'cost_per_failure_{mode}'):,.0f}",
            _figure(getattr(outcome, f"goodput_{mode}"), ".3f"),
        ]
        if sized:
            row += [
                _figure(getattr(outcome, f"wall_days_{mode}"), ".2f"),
                _figure(getattr(outcome, f"cost_{mode}"), ",.0f"),
            ]
        rows.append(row)
    return rows


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
    rows += _rows("daly" + (" *" if chosen == "daly" else ""), result.daly, sized)
    fixed, minutes = result.at_checkpoint_interval, result.checkpoint_interval_minutes
    if fixed is not None and minutes is not None:
        rows += _rows(f"daly, every {minutes:g} min", fixed, sized)
    rows += _rows("linear" + (" *" if chosen == "linear" else ""), result.linear, sized)
    print_table(header, rows)
    for model in MODELS:
        print(f"{model}: {_saving(result.outcome(model))}")
    if fixed is not None and minutes is not None:
        print(_schedule_line(result.daly, fixed, minutes, result.daly_interval_minutes))
        for mode, reason in fixed.beyond_horizon.items():
            print(f"daly, every {minutes:g} min, {mode}: beyond the failure horizon: {reason}")
    resumes = "".join(f"; {mode} recovery is checkpointless: no work lost" for mode in sorted(job.checkpointless))
    print(
        f"(* the model --output json carries; downtime/failure: linear = recovery + --lost-work-minutes "
        f"({job.lost_work_hours * 60:g}); Daly = recovery + expected work lost since the last checkpoint{resumes})"
    )


def _saving(outcome: Outcome) -> str:
    if outcome.saving_fraction is None:
        return "; ".join(
            f"{mode} recovery is beyond the failure horizon: {reason}"
            for mode, reason in outcome.beyond_horizon.items()
        )
    text = f"automatic recovery saves {outcome.saving_fraction:.1%} of wall time"
    if outcome.cost_manual is not None and outcome.cost_auto is not None:
        text += f" (${outcome.cost_manual - outcome.cost_auto:,.0f})"
    return text


def _schedule_line(daly: Outcome, fixed: Outcome, minutes: float, daly_minutes: float) -> str:
    """The user's schedule against Daly's optimum, with automatic recovery (never beyond the horizon here)."""
    assert daly.goodput_auto is not None and fixed.goodput_auto is not None  # plan() refused otherwise
    text = (
        f"your schedule, a checkpoint every {minutes:g} min, vs Daly's {daly_minutes:.1f} min, automatic recovery: "
        f"goodput {fixed.goodput_auto:.3f} vs {daly.goodput_auto:.3f}"
    )
    if fixed.wall_days_auto is not None and daly.wall_days_auto is not None:
        text += f", {fixed.wall_days_auto - daly.wall_days_auto:+.2f} wall days"
    if fixed.cost_auto is not None and daly.cost_auto is not None:
        text += f", {fixed.cost_auto - daly.cost_auto:+,.0f} $"
    return text


def run_simulate(args: argparse.Namespace) -> int:
    if args.trials < 2:
        raise PlanError(f"--trials: {args.trials} must be >= 2")
    inputs = inputs_from(args)
    job = inputs.job
    analytic = plan(job)
    result = simulate(job, trials=args.trials, seed=args.seed)
    _warn(inputs.warnings)
    if args.output == OUTPUT_JSON:
        payload: dict[str, Any] = {"simulated": result, "analytic": analytic.as_dict(args.model)}
        if args.from_run:
            payload["warnings"] = list(inputs.warnings)
        print(json.dumps(payload))
        return 0
    daly = analytic.at_checkpoint_interval or analytic.daly
    where = "--checkpoint-interval" if analytic.at_checkpoint_interval else "Daly's optimum"
    print(f"{args.trials} trials, a checkpoint every {result['interval_minutes']:.1f} min ({where})")
    marks = {model: " *" if model == args.model else "" for model in MODELS}
    rows = []
    for mode in MODES:
        simulated = result.get(f"wall_days_{mode}")
        rows.append(
            [
                mode,
                _figure(simulated, ".3f"),
                _figure(result.get(f"wall_days_{mode}_stderr"), ".3f"),
                _figure(getattr(daly, f"wall_days_{mode}"), ".3f"),
                _figure(getattr(analytic.linear, f"wall_days_{mode}"), ".3f"),
            ]
        )
    print_table(
        ["", "simulated wall days", "± stderr", f"Daly wall days{marks['daly']}", f"linear wall days{marks['linear']}"],
        rows,
    )
    for mode, reason in daly.beyond_horizon.items():
        print(f"{mode}: beyond the failure horizon, not simulated: {reason}")
    for mode, reason in analytic.linear.beyond_horizon.items():
        print(f"{mode}, linear model: beyond the failure horizon: {reason}")
    print("(* the model --output json carries under analytic)")
    return 0
