"""The payload in the worker environment of hyperpodrun (hyperpod-elastic-agent 1.1.3), the HyperPod
training operator's launcher.

The agent itself needs torch<2.12 (this repo tests torch 2.13), so it cannot run here: the tests give
train.py the environment its ``_start_workers`` sets for each worker
(src/hyperpod_elastic_agent/elastic_agent/hyperpod_elastic_agent.py) and check the three things that
differ from torchrun:

- no agent serves the TCPStore at MASTER_ADDR:MASTER_PORT (``TORCHELASTIC_USE_AGENT_STORE=False``):
  rank 0 must;
- the log monitor reads each node's local rank 0 only (logagent/log_agent.py): every node's first
  process prints the liveness lines its rules match, rank 0 alone the run's results;
- the SIGTERM-to-SIGKILL budget is the agent's ``--shutdown-timeout``, whatever the torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .conftest import SMALL, WORKLOADS, env, free_port, json_lines

pytestmark = pytest.mark.torch
sys.path.insert(0, str(WORKLOADS))

import accelerator  # noqa: E402
import train as train_module  # noqa: E402

# What hyperpodrun 1.1.3 tells every worker beyond torchrun's variables (``_start_workers``).
AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"
AGENT_SOCKET = "HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH"
# The lines hyperpodrun's log rules match (k8s_manifests/hyperpod_job.py): liveness, on every node.
LIVENESS = {"start", "step", "throughput", "stopped"}


def hyperpodrun_worker_env(node: int, nodes: int, master_port: int) -> dict[str, str]:
    """One worker per node, as hyperpodrun starts it on node ``node`` (``--nproc-per-node=1``)."""
    return {
        **env(),
        "LOCAL_RANK": "0",
        "RANK": str(node),
        "GROUP_RANK": str(node),
        "LOCAL_WORLD_SIZE": "1",
        "WORLD_SIZE": str(nodes),
        "GROUP_WORLD_SIZE": str(nodes),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        AGENT_STORE: "False",  # str(use_agent_store): HyperPodRendezvousBackend.use_agent_store is False
        AGENT_SOCKET: f"/tmp/hyperpod_elastic_agent_{os.getpid()}.sock",
    }


# ---- the store ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("agent_store", "rank", "hosts"),
    [
        ("True", 0, False),  # torchrun (c10d, static): its agent serves the store
        ("True", 1, False),
        ("False", 0, True),  # hyperpodrun
        ("False", 1, False),
        (None, 0, True),  # no launcher agent: torch's env:// lets rank 0 serve it too
    ],
)
def test_rank_0_serves_the_store_unless_the_launcher_agent_does(monkeypatch, agent_store, rank, hosts) -> None:
    if agent_store is None:
        monkeypatch.delenv(AGENT_STORE, raising=False)
    else:
        monkeypatch.setenv(AGENT_STORE, agent_store)
    assert train_module.hosts_the_store(rank) is hosts


# ---- which process prints what ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rank", "local_rank", "writes_liveness", "writes_results"),
    [
        (0, 0, True, True),
        (8, 0, True, False),  # the first process of the second node (8 per node)
        (9, 1, False, False),
        (0, None, True, True),  # Ray Train: every line goes to one driver, rank 0 writes them all
        (1, None, False, False),
    ],
)
def test_every_nodes_first_process_writes_liveness_and_rank_0_the_results(
    rank: int, local_rank: int | None, writes_liveness: bool, writes_results: bool
) -> None:
    written: list[str] = []
    runtime = train_module.Runtime(rank, 16, torch.device("cpu"), 0, write_line=written.append, local_rank=local_rank)
    train_module.emit(runtime, {"event": "step", "step": 1}, every_node=True)
    assert len(written) == writes_liveness
    written.clear()
    train_module.emit(runtime, {"event": "summary", "step": 1})
    assert len(written) == writes_results


def test_two_nodes_without_an_agent_store_train_and_each_node_logs_its_liveness(tmp_path: Path) -> None:
    # Two "nodes" of one worker each, with hyperpodrun's environment: no process serves the store
    # but rank 0 (before, both waited for one until the timeout), and node 1's only process, its
    # local rank 0 (the one the agent watches), prints the lines the rules match.
    port = free_port()
    args = [
        *SMALL,
        "--steps=6",
        "--log-every=1",
        "--throughput-interval-s=0.2",
        "--pg-timeout-seconds=60",
        f"--checkpoint-dir={tmp_path}",
        "--checkpoint-every=3",
    ]
    nodes = [
        subprocess.Popen(
            [sys.executable, str(WORKLOADS / "train.py"), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=hyperpodrun_worker_env(node, 2, port),
            cwd=WORKLOADS,
        )
        for node in (0, 1)
    ]
    try:
        outputs = [process.communicate(timeout=180) for process in nodes]
    finally:
        for process in nodes:
            if process.poll() is None:
                process.kill()
    assert [p.returncode for p in nodes] == [0, 0], outputs[0][1][-2000:] + outputs[1][1][-2000:]
    first, second = (json_lines(out) for out, _ in outputs)
    for records in (first, second):
        assert [r["step"] for r in records if r["event"] == "step"] == [1, 2, 3, 4, 5, 6]
        liveness = [r["event"] for r in records if r["event"] in LIVENESS]
        assert liveness[0] == "start" and "throughput" in liveness
    assert {r["event"] for r in second} <= LIVENESS  # no summary, checkpoint, resume... twice
    assert [r["event"] for r in first if r["event"] not in LIVENESS] == [
        "checkpoint_storage",
        "checkpoint",
        "checkpoint",
        "summary",
    ]


# ---- the shutdown budget ------------------------------------------------------------------------
def test_the_budget_is_hyperpodruns_shutdown_timeout_whatever_the_torch(monkeypatch) -> None:
    monkeypatch.setenv(AGENT_SOCKET, "/tmp/hyperpod_elastic_agent_1.sock")
    monkeypatch.setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "300")  # the job passes --shutdown-timeout=300 too
    assert accelerator.shutdown_budget_seconds() == 300.0
    monkeypatch.delenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")
    assert accelerator.shutdown_budget_seconds() == 15.0  # run.py: --shutdown-timeout default
