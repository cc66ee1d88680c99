"""allreduce_bench.py on 2 CPU ranks (gloo): bandwidth math, JSON output and the gate."""

from __future__ import annotations

import sys

import pytest

from .conftest import WORKLOADS, json_lines, run_torchrun

sys.path.insert(0, str(WORKLOADS))
import allreduce_bench  # noqa: E402

pytestmark = pytest.mark.torch


def test_bus_bandwidth_and_sizes() -> None:
    assert allreduce_bench.bus_bandwidth(100.0, 16) == pytest.approx(187.5)  # 2(n-1)/n
    assert allreduce_bench.bus_bandwidth(100.0, 1) == 100.0
    assert allreduce_bench.parse_size("2G") == 2 * 2**30
    assert allreduce_bench.parse_size("512m") == 512 * 2**20
    with pytest.raises(Exception, match="use bytes"):
        allreduce_bench.parse_size("two gigs")


def test_gloo_run_reports_each_size_and_gates() -> None:
    passed = run_torchrun("allreduce_bench.py", ["--sizes=64K,1M", "--iters=3", "--warmup=1", "--json"])
    assert passed.returncode == 0, passed.stderr[-2000:]
    records = json_lines(passed.stdout)
    assert [r["size_bytes"] for r in records[:-1]] == [64 * 1024, 1024 * 1024]
    for r in records[:-1]:
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"], rel=0.01)  # n=2: busbw = algbw
    assert records[-1]["verdict"] == "pass" and records[-1]["world_size"] == 2
    failed = run_torchrun("allreduce_bench.py", ["--sizes=64K", "--iters=2", "--min-busbw-gbps=100000", "--json"])
    assert failed.returncode != 0
    assert json_lines(failed.stdout)[-1]["verdict"] == "fail"
