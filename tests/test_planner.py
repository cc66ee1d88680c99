"""`llm-infra plan` / `simulate`: Daly's vectors, analytic vs Monte-Carlo, presets, plot, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llm_infra.cli import main
from llm_infra.planner import FAILURE_PRESETS, JobSpec, PlanError, expected_wall_hours, plan, simulate

REQUIRED_KEYS = {
    "job_mtbf_hours",
    "young_interval_minutes",
    "daly_interval_minutes",
    "goodput_auto",
    "goodput_manual",
    "wall_days_ideal",
    "wall_days_auto",
    "wall_days_manual",
    "cost_auto",
    "cost_manual",
    "saving_fraction",
}


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


@pytest.mark.parametrize(("mtbf_minutes", "expected"), [(24 * 60, 117), (6 * 60, 57), (15, 9.1)])
def test_daly_vectors_through_the_planner(mtbf_minutes: float, expected: float) -> None:
    # One instance whose MTBF is M, a 5-minute checkpoint: Daly's 2006 table.
    result = plan(job(instances=1, instance_mtbf_hours=mtbf_minutes / 60, checkpoint_stall_hours=5 / 60))
    assert result.daly_interval_minutes == pytest.approx(expected, abs=0.6)
    assert result.young_interval_minutes == pytest.approx((2 * 5 * mtbf_minutes) ** 0.5)


def test_plan_json_has_every_key_and_consistent_numbers(capsys) -> None:
    code, out, _ = run_cli(
        capsys,
        "plan",
        "--instances",
        "256",
        "--failure-rate",
        "0.0588",
        "--gpu-hours",
        "2e6",
        "--checkpoint-stall",
        "60",
        "--recovery-auto",
        "10",
        "--recovery-manual",
        "120",
        "--price",
        "55.04",
        "--json",
    )
    assert code == 0
    result = json.loads(out)
    assert set(result) >= REQUIRED_KEYS
    assert result["job_mtbf_hours"] == pytest.approx(100 / 0.0588 / 256)
    assert result["wall_days_ideal"] == pytest.approx(2e6 / (256 * 8) / 24)
    assert result["wall_days_ideal"] < result["wall_days_auto"] < result["wall_days_manual"]
    assert 0 < result["goodput_manual"] < result["goodput_auto"] < 1
    assert result["cost_auto"] == pytest.approx(result["wall_days_auto"] * 24 * 256 * 55.04)
    assert result["saving_fraction"] == pytest.approx(1 - result["cost_auto"] / result["cost_manual"])


def test_the_table_output_and_presets(capsys) -> None:
    code, out, _ = run_cli(
        capsys,
        "plan",
        "--instances",
        "512",
        "--failure-preset",
        "llama3-16k-h100",
        "--tokens",
        "15e12",
        "--params",
        "8e9",
        "--mfu",
        "0.4",
    )
    assert code == 0
    assert "auto recovery" in out and "manual recovery" in out and "Daly" in out
    assert f"instance MTBF {100 / FAILURE_PRESETS['llama3-16k-h100']:,.0f} h" in out
    assert "$55.04/instance-hour" in out  # the p5.48xlarge price preset


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"instances": 16, "instance_mtbf_hours": 500.0},
        {"instances": 1024, "checkpoint_stall_hours": 0.05},
        {"instances": 64, "recovery_auto_hours": 0.5, "recovery_manual_hours": 4.0},
    ],
)
def test_monte_carlo_agrees_with_the_analytic_model(changes: dict) -> None:
    spec = job(**changes)
    analytic = plan(spec)
    simulated = simulate(spec, trials=400, seed=7)
    for mode in ("auto", "manual"):
        expected = getattr(analytic, f"wall_days_{mode}")
        tolerance = max(0.02 * expected, 4 * simulated[f"wall_days_{mode}_stderr"])
        assert abs(simulated[f"wall_days_{mode}"] - expected) <= tolerance, (mode, simulated, analytic)


def test_simulation_is_seeded(capsys) -> None:
    argv = ["simulate", "--instances", "64", "--mtbf-hours", "2000", "--gpu-hours", "5e4", "--trials", "50", "--json"]
    first, second = run_cli(capsys, *argv)[1], run_cli(capsys, *argv)[1]
    assert first == second
    assert json.loads(first)["simulated"]["trials"] == 50


def test_checkpointing_more_or_less_often_than_daly_costs_more() -> None:
    spec = job()
    best = plan(spec).daly_interval_minutes / 60

    def at(interval: float) -> float:
        return expected_wall_hours(
            spec.ideal_hours, interval, spec.checkpoint_stall_hours, spec.recovery_auto_hours, spec.job_mtbf_hours
        )

    assert at(best) < at(best / 3) and at(best) < at(best * 3)


def test_plot_writes_a_png(capsys, tmp_path: Path) -> None:
    path = tmp_path / "plan.png"
    code, out, _ = run_cli(
        capsys, "plan", "--instances", "256", "--failure-preset", "opt-175b", "--gpu-hours", "2e6", "--plot", str(path)
    )
    assert code == 0 and f"plot: {path}" in out
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 20_000


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--instances", "0", "--mtbf-hours", "100", "--gpu-hours", "10"], "--instances: 0 must be >= 1"),
        (["--instances", "8", "--failure-rate", "-1", "--gpu-hours", "10"], "--failure-rate: -1.0 must be > 0"),
        (["--instances", "8", "--mtbf-hours", "0", "--gpu-hours", "10"], "--mtbf-hours: 0.0 must be > 0"),
        (
            ["--instances", "1000", "--mtbf-hours", "10", "--gpu-hours", "10", "--checkpoint-stall", "60"],
            "--checkpoint-stall: 60 s is not below the job MTBF (36 s",
        ),
        (["--instances", "8", "--mtbf-hours", "100", "--tokens", "1e12"], "--tokens needs --params"),
        (["--instances", "8", "--mtbf-hours", "100", "--gpu-hours", "-5"], "the job size must be > 0"),
    ],
)
def test_bad_input_exits_2_with_the_flag(capsys, argv: list[str], message: str) -> None:
    code, _, err = run_cli(capsys, "plan", *argv)
    assert code == 2
    assert message in err


def test_argparse_errors_exit_2_too() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "llm_infra.cli", "plan", "--instances", "8"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "one of the arguments --failure-rate --mtbf-hours --failure-preset is required" in result.stderr


def test_plan_error_is_a_value_error_naming_the_flag() -> None:
    with pytest.raises(PlanError, match="--checkpoint-stall"):
        plan(job(checkpoint_stall_hours=0))
