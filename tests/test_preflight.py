"""`llm-infra preflight`: each check against botocore's Stubber on the real service models (moto 5.2.5 has no
ListServiceQuotas, DescribeAddonVersions or DescribeCapacityReservations), the command end to end on the repo's
cdk.json, and the one-line errors of a run without credentials, region, profile or network."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from conftest import ACCOUNT, REGION, REPO_ROOT, app_config, run_cli
from llm_infra.cli.commands import preflight as preflight_command
from llm_infra.config import TrainingConfig
from llm_infra.input_files import BadInput
from llm_infra.preflight import checks as preflight
from llm_infra.preflight import create_only
from llm_infra.preflight.checks import FAIL, PASS, SKIP, WARN, QuotaBook
from llm_infra.rehearsal import ports
from llm_infra.stacks.training_app import add_training_stacks
from llm_infra.versions import EKS_ADDONS, HYPERPOD_TASK_GOVERNANCE_ADDONS, HYPERPOD_TRAINING_OPERATOR_ADDONS

RESERVATION = "cr-0123456789abcdef0"


def stubbed(service: str) -> tuple[Any, Stubber]:
    client = boto3.client(
        service,
        region_name=REGION,
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"max_attempts": 1}),
    )
    return client, Stubber(client)


_assemblies: dict[Any, Path] = {}


@pytest.fixture(scope="module")
def synthesized(extra_synth: None, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``synthesized(**context)`` -> the cdk.out folder of the app for the repo's cdk.json plus ``context``
    (cdk-nag off: these tests read templates), synthesized once per config."""

    def _synth(**changes: str) -> Path:
        config = app_config(**changes)
        if config not in _assemblies:
            outdir = tmp_path_factory.mktemp("cdk.out")
            app = cdk.App(outdir=str(outdir), builtin_cloud_formation_validation=False)
            add_training_stacks(app, config, nag=False)
            app.synth()
            _assemblies[config] = outdir
        return _assemblies[config]

    return _synth


def quota(name: str, code: str, value: float) -> dict[str, Any]:
    return {"QuotaName": name, "QuotaCode": code, "Value": value, "ServiceCode": "x"}


def instance_type(name: str, vcpus: int, *, efa: int = 0, cards: int = 1, card0_interfaces: int = 2) -> dict[str, Any]:
    network: dict[str, Any] = {
        "EfaSupported": efa > 0,
        "MaximumNetworkCards": cards,
        "NetworkCards": [
            {"NetworkCardIndex": i, "MaximumNetworkInterfaces": card0_interfaces if i == 0 else 1} for i in range(cards)
        ],
    }
    if efa:
        network["EfaInfo"] = {"MaximumEfaInterfaces": efa}
    return {"InstanceType": name, "VCpuInfo": {"DefaultVCpus": vcpus}, "NetworkInfo": network}


P5 = instance_type("p5.48xlarge", 192, efa=32, cards=32)
OFFERING_PARAMS = {
    "LocationType": "availability-zone-id",
    "Filters": [
        {"Name": "location", "Values": ["use1-az4"]},
        {"Name": "instance-type", "Values": ["p5.48xlarge"]},
    ],
}


# ---- availability zone and offering -----------------------------------------------------------
def test_az_available_in_the_account_passes() -> None:
    ec2, stub = stubbed("ec2")
    zone = {"ZoneName": "us-east-1a", "ZoneId": "use1-az4", "State": "available", "RegionName": REGION}
    stub.add_response("describe_availability_zones", {"AvailabilityZones": [zone]}, {"ZoneIds": ["use1-az4"]})
    with stub:
        result = preflight.check_availability_zone(ec2, app_config(), REGION)
    assert (result.status, result.detail) == (PASS, "use1-az4 is us-east-1a in this account, available")


def test_az_of_another_region_fails_before_asking_aws() -> None:
    ec2, stub = stubbed("ec2")  # nothing queued: any call would raise
    with stub:
        result = preflight.check_availability_zone(ec2, app_config(), "us-west-2")
    assert result.status == FAIL
    assert "lies in us-east-1, the deploy goes to us-west-2" in result.detail
    assert "--region us-east-1" in result.fix


def test_az_unknown_to_the_region_fails() -> None:
    ec2, stub = stubbed("ec2")
    stub.add_client_error(
        "describe_availability_zones", "InvalidParameterValue", "The zone ID 'use1-az9' does not exist"
    )
    with stub:
        result = preflight.check_availability_zone(ec2, app_config(gpu_az_id="use1-az9"), REGION)
    assert result.status == FAIL
    assert "has no availability zone use1-az9" in result.detail


def test_instance_type_offered_in_the_az_passes() -> None:
    ec2, stub = stubbed("ec2")
    offering = {"InstanceType": "p5.48xlarge", "LocationType": "availability-zone-id", "Location": "use1-az4"}
    stub.add_response("describe_instance_type_offerings", {"InstanceTypeOfferings": [offering]}, OFFERING_PARAMS)
    with stub:
        result = preflight.check_instance_offering(ec2, app_config())
    assert (result.status, result.detail) == (PASS, "p5.48xlarge is offered in use1-az4")


def test_instance_type_not_offered_names_the_azs_that_offer_it() -> None:
    ec2, stub = stubbed("ec2")
    stub.add_response("describe_instance_type_offerings", {"InstanceTypeOfferings": []}, OFFERING_PARAMS)
    elsewhere = [
        {"InstanceType": "p5.48xlarge", "LocationType": "availability-zone-id", "Location": az}
        for az in ("use1-az6", "use1-az2")
    ]
    stub.add_response(
        "describe_instance_type_offerings",
        {"InstanceTypeOfferings": elsewhere},
        {"LocationType": "availability-zone-id", "Filters": [{"Name": "instance-type", "Values": ["p5.48xlarge"]}]},
    )
    with stub:
        result = preflight.check_instance_offering(ec2, app_config(compute="hyperpod"))
    assert result.status == FAIL
    assert "proxy for HyperPod's ml.p5.48xlarge" in result.detail
    assert result.fix == "-c gpu_az_id=use1-az2 (offered in: use1-az2, use1-az6)"


# ---- EFA -----------------------------------------------------------------------------------------
def test_efa_layout_fits_the_instance_type() -> None:
    ec2, stub = stubbed("ec2")
    stub.add_response("describe_instance_types", {"InstanceTypes": [P5]}, {"InstanceTypes": ["p5.48xlarge"]})
    with stub:
        result = preflight.check_efa(ec2, app_config())
    assert result.status == PASS
    assert "up to 32 EFA interfaces on 32 network cards; the efa-only layout attaches 32" in result.detail


def test_efa_fails_when_the_type_takes_fewer_interfaces_than_the_layout() -> None:
    ec2, stub = stubbed("ec2")
    fewer = instance_type("p5.48xlarge", 192, efa=16, cards=16, card0_interfaces=1)
    stub.add_response("describe_instance_types", {"InstanceTypes": [fewer]})
    with stub:
        result = preflight.check_efa(ec2, app_config())
    assert result.status == FAIL
    assert "at most 16 EFA interfaces, the efa-only layout attaches 32" in result.detail
    assert "16 network cards" in result.detail
    assert "network card 0 takes 1 interface" in result.detail


@pytest.mark.parametrize("changes", [{"efa": "false"}, {"compute": "hyperpod"}])
def test_efa_skipped_without_our_layout(changes: dict[str, str]) -> None:
    ec2, stub = stubbed("ec2")
    with stub:
        assert preflight.check_efa(ec2, app_config(**changes)).status == SKIP


# ---- capacity reservation ---------------------------------------------------------------------------
def reservation(**changes: Any) -> dict[str, Any]:
    return {
        "CapacityReservationId": RESERVATION,
        "InstanceType": "p5.48xlarge",
        "AvailabilityZoneId": "use1-az4",
        "TotalInstanceCount": 4,
        "AvailableInstanceCount": 4,
        "State": "active",
        "ReservationType": "default",
        **changes,
    }


def reservation_check(found: dict[str, Any], **changes: str) -> preflight.CheckResult:
    ec2, stub = stubbed("ec2")
    stub.add_response(
        "describe_capacity_reservations", {"CapacityReservations": [found]}, {"CapacityReservationIds": [RESERVATION]}
    )
    config = app_config(capacity_reservation_id=RESERVATION, **changes)
    with stub:
        return preflight.check_capacity_reservation(ec2, config)


def test_active_reservation_with_room_passes() -> None:
    result = reservation_check(reservation())
    assert result.status == PASS
    assert "active, 4 of 4 free >= gpu_nodes 2" in result.detail


def test_scheduled_capacity_block_warns_with_its_start() -> None:
    start = datetime.datetime(2027, 3, 1, 11, 30, tzinfo=datetime.UTC)
    block = reservation(State="scheduled", ReservationType="capacity-block", AvailableInstanceCount=0, StartDate=start)
    result = reservation_check(block, gpu_capacity="capacity-block")
    assert result.status == WARN
    assert "scheduled: starts 2027-03-01T11:30:00+00:00" in result.detail


def test_reservation_in_another_az_and_too_small_fails_with_each_fix() -> None:
    result = reservation_check(reservation(AvailabilityZoneId="use1-az6", AvailableInstanceCount=1), gpu_nodes="2")
    assert result.status == FAIL
    assert "lies in use1-az6, not in gpu_az_id use1-az4" in result.detail
    assert "has 1 of 4 instances free, gpu_nodes is 2" in result.detail
    assert "-c gpu_az_id=use1-az6" in result.fix and "-c gpu_nodes=1" in result.fix


def test_expired_reservation_of_another_type_fails() -> None:
    result = reservation_check(reservation(State="expired", InstanceType="p4d.24xlarge"))
    assert result.status == FAIL
    assert "reserves p4d.24xlarge, not p5.48xlarge" in result.detail and "is expired" in result.detail


def test_unknown_reservation_fails() -> None:
    ec2, stub = stubbed("ec2")
    stub.add_client_error(
        "describe_capacity_reservations", "InvalidCapacityReservationId.NotFound", "not found", http_status_code=400
    )
    with stub:
        result = preflight.check_capacity_reservation(ec2, app_config(capacity_reservation_id=RESERVATION))
    assert result.status == FAIL
    assert "no such capacity reservation" in result.detail


# ---- quotas ---------------------------------------------------------------------------------------------------
def queue_listing(stub: Stubber, operation: str, service_code: str, pages: list[list[dict[str, Any]]]) -> None:
    for i, quotas in enumerate(pages):
        response: dict[str, Any] = {"Quotas": quotas}
        params: dict[str, Any] = {"ServiceCode": service_code, "MaxResults": 100}
        if i + 1 < len(pages):
            response["NextToken"] = f"page-{i + 2}"
        if i:
            params["NextToken"] = f"page-{i + 1}"
        stub.add_response(operation, response, params)


def test_hyperpod_gpu_quota_matched_by_name_across_pages_fails_below_gpu_nodes() -> None:
    client, stub = stubbed("service-quotas")
    queue_listing(
        stub,
        "list_service_quotas",
        "sagemaker",
        [
            [quota("ml.p5.48xlarge for spot cluster usage", "L-11111111", 64)],
            [quota("ml.p5.48xlarge for cluster usage", "L-8762A75F", 2)],
        ],
    )
    with stub:
        result = preflight.check_hyperpod_gpu_quota(
            QuotaBook(client), app_config(compute="hyperpod", gpu_nodes="4"), REGION
        )
    assert result.status == FAIL
    assert result.detail == "'ml.p5.48xlarge for cluster usage' is 2, 4 instances needed (gpu_nodes)"
    assert "--service-code sagemaker --quota-code L-8762A75F --desired-value 4 --region us-east-1" in result.fix


def test_hyperpod_quota_at_its_aws_default_is_found_in_the_defaults() -> None:
    client, stub = stubbed("service-quotas")
    queue_listing(stub, "list_service_quotas", "sagemaker", [[]])
    queue_listing(
        stub, "list_aws_default_service_quotas", "sagemaker", [[quota("ml.m5.2xlarge for cluster usage", "L-2", 4)]]
    )
    with stub:
        result = preflight.check_hyperpod_cpu_quota(QuotaBook(client), app_config(compute="hyperpod"), REGION)
    assert result.status == PASS
    assert result.detail == "'ml.m5.2xlarge for cluster usage' is 4 (AWS default) >= 1 instances (hyperpod_cpu_nodes)"


def test_hyperpod_instance_type_without_a_quota_in_the_region_fails() -> None:
    client, stub = stubbed("service-quotas")
    queue_listing(stub, "list_service_quotas", "sagemaker", [[]])
    queue_listing(
        stub, "list_aws_default_service_quotas", "sagemaker", [[quota("ml.g5.48xlarge for cluster usage", "L-3", 0)]]
    )
    with stub:
        result = preflight.check_hyperpod_gpu_quota(QuotaBook(client), app_config(compute="hyperpod"), REGION)
    assert result.status == FAIL
    assert "lists no quota 'ml.p5.48xlarge for cluster usage' in us-east-1" in result.detail


def test_hyperpod_gpu_quota_skipped_on_a_training_plan() -> None:
    client, stub = stubbed("service-quotas")
    plan = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/p5-plan"
    with stub:
        result = preflight.check_hyperpod_gpu_quota(
            QuotaBook(client), app_config(compute="hyperpod", hyperpod_training_plan_arn=plan), REGION
        )
    assert result.status == SKIP


def test_hyperpod_instance_count_quotas_cover_gpu_and_cpu_nodes() -> None:
    client, stub = stubbed("service-quotas")
    queue_listing(
        stub,
        "list_service_quotas",
        "sagemaker",
        [
            [
                quota(preflight.HYPERPOD_CLUSTER_INSTANCES_QUOTA, "L-4", 100),
                quota(preflight.HYPERPOD_TOTAL_INSTANCES_QUOTA, "L-5", 2),
            ]
        ],
    )
    with stub:
        result = preflight.check_hyperpod_instance_quotas(QuotaBook(client), app_config(compute="hyperpod"), REGION)
    assert result.status == FAIL  # 2 GPU + 1 CPU instances > 2 across clusters
    assert "across SageMaker HyperPod clusters' is 2, 3 instances needed" in result.detail
    assert "--quota-code L-5 --desired-value 3" in result.fix


@pytest.mark.parametrize(
    ("value", "changes", "status"),
    [
        (384, {}, PASS),  # 2 nodes x 192 vCPUs
        (192, {}, FAIL),
        (384, {"gpu_nodes_max": "4"}, WARN),  # enough to deploy, not to scale to the maximum
    ],
)
def test_ec2_p_quota_in_vcpus(value: int, changes: dict[str, str], status: str) -> None:
    client, stub = stubbed("service-quotas")
    stub.add_response(
        "get_service_quota",
        {"Quota": quota("Running On-Demand P instances", "L-417A185B", value)},
        {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"},
    )
    with stub:
        result = preflight.check_ec2_gpu_quota(QuotaBook(client), app_config(**changes), REGION)
    assert result.status == status
    if status == FAIL:
        assert "is 192, 384 vCPUs needed (gpu_nodes 2 x 192 vCPUs of p5.48xlarge)" in result.detail
        assert "--quota-code L-417A185B --desired-value 384" in result.fix
    if status == WARN:
        assert "--desired-value 768" in result.fix


def test_ec2_quota_without_an_applied_value_uses_the_default() -> None:
    client, stub = stubbed("service-quotas")
    stub.add_client_error("get_service_quota", "NoSuchResourceException", "no applied value")
    stub.add_response(
        "get_aws_default_service_quota",
        {"Quota": quota("Running On-Demand G and VT instances", "L-DB2E81BA", 0)},
        {"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"},
    )
    with stub:
        result = preflight.check_ec2_gpu_quota(QuotaBook(client), app_config(gpu_instance_type="g5.12xlarge"), REGION)
    assert result.status == FAIL
    assert "'Running On-Demand G and VT instances' is 0 (AWS default), 96 vCPUs needed" in result.detail


def test_ec2_gpu_quota_skipped_for_reserved_capacity() -> None:
    client, stub = stubbed("service-quotas")
    with stub:
        result = preflight.check_ec2_gpu_quota(
            QuotaBook(client), app_config(capacity_reservation_id=RESERVATION), REGION
        )
    assert result.status == SKIP


def test_ec2_standard_quota_for_the_system_nodes() -> None:
    client, stub = stubbed("service-quotas")
    ec2, ec2_stub = stubbed("ec2")
    ec2_stub.add_response(
        "describe_instance_types",
        {"InstanceTypes": [instance_type("m7i.xlarge", 4)]},
        {"InstanceTypes": ["m7i.xlarge"]},
    )
    stub.add_response(
        "get_service_quota",
        {"Quota": quota(preflight.EC2_ON_DEMAND_QUOTAS["Standard"][1], "L-1216C47A", 5)},
        {"ServiceCode": "ec2", "QuotaCode": "L-1216C47A"},
    )
    with stub, ec2_stub:
        result = preflight.check_ec2_system_quota(QuotaBook(client), ec2, app_config(), REGION)
    assert result.status == FAIL
    assert "is 5, 8 vCPUs needed (system_nodes 2 x 4 vCPUs of m7i.xlarge" in result.detail


def queue_fsx_quotas(stub: Stubber, storage: float | None, file_systems: float | None = 100) -> None:
    """GetServiceQuota by code for the two FSx PERSISTENT_2 quotas; None: the code is unknown (no applied value
    and no default either)."""
    for (code, quota_name), value in (
        (preflight.FSX_PERSISTENT_2_STORAGE_QUOTA, storage),
        (preflight.FSX_PERSISTENT_2_FILE_SYSTEMS_QUOTA, file_systems),
    ):
        params = {"ServiceCode": "fsx", "QuotaCode": code}
        if value is None:
            stub.add_client_error("get_service_quota", "NoSuchResourceException", "no such quota", 400, params)
            stub.add_client_error(
                "get_aws_default_service_quota", "NoSuchResourceException", "no such quota", 400, params
            )
        else:
            stub.add_response("get_service_quota", {"Quota": quota(quota_name, code, value)}, params)


@pytest.mark.parametrize(("storage", "status"), [("1200", PASS), ("4800", FAIL)])
def test_fsx_quota_by_code_against_storage(storage: str, status: str) -> None:
    client, stub = stubbed("service-quotas")
    queue_fsx_quotas(stub, 2400)
    with stub:
        result = preflight.check_fsx_quota(QuotaBook(client), app_config(fsx_storage_gib=storage), REGION)
    stub.assert_no_pending_responses()
    assert result.status == status
    if status == FAIL:
        assert "'Lustre Persistent_2 storage capacity' is 2400, 4800 GiB needed" in result.detail
        assert "--service-code fsx --quota-code L-8F1B9C74 --desired-value 4800" in result.fix
    else:
        assert "'Lustre Persistent_2 file systems' is 100 >= 1 file systems" in result.detail


def test_fsx_quota_without_a_file_system_left_fails() -> None:
    client, stub = stubbed("service-quotas")
    queue_fsx_quotas(stub, 100800, file_systems=0)
    with stub:
        result = preflight.check_fsx_quota(QuotaBook(client), app_config(), REGION)
    assert result.status == FAIL
    assert "--quota-code L-FD6F2F22 --desired-value 1" in result.fix


def test_fsx_quota_code_unknown_to_service_quotas_warns_with_the_way_to_check_by_hand() -> None:
    """Not SKIP: the quota exists, we could not match it, so the user must look."""
    client, stub = stubbed("service-quotas")
    queue_fsx_quotas(stub, None)
    with stub:
        result = preflight.check_fsx_quota(QuotaBook(client), app_config(), REGION)
    assert result.status == WARN
    assert "not checked: Service Quotas has no FSx quota L-8F1B9C74 ('Lustre Persistent_2 storage capacity')" in (
        result.detail
    )
    assert "check by hand that 'Lustre Persistent_2 storage capacity' allows 1200 GiB" in result.fix
    assert "aws service-quotas list-service-quotas --service-code fsx --region us-east-1" in result.fix


@pytest.mark.parametrize(
    ("value", "status", "text"),
    [
        (1024, PASS, "'Maximum size of EBS volume in GB for a SageMaker HyperPod cluster instance' is 1024 >= 500 GB"),
        (256, FAIL, "is 256, 500 GB needed (the gpu instance group's EBS volume, gpu_root_volume_gib)"),
    ],
)
def test_hyperpod_ebs_volume_quota_against_the_largest_volume(value: int, status: str, text: str) -> None:
    client, stub = stubbed("service-quotas")
    queue_listing(
        stub, "list_service_quotas", "sagemaker", [[quota(preflight.HYPERPOD_EBS_VOLUME_QUOTA, "L-E13DF72A", value)]]
    )
    with stub:
        result = preflight.check_hyperpod_ebs_quota(QuotaBook(client), app_config(compute="hyperpod"), REGION)
    assert result.status == status
    assert text in result.detail
    if status == FAIL:
        assert "--service-code sagemaker --quota-code L-E13DF72A --desired-value 500" in result.fix


def test_hyperpod_ebs_volume_quota_unknown_warns() -> None:
    client, stub = stubbed("service-quotas")
    queue_listing(stub, "list_service_quotas", "sagemaker", [[]])
    queue_listing(stub, "list_aws_default_service_quotas", "sagemaker", [[]])
    with stub:
        result = preflight.check_hyperpod_ebs_quota(
            QuotaBook(client), app_config(compute="hyperpod", gpu_root_volume_gib="2000"), REGION
        )
    assert result.status == WARN
    assert "check by hand that the quota is at least 2000 GB" in result.fix


def test_hyperpod_ebs_volume_is_the_one_the_stack_asks(synthesized: Any) -> None:
    """The size compared is the GPU instance group's ClusterEbsVolumeConfig in the synthesized template."""
    app = create_only.read_synthesized(synthesized(compute="hyperpod"))
    ((_, _, cluster),) = app.resources("AWS::SageMaker::Cluster")
    sizes = {
        group["InstanceGroupName"]: storage["EbsVolumeConfig"]["VolumeSizeInGB"]
        for group in cluster["Properties"]["InstanceGroups"]
        for storage in group.get("InstanceStorageConfigs", [])
    }
    assert sizes == preflight.hyperpod_ebs_volumes(app_config(compute="hyperpod")) == {"gpu": 500}


# ---- add-ons, Helm template, bootstrap --------------------------------------------------------------------
def addon_versions(name: str, *versions: str) -> dict[str, Any]:
    return {"addons": [{"addonName": name, "addonVersions": [{"addonVersion": v} for v in versions]}]}


def test_pinned_addon_served_passes() -> None:
    eks, stub = stubbed("eks")
    stub.add_response(
        "describe_addon_versions",
        addon_versions("vpc-cni", "v1.21.0-eksbuild.1", "v1.20.4-eksbuild.1"),
        {"addonName": "vpc-cni", "kubernetesVersion": "1.34"},
    )
    with stub:
        result = preflight.check_addon(eks, "vpc-cni", "v1.20.4-eksbuild.1", "1.34")
    assert result.status == PASS


def test_pinned_addon_not_served_names_pin_and_served_builds() -> None:
    eks, stub = stubbed("eks")
    served = ("v1.12.1-eksbuild.2", "v1.12.3-eksbuild.1", "v1.11.4-eksbuild.10")
    stub.add_response("describe_addon_versions", addon_versions("coredns", *served))
    with stub:
        result = preflight.check_addon(eks, "coredns", "v1.12.4-eksbuild.1", "1.34")
    assert (result.name, result.status) == ("add-on coredns", FAIL)
    assert result.detail == (
        "pinned v1.12.4-eksbuild.1 is not served for Kubernetes 1.34; AWS serves: "
        "v1.12.3-eksbuild.1, v1.12.1-eksbuild.2, v1.11.4-eksbuild.10"
    )
    assert "llm_infra/versions.py" in result.fix


NODE_MONITORING_AGENT = "eks-node-monitoring-agent"
TASK_GOVERNANCE = "amazon-sagemaker-hyperpod-taskgovernance"
EXISTING_CLUSTER = {
    "existing_vpc_id": "vpc-0123456789abcdef0",
    "existing_private_subnet_ids": "subnet-0123456789abcdef0,subnet-0123456789abcdef1",
    "existing_nat_gateway_id": "nat-0123456789abcdef0",
    "existing_cluster_name": "theirs",
    "existing_cluster_security_group_id": "sg-0123456789abcdef0",
}


def test_pinned_addons_follow_what_the_config_installs() -> None:
    """Every pinned add-on the config installs is checked, no other: the node monitoring agent in both modes,
    the training operator and task governance on HyperPod (not with queueing=none), on an existing cluster only
    what install_addons names."""
    eks = preflight.pinned_addons(app_config())
    assert eks == EKS_ADDONS["1.34"] and NODE_MONITORING_AGENT in eks
    hyperpod = preflight.pinned_addons(app_config(compute="hyperpod", kubernetes_version="1.35"))
    assert hyperpod == {
        **EKS_ADDONS["1.35"],
        **HYPERPOD_TRAINING_OPERATOR_ADDONS["1.35"],
        **HYPERPOD_TASK_GOVERNANCE_ADDONS["1.35"],
    }
    assert TASK_GOVERNANCE not in preflight.pinned_addons(app_config(compute="hyperpod", queueing="none"))
    existing = TrainingConfig(**EXISTING_CLUSTER, install_addons=f"{NODE_MONITORING_AGENT},aws-fsx-csi-driver")
    assert preflight.pinned_addons(existing) == {
        name: EKS_ADDONS["1.34"][name] for name in (NODE_MONITORING_AGENT, "aws-fsx-csi-driver")
    }
    assert preflight.pinned_addons(TrainingConfig(**EXISTING_CLUSTER)) == {}


@pytest.mark.parametrize(
    "addon, pins",
    [(NODE_MONITORING_AGENT, EKS_ADDONS["1.34"]), (TASK_GOVERNANCE, HYPERPOD_TASK_GOVERNANCE_ADDONS["1.34"])],
)
def test_the_new_addon_pins_are_checked_against_describe_addon_versions(addon: str, pins: dict[str, str]) -> None:
    pinned = pins[addon]
    eks, stub = stubbed("eks")
    params = {"addonName": addon, "kubernetesVersion": "1.34"}
    stub.add_response("describe_addon_versions", addon_versions(addon, "v9.9.9-eksbuild.1", pinned), params)
    stub.add_response("describe_addon_versions", addon_versions(addon, "v9.9.9-eksbuild.1"), params)
    with stub:
        served = preflight.check_addon(eks, addon, pinned, "1.34")
        missing = preflight.check_addon(eks, addon, pinned, "1.34")
    assert served.status == PASS and pinned in served.detail
    assert missing.status == FAIL and f"pinned {pinned} is not served" in missing.detail
    assert "v9.9.9-eksbuild.1" in missing.detail and "HYPERPOD_TASK_GOVERNANCE_ADDONS" in missing.fix


TRAINING_OPERATOR = preflight.HYPERPOD_TRAINING_OPERATOR_ADDON
TRAINING_OPERATOR_PIN = HYPERPOD_TRAINING_OPERATOR_ADDONS["1.34"][TRAINING_OPERATOR]


def operator_builds(*cluster_versions: str) -> dict[str, Any]:
    """DescribeAddonVersions without a Kubernetes version: one build compatible with each of these."""
    compatibilities = [
        {"clusterVersion": v, "platformVersions": ["*"], "defaultVersion": True} for v in cluster_versions
    ]
    build = {"addonVersion": "v1.1.0-eksbuild.1", "compatibilities": compatibilities}
    return {"addons": [{"addonName": TRAINING_OPERATOR, "addonVersions": [build]}]}


def training_operator_check(served_134: tuple[str, ...], everywhere: tuple[str, ...] | None) -> preflight.CheckResult:
    eks, stub = stubbed("eks")
    stub.add_response(
        "describe_addon_versions",
        addon_versions(TRAINING_OPERATOR, *served_134),
        {"addonName": TRAINING_OPERATOR, "kubernetesVersion": "1.34"},
    )
    if everywhere is not None:
        stub.add_response("describe_addon_versions", operator_builds(*everywhere), {"addonName": TRAINING_OPERATOR})
    with stub:
        result = preflight.check_addon(eks, TRAINING_OPERATOR, TRAINING_OPERATOR_PIN, "1.34")
    stub.assert_no_pending_responses()
    return result


def test_training_operator_served_beyond_its_documented_range_passes_saying_describe_addon_versions_decides() -> None:
    result = training_operator_check((TRAINING_OPERATOR_PIN,), None)
    assert result.status == PASS
    assert f"{TRAINING_OPERATOR_PIN} is served for Kubernetes 1.34" in result.detail
    assert "DescribeAddonVersions is the gate" in result.detail
    assert "AWS's training operator page lists Kubernetes 1.28-1.33 only" in result.detail


def test_training_operator_not_published_for_the_version_fails_plainly() -> None:
    """AWS lists the operator for 1.30-1.33 only: the FAIL says so, names what our pin rests on, and the ways
    through this app allows (it runs 1.34 and 1.35 only)."""
    result = training_operator_check((), ("1.30", "1.31", "1.32", "1.33"))
    assert result.status == FAIL
    assert result.detail.startswith(
        f"AWS publishes no {TRAINING_OPERATOR} build for Kubernetes 1.34 (it lists builds for Kubernetes 1.30-1.33; "
        "AWS's page lists 1.28-1.33)"
    )
    assert "rests on awslabs/awsome-distributed-ai PR #1076" in result.detail
    assert "the deploy would fail creating the add-on" in result.detail
    assert "-c hyperpod_training_operator=false" in result.fix
    assert "-c kubernetes_version" not in result.fix


def test_training_operator_published_for_another_supported_version_names_it() -> None:
    result = training_operator_check((), ("1.33", "1.35"))
    assert result.status == FAIL
    assert result.fix.startswith("-c kubernetes_version=1.35 (AWS serves the operator there)")


def test_training_operator_other_build_served_names_the_pin_and_the_builds() -> None:
    result = training_operator_check(("v1.3.0-eksbuild.1",), None)
    assert result.status == FAIL
    assert f"AWS serves no {TRAINING_OPERATOR_PIN} of {TRAINING_OPERATOR} for Kubernetes 1.34" in result.detail
    assert "(it serves: v1.3.0-eksbuild.1)" in result.detail and "PR #1076" in result.detail
    assert "HYPERPOD_TRAINING_OPERATOR_ADDONS" in result.fix


def test_training_operator_pin_source_is_the_one_versions_py_names() -> None:
    versions = (REPO_ROOT / "llm_infra" / "versions.py").read_text()
    assert "PR #1076" in preflight.HYPERPOD_TRAINING_OPERATOR_PIN_SOURCE and "PR #1076" in versions
    assert "414d4da" in preflight.HYPERPOD_TRAINING_OPERATOR_PIN_SOURCE and "414d4da" in versions


def test_helm_template_location_is_the_one_the_construct_deploys() -> None:
    from llm_infra.constructs import hyperpod_dependencies

    url = f"https://{preflight.HELM_TEMPLATE_BUCKET}.s3.{{region}}.amazonaws.com/{preflight.HELM_TEMPLATE_KEY}"
    assert hyperpod_dependencies.HELM_CHART_TEMPLATE_URL.replace("${AWS::Region}", "{region}") == url


@pytest.mark.parametrize(
    ("error", "status", "text"),
    [(None, PASS, "exists"), ("404", FAIL, "-c operators=none"), ("403", WARN, "s3:GetObject")],
)
def test_helm_template(error: str | None, status: str, text: str) -> None:
    s3, stub = stubbed("s3")
    params = {"Bucket": "aws-sagemaker-hyperpod-cluster-setup-us-east-1-prod", "Key": preflight.HELM_TEMPLATE_KEY}
    if error:
        stub.add_client_error("head_object", error, "", http_status_code=int(error), expected_params=params)
    else:
        stub.add_response("head_object", {"ContentLength": 1024}, params)
    with stub:
        result = preflight.check_helm_template(s3, REGION)
    assert result.status == status
    assert text in result.detail + result.fix


# The parameters AWS's helm-chart-template.yaml declares, each with a default (aws/sagemaker-hyperpod-cluster-setup
# 07829e4, eks/cloudformation/helm-chart-template.yaml, Parameters), as GetTemplateSummary returns them.
HELM_TEMPLATE_PARAMETERS = {
    "ResourceNamePrefix": "sagemaker-hyperpod-eks",
    "EKSClusterName": "hyperpod-eks-cluster",
    "HelmRepoUrl": "https://github.com/aws/sagemaker-hyperpod-cli.git",
    "HelmRepoPath": "helm_chart/HyperPodHelmChart",
    "RigHelmScriptPath": "helm_chart/install_rig_dependencies.sh",
    "HelmOperators": "",
    "CreateRIG": "false",
    "Namespace": "kube-system",
    "HelmRelease": "dependencies",
    "CustomResourceS3Bucket": "aws-sagemaker-hyperpod-cluster-setup-us-east-2-prod",
    "LayerS3Key": "resources/artifacts/helm-lambda-layer.zip",
    "FunctionS3Key": "resources/artifacts/helm-lambda-function.zip",
}
HELM_TEMPLATE_URL = "https://aws-sagemaker-hyperpod-cluster-setup-us-east-1-prod.s3.us-east-1.amazonaws.com/templates/helm-chart-template.yaml"


def template_summary(parameters: dict[str, str | None]) -> dict[str, Any]:
    """GetTemplateSummary's answer for these parameters (None: no default, so required)."""
    declared = []
    for key, default in parameters.items():
        entry: dict[str, Any] = {"ParameterKey": key, "ParameterType": "String", "NoEcho": False}
        if default is not None:
            entry["DefaultValue"] = default
        declared.append(entry)
    return {"Parameters": declared}


def helm_parameters_check(cdk_out: Path, parameters: dict[str, str | None]) -> preflight.CheckResult:
    cfn, stub = stubbed("cloudformation")
    stub.add_response("get_template_summary", template_summary(parameters), {"TemplateURL": HELM_TEMPLATE_URL})
    with stub:
        result = preflight.check_helm_parameters(cfn, REGION, create_only.read_synthesized(cdk_out))
    stub.assert_no_pending_responses()
    return result


def test_helm_parameters_we_pass_are_declared_by_aws_template(synthesized: Any) -> None:
    result = helm_parameters_check(synthesized(), HELM_TEMPLATE_PARAMETERS)
    assert result.status == PASS
    assert "AWS's template declares all 8 parameters we pass and requires no other" in result.detail


def test_helm_parameter_renamed_by_aws_fails_naming_it(synthesized: Any) -> None:
    renamed = {("HelmChartOperators" if k == "HelmOperators" else k): v for k, v in HELM_TEMPLATE_PARAMETERS.items()}
    result = helm_parameters_check(synthesized(), renamed)
    assert result.status == FAIL
    assert result.detail.startswith("we pass HelmOperators, which AWS's template does not declare (it declares: ")
    assert "HelmChartOperators" in result.detail
    assert "constructs/hyperpod_dependencies.py" in result.fix


def test_helm_parameter_required_without_default_fails(synthesized: Any) -> None:
    result = helm_parameters_check(synthesized(), {**HELM_TEMPLATE_PARAMETERS, "ClusterRoleArn": None})
    assert result.status == FAIL
    assert "AWS's template requires ClusterRoleArn (no default), which we do not pass" in result.detail


def test_helm_parameters_are_read_from_the_synthesized_nested_stack(synthesized: Any) -> None:
    from llm_infra.constructs.hyperpod_dependencies import HELM_CHART_TEMPLATE_URL

    app = create_only.read_synthesized(synthesized())
    ((_, _, stack),) = app.resources("AWS::CloudFormation::Stack")
    assert stack["Properties"]["TemplateURL"] == {"Fn::Sub": HELM_CHART_TEMPLATE_URL}
    assert preflight.helm_stack_parameters(app) == sorted(stack["Properties"]["Parameters"])
    assert set(preflight.helm_stack_parameters(app) or []) <= set(HELM_TEMPLATE_PARAMETERS)


def toolkit(status: str = "CREATE_COMPLETE", outputs: dict[str, str] | None = None) -> dict[str, Any]:
    stack: dict[str, Any] = {
        "StackName": "CDKToolkit",
        "StackStatus": status,
        "CreationTime": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    }
    if outputs:
        stack["Outputs"] = [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()]
    return {"Stacks": [stack]}


def bootstrap_check(stacks: dict[str, Any] | None, ssm_value: str | None, ssm_error: str = "") -> preflight.CheckResult:
    cfn, cfn_stub = stubbed("cloudformation")
    ssm, ssm_stub = stubbed("ssm")
    if stacks is None:
        cfn_stub.add_client_error("describe_stacks", "ValidationError", "Stack with id CDKToolkit does not exist")
    else:
        cfn_stub.add_response("describe_stacks", stacks, {"StackName": "CDKToolkit"})
    if ssm_error:
        ssm_stub.add_client_error("get_parameter", ssm_error, "")
    elif ssm_value is not None:
        parameter = {"Name": preflight.CDK_BOOTSTRAP_VERSION_PARAMETER, "Value": ssm_value, "Type": "String"}
        ssm_stub.add_response(
            "get_parameter", {"Parameter": parameter}, {"Name": preflight.CDK_BOOTSTRAP_VERSION_PARAMETER}
        )
    with cfn_stub, ssm_stub:
        return preflight.check_bootstrap(cfn, lambda: ssm, ACCOUNT, REGION)


def operators_check(config: Any, logical_ids: list[str] | None) -> preflight.CheckResult:
    """The check on a cluster stack holding these nested stacks (None: not deployed)."""
    cfn, stub = stubbed("cloudformation")
    params = {"StackName": "llm-infra-cluster"}
    if logical_ids is None:
        stub.add_client_error(
            "list_stack_resources", "ValidationError", "Stack with id llm-infra-cluster does not exist"
        )
    else:
        summaries = [
            {
                "LogicalResourceId": lid,
                "ResourceType": "AWS::CloudFormation::Stack",
                "LastUpdatedTimestamp": datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC),
                "ResourceStatus": "CREATE_COMPLETE",
            }
            for lid in logical_ids
        ]
        stub.add_response("list_stack_resources", {"StackResourceSummaries": summaries}, params)
    with stub:
        return preflight.check_operators_change(cfn, config)


def deployed_operators_id(config: Any) -> str:
    """The nested stack's logical ID as the app synthesizes it for ``config``."""
    app = cdk.App()
    stacks = add_training_stacks(app, config, nag=False)
    assert stacks.cluster.operators is not None
    return cdk.Stack.of(stacks.cluster).get_logical_id(stacks.cluster.operators.stack)


def test_operators_unchanged_or_fresh_pass() -> None:
    config = app_config()
    assert operators_check(config, None).status == PASS
    assert operators_check(config, []).status == PASS
    result = operators_check(config, [deployed_operators_id(config)])
    assert result.status == PASS and result.detail.startswith("unchanged")


def test_operators_installed_for_another_mode_fail_with_the_two_step_way() -> None:
    """A deployed EKS-mode operators stack and a HyperPod config: AWS's new stack could not install over
    the old release; the fix is a deploy with operators=none first."""
    deployed = deployed_operators_id(app_config())
    result = operators_check(app_config(compute="hyperpod"), [deployed])
    assert result.status == FAIL
    assert result.fix.startswith("deploy once with -c operators=none")
    # An earlier llm-infra's stack (no digest in its logical ID) is another input too.
    assert operators_check(app_config(), ["OperatorsHelmChartStack6B1EABBD"]).status == FAIL
    # With operators=none the old stack is simply deleted.
    assert operators_check(app_config(operators="none"), [deployed]).status == PASS


def test_bootstrap_current_passes() -> None:
    result = bootstrap_check(toolkit(), "29")
    assert result.status == PASS
    assert result.detail == "CDKToolkit CREATE_COMPLETE, bootstrap version 29 (from /cdk-bootstrap/hnb659fds/version)"


def test_bootstrap_missing_fails_with_the_bootstrap_command() -> None:
    result = bootstrap_check(None, None)
    assert result.status == FAIL
    assert result.fix == f"npx cdk bootstrap aws://{ACCOUNT}/{REGION}"


@pytest.mark.parametrize(
    ("stacks", "ssm_value", "ssm_error", "status", "text"),
    [
        (toolkit(), "5", "", FAIL, "bootstrap version 5 < 6"),
        (toolkit(), None, "ParameterNotFound", FAIL, "/cdk-bootstrap/hnb659fds/version is missing"),
        (toolkit(outputs={"BootstrapVersion": "27"}), None, "AccessDeniedException", PASS, "BootstrapVersion output"),
        (toolkit("ROLLBACK_COMPLETE"), None, "", FAIL, "CDKToolkit is ROLLBACK_COMPLETE"),
        (toolkit("UPDATE_IN_PROGRESS"), None, "", WARN, "CDKToolkit is UPDATE_IN_PROGRESS"),
    ],
)
def test_bootstrap_states(
    stacks: dict[str, Any], ssm_value: str | None, ssm_error: str, status: str, text: str
) -> None:
    result = bootstrap_check(stacks, ssm_value, ssm_error)
    assert result.status == status
    assert text in result.detail


def test_bootstrap_version_unreadable_for_another_reason_is_left_to_the_runner() -> None:
    """Only AccessDenied falls back to the stack's output; other errors make the check a WARN (run_checks)."""
    with pytest.raises(ClientError):
        bootstrap_check(toolkit(outputs={"BootstrapVersion": "27"}), None, "InternalServerError")


# ---- what the deploy would replace: create-only properties ------------------------------------------------
GPU_SUBNET = "subnet-0123456789abcdef0"


def deployed_as(cdk_out: Path, change: Any = None) -> dict[str, dict[str, Any]]:
    """The app's templates as if deployed: a copy of the synthesized ones, changed by ``change(templates)``."""
    templates = json.loads(json.dumps(create_only.read_synthesized(cdk_out).templates))
    if change is not None:
        change(templates)
    return templates


def resource_of(templates: dict[str, dict[str, Any]], resource_type: str) -> dict[str, Any]:
    (found,) = [r for t in templates.values() for r in t["Resources"].values() if r["Type"] == resource_type]
    return found


def create_only_check(
    config: Any,
    cdk_out: Path,
    deployed: dict[str, dict[str, Any]] | None,
    *,
    subnet_zone: str | None = None,
) -> preflight.CheckResult:
    """The check with these stacks deployed (None: none), and, with ``subnet_zone``, a HyperPod cluster whose
    subnet (the network stack's export, ListExports) lies in that AZ (DescribeSubnets)."""
    cfn, cfn_stub = stubbed("cloudformation")
    ec2, ec2_stub = stubbed("ec2")
    app = create_only.read_synthesized(cdk_out)
    for stack in app.project_stacks(config.project_name):
        if deployed and stack in deployed:
            cfn_stub.add_response(
                "get_template",
                {"TemplateBody": json.dumps(deployed[stack]), "StagesAvailable": ["Original", "Processed"]},
                {"StackName": stack, "TemplateStage": "Original"},
            )
        else:
            cfn_stub.add_client_error("get_template", "ValidationError", f"Stack with id {stack} does not exist")
    if subnet_zone is not None:
        (export,) = resource_of(app.templates, "AWS::SageMaker::Cluster")["Properties"]["VpcConfig"]["Subnets"]
        exports = [
            {"ExportingStackId": "arn:aws:cloudformation:x", "Name": export["Fn::ImportValue"], "Value": GPU_SUBNET}
        ]
        cfn_stub.add_response("list_exports", {"Exports": exports}, {})
        subnet = {"SubnetId": GPU_SUBNET, "AvailabilityZoneId": subnet_zone, "AvailabilityZone": "us-east-1x"}
        ec2_stub.add_response("describe_subnets", {"Subnets": [subnet]}, {"SubnetIds": [GPU_SUBNET]})
    with cfn_stub, ec2_stub:
        result = preflight.check_create_only(cfn, lambda: ec2, config, app, REGION)
    cfn_stub.assert_no_pending_responses()
    ec2_stub.assert_no_pending_responses()
    return result


HYPERPOD = {"compute": "hyperpod"}


def test_nothing_deployed_passes(synthesized: Any) -> None:
    result = create_only_check(app_config(**HYPERPOD), synthesized(**HYPERPOD), None)
    assert result.status == PASS
    assert result.detail.startswith("nothing deployed yet (llm-infra-network, llm-infra-storage, llm-infra-cluster)")


def test_hyperpod_subnet_in_the_configured_az_passes(synthesized: Any) -> None:
    cdk_out = synthesized(**HYPERPOD)
    result = create_only_check(app_config(**HYPERPOD), cdk_out, deployed_as(cdk_out), subnet_zone="use1-az4")
    assert result.status == PASS
    assert "3 deployed stack(s)" in result.detail
    assert f"HyperPod cluster llm-infra-hyperpod: {GPU_SUBNET} in use1-az4 = gpu_az_id" in result.detail


def test_hyperpod_subnet_in_another_az_than_gpu_az_id_fails_with_the_way_through(synthesized: Any) -> None:
    """Deployed in use1-az6, now gpu_az_id use1-az4: a new subnet, a new VpcConfig, the named cluster replaced."""
    cdk_out = synthesized(**HYPERPOD)
    result = create_only_check(app_config(**HYPERPOD), cdk_out, deployed_as(cdk_out), subnet_zone="use1-az6")
    assert result.status == FAIL
    assert "HyperPod cluster llm-infra-hyperpod (llm-infra-cluster/HyperPod" in result.detail
    assert f"runs in {GPU_SUBNET} in use1-az6, gpu_az_id is use1-az4" in result.detail
    assert "VpcConfig, which is create-only" in result.detail
    assert "its fixed name llm-infra-hyperpod makes the update fail" in result.detail
    assert "destroy every node and every job" in result.detail
    assert result.fix.startswith("keep -c gpu_az_id=use1-az6 (as deployed)")
    assert "deploy a second app beside it (-c project_name=<new> -c gpu_az_id=use1-az4" in result.fix


def test_changed_cluster_name_fails(synthesized: Any) -> None:
    """ClusterName is create-only: a new name replaces the HyperPod cluster (and with it every node and job)."""
    cdk_out = synthesized(**HYPERPOD)

    def rename(templates: dict[str, dict[str, Any]]) -> None:
        resource_of(templates, "AWS::SageMaker::Cluster")["Properties"]["ClusterName"] = "train-hyperpod"

    deployed = deployed_as(cdk_out, rename)
    result = create_only_check(app_config(**HYPERPOD), cdk_out, deployed, subnet_zone="use1-az4")
    assert result.status == FAIL
    assert "(AWS::SageMaker::Cluster llm-infra-hyperpod): ClusterName changes (ClusterName: train-hyperpod -> " in (
        result.detail
    )
    assert "CloudFormation creates the renamed one (ClusterName train-hyperpod -> llm-infra-hyperpod)" in result.detail
    assert "replacing the HyperPod cluster destroys every node and every job on it" in result.detail
    assert result.fix.startswith("keep AWS::SageMaker::Cluster ClusterName as deployed (train-hyperpod)")


def test_replacing_a_resource_that_keeps_its_custom_name_fails(synthesized: Any) -> None:
    """Any custom-named resource, not only the data stores: an EKS add-on (named by ClusterName and AddonName,
    its primary identifier) whose create-only NamespaceConfig changes must be replaced under the same name."""
    cdk_out = synthesized()

    def namespaced(templates: dict[str, dict[str, Any]]) -> None:
        for template in templates.values():
            for resource in template["Resources"].values():
                if resource["Type"] == "AWS::EKS::Addon" and resource["Properties"]["AddonName"] == "coredns":
                    resource["Properties"]["NamespaceConfig"] = {"Namespace": "dns"}

    result = create_only_check(app_config(), cdk_out, deployed_as(cdk_out, namespaced))
    assert result.status == FAIL
    assert "(AWS::EKS::Addon coredns): NamespaceConfig changes" in result.detail
    assert "CloudFormation cannot update a stack when a custom-named resource requires replacing" in result.detail


def test_a_renamed_resource_that_holds_nothing_warns(synthesized: Any) -> None:
    """A new dashboard name: CloudFormation creates the renamed dashboard and deletes the old one."""
    cdk_out = synthesized()

    def rename(templates: dict[str, dict[str, Any]]) -> None:
        resource_of(templates, "AWS::CloudWatch::Dashboard")["Properties"]["DashboardName"] = "old-training"

    result = create_only_check(app_config(), cdk_out, deployed_as(cdk_out, rename))
    assert result.status == WARN
    assert "creates the renamed one (DashboardName old-training -> llm-infra-training)" in result.detail


def test_a_changed_az_replaces_the_subnet_and_with_it_the_file_system(synthesized: Any) -> None:
    """Deployed with gpu_az_id use1-az6: the GPU subnet is replaced, the FSx file system's SubnetIds (through the
    network stack's export) with it: a data store, so FAIL, with the root cause and the way through."""
    cdk_out = synthesized()

    def elsewhere(templates: dict[str, dict[str, Any]]) -> None:
        for resource in templates["llm-infra-network"]["Resources"].values():
            if resource["Type"] == "AWS::EC2::Subnet" and "AvailabilityZoneId" in resource["Properties"]:
                resource["Properties"]["AvailabilityZoneId"] = "use1-az6"

    result = create_only_check(app_config(), cdk_out, deployed_as(cdk_out, elsewhere))
    assert result.status == FAIL
    assert "llm-infra-storage/LustreFileSystem" in result.detail and "(AWS::FSx::FileSystem): SubnetIds refers to " in (
        result.detail
    )
    assert "which is replaced (AWS::EC2::Subnet AvailabilityZoneId: use1-az6 -> use1-az4)" in result.detail
    assert "a new file system starts empty" in result.detail
    assert "the deployed one is retained (UpdateReplacePolicy Retain)" in result.detail
    assert result.fix.startswith("keep -c gpu_az_id=use1-az6 (as deployed)")


def test_a_change_of_a_property_that_is_not_create_only_passes(synthesized: Any) -> None:
    """NodeRecovery and the instance counts are updated in place: cfn-lint's schema does not list them."""
    cdk_out = synthesized(**HYPERPOD)
    assert "NodeRecovery" not in create_only.create_only_properties("AWS::SageMaker::Cluster")

    def other_settings(templates: dict[str, dict[str, Any]]) -> None:
        properties = resource_of(templates, "AWS::SageMaker::Cluster")["Properties"]
        properties["NodeRecovery"] = "None"
        properties["InstanceGroups"][0]["InstanceCount"] = 8

    deployed = deployed_as(cdk_out, other_settings)
    result = create_only_check(app_config(**HYPERPOD), cdk_out, deployed, subnet_zone="use1-az4")
    assert result.status == PASS


def test_create_only_lists_are_cfn_lint_schemas(synthesized: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lists are read from cfn-lint's registry schema files, not kept by hand: the same as the schema file
    of the type (providers/us-east-1.json names it), and a schema that called NodeRecovery create-only would
    make the same change fail."""
    import cfnlint
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    schemas = Path(cfnlint.__file__).parent / "data" / "schemas"
    digest = json.loads((schemas / "providers" / "us-east-1.json").read_text())["AWS::SageMaker::Cluster"]
    raw = json.loads((schemas / "resources" / f"{digest}.json").read_text())
    assert create_only.create_only_properties("AWS::SageMaker::Cluster") == tuple(
        p.removeprefix("/properties/") for p in raw["createOnlyProperties"]
    )
    assert {"ClusterName", "VpcConfig"} <= set(create_only.create_only_properties("AWS::SageMaker::Cluster"))

    real = PROVIDER_SCHEMA_MANAGER.get_resource_schema

    def node_recovery_create_only(region: str, resource_type: str) -> Any:
        schema = real(region, resource_type)
        if resource_type != "AWS::SageMaker::Cluster":
            return schema
        changed = json.loads(json.dumps(schema.schema))
        changed["createOnlyProperties"].append("/properties/NodeRecovery")
        return type(schema)(changed)

    monkeypatch.setattr(PROVIDER_SCHEMA_MANAGER, "get_resource_schema", node_recovery_create_only)
    cdk_out = synthesized(**HYPERPOD)

    def other_recovery(templates: dict[str, dict[str, Any]]) -> None:
        resource_of(templates, "AWS::SageMaker::Cluster")["Properties"]["NodeRecovery"] = "None"

    deployed = deployed_as(cdk_out, other_recovery)
    result = create_only_check(app_config(**HYPERPOD), cdk_out, deployed, subnet_zone="use1-az4")
    assert result.status == FAIL
    assert "NodeRecovery changes (NodeRecovery: None -> Automatic)" in result.detail


def test_templates_synthesized_for_other_settings_warn(synthesized: Any) -> None:
    cfn, stub = stubbed("cloudformation")  # nothing queued: no call may be made
    app = create_only.read_synthesized(synthesized())
    with stub:
        result = preflight.check_create_only(
            cfn, lambda: None, app_config(gpu_az_id="use1-az6", **HYPERPOD), app, REGION
        )
    assert result.status == WARN
    assert "compute=eks, the config says hyperpod" in result.detail
    assert "gpu_az_id=use1-az4, the config says use1-az6" in result.detail
    assert "npx cdk synth" in result.fix


@pytest.mark.parametrize("manifest", [False, True])
def test_a_folder_without_templates_is_bad_input_naming_the_flag(tmp_path: Path, manifest: bool) -> None:
    folder = tmp_path if manifest else tmp_path / "cdk.out"
    if manifest:
        (folder / "manifest.json").write_text(json.dumps({"version": "1", "artifacts": {}}))
    with pytest.raises(BadInput) as raised:
        preflight.run_checks(app_config(), region=REGION, account=ACCOUNT, client=stubbed, cdk_out=folder)
    message = str(raised.value)
    assert message.startswith(f"--cdk-out: {folder} ")
    assert ("holds no stack template" if manifest else "does not exist") in message
    assert "(make synth, or npx cdk synth -c KEY=VALUE ...)" in message


# ---- the command end to end ----------------------------------------------------------------------------------
class FakeAws:
    """Stubbed clients per service, handed to the command in place of ``aws_client``."""

    def __init__(self) -> None:
        self.clients: dict[str, tuple[Any, Stubber]] = {}

    def __call__(self, service: str) -> tuple[Any, Stubber]:
        if service not in self.clients:
            client, stub = stubbed(service)
            stub.activate()
            self.clients[service] = (client, stub)
        return self.clients[service]

    def aws_client(self, args: Any, service: str) -> Any:
        assert args.region == REGION
        return self(service)[0]

    def assert_all_called(self) -> None:
        for _, stub in self.clients.values():
            stub.assert_no_pending_responses()


def queue_default_run(aws: FakeAws, *, p_quota: int = 384, denied_addon: str = "") -> None:
    """Every call of a run on the repo's cdk.json (compute=eks, 2 x p5.48xlarge in use1-az4), each answered
    so that its check passes."""
    aws("sts")[1].add_response(
        "get_caller_identity", {"Account": ACCOUNT, "Arn": "arn:aws:iam::1:user/u", "UserId": "u"}
    )
    ec2 = aws("ec2")[1]
    zone = {"ZoneName": "us-east-1a", "ZoneId": "use1-az4", "State": "available"}
    ec2.add_response("describe_availability_zones", {"AvailabilityZones": [zone]})
    offering = {"InstanceType": "p5.48xlarge", "LocationType": "availability-zone-id", "Location": "use1-az4"}
    ec2.add_response("describe_instance_type_offerings", {"InstanceTypeOfferings": [offering]}, OFFERING_PARAMS)
    ec2.add_response("describe_instance_types", {"InstanceTypes": [P5]})
    ec2.add_response("describe_instance_types", {"InstanceTypes": [instance_type("m7i.xlarge", 4)]})
    quotas = aws("service-quotas")[1]
    quotas.add_response("get_service_quota", {"Quota": quota("Running On-Demand P instances", "L-417A185B", p_quota)})
    standard = preflight.EC2_ON_DEMAND_QUOTAS["Standard"][1]
    quotas.add_response("get_service_quota", {"Quota": quota(standard, "L-1216C47A", 640)})
    queue_fsx_quotas(quotas, 100800)
    eks = aws("eks")[1]
    for name, version in EKS_ADDONS["1.34"].items():
        if name == denied_addon:
            eks.add_client_error("describe_addon_versions", "AccessDeniedException", "not authorized", 403)
        else:
            eks.add_response(
                "describe_addon_versions",
                addon_versions(name, version),
                {"addonName": name, "kubernetesVersion": "1.34"},
            )
    aws("s3")[1].add_response("head_object", {"ContentLength": 1024})
    cloudformation = aws("cloudformation")[1]
    cloudformation.add_response(
        "get_template_summary", template_summary(HELM_TEMPLATE_PARAMETERS), {"TemplateURL": HELM_TEMPLATE_URL}
    )
    cloudformation.add_client_error(
        "list_stack_resources", "ValidationError", "Stack with id llm-infra-cluster does not exist"
    )
    for stack in ("llm-infra-network", "llm-infra-storage", "llm-infra-cluster"):
        cloudformation.add_client_error("get_template", "ValidationError", f"Stack with id {stack} does not exist")
    cloudformation.add_response("describe_stacks", toolkit())
    parameter = {"Name": preflight.CDK_BOOTSTRAP_VERSION_PARAMETER, "Value": "29", "Type": "String"}
    aws("ssm")[1].add_response("get_parameter", {"Parameter": parameter})


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> FakeAws:
    fake = FakeAws()
    monkeypatch.setattr(preflight_command, "aws_client", fake.aws_client)
    monkeypatch.delenv("AWS_REGION", raising=False)
    return fake


APP = ("preflight", "--app-dir", str(REPO_ROOT), "--region", REGION)


@pytest.fixture
def app(synthesized: Any) -> tuple[str, ...]:
    """The command on the repo's cdk.json and its synthesized templates."""
    return (*APP, "--cdk-out", str(synthesized()))


DEFAULT_RUN_CHECKS = [
    "availability zone",
    "instance type offered",
    "EFA interfaces",
    "quota: EC2 GPU vCPUs",
    "quota: EC2 system vCPUs",
    "quota: FSx for Lustre",
    *(f"add-on {name}" for name in EKS_ADDONS["1.34"]),
    "HyperPod Helm template",
    "HyperPod Helm parameters",
    "operators change",
    "create-only properties",
    "CDK bootstrap",
]


def test_table_of_a_passing_run_exits_0(aws: FakeAws, app: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    queue_default_run(aws)
    code, out, err = run_cli(capsys, *app)
    assert (code, err) == (0, "")
    aws.assert_all_called()
    lines = out.splitlines()
    assert lines[0].split() == ["check", "status", "detail"]
    for name in DEFAULT_RUN_CHECKS:
        (row,) = [line for line in lines if line.startswith(name + "  ")]
        assert row[len(name) :].split()[0] == PASS, row
    assert lines[-1] == f"preflight of account {ACCOUNT} in {REGION}: PASS ({len(DEFAULT_RUN_CHECKS)} pass)"


def test_a_failing_quota_exits_1_with_its_fix(
    aws: FakeAws, app: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    queue_default_run(aws, p_quota=0)
    code, out, _ = run_cli(capsys, *app)
    assert code == 1
    (row,) = [line for line in out.splitlines() if line.startswith("quota: EC2 GPU vCPUs")]
    assert " FAIL " in row and "'Running On-Demand P instances' is 0, 384 vCPUs needed" in row
    assert (
        "  quota: EC2 GPU vCPUs: aws service-quotas request-service-quota-increase --service-code ec2 "
        "--quota-code L-417A185B --desired-value 384 --region us-east-1"
    ) in out.splitlines()
    assert out.splitlines()[-1].startswith(f"preflight of account {ACCOUNT} in {REGION}: FAIL (")


def test_json_output(aws: FakeAws, app: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    queue_default_run(aws, p_quota=192)
    code, out, _ = run_cli(capsys, *app, "--output", "json")
    assert code == 1
    report = json.loads(out)
    assert report["region"] == REGION and report["account"] == ACCOUNT
    assert [c["name"] for c in report["checks"]] == DEFAULT_RUN_CHECKS
    assert all(set(c) == {"name", "status", "detail", "fix"} for c in report["checks"])
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses.pop("quota: EC2 GPU vCPUs") == FAIL
    assert set(statuses.values()) == {PASS}


def test_access_denied_on_one_check_warns_and_the_others_run(
    aws: FakeAws, app: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    queue_default_run(aws, denied_addon="coredns")
    code, out, _ = run_cli(capsys, *app, "--output", "json")
    assert code == 0
    aws.assert_all_called()
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert checks["add-on coredns"]["status"] == WARN
    assert checks["add-on coredns"]["detail"] == "not checked: access denied to eks:DescribeAddonVersions"
    assert "allow eks:DescribeAddonVersions" in checks["add-on coredns"]["fix"]
    assert [name for name, c in checks.items() if c["status"] != PASS] == ["add-on coredns"]


def test_hyperpod_run_checks_sagemaker_quotas_and_names_every_denied_action(synthesized: Any) -> None:
    """Every call denied: each check the hyperpod config calls for still reports, naming its IAM action."""
    clients: dict[str, Any] = {}

    def deny(model: Any, **_: Any) -> None:
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, model.name)

    def client(service: str) -> Any:
        if service not in clients:
            clients[service] = stubbed(service)[0]
            clients[service].meta.events.register("before-call.*.*", deny)
        return clients[service]

    config = app_config(compute="hyperpod")
    cdk_out = synthesized(compute="hyperpod")
    results = preflight.run_checks(config, region=REGION, account=ACCOUNT, client=client, cdk_out=cdk_out)
    by_name = {r.name: r for r in results}
    assert list(by_name) == [
        "availability zone",
        "instance type offered",
        "EFA interfaces",
        "quota: ml.p5.48xlarge",
        "quota: ml.m5.2xlarge",
        "quota: HyperPod instances",
        "quota: HyperPod EBS volume",
        "quota: EC2 system vCPUs",
        "quota: FSx for Lustre",
        *(f"add-on {name}" for name in preflight.pinned_addons(config)),
        "HyperPod Helm template",
        "HyperPod Helm parameters",
        "operators change",
        "create-only properties",
        "CDK bootstrap",
    ]
    assert by_name.pop("EFA interfaces").status == SKIP  # HyperPod attaches EFA itself: nothing to ask
    assert by_name["quota: ml.p5.48xlarge"].detail == "not checked: access denied to servicequotas:ListServiceQuotas"
    assert by_name["HyperPod Helm template"].fix.startswith("allow s3:GetObject on arn:aws:s3:::")
    assert by_name["quota: FSx for Lustre"].detail == "not checked: access denied to servicequotas:GetServiceQuota"
    assert by_name["HyperPod Helm parameters"].detail == (
        "not checked: access denied to cloudformation:GetTemplateSummary"
    )
    assert by_name["create-only properties"].detail == "not checked: access denied to cloudformation:GetTemplate"
    assert by_name["CDK bootstrap"].detail == "not checked: access denied to cloudformation:DescribeStacks"
    assert {r.status for r in by_name.values()} == {WARN}
    assert not preflight.failed(results)


# ---- one line, no traceback, when the SDK cannot start ----------------------------------------------------
@pytest.fixture
def bare_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No credentials, region or profile from the environment or ~/.aws, and no instance metadata."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    empty = tmp_path / "empty"
    empty.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return empty


def assert_one_line(err: str, *parts: str) -> None:
    assert "Traceback" not in err
    (line,) = err.splitlines()
    assert line.startswith("llm-infra: error: ")
    for part in parts:
        assert part in line


def test_no_credentials(bare_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *APP)
    assert (code, out) == (1, "")
    assert_one_line(err, "no AWS credentials found", "--profile", "aws sso login")


def test_no_region(bare_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No region anywhere, and a gpu_az_id whose region code is unknown: one line saying where to set one."""
    app = tmp_path / "app"
    app.mkdir()
    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    (app / "cdk.json").write_text(json.dumps({"context": {**context, "gpu_az_id": "zzz1-az1"}}))
    code, out, err = run_cli(capsys, "preflight", "--app-dir", str(app))
    assert (code, out) == (1, "")
    assert_one_line(err, "no AWS region: pass --region")


@pytest.mark.parametrize("source", ["cdk.json", "AWS_REGION", "AWS_DEFAULT_REGION", "gpu_az_id"])
def test_region_from_config_or_environment(
    source: str, bare_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """AWS_REGION, AWS_DEFAULT_REGION, the config's region, last the region of gpu_az_id (use1-az4: us-east-1):
    with one of them and no credentials, what fails is the credentials."""
    app = tmp_path / "app"
    app.mkdir()
    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    if source == "cdk.json":
        context["region"] = REGION
    elif source.startswith("AWS_"):
        monkeypatch.setenv(source, REGION)
    (app / "cdk.json").write_text(json.dumps({"context": context}))
    code, _, err = run_cli(capsys, "preflight", "--app-dir", str(app))
    assert code == 1
    assert_one_line(err, "no AWS credentials found")


def test_unknown_profile(bare_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "preflight", "--app-dir", str(REPO_ROOT), "--profile", "no-such-profile")
    assert code == 1
    assert_one_line(err, "no-such-profile", "aws configure list-profiles")


def test_rejected_credentials(aws: FakeAws, capsys: pytest.CaptureFixture[str]) -> None:
    aws("sts")[1].add_client_error(
        "get_caller_identity", "ExpiredToken", "The security token included in the request is expired", 403
    )
    code, out, err = run_cli(capsys, *APP)
    assert (code, out) == (1, "")
    assert_one_line(err, "AWS rejected the credentials (ExpiredToken)", "aws sso login")


def test_no_network(bare_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    endpoint = f"http://127.0.0.1:{ports.reserve().port}"  # reserved and held, never listening
    code, _, err = run_cli(capsys, *APP, "--endpoint-url", endpoint)
    assert code == 1
    assert_one_line(err, f"{endpoint} did not answer STS GetCallerIdentity", "check the network")


def test_every_flag_has_help() -> None:
    from llm_infra.cli import build_parser

    (subcommands,) = [a for a in build_parser()._actions if a.dest == "command"]
    parser = subcommands.choices["preflight"]  # type: ignore[attr-defined]
    flags = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert {"app_dir", "cdk_context", "cdk_out", "profile", "region", "endpoint_url", "output"} <= {
        a.dest for a in flags
    }
    assert all(a.help for a in flags)


@pytest.mark.parametrize("given", [False, True])
def test_missing_cdk_out_is_refused_naming_synth(
    aws: FakeAws, tmp_path: Path, given: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """No templates to compare with: exit 2 (bad input) in one line, before any check runs. The default is
    cdk.out in --app-dir."""
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "cdk.json").write_text((REPO_ROOT / "cdk.json").read_text())
    aws("sts")[1].add_response(
        "get_caller_identity", {"Account": ACCOUNT, "Arn": "arn:aws:iam::1:user/u", "UserId": "u"}
    )
    flags = ["--cdk-out", str(tmp_path / "elsewhere")] if given else []
    code, out, err = run_cli(capsys, "preflight", "--app-dir", str(app_dir), "--region", REGION, *flags)
    assert (code, out) == (2, "")
    missing = tmp_path / "elsewhere" if given else app_dir / "cdk.out"
    assert_one_line(err, f"--cdk-out: {missing} does not exist", "make synth, or npx cdk synth")
    aws.assert_all_called()
