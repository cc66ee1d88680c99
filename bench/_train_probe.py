"""Entry point for the benchmarks: ``workloads/train.py`` unchanged, with optional probes.

    torchrun ... bench/_train_probe.py <train.py flags>       (a fresh interpreter per worker)
    python bench/_fork_launcher.py <torchrun flags> <train.py flags>   (workers forked, see there)

Not a benchmark itself (resilience_bench.py and recovery_bench.py launch it). Set by environment:

- ``BENCH_PROBE=1``: each rank writes JSON lines ``{"event": "probe", "phase": ..., "rank": ...,
  "restart": ..., "time": ...}`` to stderr at the boundaries train.py has no line for: the process's
  start (from /proc, before the interpreter ran a line), the interpreter ready, ``import torch`` done,
  every payload import done, process group up, model built, checkpoint manager starting (optimizer,
  scheduler and data built) and ready, checkpoint loaded. train.py's own lines carry the rest
  (``start``, ``step``). A forked worker inherits its imports: its three import stamps come at once.
- ``BENCH_NO_AGREEMENT=1``: the per-step agreement all-reduce is replaced by each rank's own numbers
  (what a loop without that collective costs). Only for runs without checkpoints or stop requests:
  nothing is agreed then.
- ``BENCH_NO_GUARD=1``: the per-step agreement without the training-health guard (no non-finite flag
  joins it, no rank position is written to the store, no verdict is judged): what the guard costs.

The probes wrap functions by name (train.init_distributed, train.build_model, CheckpointManager's
``__init__`` and ``restore``); a name that is gone is skipped, so a refactored payload still runs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

WORKLOADS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workloads")
IMPORT_PHASES = ("interpreter_ready", "torch_imported", "payload_imported")


def stamp(phase: str, at: float | None = None) -> None:
    if os.environ.get("BENCH_PROBE") == "1":
        record = {
            "event": "probe",
            "phase": phase,
            "rank": int(os.environ.get("RANK", "0")),
            "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
            "time": round(time.time() if at is None else at, 4),
        }
        os.write(2, (json.dumps(record) + "\n").encode())  # one unbuffered write: ranks never interleave


def process_start_time() -> float | None:
    """Wall-clock time this process was created (fork), from /proc (Linux); 10 ms resolution."""
    try:
        with open("/proc/self/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        started_after_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - started_after_boot)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def stamp_process_start() -> None:
    started = process_start_time()
    if started is not None:
        stamp("process_start", started)


def wrap(owner: object, name: str, before: str | None, after: str | None) -> None:
    original = getattr(owner, name, None)
    if original is None:
        return

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before:
            stamp(before)
        result = original(*args, **kwargs)
        if after:
            stamp(after)
        return result

    setattr(owner, name, wrapper)


def local_sum(values: Any, device: Any, op: Any = None) -> list[float]:
    """reduce_numbers without the collective: a SUM over ranks that all hold this rank's numbers."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    return [float(v) * world_size for v in values]


def prepare(*, stamps: bool) -> Any:
    """Import torch and the payload (stamping each), install the probes; returns the train module."""
    if WORKLOADS not in sys.path:
        sys.path.insert(0, WORKLOADS)
    import torch  # noqa: F401

    if stamps:
        stamp("torch_imported")
    import checkpointing
    import train

    if stamps:
        stamp("payload_imported")
    wrap(train, "init_distributed", None, "process_group_up")
    wrap(train, "build_model", None, "model_built")
    wrap(checkpointing.CheckpointManager, "__init__", "checkpoint_manager_init", "checkpoint_manager_ready")
    wrap(checkpointing.CheckpointManager, "restore", None, "checkpoint_loaded")
    if os.environ.get("BENCH_NO_AGREEMENT") == "1":
        train.reduce_numbers = local_sum  # only train.py's per-step agreement calls it by this name
    if os.environ.get("BENCH_NO_GUARD") == "1":
        train.agree_on_step = agree_without_guard
        train.RankPositions.arrive = lambda *args, **kwargs: None
        train.HealthGuard.cause = lambda *args, **kwargs: None
    return train


def agree_without_guard(loss: Any, grad_norm: Any, stop: Any, vote: Any, runtime: Any) -> Any:
    """train.agree_on_step as it was before the health guard: no non-finite flag, no gradient norm."""
    train = sys.modules["train"]
    loss_sum, stops, saves, writes_done = train.reduce_numbers(
        [loss, float(stop.requested), float(vote.save_due), float(vote.write_done)], runtime.device
    )
    world = runtime.world_size
    return train.Agreed(loss_sum / world, 0.0, 0, stops > 0, saves > 0, int(writes_done))


def forked_worker(*argv: str) -> int:
    """A worker forked from a launcher that ran :func:`prepare`: train.py's main, return code back."""
    stamp_process_start()
    for phase in IMPORT_PHASES:
        stamp(phase)
    return sys.modules["train"].main(list(argv))


def main() -> None:
    stamp_process_start()
    stamp("interpreter_ready")
    train = prepare(stamps=True)
    train.exit_process(train.main(sys.argv[1:]))


if __name__ == "__main__":
    main()
