"""Checkpoints that only count when complete: sharded DCP state, atomic commit, fallback on load.

Layout under ``checkpoint_dir``::

    step-00000040/      a committed checkpoint: DCP shards + .metadata, COMMITTED (step, world size)
    .tmp-step-00000060/ a save in progress (ignored on load, removed on the next start)
    latest              "step-00000040", replaced atomically after each commit

A save writes into ``.tmp-step-N``; when every rank has finished its shards (for an async save:
as soon as the per-step agreement says every rank's write is durable), rank 0 writes ``COMMITTED``
last and renames the folder, then moves ``latest``. A load takes the newest committed checkpoint
that every rank can read, resharded by DCP to the current world size, and falls back to the
previous one, with a warning, when it is corrupt; when committed checkpoints exist and none loads,
it raises rather than start over from step 0. Imports only torch and stdlib.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from accelerator import reduce_numbers
from checkpoint_interval import daly_interval
from torch.distributed.checkpoint import staging
from torch.distributed.checkpoint.api import CheckpointException  # a BaseException, not an Exception

COMMIT_MARKER = "COMMITTED"
LATEST = "latest"
PREFIX = "step-"
TMP_PREFIX = ".tmp-step-"


def step_dir_name(step: int) -> str:
    return f"{PREFIX}{step:08d}"


@dataclass
class PendingSave:
    step: int
    tmp_dir: Path
    future: Future[Any]
    started: float


@dataclass(frozen=True)
class SaveSchedule:
    """When to save: every N steps, every T seconds, or Daly's optimum from the MTBF and the
    measured save stall (the first save, with nothing measured yet, comes after one step)."""

    every_steps: int | None = None
    every_seconds: float | None = None
    mtbf_hours: float | None = None

    def due(self, step: int, since_last_save: float, step_seconds: float, save_stall: float | None) -> bool:
        if self.every_steps is not None:
            return step % self.every_steps == 0
        if self.every_seconds is not None:
            return since_last_save >= self.every_seconds
        if self.mtbf_hours is not None:
            stall = save_stall if save_stall else max(step_seconds, 1e-3)
            return since_last_save >= daly_interval(stall, self.mtbf_hours * 3600.0)
        return False


class NoLoadableCheckpoint(RuntimeError):
    """Committed checkpoints exist but none loads: starting over would mix two runs in one directory."""


class CheckpointManager:
    """The one owner of a run's checkpoints: when to save, what, the commit, restore and fallback
    (see the module docstring for the protocol).

    ``state()`` builds the run's state as DCP state dicts (model, optimizer, scheduler, step and data
    position); ``apply(state)`` puts a loaded one back. :meth:`due` asks ``schedule``; :meth:`save`
    writes ``state()``; :meth:`restore` loads the newest good checkpoint through ``apply``. ``keep``
    committed checkpoints are kept. With ``async_save``, DCP writes in
    the background on its own gloo process group and training continues; the checkpoint is
    committed by :meth:`commit_if_durable` once every rank reports its write done (the training
    loop asks every step), at the latest by the next save or :meth:`close`.

    ``last_save_seconds`` is the training stall of the last save (staging, and any wait for the
    previous save); ``last_durable_seconds`` the time until it was committed.
    """

    def __init__(
        self,
        directory: Path,
        *,
        state: Callable[[], dict[str, Any]],
        apply: Callable[[dict[str, Any]], None] = lambda loaded: None,
        schedule: SaveSchedule = SaveSchedule(),
        keep: int = 3,
        async_save: bool = False,
        log: Callable[[dict[str, Any]], None] | None = None,
        device: Any = "cpu",
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep: {keep} must be >= 1")
        self.directory = directory
        self.state, self.apply, self.schedule = state, apply, schedule
        self.last_save_at = time.monotonic()
        self.keep = keep
        self.rank = dist.get_rank()
        self.log = log or (lambda record: None)
        self.device = device  # where the training group's collectives take their tensors
        self.async_group = dist.new_group(backend="gloo") if async_save else None
        self.pending: PendingSave | None = None
        self.last_save_seconds: float | None = None
        self.last_durable_seconds: float | None = None
        if self.rank == 0:
            directory.mkdir(parents=True, exist_ok=True)
            for stale in directory.glob(f"{TMP_PREFIX}*"):
                shutil.rmtree(stale, ignore_errors=True)
        dist.barrier()

    # ---- saving --------------------------------------------------------------------------
    def due(self, step: int, step_seconds: float) -> bool:
        """Whether the schedule says this rank should save after ``step``."""
        return self.schedule.due(step, time.monotonic() - self.last_save_at, step_seconds, self.last_save_seconds)

    def restore(self) -> int | None:
        """Load the newest good checkpoint into the run (:meth:`load_latest`, then ``apply``)."""
        state = self.state()
        step = self.load_latest(state)
        if step is not None:
            self.apply(state)
        return step

    def save(self, step: int, *, crash_before_commit: bool = False) -> None:
        """Write a checkpoint of ``step``; blocking, or in the background with ``async_save``."""
        self.last_save_at = time.monotonic()
        state = self.state()
        started = time.perf_counter()
        self.finalize()  # an earlier async save is committed (or fails) first: part of this stall
        tmp_dir = self.directory / f"{TMP_PREFIX}{step:08d}"
        if self.rank == 0:
            tmp_dir.mkdir(parents=True, exist_ok=True)
        dist.barrier()
        if self.async_group is None:
            dcp.save(state, checkpoint_id=str(tmp_dir))
            self.last_save_seconds = time.perf_counter() - started
            if crash_before_commit:
                _die_mid_checkpoint(tmp_dir, self.rank)
            self._commit(step, tmp_dir, started)
            return
        response = dcp.async_save(state, checkpoint_id=str(tmp_dir), process_group=self.async_group, **self._staging())
        # A Future, or (with an async stager) an AsyncSaveResponse whose upload completes later.
        future = cast(Future[Any], getattr(response, "upload_completion", response))
        self.last_save_seconds = time.perf_counter() - started  # only the staging stall
        self.pending = PendingSave(step, tmp_dir, future, started)
        if crash_before_commit:
            future.result()
            _die_mid_checkpoint(tmp_dir, self.rank)

    def _staging(self) -> dict[str, Any]:
        """On GPU, stage the state into pinned host memory (a fast device-to-host copy; training
        resumes once the copy is done, the write to storage continues in the background)."""
        if str(self.device).startswith("cuda") and hasattr(staging, "DefaultStager"):
            options = staging.StagingOptions(
                use_pinned_memory=True, use_shared_memory=False, use_async_staging=False, use_non_blocking_copy=True
            )
            return {"async_stager": staging.DefaultStager(options)}
        return {}

    @property
    def write_done(self) -> bool:
        """This rank has no background write in flight (its vote in the per-step agreement)."""
        return self.pending is None or self.pending.future.done()

    def commit_if_durable(self, ranks_done: int) -> None:
        """Commit the background save as soon as all ``ranks_done`` = world size have written it."""
        if self.pending is not None and ranks_done >= dist.get_world_size():
            self.finalize()

    def finalize(self) -> None:
        """Wait for a background save on every rank, then commit it."""
        if self.pending is None:
            return
        pending, self.pending = self.pending, None
        pending.future.result()
        self._commit(pending.step, pending.tmp_dir, pending.started)

    def close(self) -> None:
        self.finalize()

    def _commit(self, step: int, tmp_dir: Path, started: float) -> None:
        dist.barrier()  # every rank's shards are on disk
        self.last_durable_seconds = time.perf_counter() - started
        if self.rank == 0:
            final_dir = self.directory / step_dir_name(step)
            marker = {"step": step, "world_size": dist.get_world_size(), "committed_at": time.time()}
            _write_durably(tmp_dir / COMMIT_MARKER, json.dumps(marker))
            if final_dir.exists():
                shutil.rmtree(final_dir)
            os.replace(tmp_dir, final_dir)
            _write_durably(self.directory / f".{LATEST}.tmp", final_dir.name)
            os.replace(self.directory / f".{LATEST}.tmp", self.directory / LATEST)
            self._prune()
            self.log(
                {
                    "event": "checkpoint",
                    "step": step,
                    "path": str(final_dir),
                    "seconds": round(time.perf_counter() - started, 4),
                }
            )
        dist.barrier()

    def _prune(self) -> None:
        for old in self.committed()[self.keep :]:
            shutil.rmtree(old, ignore_errors=True)

    # ---- loading -------------------------------------------------------------------------
    def committed(self) -> list[Path]:
        """Committed checkpoints, newest first."""
        if not self.directory.is_dir():
            return []
        found = [p for p in self.directory.glob(f"{PREFIX}*") if (p / COMMIT_MARKER).is_file()]
        return sorted(found, key=lambda p: p.name, reverse=True)

    def load_latest(self, state: dict[str, Any]) -> int | None:
        """Load the newest checkpoint that every rank reads without error into ``state``.

        Returns its step, or None when there is none (a fresh start). A corrupt or partial
        checkpoint is skipped with a warning and the previous one is tried; when none loads,
        :class:`NoLoadableCheckpoint`. A checkpoint saved by another world size is resharded by DCP
        and logged as ``world_size_changed`` (the global batch, and so the schedule, change with it).
        """
        candidates = self.committed() if self.rank == 0 else []
        names: list[Any] = [[p.name for p in candidates]]
        dist.broadcast_object_list(names, src=0)
        for name in names[0]:
            path = self.directory / name
            error = ""
            try:
                dcp.load(state, checkpoint_id=str(path))
            except (Exception, CheckpointException) as exc:  # noqa: BLE001 - unreadable: try the previous one
                error = f"{type(exc).__name__}: {exc}"
            (ok,) = reduce_numbers([0 if error else 1], self.device, dist.ReduceOp.MIN)
            if ok == 1:
                marker = json.loads((path / COMMIT_MARKER).read_text())
                step, saved_world = marker["step"], marker["world_size"]
                self.log({"event": "resume", "step": step, "path": str(path)})
                if saved_world != dist.get_world_size():
                    change = {"event": "world_size_changed", "saved": saved_world, "now": dist.get_world_size()}
                    self.log({**change, "step": step})
                return step
            warning = {
                "event": "checkpoint_skipped",
                "path": str(path),
                "reason": error or "unreadable on another rank",
            }
            print(json.dumps(warning), file=sys.stderr, flush=True)
            self.log(warning)
        if names[0]:
            raise NoLoadableCheckpoint(
                f"{self.directory}: none of the committed checkpoints {names[0]} loads; refusing to start over "
                "from step 0 in the same directory (move them away to start a new run)"
            )
        return None


def _write_durably(path: Path, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def _die_mid_checkpoint(tmp_dir: Path, rank: int) -> None:
    """Fault injection: the shards are written but nothing is committed; the process dies."""
    print(
        json.dumps({"event": "fault", "kind": "die_mid_checkpoint", "rank": rank, "path": str(tmp_dir)}),
        file=sys.stderr,
        flush=True,
    )
    os._exit(13)
