"""`llm-infra plan` / `simulate` (issue 23): a fixed --checkpoint-interval beside Daly's optimum; jobs beyond
the failure horizon refused (automatic recovery) or shown without figures (manual), naming the flags the
user gave and the defaults they did not; flags the inputs would ignore refused; --from-run's drills
without a recovery and runs of another job warned about; checkpointless recovery without Daly's lost
work; help that says what each command requires and every flag's default and unit."""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from llm_infra import cli
from llm_infra.cli.commands.plan import FLAGS
from llm_infra.planner import (
    CHECKPOINTLESS_FALLBACK,
    CHECKPOINTLESS_SUCCESS,
    GOODPUT_FLOOR,
    INPUTS,
    LLAMA3_UNEXPECTED_INTERRUPTIONS,
    RECOVERY_PRESETS,
    InputName,
    JobSpec,
    PlanError,
    Recovery,
    daly_interval,
    daly_outcome,
    daly_wall_hours,
    forecast,
    gpu_hours_for,
    mixed_wall_hours,
    simulate,
)
from llm_infra.planner.measured_run import PRESET_PARAMETERS, RUN

AWS_EXAMPLE = ["--instances", "256", "--failure-rate", "0.05", "--gpu-hours", "1e7", "--price", "40"]
# 1000 instances of a 10-hour MTBF: the job fails every 36 s.
FAILS_EVERY_36_S = ["--instances", "1000", "--mtbf-hours", "10"]
# 2048 instances at OPT-175B's rate: the job fails every 50 min, less than the 280 min of a manual recovery.
OPT_AT_2048 = ["--instances", "2048", "--failure-preset", "opt-175b", "--gpu-hours", "1e7"]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "plan", *argv, "--output", "json")
    assert code == 0, err
    return json.loads(out)


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one line a refused command prints (exit 2)."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == "", (code, out, err)
    (line,) = err.strip().splitlines()
    assert line.startswith("llm-infra: error: ")
    return line


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What the parser says of a refused command line (exit 2, two lines: the error and where the help is)."""
    with pytest.raises(SystemExit) as exited:
        cli.main(list(argv))
    assert exited.value.code == 2
    captured = capsys.readouterr()
    error, see = captured.err.strip().splitlines()
    assert captured.out == "" and see == f"See 'llm-infra {argv[0]} --help'."
    prefix = f"llm-infra {argv[0]}: error: "
    assert error.startswith(prefix)
    return error.removeprefix(prefix)


def job(**changes: Any) -> JobSpec:
    base: dict[str, Any] = dict(
        instances=256,
        gpus_per_instance=8,
        instance_mtbf_hours=2000.0,
        checkpoint_stall_hours=60 / 3600,
        recovery_auto_hours=40 / 60,
        recovery_manual_hours=280 / 60,
        gpu_hours=1e7,
        price_per_instance_hour=40.0,
    )
    return JobSpec(**{**base, **changes})


def payload_log(tmp_path: Path, *records: dict[str, Any], name: str = "run.log") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps({**r, "time": 1796370000.0 + i}) + "\n" for i, r in enumerate(records)))
    return path


def start(device: str = "cuda", preset: str = "8b", **fields: Any) -> dict[str, Any]:
    return {"event": "start", "preset": preset, "world_size": 16, "device": device, "restart": 0, **fields}


def steps(count: int = 3, tokens_per_s: float = 16 * 4000.0) -> list[dict[str, Any]]:
    return [{"event": "step", "step": s, "tokens_per_s": tokens_per_s, "step_time_s": 2.0} for s in range(1, count + 1)]


def drill_report(recovery_seconds: float | None) -> dict[str, Any]:
    phases = {"detected": 31.0, "node_replaced": 402.5, "rejoined": None, "job_resumed": None}
    return {
        "kind": "llm-infra/drill",
        "version": 1,
        "cluster": "llm-infra-hyperpod",
        "compute": "hyperpod",
        "fault": "replace",
        "node": "i-0123456789abcdef0",
        "job": "llama-pretrain",
        "injected_at": "2026-12-03T10:00:00Z",
        "phases_seconds": {**phases, "first_step_after_resume": recovery_seconds},
        "resumed_at_step": None,
        "recovery_seconds": recovery_seconds,
    }


# ---- 1. --checkpoint-interval: the schedule the job runs, beside Daly's optimum -----------------------------------
def test_a_fixed_schedule_is_planned_beside_dalys_optimum(capsys: pytest.CaptureFixture[str]) -> None:
    result = plan_json(capsys, *AWS_EXAMPLE, "--checkpoint-interval", "60")
    fixed = result["daly_at_checkpoint_interval"]
    assert result["checkpoint_interval_minutes"] == 60
    spec = job()
    ideal, mtbf, stall = 1e7 / (256 * 8), spec.job_mtbf_hours, spec.checkpoint_stall_hours
    for mode, restart in (("auto", 40 / 60), ("manual", 280 / 60)):
        assert fixed[f"wall_days_{mode}"] == pytest.approx(daly_wall_hours(ideal, 1.0, stall, restart, mtbf) / 24)
        assert fixed[f"cost_{mode}"] == pytest.approx(fixed[f"wall_days_{mode}"] * 24 * 256 * 40)
        # Daly's interval (30 min here) is the optimum: checkpointing every hour costs more.
        assert fixed[f"wall_days_{mode}"] > result[f"wall_days_{mode}"]
        assert fixed[f"goodput_{mode}"] < result[f"goodput_{mode}"]
    assert "daly_at_checkpoint_interval" not in plan_json(capsys, *AWS_EXAMPLE)

    code, out, _ = run_cli(capsys, "plan", *AWS_EXAMPLE, "--checkpoint-interval", "60")
    assert code == 0
    assert re.findall(r"^daly, every 60 min +(auto|manual) ", out, re.MULTILINE) == ["auto", "manual"]
    extra_days = fixed["wall_days_auto"] - result["wall_days_auto"]
    extra_dollars = fixed["cost_auto"] - result["cost_auto"]
    assert (
        f"your schedule, a checkpoint every 60 min, vs the optimum, every 30.0 min, automatic recovery: goodput "
        f"{fixed['goodput_auto']:.3f} vs {result['goodput_auto']:.3f}, {extra_days:+.2f} wall days, "
        f"{extra_dollars:+,.0f} $"
    ) in out


def test_the_schedule_at_dalys_interval_is_dalys_row(capsys: pytest.CaptureFixture[str]) -> None:
    daly_minutes = plan_json(capsys, *AWS_EXAMPLE)["daly_interval_minutes"]
    result = plan_json(capsys, *AWS_EXAMPLE, "--checkpoint-interval", repr(daly_minutes))
    for key in ("goodput_auto", "wall_days_manual", "cost_auto", "downtime_per_failure_minutes_manual"):
        assert result["daly_at_checkpoint_interval"][key] == pytest.approx(result[key])


def test_simulate_runs_at_the_fixed_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--instances", "64", "--mtbf-hours", "2000", "--gpu-hours", "5e4", "--trials", "300"]
    code, out, err = run_cli(capsys, *argv, "--checkpoint-interval", "240", "--output", "json")
    assert code == 0, err
    result = json.loads(out)
    simulated, analytic = result["simulated"], result["analytic"]["daly_at_checkpoint_interval"]
    assert simulated["interval_minutes_auto"] == simulated["interval_minutes_manual"] == 240
    for mode in ("auto", "manual"):
        tolerance = max(0.02 * analytic[f"wall_days_{mode}"], 4 * simulated[f"wall_days_{mode}_stderr"])
        assert simulated[f"wall_days_{mode}"] == pytest.approx(analytic[f"wall_days_{mode}"], abs=tolerance)
    code, out, _ = run_cli(capsys, *argv, "--checkpoint-interval", "240")
    assert code == 0 and out.startswith("300 trials, a checkpoint every 240.0 min (--checkpoint-interval)\n")


# ---- 2. refused, or shown without figures, beyond the failure horizon; naming what the user passed ----------------
def test_a_stall_not_below_the_mtbf_names_the_default_the_user_never_set(capsys: pytest.CaptureFixture[str]) -> None:
    line = refusal(capsys, "plan", *FAILS_EVERY_36_S)
    assert line == (
        "llm-infra: error: the checkpoint stall of 60 s (the default 60 s; no --checkpoint-stall given) is not below "
        "the job MTBF of 36 s (--mtbf-hours 10 over --instances 1000): the job could never save a checkpoint between "
        "two failures"
    )
    assert "--checkpoint-stall 60" in refusal(capsys, "plan", *FAILS_EVERY_36_S, "--checkpoint-stall", "60")


def test_a_stall_not_below_the_mtbf_names_the_run_that_measured_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = payload_log(tmp_path, start(), {"event": "checkpoint", "step": 2, "seconds": 90.0, "stall_seconds": 45.0})
    line = refusal(capsys, "plan", *FAILS_EVERY_36_S, "--from-run", str(log))
    assert "the checkpoint stall of 45 s (45 s measured by --from-run: median checkpoint stall" in line
    assert "--checkpoint-stall 45" not in line and "the default" not in line


def test_automatic_recovery_beyond_the_failure_horizon_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # A 10 s stall fits the 36 s MTBF, but a 40 min recovery is 67 MTBFs: it would end once in 9e28 tries.
    line = refusal(capsys, "plan", *FAILS_EVERY_36_S, "--checkpoint-stall", "tiered", "--gpu-hours", "1e5")
    assert line.startswith("llm-infra: error: this job cannot finish (Daly's model at its optimal interval): ")
    assert (
        "an automatic recovery of 40 min (the default: the hyperpod-auto preset, 40 min; no --recovery-auto given) "
        "is 66.7 times the job MTBF of 36 s (--mtbf-hours 10 over --instances 1000)"
    ) in line
    assert f"below the {GOODPUT_FLOOR * 100:g} % floor" in line and "once in 9e+28 tries" in line
    given = refusal(
        capsys, "plan", *FAILS_EVERY_36_S, "--checkpoint-stall", "tiered", "--recovery-auto", "hyperpod-auto"
    )
    assert "(--recovery-auto hyperpod-auto, 40 min)" in given and "default" not in given.split("floor")[0]
    with pytest.raises(PlanError, match="this job cannot finish"):
        forecast(job(instances=1000, instance_mtbf_hours=10.0, checkpoint_stall_hours=10 / 3600))


def test_manual_recovery_beyond_the_horizon_has_no_figures_but_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "plan", *OPT_AT_2048)
    assert code == 0
    (manual,) = re.findall(r"^daly \*\s+manual .*$", out, re.MULTILINE)
    assert manual.split()[-3:] == ["-", "-", "-"]  # goodput, wall days, cost
    assert (
        "daly: manual recovery is beyond the failure horizon: a manual recovery of 280 min (the default: the manual "
        "preset, 280 min; no --recovery-manual given) is 5.62 times the job MTBF of 49.8 min (--failure-preset "
        "opt-175b over --instances 2048): a recovery ends before the next failure once in 276 tries"
    ) in out
    assert not re.search(r"\d{13}", out.replace(",", ""))  # no absurd figures
    result = plan_json(capsys, *OPT_AT_2048)
    assert result["goodput_manual"] is None and result["wall_days_manual"] is None and result["cost_manual"] is None
    assert result["saving_fraction"] is None and set(result["beyond_horizon"]) == {"manual"}
    assert result["goodput_auto"] > 0.3 and result["cost_per_failure_manual"] > 0


def test_a_recovery_that_overflows_is_beyond_the_horizon_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--instances", "100000", "--failure-rate", "5", "--checkpoint-stall", "0.001", "--recovery-auto", "0"]
    result = plan_json(capsys, *argv, "--recovery-manual", "1e6")
    assert "once in e^8.33e+07 tries" in result["beyond_horizon"]["manual"]
    assert "(--recovery-manual 1e6)" in result["beyond_horizon"]["manual"]


def test_a_schedule_beyond_the_horizon_is_refused_naming_checkpoint_interval(
    capsys: pytest.CaptureFixture[str],
) -> None:
    too_long = refusal(capsys, "plan", *AWS_EXAMPLE, "--checkpoint-interval", "6000")
    assert "this job cannot finish (Daly's model at --checkpoint-interval): a checkpoint every 6000 min" in too_long
    assert "(--checkpoint-interval 6000) is 12.8 times the job MTBF of 7.81 h (--failure-rate 0.05 over" in too_long
    too_short = refusal(capsys, "plan", *AWS_EXAMPLE, "--checkpoint-interval", "0.01")
    assert "a checkpoint every 0.01 min of training (--checkpoint-interval 0.01) with a 60 s stall (the default" in (
        too_short
    )
    assert "spends 99.0% of the time saving" in too_short
    assert usage_error(capsys, "plan", *AWS_EXAMPLE, "--checkpoint-interval", "0") == (
        "argument --checkpoint-interval: expected a finite number > 0, got '0'"
    )


def test_simulate_does_not_simulate_what_never_ends(capsys: pytest.CaptureFixture[str]) -> None:
    # Manual recovery at 5.5 job MTBFs: goodput about 0.4 %; automatic recovery fine.
    spec = job(instances=1024, instance_mtbf_hours=1024.0, recovery_manual_hours=5.5, gpu_hours=1e5)
    result = simulate(spec, trials=20, seed=1)
    assert "wall_days_manual" not in result and "saving_fraction" not in result
    assert "manual recovery of 330 min" in result["beyond_horizon"]["manual"] and result["wall_days_auto"] > 0
    argv = ["simulate", "--instances", "1024", "--mtbf-hours", "1024", "--recovery-manual", "330", "--gpu-hours", "1e5"]
    code, out, _ = run_cli(capsys, *argv, "--trials", "20")
    assert code == 0 and re.search(r"^manual\s+-\s+-\s+-\s+", out, re.MULTILINE)
    assert (
        "manual: beyond the failure horizon, not simulated: a manual recovery of 330 min (--recovery-manual 330)" in out
    )
    line = refusal(capsys, *argv[:-4], "--recovery-auto", "330", "--gpu-hours", "1e5", "--trials", "20")
    assert "this job cannot finish" in line and "(--recovery-auto 330)" in line


# ---- 3. flags the inputs would ignore ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [*AWS_EXAMPLE, "--params", "8e9"],
            "--params: only size a job given in --tokens (6 x parameters x tokens FLOPs); --gpu-hours gives the job "
            "size here: drop it",
        ),
        (
            ["--instances", "8", "--failure-rate", "0.05", "--mfu", "0.5", "--peak-tflops", "312"],
            "--mfu, --peak-tflops: only size a job given in --tokens (6 x parameters x tokens FLOPs); no --tokens "
            "given: pass --tokens or drop them",
        ),
        (
            ["--instances", "8", "--failure-rate", "0.05", "--params", "8e9"],
            "--params: only size a job given in --tokens (6 x parameters x tokens FLOPs); no --tokens given: pass "
            "--tokens or drop it",
        ),
    ],
)
def test_sizing_flags_without_a_job_they_size_are_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert refusal(capsys, "plan", *argv) == f"llm-infra: error: {message}"


def test_mfu_is_refused_where_the_runs_throughput_sizes_the_job(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = payload_log(tmp_path, start(), *steps())
    argv = ["plan", "--instances", "8", "--failure-rate", "0.05", "--tokens", "1e12", "--from-run", str(log)]
    assert refusal(capsys, *argv, "--mfu", "0.5") == (
        "llm-infra: error: --mfu: only used with --params (6 x parameters x tokens FLOPs); here the tokens/s "
        "--from-run measured size the job: pass --params or drop it"
    )
    code, out, _ = run_cli(capsys, *argv, "--params", "8e9")
    assert code == 0
    used = "tokens_per_gpu_second = 4000 (median tokens/s of a step per rank (cuda), 3 samples): --params given"
    assert f"  not used: {used}" in out


# ---- 4. a drill without a recovery is reported --------------------------------------------------------------------
def test_a_drill_without_a_recovery_is_reported_with_what_the_plan_uses(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    report = tmp_path / "drill.json"
    report.write_text(json.dumps(drill_report(None), indent=2))
    expected = (
        f"--from-run {report}: the replace drill on hyperpod has recovery_seconds null (it saw no training step "
        "after the resume; the last phase it saw: node_replaced, 402.5 s after the fault): it measures no automatic "
        "recovery; this plan's is the default: the hyperpod-auto preset, 40 min; no --recovery-auto given"
    )
    code, out, err = run_cli(capsys, "plan", *AWS_EXAMPLE, "--from-run", str(report))
    assert code == 0 and err == f"llm-infra: warning: {expected}\n"
    result = plan_json(capsys, *AWS_EXAMPLE, "--from-run", str(report))
    assert result["warnings"] == [expected] and result["measured"] == {}
    given = plan_json(capsys, *AWS_EXAMPLE, "--from-run", str(report), "--recovery-auto", "12")
    assert given["warnings"][0].endswith("this plan's is --recovery-auto 12")


def test_a_fault_without_a_restart_is_noted(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = payload_log(tmp_path, start(), *steps(), {"event": "fault", "step": 3})
    result = plan_json(capsys, *AWS_EXAMPLE, "--from-run", str(log))
    assert "no restart after the fault at step 3 in the logs: no recovery measured from it" in result["notes"]


# ---- 5. --from-run of another job says so ---------------------------------------------------------------------------
def test_a_cpu_run_is_another_job(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = payload_log(tmp_path, start("cpu", "tiny", world_size=2), *steps())
    expected = (
        f"--from-run {log} is a cpu run of the tiny model (5.25M parameters) on 2 ranks, not a GPU run: what it "
        "measured is another job's, scaled here as if it were this one's (256 instances x 8 GPUs)"
    )
    code, _, err = run_cli(capsys, "plan", *AWS_EXAMPLE, "--from-run", str(log))
    assert code == 0 and err == f"llm-infra: warning: {expected}\n"
    assert plan_json(capsys, *AWS_EXAMPLE, "--from-run", str(log))["warnings"] == [expected]
    code, out, err = run_cli(capsys, "simulate", *AWS_EXAMPLE, "--trials", "2", "--from-run", str(log), "--json")
    assert code == 0 and json.loads(out)["warnings"] == [expected] and err.count("\n") == 1


def test_a_run_of_another_model_size_is_another_job(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = payload_log(tmp_path, start("cuda", "8b"), *steps())
    job_70b = ["--instances", "256", "--failure-rate", "0.05", "--tokens", "1e12", "--from-run", str(log)]
    (warning,) = plan_json(capsys, *job_70b, "--params", "7e10")["warnings"]
    assert warning.startswith(f"--from-run {log} is a cuda run of the 8b model (8.03B parameters) on 16 ranks, not ")
    assert "not the model of --params 7e+10: what it measured is another job's" in warning
    assert plan_json(capsys, *job_70b, "--params", "8e9")["warnings"] == []  # the same model
    assert plan_json(capsys, *job_70b)["warnings"] == []  # its own tokens/s size the job: its model is the job's


@pytest.mark.torch
def test_the_preset_sizes_are_the_payloads() -> None:
    from llm_infra.workloads.model import PRESETS, parameter_count

    assert {name: parameter_count(args) for name, args in PRESETS.items()} == PRESET_PARAMETERS


# ---- 6. checkpointless recovery loses no work in Daly's model --------------------------------------------------------
def test_checkpointless_recovery_charges_no_lost_work(capsys: pytest.CaptureFixture[str]) -> None:
    # Every failure resumed (--checkpointless-success 1): no lost work, no checkpoint needed.
    argv = [*AWS_EXAMPLE, "--recovery-auto", "hyperpod-checkpointless", "--checkpointless-success", "1"]
    result = plan_json(capsys, *argv)
    spec = job()
    mtbf = spec.job_mtbf_hours
    assert result["downtime_per_failure_minutes_auto"] == RECOVERY_PRESETS["hyperpod-checkpointless"].value
    assert result["optimal_interval_minutes_auto"] is None  # no checkpoint pays for its stall
    assert result["goodput_auto"] == pytest.approx(math.exp(-2 / 60 / mtbf))
    # Manual recovery still restarts from the last checkpoint: Daly's lost work stays in its row, at Daly's interval.
    assert result["downtime_per_failure_minutes_manual"] > 280
    assert result["optimal_interval_minutes_manual"] == result["daly_interval_minutes"]
    # The same 2 minutes as a plain number is a checkpoint-and-restart recovery: lost work charged.
    restart = plan_json(capsys, *AWS_EXAMPLE, "--recovery-auto", "2")
    assert restart["downtime_per_failure_minutes_auto"] > 2 + 10 and restart["goodput_auto"] < result["goodput_auto"]
    linear = plan_json(capsys, *argv, "--model", "linear")
    assert linear["downtime_per_failure_minutes_auto"] == 2.0
    code, out, _ = run_cli(capsys, "plan", *argv)
    assert code == 0 and "auto recovery is checkpointless: no work lost)" in out
    assert "auto recovery, checkpointless: every failure resumes from the last step in 2 min" in out


def test_a_checkpointless_recovery_falls_back_to_the_checkpoint_for_the_failures_it_does_not_resume(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = plan_json(capsys, *AWS_EXAMPLE, "--recovery-auto", "hyperpod-checkpointless")
    spec = job()
    mtbf, stall, resumed = spec.job_mtbf_hours, spec.checkpoint_stall_hours, CHECKPOINTLESS_SUCCESS.value
    assert result["checkpointless_success"] == resumed and result["checkpointless_recoveries"] == ["auto"]
    assert result["checkpointless_fallback_minutes"] == RECOVERY_PRESETS[CHECKPOINTLESS_FALLBACK].value == 40
    assert result["fallback_mtbf_hours"] == pytest.approx(mtbf / (1 - resumed))
    # The optimum is Daly's interval at the MTBF of the failures that fall back to the checkpoint.
    interval = daly_interval(stall, mtbf / (1 - resumed))
    assert result["optimal_interval_minutes_auto"] == pytest.approx(interval * 60)
    factor = resumed * math.exp(2 / 60 / mtbf) + (1 - resumed) * math.exp(40 / 60 / mtbf)
    redone = math.expm1((1 - resumed) * (interval + stall) / mtbf) / ((1 - resumed) * (interval + stall) / mtbf)
    assert 1 / result["goodput_auto"] == pytest.approx((1 + stall / interval) * redone * factor)
    # Between the restart (every failure falls back, 40 min) and resuming every failure (2 min).
    restarting = plan_json(capsys, *AWS_EXAMPLE, "--recovery-auto", "hyperpod-auto")
    resuming = plan_json(
        capsys, *AWS_EXAMPLE, "--recovery-auto", "hyperpod-checkpointless", "--checkpointless-success", "1"
    )
    assert restarting["goodput_auto"] < result["goodput_auto"] < resuming["goodput_auto"]
    # Nothing resumed is the restart with the fallback's recovery: Daly's model exactly.
    none = plan_json(
        capsys, *AWS_EXAMPLE, "--recovery-auto", "hyperpod-checkpointless", "--checkpointless-success", "0"
    )
    for key in ("goodput_auto", "wall_days_auto", "downtime_per_failure_minutes_auto"):
        assert none[key] == pytest.approx(restarting[key])
    assert none["optimal_interval_minutes_auto"] == pytest.approx(restarting["daly_interval_minutes"])
    # The linear model: the expected downtime of a failure.
    linear = plan_json(capsys, *AWS_EXAMPLE, "--recovery-auto", "hyperpod-checkpointless", "--model", "linear")
    assert linear["downtime_per_failure_minutes_auto"] == pytest.approx(resumed * 2 + (1 - resumed) * 40)
    fallback = plan_json(
        capsys, *AWS_EXAMPLE, "--recovery-auto", "hyperpod-checkpointless", "--checkpointless-fallback", "20"
    )
    assert fallback["checkpointless_fallback_minutes"] == 20 and fallback["goodput_auto"] > result["goodput_auto"]


def test_the_checkpointless_flags_are_refused_without_a_checkpointless_recovery(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = refusal(capsys, "plan", *AWS_EXAMPLE, "--checkpointless-success", "0.9", "--checkpointless-fallback", "30")
    assert line == (
        "llm-infra: error: --checkpointless-success, --checkpointless-fallback: only with a checkpointless recovery "
        "(--recovery-auto hyperpod-checkpointless); no recovery here is checkpointless: pass --recovery-auto "
        "hyperpod-checkpointless or drop them"
    )


def test_the_default_share_resumed_is_llama3s_single_node_faults_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Table 5 of the Llama 3 report (arXiv 2407.21783): 419 unexpected interruptions in all.
    assert LLAMA3_UNEXPECTED_INTERRUPTIONS == 419
    assert CHECKPOINTLESS_SUCCESS.value == pytest.approx(283 / 419)
    assert "assumed, not measured" in CHECKPOINTLESS_SUCCESS.source and "2407.21783" in CHECKPOINTLESS_SUCCESS.source
    code, out, _ = run_cli(capsys, "plan", *AWS_EXAMPLE, "--recovery-auto", "hyperpod-checkpointless")
    assert code == 0
    assert f"  67.5% resumed: the default of --checkpointless-success, {CHECKPOINTLESS_SUCCESS.source}\n" in out
    code, out, _ = run_cli(
        capsys, "plan", *AWS_EXAMPLE, "--recovery-auto", "hyperpod-checkpointless", "--checkpointless-success", "0.9"
    )
    assert code == 0 and "the default of --checkpointless-success" not in out
    help_text = " ".join(command_parser("plan").format_help().split())
    assert "(default 0.675, an assumption, not a measurement" in help_text and "arXiv 2407.21783" in help_text


@pytest.mark.parametrize(
    "changes",
    [
        {"checkpointless_success": 1.0},
        {"checkpointless_success": 1.0, "instances": 1024, "recovery_auto_hours": 0.3},
        {},
        {"checkpointless_success": 0.5, "instances": 1024},
        {"checkpointless_success": 0.9, "checkpoint_interval_hours": 2.0},
    ],
)
def test_the_checkpointless_model_agrees_with_its_monte_carlo(changes: dict[str, Any]) -> None:
    spec = job(**{"checkpointless": frozenset({"auto"}), "gpu_hours": 2e6, "recovery_auto_hours": 2 / 60, **changes})
    assert spec.ideal_hours is not None
    result = simulate(spec, trials=300, seed=5)
    analytic = daly_outcome(spec, spec.checkpoint_interval_hours)
    expected = analytic.wall_days_auto
    assert expected is not None
    tolerance = max(4 * result["wall_days_auto_stderr"], 0.005 * expected)
    assert abs(result["wall_days_auto"] - expected) <= tolerance, (result, analytic)
    recovery = spec.recovery("auto")
    interval = spec.checkpoint_interval_hours or spec.optimal_interval_hours("auto") or math.inf
    assert expected == pytest.approx(
        mixed_wall_hours(spec.ideal_hours, interval, spec.checkpoint_stall_hours, spec.job_mtbf_hours, recovery) / 24
    )


def test_the_mixture_is_dalys_formula_when_nothing_resumes_and_loses_no_work_when_everything_does() -> None:
    for stall, restart, mtbf, interval in ((1 / 60, 40 / 60, 7.8, 0.5), (0.1, 2.0, 3.0, 1.3)):
        assert mixed_wall_hours(5.0, interval, stall, mtbf, Recovery(restart=restart)) == pytest.approx(
            daly_wall_hours(5.0, interval, stall, restart, mtbf)
        )
        resumed = Recovery(restart=99.0, resumed=1.0, resume=restart)
        assert mixed_wall_hours(5.0, interval, stall, mtbf, resumed) == pytest.approx(
            5.0 * (1 + stall / interval) * math.exp(restart / mtbf)
        )
        assert mixed_wall_hours(5.0, math.inf, stall, mtbf, resumed) == pytest.approx(5.0 * math.exp(restart / mtbf))
        assert mixed_wall_hours(5.0, math.inf, stall, mtbf, Recovery(restart=restart, resumed=0.99, resume=0)) == (
            math.inf
        )


# ---- 6b. the reported optimum is the optimum of the model the plan evaluates --------------------------------------
GRID = [10 ** (k / 400) for k in range(-1600, 2401)]  # 1e-4 to 1e6 hours, 400 a decade


@pytest.mark.parametrize(
    ("label", "changes"),
    [
        ("4,096 instances, checkpointless, the default share", {"instances": 4096, "checkpointless_success": None}),
        ("4,096 instances, checkpointless, every failure resumed", {"instances": 4096, "checkpointless_success": 1.0}),
        ("4,096 instances, checkpointless, half resumed", {"instances": 4096, "checkpointless_success": 0.5}),
        ("4,096 instances, checkpointless, 95 % resumed", {"instances": 4096, "checkpointless_success": 0.95}),
        ("4,096 instances, checkpointless, none resumed", {"instances": 4096, "checkpointless_success": 0.0}),
        ("4,096 instances, restart", {"instances": 4096, "checkpointless": frozenset()}),
        ("8 instances, checkpointless, the default share", {"instances": 8, "checkpointless_success": None}),
        ("8 instances, checkpointless, 95 % resumed, 10 min stall", {"instances": 8, "checkpointless_success": 0.95,
                                                                    "checkpoint_stall_hours": 1 / 6}),
        ("8 instances, restart", {"instances": 8, "checkpointless": frozenset()}),
        ("256 instances, checkpointless, every failure resumed", {"checkpointless_success": 1.0}),
        ("256 instances, checkpointless manual recovery too", {"checkpointless": frozenset({"auto", "manual"})}),
    ],
)  # fmt: skip
def test_no_checkpoint_interval_beats_the_reported_optimum(label: str, changes: dict[str, Any]) -> None:
    base: dict[str, Any] = {"checkpointless": frozenset({"auto"}), "recovery_auto_hours": 2 / 60}
    if changes.get("checkpointless_success", 0.0) is None:
        changes = {key: value for key, value in changes.items() if key != "checkpointless_success"}
    spec = job(**{**base, **changes})
    result = forecast(spec)
    for mode in ("auto", "manual"):
        best = getattr(result.daly, f"goodput_{mode}")
        if best is None:  # beyond the failure horizon at its optimum: then at every interval
            assert all(getattr(daly_outcome(spec, hours), f"goodput_{mode}") is None for hours in GRID[::50])
            continue
        grid = [getattr(daly_outcome(spec, hours), f"goodput_{mode}") or 0.0 for hours in GRID]
        # Daly's higher-order estimate of the optimum: within 1e-6 of the exact one for these stalls.
        assert max(grid) <= best * (1 + 1e-6), (label, mode, GRID[grid.index(max(grid))], max(grid), best)
        minutes = result.optimal_interval_minutes[mode]
        if minutes is None:  # no checkpoint: the goodput rises toward it as the interval grows
            assert grid == sorted(grid) and best >= grid[-1]
        else:
            assert getattr(daly_outcome(spec, minutes / 60), f"goodput_{mode}") == best


def test_dalys_estimate_is_within_its_bound_of_the_optimum_even_for_a_stall_near_the_mtbf() -> None:
    spec = job(instances=1, instance_mtbf_hours=1.0, checkpoint_stall_hours=0.9, recovery_auto_hours=0.0)
    best = daly_outcome(spec).goodput_auto
    assert best is not None
    grid = max(daly_outcome(spec, hours).goodput_auto or 0.0 for hours in GRID)
    assert best <= grid <= best * (1 + 1.4e-4)


def test_the_issues_schedule_no_longer_beats_the_optimum(capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 28: at 4,096 instances a 240-minute schedule beat the checkpointless "optimum".
    argv = ["--instances", "4096", "--failure-rate", "0.05", "--gpu-hours", "1e7", "--recovery-auto"]
    for resumed in ("0.5", "0.95", "1"):
        result = plan_json(
            capsys,
            *argv,
            "hyperpod-checkpointless",
            "--checkpointless-success",
            resumed,
            "--checkpoint-interval",
            "240",
        )
        assert result["daly_at_checkpoint_interval"]["goodput_auto"] < result["goodput_auto"]


# ---- 7 and 8. help: what each command requires, every flag's default and unit, plain text ------------------------
def command_parser(name: str) -> argparse.ArgumentParser:
    (subparsers,) = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return subparsers.choices[name]


def test_simulate_help_says_a_job_size_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["simulate", "--help"])
    text = capsys.readouterr().out
    assert "(--gpu-hours GPU_HOURS | --tokens TOKENS)" in text  # no brackets: required
    required = text.split("\nrequired:\n")[1].split("\n\n", 2)
    assert "and one of --gpu-hours, --tokens" in required[0]
    assert "--gpu-hours GPU_HOURS" in required[1] and "--tokens TOKENS" in required[1]
    assert "ratios only" not in text and "--plot" not in text
    with pytest.raises(SystemExit):
        cli.main(["plan", "--help"])
    plan_help = capsys.readouterr().out
    assert (
        "[--gpu-hours GPU_HOURS | --tokens TOKENS]" in plan_help and "job size (without one, ratios only):" in plan_help
    )


@pytest.mark.parametrize("name", ["plan", "simulate"])
def test_every_flag_says_its_default_and_unit_in_plain_text(name: str) -> None:
    parser = command_parser(name)
    required = {a for g in parser._mutually_exclusive_groups if g.required for a in g._group_actions}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        text = action.help or ""
        assert text and not re.search(r"`|:[a-z]+:", text), action.option_strings
        if action.nargs != 0 and not action.required and action not in required:
            assert "default" in text, action.option_strings
        if getattr(action.type, "__name__", "") in ("number", "number or preset"):  # a quantity: its unit
            words = f"{action.option_strings[0]} {action.metavar} {text}"
            assert re.search(r"second|minute|hour|%|\$|gpu|token|tflop|fraction", words, re.IGNORECASE), words
    output = [a for a in parser._actions if "--output" in a.option_strings][0]
    assert output.choices == ("table", "json") and output.default == "table"
    assert not re.search(r"`|:[a-z]+:", parser.description or "")


def test_output_json_and_its_alias(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_json(capsys, *AWS_EXAMPLE) == json.loads(run_cli(capsys, "plan", *AWS_EXAMPLE, "--json")[1])


# ---- 9 (issue 29). the planner knows nothing of the command: it names its own inputs, the command their flags ----
PLANNER = Path(cli.__file__).resolve().parent.parent / "planner"


def test_no_module_of_the_planner_names_a_flag() -> None:
    modules = sorted(PLANNER.rglob("*.py"))
    assert {path.name for path in modules} >= {"__init__.py", "measured_run.py"}
    for path in modules:
        flags = re.findall(r"--[a-z][a-z-]*", path.read_text())
        assert not flags, f"{path.name} names {flags}: the planner names its inputs (INPUTS), the command the flags"


def test_the_command_has_a_flag_for_every_input_the_planner_names() -> None:
    assert RUN in INPUTS and set(FLAGS) == INPUTS
    with pytest.raises(ValueError, match="'price' is not an input of the planner"):
        InputName("price")


def test_a_planner_error_in_the_planners_words_and_in_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    # 6 x 1e300 x 1e300 FLOPs: a job size too large for a float.
    with pytest.raises(PlanError) as refused:
        job(gpu_hours=gpu_hours_for(1e300, 1e300, 0.4, 989.0)).validate()
    assert refused.value.field == "gpu_hours" and refused.value.value is None
    assert str(refused.value) == "gpu_hours: the job size must be > 0 and finite"
    line = refusal(capsys, "plan", "--instances", "8", "--mtbf-hours", "100", "--tokens", "1e300", "--params", "1e300")
    assert line == "llm-infra: error: --gpu-hours (or --tokens): the job size must be > 0 and finite"
    # A message that names several inputs names each one; one about a value shows it beside the input.
    with pytest.raises(PlanError) as refused:
        simulate(job(gpu_hours=1e12), trials=2000)
    assert refused.value.field == "trials" and refused.value.value == 2000
    assert str(refused.value).startswith("trials 2000: the simulation would draw about ")
    assert str(refused.value).endswith(" (more than 5e+07); lower trials or gpu_hours")
    line = refusal(capsys, "simulate", *AWS_EXAMPLE[:4], "--gpu-hours", "1e12")
    assert line == "llm-infra: error: " + refused.value.text(FLAGS)
    assert line.endswith("; lower --trials or --gpu-hours (or --tokens)")
    # About the job as a whole: each input as the caller said how it was set (JobSpec.sources), else by name.
    with pytest.raises(PlanError) as refused:
        forecast(job(checkpoint_interval_hours=100.0))
    assert refused.value.field is None
    assert str(refused.value).startswith(
        "this job cannot finish (Daly's model at checkpoint_interval_hours): a checkpoint every 6000 min of training "
        "(checkpoint_interval_hours 100) is 12.8 times the job MTBF of 7.81 h (instance_mtbf_hours 2000 over "
        "instances 256): "
    )
    line = refusal(capsys, "plan", *AWS_EXAMPLE, "--checkpoint-interval", "6000")
    assert line.startswith(
        "llm-infra: error: this job cannot finish (Daly's model at --checkpoint-interval): a checkpoint every 6000 "
        "min of training (--checkpoint-interval 6000) is 12.8 times the job MTBF of 7.81 h (--failure-rate 0.05 over "
        "--instances 256): "
    )
