"""A failure on ONE rank never leaves the other waiting in a collective (2 gloo ranks on CPU).

Each fault fires on rank 1 only, in the first attempt only. The tests assert what happened, not the
clock: both ranks reach the agreed outcome (the same fallback, the same failure), and no rank reports a
collective that timed out or a rank that did not arrive (the survivors' ``late_ranks`` line,
workloads/late_ranks.py). The only time limit is the subprocess's, a generous guard against a hang."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import ReferenceRun, json_lines, summary, train

pytestmark = pytest.mark.torch

PG_TIMEOUT_SECONDS = 60
EVERY_2 = ["--checkpoint-every=2", f"--pg-timeout-seconds={PG_TIMEOUT_SECONDS}"]
HANG_GUARD_SECONDS = 4 * PG_TIMEOUT_SECONDS  # only against a hang; what happened is asserted, not the time


def assert_no_rank_waited(output: str) -> None:
    """No rank was left in a collective: none timed out, none named a rank that did not arrive."""
    assert '"event": "late_ranks"' not in output and "waiting at the " not in output
    assert "timed out" not in output.lower()


def events(stdout: str, name: str) -> list[dict]:
    return [r for r in json_lines(stdout) if r.get("event") == name]


def test_a_read_error_on_one_rank_falls_back_to_the_previous_checkpoint_on_every_rank(
    reference_run: ReferenceRun, checkpoints_after, tmp_path: Path
) -> None:
    checkpoints_after(6, tmp_path)
    resumed = train(
        ["--steps=10", f"--checkpoint-dir={tmp_path}", *EVERY_2, "--fail-in-checkpoint-load", "--fail-rank=1"],
        timeout=HANG_GUARD_SECONDS,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_no_rank_waited(resumed.stdout + resumed.stderr)
    assert '"kind": "checkpoint_io"' in resumed.stderr  # the fault really fired
    (skipped,) = events(resumed.stdout, "checkpoint_skipped")
    assert skipped["path"].endswith("step-00000006")
    # DCP carried rank 1's read error to both ranks, both agreed to skip this checkpoint, and the reason
    # names rank 1's own cause (DCP's CheckpointException unwrapped), once for the two identical outcomes.
    failure = "rank 1: OSError: [EIO] injected I/O error reading the newest checkpoint's shards"
    assert skipped["reason"] == f"directory: ranks 0, 1: {failure}"
    final = summary(resumed.stdout)
    assert final["resumed_from"] == 4
    assert final["param_sha256"] == reference_run.summary["param_sha256"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_write_error_on_one_rank_restarts_every_rank_from_the_last_commit(
    reference_run: ReferenceRun, tmp_path: Path, mode: str
) -> None:
    args = ["--steps=10", f"--checkpoint-dir={tmp_path}", *EVERY_2, "--fail-in-checkpoint-save-at-step=6"]
    args += ["--fail-rank=1"] + (["--async-checkpoint"] if mode == "async" else [])
    result = train(args, max_restarts=1, timeout=HANG_GUARD_SECONDS)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_no_rank_waited(result.stdout + result.stderr)
    assert '"kind": "checkpoint_io"' in result.stderr
    # Rank 0, whose own write succeeded, raised too, naming rank 1's failure (rank 1 says the same unless
    # torchrun stops it first: whichever rank exits first ends the group).
    failed = [line for line in result.stderr.splitlines() if '"event": "checkpoint_failed"' in line]
    (rank_0,) = [line for line in failed if '"rank": 0' in line]
    assert "step 6" in rank_0 and "rank 1: " in rank_0
    final = summary(result.stdout)
    assert (final["restart"], final["resumed_from"]) == (1, 4)  # step 6 was never committed
    assert final["param_sha256"] == reference_run.summary["param_sha256"]
    assert not list(tmp_path.glob(".tmp-step-*"))
