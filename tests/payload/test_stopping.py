"""The stop request (workloads/stopping.py) in one process: which signals ask, what they record.

SIGUSR1 is hyperpodrun's graceful stop (hyperpod-elastic-agent 1.1.3, plr_hyperpod_elastic_agent.py
``_stop_workers``); Python's default for it ends the process at once. The launchers' own tests are in
test_hyperpodrun.py.
"""

from __future__ import annotations

import math
import os
import signal
import time

import pytest

from llm_infra.workloads import stopping

pytestmark = pytest.mark.torch


@pytest.fixture
def restore_handlers():
    saved = {signum: signal.getsignal(signum) for signum in stopping.STOP_SIGNALS}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_sigterm_and_sigusr1_both_request_the_stop(restore_handlers, signum: signal.Signals) -> None:
    stop = stopping.StopSignal(budget_seconds=30.0).on_stop_signals()
    assert not stop.requested and stop.remaining_seconds() == math.inf
    os.kill(os.getpid(), signum)  # the handler runs before kill returns to Python (same thread)
    assert stop.requested
    assert stop.signal_name == signum.name and stop.reason == signum.name
    assert 0 < stop.remaining_seconds() <= 30.0


def test_the_first_signal_counts(restore_handlers) -> None:
    stop = stopping.StopSignal(budget_seconds=30.0).on_stop_signals()
    os.kill(os.getpid(), signal.SIGUSR1)
    first = stop.requested_at
    time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGTERM)  # e.g. the pod's deletion after a graceful stop
    assert stop.requested_at == first and stop.signal_name == "SIGUSR1"


def test_on_sigterm_keeps_working_and_takes_sigusr1_too(restore_handlers) -> None:
    # train.py's main() calls on_sigterm(): it must not leave SIGUSR1 at its default (death).
    stop = stopping.StopSignal(budget_seconds=30.0).on_sigterm()
    for signum in (signal.SIGTERM, signal.SIGUSR1):
        assert signal.getsignal(signum) == stop._handle


def test_a_rank_without_a_signal_reports_a_peers_request_and_an_unbounded_budget_is_null() -> None:
    stop = stopping.StopSignal(budget_seconds=math.inf)  # Ray Train: no signal, no SIGKILL to plan for
    assert stop.reason == "peer" and stop.known_budget_seconds is None
    assert stopping.StopSignal(budget_seconds=30.0).known_budget_seconds == 30.0
