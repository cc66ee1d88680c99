"""The payload in the worker environment of hyperpodrun (hyperpod-elastic-agent 1.1.3), the HyperPod
training operator's launcher.

Most tests give train.py the environment the agent's ``_start_workers`` sets for each worker
(src/hyperpod_elastic_agent/elastic_agent/hyperpod_elastic_agent.py) and check the three things that
differ from torchrun:

- no agent serves the TCPStore at MASTER_ADDR:MASTER_PORT (``TORCHELASTIC_USE_AGENT_STORE=False``):
  rank 0 must;
- the log monitor reads each node's local rank 0 only (logagent/log_agent.py): every node's first
  process prints the liveness lines its rules match, rank 0 alone the run's results;
- the SIGTERM-to-SIGKILL budget is the agent's ``--shutdown-timeout``, whatever the torch.

The graceful stop runs the real agent (PyPI, built once into the git-ignored ``.cache/``): the operator's
``/start``, then ``/stop`` with ``is_graceful``, which sends the workers SIGUSR1. The agent declares
torch<2.12 and, on a torch whose torchrun already defines ``--shutdown-timeout`` (2.13 here), dies
parsing its flags ("argparse.ArgumentError: argument --shutdown-timeout: conflicting option string:
--shutdown-timeout"): the test starts it with torchrun's flag removed from the parser, as on the
torch it was built for, and its code otherwise unchanged.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch

from llm_infra.workloads import accelerator
from llm_infra.workloads import train as train_module

from .conftest import REPO_ROOT, SMALL, WORKLOADS, env, free_port, json_lines, torchrun_command

pytestmark = pytest.mark.torch

# What hyperpodrun 1.1.3 tells every worker beyond torchrun's variables (``_start_workers``).
AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"
AGENT_SOCKET = "HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH"
# The lines hyperpodrun's log rules match (k8s_manifests/hyperpod_job.py): liveness, on every node.
LIVENESS = {"start", "step", "throughput", "stopped"}


def hyperpodrun_worker_env(node: int, nodes: int, master_port: int) -> dict[str, str]:
    """One worker per node, as hyperpodrun starts it on node ``node`` (``--nproc-per-node=1``)."""
    return {
        **env(),
        "LOCAL_RANK": "0",
        "RANK": str(node),
        "GROUP_RANK": str(node),
        "LOCAL_WORLD_SIZE": "1",
        "WORLD_SIZE": str(nodes),
        "GROUP_WORLD_SIZE": str(nodes),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        AGENT_STORE: "False",  # str(use_agent_store): HyperPodRendezvousBackend.use_agent_store is False
        AGENT_SOCKET: f"/tmp/hyperpod_elastic_agent_{os.getpid()}.sock",
    }


# ---- the store ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("agent_store", "rank", "hosts"),
    [
        ("True", 0, False),  # torchrun (c10d, static): its agent serves the store
        ("True", 1, False),
        ("False", 0, True),  # hyperpodrun
        ("False", 1, False),
        (None, 0, True),  # no launcher agent: torch's env:// lets rank 0 serve it too
    ],
)
def test_rank_0_serves_the_store_unless_the_launcher_agent_does(monkeypatch, agent_store, rank, hosts) -> None:
    if agent_store is None:
        monkeypatch.delenv(AGENT_STORE, raising=False)
    else:
        monkeypatch.setenv(AGENT_STORE, agent_store)
    assert train_module.hosts_the_store(rank) is hosts


# ---- which process prints what ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rank", "local_rank", "writes_liveness", "writes_results"),
    [
        (0, 0, True, True),
        (8, 0, True, False),  # the first process of the second node (8 per node)
        (9, 1, False, False),
        (0, None, True, True),  # Ray Train: every line goes to one driver, rank 0 writes them all
        (1, None, False, False),
    ],
)
def test_every_nodes_first_process_writes_liveness_and_rank_0_the_results(
    rank: int, local_rank: int | None, writes_liveness: bool, writes_results: bool
) -> None:
    written: list[str] = []
    runtime = train_module.Runtime(rank, 16, torch.device("cpu"), 0, write_line=written.append, local_rank=local_rank)
    train_module.emit(runtime, {"event": "step", "step": 1}, every_node=True)
    assert len(written) == writes_liveness
    written.clear()
    train_module.emit(runtime, {"event": "summary", "step": 1})
    assert len(written) == writes_results


def test_two_nodes_without_an_agent_store_train_and_each_node_logs_its_liveness(tmp_path: Path) -> None:
    # Two "nodes" of one worker each, with hyperpodrun's environment: no process serves the store
    # but rank 0 (before, both waited for one until the timeout), and node 1's only process, its
    # local rank 0 (the one the agent watches), prints the lines the rules match.
    port = free_port()
    args = [
        *SMALL,
        "--steps=6",
        "--log-every=1",
        "--throughput-interval-s=0.2",
        "--pg-timeout-seconds=60",
        f"--checkpoint-dir={tmp_path}",
        "--checkpoint-every=3",
    ]
    nodes = [
        subprocess.Popen(
            [sys.executable, str(WORKLOADS / "train.py"), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=hyperpodrun_worker_env(node, 2, port),
            cwd=WORKLOADS,
        )
        for node in (0, 1)
    ]
    try:
        outputs = [process.communicate(timeout=180) for process in nodes]
    finally:
        for process in nodes:
            if process.poll() is None:
                process.kill()
    assert [p.returncode for p in nodes] == [0, 0], outputs[0][1][-2000:] + outputs[1][1][-2000:]
    first, second = (json_lines(out) for out, _ in outputs)
    for records in (first, second):
        assert [r["step"] for r in records if r["event"] == "step"] == [1, 2, 3, 4, 5, 6]
        liveness = [r["event"] for r in records if r["event"] in LIVENESS]
        assert liveness[0] == "start" and "throughput" in liveness
    assert {r["event"] for r in second} <= LIVENESS  # no summary, checkpoint, resume... twice
    assert [r["event"] for r in first if r["event"] not in LIVENESS] == [
        "checkpoint_lease",  # rank 0 takes the folder's lease, once for the job
        "checkpoint_storage",
        "checkpoint",
        "checkpoint",
        "summary",
    ]


# ---- the shutdown budget ------------------------------------------------------------------------
def test_the_budget_is_hyperpodruns_shutdown_timeout_whatever_the_torch(monkeypatch) -> None:
    monkeypatch.setenv(AGENT_SOCKET, "/tmp/hyperpod_elastic_agent_1.sock")
    monkeypatch.setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "300")  # the job passes --shutdown-timeout=300 too
    assert accelerator.shutdown_budget_seconds() == 300.0
    monkeypatch.delenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")
    assert accelerator.shutdown_budget_seconds() == 15.0  # run.py: --shutdown-timeout default


def test_sigusr1_counts_as_a_stop_under_hyperpodrun_with_the_same_budget(monkeypatch) -> None:
    # A graceful /stop waits for the request's ``timeout`` (else --shutdown-timeout) before SIGKILL; the
    # request's timeout reaches only the agent (server.py _api_stop -> _shutdown -> pcontext.close), never
    # a worker: no variable, file or message carries it. The worker plans with --shutdown-timeout's.
    monkeypatch.setenv(AGENT_SOCKET, "/tmp/hyperpod_elastic_agent_1.sock")
    monkeypatch.setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "300")
    from llm_infra.workloads import stopping

    assert signal.SIGUSR1 in stopping.STOP_SIGNALS and signal.SIGTERM in stopping.STOP_SIGNALS
    assert accelerator.shutdown_budget_seconds() == 300.0


# ---- SIGUSR1, for real --------------------------------------------------------------------------
T = TypeVar("T")
BUDGET_SECONDS = 20  # --shutdown-timeout, TORCH_ELASTIC_SHUTDOWN_TIMEOUT and the /stop timeout
WORKER_LINE = re.compile(r"^\[default(\d+)\]:(\{.*\})$")  # --tee: "[default<local rank>]:<line>"


def wait_for(what: str, probe: Callable[[], T | None], process: subprocess.Popen[Any], timeout: float, log: Path) -> T:
    """``probe()`` once it is not None; fails, with the tail of ``log``, after ``timeout`` or when
    ``process`` has ended."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        tail = log.read_text(errors="replace")[-3000:]
        assert process.poll() is None, f"ended (exit {process.returncode}) while waiting for {what}:\n{tail}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s:\n{tail}"
        time.sleep(0.2)


def records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines in a launcher's output file, bare or with --tee's prefix."""
    found = []
    for line in path.read_text(errors="replace").splitlines():
        match = WORKER_LINE.match(line)
        text = match.group(2) if match else line
        if text.startswith("{") and text.endswith("}"):
            found.append(json.loads(text))
    return found


def steps_logged(path: Path, at_least: int) -> bool | None:
    return any(r.get("event") == "step" and r["step"] >= at_least for r in records(path)) or None


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def worker_pids(launcher: int) -> dict[int, int]:
    """RANK -> pid of the launcher's workers (its children with a RANK in their environment)."""
    ranks = {}
    for pid in children(launcher):
        try:
            environ = dict(
                item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in item
            )
        except OSError:
            continue
        if "RANK" in environ:
            ranks[int(environ["RANK"])] = pid
    return ranks


def assert_a_final_save_at_the_stop(stdout: Path, checkpoint_dir: Path) -> int:
    """Rank 0 said it stopped with 143 after a save committed at the step it stopped at (the schedule
    saves every 1000 steps: only the stop saves). Returns that step."""
    found = records(stdout)
    stopped = [r for r in found if r.get("event") == "stopped"]
    assert stopped, stdout.read_text()[-3000:]
    step = stopped[0]["step"]
    assert stopped[0]["exit_code"] == 143 and 3 <= step < 400
    assert [r["step"] for r in found if r.get("event") == "checkpoint"] == [step]
    assert (checkpoint_dir / f"step-{step:08d}" / "COMMITTED").is_file()
    assert (checkpoint_dir / "latest").read_text() == f"step-{step:08d}"
    return step


STOP_ARGS = [*SMALL, "--steps=400", "--log-every=1", "--checkpoint-every=1000"]


def test_sigusr1_to_one_worker_under_torchrun_stops_every_rank_with_143_after_a_final_save(tmp_path: Path) -> None:
    # What hyperpodrun's graceful stop does to each worker, and what a Slurm ``--signal=USR1`` or torchrun's
    # ``--signals-to-handle`` forwarding would: before, the worker died of the signal (exit -10), unsaved.
    ckpt, stdout, stderr = tmp_path / "ckpt", tmp_path / "stdout.log", tmp_path / "stderr.log"
    with stdout.open("w") as out, stderr.open("w") as err:
        process = subprocess.Popen(
            torchrun_command("train.py", [*STOP_ARGS, f"--checkpoint-dir={ckpt}"]),
            stdout=out,
            stderr=err,
            env=env(),
            cwd=WORKLOADS,
            start_new_session=True,
        )
    try:
        wait_for("step 3", lambda: steps_logged(stdout, 3), process, timeout=60, log=stderr)
        rank_1 = worker_pids(process.pid)[1]
        os.kill(rank_1, signal.SIGUSR1)  # one worker: rank 0 learns of it at the next step's agreement
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert_a_final_save_at_the_stop(stdout, ckpt)
    exit_codes = re.findall(r"exitcode\s*:\s*(-?\d+)", stderr.read_text())
    assert process.returncode != 0 and exit_codes and set(exit_codes) == {"143"}, stderr.read_text()[-3000:]


# ---- the real agent -----------------------------------------------------------------------------
def hyperpod_job_pins() -> tuple[str, tuple[str, ...]]:
    """The agent and its requirements at the pins the HyperPod job installs (k8s_manifests/hyperpod_job.py),
    read without importing cdk8s."""
    module = ast.parse((REPO_ROOT / "k8s_manifests" / "hyperpod_job.py").read_text())
    pins = {
        target.id: ast.literal_eval(node.value)
        for node in module.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id in ("ELASTIC_AGENT", "ELASTIC_AGENT_REQUIREMENTS")
    }
    return pins["ELASTIC_AGENT"], tuple(pins["ELASTIC_AGENT_REQUIREMENTS"])


UNREACHABLE = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Max retries exceeded",
    "ProxyError",
    "(from versions: none)",
    "No module named pip",
)


def agent_site() -> Path:
    """A folder with the agent (without its torch<2.12 and pip<25.3 requirements: this torch serves) and its
    requirements, for ``sys.path``; built once by pip into .cache/ (git-ignored), reused after."""
    agent, requirements = hyperpod_job_pins()
    key = "-".join([agent.replace("==", "-"), *sorted(r.replace("==", "-") for r in requirements)])
    site = REPO_ROOT / ".cache" / f"{key}-py{sys.version_info.major}{sys.version_info.minor}"
    if (site / ".complete").is_file():
        return site
    site.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f"{site.name}.", dir=site.parent))
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--retries=1"]
    pip += ["--timeout=30", "--target", str(building)]
    try:
        for command in ([*pip, "--no-deps", agent], [*pip, *requirements]):
            result = subprocess.run(command, capture_output=True, text=True, timeout=600)
            if result.returncode != 0:
                output = result.stdout + result.stderr
                reason = next((marker for marker in UNREACHABLE if marker in output), None)
                if reason is not None:
                    pytest.skip(f"pip cannot reach PyPI ({reason}): {' '.join(command[3:])}")
                pytest.fail(f"{' '.join(command)} failed:\n{output[-3000:]}")
        (building / ".complete").write_text(f"{agent} {' '.join(requirements)}\n")
        try:
            building.rename(site)
        except OSError:  # built meanwhile by another run: keep that one
            assert (site / ".complete").is_file()
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return site


# hyperpodrun's entry point (run.main), with torchrun's own --shutdown-timeout taken out of the parser
# where this torch has one, so that the agent's can be added (its default 15 s, as on torch < 2.12).
HYPERPODRUN = """
import sys
sys.path.insert(0, {site!r})
import torch.distributed.run as torchrun
from hyperpod_elastic_agent import run as hyperpodrun

def get_args_parser():
    parser = torchrun.get_args_parser()
    for action in list(parser._actions):
        if "--shutdown-timeout" in action.option_strings:
            parser._handle_conflict_resolve(None, [(flag, action) for flag in list(action.option_strings)])
    return parser

hyperpodrun.get_args_parser = get_args_parser
hyperpodrun.main()
"""


def call_agent(port: int, path: str, body: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The agent's API as the operator calls it: POST with a JSON body, or GET /status (its JSON)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if body is not None:
        request.data = json.dumps(body).encode()
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
        text = response.read()
    return json.loads(text) if text else None


def agent_status(port: int) -> dict[str, Any] | None:
    try:
        return call_agent(port, "/status")
    except (urllib.error.URLError, ConnectionError):
        return None  # not serving yet


def test_hyperpodruns_graceful_stop_ends_the_workers_with_143_after_a_final_save(tmp_path: Path) -> None:
    site = agent_site()
    api_port, master_port = free_port(), free_port()
    ckpt, stdout, stderr = tmp_path / "ckpt", tmp_path / "agent.out", tmp_path / "agent.err"
    command = [
        sys.executable,
        "-c",
        HYPERPODRUN.format(site=str(site)),
        # k8s_manifests/hyperpod_job.py's flags, on 127.0.0.1 and one node of two CPU workers
        "--nnodes=1",
        "--nproc-per-node=2",
        "--tee=3",
        f"--log-dir={tmp_path / 'logs'}",
        "--shutdown-signal=SIGTERM",
        f"--shutdown-timeout={BUDGET_SECONDS}",
        "--server-host=127.0.0.1",
        f"--server-port={api_port}",
        f"--rdzv-conf=resource_config_dir={tmp_path / 'rdzv'}",  # not /opt/ml/input/config
        "--monitor-interval=0.5",
        str(WORKLOADS / "train.py"),
        *STOP_ARGS,
        f"--checkpoint-dir={ckpt}",
    ]
    # NNODES: the agent's rendezvous reads it (the operator sets it in the pod); the payload's budget
    # variable, as the pod sets it (k8s_manifests/pod_spec.py).
    agent_env = {**env(), "NNODES": "1", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(BUDGET_SECONDS)}
    with stdout.open("w") as out, stderr.open("w") as err:
        process = subprocess.Popen(
            command, stdout=out, stderr=err, env=agent_env, cwd=WORKLOADS, start_new_session=True
        )
    try:
        ready = wait_for("agent API", lambda: agent_status(api_port), process, timeout=60, log=stderr)
        assert ready["status"] == "ready", ready
        start = {"rank": 0, "nnodes": 1, "faultCount": 0, "master_addr": "127.0.0.1", "master_port": master_port}
        call_agent(api_port, "/start", start)
        wait_for("step 3", lambda: steps_logged(stdout, 3), process, timeout=60, log=stderr)
        workers = worker_pids(process.pid)
        assert sorted(workers) == [0, 1]
        call_agent(api_port, "/stop", {"is_graceful": True, "timeout": BUDGET_SECONDS})

        def stopped() -> dict[str, Any] | None:
            status = agent_status(api_port)
            return status if status and status["status"] == "ready" and "STOPPING" in status["transitions"] else None

        status = wait_for("the agent back to READY after STOPPING", stopped, process, timeout=60, log=stderr)
    finally:
        try:
            call_agent(api_port, "/shutdown", {})
            process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    log = stderr.read_text()
    assert f"is_graceful=True, timeout={BUDGET_SECONDS}" in log, log[-3000:]
    assert "Shutdown completed for signal SIGUSR1" in log, log[-3000:]
    # The agent reaps its workers itself (pcontext.py _reap_zombies) and logs each one's wait status.
    reaped = {int(pid): int(status) for pid, status in re.findall(r"Reaped child process (\d+) with status (\d+)", log)}
    exits = {rank: os.waitstatus_to_exitcode(reaped[pid]) if pid in reaped else None for rank, pid in workers.items()}
    assert exits == {0: 143, 1: 143}, log[-3000:]
    assert status["transitions"]["READY"] > status["transitions"]["STOPPING"]  # workers stopped, ready again
    assert_a_final_save_at_the_stop(stdout, ckpt)
