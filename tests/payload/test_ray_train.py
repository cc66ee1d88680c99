"""ray_train.py on a local Ray cluster with 2 CPU workers: the same parameters as torchrun with the same
flags, a worker killed mid-run, a new driver after the first one died, the EFA transport check."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import WORKLOADS, env, free_port, json_lines, run_torchrun, summary

pytestmark = pytest.mark.ray
pytest.importorskip("ray.train")

# The same flags for torchrun and Ray Train: 8 tiny steps, a checkpoint every 2.
FLAGS = ["--preset=tiny", "--batch-size=2", "--seq-len=32", "--steps=8", "--checkpoint-every=2", "--log-every=1000"]
RAY_BIN = Path(sys.executable).with_name("ray")
# A loopback test cluster: no usage stats, no token (Ray would take one from ~/.ray if present).
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


@dataclass(frozen=True)
class RayHead:
    address: str
    session: int  # the session of every process it started (workers included)


@pytest.fixture(scope="module")
def ray_head() -> Iterator[RayHead]:
    """A local Ray head (2 CPUs) that the drivers connect to, as a RayJob's driver does."""
    port = free_port()
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    head = subprocess.Popen(
        [
            str(RAY_BIN),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **RAY_ENV},
        start_new_session=True,  # its processes form one session: found and ended by its id
    )
    assert head.stdout is not None
    for line in head.stdout:  # ready once it says it blocks
        if "block forever" in line:
            break
    else:
        raise AssertionError(f"ray start exited with {head.wait()}")
    yield RayHead(f"127.0.0.1:{port}", head.pid)
    head.send_signal(signal.SIGTERM)  # `ray start --block` drains and ends the processes it started
    try:
        head.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def torchrun_run(tmp_path_factory) -> dict:
    """The summary of train.py under torchrun, 2 ranks, uninterrupted: what every Ray run must end with."""
    checkpoints = tmp_path_factory.mktemp("torchrun")
    result = run_torchrun("train.py", [*FLAGS, f"--checkpoint-dir={checkpoints}"], timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return summary(result.stdout)


def ray_train_command(storage: Path, *flags: str) -> list[str]:
    return [sys.executable, "ray_train.py", "--num-workers=2", f"--storage-path={storage}", *FLAGS, *flags]


def ray_env(address: str) -> dict[str, str]:
    return {**env(), **RAY_ENV, "RAY_ADDRESS": address}


def run_ray_train(address: str, storage: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ray_train_command(storage, *flags),
        cwd=WORKLOADS,
        env=ray_env(address),
        capture_output=True,
        text=True,
        timeout=300,
    )


def committed_step_once_saved(checkpoints: Path, process: subprocess.Popen[str], timeout: float = 240) -> int:
    """Wait for the run's first committed checkpoint; the newest committed step then."""
    deadline = time.monotonic() + timeout
    while not (checkpoints / "latest").is_file():
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise AssertionError("no checkpoint: " + (process.communicate()[1] or "")[-3000:])
        time.sleep(0.1)
    return int((checkpoints / "latest").read_text().removeprefix("step-"))


def train_worker_pids(head_session: int) -> list[int]:
    listing = subprocess.run(["ps", "-o", "pid=,args=", "--sid", str(head_session)], capture_output=True, text=True)
    return [int(line.split()[0]) for line in listing.stdout.splitlines() if "RayTrainWorker" in line]


def test_same_flags_and_world_size_end_with_torchruns_parameters(ray_head, torchrun_run, tmp_path: Path) -> None:
    result = run_ray_train(ray_head.address, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    records = json_lines(result.stdout)
    final = summary(result.stdout)
    assert final["param_sha256"] == torchrun_run["param_sha256"]
    assert (final["step"], final["loss"], final["resumed_from"], final["restart"]) == (8, torchrun_run["loss"], None, 0)
    # train.py's JSON lines, rank 0's only: one start, a checkpoint every 2 steps, the summary last.
    assert [r["event"] for r in records if r["event"] in ("start", "checkpoint", "summary")] == [
        "start",
        *["checkpoint"] * 4,
        "summary",
    ]
    assert (tmp_path / "ray-train" / "checkpoints" / "step-00000008" / "COMMITTED").is_file()


def test_a_killed_worker_restarts_the_group_which_resumes_from_the_newest_checkpoint(
    ray_head, torchrun_run, tmp_path: Path
) -> None:
    driver = subprocess.Popen(
        ray_train_command(tmp_path),
        cwd=WORKLOADS,
        env=ray_env(ray_head.address),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    saved = committed_step_once_saved(tmp_path / "ray-train" / "checkpoints", driver)
    (victim, *_) = train_worker_pids(ray_head.session)
    os.kill(victim, signal.SIGKILL)
    out, err = driver.communicate(timeout=300)
    assert driver.returncode == 0, err[-3000:]
    starts = [r for r in json_lines(out) if r["event"] == "start"]
    assert [s["restart"] for s in starts] == [0, 1]
    assert starts[1]["resumed_from"] >= saved > 0  # never step 0
    assert summary(out)["param_sha256"] == torchrun_run["param_sha256"]


def test_a_new_driver_resumes_from_the_same_storage(ray_head, torchrun_run, tmp_path: Path) -> None:
    first = subprocess.Popen(
        ray_train_command(tmp_path),
        cwd=WORKLOADS,
        env=ray_env(ray_head.address),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    saved = committed_step_once_saved(tmp_path / "ray-train" / "checkpoints", first)
    os.killpg(first.pid, signal.SIGKILL)  # the driver dies (a head restart, a resubmitted RayJob)
    first.communicate()
    second = run_ray_train(ray_head.address, tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    (start,) = [r for r in json_lines(second.stdout) if r["event"] == "start"]
    assert start["resumed_from"] >= saved > 0 and start["restart"] >= 1
    assert summary(second.stdout)["param_sha256"] == torchrun_run["param_sha256"]


def test_without_an_efa_transport_the_run_ends_before_training(ray_head, tmp_path: Path) -> None:
    # CPU workers talk over gloo: NCCL logs no channel on the OFI plugin, as on a cluster without EFA.
    result = run_ray_train(ray_head.address, tmp_path, "--expect-efa-transport")
    assert result.returncode == 1
    records = json_lines(result.stdout)
    assert records == [
        {
            "event": "nccl_transport",
            "verdict": "fail",
            "problems": ["no channel on the OFI plugin (aws-ofi-nccl / EFA)"],
            "time": records[0]["time"],
        }
    ]
    assert not (tmp_path / "ray-train" / "checkpoints").exists()


def test_bad_flags_exit_2_naming_the_flag(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "ray_train.py", "--num-workers=0", f"--storage-path={tmp_path}"],
        cwd=WORKLOADS,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "--num-workers: 0 must be >= 1" in result.stderr
    result = subprocess.run(
        [sys.executable, "ray_train.py", "--num-workers=2", f"--storage-path={tmp_path}", "--preset=huge"],
        cwd=WORKLOADS,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "--preset: 'huge' is not allowed" in result.stderr
