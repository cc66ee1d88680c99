"""One job per checkpoint folder (workloads/checkpoint_lease.py): the lease names the job that owns the folder; a
different job is refused while it is renewed, the same job's next incarnation and a crashed job's successor take
it over, and a job whose lease was taken over commits nothing."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import types
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from llm_infra.workloads import checkpoint_lease
from llm_infra.workloads.checkpoint_lease import LEASE, FolderHeld, Lease, LeaseLost, job_identity
from llm_infra.workloads.checkpointing import CheckpointFailed, CheckpointManager

from .conftest import SMALL, json_lines, start_torchrun, train


class Counter:
    def __init__(self) -> None:
        self.weight = torch.zeros(4)

    def state_dict(self) -> dict:
        return {"weight": self.weight}

    def load_state_dict(self, state: dict) -> None:
        self.weight = state["weight"]


def test_the_job_identity_comes_from_the_launcher() -> None:
    host = socket.gethostname()
    assert job_identity({"LLM_INFRA_JOB": "training/llama", "TORCHELASTIC_RUN_ID": "abc"}) == "job training/llama"
    assert job_identity({"TORCHELASTIC_RUN_ID": "abc", "TORCHELASTIC_RESTART_COUNT": "1"}) == "torchrun run abc"
    # A PyTorchJob (or torchrun) without a rendezvous id says "none": the agent that restarts the workers.
    assert job_identity({"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0"}) == (
        f"torchrun agent {host}:{os.getppid()}"
    )
    assert job_identity({}) == f"process {host}:{os.getpid()}"


def test_a_ray_train_workers_job_is_its_run_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a Ray Train worker the run name is the job (before torchrun's run id; LLM_INFRA_JOB still
    first); outside one (no train context) the order goes on to torchrun's."""

    class Context:
        def __init__(self, name: str | None) -> None:
            self.name = name

        def get_experiment_name(self) -> str:
            if self.name is None:
                raise RuntimeError("get_context() is only available inside a Ray Train worker")
            return self.name

    ray_train = types.ModuleType("ray.train")
    monkeypatch.setitem(sys.modules, "ray.train", ray_train)
    torchrun = {"TORCHELASTIC_RUN_ID": "abc", "TORCHELASTIC_RESTART_COUNT": "0"}
    ray_train.get_context = lambda: Context("llama-pretrain")  # type: ignore[attr-defined]
    assert job_identity(torchrun) == "ray run llama-pretrain"
    assert job_identity({**torchrun, "LLM_INFRA_JOB": "training/llama"}) == "job training/llama"
    ray_train.get_context = lambda: Context(None)  # type: ignore[attr-defined]
    assert job_identity(torchrun) == "torchrun run abc"


def test_another_live_job_is_refused_naming_the_holder(tmp_path: Path) -> None:
    holder = Lease(tmp_path, "job training/a")
    assert holder.acquire() == "created"
    with pytest.raises(FolderHeld) as refused:
        Lease(tmp_path, "job training/b").acquire()
    message = str(refused.value)
    assert f"is in use by job training/a on {socket.gethostname()} (pid {os.getpid()})" in message
    assert "To proceed: wait for that job to end" in message and "another --checkpoint-dir" in message
    assert json.loads((tmp_path / LEASE).read_text())["job"] == "job training/a"


def test_the_same_job_takes_over_at_once_and_a_stale_lease_after_the_takeover_time(tmp_path: Path) -> None:
    first = Lease(tmp_path, "job training/a")
    first.acquire()
    again = Lease(tmp_path, "job training/a")  # the job's next incarnation (a restart)
    assert again.acquire().startswith("taken over from job training/a")
    with pytest.raises(LeaseLost, match="taken over by job training/a"):
        first.ensure_held()
    record = json.loads((tmp_path / LEASE).read_text())
    record["renewed_at"] -= checkpoint_lease.TAKEOVER_SECONDS + 1  # that job crashed: no renewal since
    (tmp_path / LEASE).write_text(json.dumps(record))
    successor = Lease(tmp_path, "job training/b")
    assert successor.acquire().startswith("taken over from job training/a")
    successor.ensure_held()
    assert sorted(p.name for p in tmp_path.iterdir()) == [LEASE]  # no private or stale copies left


def test_renewal_keeps_the_lease_fresh_and_release_frees_the_folder(tmp_path: Path) -> None:
    lease = Lease(tmp_path, "job training/a", renew_seconds=0.05)
    lease.acquire()
    renewed = json.loads((tmp_path / LEASE).read_text())["renewed_at"]
    lease.start_renewing()
    time.sleep(0.3)
    assert json.loads((tmp_path / LEASE).read_text())["renewed_at"] > renewed
    lease.release()
    assert not (tmp_path / LEASE).exists()
    assert Lease(tmp_path, "job training/b").acquire() == "created"


def test_a_job_whose_lease_was_taken_over_commits_nothing(tmp_path: Path) -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        manager = CheckpointManager(tmp_path, state=Counter(), keep=2, job="job training/a")
        manager.save(1)
        intruder = {"job": "job training/b", "token": "other", "renewed_at": time.time()}
        (tmp_path / LEASE).write_text(json.dumps(intruder))
        with pytest.raises(CheckpointFailed, match="lease was taken over by job training/b"):
            manager.save(2)
        assert [p.name for p in manager.committed()] == ["step-00000001"]
    finally:
        dist.destroy_process_group()


@pytest.mark.torch
def test_a_second_job_on_a_live_jobs_folder_exits_naming_the_holder(tmp_path: Path) -> None:
    """Two whole torchrun jobs on one folder: the second exits non-zero within 60 s naming the first and how
    to proceed, and leaves the first's save in progress and its checkpoints alone; the first runs on."""
    first = start_torchrun("train.py", SMALL + ["--steps=400", f"--checkpoint-dir={tmp_path}", "--checkpoint-every=2"])
    try:
        deadline = time.monotonic() + 90
        while not (tmp_path / "latest").exists():
            assert first.poll() is None and time.monotonic() < deadline, "the first job never committed"
            time.sleep(0.2)
        in_progress = tmp_path / ".tmp-step-99999999"  # what the first job's save in progress looks like
        in_progress.mkdir()
        started = time.monotonic()
        second = train(["--steps=4", f"--checkpoint-dir={tmp_path}", "--checkpoint-every=2"], timeout=90)
        assert time.monotonic() - started < 60
        assert second.returncode != 0
        holder = f"torchrun agent {socket.gethostname()}:{first.pid}"
        (refusal,) = [r for r in json_lines(second.stdout) if r.get("event") == "checkpoint_folder_held"]
        assert f"is in use by {holder}" in refusal["reason"] and "To proceed" in refusal["reason"]
        assert "checkpoint_folder_held" in second.stderr
        assert in_progress.is_dir() and first.poll() is None
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate()
