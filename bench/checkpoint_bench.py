"""Checkpoint benchmarks, measured in one run on this machine; prints ratios (not a test).

    python bench/checkpoint_bench.py [--preset state-570mb] [--dir /fsx/bench] [--repeats 3] [--pairs 16]
                                     [--digest-only]

- async save stall / sync save time, same state, same disk, from the second save of a run on (the
  first also allocates the staging buffers: reported apart) (goal <= 0.1);
- checkpoint write throughput / raw write throughput of the same number of bytes (goal >= 0.7), with the
  files' CRC-32 digests taken as they are written (what runs) and without (DCP's plain writer): the digest
  may cost at most 5 % of that ratio. One manager saves alternately with digests and with DCP's plain
  writer, in pairs of alternating order (D P, P D, D P, ...: a drift of the machine's load or the page
  cache's state over the run cancels), each save after an ``os.sync()``; the cost is the median of the
  pairs' own ratios (1 - plain / digested save time), with the pairs' interquartile range, and the same
  ratio of each kind's fastest save (``digest_cost_best``).
One process, gloo (NCCL and gloo on a GPU, staging into pinned memory as training does): the
CheckpointManager of the training payload, unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemWriter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "workloads"))
import checkpointing  # noqa: E402
from checkpointing import CheckpointManager  # noqa: E402
from model import PRESETS, ModelArgs, Transformer  # noqa: E402


class FixedState:
    """The benchmark's state as the checkpoint manager takes a run's (DCP's Stateful): the same every save."""

    def __init__(self, state: dict) -> None:
        self.state = state

    def state_dict(self) -> dict:
        return self.state

    def load_state_dict(self, state: dict) -> None:
        self.state = state


# A model whose training state (fp32 weights + Adam's two moments: 12 bytes a parameter) is ~570 MB:
# large enough that a checkpoint's fixed costs (planning, metadata, a file per rank) do not dominate.
BENCH_PRESETS = {
    **PRESETS,
    "state-570mb": ModelArgs(dim=1024, n_layers=4, n_heads=16, n_kv_heads=8, ffn_hidden=2816, vocab_size=4096),
}


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def raw_write_seconds(path: Path, size: int, chunk: int = 64 * 2**20) -> float:
    """Write ``size`` bytes with plain file writes and fsync, as DCP's writer does per file."""
    block = os.urandom(min(chunk, size))
    started = time.perf_counter()
    with open(path, "wb") as handle:
        written = 0
        while written < size:
            written += handle.write(block[: min(len(block), size - written)])
        handle.flush()
        os.fsync(handle.fileno())
    return time.perf_counter() - started


def two_saves(directory: Path, state: dict, async_save: bool, device: torch.device) -> list[float]:
    """Two saves by one manager, as in a run; the seconds training waited for each. The first async save
    also allocates (and on a GPU pins) the staging buffers; the second reuses them, which is every later
    save's stall."""
    manager = CheckpointManager(directory, state=FixedState(state), keep=1, async_save=async_save, device=device)
    stalls = []
    for step in (1, 2):
        manager.finalize()  # the previous background write is not part of this save's stall
        started = time.perf_counter()
        manager.save(step)
        stalls.append(time.perf_counter() - started)
    manager.close()
    shutil.rmtree(directory)
    return stalls


def digest_pairs(directory: Path, state: dict, pairs: int, device: torch.device) -> list[tuple[float, float]]:
    """``pairs`` pairs of blocking saves by one manager, (digested, plain) seconds each, in alternating
    order; plain is DCP's own writer, as before digests existed (the manager takes the writer class from
    the module at each save)."""
    # No pruning by the manager (it runs in the background): the bench deletes each checkpoint before the next.
    manager = CheckpointManager(directory, state=FixedState(state), keep=2 * pairs + 1, async_save=False, device=device)
    digesting = checkpointing.DigestingFileSystemWriter
    manager.save(0)  # the first save plans and warms up: not measured
    step, results = 0, []
    for pair in range(pairs):
        seconds = {}
        for writer in (digesting, FileSystemWriter) if pair % 2 == 0 else (FileSystemWriter, digesting):
            checkpointing.DigestingFileSystemWriter = writer
            shutil.rmtree(directory / checkpointing.step_dir_name(step))
            step += 1
            os.sync()  # any dirty pages are written before the save, not during it
            started = time.perf_counter()
            try:
                manager.save(step)
            finally:
                checkpointing.DigestingFileSystemWriter = digesting
            seconds[writer] = time.perf_counter() - started
        results.append((seconds[digesting], seconds[FileSystemWriter]))
        print(json.dumps({"pair": pair, "digested_s": round(results[-1][0], 4), "plain_s": round(results[-1][1], 4)}))
    manager.close()
    shutil.rmtree(directory)
    return results


def checkpoint_bytes(directory: Path, state: dict, device: torch.device) -> int:
    """The size of one committed checkpoint of ``state``."""
    manager = CheckpointManager(directory, state=FixedState(state), keep=1, async_save=False, device=device)
    manager.save(1)
    manager.close()
    size = folder_bytes(directory / "step-00000001")
    shutil.rmtree(directory)
    return size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="state-570mb", choices=sorted(BENCH_PRESETS))
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--repeats", type=int, default=3, help="sync, async and raw writes")
    parser.add_argument("--pairs", type=int, default=16, help="pairs of digested and plain saves")
    parser.add_argument("--digest-only", action="store_true", help="only the digest's pairs (no async, no raw)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    # As in training: NCCL for the device's collectives, gloo for the background writes.
    backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    model = Transformer(BENCH_PRESETS[args.preset]).to(device)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.zeros(1, 8, dtype=torch.long, device=device)).sum().backward()
    optimizer.step()  # materialise the Adam moments: the state is ~3x the parameters
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    root = args.dir or Path(tempfile.mkdtemp(prefix="ckpt-bench-"))
    state_bytes = checkpoint_bytes(root / "size", state, device)

    pairs = digest_pairs(root / "digest", state, args.pairs, device)
    results: dict[str, list[float]] = {"sync": [], "async_first_stall": [], "async_stall": [], "raw": []}
    for repeat in range(0 if args.digest_only else args.repeats):
        results["sync"].append(two_saves(root / f"sync-{repeat}", state, False, device)[1])
        first, second = two_saves(root / f"async-{repeat}", state, True, device)
        results["async_first_stall"].append(first)
        results["async_stall"].append(second)
        raw_file = root / f"raw-{repeat}.bin"
        results["raw"].append(raw_write_seconds(raw_file, state_bytes))
        raw_file.unlink()
        print(json.dumps({"repeat": repeat, **{k: round(v[-1], 4) for k, v in results.items()}}), flush=True)

    size = state_bytes
    digested, plain = (statistics.median(seconds) for seconds in zip(*pairs, strict=True))
    # Each pair's own cost: the fall of checkpoint / raw throughput, 1 - (raw/digested) / (raw/plain).
    costs = sorted(1 - p / d for d, p in pairs)
    quartiles = statistics.quantiles(costs, n=4) if len(costs) > 1 else [costs[0]] * 3
    report: dict[str, object] = {
        "preset": args.preset,
        "checkpoint_bytes": int(size),
        "digest_pairs": len(costs),
        "save_digested_s": round(digested, 4),
        "save_plain_s": round(plain, 4),
        "digest_cost": round(statistics.median(costs), 4),
        "digest_cost_iqr": [round(quartiles[0], 4), round(quartiles[2], 4)],
        # Each kind's fastest save: what a quiet machine gives when other jobs' load makes the pairs noisy.
        "digest_cost_best": round(1 - min(p for _, p in pairs) / min(d for d, _ in pairs), 4),
    }
    if not args.digest_only:
        sync, stall, raw = (statistics.median(results[k]) for k in ("sync", "async_stall", "raw"))
        report |= {
            "sync_save_s": round(sync, 4),
            "async_first_stall_s": round(statistics.median(results["async_first_stall"]), 4),
            "async_stall_s": round(stall, 4),
            "async_stall_over_sync": round(stall / sync, 3),
            "checkpoint_write_gbps": round(size / sync / 1e9, 3),
            "raw_write_gbps": round(size / raw / 1e9, 3),
            "checkpoint_over_raw_throughput": round(raw / sync, 3),
        }
    report["goals"] = {
        "async_stall_over_sync": "<= 0.1",
        "checkpoint_over_raw_throughput": ">= 0.7",
        "digest_cost": "<= 0.05",
    }
    print(json.dumps(report, indent=2))
    dist.destroy_process_group()
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
