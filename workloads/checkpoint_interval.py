"""Optimal checkpoint intervals (Young 1974, Daly 2006). Standard library only.

Shared by the training payload (``--mtbf-hours``) and the ``llm-infra plan`` planner.
"""

from __future__ import annotations

import math


def young_interval(save_stall: float, mtbf: float) -> float:
    """Young's first-order optimum: sqrt(2 * delta * M) (same unit as the inputs)."""
    _check(save_stall, mtbf)
    return math.sqrt(2.0 * save_stall * mtbf)


def daly_interval(save_stall: float, mtbf: float) -> float:
    """Daly's higher-order optimum of the compute time between checkpoints.

    T = sqrt(2 delta M) [1 + (1/3) sqrt(delta / 2M) + (1/9) (delta / 2M)] - delta for delta < 2M,
    else M. (Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart dumps".)
    """
    _check(save_stall, mtbf)
    if save_stall >= 2.0 * mtbf:
        return mtbf
    ratio = save_stall / (2.0 * mtbf)
    return math.sqrt(2.0 * save_stall * mtbf) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - save_stall


def _check(save_stall: float, mtbf: float) -> None:
    if save_stall <= 0:
        raise ValueError(f"checkpoint stall must be > 0, got {save_stall}")
    if mtbf <= 0:
        raise ValueError(f"MTBF must be > 0, got {mtbf}")
