"""The throughput heartbeat: tokens/s per interval, its ratio to the recent median, and a stall reads 0."""

from __future__ import annotations

import pytest

from llm_infra.workloads.throughput import ThroughputMonitor

from .conftest import SMALL, json_lines, run_torchrun


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_ratio_to_recent_median_and_a_stall_reads_zero() -> None:
    clock, records = FakeClock(), []
    monitor = ThroughputMonitor(records.append, interval_s=60, window=3, clock=clock)
    for tokens in (6000, 6000, 12000):  # 100, 100, 200 tokens/s
        monitor.add(tokens, step=1)
        clock.now += 60
        monitor.tick()
    assert [r["tokens_per_s"] for r in records] == [100.0, 100.0, 200.0]
    assert "vs_median" not in records[0]  # no history yet
    assert records[1]["vs_median"] == 1.0
    assert records[2]["vs_median"] == 2.0
    monitor.add(3000, step=2)  # 50 tokens/s: half of the median of (100, 100, 200)
    clock.now += 60
    assert monitor.tick()["vs_median"] == 0.5
    clock.now += 60  # no step finished: a hung collective
    stalled = monitor.tick()
    assert stalled["tokens_per_s"] == 0.0 and stalled["vs_median"] == 0.0 and stalled["step"] == 2
    clock.now += 60
    assert monitor.tick()["vs_median"] == 0.0  # stalled intervals do not lower the baseline


def test_bad_settings_are_errors() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        ThroughputMonitor(print, interval_s=0)


def test_training_logs_heartbeats(tmp_path) -> None:
    result = run_torchrun("train.py", [*SMALL, "--steps=12", "--throughput-interval-s=0.1"])
    assert result.returncode == 0, result.stderr[-2000:]
    beats = [r for r in json_lines(result.stdout) if r["event"] == "throughput"]
    assert beats, result.stdout[-2000:]
    assert all(r["tokens_per_s"] >= 0 and "time" in r for r in beats)
    assert any(r["tokens_per_s"] > 0 for r in beats)
