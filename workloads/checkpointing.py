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
it raises rather than start over from step 0.

**A failure on one rank never leaves another waiting in a collective.** Every step that can fail on
one rank alone before a collective (building the reader or writer, rank 0's folder and commit, a
background write's result) is followed by one agreement (:meth:`CheckpointManager._agree`, every
rank's outcome gathered) before anyone enters DCP or the next barrier; inside DCP's own collectives a
rank's error reaches every rank as DCP's ``CheckpointException``, and is agreed on too. The agreed
outcomes: all ranks fall back together (an older checkpoint or the next source at load; the directory
instead of the memory tier at save, for this save and the rest of the run), or all ranks raise
:class:`CheckpointFailed` together (a save to the directory, a commit) so the launcher restarts them.

Where the shards go is the storage's business, chosen once at start and logged as a
``checkpoint_storage`` event: the staging folder itself (DCP's file system writer: FSx on the
cluster), or, with ``--tiered-checkpointing`` and the HyperPod memory tier reachable from every
rank, the tiered storage of :mod:`tiered_storage` (memory tier, every N-th save S3 too); then the
step folder holds only ``COMMITTED``, which records the namespace, tiers and world size to read it
back with. Commit, fallback, resharding and pruning are the same for both; a tiered checkpoint
that went to S3 is durable, and pruning keeps the newest durable one beyond ``keep``.

Pruning is off the commit path: after the commit is agreed, rank 0 prunes in a background thread (one
prune at a time; :meth:`CheckpointManager.close` waits for it) while every rank trains on. A pruned
folder is first renamed to ``.pruned-step-N`` (removed on the next start if the process dies midway),
so a half-deleted checkpoint never looks committed. Imports only torch and stdlib (and the tiered
library when that storage is used).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, staging
from torch.distributed.checkpoint.api import CheckpointException  # a BaseException, not an Exception
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.planner import LoadPlan
from torch.distributed.checkpoint.stateful import Stateful
from torch.torch_version import TorchVersion

# The payload's own modules: plain names when run as a script from /workloads, the package's when
# imported as llm_infra.workloads (see train.py).
if TYPE_CHECKING or not __package__:
    import checkpoint_digests
    import tiered_storage
    from checkpoint_digests import DigestingFileSystemWriter
    from checkpoint_interval import daly_interval
    from checkpoint_lease import FolderHeld, Lease, job_identity
    from faults import FaultInjector
    from stopping import StopSignal, final_save_fits
    from tiered_storage import TieredCheckpointOptions, TieredStorage
else:
    from . import checkpoint_digests, tiered_storage
    from .checkpoint_digests import DigestingFileSystemWriter
    from .checkpoint_interval import daly_interval
    from .checkpoint_lease import FolderHeld, Lease, job_identity
    from .faults import FaultInjector
    from .stopping import StopSignal, final_save_fits
    from .tiered_storage import TieredCheckpointOptions, TieredStorage

COMMIT_MARKER = "COMMITTED"
LATEST = "latest"
PREFIX = "step-"
TMP_PREFIX = ".tmp-step-"
REPLACED_PREFIX = ".replaced-step-"  # a committed folder being replaced by a new save of its step
PRUNED_PREFIX = ".pruned-step-"  # a committed folder being pruned
DIRECTORY_STORAGE = "directory"


def stager_is_single_use(torch_version: str) -> bool:
    """Whether this torch's ``DefaultStager`` stages only once: 2.11 and 2.12 close its copier at the end
    of every stage (staging.py ``_stage``), so a second save fails with ``KeyError: <class 'type'>`` (seen
    on an H200 with 2.11); 2.9, 2.10 and 2.13 keep it (read in each release's wheel)."""
    return "2.11" <= TorchVersion(torch_version) < "2.13"


STAGER_SINGLE_USE = stager_is_single_use(torch.__version__)
T = TypeVar("T")


def step_dir_name(step: int) -> str:
    return f"{PREFIX}{step:08d}"


@dataclass
class PendingSave:
    step: int
    tmp_dir: Path
    future: Future[Any]
    started: float
    record: dict[str, Any]
    writer: Any  # the storage writer: its digests go into the commit record
    stall_seconds: float  # how long training waited for it (staging, and any wait for the previous save)
    waited_seconds: float  # the part of that spent waiting for the previous save to be written


class CheckpointStorage(Protocol):
    """Where a save's shards go. ``target`` gives DCP's save arguments (``checkpoint_id`` or
    ``storage_writer``) for the save numbered ``save_index`` (1, 2, ... over the run) and what its
    commit record says; ``staging_dir`` is the folder that becomes the committed step folder."""

    name: str

    def describe(self) -> dict[str, Any]: ...

    def target(self, step: int, save_index: int, staging_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]: ...


class DirectoryStorage:
    """DCP's file system writer: the shards go into the step folder itself (FSx on the cluster), each
    file digested as it is written (checkpoint_digests.py)."""

    name = DIRECTORY_STORAGE

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def describe(self) -> dict[str, Any]:
        return {"storage": self.name, "path": str(self.directory)}

    def target(self, step: int, save_index: int, staging_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        return {"storage_writer": DigestingFileSystemWriter(staging_dir)}, {"storage": self.name}


@dataclass(frozen=True)
class SaveSchedule:
    """When to save: every N steps, every T seconds, or Daly's optimum from the job's MTBF (the whole
    job's: one instance's divided by the nodes) and the measured save stall (the first save, with
    nothing measured yet, comes after one step)."""

    every_steps: int | None = None
    every_seconds: float | None = None
    job_mtbf_hours: float | None = None

    def due(self, step: int, since_last_save: float, step_seconds: float, save_stall: float | None) -> bool:
        if self.every_steps is not None:
            return step % self.every_steps == 0
        if self.every_seconds is not None:
            return since_last_save >= self.every_seconds
        if self.job_mtbf_hours is not None:
            stall = save_stall if save_stall else max(step_seconds, 1e-3)
            return since_last_save >= daly_interval(stall, self.job_mtbf_hours * 3600.0)
        return False


@dataclass(frozen=True)
class CheckpointVote:
    """What this rank's checkpoints bring to the per-step agreement (train.py): the schedule says save
    now, and no background write of this rank is in flight."""

    save_due: bool
    write_done: bool


class NoLoadableCheckpoint(RuntimeError):
    """Committed checkpoints exist but none loads: starting over would mix two runs in one directory."""


class CheckpointFailed(RuntimeError):
    """A save or commit failed on some rank; raised on every rank together, so the launcher restarts
    them all and the run resumes from the last committed checkpoint."""


class CheckpointFolderHeld(CheckpointFailed):
    """Another live job owns the checkpoint folder (its lease): raised on every rank at start."""


class CheckpointManager:
    """The one owner of a run's checkpoints: when to save, what, the commit, restore and fallback
    (see the module docstring for the protocol).

    ``state`` is the run's state (train.py's ``TrainState``: model, optimizer, scheduler, step and data
    position): :meth:`save` writes its ``state_dict()``, :meth:`restore` loads the newest good
    checkpoint into one and hands it to its ``load_state_dict``. The training loop calls
    :meth:`vote` for the per-step agreement and then :meth:`step_done` once per step with the agreed
    outcome: it commits, saves when ``schedule`` says so (or at the last step, or at a stop when the
    save fits the time left). ``keep`` committed checkpoints are kept (pruned in the background). With
    ``async_save``, DCP writes in the background on its own gloo process group and training
    continues; the checkpoint is committed as soon as every rank reports its write done (the
    agreement counts them every step), at the latest by the next save or :meth:`close`.

    ``tiered`` with ``tiered_checkpointing`` set asks for the tiered storage (see the module
    docstring); every rank must reach the tiers, else the run uses the directory and logs why.

    ``on_commit(record)`` is called on every rank once a checkpoint is committed, with the same record
    everywhere (``step``, ``path`` of the committed folder, ``storage``): ray_train.py reports it to Ray.

    ``last_save_seconds`` is the training stall of the last save (staging, and any wait for the
    previous save); ``last_durable_seconds`` the time until it was committed. Each commit is logged
    as a ``checkpoint`` event with both: ``seconds`` (from the save's start until committed) and
    ``stall_seconds`` (how long training was blocked by it: all of a blocking save; an async
    save's staging).
    """

    def __init__(
        self,
        directory: Path,
        *,
        state: Stateful,
        schedule: SaveSchedule = SaveSchedule(),
        keep: int = 3,
        async_save: bool = False,
        log: Callable[[dict[str, Any]], None] | None = None,
        device: Any = "cpu",
        tiered: TieredCheckpointOptions | None = None,
        on_commit: Callable[[dict[str, Any]], None] | None = None,
        faults: FaultInjector | None = None,
        job: str | None = None,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep: {keep} must be >= 1")
        self.directory = directory
        self.state, self.schedule = state, schedule
        self._absent_keys: list[str] = []  # the keys_added_later the last loaded checkpoint lacked
        self.last_save_at = time.monotonic()
        self.keep = keep
        self.rank = dist.get_rank()
        self.log = log or (lambda record: None)
        self.on_commit = on_commit or (lambda record: None)
        self.faults = faults or FaultInjector(rank=dist.get_rank(), restart_count=0)
        self.device = device  # where the training group's collectives take their tensors
        self.async_group = dist.new_group(backend="gloo") if async_save else None
        self.pending: PendingSave | None = None
        self._stager: Any = None  # the async stager, made at the first GPU save (see _staging)
        self.last_save_seconds: float | None = None
        self.last_durable_seconds: float | None = None
        self._pruner: ThreadPoolExecutor | None = None  # rank 0's background pruning, one at a time
        self.lease = Lease(directory, job or job_identity()) if self.rank == 0 else None
        self._take_lease()

        def prepare() -> None:  # only once the lease is ours: never another job's save in progress
            _listable(directory)
            for prefix in (TMP_PREFIX, REPLACED_PREFIX, PRUNED_PREFIX):
                for stale in directory.glob(f"{prefix}*"):
                    shutil.rmtree(stale, ignore_errors=True)

        self._on_rank_0_together("prepare the checkpoint directory", prepare)
        self.save_index = self._newest_save_index()
        self.storage = self._choose_storage(tiered)

    def _take_lease(self) -> None:
        """Rank 0 takes the folder's lease (checkpoint_lease.py), the outcome agreed: every rank goes on,
        or every rank raises :class:`CheckpointFolderHeld` naming the holder (or :class:`CheckpointFailed`
        for a folder that cannot be used at all)."""
        how, error, held = None, None, False
        if self.lease is not None:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                _listable(self.directory)
                how = self.lease.acquire()
                self.lease.start_renewing()
            except FolderHeld as exc:
                error, held = str(exc), True
            except OSError as exc:
                error = describe(exc)
        outcome: list[Any] = [(error, held)]
        dist.broadcast_object_list(outcome, src=0)
        error, held = outcome[0]
        if error is None:
            if self.lease is not None:
                self.log({"event": "checkpoint_lease", "path": str(self.lease.path), "job": self.lease.job, "how": how})
            return
        if held:
            refusal = {"event": "checkpoint_folder_held", "path": str(self.directory), "reason": error}
            self.log(refusal)
            print(json.dumps({**refusal, "rank": self.rank}), file=sys.stderr, flush=True)
            raise CheckpointFolderHeld(error)
        raise self._failed(f"checkpoint folder {self.directory}", [f"rank 0: {error}"])

    def _choose_storage(self, tiered: TieredCheckpointOptions | None) -> CheckpointStorage:
        """The tiered storage when asked for and usable on every rank, else the directory (logged)."""
        directory_storage = DirectoryStorage(self.directory)
        if tiered is None or not tiered.tiered_checkpointing:
            self.log({"event": "checkpoint_storage", **directory_storage.describe()})
            return directory_storage
        world_size = dist.get_world_size()
        # Rank 0 names the namespace: ranks that mount the directory elsewhere still share one.
        shared: list[Any] = [tiered_storage.namespace_for(self.directory, world_size)]
        dist.broadcast_object_list(shared, src=0)
        reasons: list[Any] = [None] * world_size
        dist.all_gather_object(reasons, tiered_storage.unusable_reason(tiered, shared[0], self.rank, world_size))
        failed = [f"rank {rank}: {reason}" for rank, reason in enumerate(reasons) if reason]
        if failed:
            fallback = {
                "event": "checkpoint_storage",
                **directory_storage.describe(),
                "requested": tiered_storage.STORAGE_NAME,
                "reason": failed[0],
            }
            if self.rank == 0:
                print(json.dumps(fallback), file=sys.stderr, flush=True)
            self.log(fallback)
            return directory_storage
        storage = TieredStorage(shared[0], world_size, tiered.tiered_s3_uri, tiered.tiered_s3_every)
        self.log({"event": "checkpoint_storage", **storage.describe()})
        if self.keep > tiered_storage.MEMORY_TIER_STEPS_RETAINED:
            self.log(
                {
                    "event": "checkpoint_retention",
                    "keep": self.keep,
                    "memory_tier_keeps": tiered_storage.MEMORY_TIER_STEPS_RETAINED,
                    "reason": "the memory tier keeps its newest 3 steps (failed saves included): older "
                    "checkpoints load only from S3",
                }
            )
        return storage

    def _newest_save_index(self) -> int:
        """How many saves the run has committed so far (the S3 cadence counts on across restarts)."""

        def newest() -> int:
            committed = self.committed()
            marker = _read_marker(committed[0]) if committed else None
            return int(marker.get("save_index", 0)) if marker else 0

        return self._on_rank_0_shared("list the checkpoint folder", newest)

    # ---- the training loop's calls -------------------------------------------------------
    def restore(self, *, before_step: int | None = None) -> int | None:
        """Load the newest good checkpoint (older than ``before_step`` when given: a rollback) into the
        run's state (:meth:`load_latest`, then its ``load_state_dict``); its step, or None for a fresh start.
        A checkpoint of an earlier version that lacks some of the state's ``keys_added_later`` loads without
        them: ``load_state_dict`` gets what the checkpoint held (those keys absent), with a warning."""
        state = self.state.state_dict()
        step = self.load_latest(state, before_step=before_step)
        if step is not None:
            for key in self._absent_keys:
                _remove_flattened(state, key)
            self.state.load_state_dict(state)
        return step

    def vote(self, step: int, step_seconds: float) -> CheckpointVote:
        """This rank's part of the agreement after ``step``: whether its schedule says save (asked with the
        last measured step time) and whether its background write is done."""
        return CheckpointVote(save_due=self.due(step, step_seconds), write_done=self.write_done)

    def step_done(
        self,
        step: int,
        *,
        save: bool,
        ranks_done_writing: int,
        stopping: StopSignal | None = None,
        healthy: bool = True,
    ) -> None:
        """The one call per step, on every rank with the agreed outcome: commit the background save once
        all ranks have written it; then save when ``save`` (the schedule agreed, or the last step) or,
        when ``stopping`` before the last step, only if the slowest rank's last save fits the time left
        (else ``final_checkpoint_skipped``: the last committed checkpoint is the resume point).
        ``healthy``: the training-health guard's agreed verdict on the steps saved, kept in the commit
        record (retention never prunes the newest healthy checkpoint)."""
        self.commit_if_durable(ranks_done_writing)
        if stopping is not None:
            save = final_save_fits(self.last_durable_seconds, stopping, self.device)
            if not save:
                self.log({"event": "final_checkpoint_skipped", "step": step, "reason": "budget"})
        if save:
            self.save(step, crash_before_commit=self.faults.crashes_in_checkpoint(step), healthy=healthy)

    # ---- saving --------------------------------------------------------------------------
    def due(self, step: int, step_seconds: float) -> bool:
        """Whether the schedule says this rank should save after ``step``."""
        return self.schedule.due(step, time.monotonic() - self.last_save_at, step_seconds, self.last_save_seconds)

    def save(self, step: int, *, crash_before_commit: bool = False, healthy: bool = True) -> None:
        """Write a checkpoint of ``step``; blocking, or in the background with ``async_save``; ``healthy``
        goes into its commit record (see :meth:`step_done`).

        The memory tier failing on any rank sends this save, and the rest of the run's, to the
        directory; the directory failing raises :class:`CheckpointFailed` on every rank."""
        self.last_save_at = time.monotonic()
        state = self.state.state_dict()
        started = time.perf_counter()
        self.finalize()  # an earlier async save is committed (or fails) first: part of this stall
        waited_seconds = time.perf_counter() - started
        tmp_dir = self.directory / f"{TMP_PREFIX}{step:08d}"
        self._on_rank_0_together(f"create {tmp_dir.name}", lambda: tmp_dir.mkdir(parents=True, exist_ok=True))
        self.save_index += 1
        target, record, writer = self._write(step, state, tmp_dir)
        record = {**record, "healthy": healthy, "verified": False}
        if self.async_group is None:
            self.last_save_seconds = time.perf_counter() - started
            if crash_before_commit:
                _die_mid_checkpoint(tmp_dir, self.rank)
            self._commit(step, tmp_dir, started, record, writer)
            return
        future = cast(Future[Any], target)
        staging_seconds = time.perf_counter() - started  # the only stall
        self.last_save_seconds = staging_seconds
        self.pending = PendingSave(step, tmp_dir, future, started, record, writer, staging_seconds, waited_seconds)
        if crash_before_commit:
            future.result()
            _die_mid_checkpoint(tmp_dir, self.rank)

    def _write(self, step: int, state: dict[str, Any], tmp_dir: Path) -> tuple[Any, dict[str, Any], Any]:
        """Write ``state`` through the storage (an async save: start it), agreed on every rank: the
        background future (None for a blocking save), the commit record and the writer. A failed tiered
        write falls back to the directory for good; a failed directory write raises."""
        storage = self.storage
        failures, result, record, writer = self._attempt_write(storage, step, state, tmp_dir)
        if failures and storage.name == tiered_storage.STORAGE_NAME:
            self._fall_back_to_directory(f"save of step {step} failed: {failures[0]}")
            storage = self.storage
            failures, result, record, writer = self._attempt_write(storage, step, state, tmp_dir)
        if failures:
            raise self._failed(f"save of step {step} to {storage.name}", failures)
        return result, record, writer

    def _attempt_write(
        self, storage: CheckpointStorage, step: int, state: dict[str, Any], tmp_dir: Path
    ) -> tuple[list[str], Any, dict[str, Any], Any]:
        """Build the writer (agreed), then save or start the async save (agreed): the failures, the
        background future (None for a blocking save), the commit record and the writer."""
        built, error = _attempt(lambda: storage.target(step, self.save_index, tmp_dir))
        failures = self._agree(error)
        if failures or built is None:
            return failures, None, {}, None
        target, record = built
        self.faults.arm_write(target["storage_writer"], step, tiered=storage.name == tiered_storage.STORAGE_NAME)
        record = {**record, "save_index": self.save_index}
        if self.async_group is None:
            _, error = _attempt(lambda: dcp.save(state, **target))
            error = _with_cause(error, target["storage_writer"])
            result: Any = None
        else:
            response, error = _attempt(
                lambda: dcp.async_save(state, process_group=self.async_group, **target, **self._staging())
            )
            # A Future, or (with an async stager) an AsyncSaveResponse whose upload completes later.
            result = getattr(response, "upload_completion", response)
        return self._agree(error), result, record, target["storage_writer"]

    def _fall_back_to_directory(self, reason: str) -> None:
        """The tiers failed on some rank: every rank uses the directory from now on (logged)."""
        self.storage = DirectoryStorage(self.directory)
        fallback = {
            "event": "checkpoint_storage",
            **self.storage.describe(),
            "requested": tiered_storage.STORAGE_NAME,
            "reason": reason,
        }
        if self.rank == 0:
            print(json.dumps(fallback), file=sys.stderr, flush=True)
        self.log(fallback)

    def _staging(self) -> dict[str, Any]:
        """On GPU, stage the state into pinned host memory (a fast device-to-host copy; training
        resumes once the copy is done, the write to storage continues in the background). One stager
        for the run, as torchtitan keeps one: its pinned buffers are allocated at the first save and
        reused by every later one (a new stager per save pins the whole state again each time: only
        where torch's stager is single use, see STAGER_SINGLE_USE). Torch without ``DefaultStager`` (2.8,
        the DLC's) stages through DCP's own copy."""
        if not (str(self.device).startswith("cuda") and hasattr(staging, "DefaultStager")):
            return {}
        if self._stager is None or STAGER_SINGLE_USE:
            options = staging.StagingOptions(
                use_pinned_memory=True, use_shared_memory=False, use_async_staging=False, use_non_blocking_copy=True
            )
            self._stager = staging.DefaultStager(options)
        return {"async_stager": self._stager}

    @property
    def write_done(self) -> bool:
        """This rank has no background write in flight (its vote in the per-step agreement)."""
        return self.pending is None or self.pending.future.done()

    def commit_if_durable(self, ranks_done: int) -> None:
        """Commit the background save as soon as all ``ranks_done`` = world size have written it."""
        if self.pending is not None and ranks_done >= dist.get_world_size():
            self.finalize()

    def finalize(self) -> None:
        """Wait for a background save on every rank, agree on its outcome, then commit it. A failed
        tiered write is dropped (logged; the run's next saves go to the directory); a failed directory
        write raises :class:`CheckpointFailed` on every rank."""
        if self.pending is None:
            return
        pending, self.pending = self.pending, None
        _, error = _attempt(pending.future.result)
        failures = self._agree(_with_cause(error, pending.writer))
        if failures and pending.record.get("storage") == tiered_storage.STORAGE_NAME:
            reason = f"background save of step {pending.step} failed: {failures[0]}"
            self._fall_back_to_directory(reason)
            self.log({"event": "checkpoint_failed", "step": pending.step, "reason": reason, "committed": False})
            self._on_rank_0_together(f"remove {pending.tmp_dir.name}", lambda: shutil.rmtree(pending.tmp_dir))
            return
        if failures:
            raise self._failed(f"background save of step {pending.step}", failures)
        self._commit(
            pending.step,
            pending.tmp_dir,
            pending.started,
            pending.record,
            pending.writer,
            pending.stall_seconds,
            pending.waited_seconds,
        )

    def close(self) -> None:
        """Finish the background save (committed, or :class:`CheckpointFailed`), wait for the pruning, free
        the stager, then give the folder's lease back (the next job may start at once)."""
        self.finalize()
        if self._pruner is not None:
            self._pruner.shutdown(wait=True)
            self._pruner = None
        if self._stager is not None:
            self._stager.close()
            self._stager = None
        if self.lease is not None:
            self.lease.release()

    def _commit(
        self,
        step: int,
        tmp_dir: Path,
        started: float,
        record: dict[str, Any],
        writer: Any,
        stall_seconds: float | None = None,
        waited_seconds: float = 0.0,
    ) -> None:
        """Commit the written save; ``stall_seconds`` is an async save's (None: a blocking save, whose
        stall lasts until committed), ``waited_seconds`` the part of it spent waiting for the previous
        save's write: logged when saves come faster than one is written (space them further apart).
        Atomic at every point: the committed folder appears by one rename; one it replaces (the same
        step saved again after a fallback) is moved aside first, so a crash leaves either it or the new
        one, never a half of either. Every rank's digests of what it wrote go into the record; rank 0
        commits only while the folder's lease is still this job's."""
        # Every rank's shards are written (on disk, or in the tiers the record names): gathering their
        # digests is the barrier.
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, getattr(writer, "digests", {}))
        digests = {name: digest for rank_digests in gathered for name, digest in sorted(rank_digests.items())}
        record = {**record, "digest_algorithm": checkpoint_digests.ALGORITHM, "digests": digests}
        self.last_durable_seconds = time.perf_counter() - started
        final_dir = self.directory / step_dir_name(step)

        def commit() -> None:
            if self.lease is not None:
                self.lease.ensure_held()
            marker = {"step": step, "world_size": dist.get_world_size(), "committed_at": time.time(), **record}
            _write_durably(tmp_dir / COMMIT_MARKER, json.dumps(marker))
            replaced = self.directory / f"{REPLACED_PREFIX}{step:08d}"
            if final_dir.exists():
                os.replace(final_dir, replaced)
            os.replace(tmp_dir, final_dir)
            _write_durably(self.directory / f".{LATEST}.tmp", final_dir.name)
            os.replace(self.directory / f".{LATEST}.tmp", self.directory / LATEST)
            shutil.rmtree(replaced, ignore_errors=True)

        self._on_rank_0_together(f"commit step {step}", commit)
        if self.rank == 0:
            seconds = time.perf_counter() - started
            self.log(
                {
                    "event": "checkpoint",
                    "step": step,
                    "path": str(final_dir),
                    "seconds": round(seconds, 4),
                    "stall_seconds": round(seconds if stall_seconds is None else stall_seconds, 4),
                    **({"waited_for_previous_seconds": round(waited_seconds, 4)} if waited_seconds >= 0.01 else {}),
                    **{key: record[key] for key in ("storage", "tiers") if key in record},
                }
            )
        self.on_commit({"step": step, "path": str(final_dir), **{k: v for k, v in record.items() if k != "digests"}})
        if self.rank == 0:  # after the agreement, in the background: no rank waits for it
            self._in_background(self._prune)

    # ---- agreement -----------------------------------------------------------------------
    def _agree(self, error: str | None) -> list[str]:
        """Every rank's outcome of a step that may fail on some ranks only, gathered before anyone
        enters the next collective: ``rank R: error`` for each rank that failed (ranks that saw the same
        error, as DCP's collectives report one rank's failure to all, in one entry: ``ranks 0, 1: error``),
        the same list on every rank (empty: all succeeded)."""
        outcomes: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(outcomes, error)
        seen: dict[str, list[int]] = {}
        for rank, outcome in enumerate(outcomes):
            if outcome:
                seen.setdefault(outcome, []).append(rank)
        return [f"{_ranks(ranks)}: {outcome}" for outcome, ranks in seen.items()]

    def _on_rank_0_together(self, what: str, action: Callable[[], object]) -> None:
        """``action`` on rank 0 (the file system work of the protocol), its outcome agreed: every rank
        returns, or every rank raises :class:`CheckpointFailed`."""
        _, error = _attempt(action) if self.rank == 0 else (None, None)
        failures = self._agree(error)
        if failures:
            raise self._failed(what, failures)

    def _failed(self, what: str, failures: list[str]) -> CheckpointFailed:
        """Log the failure (rank 0) and say it on every rank's stderr; the error to raise everywhere."""
        message = f"{what} failed: {'; '.join(failures)}"
        # The first rank's own cause (its write error), before what DCP relayed to the others.
        outcomes = [failure.split(": ", 1)[-1] for failure in failures]
        cause = next(
            (o for o in outcomes if not _RELAYED.match(o)), _RELAYED.sub("", outcomes[0]) if outcomes else what
        )
        self.log({"event": "checkpoint_failed", "reason": message, "cause": cause, "committed": False})
        failed = {"event": "checkpoint_failed", "rank": self.rank, "reason": message, "cause": cause}
        print(json.dumps(failed), file=sys.stderr, flush=True)
        return CheckpointFailed(message)

    # ---- pruning (rank 0, in the background) ----------------------------------------------
    def _in_background(self, action: Callable[[], None]) -> None:
        """Run ``action`` on rank 0's pruning thread, after the ones before it; a failure is logged."""

        def logged() -> None:
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - pruning is never fatal
                self.log({"event": "checkpoint_prune_incomplete", "reason": f"{type(exc).__name__}: {exc}"[:500]})

        if self._pruner is None:
            self._pruner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-prune")
        self._pruner.submit(logged)

    def _prune(self) -> None:
        """The retention rule, the one place that deletes committed checkpoints: keep the newest ``keep``;
        the newest healthy one (its steps passed the training-health guard) and the newest verified one
        (its digests matched on a load), whatever ``keep`` says, so that the last good state is never
        deleted; and, when none of the kept ones is durable, the newest durable one. Records from before
        the guard count as healthy. A pruned folder is renamed aside before it is deleted (a half-deleted
        checkpoint never looks committed); a pruned tiered checkpoint's data goes too (its memory-tier step
        and S3 objects), so the tiers hold what ``keep`` says; what cannot be deleted is logged, never fatal."""
        committed = self.committed()
        markers = {path: _read_marker(path) for path in committed}
        kept = committed[: self.keep]
        for good in (_healthy, _verified):
            kept += [path for path in committed if good(markers[path])][:1]
        if not any(_durable(markers[path]) for path in kept):
            kept += [path for path in committed if _durable(markers[path])][:1]
        for old in committed:
            if old in kept:
                continue
            marker = _read_marker(old)
            aside = self.directory / f"{PRUNED_PREFIX}{old.name.removeprefix(PREFIX)}"
            try:
                os.replace(old, aside)
            except FileNotFoundError:  # gone meanwhile
                continue
            shutil.rmtree(aside, ignore_errors=True)
            if marker and marker.get("storage") == tiered_storage.STORAGE_NAME:
                problems = tiered_storage.delete(marker)
                if problems:
                    self.log({"event": "checkpoint_prune_incomplete", "path": str(old), "reason": "; ".join(problems)})

    # ---- loading -------------------------------------------------------------------------
    def committed(self) -> list[Path]:
        """Committed checkpoints, newest first."""
        if not self.directory.exists():
            return []
        names = os.listdir(self.directory)  # an unlistable folder raises: it is not an empty one
        found = [
            self.directory / n for n in names if n.startswith(PREFIX) and (self.directory / n / COMMIT_MARKER).is_file()
        ]
        return sorted(found, key=lambda p: p.name, reverse=True)

    def load_latest(self, state: dict[str, Any], *, before_step: int | None = None) -> int | None:
        """Load the newest checkpoint that every rank reads without error into ``state``; with
        ``before_step``, the newest of those older than that step (a rollback).

        Returns its step, or None when there is none (a fresh start; none older, for a rollback). Each
        checkpoint is read from the sources its commit record names, in order (the directory; or the
        memory tier, then S3); for each, every rank builds its reader and the outcome is agreed, then DCP loads and the
        outcome is agreed again: a source or checkpoint that fails on any rank is skipped by all,
        with a warning, and the next is tried; when none loads, :class:`NoLoadableCheckpoint`. A
        checkpoint saved by another world size is resharded by DCP and logged as
        ``world_size_changed``.
        """
        candidates = self._on_rank_0_shared(
            "list the checkpoint folder",
            lambda: [
                (p.name, _read_marker(p))
                for p in self.committed()
                if before_step is None or _step_of(p.name) < before_step
            ],
        )  # every rank tries the same checkpoints and sources
        skipped = []
        for index, (name, marker) in enumerate(candidates):
            path = self.directory / name
            reasons = [] if marker else [f"{COMMIT_MARKER} is unreadable"]
            if marker and "digests" not in marker:
                self._warn({"event": "checkpoint_unverified", "path": str(path), "reason": "written before digests"})
            for source, load_args in _load_sources(path, marker) if marker else []:
                failures = self._load_from(state, source, load_args, newest=index == 0)
                if not failures and marker is not None:
                    if self._absent_keys:
                        older = {"event": "checkpoint_older_format", "path": str(path), "absent": self._absent_keys}
                        self._warn({**older, "reason": "written by an earlier version: loaded without them"})
                    self._loaded(path, marker, source)
                    return int(marker["step"])
                reasons.append(f"{source}: {'; '.join(failures)}")
            skipped.append(f"{name}: {'; '.join(reasons)}")
            self._warn({"event": "checkpoint_skipped", "path": str(path), "reason": "; ".join(reasons)})
        if candidates:
            raise NoLoadableCheckpoint(
                f"{self.directory}: none of the committed checkpoints loads ({' | '.join(skipped)})"[:2000]
                + "; refusing to start over from step 0 in the same directory: fix the cause named, or give a "
                "new run another --checkpoint-dir"
            )
        return None

    def _loaded(self, path: Path, marker: dict[str, Any], source: str) -> None:
        """Log the resume; on rank 0, record in the checkpoint's record that its digests were verified
        (retention keeps the newest verified checkpoint; a failure to record it is logged, never fatal)."""
        step, saved_world = marker["step"], marker["world_size"]
        self.log({"event": "resume", "step": step, "path": str(path), "source": source})
        if saved_world != dist.get_world_size():
            change = {"event": "world_size_changed", "saved": saved_world, "now": dist.get_world_size()}
            self.log({**change, "step": step})
        if self.rank == 0 and marker.get("digests") and not marker.get("verified"):
            try:
                _write_durably(path / f".{COMMIT_MARKER}.tmp", json.dumps({**marker, "verified": True}))
                os.replace(path / f".{COMMIT_MARKER}.tmp", path / COMMIT_MARKER)
            except OSError as exc:
                self.log({"event": "checkpoint_verified_unrecorded", "path": str(path), "reason": describe(exc)})

    def _warn(self, warning: dict[str, Any]) -> None:
        """A warning: a JSON line on rank 0's stderr and in the log."""
        if self.rank == 0:
            print(json.dumps(warning), file=sys.stderr, flush=True)
        self.log(warning)

    def _on_rank_0_shared(self, what: str, action: Callable[[], T]) -> T:
        """``action()`` on rank 0, its result given to every rank; its failure raises
        :class:`CheckpointFailed` on every rank."""
        result, error = _attempt(action) if self.rank == 0 else (None, None)
        shared: list[Any] = [(result, error)]
        dist.broadcast_object_list(shared, src=0)
        result, error = shared[0]
        if error:
            raise self._failed(what, [f"rank 0: {error}"])
        return cast(T, result)

    def _load_from(
        self, state: dict[str, Any], source: str, load_args: Callable[[], dict[str, Any]], *, newest: bool
    ) -> list[str]:
        """One source of one checkpoint: build the reader (agreed), then load (agreed); the failures."""

        def build() -> dict[str, Any]:
            if source == tiered_storage.MEMORY_TIER:
                self.faults.memory_tier_read()
            args = load_args()
            self.faults.arm_read(args["storage_reader"], newest=newest)
            return args

        args, error = _attempt(build)
        failures = self._agree(error)
        if failures or args is None:
            return failures
        planner = OlderFormatPlanner(getattr(self.state, "keys_added_later", ()))
        _, error = _attempt(lambda: dcp.load(state, planner=planner, **args))
        self._absent_keys = planner.absent
        mismatch = getattr(args["storage_reader"], "mismatch", None)  # a tiered shard's: the library wraps it
        return self._agree(describe(mismatch) if error and mismatch else error)


class OlderFormatPlanner(DefaultLoadPlanner):
    """DCP's load planner, except that a checkpoint may lack the keys ``added_later`` (flattened names, e.g.
    ``run.config``) that a later version added to the state: they are left out of the load and listed in
    ``absent``. Any other key the checkpoint lacks still fails the load, as with DCP's own planner."""

    def __init__(self, added_later: tuple[str, ...] | list[str]) -> None:
        super().__init__()
        self.added_later = frozenset(added_later)
        self.absent: list[str] = []

    def create_local_plan(self) -> LoadPlan:
        assert self.metadata is not None
        held = self.metadata.state_dict_metadata
        self.absent = sorted(key for key in self.state_dict if key in self.added_later and key not in held)
        for key in self.absent:
            del self.state_dict[key]
        return super().create_local_plan()


def _remove_flattened(state: dict[str, Any], key: str) -> None:
    """Remove ``a.b.c`` from a nested dict (DCP's flattened name of ``state["a"]["b"]["c"]``)."""
    *parents, leaf = key.split(".")
    for part in parents:
        state = state[part]
    state.pop(leaf, None)


class NoCheckpoints:
    """A run without ``--checkpoint-dir``: nothing to resume, nothing saved; its vote never holds up the
    agreement."""

    last_durable_seconds: float | None = None

    def vote(self, step: int, step_seconds: float) -> CheckpointVote:
        return CheckpointVote(save_due=False, write_done=True)

    def restore(self, *, before_step: int | None = None) -> int | None:
        return None

    def step_done(
        self,
        step: int,
        *,
        save: bool,
        ranks_done_writing: int,
        stopping: StopSignal | None = None,
        healthy: bool = True,
    ) -> None:
        return None

    def committed(self) -> list[Path]:
        return []

    def close(self) -> None:
        return None


def _attempt(action: Callable[[], T]) -> tuple[T | None, str | None]:
    """``action()`` and None, or None and what went wrong (DCP's CheckpointException, a BaseException,
    included; an interrupt or exit is not caught)."""
    try:
        return action(), None
    except (Exception, CheckpointException) as exc:
        return None, describe(exc)


def describe(exc: BaseException) -> str:
    """One line that names the real cause: DCP's ``CheckpointException`` unwrapped to each failing rank's
    own exception, an exception followed to its root cause, an ``OSError`` with its errno name and
    strerror (``OSError: [ENOSPC] No space left on device: '/fsx/ckpt/.tmp-step-00000006/__1_0.distcp'``)."""
    if isinstance(exc, CheckpointException):
        causes: dict[str, list[int]] = {}
        for rank, failure in sorted(exc.failures.items()):
            inner = failure[0] if isinstance(failure, tuple) else failure
            causes.setdefault(describe(inner), []).append(rank)
        return "; ".join(f"{_ranks(ranks)}: {cause}" for cause, ranks in causes.items())[:1000]
    root = exc
    while root.__cause__ is not None or (root.__context__ is not None and not root.__suppress_context__):
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    if isinstance(root, OSError) and root.errno is not None:
        name = errno.errorcode.get(root.errno, str(root.errno))
        where = f": {root.filename!r}" if root.filename else ""
        line = f"{type(root).__name__}: [{name}] {root.strerror}{where}"
    else:
        line = f"{type(root).__name__}: {root}".splitlines()[0]
    if root is not exc:
        line += f" (in {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    return line[:1000]


def _with_cause(error: str | None, writer: Any) -> str | None:
    """A failed save's error, or the file system's own error on this rank when it had one (torch.save
    reports a failed write only as ``unexpected pos``)."""
    cause = getattr(writer, "first_error", None)
    return describe(cause) if error and cause is not None else error


_RELAYED = re.compile(r"^(ranks? [\d, ]+: )+")  # another rank's error, as DCP's collectives relay it


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def _listable(directory: Path) -> None:
    """Raise (PermissionError, NotADirectoryError...) unless ``directory`` can be listed, read and written:
    a folder that cannot be listed must never count as empty."""
    os.listdir(directory)
    if not os.access(directory, os.R_OK | os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "the checkpoint folder is not readable and writable", str(directory))


def _step_of(name: str) -> int:
    """The step of a committed folder's name (``step-00000040`` is 40)."""
    return int(name.removeprefix(PREFIX))


def _read_marker(path: Path) -> dict[str, Any] | None:
    """A committed checkpoint's record, or None when it cannot be read."""
    try:
        marker = json.loads((path / COMMIT_MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def _load_sources(path: Path, marker: dict[str, Any]) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    """Where a committed checkpoint is read from, in order, as DCP ``load`` arguments. Records
    without ``storage`` predate the tiered storage: their shards are in the step folder."""
    if marker.get("storage") == tiered_storage.STORAGE_NAME:
        return tiered_storage.load_sources(marker)

    def verified_reader() -> dict[str, Any]:
        """This rank's share of the files checked against the record's digests first (none recorded: a
        checkpoint from before digests, loaded with a warning)."""
        step, rank, world = int(marker["step"]), dist.get_rank(), dist.get_world_size()
        checkpoint_digests.verify_files(path, marker.get("digests") or {}, step, rank, world)
        return {"storage_reader": FileSystemReader(path)}

    return [(DIRECTORY_STORAGE, verified_reader)]


def _healthy(marker: dict[str, Any] | None) -> bool:
    return marker is not None and bool(marker.get("healthy", True))


def _verified(marker: dict[str, Any] | None) -> bool:
    return marker is not None and bool(marker.get("verified"))


def _durable(marker: dict[str, Any] | None) -> bool:
    """Whether a checkpoint survives the loss of the cluster's memory (an unreadable one counts not)."""
    if marker is None:
        return False
    return marker.get("storage") != tiered_storage.STORAGE_NAME or tiered_storage.is_durable(marker)


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
