"""Every flag is validated before the process group starts (issue 30, item 7): one line naming the flag
and what is allowed, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_infra.workloads import train

BAD = [
    (["--steps=0"], "--steps: 0 must be >= 1"),
    (["--seed=-1"], "--seed: -1 must be >= 0"),
    (["--log-every=0"], "--log-every: 0 must be >= 1"),
    (["--throughput-interval-s=0"], "--throughput-interval-s: 0.0 must be > 0 (seconds)"),
    (["--pg-timeout-seconds=0"], "--pg-timeout-seconds: 0 must be >= 1"),
    (["--preset=405b"], "--preset: '405b' is not allowed; allowed: tiny"),
    (["--activation-checkpointing=some"], "--activation-checkpointing: 'some' is not allowed; allowed: none"),
    (["--data-dtype=int8"], "--data-dtype: 'int8' is not allowed; allowed: uint16, uint32"),
    (["--seq-len=1"], "--seq-len: 1 must be >= 2"),
    (["--batch-size=0"], "--batch-size: 0 must be >= 1"),
    (["--global-batch-size=-4"], "--global-batch-size: -4 must be >= 1"),
    (["--lr=0"], "--lr: 0.0 must be > 0"),
    (["--lr=nan"], "--lr: nan is not a finite number"),
    (["--warmup-steps=-1"], "--warmup-steps: -1 must be >= 0"),
    (["--weight-decay=-0.1"], "--weight-decay: -0.1 must be >= 0"),
    (["--on-unhealthy=ignore"], "--on-unhealthy: 'ignore' is not allowed; allowed: stop, rollback"),
    (["--on-unhealthy=rollback"], "--on-unhealthy rollback needs --checkpoint-dir"),
    (["--rollback-attempts=0"], "--rollback-attempts: 0 must be >= 1"),
    (["--spike-factor=1"], "--spike-factor: 1.0 must be > 1 (times the median loss)"),
    (["--spike-factor=inf"], "--spike-factor: inf is not a finite number"),
    (["--spike-window=1"], "--spike-window: 1 must be >= 2"),
    (["--clear-halt"], "--clear-halt needs --checkpoint-dir"),
    (["--checkpoint-dir=/c", "--checkpoint-every=0"], "--checkpoint-every: 0 must be >= 1"),
    (["--checkpoint-dir=/c", "--checkpoint-interval-seconds=-5"], "--checkpoint-interval-seconds: -5.0 must be > 0"),
    (["--checkpoint-dir=/c", "--mtbf-hours=0"], "--mtbf-hours: 0.0 must be > 0 (hours)"),
    (["--checkpoint-dir=/c", "--job-mtbf-hours=-1"], "--job-mtbf-hours: -1.0 must be > 0 (hours)"),
    (["--keep-checkpoints=0"], "--keep-checkpoints: 0 must be >= 1"),
    (["--tiered-checkpointing"], "--tiered-checkpointing needs --checkpoint-dir"),
    (["--steps=5", "--fail-nan-at-step=5"], "--fail-nan-at-step: 5 must lie in 1..4"),
    (["--steps=5", "--fail-hang-at-step=0"], "--fail-hang-at-step: 0 must lie in 1..4"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[argv[-1] for argv, _ in BAD])
def test_a_bad_flag_exits_2_with_one_line_naming_it(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as refused:
        train.parse_config(argv)
    assert refused.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "train.py: invalid configuration:"
    assert any(line.strip().startswith(message) for line in lines[1:]), lines


def test_every_flag_with_a_range_is_covered() -> None:
    checked = {argv[-1].split("=")[0].removeprefix("--").replace("-", "_") for argv, _ in BAD}
    unchecked = {"verdict", "compile", "data", "tiered_s3_uri", "tiered_s3_every", "checkpoint_dir", "async_checkpoint"}
    unchecked |= {"fail_rank", "fail_at_step", "fail_in_checkpoint_at_step", "fail_in_checkpoint_load"}
    unchecked |= {"fail_in_checkpoint_save_at_step", "fail_memory_tier_at_load", "fail_memory_tier_at_step"}
    # Those are booleans, paths (checked at start, below) or checked in their own tests (test_train_config.py,
    # test_tiered_checkpointing.py).
    assert {flag.name for flag in train.TrainConfig.flags()} - checked == unchecked


@pytest.mark.parametrize(
    ("flag", "cause"),
    [
        ("--checkpoint-dir={file}", "cannot be listed (Not a directory)"),
        ("--checkpoint-dir={file}/sub", "cannot be created: {file} is not a writable folder"),
        ("--data={tmp}/missing.bin", "is not a readable file"),
    ],
)
def test_an_unusable_folder_or_file_fails_before_the_process_group(tmp_path: Path, capsys, flag, cause) -> None:
    (tmp_path / "file").write_text("")
    values = {"file": tmp_path / "file", "tmp": tmp_path}
    with pytest.raises(SystemExit) as refused:
        train.main([flag.format(**values)])  # would start a process group next
    assert refused.value.code == 2
    assert cause.format(**values) in capsys.readouterr().err
    assert not train.dist.is_initialized()
