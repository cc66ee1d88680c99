"""Fault injection for the resilience tests and the validation job, beside the training loop.

Training faults: a rank that exits before a step, one that hangs (for the late-rank naming), a NaN loss
on one rank (keyed to the batch, as bad data is: a run that skips that batch never sees it again).

Each fault fires once per job, in the first attempt only (``TORCHELASTIC_RESTART_COUNT`` 0), like a
transient fault: the restarted run passes the same step. Faults fire on ``fail_rank`` (default 0)
only: the other ranks must not be left waiting in a collective (checkpointing.py agrees on every
outcome that can differ between ranks).

Checkpoint faults act where real ones do: an I/O error while DCP reads or writes this rank's shards
(the reader's or writer's ``read_data``/``write_data``, inside DCP's collectives), and a memory-tier
outage as amzn-sagemaker-checkpointing shows it (its reader finds nothing in the tier, before DCP;
its writer raises ``SageMakerInMemoryTierError`` inside DCP).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import torch


@dataclass(frozen=True)
class FaultInjector:
    rank: int
    restart_count: int
    fail_at_step: int | None = None  # the process exits before this step
    fail_in_checkpoint_at_step: int | None = None  # dies after writing this step's shards, before commit
    fail_rank: int | None = None  # which rank (default 0)
    fail_in_checkpoint_load: bool = False  # an I/O error reading the newest committed checkpoint's shards
    fail_in_checkpoint_save_at_step: int | None = None  # an I/O error writing this step's shards
    fail_memory_tier_at_load: bool = False  # the memory tier has nothing for this rank at the first load
    fail_memory_tier_at_step: int | None = None  # the memory tier refuses this rank's shards of this step
    fail_nan_at_step: int | None = None  # the loss of the batch an uninterrupted run reads at this step is NaN
    fail_hang_at_step: int | None = None  # the process stops before this step, past any timeout

    def _armed(self, at: int | None, step: int) -> bool:
        return at == step and self._this_rank_first_attempt()

    def _this_rank_first_attempt(self) -> bool:
        return self.restart_count == 0 and self.rank == (self.fail_rank or 0)

    def before_step(self, step: int) -> None:
        if self._armed(self.fail_at_step, step):
            record = {"event": "fault", "kind": "exit", "rank": self.rank, "step": step, "time": round(time.time(), 3)}
            print(json.dumps(record), file=sys.stderr, flush=True)
            os._exit(17)
        if self._armed(self.fail_hang_at_step, step):
            _report({"event": "fault", "kind": "hang", "rank": self.rank, "step": step})
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # stuck in its work, not in its signal handling:
            while True:  # the launcher's SIGTERM ends it at once
                time.sleep(3600)

    def poison_loss(self, loss: torch.Tensor, data_step: int) -> torch.Tensor:
        """``--fail-nan-at-step``: the loss NaN when this step reads the batch an uninterrupted run reads at
        that step (``data_step``: the data position in steps, +1), on the device."""
        if not self._armed(self.fail_nan_at_step, data_step):
            return loss
        _report({"event": "fault", "kind": "nan_loss", "rank": self.rank, "step": data_step})
        return loss * torch.nan

    def crashes_in_checkpoint(self, step: int) -> bool:
        return self._armed(self.fail_in_checkpoint_at_step, step)

    # ---- checkpoint faults (called by checkpointing.py) --------------------------------------
    def arm_read(self, reader: Any, *, newest: bool) -> None:
        """``--fail-in-checkpoint-load``: this rank's shard reads of the newest checkpoint fail."""
        if self.fail_in_checkpoint_load and newest and self._this_rank_first_attempt():
            reader.read_data = _raising(OSError(5, "injected I/O error reading the newest checkpoint's shards"))

    def arm_write(self, writer: Any, step: int, *, tiered: bool) -> None:
        """``--fail-in-checkpoint-save-at-step``: this rank's shard writes of ``step`` fail; and
        ``--fail-memory-tier-at-step``: the memory tier refuses them (tiered storage only)."""
        if self._armed(self.fail_in_checkpoint_save_at_step, step):
            writer.write_data = _raising(OSError(5, f"injected I/O error writing the shards of step {step}"))
        elif tiered and self._armed(self.fail_memory_tier_at_step, step):
            writer.write_data = _raising(_memory_tier_error(f"injected memory-tier outage at step {step}"))

    def memory_tier_read(self) -> None:
        """``--fail-memory-tier-at-load``: the memory tier answers this rank with nothing, as the tiered
        reader does when the tier is unreachable (its ``read_metadata`` comes back empty)."""
        if self.fail_memory_tier_at_load and self._this_rank_first_attempt():
            raise LookupError("injected memory-tier outage: nothing in the memory tier for this rank")


def _report(record: dict[str, Any]) -> None:
    print(json.dumps({**record, "time": round(time.time(), 3)}), file=sys.stderr, flush=True)


def _raising(error: BaseException) -> Callable[..., NoReturn]:
    def fail(*args: Any, **kwargs: Any) -> NoReturn:
        record = {"event": "fault", "kind": "checkpoint_io", "error": str(error), "time": round(time.time(), 3)}
        print(json.dumps(record), file=sys.stderr, flush=True)
        raise error

    return fail


def _memory_tier_error(message: str) -> Exception:
    """The tiered library's own error when it is installed (what its writer raises), else a RuntimeError."""
    try:
        from amzn_sagemaker_checkpointing.checkpointing.filesystem.exceptions import SageMakerInMemoryTierError
    except ImportError:
        return RuntimeError(message)
    return SageMakerInMemoryTierError(message)
