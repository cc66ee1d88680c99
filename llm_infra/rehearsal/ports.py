"""Loopback ports reserved across processes, as envtest's port cache does (issue 29).

Picking a port by binding port 0, closing the socket and returning the number leaves the port free for
anyone until the server meant to use it binds it: two pytest-xdist workers, or two rehearsals, could be
handed the same one. :func:`reserve` closes that gap in two ways:

- **a lock per port**: it takes an exclusive ``flock`` on ``<dir>/<port>.lock`` (``$LLM_INFRA_PORTS_DIR``,
  else ``llm-infra-ports-<uid>`` in the system's temporary folder) and keeps it until
  :meth:`Reservation.release`; a port whose lock another process holds is skipped. The kernel drops the
  locks of a process that ends, even by SIGKILL, so no reservation outlives its process.
- **a held socket**: the reservation keeps a socket bound to the port, with ``SO_REUSEADDR`` and not
  listening. The kernel then gives that port to no other ``bind`` without ``SO_REUSEADDR`` (the usual
  ``bind(0)`` of any program) and to no outgoing connection, while the server the port is for can still
  bind and listen on it: Go's ``net.Listen`` (etcd, kube-apiserver, the controllers, KWOK, the operators),
  torch's ``TCPStore`` (torchrun's rendezvous) and Python's ``socketserver`` set ``SO_REUSEADDR`` (checked
  here for each). Pass ``hold=False`` for a server that binds without it; the lock still keeps every
  other reserver off, and what remains (a program outside this scheme taking the port in between) is
  why :class:`~llm_infra.rehearsal.control_plane.ControlPlane` retries a component that failed to bind.

Only the standard library is used; Linux and macOS (``fcntl``).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import socket
import tempfile
import threading
from pathlib import Path
from types import TracebackType

LOOPBACK = "127.0.0.1"
DIR_VARIABLE = "LLM_INFRA_PORTS_DIR"
ATTEMPTS = 200  # ports tried before giving up (each one another reserver holds costs one)


class NoFreePort(OSError):
    """No port could be reserved: every one the OS offered was reserved by another process."""


def ports_dir() -> Path:
    """Where the lock files live: ``$LLM_INFRA_PORTS_DIR``, else ``llm-infra-ports-<uid>`` in the temp dir."""
    configured = os.environ.get(DIR_VARIABLE)
    directory = Path(configured) if configured else Path(tempfile.gettempdir()) / f"llm-infra-ports-{os.getuid()}"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    return directory


def _lock(path: Path) -> int | None:
    """An fd holding an exclusive flock on ``path`` (created if absent), or None when another process holds
    it. The lock is on the inode the path names now (a lock file is removed on release; one opened before
    that is tried again)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())  # who holds it, for a person looking
            return fd
        os.close(fd)  # released and removed by its holder in between: the path is a new file now


class Reservation:
    """A reserved port: ``port``; the lock (and, while :attr:`held`, the bound socket) until
    :meth:`release`. A context manager that releases on exit."""

    def __init__(self, host: str, port: int, lock_fd: int, lock_path: Path, hold: socket.socket | None) -> None:
        self.host = host
        self.port = port
        self._lock_fd: int | None = lock_fd
        self._lock_path = lock_path
        self._hold = hold
        self._mutex = threading.Lock()

    def __repr__(self) -> str:
        state = "held" if self.held else "reserved" if self.reserved else "released"
        return f"<Reservation {self.host}:{self.port} {state}>"

    @property
    def held(self) -> bool:
        """Whether the socket that keeps programs outside this scheme off the port is still bound."""
        return self._hold is not None

    @property
    def reserved(self) -> bool:
        return self._lock_fd is not None

    def unhold(self) -> None:
        """Close the held socket (the port stays reserved against other reservers): before a server that
        binds without ``SO_REUSEADDR`` starts, or once the server has bound the port."""
        with self._mutex:
            if self._hold is not None:
                self._hold.close()
                self._hold = None

    def release(self) -> None:
        """Give the port back: the held socket closed, the lock file removed and unlocked. Idempotent."""
        self.unhold()
        with self._mutex:
            if self._lock_fd is None:
                return
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._lock_path)  # while locked: whoever opened it before tries again (``_lock``)
            os.close(self._lock_fd)  # the flock goes with the last fd
            self._lock_fd = None
            _live.discard(self)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


_live: set[Reservation] = set()


@atexit.register
def _release_all() -> None:
    """Tidy the lock files at exit (the kernel drops the locks anyway)."""
    for reservation in list(_live):
        reservation.release()


def reserve(host: str = LOOPBACK, *, hold: bool = True) -> Reservation:
    """Reserve a TCP port on ``host`` that the OS reports free and no other process has reserved.

    ``hold``: keep a socket bound to it (``SO_REUSEADDR``, not listening) until :meth:`Reservation.unhold`
    or :meth:`Reservation.release`, so that no program outside this scheme takes it meanwhile; the server
    it is for must then bind with ``SO_REUSEADDR`` (Go, torch and Python's servers do)."""
    directory = ports_dir()
    for _ in range(ATTEMPTS):
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, 0))
            port = int(probe.getsockname()[1])
            path = directory / f"{port}.lock"
            fd = _lock(path)
        except BaseException:
            probe.close()
            raise
        if fd is None:  # another process's reservation (its server may not have bound it yet)
            probe.close()
            continue
        if not hold:
            probe.close()
        reservation = Reservation(host, port, fd, path, probe if hold else None)
        _live.add(reservation)
        return reservation
    raise NoFreePort(f"no free port on {host} after {ATTEMPTS} tries: every one offered was reserved ({directory})")


def reserve_port(host: str = LOOPBACK, *, hold: bool = False) -> int:
    """A reserved port, as a number: reserved (and, with ``hold``, held) until this process ends or
    :func:`release_port`. ``hold=False`` suits any server (one that binds without ``SO_REUSEADDR`` too) and an
    address nothing should answer; ``hold=True`` also keeps programs outside this scheme off it, for a server
    that binds with ``SO_REUSEADDR`` (torchrun's rendezvous, a Go server) started at some later point."""
    return reserve(host, hold=hold).port


def release_port(port: int) -> None:
    """Give back a port :func:`reserve_port` (or :func:`reserve`) reserved in this process; nothing if none."""
    for reservation in list(_live):
        if reservation.port == port:
            reservation.release()
