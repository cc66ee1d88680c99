"""Node health check for a GPU training node: prints one JSON verdict, exits 0 (pass) or 1 (fail).

Checks: GPU count and names (nvidia-smi), uncorrected ECC errors and pending retired pages,
Xid errors in the kernel log, EFA device count (sysfs, or ``fi_info -p efa``), free disk, /dev/shm
size, and optionally ``dcgmi diag -r <level>``. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

Runner = Callable[[list[str]], str]

GPU_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,name,ecc.errors.uncorrected.volatile.total,retired_pages.pending",
    "--format=csv,noheader,nounits",
]
XID = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)\): (?P<code>\d+)")
# Xids that mean the GPU or its memory needs attention (not application errors like 13/31/43).
FATAL_XIDS = {48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def run_command(command: list[str]) -> str:
    """Run a diagnostic command; its stdout, or a RuntimeError that names it."""
    if shutil.which(command[0]) is None and not os.access(command[0], os.X_OK):
        raise RuntimeError(f"{command[0]} not found")
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:2])} exited {result.returncode}: {result.stderr.strip()[:300]}")
    return result.stdout


def parse_gpus(csv_text: str) -> list[dict[str, str]]:
    """Rows of the nvidia-smi query above; '[N/A]' / 'N/A' fields are kept as they are."""
    rows = []
    for line in csv_text.strip().splitlines():
        index, name, ecc, retired = (field.strip() for field in line.split(","))
        rows.append({"index": index, "name": name, "ecc_uncorrected": ecc, "retired_pending": retired})
    return rows


def check_gpus(run: Runner, expected: int, expected_name: str | None) -> list[Check]:
    try:
        gpus = parse_gpus(run(GPU_QUERY))
    except (RuntimeError, ValueError) as err:
        return [Check("gpu_count", False, str(err))]
    checks = [Check("gpu_count", len(gpus) == expected, f"{len(gpus)} GPUs, expected {expected}")]
    names = sorted({g["name"] for g in gpus})
    name_ok = len(names) == 1 and (expected_name is None or expected_name in names[0])
    checks.append(Check("gpu_names", name_ok, ", ".join(names) or "none"))
    ecc = [g["index"] for g in gpus if g["ecc_uncorrected"].isdigit() and int(g["ecc_uncorrected"]) > 0]
    retired = [g["index"] for g in gpus if g["retired_pending"].lower() == "yes"]
    checks.append(
        Check(
            "ecc_errors",
            not ecc and not retired,
            f"uncorrected ECC on GPUs {ecc}; pending page retirement on {retired}"
            if ecc or retired
            else "no uncorrected ECC errors",
        )
    )
    return checks


def parse_xids(kernel_log: str) -> list[tuple[str, int]]:
    return [(m["pci"], int(m["code"])) for m in XID.finditer(kernel_log)]


def check_xids(run: Runner) -> Check:
    try:
        log = run(["dmesg", "--notime"])
    except RuntimeError as err:
        return Check("xid_errors", True, f"skipped: kernel log not readable ({err})")
    fatal = [(pci, code) for pci, code in parse_xids(log) if code in FATAL_XIDS]
    return Check("xid_errors", not fatal, f"fatal Xids: {fatal}" if fatal else "no fatal Xid errors")


def count_efa_devices(sysfs_root: Path) -> int:
    """EFA devices as the kernel sees them: /sys/class/infiniband/*/device/driver -> efa."""
    base = sysfs_root / "sys/class/infiniband"
    if not base.is_dir():
        return 0
    return sum(1 for dev in base.iterdir() if (dev / "device/driver").resolve().name == "efa")


def parse_fi_info(text: str) -> int:
    """EFA devices in ``fi_info -p efa`` output (each shows up as ``<dev>-rdm`` and ``<dev>-dgrm``)."""
    return len({re.sub(r"-(rdm|dgrm)$", "", d) for d in re.findall(r"domain:\s*(\S+)", text)})


def check_efa(run: Runner, sysfs_root: Path, expected: int) -> Check:
    found = count_efa_devices(sysfs_root)
    source = "sysfs"
    if found == 0 and expected > 0:
        fi_info = "fi_info" if shutil.which("fi_info") else "/opt/amazon/efa/bin/fi_info"  # DLC images
        with contextlib.suppress(RuntimeError):
            found, source = parse_fi_info(run([fi_info, "-p", "efa"])), "fi_info"
    return Check("efa_devices", found == expected, f"{found} EFA devices ({source}), expected {expected}")


def check_space(path: Path, name: str, min_gib: float) -> Check:
    if not path.exists():
        return Check(name, False, f"{path} does not exist")
    free = shutil.disk_usage(path).free / 2**30
    return Check(name, free >= min_gib, f"{free:.1f} GiB free at {path}, need {min_gib:g}")


def parse_dcgm(text: str) -> list[str]:
    """Tests that ``dcgmi diag`` reports as failed."""
    return [line.split("|")[1].strip() for line in text.splitlines() if line.count("|") >= 2 and "Fail" in line]


def check_dcgm(run: Runner, level: int) -> Check:
    try:
        failed = parse_dcgm(run(["dcgmi", "diag", "-r", str(level)]))
    except RuntimeError as err:
        return Check("dcgm_diag", False, str(err))
    return Check("dcgm_diag", not failed, f"failed: {failed}" if failed else f"level {level} passed")


def run_checks(args: argparse.Namespace, run: Runner = run_command) -> list[Check]:
    checks = check_gpus(run, args.expected_gpus, args.gpu_name)
    checks.append(check_xids(run))
    checks.append(check_efa(run, Path(args.sysfs_root), args.expected_efa))
    checks.append(check_space(Path(args.disk_path), "disk_free", args.min_disk_gib))
    checks.append(check_space(Path(args.shm_path), "shm_size", args.min_shm_gib))
    if args.dcgm_diag_level:
        checks.append(check_dcgm(run, args.dcgm_diag_level))
    return checks


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False)
    parser.add_argument("--expected-gpus", type=int, required=True)
    parser.add_argument("--expected-efa", type=int, required=True)
    parser.add_argument("--gpu-name", help="substring every GPU name must contain, e.g. H100")
    parser.add_argument("--dcgm-diag-level", type=int, default=0, choices=[0, 1, 2, 3])
    parser.add_argument("--disk-path", default="/")
    parser.add_argument("--min-disk-gib", type=float, default=50)
    parser.add_argument("--shm-path", default="/dev/shm")
    parser.add_argument("--min-shm-gib", type=float, default=8)
    parser.add_argument("--sysfs-root", default="/")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, run: Runner = run_command) -> int:
    args = parse_args(argv)
    checks = run_checks(args, run)
    passed = all(check.ok for check in checks)
    node = os.environ.get("NODE_NAME") or os.uname().nodename
    verdict = {"verdict": "pass" if passed else "fail", "node": node, "checks": [asdict(c) for c in checks]}
    print(json.dumps(verdict), flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
