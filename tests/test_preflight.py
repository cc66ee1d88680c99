"""`llm-infra preflight`: each check against botocore's Stubber on the real service models (moto 5.2.5 has no
ListServiceQuotas, DescribeAddonVersions or DescribeCapacityReservations), the command end to end on the repo's
cdk.json, and the one-line errors of a run without credentials, region, profile or network."""

from __future__ import annotations

import datetime
import json
import socket
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
from llm_infra.ops import preflight
from llm_infra.ops.preflight import FAIL, PASS, SKIP, WARN, QuotaBook
from llm_infra.stacks.training_app import add_training_stacks
from llm_infra.versions import EKS_ADDONS, HYPERPOD_TRAINING_OPERATOR_ADDONS

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


@pytest.mark.parametrize(("storage", "status"), [("1200", PASS), ("4800", FAIL)])
def test_fsx_quota_against_storage(storage: str, status: str) -> None:
    client, stub = stubbed("service-quotas")
    queue_listing(stub, "list_service_quotas", "fsx", [[quota(preflight.FSX_PERSISTENT_2_QUOTA, "L-8F1B9C74", 2400)]])
    with stub:
        result = preflight.check_fsx_quota(QuotaBook(client), app_config(fsx_storage_gib=storage), REGION)
    assert result.status == status


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


def test_pinned_addons_follow_the_training_operator() -> None:
    assert preflight.pinned_addons(app_config()) == EKS_ADDONS["1.34"]
    hyperpod = preflight.pinned_addons(app_config(compute="hyperpod", kubernetes_version="1.35"))
    assert hyperpod == {**EKS_ADDONS["1.35"], **HYPERPOD_TRAINING_OPERATOR_ADDONS["1.35"]}


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
    queue_listing(
        quotas, "list_service_quotas", "fsx", [[quota(preflight.FSX_PERSISTENT_2_QUOTA, "L-8F1B9C74", 100800)]]
    )
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
    aws("cloudformation")[1].add_client_error(
        "list_stack_resources", "ValidationError", "Stack with id llm-infra-cluster does not exist"
    )
    aws("cloudformation")[1].add_response("describe_stacks", toolkit())
    parameter = {"Name": preflight.CDK_BOOTSTRAP_VERSION_PARAMETER, "Value": "29", "Type": "String"}
    aws("ssm")[1].add_response("get_parameter", {"Parameter": parameter})


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> FakeAws:
    fake = FakeAws()
    monkeypatch.setattr(preflight_command, "aws_client", fake.aws_client)
    monkeypatch.delenv("AWS_REGION", raising=False)
    return fake


APP = ("preflight", "--app-dir", str(REPO_ROOT), "--region", REGION)
DEFAULT_RUN_CHECKS = [
    "availability zone",
    "instance type offered",
    "EFA interfaces",
    "quota: EC2 GPU vCPUs",
    "quota: EC2 system vCPUs",
    "quota: FSx for Lustre",
    *(f"add-on {name}" for name in EKS_ADDONS["1.34"]),
    "HyperPod Helm template",
    "operators change",
    "CDK bootstrap",
]


def test_table_of_a_passing_run_exits_0(aws: FakeAws, capsys: pytest.CaptureFixture[str]) -> None:
    queue_default_run(aws)
    code, out, err = run_cli(capsys, *APP)
    assert (code, err) == (0, "")
    aws.assert_all_called()
    lines = out.splitlines()
    assert lines[0].split() == ["check", "status", "detail"]
    for name in DEFAULT_RUN_CHECKS:
        (row,) = [line for line in lines if line.startswith(name + "  ")]
        assert row[len(name) :].split()[0] == PASS, row
    assert lines[-1] == f"preflight of account {ACCOUNT} in {REGION}: PASS ({len(DEFAULT_RUN_CHECKS)} pass)"


def test_a_failing_quota_exits_1_with_its_fix(aws: FakeAws, capsys: pytest.CaptureFixture[str]) -> None:
    queue_default_run(aws, p_quota=0)
    code, out, _ = run_cli(capsys, *APP)
    assert code == 1
    (row,) = [line for line in out.splitlines() if line.startswith("quota: EC2 GPU vCPUs")]
    assert " FAIL " in row and "'Running On-Demand P instances' is 0, 384 vCPUs needed" in row
    assert (
        "  quota: EC2 GPU vCPUs: aws service-quotas request-service-quota-increase --service-code ec2 "
        "--quota-code L-417A185B --desired-value 384 --region us-east-1"
    ) in out.splitlines()
    assert out.splitlines()[-1].startswith(f"preflight of account {ACCOUNT} in {REGION}: FAIL (")


def test_json_output(aws: FakeAws, capsys: pytest.CaptureFixture[str]) -> None:
    queue_default_run(aws, p_quota=192)
    code, out, _ = run_cli(capsys, *APP, "--output", "json")
    assert code == 1
    report = json.loads(out)
    assert report["region"] == REGION and report["account"] == ACCOUNT
    assert [c["name"] for c in report["checks"]] == DEFAULT_RUN_CHECKS
    assert all(set(c) == {"name", "status", "detail", "fix"} for c in report["checks"])
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses.pop("quota: EC2 GPU vCPUs") == FAIL
    assert set(statuses.values()) == {PASS}


def test_access_denied_on_one_check_warns_and_the_others_run(aws: FakeAws, capsys: pytest.CaptureFixture[str]) -> None:
    queue_default_run(aws, denied_addon="coredns")
    code, out, _ = run_cli(capsys, *APP, "--output", "json")
    assert code == 0
    aws.assert_all_called()
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert checks["add-on coredns"]["status"] == WARN
    assert checks["add-on coredns"]["detail"] == "not checked: access denied to eks:DescribeAddonVersions"
    assert "allow eks:DescribeAddonVersions" in checks["add-on coredns"]["fix"]
    assert [name for name, c in checks.items() if c["status"] != PASS] == ["add-on coredns"]


def test_hyperpod_run_checks_sagemaker_quotas_and_names_every_denied_action() -> None:
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
    results = preflight.run_checks(config, region=REGION, account=ACCOUNT, client=client)
    by_name = {r.name: r for r in results}
    assert list(by_name) == [
        "availability zone",
        "instance type offered",
        "EFA interfaces",
        "quota: ml.p5.48xlarge",
        "quota: ml.m5.2xlarge",
        "quota: HyperPod instances",
        "quota: EC2 system vCPUs",
        "quota: FSx for Lustre",
        *(f"add-on {name}" for name in preflight.pinned_addons(config)),
        "HyperPod Helm template",
        "operators change",
        "CDK bootstrap",
    ]
    assert by_name.pop("EFA interfaces").status == SKIP  # HyperPod attaches EFA itself: nothing to ask
    assert by_name["quota: ml.p5.48xlarge"].detail == "not checked: access denied to servicequotas:ListServiceQuotas"
    assert by_name["HyperPod Helm template"].fix.startswith("allow s3:GetObject on arn:aws:s3:::")
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


def test_no_region(bare_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "preflight", "--app-dir", str(REPO_ROOT))
    assert (code, out) == (1, "")
    assert_one_line(err, "no AWS region: pass --region", "gpu_az_id use1-az4 lies in us-east-1")


@pytest.mark.parametrize("source", ["cdk.json", "AWS_REGION", "AWS_DEFAULT_REGION"])
def test_region_from_config_or_environment(
    source: str, bare_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The config's region, else AWS_REGION (as the CDK CLI reads it), else boto3's: with one of them and
    no credentials, what fails is the credentials."""
    app = tmp_path / "app"
    app.mkdir()
    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    if source == "cdk.json":
        context["region"] = REGION
    else:
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
    assert_one_line(err, "AWS rejected the credentials (ExpiredToken: The security token", "aws sso login")


def test_no_network(bare_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
    code, _, err = run_cli(capsys, *APP, "--endpoint-url", endpoint)
    assert code == 1
    assert_one_line(err, f"cannot reach AWS at {endpoint}", "check the network")


def test_every_flag_has_help() -> None:
    from llm_infra.cli import build_parser

    (subcommands,) = [a for a in build_parser()._actions if a.dest == "command"]
    parser = subcommands.choices["preflight"]  # type: ignore[attr-defined]
    flags = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert {a.dest for a in flags} == {"app_dir", "cdk_context", "profile", "region", "endpoint_url", "output"}
    assert all(a.help for a in flags)
