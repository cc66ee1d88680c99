"""Resilience benchmarks with the training payload under torchrun (2 ranks), in one run; prints ratios.

    python bench/resilience_bench.py [--preset tiny] [--steps 60] [--nproc 2]

- overhead: tokens/s with checkpoints (async, every N steps) and the per-step health/stop
  collective vs. the same loop without checkpoints (goal: <= 3 % slower);
- recovery: wall time from the killed step to the first step of the resumed run, minus
  torchrun's restart back-off (the monitor interval here).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"
MONITOR_INTERVAL = 0.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(args: list[str], nproc: int, max_restarts: int = 0) -> tuple[list[dict], list[dict]]:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        f"--max-restarts={max_restarts}",
        f"--monitor-interval={MONITOR_INTERVAL}",
        str(WORKLOADS / "train.py"),
        *args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"train.py failed:\n{result.stderr[-3000:]}")
    parse = lambda text: [json.loads(line) for line in text.splitlines() if line.startswith("{")]  # noqa: E731
    return parse(result.stdout), parse(result.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--checkpoint-every", type=int, default=20)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--extra", default="--batch-size=2 --seq-len=64", help="more train.py flags")
    args = parser.parse_args()
    common = [f"--preset={args.preset}", f"--steps={args.steps}", "--log-every=1", *args.extra.split()]
    with tempfile.TemporaryDirectory() as tmp:
        bare, _ = torchrun(common, args.nproc)
        resilient, _ = torchrun(
            common + [f"--checkpoint-dir={tmp}/a", f"--checkpoint-every={args.checkpoint_every}", "--async-checkpoint"],
            args.nproc,
        )
        fail_at = args.steps // 2
        recovered, faults = torchrun(
            common
            + [f"--checkpoint-dir={tmp}/b", f"--checkpoint-every={args.checkpoint_every}", f"--fail-at-step={fail_at}"],
            args.nproc,
            max_restarts=1,
        )
    bare_tps, resilient_tps = bare[-1]["tokens_per_s"], resilient[-1]["tokens_per_s"]
    fault_time = next(r["time"] for r in faults if r.get("event") == "fault")
    restart = next(i for i, r in enumerate(recovered) if r.get("event") == "start" and r.get("restart") == 1)
    first_step = next(r["time"] for r in recovered[restart:] if r.get("event") == "step")
    report = {
        "preset": args.preset,
        "ranks": args.nproc,
        "bare_tokens_per_s": bare_tps,
        "resilient_tokens_per_s": resilient_tps,
        "overhead_fraction": round(1 - resilient_tps / bare_tps, 4),
        "recovery_seconds": round(first_step - fault_time - MONITOR_INTERVAL, 2),
        "resumed_from_step": recovered[restart]["resumed_from"],
        "goals": {"overhead_fraction": "<= 0.03"},
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
