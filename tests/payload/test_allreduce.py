"""allreduce_bench.py on 2 CPU ranks (gloo): bandwidth math, JSON output and the gate."""

from __future__ import annotations

import pytest

from llm_infra.workloads import allreduce_bench

from .conftest import json_lines, run_torchrun

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


# NCCL INFO lines as NCCL 2.2x with aws-ofi-nccl prints them (channel connections, one per line).
EFA_LOG = """\
ip-10-1-0-12:431:520 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 32 nics)
ip-10-1-0-12:431:520 [0] NCCL INFO Using network Libfabric
ip-10-1-0-12:431:520 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/Libfabric/0/GDRDMA
ip-10-1-0-12:431:520 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/Libfabric/1/GDRDMA
"""
SOCKET_LOG = """\
ip-10-1-0-12:431:520 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.0.12<0>
ip-10-1-0-12:431:520 [0] NCCL INFO Using network Socket
ip-10-1-0-12:431:520 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/Socket/0
"""
NO_GDR_LOG = "ip-10-1-0-12:431:520 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/3\n"


def test_the_transport_gate_reads_nccls_channels() -> None:
    assert allreduce_bench.transport_problems(allreduce_bench.network_transport(EFA_LOG)) == []
    socket = allreduce_bench.transport_problems(allreduce_bench.network_transport(SOCKET_LOG))
    assert socket == [
        "NCCL fell back to sockets (NET/Socket)",
        "no channel on the OFI plugin (aws-ofi-nccl / EFA)",
    ]
    assert allreduce_bench.transport_problems(allreduce_bench.network_transport(NO_GDR_LOG)) == [
        "channels without GPUDirect RDMA"
    ]
    # A run that never connected across nodes shows no EFA channel: not a pass.
    assert allreduce_bench.transport_problems(allreduce_bench.network_transport("")) == [
        "no channel on the OFI plugin (aws-ofi-nccl / EFA)"
    ]
