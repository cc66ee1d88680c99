"""A failure on ONE rank never leaves the other waiting in a collective (2 gloo ranks on CPU).

Each fault fires on rank 1 only, in the first attempt only. Every run here has a short process-group
timeout: a rank left waiting in a collective would wait that long and then crash, so a run that ends
well within it, with the result of an uninterrupted run, shows the ranks agreed on the outcome."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .conftest import json_lines, summary, train

pytestmark = pytest.mark.torch

PG_TIMEOUT_SECONDS = 60  # what a hang would cost; every run below must end well inside it
EVERY_2 = ["--checkpoint-every=2", f"--pg-timeout-seconds={PG_TIMEOUT_SECONDS}"]


def timed(args: list[str], **kwargs):
    started = time.monotonic()
    result = train(args, timeout=3 * PG_TIMEOUT_SECONDS, **kwargs)
    return result, time.monotonic() - started


def events(stdout: str, name: str) -> list[dict]:
    return [r for r in json_lines(stdout) if r.get("event") == name]


def test_a_read_error_on_one_rank_falls_back_to_the_previous_checkpoint_on_every_rank(
    reference_run: dict, tmp_path: Path
) -> None:
    first = train(["--steps=6", f"--checkpoint-dir={tmp_path}", *EVERY_2])
    assert first.returncode == 0, first.stderr[-3000:]
    resumed, seconds = timed(
        ["--steps=10", f"--checkpoint-dir={tmp_path}", *EVERY_2, "--fail-in-checkpoint-load", "--fail-rank=1"]
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert seconds < PG_TIMEOUT_SECONDS / 2
    assert '"kind": "checkpoint_io"' in resumed.stderr  # the fault really fired
    (skipped,) = events(resumed.stdout, "checkpoint_skipped")
    assert skipped["path"].endswith("step-00000006")
    # DCP carried rank 1's read error to both ranks, and both agreed to skip this checkpoint.
    failure = "CheckpointException: CheckpointException ranks:dict_keys([1])"
    assert skipped["reason"] == f"directory: rank 0: {failure}; rank 1: {failure}"
    final = summary(resumed.stdout)
    assert final["resumed_from"] == 4
    assert final["param_sha256"] == reference_run["param_sha256"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_write_error_on_one_rank_restarts_every_rank_from_the_last_commit(
    reference_run: dict, tmp_path: Path, mode: str
) -> None:
    args = ["--steps=10", f"--checkpoint-dir={tmp_path}", *EVERY_2, "--fail-in-checkpoint-save-at-step=6"]
    args += ["--fail-rank=1"] + (["--async-checkpoint"] if mode == "async" else [])
    result, seconds = timed(args, max_restarts=1)
    assert result.returncode == 0, result.stderr[-3000:]
    assert seconds < PG_TIMEOUT_SECONDS / 2
    assert '"kind": "checkpoint_io"' in result.stderr
    # Rank 0, whose own write succeeded, raised too, naming rank 1's failure (rank 1 says the same unless
    # torchrun stops it first: whichever rank exits first ends the group).
    failed = [line for line in result.stderr.splitlines() if '"event": "checkpoint_failed"' in line]
    (rank_0,) = [line for line in failed if '"rank": 0' in line]
    assert "step 6" in rank_0 and "rank 1: " in rank_0
    final = summary(result.stdout)
    assert (final["restart"], final["resumed_from"]) == (1, 4)  # step 6 was never committed
    assert final["param_sha256"] == reference_run["param_sha256"]
    assert not list(tmp_path.glob(".tmp-step-*"))
