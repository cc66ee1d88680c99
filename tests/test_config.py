"""The config: context parsing, defaults, and a clear error for every kind of bad input."""

from __future__ import annotations

import pytest

from llm_infra.config import ConfigError, TrainingConfig
from llm_infra.instance_types import EfaLayout, instance_profile


def from_context(**context: object) -> TrainingConfig:
    return TrainingConfig.from_context(context)


def assert_error(context: dict[str, object], *fragments: str) -> None:
    with pytest.raises(ConfigError) as err:
        TrainingConfig.from_context(context)
    for fragment in fragments:
        assert fragment in str(err.value), str(err.value)


def test_defaults_are_a_p5_cluster_with_efa() -> None:
    config = from_context()
    assert config.compute == "eks"
    assert config.gpu_instance_type == "p5.48xlarge"
    assert config.efa_enabled
    assert config.nic_layout is EfaLayout.EFA_ONLY
    assert (config.gpu_min, config.gpu_nodes, config.gpu_max) == (2, 2, 2)
    assert config.capacity == "on-demand"


def test_cli_strings_are_parsed() -> None:
    # `cdk synth -c gpu_nodes=4 -c efa=false` delivers strings.
    config = from_context(gpu_nodes="4", gpu_nodes_max="8", gpu_nodes_min="0", efa="false", account="")
    assert (config.gpu_min, config.gpu_nodes, config.gpu_max) == (0, 4, 8)
    assert config.efa is False and not config.efa_enabled
    assert config.account is None


def test_cdk_feature_flags_and_lookups_are_ignored() -> None:
    config = from_context(**{"@aws-cdk/core:target-partitions": ["aws"], "availability-zones:x": ["a"]})
    assert config == TrainingConfig()


def test_capacity_reservation_id_implies_reservation_capacity() -> None:
    config = from_context(capacity_reservation_id="cr-0123456789abcdef0")
    assert config.capacity == "capacity-reservation"


@pytest.mark.parametrize(
    ("context", "fragments"),
    [
        ({"gpu_instance_type": "p9.huge"}, ["gpu_instance_type", "'p9.huge'", "p5.48xlarge", "p4d.24xlarge"]),
        ({"gpu_nodes": "0"}, ["gpu_nodes: 0 must be >= 1"]),
        ({"gpu_nodes": "-2"}, ["gpu_nodes: -2 must be >= 1"]),
        ({"gpu_nodes_max": "0"}, ["gpu_nodes_max: 0 must be >= 1"]),
        ({"gpu_nodes_min": "-1"}, ["gpu_nodes_min: -1 must be >= 0"]),
        (
            {"gpu_nodes": "4", "gpu_nodes_min": "6", "gpu_nodes_max": "5"},
            ["gpu_nodes_min: 6 is greater than gpu_nodes_max 5"],
        ),
        ({"gpu_nodes": "9", "gpu_nodes_max": "8"}, ["gpu_nodes: 9 is greater than gpu_nodes_max 8"]),
        (
            {"gpu_nodes": "2", "gpu_nodes_min": "3", "gpu_nodes_max": "4"},
            ["gpu_nodes: 2 is less than gpu_nodes_min 3"],
        ),
        ({"gpu_nodes": "two"}, ["gpu_nodes: expected an integer, got 'two'"]),
        ({"fsx_storage_gib": "2000"}, ["fsx_storage_gib: 2000", "1200 or a multiple of 2400"]),
        ({"fsx_storage_gib": "3600"}, ["fsx_storage_gib: 3600"]),
        ({"fsx_storage_gib": "0"}, ["fsx_storage_gib: 0"]),
        ({"fsx_throughput": "300"}, ["fsx_throughput: 300 is not allowed", "125, 250, 500, 1000"]),
        ({"gpu_az_id": "us-east-1a"}, ["gpu_az_id: 'us-east-1a' is not an AZ ID"]),
        ({"gpu_az_id": "use1-az"}, ["gpu_az_id: 'use1-az' is not an AZ ID"]),
        ({"gpu_az_id": "usw2-az1", "region": "us-east-1"}, ["gpu_az_id: 'usw2-az1' lies in us-west-2"]),
        ({"gpu_instance_type": "g5.2xlarge", "efa": "true"}, ["efa: g5.2xlarge has no EFA", "p5.48xlarge"]),
        ({"efa": "maybe"}, ["efa: expected true or false"]),
        ({"efa_layout": "all-ena"}, ["efa_layout: 'all-ena' is not allowed", "efa-only, efa-legacy"]),
        ({"compute": "slurm"}, ["compute: 'slurm' is not allowed; allowed: eks"]),
        ({"kubernetes_version": "1.20"}, ["kubernetes_version: '1.20' is not allowed", "1.34"]),
        ({"gpu_capacity": "spot"}, ["gpu_capacity: 'spot' is not allowed"]),
        (
            {"gpu_capacity": "capacity-block"},
            ["capacity_reservation_id: required when gpu_capacity is capacity-block"],
        ),
        ({"capacity_reservation_id": "reservation-1"}, ["capacity_reservation_id: 'reservation-1'"]),
        ({"gpu_capacity": "on-demand", "capacity_reservation_id": "cr-0123456789abcdef0"}, ["contradicts"]),
        (
            {"gpu_subnet_cidr": "10.2.0.0/24"},
            ["gpu_subnet_cidr: 10.2.0.0/24 must be a private (RFC 1918) block between /16 and /20"],
        ),
        ({"gpu_subnet_cidr": "10.0.0.0/16"}, ["gpu_subnet_cidr: 10.0.0.0/16 overlaps vpc_cidr"]),
        ({"vpc_cidr": "8.8.0.0/16"}, ["vpc_cidr: 8.8.0.0/16 must be a private"]),
        ({"data_bucket": "Bad_Bucket"}, ["data_bucket: 'Bad_Bucket'"]),
        ({"data_prefix": "/datasets"}, ["data_prefix: '/datasets'"]),
        ({"dlc_image_tag": ""}, ["dlc_image_tag: required"]),
        ({"dlc_image_tag": "latest"}, ["dlc_image_tag: 'latest' is not a DLC pytorch-training GPU tag"]),
        (
            {"compute": "hyperpod", "dlc_image_tag": "2.12.0-gpu-py312-cu130-ubuntu24.04-ec2"},
            ["dlc_image_tag:", "PyTorch 2.12", "hyperpod_training_operator=false"],
        ),
        ({"compute": "hyperpod", "hyperpod_node_provisioning": "fast"}, ["allowed: continuous, standard"]),
        (
            {"compute": "hyperpod", "hyperpod_cpu_nodes": "0"},
            [
                "hyperpod_cpu_nodes: 0 leaves the HyperPod training operator's controller no node",
                "allowed: 1 or more",
                "hyperpod_training_operator=false",
            ],
        ),
        ({"compute": "hyperpod", "hyperpod_cpu_nodes": "-1"}, ["hyperpod_cpu_nodes: -1 must be >= 0"]),
        (
            {"compute": "hyperpod", "hyperpod_training_plan_arn": "p5-plan"},
            ["hyperpod_training_plan_arn: 'p5-plan' is not a SageMaker training plan ARN"],
        ),
        ({"existing_vpc_id": "vpc-1"}, ["existing_vpc_id: 'vpc-1' is not an id such as vpc-0123456789abcdef0"]),
        ({"install_addons": "vpc-cni"}, ["install_addons: only with existing_cluster_name"]),
        ({"operators": "helm"}, ["operators: 'helm' is not allowed; allowed: aws-helm-stack, none"]),
        ({"account": "12345"}, ["account: '12345' must be a 12-digit"]),
        ({"admin_role_arn": "arn:aws:iam::123456789012:user/bob"}, ["admin_role_arn"]),
        ({"gpu_node": "4"}, ["gpu_node: unknown config key", "gpu_nodes"]),
    ],
)
def test_bad_input_names_the_key_and_what_is_allowed(context: dict[str, object], fragments: list[str]) -> None:
    assert_error(context, *fragments)


def test_all_errors_are_reported_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        from_context(gpu_nodes="0", fsx_throughput="7", gpu_az_id="nope")
    message = str(err.value)
    assert message.count("\n  - ") == 3


def test_with_revalidates() -> None:
    with pytest.raises(ConfigError, match="gpu_nodes: 0"):
        TrainingConfig().with_(gpu_nodes=0)


def test_instance_profiles_carry_the_nic_layout() -> None:
    assert instance_profile("p5.48xlarge").efa_interfaces == 32
    assert instance_profile("ml.p5.48xlarge").network_cards == 32
    assert instance_profile("p5en.48xlarge").efa_interfaces == 16
    assert instance_profile("p4d.24xlarge").default_efa_layout is EfaLayout.EFA_LEGACY
    assert not instance_profile("g5.2xlarge").efa_supported
    with pytest.raises(ValueError, match="unknown GPU instance type 'x1.big'"):
        instance_profile("x1.big")


def test_operators_unset_is_a_string_for_every_reader() -> None:
    # Unset, operators is derived (aws-helm-stack on a cluster the app creates); readers compare strings.
    assert from_context().operators == "aws-helm-stack"
    assert from_context(operators="").operators == "aws-helm-stack"
    assert from_context(operators="none").operators == "none"
    assert TrainingConfig() == TrainingConfig(operators="aws-helm-stack")
