"""``llm-infra plan`` and ``llm-infra simulate``: what failures cost a job, analytic and Monte-Carlo.

Flags the chosen inputs would ignore are usage errors, never dropped in silence: ``--params``, ``--mfu``
and ``--peak-tflops`` size a job given in ``--tokens`` (6 x parameters x tokens FLOPs) and are refused
without ``--tokens`` (with ``--gpu-hours``, or with no job size), and ``--mfu`` / ``--peak-tflops`` are
refused with ``--tokens`` but no ``--params`` (the run's measured tokens/s sizes the job then). A
measurement of ``--from-run`` that a flag overrides is a note ("not used: ..."): the flag wins, as asked.
What ``--from-run`` cannot vouch for is a warning, on stderr and in the JSON: a run on another device
(CPU) or of another model size than ``--params``, and a drill report whose ``recovery_seconds`` is null.

The planner knows nothing of these flags: its errors (:class:`PlanError`) name its own inputs, and the
commands say each by its flag (``FLAGS``); how each input was set (``JobSpec.sources``) they say too.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from llm_infra.cli.terminal import (
    OUTPUT_JSON,
    UsageError,
    add_output_flag,
    number,
    png_path,
    print_table,
    whole_number,
)
from llm_infra.failure_rates import FAILURE_PRESETS
from llm_infra.planner import (
    CHECKPOINTLESS_FALLBACK,
    CHECKPOINTLESS_SUCCESS,
    LLAMA3_UNEXPECTED_INTERRUPTIONS,
    MODELS,
    MODES,
    PEAK_TFLOPS_PRESETS,
    PRICE_PRESETS,
    RECOVERY_PRESETS,
    STALL_PRESETS,
    Forecast,
    JobSpec,
    Mode,
    Outcome,
    PlanError,
    Preset,
    duration_text,
    forecast,
    gpu_hours_for,
    plot,
    refuse_non_finite,
    simulate,
)
from llm_infra.planner.measured_run import RUN, Measurement, RunMeasurements, read_runs
from llm_infra.workloads.checkpoint_interval import young_interval

DEFAULT_STALL_SECONDS = 60.0
DEFAULT_RECOVERY_AUTO = "hyperpod-auto"
DEFAULT_RECOVERY_MANUAL = "manual"
DEFAULT_MFU = 0.4
DEFAULT_PEAK_TFLOPS = "h100"  # a PEAK_TFLOPS_PRESETS name: H100 / H200 SXM, dense bf16
DEFAULT_PRICE_PRESET = "p5.48xlarge"
CHECKPOINTLESS = "hyperpod-checkpointless"  # the recovery preset that resumes from the last step
FAILURE_SOURCES = {
    "opt-175b": "Meta's OPT-175B logbook",
    "llama3-16k-h100": "Llama 3.1 on 16k H100s, 419 interruptions in 54 days",
    "mpt-7b": "MosaicML's MPT-7B report",
}
# A run of a model this much larger or smaller than --params is another model's.
MODEL_SIZE_TOLERANCE = 1.1

# The planner's inputs (the fields of JobSpec, and the others its errors name) as the commands take them.
FLAGS = {
    "instances": "--instances",
    "gpus_per_instance": "--gpus-per-instance",
    "instance_mtbf_hours": "--failure-rate, --mtbf-hours or --failure-preset",
    "checkpoint_stall_hours": "--checkpoint-stall",
    "recovery_auto_hours": "--recovery-auto",
    "recovery_manual_hours": "--recovery-manual",
    "checkpoint_interval_hours": "--checkpoint-interval",
    "lost_work_hours": "--lost-work-minutes",
    "checkpointless_success": "--checkpointless-success",
    "checkpointless_fallback_hours": "--checkpointless-fallback",
    "gpu_hours": "--gpu-hours (or --tokens)",
    "price_per_instance_hour": "--price",
    "tokens": "--tokens",
    "params": "--params",
    "mfu": "--mfu",
    "peak_tflops": "--peak-tflops",
    "trials": "--trials",
    "plot": "--plot",
    RUN: "--from-run",
}

PLAN_DESCRIPTION = """What failures cost a training job: goodput, wall time and dollars with automatic and with manual
recovery, in Daly's model and in AWS's linear model side by side, and how often to checkpoint (Daly's
optimum; with --checkpoint-interval, your own schedule beside it). Without a job size (--gpu-hours or
--tokens) only ratios: goodput, the cost of one failure, the saving.

A job that cannot finish is refused with the reason: a checkpoint stall not below the job MTBF, or an
automatic recovery (or checkpoint schedule) whose goodput is below 1 %, where the expected wall time
diverges. Manual recovery beyond that horizon is shown as such, without figures.

A checkpointless recovery (--recovery-auto hyperpod-checkpointless) resumes --checkpointless-success of
the failures from the last step, without lost work; the rest restart from the last checkpoint
(--checkpointless-fallback). The checkpoint interval shown for it is the optimum of that mixture: Daly's
at the MTBF of the failures that fall back (none when every failure resumes)."""
SIMULATE_DESCRIPTION = """The job of llm-infra plan as a seeded Monte-Carlo of Daly's process (exponential failures,
the work since the last checkpoint lost, recoveries that a failure starts again), beside both analytic
models: the cross-check of the plan. It needs a job size; it runs each recovery at its optimal
checkpoint interval, or both at --checkpoint-interval."""


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
        "into FILE.png, or into plan.png in a folder given; it prints the file written (needs a job size; "
        "default: no plot)",
    )
    plan_parser.set_defaults(handler=run_plan)

    sim_parser = commands.add_parser(
        "simulate",
        help="Monte-Carlo of the same job, to cross-check the plan",
        description=SIMULATE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    output = add_job_flags(sim_parser, simulating=True)
    output.add_argument(
        "--trials", type=whole_number(minimum=2), default=2000, metavar="N", help="Monte-Carlo trials (default 2000)"
    )
    output.add_argument(
        "--seed",
        type=whole_number(minimum=0),
        default=0,
        metavar="N",
        help="random seed: the same seed, the same figures (default 0)",
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
    required.add_argument(
        "--instances", type=whole_number(minimum=1), required=True, metavar="N", help="instances in the cluster"
    )
    rate = required.add_mutually_exclusive_group(required=True)
    rate.add_argument(
        "--failure-rate",
        type=number(above=0),
        metavar="PERCENT",
        help="failures per instance-hour, in %% (0.05: one failure per 2,000 instance-hours)",
    )
    rate.add_argument(
        "--mtbf-hours", type=number(above=0), metavar="HOURS", help="mean time between failures of one instance"
    )
    rate.add_argument(
        "--failure-preset",
        choices=sorted(FAILURE_PRESETS),
        help="a published failure rate, %% per instance-hour: "
        + "; ".join(f"{name} {FAILURE_PRESETS[name]:g} ({FAILURE_SOURCES[name]})" for name in sorted(FAILURE_PRESETS)),
    )
    one_size = (required if simulating else size).add_mutually_exclusive_group(required=simulating)
    one_size.add_argument(
        "--gpu-hours",
        type=number(above=0),
        metavar="GPU_HOURS",
        help="the job's size in GPU-hours of failure-free training" + ("" if simulating else " (default: none)"),
    )
    one_size.add_argument(
        "--tokens",
        type=number(above=0),
        metavar="TOKENS",
        help="the job's size in tokens to train: at 6 x --params x tokens FLOPs (--mfu, --peak-tflops), or at "
        "the tokens/s per GPU --from-run measured" + ("" if simulating else " (default: none)"),
    )
    size.add_argument(
        "--params",
        type=number(above=0),
        metavar="N",
        help="the model's parameter count (e.g. 8e9), to size a --tokens job at 6 FLOPs per parameter per token; "
        "only with --tokens (default: none)",
    )
    size.add_argument(
        "--mfu",
        type=number(above=0, maximum=1),
        metavar="FRACTION",
        help=f"model FLOPs utilization, a fraction of the GPU's peak; only with --tokens and --params "
        f"(default {DEFAULT_MFU:g})",
    )
    peaks = ", ".join(f"{name} ({p.value:g})" for name, p in PEAK_TFLOPS_PRESETS.items())
    size.add_argument(
        "--peak-tflops",
        type=number_or_preset(PEAK_TFLOPS_PRESETS, "TFLOP/s", above=0),
        metavar="TFLOPS|PRESET",
        help=f"a GPU's dense bf16 peak, TFLOP/s, or a preset: {peaks}; only with --tokens and --params (default "
        f"{DEFAULT_PEAK_TFLOPS}: H100 and H200 SXM)",
    )
    size.add_argument(
        "--gpus-per-instance",
        type=whole_number(minimum=1),
        default=8,
        metavar="N",
        help="GPUs per instance (default 8: p5.48xlarge)",
    )
    stall_presets = ", ".join(
        f"{name} ({p.value:g} s, HyperPod managed tiered checkpointing)" for name, p in STALL_PRESETS.items()
    )
    failures.add_argument(
        "--checkpoint-stall",
        type=number_or_preset(STALL_PRESETS, "seconds", above=0),
        metavar="SECONDS|PRESET",
        help=f"seconds training stalls per checkpoint save, or a preset: {stall_presets}; "
        f"default {DEFAULT_STALL_SECONDS:g} s, or what --from-run measured",
    )
    failures.add_argument(
        "--checkpoint-interval",
        type=number(above=0),
        metavar="MINUTES",
        help=(
            "your fixed schedule: minutes of training between checkpoint saves, simulated instead of each "
            "recovery's optimum (default: the optimum)"
            if simulating
            else "your fixed schedule: minutes of training between checkpoint saves; the plan shows its goodput, "
            "wall time and cost in Daly's model beside the optimum (default: none, the optimum only)"
        ),
    )
    presets = ", ".join(f"{name} ({p.value:g})" for name, p in RECOVERY_PRESETS.items())
    failures.add_argument(
        "--recovery-auto",
        type=number_or_preset(RECOVERY_PRESETS, "minutes", minimum=0),
        metavar="MINUTES|PRESET",
        help=f"minutes of downtime per failure with automatic recovery, or a preset: {presets}; "
        f"{CHECKPOINTLESS} resumes --checkpointless-success of the failures from the last step, without lost "
        f"work; default {DEFAULT_RECOVERY_AUTO}, or what --from-run measured",
    )
    failures.add_argument(
        "--recovery-manual",
        type=number_or_preset(RECOVERY_PRESETS, "minutes", minimum=0),
        metavar="MINUTES|PRESET",
        help=f"minutes of downtime per failure with manual recovery, or a preset as for --recovery-auto "
        f"(default {DEFAULT_RECOVERY_MANUAL}: {RECOVERY_PRESETS[DEFAULT_RECOVERY_MANUAL].value:g} min)",
    )
    failures.add_argument(
        "--checkpointless-success",
        type=number(minimum=0, maximum=1),
        metavar="FRACTION",
        help=f"with a checkpointless recovery ({CHECKPOINTLESS}), the fraction of failures it resumes from the "
        "last step; the rest restart from the last checkpoint (--checkpointless-fallback) (default "
        f"{CHECKPOINTLESS_SUCCESS.value:.3f}, an assumption, not a measurement, as no success rate is published: the "
        "faults of one GPU or one host, which leave the peers' copies of the state intact, among Llama 3's "
        f"{LLAMA3_UNEXPECTED_INTERRUPTIONS} unexpected interruptions, arXiv 2407.21783 Table 5)",
    )
    failures.add_argument(
        "--checkpointless-fallback",
        type=number_or_preset(RECOVERY_PRESETS, "minutes", minimum=0),
        metavar="MINUTES|PRESET",
        help="with a checkpointless recovery, the minutes of downtime of a failure it does not resume, which "
        "restarts from the last checkpoint, or a preset as for --recovery-auto (default "
        f"{CHECKPOINTLESS_FALLBACK}: {RECOVERY_PRESETS[CHECKPOINTLESS_FALLBACK].value:g} min)",
    )
    failures.add_argument(
        "--lost-work-minutes",
        type=number(minimum=0),
        default=0.0,
        metavar="MINUTES",
        help="the linear model only: minutes of work lost per failure, added to its downtime; Daly's model "
        "derives the lost work from the checkpoint interval (default 0)",
    )
    price = cost.add_mutually_exclusive_group()
    price.add_argument(
        "--price",
        type=number(minimum=0),
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


def number_or_preset(
    presets: Mapping[str, Preset], unit: str, *, minimum: float | None = None, above: float | None = None
) -> Callable[[str], str]:
    """An argparse ``type`` for a flag that takes a finite number of ``unit`` or the name of one of ``presets``:
    anything else (``inf``, ``nan``, a name that is none of them) is refused, naming what it takes. It keeps
    the text as given (the messages quote it; a preset can mean more than its number)."""
    parse = number(minimum=minimum, above=above)
    bounds = (f" >= {minimum:g}" if minimum is not None else "") + (f" > {above:g}" if above is not None else "")

    def check(text: str) -> str:
        if text in presets:
            return text
        try:
            parse(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"expected {unit} (a finite number{bounds}) or a preset ({', '.join(presets)}), got {text!r}"
            ) from None
        return text

    check.__name__ = "number or preset"
    return check


def _number_or_preset(text: str, presets: Mapping[str, Preset]) -> float:
    """The value of a flag's text that :func:`number_or_preset` let through."""
    return presets[text].value if text in presets else float(text)


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
            return _number_or_preset(given, presets)
        if run is not None:
            measured[name] = run
            sources[field] = f"{run.value:.3g} {unit} measured by --from-run: {run.how}"
            return run.value
        value = _number_or_preset(default, presets)
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
    resumed = CHECKPOINTLESS_SUCCESS.value
    fallback_min = RECOVERY_PRESETS[CHECKPOINTLESS_FALLBACK].value
    ignored = [
        flag
        for flag, value in (
            ("--checkpointless-success", args.checkpointless_success),
            ("--checkpointless-fallback", args.checkpointless_fallback),
        )
        if value is not None
    ]
    if ignored and not checkpointless:
        them = "it" if len(ignored) == 1 else "them"
        raise UsageError(
            f"{', '.join(ignored)}: only with a checkpointless recovery (--recovery-auto {CHECKPOINTLESS}); no "
            f"recovery here is checkpointless: pass --recovery-auto {CHECKPOINTLESS} or drop {them}"
        )
    if args.checkpointless_success is not None:
        resumed = args.checkpointless_success
        sources["checkpointless_success"] = f"--checkpointless-success {resumed:g}"
    else:
        sources["checkpointless_success"] = (
            f"the default {resumed:.3f}, assumed, not measured; no --checkpointless-success given"
        )
    if args.checkpointless_fallback is not None:
        fallback_min = _number_or_preset(args.checkpointless_fallback, RECOVERY_PRESETS)
        sources["checkpointless_fallback_hours"] = _given_text(
            "--checkpointless-fallback", args.checkpointless_fallback, RECOVERY_PRESETS, "min"
        )
    else:
        sources["checkpointless_fallback_hours"] = (
            f"the default: the {CHECKPOINTLESS_FALLBACK} preset, {fallback_min:g} min; "
            "no --checkpointless-fallback given"
        )
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
        checkpointless_success=resumed,
        checkpointless_fallback_hours=fallback_min / 60,
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
            raise UsageError(f"--failure-rate: {args.failure_rate} must be > 0 (% per instance-hour)")
        sources["instance_mtbf_hours"] = f"--failure-rate {args.failure_rate:g}"
        return 100.0 / args.failure_rate
    if args.mtbf_hours <= 0:
        raise UsageError(f"--mtbf-hours: {args.mtbf_hours} must be > 0")
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
        raise UsageError(
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
        peak = _number_or_preset(
            DEFAULT_PEAK_TFLOPS if args.peak_tflops is None else args.peak_tflops, PEAK_TFLOPS_PRESETS
        )
        return gpu_hours_for(args.tokens, args.params, mfu, peak)
    if runs.tokens_per_gpu_second is None:
        raise UsageError("--tokens needs --params (or --from-run with measured tokens/s)")
    if sizing:  # --mfu / --peak-tflops without --params
        raise UsageError(
            f"{', '.join(sizing)}: only used with --params (6 x parameters x tokens FLOPs); here the tokens/s "
            "--from-run measured size the job: pass --params or drop " + ("it" if len(sizing) == 1 else "them")
        )
    if not args.tokens > 0:
        raise UsageError(f"--tokens: {args.tokens} must be > 0")
    measured["tokens_per_gpu_second"] = runs.tokens_per_gpu_second
    return args.tokens / runs.tokens_per_gpu_second.value / 3600


def _warn(warnings: tuple[str, ...]) -> None:
    """Each warning in one line on stderr, before anything on stdout."""
    for warning in warnings:
        print(f"llm-infra: warning: {warning}", file=sys.stderr, flush=True)


def _dumps(payload: dict[str, Any]) -> str:
    """The JSON of ``payload``, refused (one line, naming the figure) rather than written with NaN or Infinity."""
    refuse_non_finite(payload)
    return json.dumps(payload, allow_nan=False)


@contextmanager
def flags_named() -> Iterator[None]:
    """The planner's refusals as the user gave the inputs: each input it names, said by its flag (``FLAGS``)."""
    try:
        yield
    except PlanError as err:
        raise UsageError(err.text(FLAGS)) from None


def run_plan(args: argparse.Namespace) -> int:
    with flags_named():
        return _plan(args)


def _plan(args: argparse.Namespace) -> int:
    inputs = inputs_from(args)
    job = inputs.job
    picture = str(png_path("--plot", args.plot, "plan.png")) if args.plot else None
    result = forecast(job)
    _warn(inputs.warnings)
    if picture:
        plot(job, picture)
    if args.output == OUTPUT_JSON:
        payload = result.as_dict(args.model)
        if args.from_run:
            payload["measured"] = {name: m.value for name, m in inputs.measured.items()}
            if inputs.step_seconds:
                minutes = result.optimal_interval_minutes["auto"]
                payload["daly_interval_steps"] = None if minutes is None else minutes * 60 / inputs.step_seconds.value
            if inputs.shutdown_budget_seconds:
                payload["shutdown_budget_seconds"] = inputs.shutdown_budget_seconds.value
            payload["notes"] = list(inputs.notes)
            payload["warnings"] = list(inputs.warnings)
        if picture:
            payload["plot"] = picture
        print(_dumps(payload))
        return 0
    print_forecast(inputs, result, args.model)
    if picture:
        print(f"plot: {picture}")
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


def _steps(inputs: Inputs, minutes: float | None) -> str:
    """`` = 434 steps`` when the run logged its step time."""
    if inputs.step_seconds is None or minutes is None:
        return ""
    return f" = {minutes * 60 / inputs.step_seconds.value:,.0f} steps"


def _interval_lines(inputs: Inputs, result: Forecast) -> list[str]:
    """The job MTBF, the stall, and each recovery's optimal checkpoint interval: Daly's at the job MTBF for a
    recovery that restarts from the last checkpoint; for a checkpointless one, Daly's at the MTBF of the
    failures it does not resume (none when it resumes them all). The steps go with the automatic one."""
    job = inputs.job
    stall = f"stall {job.checkpoint_stall_hours * 3600:g} s"
    restarting = [mode for mode in MODES if mode not in job.checkpointless]
    steps = _steps(inputs, result.daly_interval_minutes) if "auto" in restarting else ""
    formulas = f"(Daly; Young: {result.young_interval_minutes:.1f} min)"
    if not job.checkpointless:
        every = f"checkpoint every {result.daly_interval_minutes:.1f} min{steps} {formulas}, "
    elif restarting:
        every = (
            f"checkpoint every {result.daly_interval_minutes:.1f} min{steps} with {restarting[0]} recovery {formulas}, "
        )
    else:
        every = ""
    lines = [f"job MTBF: {result.job_mtbf_hours:.2f} h;  {every}{stall}"]
    for mode in sorted(job.checkpointless, key=MODES.index):
        recovery, minutes = job.recovery(mode), result.optimal_interval_minutes[mode]
        steps = _steps(inputs, minutes) if mode == "auto" else ""
        resumes = f"from the last step in {recovery.resume * 60:g} min"
        if minutes is None:
            lines.append(
                f"{mode} recovery, checkpointless: every failure resumes {resumes} "
                f"({job.source('checkpointless_success')}): no checkpoint pays for its stall (the optimum: none)"
            )
            continue
        fallback_mtbf = job.job_mtbf_hours / (1 - recovery.resumed)
        young = young_interval(job.checkpoint_stall_hours, fallback_mtbf) * 60
        lines.append(
            f"{mode} recovery, checkpointless: {recovery.resumed:.1%} of failures resume {resumes}, the rest restart "
            f"from the last checkpoint in {recovery.restart * 60:g} min, one every {duration_text(fallback_mtbf)}: "
            f"checkpoint every {minutes:.1f} min{steps} (Daly at that MTBF; Young: {young:.1f} min)"
        )
    if job.checkpointless and job.source("checkpointless_success").startswith("the default"):
        lines.append(
            f"  {job.checkpointless_success:.1%} resumed: the default of --checkpointless-success, "
            f"{CHECKPOINTLESS_SUCCESS.source}"
        )
    return lines


def print_forecast(inputs: Inputs, result: Forecast, chosen: str) -> None:
    job = inputs.job
    size = f"{job.gpu_hours:,.0f} GPU-hours" if job.gpu_hours is not None else "no job size (ratios only)"
    print(
        f"job: {job.instances} instances x {job.gpus_per_instance} GPUs, {size}, instance MTBF "
        f"{job.instance_mtbf_hours:,.0f} h ({100 / job.instance_mtbf_hours:.4g} %/instance-hour), "
        f"${job.price_per_instance_hour:,.2f}/instance-hour"
    )
    for line in _interval_lines(inputs, result):
        print(line)
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
        print(_schedule_line(result.daly, fixed, minutes, result.optimal_interval_minutes["auto"]))
        for mode, reason in fixed.beyond_horizon.items():
            print(f"daly, every {minutes:g} min, {mode}: beyond the failure horizon: {reason}")
    resumes = "".join(
        f"; {mode} recovery is checkpointless: "
        + (
            "no work lost"
            if job.checkpointless_success >= 1
            else f"{job.checkpointless_success:.1%} of failures lose no work, the rest fall back"
        )
        for mode in sorted(job.checkpointless, key=MODES.index)
    )
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


def _schedule_line(daly: Outcome, fixed: Outcome, minutes: float, optimum: float | None) -> str:
    """The user's schedule against the optimum (``optimum`` minutes, None: no checkpoint), with automatic
    recovery (never beyond the horizon here)."""
    assert daly.goodput_auto is not None and fixed.goodput_auto is not None  # forecast() refused otherwise
    best = "no checkpoint" if optimum is None else f"every {optimum:.1f} min"
    text = (
        f"your schedule, a checkpoint every {minutes:g} min, vs the optimum, {best}, automatic recovery: "
        f"goodput {fixed.goodput_auto:.3f} vs {daly.goodput_auto:.3f}"
    )
    if fixed.wall_days_auto is not None and daly.wall_days_auto is not None:
        text += f", {fixed.wall_days_auto - daly.wall_days_auto:+.2f} wall days"
    if fixed.cost_auto is not None and daly.cost_auto is not None:
        text += f", {fixed.cost_auto - daly.cost_auto:+,.0f} $"
    return text


def _simulated_intervals(result: dict[str, Any], fixed: bool) -> str:
    """``a checkpoint every 30.0 min (Daly's optimum)``, or each recovery's when they differ."""
    minutes = {mode: result[f"interval_minutes_{mode}"] for mode in MODES}
    if fixed:
        return f"a checkpoint every {minutes['auto']:.1f} min (--checkpoint-interval)"
    if minutes["auto"] == minutes["manual"]:
        return f"a checkpoint every {minutes['auto']:.1f} min (Daly's optimum)"
    each = [
        f"{'no checkpoint' if value is None else f'a checkpoint every {value:.1f} min'} with {mode} recovery"
        for mode, value in minutes.items()
    ]
    return f"{', '.join(each)} (each one's optimum)"


def run_simulate(args: argparse.Namespace) -> int:
    with flags_named():
        return _simulate(args)


def _simulate(args: argparse.Namespace) -> int:
    if args.trials < 2:
        raise UsageError(f"--trials: {args.trials} must be >= 2")
    inputs = inputs_from(args)
    job = inputs.job
    analytic = forecast(job)
    result = simulate(job, trials=args.trials, seed=args.seed)
    _warn(inputs.warnings)
    if args.output == OUTPUT_JSON:
        payload: dict[str, Any] = {"simulated": result, "analytic": analytic.as_dict(args.model)}
        if args.from_run:
            payload["warnings"] = list(inputs.warnings)
        print(_dumps(payload))
        return 0
    daly = analytic.at_checkpoint_interval or analytic.daly
    print(f"{args.trials} trials, {_simulated_intervals(result, analytic.at_checkpoint_interval is not None)}")
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
