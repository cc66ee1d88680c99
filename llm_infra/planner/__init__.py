"""What failures cost a training job: checkpoint intervals, goodput, wall time and dollars, in two models.

- **Daly's model** (2006), exponential failures: a job that needs ``T_s`` hours of compute, saves a
  checkpoint (stall ``delta``) after every ``tau`` hours of compute and, on each failure, loses the
  work since the last checkpoint plus a restart ``R``, expects
  ``T_w = M e^(R/M) (e^((tau+delta)/M) - 1) T_s / tau`` hours of wall time, M being the job's MTBF
  (the instance MTBF divided by the number of instances). ``tau`` is Daly's optimum, or the job's own
  fixed schedule (``JobSpec.checkpoint_interval_hours``, planned beside the optimum).
  A *checkpointless* recovery (HyperPod checkpointless training: peers restore the state of the last
  step) loses no work: ``T_w = T_s (1 + delta/tau) e^(R/M)``, the same process without the lost work
  (``tau -> 0`` in the lost-work term). The checkpoint stalls are still charged: the job keeps saving
  on its schedule, its fallback for a failure checkpointless recovery cannot handle. Its downtime per
  failure is the recovery alone; Daly's lost work is not added.
- **AWS's linear model** ("Reduce ML training costs with Amazon SageMaker HyperPod", 2025,
  https://aws.amazon.com/blogs/machine-learning/reduce-ml-training-costs-with-amazon-sagemaker-hyperpod/):
  ``T_w = T_s (1 + instances x failures per instance-hour x downtime per failure)``. It counts the
  downtime only: no checkpoint stalls, no work lost since the last checkpoint (unless given as
  part of the downtime), no failure during a recovery.

Both are linear in ``T_s``, so goodput and the saving fraction need no job size. A recovery whose
goodput is below ``GOODPUT_FLOOR`` (1 %: the expected wall time over 100 times the failure-free time)
is *beyond the failure horizon*: its expected time to finish diverges (``e^(R/M)`` or
``e^((tau+delta)/M)`` tries per success), and it gets no figures but the reason. ``plan`` refuses a
job whose automatic recovery is beyond it; manual recovery beyond it is the comparison's answer.
``simulate`` runs Daly's process as a seeded Monte-Carlo to cross-check the models. Standard library
only (the plot needs matplotlib).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from llm_infra.workloads.checkpoint_interval import daly_interval, young_interval

Model = Literal["daly", "linear"]
MODELS: tuple[Model, ...] = ("daly", "linear")

# Published failure rates, % per instance-hour.
FAILURE_PRESETS = {
    "opt-175b": 0.0588,  # Meta OPT-175B logbook (Zhang et al. 2022)
    "llama3-16k-h100": 0.0161,  # Llama 3.1 on 16k H100 (Meta 2024: 419 interruptions in 54 days)
    "mpt-7b": 0.0319,  # MosaicML MPT-7B training report
}
# On-Demand $ per instance-hour, us-east-1, Linux, after AWS's June 2025 P4/P5 price reduction.
# Prices change and differ by region, reservation and savings plan: pass --price for yours.
PRICE_PRESETS = {"p5.48xlarge": 55.04, "p4d.24xlarge": 21.96}


@dataclass(frozen=True)
class Preset:
    """A published figure and where it was published."""

    value: float
    source: str


AWS_HYPERPOD_COSTS = (
    "https://aws.amazon.com/blogs/machine-learning/reduce-ml-training-costs-with-amazon-sagemaker-hyperpod/"
)
AWS_CHECKPOINTLESS = (
    "https://aws.amazon.com/blogs/machine-learning/"
    "checkpointless-training-on-amazon-sagemaker-hyperpod-production-scale-training-with-faster-fault-recovery/"
)
AWS_TIERED_CHECKPOINTING = (
    "https://aws.amazon.com/blogs/machine-learning/"
    "accelerate-your-model-training-with-managed-tiered-checkpointing-on-amazon-sagemaker-hyperpod/"
)
# Downtime per failure, minutes: the cluster idle from the failure until training runs again.
RECOVERY_PRESETS = {
    # Self-managed cluster: a human detects, diagnoses, replaces the node and restarts the job.
    "manual": Preset(280.0, f"AWS, manual recovery, 280 min per failure: {AWS_HYPERPOD_COSTS}"),
    # HyperPod detects the faulty node, replaces it and restarts the job from its checkpoint.
    "hyperpod-auto": Preset(40.0, f"AWS, HyperPod automatic recovery, 40 min per failure: {AWS_HYPERPOD_COSTS}"),
    # Peer-to-peer state recovery, in-process restart: "from 15-30 minutes or more to under 2 minutes".
    "hyperpod-checkpointless": Preset(
        2.0, f"AWS, HyperPod checkpointless training, under 2 min per failure: {AWS_CHECKPOINTLESS}"
    ),
}
# Training stall per checkpoint save, seconds.
STALL_PRESETS = {
    # Saves to CPU memory, replicated to peers, persisted to S3 in the background: "checkpoints being
    # saved within seconds" on 100s to 15,000+ GPUs. 10 s is the upper end of "seconds".
    "tiered": Preset(
        10.0, f"AWS, HyperPod managed tiered checkpointing, saves within seconds: {AWS_TIERED_CHECKPOINTING}"
    ),
}


class PlanError(ValueError):
    """Input that makes no plan; the message names the flag."""


Mode = Literal["auto", "manual"]
MODES: tuple[Mode, ...] = ("auto", "manual")
MODE_WORDS: dict[Mode, str] = {"auto": "automatic", "manual": "manual"}

# Below this goodput (the expected wall time more than 100 times the failure-free time) a row is beyond
# the failure horizon: the exponential model's expected time is then dominated by rare streaks without
# a failure, and its figures (easily 30-digit dollars) plan nothing.
GOODPUT_FLOOR = 0.01

# What a message names for a JobSpec field when the caller says nothing of where its value came from.
FLAGS = {
    "instances": "--instances",
    "instance_mtbf_hours": "--failure-rate, --mtbf-hours or --failure-preset",
    "checkpoint_stall_hours": "--checkpoint-stall",
    "recovery_auto_hours": "--recovery-auto",
    "recovery_manual_hours": "--recovery-manual",
    "checkpoint_interval_hours": "--checkpoint-interval",
    "lost_work_hours": "--lost-work-minutes",
}


def duration_text(hours: float) -> str:
    """``hours`` in the unit a person reads it in: seconds, minutes or hours."""
    if hours < 1 / 60:
        return f"{hours * 3600:.3g} s"
    if hours < 2:
        return f"{hours * 60:.3g} min"
    return f"{hours:,.3g} h" if hours < 1000 else f"{hours:,.0f} h"


@dataclass(frozen=True)
class JobSpec:
    """A training job on a cluster; ``gpu_hours`` None plans ratios only (goodput, saving).

    ``checkpoint_interval_hours``: the fixed schedule the job runs (hours of compute between saves),
    planned beside Daly's optimum; None plans Daly's optimum only. ``checkpointless``: the recoveries
    that resume from the last step (HyperPod checkpointless training) instead of the last checkpoint.
    ``sources``: for a field name, how its value was set, in words that name the flag (``--instances
    1000``, ``the default, ...``); error messages quote it, and fall back to the flag's name.
    """

    instances: int
    gpus_per_instance: int
    instance_mtbf_hours: float
    checkpoint_stall_hours: float
    recovery_auto_hours: float
    recovery_manual_hours: float
    price_per_instance_hour: float
    gpu_hours: float | None = None
    lost_work_hours: float = 0.0  # the linear model's work lost per failure, on top of the recovery
    checkpoint_interval_hours: float | None = None
    checkpointless: frozenset[Mode] = frozenset()
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def validate(self) -> None:
        if self.instances < 1:
            raise PlanError(f"--instances: {self.instances} must be >= 1")
        if self.gpus_per_instance < 1:
            raise PlanError(f"--gpus-per-instance: {self.gpus_per_instance} must be >= 1")
        if not self.instance_mtbf_hours > 0 or math.isinf(self.instance_mtbf_hours):
            raise PlanError("--failure-rate / --mtbf-hours: the failure rate must be > 0 (and the MTBF finite)")
        if not self.checkpoint_stall_hours > 0 or math.isinf(self.checkpoint_stall_hours):
            raise PlanError(f"checkpoint stall ({self.source('checkpoint_stall_hours')}): must be > 0 seconds")
        if self.checkpoint_stall_hours >= self.job_mtbf_hours:
            raise PlanError(
                f"the checkpoint stall of {self.checkpoint_stall_hours * 3600:.3g} s "
                f"({self.source('checkpoint_stall_hours')}) is not below {self.mtbf_text()}: "
                "the job could never save a checkpoint between two failures"
            )
        for mode in MODES:
            hours = self.recovery_hours(mode)
            if not hours >= 0 or math.isinf(hours):
                raise PlanError(f"{self.source(f'recovery_{mode}_hours')}: the recovery must be >= 0 minutes")
        if not self.lost_work_hours >= 0:
            raise PlanError(f"--lost-work-minutes: {self.lost_work_hours * 60:g} must be >= 0")
        if self.checkpoint_interval_hours is not None and not 0 < self.checkpoint_interval_hours < math.inf:
            raise PlanError(f"--checkpoint-interval: {self.checkpoint_interval_hours * 60:g} must be > 0 minutes")
        if self.gpu_hours is not None and not self.gpu_hours > 0:
            raise PlanError("--gpu-hours (or --tokens x --params): the job size must be > 0")
        if self.price_per_instance_hour < 0:
            raise PlanError("--price: must be >= 0")

    def source(self, name: str) -> str:
        """How the field ``name`` was set, in words (the flag's name when nobody said)."""
        return self.sources.get(name, FLAGS.get(name, name))

    def mtbf_text(self) -> str:
        """The job MTBF and what it comes from: ``the job MTBF of 36 s (--mtbf-hours 10 over --instances 1000)``."""
        return (
            f"the job MTBF of {duration_text(self.job_mtbf_hours)} "
            f"({self.source('instance_mtbf_hours')} over {self.source('instances')})"
        )

    def recovery_hours(self, mode: Mode) -> float:
        return self.recovery_auto_hours if mode == "auto" else self.recovery_manual_hours

    @property
    def job_mtbf_hours(self) -> float:
        return self.instance_mtbf_hours / self.instances

    @property
    def ideal_hours(self) -> float | None:
        """Wall hours with no failures and no checkpoints; None without a job size."""
        return None if self.gpu_hours is None else self.gpu_hours / (self.instances * self.gpus_per_instance)

    @property
    def cluster_price_per_hour(self) -> float:
        return self.instances * self.price_per_instance_hour


def daly_wall_hours(solve: float, interval: float, stall: float, restart: float, mtbf: float) -> float:
    """Daly's expected wall time (hours) for ``solve`` hours of compute; inf where it overflows."""
    try:
        return mtbf * math.exp(restart / mtbf) * math.expm1((interval + stall) / mtbf) * solve / interval
    except OverflowError:
        return math.inf


def checkpointless_wall_hours(solve: float, interval: float, stall: float, restart: float, mtbf: float) -> float:
    """The expected wall time (hours) of ``solve`` hours of compute when a recovery resumes from the last
    step (no work lost) and a failure during the recovery starts it again: ``solve (1 + stall/interval)
    e^(restart/mtbf)``, Daly's formula without the lost work. The checkpoint stalls stay: the job keeps
    saving on its schedule (the fallback when a recovery cannot be checkpointless)."""
    try:
        return solve * (interval + stall) / interval * math.exp(restart / mtbf)
    except OverflowError:
        return math.inf


def daly_lost_work_hours(interval: float, stall: float, mtbf: float) -> float:
    """Daly's expected work lost per failure: the mean time into a checkpoint segment at which it fails."""
    segment = interval + stall
    try:
        return mtbf - segment / math.expm1(segment / mtbf)
    except OverflowError:
        return mtbf


def linear_wall_hours(solve: float, instances: int, failures_per_instance_hour: float, downtime: float) -> float:
    """AWS's wall time (hours): ``solve x (1 + instances x failures per instance-hour x downtime per failure)``."""
    return solve * (1.0 + instances * failures_per_instance_hour * downtime)


def gpu_hours_for(tokens: float, params: float, mfu: float, peak_tflops: float) -> float:
    """GPU-hours to train ``params`` parameters on ``tokens`` tokens at ``mfu`` of a GPU's peak (6ND FLOPs)."""
    if not (tokens > 0 and params > 0 and 0 < mfu <= 1 and peak_tflops > 0):
        raise PlanError("--tokens, --params, --peak-tflops must be > 0 and --mfu in (0, 1]")
    return 6.0 * tokens * params / (mfu * peak_tflops * 1e12) / 3600.0


@dataclass(frozen=True)
class Outcome:
    """One model's answer for automatic and manual recovery; wall days and dollars need a job size.

    A recovery beyond the failure horizon (goodput below GOODPUT_FLOOR) has no goodput, wall days or
    cost (None), nor has the saving; ``beyond_horizon`` says why, by recovery."""

    downtime_per_failure_minutes_auto: float
    downtime_per_failure_minutes_manual: float
    cost_per_failure_auto: float
    cost_per_failure_manual: float
    goodput_auto: float | None
    goodput_manual: float | None
    saving_fraction: float | None
    wall_days_auto: float | None = None
    wall_days_manual: float | None = None
    cost_auto: float | None = None
    cost_manual: float | None = None
    beyond_horizon: Mapping[Mode, str] = field(default_factory=dict)

    def as_dict(self, *, sized: bool) -> dict[str, Any]:
        """The figures, flat; without a job size no wall days or dollars; ``beyond_horizon`` when any."""
        figures = asdict(self)
        reasons = figures.pop("beyond_horizon")
        if not sized:
            sized_keys = {f"{figure}_{mode}" for figure in ("wall_days", "cost") for mode in MODES}
            figures = {key: value for key, value in figures.items() if key not in sized_keys}
        if reasons:
            figures["beyond_horizon"] = dict(reasons)
        return figures


def _outcome(
    job: JobSpec,
    slowdown: dict[Mode, float],
    downtime_hours: dict[Mode, float],
    why: Callable[[Mode, float], str],
) -> Outcome:
    """An :class:`Outcome` from a model's wall time per hour of compute and downtime per failure; ``why``
    says, from the recovery and its goodput, why a recovery below the goodput floor is beyond the horizon."""
    figures: dict[str, Any] = {}
    beyond: dict[Mode, str] = {}
    ideal = job.ideal_hours
    for mode in MODES:
        goodput = 1 / slowdown[mode] if math.isfinite(slowdown[mode]) else 0.0
        if goodput < GOODPUT_FLOOR:
            beyond[mode] = why(mode, goodput)
            figures[f"goodput_{mode}"] = None
            continue
        figures[f"goodput_{mode}"] = goodput
        if ideal is not None:
            figures[f"wall_days_{mode}"] = ideal * slowdown[mode] / 24
            figures[f"cost_{mode}"] = ideal * slowdown[mode] * job.cluster_price_per_hour
    return Outcome(
        downtime_per_failure_minutes_auto=downtime_hours["auto"] * 60,
        downtime_per_failure_minutes_manual=downtime_hours["manual"] * 60,
        cost_per_failure_auto=downtime_hours["auto"] * job.cluster_price_per_hour,
        cost_per_failure_manual=downtime_hours["manual"] * job.cluster_price_per_hour,
        saving_fraction=None if beyond else 1 - slowdown["auto"] / slowdown["manual"],
        beyond_horizon=beyond,
        **figures,
    )


def _recovery_text(job: JobSpec, mode: Mode) -> str:
    article = "an" if mode == "auto" else "a"
    minutes = job.recovery_hours(mode) * 60
    return f"{article} {MODE_WORDS[mode]} recovery of {minutes:.3g} min ({job.source(f'recovery_{mode}_hours')})"


def _tries(exponent: float) -> str:
    """``e^exponent`` in words: how many tries one success takes."""
    if exponent < math.log(1e6):
        return f"once in {math.exp(exponent):,.0f} tries"
    return f"once in {math.exp(exponent):.2g} tries" if exponent < 700 else f"once in e^{exponent:.3g} tries"


FLOOR_TEXT = f"{GOODPUT_FLOOR * 100:g} %"


def _floor_text(goodput: float) -> str:
    return f"goodput {goodput:.2g} is below the {FLOOR_TEXT} floor"


def _daly_horizon(job: JobSpec, mode: Mode, goodput: float, interval: float, interval_source: str) -> str:
    """Why Daly's model puts ``mode``'s recovery beyond the failure horizon: the term of
    ``ln(wall / compute)`` that dominates it (the recovery, the work between checkpoints, the stalls)."""
    mtbf, stall, restart = job.job_mtbf_hours, job.checkpoint_stall_hours, job.recovery_hours(mode)
    segment = interval + stall
    ratio = segment / mtbf
    terms = {
        "recovery": restart / mtbf,
        "stall": math.log(segment / interval),
        # ln(M (e^(segment/M) - 1) / segment): the work redone, which grows as e^(segment/M)
        "segment": 0.0
        if mode in job.checkpointless
        else ratio - math.log(ratio)
        if ratio > 700
        else math.log(math.expm1(ratio) / ratio),
    }
    culprit = max(terms, key=lambda term: terms[term])
    if culprit == "recovery":
        return (
            f"{_recovery_text(job, mode)} is {terms['recovery']:.3g} times {job.mtbf_text()}: a recovery ends before "
            f"the next failure {_tries(terms['recovery'])}, so the expected wall time diverges ({_floor_text(goodput)})"
        )
    if culprit == "stall":
        return (
            f"a checkpoint every {interval * 60:.4g} min of training ({interval_source}) with a "
            f"{stall * 3600:.3g} s stall ({job.source('checkpoint_stall_hours')}) spends "
            f"{stall / segment:.1%} of the time saving ({_floor_text(goodput)})"
        )
    return (
        f"a checkpoint every {interval * 60:.4g} min of training ({interval_source}) is "
        f"{ratio:.3g} times {job.mtbf_text()}: the work between two checkpoints completes without a "
        f"failure {_tries(ratio)}, so the expected wall time diverges ({_floor_text(goodput)})"
    )


def daly_outcome(job: JobSpec, interval_hours: float | None = None) -> Outcome:
    """Daly's model at ``interval_hours`` of compute between checkpoints (default: Daly's optimum). A
    failure costs the restart plus the expected work lost since the last checkpoint; a checkpointless
    recovery (``job.checkpointless``) loses no work (:func:`checkpointless_wall_hours`)."""
    mtbf, stall = job.job_mtbf_hours, job.checkpoint_stall_hours
    if interval_hours is None:
        interval, interval_source = daly_interval(stall, mtbf), "Daly's optimum"
    else:
        interval, interval_source = interval_hours, job.source("checkpoint_interval_hours")
    slowdown: dict[Mode, float] = {}
    downtime: dict[Mode, float] = {}
    for mode in MODES:
        restart = job.recovery_hours(mode)
        if mode in job.checkpointless:
            slowdown[mode] = checkpointless_wall_hours(1.0, interval, stall, restart, mtbf)
            downtime[mode] = restart
        else:
            slowdown[mode] = daly_wall_hours(1.0, interval, stall, restart, mtbf)
            downtime[mode] = restart + daly_lost_work_hours(interval, stall, mtbf)
    return _outcome(
        job, slowdown, downtime, lambda mode, goodput: _daly_horizon(job, mode, goodput, interval, interval_source)
    )


def linear_outcome(job: JobSpec) -> Outcome:
    """AWS's linear model; a failure costs the recovery plus the lost work given explicitly."""
    downtimes = {mode: job.recovery_hours(mode) + job.lost_work_hours for mode in MODES}
    rate = 1.0 / job.instance_mtbf_hours

    def why(mode: Mode, goodput: float) -> str:
        lost = ""
        if job.lost_work_hours > 0:
            lost = f" plus {job.lost_work_hours * 60:.3g} min of lost work ({job.source('lost_work_hours')})"
        return (
            f"{_recovery_text(job, mode)}{lost} is {downtimes[mode] / job.job_mtbf_hours:.3g} times "
            f"{job.mtbf_text()}: the job would be down more than {100 - GOODPUT_FLOOR * 100:g} % of the time "
            f"(linear model: {_floor_text(goodput)})"
        )

    slowdown = {mode: linear_wall_hours(1.0, job.instances, rate, d) for mode, d in downtimes.items()}
    return _outcome(job, slowdown, downtimes, why)


@dataclass(frozen=True)
class Plan:
    job_mtbf_hours: float
    young_interval_minutes: float
    daly_interval_minutes: float
    wall_days_ideal: float | None
    cost_ideal: float | None
    daly: Outcome
    linear: Outcome
    checkpoint_interval_minutes: float | None = None  # the job's own schedule, when given
    at_checkpoint_interval: Outcome | None = None  # Daly's model at that schedule

    def outcome(self, model: Model) -> Outcome:
        return self.daly if model == "daly" else self.linear

    def as_dict(self, model: Model) -> dict[str, Any]:
        """The job's figures and the chosen model's, flat; figures that need a job size only with one;
        with a fixed schedule, Daly's model at it under ``daly_at_checkpoint_interval``."""
        sized = self.wall_days_ideal is not None
        figures: dict[str, Any] = {
            "model": model,
            "job_mtbf_hours": self.job_mtbf_hours,
            "young_interval_minutes": self.young_interval_minutes,
            "daly_interval_minutes": self.daly_interval_minutes,
        }
        if sized:
            figures |= {"wall_days_ideal": self.wall_days_ideal, "cost_ideal": self.cost_ideal}
        figures |= self.outcome(model).as_dict(sized=sized)
        if self.at_checkpoint_interval is not None:
            figures["checkpoint_interval_minutes"] = self.checkpoint_interval_minutes
            figures["daly_at_checkpoint_interval"] = self.at_checkpoint_interval.as_dict(sized=sized)
        return figures


def _refuse_automatic(outcome: Outcome, model: str) -> None:
    """A plan whose automatic recovery is beyond the failure horizon plans nothing: refused, with why.
    (Manual recovery beyond it is the comparison's answer: its rows say so.)"""
    if "auto" in outcome.beyond_horizon:
        raise PlanError(f"this job cannot finish ({model}): {outcome.beyond_horizon['auto']}")


def plan(job: JobSpec) -> Plan:
    """Both models for automatic and manual recovery, the checkpoint intervals and, with a fixed
    schedule (``job.checkpoint_interval_hours``), Daly's model at it. Refused (:class:`PlanError`) when
    automatic recovery is beyond the failure horizon."""
    job.validate()
    mtbf, stall, ideal = job.job_mtbf_hours, job.checkpoint_stall_hours, job.ideal_hours
    daly, linear = daly_outcome(job), linear_outcome(job)
    interval = job.checkpoint_interval_hours
    fixed = None if interval is None else daly_outcome(job, interval)
    _refuse_automatic(daly, "Daly's model at Daly's interval")
    if fixed is not None:
        _refuse_automatic(fixed, "Daly's model at --checkpoint-interval")
    _refuse_automatic(linear, "linear model")
    return Plan(
        job_mtbf_hours=mtbf,
        young_interval_minutes=young_interval(stall, mtbf) * 60,
        daly_interval_minutes=daly_interval(stall, mtbf) * 60,
        wall_days_ideal=None if ideal is None else ideal / 24,
        cost_ideal=None if ideal is None else ideal * job.cluster_price_per_hour,
        daly=daly,
        linear=linear,
        checkpoint_interval_minutes=None if interval is None else interval * 60,
        at_checkpoint_interval=fixed,
    )


def simulate_wall_hours(
    solve: float,
    interval: float,
    stall: float,
    restart: float,
    mtbf: float,
    *,
    trials: int,
    seed: int,
    checkpointless: bool = False,
) -> list[float]:
    """Monte-Carlo wall times of the same job: exponential failures, lost work, restarts that can fail.
    ``checkpointless``: a recovery resumes where the failure struck (no work lost), stalls included."""
    rng = random.Random(seed)
    results = []
    for _ in range(trials):
        remaining, clock = solve, 0.0
        if checkpointless:  # the failure-free time, stalls included, plus every recovery
            remaining = solve * (interval + stall) / interval
        while remaining > 1e-12:
            if checkpointless:
                to_failure = rng.expovariate(1.0 / mtbf)
                if to_failure >= remaining:
                    clock += remaining
                    break
                clock += to_failure
                remaining -= to_failure
            else:
                segment = min(interval, remaining)
                to_failure = rng.expovariate(1.0 / mtbf)
                if to_failure >= segment + stall:  # computed and checkpointed
                    clock += segment + stall
                    remaining -= segment
                    continue
                clock += to_failure  # the work since the last checkpoint is lost
            while True:  # a failure during the restart starts it again
                during_restart = rng.expovariate(1.0 / mtbf)
                if during_restart >= restart:
                    clock += restart
                    break
                clock += during_restart
        results.append(clock)
    return results


def simulate(job: JobSpec, *, trials: int = 2000, seed: int = 0, interval_hours: float | None = None) -> dict[str, Any]:
    """The seeded Monte-Carlo of Daly's process (means and standard errors, in days) at ``interval_hours``
    of compute between checkpoints (default: the job's fixed schedule, else Daly's optimum); needs a job
    size. A recovery beyond the failure horizon is not simulated (it would not end): refused when it is
    the automatic one, else named under ``beyond_horizon``."""
    job.validate()
    ideal = job.ideal_hours
    if ideal is None:
        raise PlanError("--gpu-hours or --tokens: simulate needs a job size")
    interval = interval_hours or job.checkpoint_interval_hours
    analytic = daly_outcome(job, interval)
    _refuse_automatic(analytic, "Daly's model")
    interval = interval or daly_interval(job.checkpoint_stall_hours, job.job_mtbf_hours)
    summary: dict[str, Any] = {"trials": trials, "interval_minutes": interval * 60}
    for mode in MODES:
        if mode in analytic.beyond_horizon:
            continue
        walls = simulate_wall_hours(
            ideal,
            interval,
            job.checkpoint_stall_hours,
            job.recovery_hours(mode),
            job.job_mtbf_hours,
            trials=trials,
            seed=seed,
            checkpointless=mode in job.checkpointless,
        )
        mean = statistics.fmean(walls)
        summary[f"wall_days_{mode}"] = mean / 24
        summary[f"wall_days_{mode}_stderr"] = statistics.stdev(walls) / math.sqrt(trials) / 24 if trials > 1 else 0.0
        summary[f"goodput_{mode}"] = ideal / mean
        summary[f"cost_{mode}"] = mean * job.cluster_price_per_hour
    if analytic.beyond_horizon:
        summary["beyond_horizon"] = dict(analytic.beyond_horizon)
    else:
        summary["saving_fraction"] = (summary["cost_manual"] - summary["cost_auto"]) / summary["cost_manual"]
    return summary


def plot(job: JobSpec, path: str) -> None:
    """Wall-clock days vs. cluster size and vs. checkpoint interval, and the saving of automatic and
    checkpointless recovery over manual recovery vs. cluster size, in both models (PNG). Points beyond
    the failure horizon are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    job.validate()
    ideal = job.ideal_hours
    if ideal is None or job.gpu_hours is None:
        raise PlanError("--plot: needs a job size (--gpu-hours or --tokens)")
    gpu_hours = job.gpu_hours
    figure, (by_size, by_interval, saving) = plt.subplots(1, 3, figsize=(18, 4.8))
    sizes = sorted({max(1, round(job.instances * f)) for f in (0.125, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4)})
    scaled = {n: replace(job, instances=n) for n in sizes if job.checkpoint_stall_hours < job.instance_mtbf_hours / n}
    labels: dict[Mode, str] = {"auto": "automatic", "manual": "manual"}

    def days(spec: JobSpec, mode: Mode, interval: float | None = None) -> float:
        outcome = daly_outcome(spec, interval)
        wall = getattr(outcome, f"wall_days_{mode}")
        return float("nan") if wall is None else float(wall)

    for mode, label in labels.items():
        by_size.plot(
            sizes,
            [days(scaled[n], mode) if n in scaled else float("nan") for n in sizes],
            marker="o",
            label=f"{label} recovery ({job.recovery_hours(mode) * 60:g} min)",
        )
    by_size.plot(sizes, [gpu_hours / (n * job.gpus_per_instance) / 24 for n in sizes], "k--", label="no failures")
    by_size.axvline(job.instances, color="grey", linestyle=":")
    by_size.set(
        xscale="log",
        yscale="log",
        xlabel="instances",
        ylabel="expected wall-clock days (Daly)",
        title="Wall-clock time vs. cluster size",
    )
    by_size.legend()

    mtbf, stall = job.job_mtbf_hours, job.checkpoint_stall_hours
    best = daly_interval(stall, mtbf)
    intervals = [best * f for f in (0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 1, 1.4, 2, 3, 5, 7, 10)]
    for mode, label in labels.items():
        by_interval.plot(
            [i * 60 for i in intervals], [days(job, mode, i) for i in intervals], label=f"{label} recovery"
        )
    by_interval.plot([best * 60], [days(job, "auto")], "r*", markersize=14, label=f"Daly optimum {best * 60:.1f} min")
    if job.checkpoint_interval_hours is not None:
        yours = job.checkpoint_interval_hours
        by_interval.plot(
            [yours * 60], [days(job, "auto", yours)], "kD", markersize=9, label=f"your schedule {yours * 60:.1f} min"
        )
    by_interval.set(
        xscale="log",
        xlabel="checkpoint interval (minutes of compute)",
        ylabel="expected wall-clock days (Daly)",
        title=f"Wall-clock time vs. checkpoint interval ({job.instances} instances)",
    )
    by_interval.legend()

    checkpointless = RECOVERY_PRESETS["hyperpod-checkpointless"].value / 60
    faster: dict[str, tuple[float, frozenset[Mode]]] = {
        f"automatic ({job.recovery_auto_hours * 60:g} min)": (job.recovery_auto_hours, job.checkpointless),
        f"checkpointless ({checkpointless * 60:g} min)": (checkpointless, job.checkpointless | {"auto"}),
    }
    for (label, (restart, resumes)), color in zip(faster.items(), ("tab:blue", "tab:green"), strict=True):
        for model, outcome_of, style in (("linear", linear_outcome, "-"), ("Daly", daly_outcome, "--")):
            points = [
                (n, outcome_of(replace(spec, recovery_auto_hours=restart, checkpointless=resumes)).saving_fraction)
                for n, spec in scaled.items()
            ]
            shown = [(n, fraction * 100) for n, fraction in points if fraction is not None]
            if shown:
                saving.plot(*zip(*shown, strict=True), style, color=color, marker="o", label=f"{label}, {model}")
    saving.axvline(job.instances, color="grey", linestyle=":")
    saving.set(
        xscale="log",
        xlabel="instances",
        ylabel="% of wall time saved",
        title=f"Saving over manual recovery ({job.recovery_manual_hours * 60:g} min) vs. cluster size",
    )
    saving.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
