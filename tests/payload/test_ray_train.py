"""ray_train.py on a local Ray cluster with 2 CPU workers: the same parameters as torchrun with the same
flags, each committed checkpoint reported to Ray (Ray's own ``Result`` names it), a worker killed
mid-run and a new driver after the first one died (both resume from what Ray hands them), the EFA
transport check."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import WORKLOADS, env, free_port, json_lines, run_torchrun, summary

pytestmark = [
    pytest.mark.ray,
    # Ray 2.60's Result.from_path (read here) still calls pydantic's parse_obj.
    pytest.mark.filterwarnings("ignore:The `parse_obj` method is deprecated:DeprecationWarning"),
]
pytest.importorskip("ray.train")
from ray.train import Checkpoint, Result  # noqa: E402  (Train V2's, Ray 2.60's default)

from llm_infra.workloads import ray_train  # noqa: E402

# The same flags for torchrun and Ray Train: 8 tiny steps, a checkpoint every 2.
FLAGS = ["--preset=nano", "--batch-size=2", "--seq-len=32", "--steps=8", "--checkpoint-every=2", "--log-every=1000"]
RAY_BIN = Path(sys.executable).with_name("ray")
# A loopback test cluster: no usage stats, no token (Ray would take one from ~/.ray if present).
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


@dataclass(frozen=True)
class RayHead:
    address: str
    session: int  # the session of every process it started (workers included)


@pytest.fixture(scope="module")
def ray_head() -> Iterator[RayHead]:
    """A local Ray head (2 CPUs) that the drivers connect to, as a RayJob's driver does."""
    port = free_port()
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    head = subprocess.Popen(
        [
            str(RAY_BIN),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **RAY_ENV},
        start_new_session=True,  # its processes form one session: found and ended by its id
    )
    assert head.stdout is not None
    for line in head.stdout:  # ready once it says it blocks
        if "block forever" in line:
            break
    else:
        raise AssertionError(f"ray start exited with {head.wait()}")
    yield RayHead(f"127.0.0.1:{port}", head.pid)
    head.send_signal(signal.SIGTERM)  # `ray start --block` drains and ends the processes it started
    with contextlib.suppress(subprocess.TimeoutExpired):
        head.wait(timeout=5)  # 1-2 s when idle; after these runs its drain can take half a minute
    for pid in session_processes(head.pid):  # a test cluster: nothing of it is worth the wait
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    head.wait()
    shutil.rmtree(temp_dir, ignore_errors=True)


def session_processes(session: int) -> dict[int, str]:
    """The processes of the session ``session`` (the head's: Ray's processes and workers), pid to command line."""
    listing = subprocess.run(["ps", "-o", "pid=,args=", "--sid", str(session)], capture_output=True, text=True)
    return {int(pid): args for pid, _, args in (line.strip().partition(" ") for line in listing.stdout.splitlines())}


@pytest.fixture(scope="module")
def torchrun_run(tmp_path_factory) -> dict:
    """The summary of train.py under torchrun, 2 ranks, uninterrupted: what every Ray run must end with."""
    checkpoints = tmp_path_factory.mktemp("torchrun")
    result = run_torchrun("train.py", [*FLAGS, f"--checkpoint-dir={checkpoints}"], timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return summary(result.stdout)


def ray_train_command(storage: Path, *flags: str) -> list[str]:
    return [sys.executable, "ray_train.py", "--num-workers=2", f"--storage-path={storage}", *FLAGS, *flags]


def ray_env(address: str) -> dict[str, str]:
    # Ray Train's controller polls its workers (and takes in their reports) every 2 s by default; a
    # short interval makes a reported checkpoint Ray's well before these 8-step runs end.
    return {**env(), **RAY_ENV, "RAY_ADDRESS": address, "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}


def run_ray_train(address: str, storage: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ray_train_command(storage, *flags),
        cwd=WORKLOADS,
        env=ray_env(address),
        capture_output=True,
        text=True,
        timeout=300,
    )


def committed_step_once_saved(checkpoints: Path, process: subprocess.Popen[str], timeout: float = 240) -> int:
    """Wait for the run's first committed checkpoint; the newest committed step then."""
    deadline = time.monotonic() + timeout
    while not (checkpoints / "latest").is_file():
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise AssertionError("no checkpoint: " + (process.communicate()[1] or "")[-3000:])
        time.sleep(0.1)
    return int((checkpoints / "latest").read_text().removeprefix("step-"))


def ray_checkpoint(run_dir: Path | str) -> dict | None:
    """The run's latest checkpoint as Ray itself records it (``Result.from_path`` reads Ray's run
    storage): Ray's copy and the pointer file in it; None while Ray holds none."""
    try:
        result = Result.from_path(str(run_dir))
    except (RuntimeError, ValueError, OSError):  # no snapshot yet, or one being written
        return None
    if result.checkpoint is None:
        return None
    with result.checkpoint.as_directory() as copy:
        pointer = json.loads((Path(copy) / ray_train.POINTER_FILE).read_text())
    return {
        "ray_checkpoint": result.checkpoint.path,
        "pointer": pointer,
        "metrics": result.metrics,
        "kept": [c.path for c, _ in result.best_checkpoints or []],
        "files": sorted(p.name for p in Path(result.checkpoint.path).iterdir()),
    }


def reported_once(run_dir: Path, process: subprocess.Popen[str], timeout: float = 240) -> dict:
    """Wait until Ray holds the run's first reported checkpoint; Ray's record of it then."""
    deadline = time.monotonic() + timeout
    while (reported := ray_checkpoint(run_dir)) is None:
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise AssertionError("Ray holds no checkpoint: " + (process.communicate()[1] or "")[-3000:])
        time.sleep(0.1)
    return reported


def wait_for_no_train_workers(head_session: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while train_worker_pids(head_session):
        assert time.monotonic() < deadline, "the dead driver's Ray Train workers are still running"
        time.sleep(0.2)


def train_worker_pids(head_session: int) -> list[int]:
    return [pid for pid, args in session_processes(head_session).items() if "RayTrainWorker" in args]


def test_same_flags_and_world_size_end_with_torchruns_parameters_and_ray_holds_each_checkpoint(
    ray_head, torchrun_run, tmp_path: Path
) -> None:
    # Ray's storage as a URI (as s3://bucket/runs would be), the DCP shards in --checkpoint-dir.
    checkpoints = tmp_path / "checkpoints"
    storage = f"{tmp_path.as_uri()}/ray"
    result = subprocess.run(
        [sys.executable, str(WORKLOADS / "ray_train.py"), "--num-workers=2", f"--storage-path={storage}", *FLAGS]
        + [f"--checkpoint-dir={checkpoints}"],
        cwd=tmp_path,
        env=ray_env(ray_head.address),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    records = json_lines(result.stdout)
    final = summary(result.stdout)
    assert final["param_sha256"] == torchrun_run["param_sha256"]
    assert (final["step"], final["loss"], final["resumed_from"], final["restart"]) == (8, torchrun_run["loss"], None, 0)
    # train.py's JSON lines, rank 0's only: one start, a checkpoint every 2 steps, the summary last.
    assert [r["event"] for r in records if r["event"] in ("start", "checkpoint", "summary")] == [
        "start",
        *["checkpoint"] * 4,
        "summary",
    ]
    assert not [r for r in records if r["event"] in ("resume_from_ray", "ray_checkpoint_unusable")]
    newest = checkpoints / "step-00000008"
    assert (newest / "COMMITTED").is_file()
    # Ray's own record of the run (its Result, read from its storage) names the newest committed
    # checkpoint: a pointer of one small file, no shard copied; Ray keeps as many as train.py keeps.
    held = ray_checkpoint(f"{storage}/ray-train")
    assert held is not None, "Ray holds no checkpoint of the run"
    assert held["files"] == [ray_train.POINTER_FILE]
    assert (held["pointer"]["step"], held["pointer"]["path"]) == (8, str(newest))
    assert held["pointer"]["checkpoint_dir"] == str(checkpoints)
    assert held["metrics"] == {"step": 8, "checkpoint_path": str(newest)}
    kept_steps = [json.loads((Path(p) / ray_train.POINTER_FILE).read_text())["step"] for p in held["kept"]]
    assert kept_steps == [4, 6, 8] == [int(p.name.removeprefix("step-")) for p in sorted(checkpoints.glob("step-*"))]
    # The driver's Result.checkpoint, as it printed it.
    (ray_result,) = [r for r in records if r["event"] == "ray_result"]
    assert ray_result == {
        "event": "ray_result",
        "ray_checkpoint": held["ray_checkpoint"],
        "step": 8,
        "path": str(newest),
    }
    # Ray's run folder is the URI's, nothing landed in a local "file:" (or "s3:") folder.
    assert (tmp_path / "ray" / "ray-train" / ray_train.GROUP_STARTS).read_text() == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "ray"]


def test_a_killed_worker_restarts_the_group_which_resumes_from_rays_checkpoint(
    ray_head, torchrun_run, tmp_path: Path
) -> None:
    driver = subprocess.Popen(
        ray_train_command(tmp_path),
        cwd=WORKLOADS,
        env=ray_env(ray_head.address),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run_dir = tmp_path / "ray-train"
    reported = reported_once(run_dir, driver)["pointer"]["step"]
    (victim, *_) = train_worker_pids(ray_head.session)
    os.kill(victim, signal.SIGKILL)
    out, err = driver.communicate(timeout=300)
    assert driver.returncode == 0, err[-3000:]
    records = json_lines(out)
    starts = [r for r in records if r["event"] == "start"]
    assert [s["restart"] for s in starts] == [0, 1]
    # The new group got Ray's checkpoint (ray.train.get_checkpoint()) and resumed from its folder.
    (resumed,) = [r for r in records if r["event"] == "resume_from_ray"]
    assert records.index(resumed) < records.index(starts[1])
    assert resumed["step"] >= reported > 0
    assert resumed["path"] == str(run_dir / "checkpoints" / f"step-{resumed['step']:08d}")
    assert resumed["checkpoint_dir"] == str(run_dir / "checkpoints") and "checkpoint_dir_flag" not in resumed
    assert starts[1]["resumed_from"] >= resumed["step"]  # that one, or one committed after its report
    assert summary(out)["param_sha256"] == torchrun_run["param_sha256"]


def test_a_new_driver_with_the_same_run_resumes_from_rays_checkpoint(ray_head, torchrun_run, tmp_path: Path) -> None:
    # Ray Train 2.60 (V2) has no TorchTrainer.restore (it raises): a run is restored by a new driver
    # with the same RunConfig(name, storage_path), whose controller hands the workers the run's
    # latest reported checkpoint.
    with pytest.raises(DeprecationWarning):
        ray_train.TorchTrainer.restore(str(tmp_path))
    first = subprocess.Popen(
        ray_train_command(tmp_path),
        cwd=WORKLOADS,
        env=ray_env(ray_head.address),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    run_dir = tmp_path / "ray-train"
    reported_once(run_dir, first)
    os.killpg(first.pid, signal.SIGKILL)  # the driver dies (a head restart, a resubmitted RayJob)
    first.communicate()
    wait_for_no_train_workers(ray_head.session)
    held = ray_checkpoint(run_dir)  # what Ray holds of the interrupted run
    assert held is not None
    second = run_ray_train(ray_head.address, tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    records = json_lines(second.stdout)
    (resumed,) = [r for r in records if r["event"] == "resume_from_ray"]
    assert (resumed["ray_checkpoint"], resumed["step"], resumed["path"]) == (
        held["ray_checkpoint"],
        held["pointer"]["step"],
        held["pointer"]["path"],
    )
    (start,) = [r for r in records if r["event"] == "start"]
    assert start["resumed_from"] >= resumed["step"] > 0 and start["restart"] >= 1
    assert summary(second.stdout)["param_sha256"] == torchrun_run["param_sha256"]


def pointer_checkpoint(directory: Path, pointer: dict | None) -> Checkpoint:
    directory.mkdir()
    if pointer is not None:
        (directory / ray_train.POINTER_FILE).write_text(json.dumps(pointer))
    return Checkpoint.from_directory(str(directory))


def test_a_checkpoint_from_ray_is_used_only_while_its_folder_holds_that_commit(tmp_path: Path) -> None:
    """What the workers decide from ``ray.train.get_checkpoint()`` (no Ray cluster needed)."""
    flag_dir, elsewhere = tmp_path / "checkpoints", tmp_path / "moved"
    for folder, step in ((flag_dir / "step-00000004", 4), (elsewhere / "step-00000006", 6)):
        folder.mkdir(parents=True)
        (folder / "COMMITTED").write_text(json.dumps({"step": step, "world_size": 2}))
    assert ray_train.resume_decision(None, str(flag_dir)) is None  # Ray has none: train.py's own resume

    usable = pointer_checkpoint(tmp_path / "a", {"step": 4, "path": str(flag_dir / "step-00000004")})
    assert ray_train.resume_decision(usable, str(flag_dir)) == {
        "event": "resume_from_ray",
        "ray_checkpoint": str(tmp_path / "a"),
        "step": 4,
        "path": str(flag_dir / "step-00000004"),
        "checkpoint_dir": str(flag_dir),
    }
    # The run's record wins over a changed --checkpoint-dir, and says so.
    moved = pointer_checkpoint(tmp_path / "b", {"step": 6, "path": str(elsewhere / "step-00000006")})
    decision = ray_train.resume_decision(moved, str(flag_dir))
    assert decision is not None
    assert (decision["checkpoint_dir"], decision["checkpoint_dir_flag"]) == (str(elsewhere), str(flag_dir))

    unusable = {
        "pruned": {"step": 2, "path": str(flag_dir / "step-00000002")},
        "another step's commit": {"step": 6, "path": str(flag_dir / "step-00000004")},
        "no pointer": None,
        "no path": {"step": 4},
    }
    for index, (case, pointer) in enumerate(unusable.items()):
        decision = ray_train.resume_decision(pointer_checkpoint(tmp_path / f"u{index}", pointer), str(flag_dir))
        assert decision is not None, case
        assert (decision["event"], decision["checkpoint_dir"]) == ("ray_checkpoint_unusable", str(flag_dir)), case
        assert decision["error"], case


def test_without_an_efa_transport_the_run_ends_before_training(ray_head, tmp_path: Path) -> None:
    # CPU workers talk over gloo: NCCL logs no channel on the OFI plugin, as on a cluster without EFA.
    result = run_ray_train(ray_head.address, tmp_path, "--expect-efa-transport")
    assert result.returncode == 1
    records = json_lines(result.stdout)
    assert records == [
        {
            "event": "nccl_transport",
            "verdict": "fail",
            "problems": ["no channel on the OFI plugin (aws-ofi-nccl / EFA)"],
            "time": records[0]["time"],
        }
    ]
    assert not (tmp_path / "ray-train" / "checkpoints").exists()


def test_bad_flags_exit_2_naming_the_flag(tmp_path: Path, monkeypatch, capsys) -> None:
    # The flags are checked before Ray is reached (argparse's exit 2, as in script mode): in this process.
    monkeypatch.chdir(tmp_path)
    cases = {
        "--num-workers: 0 must be >= 1": ["--num-workers=0", f"--storage-path={tmp_path}"],
        "--preset: 'huge' is not allowed": ["--num-workers=2", f"--storage-path={tmp_path}", "--preset=huge"],
        # Ray's storage on S3: DCP's shards still need a file system path (FSx); nothing local is made.
        "--checkpoint-dir: required with --storage-path s3://bucket/runs": [
            "--num-workers=2",
            "--storage-path=s3://bucket/runs",
        ],
    }
    for message, argv in cases.items():
        with pytest.raises(SystemExit) as exited:
            ray_train.main(argv)
        assert exited.value.code == 2, message
        assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
