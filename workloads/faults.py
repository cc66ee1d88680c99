"""Fault injection for the resilience tests and the validation job, beside the training loop.

Each fault fires once per job, in the first attempt only (``TORCHELASTIC_RESTART_COUNT`` 0), like a
transient fault: the restarted run passes the same step.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class FaultInjector:
    rank: int
    restart_count: int
    fail_at_step: int | None = None  # the process exits before this step
    fail_in_checkpoint_at_step: int | None = None  # dies after writing this step's shards, before commit
    fail_rank: int | None = None  # which rank (default 0)

    def _armed(self, at: int | None, step: int) -> bool:
        return at == step and self.restart_count == 0 and self.rank == (self.fail_rank or 0)

    def before_step(self, step: int) -> None:
        if self._armed(self.fail_at_step, step):
            record = {"event": "fault", "kind": "exit", "rank": self.rank, "step": step, "time": round(time.time(), 3)}
            print(json.dumps(record), file=sys.stderr, flush=True)
            os._exit(17)

    def crashes_in_checkpoint(self, step: int) -> bool:
        return self._armed(self.fail_in_checkpoint_at_step, step)
