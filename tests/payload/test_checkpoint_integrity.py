"""Checkpoint integrity (workloads/checkpoint_digests.py): every file's CRC-32 taken as it is written, kept in
the commit record, checked before a load; a flipped bit is refused by every rank and the run falls back."""

from __future__ import annotations

import json
import time
import zipfile
from pathlib import Path

import pytest
import torch

from llm_infra.workloads import checkpoint_digests
from llm_infra.workloads.checkpointing import COMMIT_MARKER, CheckpointManager

from .conftest import json_lines, summary, train

pytestmark = pytest.mark.torch


class Blob:
    """A run's state of ``megabytes`` of float32 (DCP's Stateful)."""

    def __init__(self, megabytes: int) -> None:
        self.weight = torch.arange(megabytes * 2**18, dtype=torch.float32)

    def state_dict(self) -> dict:
        return {"weight": self.weight}

    def load_state_dict(self, state: dict) -> None:
        self.weight = state["weight"]


def io_counters() -> dict[str, int]:
    lines = Path("/proc/self/io").read_text().splitlines()
    return {key: int(value) for key, value in (line.split(": ") for line in lines)}


def test_a_save_digests_its_files_as_it_writes_them(one_process, tmp_path: Path) -> None:
    """Every file is in the commit record with the CRC of its bytes on disk, and the save read far less
    than the checkpoint's size (the digest is not taken by reading the files back)."""
    manager = CheckpointManager(tmp_path, state=Blob(64), keep=1)
    before = io_counters()
    manager.save(1)
    after = io_counters()
    manager.close()
    folder = tmp_path / "step-00000001"
    marker = json.loads((folder / COMMIT_MARKER).read_text())
    files = sorted(p.name for p in folder.iterdir() if p.name != COMMIT_MARKER)
    assert marker["digest_algorithm"] == "crc32" and sorted(marker["digests"]) == files == [".metadata", "__0_0.distcp"]
    for name in files:
        assert marker["digests"][name] == checkpoint_digests.file_digest(folder / name)
    size = sum((folder / name).stat().st_size for name in files)
    assert size > 64 * 2**20
    assert after["rchar"] - before["rchar"] < size / 20
    assert after["read_bytes"] - before["read_bytes"] < size / 20


def test_torch_saves_unchecked_zip_crc_gives_way_to_the_digest(tmp_path: Path) -> None:
    """While a digesting stream is open torch.save computes no CRC of its zip records (torch.load checks
    none: the file's digest replaces it, and its CPU time); the setting comes back when the last of two
    overlapping streams closes, and the file loads."""
    save_config = torch.utils.serialization.config.save
    assert save_config.compute_crc32
    fs = checkpoint_digests.DigestingFileSystem()
    with fs.create_stream(tmp_path / "a", "wb") as stream:
        with fs.create_stream(tmp_path / "b", "wb"):
            assert not save_config.compute_crc32
        assert not save_config.compute_crc32
        torch.save(torch.arange(4.0), stream)
    assert save_config.compute_crc32
    with zipfile.ZipFile(tmp_path / "a") as archive:
        assert archive.infolist() and all(info.CRC == 0 for info in archive.infolist())
    assert torch.load(tmp_path / "a").tolist() == [0.0, 1.0, 2.0, 3.0]
    assert fs.digests["a"] == checkpoint_digests.file_digest(tmp_path / "a")


def test_a_checkpoint_from_before_digests_loads_with_a_warning(one_process, tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, state=Blob(1), keep=1)
    manager.save(1)
    manager.close()
    marker_path = tmp_path / "step-00000001" / COMMIT_MARKER
    marker = json.loads(marker_path.read_text())
    del marker["digests"], marker["digest_algorithm"]
    marker_path.write_text(json.dumps(marker))
    records: list[dict] = []
    manager = CheckpointManager(tmp_path, state=Blob(1), keep=1, log=records.append)
    assert manager.restore() == 1
    manager.close()
    (warning,) = [r for r in records if r["event"] == "checkpoint_unverified"]
    assert warning["path"].endswith("step-00000001") and warning["reason"] == "written before digests"


def flip_a_bit(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


def test_a_flipped_bit_is_refused_on_every_rank_and_the_run_falls_back(
    reference_run, checkpoints_after, tmp_path: Path
) -> None:
    """One bit of rank 0's shard of step 6 flipped on disk. Rank 1 checks that file (each rank checks a
    share): its mismatch is agreed, the checkpoint is skipped naming the step and the file, the run
    resumes from step 4 and ends bit-identical to an uninterrupted run; nobody waits for the
    process-group timeout."""
    checkpoints_after(6, tmp_path)
    shard = tmp_path / "step-00000006" / "__0_0.distcp"
    flip_a_bit(shard, shard.stat().st_size // 2)
    started = time.monotonic()
    resumed = train(["--steps=10", f"--checkpoint-dir={tmp_path}", "--checkpoint-every=2", "--pg-timeout-seconds=60"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert time.monotonic() - started < 40
    (skipped,) = [r for r in json_lines(resumed.stdout) if r.get("event") == "checkpoint_skipped"]
    assert skipped["path"].endswith("step-00000006")
    assert "rank 1: DigestMismatch: step 6: __0_0.distcp does not match its digest" in skipped["reason"]
    assert "DigestMismatch: step 6: __0_0.distcp" in resumed.stderr  # the warning line
    final = summary(resumed.stdout)
    assert final["resumed_from"] == 4
    assert final["param_sha256"] == reference_run.summary["param_sha256"]
