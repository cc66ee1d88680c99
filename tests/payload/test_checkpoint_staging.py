"""Async checkpoint saves one after another: the stager (workloads/checkpointing.py ``_staging``) and the wait
for the previous write.

Found on an H200 (torch 2.11): the run kept one ``DefaultStager`` for its pinned buffers, but 2.11's
stager closes itself after each stage, so the second async save of every GPU run failed with
``KeyError: <class 'type'>``. CPU runs never stage through it (DCP's own copy on CPU), so these tests
drive torch's stager directly, unpinned, and check the version gate against the installed torch.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemWriter, staging

from llm_infra.workloads.checkpointing import STAGER_SINGLE_USE, CheckpointManager, stager_is_single_use

pytestmark = pytest.mark.torch

UNPINNED = staging.StagingOptions(
    use_pinned_memory=False, use_shared_memory=False, use_async_staging=False, use_non_blocking_copy=False
)


def training_state() -> dict:
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "progress": {"step": 3}}


class Fixed:
    """A run's state that never changes (DCP's Stateful, as the checkpoint manager takes it)."""

    def __init__(self, state: dict) -> None:
        self.state = state

    def state_dict(self) -> dict:
        return self.state

    def load_state_dict(self, state: dict) -> None:
        self.state = state


def stages_twice(stager: staging.DefaultStager, state: dict) -> bool:
    stager.stage(state)
    try:
        staged = stager.stage(state)
    except KeyError:
        return False
    assert torch.equal(staged["model"]["weight"], state["model"]["weight"])
    return True


def test_the_gate_matches_the_installed_torch() -> None:
    """The run reuses one stager exactly where torch's stager can stage again."""
    assert stages_twice(staging.DefaultStager(UNPINNED), training_state()) is not STAGER_SINGLE_USE


def test_a_closed_stager_fails_as_seen_on_the_gpu() -> None:
    state = training_state()
    stager = staging.DefaultStager(UNPINNED)
    stager.stage(state)
    stager.close()  # what 2.11's stage does at its end
    with pytest.raises(KeyError, match="<class 'type'>"):
        stager.stage(state)


@pytest.mark.parametrize(
    ("version", "single_use"),
    [("2.8.0+cu128", False), ("2.10.0", False), ("2.11.0+cu130", True), ("2.12.1", True), ("2.13.0", False)],
)
def test_single_use_releases(version: str, single_use: bool) -> None:
    assert stager_is_single_use(version) is single_use


def test_a_save_that_waits_for_the_previous_write_says_so(tmp_path, monkeypatch) -> None:
    """Seen on the H200: 1b saves every 10 steps (3 s) with a 24 s write; each save then waited ~20 s
    for the one before. The checkpoint event names that wait, so the schedule can be fixed."""
    slow_write = FileSystemWriter.write_data

    def write_data(self, plan, planner):  # type: ignore[no-untyped-def]
        time.sleep(1.0)
        return slow_write(self, plan, planner)

    monkeypatch.setattr(FileSystemWriter, "write_data", write_data)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        records: list[dict] = []
        manager = CheckpointManager(tmp_path, state=Fixed(training_state()), async_save=True, log=records.append)
        manager.save(1)
        manager.save(2)  # the first is still being written
        manager.close()
    finally:
        dist.destroy_process_group()
    saves = {r["step"]: r for r in records if r["event"] == "checkpoint"}
    assert "waited_for_previous_seconds" not in saves[1]
    assert 0.5 < saves[2]["waited_for_previous_seconds"] <= saves[2]["stall_seconds"]
