"""What failures cost a training job: checkpoint intervals, goodput, wall time and dollars, in two models.

- **Daly's model** (2006), exponential failures: a job that needs ``T_s`` hours of compute, saves a
  checkpoint (stall ``delta``) after every ``tau`` hours of compute and, on each failure, loses the
  work since the last checkpoint plus a restart ``R``, expects
  ``T_w = M e^(R/M) (e^((tau+delta)/M) - 1) T_s / tau`` hours of wall time, M being the job's MTBF
  (the instance MTBF divided by the number of instances). ``tau`` is the optimum (Daly's estimate of
  it), or the job's own fixed schedule (``JobSpec.checkpoint_interval_hours``, planned beside it).
  A *checkpointless* recovery (HyperPod checkpointless training: peers restore the state of the last
  step) resumes a fraction ``p`` of the failures at the last step after its recovery ``R_c``
  (``JobSpec.checkpointless_success``); the rest fall back to the last checkpoint after ``R_f``
  (``JobSpec.checkpointless_fallback_hours``) and lose the work since. Then
  ``T_w = T_s (1 + delta/tau) phi((1-p)(tau+delta)/M) (p e^(R_c/M) + (1-p) e^(R_f/M))`` with
  ``phi(x) = (e^x - 1)/x`` (:func:`mixed_wall_hours`, derived there): p = 0 is Daly's formula, p = 1
  loses no work. Only ``phi`` depends on ``tau``, and it is Daly's problem at the MTBF of the failures
  that fall back, ``M/(1-p)``: the optimum interval is Daly's at that MTBF, and with p = 1 there is
  none (no checkpoint pays for its stall; the model counts failures only). The checkpoint stalls are
  charged whenever the job checkpoints.
- **AWS's linear model** ("Reduce ML training costs with Amazon SageMaker HyperPod", 2025,
  https://aws.amazon.com/blogs/machine-learning/reduce-ml-training-costs-with-amazon-sagemaker-hyperpod/):
  ``T_w = T_s (1 + instances x failures per instance-hour x downtime per failure)``. It counts the
  downtime only: no checkpoint stalls, no work lost since the last checkpoint (unless given as
  part of the downtime), no failure during a recovery.

Both are linear in ``T_s``, so goodput and the saving fraction need no job size. A recovery whose
goodput is below ``GOODPUT_FLOOR`` (1 %: the expected wall time over 100 times the failure-free time)
is *beyond the failure horizon*: its expected time to finish diverges (``e^(R/M)`` or
``e^((1-p)(tau+delta)/M)`` tries per success), and it gets no figures but the reason. ``forecast``
refuses a job whose automatic recovery is beyond it; manual recovery beyond it is the comparison's
answer. ``simulate`` runs Daly's process as a seeded Monte-Carlo to cross-check the models. Standard
library only (the plot needs matplotlib).

The planner names its inputs by its own names (``INPUTS``): the fields of :class:`JobSpec`, and
``tokens``, ``params``, ``mfu``, ``peak_tflops`` (:func:`gpu_hours_for`), ``trials`` (:func:`simulate`),
``plot`` (:func:`plot`'s file) and ``run`` (a run's file: :mod:`llm_infra.planner.measured_run`). A
:class:`PlanError` names them so that its caller can say them in its own words (a command, by its
options); how each value was set is the caller's to say too (``JobSpec.sources``).
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from llm_infra.workloads.checkpoint_interval import daly_interval, young_interval

Model = Literal["daly", "linear"]
MODELS: tuple[Model, ...] = ("daly", "linear")

# On-Demand $ per instance-hour, us-east-1, Linux, after AWS's June 2025 P4/P5 price reduction.
# Prices change and differ by region, reservation and savings plan: plan with yours.
# p6-b200.48xlarge: $113.9328, us-east-1 Linux On-Demand as AWS's EC2 price list has carried it since the type's
# launch (May 2025); read here on 2026-12-04 in copies of that list (DoiT's and Vantage's instance pages), not on
# AWS's own pricing page, and not found for us-west-2: check yours in AWS's Price List API (service code
# AmazonEC2, instanceType p6-b200.48xlarge).
PRICE_PRESETS = {"p5.48xlarge": 55.04, "p4d.24xlarge": 21.96, "p6-b200.48xlarge": 113.9328}


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

# A GPU's dense (no 2:4 sparsity) bf16 tensor peak, TFLOP/s: NVIDIA publishes the sparse figure, twice the dense.
PEAK_TFLOPS_PRESETS = {
    "h100": Preset(989.0, "NVIDIA H100 SXM data sheet: 1,979 TFLOPS bf16 with sparsity (H200 SXM the same)"),
    "b200": Preset(
        2250.0,
        "NVIDIA HGX B200 specification (nvidia.com/en-us/data-center/hgx): 36 PFLOPS FP16/BF16 with sparsity "
        "for 8 GPUs, 4.5 per GPU",
    ),
}


LLAMA3_REPORT = "Meta, The Llama 3 Herd of Models, arXiv 2407.21783, section 3.3.4, Table 5"
# Llama 3 405B's 54 days on 16k H100s: its 419 unexpected interruptions by root cause, those of one GPU
# or one host (Table 5's GPU and Host categories, silent data corruption left out: the state itself is
# wrong). Such a fault leaves the other nodes, and so the peers' replicas of the state, intact.
LLAMA3_UNEXPECTED_INTERRUPTIONS = 419
LLAMA3_SINGLE_NODE_FAULTS = {
    "Faulty GPU": 148,
    "GPU HBM3 Memory": 72,
    "GPU SRAM Memory": 19,
    "GPU System Processor": 17,
    "GPU Thermal Interface + Sensor": 6,
    "NIC": 7,
    "SSD": 3,
    "Power Supply": 3,
    "Server Chassis": 2,
    "IO Expansion Board": 2,
    "CPU": 2,
    "System Memory": 2,
}
# The share of failures a checkpointless recovery resumes at the last step. Nobody publishes one: AWS's
# posts give recovery times, and the checkpointless package falls back to the checkpoint when a failure
# left no replica of the state, the ranks disagree on the step, or a checksum differs
# (hyperpod_checkpointless_training.nemo_plugins.checkpoint_manager). Assumed: it resumes the faults of
# one GPU or one host, 283 of Llama 3's 419 (0.675), and none of the others (software bugs, network
# switches and cables, host maintenance, NCCL timeouts, silent data corruption, dependencies).
CHECKPOINTLESS_SUCCESS = Preset(
    sum(LLAMA3_SINGLE_NODE_FAULTS.values()) / LLAMA3_UNEXPECTED_INTERRUPTIONS,
    f"assumed, not measured: the faults of one GPU or one host, {sum(LLAMA3_SINGLE_NODE_FAULTS.values())} of "
    f"Llama 3's {LLAMA3_UNEXPECTED_INTERRUPTIONS} unexpected interruptions ({LLAMA3_REPORT})",
)
# A failure checkpointless recovery does not resume restarts the job from its last checkpoint: HyperPod's
# automatic recovery.
CHECKPOINTLESS_FALLBACK = "hyperpod-auto"


@dataclass(frozen=True)
class InputName:
    """An input a :class:`PlanError` names in its message, by the planner's name for it (one of ``INPUTS``);
    the caller may say it in its own words (:meth:`PlanError.text`)."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in INPUTS:
            raise ValueError(f"{self.name!r} is not an input of the planner: {sorted(INPUTS)}")


class PlanError(ValueError):
    """Input that makes no plan, in the planner's words.

    ``field``: the input it is about (an :class:`InputName`'s name), or None when it is about the job as a
    whole (one that cannot finish); ``value``: that input's value where the message shows it beside the
    name (a file's path). ``message``: text and the inputs it names, as :class:`InputName` parts, and
    where it says how an input was set, the caller's words for it (``JobSpec.sources``). ``str()`` says
    each input by the planner's name, :meth:`text` by the caller's."""

    def __init__(self, *message: str | InputName, field: str | None = None, value: object = None) -> None:
        self.message = message
        self.field = field
        self.value = value
        super().__init__(self.text())

    @classmethod
    def about(cls, field: str, *reason: str | InputName, value: object = None) -> PlanError:
        """What is wrong with one input: ``field: reason``, or ``field value: reason`` with ``value``."""
        shown = "" if value is None else f" {value}"
        return cls(InputName(field), f"{shown}: ", *reason, field=field, value=value)

    def text(self, names: Mapping[str, str] | None = None) -> str:
        """The message, each input said as ``names`` says it (a command: its options), else by its name."""
        said = names or {}
        return "".join(part if isinstance(part, str) else said.get(part.name, part.name) for part in self.message)


Mode = Literal["auto", "manual"]
MODES: tuple[Mode, ...] = ("auto", "manual")
MODE_WORDS: dict[Mode, str] = {"auto": "automatic", "manual": "manual"}

# Below this goodput (the expected wall time more than 100 times the failure-free time) a row is beyond
# the failure horizon: the exponential model's expected time is then dominated by rare streaks without
# a failure, and its figures (easily 30-digit dollars) plan nothing.
GOODPUT_FLOOR = 0.01


def duration_text(hours: float) -> str:
    """``hours`` in the unit a person reads it in: seconds, minutes or hours."""
    if hours < 1 / 60:
        return f"{hours * 3600:.3g} s"
    if hours < 2:
        return f"{hours * 60:.3g} min"
    return f"{hours:,.3g} h" if hours < 1000 else f"{hours:,.0f} h"


@dataclass(frozen=True)
class Recovery:
    """How one recovery handles a failure: ``resumed`` of them (a fraction) resume at the last step after
    ``resume`` hours (checkpointless), the rest restart from the last checkpoint after ``restart`` hours."""

    restart: float
    resumed: float = 0.0
    resume: float = 0.0


def optimal_interval(stall: float, mtbf: float, resumed: float = 0.0) -> float | None:
    """The checkpoint interval minimising :func:`mixed_wall_hours`: only its factor
    ``(1 + stall/tau) phi((1 - resumed)(tau + stall)/mtbf)`` depends on ``tau``, which is Daly's problem
    at the MTBF ``mtbf/(1 - resumed)`` of the failures that restart from the checkpoint; Daly's
    higher-order estimate solves it (within 1.4e-4 of the exact optimum's wall time for any stall below
    that MTBF, within 1e-6 below a tenth of it). None when every failure resumes (``resumed`` 1): then
    the wall time falls as ``tau`` grows, and no checkpoint pays for its stall."""
    if resumed >= 1:
        return None
    return daly_interval(stall, mtbf / (1.0 - resumed))


@dataclass(frozen=True)
class JobSpec:
    """A training job on a cluster; ``gpu_hours`` None plans ratios only (goodput, saving).

    ``checkpoint_interval_hours``: the fixed schedule the job runs (hours of compute between saves),
    planned beside the optimum; None plans the optimum only. ``checkpointless``: the recoveries that
    resume from the last step (HyperPod checkpointless training): ``checkpointless_success`` of the
    failures, the rest restarting from the last checkpoint after ``checkpointless_fallback_hours``.
    ``sources``: for a field name, how its value was set, in the caller's words (a command's: the option
    as given, or the default it used); the messages quote it, and without one the field and its value
    (``instances 1000``).
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
    checkpointless_success: float = CHECKPOINTLESS_SUCCESS.value
    checkpointless_fallback_hours: float = RECOVERY_PRESETS[CHECKPOINTLESS_FALLBACK].value / 60
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def validate(self) -> None:
        """:class:`PlanError` for the first input that makes no plan, naming it."""
        if self.instances < 1:
            raise PlanError.about("instances", f"{self.instances} must be >= 1")
        if self.gpus_per_instance < 1:
            raise PlanError.about("gpus_per_instance", f"{self.gpus_per_instance} must be >= 1")
        if not self.instance_mtbf_hours > 0 or math.isinf(self.instance_mtbf_hours):
            raise PlanError.about("instance_mtbf_hours", "the failure rate must be > 0 (and the MTBF finite)")
        if not self.checkpoint_stall_hours > 0 or math.isinf(self.checkpoint_stall_hours):
            raise PlanError.about(
                "checkpoint_stall_hours", f"{self.checkpoint_stall_hours * 3600:g} s must be > 0 and finite"
            )
        if self.checkpoint_stall_hours >= self.job_mtbf_hours:
            raise PlanError(
                f"the checkpoint stall of {self.checkpoint_stall_hours * 3600:.3g} s "
                f"({self.source('checkpoint_stall_hours')}) is not below {self.mtbf_text()}: "
                "the job could never save a checkpoint between two failures",
                field="checkpoint_stall_hours",
            )
        for field_name in ("recovery_auto_hours", "recovery_manual_hours", "checkpointless_fallback_hours"):
            hours = getattr(self, field_name)
            if not 0 <= hours < math.inf:
                raise PlanError.about(field_name, f"{hours * 60:g} min must be >= 0 and finite")
        if not 0 <= self.checkpointless_success <= 1:
            raise PlanError.about(
                "checkpointless_success", f"{self.checkpointless_success:g} must be a fraction, 0 to 1"
            )
        if not self.lost_work_hours >= 0:
            raise PlanError.about("lost_work_hours", f"{self.lost_work_hours * 60:g} min must be >= 0")
        if self.checkpoint_interval_hours is not None and not 0 < self.checkpoint_interval_hours < math.inf:
            raise PlanError.about(
                "checkpoint_interval_hours", f"{self.checkpoint_interval_hours * 60:g} must be > 0 minutes"
            )
        if self.gpu_hours is not None and not 0 < self.gpu_hours < math.inf:
            raise PlanError.about("gpu_hours", "the job size must be > 0 and finite")
        if not 0 <= self.price_per_instance_hour < math.inf:
            raise PlanError.about("price_per_instance_hour", "must be >= 0 and finite")

    def source(self, name: str) -> str:
        """How the field ``name`` was set, in the caller's words (``sources``); else the field and its value."""
        if name in self.sources:
            return self.sources[name]
        value = getattr(self, name)
        return f"{name} {value:g}" if isinstance(value, int | float) else f"{name} {value}"

    def mtbf_text(self) -> str:
        """The job MTBF and what it comes from: ``the job MTBF of 36 s (instance_mtbf_hours 10 over instances
        1000)``, each input as ``sources`` says it."""
        return (
            f"the job MTBF of {duration_text(self.job_mtbf_hours)} "
            f"({self.source('instance_mtbf_hours')} over {self.source('instances')})"
        )

    def recovery_hours(self, mode: Mode) -> float:
        return self.recovery_auto_hours if mode == "auto" else self.recovery_manual_hours

    def recovery(self, mode: Mode) -> Recovery:
        """What a failure costs with ``mode``'s recovery: a checkpointless one resumes
        ``checkpointless_success`` of them, the rest restart from the last checkpoint."""
        if mode in self.checkpointless:
            return Recovery(
                restart=self.checkpointless_fallback_hours,
                resumed=self.checkpointless_success,
                resume=self.recovery_hours(mode),
            )
        return Recovery(restart=self.recovery_hours(mode))

    def optimal_interval_hours(self, mode: Mode) -> float | None:
        """The checkpoint interval (hours of compute) that minimises the expected wall time with ``mode``'s
        recovery: Daly's at the MTBF of the failures that restart from the checkpoint; None when there
        are none (every failure resumes: no checkpoint pays for its stall)."""
        return optimal_interval(self.checkpoint_stall_hours, self.job_mtbf_hours, self.recovery(mode).resumed)

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


# The inputs a PlanError names (InputName): JobSpec's fields but the set of checkpointless recoveries and the
# sources; what sizes a job in tokens (gpu_hours_for); simulate's trials; the plot's file; a run's file (RUN).
INPUTS = frozenset(
    {spec.name for spec in fields(JobSpec)} - {"checkpointless", "sources"}
    | {"tokens", "params", "mfu", "peak_tflops", "trials", "plot", "run"}
)


def daly_wall_hours(solve: float, interval: float, stall: float, restart: float, mtbf: float) -> float:
    """Daly's expected wall time (hours) for ``solve`` hours of compute; inf where it overflows."""
    try:
        return mtbf * math.exp(restart / mtbf) * math.expm1((interval + stall) / mtbf) * solve / interval
    except OverflowError:
        return math.inf


def _exp(exponent: float) -> float:
    try:
        return math.exp(exponent)
    except OverflowError:
        return math.inf


def recovery_factor(recovery: Recovery, mtbf: float) -> float:
    """``p e^(R_c/M) + (1-p) e^(R_f/M)``: the wall time per hour of failure-free running that the
    recoveries cost (a failure during a recovery starts it again), whatever the checkpoint interval."""
    resumed = recovery.resumed
    factor = (1.0 - resumed) * _exp(recovery.restart / mtbf) if resumed < 1 else 0.0
    return factor + (resumed * _exp(recovery.resume / mtbf) if resumed > 0 else 0.0)


def mixed_wall_hours(solve: float, interval: float, stall: float, mtbf: float, recovery: Recovery) -> float:
    """The expected wall time (hours) of ``solve`` hours of compute that saves a checkpoint (``stall``) after
    every ``interval`` hours of compute (``math.inf``: never), when ``recovery.resumed`` of the failures
    resume at the last step after ``recovery.resume`` hours and the rest restart from the last checkpoint
    after ``recovery.restart`` hours, losing the work since it; inf where it overflows.

    Failures of the two kinds come at the rates ``p/M`` and ``(1-p)/M`` (p = ``resumed``). A segment
    (``interval + stall`` = s) ends once it runs s hours without a failure that falls back: that takes
    ``(e^((1-p)s/M) - 1) M/(1-p)`` hours of running, during which ``p/M`` resumed failures and ``(1-p)/M``
    fallbacks per hour each cost a recovery that a failure starts again, ``M (e^(R/M) - 1)`` hours. So
    ``wall = solve/interval x (e^((1-p)s/M) - 1) M/(1-p) x (p e^(R_c/M) + (1-p) e^(R_f/M))``: with
    p = 0 Daly's formula (:func:`daly_wall_hours`), with p = 1 ``solve (1 + stall/interval) e^(R_c/M)``.
    """
    factor = recovery_factor(recovery, mtbf)
    if math.isinf(interval):  # no checkpoint: a failure that falls back loses all the work so far
        return solve * factor if recovery.resumed >= 1 else math.inf
    segment = interval + stall
    fallback_rate = (1.0 - recovery.resumed) / mtbf
    exponent = fallback_rate * segment
    try:
        redone = math.expm1(exponent) / exponent if exponent > 0 else 1.0
    except OverflowError:
        return math.inf
    return solve * segment / interval * redone * factor


def daly_lost_work_hours(interval: float, stall: float, mtbf: float) -> float:
    """Daly's expected work lost per failure: the mean time into a checkpoint segment at which it fails."""
    segment = interval + stall
    try:
        return mtbf - segment / math.expm1(segment / mtbf)
    except OverflowError:
        return mtbf


def downtime_hours(recovery: Recovery, interval: float, stall: float, mtbf: float) -> float:
    """The expected downtime of one failure in Daly's model: its recovery, plus for one that restarts from
    the last checkpoint the work lost since (:func:`daly_lost_work_hours` at the MTBF of such failures)."""
    if recovery.resumed >= 1:
        return recovery.resume
    lost = daly_lost_work_hours(interval, stall, mtbf / (1.0 - recovery.resumed)) if math.isfinite(interval) else 0
    return recovery.resumed * recovery.resume + (1.0 - recovery.resumed) * (recovery.restart + lost)


def linear_wall_hours(solve: float, instances: int, failures_per_instance_hour: float, downtime: float) -> float:
    """AWS's wall time (hours): ``solve x (1 + instances x failures per instance-hour x downtime per failure)``."""
    return solve * (1.0 + instances * failures_per_instance_hour * downtime)


def gpu_hours_for(tokens: float, params: float, mfu: float, peak_tflops: float) -> float:
    """GPU-hours to train ``params`` parameters on ``tokens`` tokens at ``mfu`` of a GPU's peak (6ND FLOPs)."""
    for name, value in (("tokens", tokens), ("params", params), ("peak_tflops", peak_tflops)):
        if not 0 < value < math.inf:
            raise PlanError.about(name, f"{value:g} must be > 0 and finite")
    if not 0 < mfu <= 1:
        raise PlanError.about("mfu", f"{mfu:g} must be a fraction of the peak, above 0 and at most 1")
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


def _log_sum(*terms: tuple[float, float]) -> float:
    """``ln(sum of weight x e^exponent)`` over the (weight, exponent) terms with a weight > 0, overflow-free."""
    logs = [math.log(weight) + exponent for weight, exponent in terms if weight > 0]
    top = max(logs)
    return top + math.log(sum(math.exp(x - top) for x in logs))


def _dominant_recovery(job: JobSpec, mode: Mode) -> tuple[str, float]:
    """The recovery that dominates ``mode``'s recovery factor, in words, and its hours: the recovery itself,
    or for a checkpointless one whose failures mostly fall back, the fallback to the checkpoint."""
    recovery, mtbf = job.recovery(mode), job.job_mtbf_hours
    if mode not in job.checkpointless:
        return _recovery_text(job, mode), recovery.restart
    resumed = recovery.resumed * _exp(recovery.resume / mtbf) if recovery.resumed > 0 else 0.0
    restarted = (1 - recovery.resumed) * _exp(recovery.restart / mtbf) if recovery.resumed < 1 else 0.0
    if resumed >= restarted:
        return _recovery_text(job, mode) + ", checkpointless", recovery.resume
    return (
        f"the fallback recovery of {recovery.restart * 60:.3g} min ({job.source('checkpointless_fallback_hours')}) "
        f"of the {1 - recovery.resumed:.1%} of failures the checkpointless {MODE_WORDS[mode]} recovery does not "
        f"resume ({job.source('checkpointless_success')})",
        recovery.restart,
    )


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
    ``ln(wall / compute)`` that dominates it (the recoveries, the work between checkpoints, the stalls)."""
    mtbf, stall, recovery = job.job_mtbf_hours, job.checkpoint_stall_hours, job.recovery(mode)
    segment = interval + stall
    fallback_mtbf = mtbf / (1 - recovery.resumed) if recovery.resumed < 1 else math.inf
    ratio = segment / fallback_mtbf if math.isfinite(segment) else 0.0
    terms = {
        # ln(p e^(R_c/M) + (1-p) e^(R_f/M)): the recoveries, which a failure starts again
        "recovery": _log_sum(
            (recovery.resumed, recovery.resume / mtbf), (1 - recovery.resumed, recovery.restart / mtbf)
        ),
        "stall": math.log(segment / interval) if math.isfinite(interval) else 0.0,
        # ln(M (e^(segment/M) - 1) / segment) at the fallbacks' MTBF: the work redone, growing as e^(segment/M)
        "segment": 0.0
        if ratio == 0
        else ratio - math.log(ratio)
        if ratio > 700
        else math.log(math.expm1(ratio) / ratio),
    }
    culprit = max(terms, key=lambda term: terms[term])
    if culprit == "recovery":
        text, hours = _dominant_recovery(job, mode)
        return (
            f"{text} is {hours / mtbf:.3g} times {job.mtbf_text()}: a recovery ends before the next failure "
            f"{_tries(hours / mtbf)}, so the expected wall time diverges ({_floor_text(goodput)})"
        )
    if culprit == "stall":
        return (
            f"a checkpoint every {interval * 60:.4g} min of training ({interval_source}) with a "
            f"{stall * 3600:.3g} s stall ({job.source('checkpoint_stall_hours')}) spends "
            f"{stall / segment:.1%} of the time saving ({_floor_text(goodput)})"
        )
    of_fallbacks = (
        ""
        if recovery.resumed == 0
        else f" over the {1 - recovery.resumed:.1%} of failures that restart from the checkpoint "
        f"({job.source('checkpointless_success')}), one every {duration_text(fallback_mtbf)}"
    )
    return (
        f"a checkpoint every {interval * 60:.4g} min of training ({interval_source}) is "
        f"{ratio:.3g} times {job.mtbf_text()}{of_fallbacks}: the work between two checkpoints completes without "
        f"a failure {_tries(ratio)}, so the expected wall time diverges ({_floor_text(goodput)})"
    )


def daly_outcome(job: JobSpec, interval_hours: float | None = None) -> Outcome:
    """Daly's model at ``interval_hours`` of compute between checkpoints (default: each recovery's optimum,
    :meth:`JobSpec.optimal_interval_hours`). A failure costs the restart plus the expected work lost since
    the last checkpoint; a checkpointless recovery (``job.checkpointless``) loses none on the failures it
    resumes (:func:`mixed_wall_hours`)."""
    mtbf, stall = job.job_mtbf_hours, job.checkpoint_stall_hours
    slowdown: dict[Mode, float] = {}
    downtime: dict[Mode, float] = {}
    intervals: dict[Mode, tuple[float, str]] = {}
    for mode in MODES:
        if interval_hours is None:
            optimum = job.optimal_interval_hours(mode)
            intervals[mode] = (math.inf if optimum is None else optimum, "the optimum")
        else:
            intervals[mode] = (interval_hours, job.source("checkpoint_interval_hours"))
        interval, recovery = intervals[mode][0], job.recovery(mode)
        slowdown[mode] = mixed_wall_hours(1.0, interval, stall, mtbf, recovery)
        downtime[mode] = downtime_hours(recovery, interval, stall, mtbf)
    return _outcome(job, slowdown, downtime, lambda mode, goodput: _daly_horizon(job, mode, goodput, *intervals[mode]))


def linear_outcome(job: JobSpec) -> Outcome:
    """AWS's linear model; a failure costs the recovery plus the lost work given explicitly. A checkpointless
    recovery costs its own recovery on the failures it resumes, the fallback and the lost work on the rest."""

    def downtime(mode: Mode) -> float:
        recovery = job.recovery(mode)
        restarted = recovery.restart + job.lost_work_hours
        if recovery.resumed >= 1:
            return recovery.resume
        return recovery.resumed * recovery.resume + (1 - recovery.resumed) * restarted

    downtimes = {mode: downtime(mode) for mode in MODES}
    rate = 1.0 / job.instance_mtbf_hours

    def why(mode: Mode, goodput: float) -> str:
        lost = ""
        if job.lost_work_hours > 0:
            lost = f" plus {job.lost_work_hours * 60:.3g} min of lost work ({job.source('lost_work_hours')})"
        text = _recovery_text(job, mode)
        if mode in job.checkpointless:
            text = f"{text}, checkpointless, with its fallback ({job.source('checkpointless_fallback_hours')})"
        return (
            f"{text}{lost} is {downtimes[mode] / job.job_mtbf_hours:.3g} times "
            f"{job.mtbf_text()}: the job would be down more than {100 - GOODPUT_FLOOR * 100:g} % of the time "
            f"(linear model: {_floor_text(goodput)})"
        )

    slowdown = {mode: linear_wall_hours(1.0, job.instances, rate, d) for mode, d in downtimes.items()}
    return _outcome(job, slowdown, downtimes, why)


@dataclass(frozen=True)
class Forecast:
    """What :func:`forecast` expects of a job: its MTBF, the checkpoint intervals, both models' outcomes."""

    job_mtbf_hours: float
    young_interval_minutes: float  # Young's and Daly's formulas at the job MTBF: a restart's optimum
    daly_interval_minutes: float
    wall_days_ideal: float | None
    cost_ideal: float | None
    daly: Outcome
    linear: Outcome
    # The interval each recovery's Daly rows are planned at: its optimum; None: no checkpoint (every failure resumes).
    optimal_interval_minutes: Mapping[Mode, float | None] = field(default_factory=dict)
    # With a checkpointless recovery: which, the share of failures it resumes, its fallback, their MTBF.
    checkpointless: Mapping[str, Any] = field(default_factory=dict)
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
        figures |= {f"optimal_interval_minutes_{mode}": self.optimal_interval_minutes.get(mode) for mode in MODES}
        figures |= self.checkpointless
        if sized:
            figures |= {"wall_days_ideal": self.wall_days_ideal, "cost_ideal": self.cost_ideal}
        figures |= self.outcome(model).as_dict(sized=sized)
        if self.at_checkpoint_interval is not None:
            figures["checkpoint_interval_minutes"] = self.checkpoint_interval_minutes
            figures["daly_at_checkpoint_interval"] = self.at_checkpoint_interval.as_dict(sized=sized)
        return figures


def _refuse_automatic(outcome: Outcome, *model: str | InputName) -> None:
    """A job whose automatic recovery is beyond the failure horizon in ``model`` has no forecast: refused,
    with why. (Manual recovery beyond it is the comparison's answer: its rows say so.)"""
    if "auto" in outcome.beyond_horizon:
        raise PlanError("this job cannot finish (", *model, f"): {outcome.beyond_horizon['auto']}")


def non_finite(value: Any, where: str = "") -> str | None:
    """The first figure in ``value`` (numbers, nested in dicts and lists) that is inf or NaN, by its key
    path, or None: what JSON cannot hold."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where or 'a figure'} = {value}"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = non_finite(item, f"{where}.{key}" if where else str(key))
        if found:
            return found
    return None


def refuse_non_finite(figures: dict[str, Any]) -> None:
    """A figure too large for a float (a job size or a price near 1e308) is refused, naming it."""
    found = non_finite(figures)
    if found:
        raise PlanError(
            f"{found}: a figure overflows; ",
            InputName("gpu_hours"),
            ", ",
            InputName("price_per_instance_hour"),
            " and ",
            InputName("instances"),
            " are too large to plan",
        )


def forecast(job: JobSpec) -> Forecast:
    """Both models for automatic and manual recovery, each recovery's optimal checkpoint interval and, with
    a fixed schedule (``job.checkpoint_interval_hours``), Daly's model at it. Refused (:class:`PlanError`)
    when automatic recovery is beyond the failure horizon, or a figure overflows."""
    job.validate()
    mtbf, stall, ideal = job.job_mtbf_hours, job.checkpoint_stall_hours, job.ideal_hours
    daly, linear = daly_outcome(job), linear_outcome(job)
    interval = job.checkpoint_interval_hours
    fixed = None if interval is None else daly_outcome(job, interval)
    _refuse_automatic(daly, "Daly's model at its optimal interval")
    if fixed is not None:
        _refuse_automatic(fixed, "Daly's model at ", InputName("checkpoint_interval_hours"))
    _refuse_automatic(linear, "linear model")
    optimal = {mode: job.optimal_interval_hours(mode) for mode in MODES}
    checkpointless: dict[str, Any] = {}
    if job.checkpointless:
        resumed = job.checkpointless_success
        checkpointless = {
            "checkpointless_recoveries": [mode for mode in MODES if mode in job.checkpointless],
            "checkpointless_success": resumed,
            "checkpointless_fallback_minutes": job.checkpointless_fallback_hours * 60,
            "fallback_mtbf_hours": mtbf / (1 - resumed) if resumed < 1 else None,
        }
    result = Forecast(
        job_mtbf_hours=mtbf,
        young_interval_minutes=young_interval(stall, mtbf) * 60,
        daly_interval_minutes=daly_interval(stall, mtbf) * 60,
        wall_days_ideal=None if ideal is None else ideal / 24,
        cost_ideal=None if ideal is None else ideal * job.cluster_price_per_hour,
        daly=daly,
        linear=linear,
        optimal_interval_minutes={mode: None if hours is None else hours * 60 for mode, hours in optimal.items()},
        checkpointless=checkpointless,
        checkpoint_interval_minutes=None if interval is None else interval * 60,
        at_checkpoint_interval=fixed,
    )
    for model in MODELS:
        refuse_non_finite(result.as_dict(model))
    return result


def simulate_wall_hours(
    solve: float,
    interval: float,
    stall: float,
    restart: float,
    mtbf: float,
    *,
    trials: int,
    seed: int,
    resumed: float = 0.0,
    resume: float = 0.0,
) -> list[float]:
    """Monte-Carlo wall times of the same job: exponential failures, a checkpoint (``stall``) after every
    ``interval`` hours of compute (``math.inf``: none), recoveries that a failure starts again. A failure
    restarts from the last checkpoint after ``restart`` hours, losing the work since; or, with the
    probability ``resumed`` (a checkpointless recovery), resumes where it struck after ``resume`` hours."""
    rng = random.Random(seed)
    results = []
    for _ in range(trials):
        remaining, clock = solve, 0.0
        while remaining > 1e-12:
            work = min(interval, remaining)
            segment = work + (stall if math.isfinite(interval) else 0.0)
            done = 0.0  # of the segment
            while True:
                to_failure = rng.expovariate(1.0 / mtbf)
                if to_failure >= segment - done:  # computed (and checkpointed)
                    clock += segment - done
                    break
                clock += to_failure
                if resumed >= 1 or (resumed > 0 and rng.random() < resumed):
                    done, recovery = done + to_failure, resume  # resumes where it struck
                else:
                    done, recovery = 0.0, restart  # the work since the last checkpoint is lost
                while True:  # a failure during the recovery starts it again
                    during_recovery = rng.expovariate(1.0 / mtbf)
                    if during_recovery >= recovery:
                        clock += recovery
                        break
                    clock += during_recovery
            remaining -= work
        results.append(clock)
    return results


# How many failures and checkpoints ``simulate`` draws at most (about a minute of Python).
SIMULATION_EVENTS_LIMIT = 5e7


def simulate(job: JobSpec, *, trials: int = 2000, seed: int = 0, interval_hours: float | None = None) -> dict[str, Any]:
    """The seeded Monte-Carlo of Daly's process (means and standard errors, in days) at ``interval_hours``
    of compute between checkpoints (default: the job's fixed schedule, else each recovery's optimum);
    needs a job size. A recovery beyond the failure horizon is not simulated (it would not end): refused
    when it is the automatic one, else named under ``beyond_horizon``; so is a job too large to draw."""
    job.validate()
    ideal = job.ideal_hours
    if ideal is None:
        raise PlanError.about("gpu_hours", "simulate needs a job size")
    fixed = interval_hours or job.checkpoint_interval_hours
    analytic = daly_outcome(job, fixed)
    _refuse_automatic(analytic, "Daly's model")
    intervals: dict[Mode, float] = {}
    for mode in MODES:
        optimum = job.optimal_interval_hours(mode)
        intervals[mode] = fixed or (math.inf if optimum is None else optimum)
    events = 0.0
    for mode in MODES:
        wall = getattr(analytic, f"wall_days_{mode}")
        if wall is not None:
            events += trials * (wall * 24 / job.job_mtbf_hours + ideal / intervals[mode])
    if events > SIMULATION_EVENTS_LIMIT:
        raise PlanError.about(
            "trials",
            f"the simulation would draw about {events:.2g} failures and checkpoints "
            f"(more than {SIMULATION_EVENTS_LIMIT:.0g}); lower ",
            InputName("trials"),
            " or ",
            InputName("gpu_hours"),
            value=trials,
        )
    summary: dict[str, Any] = {"trials": trials}
    summary |= {f"interval_minutes_{mode}": _minutes(intervals[mode]) for mode in MODES}
    means: dict[Mode, float] = {}
    for mode in MODES:
        if mode in analytic.beyond_horizon:
            continue
        recovery = job.recovery(mode)
        walls = simulate_wall_hours(
            ideal,
            intervals[mode],
            job.checkpoint_stall_hours,
            recovery.restart,
            job.job_mtbf_hours,
            trials=trials,
            seed=seed,
            resumed=recovery.resumed,
            resume=recovery.resume,
        )
        means[mode] = statistics.fmean(walls)
        summary[f"wall_days_{mode}"] = means[mode] / 24
        summary[f"wall_days_{mode}_stderr"] = statistics.stdev(walls) / math.sqrt(trials) / 24 if trials > 1 else 0.0
        summary[f"goodput_{mode}"] = ideal / means[mode]
        summary[f"cost_{mode}"] = means[mode] * job.cluster_price_per_hour
    if analytic.beyond_horizon:
        summary["beyond_horizon"] = dict(analytic.beyond_horizon)
    else:  # from the wall times: a price of 0 costs nothing and saves nothing, but saves the same time
        summary["saving_fraction"] = 1 - means["auto"] / means["manual"]
    refuse_non_finite(summary)
    return summary


def _minutes(hours: float) -> float | None:
    return None if math.isinf(hours) else hours * 60


PLOT_DATA_KEY = "llm-infra plan series"  # the PNG text chunk that holds what the plot was drawn from


def plot_series(job: JobSpec) -> dict[str, Any]:
    """What :func:`plot` draws, as numbers (JSON; None for a point beyond the failure horizon): expected
    wall-clock days (Daly) vs cluster size and vs checkpoint interval with each recovery's optimum, and the
    % of wall time automatic and checkpointless recovery save over manual recovery vs cluster size, in
    both models."""
    job.validate()
    ideal = job.ideal_hours
    if ideal is None or job.gpu_hours is None:
        raise PlanError.about("plot", "needs a job size: ", InputName("gpu_hours"))
    gpu_hours = job.gpu_hours
    sizes = sorted({max(1, round(job.instances * f)) for f in (0.125, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4)})
    scaled = {n: replace(job, instances=n) for n in sizes if job.checkpoint_stall_hours < job.instance_mtbf_hours / n}

    def days(spec: JobSpec, mode: Mode, interval: float | None = None) -> float | None:
        wall = getattr(daly_outcome(spec, interval), f"wall_days_{mode}")
        return None if wall is None else float(wall)

    optima = {mode: job.optimal_interval_hours(mode) for mode in MODES}
    finite = [hours for hours in optima.values() if hours is not None] or [
        daly_interval(job.checkpoint_stall_hours, job.job_mtbf_hours)
    ]
    low, high = min(finite) / 10, max(finite) * 10
    intervals = sorted({low * (high / low) ** (i / 24) for i in range(25)} | set(finite))
    checkpointless = RECOVERY_PRESETS["hyperpod-checkpointless"].value / 60
    faster: dict[str, tuple[float, frozenset[Mode]]] = {
        f"automatic ({job.recovery_auto_hours * 60:g} min)": (job.recovery_auto_hours, job.checkpointless),
        f"checkpointless ({checkpointless * 60:g} min, {job.checkpointless_success:.0%} of failures resumed)": (
            checkpointless,
            job.checkpointless | {"auto"},
        ),
    }
    saving: dict[str, dict[str, list[list[float]]]] = {}
    for label, (restart, resumes) in faster.items():
        saving[label] = {}
        for model, outcome_of in (("linear", linear_outcome), ("Daly", daly_outcome)):
            points = [
                (n, outcome_of(replace(spec, recovery_auto_hours=restart, checkpointless=resumes)).saving_fraction)
                for n, spec in scaled.items()
            ]
            saving[label][model] = [[n, fraction * 100] for n, fraction in points if fraction is not None]
    return {
        "instances": job.instances,
        "recovery_minutes": {mode: job.recovery_hours(mode) * 60 for mode in MODES},
        "manual_minutes": job.recovery_manual_hours * 60,
        "sizes": sizes,
        "wall_days_by_size": {mode: [days(scaled[n], mode) if n in scaled else None for n in sizes] for mode in MODES},
        "no_failures_days": [gpu_hours / (n * job.gpus_per_instance) / 24 for n in sizes],
        "interval_minutes": [i * 60 for i in intervals],
        "wall_days_by_interval": {mode: [days(job, mode, i) for i in intervals] for mode in MODES},
        "optimum": {mode: None if hours is None else [hours * 60, days(job, mode)] for mode, hours in optima.items()},
        "your_schedule": None
        if job.checkpoint_interval_hours is None
        else [job.checkpoint_interval_hours * 60, days(job, "auto", job.checkpoint_interval_hours)],
        "saving_percent": saving,
    }


def plot(job: JobSpec, path: str) -> None:
    """Draw :func:`plot_series` into the PNG ``path``, with the series themselves in its text chunk
    ``PLOT_DATA_KEY`` (JSON): what the picture shows can be checked without reading pixels."""
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - matplotlib is a dependency
        raise PlanError.about("plot", "needs matplotlib (pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = plot_series(job)

    def shown(values: list[float | None]) -> list[float]:
        return [math.nan if value is None else value for value in values]

    figure, (by_size, by_interval, saving) = plt.subplots(1, 3, figsize=(18, 4.8))
    sizes = series["sizes"]
    for mode in MODES:
        by_size.plot(
            sizes,
            shown(series["wall_days_by_size"][mode]),
            marker="o",
            label=f"{MODE_WORDS[mode]} recovery ({series['recovery_minutes'][mode]:g} min)",
        )
    by_size.plot(sizes, series["no_failures_days"], "k--", label="no failures")
    by_size.axvline(job.instances, color="grey", linestyle=":")
    by_size.set(
        xscale="log",
        yscale="log",
        xlabel="instances",
        ylabel="expected wall-clock days (Daly)",
        title="Wall-clock time vs. cluster size",
    )
    by_size.legend()

    for mode, color in zip(MODES, ("tab:blue", "tab:orange"), strict=True):
        by_interval.plot(
            series["interval_minutes"],
            shown(series["wall_days_by_interval"][mode]),
            color=color,
            label=f"{MODE_WORDS[mode]} recovery",
        )
        optimum = series["optimum"][mode]
        if optimum is not None and optimum[1] is not None:
            by_interval.plot(
                [optimum[0]], [optimum[1]], "*", color=color, markersize=14, label=f"optimum {optimum[0]:.1f} min"
            )
    if series["your_schedule"] is not None and series["your_schedule"][1] is not None:
        minutes, days = series["your_schedule"]
        by_interval.plot([minutes], [days], "kD", markersize=9, label=f"your schedule {minutes:.1f} min")
    by_interval.set(
        xscale="log",
        xlabel="checkpoint interval (minutes of compute)",
        ylabel="expected wall-clock days (Daly)",
        title=f"Wall-clock time vs. checkpoint interval ({job.instances} instances)",
    )
    by_interval.legend()

    for (label, models), color in zip(series["saving_percent"].items(), ("tab:blue", "tab:green"), strict=True):
        for model, style in (("linear", "-"), ("Daly", "--")):
            if models[model]:
                saving.plot(
                    *zip(*models[model], strict=True), style, color=color, marker="o", label=f"{label}, {model}"
                )
    saving.axvline(job.instances, color="grey", linestyle=":")
    saving.set(
        xscale="log",
        xlabel="instances",
        ylabel="% of wall time saved",
        title=f"Saving over manual recovery ({series['manual_minutes']:g} min) vs. cluster size",
    )
    saving.legend(fontsize="small")
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=110, format="png", metadata={PLOT_DATA_KEY: json.dumps(series, allow_nan=False)})
    except OSError as err:
        raise PlanError.about("plot", f"{path}: {err.strerror or err}") from None
    finally:
        plt.close(figure)
