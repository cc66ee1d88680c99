"""All-reduce bandwidth across every rank (torchrun), with a pass/fail gate. torch + stdlib only.

    torchrun --nnodes 2 --nproc-per-node 8 allreduce_bench.py --sizes 8M,512M,2G --min-busbw-gbps 375

algbw = bytes / time; busbw = algbw x 2(n-1)/n (the NCCL-tests convention: the bandwidth each
link must carry for a ring all-reduce). The gate applies to the largest size. With
``--expect-efa-transport`` (a job across nodes with EFA), NCCL's own log must show its inter-node
channels on the OFI plugin (libfabric/EFA) with GPUDirect RDMA, never on sockets: a socket
fallback can still pass a low bandwidth gate. Every rank's GPU driver must be the same version.
The last output line is a JSON verdict; the exit code is 0 (pass) or 1 (fail).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

# The payload's own modules: plain names when run as a script from /workloads, the package's when
# imported as llm_infra.workloads (see train.py).
if TYPE_CHECKING or not __package__:
    from accelerator import device_and_backend, exit_process, reduce_numbers, synchronize
else:
    from .accelerator import device_and_backend, exit_process, reduce_numbers, synchronize

UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
# NCCL INFO lines for each channel's connection, e.g. "... [send] via NET/AWS Libfabric/0/GDRDMA" or
# "... via NET/Socket/0" (the network plugin's name, the device, /GDRDMA when GPUDirect RDMA is used).
NET_CHANNEL = re.compile(r"via NET/(?P<net>[^/\n]+)/(?P<dev>\d+)(?P<gdr>/GDRDMA)?")


def parse_size(text: str) -> int:
    match = re.fullmatch(r"(\d+)([KMG]?)B?", text.strip().upper())
    if not match:
        raise argparse.ArgumentTypeError(f"size {text!r}: use bytes with an optional K, M or G suffix, e.g. 512M")
    return int(match[1]) * UNITS[match[2]]


def bus_bandwidth(algbw: float, world_size: int) -> float:
    return algbw * 2 * (world_size - 1) / world_size if world_size > 1 else algbw


def measure(size_bytes: int, device: torch.device, warmup: int, iters: int) -> float:
    """Mean seconds per all-reduce of ``size_bytes`` (float32 elements)."""
    tensor = torch.ones(max(1, size_bytes // 4), dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(tensor)
    synchronize(device)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    synchronize(device)
    # The slowest rank defines the collective.
    (elapsed,) = reduce_numbers([time.perf_counter() - started], device, dist.ReduceOp.MAX)
    return elapsed / iters


def network_transport(nccl_log: str) -> dict[str, bool]:
    """What NCCL's inter-node channels ran on, from its INFO log."""
    nets = list(NET_CHANNEL.finditer(nccl_log))
    plugin = [m for m in nets if m["net"] != "Socket"]
    return {
        "socket": any(m["net"] == "Socket" for m in nets),
        "ofi": bool(plugin),
        "without_gdr": any(not m["gdr"] for m in plugin),
    }


def transport_problems(transport: dict[str, bool]) -> list[str]:
    """Why the inter-node transport is not EFA with GPUDirect RDMA (empty when it is)."""
    problems = []
    if transport["socket"]:
        problems.append("NCCL fell back to sockets (NET/Socket)")
    if not transport["ofi"]:
        problems.append("no channel on the OFI plugin (aws-ofi-nccl / EFA)")
    if transport["without_gdr"]:
        problems.append("channels without GPUDirect RDMA")
    return problems


def driver_version() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "none"
    return out.strip().splitlines()[0] if out.strip() else "none"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False)
    parser.add_argument("--sizes", default="8M,64M,512M,2G", help="comma list, e.g. 1M,2G")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--min-busbw-gbps", type=float, default=0.0, help="gate on the largest size (GB/s)")
    parser.add_argument("--json", action="store_true", help="one JSON line per size (default: a table)")
    parser.add_argument("--timeout-seconds", type=int, default=600)
    parser.add_argument(
        "--expect-efa-transport",
        action="store_true",
        help="fail unless NCCL's inter-node channels run on EFA (OFI plugin) with GPUDirect RDMA",
    )
    args = parser.parse_args(argv)
    sizes = sorted(parse_size(s) for s in args.sizes.split(","))

    log_dir = Path(tempfile.mkdtemp(prefix="nccl-log-"))
    if args.expect_efa_transport:  # NCCL reads these when its communicator starts
        os.environ["NCCL_DEBUG"] = "INFO"
        os.environ["NCCL_DEBUG_SUBSYS"] = "INIT,NET"
        os.environ["NCCL_DEBUG_FILE"] = str(log_dir / "nccl.%h.%p.log")
    device, backend = device_and_backend()
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout_seconds))
    rank, world = dist.get_rank(), dist.get_world_size()

    results = []
    for size in sizes:
        seconds = measure(size, device, args.warmup, args.iters)
        algbw = size / seconds / 1e9
        result = {
            "size_bytes": size,
            "time_us": round(seconds * 1e6, 1),
            "algbw_gbps": round(algbw, 3),
            "busbw_gbps": round(bus_bandwidth(algbw, world), 3),
        }
        results.append(result)
        if rank == 0:
            busbw = result["busbw_gbps"]
            table = f"{size:>14d} B {result['time_us']:>12.1f} us  algbw {algbw:8.2f}  busbw {busbw:8.2f} GB/s"
            print(json.dumps(result) if args.json else table, flush=True)
    problems = []
    if results[-1]["busbw_gbps"] < args.min_busbw_gbps:
        problems.append(f"busbw {results[-1]['busbw_gbps']} GB/s below {args.min_busbw_gbps}")
    if args.expect_efa_transport:
        own_log = "".join(p.read_text(errors="replace") for p in log_dir.glob(f"nccl.*.{os.getpid()}.log"))
        seen = network_transport(own_log)
        socket, ofi, without_gdr = reduce_numbers(
            [float(seen["socket"]), float(seen["ofi"]), float(seen["without_gdr"])], device, dist.ReduceOp.MAX
        )
        problems += transport_problems({"socket": socket > 0, "ofi": ofi > 0, "without_gdr": without_gdr > 0})
    drivers: list[str | None] = [None] * world
    dist.all_gather_object(drivers, driver_version())
    if len(set(drivers)) > 1:
        problems.append(f"GPU driver versions differ across ranks: {sorted(set(map(str, drivers)))}")
    if rank == 0:
        print(
            json.dumps(
                {
                    "verdict": "fail" if problems else "pass",
                    "problems": problems,
                    "world_size": world,
                    "backend": backend,
                    "busbw_gbps": results[-1]["busbw_gbps"],
                    "min_busbw_gbps": args.min_busbw_gbps,
                    "size_bytes": results[-1]["size_bytes"],
                    "driver": drivers[0],
                }
            ),
            flush=True,
        )
    dist.destroy_process_group()
    return 1 if problems else 0


if __name__ == "__main__":
    exit_process(main())
