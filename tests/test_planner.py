"""`llm-infra plan` / `simulate`: AWS's published figures (linear model), Daly's vectors, both models
against the Monte-Carlo, presets, plot, bad input."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from llm_infra.cli import build_parser, main
from llm_infra.cli.commands.plan import FLAGS
from llm_infra.failure_rates import FAILURE_PRESETS
from llm_infra.planner import (
    PLOT_DATA_KEY,
    RECOVERY_PRESETS,
    STALL_PRESETS,
    JobSpec,
    PlanError,
    daly_wall_hours,
    forecast,
    simulate,
    simulate_wall_hours,
)
from llm_infra.workloads.checkpoint_interval import daly_interval

RATIO_KEYS = {
    "model",
    "job_mtbf_hours",
    "young_interval_minutes",
    "daly_interval_minutes",
    "downtime_per_failure_minutes_auto",
    "downtime_per_failure_minutes_manual",
    "cost_per_failure_auto",
    "cost_per_failure_manual",
    "goodput_auto",
    "goodput_manual",
    "saving_fraction",
    "optimal_interval_minutes_auto",
    "optimal_interval_minutes_manual",
}
SIZED_KEYS = {"wall_days_ideal", "cost_ideal", "wall_days_auto", "wall_days_manual", "cost_auto", "cost_manual"}

# AWS, "Reduce ML training costs with Amazon SageMaker HyperPod" (2025): 256 p5.48xlarge, 0.05 %
# failures per instance-hour, downtime per failure 280 min (manual) vs 40 min (HyperPod), a 10M
# GPU-hour job at $5 per GPU-hour (8 GPUs: $40 per instance-hour).
AWS_EXAMPLE = ["--instances", "256", "--failure-rate", "0.05", "--gpu-hours", "1e7", "--price", "40"]


def job(**changes: float) -> JobSpec:
    base = dict(
        instances=256,
        gpus_per_instance=8,
        instance_mtbf_hours=100 / 0.0588,
        checkpoint_stall_hours=60 / 3600,
        recovery_auto_hours=10 / 60,
        recovery_manual_hours=2.0,
        gpu_hours=2e5,
        price_per_instance_hour=55.04,
    )
    return JobSpec(**{**base, **changes})  # type: ignore[arg-type]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def plan_json(capsys, *argv: str) -> dict:
    code, out, err = run_cli(capsys, "plan", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


# ---- the published figures ---------------------------------------------------------------------
def test_aws_hyperpod_saving_32_percent_and_25_6_million(capsys) -> None:
    # The presets are AWS's downtimes: 40 min automatic (HyperPod), 280 min manual.
    linear = plan_json(capsys, *AWS_EXAMPLE, "--model", "linear")
    assert linear["model"] == "linear"
    assert linear["downtime_per_failure_minutes_auto"] == 40 and linear["downtime_per_failure_minutes_manual"] == 280
    assert linear["saving_fraction"] == pytest.approx(0.32, abs=0.005)
    assert linear["cost_manual"] - linear["cost_auto"] == pytest.approx(25.6e6, rel=1e-3)
    assert linear["cost_ideal"] == pytest.approx(1e7 * 5)
    # Daly's model also counts failures during a recovery (e^(R/M)): a larger saving for the same inputs.
    daly = plan_json(capsys, *AWS_EXAMPLE, "--model", "daly")
    assert daly["saving_fraction"] == pytest.approx(0.40, abs=0.01)
    assert daly["goodput_manual"] < linear["goodput_manual"] and daly["goodput_auto"] < linear["goodput_auto"]


def test_llama3_70b_takes_132_days_on_256_p5(capsys) -> None:
    # AWS (same post): Llama 3 70B took 6.5M H100 GPU-hours, about 132 days on 256 p5.48xlarge.
    result = plan_json(capsys, "--instances", "256", "--failure-rate", "0.05", "--gpu-hours", "6.5e6")
    assert result["wall_days_ideal"] == pytest.approx(132, abs=0.5)


def test_a_failure_every_5_hours_at_512_instances_without_a_job_size(capsys) -> None:
    # AWS (same post): at 0.04 % failures per instance-hour, 512 instances fail about every 5 hours.
    result = plan_json(capsys, "--instances", "512", "--failure-rate", "0.04")
    assert result["job_mtbf_hours"] == pytest.approx(5, abs=0.15)
    assert set(result) == RATIO_KEYS  # no wall days, no dollars without a job size
    assert 0 < result["goodput_manual"] < result["goodput_auto"] < 1 and 0 < result["saving_fraction"] < 1


def test_cost_per_failure_is_instances_x_price_x_downtime(capsys) -> None:
    result = plan_json(capsys, *AWS_EXAMPLE, "--model", "linear", "--lost-work-minutes", "30")
    assert result["downtime_per_failure_minutes_auto"] == pytest.approx(40 + 30)
    assert result["cost_per_failure_auto"] == pytest.approx(256 * 40 * 70 / 60)
    assert result["cost_per_failure_manual"] == pytest.approx(256 * 40 * 310 / 60)
    # AWS's linear model: wall = ideal x (1 + instances x failures per instance-hour x downtime)
    assert result["goodput_auto"] == pytest.approx(1 / (1 + 256 * 0.0005 * 70 / 60))
    daly = plan_json(capsys, *AWS_EXAMPLE, "--model", "daly", "--lost-work-minutes", "30")
    interval, mtbf = daly["daly_interval_minutes"], daly["job_mtbf_hours"] * 60
    # Daly's own lost work: about half a checkpoint segment, whatever --lost-work-minutes says.
    assert daly["downtime_per_failure_minutes_auto"] - 40 == pytest.approx((interval + 1) / 2, rel=0.05)
    assert daly["cost_per_failure_auto"] == pytest.approx(256 * 40 * daly["downtime_per_failure_minutes_auto"] / 60)
    assert interval < mtbf


@pytest.mark.parametrize(("mtbf_minutes", "expected"), [(24 * 60, 117), (6 * 60, 57), (15, 9.1)])
def test_daly_vectors_through_the_planner(mtbf_minutes: float, expected: float) -> None:
    # One instance whose MTBF is M, a 5-minute checkpoint: Daly's 2006 table.
    result = forecast(job(instances=1, instance_mtbf_hours=mtbf_minutes / 60, checkpoint_stall_hours=5 / 60))
    assert result.daly_interval_minutes == pytest.approx(expected, abs=0.6)
    assert result.young_interval_minutes == pytest.approx((2 * 5 * mtbf_minutes) ** 0.5)


# ---- output ---------------------------------------------------------------------------------------
def test_plan_json_carries_the_chosen_model_with_consistent_numbers(capsys) -> None:
    argv = ["--instances", "256", "--failure-rate", "0.0588", "--gpu-hours", "2e6", "--price", "55.04"]
    argv += ["--checkpoint-stall", "60", "--recovery-auto", "10", "--recovery-manual", "120"]
    result = plan_json(capsys, *argv)
    assert set(result) == RATIO_KEYS | SIZED_KEYS and result["model"] == "daly"  # the default
    assert result["job_mtbf_hours"] == pytest.approx(100 / 0.0588 / 256)
    assert result["wall_days_ideal"] == pytest.approx(2e6 / (256 * 8) / 24)
    assert result["wall_days_ideal"] < result["wall_days_auto"] < result["wall_days_manual"]
    assert 0 < result["goodput_manual"] < result["goodput_auto"] < 1
    assert result["cost_auto"] == pytest.approx(result["wall_days_auto"] * 24 * 256 * 55.04)
    assert result["saving_fraction"] == pytest.approx(1 - result["cost_auto"] / result["cost_manual"])
    linear = plan_json(capsys, *argv, "--model", "linear")
    assert linear["wall_days_auto"] == pytest.approx(result["wall_days_ideal"] * (1 + 256 * 0.000588 * 10 / 60))


def test_the_table_shows_both_models_and_the_presets(capsys) -> None:
    code, out, _ = run_cli(
        capsys, "plan", "--instances", "512", "--failure-preset", "llama3-16k-h100", "--tokens", "15e12",
        "--params", "8e9", "--model", "linear",
    )  # fmt: skip
    assert code == 0
    rows = re.findall(r"^(daly|linear)( \*)?\s+(auto|manual) ", out, re.MULTILINE)
    assert rows == [("daly", "", "auto"), ("daly", "", "manual"), ("linear", " *", "auto"), ("linear", " *", "manual")]
    assert "40.0 min" in out and "280.0 min" in out  # the default recovery presets
    assert f"instance MTBF {100 / FAILURE_PRESETS['llama3-16k-h100']:,.0f} h" in out
    assert "$55.04/instance-hour" in out  # the p5.48xlarge price preset
    assert "daly: automatic recovery saves" in out and "linear: automatic recovery saves" in out


def test_without_a_job_size_the_table_has_no_days_or_dollars(capsys) -> None:
    code, out, _ = run_cli(capsys, "plan", "--instances", "512", "--failure-rate", "0.04")
    assert code == 0
    assert "no job size" in out and "wall days" not in out and "cost $" not in out
    assert "of wall time\n" in out  # a saving fraction, no dollar figure


@pytest.mark.parametrize(
    ("flags", "preset", "key", "value"),
    [
        (
            ["--recovery-auto", "hyperpod-checkpointless", "--checkpointless-success", "1"],
            "hyperpod-checkpointless",
            "downtime_per_failure_minutes_auto",
            2.0,
        ),
        (["--recovery-manual", "hyperpod-auto"], "hyperpod-auto", "downtime_per_failure_minutes_manual", 40.0),
    ],
)
def test_recovery_presets(capsys, flags: list[str], preset: str, key: str, value: float) -> None:
    assert RECOVERY_PRESETS[preset].value == value
    assert plan_json(capsys, *AWS_EXAMPLE, "--model", "linear", *flags)[key] == value


def test_the_tiered_checkpointing_stall_preset(capsys) -> None:
    tiered = plan_json(capsys, *AWS_EXAMPLE, "--checkpoint-stall", "tiered")
    seconds = plan_json(capsys, *AWS_EXAMPLE, "--checkpoint-stall", str(STALL_PRESETS["tiered"].value))
    assert tiered == seconds
    assert tiered["young_interval_minutes"] == pytest.approx((2 * 10 / 60 * 7.8125 * 60) ** 0.5)


def test_every_preset_names_its_aws_source() -> None:
    for preset in [*RECOVERY_PRESETS.values(), *STALL_PRESETS.values()]:
        assert "https://aws.amazon.com/blogs/machine-learning/" in preset.source


# ---- the models against the Monte-Carlo --------------------------------------------------------------
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"instances": 16, "instance_mtbf_hours": 500.0},
        {"instances": 1024, "checkpoint_stall_hours": 0.05},
        {"instances": 64, "recovery_auto_hours": 0.5, "recovery_manual_hours": 4.0},
    ],
)
def test_monte_carlo_agrees_with_daly(changes: dict) -> None:
    spec = job(**changes)
    analytic = forecast(spec).daly
    simulated = simulate(spec, trials=400, seed=7)
    for mode in ("auto", "manual"):
        expected = getattr(analytic, f"wall_days_{mode}")
        tolerance = max(0.02 * expected, 4 * simulated[f"wall_days_{mode}_stderr"])
        assert abs(simulated[f"wall_days_{mode}"] - expected) <= tolerance, (mode, simulated, analytic)


@pytest.mark.parametrize(
    ("instances", "instance_mtbf_hours", "stall_seconds", "recovery_hours", "dominates"),
    [
        (64, 2000, 0.1, 1.0, "downtime"),
        (32, 2000, 0.1, 2.0, "downtime"),
        (128, 4000, 0.1, 0.5, "downtime"),
        (64, 2000, 300, 0.0, "checkpointing"),
        (256, 1700, 600, 1 / 60, "checkpointing"),
        (32, 2000, 120, 0.0, "checkpointing"),
    ],
)
def test_the_linear_model_holds_when_downtime_dominates_daly_when_checkpointing_does(
    instances: int, instance_mtbf_hours: float, stall_seconds: float, recovery_hours: float, dominates: str
) -> None:
    spec = job(
        instances=instances,
        instance_mtbf_hours=instance_mtbf_hours,
        checkpoint_stall_hours=stall_seconds / 3600,
        recovery_auto_hours=recovery_hours,
        gpu_hours=instances * 8 * 600.0,
    )
    assert spec.ideal_hours is not None
    result = forecast(spec)
    interval, mtbf = result.daly_interval_minutes / 60, spec.job_mtbf_hours
    walls = simulate_wall_hours(
        spec.ideal_hours, interval, spec.checkpoint_stall_hours, recovery_hours, mtbf, trials=100, seed=3
    )
    # The time lost to failures and checkpoints, as a fraction of the failure-free time.
    simulated = sum(walls) / len(walls) / spec.ideal_hours - 1
    stderr = (sum((w / spec.ideal_hours - 1 - simulated) ** 2 for w in walls) / (len(walls) - 1) / len(walls)) ** 0.5
    linear, daly = 1 / result.linear.goodput_auto - 1, 1 / result.daly.goodput_auto - 1
    assert abs(simulated - daly) <= 3 * stderr + 0.02 * simulated  # Daly's model holds throughout
    if dominates == "downtime":
        assert abs(simulated - linear) <= 3 * stderr + 0.1 * simulated
    else:  # the linear model counts no checkpoint stall and no lost work: it misses nearly all of it
        assert linear < 0.1 * simulated


def test_simulation_is_seeded_and_prints_both_models(capsys) -> None:
    argv = ["simulate", "--instances", "64", "--mtbf-hours", "2000", "--gpu-hours", "5e4", "--trials", "50", "--json"]
    first, second = run_cli(capsys, *argv)[1], run_cli(capsys, *argv)[1]
    assert first == second
    assert json.loads(first)["simulated"]["trials"] == 50
    code, out, _ = run_cli(capsys, *argv[:-1])
    assert code == 0 and "Daly wall days" in out and "linear wall days" in out


def test_checkpointing_more_or_less_often_than_daly_costs_more() -> None:
    spec = job()
    best = forecast(spec).daly_interval_minutes / 60

    def at(interval: float) -> float:
        assert spec.ideal_hours is not None
        return daly_wall_hours(
            spec.ideal_hours, interval, spec.checkpoint_stall_hours, spec.recovery_auto_hours, spec.job_mtbf_hours
        )

    assert at(best) < at(best / 3) and at(best) < at(best * 3)
    assert best == daly_interval(spec.checkpoint_stall_hours, spec.job_mtbf_hours)


def test_plot_writes_a_png(capsys, tmp_path: Path) -> None:
    path = tmp_path / "plan.png"
    code, out, _ = run_cli(
        capsys, "plan", "--instances", "256", "--failure-preset", "opt-175b", "--gpu-hours", "2e6", "--plot", str(path)
    )
    assert code == 0 and f"plot: {path}" in out
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 20_000


REPO_ROOT = Path(__file__).resolve().parent.parent
PLANNER_PAGE = REPO_ROOT / "docs" / "planner.md"


def png_text(path: Path) -> dict[str, str]:
    """The text chunks (tEXt, zTXt, iTXt) of a PNG, by keyword."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    chunks: dict[str, str] = {}
    position = 8
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind, body = data[position + 4 : position + 8], data[position + 8 : position + 8 + length]
        position += 12 + length
        keyword, _, rest = body.partition(b"\0")
        if kind == b"tEXt":
            chunks[keyword.decode("latin-1")] = rest.decode("latin-1")
        elif kind == b"zTXt":
            chunks[keyword.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        elif kind == b"iTXt":
            compressed, text = rest[0], rest[2:].split(b"\0", 2)[2]
            chunks[keyword.decode("latin-1")] = (zlib.decompress(text) if compressed else text).decode()
    return chunks


def plotted(path: Path) -> dict:
    """The numbers a picture of ``plan --plot`` was drawn from."""
    text = png_text(path).get(PLOT_DATA_KEY)
    assert text is not None, f"{path} holds no '{PLOT_DATA_KEY}': draw it again with the command in docs/planner.md"
    return json.loads(text)


def same_numbers(shown: object, now: object, where: str = "") -> list[str]:
    """Where two plotted series differ (numbers to a relative 1e-9)."""
    if isinstance(shown, dict) and isinstance(now, dict):
        if set(shown) != set(now):
            return [f"{where}: keys {sorted(shown)} != {sorted(now)}"]
        return [d for key in shown for d in same_numbers(shown[key], now[key], f"{where}.{key}")]
    if isinstance(shown, list) and isinstance(now, list):
        if len(shown) != len(now):
            return [f"{where}: {len(shown)} points != {len(now)}"]
        return [d for i, (a, b) in enumerate(zip(shown, now, strict=True)) for d in same_numbers(a, b, f"{where}[{i}]")]
    if isinstance(shown, int | float) and isinstance(now, int | float):
        return [] if now == pytest.approx(shown, rel=1e-9) else [f"{where}: {shown} != {now}"]
    return [] if shown == now else [f"{where}: {shown!r} != {now!r}"]


def test_the_docs_picture_shows_what_the_planner_computes_now(capsys, tmp_path: Path) -> None:
    # The command docs/planner.md says docs/plan.png was made with, run again into a temporary file.
    (line,) = [line for line in PLANNER_PAGE.read_text().splitlines() if "--plot docs/plan.png" in line]
    argv = shlex.split(line)
    assert argv[:2] == ["llm-infra", "plan"]
    fresh = tmp_path / "plan.png"
    argv[argv.index("docs/plan.png")] = str(fresh)
    code, out, err = run_cli(capsys, *argv[1:])
    assert code == 0, err
    now = plotted(fresh)
    differences = same_numbers(plotted(REPO_ROOT / "docs" / "plan.png"), now)
    assert not differences, "docs/plan.png is stale; draw it again with the command in docs/planner.md:\n" + (
        "\n".join(differences[:10])
    )
    # The plotted series are the planner's figures: the saving at the job's size, in both models.
    assert argv[-4:] == ["--model", "linear", "--plot", str(fresh)]
    job = argv[2:-4]
    at_256 = {
        label: {model: dict(map(tuple, points)) for model, points in by.items()}
        for label, by in now["saving_percent"].items()
    }
    for model in ("linear", "Daly"):
        fraction = plan_json(capsys, *job, "--model", model.lower())["saving_fraction"]
        assert at_256["automatic (40 min)"][model][256] == pytest.approx(fraction * 100)
    (resumed,) = [label for label in at_256 if label.startswith("checkpointless (2 min, 68% of failures resumed)")]
    checkpointless = plan_json(capsys, *job, "--recovery-auto", "hyperpod-checkpointless")
    assert at_256[resumed]["Daly"][256] == pytest.approx(checkpointless["saving_fraction"] * 100)
    assert now["optimum"]["auto"][0] == pytest.approx(plan_json(capsys, *job)["optimal_interval_minutes_auto"])


def json_keys(value: object) -> set[str]:
    """Every key of a JSON value, nested ones included (not the recoveries ``beyond_horizon`` is keyed by)."""
    if isinstance(value, dict):
        return {key for key in value} | {
            nested for key, item in value.items() if key != "beyond_horizon" for nested in json_keys(item)
        }
    if isinstance(value, list):
        return {nested for item in value for nested in json_keys(item)}
    return set()


def test_every_key_of_the_json_is_documented(capsys, tmp_path: Path) -> None:
    runs = ["--from-run", "docs/examples/run.log", "--from-run", "docs/examples/drill.json"]
    checkpointless = ["--recovery-auto", "hyperpod-checkpointless", "--checkpoint-interval", "60"]
    manual_beyond = ["--instances", "2048", "--failure-preset", "opt-175b", "--gpu-hours", "1e7"]
    outputs = [
        ["plan", *AWS_EXAMPLE],
        ["plan", "--instances", "512", "--failure-rate", "0.04"],
        ["plan", *manual_beyond],
        ["plan", *AWS_EXAMPLE, *checkpointless, "--plot", str(tmp_path)],
        ["plan", *AWS_EXAMPLE, *runs],
        ["plan", "--instances", "256", "--failure-rate", "0.05", "--tokens", "1e12", *runs],
        ["simulate", *AWS_EXAMPLE, "--trials", "3", *runs],
        ["simulate", *manual_beyond, "--trials", "3"],
    ]
    keys: set[str] = set()
    for argv in outputs:
        code, out, err = run_cli(capsys, *argv, "--json")
        assert code == 0, (argv, err)
        keys |= json_keys(json.loads(out))
    assert {"notes", "warnings", "shutdown_budget_seconds", "beyond_horizon", "plot", "measured"} <= keys
    page = PLANNER_PAGE.read_text()
    missing = sorted(key for key in keys if f"`{key}`" not in page)
    assert not missing, f"docs/planner.md does not name these JSON keys: {missing}"


# ---- bad input ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--instances", "1000", "--mtbf-hours", "10", "--gpu-hours", "10", "--checkpoint-stall", "60"],
            "the checkpoint stall of 60 s (--checkpoint-stall 60) is not below the job MTBF of 36 s (--mtbf-hours 10 "
            "over --instances 1000)",
        ),
        (["--instances", "8", "--mtbf-hours", "100", "--tokens", "1e12"], "--tokens needs --params"),
        (["--instances", "8", "--mtbf-hours", "100", "--plot", "x.png"], "--plot: needs a job size"),
        (
            ["--instances", "8", "--mtbf-hours", "100", "--gpu-hours", "10", "--plot", "p.txt"],
            "--plot: p.txt: the picture is a PNG: give a file name ending in .png, or a folder to write plan.png in",
        ),
        (
            ["--instances", "8", "--mtbf-hours", "100", "--gpu-hours", "10", "--plot", "no/such/folder/p.png"],
            "--plot: no/such/folder/p.png: there is no folder no/such/folder to write it in",
        ),
        (
            ["--instances", "256", "--mtbf-hours", "100", "--gpu-hours", "1e300", "--price", "1e300"],
            "cost_ideal = inf: a figure overflows; --gpu-hours (or --tokens), --price and --instances are too large",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_flag(capsys, argv: list[str], message: str) -> None:
    code, out, err = run_cli(capsys, "plan", *argv)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--instances", "0", "--mtbf-hours", "100"], "argument --instances: expected a whole number >= 1, got '0'"),
        (
            ["--instances", "8", "--failure-rate", "-1"],
            "argument --failure-rate: expected a finite number > 0, got '-1'",
        ),
        (["--instances", "8", "--mtbf-hours", "0"], "argument --mtbf-hours: expected a finite number > 0, got '0'"),
        (["--instances", "8", "--mtbf-hours", "100", "--gpu-hours", "-5"], "argument --gpu-hours: expected a finite"),
        (["--instances", "8", "--mtbf-hours", "100", "--gpu-hours", "inf"], "argument --gpu-hours: expected a finite"),
        (["--instances", "8", "--mtbf-hours", "100", "--price", "nan"], "argument --price: expected a finite number"),
        (
            ["--instances", "8", "--mtbf-hours", "100", "--recovery-auto", "fast"],
            "argument --recovery-auto: expected minutes (a finite number >= 0) or a preset (manual, hyperpod-auto, "
            "hyperpod-checkpointless), got 'fast'",
        ),
        (
            ["--instances", "8", "--mtbf-hours", "100", "--recovery-auto", "inf"],
            "argument --recovery-auto: expected minutes (a finite number >= 0) or a preset (manual, hyperpod-auto, "
            "hyperpod-checkpointless), got 'inf'",
        ),
        (
            ["--instances", "8", "--mtbf-hours", "100", "--checkpoint-stall", "slow"],
            "argument --checkpoint-stall: expected seconds (a finite number > 0) or a preset (tiered), got 'slow'",
        ),
        (
            ["--instances", "8", "--mtbf-hours", "100", "--lost-work-minutes", "-1"],
            "argument --lost-work-minutes: expected a finite number >= 0, got '-1'",
        ),
        (
            ["--instances", "8", "--mtbf-hours", "100", "--checkpointless-success", "1.5"],
            "argument --checkpointless-success: expected a finite number >= 0 and <= 1, got '1.5'",
        ),
    ],
)
def test_the_parser_refuses_what_is_no_number_of_the_flag(capsys, argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["plan", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 2  # the error and where the help is


def command_parser(name: str) -> argparse.ArgumentParser:
    (subparsers,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return subparsers.choices[name]


@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_every_numeric_flag_refuses_inf_and_nan(capsys, command: str) -> None:
    """Every flag that takes a number (or a number or a preset) refuses inf and nan in one usage error that
    names it: JSON could not hold them, and no flag means them."""
    parser = command_parser(command)
    numeric = [a for a in parser._actions if getattr(a.type, "__name__", "") in NUMBER_TYPES]
    assert {a.option_strings[0] for a in numeric} >= {"--instances", "--gpu-hours", "--price", "--recovery-auto"}
    untyped = [a.option_strings for a in parser._actions if a.nargs is None and a.type is None and not a.choices]
    assert untyped == [["--from-run"]] + ([["--plot"]] if command == "plan" else [])  # file names
    job = ["--instances", "8", "--mtbf-hours", "100", "--gpu-hours", "10"]
    for action in numeric:
        flag = action.option_strings[0]
        base = job[: job.index(flag)] + job[job.index(flag) + 2 :] if flag in job else job  # without its value
        for text in ("inf", "-inf", "nan", "NaN", "Infinity"):
            with pytest.raises(SystemExit) as exited:
                main([command, *base, f"{flag}={text}"])
            assert exited.value.code == 2, (flag, text)
            err = capsys.readouterr().err
            assert f"argument {flag}: expected " in err and f"got '{text}'" in err, err
            if action.type.__name__ == "number or preset":
                assert "or a preset (" in err


NUMBER_TYPES = {"number", "whole number", "number or preset"}


def test_the_json_never_holds_nan_or_infinity(capsys, tmp_path: Path) -> None:
    def strict(text: str) -> dict:
        return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))

    for argv in (
        ["plan", *AWS_EXAMPLE, "--json"],
        ["plan", *AWS_EXAMPLE, "--recovery-auto", "hyperpod-checkpointless", "--checkpointless-success", "1", "--json"],
        ["plan", "--instances", "2048", "--failure-preset", "opt-175b", "--gpu-hours", "1e7", "--json"],
        ["simulate", *AWS_EXAMPLE, "--trials", "5", "--price", "0", "--json"],
    ):
        code, out, err = run_cli(capsys, *argv)
        assert code == 0, err
        strict(out)


def test_simulate_at_a_price_of_zero_saves_time_and_costs_nothing(capsys) -> None:
    argv = ["simulate", "--instances", "64", "--mtbf-hours", "2000", "--gpu-hours", "5e4", "--trials", "30"]
    code, out, err = run_cli(capsys, *argv, "--price", "0", "--json")
    assert code == 0, err
    simulated = json.loads(out)["simulated"]
    assert simulated["cost_auto"] == simulated["cost_manual"] == 0
    assert simulated["saving_fraction"] == pytest.approx(
        1 - simulated["wall_days_auto"] / simulated["wall_days_manual"]
    )
    assert 0 < simulated["saving_fraction"] < 1
    code, out, _ = run_cli(capsys, *argv, "--price", "0")
    assert code == 0 and "Daly wall days" in out


def test_a_simulation_too_large_to_draw_is_refused(capsys) -> None:
    code, out, err = run_cli(capsys, "simulate", *AWS_EXAMPLE[:4], "--gpu-hours", "1e12")
    assert code == 2 and out == ""
    assert err.startswith("llm-infra: error: --trials 2000: the simulation would draw about ") and err.count("\n") == 1


def test_plot_into_a_folder_writes_plan_png_there_and_says_so(capsys, tmp_path: Path) -> None:
    argv = ["plan", "--instances", "64", "--mtbf-hours", "2000", "--gpu-hours", "5e4", "--plot", str(tmp_path)]
    code, out, _ = run_cli(capsys, *argv)
    written = tmp_path / "plan.png"
    assert code == 0 and out.endswith(f"plot: {written}\n")
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out, _ = run_cli(capsys, *argv, "--json")
    assert code == 0 and json.loads(out)["plot"] == str(written)


def test_simulate_needs_a_job_size(capsys) -> None:
    # Its parser requires one (and its --help says so: tests/test_planner_checks.py).
    with pytest.raises(SystemExit) as exited:
        main(["simulate", "--instances", "8", "--mtbf-hours", "100"])
    assert exited.value.code == 2
    assert "one of the arguments --gpu-hours --tokens is required" in capsys.readouterr().err
    with pytest.raises(PlanError, match="^gpu_hours: simulate needs a job size$") as refused:
        simulate(job(gpu_hours=None))
    assert refused.value.field == "gpu_hours"


def test_argparse_errors_exit_2_too() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "llm_infra.cli", "plan", "--instances", "8", "--mtbf-hours", "9", "--model", "aws"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "llm-infra plan: error: argument --model: invalid choice: 'aws'" in result.stderr


def test_plan_error_is_a_value_error_naming_the_input_the_command_names_by_its_flag() -> None:
    with pytest.raises(ValueError) as refused:
        forecast(job(checkpoint_stall_hours=0))
    error = refused.value
    assert isinstance(error, PlanError) and error.field == "checkpoint_stall_hours"
    assert str(error) == "checkpoint_stall_hours: 0 s must be > 0 and finite"
    assert error.text(FLAGS) == "--checkpoint-stall: 0 s must be > 0 and finite"
