"""`llm-infra plan --from-run`: plans with what a run measured, read from the payload's own JSON lines
(a real run under torchrun with an injected fault) and from `llm-infra drill`'s report."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import pytest

from llm_infra.cli import main
from llm_infra.planner import PlanError
from llm_infra.planner.measured_run import RUN, read_runs

REPO_ROOT = Path(__file__).resolve().parent.parent
JOB = ["--instances", "256", "--failure-rate", "0.05", "--gpu-hours", "1e7", "--price", "40"]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def plan_json(capsys, *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "plan", *JOB, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def payload_run(torch_launch, tmp_path_factory) -> tuple[Path, Path, list[dict[str, Any]]]:
    """train.py on 2 CPU ranks, async checkpoints every 2 steps, rank 0 exits before step 5, torchrun
    restarts it: its stdout and stderr files and every JSON record in them."""
    folder = tmp_path_factory.mktemp("run")
    args = [
        "--preset=nano", "--batch-size=2", "--seq-len=64", "--steps=8", f"--checkpoint-dir={folder / 'checkpoints'}",
        "--checkpoint-every=2", "--async-checkpoint", "--fail-at-step=5",
    ]  # fmt: skip
    result = torch_launch.run("train.py", args, max_restarts=1)
    assert result.returncode == 0, result.stderr[-3000:]
    stdout, stderr = folder / "stdout.log", folder / "stderr.log"
    stdout.write_text(result.stdout)
    stderr.write_text(result.stderr)
    records = [json.loads(line) for line in (result.stdout + result.stderr).splitlines() if line.startswith("{")]
    return stdout, stderr, records


def test_plans_with_what_the_payload_measured(capsys, payload_run) -> None:
    stdout, stderr, records = payload_run
    by_event = lambda name: [r for r in records if r.get("event") == name]  # noqa: E731
    (fault,) = by_event("fault")
    restart = next(r for r in by_event("start") if r["restart"] == 1)
    first_step = min((r for r in by_event("step") if r["time"] > restart["time"]), key=lambda r: r["time"])
    steps = by_event("step")

    result = plan_json(capsys, "--from-run", str(stdout), "--from-run", str(stderr), "--model", "linear")
    measured = result["measured"]
    # The stall: an async save's staging, shorter than the save until committed.
    stalls = [r["stall_seconds"] for r in by_event("checkpoint")]
    assert measured["checkpoint_stall_seconds"] == statistics.median(stalls)
    assert statistics.median(stalls) < statistics.median(r["seconds"] for r in by_event("checkpoint"))
    assert measured["recovery_auto_minutes"] * 60 == pytest.approx(first_step["time"] - fault["time"])
    assert 0 < measured["recovery_auto_minutes"] * 60 < first_step["time"] - by_event("start")[0]["time"]
    # AWS's linear model: the measured recovery is the whole downtime of a failure (to the last bit or so:
    # the planner converts minutes to hours and back).
    assert result["downtime_per_failure_minutes_auto"] == pytest.approx(measured["recovery_auto_minutes"], rel=1e-12)
    step_seconds = statistics.median(r["step_time_s"] for r in steps)
    assert result["daly_interval_steps"] == pytest.approx(result["daly_interval_minutes"] * 60 / step_seconds)
    assert "tokens_per_gpu_second" not in measured  # --gpu-hours gave the size

    code, out, _ = run_cli(capsys, "plan", *JOB, "--from-run", str(stdout), "--from-run", str(stderr))
    assert code == 0
    assert "from the run:" in out
    assert "checkpoint_stall_seconds = " in out and "recovery_auto_minutes = " in out and "step_seconds = " in out
    assert "steps (Daly" in out


def test_one_collected_log_with_prefixes_reads_the_same(capsys, payload_run, tmp_path: Path) -> None:
    stdout, stderr, _ = payload_run
    # kubectl logs --timestamps: both streams in one file, each line prefixed, stderr last.
    lines = stdout.read_text().splitlines() + stderr.read_text().splitlines()
    collected = tmp_path / "pod.log"
    collected.write_text("".join(f"2026-12-03T10:00:00.000000000Z {line}\n" for line in lines))
    separate = plan_json(capsys, "--from-run", str(stdout), "--from-run", str(stderr))
    together = plan_json(capsys, "--from-run", str(collected))
    # The same CPU run, named by its file: stdout.log there, pod.log here.
    assert together.pop("warnings") == [w.replace(str(stdout), str(collected)) for w in separate.pop("warnings")]
    assert together == separate


def test_a_log_without_the_stall_takes_the_save_until_committed_as_an_upper_bound(
    capsys, payload_run, tmp_path: Path
) -> None:
    stdout, stderr, records = payload_run
    # A log of a payload older than stall_seconds: the same lines without the field.
    older = tmp_path / "older.log"
    lines = []
    for line in stdout.read_text().splitlines():
        record = json.loads(line) if line.startswith("{") else None
        if record is not None and record.get("event") == "checkpoint":
            line = json.dumps({k: v for k, v in record.items() if k != "stall_seconds"})
        lines.append(line + "\n")
    older.write_text("".join(lines))
    seconds = statistics.median(r["seconds"] for r in records if r.get("event") == "checkpoint")
    assert plan_json(capsys, "--from-run", str(older))["measured"]["checkpoint_stall_seconds"] == seconds
    code, out, _ = run_cli(capsys, "plan", *JOB, "--from-run", str(older))
    assert code == 0 and "median checkpoint save until committed (an upper bound on the stall)" in out


def test_measured_throughput_sizes_a_job_in_tokens(capsys, payload_run) -> None:
    stdout, _, records = payload_run
    per_rank = statistics.median(r["tokens_per_s"] / 2 for r in records if r.get("event") == "step")
    code, out, err = run_cli(
        capsys, "plan", "--instances", "4", "--failure-rate", "0.05", "--tokens", "1e9", "--from-run", str(stdout),
        "--json",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["measured"]["tokens_per_gpu_second"] == pytest.approx(per_rank)
    assert result["wall_days_ideal"] == pytest.approx(1e9 / per_rank / 3600 / (4 * 8) / 24)


def test_a_flag_overrides_a_measurement_and_says_so(capsys, payload_run) -> None:
    stdout, stderr, _ = payload_run
    argv = ["--from-run", str(stdout), "--from-run", str(stderr), "--recovery-auto", "hyperpod-auto"]
    code, out, _ = run_cli(capsys, "plan", *JOB, *argv)
    assert code == 0
    assert "not used: recovery_auto_minutes = " in out and "--recovery-auto given" in out
    result = plan_json(capsys, *argv, "--model", "linear")
    assert result["downtime_per_failure_minutes_auto"] == 40 and "recovery_auto_minutes" not in result["measured"]


# ---- llm-infra drill's report (the contract: one JSON object, "kind": "llm-infra/drill", version 1) ----------
def drill_report(recovery_seconds: float | None, version: int = 1) -> dict[str, Any]:
    phases = {"detected": 31.0, "node_replaced": 402.5, "rejoined": 455.0, "job_resumed": 470.2}
    return {
        "kind": "llm-infra/drill",
        "version": version,
        "cluster": "llm-infra-hyperpod",
        "compute": "hyperpod",
        "fault": "replace",
        "node": "i-0123456789abcdef0",
        "job": "llama-pretrain",
        "injected_at": "2026-12-03T10:00:00Z",
        "phases_seconds": {**phases, "first_step_after_resume": recovery_seconds},
        "resumed_at_step": 1200,
        "recovery_seconds": recovery_seconds,
    }


def test_the_drills_recovery_is_the_automatic_downtime(capsys, tmp_path: Path) -> None:
    report = tmp_path / "drill.json"
    report.write_text(json.dumps(drill_report(492.0), indent=2))  # indented: several lines
    result = plan_json(capsys, "--from-run", str(report), "--model", "linear")
    assert result["measured"] == {"recovery_auto_minutes": pytest.approx(492.0 / 60)}
    assert result["downtime_per_failure_minutes_auto"] == pytest.approx(8.2)
    assert result["cost_per_failure_auto"] == pytest.approx(256 * 40 * 8.2 / 60)
    code, out, _ = run_cli(capsys, "plan", *JOB, "--from-run", str(report))
    assert code == 0 and "llm-infra drill: fault to first step after the resume (replace on hyperpod)" in out


def test_a_drill_without_a_recovery_measures_nothing(capsys, tmp_path: Path) -> None:
    report = tmp_path / "drill.jsonl"
    report.write_text(json.dumps(drill_report(None)) + "\n")
    result = plan_json(capsys, "--from-run", str(report), "--model", "linear")
    assert result["measured"] == {}
    assert result["downtime_per_failure_minutes_auto"] == 40  # the hyperpod-auto preset


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (json.dumps(drill_report(10.0, version=2)), "drill report version 2 is not supported (this planner reads"),
        ("Traceback (most recent call last):\nnothing to plan with\n", "no payload JSON lines (train.py) and no"),
        (None, "no such file; pass a run's log (kubectl logs POD > run.log) or the report llm-infra drill"),
        (b"\x89PNG\r\n\x1a\n\x00", "not a text file (invalid start byte at byte 0); pass a run's log"),
        (
            json.dumps({**drill_report(10.0), "recovery_seconds": "12.5"}),
            "recovery_seconds is seconds >= 0 or null, not '12.5'",
        ),
        (
            json.dumps({k: v for k, v in drill_report(10.0).items() if k != "recovery_seconds"}),
            "recovery_seconds is seconds >= 0 or null, not missing",
        ),
        (
            json.dumps({**drill_report(10.0), "recovery_seconds": -1}),
            "recovery_seconds is seconds >= 0 or null, not -1",
        ),
        (
            '{"kind": "llm-infra/drill", "version": 1, "recovery_seconds": NaN}',
            "recovery_seconds is seconds >= 0 or null, not nan",
        ),
    ],
)
def test_an_unreadable_run_exits_2_naming_the_flag(
    capsys, tmp_path: Path, content: str | bytes | None, message: str
) -> None:
    path = tmp_path / "run.log"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    code, _, err = run_cli(capsys, "plan", *JOB, "--from-run", str(path))
    assert code == 2
    assert err.startswith(f"llm-infra: error: --from-run {path}: ") and len(err.strip().splitlines()) == 1
    assert message in err


def test_the_planner_names_the_file_and_the_command_its_flag(capsys, tmp_path: Path) -> None:
    missing = tmp_path / "run.log"
    with pytest.raises(PlanError) as refused:
        read_runs([str(missing)])
    assert refused.value.field == RUN and refused.value.value == missing
    assert str(refused.value) == (
        f"{RUN} {missing}: no such file; pass a run's log (kubectl logs POD > run.log) or the report llm-infra drill "
        "wrote; UTF-8, or UTF-16 with a byte-order mark as PowerShell writes"
    )
    code, _, err = run_cli(capsys, "plan", *JOB, "--from-run", str(missing))
    assert code == 2 and err == f"llm-infra: error: --from-run {str(refused.value).removeprefix(RUN + ' ')}\n"


def test_a_run_log_powershell_wrote_is_read(capsys, tmp_path: Path) -> None:
    """PowerShell's `kubectl logs ... > run.log` writes UTF-16 with a byte-order mark."""
    path = tmp_path / "drill.json"
    path.write_text(json.dumps(drill_report(10.0)), encoding="utf-16")
    code, out, err = run_cli(capsys, "plan", *JOB, "--from-run", str(path), "--output", "json")
    assert code == 0, err
    assert json.loads(out)["measured"] == {"recovery_auto_minutes": pytest.approx(10.0 / 60)}


# ---- the stop budget the run had: the start lines' shutdown_budget_seconds ----------------------------------
def payload_log(tmp_path: Path, *records: dict[str, Any]) -> Path:
    """A payload log of ``records``, one a second, as train.py writes them."""
    path = tmp_path / "run.log"
    path.write_text("".join(json.dumps({**r, "time": 1796370000.0 + i}) + "\n" for i, r in enumerate(records)))
    return path


def start(budget: float | None, **fields: Any) -> dict[str, Any]:
    return {
        "event": "start",
        "world_size": 16,
        "device": "cuda",
        "restart": 0,
        "shutdown_budget_seconds": budget,
        **fields,
    }


def test_the_runs_budget_is_the_least_any_start_line_reported(tmp_path: Path) -> None:
    # The pods say 300 s, but one node's torchrun (torch 2.8, the DLC's) gives its workers 30 s.
    log = payload_log(
        tmp_path,
        start(300.0),
        start(30.0),
        {"event": "checkpoint", "step": 10, "seconds": 4.0, "stall_seconds": 1.0},
        start(300.0, restart=1),
    )
    runs = read_runs([str(log)])
    assert runs.shutdown_budget_seconds is not None
    assert runs.shutdown_budget_seconds.value == 30.0
    assert runs.shutdown_budget_seconds.how == "launcher's stop-signal-to-SIGKILL budget, least of 3 start lines"
    assert runs.notes == ()  # a 4 s save fits 80 % of 30 s


def test_saves_too_long_for_the_budget_and_skipped_final_saves_are_noted(tmp_path: Path) -> None:
    log = payload_log(
        tmp_path,
        start(30.0),
        *({"event": "checkpoint", "step": s, "seconds": s / 4, "stall_seconds": 2.0} for s in (100, 104, 108)),
        {"event": "final_checkpoint_skipped", "step": 111, "reason": "budget"},
    )
    notes = read_runs([str(log)]).notes
    assert notes == (
        "1 stop skipped the final checkpoint (step 111): the work since the last checkpoint was lost",
        "a save until committed takes 26 s (median), more than 80 % of the 30 s a stop leaves before SIGKILL: a stop "
        "skips the final checkpoint and loses the work since the last one (raise the launcher's shutdown timeout, "
        "or save faster)",
    )


@pytest.mark.parametrize("budget", [None, "absent"])
def test_ray_train_and_older_payloads_report_no_budget(tmp_path: Path, budget: str | None) -> None:
    record = start(None) if budget is None else {k: v for k, v in start(None).items() if k != "shutdown_budget_seconds"}
    log = payload_log(tmp_path, record, {"event": "checkpoint", "step": 2, "seconds": 500.0, "stall_seconds": 1.0})
    runs = read_runs([str(log)])
    assert runs.shutdown_budget_seconds is None and runs.notes == ()


def test_the_payloads_start_lines_carry_the_budget_torchrun_gives(payload_run, capsys) -> None:
    stdout, _, records = payload_run
    starts = [r for r in records if r.get("event") == "start"]
    # torch 2.13's torchrun honours TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30 s (accelerator.shutdown_budget_seconds)
    expected = float(os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT") or 30)
    assert {r["shutdown_budget_seconds"] for r in starts} == {expected}
    budget = read_runs([str(stdout)]).shutdown_budget_seconds
    assert budget is not None and budget.value == expected
    code, out, _ = run_cli(capsys, "plan", *JOB, "--from-run", str(stdout))
    assert code == 0 and f"  shutdown_budget_seconds = {expected:g}  (" in out
