"""Stopping before the last step: the stop request a launcher sends, and whether a final save fits.

Imports only torch and stdlib.
"""

from __future__ import annotations

import math
import signal
import time
from typing import TYPE_CHECKING, Any

import torch.distributed as dist
from accelerator import reduce_numbers

if TYPE_CHECKING:
    from checkpointing import CheckpointManager
    from train import Runtime

STOPPED_EXIT_CODE = 128 + signal.SIGTERM  # stopped before the last step: not a success


class StopSignal:
    """A request to stop before the last step, ``budget_seconds`` before a SIGKILL.

    Under torchrun or hyperpodrun the request is SIGTERM (pod eviction, HyperPod node replacement,
    forwarded by the launcher: :meth:`on_sigterm`), and the launcher SIGKILLs the worker
    ``budget_seconds`` later (see :func:`accelerator.shutdown_budget_seconds`); a final checkpoint is
    written only if it fits.
    Ray Train ends its workers itself and no signal reaches the training thread: nothing requests.
    """

    def __init__(self, budget_seconds: float) -> None:
        self.budget_seconds = budget_seconds
        self.requested_at: float | None = None

    def on_sigterm(self) -> StopSignal:
        """Take SIGTERM as the request (only the main thread may install the handler)."""
        signal.signal(signal.SIGTERM, self._handle)
        return self

    @property
    def requested(self) -> bool:
        return self.requested_at is not None

    def remaining_seconds(self) -> float:
        """Time left before SIGKILL; unbounded on a rank that got no signal."""
        if self.requested_at is None:
            return math.inf
        return self.budget_seconds - (time.monotonic() - self.requested_at)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested_at is None:
            self.requested_at = time.monotonic()


def final_save_fits(checkpoints: CheckpointManager, stop: StopSignal, runtime: Runtime) -> bool:
    """At a stop, save only if the slowest rank's last measured save fits the shortest time left
    before SIGKILL (with a 20 % margin); with no measurement yet, try (a killed save is never
    committed, so trying costs nothing but time)."""
    estimate = checkpoints.last_durable_seconds  # a save until committed, as last measured here
    slowest, negative_least_left = reduce_numbers(
        [0.0 if estimate is None else estimate, -stop.remaining_seconds()], runtime.device, dist.ReduceOp.MAX
    )
    return slowest <= 0.8 * -negative_least_left
