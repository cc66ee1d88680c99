"""The pods' output in the command tests: the real payload, run with each pod's own command from the
chart, on this machine (torchrun on CPU with gloo for the NCCL gate and the training run; the health check
in-process on recorded nvidia-smi output, since no GPU is here). The containers themselves are played by
tests/kwok_cluster.py's ``PodRuntime`` on the real control plane.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conftest import TorchLaunch

REPO_ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = REPO_ROOT / "workloads"
FIXTURES = Path(__file__).resolve().parent / "payload" / "fixtures"


def _fake_sysfs(root: Path, efa: int) -> Path:
    """/sys/class/infiniband/<dev>/device/driver -> .../drivers/efa with port 1 ACTIVE (as on a p5)."""
    driver = root / "sys/bus/pci/drivers/efa"
    driver.mkdir(parents=True, exist_ok=True)
    for index in range(efa):
        device = root / f"sys/class/infiniband/efa{index}/device"
        device.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            (device / "driver").symlink_to(driver)
        port = device.parent / "ports/1"
        port.mkdir(parents=True, exist_ok=True)
        (port / "state").write_text("4: ACTIVE\n")
    return root


@functools.cache
def health_check_output(argv: tuple[str, ...], gpu_fixture: str) -> tuple[str, int]:
    """``health_check.py`` with the chart's arguments, in-process, on recorded nvidia-smi output
    (``tests/payload/fixtures``); the node's disks and kernel log are stand-ins, DCGM is absent."""
    from llm_infra.workloads import health_check

    fixtures = {
        "nvidia-smi --query-gpu": gpu_fixture,
        "nvidia-smi --query-remapped-rows": "nvidia_smi_remapped_ok.csv",
        "nvidia-smi nvlink": "nvidia_smi_nvlink_ok.txt",
    }

    def run(command: list[str]) -> str:
        line = " ".join([Path(command[0]).name, *command[1:]])
        for prefix, fixture in fixtures.items():
            if line.startswith(prefix):
                return (FIXTURES / fixture).read_text()
        raise health_check.CommandNotFound(f"{command[0]} not found")

    root = Path(tempfile.mkdtemp(prefix="node-"))
    efa = next(int(a.split("=", 1)[1]) for a in argv if a.startswith("--expected-efa="))
    stand_ins = [
        f"--kmsg={FIXTURES / 'kmsg_clean.txt'}",
        f"--sysfs-root={_fake_sysfs(root, efa)}",
        f"--disk-path={root}",
        "--min-disk-gib=0",
        f"--shm-path={root}",
        "--min-shm-gib=0",
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = health_check.main([a for a in argv if not a.startswith("--kmsg=")] + stand_ins, run=run)
    return out.getvalue(), code


_TORCHRUN_OUTPUTS: dict[tuple[str, tuple[str, ...], int], tuple[str, int]] = {}


def torchrun_output(
    launch: TorchLaunch | None, script: str, args: tuple[str, ...], max_restarts: int
) -> tuple[str, int]:
    """``script`` under torchrun, 2 CPU ranks (gloo), both streams as a pod log has them; run once per process
    (``launch``: the ``torch_launch`` fixture, which a test that runs the payload asks for)."""
    key = (script, args, max_restarts)
    if key not in _TORCHRUN_OUTPUTS:
        if launch is None:
            raise AssertionError(f"{script} runs under torchrun: pass the torch_launch fixture to ChartPayload")
        result = launch.run(script, args, max_restarts=max_restarts)
        _TORCHRUN_OUTPUTS[key] = (result.stdout + result.stderr, result.returncode)
    return _TORCHRUN_OUTPUTS[key]


# What runs where a GPU would: arguments appended to the chart's (argparse keeps the last value).
CPU_ARGS = {
    "allreduce_bench.py": ["--sizes=64K", "--iters=2", "--warmup=1"],
    "train.py": ["--batch-size=2", "--seq-len=32", "--steps=6", "--checkpoint-every=2", "--fail-at-step=3"],
}
GPU_ONLY_ARGS = ("--expect-efa-transport",)  # reads NCCL's log: there is no NCCL on CPU


class ChartPayload:
    """A pod's log and exit code: the real payload run with the pod's own command from the chart.

    ``faulty_nodes`` answer the health check with a recorded faulty GPU listing (7 GPUs, ECC errors);
    ``busbw_floor`` replaces the chart's all-reduce floor (a CPU's bandwidth is far below a p5's); ``launch``:
    the ``torch_launch`` fixture, for the jobs that run under torchrun (the health check runs in-process).
    """

    def __init__(
        self,
        *,
        faulty_nodes: frozenset[str] = frozenset(),
        busbw_floor: float | None = 0.0,
        launch: TorchLaunch | None = None,
    ) -> None:
        self.faulty_nodes = faulty_nodes
        self.busbw_floor = busbw_floor
        self.launch = launch

    def __call__(self, job: dict[str, Any], pod_index: int, node: str) -> tuple[str, int]:
        command = list(pod_template(job)["spec"]["containers"][0]["command"])
        (script_at,) = [i for i, part in enumerate(command) if part.endswith(".py")]
        script, args = Path(command[script_at]).name, command[script_at + 1 :]
        if script == "health_check.py":
            fixture = "nvidia_smi_p5_ecc.csv" if node in self.faulty_nodes else "nvidia_smi_p5_ok.csv"
            return health_check_output(tuple(args), fixture)
        args = [a for a in args if a not in GPU_ONLY_ARGS] + CPU_ARGS.get(script, [])
        if script == "allreduce_bench.py" and self.busbw_floor is not None:
            args.append(f"--min-busbw-gbps={self.busbw_floor:g}")
        if script == "train.py":
            args.append(f"--checkpoint-dir={checkpoint_root() / job['metadata']['name']}")
        log, code = torchrun_output(self.launch, script, tuple(args), max_restarts(job))
        return (log if pod_index == 0 else "", code)  # rank 0 lives in the first pod

    def warm(self, jobs: list[dict[str, Any]], nodes: list[str]) -> None:
        """Run every pod's payload now, before a test's deadlines start."""
        for job in jobs:
            for index, node in enumerate(nodes):
                self(job, index, node)


@functools.cache
def checkpoint_root() -> Path:
    """One folder per test process, removed when it ends: a training run's output is cached, so it runs (and
    saves) once."""
    root = Path(tempfile.mkdtemp(prefix="checkpoints-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def pod_template(job: dict[str, Any]) -> dict[str, Any]:
    spec = job["spec"]
    if job["kind"] == "Job":
        return dict(spec["template"])
    replica_specs = spec.get("pytorchReplicaSpecs") or spec.get("replicaSpecs")
    specs = list(replica_specs.values()) if isinstance(replica_specs, dict) else list(replica_specs)
    return dict(specs[0]["template"])


def max_restarts(job: dict[str, Any]) -> int:
    """In-place restarts of the workers: a PyTorchJob's torchrun ``maxRestarts``; a HyperPodPyTorchJob's
    process-level restarts before a full-job restart (``runPolicy.restartPolicy``)."""
    spec = job["spec"]
    if "elasticPolicy" in spec:
        return int(spec["elasticPolicy"].get("maxRestarts") or 0)
    restart_policy = (spec.get("runPolicy") or {}).get("restartPolicy") or {}
    return int(restart_policy.get("numRestartBeforeFullJobRestart") or 0)
