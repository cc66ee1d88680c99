"""Which rank is late: each rank's position in the process group's store, read when a collective times out.

As a rank enters the collectives of a step (FSDP's in its forward and backward, the per-step agreement,
a checkpoint), it writes one key of the store (the rendezvous's TCPStore): its step, the phase, its host
and how long its own work before the agreement took (:class:`WorkTimer`). When a collective fails, the
survivors read every rank's key and name the ranks (and hosts) that did not arrive, instead of a bare
timeout; when the store itself does not answer, its host is the one that died, and the error says so.
The heartbeat reads the same keys to name the slowest rank: in synchronous training every rank sees the
same step time, only the time of its own work tells a straggler apart. Two store writes per rank and step
(three when it saves): no collective, no host sync. Imports only torch and stdlib.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

KEY_PREFIX = "llm_infra_position/"
PHASES = ("forward", "agreement", "checkpoint")  # a step's collectives, in order (FSDP's, then the loop's)


class RanksLate(RuntimeError):
    """A collective of the loop timed out; the message names the ranks that did not arrive."""


class WorkTimer:
    """A rank's own work in a step, up to the collective: wall clock on CPU, CUDA events on a GPU (read a
    step later, when they are done: no host sync)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.started = 0.0
        self.events: tuple[Any, Any] | None = None
        self.last: float | None = None

    def start(self) -> None:
        if self.cuda:
            self._read_events()
            begin = torch.cuda.Event(enable_timing=True)
            begin.record()
            self.events = (begin, None)
        else:
            self.started = time.perf_counter()

    def stop(self) -> None:
        if self.cuda and self.events is not None:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.events = (self.events[0], end)
        else:
            self.last = time.perf_counter() - self.started

    def _read_events(self) -> None:
        if self.events is not None and self.events[1] is not None and self.events[1].query():
            self.last = self.events[0].elapsed_time(self.events[1]) / 1000.0
            self.events = None


class RankPositions:
    """Each rank's position in ``store`` (None: no store, nothing recorded or named)."""

    def __init__(self, store: dist.Store | None, rank: int, world_size: int) -> None:
        self.store, self.rank, self.world_size = store, rank, world_size
        self.host = socket.gethostname()
        self.last: tuple[int, str] | None = None  # this rank's last recorded position

    def arrive(self, step: int, phase: str, work_seconds: float | None = None) -> None:
        """This rank enters ``phase`` (one of :data:`PHASES`) of ``step`` (after ``work_seconds`` of its own
        work)."""
        self.last = (step, phase)
        if self.store is not None:
            position = {"step": step, "phase": phase, "host": self.host, "work_s": work_seconds}
            self.store.set(f"{KEY_PREFIX}{self.rank}", json.dumps(position))

    def read(self) -> dict[int, dict[str, Any]]:
        """Every rank's last recorded position (ranks that recorded none are missing); raises when the
        store does not answer."""
        assert self.store is not None
        found = {}
        for rank in range(self.world_size):
            key = f"{KEY_PREFIX}{rank}"
            if self.store.check([key]):
                found[rank] = json.loads(self.store.get(key))
        return found

    def late(self) -> str | None:
        """Who has not arrived where this rank last arrived, in one line; None when every rank has (what
        failed there is then no late rank's doing)."""
        if self.last is None:
            return None
        step, phase = self.last
        waiting = f"waiting at the {phase} of step {step}"
        if self.store is None:
            return f"{waiting}; no store to tell which ranks did not arrive"
        try:
            positions = self.read()
        except Exception as exc:  # noqa: BLE001 - the store's host may be the one that died
            where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
            return (
                f"{waiting}; the store at {where} does not answer either ({type(exc).__name__}: {exc}): its host "
                "(rank 0's, or the launcher agent's) is probably the one that died"
            )
        here = (step, PHASES.index(phase))
        behind = [
            f"rank {rank} (never recorded a position)"
            if rank not in positions
            else f"rank {rank} on {positions[rank]['host']} (last at the {positions[rank]['phase']} of step "
            f"{positions[rank]['step']})"
            for rank in range(self.world_size)
            if rank not in positions or (positions[rank]["step"], PHASES.index(positions[rank]["phase"])) < here
        ]
        return f"{waiting} for {', '.join(behind)}" if behind else None

    def slowest(self) -> dict[str, Any]:
        """For the heartbeat: the slowest rank's own work time in its last step against the median."""
        if self.store is None:
            return {}
        try:
            positions = self.read()
        except Exception as exc:  # noqa: BLE001 - a heartbeat never fails the run
            return {"ranks_unreadable": f"{type(exc).__name__}: {exc}"[:200]}
        timed = {rank: p for rank, p in positions.items() if p.get("work_s") is not None}
        if not timed:
            return {}
        rank = max(timed, key=lambda r: timed[r]["work_s"])
        return {
            "slowest_rank": rank,
            "slowest_host": timed[rank]["host"],
            "slowest_work_s": round(timed[rank]["work_s"], 4),
            "median_work_s": round(statistics.median(p["work_s"] for p in timed.values()), 4),
            "slowest_step": timed[rank]["step"],
        }
