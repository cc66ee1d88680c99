"""Which device and collective backend this process uses (NCCL on a GPU, gloo on CPU), and how it exits."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

import torch
import torch.distributed as dist

# torchrun SIGKILLs its workers this long after forwarding SIGTERM: hard-coded where its LaunchConfig has no
# `shutdown_timeout` (torch 2.8, the DLC's: `PContext.close(timeout=30)`, whatever the pod's
# TORCH_ELASTIC_SHUTDOWN_TIMEOUT says); else the default of `--shutdown-timeout` / TORCH_ELASTIC_SHUTDOWN_TIMEOUT.
TORCHRUN_DEFAULT_SHUTDOWN_SECONDS = 30.0
# hyperpodrun (hyperpod-elastic-agent 1.1.3, run.py) has its own `--shutdown-timeout` on the torch it supports
# (< 2.12: torch 2.8's SimpleElasticAgent.run passes no timeout to the agent's _shutdown; default 15 s; it does
# not read TORCH_ELASTIC_SHUTDOWN_TIMEOUT). Its graceful stop (the operator's /stop with
# is_graceful: SIGUSR1) waits for the request's `timeout` instead when one is given, and that number stays in
# the agent (server.py _api_stop -> _shutdown -> pcontext.close): no worker can learn it. Its workers are told
# apart by the agent's socket path, which elastic_agent/hyperpod_elastic_agent.py `_start_workers` sets for each.
HYPERPODRUN_DEFAULT_SHUTDOWN_SECONDS = 15.0
HYPERPODRUN_WORKER_ENV = "HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH"


def device_and_backend() -> tuple[torch.device, str]:
    """The local GPU (``LOCAL_RANK``) with NCCL when CUDA is available, else the CPU with gloo."""
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        return device, "nccl"
    return torch.device("cpu"), "gloo"


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def exit_process(code: int) -> NoReturn:
    """Flush stdout/stderr and end the process without interpreter teardown.

    A process group's worker threads drop their last reference to a finished collective (and
    its tensors) after the caller has seen it complete; if that happens while Python finalizes,
    the thread cannot take the GIL and the process aborts ("terminate called without an active
    exception", SIGABRT), so torchrun reports a finished run as failed. Seen with gloo in about
    one run in ten after a restart; ``os._exit`` skips the finalization that races.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def reduce_numbers(
    values: Sequence[float | torch.Tensor],
    device: torch.device,
    op: dist.ReduceOp.RedOpType = dist.ReduceOp.SUM,
) -> list[float]:
    """All-reduce a few numbers over the default group, in a tensor on the training device.

    NCCL takes device tensors only ("No backend type associated with device type cpu"); gloo takes
    both, so a CPU run cannot tell. Every small collective of the payload goes through here. A value
    may be a one-element tensor already on the device (a step's loss): it joins without a host sync, and
    the one sync is reading the result.
    """
    tensor = torch.stack(
        [
            v.detach().reshape(()).to(device=device, dtype=torch.float64)
            if isinstance(v, torch.Tensor)
            else torch.tensor(float(v), dtype=torch.float64, device=device)
            for v in values
        ]
    )
    dist.all_reduce(tensor, op=op)
    return [float(v) for v in tensor.tolist()]


def shutdown_budget_seconds() -> float:
    """Seconds between the launcher's stop signal (SIGTERM; hyperpodrun's graceful SIGUSR1) and its SIGKILL
    of this worker.

    TORCH_ELASTIC_SHUTDOWN_TIMEOUT where the launcher honours it: torchrun when its LaunchConfig has
    ``shutdown_timeout`` (torch 2.8's has none: 30 s); hyperpodrun, whose ``--shutdown-timeout`` the HyperPod
    job sets to the same value (k8s_manifests/hyperpod_job.py). Else the launcher's default. A graceful
    ``/stop`` with its own ``timeout`` gets that instead, unseen here: a shorter one can kill a final save
    midway (never committed: the run resumes from the checkpoint before), a longer one is left unused.
    """
    value = os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")
    if os.environ.get(HYPERPODRUN_WORKER_ENV):
        return float(value) if value else HYPERPODRUN_DEFAULT_SHUTDOWN_SECONDS
    from torch.distributed.launcher.api import LaunchConfig

    configurable = any(f.name == "shutdown_timeout" for f in dataclasses.fields(LaunchConfig))
    return float(value) if configurable and value else TORCHRUN_DEFAULT_SHUTDOWN_SECONDS
