"""Which rank is late (issue 30, item 8): when the per-step agreement times out, the survivors name the ranks
(and hosts) that did not arrive; the heartbeat names the slowest rank by its own work time, and while the
loop is stalled, the ranks it waits for."""

from __future__ import annotations

import json
import socket

from .conftest import SMALL


def test_a_hung_rank_is_named_by_the_survivors_and_the_heartbeat(torch_launch) -> None:
    args = [*SMALL, "--steps=8", "--pg-timeout-seconds=5", "--throughput-interval-s=1"]
    result = torch_launch.run("train.py", [*args, "--fail-hang-at-step=3", "--fail-rank=1"], timeout=240)
    assert result.returncode != 0
    assert '"kind": "hang"' in result.stderr  # the fault really fired
    (late,) = [json.loads(line) for line in result.stderr.splitlines() if '"event": "late_ranks"' in line]
    host = socket.gethostname()
    assert late["rank"] == 0
    # Rank 0 waits in FSDP's first all-gather of step 4; rank 1 hangs before it.
    assert late["reason"].startswith(
        f"waiting at the forward of step 4 for rank 1 on {host} (last at the agreement of step 3)"
    )
    beats = [json.loads(line) for line in result.stdout.splitlines() if '"event": "throughput"' in line]
    assert any(b.get("slowest_host") == host and b["slowest_rank"] in (0, 1) for b in beats), beats
    stalled = [b for b in beats if b["tokens_per_s"] == 0 and "waiting" in b]
    assert stalled and stalled[-1]["waiting"].startswith("waiting at the forward of step 4 for rank 1 on"), beats
