"""Recovery time of the training payload under torchrun, broken into phases; prints seconds and shares.

    python bench/recovery_bench.py [--repeats 3] [--variants torchrun/c10d/0.5 fork/c10d/0.1 ...] [--json F]

One run: a 2-rank torchrun job (``--max-restarts=1``) with checkpoints every
``--checkpoint-every`` steps is killed by ``--fail-at-step`` on rank 0 (os._exit, once per job) and
restarted by torchrun; recovery is the wall time from the fault to the end of the first step of the
restarted run (work lost since the last checkpoint is not counted). Its phases, from the payload's
JSON lines, torchrun's own log (``LOGLEVEL=INFO``, timestamped) and probes in each new worker
(bench/_train_probe.py: train.py unchanged, stamps at the boundaries it has no line for):

  detect       fault -> torchrun's agent acts (it polls its workers every --monitor-interval s)
  stop         -> the surviving workers are stopped (SIGTERM, exit), group marked FAILED
  rendezvous   -> the re-rendezvous is complete, the agent starts new workers
  spawn        -> the new worker processes exist (last of the ranks)
  interpreter  -> Python is up (site, .pth files), the probe's first line runs
  import torch -> ``import torch``
  import rest  -> the payload's modules (FSDP, DCP, ...)
  pg init      -> ``init_process_group`` returned (TCPStore, gloo full mesh: waits for every rank)
  model        -> model built on meta, sharded, materialised and initialised (in a fresh process this
                  includes the lazy ``import torch._dynamo`` a meta-device ``normal_`` triggers)
  optimizer    -> optimizer, its state-dict init, scheduler, data prefetcher (CheckpointManager starts)
  ckpt setup   -> CheckpointManager ready (directory, broadcasts, storage choice)
  ckpt load    -> newest checkpoint loaded and applied (DCP)
  first step   -> the first step of the restarted run done (its ``step`` line; FSDP lazy init, warm-up)

Each boundary is the moment the last rank passed it. ``--variants`` are launches to compare, as
LAUNCHER/RDZV/INTERVAL: ``torchrun`` (python -m torch.distributed.run: a fresh interpreter per worker)
or ``fork`` (bench/_fork_launcher.py: torchrun's own agent, but workers forked from a launcher that
has imported torch and the payload); rendezvous ``c10d`` or ``static``; torchrun's
``--monitor-interval``. The default compares the tests' set-up (torchrun/c10d/0.5) with one change at
a time. Runs alternate over the variants (A B C A B C ...), so all see the same machine load; per
variant the median of each phase over ``--repeats`` runs. Goal: <= 3 s on 2 CPU ranks. A benchmark,
not a test: pytest does not collect it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from _launch import run_bounded  # bench/ is the script's folder: on sys.path

from llm_infra.rehearsal import control_plane  # reserved, held ports (the rendezvous binds with SO_REUSEADDR)

BENCH = Path(__file__).resolve().parent
WORKLOADS = BENCH.parent / "workloads"
GOAL_SECONDS = 3.0
DEFAULT_VARIANTS = ("torchrun/c10d/0.5", "torchrun/c10d/0.1", "torchrun/static/0.1", "fork/c10d/0.1")
# glog-style lines of torch.distributed.elastic: I1204 09:57:36.825000 <pid> path/file.py:715] message
AGENT_LINE = re.compile(r"^[IWE](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) +(\d+) \S+\] (.*)$")
# (phase, boundary that ends it); the order of the timeline.
PHASES = [
    ("detect", "agent_noticed"),
    ("stop", "group_failed"),
    ("rendezvous", "workers_starting"),
    ("spawn", "process_start"),
    ("interpreter", "interpreter_ready"),
    ("import torch", "torch_imported"),
    ("import rest", "payload_imported"),
    ("pg init", "process_group_up"),
    ("model", "model_built"),
    ("optimizer", "checkpoint_manager_init"),
    ("ckpt setup", "checkpoint_manager_ready"),
    ("ckpt load", "checkpoint_loaded"),
    ("first step", "first_step"),
]


def agent_time(match: re.Match[str], now: datetime) -> float:
    """Epoch seconds of an agent log line (local time, no year in the format)."""
    month, day, hour, minute, second = (int(g) for g in match.groups()[:5])
    stamp = datetime(now.year, month, day, hour, minute, second, int(match.group(6).ljust(6, "0")[:6]))
    if stamp > now.replace(microsecond=0) and (stamp - now).days > 1:  # a run across New Year
        stamp = stamp.replace(year=now.year - 1)
    return stamp.timestamp()


def json_record(line: str) -> dict | None:
    start = line.find('{"')
    if start < 0:
        return None
    try:
        return json.loads(line[start:])
    except json.JSONDecodeError:
        return None


@dataclass(frozen=True)
class Variant:
    """How the job is launched: ``torchrun`` (a fresh interpreter per worker) or ``fork`` (workers forked
    from a launcher that has imported torch and the payload: bench/_fork_launcher.py), the rendezvous
    backend (``c10d``, or ``static`` on MASTER_ADDR/PORT) and torchrun's ``--monitor-interval``."""

    launcher: str
    rdzv: str
    monitor_interval: float

    @classmethod
    def parse(cls, text: str) -> Variant:
        try:
            launcher, rdzv, interval = text.split("/")
            variant = cls(launcher, rdzv, float(interval))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: LAUNCHER/RDZV/INTERVAL, e.g. torchrun/c10d/0.1") from None
        if launcher not in ("torchrun", "fork") or rdzv not in ("c10d", "static") or variant.monitor_interval <= 0:
            raise argparse.ArgumentTypeError(f"{text!r}: launcher torchrun|fork, rdzv c10d|static, interval > 0")
        return variant

    def __str__(self) -> str:
        return f"{self.launcher}/{self.rdzv}/{self.monitor_interval:g}"

    def command(self, probe: bool) -> list[str]:
        """The launcher and its flags, up to the training script."""
        port = control_plane.free_port()
        if self.rdzv == "c10d":
            rendezvous = ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}"]
        else:
            rendezvous = ["--rdzv-backend=static", "--master-addr=127.0.0.1", f"--master-port={port}"]
        if self.launcher == "fork":
            launcher = [sys.executable, str(BENCH / "_fork_launcher.py")]
        else:
            launcher = [sys.executable, "-m", "torch.distributed.run"]
        script = BENCH / "_train_probe.py" if probe or self.launcher == "fork" else WORKLOADS / "train.py"
        return [*launcher, *rendezvous, "--max-restarts=1", f"--monitor-interval={self.monitor_interval}", str(script)]


def run_once(args: argparse.Namespace, variant: Variant, workdir: Path) -> dict[str, float]:
    """One faulted and restarted job: the epoch time of each boundary that was seen."""
    command = [
        *variant.command(args.probe),
        f"--preset={args.preset}",
        f"--steps={args.steps}",
        f"--checkpoint-dir={workdir}",
        f"--checkpoint-every={args.checkpoint_every}",
        f"--fail-at-step={args.fail_at_step}",
        "--log-every=1",
        *args.extra.split(),
    ]
    command.insert(command.index("--max-restarts=1"), f"--nproc-per-node={args.nproc}")
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "LOGLEVEL": "INFO",  # torch.distributed.elastic's logger: the agent's restart steps, timestamped
        "BENCH_PROBE": "1" if args.probe else "0",
    }
    stdout, stderr, launcher_pid = run_bounded(command, env=env, timeout=args.timeout, what=str(variant), cwd=WORKLOADS)
    now = datetime.now()
    records = [r for r in map(json_record, stdout.splitlines() + stderr.splitlines()) if r]
    fault = next(r["time"] for r in records if r.get("event") == "fault")
    seen: dict[str, float] = {"fault": fault}
    lines = [m for m in map(AGENT_LINE.match, stderr.splitlines()) if m]
    # The agent's own lines (its pid: the launcher's); workers log in the same format.
    agent = [(agent_time(m, now), m.group(8)) for m in lines if int(m.group(7)) == launcher_pid]
    after = [(t, message) for t, message in agent if t >= fault - 0.001]

    def first(pattern: str) -> float | None:
        return next((t for t, message in after if re.search(pattern, message)), None)

    noticed = min((t for t, _ in after), default=None)
    for name, value in [
        ("agent_noticed", noticed),
        ("group_failed", first(r"Worker group FAILED")),
        ("workers_starting", first(r"Starting worker group")),
    ]:
        if value is not None:
            seen[name] = value
    for record in records:  # the moment the last rank of the restarted run passed each probe
        if record.get("event") == "probe" and record.get("restart") == 1:
            seen[record["phase"]] = max(seen.get(record["phase"], 0.0), record["time"])
    restarted = [r for r in records if r.get("event") == "start" and r.get("restart") == 1]
    if not restarted:
        raise SystemExit("the job was not restarted: no start line with restart 1")
    seen["resumed_from"] = restarted[0]["resumed_from"]
    if "checkpoint_manager_ready" not in seen:  # without probes: train.py's own lines
        storage = [r for r in records if r.get("event") == "checkpoint_storage" and r["time"] >= fault]
        if storage:
            seen["checkpoint_manager_ready"] = storage[0]["time"]
    seen.setdefault("checkpoint_loaded", restarted[0]["time"])
    steps = [r for r in records if r.get("event") == "step" and r["time"] >= restarted[0]["time"]]
    seen["first_step"] = steps[0]["time"]
    return seen


def phases(seen: dict[str, float]) -> dict[str, float]:
    """Seconds of each phase; a phase whose end was not seen is merged into the next ("a .. b"). Process
    start times come from /proc in 10 ms ticks: a few ms below zero reads as zero."""
    result, previous, merged = {}, seen["fault"], []
    for name, boundary in PHASES:
        merged.append(name)
        if boundary in seen:
            seconds = seen[boundary] - previous
            label = merged[0] if len(merged) == 1 else f"{merged[0]} .. {merged[-1]}"
            result[label] = 0.0 if -0.011 < seconds < 0 else seconds
            previous, merged = seen[boundary], []
    return result


def report(runs: dict[Variant, list[dict[str, float]]]) -> dict[Variant, float]:
    """One table: a row per phase, per variant the median seconds and the share of the phases' sum."""
    per_phase = {variant: [phases(seen) for seen in results] for variant, results in runs.items()}
    names = list(dict.fromkeys(name for results in per_phase.values() for p in results for name in p))
    rows: dict[str, list[str]] = {name: [] for name in names}
    for results in per_phase.values():
        phase_medians = {name: statistics.median(p.get(name, 0.0) for p in results) for name in names}
        phases_sum = sum(phase_medians.values())
        for name in names:
            rows[name].append(f"{phase_medians[name]:.2f} {phase_medians[name] / phases_sum:4.0%}")
    totals = {variant: [s["first_step"] - s["fault"] for s in results] for variant, results in runs.items()}
    medians = {variant: statistics.median(t) for variant, t in totals.items()}
    rows["total (median)"] = [f"{medians[v]:.2f}     " for v in runs]
    rows["each run's total"] = [" ".join(f"{t:.2f}" for t in totals[v]) for v in runs]
    width = max(len(name) for name in rows)
    column = max(len(cell) for cells in [*rows.values(), [str(v) for v in runs]] for cell in cells)
    print("\n" + f"{'phase: median s, share':<{width}}" + "".join(f"  {str(v):>{column}}" for v in runs))
    for name, cells in rows.items():
        print((f"{name:<{width}}" + "".join(f"  {cell:>{column}}" for cell in cells)).rstrip())
    return medians


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="runs per variant (default 3)")
    parser.add_argument(
        "--variants",
        type=Variant.parse,
        nargs="+",
        default=[Variant.parse(v) for v in DEFAULT_VARIANTS],
        metavar="LAUNCHER/RDZV/INTERVAL",
        help="launches to alternate: launcher torchrun|fork, rendezvous c10d|static, --monitor-interval "
        f"(default: {' '.join(DEFAULT_VARIANTS)}; the first is the tests' set-up)",
    )
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--fail-at-step", type=int, default=7)
    parser.add_argument("--extra", default="--batch-size=2 --seq-len=64", help="more train.py flags")
    parser.add_argument(
        "--no-probe",
        dest="probe",
        action="store_false",
        help="no probes (torchrun runs workloads/train.py itself): fewer phases; shows the probes cost nothing",
    )
    parser.add_argument("--json", type=Path, help="also write every run's boundary times (epoch s) here")
    parser.add_argument("--timeout", type=float, default=180, help="seconds per job (default 180)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if not 0 < args.checkpoint_every < args.fail_at_step < args.steps:
        parser.error("need 0 < --checkpoint-every < --fail-at-step < --steps (a checkpoint before the fault)")
    runs: dict[Variant, list[dict[str, float]]] = {variant: [] for variant in args.variants}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):  # A B C A B C ...: every variant sees the same machine load
            for index, variant in enumerate(args.variants):
                seen = run_once(args, variant, Path(tmp, f"r{repeat}-v{index}"))
                runs[variant].append(seen)
                total = seen["first_step"] - seen["fault"]
                print(f"run {repeat + 1}/{args.repeats} {variant}: {total:.2f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps({str(v): results for v, results in runs.items()}, indent=1))
    medians = report(runs)
    resumed = {seen["resumed_from"] for results in runs.values() for seen in results}
    summary = ", ".join(f"{variant} {total:.2f} s" for variant, total in medians.items())
    print(
        f"recovery, fault -> first resumed step ({args.nproc} ranks, {args.preset}, resumed from step "
        f"{'/'.join(map(str, sorted(resumed)))}, median of {args.repeats}): {summary}; goal <= {GOAL_SECONDS:g} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
