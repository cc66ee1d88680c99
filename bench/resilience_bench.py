"""Resilience overhead of the training payload under torchrun (2 ranks), as paired runs; prints ratios.

    python bench/resilience_bench.py [--pairs 5] [--steps 60] [--checkpoint-every 20] [--compare all]

What the resilience features cost in steady training: tokens/s of a run WITH them (B) against the
same run WITHOUT them (A). The features: async checkpoints every ``--checkpoint-every`` steps, and
the per-step agreement (the one small all-reduce after every step that agrees on the loss, stop
requests, saves and finished writes; bench/_train_probe.py removes it where A has none).
``--compare``: ``all`` (default; B both, A neither), ``checkpoints`` (B both, A the agreement only:
the checkpoints' cost), ``agreement`` (B the agreement only, A neither) or ``guard`` (the training-health
guard's cost: B the agreement with the guard, as train.py runs, A the agreement without it: no non-finite
flag, no rank positions in the store, no verdict; neither checkpoints). Goal: B at most 3 % slower; the
guard, at most 1 %.

The runs alternate A B A B ... (``--pairs`` pairs), so a pair sees the same machine load; each pair
gives one ratio, and the result is the median of the ratios with their spread. Throughput is measured
over the step lines (rank 0's ``step`` events, from the end of step 1 to the end of the last step): it
includes every checkpoint's stall and the background writes' contention, not the start-up, the first
step's warm-up or the final save (a per-run cost, not a per-step one). Recovery time: recovery_bench.py.
A benchmark, not a test: pytest does not collect it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _launch import run_bounded  # bench/ is the script's folder: on sys.path

from llm_infra.rehearsal import control_plane  # reserved, held ports (the rendezvous binds with SO_REUSEADDR)

BENCH = Path(__file__).resolve().parent
WORKLOADS = BENCH.parent / "workloads"
GOAL = 0.03
GUARD_GOAL = 0.01


def measure(
    args: argparse.Namespace, flags: list[str], agreement: bool, guard: bool = True
) -> tuple[float, float, float]:
    """One torchrun job: its steady tokens/s from the first to the last step line, the mean seconds
    a step took in that window, and the share of it training was stalled by checkpoint saves (their
    ``stall_seconds``)."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={args.nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{control_plane.free_port()}",
        "--max-restarts=0",
        str(BENCH / "_train_probe.py"),
        f"--preset={args.preset}",
        f"--steps={args.steps}",
        "--log-every=1",
        *args.extra.split(),
        *flags,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "BENCH_PROBE": "0"}
    env["BENCH_NO_AGREEMENT"] = "0" if agreement else "1"
    env["BENCH_NO_GUARD"] = "0" if guard else "1"
    stdout, _, _ = run_bounded(command, env=env, timeout=args.timeout, what="train.py")
    records = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    steps = [r for r in records if r.get("event") == "step"]
    if len(steps) != args.steps:
        raise SystemExit(f"expected {args.steps} step lines, got {len(steps)}")
    window = steps[-1]["time"] - steps[0]["time"]
    tokens = (steps[-1]["samples"] - steps[0]["samples"]) * seq_len(args.extra)
    stalls = [r["stall_seconds"] for r in records if r.get("event") == "checkpoint" and r["step"] < args.steps]
    return tokens / window, window / (len(steps) - 1), sum(stalls) / window


def seq_len(extra: str) -> int:
    """train.py's --seq-len among the extra flags (its default, 128, otherwise)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--seq-len", type=int, default=128)
    return parser.parse_known_args(extra.split())[0].seq_len


def percent(fraction: float) -> str:
    return f"{fraction * 100:+.1f} %"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5, help="A B pairs (default 5)")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--checkpoint-every", type=int, default=20)
    parser.add_argument("--sync", action="store_true", help="blocking checkpoints in B instead of async")
    parser.add_argument(
        "--compare",
        choices=("all", "checkpoints", "agreement", "guard"),
        default="all",
        help="B both features vs A neither (all, default); B both vs A the agreement only (checkpoints); "
        "B the agreement only vs A neither (agreement); B the agreement with the health guard vs A without (guard)",
    )
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--extra", default="--batch-size=2 --seq-len=64", help="more train.py flags, both runs")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per run (default 300)")
    args = parser.parse_args()
    if args.pairs < 1 or not 0 < args.checkpoint_every < args.steps:
        parser.error("need --pairs >= 1 and 0 < --checkpoint-every < --steps")
    saves = "blocking" if args.sync else "async"
    checkpoints = f"{saves} checkpoints every {args.checkpoint_every} steps"
    guard = args.compare == "guard"
    a_agrees, b_saves = args.compare in ("checkpoints", "guard"), args.compare not in ("agreement", "guard")
    a_name = "per-step agreement only" if a_agrees else "no checkpoints, no per-step agreement"
    b_name = f"{checkpoints} + per-step agreement" if b_saves else "per-step agreement only"
    if guard:
        a_name, b_name = "per-step agreement without the health guard", "per-step agreement with the health guard"
    print(f"A: {a_name}\nB: {b_name}\n{args.nproc} ranks, {args.preset}, {args.steps} steps, {args.extra}")
    header = f"{'pair':>4}  {'A tokens/s':>10}  {'B tokens/s':>10}  {'B/A':>6}  {'overhead':>9}  {'+ms/step':>8}"
    header += f"  {'B stalled':>9}"
    print(header, flush=True)
    ratios, extra_ms = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(1, args.pairs + 1):
            a, a_step, _ = measure(args, [], agreement=a_agrees, guard=not guard)
            flags = [f"--checkpoint-dir={tmp}/{pair}", f"--checkpoint-every={args.checkpoint_every}"]
            flags += [] if args.sync else ["--async-checkpoint"]
            b, b_step, stalled = measure(args, flags if b_saves else [], agreement=True)
            ratios.append(b / a)
            extra_ms.append((b_step - a_step) * 1000)
            row = f"{pair:>4}  {a:>10.1f}  {b:>10.1f}  {b / a:>6.3f}  {percent(1 - b / a):>9}  {extra_ms[-1]:>8.1f}"
            row += f"  {stalled:>9.1%}"
            print(row, flush=True)
    median = statistics.median(ratios)
    spread = f"min {percent(1 - max(ratios))}, max {percent(1 - min(ratios))}"
    if len(ratios) >= 4:
        low, _, high = statistics.quantiles(ratios, n=4)
        spread += f", IQR {percent(1 - high)} .. {percent(1 - low)}"
    print(
        f"resilience overhead (B: {b_name}; A: {a_name}), median of {args.pairs} pairs: "
        f"{percent(1 - median)} (B/A {median:.3f}; {spread}; {statistics.median(extra_ms):+.1f} ms a step); "
        f"goal <= {GUARD_GOAL if guard else GOAL:.0%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
