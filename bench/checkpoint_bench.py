"""Checkpoint benchmarks, measured in one run on this machine; prints ratios (not a test).

    python bench/checkpoint_bench.py [--preset state-570mb] [--dir /fsx/bench] [--repeats 3]

- async save stall / sync save time, same state, same disk, from the second save of a run on (the
  first also allocates the staging buffers: reported apart) (goal <= 0.1);
- checkpoint write throughput / raw write throughput of the same number of bytes (goal >= 0.7), with the
  files' CRC-32 digests taken as they are written (what runs) and without (DCP's plain writer): the digest
  may cost at most 5 % of that ratio.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="state-570mb", choices=sorted(BENCH_PRESETS))
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--repeats", type=int, default=3)
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

    results: dict[str, list[float]] = {
        "sync": [],
        "sync_undigested": [],
        "async_first_stall": [],
        "async_stall": [],
        "raw": [],
        "bytes": [],
    }
    digesting_writer = checkpointing.DigestingFileSystemWriter
    for repeat in range(args.repeats):
        for mode in ("sync", "sync_undigested", "async"):
            # Without digests: DCP's plain writer, as before they existed.
            plain = mode == "sync_undigested"
            checkpointing.DigestingFileSystemWriter = FileSystemWriter if plain else digesting_writer
            directory = root / f"{mode}-{repeat}"
            manager = CheckpointManager(
                directory, state=FixedState(state), keep=1, async_save=(mode == "async"), device=device
            )
            # Two saves by one manager, as in a run: the first async save also allocates (and on a GPU
            # pins) the staging buffers; the second reuses them, which is every later save's stall.
            stalls = []
            for step in (1, 2):
                manager.finalize()  # the previous background write is not part of this save's stall
                started = time.perf_counter()
                manager.save(step)
                stalls.append(time.perf_counter() - started)
            manager.close()
            if mode.startswith("sync"):
                results[mode].append(stalls[1])
                if mode == "sync":
                    results["bytes"].append(folder_bytes(directory / "step-00000002"))
            else:
                results["async_first_stall"].append(stalls[0])
                results["async_stall"].append(stalls[1])
            shutil.rmtree(directory)
        raw_file = root / f"raw-{repeat}.bin"
        results["raw"].append(raw_write_seconds(raw_file, int(results["bytes"][-1])))
        raw_file.unlink()

    size = statistics.median(results["bytes"])
    sync, stall, raw = (statistics.median(results[k]) for k in ("sync", "async_stall", "raw"))
    undigested = statistics.median(results["sync_undigested"])
    report = {
        "preset": args.preset,
        "checkpoint_bytes": int(size),
        "sync_save_s": round(sync, 4),
        "async_first_stall_s": round(statistics.median(results["async_first_stall"]), 4),
        "async_stall_s": round(stall, 4),
        "async_stall_over_sync": round(stall / sync, 3),
        "checkpoint_write_gbps": round(size / sync / 1e9, 3),
        "raw_write_gbps": round(size / raw / 1e9, 3),
        "checkpoint_over_raw_throughput": round(raw / sync, 3),
        "checkpoint_over_raw_throughput_undigested": round(raw / undigested, 3),
        "digest_cost": round(1 - undigested / sync, 3),  # the fall of the ratio the digests cause
        "goals": {
            "async_stall_over_sync": "<= 0.1",
            "checkpoint_over_raw_throughput": ">= 0.7",
            "digest_cost": "<= 0.05",
        },
    }
    print(json.dumps(report, indent=2))
    dist.destroy_process_group()
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
