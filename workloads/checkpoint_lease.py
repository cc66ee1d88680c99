"""One job per checkpoint folder: a lease file that names the job that owns the folder.

``<checkpoint_dir>/LEASE`` holds ``{"job", "host", "pid", "token", "renewed_at"}``. Rank 0 takes it
when the run starts, before anything in the folder is touched, and renews it every
:data:`RENEW_SECONDS` from a background thread. A starting run:

- finds no lease: creates it by **exclusive create** (the record is written to a private file, then
  hard-linked to ``LEASE``, which fails if it exists: atomic on a local disk, NFS and Lustre, none of
  which share ``flock`` locks without a mount option);
- finds its own job's lease (the same job identity: the next incarnation of a job that was
  restarted): takes it over at once (replaced by rename);
- finds a lease not renewed for :data:`TAKEOVER_SECONDS` (a crashed job's): takes it over (the stale
  one renamed aside first, so that of two jobs taking it over at once only one succeeds);
- else refuses with :class:`FolderHeld`, naming the holder and how to proceed.

A renewal that finds the lease no longer its own (another job took it over after this one stalled
past the takeover time) marks it lost: the next commit refuses (:meth:`Lease.ensure_held`). The ages
are compared on wall clocks of different hosts (EC2's are NTP-synchronised by the Time Sync
Service): a skew well below the takeover time is harmless.

The job's identity (:func:`job_identity`): ``LLM_INFRA_JOB`` (set by the manifests we render:
``<namespace>/<job name>``, from the pod's namespace and the operator's job-name label through the
downward API; a pod's uid changes at each restart), else Ray Train's run name, else torchrun's
rendezvous run id ``TORCHELASTIC_RUN_ID`` (a fresh ``torchrun --standalone`` is a new job, its own
restarts the same one; ``none``, what torchrun without ``--rdzv-id`` and a PyTorchJob without
``rdzvId`` get, is not an identity), else the torchrun agent that started this worker (its host and
pid: the agent's own restarts of its workers are the same job; rank 0 moving to another node's agent
is not recognised), else this host and process.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

LEASE = "LEASE"
RENEW_SECONDS = 10.0
TAKEOVER_SECONDS = 60.0
JOB_ENV = "LLM_INFRA_JOB"


class FolderHeld(RuntimeError):
    """Another live job owns the checkpoint folder."""


class LeaseLost(RuntimeError):
    """This job's lease was taken over by another job: it must not commit into the folder."""


def job_identity(environ: dict[str, str] | None = None) -> str:
    """Who this run is, as the launcher says it (see the module docstring for the order)."""
    env = os.environ if environ is None else environ
    if env.get(JOB_ENV):
        return f"job {env[JOB_ENV]}"
    ray_name = _ray_run_name()
    if ray_name:
        return f"ray run {ray_name}"
    run_id = env.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return f"torchrun run {run_id}"
    if "TORCHELASTIC_RESTART_COUNT" in env:  # torchrun without a run id: its agent restarts its workers
        return f"torchrun agent {socket.gethostname()}:{os.getppid()}"
    return f"process {socket.gethostname()}:{os.getpid()}"


def _ray_run_name() -> str | None:
    """Ray Train's run name when this process is a Ray Train worker (Ray imported by ray_train.py)."""
    import sys

    if "ray.train" not in sys.modules:
        return None
    try:
        return str(sys.modules["ray.train"].get_context().get_experiment_name()) or None
    except Exception:  # noqa: BLE001 - not inside a Ray Train worker
        return None


class Lease:
    """This job's lease on ``directory`` (rank 0 only): :meth:`acquire`, renewed in the background,
    :meth:`ensure_held` before each commit, :meth:`release` at the end."""

    def __init__(self, directory: Path, job: str, *, renew_seconds: float = RENEW_SECONDS) -> None:
        self.path = directory / LEASE
        self.job, self.renew_seconds = job, renew_seconds
        self.token = uuid.uuid4().hex
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _record(self) -> dict[str, Any]:
        host, pid = socket.gethostname(), os.getpid()
        return {"job": self.job, "host": host, "pid": pid, "token": self.token, "renewed_at": time.time()}

    def _private_copy(self) -> Path:
        private = self.path.with_name(f".lease-{self.token}.tmp")
        with open(private, "w") as handle:
            handle.write(json.dumps(self._record()))
            handle.flush()
            os.fsync(handle.fileno())
        return private

    def _create(self) -> bool:
        """Create the lease as ours if there is none (an exclusive hard link of a written copy); False if one is."""
        private = self._private_copy()
        try:
            os.link(private, self.path)
        except FileExistsError:
            return False
        finally:
            private.unlink(missing_ok=True)
        return True

    def read(self) -> dict[str, Any] | None:
        """The lease as it is now, None when there is none; an unreadable one counts as its holder's."""
        try:
            record = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except ValueError:  # being written by a foreign tool, or torn: treat as held, just renewed
            return {"job": "unknown (unreadable LEASE)", "renewed_at": time.time()}
        return record if isinstance(record, dict) else {"job": "unknown", "renewed_at": time.time()}

    def acquire(self) -> str:
        """Take the lease (see the module docstring); how: ``created``, ``taken over from <job>``
        (its own earlier incarnation, or a stale lease). :class:`FolderHeld` when a live job holds it."""
        for _ in range(3):  # a lease that changes under us (another job racing) is looked at again
            holder = self.read()
            if holder is None:
                if not self._create():
                    continue
                return "created"
            age = time.time() - float(holder.get("renewed_at", 0))
            if holder.get("job") != self.job and age < TAKEOVER_SECONDS:
                raise FolderHeld(self._refusal(holder, age))
            if holder.get("job") != self.job:  # stale: rename it aside; of two racing jobs one wins
                aside = self.path.with_name(f".lease-stale-{self.token}.tmp")
                try:
                    os.rename(self.path, aside)
                except FileNotFoundError:
                    continue
                if json.loads(aside.read_text() or "{}") != holder:  # renewed meanwhile: not stale after all
                    with contextlib.suppress(FileExistsError):
                        os.link(aside, self.path)
                    aside.unlink()
                    continue
                aside.unlink()
                if not self._create():
                    continue
            else:
                os.replace(self._private_copy(), self.path)
            return f"taken over from {_who(holder)} (renewed {age:.0f} s ago)"
        raise FolderHeld(f"{self.path}: the lease kept changing while this job tried to take it")

    def _refusal(self, holder: dict[str, Any], age: float) -> str:
        return (
            f"{self.path.parent} is in use by {_who(holder)} (lease renewed {age:.0f} s ago; this is {self.job}). "
            f"Two jobs in one checkpoint folder overwrite each other's checkpoints. To proceed: wait for that job "
            f"to end, or stop it, or give this job another --checkpoint-dir; a crashed holder's lease can be taken "
            f"over {TAKEOVER_SECONDS:.0f} s after its last renewal (or delete {self.path} once that job is "
            "certainly gone)."
        )

    def start_renewing(self) -> None:
        self._thread = threading.Thread(target=self._renew_loop, name="checkpoint-lease", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_seconds):
            try:
                self.renew()
            except OSError:  # a transient file-system error: the next renewal tries again
                continue

    def renew(self) -> None:
        """Write a fresh ``renewed_at``, unless the lease is no longer ours (then it is :attr:`lost`)."""
        holder = self.read()
        if holder is None or holder.get("token") != self.token:
            self.lost = f"{self.path}: this job's lease was taken over by {_who(holder) if holder else 'nobody'}"
            self._stop.set()
            return
        os.replace(self._private_copy(), self.path)

    def ensure_held(self) -> None:
        """:class:`LeaseLost` when another job has taken the folder over."""
        if self.lost is None:
            holder = self.read()
            if holder is None or holder.get("token") != self.token:
                self.lost = f"{self.path}: this job's lease was taken over by {_who(holder) if holder else 'nobody'}"
        if self.lost is not None:
            raise LeaseLost(self.lost + "; refusing to commit into a folder another job owns")

    def release(self) -> None:
        """Stop renewing and remove the lease if it is still ours (the next job may start at once)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        holder = self.read()
        if holder is not None and holder.get("token") == self.token:
            self.path.unlink(missing_ok=True)


def _who(holder: dict[str, Any]) -> str:
    where = f" on {holder['host']} (pid {holder['pid']})" if "host" in holder and "pid" in holder else ""
    return f"{holder.get('job', 'an unknown job')}{where}"
