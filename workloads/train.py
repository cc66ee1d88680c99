"""Resilient FSDP2 training of a Llama-style model, for torchrun on CPU (gloo) or GPU (NCCL).

    torchrun --nproc-per-node 8 train.py --preset 8b --steps 1000 --checkpoint-dir /fsx/ckpt

Every metric is a JSON line on stdout (see :func:`emit`: results from rank 0, liveness lines from
each node's first process); rank 0's last one is the summary with ``step``, ``loss`` and
``param_sha256`` (a hash of the full parameters) so runs can be compared exactly.
A restarted run resumes from the newest complete checkpoint. A run stopped before its last step
(SIGTERM: eviction, node replacement) exits 143 on every rank, so that neither torchrun nor the
training operator takes it for a finished job. :func:`main` is torchrun's entry point (flags,
process group, SIGTERM); :func:`train` is the run itself, which ray_train.py calls in every Ray
Train worker. Imports only torch and stdlib.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from accelerator import device_and_backend, exit_process, reduce_numbers, shutdown_budget_seconds
from checkpointing import CheckpointManager, SaveSchedule
from data import Prefetcher, SyntheticTokens, TokenFile
from faults import FaultInjector
from model import PRESETS, Transformer, flops_per_token
from stopping import STOPPED_EXIT_CODE, StopSignal, final_save_fits
from throughput import ThroughputMonitor
from tiered_storage import TieredCheckpointOptions
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
    ("A100", 312.0),
    ("L40S", 362.0),
    ("A10G", 125.0),
)
VERDICT_FAILED_EXIT_CODE = 3  # a failed --verdict: not a fault a restart cures (the pods do not retry it)


@dataclass
class TrainConfig(TieredCheckpointOptions):  # --tiered-* flags: see tiered_storage.py
    preset: str = "tiny"
    steps: int = 100
    seed: int = 0
    batch_size: int = 8
    global_batch_size: int | None = None
    seq_len: int = 128
    lr: float = 3e-3
    warmup_steps: int = 10
    data: str = "synthetic"
    data_dtype: str = "uint16"
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None
    checkpoint_interval_seconds: float | None = None
    mtbf_hours: float | None = None
    job_mtbf_hours: float | None = None
    keep_checkpoints: int = 3
    async_checkpoint: bool = False
    activation_checkpointing: str = "selective"
    weight_decay: float = 0.1
    compile: bool = False
    pg_timeout_seconds: int = 600
    fail_at_step: int | None = None
    fail_rank: int | None = None
    fail_in_checkpoint_at_step: int | None = None
    fail_in_checkpoint_load: bool = False
    fail_in_checkpoint_save_at_step: int | None = None
    fail_memory_tier_at_load: bool = False
    fail_memory_tier_at_step: int | None = None
    verdict: bool = False
    log_every: int = 1
    throughput_interval_s: float = 60.0

    def validate(self) -> None:
        errors = []
        if self.preset not in PRESETS:
            errors.append(f"--preset: {self.preset!r} is not allowed; allowed: {', '.join(PRESETS)}")
        elif self.seq_len > PRESETS[self.preset].max_seq_len:
            errors.append(
                f"--seq-len: {self.seq_len} exceeds the preset's max_seq_len {PRESETS[self.preset].max_seq_len}"
            )
        if self.steps < 1 or self.batch_size < 1 or self.seq_len < 2:
            errors.append("--steps, --batch-size must be >= 1 and --seq-len >= 2")
        if self.global_batch_size is not None and self.global_batch_size % self.batch_size:
            errors.append(
                f"--global-batch-size: {self.global_batch_size} is not a multiple of --batch-size {self.batch_size}"
            )
        schedules = [self.checkpoint_every, self.checkpoint_interval_seconds, self.mtbf_hours, self.job_mtbf_hours]
        if sum(s is not None for s in schedules) > 1:
            errors.append(
                "--checkpoint-every, --checkpoint-interval-seconds, --mtbf-hours and --job-mtbf-hours are "
                "alternatives: pick one"
            )
        for flag, hours in (("--mtbf-hours", self.mtbf_hours), ("--job-mtbf-hours", self.job_mtbf_hours)):
            if hours is not None and hours <= 0:
                errors.append(f"{flag}: {hours} must be > 0 (hours)")
        needs_dir = {
            "--async-checkpoint": self.async_checkpoint,
            "--checkpoint-every": self.checkpoint_every is not None,
            "--checkpoint-interval-seconds": self.checkpoint_interval_seconds is not None,
            "--mtbf-hours": self.mtbf_hours is not None,
            "--job-mtbf-hours": self.job_mtbf_hours is not None,
            "--fail-in-checkpoint-at-step": self.fail_in_checkpoint_at_step is not None,
            "--fail-in-checkpoint-load": self.fail_in_checkpoint_load,
            "--fail-in-checkpoint-save-at-step": self.fail_in_checkpoint_save_at_step is not None,
            "--verdict": self.verdict,
        }
        for flag, used in needs_dir.items():
            if used and not self.checkpoint_dir:
                errors.append(f"{flag} needs --checkpoint-dir")
        step_faults = {
            "--fail-at-step": self.fail_at_step,
            "--fail-in-checkpoint-at-step": self.fail_in_checkpoint_at_step,
            "--fail-in-checkpoint-save-at-step": self.fail_in_checkpoint_save_at_step,
            "--fail-memory-tier-at-step": self.fail_memory_tier_at_step,
        }
        load_faults = {"--fail-in-checkpoint-load": self.fail_in_checkpoint_load}
        memory_faults = {
            "--fail-memory-tier-at-load": self.fail_memory_tier_at_load,
            "--fail-memory-tier-at-step": self.fail_memory_tier_at_step is not None,
        }
        no_fault = all(v is None for v in step_faults.values()) and not any(
            [*load_faults.values(), *memory_faults.values()]
        )
        if self.fail_rank is not None and no_fault:
            errors.append(
                "--fail-rank needs a fault: " + ", ".join(dict.fromkeys([*step_faults, *load_faults, *memory_faults]))
            )
        for flag, used in memory_faults.items():
            if used and not self.tiered_checkpointing:
                errors.append(f"{flag} needs --tiered-checkpointing")
        for flag, value in step_faults.items():
            if value is not None and not 0 < value < self.steps:
                errors.append(f"{flag}: {value} must lie in 1..{self.steps - 1}")
        if self.activation_checkpointing not in ACTIVATION_CHECKPOINTING:
            errors.append(
                f"--activation-checkpointing: {self.activation_checkpointing!r} is not allowed; allowed: "
                + ", ".join(ACTIVATION_CHECKPOINTING)
            )
        if self.throughput_interval_s <= 0:
            errors.append(f"--throughput-interval-s: {self.throughput_interval_s} must be > 0")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            errors.append(f"--checkpoint-every: {self.checkpoint_every} must be >= 1")
        errors.extend(self.tiered_errors(self.checkpoint_dir))
        if errors:
            raise SystemExit("train.py: invalid configuration:\n  " + "\n  ".join(errors))


def parse_config(argv: list[str] | None = None) -> TrainConfig:
    """Flags and/or ``--config file.json`` (keys are the flag names with underscores); flags win."""
    parser = config_parser(__doc__)
    return config_from_args(parser.parse_args(argv), parser)


# Each flag's help: what it is, in which unit (the default is added from TrainConfig).
FLAG_HELP = {
    "preset": f"model size: {', '.join(PRESETS)}",
    "steps": "optimizer steps to train to (a resumed run continues to this step)",
    "seed": "seed of the model's initialisation and of the data order",
    "batch_size": "samples per rank per micro-step (with --global-batch-size: the micro-batch)",
    "global_batch_size": "samples per optimizer step over all ranks, kept at any world size by gradient "
    "accumulation; must be a multiple of world size x --batch-size (unset: --batch-size per rank)",
    "seq_len": "tokens per sample",
    "lr": "peak learning rate (after warm-up; cosine decay to 10 %% of it)",
    "warmup_steps": "steps of linear learning-rate warm-up",
    "data": "'synthetic', or the path of a token file (uint16/uint32 ids, e.g. on FSx)",
    "data_dtype": "token file dtype: uint16 or uint32",
    "checkpoint_dir": "where checkpoints are committed (FSx on the cluster); the run resumes from the newest",
    "checkpoint_every": "save every N steps",
    "checkpoint_interval_seconds": "save every N seconds of training (wall clock)",
    "mtbf_hours": "save at Daly's optimum for one instance's mean time between failures in hours, as in "
    "`llm-infra plan` (the job's MTBF is this / the number of nodes, taken from the world)",
    "job_mtbf_hours": "save at Daly's optimum for this whole-job mean time between failures, in hours",
    "keep_checkpoints": "committed checkpoints kept (plus the newest durable one, for tiered storage)",
    "async_checkpoint": "write checkpoints in the background; training waits only for staging",
    "activation_checkpointing": "none, selective (recompute every second matmul and the cheap ops, as "
    "torchtitan) or full (recompute each block)",
    "weight_decay": "AdamW weight decay",
    "compile": "torch.compile each block (fullgraph: a graph break fails loudly)",
    "pg_timeout_seconds": "process-group timeout in seconds: a collective waiting longer fails the run",
    "fail_at_step": "fault injection: --fail-rank exits before this step (first attempt only)",
    "fail_rank": "fault injection: the rank that fails (default 0)",
    "fail_in_checkpoint_at_step": "fault injection: die after writing this step's shards, before the commit",
    "fail_in_checkpoint_load": "fault injection: an I/O error reading the newest checkpoint's shards",
    "fail_in_checkpoint_save_at_step": "fault injection: an I/O error writing this step's shards",
    "fail_memory_tier_at_load": "fault injection: the memory tier has nothing for this rank at load",
    "fail_memory_tier_at_step": "fault injection: the memory tier refuses this rank's shards of this step",
    "verdict": "end with a pass/fail verdict line (the loss fell, the run ends on a complete checkpoint); "
    f"a failed verdict exits {VERDICT_FAILED_EXIT_CODE}",
    "log_every": "print a step line every N steps (also when host syncs happen: timing, MFU)",
    "throughput_interval_s": "seconds between throughput heartbeat lines (each node's first process)",
    "tiered_checkpointing": "HyperPod managed tiered checkpointing: memory tier on every save (falls back to "
    "the checkpoint dir when unreachable)",
    "tiered_s3_uri": "s3://bucket/prefix of the tiered storage's S3 copies",
    "tiered_s3_every": "every N-th save also goes to --tiered-s3-uri",
}


def config_parser(description: str | None) -> argparse.ArgumentParser:
    """A parser with every :class:`TrainConfig` flag and ``--config``; launchers (ray_train.py) add their own."""
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False)
    parser.add_argument("--config", type=Path, help="JSON file with defaults for the flags below")
    defaults = TrainConfig()
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        shown = "off" if default is False else "unset" if default is None else default
        help_text = f"{FLAG_HELP[f.name]} (default: {shown})"
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_true", default=None, help=help_text)
        else:
            kind = {"int": int, "float": float, "str": str}[str(f.type).split(" ")[0].replace("'", "")]
            parser.add_argument(flag, type=kind, default=None, help=help_text)
    return parser


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> TrainConfig:
    """The validated config from ``parser``'s parsed ``args`` (attributes that are no config field are
    the launcher's, and ignored)."""
    names = {f.name for f in fields(TrainConfig)}
    values: dict[str, Any] = {}
    if args.config:
        from_file = json.loads(args.config.read_text())
        unknown = set(from_file) - names
        if unknown:
            parser.error(f"--config {args.config}: unknown keys {sorted(unknown)}")
        values.update(from_file)
    values.update({k: v for k, v in vars(args).items() if v is not None and k in names})
    config = TrainConfig(**values)
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


def build_model(config: TrainConfig, runtime: Runtime) -> torch.nn.Module:
    """The preset model, sharded with FSDP2 (bf16 on GPU), then deterministically initialised.

    Built on the meta device, sharded, materialised with ``to_empty`` on the training device and
    only then initialised: no rank ever holds the whole model (a 70B model does not fit one host).
    Each block is its own FSDP unit (activation checkpointed, then compiled, as torchtitan does), and
    so are the embedding table and the output projection unless they share one weight.
    """
    with torch.device("meta"):
        model = Transformer(PRESETS[config.preset])
    # bf16 compute with fp32 reduction on GPU; full precision on CPU.
    if runtime.device.type == "cuda":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    else:
        policy = MixedPrecisionPolicy()
    for index, block in enumerate(model.layers):
        block = checkpointed(block, config.activation_checkpointing)
        if config.compile:
            block.compile(fullgraph=True)  # a graph break fails loudly instead of running slowly
        fully_shard(block, mp_policy=policy)
        model.layers[index] = block
    if not model.args.tie_embeddings:
        fully_shard(model.tok_embeddings, mp_policy=policy)
        fully_shard(model.output, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    model.to_empty(device=runtime.device)
    model.init_weights(config.seed)
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
        lr=config.lr,
        betas=ADAM_BETAS,
        weight_decay=config.weight_decay,
        fused=fused,
        foreach=not fused,
    )


def make_data(config: TrainConfig, batching: Batching, vocab_size: int) -> SyntheticTokens | TokenFile:
    """The data source, indexed by global sample number (data.py)."""
    if config.data == "synthetic":
        return SyntheticTokens(vocab_size=vocab_size, seq_len=config.seq_len, seed=config.seed)
    return TokenFile(
        Path(config.data),
        dtype=config.data_dtype,
        seq_len=config.seq_len,
        seed=config.seed,
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
        global_batch = config.global_batch_size or config.batch_size * world_size
        if global_batch % (config.batch_size * world_size):
            raise SystemExit(
                f"train.py: --global-batch-size {global_batch} cannot be split over {world_size} ranks of "
                f"--batch-size {config.batch_size}: it must be a multiple of {config.batch_size * world_size} "
                "(world size x batch size); change --batch-size or the number of ranks"
            )
        return cls(global_batch, config.batch_size, world_size)

    @property
    def accumulation(self) -> int:
        return self.global_batch // (self.micro_batch * self.world_size)

    def first_sample(self, consumed: int, micro_step: int, rank: int) -> int:
        return consumed + (micro_step * self.world_size + rank) * self.micro_batch


def lr_lambda(config: TrainConfig):
    def schedule(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return schedule


# ---- the run --------------------------------------------------------------------------------------
@dataclass
class Progress:
    """Where the run is: saved in every checkpoint. ``samples``: the global samples consumed, the data
    position (not ``step``: a step's global batch may have changed with the world size)."""

    step: int = 0
    initial_loss: float = float("nan")
    samples: int = 0
    loss: float = float("nan")  # the last step's mean loss: a run resumed at its end still has it


@dataclass
class StepAgreement:
    """What each rank brings to the one small all-reduce after every step: the step's one host sync
    (stop, save and commit must be decided alike on every rank, every step); the loss stays on the
    device until then."""

    loss: torch.Tensor
    stop: bool  # this rank was asked to stop
    save_due: bool  # this rank's checkpoint schedule says save now
    write_done: bool  # this rank has no background checkpoint write in flight

    def reduce(self, runtime: Runtime) -> Agreed:
        loss, stops, saves, writes_done = reduce_numbers(
            [self.loss, float(self.stop), float(self.save_due), float(self.write_done)], runtime.device
        )
        return Agreed(loss / runtime.world_size, stops > 0, saves > 0, int(writes_done))


@dataclass(frozen=True)
class Agreed:
    """The outcome, identical on every rank."""

    mean_loss: float
    stop: bool
    save: bool
    ranks_done_writing: int


def emit(runtime: Runtime, record: dict[str, Any], *, every_node: bool = False) -> None:
    """A JSON line stamped with the wall-clock time (stdout, or what ``runtime.write_line`` does): from
    rank 0, or with ``every_node`` from each node's first process (:attr:`Runtime.is_node_main`).

    Liveness lines (``start``, ``step``, ``throughput``, ``stopped``) go out on every node: hyperpodrun's
    log monitor reads only local rank 0's output on each node (hyperpod-elastic-agent 1.1.3,
    elastic_agent/hyperpod_elastic_agent.py ``start_log_monitoring``, logagent/log_agent.py) and takes a
    node that prints none for hung. Results (``summary``, verdict, ``checkpoint``, ``resume``...) are
    written once, by rank 0: the pod that holds rank 0 has the run's whole record, the other pods'
    logs only their liveness lines. Rank 0's node sees ``summary`` end the log rules; the others see
    their worker exit at about the same time.
    """
    writes = runtime.is_node_main if every_node else runtime.is_main
    if writes:  # one write per line: the throughput thread logs too
        runtime.write_line(json.dumps({**record, "time": round(time.time(), 3)}) + "\n")


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


def main(argv: list[str] | None = None) -> int:
    """torchrun's entry point: the flags, the process group, SIGTERM as the stop request, the run."""
    config = parse_config(argv)
    runtime = init_distributed(config.pg_timeout_seconds)
    stop = StopSignal(shutdown_budget_seconds()).on_stop_signals()
    code = train(config, runtime, stop)
    dist.destroy_process_group()
    return code


def train(config: TrainConfig, runtime: Runtime, stop: StopSignal) -> int:
    """The run on an initialised default process group (torchrun's or Ray Train's): build, resume from
    the newest committed checkpoint, train to ``config.steps``, summarise.

    Returns the exit code: 0, 1 (a failed ``--verdict``) or :data:`STOPPED_EXIT_CODE` (stopped early).
    """
    torch.manual_seed(config.seed)
    args = PRESETS[config.preset]
    model = build_model(config, runtime)
    optimizer = make_optimizer(model, config, runtime)
    # DCP's state-dict API initialises empty optimizer state with a zero-lr step (Adam's step count
    # becomes 1); do it in every run, with or without checkpoints, so that both train identically.
    get_optimizer_state_dict(model, optimizer)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(config))
    batching = Batching.of(config, runtime.world_size)
    data = Prefetcher(
        make_data(config, batching, args.vocab_size),
        runtime.device,
        batch_size=batching.micro_batch,
        stride=batching.micro_batch * runtime.world_size,
    )
    progress = Progress()

    def run_state() -> dict[str, Any]:
        model_state, optim_state = get_state_dict(model, optimizer)
        return {
            "model": model_state,
            "optimizer": optim_state,
            "scheduler": scheduler.state_dict(),
            "progress": asdict(progress),
        }

    def apply_state(state: dict[str, Any]) -> None:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        vars(progress).update(state["progress"])

    faults = FaultInjector(
        runtime.rank,
        runtime.restart_count,
        fail_at_step=config.fail_at_step,
        fail_in_checkpoint_at_step=config.fail_in_checkpoint_at_step,
        fail_rank=config.fail_rank,
        fail_in_checkpoint_load=config.fail_in_checkpoint_load,
        fail_in_checkpoint_save_at_step=config.fail_in_checkpoint_save_at_step,
        fail_memory_tier_at_load=config.fail_memory_tier_at_load,
        fail_memory_tier_at_step=config.fail_memory_tier_at_step,
    )
    checkpoints = None
    resumed_from = None
    if config.checkpoint_dir:
        checkpoints = CheckpointManager(
            Path(config.checkpoint_dir),
            state=run_state,
            apply=apply_state,
            schedule=SaveSchedule(
                config.checkpoint_every, config.checkpoint_interval_seconds, job_mtbf_hours(config, runtime)
            ),
            keep=config.keep_checkpoints,
            async_save=config.async_checkpoint,
            log=lambda r: emit(runtime, r),
            device=runtime.device,
            tiered=config,
            on_commit=runtime.on_checkpoint,
            faults=faults,
        )
        resumed_from = checkpoints.restore()

    tokens_per_step = batching.global_batch * config.seq_len
    flops = flops_per_token(args, config.seq_len)
    peak = peak_tflops(torch.cuda.get_device_name(runtime.device)) if runtime.device.type == "cuda" else None
    emit(
        runtime,
        {
            "event": "start",
            "preset": config.preset,
            "world_size": runtime.world_size,
            "device": runtime.device.type,
            "restart": runtime.restart_count,
            "resumed_from": resumed_from,
            "global_batch": batching.global_batch,
            "accumulation": batching.accumulation,
            "samples": progress.samples,
            "shutdown_budget_seconds": stop.known_budget_seconds,
        },
        every_node=True,
    )

    throughput = ThroughputMonitor(lambda r: emit(runtime, r, every_node=True), interval_s=config.throughput_interval_s)
    if runtime.is_node_main:
        throughput.start()
    loss_value = progress.loss  # a run resumed at its last step judges with the loss it ended on
    loop_started, steps_run, last_step_seconds = time.perf_counter(), 0, 0.0
    while progress.step < config.steps:
        step = progress.step
        faults.before_step(step)
        started = time.perf_counter()
        loss = torch.zeros((), device=runtime.device)
        for micro_step in range(batching.accumulation):  # the mean over the global batch's samples
            batch = data.batch(batching.first_sample(progress.samples, micro_step, runtime.rank))
            logits = model(batch.inputs)
            micro_loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten()) / batching.accumulation
            micro_loss.backward()
            loss += micro_loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        progress.step = step + 1
        progress.samples += batching.global_batch
        # One small collective per step: mean loss, and agreement on stopping, saving and committing. Reading
        # its result is the step's only host sync: the step ends when the device is done with it.
        agreed = StepAgreement(
            loss=loss,
            stop=stop.requested,
            save_due=checkpoints.due(progress.step, last_step_seconds) if checkpoints else False,
            write_done=checkpoints.write_done if checkpoints else True,
        ).reduce(runtime)
        step_seconds = last_step_seconds = time.perf_counter() - started
        steps_run += 1
        throughput.add(tokens_per_step, progress.step)
        loss_value = progress.loss = agreed.mean_loss
        if checkpoints:
            checkpoints.commit_if_durable(agreed.ranks_done_writing)
        if math.isnan(progress.initial_loss):
            progress.initial_loss = loss_value
        if progress.step % config.log_every == 0:
            tokens_per_s = tokens_per_step / step_seconds
            mfu = flops * tokens_per_s / (peak * 1e12 * runtime.world_size) if peak else None
            emit(
                runtime,
                {
                    "event": "step",
                    "step": progress.step,
                    "samples": progress.samples,
                    "loss": round(loss_value, 6),
                    "tokens_per_s": round(tokens_per_s, 1),
                    "step_time_s": round(step_seconds, 4),
                    "mfu": mfu,
                },
                every_node=True,
            )
        last_step = progress.step == config.steps
        save = agreed.save or last_step
        if checkpoints and agreed.stop and not last_step:
            save = final_save_fits(checkpoints, stop, runtime)
            if not save:
                emit(runtime, {"event": "final_checkpoint_skipped", "step": progress.step, "reason": "budget"})
        if checkpoints and save:
            checkpoints.save(progress.step, crash_before_commit=faults.crashes_in_checkpoint(progress.step))
        if agreed.stop and not last_step:
            break
    throughput.stop()
    data.close()
    if checkpoints:
        checkpoints.close()
    if progress.step < config.steps:
        stopped = {"event": "stopped", "reason": stop.reason, "step": progress.step, "exit_code": STOPPED_EXIT_CODE}
        emit(runtime, stopped, every_node=True)
        return STOPPED_EXIT_CODE

    train_seconds = time.perf_counter() - loop_started  # checkpoint stalls included
    summary = {
        "event": "summary",
        "step": progress.step,
        "samples": progress.samples,
        "loss": round(loss_value, 6),
        "initial_loss": round(progress.initial_loss, 6),
        "param_sha256": param_sha256(model),
        "resumed_from": resumed_from,
        "restart": runtime.restart_count,
        "tokens_per_s": round(tokens_per_step * steps_run / train_seconds, 1) if train_seconds else None,
    }
    emit(runtime, summary)
    code = 0
    if config.verdict:
        code = report_verdict(runtime, summary, checkpoints)
    return code


def job_mtbf_hours(config: TrainConfig, runtime: Runtime) -> float | None:
    """The whole job's MTBF: ``--job-mtbf-hours``, or ``--mtbf-hours`` (one instance's, as `llm-infra plan`
    means it) over the job's nodes."""
    if config.job_mtbf_hours is not None:
        return config.job_mtbf_hours
    return None if config.mtbf_hours is None else config.mtbf_hours / runtime.nodes


def peak_tflops(device_name: str) -> float | None:
    """Dense bf16 peak TFLOP/s of a GPU by its name (PEAK_TFLOPS), None when unknown."""
    return next((tflops for fragment, tflops in PEAK_TFLOPS if fragment in device_name), None)


def report_verdict(runtime: Runtime, summary: dict[str, Any], checkpoints: CheckpointManager | None) -> int:
    """The validation job's verdict: the loss fell and the run ends on a complete checkpoint."""
    newest = checkpoints.committed()[0].name if checkpoints and checkpoints.committed() else None
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
