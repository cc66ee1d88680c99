"""The real cause of a checkpoint failure reaches the one-line error and the JSON event (workloads/checkpointing.py
``describe``): DCP's CheckpointException unwrapped to each rank's own exception, an OSError by its errno; a folder
that cannot be listed fails at start; a load that fails names why instead of advising to move checkpoints away."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import traceback
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.api import CheckpointException

from llm_infra.workloads import checkpointing
from llm_infra.workloads.checkpointing import CheckpointFailed, CheckpointManager, NoLoadableCheckpoint, describe

from .conftest import SMALL, WORKLOADS, env, json_lines, torchrun_command


class Weights:
    def __init__(self, size: int) -> None:
        self.weight = torch.zeros(size)

    def state_dict(self) -> dict:
        return {"weight": self.weight}

    def load_state_dict(self, state: dict) -> None:
        self.weight = state["weight"]


def test_dcps_exception_is_unwrapped_to_each_ranks_cause() -> None:
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/fsx/ckpt/.tmp-step-00000006/__1_0.distcp")
    try:
        raise RuntimeError("write failed") from PermissionError(errno.EACCES, "Permission denied", "/fsx/x")
    except RuntimeError as exc:
        denied = exc
    failures = {1: (full, traceback.StackSummary()), 0: (denied, traceback.StackSummary())}
    assert describe(CheckpointException("save failed", failures)) == (
        "rank 0: PermissionError: [EACCES] Permission denied: '/fsx/x' (in RuntimeError: write failed); "
        "rank 1: OSError: [ENOSPC] No space left on device: '/fsx/ckpt/.tmp-step-00000006/__1_0.distcp'"
    )


def test_an_unlistable_folder_fails_at_start(one_process, tmp_path: Path, monkeypatch) -> None:
    """Before, the folder's glob swallowed the error and the run counted it as empty, training a whole
    interval before the first save failed."""
    (tmp_path / "step-00000004").mkdir()

    def denied(path: object) -> list[str]:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(checkpointing.os, "listdir", denied)
    with pytest.raises(CheckpointFailed, match=r"\[EACCES\] Permission denied"):
        CheckpointManager(tmp_path, state=Weights(4), keep=1)


def test_a_load_that_fails_names_the_cause_not_move_them_away(one_process, tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, state=Weights(4), keep=1)
    manager.save(1)
    manager.close()
    with pytest.raises(NoLoadableCheckpoint) as refused:
        CheckpointManager(tmp_path, state=Weights(8), keep=1).restore()  # another model shape
    message = str(refused.value)
    assert "step-00000001: directory: rank 0: CheckpointException" not in message  # unwrapped
    assert "torch.Size([8])" in message and "torch.Size([4])" in message
    assert "move them away" not in message


def can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "mount", "-t", "tmpfs", "none", "/mnt"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.torch
@pytest.mark.skipif(not can_mount_tmpfs(), reason="needs unshare -rm to mount a small tmpfs (user namespaces)")
def test_a_full_disk_names_no_space_left(tmp_path: Path) -> None:
    """A 2-rank run whose checkpoint folder is a 3 MB tmpfs: the first save (~2.2 MB) fits, the second does
    not. Before, the error said only ``CheckpointException ranks:dict_keys([0, 1])``."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    command = torchrun_command("train.py", SMALL + ["--steps=4", f"--checkpoint-dir={folder}", "--checkpoint-every=2"])
    script = f'mount -t tmpfs -o size=3m none "{folder}" && exec "$@"'
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", *command],
        capture_output=True,
        text=True,
        timeout=120,
        env=env(),
        cwd=WORKLOADS,
    )
    assert result.returncode != 0
    (failed,) = [r for r in json_lines(result.stdout) if r.get("event") == "checkpoint_failed"]
    assert failed["cause"].startswith("OSError: [ENOSPC] No space left on device: ")
    assert "save of step 4 to directory failed: " in failed["reason"]
    assert "No space left on device" in result.stderr  # the one-line error on stderr
