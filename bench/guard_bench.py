"""What the training-health guard adds to a step, measured interleaved in one job; prints the ratio.

    python bench/guard_bench.py [--preset tiny] [--pairs 400] [--extra "--batch-size=2 --seq-len=64"]

Whole-run pairs (resilience_bench.py --compare guard) cannot resolve a cost this small on a shared
machine: their spread is tens of percent. Here one 2-rank torchrun job alternates, ``--pairs`` times,
the per-step agreement as train.py runs it (each rank's non-finite flag and the gradient norm in the
all-reduce, the two rank-position writes to the store, the guard's verdict) with the agreement without
the guard (train.py's before it), and reports the median difference against the median time of the
job's own train steps: the guard's share of a step. Goal: at most 1 %. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

GOAL = 0.01


def launch(args: argparse.Namespace) -> int:
    """Run this script under torchrun (2 ranks, CPU) and print its verdict."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _launch import run_bounded

    from llm_infra.rehearsal import control_plane

    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=2",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{control_plane.free_port()}",
        __file__,
        f"--preset={args.preset}",
        f"--pairs={args.pairs}",
        f"--extra={args.extra}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    stdout, _, _ = run_bounded(command, env=env, timeout=args.timeout, what="guard_bench worker")
    (result,) = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    print(json.dumps(result))
    share = result["guard_share_of_step"]
    print(
        f"health guard: +{result['guard_ms']:.3f} ms a step ({result['with_guard_ms']:.3f} vs "
        f"{result['without_guard_ms']:.3f} ms for the agreement) of a {result['step_ms']:.1f} ms step: "
        f"{share:.3%} (goal <= {GOAL:.0%})"
    )
    return 0


def worker(args: argparse.Namespace) -> None:
    """One rank: a few train steps for scale, then the agreement with and without the guard, alternating."""
    import torch
    import torch.distributed as dist

    from llm_infra.workloads import train
    from llm_infra.workloads.checkpointing import CheckpointVote
    from llm_infra.workloads.stopping import StopSignal

    dist.init_process_group("gloo")
    runtime = train.Runtime(dist.get_rank(), dist.get_world_size(), torch.device("cpu"), 0, write_line=lambda _: None)
    config = train.parse_config([f"--preset={args.preset}", "--steps=100000", *args.extra.split()])
    trainer = train.Trainer(config, runtime, StopSignal(30.0))
    vote = CheckpointVote(save_due=False, write_done=True)
    step_times = []
    for _ in range(6):
        started = time.perf_counter()
        trainer.train_step()
        step_times.append(time.perf_counter() - started)

    def without_guard(loss: torch.Tensor) -> None:
        train.reduce_numbers([loss, float(trainer.stop.requested), 0.0, 1.0], runtime.device)

    def with_guard(loss: torch.Tensor, norm: torch.Tensor, step: int) -> None:
        trainer.positions.arrive(step, "forward", 0.1)
        trainer.positions.arrive(step, "agreement", 0.1)
        agreed = train.agree_on_step(loss, norm, trainer.stop, vote, runtime)
        trainer.guard.cause(step, agreed.ranks_non_finite, agreed.mean_loss, agreed.grad_norm)

    loss, norm = torch.tensor(2.0), torch.tensor(1.0)
    without, with_ = [], []
    for pair in range(args.pairs):
        started = time.perf_counter()
        without_guard(loss * 1.0)
        without.append(time.perf_counter() - started)
        started = time.perf_counter()
        with_guard(loss * 1.0, norm * 1.0, pair)
        with_.append(time.perf_counter() - started)
    a, b, step = statistics.median(without), statistics.median(with_), statistics.median(step_times[1:])
    if runtime.is_main:
        result = {
            "without_guard_ms": round(a * 1e3, 4),
            "with_guard_ms": round(b * 1e3, 4),
            "guard_ms": round((b - a) * 1e3, 4),
            "step_ms": round(step * 1e3, 2),
            "guard_share_of_step": round((b - a) / step, 6),
            "pairs": args.pairs,
            "preset": args.preset,
        }
        print(json.dumps(result), flush=True)
    trainer.data.close()
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--extra", default="--batch-size=2 --seq-len=64", help="more train.py flags")
    parser.add_argument("--timeout", type=float, default=300, help="seconds for the job (default 300)")
    args = parser.parse_args()
    if "RANK" in os.environ:
        worker(args)
        return 0
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
