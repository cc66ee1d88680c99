"""A checkpoint written by an earlier version of the payload, whose state lacked what this one adds (the run's
flags and model shape, the skipped sample ranges: ``TrainState.keys_added_later``), still resumes: those keys
are left out of the load with a warning, and the flags given now apply (their differences cannot be listed). A
checkpoint that lacks any other key is refused as before: nothing is silently left at its initial value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from llm_infra.workloads.checkpointing import CheckpointManager, NoLoadableCheckpoint


class Earlier:
    """The state as an earlier version saved it: weights and a step."""

    def __init__(self) -> None:
        self.weight = torch.arange(4.0)

    def state_dict(self) -> dict:
        return {"model": {"weight": self.weight}, "progress": {"step": 7}}

    def load_state_dict(self, state: dict) -> None:
        raise AssertionError("not loaded here")


class Current:
    """Today's state: it adds ``run`` and ``progress.skipped``, declared as added later."""

    keys_added_later = ("run.config", "progress.skipped")

    def __init__(self, *, added_later: tuple[str, ...] | None = None) -> None:
        if added_later is not None:
            self.keys_added_later = added_later
        self.weight = torch.zeros(4)
        self.loaded: dict | None = None

    def state_dict(self) -> dict:
        return {
            "model": {"weight": self.weight},
            "progress": {"step": 0, "skipped": "[]"},
            "run": {"config": json.dumps({"lr": 0.1})},
        }

    def load_state_dict(self, state: dict) -> None:
        self.loaded = state
        self.weight = state["model"]["weight"]


@pytest.fixture
def earlier_checkpoint(one_process, tmp_path: Path) -> Path:
    manager = CheckpointManager(tmp_path, state=Earlier(), keep=1)
    manager.save(7)
    manager.close()
    return tmp_path


def test_an_earlier_versions_checkpoint_loads_without_the_keys_added_since(earlier_checkpoint: Path, capsys) -> None:
    state = Current()
    manager = CheckpointManager(earlier_checkpoint, state=state, keep=1)
    assert manager.restore() == 7
    manager.close()

    assert torch.equal(state.weight, torch.arange(4.0))
    assert state.loaded is not None
    assert state.loaded["progress"] == {"step": 7}  # what the checkpoint held: no made-up 'skipped'
    assert "run" not in state.loaded or "config" not in state.loaded["run"]  # no made-up flags either
    warnings = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    (older,) = [w for w in warnings if w["event"] == "checkpoint_older_format"]
    assert older["absent"] == ["progress.skipped", "run.config"]


def test_a_checkpoint_lacking_any_other_key_is_refused(earlier_checkpoint: Path) -> None:
    state = Current(added_later=("progress.skipped",))  # run.config is not one a later version added
    with pytest.raises(NoLoadableCheckpoint, match="run.config"):
        CheckpointManager(earlier_checkpoint, state=state, keep=1).restore()
