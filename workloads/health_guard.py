"""The training-health guard: a step whose loss or gradient norm is not finite (or, when asked, whose loss
spikes) is never applied and never checkpointed; the run halts, or rolls back.

The check costs nothing extra per step: each rank's non-finite flag (loss, gradient norm) is computed on
the device and joins the per-step agreement (train.py's ``agree_on_step``, one small all-reduce) that
already runs before ``optimizer.step()``; :class:`HealthGuard` judges its agreed result on the host, so every
rank reaches the same verdict.

A halt must survive every launcher's restart (torchrun restarts workers whatever their exit code, a
PyTorchJob's ``OnFailure`` and Ray Train and hyperpodrun retry any failure), so the decision lives where
every restart reads it: the **halt record**, ``HALTED`` in the checkpoint folder (JSON: the step, the
cause, the run's flags), written durably (temporary file, fsync, rename). A run that finds one refuses to
train and exits :data:`HALTED_EXIT_CODE`, until it is started with a change to one of :data:`REMEDIES`
(a lower ``--lr``, ``--on-unhealthy rollback``...) or with ``--clear-halt`` (or the file is deleted).
Imports only the standard library.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections import deque
from pathlib import Path
from typing import Any

HALTED_EXIT_CODE = 4  # halted by the guard: below 128, so `restartPolicy: ExitCode` does not retry it
HALT_RECORD = "HALTED"
ON_UNHEALTHY = ("stop", "rollback")
# The flags whose change lets a halted run train on (the halt record's are compared with the new run's).
REMEDIES = (
    "lr",
    "weight_decay",
    "warmup_steps",
    "global_batch_size",
    "seed",
    "data",
    "on_unhealthy",
    "rollback_attempts",
    "spike_factor",
    "spike_window",
)


class HealthGuard:
    """Judges each step's agreed loss and gradient norm: the cause of an unhealthy step, or None.

    ``spike_factor`` (None: off): a finite loss above ``spike_factor`` times the median of the last
    ``spike_window`` healthy steps' losses is a spike; judged once the window is full (a resumed run
    fills it again)."""

    def __init__(self, spike_factor: float | None = None, spike_window: int = 20) -> None:
        self.spike_factor = spike_factor
        self.recent: deque[float] = deque(maxlen=spike_window)

    def cause(self, step: int, ranks_non_finite: int, mean_loss: float, grad_norm: float) -> str | None:
        """Why ``step`` must not be applied, or None (then its loss joins the spike window)."""
        if ranks_non_finite:
            return (
                f"non-finite loss or gradient norm at step {step} on {ranks_non_finite} rank(s) "
                f"(loss {mean_loss}, gradient norm {grad_norm})"
            )
        window = self.recent
        if self.spike_factor is not None and len(window) == window.maxlen:
            median = statistics.median(window)
            if mean_loss > self.spike_factor * median:
                return (
                    f"loss spike at step {step}: {mean_loss:.6g} > {self.spike_factor:g} x the median "
                    f"{median:.6g} of the last {len(window)} steps"
                )
        window.append(mean_loss)
        return None


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float as a string (``"nan"``, ``"inf"``): JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def write_halt_record(directory: Path, record: dict[str, Any]) -> Path:
    """The halt record in ``directory``, durably: written to a temporary file, fsynced, renamed over."""
    path = directory / HALT_RECORD
    tmp = directory / f".{HALT_RECORD}.tmp"
    with open(tmp, "w") as handle:
        handle.write(json.dumps(json_safe({**record, "time": round(time.time(), 3)}), allow_nan=False))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    folder = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename itself survives a crash
    finally:
        os.close(folder)
    return path


def read_halt_record(directory: Path) -> dict[str, Any] | None:
    """The halt record, or None when there is none. One that cannot be parsed still halts (its cause
    says so): a halt is never lost to a damaged file."""
    path = directory / HALT_RECORD
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text)
    except ValueError as exc:
        return {"cause": f"unreadable halt record {path}: {exc}", "config": {}}
    return record if isinstance(record, dict) else {"cause": f"unreadable halt record {path}", "config": {}}


def differences(before: dict[str, Any], after: dict[str, Any], names: tuple[str, ...] | None = None) -> list[str]:
    """``name old -> new`` for each of ``names`` (every key of ``after``: None) whose value differs."""
    keys = names if names is not None else tuple(after)
    return [f"{name} {before.get(name)} -> {after.get(name)}" for name in keys if before.get(name) != after.get(name)]
