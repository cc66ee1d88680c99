"""Node health check for a GPU training node: prints one JSON verdict, exits 0 (pass) or 1 (fail).

Checks (nvidia-smi unless noted): GPU count and names, one driver version, uncorrected ECC errors
and pending retired pages (pre-Ampere), remapped rows pending or failed (how Ampere and Hopper report
memory faults), PCIe links at their full width, no hardware clock slowdown, no inactive NVLink;
fatal Xid errors in the kernel log (``/dev/kmsg``: failing closed when it cannot be read); EFA
devices (sysfs, or ``fi_info -p efa``) with every port ACTIVE; free disk and /dev/shm; ``dcgmi
diag -r <level>`` where the image has DCGM (a clear skip where not). Standard library only.
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

GPU_FIELDS = {
    "index": "index",
    "name": "name",
    "ecc_uncorrected": "ecc.errors.uncorrected.volatile.total",
    "retired_pending": "retired_pages.pending",
    "driver": "driver_version",
    "pcie_width": "pcie.link.width.current",
    "pcie_width_max": "pcie.link.width.max",
    "hw_slowdown": "clocks_throttle_reasons.hw_slowdown",
    "hw_thermal_slowdown": "clocks_throttle_reasons.hw_thermal_slowdown",
    "hw_power_brake": "clocks_throttle_reasons.hw_power_brake_slowdown",
}
GPU_QUERY = ["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS.values())}", "--format=csv,noheader,nounits"]
REMAPPED_ROWS_QUERY = [
    "nvidia-smi",
    "--query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure",
    "--format=csv,noheader",
]
NVLINK_STATUS = ["nvidia-smi", "nvlink", "--status"]
XID = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)\): (?P<code>\d+)")
# Xids that mean the GPU or its memory needs attention (not application errors like 13/31/43).
FATAL_XIDS = {48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    skipped: bool = False


class CommandNotFound(RuntimeError):
    """The diagnostic tool is not in this image."""


def run_command(command: list[str]) -> str:
    """Run a diagnostic command; its stdout, or a RuntimeError that names it."""
    if shutil.which(command[0]) is None and not os.access(command[0], os.X_OK):
        raise CommandNotFound(f"{command[0]} not found")
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:2])} exited {result.returncode}: {result.stderr.strip()[:300]}")
    return result.stdout


def parse_gpus(csv_text: str) -> list[dict[str, str]]:
    """Rows of :data:`GPU_QUERY`, keyed as :data:`GPU_FIELDS`; '[N/A]' / 'N/A' fields are kept."""
    rows = []
    for line in csv_text.strip().splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != len(GPU_FIELDS):
            raise ValueError(f"nvidia-smi row with {len(fields)} fields, expected {len(GPU_FIELDS)}: {line!r}")
        rows.append(dict(zip(GPU_FIELDS, fields, strict=True)))
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
    drivers = sorted({g["driver"] for g in gpus})
    checks.append(Check("driver_version", len(drivers) == 1, ", ".join(drivers)))
    narrow = [g["index"] for g in gpus if g["pcie_width"].isdigit() and g["pcie_width"] != g["pcie_width_max"]]
    checks.append(
        Check("pcie_link", not narrow, f"PCIe link below full width on GPUs {narrow}" if narrow else "full width")
    )
    slow = [g["index"] for g in gpus if "Active" in (g["hw_slowdown"], g["hw_thermal_slowdown"], g["hw_power_brake"])]
    checks.append(
        Check("clock_slowdown", not slow, f"hardware clock slowdown on GPUs {slow}" if slow else "no HW slowdown")
    )
    return checks


def check_remapped_rows(run: Runner) -> Check:
    """Ampere and Hopper retire bad memory by remapping rows: pending (needs a GPU reset) or failed
    (no spare rows left) means the GPU must not train."""
    try:
        text = run(REMAPPED_ROWS_QUERY)
    except RuntimeError as err:
        return Check("remapped_rows", False, str(err))
    bad = []
    for line in text.strip().splitlines():
        bus_id, pending, failure = (field.strip() for field in line.split(","))
        if "yes" in (pending.lower(), failure.lower()):
            bad.append(f"{bus_id} (pending {pending}, failure {failure})")
    return Check("remapped_rows", not bad, f"remapped rows on {bad}" if bad else "no pending or failed remapping")


def check_nvlink(run: Runner) -> Check:
    """Every NVLink of every GPU up (no NVLink at all, as on g5/g6e, passes)."""
    try:
        text = run(NVLINK_STATUS)
    except RuntimeError as err:
        return Check("nvlink", False, str(err))
    inactive = [line.strip() for line in text.splitlines() if "inactive" in line.lower()]
    links = len(re.findall(r"Link \d+:", text))
    return Check("nvlink", not inactive, f"inactive: {inactive}" if inactive else f"{links} links up")


def parse_xids(kernel_log: str) -> list[tuple[str, int]]:
    return [(m["pci"], int(m["code"])) for m in XID.finditer(kernel_log)]


def read_kernel_log(path: str) -> str:
    """Every record still in the kernel's ring buffer (``/dev/kmsg`` gives one per read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:  # the end of the buffer
                break
            except BrokenPipeError:  # a record was overwritten while reading: go on with the next
                continue
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace")


def check_xids(kmsg: str) -> Check:
    """Fatal Xids in the kernel log; a log that cannot be read fails the check (a node whose
    errors cannot be seen is not known to be healthy)."""
    try:
        log = read_kernel_log(kmsg)
    except OSError as err:
        return Check("xid_errors", False, f"kernel log not readable at {kmsg} ({err}): mount /dev/kmsg, privileged")
    fatal = [(pci, code) for pci, code in parse_xids(log) if code in FATAL_XIDS]
    return Check("xid_errors", not fatal, f"fatal Xids: {fatal}" if fatal else "no fatal Xid errors")


def efa_devices(sysfs_root: Path) -> list[Path]:
    """EFA devices as the kernel sees them: /sys/class/infiniband/*/device/driver -> efa."""
    base = sysfs_root / "sys/class/infiniband"
    if not base.is_dir():
        return []
    return sorted(dev for dev in base.iterdir() if (dev / "device/driver").resolve().name == "efa")


def check_efa_ports(sysfs_root: Path) -> Check:
    """Every port of every EFA device ACTIVE (``ports/<n>/state`` reads ``4: ACTIVE``)."""
    down = [
        f"{dev.name}/{port.name}: {(port / 'state').read_text().strip()}"
        for dev in efa_devices(sysfs_root)
        for port in sorted((dev / "ports").glob("*"))
        if "ACTIVE" not in (port / "state").read_text()
    ]
    return Check("efa_ports", not down, f"not active: {down}" if down else "all ports ACTIVE")


def parse_fi_info(text: str) -> int:
    """EFA devices in ``fi_info -p efa`` output (each shows up as ``<dev>-rdm`` and ``<dev>-dgrm``)."""
    return len({re.sub(r"-(rdm|dgrm)$", "", d) for d in re.findall(r"domain:\s*(\S+)", text)})


def check_efa(run: Runner, sysfs_root: Path, expected: int) -> Check:
    found = len(efa_devices(sysfs_root))
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
    except CommandNotFound:
        return Check("dcgm_diag", True, "skipped: dcgmi is not in this image", skipped=True)
    except RuntimeError as err:
        return Check("dcgm_diag", False, str(err))
    return Check("dcgm_diag", not failed, f"failed: {failed}" if failed else f"level {level} passed")


def run_checks(args: argparse.Namespace, run: Runner = run_command) -> list[Check]:
    checks = check_gpus(run, args.expected_gpus, args.gpu_name)
    checks.append(check_remapped_rows(run))
    checks.append(check_nvlink(run))
    checks.append(check_xids(args.kmsg))
    checks.append(check_efa(run, Path(args.sysfs_root), args.expected_efa))
    if args.expected_efa:
        checks.append(check_efa_ports(Path(args.sysfs_root)))
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
    parser.add_argument("--dcgm-diag-level", type=int, default=1, choices=[0, 1, 2, 3], help="0: off")
    parser.add_argument("--kmsg", default="/dev/kmsg", help="the kernel log device (a file in tests)")
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
