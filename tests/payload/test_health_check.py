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


def fake_sysfs(root: Path, efa: int, other: int = 1) -> Path:
    """/sys/class/infiniband/<dev>/device/driver -> .../drivers/<efa|mlx5_core>"""
    drivers = root / "sys/bus/pci/drivers"
    for name in ("efa", "mlx5_core"):
        (drivers / name).mkdir(parents=True, exist_ok=True)
    for index in range(efa + other):
        device = root / f"sys/class/infiniband/dev{index}/device"
        device.mkdir(parents=True)
        (device / "driver").symlink_to(drivers / ("efa" if index < efa else "mlx5_core"))
    return root


def runner(outputs: dict[str, str]):
    def run(command: list[str]) -> str:
        key = Path(command[0]).name
        if key not in outputs:
            raise RuntimeError(f"{key} not found")
        return outputs[key]

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
    }
    values.update(overrides)
    return [f"{k}={v}" for k, v in values.items()]


def verdict(capsys, tmp_path: Path, outputs: dict[str, str], **overrides: str) -> tuple[int, dict]:
    code = health_check.main(args(tmp_path, **overrides), run=runner(outputs))
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_parse_gpus_keeps_na_fields() -> None:
    rows = health_check.parse_gpus((FIXTURES / "nvidia_smi_p5_ecc.csv").read_text())
    assert len(rows) == 7
    assert rows[2] == {"index": "2", "name": "NVIDIA H100 80GB HBM3", "ecc_uncorrected": "3", "retired_pending": "Yes"}
    assert rows[6]["ecc_uncorrected"] == "[N/A]"


def test_parse_xids_and_fi_info_and_dcgm() -> None:
    assert health_check.parse_xids((FIXTURES / "dmesg_xid.txt").read_text()) == [("0000:53:00", 13), ("0000:a8:00", 79)]
    assert health_check.parse_fi_info((FIXTURES / "fi_info_efa.txt").read_text()) == 2
    assert health_check.parse_dcgm((FIXTURES / "dcgmi_diag_fail.txt").read_text()) == ["PCIe"]


def test_healthy_p5_node_passes(capsys, tmp_path: Path) -> None:
    fake_sysfs(tmp_path, efa=32)
    outputs = {
        "nvidia-smi": (FIXTURES / "nvidia_smi_p5_ok.csv").read_text(),
        "dmesg": (FIXTURES / "dmesg_clean.txt").read_text(),
    }
    code, result = verdict(capsys, tmp_path, outputs)
    assert code == 0 and result["verdict"] == "pass"
    assert {c["name"] for c in result["checks"]} == {
        "gpu_count",
        "gpu_names",
        "ecc_errors",
        "xid_errors",
        "efa_devices",
        "disk_free",
        "shm_size",
    }


def test_each_fault_fails_the_node(capsys, tmp_path: Path) -> None:
    fake_sysfs(tmp_path, efa=31)  # one EFA device missing
    outputs = {
        "nvidia-smi": (FIXTURES / "nvidia_smi_p5_ecc.csv").read_text(),
        "dmesg": (FIXTURES / "dmesg_xid.txt").read_text(),
    }
    code, result = verdict(capsys, tmp_path, outputs)
    assert code == 1 and result["verdict"] == "fail"
    failed = {c["name"]: c["detail"] for c in result["checks"] if not c["ok"]}
    assert set(failed) == {"gpu_count", "ecc_errors", "xid_errors", "efa_devices"}
    assert "7 GPUs, expected 8" in failed["gpu_count"]
    assert "['2']" in failed["ecc_errors"]
    assert "79" in failed["xid_errors"]  # 79 (fallen off the bus) is fatal, 13 (application) is not
    assert "31 EFA devices (sysfs), expected 32" in failed["efa_devices"]


def test_efa_falls_back_to_fi_info_and_missing_tools_fail(capsys, tmp_path: Path) -> None:
    outputs = {
        "nvidia-smi": (FIXTURES / "nvidia_smi_p5_ok.csv").read_text(),
        "fi_info": (FIXTURES / "fi_info_efa.txt").read_text(),
    }
    code, result = verdict(capsys, tmp_path, outputs, **{"--expected-efa": "2"})
    checks = {c["name"]: c for c in result["checks"]}
    assert checks["efa_devices"]["ok"] and "fi_info" in checks["efa_devices"]["detail"]
    assert checks["xid_errors"]["ok"] and checks["xid_errors"]["detail"].startswith("skipped")
    code, result = verdict(capsys, tmp_path, {}, **{"--expected-efa": "0"})
    assert code == 1
    assert {c["name"]: c["ok"] for c in result["checks"]}["gpu_count"] is False


def test_dcgm_diag_and_disk_thresholds(capsys, tmp_path: Path) -> None:
    fake_sysfs(tmp_path, efa=32)
    outputs = {
        "nvidia-smi": (FIXTURES / "nvidia_smi_p5_ok.csv").read_text(),
        "dcgmi": (FIXTURES / "dcgmi_diag_fail.txt").read_text(),
    }
    code, result = verdict(capsys, tmp_path, outputs, **{"--dcgm-diag-level": "2", "--min-shm-gib": "1e9"})
    failed = {c["name"] for c in result["checks"] if not c["ok"]}
    assert code == 1 and failed == {"dcgm_diag", "shm_size"}


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(SystemExit):
        health_check.parse_args(["--expected-gpus=8"])  # --expected-efa missing
    with pytest.raises(SystemExit):
        health_check.parse_args(["--expected-gpus=8", "--expected-efa=32", "--dcgm-diag-level=9"])
