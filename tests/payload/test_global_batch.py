"""The same run at any world size: ``--global-batch-size`` keeps each optimizer step's batch (gradient
accumulation), and the data position is the number of global samples consumed, so a resume on another
world size reads the samples an uninterrupted run would, never one it already read (2 gloo ranks on CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_infra.workloads import train as train_module

from .conftest import ReferenceRun, json_lines, summary, train

pytestmark = pytest.mark.torch

STEPS = 8
# 8 samples per optimizer step: 2 ranks x 2 micro-steps of 2, or 1 rank x 4 micro-steps of 2.
BATCH = ["--batch-size=2", "--global-batch-size=8", f"--steps={STEPS}", "--checkpoint-every=4"]


def step_lines(stdout: str) -> dict[int, dict]:
    return {r["step"]: r for r in json_lines(stdout) if r.get("event") == "step"}


def run(directory: Path, nproc: int, *extra: str):
    result = train([*BATCH, f"--checkpoint-dir={directory}", "--log-every=1", *extra], nproc=nproc)
    return result


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[int, dict]:
    result = run(tmp_path_factory.mktemp("global-batch-reference"), 2)
    assert result.returncode == 0, result.stderr[-3000:]
    assert summary(result.stdout)["samples"] == 8 * STEPS
    return step_lines(result.stdout)


@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2)])
def test_a_resume_on_another_world_size_continues_the_same_run(
    uninterrupted: dict[int, dict], tmp_path: Path, before: int, after: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both launches are one job (as the manifests say through LLM_INFRA_JOB): the second takes the crashed
    # first's lease over at once, where another job would wait for it to go stale (checkpoint_lease.py).
    monkeypatch.setenv("LLM_INFRA_JOB", f"tests/global-batch-{before}-{after}")
    # The first launch stops for good before step 5 (no restart); step 4 is committed.
    first = run(tmp_path, before, "--fail-at-step=5", "--fail-rank=0")
    assert first.returncode != 0 and '"kind": "exit"' in first.stderr
    resumed = run(tmp_path, after)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    start = next(r for r in json_lines(resumed.stdout) if r.get("event") == "start")
    assert (start["resumed_from"], start["samples"], start["global_batch"]) == (4, 32, 8)
    assert start["accumulation"] == 8 // (2 * after)
    lines = step_lines(resumed.stdout)
    assert sorted(lines) == [5, 6, 7, 8]
    for step, line in lines.items():
        # The same global samples (the count consumed, and the data behind the loss) ...
        assert line["samples"] == uninterrupted[step]["samples"] == 8 * step
        # ... and the same losses, within what another reduction order changes.
        assert line["loss"] == pytest.approx(uninterrupted[step]["loss"], abs=2e-4)


def test_without_a_global_batch_the_batch_size_is_per_rank(reference_run: ReferenceRun) -> None:
    # The session's reference run: 2 ranks, --batch-size=2, no --global-batch-size, 10 steps.
    start = next(r for r in reference_run.records if r.get("event") == "start")
    assert (start["global_batch"], start["accumulation"]) == (4, 1)
    assert reference_run.summary["samples"] == 4 * 10


def test_a_world_size_that_cannot_split_the_global_batch_is_refused() -> None:
    config = train_module.TrainConfig.from_flat({"batch_size": 2, "global_batch_size": 6})
    assert train_module.Batching.of(config, 3).accumulation == 1
    with pytest.raises(SystemExit, match="--global-batch-size 6 cannot be split over 2 ranks of --batch-size 2"):
        train_module.Batching.of(config, 2)
    with pytest.raises(SystemExit, match="--global-batch-size: 7 is not a multiple of --batch-size 2"):
        train_module.TrainConfig.from_flat({"batch_size": 2, "global_batch_size": 7}).validate()


def test_micro_batches_tile_the_global_batch_at_any_world_size() -> None:
    for world_size in (1, 2, 4):
        config = train_module.TrainConfig.from_flat({"batch_size": 2, "global_batch_size": 8})
        batching = train_module.Batching.of(config, world_size)
        firsts = sorted(
            batching.first_sample(16, micro, rank)
            for micro in range(batching.accumulation)
            for rank in range(world_size)
        )
        assert firsts == [16, 18, 20, 22]  # step 3's samples 16..23, in micro-batches of 2
