"""What failures cost a training job: checkpoint intervals, goodput, wall time and dollars.

The analytic model is Daly's (2006) for exponentially distributed failures: a job that needs
``T_s`` hours of compute, saves a checkpoint (stall ``delta``) after every ``tau`` hours of compute
and loses the work since the last checkpoint plus a restart ``R`` on every failure, expects
``T_w = M e^(R/M) (e^((tau+delta)/M) - 1) T_s / tau`` hours of wall time, M being the job's MTBF
(the instance MTBF divided by the number of instances). :func:`simulate` runs the same job as a
seeded Monte-Carlo to cross-check it. Standard library only (the plot needs matplotlib).
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass

from llm_infra.workloads.checkpoint_interval import daly_interval, young_interval

# Published failure rates, % per instance-hour.
FAILURE_PRESETS = {
    "opt-175b": 0.0588,  # Meta OPT-175B logbook (Zhang et al. 2022)
    "llama3-16k-h100": 0.0161,  # Llama 3.1 on 16k H100 (Meta 2024: 419 interruptions in 54 days)
    "mpt-7b": 0.0319,  # MosaicML MPT-7B training report
}
# On-Demand $ per instance-hour, us-east-1, Linux, after AWS's June 2025 P4/P5 price reduction.
# Prices change and differ by region, reservation and savings plan: pass --price for yours.
PRICE_PRESETS = {"p5.48xlarge": 55.04, "p4d.24xlarge": 21.96}


class PlanError(ValueError):
    """Input that makes no plan; the message names the flag."""


@dataclass(frozen=True)
class JobSpec:
    instances: int
    gpus_per_instance: int
    instance_mtbf_hours: float
    checkpoint_stall_hours: float
    recovery_auto_hours: float
    recovery_manual_hours: float
    gpu_hours: float
    price_per_instance_hour: float

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
        if not self.gpu_hours > 0:
            raise PlanError("--gpu-hours (or --tokens x --params): the job size must be > 0")
        if self.price_per_instance_hour < 0:
            raise PlanError("--price: must be >= 0")

    @property
    def job_mtbf_hours(self) -> float:
        return self.instance_mtbf_hours / self.instances

    @property
    def ideal_hours(self) -> float:
        """Wall hours with no failures and no checkpoints."""
        return self.gpu_hours / (self.instances * self.gpus_per_instance)


def expected_wall_hours(solve: float, interval: float, stall: float, restart: float, mtbf: float) -> float:
    """Daly's expected wall time (hours) for ``solve`` hours of compute."""
    return mtbf * math.exp(restart / mtbf) * math.expm1((interval + stall) / mtbf) * solve / interval


def gpu_hours_for(tokens: float, params: float, mfu: float, peak_tflops: float) -> float:
    """GPU-hours to train ``params`` parameters on ``tokens`` tokens at ``mfu`` of a GPU's peak (6ND FLOPs)."""
    if not (tokens > 0 and params > 0 and 0 < mfu <= 1 and peak_tflops > 0):
        raise PlanError("--tokens, --params, --peak-tflops must be > 0 and --mfu in (0, 1]")
    return 6.0 * tokens * params / (mfu * peak_tflops * 1e12) / 3600.0


@dataclass(frozen=True)
class Plan:
    job_mtbf_hours: float
    young_interval_minutes: float
    daly_interval_minutes: float
    goodput_auto: float
    goodput_manual: float
    wall_days_ideal: float
    wall_days_auto: float
    wall_days_manual: float
    cost_ideal: float
    cost_auto: float
    cost_manual: float
    saving_fraction: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def plan(job: JobSpec) -> Plan:
    """The analytic plan: Daly's interval, then expected wall time with automatic and manual recovery."""
    job.validate()
    mtbf, stall, solve = job.job_mtbf_hours, job.checkpoint_stall_hours, job.ideal_hours
    interval = daly_interval(stall, mtbf)
    wall_auto = expected_wall_hours(solve, interval, stall, job.recovery_auto_hours, mtbf)
    wall_manual = expected_wall_hours(solve, interval, stall, job.recovery_manual_hours, mtbf)
    rate = job.instances * job.price_per_instance_hour
    return Plan(
        job_mtbf_hours=mtbf,
        young_interval_minutes=young_interval(stall, mtbf) * 60,
        daly_interval_minutes=interval * 60,
        goodput_auto=solve / wall_auto,
        goodput_manual=solve / wall_manual,
        wall_days_ideal=solve / 24,
        wall_days_auto=wall_auto / 24,
        wall_days_manual=wall_manual / 24,
        cost_ideal=solve * rate,
        cost_auto=wall_auto * rate,
        cost_manual=wall_manual * rate,
        saving_fraction=(wall_manual - wall_auto) / wall_manual,
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
    """The seeded Monte-Carlo counterpart of :func:`plan` (means and standard errors, in days)."""
    job.validate()
    interval = interval_hours or daly_interval(job.checkpoint_stall_hours, job.job_mtbf_hours)
    summary: dict[str, float] = {"trials": trials, "interval_minutes": interval * 60}
    for mode, restart in (("auto", job.recovery_auto_hours), ("manual", job.recovery_manual_hours)):
        walls = simulate_wall_hours(
            job.ideal_hours, interval, job.checkpoint_stall_hours, restart, job.job_mtbf_hours, trials=trials, seed=seed
        )
        mean = statistics.fmean(walls)
        summary[f"wall_days_{mode}"] = mean / 24
        summary[f"wall_days_{mode}_stderr"] = statistics.stdev(walls) / math.sqrt(trials) / 24 if trials > 1 else 0.0
        summary[f"goodput_{mode}"] = job.ideal_hours / mean
        summary[f"cost_{mode}"] = mean * job.instances * job.price_per_instance_hour
    summary["saving_fraction"] = (summary["cost_manual"] - summary["cost_auto"]) / summary["cost_manual"]
    return summary


def plot(job: JobSpec, path: str) -> None:
    """Wall-clock days vs. cluster size and vs. checkpoint interval, optimum marked (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    job.validate()
    figure, (by_size, by_interval) = plt.subplots(1, 2, figsize=(12, 4.5))
    sizes = sorted({max(1, round(job.instances * f)) for f in (0.125, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4)})
    for label, restart in (
        ("automatic recovery", job.recovery_auto_hours),
        ("manual recovery", job.recovery_manual_hours),
    ):
        days = []
        for n in sizes:
            scaled = JobSpec(**{**asdict(job), "instances": n})
            mtbf, stall = scaled.job_mtbf_hours, scaled.checkpoint_stall_hours
            if stall >= mtbf:
                days.append(float("nan"))
                continue
            days.append(expected_wall_hours(scaled.ideal_hours, daly_interval(stall, mtbf), stall, restart, mtbf) / 24)
        by_size.plot(sizes, days, marker="o", label=label)
    by_size.plot(sizes, [job.gpu_hours / (n * job.gpus_per_instance) / 24 for n in sizes], "k--", label="no failures")
    by_size.axvline(job.instances, color="grey", linestyle=":")
    by_size.set(
        xscale="log",
        yscale="log",
        xlabel="instances",
        ylabel="expected wall-clock days",
        title="Wall-clock time vs. cluster size",
    )
    by_size.legend()

    mtbf, stall = job.job_mtbf_hours, job.checkpoint_stall_hours
    best = daly_interval(stall, mtbf)
    intervals = [best * f for f in (0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 1, 1.4, 2, 3, 5, 7, 10)]
    for label, restart in (
        ("automatic recovery", job.recovery_auto_hours),
        ("manual recovery", job.recovery_manual_hours),
    ):
        by_interval.plot(
            [i * 60 for i in intervals],
            [expected_wall_hours(job.ideal_hours, i, stall, restart, mtbf) / 24 for i in intervals],
            label=label,
        )
    optimum = expected_wall_hours(job.ideal_hours, best, stall, job.recovery_auto_hours, mtbf) / 24
    by_interval.plot([best * 60], [optimum], "r*", markersize=14, label=f"Daly optimum {best * 60:.1f} min")
    by_interval.set(
        xscale="log",
        xlabel="checkpoint interval (minutes of compute)",
        ylabel="expected wall-clock days",
        title=f"Wall-clock time vs. checkpoint interval ({job.instances} instances)",
    )
    by_interval.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
