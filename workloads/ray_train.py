"""train.py's run under Ray Train: the same loop, model, FSDP2, DCP checkpoints, flags and JSON lines.

    python ray_train.py --num-workers 16 --use-gpu --storage-path /fsx/ray/results --name llama-8b \\
        --preset 8b --steps 1000 --checkpoint-every 100

Every train.py flag means the same here; on top come --num-workers, --storage-path (Ray Train's run
storage, which every node must reach: FSx), --name, --use-gpu, --max-failures and
--expect-efa-transport. Checkpoints go to --checkpoint-dir (default <storage-path>/<name>/checkpoints)
through train.py's CheckpointManager, so that

- a worker that dies makes Ray Train (FailureConfig) restart the worker group, and the loop resumes
  from the newest committed checkpoint;
- a new driver with the same flags (a resubmitted RayJob, a restarted head) resumes from the same
  checkpoint dir: nothing the run needs lives in the Ray cluster.

Rank 0's JSON lines (train.py's, the summary with ``param_sha256`` last) reach this driver's stdout
through a Ray queue. With --expect-efa-transport every worker group first checks, as
allreduce_bench.py does, that NCCL's inter-node channels run on EFA with GPUDirect RDMA, and the run
ends before training when they do not. Exit code: train.py's (0, or 1 for a failed --verdict or
transport check), 1 when Ray Train gives up, 2 for bad flags. Imports torch, Ray and the payload.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

import ray
import ray.train
import torch.distributed as dist
from accelerator import reduce_numbers
from allreduce_bench import measure, network_transport, transport_problems
from ray.train.torch import TorchConfig, TorchTrainer
from ray.util.queue import Empty, Queue
from stopping import StopSignal
from train import Runtime, TrainConfig, config_from_args, config_parser, emit, train

HERE = Path(__file__).resolve().parent
# NCCL writes its INFO log here when the transport is checked (%h host, %p pid), read back per process.
NCCL_LOG_PATTERN = "/tmp/llm-infra-nccl.%h.%p.log"
NCCL_CHECK_BYTES = 64 * 2**20  # one all-reduce this large connects the inter-node channels
GROUP_STARTS = "worker_group_starts"


def main(argv: list[str] | None = None) -> int:
    args, config = parse_args(argv)
    run_dir = Path(args.storage_path) / args.name
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)}
    if args.expect_efa_transport:  # NCCL reads these when the worker's first communicator starts
        env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_DEBUG_FILE": NCCL_LOG_PATTERN})
    lines: Queue = Queue(actor_options={"num_cpus": 0})
    trainer = TorchTrainer(
        train_worker,
        train_loop_config={
            "config": asdict(config),
            "run_dir": str(run_dir),
            "lines": lines,
            "expect_efa_transport": args.expect_efa_transport,
        },
        torch_config=TorchConfig(timeout_s=config.pg_timeout_seconds),
        scaling_config=ray.train.ScalingConfig(num_workers=args.num_workers, use_gpu=args.use_gpu),
        run_config=ray.train.RunConfig(
            name=args.name,
            storage_path=args.storage_path,
            failure_config=ray.train.FailureConfig(max_failures=args.max_failures),
            worker_runtime_env={"env_vars": env},  # type: ignore[call-arg]  # Train V2's RunConfig
        ),
    )
    done = threading.Event()
    codes: list[int] = []
    printer = threading.Thread(target=print_lines, args=(lines, done, codes), daemon=True)
    printer.start()
    try:
        trainer.fit()
    except ray.train.TrainingFailedError as error:  # Ray Train gave up (max_failures spent)
        failure: str | None = repr(error)
    else:
        failure = None
    done.set()
    printer.join()
    if failure:
        print(json.dumps({"event": "failed", "error": failure, "max_failures": args.max_failures}), flush=True)
    return codes[-1] if codes and not failure else 1


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, TrainConfig]:
    """The Ray flags, and train.py's config (its checkpoint dir defaulting to the run's storage)."""
    parser = config_parser(__doc__)
    ray_flags = parser.add_argument_group("Ray Train")
    ray_flags.add_argument("--num-workers", type=int, required=True, help="one per GPU (or per CPU process)")
    ray_flags.add_argument("--storage-path", required=True, help="Ray Train's run storage, on every node")
    ray_flags.add_argument("--name", default="ray-train", help="the run: same name and storage, same run")
    ray_flags.add_argument("--use-gpu", action="store_true", help="one GPU per worker, NCCL")
    ray_flags.add_argument("--max-failures", type=int, default=3, help="worker-group restarts before giving up")
    ray_flags.add_argument(
        "--expect-efa-transport",
        action="store_true",
        help="end the run unless NCCL's inter-node channels run on EFA (OFI plugin) with GPUDirect RDMA",
    )
    args = parser.parse_args(argv)
    if args.num_workers < 1:
        parser.error(f"--num-workers: {args.num_workers} must be >= 1")
    if args.max_failures < -1:
        parser.error(f"--max-failures: {args.max_failures} must be >= 0 (or -1: no limit)")
    if args.checkpoint_dir is None:
        args.checkpoint_dir = str(Path(args.storage_path) / args.name / "checkpoints")
    return args, config_from_args(args, parser)


def print_lines(lines: Queue, done: threading.Event, codes: list[int]) -> None:
    """Print rank 0's JSON lines as they come, until the run is over and the queue empty; the run's
    exit code, last in the queue, goes to ``codes``."""
    while not (done.is_set() and lines.empty()):
        try:
            item = lines.get(timeout=0.5)
        except Empty:
            continue
        if isinstance(item, int):
            codes.append(item)
            continue
        sys.stdout.write(item)
        sys.stdout.flush()


def train_worker(job: dict[str, Any]) -> None:
    """Every Ray Train worker: train.py's run on the process group Ray Train set up."""
    import ray.train.torch

    context = ray.train.get_context()
    runtime = Runtime(
        rank=context.get_world_rank(),
        world_size=context.get_world_size(),
        device=ray.train.torch.get_device(),
        restart_count=group_start_count(Path(job["run_dir"])),
        write_line=job["lines"].put,
    )
    if job["expect_efa_transport"]:
        problems = nccl_transport_problems(runtime)
        emit(runtime, {"event": "nccl_transport", "verdict": "fail" if problems else "pass", "problems": problems})
        if problems:  # a misconfigured network stays misconfigured: no retry, no training
            finish(runtime, job["lines"], 1)
            return
    # Ray Train ends its workers itself (no signal reaches this thread): nothing requests a stop.
    code = train(TrainConfig(**job["config"]), runtime, StopSignal(budget_seconds=math.inf))
    finish(runtime, job["lines"], code)


def finish(runtime: Runtime, lines: Queue, code: int) -> None:
    """End the run as finished for Ray Train (a nonzero code is train.py's verdict, not a fault to
    retry); the driver exits with rank 0's ``code``."""
    if runtime.is_main:
        lines.put(code)
    ray.train.report({"exit_code": code})


def group_start_count(run_dir: Path) -> int:
    """How often this run's worker group started before this one (0 the first time), counted in the
    run's storage so that it spans group restarts and new drivers; train.py's ``restart``."""
    import ray.train.collective

    count = None
    if ray.train.get_context().get_world_rank() == 0:
        marker = run_dir / GROUP_STARTS
        count = int(marker.read_text()) if marker.is_file() else 0
        (run_dir / f".{GROUP_STARTS}.tmp").write_text(str(count + 1))
        os.replace(run_dir / f".{GROUP_STARTS}.tmp", marker)
    return int(ray.train.collective.broadcast_from_rank_zero(count))


def nccl_transport_problems(runtime: Runtime) -> list[str]:
    """allreduce_bench.py's transport check on this worker group: its all-reduce of a large tensor, then
    every rank reads its own NCCL log; a socket fallback or a channel without GPUDirect RDMA on any rank fails."""
    measure(NCCL_CHECK_BYTES, runtime.device, warmup=1, iters=1)
    log_glob = Path(NCCL_LOG_PATTERN).name.replace("%h", "*").replace("%p", str(os.getpid()))
    own_log = "".join(p.read_text(errors="replace") for p in Path(NCCL_LOG_PATTERN).parent.glob(log_glob))
    seen = network_transport(own_log)
    socket, ofi, without_gdr = reduce_numbers(
        [float(seen["socket"]), float(seen["ofi"]), float(seen["without_gdr"])], runtime.device, dist.ReduceOp.MAX
    )
    return transport_problems({"socket": socket > 0, "ofi": ofi > 0, "without_gdr": without_gdr > 0})


if __name__ == "__main__":
    sys.exit(main())
