"""Defaults in one place: the config's defaults (llm_infra/config.py's DEFAULT_* constants, its dataclass)
and the constructs' keyword defaults agree, and the constructs read the constants instead of repeating them."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

from conftest import REPO_ROOT
from llm_infra import config as config_module
from llm_infra.config import TrainingConfig
from llm_infra.constructs.gpu_node_group import GpuNodeGroup
from llm_infra.constructs.hyperpod_cluster import HyperPodCluster, HyperPodInstanceGroup
from llm_infra.constructs.lustre_storage import LustreStorage
from llm_infra.constructs.training_cluster import ExistingTrainingCluster, TrainingCluster
from llm_infra.constructs.training_observability import TrainingObservability
from llm_infra.constructs.training_vpc import TrainingVpc

DEFAULT = TrainingConfig()


def default_of(function: Callable[..., Any], parameter: str) -> Any:
    return inspect.signature(function).parameters[parameter].default


# (construct callable, keyword) -> what the default config has for it
AGREEMENTS: list[tuple[Callable[..., Any], str, Any]] = [
    (TrainingVpc.__init__, "cidr", DEFAULT.vpc_cidr),
    (TrainingVpc.__init__, "gpu_subnet_cidr", DEFAULT.gpu_subnet_cidr),
    (TrainingVpc.from_existing, "gpu_subnet_cidr", DEFAULT.gpu_subnet_cidr),
    (TrainingCluster.__init__, "kubernetes_version", DEFAULT.kubernetes_version),
    (TrainingCluster.__init__, "system_instance_type", DEFAULT.system_instance_type),
    (TrainingCluster.__init__, "system_nodes", DEFAULT.system_nodes),
    (TrainingCluster.__init__, "endpoint_access", DEFAULT.endpoint_access),
    (TrainingCluster.__init__, "gpu_instance_types", (DEFAULT.gpu_instance_type,)),
    (TrainingCluster.from_existing, "kubernetes_version", DEFAULT.kubernetes_version),
    (TrainingCluster.from_existing, "system_instance_type", DEFAULT.system_instance_type),
    (TrainingCluster.from_existing, "system_nodes", DEFAULT.system_nodes),
    (ExistingTrainingCluster.__init__, "kubernetes_version", DEFAULT.kubernetes_version),
    (ExistingTrainingCluster.__init__, "system_nodes", DEFAULT.system_nodes),
    (GpuNodeGroup.__init__, "desired_size", DEFAULT.gpu_nodes),
    (GpuNodeGroup.__init__, "root_volume_gib", DEFAULT.gpu_root_volume_gib),
    (GpuNodeGroup.__init__, "hugepages_2mib", DEFAULT.hugepages_2mib),
    (GpuNodeGroup.__init__, "capacity", DEFAULT.capacity),
    (GpuNodeGroup.__init__, "placement_group", DEFAULT.placement_group),
    (LustreStorage.__init__, "data_prefix", DEFAULT.data_prefix),
    (LustreStorage.__init__, "storage_capacity_gib", DEFAULT.fsx_storage_gib),
    (LustreStorage.__init__, "throughput_per_tib", DEFAULT.fsx_throughput),
    (HyperPodCluster.__init__, "node_recovery", DEFAULT.hyperpod_node_recovery),
    (HyperPodCluster.__init__, "continuous_provisioning", DEFAULT.hyperpod_node_provisioning == "continuous"),
    (TrainingObservability.__init__, "stall_fraction", DEFAULT.stall_percent / 100),
    (TrainingObservability.__init__, "stall_minutes", DEFAULT.stall_minutes),
    (TrainingObservability.__init__, "fsx_free_percent", DEFAULT.fsx_free_alarm_percent),
]


@pytest.mark.parametrize(
    ("function", "parameter", "expected"),
    AGREEMENTS,
    ids=[f"{f.__qualname__}:{p}" for f, p, _ in AGREEMENTS],
)
def test_construct_defaults_are_the_configs(function: Callable[..., Any], parameter: str, expected: Any) -> None:
    assert default_of(function, parameter) == expected


def test_the_hyperpod_gpu_group_defaults_are_the_configs() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(HyperPodInstanceGroup)}
    assert defaults["instance_type"] == f"ml.{DEFAULT.gpu_instance_type}"
    assert defaults["count"] == DEFAULT.gpu_nodes
    assert defaults["storage_volumes_gib"] == (DEFAULT.gpu_root_volume_gib,)
    assert defaults["deep_health_checks"] == DEFAULT.hyperpod_health_checks


def test_each_constant_is_a_config_default() -> None:
    """Every DEFAULT_* constant is the default of the config key of its name."""
    constants = {name: value for name, value in vars(config_module).items() if name.startswith("DEFAULT_")}
    fields = {f.name: f.default for f in dataclasses.fields(TrainingConfig)}
    assert constants
    for name, value in constants.items():
        assert fields[name.removeprefix("DEFAULT_").lower()] == value, name


# Literal repeats of a config default in a construct signature (`= 1200`, `= "m7i.xlarge"`, ...).
REPEATS = {
    f'"{value}"' if isinstance(value, str) else str(value)
    for name, value in vars(config_module).items()
    if name.startswith("DEFAULT_") and isinstance(value, str | int) and value not in (2, 10)
}


def test_no_construct_signature_repeats_a_config_default() -> None:
    assert '"m7i.xlarge"' in REPEATS and "1200" in REPEATS
    found = [
        f"{path.name}: {match.group(0).strip()}"
        for path in sorted((REPO_ROOT / "constructs").glob("*.py"))
        for match in re.finditer(r"^\s+\w+: [^=\n]+ = (?P<value>[^,\n]+),?$", path.read_text(), re.M)
        if match["value"].strip() in REPEATS
    ]
    assert found == []
