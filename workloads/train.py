"""Resilient FSDP2 training of a Llama-style model, for torchrun on CPU (gloo) or GPU (NCCL).

    torchrun --nproc-per-node 8 train.py --preset 8b --steps 1000 --checkpoint-dir /fsx/ckpt

Every metric is a JSON line on stdout (see :func:`emit`: results from rank 0, liveness lines from
each node's first process); rank 0's last one is the summary with ``step``, ``loss`` and
``param_sha256`` (a hash of the full parameters) so runs can be compared exactly.
A restarted run resumes from the newest complete checkpoint. A run stopped before its last step
(SIGTERM: eviction, node replacement) exits 143 on every rank, so that neither torchrun nor the
training operator takes it for a finished job. :func:`main` is torchrun's entry point (flags,
process group, SIGTERM); :func:`train` is the run itself, which ray_train.py calls in every Ray
Train worker.

The run reads top to bottom (:class:`Trainer`): built (model, optimizer, schedule, data, the run's
:class:`TrainState`, checkpoints), resumed, then the loop, :meth:`Trainer.train`: per step one
:meth:`Trainer.train_step` (each micro-batch's :meth:`Trainer.forward_backward`, then the optimizer),
one agreement (:func:`agree_on_step`, the step's only host sync) and one checkpoint call
(``step_done``), until the last step or an agreed stop. Imports only torch and stdlib.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

# The payload's own modules: plain names when run as a script from /workloads (the containers; mypy reads
# the folder so too), the package's when imported as llm_infra.workloads (the tests, the planner).
if TYPE_CHECKING or not __package__:
    from accelerator import device_and_backend, exit_process, reduce_numbers, shutdown_budget_seconds
    from checkpointing import CheckpointFailed, CheckpointManager, CheckpointVote, NoCheckpoints, SaveSchedule
    from data import TOKEN_DTYPES, Prefetcher, SyntheticTokens, TokenFile
    from faults import FaultInjector
    from health_guard import (
        HALT_RECORD,
        HALTED_EXIT_CODE,
        ON_UNHEALTHY,
        REMEDIES,
        HealthGuard,
        differences,
        json_safe,
        read_halt_record,
        write_halt_record,
    )
    from late_ranks import RankPositions, RanksLate, WorkTimer
    from model import PRESETS, ModelArgs, Transformer, flops_per_token
    from stopping import STOPPED_EXIT_CODE, StopSignal
    from throughput import ThroughputMonitor
    from tiered_storage import TieredCheckpointOptions
else:
    from .accelerator import device_and_backend, exit_process, reduce_numbers, shutdown_budget_seconds
    from .checkpointing import CheckpointFailed, CheckpointManager, CheckpointVote, NoCheckpoints, SaveSchedule
    from .data import TOKEN_DTYPES, Prefetcher, SyntheticTokens, TokenFile
    from .faults import FaultInjector
    from .health_guard import (
        HALT_RECORD,
        HALTED_EXIT_CODE,
        ON_UNHEALTHY,
        REMEDIES,
        HealthGuard,
        differences,
        json_safe,
        read_halt_record,
        write_halt_record,
    )
    from .late_ranks import RankPositions, RanksLate, WorkTimer
    from .model import PRESETS, ModelArgs, Transformer, flops_per_token
    from .stopping import STOPPED_EXIT_CODE, StopSignal
    from .throughput import ThroughputMonitor
    from .tiered_storage import TieredCheckpointOptions

# none; selective (torchtitan's op policy: keep matmul and attention outputs, recompute the cheap
# elementwise ops); full (recompute each block).
ACTIVATION_CHECKPOINTING = ("none", "selective", "full")
ADAM_BETAS = (0.9, 0.95)  # Llama's
# Dense bf16 peak TFLOP/s per GPU, for MFU, by a fragment of torch.cuda.get_device_name, most specific
# first (NVIDIA data sheets: H100 SXM 989, H100 NVL 835, H100 PCIe 756, H200 989, A100 312, L40S 362,
# A10G 125).
PEAK_TFLOPS = (
    ("H100 NVL", 835.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("H200", 989.0),
    ("B200", 2250.0),  # HGX B200: 4.5 PFLOPS bf16 with 2:4 sparsity (NVIDIA's HGX B200 specification)
    ("A100", 312.0),
    ("L40S", 362.0),
    ("A10G", 125.0),
)
VERDICT_FAILED_EXIT_CODE = 3  # a failed --verdict: not a fault a restart cures (the pods do not retry it)


# ---- configuration --------------------------------------------------------------------------------
def option(default: Any, help: str, *, flag: str | None = None) -> Any:
    """A config field with its flag's help beside it (what it is, in which unit; the default is added);
    ``flag``: the flat name when it is not the field's (``--checkpoint-dir`` is ``checkpoint.dir``)."""
    return field(default=default, metadata={"help": help, "flag": flag})


@dataclass
class RunOptions:
    steps: int = option(100, "optimizer steps to train to (a resumed run continues to this step)")
    seed: int = option(0, "seed of the model's initialisation and of the data order")
    verdict: bool = option(
        False,
        "end with a pass/fail verdict line (the loss fell, the run ends on a complete checkpoint); "
        f"a failed verdict exits {VERDICT_FAILED_EXIT_CODE}",
    )
    log_every: int = option(1, "print a step line every N steps (also when host syncs happen: timing, MFU)")
    throughput_interval_s: float = option(
        60.0, "seconds between throughput heartbeat lines (each node's first process)"
    )
    pg_timeout_seconds: int = option(600, "process-group timeout in seconds: a collective waiting longer fails the run")


@dataclass
class ModelOptions:
    preset: str = option("tiny", f"model size: {', '.join(PRESETS)}")
    activation_checkpointing: str = option(
        "selective",
        "none, selective (recompute every second matmul and the cheap ops, as torchtitan) or full (recompute "
        "each block)",
    )
    compile: bool = option(False, "torch.compile each block (fullgraph: a graph break fails loudly)")


@dataclass
class DataOptions:
    source: str = option(
        "synthetic", "'synthetic', or the path of a token file (uint16/uint32 ids, e.g. on FSx)", flag="data"
    )
    dtype: str = option("uint16", "token file dtype: uint16 or uint32", flag="data_dtype")
    seq_len: int = option(128, "tokens per sample")
    batch_size: int = option(8, "samples per rank per micro-step (with --global-batch-size: the micro-batch)")
    global_batch_size: int | None = option(
        None,
        "samples per optimizer step over all ranks, kept at any world size by gradient accumulation; must be "
        "a multiple of world size x --batch-size (unset: --batch-size per rank)",
    )


@dataclass
class OptimizerOptions:
    lr: float = option(3e-3, "peak learning rate (after warm-up; cosine decay to 10 %% of it)")
    warmup_steps: int = option(10, "steps of linear learning-rate warm-up")
    weight_decay: float = option(0.1, "AdamW weight decay")


@dataclass
class HealthOptions:
    """The training-health guard (health_guard.py): what a step with a non-finite loss or gradient norm,
    or a loss spike, does. Such a step is never applied, never checkpointed."""

    on_unhealthy: str = option(
        "stop",
        "stop (halt: a record in --checkpoint-dir that every restart honours, exit "
        f"{HALTED_EXIT_CODE}) or rollback (to the newest checkpoint before the step, skipping the batches "
        "since; halts when the attempts are used up)",
    )
    rollback_attempts: int = option(3, "rollbacks a run may make (counted across restarts) before it halts")
    spike_factor: float | None = option(
        None,
        "a loss above this many times the median of the last --spike-window steps is unhealthy too "
        "(unset: only non-finite values are)",
    )
    spike_window: int = option(20, "healthy steps whose median loss a spike is measured against")
    clear_halt: bool = option(
        False, f"train although --checkpoint-dir holds a halt record ({HALT_RECORD}); the record is removed"
    )


@dataclass
class CheckpointOptions(TieredCheckpointOptions):  # --tiered-* flags: see tiered_storage.py
    dir: str | None = option(
        None,
        "where checkpoints are committed (FSx on the cluster); the run resumes from the newest",
        flag="checkpoint_dir",
    )
    every: int | None = option(None, "save every N steps", flag="checkpoint_every")
    interval_seconds: float | None = option(
        None, "save every N seconds of training (wall clock)", flag="checkpoint_interval_seconds"
    )
    mtbf_hours: float | None = option(
        None,
        "save at Daly's optimum for one instance's mean time between failures in hours, as in `llm-infra plan` "
        "(the job's MTBF is this / the number of nodes, taken from the world)",
    )
    job_mtbf_hours: float | None = option(
        None, "save at Daly's optimum for this whole-job mean time between failures, in hours"
    )
    keep: int = option(
        3, "committed checkpoints kept (plus the newest durable one, for tiered storage)", flag="keep_checkpoints"
    )
    async_save: bool = option(
        False, "write checkpoints in the background; training waits only for staging", flag="async_checkpoint"
    )


@dataclass
class FaultOptions:
    """Fault injection for the resilience tests and the validation job (faults.py); field names are
    FaultInjector's."""

    fail_at_step: int | None = option(None, "fault injection: --fail-rank exits before this step (first attempt only)")
    fail_rank: int | None = option(None, "fault injection: the rank that fails (default 0)")
    fail_in_checkpoint_at_step: int | None = option(
        None, "fault injection: die after writing this step's shards, before the commit"
    )
    fail_in_checkpoint_load: bool = option(
        False, "fault injection: an I/O error reading the newest checkpoint's shards"
    )
    fail_in_checkpoint_save_at_step: int | None = option(
        None, "fault injection: an I/O error writing this step's shards"
    )
    fail_memory_tier_at_load: bool = option(False, "fault injection: the memory tier has nothing for this rank at load")
    fail_memory_tier_at_step: int | None = option(
        None, "fault injection: the memory tier refuses this rank's shards of this step"
    )
    fail_nan_at_step: int | None = option(
        None,
        "fault injection: the loss of the batch an uninterrupted run reads at this step is NaN on --fail-rank "
        "(first attempt only; a run that skips that batch never sees it)",
    )
    fail_hang_at_step: int | None = option(
        None, "fault injection: --fail-rank stops before this step, past any timeout (first attempt only)"
    )


class InvalidConfig(SystemExit):
    """Invalid flags: exit 2, a usage error as argparse's; ``str()`` is the message, one line per problem."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__(2)
        self.message = "train.py: invalid configuration:\n  " + "\n  ".join(errors)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Flag:
    """One command-line flag: ``--<name with dashes>``, the field ``group.field`` of :class:`TrainConfig`."""

    name: str  # the flat name: the flag with underscores, the key in a --config file
    group: str
    field: str
    default: Any
    help: str
    kind: type


@dataclass
class TrainConfig:
    """The run's configuration, in groups; on the command line (and in a ``--config`` file) every field
    is one flat flag (:meth:`flags`)."""

    run: RunOptions = field(default_factory=RunOptions)
    model: ModelOptions = field(default_factory=ModelOptions)
    data: DataOptions = field(default_factory=DataOptions)
    optimizer: OptimizerOptions = field(default_factory=OptimizerOptions)
    health: HealthOptions = field(default_factory=HealthOptions)
    checkpoint: CheckpointOptions = field(default_factory=CheckpointOptions)
    faults: FaultOptions = field(default_factory=FaultOptions)

    @staticmethod
    @functools.cache
    def flags() -> tuple[Flag, ...]:
        """Every flag, group by group."""
        found = []
        for group in fields(TrainConfig):
            defaults = getattr(TrainConfig(), group.name)
            for f in fields(defaults):
                kind = {"int": int, "float": float, "str": str, "bool": bool}[str(f.type).split(" ")[0]]
                name = f.metadata.get("flag") or f.name
                found.append(Flag(name, group.name, f.name, getattr(defaults, f.name), f.metadata["help"], kind))
        return tuple(found)

    @classmethod
    def from_flat(cls, values: dict[str, Any]) -> TrainConfig:
        """The config from flat names (``{"steps": 80, "checkpoint_dir": ...}``); unset ones keep their default."""
        by_name = {flag.name: flag for flag in cls.flags()}
        unknown = sorted(set(values) - set(by_name))
        if unknown:
            raise ValueError(f"unknown keys {unknown}")
        groups: dict[str, dict[str, Any]] = {f.name: {} for f in fields(cls)}
        for name, value in values.items():
            groups[by_name[name].group][by_name[name].field] = value
        defaults = cls()
        return cls(**{group: type(getattr(defaults, group))(**given) for group, given in groups.items()})

    def flat(self) -> dict[str, Any]:
        """Every flag's value by its flat name: :meth:`from_flat` gives this config back."""
        return {flag.name: getattr(getattr(self, flag.group), flag.field) for flag in self.flags()}

    def validate(self) -> None:
        """Every flag checked before the process group starts: each problem one line on stderr naming the
        flag and what is allowed, then exit 2 (:class:`InvalidConfig`)."""
        errors = self.errors()
        if errors:
            error = InvalidConfig(errors)
            print(error, file=sys.stderr, flush=True)
            raise error

    def errors(self) -> list[str]:
        """What is wrong with the flags, one line per problem (empty when valid)."""
        run, model, data, ckpt, health = self.run, self.model, self.data, self.checkpoint, self.health
        errors = [f"--{name.replace('_', '-')}: {value} is not a finite number" for name, value in self._non_finite()]
        if model.preset not in PRESETS:
            errors.append(f"--preset: {model.preset!r} is not allowed; allowed: {', '.join(PRESETS)}")
        elif data.seq_len > PRESETS[model.preset].max_seq_len:
            errors.append(
                f"--seq-len: {data.seq_len} exceeds the preset's max_seq_len {PRESETS[model.preset].max_seq_len}"
            )
        for flag, value, least in (
            ("--steps", run.steps, 1),
            ("--seed", run.seed, 0),
            ("--log-every", run.log_every, 1),
            ("--pg-timeout-seconds", run.pg_timeout_seconds, 1),
            ("--seq-len", data.seq_len, 2),
            ("--batch-size", data.batch_size, 1),
            ("--global-batch-size", data.global_batch_size, 1),
            ("--warmup-steps", self.optimizer.warmup_steps, 0),
            ("--rollback-attempts", health.rollback_attempts, 1),
            ("--spike-window", health.spike_window, 2),
            ("--checkpoint-every", ckpt.every, 1),
            ("--keep-checkpoints", ckpt.keep, 1),
        ):
            if value is not None and value < least:
                errors.append(f"{flag}: {value} must be >= {least}")
        for flag, number, unit in (
            ("--lr", self.optimizer.lr, ""),
            ("--throughput-interval-s", run.throughput_interval_s, " (seconds)"),
            ("--checkpoint-interval-seconds", ckpt.interval_seconds, " (seconds)"),
            ("--mtbf-hours", ckpt.mtbf_hours, " (hours)"),
            ("--job-mtbf-hours", ckpt.job_mtbf_hours, " (hours)"),
        ):
            if number is not None and number <= 0:
                errors.append(f"{flag}: {number} must be > 0{unit}")
        if self.optimizer.weight_decay < 0:
            errors.append(f"--weight-decay: {self.optimizer.weight_decay} must be >= 0")
        if health.spike_factor is not None and health.spike_factor <= 1:
            errors.append(f"--spike-factor: {health.spike_factor} must be > 1 (times the median loss)")
        if data.global_batch_size is not None and data.global_batch_size % data.batch_size:
            errors.append(
                f"--global-batch-size: {data.global_batch_size} is not a multiple of --batch-size {data.batch_size}"
            )
        if data.dtype not in TOKEN_DTYPES:
            errors.append(f"--data-dtype: {data.dtype!r} is not allowed; allowed: {', '.join(TOKEN_DTYPES)}")
        for flag, choice, allowed in (
            ("--activation-checkpointing", model.activation_checkpointing, ACTIVATION_CHECKPOINTING),
            ("--on-unhealthy", health.on_unhealthy, ON_UNHEALTHY),
        ):
            if choice not in allowed:
                errors.append(f"{flag}: {choice!r} is not allowed; allowed: {', '.join(allowed)}")
        schedules = [ckpt.every, ckpt.interval_seconds, ckpt.mtbf_hours, ckpt.job_mtbf_hours]
        if sum(s is not None for s in schedules) > 1:
            errors.append(
                "--checkpoint-every, --checkpoint-interval-seconds, --mtbf-hours and --job-mtbf-hours are "
                "alternatives: pick one"
            )
        errors.extend(self._needs_dir_errors())
        errors.extend(self._fault_errors())
        errors.extend(ckpt.tiered_errors(ckpt.dir))
        return errors

    def _non_finite(self) -> list[tuple[str, float]]:
        """The float flags given as nan or inf (argparse's float() takes both)."""
        values = self.flat()
        return [
            (flag.name, values[flag.name])
            for flag in self.flags()
            if flag.kind is float and values[flag.name] is not None and not math.isfinite(values[flag.name])
        ]

    def _needs_dir_errors(self) -> list[str]:
        ckpt, faults = self.checkpoint, self.faults
        needs_dir = {
            "--async-checkpoint": ckpt.async_save,
            "--checkpoint-every": ckpt.every is not None,
            "--checkpoint-interval-seconds": ckpt.interval_seconds is not None,
            "--mtbf-hours": ckpt.mtbf_hours is not None,
            "--job-mtbf-hours": ckpt.job_mtbf_hours is not None,
            "--fail-in-checkpoint-at-step": faults.fail_in_checkpoint_at_step is not None,
            "--fail-in-checkpoint-load": faults.fail_in_checkpoint_load,
            "--fail-in-checkpoint-save-at-step": faults.fail_in_checkpoint_save_at_step is not None,
            "--verdict": self.run.verdict,
            "--on-unhealthy rollback": self.health.on_unhealthy == "rollback",
            "--clear-halt": self.health.clear_halt,
        }
        return [f"{flag} needs --checkpoint-dir" for flag, used in needs_dir.items() if used and not ckpt.dir]

    def _fault_errors(self) -> list[str]:
        faults, errors = self.faults, []
        step_faults = {
            "--fail-at-step": faults.fail_at_step,
            "--fail-in-checkpoint-at-step": faults.fail_in_checkpoint_at_step,
            "--fail-in-checkpoint-save-at-step": faults.fail_in_checkpoint_save_at_step,
            "--fail-memory-tier-at-step": faults.fail_memory_tier_at_step,
            "--fail-nan-at-step": faults.fail_nan_at_step,
            "--fail-hang-at-step": faults.fail_hang_at_step,
        }
        load_faults = {"--fail-in-checkpoint-load": faults.fail_in_checkpoint_load}
        memory_faults = {
            "--fail-memory-tier-at-load": faults.fail_memory_tier_at_load,
            "--fail-memory-tier-at-step": faults.fail_memory_tier_at_step is not None,
        }
        no_fault = all(v is None for v in step_faults.values()) and not any(
            [*load_faults.values(), *memory_faults.values()]
        )
        if faults.fail_rank is not None and no_fault:
            errors.append(
                "--fail-rank needs a fault: " + ", ".join(dict.fromkeys([*step_faults, *load_faults, *memory_faults]))
            )
        for flag, used in memory_faults.items():
            if used and not self.checkpoint.tiered_checkpointing:
                errors.append(f"{flag} needs --tiered-checkpointing")
        for flag, value in step_faults.items():
            if value is not None and not 0 < value < self.run.steps:
                errors.append(f"{flag}: {value} must lie in 1..{self.run.steps - 1}")
        return errors


class _FlagView:
    """``config.<flat name>``, read only: a flag's value by its flag name, for code outside the payload that
    knows the flags (``TrainConfig.<flat name>``: its default). The payload itself reads the groups."""

    def __init__(self, flag: Flag) -> None:
        self.flag = flag

    def __get__(self, config: TrainConfig | None, owner: type) -> Any:
        if config is None:
            return self.flag.default
        return getattr(getattr(config, self.flag.group), self.flag.field)

    def __set__(self, config: TrainConfig, value: Any) -> None:
        raise AttributeError(f"{self.flag.name} is read only: set {self.flag.group}.{self.flag.field}")


for _flag in TrainConfig.flags():
    if _flag.name not in TrainConfig.__dataclass_fields__:  # --data is data.source: config.data is its group
        setattr(TrainConfig, _flag.name, _FlagView(_flag))


def parse_config(argv: list[str] | None = None) -> TrainConfig:
    """Flags and/or ``--config file.json`` (keys are the flag names with underscores); flags win."""
    parser = config_parser(__doc__)
    return config_from_args(parser.parse_args(argv), parser)


def config_parser(description: str | None) -> argparse.ArgumentParser:
    """A parser with every :class:`TrainConfig` flag, one argument group per config group, and ``--config``;
    launchers (ray_train.py) add their own."""
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False)
    parser.add_argument("--config", type=Path, help="JSON file with defaults for the flags below")
    groups: dict[str, Any] = {}
    for flag in TrainConfig.flags():
        group = groups.get(flag.group) or groups.setdefault(flag.group, parser.add_argument_group(flag.group))
        shown = "off" if flag.default is False else "unset" if flag.default is None else flag.default
        help_text = f"{flag.help} (default: {shown})"
        option_string = "--" + flag.name.replace("_", "-")
        if flag.kind is bool:
            group.add_argument(option_string, action="store_true", default=None, help=help_text)
        else:
            group.add_argument(option_string, type=flag.kind, default=None, help=help_text)
    return parser


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> TrainConfig:
    """The validated config from ``parser``'s parsed ``args`` (attributes that are no flag are the
    launcher's, and ignored)."""
    names = {flag.name for flag in TrainConfig.flags()}
    values: dict[str, Any] = {}
    if args.config:
        from_file = json.loads(args.config.read_text())
        unknown = set(from_file) - names
        if unknown:
            parser.error(f"--config {args.config}: unknown keys {sorted(unknown)}")
        values.update(from_file)
    values.update({k: v for k, v in vars(args).items() if v is not None and k in names})
    config = TrainConfig.from_flat(values)
    config.validate()
    return config


# ---- distributed set-up -------------------------------------------------------------------------
def write_stdout(line: str) -> None:
    sys.stdout.write(line)
    sys.stdout.flush()


@dataclass
class Runtime:
    rank: int
    world_size: int
    device: torch.device
    restart_count: int
    # Where rank 0's JSON lines go: stdout under torchrun; ray_train.py passes them to its driver.
    write_line: Callable[[str], None] = write_stdout
    # LOCAL_RANK under a launcher that keeps one log per node (torchrun, hyperpodrun); None where every
    # line reaches one place (ray_train.py's driver), and rank 0 alone writes them all.
    local_rank: int | None = None
    # Called on every rank after each checkpoint commit (CheckpointManager's on_commit record); ray_train.py
    # reports the checkpoint to Ray there.
    on_checkpoint: Callable[[dict[str, Any]], None] | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def nodes(self) -> int:
        """The job's nodes: the world over the processes per node (LOCAL_WORLD_SIZE, which torchrun,
        hyperpodrun and Ray Train set; one node without it)."""
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size))
        return max(1, self.world_size // max(1, per_node))

    @property
    def is_node_main(self) -> bool:
        """Whether this process writes its node's liveness lines (see :func:`emit`)."""
        return self.is_main if self.local_rank is None else self.local_rank == 0


def hosts_the_store(rank: int) -> bool:
    """Whether this process serves the TCPStore at MASTER_ADDR:MASTER_PORT: rank 0, unless the
    launcher's agent serves it there (``TORCHELASTIC_USE_AGENT_STORE=True``), as torch's own ``env://``
    decides (torch 2.13, torch/distributed/rendezvous.py ``_create_c10d_store``).

    torchrun's c10d and static rendezvous set True (agent/server/local_elastic_agent.py); hyperpodrun
    sets False: its rendezvous has no store to share (hyperpod-elastic-agent 1.1.3,
    rendezvous/hyperpod_rendezvous_backend.py ``use_agent_store``, and
    elastic_agent/hyperpod_elastic_agent.py ``_start_workers``), so there rank 0 must start the server.
    """
    return rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"


def init_distributed(timeout_seconds: int) -> Runtime:
    """gloo on CPU, NCCL on GPU; a short timeout turns hangs into failures the launcher restarts."""
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    restart_count = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    device, backend = device_and_backend()
    timeout = timedelta(seconds=timeout_seconds)
    if "MASTER_ADDR" in os.environ:
        # A store namespaced by the restart: workers of a restarted round never meet stale keys
        # (or connect to the dead worker's old gloo ports).
        base = dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            world_size,
            is_master=hosts_the_store(rank),
            timeout=timeout,
        )
        store: dist.Store = dist.PrefixStore(f"llm_infra_attempt_{restart_count}", base)
    else:
        store = dist.HashStore()  # a single process without torchrun
    # device_id binds NCCL's communicator to this rank's GPU (no guessing in barrier(), eager init).
    dist.init_process_group(
        backend,
        store=store,
        rank=rank,
        world_size=world_size,
        timeout=timeout,
        device_id=device if device.type == "cuda" else None,
    )
    return Runtime(rank, world_size, device, restart_count, local_rank=local_rank)


def emit(runtime: Runtime, record: dict[str, Any], *, every_node: bool = False) -> None:
    """A JSON line stamped with the wall-clock time (stdout, or what ``runtime.write_line`` does): from
    rank 0, or with ``every_node`` from each node's first process (:attr:`Runtime.is_node_main`).

    Liveness lines (``start``, ``step``, ``throughput``, ``stopped``) go out on every node: hyperpodrun's
    log monitor reads only local rank 0's output on each node (hyperpod-elastic-agent 1.1.3,
    elastic_agent/hyperpod_elastic_agent.py ``start_log_monitoring``, logagent/log_agent.py) and takes a
    node that prints none for hung. Results (``summary``, verdict, ``checkpoint``, ``resume``...) are
    written once, by rank 0: the pod that holds rank 0 has the run's whole record, the other pods'
    logs only their liveness lines. Rank 0's node sees ``summary`` end the log rules; the others see
    their worker exit at about the same time. A non-finite number is written as a string (``"nan"``):
    a bare ``NaN`` is not JSON.
    """
    writes = runtime.is_node_main if every_node else runtime.is_main
    if writes:  # one write per line: the throughput thread logs too
        # Valid JSON whatever the record holds: a non-finite float becomes a string (JSON has no NaN).
        line = json.dumps(json_safe({**record, "time": round(time.time(), 3)}), allow_nan=False)
        runtime.write_line(line + "\n")


# ---- building the run ---------------------------------------------------------------------------
def build_model(config: TrainConfig, runtime: Runtime) -> torch.nn.Module:
    """The preset model, sharded with FSDP2 (bf16 on GPU), then deterministically initialised.

    Built on the meta device, sharded, materialised with ``to_empty`` on the training device and
    only then initialised: no rank ever holds the whole model (a 70B model does not fit one host).
    Each block is its own FSDP unit (activation checkpointed, then compiled, as torchtitan does), and
    so are the embedding table and the output projection unless they share one weight.
    """
    with torch.device("meta"):
        model = Transformer(PRESETS[config.model.preset])
    # bf16 compute with fp32 reduction on GPU; full precision on CPU.
    if runtime.device.type == "cuda":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    else:
        policy = MixedPrecisionPolicy()
    for index, block in enumerate(model.layers):
        block = checkpointed(block, config.model.activation_checkpointing)
        if config.model.compile:
            block.compile(fullgraph=True)  # a graph break fails loudly instead of running slowly
        fully_shard(block, mp_policy=policy)
        model.layers[index] = block
    if not model.args.tie_embeddings:
        fully_shard(model.tok_embeddings, mp_policy=policy)
        fully_shard(model.output, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    model.to_empty(device=runtime.device)
    model.init_weights(config.run.seed)
    return model


# The ops whose outputs selective activation checkpointing keeps (those this torch has), as torchtitan's
# op-level policy: attention, matmuls (but every second one is recomputed), FSDP's reduce-scatter.
_SAVED_OPS = {
    getattr(namespace, name).default
    for namespace, name in (
        (torch.ops.aten, "mm"),
        (torch.ops.aten, "_scaled_dot_product_flash_attention"),
        (torch.ops.aten, "_scaled_dot_product_efficient_attention"),
        (torch.ops.aten, "_scaled_dot_product_cudnn_attention"),
        (torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"),
        (torch.ops._c10d_functional, "reduce_scatter_tensor"),
    )
    if hasattr(namespace, name)
}


def _selective_policy() -> Callable[..., CheckpointPolicy]:
    """Keep the expensive outputs, recompute every second matmul (torchtitan's ``mm`` counting: about
    half the matmul memory for one extra matmul in four) and the cheap elementwise ops. One policy per
    forward and its recomputation, so both count the same matmuls."""
    matmuls = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if op not in _SAVED_OPS:
            return CheckpointPolicy.PREFER_RECOMPUTE
        if op is torch.ops.aten.mm.default:
            phase = "recompute" if ctx.is_recompute else "forward"
            matmuls[phase] += 1
            if matmuls[phase] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE

    return policy


def checkpointed(block: torch.nn.Module, mode: str) -> torch.nn.Module:
    """``block`` with activation checkpointing ``mode`` (see ACTIVATION_CHECKPOINTING)."""
    if mode == "none":
        return block
    if mode == "full":
        return checkpoint_wrapper(block, preserve_rng_state=False)
    return checkpoint_wrapper(
        block,
        preserve_rng_state=False,
        context_fn=lambda: create_selective_checkpoint_contexts(_selective_policy()),
    )


def make_optimizer(model: torch.nn.Module, config: TrainConfig, runtime: Runtime) -> torch.optim.Optimizer:
    """AdamW with Llama's betas; the fused kernel on GPU."""
    fused = runtime.device.type == "cuda"
    return torch.optim.AdamW(
        model.parameters(),
        lr=config.optimizer.lr,
        betas=ADAM_BETAS,
        weight_decay=config.optimizer.weight_decay,
        fused=fused,
        foreach=not fused,
    )


def lr_lambda(config: TrainConfig) -> Callable[[int], float]:
    warmup_steps, steps = config.optimizer.warmup_steps, config.run.steps

    def schedule(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, steps - warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return schedule


def make_data(config: TrainConfig, batching: Batching, vocab_size: int) -> SyntheticTokens | TokenFile:
    """The data source, indexed by global sample number (data.py)."""
    data = config.data
    if data.source == "synthetic":
        return SyntheticTokens(vocab_size=vocab_size, seq_len=data.seq_len, seed=config.run.seed)
    return TokenFile(
        Path(data.source),
        dtype=data.dtype,
        seq_len=data.seq_len,
        seed=config.run.seed,
        min_samples=batching.global_batch,
    )


@dataclass(frozen=True)
class Batching:
    """How one optimizer step's global batch is split: ``accumulation`` micro-steps, each of
    ``micro_batch`` samples on each of ``world_size`` ranks.

    Micro-step ``m`` of rank ``r`` reads the global samples ``first + (m * world_size + r) * micro_batch``
    onwards, where ``first`` is the number of samples the run has consumed: each optimizer step takes the
    next ``global_batch`` samples, the same ones at any world size.
    """

    global_batch: int
    micro_batch: int
    world_size: int

    @classmethod
    def of(cls, config: TrainConfig, world_size: int) -> Batching:
        """``--global-batch-size`` split over ``world_size`` ranks (gradient accumulation keeps it whatever
        the world size); without it, ``--batch-size`` per rank, today's meaning."""
        batch_size = config.data.batch_size
        global_batch = config.data.global_batch_size or batch_size * world_size
        if global_batch % (batch_size * world_size):
            raise SystemExit(
                f"train.py: --global-batch-size {global_batch} cannot be split over {world_size} ranks of "
                f"--batch-size {batch_size}: it must be a multiple of {batch_size * world_size} "
                "(world size x batch size); change --batch-size or the number of ranks"
            )
        return cls(global_batch, batch_size, world_size)

    @property
    def accumulation(self) -> int:
        return self.global_batch // (self.micro_batch * self.world_size)

    def first_sample(self, consumed: int, micro_step: int, rank: int) -> int:
        return consumed + (micro_step * self.world_size + rank) * self.micro_batch


def make_checkpoints(
    config: TrainConfig, runtime: Runtime, state: TrainState, faults: FaultInjector
) -> CheckpointManager | NoCheckpoints:
    """The run's checkpoints in ``--checkpoint-dir`` (saving ``state``), or none without it."""
    options = config.checkpoint
    if not options.dir:
        return NoCheckpoints()
    return CheckpointManager(
        Path(options.dir),
        state=state,
        schedule=SaveSchedule(options.every, options.interval_seconds, job_mtbf_hours(config, runtime)),
        keep=options.keep,
        async_save=options.async_save,
        log=lambda r: emit(runtime, r),
        device=runtime.device,
        tiered=options,
        on_commit=runtime.on_checkpoint,
        faults=faults,
    )


def job_mtbf_hours(config: TrainConfig, runtime: Runtime) -> float | None:
    """The whole job's MTBF: ``--job-mtbf-hours``, or ``--mtbf-hours`` (one instance's, as `llm-infra plan`
    means it) over the job's nodes."""
    options = config.checkpoint
    if options.job_mtbf_hours is not None:
        return options.job_mtbf_hours
    return None if options.mtbf_hours is None else options.mtbf_hours / runtime.nodes


# ---- the run's state ------------------------------------------------------------------------------
@dataclass
class Progress:
    """Where the run is: saved in every checkpoint. ``samples``: the global samples consumed, the data
    position (not ``step``: a step's global batch may have changed with the world size, and a rollback
    skips samples); ``skipped``: the ``[first, end)`` sample ranges the guard's ``rollbacks`` skipped."""

    step: int = 0
    initial_loss: float = float("nan")
    samples: int = 0
    loss: float = float("nan")  # the last step's mean loss: a run resumed at its last step still has it
    rollbacks: int = 0
    skipped: list[list[int]] = field(default_factory=list)


class ShapeMismatch(RuntimeError):
    """The checkpoint holds a model of another shape than this run builds: a change a resume cannot apply."""


def describe_shape(args: dict[str, Any]) -> str:
    return (
        f"dim {args['dim']}, {args['n_layers']} layers, {args['n_heads']} heads ({args['n_kv_heads']} kv), "
        f"ffn {args['ffn_hidden']}, vocab {args['vocab_size']}"
    )


class TrainState:
    """Everything a checkpoint holds, as DCP's ``Stateful``: the model, the optimizer, the LR schedule,
    the :class:`Progress` and the run's flags and model shape; the checkpoint manager saves
    :meth:`state_dict` and restores through :meth:`load_state_dict`, which refuses a checkpoint of another
    model shape and keeps the checkpoint's flags in ``saved_config`` (a resume compares them with its own)."""

    # What earlier versions' checkpoints lack (DCP's flattened names): they load without them, with a warning.
    keys_added_later = ("run.config", "run.model_args", "progress.skipped")

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        config: TrainConfig,
        model_args: ModelArgs,
    ) -> None:
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.config, self.model_args = config, model_args
        self.progress = Progress()
        self.saved_config: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        progress = asdict(self.progress)
        return {
            "model": model_state,
            "optimizer": optim_state,
            "scheduler": self.scheduler.state_dict(),
            "progress": {**progress, "skipped": json.dumps(progress["skipped"])},
            "run": {"config": json.dumps(self.config.flat()), "model_args": json.dumps(asdict(self.model_args))},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        run = state.get("run") or {}
        if "config" not in run or "model_args" not in run:  # an earlier version's: DCP checks the tensors' shapes
            saved_config, saved_args = None, None
        else:
            saved_config, saved_args = json.loads(run["config"]), json.loads(run["model_args"])
        if saved_args is not None and saved_args != json.loads(json.dumps(asdict(self.model_args))):
            assert saved_config is not None
            raise ShapeMismatch(
                f"the checkpoint of step {state['progress']['step']} holds a {saved_config.get('preset')} model "
                f"({describe_shape(saved_args)}); this run builds a {self.config.model.preset} model "
                f"({describe_shape(asdict(self.model_args))}): a resume cannot change the model's shape. Resume "
                f"with --preset {saved_config.get('preset')}, or start a new run in another --checkpoint-dir"
            )
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        progress = state["progress"]
        vars(self.progress).update({**progress, "skipped": json.loads(progress.get("skipped", "[]"))})
        self.saved_config = saved_config


# ---- the loop -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Agreed:
    """The outcome of a step's agreement, identical on every rank."""

    mean_loss: float
    grad_norm: float  # before clipping
    ranks_non_finite: int  # ranks whose loss or gradient norm is not finite
    stop: bool  # some rank was asked to stop
    save: bool  # some rank's checkpoint schedule says save now
    ranks_done_writing: int  # ranks with no background checkpoint write in flight


def agree_on_step(
    loss: torch.Tensor, grad_norm: torch.Tensor, stop: StopSignal, vote: CheckpointVote, runtime: Runtime
) -> Agreed:
    """The one small all-reduce of every step, before the optimizer step, and the step's one host sync
    (reading its result): health, stop, save and commit decided alike on every rank. The loss, the
    gradient norm and the health check stay on the device until then: each rank's flag for a non-finite
    value is computed there and joins the sum."""
    non_finite = (~torch.isfinite(torch.stack([loss.float(), grad_norm.float()]))).any()
    loss_sum, norm_sum, ranks_non_finite, stops, saves, writes_done = reduce_numbers(
        [loss, grad_norm, non_finite, float(stop.requested), float(vote.save_due), float(vote.write_done)],
        runtime.device,
    )
    world = runtime.world_size
    return Agreed(loss_sum / world, norm_sum / world, int(ranks_non_finite), stops > 0, saves > 0, int(writes_done))


class Refused(Exception):
    """The run must not train (a halt record stands, a change a resume cannot apply): the line every node
    writes, and the exit code."""

    def __init__(self, record: dict[str, Any], code: int) -> None:
        super().__init__(record.get("cause"))
        self.record, self.code = record, code


def group_store() -> dist.Store | None:
    """The default process group's store (the rendezvous's TCPStore under torchrun), where each rank
    records its position (late_ranks.py); None when the group has none."""
    try:
        return dist.distributed_c10d._get_default_store()
    except (RuntimeError, ValueError, AttributeError):
        return None


class Trainer:
    """One run on an initialised default process group: built here, then :meth:`train`."""

    def __init__(self, config: TrainConfig, runtime: Runtime, stop: StopSignal) -> None:
        self.config, self.runtime, self.stop = config, runtime, stop
        torch.manual_seed(config.run.seed)
        self.model_args = PRESETS[config.model.preset]
        model = build_model(config, runtime)
        optimizer = make_optimizer(model, config, runtime)
        # DCP's state-dict API initialises empty optimizer state with a zero-lr step (Adam's step count
        # becomes 1); do it in every run, with or without checkpoints, so that both train identically.
        get_optimizer_state_dict(model, optimizer)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(config))
        self.batching = Batching.of(config, runtime.world_size)
        self.data = Prefetcher(
            make_data(config, self.batching, self.model_args.vocab_size),
            runtime.device,
            batch_size=self.batching.micro_batch,
            stride=self.batching.micro_batch * runtime.world_size,
        )
        self.state = TrainState(model, optimizer, scheduler, config, self.model_args)
        self.faults = FaultInjector(runtime.rank, runtime.restart_count, **asdict(config.faults))
        self.checkpoints = make_checkpoints(config, runtime, self.state, self.faults)
        self.guard = HealthGuard(config.health.spike_factor, config.health.spike_window)
        self.positions = RankPositions(group_store(), runtime.rank, runtime.world_size)
        self.work = WorkTimer(runtime.device)
        self.tokens_per_step = self.batching.global_batch * config.data.seq_len
        self.flops_per_token = flops_per_token(self.model_args, config.data.seq_len)
        device = runtime.device
        self.peak_tflops = peak_tflops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
        self.steps_run = 0
        self.lr = 0.0  # the learning rate of the last applied step
        self.step_seconds = 0.0  # the last step's wall time

    def forward_backward(self, micro_step: int) -> torch.Tensor:
        """One micro-batch of this rank: forward, loss, backward. Its share of the step's mean loss."""
        progress, batching = self.state.progress, self.batching
        batch = self.data.batch(batching.first_sample(progress.samples, micro_step, self.runtime.rank))
        logits = self.state.model(batch.inputs)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten()) / batching.accumulation
        loss.backward()
        return loss.detach()

    def train_step(self) -> tuple[Agreed, str | None]:
        """One optimizer step over the global batch: every micro-batch, clip, the per-step agreement (health,
        stop, save), then the optimizer and the schedule only when the guard finds the step healthy. The
        agreed outcome and, for an unhealthy step (nothing of it applied), its cause. Each rank records
        where it is before the step's collectives: a failed collective names the ranks that did not arrive."""
        state, progress = self.state, self.state.progress
        self.positions.arrive(progress.step + 1, "forward", self.work.last)
        try:
            self.work.start()
            loss = torch.zeros((), device=self.runtime.device)
            for micro_step in range(self.batching.accumulation):
                loss += self.forward_backward(micro_step)
            loss = self.faults.poison_loss(loss, progress.samples // self.batching.global_batch + 1)
            grad_norm = torch.nn.utils.clip_grad_norm_(state.model.parameters(), 1.0)
            if isinstance(grad_norm, DTensor):
                grad_norm = grad_norm.to_local()  # replicated: every rank holds the whole norm
            self.work.stop()
            self.positions.arrive(progress.step + 1, "agreement", self.work.last)
            # The checkpoint's vote asks its schedule with the last step's time (this one's is not known
            # before the sync), and whether its background write is done, as late as it can.
            vote = self.checkpoints.vote(progress.step + 1, self.step_seconds)
            agreed = agree_on_step(loss, grad_norm, self.stop, vote, self.runtime)
        except RuntimeError as exc:  # gloo's timeout, a peer gone (NCCL's watchdog ends the process itself)
            self.raise_late(exc)
        cause = self.guard.cause(progress.step + 1, agreed.ranks_non_finite, agreed.mean_loss, agreed.grad_norm)
        if cause is None:
            self.lr = state.optimizer.param_groups[0]["lr"]
            state.optimizer.step()
            state.scheduler.step()
            progress.step += 1
            progress.samples += self.batching.global_batch
        state.optimizer.zero_grad(set_to_none=True)
        return agreed, cause

    def raise_late(self, exc: RuntimeError) -> NoReturn:
        """What a survivor raises when a collective of the loop failed: :class:`RanksLate` naming the ranks
        that did not arrive (also on stderr), or ``exc`` itself when every rank arrived."""
        behind = self.positions.late()
        if behind is None:
            raise exc
        message = f"{behind} ({type(exc).__name__}: {str(exc).splitlines()[0][:300]})"
        print(json.dumps({"event": "late_ranks", "rank": self.runtime.rank, "reason": message}), file=sys.stderr)
        raise RanksLate(message) from exc

    def train(self) -> int:
        """Resume, then the loop: a train step (with the agreement) and one checkpoint call per step, until
        the last step, an agreed stop or a halt. The exit code: 0, :data:`VERDICT_FAILED_EXIT_CODE`,
        :data:`STOPPED_EXIT_CODE`, :data:`HALTED_EXIT_CODE` or 2 (a resume that cannot apply)."""
        progress, steps = self.state.progress, self.config.run.steps
        try:
            resumed_from, changed = self.resume()
        except Refused as refused:
            emit(self.runtime, refused.record, every_node=True)
            if self.runtime.is_main:
                print(json.dumps(json_safe(refused.record)), file=sys.stderr, flush=True)
            self.data.close()
            self.checkpoints.close()  # gives the folder's lease back
            return refused.code
        throughput = self.start_logging(resumed_from, changed)
        loop_started = time.perf_counter()
        halted = False
        while progress.step < steps:
            self.faults.before_step(progress.step)
            started = time.perf_counter()
            agreed, cause = self.train_step()
            self.step_seconds = time.perf_counter() - started
            if cause is not None:
                halted = not self.on_unhealthy(cause)
                if halted:
                    break
                continue
            throughput.add(self.tokens_per_step, progress.step)
            self.log_step(agreed, self.step_seconds)
            last_step = progress.step == steps
            stopping = agreed.stop and not last_step
            self.checkpoint_step(agreed, save=agreed.save or last_step, stopping=stopping)
            if stopping:
                break
        throughput.stop()
        return self.finish(resumed_from, loop_started, halted)

    def checkpoint_step(self, agreed: Agreed, *, save: bool, stopping: bool) -> None:
        """The step's one checkpoint call (a healthy step: the guard's verdict goes into the commit record),
        this rank's arrival recorded first when it saves: a timeout names who did not arrive."""
        step = self.state.progress.step
        if save or stopping:
            self.positions.arrive(step, "checkpoint", self.work.last)
        try:
            self.checkpoints.step_done(
                step,
                save=save,
                ranks_done_writing=agreed.ranks_done_writing,
                stopping=self.stop if stopping else None,
                healthy=True,
            )
        except CheckpointFailed:
            raise  # agreed on every rank already, with its cause
        except RuntimeError as exc:  # a checkpoint collective timed out, or a peer is gone
            self.raise_late(exc)

    # ---- resuming ---------------------------------------------------------------------------------
    def resume(self) -> tuple[int | None, list[str]]:
        """Honour a halt record, restore the newest good checkpoint, then apply the flags given now over the
        checkpoint's (the learning rate, weight decay, warm-up and schedule). Returns the step resumed from
        and every flag that differs from the checkpoint's (``lr 0.003 -> 0.0003``); raises :class:`Refused`."""
        self.honour_halt_record()
        try:
            resumed_from = self.checkpoints.restore()
        except ShapeMismatch as exc:
            raise Refused({"event": "resume_refused", "cause": str(exc), "exit_code": 2}, 2) from exc
        if resumed_from is None:
            return resumed_from, []
        self.apply_optimizer_flags()  # also over an earlier version's checkpoint, whose flags are not known
        saved = self.state.saved_config
        return resumed_from, [] if saved is None else differences(saved, self.config.flat())

    def honour_halt_record(self) -> None:
        """A halt record in the checkpoint folder stops the run (:class:`Refused`, :data:`HALTED_EXIT_CODE`)
        unless this run changes one of :data:`REMEDIES` or says ``--clear-halt``; then it is removed."""
        directory = self.config.checkpoint.dir
        if not directory:
            return
        shared: list[Any] = [read_halt_record(Path(directory)) if self.runtime.is_main else None]
        dist.broadcast_object_list(shared, src=0)  # every rank decides on rank 0's reading
        record = shared[0]
        if record is None:
            return
        path = str(Path(directory) / HALT_RECORD)
        remedies = differences(record.get("config", {}), self.config.flat(), REMEDIES)
        if not (remedies or self.config.health.clear_halt):
            raise Refused(
                {
                    "event": "halted",
                    "step": record.get("step"),
                    "cause": record.get("cause"),
                    "halt_record": path,
                    "exit_code": HALTED_EXIT_CODE,
                    "how_to_proceed": f"resume with a change to one of --{', --'.join(REMEDIES)} (a lower --lr, "
                    "--on-unhealthy rollback), or with --clear-halt, or delete the record",
                },
                HALTED_EXIT_CODE,
            )
        if self.runtime.is_main:
            Path(path).unlink(missing_ok=True)
        cleared_by = remedies or ["--clear-halt"]
        cleared = {"event": "halt_cleared", "step": record.get("step"), "cause": record.get("cause"), "by": cleared_by}
        emit(self.runtime, cleared)

    def apply_optimizer_flags(self) -> None:
        """The learning rate and weight decay given now, over the restored optimizer's; the schedule's base
        rates too (a restored LambdaLR would put the checkpoint's lr back at its next step). Warm-up and
        decay come from this run's flags anyway: the schedule's function is never saved."""
        lr, scheduler = self.config.optimizer.lr, self.state.scheduler
        assert isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR)
        factor = scheduler.lr_lambdas[0](scheduler.last_epoch)
        scheduler.base_lrs = [lr for _ in scheduler.base_lrs]
        for group in self.state.optimizer.param_groups:
            group["initial_lr"], group["lr"] = lr, lr * factor
            group["weight_decay"] = self.config.optimizer.weight_decay
        scheduler._last_lr = [group["lr"] for group in self.state.optimizer.param_groups]

    # ---- an unhealthy step ------------------------------------------------------------------------
    def on_unhealthy(self, cause: str) -> bool:
        """An unhealthy step (the same cause on every rank: agreed): roll back when asked and attempts are
        left; else halt. Whether the run trains on."""
        health, progress = self.config.health, self.state.progress
        if health.on_unhealthy == "rollback":
            if progress.rollbacks >= health.rollback_attempts:
                cause += f"; the {health.rollback_attempts} rollback attempts are used up"
            elif self.roll_back(cause):
                return True
            else:
                cause += "; no checkpoint before it to roll back to"
        self.halt(cause)
        return False

    def roll_back(self, cause: str) -> bool:
        """Load the newest checkpoint older than the unhealthy step and skip every sample read since, up to
        and including the step's batch; the step numbers count on (the steps in between are abandoned,
        their checkpoints older by number than the next save). The rolled-back state is saved at once, so
        a restart resumes it exactly. False when there is no older checkpoint."""
        progress = self.state.progress
        at_step, bad_end = progress.step + 1, progress.samples + self.batching.global_batch
        rollbacks, skipped = progress.rollbacks, progress.skipped
        to_step = self.checkpoints.restore(before_step=at_step)
        if to_step is None:
            return False
        skipped_range = [progress.samples, bad_end]
        progress.rollbacks, progress.skipped = rollbacks + 1, [*skipped, skipped_range]
        progress.step, progress.samples = at_step - 1, bad_end
        self.apply_optimizer_flags()
        self.guard.recent.clear()  # the abandoned steps' losses are no median to measure against
        rollback = {
            "event": "rollback",
            "attempt": progress.rollbacks,
            "of": self.config.health.rollback_attempts,
            "step": at_step,
            "cause": cause,
            "to_checkpoint": to_step,
            "skipped_samples": skipped_range,
        }
        emit(self.runtime, rollback, every_node=True)
        self.checkpoints.step_done(progress.step, save=True, ranks_done_writing=0, healthy=True)
        return True

    def halt(self, cause: str) -> None:
        """Stop for good: the halt record in the checkpoint folder (rank 0 writes it durably, the outcome
        agreed), which every restart honours, and the ``halted`` line on every node."""
        progress = self.state.progress
        record: dict[str, Any] = {
            "event": "halted",
            "step": progress.step + 1,
            "last_applied_step": progress.step,
            "cause": cause,
            "exit_code": HALTED_EXIT_CODE,
        }
        directory = self.config.checkpoint.dir
        if directory:
            error = None
            if self.runtime.is_main:
                try:
                    write_halt_record(Path(directory), {**record, "config": self.config.flat()})
                except OSError as exc:
                    error = f"{type(exc).__name__}: {exc}"
            (failed,) = reduce_numbers([float(error is not None)], self.runtime.device)
            record["halt_record"] = str(Path(directory) / HALT_RECORD) if not failed else None
            if error:
                record["halt_record_error"] = error
        emit(self.runtime, record, every_node=True)
        if self.runtime.is_main:
            print(json.dumps(json_safe(record)), file=sys.stderr, flush=True)

    # ---- logging ----------------------------------------------------------------------------------
    def start_logging(self, resumed_from: int | None, changed: list[str]) -> ThroughputMonitor:
        """The ``start`` line (with every flag that differs from the checkpoint's), and the throughput
        heartbeat (started on each node's first process), which carries this rank's own work time per step
        and, on rank 0, the slowest rank's, or while stalled the ranks that have not arrived."""
        runtime = self.runtime
        start = {
            "event": "start",
            "preset": self.config.model.preset,
            "world_size": runtime.world_size,
            "device": runtime.device.type,
            "restart": runtime.restart_count,
            "resumed_from": resumed_from,
            "changed": changed,
            "global_batch": self.batching.global_batch,
            "accumulation": self.batching.accumulation,
            "samples": self.state.progress.samples,
            "shutdown_budget_seconds": self.stop.known_budget_seconds,
        }
        emit(runtime, start, every_node=True)

        def heartbeat(record: dict[str, Any]) -> None:
            record = {**record, "work_s": self.work.last}
            if runtime.is_main:
                record.update(self.positions.slowest())
                if record["tokens_per_s"] == 0:
                    record["waiting"] = self.positions.late()  # None: every rank is where rank 0 is
            emit(runtime, record, every_node=True)

        throughput = ThroughputMonitor(heartbeat, interval_s=self.config.run.throughput_interval_s)
        if runtime.is_node_main:
            throughput.start()
        return throughput

    def log_step(self, agreed: Agreed, step_seconds: float) -> None:
        """Record the agreed loss (and the run's first); a ``step`` line every ``--log-every`` steps."""
        progress, runtime = self.state.progress, self.runtime
        self.steps_run += 1
        progress.loss = agreed.mean_loss
        if math.isnan(progress.initial_loss):
            progress.initial_loss = agreed.mean_loss
        if progress.step % self.config.run.log_every:
            return
        tokens_per_s = self.tokens_per_step / step_seconds
        peak = self.peak_tflops
        line = {
            "event": "step",
            "step": progress.step,
            "samples": progress.samples,
            "loss": round(agreed.mean_loss, 6),
            "grad_norm": round(agreed.grad_norm, 4),
            "lr": self.lr,
            "tokens_per_s": round(tokens_per_s, 1),
            "step_time_s": round(step_seconds, 4),
            "mfu": self.flops_per_token * tokens_per_s / (peak * 1e12 * runtime.world_size) if peak else None,
        }
        emit(runtime, line, every_node=True)

    def finish(self, resumed_from: int | None, loop_started: float, halted: bool) -> int:
        """Close the data and the checkpoints (a background save committed), then the ``stopped`` line, or
        the summary (and the verdict); a halted run's line was written when it halted."""
        progress, runtime = self.state.progress, self.runtime
        self.data.close()
        self.checkpoints.close()
        train_seconds = time.perf_counter() - loop_started  # checkpoint stalls included
        if halted:
            return HALTED_EXIT_CODE
        if progress.step < self.config.run.steps:
            stopped = {"event": "stopped", "reason": self.stop.reason, "step": progress.step}
            emit(runtime, {**stopped, "exit_code": STOPPED_EXIT_CODE}, every_node=True)
            return STOPPED_EXIT_CODE
        summary = {
            "event": "summary",
            "step": progress.step,
            "samples": progress.samples,
            "loss": round(progress.loss, 6),
            "initial_loss": round(progress.initial_loss, 6),
            "param_sha256": param_sha256(self.state.model),
            "resumed_from": resumed_from,
            "restart": runtime.restart_count,
            "rollbacks": progress.rollbacks,
            "tokens_per_s": round(self.tokens_per_step * self.steps_run / train_seconds, 1) if train_seconds else None,
        }
        emit(runtime, summary)
        return report_verdict(runtime, summary, self.checkpoints) if self.config.run.verdict else 0


def main(argv: list[str] | None = None) -> int:
    """torchrun's entry point: the flags, the process group, SIGTERM as the stop request, the run."""
    config = parse_config(argv)
    check_paths(config)
    runtime = init_distributed(config.run.pg_timeout_seconds)
    stop = StopSignal(shutdown_budget_seconds()).on_stop_signals()
    code = train(config, runtime, stop)
    dist.destroy_process_group()
    return code


def train(config: TrainConfig, runtime: Runtime, stop: StopSignal) -> int:
    """The run on an initialised default process group (torchrun's or Ray Train's): build, resume from
    the newest committed checkpoint, train to ``--steps``, summarise.

    Returns the exit code: 0, :data:`VERDICT_FAILED_EXIT_CODE` (a failed ``--verdict``),
    :data:`STOPPED_EXIT_CODE` (stopped early), :data:`HALTED_EXIT_CODE` (the health guard halted it, now or
    before) or 2 (a resume that cannot apply, such as another model shape).
    """
    return Trainer(config, runtime, stop).train()


def check_paths(config: TrainConfig) -> None:
    """The checkpoint folder (listable and writable, or creatable) and the token file (readable), checked
    before the process group starts: :class:`InvalidConfig` (exit 2) naming the flag and the cause."""
    errors = []
    if config.checkpoint.dir:
        problem = folder_problem(Path(config.checkpoint.dir))
        if problem:
            errors.append(f"--checkpoint-dir: {config.checkpoint.dir} {problem}")
    source = config.data.source
    if source != "synthetic" and not (os.path.isfile(source) and os.access(source, os.R_OK)):
        errors.append(f"--data: {source} is not a readable file (or 'synthetic')")
    if errors:
        error = InvalidConfig(errors)
        print(error, file=sys.stderr, flush=True)
        raise error


def folder_problem(path: Path) -> str | None:
    """Why ``path`` cannot hold checkpoints (it cannot be listed, written or created), or None."""
    if not path.exists():
        parent = next(p for p in path.parents if p.exists())
        if not (parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)):
            return f"cannot be created: {parent} is not a writable folder"
        return None
    try:
        os.listdir(path)
    except OSError as exc:
        return f"cannot be listed ({exc.strerror or exc})"
    if not os.access(path, os.W_OK | os.X_OK):
        return "is not writable"
    return None


def param_sha256(model: torch.nn.Module) -> str:
    """SHA-256 of the full parameters (fp32 bytes) in name order: the same value at any world size.

    A collective: every rank calls it. Parameters are gathered one at a time (each DTensor's
    ``full_tensor``) and hashed on rank 0, so no rank ever holds the whole model (about 280 GB at 70B)."""
    sharded = get_model_state_dict(model)
    digest = hashlib.sha256()
    for name in sorted(sharded):
        tensor = sharded[name]
        assert isinstance(tensor, torch.Tensor), name
        full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
        if dist.get_rank() == 0:
            digest.update(name.encode())
            digest.update(full.detach().float().cpu().contiguous().numpy().tobytes())
        del full
    return digest.hexdigest()


def peak_tflops(device_name: str) -> float | None:
    """Dense bf16 peak TFLOP/s of a GPU by its name (PEAK_TFLOPS), None when unknown."""
    return next((tflops for fragment, tflops in PEAK_TFLOPS if fragment in device_name), None)


def report_verdict(runtime: Runtime, summary: dict[str, Any], checkpoints: CheckpointManager | NoCheckpoints) -> int:
    """The validation job's verdict: the loss fell and the run ends on a complete checkpoint."""
    committed = checkpoints.committed()
    newest = committed[0].name if committed else None
    checks = {
        "loss_fell": summary["loss"] < summary["initial_loss"],
        "checkpoint_complete": newest == f"step-{summary['step']:08d}",
    }
    verdict = {
        "verdict": "pass" if all(checks.values()) else "fail",
        "checks": checks,
        "resumed_from": summary["resumed_from"],
    }
    emit(runtime, verdict)
    return 0 if verdict["verdict"] == "pass" else VERDICT_FAILED_EXIT_CODE


if __name__ == "__main__":
    exit_process(main())
