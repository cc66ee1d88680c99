"""AWS service rules that both the config and the constructs enforce (plain data, no CDK import)."""

from __future__ import annotations

# FSx for Lustre PERSISTENT_2
FSX_PERSISTENT_2_THROUGHPUTS = (125, 250, 500, 1000)  # MB/s per TiB


def fsx_persistent_2_capacity_ok(gib: int) -> bool:
    """PERSISTENT_2 takes 1200 GiB or a multiple of 2400 GiB."""
    return gib == 1200 or (gib > 0 and gib % 2400 == 0)


FSX_PERSISTENT_2_CAPACITY_RULE = "1200 or a multiple of 2400"

# SageMaker HyperPod
HYPERPOD_DEEP_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity")
HYPERPOD_DEEP_HEALTH_CHECK_FAMILIES = ("p4d", "p4de", "p5", "p5e", "p5en")
HYPERPOD_NODE_RECOVERY = ("Automatic", "None")
