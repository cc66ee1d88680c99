"""Stopping before the last step: the stop request a launcher sends, and whether a final save fits.

Knows nothing of the training loop or the checkpoints (checkpointing.py asks :func:`final_save_fits`).
Imports only torch and stdlib.
"""

from __future__ import annotations

import math
import signal
import time
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

# The payload's own modules: plain names when run as a script from /workloads, the package's when
# imported as llm_infra.workloads (see train.py).
if TYPE_CHECKING or not __package__:
    from accelerator import reduce_numbers
else:
    from .accelerator import reduce_numbers

STOPPED_EXIT_CODE = 128 + signal.SIGTERM  # stopped before the last step: not a success
# The stop requests. SIGTERM: pod eviction or deletion, HyperPod node replacement, forwarded by torchrun or
# hyperpodrun; hyperpodrun's non-graceful stop with ``--shutdown-signal=SIGTERM``. SIGUSR1: hyperpodrun's
# graceful stop (hyperpod-elastic-agent 1.1.3, plr_hyperpod_elastic_agent.py ``_stop_workers``:
# ``death_sig = signal.SIGUSR1 if is_graceful else shutdown_signal``, the operator's ``/stop`` with
# ``is_graceful``), whose default action would end the worker at once: no final save, no exit 143.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class StopSignal:
    """A request to stop before the last step, ``budget_seconds`` before a SIGKILL.

    Under torchrun or hyperpodrun the request is one of :data:`STOP_SIGNALS` (:meth:`on_stop_signals`),
    and the launcher SIGKILLs the worker ``budget_seconds`` later (see
    :func:`accelerator.shutdown_budget_seconds`); a final checkpoint is written only if it fits.
    hyperpodrun's graceful stop waits for the ``/stop`` request's ``timeout`` instead when it has one,
    which never reaches the worker: the budget stays ``--shutdown-timeout``'s.
    Ray Train ends its workers itself and no signal reaches the training thread: nothing requests.
    """

    def __init__(self, budget_seconds: float) -> None:
        self.budget_seconds = budget_seconds
        self.requested_at: float | None = None
        self.signal_name: str | None = None  # the first stop signal this process got

    def on_stop_signals(self) -> StopSignal:
        """Take every one of :data:`STOP_SIGNALS` as the request (only the main thread may install
        handlers)."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._handle)
        return self

    def on_sigterm(self) -> StopSignal:
        """The former name of :meth:`on_stop_signals`: SIGTERM and SIGUSR1 alike."""
        return self.on_stop_signals()

    @property
    def requested(self) -> bool:
        return self.requested_at is not None

    @property
    def reason(self) -> str:
        """The signal that asked this process to stop, or ``"peer"`` when the request came from
        another rank (the ranks agree on stopping at each step)."""
        return self.signal_name or "peer"

    @property
    def known_budget_seconds(self) -> float | None:
        """The budget for a JSON line: None when unbounded (Ray Train)."""
        return self.budget_seconds if math.isfinite(self.budget_seconds) else None

    def remaining_seconds(self) -> float:
        """Time left before SIGKILL; unbounded on a rank that got no signal."""
        if self.requested_at is None:
            return math.inf
        return self.budget_seconds - (time.monotonic() - self.requested_at)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested_at is None:
            self.requested_at = time.monotonic()
            self.signal_name = signal.Signals(signum).name


def final_save_fits(save_seconds: float | None, stop: StopSignal, device: torch.device) -> bool:
    """At a stop, save only if the slowest rank's last measured save (``save_seconds``: until committed,
    as last measured on this rank) fits the shortest time left before SIGKILL (with a 20 % margin); with
    no measurement yet, try (a killed save is never committed, so trying costs nothing but time).
    A collective (every rank calls it, with its tensor on the training ``device``)."""
    slowest, negative_least_left = reduce_numbers(
        [0.0 if save_seconds is None else save_seconds, -stop.remaining_seconds()], device, dist.ReduceOp.MAX
    )
    return slowest <= 0.8 * -negative_least_left
