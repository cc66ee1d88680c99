"""What failures cost a training job: checkpoint intervals, goodput, wall time and dollars, in two models.

- **Daly's model** (2006), exponential failures: a job that needs ``T_s`` hours of compute, saves a
  checkpoint (stall ``delta``) after every ``tau`` hours of compute and, on each failure, loses the
  work since the last checkpoint plus a restart ``R``, expects
  ``T_w = M e^(R/M) (e^((tau+delta)/M) - 1) T_s / tau`` hours of wall time, M being the job's MTBF
  (the instance MTBF divided by the number of instances).
- **AWS's linear model** ("Reduce ML training costs with Amazon SageMaker HyperPod", 2025,
  https://aws.amazon.com/blogs/machine-learning/reduce-ml-training-costs-with-amazon-sagemaker-hyperpod/):
  ``T_w = T_s (1 + instances x failures per instance-hour x downtime per failure)``. It counts the
  downtime only: no checkpoint stalls, no work lost since the last checkpoint (unless given as
  part of the downtime), no failure during a recovery.

Both are linear in ``T_s``, so goodput and the saving fraction need no job size. :func:`simulate`
runs Daly's process as a seeded Monte-Carlo to cross-check the models. Standard library only (the
plot needs matplotlib).
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass, replace
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


@dataclass(frozen=True)
class JobSpec:
    """A training job on a cluster; ``gpu_hours`` None plans ratios only (goodput, saving)."""

    instances: int
    gpus_per_instance: int
    instance_mtbf_hours: float
    checkpoint_stall_hours: float
    recovery_auto_hours: float
    recovery_manual_hours: float
    price_per_instance_hour: float
    gpu_hours: float | None = None
    lost_work_hours: float = 0.0  # the linear model's work lost per failure, on top of the recovery

    def validate(self) -> None:
        if self.instances < 1:
            raise PlanError(f"--instances: {self.instances} must be >= 1")
        if self.gpus_per_instance < 1:
            raise PlanError(f"--gpus-per-instance: {self.gpus_per_instance} must be >= 1")
        if not self.instance_mtbf_hours > 0 or math.isinf(self.instance_mtbf_hours):
            raise PlanError("--failure-rate / --mtbf-hours: the failure rate must be > 0 (and the MTBF finite)")
        if not self.checkpoint_stall_hours > 0:
            raise PlanError("--checkpoint-stall: must be > 0 seconds")
        if self.checkpoint_stall_hours >= self.job_mtbf_hours:
            raise PlanError(
                f"--checkpoint-stall: {self.checkpoint_stall_hours * 3600:g} s is not below the job MTBF "
                f"({self.job_mtbf_hours * 3600:.0f} s = instance MTBF / instances): the job could never finish"
            )
        if self.recovery_auto_hours < 0 or self.recovery_manual_hours < 0:
            raise PlanError("--recovery-auto / --recovery-manual: must be >= 0 minutes")
        if self.lost_work_hours < 0:
            raise PlanError(f"--lost-work-minutes: {self.lost_work_hours * 60:g} must be >= 0")
        if self.gpu_hours is not None and not self.gpu_hours > 0:
            raise PlanError("--gpu-hours (or --tokens x --params): the job size must be > 0")
        if self.price_per_instance_hour < 0:
            raise PlanError("--price: must be >= 0")

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
    """Daly's expected wall time (hours) for ``solve`` hours of compute."""
    return mtbf * math.exp(restart / mtbf) * math.expm1((interval + stall) / mtbf) * solve / interval


def daly_lost_work_hours(interval: float, stall: float, mtbf: float) -> float:
    """Daly's expected work lost per failure: the mean time into a checkpoint segment at which it fails."""
    segment = interval + stall
    return mtbf - segment / math.expm1(segment / mtbf)


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
    """One model's answer for automatic and manual recovery; wall days and dollars need a job size."""

    downtime_per_failure_minutes_auto: float
    downtime_per_failure_minutes_manual: float
    cost_per_failure_auto: float
    cost_per_failure_manual: float
    goodput_auto: float
    goodput_manual: float
    saving_fraction: float
    wall_days_auto: float | None = None
    wall_days_manual: float | None = None
    cost_auto: float | None = None
    cost_manual: float | None = None


def _outcome(job: JobSpec, slowdown: dict[str, float], downtime_hours: dict[str, float]) -> Outcome:
    """An :class:`Outcome` from a model's wall time per hour of compute and downtime per failure."""
    sized: dict[str, float] = {}
    ideal = job.ideal_hours
    if ideal is not None:
        for mode in ("auto", "manual"):
            sized[f"wall_days_{mode}"] = ideal * slowdown[mode] / 24
            sized[f"cost_{mode}"] = ideal * slowdown[mode] * job.cluster_price_per_hour
    return Outcome(
        downtime_per_failure_minutes_auto=downtime_hours["auto"] * 60,
        downtime_per_failure_minutes_manual=downtime_hours["manual"] * 60,
        cost_per_failure_auto=downtime_hours["auto"] * job.cluster_price_per_hour,
        cost_per_failure_manual=downtime_hours["manual"] * job.cluster_price_per_hour,
        goodput_auto=1 / slowdown["auto"],
        goodput_manual=1 / slowdown["manual"],
        saving_fraction=1 - slowdown["auto"] / slowdown["manual"],
        **sized,
    )


def _recoveries(job: JobSpec) -> dict[str, float]:
    return {"auto": job.recovery_auto_hours, "manual": job.recovery_manual_hours}


def daly_outcome(job: JobSpec) -> Outcome:
    """Daly's model at Daly's interval; a failure costs the restart plus the expected lost work."""
    mtbf, stall = job.job_mtbf_hours, job.checkpoint_stall_hours
    interval = daly_interval(stall, mtbf)
    recoveries = _recoveries(job)
    return _outcome(
        job,
        {mode: daly_wall_hours(1.0, interval, stall, restart, mtbf) for mode, restart in recoveries.items()},
        {mode: restart + daly_lost_work_hours(interval, stall, mtbf) for mode, restart in recoveries.items()},
    )


def linear_outcome(job: JobSpec) -> Outcome:
    """AWS's linear model; a failure costs the recovery plus the lost work given explicitly."""
    downtimes = {mode: restart + job.lost_work_hours for mode, restart in _recoveries(job).items()}
    rate = 1.0 / job.instance_mtbf_hours
    return _outcome(
        job, {mode: linear_wall_hours(1.0, job.instances, rate, d) for mode, d in downtimes.items()}, downtimes
    )


@dataclass(frozen=True)
class Plan:
    job_mtbf_hours: float
    young_interval_minutes: float
    daly_interval_minutes: float
    wall_days_ideal: float | None
    cost_ideal: float | None
    daly: Outcome
    linear: Outcome

    def outcome(self, model: Model) -> Outcome:
        return self.daly if model == "daly" else self.linear

    def as_dict(self, model: Model) -> dict[str, Any]:
        """The job's figures and the chosen model's, flat; figures that need a job size only with one."""
        common = {
            "model": model,
            "job_mtbf_hours": self.job_mtbf_hours,
            "young_interval_minutes": self.young_interval_minutes,
            "daly_interval_minutes": self.daly_interval_minutes,
            "wall_days_ideal": self.wall_days_ideal,
            "cost_ideal": self.cost_ideal,
            **asdict(self.outcome(model)),
        }
        return {key: value for key, value in common.items() if value is not None}


def plan(job: JobSpec) -> Plan:
    """Both models for automatic and manual recovery, and the checkpoint intervals."""
    job.validate()
    mtbf, stall, ideal = job.job_mtbf_hours, job.checkpoint_stall_hours, job.ideal_hours
    return Plan(
        job_mtbf_hours=mtbf,
        young_interval_minutes=young_interval(stall, mtbf) * 60,
        daly_interval_minutes=daly_interval(stall, mtbf) * 60,
        wall_days_ideal=None if ideal is None else ideal / 24,
        cost_ideal=None if ideal is None else ideal * job.cluster_price_per_hour,
        daly=daly_outcome(job),
        linear=linear_outcome(job),
    )


def simulate_wall_hours(
    solve: float, interval: float, stall: float, restart: float, mtbf: float, *, trials: int, seed: int
) -> list[float]:
    """Monte-Carlo wall times of the same job: exponential failures, lost work, restarts that can fail."""
    rng = random.Random(seed)
    results = []
    for _ in range(trials):
        remaining, clock = solve, 0.0
        while remaining > 1e-12:
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


def simulate(
    job: JobSpec, *, trials: int = 2000, seed: int = 0, interval_hours: float | None = None
) -> dict[str, float]:
    """The seeded Monte-Carlo of Daly's process (means and standard errors, in days); needs a job size."""
    job.validate()
    ideal = job.ideal_hours
    if ideal is None:
        raise PlanError("--gpu-hours or --tokens: simulate needs a job size")
    interval = interval_hours or daly_interval(job.checkpoint_stall_hours, job.job_mtbf_hours)
    summary: dict[str, float] = {"trials": trials, "interval_minutes": interval * 60}
    for mode, restart in _recoveries(job).items():
        walls = simulate_wall_hours(
            ideal, interval, job.checkpoint_stall_hours, restart, job.job_mtbf_hours, trials=trials, seed=seed
        )
        mean = statistics.fmean(walls)
        summary[f"wall_days_{mode}"] = mean / 24
        summary[f"wall_days_{mode}_stderr"] = statistics.stdev(walls) / math.sqrt(trials) / 24 if trials > 1 else 0.0
        summary[f"goodput_{mode}"] = ideal / mean
        summary[f"cost_{mode}"] = mean * job.cluster_price_per_hour
    summary["saving_fraction"] = (summary["cost_manual"] - summary["cost_auto"]) / summary["cost_manual"]
    return summary


def plot(job: JobSpec, path: str) -> None:
    """Wall-clock days vs. cluster size and vs. checkpoint interval, and the saving of automatic and
    checkpointless recovery over manual recovery vs. cluster size, in both models (PNG)."""
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
    recoveries = {"automatic": job.recovery_auto_hours, "manual": job.recovery_manual_hours}
    for label, restart in recoveries.items():
        days = []
        for n in sizes:
            if n not in scaled:
                days.append(float("nan"))
                continue
            mtbf, stall = scaled[n].job_mtbf_hours, job.checkpoint_stall_hours
            solve = gpu_hours / (n * job.gpus_per_instance)
            days.append(daly_wall_hours(solve, daly_interval(stall, mtbf), stall, restart, mtbf) / 24)
        by_size.plot(sizes, days, marker="o", label=f"{label} recovery ({restart * 60:g} min)")
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
    for label, restart in recoveries.items():
        by_interval.plot(
            [i * 60 for i in intervals],
            [daly_wall_hours(ideal, i, stall, restart, mtbf) / 24 for i in intervals],
            label=f"{label} recovery",
        )
    optimum = daly_wall_hours(ideal, best, stall, job.recovery_auto_hours, mtbf) / 24
    by_interval.plot([best * 60], [optimum], "r*", markersize=14, label=f"Daly optimum {best * 60:.1f} min")
    by_interval.set(
        xscale="log",
        xlabel="checkpoint interval (minutes of compute)",
        ylabel="expected wall-clock days (Daly)",
        title=f"Wall-clock time vs. checkpoint interval ({job.instances} instances)",
    )
    by_interval.legend()

    checkpointless = RECOVERY_PRESETS["hyperpod-checkpointless"].value
    faster = {
        f"automatic ({job.recovery_auto_hours * 60:g} min)": job.recovery_auto_hours,
        f"checkpointless ({checkpointless:g} min)": checkpointless / 60,
    }
    for (label, restart), color in zip(faster.items(), ("tab:blue", "tab:green"), strict=True):
        for model, outcome_of, style in (("linear", linear_outcome, "-"), ("Daly", daly_outcome, "--")):
            points = [
                (n, outcome_of(replace(spec, recovery_auto_hours=restart)).saving_fraction * 100)
                for n, spec in scaled.items()
            ]
            saving.plot(*zip(*points, strict=True), style, color=color, marker="o", label=f"{label}, {model}")
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
