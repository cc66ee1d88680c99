"""Stopping cleanly (issue 29, item 13): ``llm-infra rehearse`` sent SIGINT, SIGTERM or SIGHUP stops the
control plane and every process it started and exits 130, 143 or 129 with one line; SIGINT works also when
it came ignored (a background job of a non-interactive shell: the case that once ran to the end); and when
it is SIGKILLed, its children die with it (the kernel's parent-death signal). Each case: no process of that
control plane is left, and each port it listened on is free again. Also ``python -m
llm_infra.rehearsal.control_plane --hold`` and SIGTERM.

A real ``llm-infra rehearse`` of a one-stack app with no resources and one pod that no scheduler will
place (so the rehearsal is still waiting when the signal comes), on the binaries ``make k8s`` builds;
skipped, with the build command, without them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from llm_infra.rehearsal import control_plane, ports
from llm_infra.rehearsal.rehearse import REQUIRED_COMPONENTS

REPO_ROOT = Path(__file__).resolve().parents[1]
BIN_DIR = control_plane.default_bin_dir()
MISSING = control_plane.missing_binaries(BIN_DIR, REQUIRED_COMPONENTS)


@pytest.fixture(scope="session")
def k8s_binaries() -> Path:
    """The control plane's binaries; skips with the build command without them. By its name this puts the tests
    that use it in the ``control_plane`` tier (tests/tiers.py); tests/conftest.py has the same fixture."""
    if MISSING:  # etcd and kube-apiserver, and what a rehearsal needs beyond them
        pytest.skip(
            f"real control plane: {', '.join(MISSING)} not built in {BIN_DIR}; run `make k8s` "
            f"or set {control_plane.BIN_DIR_VARIABLE} to prebuilt binaries"
        )
    return BIN_DIR


LLM_INFRA = Path(sys.executable).with_name("llm-infra")
STUCK_POD = """
apiVersion: v1
kind: Pod
metadata: {name: waits-for-a-scheduler, namespace: default}
spec:
  schedulerName: nobody-runs-this-scheduler
  containers: [{name: main, image: example.invalid/none:1}]
"""
START_SECONDS = 240  # a cold start on two busy cores took 27 s
STOP_SECONDS = 20  # the grace before SIGKILL is 10 s
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


@pytest.fixture
def app(tmp_path: Path) -> list[str]:
    """The flags of a rehearsal of a synthesized app with one stack and nothing in it, and the stuck pod."""
    cdk_out, dist = tmp_path / "cdk.out", tmp_path / "dist"
    cdk_out.mkdir()
    dist.mkdir()
    stack = {"type": "aws:cloudformation:stack", "properties": {"templateFile": "llm-infra-cluster.template.json"}}
    (cdk_out / "manifest.json").write_text(json.dumps({"version": "48.0.0", "artifacts": {"llm-infra-cluster": stack}}))
    (cdk_out / "llm-infra-cluster.template.json").write_text('{"Resources": {}}')
    (tmp_path / "stuck.yaml").write_text(STUCK_POD)
    return [
        *("--app-dir", str(REPO_ROOT), "--cdk-out", str(cdk_out), "--manifests", str(dist)),
        *("--apply", str(tmp_path / "stuck.yaml"), "--timeout", "600"),
    ]


@dataclass
class Child:
    pid: int
    started: str  # /proc/PID/stat's start time: a PID used again is not this process
    name: str


@dataclass
class Run:
    """A command that starts a control plane, its output read as it comes."""

    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def wait_for(self, pattern: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if re.search(pattern, line):
                    return line
            assert self.process.poll() is None, f"exited {self.process.returncode}:\n" + "".join(self.lines)
            time.sleep(0.1)
        raise AssertionError(f"no line {pattern!r} after {timeout:.0f} s:\n" + "".join(self.lines))


@contextlib.contextmanager
def started(argv: list[str], ports_dir: Path, *, ignore_sigint: bool = False) -> Iterator[Run]:
    def preexec() -> None:
        if ignore_sigint:  # as a non-interactive shell starts a background job
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, ports.DIR_VARIABLE: str(ports_dir)},
        preexec_fn=preexec,
        start_new_session=True,  # the signal goes to it alone, not to a group
    )
    run = Run(process)
    output = process.stdout
    assert output is not None
    reader = threading.Thread(target=lambda: run.lines.extend(iter(output.readline, "")), daemon=True)
    reader.start()
    try:
        yield run
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        reader.join(timeout=10)


def _started_at(pid: int) -> str | None:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def children_of(parent: int) -> list[Child]:
    """The processes ``parent`` started from the control plane's binaries."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == parent and argv[0].decode(errors="replace").startswith(str(BIN_DIR)):
            found.append(Child(int(entry.name), fields[19], Path(argv[0].decode()).name))
    return found


def alive(children: list[Child]) -> list[Child]:
    """Those of ``children`` still running (a zombie counts: nobody has reaped it)."""
    return [child for child in children if _started_at(child.pid) == child.started]


def listening_ports(pids: list[int]) -> set[int]:
    """The TCP ports the processes ``pids`` listen on (their socket inodes in /proc/net/tcp*)."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in (Path("/proc") / str(pid) / "fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                fields = row.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    found.add(int(fields[1].rsplit(":", 1)[1], 16))
    return found


def free_for_a_server(port: int) -> bool:
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind((control_plane.LOOPBACK, port))
            server.listen()
        except OSError:
            return False
    return True


def api_server_answers(children: list[Child]) -> bool:
    """Whether the kube-apiserver among ``children`` answers on its secure port (401 counts: it answers)."""
    (apiserver,) = [c for c in children if c.name == "kube-apiserver"]
    argv = (Path("/proc") / str(apiserver.pid) / "cmdline").read_bytes().decode().split("\0")
    port = next(a.split("=", 1)[1] for a in argv if a.startswith("--secure-port="))
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", timeout=5, context=context):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def workdir_of(children: list[Child]) -> Path:
    (apiserver,) = [c for c in children if c.name == "kube-apiserver"]
    argv = (Path("/proc") / str(apiserver.pid) / "cmdline").read_bytes().decode().split("\0")
    return Path(next(a.split("=", 1)[1] for a in argv if a.startswith("--cert-dir="))).parent


def stop_and_check(run: Run, signum: int, expected: set[str], ports_dir: Path) -> tuple[float, float]:
    """Signal the command alone once its API server answers; then every child is gone and each port free.
    Returns the seconds until the command exited and until its last child was gone."""
    children = children_of(run.process.pid)
    assert {c.name for c in children} >= expected, children
    deadline = time.monotonic() + 60
    while not api_server_answers(children):
        assert time.monotonic() < deadline, "the API server does not answer"
        time.sleep(0.2)
    listened = listening_ports([c.pid for c in children])
    workdir = workdir_of(children)
    assert listened and workdir.is_dir()

    sent = time.monotonic()
    os.kill(run.process.pid, signum)
    run.process.wait(timeout=STOP_SECONDS)
    exited = time.monotonic() - sent
    while alive(children) and time.monotonic() - sent < STOP_SECONDS:
        time.sleep(0.05)
    gone = time.monotonic() - sent
    assert not alive(children), f"left running after {signal.Signals(signum).name}: {alive(children)}"
    assert all(free_for_a_server(port) for port in listened), listened
    for port in listened:  # nor does any reservation outlive the command
        lock = ports._lock(ports_dir / f"{port}.lock")
        assert lock is not None, port
        os.close(lock)
    if signum in EXIT_CODES:
        assert run.process.returncode == EXIT_CODES[signum], "".join(run.lines)
        assert not workdir.exists(), f"{workdir} left behind"
    else:
        assert run.process.returncode == -signum
    return exited, gone


@pytest.mark.parametrize(
    "signum, ignore_sigint",
    [(signal.SIGINT, True), (signal.SIGTERM, False), (signal.SIGHUP, False), (signal.SIGKILL, False)],
    ids=["SIGINT-inherited-ignored", "SIGTERM", "SIGHUP", "SIGKILL"],
)
def test_rehearse_stops_every_process_it_started(
    k8s_binaries: Path, app: list[str], tmp_path: Path, signum: int, ignore_sigint: bool
) -> None:
    ports_dir = tmp_path / "ports"
    with started([str(LLM_INFRA), "rehearse", *app], ports_dir, ignore_sigint=ignore_sigint) as run:
        run.wait_for(r"rehearse: up in", START_SECONDS)
        exited, gone = stop_and_check(run, signum, set(REQUIRED_COMPONENTS), ports_dir)
    name = signal.Signals(signum).name
    print(f"{name}: exited after {exited:.1f} s, every child gone after {gone:.1f} s")
    if signum in EXIT_CODES:
        last = [line for line in run.lines if line.strip()][-1]
        assert re.fullmatch(
            rf"llm-infra: rehearse stopped by {name}: the control plane and every process it started are "
            r"stopped in \d+\.\d s\n",
            last,
        ), "".join(run.lines)


def test_the_control_plane_held_by_hand_stops_on_sigterm(k8s_binaries: Path, tmp_path: Path) -> None:
    ports_dir = tmp_path / "ports"
    argv = [sys.executable, "-m", "llm_infra.rehearsal.control_plane", "--hold", "--only-required"]
    with started(argv, ports_dir) as run:
        run.wait_for(r"^holding;", START_SECONDS)
        stop_and_check(run, signal.SIGTERM, {"etcd", "kube-apiserver"}, ports_dir)
    stopped = r"control plane: stopped by SIGTERM; every process it started is stopped in \d+\.\d s$"
    assert any(re.match(stopped, line) for line in run.lines), "".join(run.lines)
