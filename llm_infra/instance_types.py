"""GPU instance profiles: the facts the constructs and charts derive NICs, GPUs and EFA from.

Network-card counts, EFA support, vCPUs and memory follow the EC2 instance-type documentation
(``aws ec2 describe-instance-types --query 'InstanceTypes[].[VCpuInfo,MemoryInfo,NetworkInfo]'``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class EfaLayout(StrEnum):
    """How a launch template lays out the network interfaces of a multi-card instance.

    ``EFA_ONLY`` is the current EC2 guidance (2024+): an ENA primary interface on card 0 /
    device 0, an ``efa-only`` interface on card 0 / device 1, and one ``efa-only`` interface on
    device 0 of every further card. IP traffic stays on the ENA interface and no IPs are spent on
    the EFA interfaces. ``EFA_LEGACY`` is the earlier layout: one ``efa`` (EFA with ENA)
    interface per card, device 0 on card 0 and device 1 on the others.
    """

    EFA_ONLY = "efa-only"
    EFA_LEGACY = "efa-legacy"


@dataclass(frozen=True)
class InstanceProfile:
    """What a GPU instance type offers to a training job."""

    instance_type: str
    gpus: int
    gpu_model: str
    gpu_memory_gib: int
    network_cards: int
    efa_interfaces: int
    default_efa_layout: EfaLayout
    # The all-reduce gate: minimum bus bandwidth (GB/s) at 2 GiB across 2+ nodes (EFA bound) ...
    allreduce_busbw_gbps: float
    vcpus: int  # with two threads per core; HyperPod's ThreadsPerCore=1 halves it
    memory_gib: int
    # ... and within one node (NVLink, or PCIe on g5/g6e). Conservative floors below what nccl-tests
    # reports for healthy nodes; calibrate with your own runs.
    single_node_busbw_gbps: float

    @property
    def efa_supported(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def family(self) -> str:
        return self.instance_type.split(".", 1)[0]


_PROFILES = [
    InstanceProfile("p4d.24xlarge", 8, "A100-40GB", 40, 4, 4, EfaLayout.EFA_LEGACY, 40, 96, 1152, 200),
    InstanceProfile("p4de.24xlarge", 8, "A100-80GB", 80, 4, 4, EfaLayout.EFA_LEGACY, 40, 96, 1152, 200),
    InstanceProfile("p5.48xlarge", 8, "H100", 80, 32, 32, EfaLayout.EFA_ONLY, 375, 192, 2048, 400),
    InstanceProfile("p5e.48xlarge", 8, "H200", 141, 32, 32, EfaLayout.EFA_ONLY, 375, 192, 2048, 400),
    InstanceProfile("p5en.48xlarge", 8, "H200", 141, 16, 16, EfaLayout.EFA_ONLY, 375, 192, 2048, 400),
    # p6-b200: AWS, "Specifications for Amazon EC2 accelerated computing instances"
    # (docs.aws.amazon.com/ec2/latest/instancetypes/ac.html): 8 x NVIDIA B200, 1432 GiB (8 x 179 GiB), 192 vCPUs
    # (96 cores x 2), 2048 GiB, 3200 Gigabit, EFA, 8 network cards, 32 network interfaces. moto 5.2.5's bundled
    # DescribeInstanceTypes data agrees: MaximumEfaInterfaces 8, every card takes interface/efa/efa-only (so card 0
    # carries EFA too: the efa-only layout), 183359 MiB per GPU. Floors: EFA 3200 Gbps as p5/p5en, so their 375 GB/s;
    # NVLink 5 moves 1.8 TB/s per GPU, twice NVLink 4 (NVIDIA's B200 and H100 data sheets), and the floor is 1.5 x
    # H100's 400 GB/s: 600 GB/s, conservative until calibrated on your own nodes.
    InstanceProfile("p6-b200.48xlarge", 8, "B200", 179, 8, 8, EfaLayout.EFA_ONLY, 375, 192, 2048, 600),
    InstanceProfile("g5.12xlarge", 4, "A10G", 24, 1, 1, EfaLayout.EFA_LEGACY, 8, 48, 192, 8),
    InstanceProfile("g5.48xlarge", 8, "A10G", 24, 1, 1, EfaLayout.EFA_LEGACY, 8, 192, 768, 8),
    InstanceProfile("g5.2xlarge", 1, "A10G", 24, 1, 0, EfaLayout.EFA_LEGACY, 1, 8, 32, 1),
    InstanceProfile("g6e.12xlarge", 4, "L40S", 48, 1, 1, EfaLayout.EFA_ONLY, 8, 48, 384, 8),
    InstanceProfile("g6e.48xlarge", 8, "L40S", 48, 4, 4, EfaLayout.EFA_ONLY, 40, 192, 1536, 8),
    InstanceProfile("g6e.2xlarge", 1, "L40S", 48, 1, 0, EfaLayout.EFA_ONLY, 1, 8, 64, 1),
]

INSTANCE_PROFILES: dict[str, InstanceProfile] = {p.instance_type: p for p in _PROFILES}


def instance_profile(instance_type: str) -> InstanceProfile:
    """The profile of a supported GPU instance type; ``ml.`` (SageMaker) names are accepted."""
    name = instance_type.removeprefix("ml.")
    try:
        return INSTANCE_PROFILES[name]
    except KeyError:
        allowed = ", ".join(sorted(INSTANCE_PROFILES))
        why = ultraserver_refusal(instance_type) or f"unknown GPU instance type {instance_type!r}"
        raise ValueError(f"{why}; supported: {allowed}") from None


# GB200 UltraServer nodes (EC2 p6e-gb200.36xlarge, HyperPod ml.p6e-gb200.36xlarge), which HyperPod's API accepts.
ULTRASERVER_FAMILIES = ("p6e-gb200",)


def ultraserver_refusal(instance_type: str) -> str | None:
    """Why this library refuses an UltraServer instance type, or None for any other type."""
    name = instance_type.removeprefix("ml.")
    if name.split(".", 1)[0] not in ULTRASERVER_FAMILIES:
        return None
    return (
        f"{instance_type!r} is a GB200 UltraServer node, which this library does not yet support: its 4 GPUs share "
        "one NVLink domain with the other nodes of the UltraServer (up to 72 GPUs), which needs NVIDIA IMEX channels "
        "on every node and pods placed by NVLink domain (NVIDIA's DRA driver ComputeDomains on EKS), UltraServer "
        "capacity, arm64 (Grace) AMIs and images, and its own EFA layout (17 network cards); none of that is built "
        "or tested here"
    )


def kubelet_reserved_millicpu(vcpus: int) -> float:
    """The CPU (millicores) the kubelet of the EKS-optimized AMI keeps from pods (kube-reserved), as the AMI's
    bootstrap computes it: 6 % of the first core, 1 % of the second, 0.5 % of the next two, 0.25 % of the
    rest. HyperPod's EKS AMI is assumed to reserve the same."""
    return 60 + (10 if vcpus > 1 else 0) + 5 * min(max(vcpus - 2, 0), 2) + 2.5 * max(vcpus - 4, 0)


# vCPUs and GiB of memory of the non-GPU instance types the stacks use (system nodes, HyperPod CPU groups; EC2
# instance-type documentation): the Kueue quota's system flavour and the rehearsal's nodes read them.
CPU_INSTANCE_TYPES: dict[str, tuple[int, int]] = {
    "m7i.xlarge": (4, 16),
    "m7i.2xlarge": (8, 32),
    "m5.xlarge": (4, 16),
    "m5.2xlarge": (8, 32),
    "m5.4xlarge": (16, 64),
    "c5.2xlarge": (8, 16),
    "c5.4xlarge": (16, 32),
}
