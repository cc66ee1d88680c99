"""xid_monitor.py: every Xid in the kernel log becomes one JSON line, fatal ones flagged; old ones skipped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import WORKLOADS, json_lines

FIXTURES = Path(__file__).parent / "fixtures"

KMSG = (
    "6,1201,5811000,-;nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver\n"
    "4,1202,5812000,-;NVRM: Xid (PCI:0000:53:00): 13, pid=4242, Graphics Exception: ESR 0x405848\n"
    "4,1203,5813000,-;NVRM: Xid (PCI:0000:a8:00): 79, pid=0, GPU has fallen off the bus.\n"
)


def run_monitor(kmsg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(WORKLOADS / "xid_monitor.py"), f"--kmsg={kmsg}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"NODE_NAME": "ip-10-0-1-7.ec2.internal", "PATH": "/usr/bin:/bin"},
    )


def test_each_xid_is_one_record_and_fatal_ones_are_flagged(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(KMSG)
    result = run_monitor(kmsg, "--from-start")
    assert result.returncode == 0, result.stderr
    records = [r for r in json_lines(result.stdout) if r["event"] == "gpu_xid"]
    assert [(r["xid"], r["fatal"], r["pci"]) for r in records] == [(13, False, "0000:53:00"), (79, True, "0000:a8:00")]
    assert {r["node"] for r in records} == {"ip-10-0-1-7.ec2.internal"}


def test_a_restarted_monitor_does_not_count_old_errors(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(KMSG)
    result = run_monitor(kmsg)
    assert result.returncode == 0, result.stderr
    assert [r["event"] for r in json_lines(result.stdout)] == ["xid_monitor_started"]


def test_the_monitor_flags_xids_as_the_health_check_does(tmp_path: Path) -> None:
    """Recovery action required (154), micro-controller breakpoint/halt (61, 62) and a MIG instance's
    Xid are fatal; a recovery action going back to "None" (also Xid 154) is not."""
    kmsg = tmp_path / "kmsg"
    kmsg.write_text((FIXTURES / "kmsg_recovery_action.txt").read_text())
    result = run_monitor(kmsg, "--from-start")
    assert result.returncode == 0, result.stderr
    records = [(r["xid"], r["fatal"], r["pci"]) for r in json_lines(result.stdout) if r["event"] == "gpu_xid"]
    assert records == [
        (154, True, "0000:53:00"),
        (61, True, "0000:64:00"),
        (62, True, "0000:75:00"),
        (94, True, "0000:86:00"),
        (154, False, "0000:97:00"),
    ]
