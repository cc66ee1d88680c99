"""The payload against what Kubernetes, torchrun, the training operator and NCCL really do.

- The kubelet stops a pod with SIGTERM to PID 1 (torchrun), which forwards it to its workers and
  SIGKILLs them after its shutdown timeout; other nodes' pods get no signal at all.
- The training operator (elasticPolicy) marks a PyTorchJob Succeeded once a replica exits 0.
- NCCL takes device tensors only.
- A job resumed on more or fewer nodes than it saved with must reshard, not start over.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from llm_infra.workloads import accelerator, stopping

from .conftest import SMALL, TORCHRUN, WORKLOADS, env, free_port, json_lines, summary, train

pytestmark = pytest.mark.torch


# ---- NCCL: collectives take tensors on the training device --------------------------------------
class Recorded(Exception):
    pass


def test_small_collectives_put_their_tensor_on_the_training_device(monkeypatch) -> None:
    seen: list[torch.device] = []

    def all_reduce(tensor: torch.Tensor, op=None) -> None:
        seen.append(tensor.device)
        raise Recorded

    monkeypatch.setattr(accelerator.dist, "all_reduce", all_reduce)
    with pytest.raises(Recorded):
        accelerator.reduce_numbers([1.0, 0.0], torch.device("meta"))
    assert seen == [torch.device("meta")]  # never the CPU default an NCCL group rejects


TENSOR_COLLECTIVES = {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_gather_into_tensor", "reduce"}


def test_every_small_collective_goes_through_the_device_aware_helper() -> None:
    # The payload's own tensor collectives: only reduce_numbers and the bandwidth benchmark's payload
    # tensor (created with device=) may call them directly.
    direct = []
    for path in sorted(WORKLOADS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in TENSOR_COLLECTIVES
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "dist"
            ):
                direct.append(f"{path.name}:{node.func.attr}")
    assert sorted(direct) == [
        "accelerator.py:all_reduce",
        "allreduce_bench.py:all_reduce",
        "allreduce_bench.py:all_reduce",
    ]
    bench = (WORKLOADS / "allreduce_bench.py").read_text()
    assert "tensor = torch.ones(max(1, size_bytes // 4), dtype=torch.float32, device=device)" in bench


# ---- torchrun's shutdown budget ---------------------------------------------------------------
def test_shutdown_budget_follows_torchrun(monkeypatch) -> None:
    monkeypatch.delenv("HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH", raising=False)  # not under hyperpodrun
    monkeypatch.delenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", raising=False)
    assert accelerator.shutdown_budget_seconds() == 30.0  # torchrun's default
    monkeypatch.setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "240")
    from torch.distributed.launcher.api import LaunchConfig

    configurable = "shutdown_timeout" in LaunchConfig.__dataclass_fields__
    assert accelerator.shutdown_budget_seconds() == (240.0 if configurable else 30.0)


def test_a_final_save_happens_only_when_it_fits_the_budget(monkeypatch) -> None:
    monkeypatch.setattr(dist, "all_reduce", lambda tensor, op=None: None)  # one rank: the values stand
    cpu = torch.device("cpu")
    stop = stopping.StopSignal(budget_seconds=30.0)
    stop.requested_at = time.monotonic()
    assert stopping.final_save_fits(10.0, stop, cpu)  # the last save until committed: 10 s of 30 s left
    assert not stopping.final_save_fits(29.0, stop, cpu)
    assert stopping.final_save_fits(None, stop, cpu)  # nothing measured yet: try
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


# ---- the kubelet's SIGTERM and the operator's exit codes --------------------------------------
def agent(port: int, node_rank: int, args: list[str]) -> subprocess.Popen[str]:
    """One torchrun agent of a two-node job (a pod), with one worker."""
    command = [
        *TORCHRUN,
        "--nnodes=2",
        f"--node-rank={node_rank}",
        "--nproc-per-node=1",
        "--master-addr=127.0.0.1",
        f"--master-port={port}",
        "--max-restarts=0",
        "--monitor-interval=0.5",
        str(WORKLOADS / "train.py"),
        *SMALL,
        *args,
    ]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=WORKLOADS
    )


def test_sigterm_to_one_pod_fails_the_job_on_every_node_and_a_rerun_resumes_identically(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    args = ["--steps=400", f"--checkpoint-dir={ckpt}", "--checkpoint-every=2"]
    port = free_port()
    stopped_pod, survivor = agent(port, 0, args), agent(port, 1, args)
    try:
        deadline = time.monotonic() + 90
        while not (ckpt / "latest").exists():
            assert time.monotonic() < deadline and stopped_pod.poll() is None, "no checkpoint before SIGTERM"
            time.sleep(0.2)
        os.kill(stopped_pod.pid, signal.SIGTERM)  # to torchrun, PID 1 of the pod: not the process group
        out0, err0 = stopped_pod.communicate(timeout=90)
        out1, err1 = survivor.communicate(timeout=90)
    finally:
        for process in (stopped_pod, survivor):
            if process.poll() is None:
                process.kill()
    assert stopped_pod.returncode != 0
    assert survivor.returncode != 0, "the survivor's exit 0 would mark the PyTorchJob Succeeded"
    (stopped,) = [r for r in json_lines(out0) if r.get("event") == "stopped"]
    step = stopped["step"]
    assert stopped["exit_code"] == 143 and step < 400
    # The other node's first process says it stopped too (hyperpodrun's log rules end on that line).
    assert [r["step"] for r in json_lines(out1) if r.get("event") == "stopped"] == [step]
    assert (ckpt / "latest").read_text() == f"step-{step:08d}"  # the final save fit the budget

    end = step + 4
    rerun = train([f"--steps={end}", f"--checkpoint-dir={ckpt}", "--checkpoint-every=2"])
    reference = train([f"--steps={end}", f"--checkpoint-dir={tmp_path / 'reference'}", "--checkpoint-every=2"])
    assert rerun.returncode == 0 and reference.returncode == 0, rerun.stderr[-2000:] + reference.stderr[-2000:]
    assert summary(rerun.stdout)["resumed_from"] == step
    assert summary(rerun.stdout)["param_sha256"] == summary(reference.stdout)["param_sha256"]


# ---- elastic world sizes ------------------------------------------------------------------------
@pytest.mark.parametrize("resumed_ranks", [1, 3])
def test_a_different_world_size_resumes_from_the_newest_checkpoint(
    checkpoints_after, tmp_path: Path, resumed_ranks: int
) -> None:
    checkpoints_after(4, tmp_path)
    again = train(["--steps=6", f"--checkpoint-dir={tmp_path}", "--checkpoint-every=2"], nproc=resumed_ranks)
    assert again.returncode == 0, again.stderr[-3000:]
    records = json_lines(again.stdout)
    assert summary(again.stdout)["resumed_from"] == 4 and summary(again.stdout)["step"] == 6
    (change,) = [r for r in records if r.get("event") == "world_size_changed"]
    assert (change["saved"], change["now"], change["step"]) == (2, resumed_ranks, 4)
    marker = json.loads((tmp_path / "step-00000006" / "COMMITTED").read_text())
    assert marker["world_size"] == resumed_ranks


def test_committed_checkpoints_that_none_loads_stop_the_run(checkpoints_after, tmp_path: Path) -> None:
    checkpoints_after(4, tmp_path)
    for shard in tmp_path.glob("step-*/*.distcp"):
        shard.write_bytes(b"\0garbage" * 16)
    again = train(["--steps=6", f"--checkpoint-dir={tmp_path}", "--checkpoint-every=2"])
    assert again.returncode != 0
    assert "refusing to start over from step 0" in again.stderr
    assert not any(r.get("event") == "summary" for r in json_lines(again.stdout))
