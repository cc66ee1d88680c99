"""health_check.py: parsing of recorded command outputs and the verdict logic on a fake sysfs tree."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from llm_infra.workloads import health_check

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


def command_line(command: list[str]) -> str:
    return " ".join([Path(command[0]).name, *command[1:]])


def runner(outputs: dict[str, str], calls: list[str] | None = None):
    """Answers a command with the fixture whose key its command line starts with."""

    def run(command: list[str]) -> str:
        line = command_line(command)
        if calls is not None:
            calls.append(line)
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
        "--state-dir": str(tmp_path / "state"),  # absent unless a test makes it: Xids since boot
    }
    values.update(overrides)
    return [f"{k}={v}" for k, v in values.items()]


def verdict(capsys, tmp_path: Path, outputs, **overrides: str) -> tuple[int, dict]:
    run = outputs if callable(outputs) else runner(outputs)
    code = health_check.main(args(tmp_path, **overrides), run=run)
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def by_name(result: dict) -> dict[str, dict]:
    return {c["name"]: c for c in result["checks"]}


@pytest.fixture
def boot(tmp_path: Path, monkeypatch) -> Path:
    """A stand-in for /proc/sys/kernel/random/boot_id."""
    path = tmp_path / "boot_id"
    path.write_text("11111111-aaaa-bbbb-cccc-000000000001\n")
    monkeypatch.setattr(health_check, "BOOT_ID_PATH", str(path))
    return path


def test_parse_gpus_keeps_na_fields() -> None:
    rows = health_check.parse_gpus((FIXTURES / "nvidia_smi_p5_ecc.csv").read_text())
    assert len(rows) == 7
    assert rows[2]["ecc_uncorrected"] == "3" and rows[2]["retired_pending"] == "Yes"
    assert rows[6]["ecc_uncorrected"] == "[N/A]"
    assert rows[0]["fabric_state"] == "Completed" and rows[0]["fabric_status"] == "Success"
    with pytest.raises(ValueError, match="fields"):
        health_check.parse_gpus("0, NVIDIA H100 80GB HBM3, 0, No\n")  # the old 4-column query


def test_parse_xids_and_fi_info_and_dcgm() -> None:
    log = health_check.read_kernel_log(str(FIXTURES / "kmsg_xid.txt"))
    assert health_check.parse_xids(log) == [("0000:53:00", 13), ("0000:a8:00", 79)]
    assert health_check.parse_fi_info((FIXTURES / "fi_info_efa.txt").read_text()) == 2
    assert health_check.parse_dcgm((FIXTURES / "dcgmi_diag_fail.txt").read_text()) == ["PCIe"]
    records = health_check.parse_kmsg(log)
    assert [r.seq for r in records] == [1021, 1377]
    assert records[0].text.endswith("\n SUBSYSTEM=pci")  # a continuation line stays with its record


def test_healthy_p5_node_passes(capsys, tmp_path: Path) -> None:
    fake_sysfs(tmp_path, efa=32)
    code, result = verdict(capsys, tmp_path, HEALTHY)
    assert code == 0 and result["verdict"] == "pass", result
    checks = by_name(result)
    assert set(checks) == {
        "gpu_count",
        "gpu_names",
        "ecc_errors",
        "driver_version",
        "pcie_link",
        "clock_slowdown",
        "fabric",
        "remapped_rows",
        "nvlink",
        "xid_errors",
        "efa_devices",
        "efa_ports",
        "disk_free",
        "shm_size",
        "dcgm_diag",
    }
    assert checks["nvlink"]["detail"] == "144 links up (18 per GPU)"
    assert checks["fabric"]["detail"] == "Completed / Success on 8 GPUs"
    assert checks["efa_ports"]["detail"] == "all ports of 32 EFA devices ACTIVE"
    # DCGM is on by default; an image without it says so instead of failing or passing silently.
    assert checks["dcgm_diag"]["skipped"] and "dcgmi is not in this image" in checks["dcgm_diag"]["detail"]


def test_a_p6_b200_node_is_held_to_8_b200s_18_links_each_and_8_efa_devices(capsys, tmp_path: Path) -> None:
    # What the validation chart passes for p6-b200.48xlarge (test_manifests.py), on the p5 recordings renamed.
    fake_sysfs(tmp_path, efa=8)
    b200 = {"--expected-efa": "8", "--gpu-name": "B200"}

    def renamed(outputs: dict[str, str]):
        run = runner(outputs)
        return lambda command: run(command).replace("NVIDIA H100 80GB HBM3", "NVIDIA B200")

    code, result = verdict(capsys, tmp_path, renamed(HEALTHY), **b200)
    assert code == 0 and result["verdict"] == "pass", result
    checks = by_name(result)
    assert checks["gpu_names"]["detail"] == "NVIDIA B200"
    assert checks["nvlink"]["detail"] == "144 links up (18 per GPU)"
    assert checks["efa_ports"]["detail"] == "all ports of 8 EFA devices ACTIVE"
    code, result = verdict(
        capsys, tmp_path, renamed({**HEALTHY, "nvidia-smi nvlink": "nvidia_smi_nvlink_missing.txt"}), **b200
    )
    assert code == 1 and by_name(result)["nvlink"]["detail"] == "NVLinks missing: ['GPU 5: 16 of 18 links active']"
    code, result = verdict(capsys, tmp_path, renamed(HEALTHY), **{**b200, "--gpu-name": "H100"})
    assert code == 1 and not by_name(result)["gpu_names"]["ok"]
    assert health_check.expected_nvlinks("B200") == 18 and health_check.expected_nvlinks("NVIDIA GB200") is None


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
    assert "GPU 3: 17 of 18 links active" in failed["nvlink"]
    # 13 is the application's, not the GPU's
    assert "fatal Xids: [('0000:a8:00', 79)]" in failed["xid_errors"]
    assert "31 EFA devices (sysfs), expected 32" in failed["efa_devices"]
    assert "dev0/1: 1: DOWN" in failed["efa_ports"]
    assert result["xid_marker"] == "not written: the node failed"


def test_an_unreadable_kernel_log_fails_closed(capsys, tmp_path: Path) -> None:
    fake_sysfs(tmp_path, efa=32)
    code, result = verdict(capsys, tmp_path, HEALTHY, **{"--kmsg": str(tmp_path / "no-kmsg")})
    checks = by_name(result)
    assert code == 1 and not checks["xid_errors"]["ok"]
    assert "mount /dev/kmsg" in checks["xid_errors"]["detail"]


# ---- 1. Xids since the last pass, the last driver load or an acknowledged reset ---------------------
def test_xids_before_the_last_pass_on_this_boot_no_longer_count(tmp_path: Path, boot: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    kmsg = str(FIXTURES / "kmsg_xid.txt")  # Xid 13 at seq 1021, Xid 79 at seq 1377
    marker = state / health_check.MARKER_FILE
    this_boot = boot.read_text().strip()

    marker.write_text(json.dumps({"boot_id": this_boot, "kmsg_seq": 1377, "time": "t1"}))
    scan = health_check.check_xids(kmsg, state)
    assert scan.check.ok and "since the last pass (t1, kmsg seq 1377)" in scan.check.detail
    assert scan.last_seq == 1377

    marker.write_text(json.dumps({"boot_id": this_boot, "kmsg_seq": 1100, "time": "t0"}))
    scan = health_check.check_xids(kmsg, state)  # the 79 came after that pass
    assert not scan.check.ok and "79" in scan.check.detail and "overwritten" not in scan.check.detail

    marker.write_text(json.dumps({"boot_id": "an-earlier-boot", "kmsg_seq": 5000, "time": "t-1"}))
    scan = health_check.check_xids(kmsg, state)  # seq numbers restart at boot: an old marker is void
    assert not scan.check.ok and "earlier boot" in scan.check.detail

    marker.write_text("{not json")
    scan = health_check.check_xids(kmsg, state)  # a broken marker counts everything (fail closed)
    assert not scan.check.ok and "unreadable marker" in scan.check.detail

    marker.write_text(json.dumps({"boot_id": this_boot, "kmsg_seq": 10, "time": "t0"}))
    scan = health_check.check_xids(kmsg, state)  # the ring buffer wrapped since the last pass: said so
    assert "records 11-1020 were overwritten" in scan.check.detail


def test_a_pass_moves_the_window_and_a_failure_does_not(capsys, tmp_path: Path, boot: Path) -> None:
    """A node passes, a fatal Xid arrives: it fails, and keeps failing on every rerun (the failed run
    does not move the marker) until the GPU's reset is acknowledged; then it passes again."""
    fake_sysfs(tmp_path, efa=32)
    state = tmp_path / "state"
    state.mkdir()
    kmsg = tmp_path / "kmsg"
    kmsg.write_text((FIXTURES / "kmsg_clean.txt").read_text())
    overrides = {"--kmsg": str(kmsg)}

    code, result = verdict(capsys, tmp_path, HEALTHY, **overrides)
    assert code == 0 and result["xid_marker"] == f"{state / health_check.MARKER_FILE} (kmsg seq 2)"
    marker = json.loads((state / health_check.MARKER_FILE).read_text())
    assert marker["boot_id"] == boot.read_text().strip() and marker["kmsg_seq"] == 2

    with kmsg.open("a") as log:
        log.write("4,3,7000000,-;NVRM: Xid (PCI:0000:a8:00): 48, pid=1, name=python3, DBE ECC error\n")
    for _ in range(2):
        code, result = verdict(capsys, tmp_path, HEALTHY, **overrides)
        assert code == 1 and "('0000:a8:00', 48)" in by_name(result)["xid_errors"]["detail"]
        assert json.loads((state / health_check.MARKER_FILE).read_text())["kmsg_seq"] == 2

    with kmsg.open("a") as log:
        log.write("12,4,8000000,-;llm-infra: gpu reset PCI:00000000:A8:00.0\n")  # nvidia-smi's spelling
    code, result = verdict(capsys, tmp_path, HEALTHY, **overrides)
    assert code == 0, result
    assert "reset of 00000000:A8:00.0 acknowledged (kmsg seq 4)" in by_name(result)["xid_errors"]["detail"]
    assert json.loads((state / health_check.MARKER_FILE).read_text())["kmsg_seq"] == 4


def test_without_a_state_directory_xids_count_since_boot(capsys, tmp_path: Path) -> None:
    fake_sysfs(tmp_path, efa=32)
    code, result = verdict(capsys, tmp_path, HEALTHY)
    assert code == 0
    assert "no state directory" in by_name(result)["xid_errors"]["detail"]
    assert result["xid_marker"].startswith("not written: no state directory")
    assert not (tmp_path / "state").exists()  # not created in the container: it would not outlive the pod


def test_a_driver_reload_clears_earlier_xids() -> None:
    scan = health_check.check_xids(str(FIXTURES / "kmsg_driver_reload.txt"))
    assert scan.check.ok, scan.check.detail  # 79 before the reload, 13 (the application's) after it
    assert "driver loaded (kmsg seq 1503)" in scan.check.detail
    scan = health_check.check_xids(str(FIXTURES / "kmsg_xid_after_reload.txt"))  # the open module's banner
    assert not scan.check.ok and "('0000:53:00', 48)" in scan.check.detail


def test_an_acknowledged_gpu_reset_clears_only_that_gpu() -> None:
    scan = health_check.check_xids(str(FIXTURES / "kmsg_reset_ack.txt"))
    assert not scan.check.ok
    assert "fatal Xids: [('0000:a8:00', 79)]" in scan.check.detail  # the 48 on 53:00 was reset
    assert health_check.pci_key("0000:53:00") == health_check.pci_key("00000000:53:00.0") == (0, 0x53, 0)


# ---- 2. the fatal Xid set -----------------------------------------------------------------------
def test_recovery_action_and_micro_controller_xids_are_fatal() -> None:
    assert {61, 62, 154} <= health_check.FATAL_XIDS
    events = health_check.parse_xid_events((FIXTURES / "kmsg_recovery_action.txt").read_text())
    assert events == [
        ("0000:53:00", 154, True),  # to 0x1 (GPU Reset Required)
        ("0000:64:00", 61, True),
        ("0000:75:00", 62, True),
        ("0000:86:00", 94, True),  # a MIG instance's line: "(PCI:0000:86:00 GPU-I:05)"
        ("0000:97:00", 154, False),  # back to 0x0 (None): nothing to do
    ]
    scan = health_check.check_xids(str(FIXTURES / "kmsg_recovery_action.txt"))
    assert not scan.check.ok and "154" in scan.check.detail and "0000:97:00" not in scan.check.detail


# ---- 3. a dcgmi diag that times out -------------------------------------------------------------
def fake_tool(directory: Path, name: str, script: str) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def test_a_dcgm_diag_timeout_is_a_failed_check_not_a_traceback(capsys, tmp_path: Path, monkeypatch) -> None:
    """A real process that outlives its limit, with a child that keeps the output pipe open: it is
    killed with its process group, and the verdict says the diag timed out."""
    bin_dir = tmp_path / "bin"
    fake_tool(bin_dir, "dcgmi", "sleep 30 &\nexec sleep 30\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(health_check, "DCGM_TIMEOUT_S", {1: 0.5, 2: 0.5, 3: 0.5})
    fake_sysfs(tmp_path, efa=32)
    fixtures = runner(HEALTHY)

    def run(command: list[str]) -> str:
        return health_check.run_command(command) if command[0] == "dcgmi" else fixtures(command)

    started = time.monotonic()
    code, result = verdict(capsys, tmp_path, run)
    assert time.monotonic() - started < 10  # not the 30 s the child holds the pipe for
    assert code == 1 and result["verdict"] == "fail"
    dcgm = by_name(result)["dcgm_diag"]
    assert not dcgm["ok"] and not dcgm["skipped"]
    assert dcgm["detail"] == "inconclusive, counted as a failure: dcgmi diag timed out after 0.5 s"
    assert [c["name"] for c in result["checks"] if not c["ok"]] == ["dcgm_diag"]


def test_command_timeouts_follow_the_diag_level() -> None:
    assert health_check.command_timeout(["dcgmi", "diag", "-r", "1"]) == health_check.DCGM_TIMEOUT_S[1]
    assert health_check.command_timeout(["dcgmi", "diag", "-r", "3"]) == health_check.DCGM_TIMEOUT_S[3]
    assert health_check.command_timeout(["nvidia-smi", "nvlink", "--status"]) == health_check.DEFAULT_TIMEOUT_S


def test_a_check_that_raises_still_ends_in_a_verdict(capsys, tmp_path: Path) -> None:
    fake_sysfs(tmp_path, efa=32)
    fixtures = runner(HEALTHY)

    def run(command: list[str]) -> str:
        if command[:2] == ["nvidia-smi", "nvlink"]:
            raise KeyError("unexpected")
        return fixtures(command)

    code, result = verdict(capsys, tmp_path, run)
    assert code == 1 and by_name(result)["nvlink"]["detail"] == "check raised KeyError: 'unexpected'"


# ---- 4. NVSwitch fabric state -------------------------------------------------------------------
def test_a_gpu_not_registered_with_the_fabric_fails_the_node(capsys, tmp_path: Path) -> None:
    fake_sysfs(tmp_path, efa=32)
    outputs = {**HEALTHY, "nvidia-smi --query-gpu": "nvidia_smi_p5_fabric_not_ready.csv"}
    code, result = verdict(capsys, tmp_path, outputs)
    assert code == 1 and [c["name"] for c in result["checks"] if not c["ok"]] == ["fabric"]
    detail = by_name(result)["fabric"]["detail"]
    assert "GPU 3: state In Progress, status N/A" in detail
    assert "GPU 6: state Completed, status Insufficient Resources" in detail


def test_gpus_without_a_fabric_are_skipped_with_a_note(capsys, tmp_path: Path) -> None:
    # g6e: L40S (PCIe), no NVLink and no NVSwitch fabric
    outputs = {
        **HEALTHY,
        "nvidia-smi --query-gpu": "nvidia_smi_g6e_ok.csv",
        "nvidia-smi nvlink": "nvidia_smi_nvlink_none.txt",
    }
    overrides = {"--expected-gpus": "4", "--expected-efa": "0", "--gpu-name": "L40S"}
    code, result = verdict(capsys, tmp_path, outputs, **overrides)
    fabric = by_name(result)["fabric"]
    assert code == 0, result
    assert fabric["ok"] and fabric["skipped"] and "N/A on every GPU" in fabric["detail"]
    rows = health_check.parse_gpus((FIXTURES / "nvidia_smi_p5_ok.csv").read_text())
    rows[7].update(fabric_state="[N/A]", fabric_status="[N/A]")
    mixed = health_check.check_fabric(rows)
    assert mixed.ok and not mixed.skipped and mixed.detail.endswith("N/A (skipped) on GPUs ['7']")


# ---- 5. NVLink by the number of active links ----------------------------------------------------
def test_nvlink_is_judged_by_active_links_per_gpu(capsys, tmp_path: Path) -> None:
    """GPU 5 lists 16 links, none of them "<inactive>": a check for inactive links alone passes it."""
    fake_sysfs(tmp_path, efa=32)
    outputs = {**HEALTHY, "nvidia-smi nvlink": "nvidia_smi_nvlink_missing.txt"}
    code, result = verdict(capsys, tmp_path, outputs)
    assert code == 1 and by_name(result)["nvlink"]["detail"] == "NVLinks missing: ['GPU 5: 16 of 18 links active']"
    code, result = verdict(capsys, tmp_path, outputs, **{"--expected-nvlinks": "16"})
    assert "GPU 0: 18 of 16 links active" in by_name(result)["nvlink"]["detail"]
    outputs = {**HEALTHY, "nvidia-smi nvlink": "nvidia_smi_nvlink_none.txt"}  # an H100 node listing no links
    code, result = verdict(capsys, tmp_path, outputs)
    assert code == 1 and by_name(result)["nvlink"]["detail"] == "NVLinks missing: ['0 of 8 GPUs listed']"
    assert health_check.expected_nvlinks("H100") == 18  # what the chart passes as --gpu-name
    assert health_check.expected_nvlinks("NVIDIA H100 80GB HBM3") == 18
    assert health_check.expected_nvlinks("NVIDIA H200") == 18
    assert health_check.expected_nvlinks("NVIDIA A100-SXM4-80GB") == 12
    assert health_check.expected_nvlinks("NVIDIA H100 PCIe") is None
    assert health_check.expected_nvlinks("NVIDIA H200 NVL") is None
    assert health_check.expected_nvlinks("NVIDIA L40S") is None


def test_a_gpu_type_without_a_known_link_count_needs_no_inactive_link() -> None:
    text = "GPU 0: NVIDIA H100 PCIe (UUID: GPU-0)\n\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\n"
    check = health_check.check_nvlink(lambda command: text)
    assert check.ok and "no expected link count for ['NVIDIA H100 PCIe']" in check.detail
    check = health_check.check_nvlink(lambda command: text + "\t Link 2: <inactive>\n")
    assert not check.ok and "GPU 0: 1 of 3 links inactive" in check.detail
    assert health_check.check_nvlink(lambda command: "").detail == "0 links up"  # g5/g6e: no NVLink


# ---- 6. EFA ports fail closed -------------------------------------------------------------------
def test_efa_falls_back_to_fi_info_and_missing_tools_fail(capsys, tmp_path: Path) -> None:
    outputs = {**HEALTHY, "fi_info": "fi_info_efa.txt"}
    code, result = verdict(capsys, tmp_path, outputs, **{"--expected-efa": "2"})
    checks = by_name(result)
    assert checks["efa_devices"]["ok"] and "fi_info" in checks["efa_devices"]["detail"]
    # fi_info sees the devices but sysfs does not: their ports cannot be checked, so the node fails.
    assert code == 1 and not checks["efa_ports"]["ok"]
    assert "no EFA device visible in" in checks["efa_ports"]["detail"]
    assert "port states unknown" in checks["efa_ports"]["detail"]
    code, result = verdict(capsys, tmp_path, {}, **{"--expected-efa": "0"})
    assert code == 1
    assert {c["name"]: c["ok"] for c in result["checks"]}["gpu_count"] is False


def test_efa_ports_that_cannot_be_read_fail(tmp_path: Path) -> None:
    fake_sysfs(tmp_path, efa=2)
    (tmp_path / "sys/class/infiniband/dev1/ports/1/state").unlink()
    check = health_check.check_efa_ports(tmp_path, 2)
    assert not check.ok and "dev1/1: unreadable" in check.detail
    for port in (tmp_path / "sys/class/infiniband/dev1/ports").iterdir():
        port.rmdir()
    check = health_check.check_efa_ports(tmp_path, 2)
    assert not check.ok and "dev1: no ports" in check.detail
    check = health_check.check_efa_ports(fake_sysfs(tmp_path / "fewer", efa=1), 2)
    assert not check.ok and "ports of only 1 of 2 EFA devices" in check.detail


# ---- 7. clocks_event_reasons.*, clocks_throttle_reasons.* as a fallback ---------------------------
def rejecting(rejected: tuple[str, ...], fixture: str, calls: list[str]):
    """nvidia-smi that rejects some query fields, as a driver that does not know them does."""
    fixtures = runner({**HEALTHY, "nvidia-smi --query-gpu": fixture}, calls)

    def run(command: list[str]) -> str:
        for field in rejected:
            if field in command_line(command):
                calls.append(command_line(command))
                raise RuntimeError(f'nvidia-smi --query-gpu=... exited 2: Field "{field}" is not a valid field')
        return fixtures(command)

    return run


def test_clock_event_reasons_are_asked_for_first(capsys, tmp_path: Path) -> None:
    fake_sysfs(tmp_path, efa=32)
    calls: list[str] = []
    code, result = verdict(capsys, tmp_path, runner(HEALTHY, calls))
    (query,) = [c for c in calls if c.startswith("nvidia-smi --query-gpu")]
    assert "clocks_event_reasons.hw_slowdown" in query and "clocks_throttle_reasons" not in query
    assert "fabric.state,fabric.status" in query
    assert by_name(result)["clock_slowdown"]["detail"] == "no HW slowdown"


def test_older_drivers_fall_back_to_clock_throttle_reasons(capsys, tmp_path: Path) -> None:
    fake_sysfs(tmp_path, efa=32)
    calls: list[str] = []
    code, result = verdict(capsys, tmp_path, rejecting(("clocks_event_reasons",), "nvidia_smi_p5_ok.csv", calls))
    assert code == 0, result
    queries = [c for c in calls if c.startswith("nvidia-smi --query-gpu")]
    assert len(queries) == 2 and "clocks_throttle_reasons.hw_slowdown" in queries[1]
    assert "read as clocks_throttle_reasons.*" in by_name(result)["clock_slowdown"]["detail"]
    assert by_name(result)["fabric"]["ok"] and not by_name(result)["fabric"]["skipped"]

    calls.clear()  # a driver that knows neither the new clock names nor fabric.*
    run = rejecting(("clocks_event_reasons", "fabric.state"), "nvidia_smi_p5_old_driver.csv", calls)
    code, result = verdict(capsys, tmp_path, run)
    assert code == 0, result
    assert by_name(result)["fabric"]["skipped"] and "does not know fabric.state" in by_name(result)["fabric"]["detail"]

    calls.clear()  # nothing answers: the first (current) error is the one reported
    run = rejecting(("clocks_",), "nvidia_smi_p5_ok.csv", calls)
    code, result = verdict(capsys, tmp_path, run)
    detail = by_name(result)["gpu_count"]["detail"]
    assert code == 1 and 'Field "clocks_" is not a valid field' in detail and "older field names failed too" in detail


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
