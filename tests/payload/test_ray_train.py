"""ray_train.py under Ray Train locally: 2 CPU workers, an injected failure, a resume from checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import WORKLOADS

pytestmark = pytest.mark.ray


def test_failure_is_retried_and_resumes_from_the_latest_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("ray.train")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "ray_train.py",
            f"--storage-path={tmp_path}",
            "--num-workers=2",
            "--steps=20",
            "--checkpoint-every=5",
            "--fail-at-step=12",
            "--max-failures=1",
        ],
        cwd=WORKLOADS,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["error"] is None
    assert summary["step"] == 20
    assert summary["resumed_from"] == 10  # the failure at step 12 resumed from the step-10 checkpoint
    assert (tmp_path / "ray-train" / ".fault-injected").read_text() == "12"
    assert Path(summary["checkpoint"]).is_relative_to(tmp_path)
