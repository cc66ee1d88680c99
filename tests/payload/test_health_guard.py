"""The training-health guard (issue 30): a non-finite or spiking step is never applied, costs no extra host
sync or collective, halts the run through a record every restart honours, or rolls back."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from llm_infra.workloads import health_guard, train
from llm_infra.workloads.stopping import StopSignal

from .conftest import SMALL, WORKLOADS


def strict_json(line: str) -> dict[str, Any]:
    """A JSON line as a strict parser reads it: a bare NaN or Infinity is an error."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON: {line}")

    return json.loads(line, parse_constant=refuse)


def records(stdout: str) -> list[dict[str, Any]]:
    return [strict_json(line) for line in stdout.splitlines() if line.startswith("{")]


def events(stdout: str, name: str) -> list[dict[str, Any]]:
    return [r for r in records(stdout) if r.get("event") == name]


# ---- in one process: what a step costs, what a refused step leaves -------------------------------------
@pytest.fixture(scope="module")
def one_rank() -> Iterator[None]:
    """A one-rank gloo group in this process (no torchrun): enough for the loop's per-step accounting."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def trainer(argv: list[str]) -> train.Trainer:
    config = train.parse_config(["--batch-size=2", "--seq-len=32", *argv])
    runtime = train.Runtime(0, 1, torch.device("cpu"), 0, write_line=lambda line: None)
    return train.Trainer(config, runtime, StopSignal(30.0))


class Counted:
    """Counts the payload's explicit collectives (dist.all_reduce) and its host syncs: a tensor read on the
    host by the payload's own code (torch's internals, such as AdamW's CPU step counters, are not the
    payload's to remove and touch no device)."""

    SYNCS = ("item", "tolist", "__float__", "__int__", "__bool__")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.collectives, self.syncs = 0, 0
        all_reduce = dist.all_reduce

        def counted_all_reduce(*args: Any, **kwargs: Any) -> Any:
            self.collectives += 1
            return all_reduce(*args, **kwargs)

        monkeypatch.setattr(dist, "all_reduce", counted_all_reduce)
        for name in self.SYNCS:
            original = getattr(torch.Tensor, name)

            def counted(tensor: torch.Tensor, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
                caller = sys._getframe(1).f_code.co_filename
                self.syncs += Path(caller).parent == WORKLOADS
                return _original(tensor, *args, **kwargs)

            monkeypatch.setattr(torch.Tensor, name, counted)

    def reset(self) -> None:
        self.collectives, self.syncs = 0, 0


def test_a_refused_step_changes_nothing_and_the_guard_adds_no_sync_or_collective(
    one_rank: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trainer(["--steps=4", "--fail-nan-at-step=2"])
    state = run.state
    counted = Counted(monkeypatch)
    agreed, cause = run.train_step()
    assert cause is None and state.progress.step == 1 and math.isfinite(agreed.grad_norm)
    assert (counted.collectives, counted.syncs) == (1, 1)  # the agreement, and reading its result
    params = {name: p.detach().clone() for name, p in state.model.named_parameters()}
    moments = [s["exp_avg"].clone() for s in state.optimizer.state.values()]
    lr = state.optimizer.param_groups[0]["lr"]
    counted.reset()
    agreed, cause = run.train_step()  # the batch of step 2 has a NaN loss
    assert (counted.collectives, counted.syncs) == (1, 1)  # the guard costs nothing extra
    assert cause is not None and "non-finite loss" in cause and agreed.ranks_non_finite == 1
    assert all(torch.equal(p, params[name]) for name, p in state.model.named_parameters())
    assert all(torch.equal(s["exp_avg"], m) for s, m in zip(state.optimizer.state.values(), moments, strict=True))
    assert (state.progress.step, state.progress.samples, state.optimizer.param_groups[0]["lr"]) == (1, 2, lr)
    assert all(p.grad is None for p in state.model.parameters())  # its gradients dropped too
    run.data.close()


def test_a_checkpoint_of_another_model_shape_is_refused_naming_both(one_rank: None) -> None:
    run = trainer(["--steps=2"])
    saved = run.state.state_dict()
    deeper = {**json.loads(saved["run"]["model_args"]), "n_layers": 8}
    saved["run"] = {**saved["run"], "model_args": json.dumps(deeper)}
    with pytest.raises(train.ShapeMismatch) as refused:
        run.state.load_state_dict(saved)
    assert "dim 256, 8 layers" in str(refused.value) and "dim 256, 4 layers" in str(refused.value)
    run.data.close()


# ---- the guard's judgement ---------------------------------------------------------------------------
def test_a_loss_spike_is_unhealthy_only_when_asked_for() -> None:
    off = health_guard.HealthGuard()
    assert all(off.cause(step, 0, loss, 1.0) is None for step, loss in enumerate([2.0] * 5 + [50.0]))
    guard = health_guard.HealthGuard(spike_factor=3.0, spike_window=4)
    assert [guard.cause(step, 0, 2.0, 1.0) for step in range(4)] == [None] * 4
    assert guard.cause(5, 0, 5.9, 1.0) is None  # below 3 x the median
    cause = guard.cause(6, 0, 7.0, 1.0)
    assert cause is not None and "loss spike at step 6: 7 > 3 x the median 2" in cause
    assert guard.cause(7, 0, 2.1, 1.0) is None  # a spike never joins the window
    assert "non-finite" in (guard.cause(8, 1, math.nan, 1.0) or "")


def test_json_lines_never_hold_a_bare_nan(capsys: pytest.CaptureFixture[str]) -> None:
    runtime = train.Runtime(0, 1, torch.device("cpu"), 0)
    train.emit(runtime, {"event": "step", "loss": math.nan, "grad_norm": math.inf, "nested": [-math.inf]})
    line = strict_json(capsys.readouterr().out)
    assert (line["loss"], line["grad_norm"], line["nested"]) == ("nan", "inf", ["-inf"])


def test_the_halt_record_is_written_durably_and_a_damaged_one_still_halts(tmp_path: Path) -> None:
    path = health_guard.write_halt_record(tmp_path, {"step": 4, "cause": "loss nan", "loss": math.nan})
    assert path == tmp_path / "HALTED" and not list(tmp_path.glob(".*.tmp"))
    record = health_guard.read_halt_record(tmp_path)
    assert record is not None and (record["step"], record["cause"], record["loss"]) == (4, "loss nan", "nan")
    path.write_text("{trunc")
    damaged = health_guard.read_halt_record(tmp_path)
    assert damaged is not None and "unreadable halt record" in damaged["cause"]
    path.unlink()
    assert health_guard.read_halt_record(tmp_path) is None


# ---- whole runs (torchrun, 2 ranks) ------------------------------------------------------------------
RUN = [*SMALL, "--log-every=1", "--checkpoint-every=2", "--pg-timeout-seconds=30"]


def test_a_nan_halts_every_rank_and_every_restart_until_cleared(torch_launch, tmp_path: Path) -> None:
    """NaN on rank 1 at step 4: nothing of step 4 applied or saved, a halt record, torchrun's restart and a
    resubmission refused with exit 4, until --clear-halt."""
    args = [*RUN, "--steps=6", f"--checkpoint-dir={tmp_path}"]
    halted = torch_launch.run("train.py", [*args, "--fail-nan-at-step=4", "--fail-rank=1"], max_restarts=1, timeout=240)
    assert halted.returncode != 0, halted.stdout[-3000:]
    first, restarted = events(halted.stdout, "halted")  # the halt, then the restarted workers' refusal
    assert first["step"] == 4 and first["last_applied_step"] == 3 and "non-finite loss" in first["cause"]
    assert first["halt_record"] == str(tmp_path / "HALTED") and first["exit_code"] == 4
    assert restarted["cause"] == first["cause"] and "--clear-halt" in restarted["how_to_proceed"]
    assert "exitcode  : 4" in halted.stderr
    assert max(r["step"] for r in events(halted.stdout, "step")) == 3
    assert [r["step"] for r in events(halted.stdout, "checkpoint")] == [2]  # nothing after the NaN saved
    # The restarted workers started as a resubmitted job's do (the halt record read before any step): refused.
    lines = records(halted.stdout)
    assert not [r for r in lines[lines.index(restarted) :] if r.get("event") == "step"]
    cleared = torch_launch.run("train.py", [*args, "--clear-halt"], timeout=240)
    assert cleared.returncode == 0, cleared.stderr[-3000:]
    (note,) = events(cleared.stdout, "halt_cleared")
    assert note["by"] == ["--clear-halt"] and note["step"] == 4
    assert events(cleared.stdout, "summary")[0]["resumed_from"] == 2
    assert not (tmp_path / "HALTED").exists()


def test_rollback_skips_the_bad_batches_and_resumes_exactly(torch_launch, tmp_path: Path) -> None:
    """--on-unhealthy rollback: NaN at step 5 loads step 3, skips the samples of steps 4 and 5 (a global
    batch of 4), saves the rolled-back state as step 4 and trains on to the end."""
    args = [
        *SMALL,
        "--log-every=1",
        "--checkpoint-every=3",
        "--steps=7",
        f"--checkpoint-dir={tmp_path}",
        "--on-unhealthy=rollback",
    ]
    result = torch_launch.run("train.py", [*args, "--fail-nan-at-step=5", "--fail-rank=1"], timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    (rollback,) = events(result.stdout, "rollback")
    assert (rollback["attempt"], rollback["of"], rollback["step"], rollback["to_checkpoint"]) == (1, 3, 5, 3)
    assert rollback["skipped_samples"] == [12, 20] and "non-finite" in rollback["cause"]
    final = events(result.stdout, "summary")[0]
    assert (final["step"], final["samples"], final["rollbacks"]) == (7, 32, 1)
    assert [r["step"] for r in events(result.stdout, "checkpoint")] == [3, 4, 6, 7]
    steps = {r["step"]: r["samples"] for r in events(result.stdout, "step")}
    assert steps[4] == 16 and steps[5] == 24  # step 4 before the rollback; step 5 after it, past the skip
    resumed = torch_launch.run("train.py", [*SMALL, "--steps=8", f"--checkpoint-dir={tmp_path}"], timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = events(resumed.stdout, "summary")[0]
    assert (again["resumed_from"], again["samples"], again["rollbacks"]) == (7, 36, 1)
