"""What a training run measured, for the planner: read from the payload's JSON lines and from
``llm-infra drill``'s report.

The payload's records (one JSON object a line, each stamped with ``time``, seconds since the epoch):
``workloads/train.py`` ``emit`` on stdout: ``{"event": "start", "world_size", "device", "restart",
"resumed_from", "shutdown_budget_seconds"}`` (the last: seconds from a stop signal to the launcher's
SIGKILL, ``accelerator.shutdown_budget_seconds()``; null under Ray Train, absent from older payloads),
``{"event": "step", "step", "tokens_per_s", "step_time_s"}``, ``{"event": "summary", "tokens_per_s"}``,
``{"event": "final_checkpoint_skipped", "step", "reason"}`` (a stop whose final save did not fit);
``workloads/throughput.py``: ``{"event": "throughput", "step", "tokens_per_s"}``;
``workloads/checkpointing.py``: ``{"event": "checkpoint", "step", "seconds", "stall_seconds"}``
(``seconds`` from the save's start until it is committed; ``stall_seconds`` how long training was
blocked by it, absent from older payloads); ``workloads/faults.py`` on stderr: ``{"event": "fault",
"step"}``. Start, step and throughput lines come from every node, the rest from rank 0 only: pass
rank 0's pod log, both streams (``kubectl logs`` gives both), to measure everything.

The drill's report, one JSON object (also accepted as a line): ``{"kind": "llm-infra/drill",
"version": 1, "compute", "fault", "node", "phases_seconds": {...}, "recovery_seconds"}`` with
``recovery_seconds`` from the injected fault to the first training step after the resume, or null
when the drill did not see one: such a report measures no recovery, and says so
(``RunMeasurements.drills_without_recovery``) rather than leave the plan to a default in silence.

What a run was (``RunMeasurements.runs``, from its start lines: device, model preset, world size) lets
the planner say when it scales another job's measurements: a CPU run, or another model size.

A file that cannot be read, or holds neither, is a :class:`PlanError` about the input ``run``, its value
the file's path: ``run PATH: why``, and the caller says ``run`` in its own words.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_infra.input_files import InputFileError, read_text
from llm_infra.ops.drill import DRILL_KIND, DRILL_VERSION
from llm_infra.payload_log import json_objects
from llm_infra.planner import PlanError

RUN = "run"  # the planner's name for a run's file (PlanError.field): a payload log or a drill report


@dataclass(frozen=True)
class Measurement:
    value: float
    how: str  # what was measured, in words


# Parameters of the payload's model presets (workloads/model.py ``parameter_count``, which needs torch;
# tests/test_plan_from_run.py holds the two equal): what a run's start line ``preset`` trained.
PRESET_PARAMETERS: dict[str, int] = {
    "tiny": 5_245_184,
    "nano": 164_160,
    "1b": 1_235_814_400,
    "8b": 8_030_261_248,
    "llama3-8b": 8_030_261_248,
    "llama2-7b": 6_738_415_616,
    "70b": 70_553_706_496,
}


def parameters_text(count: float) -> str:
    """``5.2M``, ``8.03B``: a parameter count as model names give it."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if count >= scale:
            return f"{count / scale:.3g}{suffix}"
    return f"{count:g}"


@dataclass(frozen=True)
class RunShape:
    """What one run's file ran, from its start lines (empty where it has none, e.g. a drill report)."""

    path: str
    devices: tuple[str, ...] = ()
    presets: tuple[str, ...] = ()
    world_sizes: tuple[int, ...] = ()

    @property
    def parameters(self) -> int | None:
        """The model's parameter count, when every start line names one known preset."""
        if len(self.presets) != 1:
            return None
        return PRESET_PARAMETERS.get(self.presets[0])

    def describe(self) -> str:
        """``a cpu run of the tiny model (5.2M parameters) on 2 ranks``."""
        devices = " and ".join(self.devices) or "?"
        model = " and ".join(self.presets) or "an unnamed"
        parameters = f" ({parameters_text(self.parameters)} parameters)" if self.parameters else ""
        ranks = " or ".join(str(size) for size in self.world_sizes) or "?"
        return f"a {devices} run of the {model} model{parameters} on {ranks} ranks"


@dataclass(frozen=True)
class RunMeasurements:
    """A run's measured plan inputs; None where the logs do not say."""

    checkpoint_seconds: Measurement | None = None
    recovery_seconds: Measurement | None = None
    tokens_per_gpu_second: Measurement | None = None
    step_seconds: Measurement | None = None
    # Seconds from a stop (SIGTERM, or hyperpodrun's graceful SIGUSR1) to the launcher's SIGKILL: the
    # least any start line reported (torchrun of torch 2.8, the DLC's, gives 30 s whatever the pod says).
    shutdown_budget_seconds: Measurement | None = None
    # What the logs say about stopping that the plan does not model, in words.
    notes: tuple[str, ...] = ()
    runs: tuple[RunShape, ...] = ()  # one a file, in the order given
    # Drill reports whose recovery_seconds is null (no step seen after the resume), in words.
    drills_without_recovery: tuple[str, ...] = ()


def read_runs(paths: Iterable[str]) -> RunMeasurements:
    """The measurements in the payload logs and drill reports at ``paths``; :class:`PlanError` about
    :data:`RUN` for a file that cannot be read or holds neither."""
    records: list[dict[str, Any]] = []
    shapes: list[RunShape] = []
    unrecovered: list[str] = []
    for path in paths:
        read = _records(Path(path))
        records.extend(read)
        shapes.append(_shape(path, read))
        unrecovered += [_unrecovered(path, r) for r in read if r.get("kind") == DRILL_KIND and not _recovered(r)]
    drills = [r for r in records if r.get("kind") == DRILL_KIND]
    events = sorted((r for r in records if "event" in r and isinstance(r.get("time"), int | float)), key=_time)
    budget = _shutdown_budget_seconds(events)
    return RunMeasurements(
        checkpoint_seconds=_checkpoint_seconds(events),
        recovery_seconds=_drill_recovery(drills) or _payload_recovery(events),
        tokens_per_gpu_second=_tokens_per_gpu_second(events),
        step_seconds=_median(
            [r["step_time_s"] for r in events if r["event"] == "step" and r.get("step_time_s")], "median step time"
        ),
        shutdown_budget_seconds=budget,
        notes=_stop_notes(events, budget) + _unresumed_faults(events),
        runs=tuple(shapes),
        drills_without_recovery=tuple(unrecovered),
    )


def _shape(path: str, records: list[dict[str, Any]]) -> RunShape:
    starts = [r for r in records if r.get("event") == "start"]

    def distinct(key: str) -> tuple[Any, ...]:
        return tuple(dict.fromkeys(r[key] for r in starts if r.get(key) is not None))

    return RunShape(
        path=path,
        devices=tuple(str(d) for d in distinct("device")),
        presets=tuple(str(p) for p in distinct("preset")),
        world_sizes=tuple(int(w) for w in distinct("world_size") if _number(w)),
    )


def _recovered(drill: dict[str, Any]) -> bool:
    return _number(drill.get("recovery_seconds"))


def _unrecovered(path: str, drill: dict[str, Any]) -> str:
    """A drill report without a recovery, in words: which drill, and the last phase it saw."""
    phases = drill.get("phases_seconds")
    seen = [(name, s) for name, s in phases.items() if _number(s)] if isinstance(phases, dict) else []
    last = f"; the last phase it saw: {seen[-1][0]}, {seen[-1][1]:g} s after the fault" if seen else ""
    return (
        f"{path}: the {drill.get('fault', '?')} drill on {drill.get('compute', '?')} has recovery_seconds null "
        f"(it saw no training step after the resume{last})"
    )


def _unresumed_faults(events: list[dict[str, Any]]) -> tuple[str, ...]:
    """Injected faults no restart followed in the logs: no recovery measured from them."""
    restarts = [_time(r) for r in events if r["event"] == "start" and (r.get("restart") or 0) > 0]
    lone = [r for r in events if r["event"] == "fault" and not any(t > _time(r) for t in restarts)]
    if not lone:
        return ()
    steps = ", ".join(str(r.get("step")) for r in lone)
    faults, them = ("the fault at step", "it") if len(lone) == 1 else ("the faults at steps", "them")
    return (f"no restart after {faults} {steps} in the logs: no recovery measured from {them}",)


RUN_FILE_ADVICE = (
    "pass a run's log (kubectl logs POD > run.log) or the report llm-infra drill wrote; UTF-8, or "
    "UTF-16 with a byte-order mark as PowerShell writes"
)


def _records(path: Path) -> list[dict[str, Any]]:
    try:
        text = read_text(path, flag=RUN, advice=RUN_FILE_ADVICE)
    except InputFileError as err:  # "run PATH: why; advice": the why and the advice are this error's
        raise PlanError.about(RUN, str(err).removeprefix(f"{RUN} {path}: "), value=path) from None
    try:  # a drill report, possibly indented over several lines
        whole = json.loads(text)
    except ValueError:
        whole = None
    is_drill = isinstance(whole, dict) and whole.get("kind") == DRILL_KIND
    records = [whole] if is_drill else json_objects(text)
    for record in records:
        if record.get("kind") == DRILL_KIND and record.get("version") != DRILL_VERSION:
            raise PlanError.about(
                RUN,
                f"drill report version {record.get('version')!r} is not supported "
                f"(this planner reads version {DRILL_VERSION})",
                value=path,
            )
        if record.get("kind") == DRILL_KIND:
            _check_recovery_seconds(path, record)
    if not any("event" in r or r.get("kind") == DRILL_KIND for r in records):
        raise PlanError.about(
            RUN,
            f"no payload JSON lines (train.py) and no llm-infra drill report in it; {RUN_FILE_ADVICE}",
            value=path,
        )
    return records


def _check_recovery_seconds(path: Path, drill: dict[str, Any]) -> None:
    """A drill report's recovery_seconds is a finite number of seconds >= 0, or null (no step seen after
    the resume); anything else (missing, a string, a negative or infinite number) is one error."""
    value = drill.get("recovery_seconds", "missing")
    if value is None or (_number(value) and math.isfinite(value) and value >= 0):
        return
    shown = "missing" if value == "missing" and "recovery_seconds" not in drill else repr(value)
    raise PlanError.about(
        RUN,
        f"a drill report's recovery_seconds is seconds >= 0 or null, not {shown}: "
        "pass the report as llm-infra drill wrote it",
        value=path,
    )


def _time(record: dict[str, Any]) -> float:
    return float(record["time"])


def _median(values: list[float], how: str) -> Measurement | None:
    if not values:
        return None
    return Measurement(statistics.median(values), f"{how}, {len(values)} sample{'s' * (len(values) > 1)}")


def _checkpoint_seconds(events: list[dict[str, Any]]) -> Measurement | None:
    """The median stall a checkpoint costs training; from logs without ``stall_seconds``, the median
    save until committed, an upper bound (an async save stalls training only while it stages)."""
    checkpoints = [r for r in events if r["event"] == "checkpoint"]
    stalls = [r["stall_seconds"] for r in checkpoints if isinstance(r.get("stall_seconds"), int | float)]
    if stalls:
        return _median(stalls, "median checkpoint stall (training blocked by the save)")
    seconds = [r["seconds"] for r in checkpoints if isinstance(r.get("seconds"), int | float)]
    return _median(seconds, "median checkpoint save until committed (an upper bound on the stall)")


def _drill_recovery(drills: list[dict[str, Any]]) -> Measurement | None:
    measured = [d for d in drills if _recovered(d)]
    if not measured:
        return None
    faults = ", ".join(sorted({f"{d.get('fault')} on {d.get('compute')}" for d in measured}))
    return _median(
        [d["recovery_seconds"] for d in measured], f"llm-infra drill: fault to first step after the resume ({faults})"
    )


def _payload_recovery(events: list[dict[str, Any]]) -> Measurement | None:
    """Each fault to the first step finished after the next restart (a step line, or a throughput
    line with tokens: log every step for precision)."""
    recoveries = []
    restarts = [r for r in events if r["event"] == "start" and (r.get("restart") or 0) > 0]
    for fault in (r for r in events if r["event"] == "fault"):
        restart = next((r for r in restarts if _time(r) > _time(fault)), None)
        if restart is None:
            continue
        resumed = next(
            (
                r
                for r in events
                if _time(r) > _time(restart)
                and (r["event"] == "step" or (r["event"] == "throughput" and (r.get("tokens_per_s") or 0) > 0))
            ),
            None,
        )
        if resumed is not None:
            recoveries.append(_time(resumed) - _time(fault))
    return _median(recoveries, "payload: injected fault to first step after the restart")


def _tokens_per_gpu_second(events: list[dict[str, Any]]) -> Measurement | None:
    """Per-step tokens/s over the world size of the attempt that logged it (the run summary's when no
    step was logged)."""
    world_size, device = 0, "?"
    per_step: list[float] = []
    per_summary: list[float] = []
    for record in events:
        if record["event"] == "start":
            world_size, device = int(record.get("world_size") or 0), str(record.get("device", "?"))
        elif record["event"] in ("step", "summary") and world_size and record.get("tokens_per_s"):
            (per_step if record["event"] == "step" else per_summary).append(record["tokens_per_s"] / world_size)
    if per_step:
        return _median(per_step, f"median tokens/s of a step per rank ({device})")
    return _median(per_summary, f"run summary tokens/s per rank ({device})")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _shutdown_budget_seconds(events: list[dict[str, Any]]) -> Measurement | None:
    """The least budget any start line reported (each node and each restart reports its own)."""
    budgets = [
        r["shutdown_budget_seconds"]
        for r in events
        if r["event"] == "start" and _number(r.get("shutdown_budget_seconds"))
    ]
    if not budgets:
        return None
    how = f"launcher's stop-signal-to-SIGKILL budget, least of {len(budgets)} start line{'s' * (len(budgets) > 1)}"
    return Measurement(float(min(budgets)), how)


def _stop_notes(events: list[dict[str, Any]], budget: Measurement | None) -> tuple[str, ...]:
    """Stops that lost work: final saves the payload skipped, and saves longer than the budget allows
    (the payload saves at a stop only within 80 % of it: workloads/stopping.py ``final_save_fits``)."""
    notes = []
    skipped = [r for r in events if r["event"] == "final_checkpoint_skipped"]
    if skipped:
        steps = ", ".join(str(r.get("step")) for r in skipped)
        notes.append(
            f"{len(skipped)} stop{'s' * (len(skipped) > 1)} skipped the final checkpoint (step {steps}): the work "
            "since the last checkpoint was lost"
        )
    saves = [r["seconds"] for r in events if r["event"] == "checkpoint" and _number(r.get("seconds"))]
    if budget is not None and saves and statistics.median(saves) > 0.8 * budget.value:
        notes.append(
            f"a save until committed takes {statistics.median(saves):.3g} s (median), more than 80 % of the "
            f"{budget.value:g} s a stop leaves before SIGKILL: a stop skips the final checkpoint and loses the "
            "work since the last one (raise the launcher's shutdown timeout, or save faster)"
        )
    return tuple(notes)
