"""train.py's configuration: flags, a config file, and errors for unknown or contradictory input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_infra.workloads import checkpointing, train

from .conftest import WORKLOADS


def test_flags_and_file_merge_flags_win(tmp_path: Path) -> None:
    config_file = tmp_path / "run.json"
    config_file.write_text(
        json.dumps({"preset": "tiny", "steps": 50, "checkpoint_dir": "/tmp/x", "checkpoint_every": 5})
    )
    config = train.parse_config(["--config", str(config_file), "--steps", "80", "--async-checkpoint"])
    assert (config.run.steps, config.checkpoint.every, config.checkpoint.async_save) == (80, 5, True)
    assert config.model.preset == "tiny" and config.checkpoint.dir == "/tmp/x"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--preset", "405b"], "--preset: '405b' is not allowed"),
        (["--async-checkpoint"], "--async-checkpoint needs --checkpoint-dir"),
        (["--fail-rank", "1"], "--fail-rank needs a fault: --fail-at-step"),
        (["--steps", "10", "--fail-at-step", "10"], "--fail-at-step: 10 must lie in 1..9"),
        (["--checkpoint-dir", "/x", "--checkpoint-every", "5", "--mtbf-hours", "3"], "are alternatives: pick one"),
        (["--verdict"], "--verdict needs --checkpoint-dir"),
        (["--seq-len", "99999"], "exceeds the preset's max_seq_len"),
    ],
)
def test_contradictory_flags_are_errors(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as err:
        train.parse_config(argv)
    assert message in str(err.value)


def test_unknown_flags_and_keys_are_errors(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        train.parse_config(["--stepz", "3"])
    assert "unrecognized arguments: --stepz" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"stepz": 3}))
    with pytest.raises(SystemExit):
        train.parse_config(["--config", str(bad)])
    assert "unknown keys ['stepz']" in capsys.readouterr().err


def test_daly_schedule_uses_the_measured_stall() -> None:
    # MTBF 1 h, save stall 2 s: Daly's interval is ~118 s of training between checkpoints.
    schedule = checkpointing.SaveSchedule(job_mtbf_hours=1.0)
    assert not schedule.due(1, since_last_save=100, step_seconds=0.01, save_stall=2.0)
    assert schedule.due(1, since_last_save=120, step_seconds=0.01, save_stall=2.0)
    # A slower save moves the next checkpoint out (sqrt(2 * 8 * 3600) = 240 s).
    assert not schedule.due(1, since_last_save=120, step_seconds=0.01, save_stall=8.0)
    assert checkpointing.SaveSchedule(every_steps=5).due(10, 0, 0.01, None)
    assert not checkpointing.SaveSchedule().due(10, 1e9, 0.01, None)


def test_exit_process_keeps_buffered_output_and_the_exit_code() -> None:
    # train.py ends through exit_process (no interpreter teardown to race with gloo threads):
    # the summary line still buffered in stdout must arrive, and the code must reach torchrun.
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from accelerator import exit_process; "
            "sys.stdout.write('{\"event\": \"summary\"}\\n'); sys.stderr.write('bye'); exit_process(3)",
        ],
        capture_output=True,
        text=True,
        cwd=WORKLOADS,
        env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},  # stdout is block-buffered
        timeout=60,
    )
    assert child.returncode == 3
    assert child.stdout == '{"event": "summary"}\n' and child.stderr == "bye"


def test_every_flag_has_help_with_its_default_and_no_markup() -> None:
    parser = train.config_parser(None)
    for action in parser._actions:
        if action.dest in ("help", "config"):
            continue
        assert action.help and "(default: " in action.help, action.dest
        assert "``" not in action.help and ":func:" not in action.help, action.dest
    assert "(default: 8)" in parser.format_help().replace("\n", " ")


def test_mtbf_hours_is_one_instances_as_in_the_planner(monkeypatch: pytest.MonkeyPatch) -> None:
    """--mtbf-hours means what `llm-infra plan` means by it: one instance's MTBF; the job's is that over
    the nodes (8 processes per node here: 16 ranks are 2 nodes). --job-mtbf-hours is the whole job's."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    runtime = train.Runtime(rank=0, world_size=16, device=train.torch.device("cpu"), restart_count=0)
    assert runtime.nodes == 2
    assert train.job_mtbf_hours(train.parse_config(["--checkpoint-dir=/x", "--mtbf-hours=100"]), runtime) == 50
    assert train.job_mtbf_hours(train.parse_config(["--checkpoint-dir=/x", "--job-mtbf-hours=7"]), runtime) == 7
    with pytest.raises(SystemExit, match="alternatives"):
        train.parse_config(["--checkpoint-dir=/x", "--mtbf-hours=100", "--job-mtbf-hours=7"])


@pytest.mark.parametrize(
    ("name", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA B200", 2250.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("Tesla T4", None),
    ],
)
def test_peak_flops_per_gpu_variant(name: str, tflops: float | None) -> None:
    assert train.peak_tflops(name) == tflops


def test_selective_checkpointing_recomputes_every_second_matmul() -> None:
    policy = train._selective_policy()

    class Context:
        is_recompute = False

    mm, add = train.torch.ops.aten.mm.default, train.torch.ops.aten.add.Tensor
    saved = train.CheckpointPolicy.MUST_SAVE
    decisions = [policy(Context(), mm) == saved for _ in range(4)]
    assert decisions == [True, False, True, False]
    assert policy(Context(), add) != saved  # cheap ops are recomputed
    Context.is_recompute = True  # the recomputation counts on its own, and decides alike
    assert [policy(Context(), mm) == saved for _ in range(4)] == decisions


# Every flag the manifests, the docs and the config files use, by group: the spelling never changes.
FLAGS_BY_GROUP = {
    "run": ["steps", "seed", "verdict", "log_every", "throughput_interval_s", "pg_timeout_seconds"],
    "model": ["preset", "activation_checkpointing", "compile"],
    "data": ["data", "data_dtype", "seq_len", "batch_size", "global_batch_size"],
    "optimizer": ["lr", "warmup_steps", "weight_decay"],
    "health": ["on_unhealthy", "rollback_attempts", "spike_factor", "spike_window", "clear_halt"],
    "checkpoint": [
        "tiered_checkpointing",
        "tiered_s3_uri",
        "tiered_s3_every",
        "checkpoint_dir",
        "checkpoint_every",
        "checkpoint_interval_seconds",
        "mtbf_hours",
        "job_mtbf_hours",
        "keep_checkpoints",
        "async_checkpoint",
    ],
    "faults": [
        "fail_at_step",
        "fail_rank",
        "fail_in_checkpoint_at_step",
        "fail_in_checkpoint_load",
        "fail_in_checkpoint_save_at_step",
        "fail_memory_tier_at_load",
        "fail_memory_tier_at_step",
        "fail_nan_at_step",
        "fail_hang_at_step",
    ],
}


def test_the_config_is_grouped_and_each_field_carries_its_help() -> None:
    flags = train.TrainConfig.flags()
    grouped: dict[str, list[str]] = {}
    for flag in flags:
        grouped.setdefault(flag.group, []).append(flag.name)
        assert flag.help and "(default:" not in flag.help, flag.name  # added by the parser
    assert grouped == FLAGS_BY_GROUP
    # The fault group is FaultInjector's own fields: the loop hands it over whole.
    injector_fields = set(train.FaultInjector.__dataclass_fields__) - {"rank", "restart_count"}
    assert set(FLAGS_BY_GROUP["faults"]) == injector_fields
    # --help shows one section per group.
    titles = [group.title for group in train.config_parser(None)._action_groups]
    assert titles[-len(FLAGS_BY_GROUP) :] == list(FLAGS_BY_GROUP)


def test_flat_names_round_trip_and_read_the_groups(tmp_path: Path) -> None:
    config = train.parse_config(["--checkpoint-dir=/fsx/c", "--keep-checkpoints=5", "--data=/fsx/tokens.bin"])
    assert (config.checkpoint.dir, config.checkpoint.keep, config.data.source) == ("/fsx/c", 5, "/fsx/tokens.bin")
    assert train.TrainConfig.from_flat(config.flat()) == config
    assert config.flat()["data"] == "/fsx/tokens.bin"
    # Code outside the payload may read a flag by its name (the defaults on the class), never set one.
    assert (config.checkpoint_dir, config.keep_checkpoints) == ("/fsx/c", 5)
    assert train.TrainConfig.throughput_interval_s == 60.0
    with pytest.raises(AttributeError, match="checkpoint.dir"):
        config.checkpoint_dir = "/elsewhere"  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown keys"):
        train.TrainConfig.from_flat({"stepz": 3})
