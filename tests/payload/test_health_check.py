"""health_check.py: parsing of recorded command outputs and the verdict logic on a fake sysfs tree."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from .conftest import WORKLOADS

sys.path.insert(0, str(WORKLOADS))
import health_check  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"


def fake_sysfs(root: Path, efa: int, other: int = 1, down: int = 0) -> Path:
    """/sys/class/infiniband/<dev>/device/driver -> .../drivers/<efa|mlx5_core>, ports/1/state."""
    drivers = root / "sys/bus/pci/drivers"
    for name in ("efa", "mlx5_core"):
        (drivers / name).mkdir(parents=True, exist_ok=True)
    for index in range(efa + other):
        device = root / f"sys/class/infiniband/dev{index}/device"
        device.mkdir(parents=True)
        (device / "driver").symlink_to(drivers / ("efa" if index < efa else "mlx5_core"))
        port = device.parent / "ports/1"
        port.mkdir(parents=True)
        (port / "state").write_text("1: DOWN\n" if index < down else "4: ACTIVE\n")
    return root


HEALTHY = {
    "nvidia-smi --query-gpu": "nvidia_smi_p5_ok.csv",
    "nvidia-smi --query-remapped-rows": "nvidia_smi_remapped_ok.csv",
    "nvidia-smi nvlink": "nvidia_smi_nvlink_ok.txt",
}


def runner(outputs: dict[str, str]):
    """Answers a command with the fixture whose key its command line starts with."""

    def run(command: list[str]) -> str:
        line = " ".join([Path(command[0]).name, *command[1:]])
        for key, fixture in outputs.items():
            if line.startswith(key):
                return (FIXTURES / fixture).read_text()
        raise health_check.CommandNotFound(f"{command[0]} not found")

    return run


def args(tmp_path: Path, **overrides: str) -> list[str]:
    values = {
        "--expected-gpus": "8",
        "--expected-efa": "32",
        "--sysfs-root": str(tmp_path),
        "--disk-path": str(tmp_path),
        "--min-disk-gib": "0",
        "--shm-path": str(tmp_path),
        "--min-shm-gib": "0",
        "--gpu-name": "H100",
        "--kmsg": str(FIXTURES / "kmsg_clean.txt"),
    }
    values.update(overrides)
    return [f"{k}={v}" for k, v in values.items()]


def verdict(capsys, tmp_path: Path, outputs: dict[str, str], **overrides: str) -> tuple[int, dict]:
    code = health_check.main(args(tmp_path, **overrides), run=runner(outputs))
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_parse_gpus_keeps_na_fields() -> None:
    rows = health_check.parse_gpus((FIXTURES / "nvidia_smi_p5_ecc.csv").read_text())
    assert len(rows) == 7
    assert rows[2]["ecc_uncorrected"] == "3" and rows[2]["retired_pending"] == "Yes"
    assert rows[6]["ecc_uncorrected"] == "[N/A]"
    with pytest.raises(ValueError, match="fields"):
        health_check.parse_gpus("0, NVIDIA H100 80GB HBM3, 0, No\n")  # the old 4-column query


def test_parse_xids_and_fi_info_and_dcgm() -> None:
    log = health_check.read_kernel_log(str(FIXTURES / "kmsg_xid.txt"))
    assert health_check.parse_xids(log) == [("0000:53:00", 13), ("0000:a8:00", 79)]
    assert health_check.parse_fi_info((FIXTURES / "fi_info_efa.txt").read_text()) == 2
    assert health_check.parse_dcgm((FIXTURES / "dcgmi_diag_fail.txt").read_text()) == ["PCIe"]


def test_healthy_p5_node_passes(capsys, tmp_path: Path) -> None:
    fake_sysfs(tmp_path, efa=32)
    code, result = verdict(capsys, tmp_path, HEALTHY)
    assert code == 0 and result["verdict"] == "pass", result
    checks = {c["name"]: c for c in result["checks"]}
    assert set(checks) == {
        "gpu_count",
        "gpu_names",
        "ecc_errors",
        "driver_version",
        "pcie_link",
        "clock_slowdown",
        "remapped_rows",
        "nvlink",
        "xid_errors",
        "efa_devices",
        "efa_ports",
        "disk_free",
        "shm_size",
        "dcgm_diag",
    }
    assert checks["nvlink"]["detail"] == "144 links up"
    # DCGM is on by default; an image without it says so instead of failing or passing silently.
    assert checks["dcgm_diag"]["skipped"] and "dcgmi is not in this image" in checks["dcgm_diag"]["detail"]


def test_each_fault_fails_the_node(capsys, tmp_path: Path) -> None:
    fake_sysfs(tmp_path, efa=31, down=2)  # one EFA device missing, two ports down
    outputs = {
        "nvidia-smi --query-gpu": "nvidia_smi_p5_ecc.csv",
        "nvidia-smi --query-remapped-rows": "nvidia_smi_remapped_pending.csv",
        "nvidia-smi nvlink": "nvidia_smi_nvlink_inactive.txt",
    }
    code, result = verdict(capsys, tmp_path, outputs, **{"--kmsg": str(FIXTURES / "kmsg_xid.txt")})
    assert code == 1 and result["verdict"] == "fail"
    failed = {c["name"]: c["detail"] for c in result["checks"] if not c["ok"]}
    assert set(failed) == {
        "gpu_count",
        "ecc_errors",
        "driver_version",
        "pcie_link",
        "clock_slowdown",
        "remapped_rows",
        "nvlink",
        "xid_errors",
        "efa_devices",
        "efa_ports",
    }
    assert "7 GPUs, expected 8" in failed["gpu_count"]
    assert "['2']" in failed["ecc_errors"]
    assert failed["driver_version"] == "550.127.05, 550.90.07"
    assert "['4']" in failed["pcie_link"] and "['5']" in failed["clock_slowdown"]
    assert "00000000:A8:00.0 (pending Yes" in failed["remapped_rows"]
    assert "Link 7: <inactive>" in failed["nvlink"]
    assert "79" in failed["xid_errors"] and "13" not in failed["xid_errors"]  # 13 is the application's
    assert "31 EFA devices (sysfs), expected 32" in failed["efa_devices"]
    assert "dev0/1: 1: DOWN" in failed["efa_ports"]


def test_an_unreadable_kernel_log_fails_closed(capsys, tmp_path: Path) -> None:
    fake_sysfs(tmp_path, efa=32)
    code, result = verdict(capsys, tmp_path, HEALTHY, **{"--kmsg": str(tmp_path / "no-kmsg")})
    checks = {c["name"]: c for c in result["checks"]}
    assert code == 1 and not checks["xid_errors"]["ok"]
    assert "mount /dev/kmsg" in checks["xid_errors"]["detail"]


def test_efa_falls_back_to_fi_info_and_missing_tools_fail(capsys, tmp_path: Path) -> None:
    outputs = {**HEALTHY, "fi_info": "fi_info_efa.txt"}
    code, result = verdict(capsys, tmp_path, outputs, **{"--expected-efa": "2"})
    checks = {c["name"]: c for c in result["checks"]}
    assert checks["efa_devices"]["ok"] and "fi_info" in checks["efa_devices"]["detail"]
    code, result = verdict(capsys, tmp_path, {}, **{"--expected-efa": "0"})
    assert code == 1
    assert {c["name"]: c["ok"] for c in result["checks"]}["gpu_count"] is False


def test_dcgm_diag_and_disk_thresholds(capsys, tmp_path: Path) -> None:
    fake_sysfs(tmp_path, efa=32)
    outputs = {**HEALTHY, "dcgmi": "dcgmi_diag_fail.txt"}
    code, result = verdict(capsys, tmp_path, outputs, **{"--dcgm-diag-level": "2", "--min-shm-gib": "1e9"})
    failed = {c["name"] for c in result["checks"] if not c["ok"]}
    assert code == 1 and failed == {"dcgm_diag", "shm_size"}


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(SystemExit):
        health_check.parse_args(["--expected-gpus=8"])  # --expected-efa missing
    with pytest.raises(SystemExit):
        health_check.parse_args(["--expected-gpus=8", "--expected-efa=32", "--dcgm-diag-level=9"])
