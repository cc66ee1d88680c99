"""Helpers to run the payload under torchrun on CPU (gloo), bounded by timeouts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from llm_infra.rehearsal.ports import reserve_port

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = REPO_ROOT / "workloads"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
# The test preset (workloads/model.py): its steps and checkpoints cost almost nothing beside the launch.
SMALL = ["--preset=nano", "--batch-size=2", "--seq-len=64", "--log-every=1000"]


def free_port() -> int:
    """A loopback port that no other process reserving through ``llm_infra.rehearsal.ports`` gets (pytest-xdist
    workers, a control plane), reserved until this process ends; not held, so any server may bind it (Ray's
    head, hyperpodrun's API)."""
    return reserve_port()


def torchrun_command(script: str, args: list[str], *, nproc: int = 2, max_restarts: int = 0) -> list[str]:
    return [
        *TORCHRUN,
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        # Held as well until this process ends: torch's TCPStore binds it with SO_REUSEADDR, nobody else can.
        f"--rdzv-endpoint=127.0.0.1:{reserve_port(hold=True)}",
        f"--max-restarts={max_restarts}",
        "--monitor-interval=0.5",
        str(WORKLOADS / script),
        *args,
    ]


def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def run_torchrun(script: str, args: list[str], *, nproc: int = 2, max_restarts: int = 0, timeout: int = 120):
    result = subprocess.run(
        torchrun_command(script, args, nproc=nproc, max_restarts=max_restarts),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env(),
        cwd=WORKLOADS,
    )
    return result


def json_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def summary(stdout: str) -> dict:
    (last,) = [r for r in json_lines(stdout) if r.get("event") == "summary"][-1:]
    return last


def train(args: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return run_torchrun("train.py", SMALL + args, **kwargs)


@pytest.fixture
def one_process():
    """A one-rank gloo process group in this process, for the checkpoint manager's unit tests."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@dataclass(frozen=True)
class ReferenceRun:
    """The uninterrupted run every resumed one must match: its summary, JSON lines and checkpoint folder."""

    summary: dict
    records: list[dict]
    checkpoint_dir: Path


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory) -> ReferenceRun:
    """An uninterrupted 10-step run with checkpoints every 2 steps, the newest 2 kept: the result to match."""
    directory = tmp_path_factory.mktemp("reference")
    result = train(["--steps=10", f"--checkpoint-dir={directory}", "--checkpoint-every=2", "--keep-checkpoints=2"])
    assert result.returncode == 0, result.stderr[-3000:]
    return ReferenceRun(summary(result.stdout), json_lines(result.stdout), directory)


@pytest.fixture(scope="session")
def checkpoints_after(tmp_path_factory) -> Callable[[int, Path], Path]:
    """``checkpoints_after(steps, into)``: the checkpoint folder of an uninterrupted ``steps``-step run (2 ranks,
    a checkpoint every 2 steps) copied into ``into``, for a test that damages or resumes it; each run once per
    session (a launch costs seconds, a copy nothing)."""
    made: dict[int, Path] = {}

    def copy(steps: int, into: Path) -> Path:
        if steps not in made:
            directory = tmp_path_factory.mktemp(f"after-{steps}-steps")
            result = train([f"--steps={steps}", f"--checkpoint-dir={directory}", "--checkpoint-every=2"])
            assert result.returncode == 0, result.stderr[-3000:]
            made[steps] = directory
        shutil.copytree(made[steps], into, dirs_exist_ok=True)
        return into

    return copy


def start_torchrun(script: str, args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        torchrun_command(script, args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        cwd=WORKLOADS,
        start_new_session=True,
    )


def sigterm_after(process: subprocess.Popen[str], checkpoint_dir: Path, timeout: float = 90) -> tuple[str, str]:
    """Wait for the first committed checkpoint, then SIGTERM torchrun (as Kubernetes does)."""
    deadline = time.monotonic() + timeout
    while not (checkpoint_dir / "latest").exists():
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise AssertionError("no checkpoint before SIGTERM: " + (process.communicate()[1] or "")[-2000:])
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGTERM)
    return process.communicate(timeout=timeout)
