"""Which device and collective backend this process uses: NCCL on a GPU, gloo on CPU."""

from __future__ import annotations

import os

import torch


def device_and_backend() -> tuple[torch.device, str]:
    """The local GPU (``LOCAL_RANK``) with NCCL when CUDA is available, else the CPU with gloo."""
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        return device, "nccl"
    return torch.device("cpu"), "gloo"
