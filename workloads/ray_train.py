"""train.py's run under Ray Train: the same loop, model, FSDP2, DCP checkpoints, flags and JSON lines.

    python ray_train.py --num-workers 16 --use-gpu --storage-path /fsx/ray/results --name llama-8b \\
        --preset 8b --steps 1000 --checkpoint-every 100

Every train.py flag means the same here; on top come --num-workers, --storage-path (Ray Train's run
storage, which every node must reach: FSx), --name, --use-gpu, --max-failures and
--expect-efa-transport. Checkpoints go to --checkpoint-dir (default <storage-path>/<name>/checkpoints;
required when --storage-path is a URI such as s3://bucket/runs, as DCP writes its shards to a file
system every node mounts: FSx) through train.py's CheckpointManager. Each committed checkpoint is reported to Ray Train
(``ray.train.report``) as a pointer: a directory holding only ``llm_infra_checkpoint.json`` (the
committed DCP folder, its step and commit record; never the shards), which Ray copies to its run
storage. So Ray's ``Result.checkpoint`` names the newest committed checkpoint, and

- a worker that dies makes Ray Train (FailureConfig) restart the worker group, which gets the last
  reported checkpoint from ``ray.train.get_checkpoint()`` and resumes from its folder (or a newer
  committed one beside it);
- a new driver with the same --name and --storage-path (a resubmitted RayJob, a restarted head) is
  Ray Train V2's restore: Ray hands it the run's last reported checkpoint, and it resumes the same way.

A pointer whose folder no longer holds that committed checkpoint is logged (``ray_checkpoint_unusable``)
and the run resumes from the newest committed checkpoint in --checkpoint-dir, as without Ray's.

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
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.fs
import ray
import ray.train
import torch.distributed as dist
from ray.train.torch import TorchConfig, TorchTrainer
from ray.util.queue import Empty, Queue

# The payload's own modules: plain names when run as a script from /workloads, the package's when
# imported as llm_infra.workloads (see train.py).
if TYPE_CHECKING or not __package__:
    from accelerator import reduce_numbers
    from allreduce_bench import measure, network_transport, transport_problems
    from checkpointing import COMMIT_MARKER
    from stopping import StopSignal
    from train import Runtime, TrainConfig, config_from_args, config_parser, emit, train
else:
    from .accelerator import reduce_numbers
    from .allreduce_bench import measure, network_transport, transport_problems
    from .checkpointing import COMMIT_MARKER
    from .stopping import StopSignal
    from .train import Runtime, TrainConfig, config_from_args, config_parser, emit, train

HERE = Path(__file__).resolve().parent
# NCCL writes its INFO log here when the transport is checked (%h host, %p pid), read back per process.
NCCL_LOG_PATTERN = "/tmp/llm-infra-nccl.%h.%p.log"
NCCL_CHECK_BYTES = 64 * 2**20  # one all-reduce this large connects the inter-node channels
GROUP_STARTS = "worker_group_starts"
# The one file of a checkpoint reported to Ray: where the committed DCP checkpoint is (never its shards).
POINTER_FILE = "llm_infra_checkpoint.json"


def main(argv: list[str] | None = None) -> int:
    args, config = parse_args(argv)
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)}
    if args.expect_efa_transport:  # NCCL reads these when the worker's first communicator starts
        env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_DEBUG_FILE": NCCL_LOG_PATTERN})
    lines: Queue = Queue(actor_options={"num_cpus": 0})
    trainer = TorchTrainer(
        train_worker,
        train_loop_config={
            "config": config.flat(),
            "run_dir": storage_join(args.storage_path, args.name),  # Ray's run folder (a URI for s3://)
            "lines": lines,
            "expect_efa_transport": args.expect_efa_transport,
        },
        torch_config=TorchConfig(timeout_s=config.run.pg_timeout_seconds),
        scaling_config=ray.train.ScalingConfig(num_workers=args.num_workers, use_gpu=args.use_gpu),
        run_config=ray.train.RunConfig(
            name=args.name,
            storage_path=args.storage_path,
            failure_config=ray.train.FailureConfig(max_failures=args.max_failures),
            # Ray keeps as many pointers as train.py keeps checkpoints (the newest always).
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=config.checkpoint.keep),
            worker_runtime_env={"env_vars": env},  # type: ignore[call-arg]  # Train V2's RunConfig
        ),
    )
    done = threading.Event()
    codes: list[int] = []
    printer = threading.Thread(target=print_lines, args=(lines, done, codes), daemon=True)
    printer.start()
    result = None
    try:
        result = trainer.fit()
    except ray.train.TrainingFailedError as error:  # Ray Train gave up (max_failures spent)
        failure: str | None = repr(error)
    else:
        failure = None
    done.set()
    printer.join()
    if result is not None and result.checkpoint is not None:  # the run's last checkpoint, as Ray holds it
        print(json.dumps({"event": "ray_result", **reported_checkpoint(result.checkpoint)}), flush=True)
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
    if not is_uri(args.storage_path):  # Ray's workers run in a working dir of their own: absolute paths
        args.storage_path = os.path.abspath(os.path.expanduser(args.storage_path))
    if args.checkpoint_dir is None:
        if is_uri(args.storage_path):
            parser.error(
                f"--checkpoint-dir: required with --storage-path {args.storage_path}: DCP writes the shards to "
                "a file system every node mounts (FSx), Ray's storage then holds only pointers to them"
            )
        args.checkpoint_dir = os.path.join(args.storage_path, args.name, "checkpoints")
    elif is_uri(args.checkpoint_dir):
        parser.error(f"--checkpoint-dir: {args.checkpoint_dir} must be a file system path (FSx), not a URI")
    args.checkpoint_dir = os.path.abspath(os.path.expanduser(args.checkpoint_dir))
    return args, config_from_args(args, parser)


def is_uri(path: str) -> bool:
    """Whether ``path`` names storage by URI (s3://bucket/prefix, file:///...) rather than a local path."""
    return "://" in path


def storage_join(storage: str, *parts: str) -> str:
    """``storage``/``parts`` as a string: a URI stays one (``Path`` would turn s3://b into s3:/b)."""
    return "/".join([storage.rstrip("/"), *parts])


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
        restart_count=group_start_count(job["run_dir"]),
        write_line=job["lines"].put,
    )
    if job["expect_efa_transport"]:
        problems = nccl_transport_problems(runtime)
        emit(runtime, {"event": "nccl_transport", "verdict": "fail" if problems else "pass", "problems": problems})
        if problems:  # a misconfigured network stays misconfigured: no retry, no training
            finish(runtime, job["lines"], 1)
            return
    runtime.on_checkpoint = lambda record: report_to_ray(runtime, record)
    config = TrainConfig.from_flat(job["config"])
    checkpoint_dir = checkpoint_dir_to_resume(runtime, str(config.checkpoint.dir))
    config = replace(config, checkpoint=replace(config.checkpoint, dir=checkpoint_dir))
    # Ray Train ends its workers itself (no signal reaches this thread): nothing requests a stop.
    code = train(config, runtime, StopSignal(budget_seconds=math.inf))
    finish(runtime, job["lines"], code)


def finish(runtime: Runtime, lines: Queue, code: int) -> None:
    """End the run as finished for Ray Train (a nonzero code is train.py's verdict, not a fault to
    retry); the driver exits with rank 0's ``code``."""
    if runtime.is_main:
        lines.put(code)
    ray.train.report({"exit_code": code})


def report_to_ray(runtime: Runtime, record: dict[str, Any]) -> None:
    """Report a committed checkpoint (CheckpointManager's ``on_commit`` record, the same on every rank)
    to Ray Train. Every rank reports (``ray.train.report`` is a barrier that every worker must reach as
    often as the others); rank 0 alone with a checkpoint: a fresh directory holding only
    :data:`POINTER_FILE`, which Ray copies into its run storage (synchronously, before this returns) and
    registers as the run's latest checkpoint."""
    metrics = {"step": record["step"], "checkpoint_path": record["path"]}
    if not runtime.is_main:
        ray.train.report(metrics)
        return
    pointer = {**record, "checkpoint_dir": str(Path(record["path"]).parent)}
    with tempfile.TemporaryDirectory(prefix="llm-infra-ray-checkpoint-") as pointer_dir:
        (Path(pointer_dir) / POINTER_FILE).write_text(json.dumps(pointer, sort_keys=True))
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(pointer_dir))


def read_pointer(checkpoint: ray.train.Checkpoint) -> dict[str, Any]:
    """The :data:`POINTER_FILE` of a checkpoint reported by :func:`report_to_ray` (on Ray's storage:
    a local folder, or S3)."""
    fs = checkpoint.filesystem or pyarrow.fs.LocalFileSystem()
    with fs.open_input_stream(f"{checkpoint.path}/{POINTER_FILE}") as stream:
        pointer = json.loads(stream.read().decode())
    if not isinstance(pointer, dict) or not isinstance(pointer.get("step"), int) or not pointer.get("path"):
        raise ValueError(f"{POINTER_FILE}: no step and path in {pointer!r}")
    return pointer


def checkpoint_uri(checkpoint: ray.train.Checkpoint) -> str:
    """Where Ray keeps ``checkpoint``: a local path, or a URI (s3://bucket/...)."""
    kind = (checkpoint.filesystem or pyarrow.fs.LocalFileSystem()).type_name
    return checkpoint.path if kind == "local" else f"{kind}://{checkpoint.path}"


def reported_checkpoint(checkpoint: ray.train.Checkpoint) -> dict[str, Any]:
    """What a Ray checkpoint points at: ``ray_checkpoint`` (Ray's copy), ``step`` and ``path`` (the
    committed DCP folder); an unreadable pointer gives ``error`` instead."""
    try:
        pointer = read_pointer(checkpoint)
    except (OSError, ValueError) as error:
        return {"ray_checkpoint": checkpoint_uri(checkpoint), "error": f"{type(error).__name__}: {error}"}
    return {"ray_checkpoint": checkpoint_uri(checkpoint), "step": pointer["step"], "path": pointer["path"]}


def resume_decision(checkpoint: ray.train.Checkpoint | None, checkpoint_dir: str) -> dict[str, Any] | None:
    """Where to resume, given the checkpoint Ray handed this worker group (None: Ray has none, train.py
    resumes from the newest committed checkpoint in ``checkpoint_dir``, if any).

    A ``resume_from_ray`` record when the pointer's folder still holds that committed checkpoint (its
    COMMITTED record names the same step): its ``checkpoint_dir`` is the folder's parent, where
    train.py's CheckpointManager loads the newest committed checkpoint: the reported one, or one
    committed after it whose report did not reach Ray. Otherwise a ``ray_checkpoint_unusable`` record
    whose ``checkpoint_dir`` is ``checkpoint_dir``, with the reason."""
    if checkpoint is None:
        return None
    found = reported_checkpoint(checkpoint)
    if "error" not in found:
        folder = Path(found["path"])
        try:
            committed = json.loads((folder / COMMIT_MARKER).read_text())
        except (OSError, ValueError) as error:
            found["error"] = f"{folder} holds no committed checkpoint ({type(error).__name__}: {error})"
        else:
            if not isinstance(committed, dict) or committed.get("step") != found["step"]:
                found["error"] = f"{folder / COMMIT_MARKER} is not step {found['step']}'s: {committed!r}"[:500]
    if "error" in found:
        return {"event": "ray_checkpoint_unusable", **found, "checkpoint_dir": checkpoint_dir}
    record = {"event": "resume_from_ray", **found, "checkpoint_dir": str(Path(found["path"]).parent)}
    if record["checkpoint_dir"] != checkpoint_dir:  # the run's own record wins over a changed flag
        record["checkpoint_dir_flag"] = checkpoint_dir
    return record


def checkpoint_dir_to_resume(runtime: Runtime, checkpoint_dir: str) -> str:
    """The checkpoint dir for train.py: where Ray's checkpoint (``ray.train.get_checkpoint()``) is, when
    Ray handed one that still loads (see :func:`resume_decision`), else ``checkpoint_dir``. Rank 0
    decides for every rank, and logs the decision."""
    import ray.train.collective

    decision = resume_decision(ray.train.get_checkpoint(), checkpoint_dir) if runtime.is_main else None
    decision = ray.train.collective.broadcast_from_rank_zero(decision)
    if decision is None:
        return checkpoint_dir
    if decision["event"] == "ray_checkpoint_unusable" and runtime.is_main:
        print(json.dumps(decision), file=sys.stderr, flush=True)
    emit(runtime, decision)
    return str(decision["checkpoint_dir"])


def group_start_count(run_dir: str) -> int:
    """How often this run's worker group started before this one (0 the first time), counted in the
    run's storage (``run_dir``: a local path or a URI such as s3://bucket/runs/name) so that it spans
    group restarts and new drivers; train.py's ``restart``."""
    import ray.train.collective

    count = None
    if ray.train.get_context().get_world_rank() == 0:
        fs, path = pyarrow.fs.FileSystem.from_uri(run_dir)
        marker, tmp = f"{path}/{GROUP_STARTS}", f"{path}/.{GROUP_STARTS}.tmp"
        fs.create_dir(path, recursive=True)
        count = 0
        if fs.get_file_info(marker).type == pyarrow.fs.FileType.File:
            with fs.open_input_stream(marker) as stream:
                count = int(stream.read().decode())
        with fs.open_output_stream(tmp) as out:
            out.write(str(count + 1).encode())
        fs.move(tmp, marker)  # a rename on a file system; S3 writes whole objects anyway
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
