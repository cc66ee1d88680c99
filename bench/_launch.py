"""What the bench scripts share: run one launcher to the end, bounded, killing its whole process group."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def run_bounded(
    command: list[str], *, env: dict[str, str], timeout: float, what: str, cwd: Path | None = None
) -> tuple[str, str, int]:
    """``command``'s (stdout, stderr, pid); SystemExit naming ``what`` when it runs past ``timeout`` s or fails."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise SystemExit(f"{what} ran past {timeout} s:\n{stderr[-3000:]}") from None
    if process.returncode != 0:
        raise SystemExit(f"{what} failed ({process.returncode}):\n{stderr[-3000:]}")
    return stdout, stderr, process.pid
