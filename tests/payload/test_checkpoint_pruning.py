"""Pruning off the commit path (workloads/checkpointing.py ``_prune``): rank 0 deletes old checkpoints in the
background after the commit is agreed, never while the other ranks wait in the agreement; the retention
rule is unchanged (keep the newest ``--keep-checkpoints``). One process, gloo."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from llm_infra.workloads import checkpointing
from llm_infra.workloads.checkpointing import CheckpointManager, NoCheckpoints

pytestmark = pytest.mark.torch


class Counter:
    """A run's state (DCP's Stateful) whose step the checkpoint holds."""

    def __init__(self) -> None:
        self.weight = torch.zeros(4)
        self.step = 0

    def state_dict(self) -> dict:
        return {"weight": self.weight, "progress": {"step": self.step}}

    def load_state_dict(self, state: dict) -> None:
        self.weight, self.step = state["weight"], state["progress"]["step"]


@pytest.fixture
def one_process():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def steps_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_a_slow_prune_does_not_hold_up_the_commit(one_process, tmp_path: Path, monkeypatch) -> None:
    released = threading.Event()
    pruning = threading.Event()
    prune = CheckpointManager._prune

    def slow_prune(self: CheckpointManager) -> None:
        pruning.set()
        assert released.wait(30), "the test never let the prune finish"
        prune(self)

    monkeypatch.setattr(CheckpointManager, "_prune", slow_prune)
    state = Counter()
    manager = CheckpointManager(tmp_path, state=state, keep=1)
    for step in (1, 2, 3):
        state.step = step
        started = time.monotonic()
        manager.save(step)  # committed: the agreement does not wait for the prune blocked above
        assert time.monotonic() - started < 10
        assert pruning.wait(10)
    assert (tmp_path / "latest").read_text() == "step-00000003"
    # Not yet pruned; the folder's lease is held while the run lasts.
    assert steps_in(tmp_path) == ["LEASE", "latest", "step-00000001", "step-00000002", "step-00000003"]
    released.set()
    manager.close()  # waits for the pruning
    assert steps_in(tmp_path) == ["latest", "step-00000003"]


def test_pruning_keeps_the_newest_and_a_restart_clears_a_prune_cut_short(one_process, tmp_path: Path) -> None:
    state = Counter()
    manager = CheckpointManager(tmp_path, state=state, keep=2)
    for step in range(1, 6):
        state.step = step
        manager.save(step)
    manager.close()
    assert steps_in(tmp_path) == ["latest", "step-00000004", "step-00000005"]
    # A process killed mid-prune leaves the folder renamed aside, never a committed-looking half.
    (tmp_path / f"{checkpointing.PRUNED_PREFIX}00000003").mkdir()
    resumed = Counter()
    manager = CheckpointManager(tmp_path, state=resumed, keep=2)
    assert manager.restore() == 5 and resumed.step == 5
    manager.close()
    assert steps_in(tmp_path) == ["latest", "step-00000004", "step-00000005"]


def test_a_failed_prune_is_logged_never_fatal(one_process, tmp_path: Path, monkeypatch) -> None:
    def broken(self: CheckpointManager) -> None:
        raise PermissionError("read-only file system")

    monkeypatch.setattr(CheckpointManager, "_prune", broken)
    records: list[dict] = []
    manager = CheckpointManager(tmp_path, state=Counter(), keep=1, log=records.append)
    manager.save(1)
    manager.close()
    assert [r["event"] for r in records if r["event"].startswith("checkpoint")][-2:] == [
        "checkpoint",
        "checkpoint_prune_incomplete",
    ]
    assert "PermissionError: read-only file system" in records[-1]["reason"]


def test_the_training_loops_checkpoint_calls_with_and_without_a_directory(one_process, tmp_path: Path) -> None:
    """What train.py's loop calls each step: the vote (into the agreement), then one step_done."""
    for checkpoints in (NoCheckpoints(), CheckpointManager(tmp_path, state=Counter(), keep=1)):
        assert checkpoints.restore() is None
        vote = checkpoints.vote(1, 0.1)
        assert (vote.save_due, vote.write_done) == (False, True)
        checkpoints.step_done(1, save=True, ranks_done_writing=1)
        checkpoints.close()
        expected = [] if isinstance(checkpoints, NoCheckpoints) else ["step-00000001"]
        assert [p.name for p in checkpoints.committed()] == expected


def test_retention_keeps_the_newest_healthy_and_the_newest_verified_checkpoint(one_process, tmp_path: Path) -> None:
    """--keep-checkpoints 1 never deletes the last good state: step 1 is the newest whose digests a load
    verified, step 2 the newest whose steps were healthy; 3 and 4 were saved after the guard said unhealthy."""
    state = Counter()
    manager = CheckpointManager(tmp_path, state=state, keep=1)
    state.step = 1
    manager.save(1)
    manager.close()
    manager = CheckpointManager(tmp_path, state=Counter(), keep=1)
    assert manager.restore() == 1  # verifies step 1's digests: recorded in its commit record
    for step, healthy in ((2, True), (3, False), (4, False)):
        state.step = step
        manager.save(step, healthy=healthy)
    manager.close()
    assert steps_in(tmp_path) == ["latest", "step-00000001", "step-00000002", "step-00000004"]
    markers = {step: checkpointing._read_marker(tmp_path / f"step-0000000{step}") or {} for step in (1, 2, 4)}
    assert [(markers[s]["healthy"], markers[s]["verified"]) for s in (1, 2, 4)] == [
        (True, True),
        (True, False),
        (False, False),
    ]
