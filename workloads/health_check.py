"""Node health check for a GPU training node: prints one JSON verdict, exits 0 (pass) or 1 (fail).

Checks (nvidia-smi unless noted): GPU count and names, one driver version, uncorrected ECC errors
and pending retired pages (pre-Ampere), remapped rows pending or failed (how Ampere and Hopper report
memory faults), PCIe links at their full width, no hardware clock slowdown, the NVSwitch fabric
registered (``fabric.state`` Completed, ``fabric.status`` Success, where the GPU has one), every GPU
with its full number of active NVLinks; fatal Xid errors in the kernel log (``/dev/kmsg``: failing
closed when it cannot be read) since the node's last passing health check, the last driver load or
an acknowledged GPU reset; EFA devices (sysfs, or ``fi_info -p efa``) with every port ACTIVE (failing
closed when sysfs does not show them); free disk and /dev/shm; ``dcgmi diag -r <level>`` where the
image has DCGM (a clear skip where not; a diag that times out fails). Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

Runner = Callable[[list[str]], str]

# Field names are nvidia-smi's (``nvidia-smi --help-query-gpu``).
BASE_FIELDS = {
    "index": "index",
    "name": "name",
    "ecc_uncorrected": "ecc.errors.uncorrected.volatile.total",
    "retired_pending": "retired_pages.pending",
    "driver": "driver_version",
    "pcie_width": "pcie.link.width.current",
    "pcie_width_max": "pcie.link.width.max",
}
# Driver R535 renamed "clocks_throttle_reasons.*" to "clocks_event_reasons.*" (same meaning); newer
# drivers deprecate the old names, older ones reject the new: ask for the new, fall back to the old.
CLOCK_EVENT_FIELDS = {
    "hw_slowdown": "clocks_event_reasons.hw_slowdown",
    "hw_thermal_slowdown": "clocks_event_reasons.hw_thermal_slowdown",
    "hw_power_brake": "clocks_event_reasons.hw_power_brake_slowdown",
}
CLOCK_THROTTLE_FIELDS = {
    "hw_slowdown": "clocks_throttle_reasons.hw_slowdown",
    "hw_thermal_slowdown": "clocks_throttle_reasons.hw_thermal_slowdown",
    "hw_power_brake": "clocks_throttle_reasons.hw_power_brake_slowdown",
}
# The GPU's registration with the NVSwitch fabric (Fabric Manager), NVML nvmlGpuFabricInfo_t:
# "fabric.state" is one of Not Supported / Not Started / In Progress / Completed, and "fabric.status"
# (Success or an NVML error) is only meaningful once the state is Completed. GPUs without an NVSwitch
# fabric (PCIe parts: A10G, L40S) report N/A.
FABRIC_FIELDS = {"fabric_state": "fabric.state", "fabric_status": "fabric.status"}
GPU_FIELDS = {**BASE_FIELDS, **CLOCK_EVENT_FIELDS, **FABRIC_FIELDS}
# Tried in order: the first one the driver answers is used (see check_gpus).
GPU_QUERIES: list[tuple[str, dict[str, str]]] = [
    ("clocks_event_reasons.*", GPU_FIELDS),
    ("clocks_throttle_reasons.*", {**BASE_FIELDS, **CLOCK_THROTTLE_FIELDS, **FABRIC_FIELDS}),
    ("clocks_throttle_reasons.*, no fabric.*", {**BASE_FIELDS, **CLOCK_THROTTLE_FIELDS}),
]
NOT_REPORTED = {"n/a", "[n/a]", "not supported", "[not supported]"}


def gpu_query(fields: dict[str, str]) -> list[str]:
    return ["nvidia-smi", f"--query-gpu={','.join(fields.values())}", "--format=csv,noheader,nounits"]


REMAPPED_ROWS_QUERY = [
    "nvidia-smi",
    "--query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure",
    "--format=csv,noheader",
]
NVLINK_STATUS = ["nvidia-smi", "nvlink", "--status"]
# NVLinks per GPU, by the GPU name nvidia-smi prints (NVIDIA's datasheets): H100 SXM5 and H200 SXM
# have 18 fourth-generation links, B200 (HGX B200, "NVIDIA B200"; not GB200) 18 fifth-generation links,
# A100 SXM4 12 third-generation links. PCIe and NVL cards (bridges) are not listed; parts without NVLink
# (A10G, L40S) list no links at all.
NVLINKS_PER_GPU = [
    (re.compile(r"\b(H100|H200)\b(?!.*\b(PCIe|NVL)\b)"), 18),
    (re.compile(r"\bB200\b"), 18),
    (re.compile(r"A100-SXM4"), 12),
]

# The driver's Xid line (open-gpu-kernel-modules, kernel-open/nvidia/nv-tracepoint.h and
# kern_gpu_error_cont_ga100.c): "NVRM: Xid (PCI:0000:01:00): 94, ..." or, on a MIG instance,
# "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, ...".
XID = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)(?: GPU-I:\d+)?\): (?P<code>\d+)(?P<text>[^\n]*)")
# Xids that mean the GPU or its memory needs attention (not application errors like 13/31/43). Names
# from the driver's nverror.h, meanings from NVIDIA's Xid catalog ("Analyzing Xid Errors with the Xid
# Catalog", docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html).
FATAL_XIDS = {
    48,  # ROBUST_CHANNEL_GPU_ECC_DBE: double-bit ECC error
    61,  # PMU_BREAKPOINT: internal micro-controller breakpoint/warning
    62,  # PMU_HALT_ERROR: internal micro-controller halt
    63,  # INFOROM_PAGE_RETIREMENT_EVENT: ECC page retirement / row remapping recorded
    64,  # INFOROM_PAGE_RETIREMENT_FAILURE: ECC page retirement / row remapping failed
    74,  # NVLINK_ERROR
    79,  # ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS
    92,  # EXCESSIVE_SBE_INTERRUPTS: high single-bit ECC error rate
    94,  # ROBUST_CHANNEL_CONTAINED_ERROR: contained ECC error
    95,  # ROBUST_CHANNEL_UNCONTAINED_ERROR: uncontained ECC error
    119,  # GSP_RPC_TIMEOUT
    120,  # GSP_ERROR
    140,  # UNRECOVERABLE_ECC_ERROR_ESCAPE
    154,  # GPU_RECOVERY_ACTION_CHANGED: GPU recovery action required (GPU reset / node reboot)
}
# Xid 154 also reports a recovery action going back to none (driver gpu.c, _gpuRecoveryActionName):
# "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)". That one is not a fault.
RECOVERY_ACTION_NONE = re.compile(r"to 0x0+ \(None\)")
# What ends an Xid's relevance in the kernel log. The driver prints "NVRM: loading <pNVRM_ID>" when
# its module loads (kernel-open/nvidia/nv.c), pNVRM_ID being "NVIDIA UNIX [Open Kernel Module for]
# x86_64 ..." : a driver reload re-initialises every GPU. A single-GPU reset (``nvidia-smi -r``)
# prints nothing at the default log level (the driver's "NVRM: Trigger FLR!" is NV_DBG_INFO), so an
# operator acknowledges one by writing a line to the kernel log after the reset succeeded:
#   echo "llm-infra: gpu reset PCI:0000:53:00" > /dev/kmsg     (or without PCI:...: every GPU)
DRIVER_LOADED = re.compile(r"NVRM: loading NVIDIA UNIX")
GPU_RESET_ACK = re.compile(r"llm-infra: gpu reset(?: PCI:(?P<pci>[0-9a-fA-F:.]+))?")
# A /dev/kmsg record: "<prio>,<seq>,<usec since boot>,<flags>[,...];<text>" (the kernel's
# Documentation/ABI/testing/dev-kmsg); continuation lines (" SUBSYSTEM=pci") start with a space.
KMSG_RECORD = re.compile(r"^(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<text>.*)$")
# The host's boot id (not namespaced: a container sees the node's); kmsg sequence numbers restart at boot.
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
MARKER_FILE = "last-pass.json"
DEFAULT_STATE_DIR = "/var/lib/llm-infra/health"

DEFAULT_TIMEOUT_S = 120.0
# dcgmi diag -r: level 1 "normally lasting seconds", 2 "approximately two minutes", 3 "approximately
# 15 minutes" (DCGM docs, dcgmi diag). Generous limits: a diag that runs past them is a failed check.
DCGM_TIMEOUT_S = {1: 300.0, 2: 900.0, 3: 2700.0}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    skipped: bool = False


class CommandNotFound(RuntimeError):
    """The diagnostic tool is not in this image."""


class CommandTimeout(RuntimeError):
    """The diagnostic tool ran past its time limit (and was killed)."""


def command_timeout(command: list[str]) -> float:
    if Path(command[0]).name == "dcgmi" and "-r" in command[:-1]:
        level = command[command.index("-r") + 1]
        return DCGM_TIMEOUT_S.get(int(level), max(DCGM_TIMEOUT_S.values())) if level.isdigit() else DEFAULT_TIMEOUT_S
    return DEFAULT_TIMEOUT_S


def run_command(command: list[str]) -> str:
    """Run a diagnostic command; its stdout, or a RuntimeError that names it (:class:`CommandTimeout`
    when it runs past :func:`command_timeout`: it is killed with its process group)."""
    if shutil.which(command[0]) is None and not os.access(command[0], os.X_OK):
        raise CommandNotFound(f"{command[0]} not found")
    name = " ".join(command[:2])
    timeout_s = command_timeout(command)
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    except OSError as err:
        raise RuntimeError(f"{name} could not start: {err}") from err
    with process:
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise CommandTimeout(f"{name} timed out after {timeout_s:g} s") from None
    if process.returncode != 0:
        # nvidia-smi reports a rejected query field on stdout ('Field "..." is not a valid field to query.').
        message = (stderr.strip() or stdout.strip())[:300]
        raise RuntimeError(f"{name} exited {process.returncode}: {message}")
    return stdout


def parse_gpus(csv_text: str, keys: list[str] | None = None) -> list[dict[str, str]]:
    """Rows of a GPU query, keyed as ``keys`` (default :data:`GPU_FIELDS`); '[N/A]' / 'N/A' fields are kept."""
    keys = list(GPU_FIELDS) if keys is None else keys
    rows = []
    for line in csv_text.strip().splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != len(keys):
            raise ValueError(f"nvidia-smi row with {len(fields)} fields, expected {len(keys)}: {line!r}")
        rows.append(dict(zip(keys, fields, strict=True)))
    return rows


def query_gpus(run: Runner) -> tuple[list[dict[str, str]], str]:
    """The GPUs as the first of :data:`GPU_QUERIES` the driver accepts, and that query's label. A
    timeout is not retried (the driver did not reject anything); when every query fails, the first
    error is raised."""
    errors: list[RuntimeError] = []
    for label, fields in GPU_QUERIES:
        try:
            text = run(gpu_query(fields))
        except (CommandTimeout, CommandNotFound):
            raise
        except RuntimeError as err:
            errors.append(err)
            continue
        return parse_gpus(text, list(fields)), label
    raise RuntimeError(f"{errors[0]} (older field names failed too: {errors[-1]})" if len(errors) > 1 else errors[0])


def check_gpus(run: Runner, expected: int, expected_name: str | None) -> list[Check]:
    try:
        gpus, query = query_gpus(run)
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
    names_used = "" if query == GPU_QUERIES[0][0] else f" (read as {query}: the driver rejected clocks_event_reasons.*)"
    checks.append(
        Check(
            "clock_slowdown",
            not slow,
            (f"hardware clock slowdown on GPUs {slow}" if slow else "no HW slowdown") + names_used,
        )
    )
    checks.append(check_fabric(gpus))
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


def check_fabric(gpus: list[dict[str, str]]) -> Check:
    """Every GPU registered with the NVSwitch fabric: ``fabric.state`` Completed and ``fabric.status``
    Success. A GPU that reports N/A or Not Supported has no such fabric: skipped, and said so."""
    if not gpus or "fabric_state" not in gpus[0]:
        return Check("fabric", True, "skipped: this driver does not know fabric.state / fabric.status", skipped=True)
    unreported = [g["index"] for g in gpus if g["fabric_state"].lower() in NOT_REPORTED]
    bad = [
        f"GPU {g['index']}: state {g['fabric_state']}, status {g['fabric_status']}"
        for g in gpus
        if g["index"] not in unreported and (g["fabric_state"] != "Completed" or g["fabric_status"] != "Success")
    ]
    if bad:
        return Check("fabric", False, f"NVSwitch fabric not ready: {bad}")
    if len(unreported) == len(gpus):
        return Check("fabric", True, "skipped: fabric.state N/A on every GPU (no NVSwitch fabric)", skipped=True)
    note = f"; fabric.state N/A (skipped) on GPUs {unreported}" if unreported else ""
    return Check("fabric", True, f"Completed / Success on {len(gpus) - len(unreported)} GPUs{note}")


def expected_nvlinks(gpu_name: str) -> int | None:
    return next((links for pattern, links in NVLINKS_PER_GPU if pattern.search(gpu_name)), None)


def parse_nvlink_status(text: str) -> list[tuple[str, str, int, int]]:
    """Per GPU of ``nvidia-smi nvlink --status``: (index, name, links listed, links active). A link is
    active when it shows a bandwidth ("Link 3: 26.562 GB/s"), not "<inactive>"."""
    gpus: list[tuple[str, str, int, int]] = []
    for line in text.splitlines():
        header = re.match(r"\s*GPU (\d+): (.+?)(?: \(UUID: [^)]*\))?\s*$", line)
        if header:
            gpus.append((header[1], header[2], 0, 0))
            continue
        link = re.match(r"\s*Link \d+: (.*)$", line)
        if link and gpus:
            index, name, listed, active = gpus[-1]
            speed = re.match(r"([\d.]+) GB/s", link[1].strip())
            gpus[-1] = (index, name, listed + 1, active + int(bool(speed and float(speed[1]) > 0)))
    return gpus


def check_nvlink(run: Runner, expected: int | None = None, listed_gpus: int = 0) -> Check:
    """Every GPU with as many active NVLinks as its type has (:data:`NVLINKS_PER_GPU`, or ``expected``):
    a GPU that lists fewer links, or any inactive one, fails, and so does a listing with fewer than
    ``listed_gpus`` GPUs. A GPU type without a known count must show no inactive link; no NVLink at
    all (g5/g6e) passes."""
    try:
        text = run(NVLINK_STATUS)
    except RuntimeError as err:
        return Check("nvlink", False, str(err))
    gpus = parse_nvlink_status(text)
    short, unknown, total = [], set(), 0
    for index, name, listed, active in gpus:
        want = expected if expected is not None else expected_nvlinks(name)
        total += active
        if want is None:
            unknown.add(name)
            if active < listed:
                short.append(f"GPU {index}: {listed - active} of {listed} links inactive")
        elif active != want:
            short.append(f"GPU {index}: {active} of {want} links active")
    if len(gpus) < listed_gpus:
        short.append(f"{len(gpus)} of {listed_gpus} GPUs listed")
    if short:
        return Check("nvlink", False, f"NVLinks missing: {short}")
    counts = sorted({active for _, _, _, active in gpus})
    per_gpu = f" ({'/'.join(map(str, counts))} per GPU)" if gpus else ""
    note = f"; no expected link count for {sorted(unknown)}: inactive links only" if unknown and total else ""
    return Check("nvlink", True, f"{total} links up{per_gpu}{note}")


def parse_xids(kernel_log: str) -> list[tuple[str, int]]:
    return [(m["pci"], int(m["code"])) for m in XID.finditer(kernel_log)]


def xid_is_fatal(code: int, text: str) -> bool:
    """Whether an Xid means the GPU needs attention (``text``: the rest of its log line)."""
    return code in FATAL_XIDS and not (code == 154 and RECOVERY_ACTION_NONE.search(text))


def parse_xid_events(kernel_log: str) -> list[tuple[str, int, bool]]:
    """(PCI address, Xid, fatal) for each Xid line."""
    return [(m["pci"], int(m["code"]), xid_is_fatal(int(m["code"]), m["text"])) for m in XID.finditer(kernel_log)]


def pci_key(address: str) -> tuple[int, int, int]:
    """Domain, bus, device of "0000:53:00" (Xid lines) or "00000000:53:00.0" (nvidia-smi)."""
    parts = address.split(".")[0].split(":")
    domain, bus, device = (["0", *parts] if len(parts) == 2 else parts)[-3:]
    return int(domain, 16), int(bus, 16), int(device, 16)


@dataclass
class KmsgRecord:
    seq: int | None  # None: a line without a /dev/kmsg prefix (plain text): always considered
    text: str


def parse_kmsg(kernel_log: str) -> list[KmsgRecord]:
    records: list[KmsgRecord] = []
    for line in kernel_log.splitlines():
        match = KMSG_RECORD.match(line)
        if match:
            records.append(KmsgRecord(int(match["seq"]), match["text"]))
        elif line.startswith(" ") and records:  # a continuation line ("SUBSYSTEM=pci")
            records[-1].text += "\n" + line
        elif line.strip():
            records.append(KmsgRecord(None, line))
    return records


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


def boot_id() -> str | None:
    try:
        return Path(BOOT_ID_PATH).read_text().strip() or None
    except OSError:
        return None


def read_marker(state_dir: Path, boot: str | None) -> tuple[int | None, str]:
    """The kmsg sequence number of this boot's last passing health check on this node (None: none
    usable), and a note for the verdict."""
    path = state_dir / MARKER_FILE
    if not state_dir.is_dir():
        return None, f"no state directory {state_dir} (not mounted): Xids since boot"
    try:
        marker = json.loads(path.read_text())
        seq, marker_boot = int(marker["kmsg_seq"]), marker["boot_id"]
    except FileNotFoundError:
        return None, "no earlier pass on this node: Xids since boot"
    except (OSError, ValueError, KeyError, TypeError) as err:
        return None, f"unreadable marker {path} ({err}): Xids since boot"
    if boot is None or marker_boot != boot:
        return None, f"last pass ({marker.get('time', '?')}) was in an earlier boot: Xids since boot"
    return seq, f"Xids since the last pass ({marker.get('time', '?')}, kmsg seq {seq})"


def write_marker(state_dir: Path, boot: str | None, seq: int | None, node: str) -> str:
    """Record a passing health check (atomically); what happened, for the verdict."""
    if seq is None or boot is None:
        return "not written: no kmsg sequence number or boot id"
    if not state_dir.is_dir():
        return f"not written: no state directory {state_dir}"
    path = state_dir / MARKER_FILE
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    marker = {"boot_id": boot, "kmsg_seq": seq, "time": now, "node": node}
    try:
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(marker) + "\n")
        os.replace(temporary, path)
    except OSError as err:
        return f"not written: {err}"
    return f"{path} (kmsg seq {seq})"


@dataclass
class XidScan:
    check: Check
    last_seq: int | None  # the newest kmsg record read: where the next check starts after a pass


def check_xids(kmsg: str, state_dir: Path | None = None) -> XidScan:
    """Fatal Xids in the kernel log that still matter: after the last passing health check on this
    node (its marker in ``state_dir``, this boot only), and after the last driver load or acknowledged
    reset of that GPU. A log that cannot be read fails the check (a node whose errors cannot be seen
    is not known to be healthy)."""
    try:
        log = read_kernel_log(kmsg)
    except OSError as err:
        detail = f"kernel log not readable at {kmsg} ({err}): mount /dev/kmsg, privileged"
        return XidScan(Check("xid_errors", False, detail), None)
    since, window = read_marker(state_dir, boot_id()) if state_dir else (None, "Xids since boot")
    records = parse_kmsg(log)
    pending: dict[tuple[int, int, int], list[tuple[str, int]]] = {}
    cleared = []
    for record in records:
        if record.seq is not None and since is not None and record.seq <= since:
            continue
        if DRIVER_LOADED.search(record.text):
            pending.clear()
            cleared.append(f"driver loaded (kmsg seq {record.seq})")
        elif ack := GPU_RESET_ACK.search(record.text):
            if ack["pci"]:
                pending.pop(pci_key(ack["pci"]), None)
            else:
                pending.clear()
            cleared.append(f"reset of {ack['pci'] or 'every GPU'} acknowledged (kmsg seq {record.seq})")
        for pci, code, is_fatal in parse_xid_events(record.text):
            if is_fatal:
                pending.setdefault(pci_key(pci), []).append((pci, code))
    seqs = [r.seq for r in records if r.seq is not None]
    if since is not None and seqs and seqs[0] > since + 1:
        window += f"; records {since + 1}-{seqs[0] - 1} were overwritten before this read"
    if cleared:
        window += "; " + ", ".join(cleared)
    fatal = [xid for xids in pending.values() for xid in xids]
    detail = f"fatal Xids: {fatal} ({window})" if fatal else f"no fatal Xid errors ({window})"
    return XidScan(Check("xid_errors", not fatal, detail), max(seqs) if seqs else None)


def efa_devices(sysfs_root: Path) -> list[Path]:
    """EFA devices as the kernel sees them: /sys/class/infiniband/*/device/driver -> efa."""
    base = sysfs_root / "sys/class/infiniband"
    if not base.is_dir():
        return []
    return sorted(dev for dev in base.iterdir() if (dev / "device/driver").resolve().name == "efa")


def check_efa_ports(sysfs_root: Path, expected: int) -> Check:
    """Every port of every expected EFA device ACTIVE (``ports/<n>/state`` reads ``4: ACTIVE``). Ports
    that cannot be seen are not known to be up: no EFA device in sysfs, fewer than expected, a device
    without ports or an unreadable state fail the check."""
    base = sysfs_root / "sys/class/infiniband"
    devices = efa_devices(sysfs_root)
    if not devices:
        return Check(
            "efa_ports",
            False,
            f"no EFA device visible in {base} ({expected} expected): port states unknown; "
            "the container needs the host's /sys",
        )
    down = []
    for dev in devices:
        ports = sorted((dev / "ports").glob("*"))
        if not ports:
            down.append(f"{dev.name}: no ports")
        for port in ports:
            try:
                state = (port / "state").read_text().strip()
            except OSError as err:
                state = f"unreadable ({err.strerror})"
            if "ACTIVE" not in state:
                down.append(f"{dev.name}/{port.name}: {state}")
    if down:
        return Check("efa_ports", False, f"not active: {down}")
    if len(devices) < expected:
        return Check("efa_ports", False, f"ports of only {len(devices)} of {expected} EFA devices visible in {base}")
    return Check("efa_ports", True, f"all ports of {len(devices)} EFA devices ACTIVE")


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
    """``dcgmi diag -r <level>``. A diag that runs past its limit (:data:`DCGM_TIMEOUT_S`) is
    inconclusive, and inconclusive fails: a node whose diagnostics do not finish is not known to be
    healthy (a hung diag is itself a common symptom of a sick GPU)."""
    try:
        failed = parse_dcgm(run(["dcgmi", "diag", "-r", str(level)]))
    except CommandNotFound:
        return Check("dcgm_diag", True, "skipped: dcgmi is not in this image", skipped=True)
    except CommandTimeout as err:
        return Check("dcgm_diag", False, f"inconclusive, counted as a failure: {err}")
    except RuntimeError as err:
        return Check("dcgm_diag", False, str(err))
    return Check("dcgm_diag", not failed, f"failed: {failed}" if failed else f"level {level} passed")


def guarded(name: str, check: Callable[[], Check]) -> Check:
    """A check that raised is a failed check in the verdict, not a traceback instead of one."""
    try:
        return check()
    except Exception as err:  # noqa: BLE001 - any error must still end in a verdict
        return Check(name, False, f"check raised {type(err).__name__}: {err}")


def run_checks(args: argparse.Namespace, run: Runner = run_command) -> tuple[list[Check], XidScan]:
    try:
        checks = check_gpus(run, args.expected_gpus, args.gpu_name)
    except Exception as err:  # noqa: BLE001
        checks = [Check("gpu_count", False, f"check raised {type(err).__name__}: {err}")]
    checks.append(guarded("remapped_rows", lambda: check_remapped_rows(run)))
    # A GPU type with NVLink (--gpu-name H100, as the chart passes) must list every GPU's links.
    has_nvlink = args.expected_nvlinks or expected_nvlinks(args.gpu_name or "")
    listed = args.expected_gpus if has_nvlink else 0
    checks.append(guarded("nvlink", lambda: check_nvlink(run, args.expected_nvlinks, listed)))
    try:
        xids = check_xids(args.kmsg, Path(args.state_dir) if args.state_dir else None)
    except Exception as err:  # noqa: BLE001
        xids = XidScan(Check("xid_errors", False, f"check raised {type(err).__name__}: {err}"), None)
    checks.append(xids.check)
    sysfs = Path(args.sysfs_root)
    checks.append(guarded("efa_devices", lambda: check_efa(run, sysfs, args.expected_efa)))
    if args.expected_efa:
        checks.append(guarded("efa_ports", lambda: check_efa_ports(sysfs, args.expected_efa)))
    checks.append(guarded("disk_free", lambda: check_space(Path(args.disk_path), "disk_free", args.min_disk_gib)))
    checks.append(guarded("shm_size", lambda: check_space(Path(args.shm_path), "shm_size", args.min_shm_gib)))
    if args.dcgm_diag_level:
        checks.append(guarded("dcgm_diag", lambda: check_dcgm(run, args.dcgm_diag_level)))
    return checks, xids


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False)
    parser.add_argument("--expected-gpus", type=int, required=True)
    parser.add_argument("--expected-efa", type=int, required=True)
    parser.add_argument("--gpu-name", help="substring every GPU name must contain, e.g. H100")
    parser.add_argument(
        "--expected-nvlinks", type=int, help="active NVLinks per GPU (default: by GPU type, H100/H200 SXM and B200 18)"
    )
    parser.add_argument("--dcgm-diag-level", type=int, default=1, choices=[0, 1, 2, 3], help="0: off")
    parser.add_argument("--kmsg", default="/dev/kmsg", help="the kernel log device (a file in tests)")
    parser.add_argument(
        "--state-dir",
        default=DEFAULT_STATE_DIR,
        help="a node directory that outlives the pod (hostPath): the last pass's kmsg position is kept "
        "there, and Xids before it no longer count; '' or a missing directory: Xids since boot",
    )
    parser.add_argument("--disk-path", default="/")
    parser.add_argument("--min-disk-gib", type=float, default=50)
    parser.add_argument("--shm-path", default="/dev/shm")
    parser.add_argument("--min-shm-gib", type=float, default=8)
    parser.add_argument("--sysfs-root", default="/")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, run: Runner = run_command) -> int:
    args = parse_args(argv)
    checks, xids = run_checks(args, run)
    passed = all(check.ok for check in checks)
    node = os.environ.get("NODE_NAME") or os.uname().nodename
    verdict = {"verdict": "pass" if passed else "fail", "node": node, "checks": [asdict(c) for c in checks]}
    if args.state_dir:
        # Only a pass moves the window on: a failed node keeps its Xids until it passes, or is reset.
        state_dir = Path(args.state_dir)
        verdict["xid_marker"] = (
            write_marker(state_dir, boot_id(), xids.last_seq, node) if passed else "not written: the node failed"
        )
    print(json.dumps(verdict), flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
