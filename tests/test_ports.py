"""Loopback ports reserved across processes (``llm_infra.rehearsal.ports``, issue 29): two processes reserving
at once never get the same port; a held port is refused to any other program's bind but open to the server
it is for; a reservation goes with its process, even one SIGKILLed."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from llm_infra.rehearsal import ports

REPO_ROOT = Path(__file__).resolve().parents[1]
RESERVER = textwrap.dedent(
    """
    import json, os, sys, time
    from llm_infra.rehearsal import ports
    count, go = int(sys.argv[1]), sys.argv[2]
    while not os.path.exists(go):  # every process starts reserving at the same moment
        time.sleep(0.001)
    held = [ports.reserve(hold=False) for _ in range(count)]  # not held: the OS may offer a port again
    print(json.dumps([r.port for r in held]), flush=True)
    sys.stdin.read()  # keep them until the test has read every process's list
    """
)


@pytest.fixture
def ports_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "ports"
    monkeypatch.setenv(ports.DIR_VARIABLE, str(directory))
    return directory


def _env(directory: Path) -> dict[str, str]:
    return {**os.environ, ports.DIR_VARIABLE: str(directory), "PYTHONPATH": str(REPO_ROOT)}


def test_processes_reserving_at_once_never_get_the_same_port(ports_dir: Path, tmp_path: Path) -> None:
    # 4 processes x 300 ports drawn from the OS's ~28k ephemeral ports, released to it at once: the old
    # bind-close-return helper handed the same port to two of them in every run tried (about 25 expected).
    go = tmp_path / "go"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", RESERVER, "300", str(go)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=_env(ports_dir),
        )
        for _ in range(4)
    ]
    try:
        time.sleep(0.5)
        go.touch()
        lists = [json.loads(p.stdout.readline()) for p in processes if p.stdout is not None]
    finally:
        for process in processes:
            process.communicate(timeout=30)
    every = [port for ports_of_one in lists for port in ports_of_one]
    assert len(lists) == 4 and len(every) == 1200
    assert len(set(every)) == len(every), sorted(p for p in set(every) if every.count(p) > 1)


def test_a_held_port_is_refused_to_other_binds_and_open_to_its_server(ports_dir: Path) -> None:
    with ports.reserve() as reservation:
        assert reservation.held and reservation.reserved
        for address in (ports.LOOPBACK, "0.0.0.0"):
            with socket.socket() as other, pytest.raises(OSError) as refused:
                other.bind((address, reservation.port))  # no SO_REUSEADDR: any other program's bind
            assert refused.value.errno == errno.EADDRINUSE
        with socket.socket() as server:  # the server it is for sets SO_REUSEADDR (Go, torch, socketserver)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((ports.LOOPBACK, reservation.port))
            server.listen()
            client = socket.create_connection((ports.LOOPBACK, reservation.port), timeout=5)
            accepted, _ = server.accept()
            client.close()  # the client closes first (its port, not this one, then waits in TIME_WAIT)
            assert accepted.recv(1) == b""
            accepted.close()
        assert (ports_dir / f"{reservation.port}.lock").read_text().strip() == str(os.getpid())
    assert not reservation.reserved and not (ports_dir / f"{reservation.port}.lock").exists()
    with socket.socket() as other:
        other.bind((ports.LOOPBACK, reservation.port))  # released: anyone's again


def test_a_reserved_port_is_skipped_by_another_reserver(ports_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = ports.reserve(hold=False)
    offered = iter([first.port, first.port])  # the OS offers the reserved port first, twice

    class Probe(socket.socket):
        def getsockname(self) -> tuple[str, int]:
            host, port = super().getsockname()
            return host, next(offered, port)

    with monkeypatch.context() as patched:
        patched.setattr(ports.socket, "socket", Probe)
        second = ports.reserve(hold=False)
    assert second.port != first.port
    first.release()
    second.release()


def test_a_reservation_goes_with_its_process_even_when_it_is_sigkilled(ports_dir: Path) -> None:
    code = "from llm_infra.rehearsal import ports; r = ports.reserve(); print(r.port, flush=True); input()"
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env(ports_dir)
    )
    assert process.stdout is not None
    port = int(process.stdout.readline())
    lock = ports_dir / f"{port}.lock"
    assert ports._lock(lock) is None  # reserved by that process
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    fd = ports._lock(lock)  # the kernel dropped its lock; the file it could not remove is reused
    assert fd is not None
    os.close(fd)
    with socket.socket() as server:
        server.bind((ports.LOOPBACK, port))  # and the held socket went with it


def test_reserve_port_keeps_the_number_reserved_for_this_process(ports_dir: Path) -> None:
    port = ports.reserve_port()
    assert ports._lock(ports_dir / f"{port}.lock") is None
    with socket.socket() as server:  # not held: a server that binds without SO_REUSEADDR can have it
        server.bind((ports.LOOPBACK, port))
