"""``llm-infra preflight``: what only the AWS account can tell before a deploy, as PASS/FAIL checks.

Offline synth cannot know quotas, capacity, which builds AWS serves, or what is deployed already. Each
check here is a plain function of boto3 clients and the app's :class:`~llm_infra.config.TrainingConfig`
(and, for what the deploy would change, the synthesized templates in ``cdk.out``) that returns one
:class:`CheckResult`; :func:`run_checks` runs those the config calls for. Nothing here prints.

A ``ClientError`` a check does not expect (AccessDenied above all) turns that check into a WARN that
names the IAM action it needed; the other checks still run. Errors of the SDK itself (no credentials,
no region, no network) propagate: the command reports them in one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError

from llm_infra.config import (
    HYPERPOD_CPU_INSTANCE_TYPE,
    HYPERPOD_HELM_TEMPLATE_KEY,
    HYPERPOD_SETUP_BUCKET,
    KUBERNETES_VERSIONS,
    TrainingConfig,
)
from llm_infra.instance_types import EfaLayout
from llm_infra.preflight import create_only
from llm_infra.preflight.create_only import Replacement, Synthesized
from llm_infra.versions import EKS_ADDONS, HYPERPOD_TASK_GOVERNANCE_ADDONS, HYPERPOD_TRAINING_OPERATOR_ADDONS

PASS, FAIL, WARN, SKIP = "PASS", "FAIL", "WARN", "SKIP"

ClientFactory = Callable[[str], Any]  # service name ("ec2", "eks", ...) -> boto3 client

# HyperPod account quotas (docs: sagemaker-hyperpod-prerequisites, "List of common service quotas to
# create a HyperPod cluster"); the instance-type quotas are named "ml.<instance_type> for cluster usage".
HYPERPOD_TOTAL_INSTANCES_QUOTA = "Total number of instances allowed across SageMaker HyperPod clusters"
HYPERPOD_CLUSTER_INSTANCES_QUOTA = "Maximum number instances allowed per SageMaker HyperPod cluster"
# EC2 On-Demand quotas count vCPUs of running instances per family group (docs: ec2-on-demand-instances
# "On-Demand Instance quotas"); the codes are stable across regions.
EC2_ON_DEMAND_QUOTAS = {
    "P": ("L-417A185B", "Running On-Demand P instances"),
    "G": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "Standard": ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
}
# HyperPod's per-instance EBS volume quota, compared with the largest ClusterEbsVolumeConfig.VolumeSizeInGB we
# ask (same docs table, row 2: "Maximum size of EBS volume in GB for a SageMaker HyperPod cluster instance ...
# Your account-level quota value must be more than the EBS volume you wish to add to your cluster").
HYPERPOD_EBS_VOLUME_QUOTA = "Maximum size of EBS volume in GB for a SageMaker HyperPod cluster instance"
# FSx for Lustre PERSISTENT_2 quotas (StorageStack creates PERSISTENT_2), asked by code (service code fsx):
# the region's total SSD capacity of PERSISTENT_2 file systems (default 100800 GiB) and their count
# (default 100). The codes and names are those ListAWSDefaultServiceQuotas --service-code fsx returns, as
# recorded in public dumps of that listing ("| fsx | Lustre Persistent_2 storage capacity | L-8F1B9C74 |
# 100800.0 |", "| fsx | Lustre Persistent_2 file systems | L-FD6F2F22 | 100.0 |"); the 100800 GiB default is
# also AWS's FSx for Lustre User Guide, Quotas ("Total storage for all file systems | 100,800 GiB").
FSX_PERSISTENT_2_STORAGE_QUOTA = ("L-8F1B9C74", "Lustre Persistent_2 storage capacity")
FSX_PERSISTENT_2_FILE_SYSTEMS_QUOTA = ("L-FD6F2F22", "Lustre Persistent_2 file systems")
# The HyperPod training operator add-on: AWS's page lists fewer Kubernetes versions than our pin covers
# (docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-eks-operator.html, "Supported versions": "Supported
# Kubernetes versions - 1.28, 1.29, 1.30, 1.31, 1.32, and 1.33"); the pin for 1.34 and 1.35
# (llm_infra/versions.py, HYPERPOD_TRAINING_OPERATOR_ADDONS) rests on a PR. DescribeAddonVersions decides.
HYPERPOD_TRAINING_OPERATOR_ADDON = "amazon-sagemaker-hyperpod-training-operator"
HYPERPOD_TRAINING_OPERATOR_DOCUMENTED = ("1.28", "1.29", "1.30", "1.31", "1.32", "1.33")
HYPERPOD_TRAINING_OPERATOR_PIN_SOURCE = "awslabs/awsome-distributed-ai PR #1076 (commit 414d4da; llm_infra/versions.py)"
# The template AWS's HyperPod Helm stack nests (constructs/hyperpod_dependencies.py HELM_CHART_TEMPLATE_URL).
HELM_TEMPLATE_BUCKET = HYPERPOD_SETUP_BUCKET
HELM_TEMPLATE_KEY = HYPERPOD_HELM_TEMPLATE_KEY
# CDK's default bootstrap: the stack, and the version parameter each synthesized template's
# CheckBootstrapVersion rule reads (it rejects versions 1-5).
CDK_TOOLKIT_STACK = "CDKToolkit"
CDK_BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
CDK_MIN_BOOTSTRAP_VERSION = 6
_USABLE_STACK_STATUSES = (
    "CREATE_COMPLETE",
    "UPDATE_COMPLETE",
    "UPDATE_ROLLBACK_COMPLETE",
    "IMPORT_COMPLETE",
    "IMPORT_ROLLBACK_COMPLETE",
)

# The IAM action behind each API operation the checks call (HeadObject is authorized as s3:GetObject).
IAM_ACTIONS = {
    "GetCallerIdentity": "sts:GetCallerIdentity",
    "ListServiceQuotas": "servicequotas:ListServiceQuotas",
    "ListAWSDefaultServiceQuotas": "servicequotas:ListAWSDefaultServiceQuotas",
    "GetServiceQuota": "servicequotas:GetServiceQuota",
    "GetAWSDefaultServiceQuota": "servicequotas:GetAWSDefaultServiceQuota",
    "DescribeAvailabilityZones": "ec2:DescribeAvailabilityZones",
    "DescribeInstanceTypeOfferings": "ec2:DescribeInstanceTypeOfferings",
    "DescribeInstanceTypes": "ec2:DescribeInstanceTypes",
    "DescribeCapacityReservations": "ec2:DescribeCapacityReservations",
    "DescribeAddonVersions": "eks:DescribeAddonVersions",
    "HeadObject": "s3:GetObject",
    "DescribeStacks": "cloudformation:DescribeStacks",
    "ListStackResources": "cloudformation:ListStackResources",
    "GetTemplate": "cloudformation:GetTemplate",
    "GetTemplateSummary": "cloudformation:GetTemplateSummary",
    "ListExports": "cloudformation:ListExports",
    "DescribeSubnets": "ec2:DescribeSubnets",
    "GetParameter": "ssm:GetParameter",
}
_ACCESS_DENIED = re.compile(r"AccessDenied|UnauthorizedOperation|Unauthorized|Forbidden|^403$")


@dataclass(frozen=True)
class CheckResult:
    """One line of the preflight report; ``fix`` says what to do when the status is not PASS."""

    name: str
    status: str
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Quota:
    code: str
    name: str
    value: float | None
    default: bool  # the AWS default value: Service Quotas lists no applied value for this account


def failed(results: list[CheckResult]) -> bool:
    return any(r.status == FAIL for r in results)


# ---- running the checks -----------------------------------------------------------------------
def run_checks(
    config: TrainingConfig,
    *,
    region: str,
    account: str,
    client: ClientFactory,
    cdk_out: Path | None = None,
) -> list[CheckResult]:
    """Every check the config calls for, in report order. ``client(service)`` gives a boto3 client (the
    same one each time: the command caches them). ``cdk_out``: the synthesized app (``cdk.out``), which the
    checks of what the deploy would change read; a folder without templates is bad input
    (:class:`~llm_infra.input_files.BadInput`, naming ``--cdk-out``), raised before any check runs."""
    synthesized = create_only.read_synthesized(cdk_out) if cdk_out is not None else None
    book = QuotaBook(client("service-quotas"))
    checks: list[tuple[str, Callable[[], CheckResult]]] = [
        ("availability zone", lambda: check_availability_zone(client("ec2"), config, region)),
        ("instance type offered", lambda: check_instance_offering(client("ec2"), config)),
        ("EFA interfaces", lambda: check_efa(client("ec2"), config)),
    ]
    if config.capacity_reservation_id:
        checks.append(("capacity reservation", lambda: check_capacity_reservation(client("ec2"), config)))
    if config.compute == "hyperpod":
        checks.append(
            (f"quota: {_ml(config.gpu_instance_type)}", lambda: check_hyperpod_gpu_quota(book, config, region))
        )
        if config.hyperpod_cpu_count:
            checks.append(
                (f"quota: {HYPERPOD_CPU_INSTANCE_TYPE}", lambda: check_hyperpod_cpu_quota(book, config, region))
            )
        checks.append(("quota: HyperPod instances", lambda: check_hyperpod_instance_quotas(book, config, region)))
        checks.append(("quota: HyperPod EBS volume", lambda: check_hyperpod_ebs_quota(book, config, region)))
    else:
        checks.append(("quota: EC2 GPU vCPUs", lambda: check_ec2_gpu_quota(book, config, region)))
    checks.append(("quota: EC2 system vCPUs", lambda: check_ec2_system_quota(book, client("ec2"), config, region)))
    checks.append(("quota: FSx for Lustre", lambda: check_fsx_quota(book, config, region)))
    for addon, version in pinned_addons(config).items():
        checks.append((f"add-on {addon}", partial(_check_addon, client, addon, version, config.kubernetes_version)))
    if config.operators == "aws-helm-stack":
        checks.append(("HyperPod Helm template", lambda: check_helm_template(client("s3"), region)))
        checks.append(
            (
                "HyperPod Helm parameters",
                lambda: check_helm_parameters(client("cloudformation"), region, synthesized),
            )
        )
    checks.append(("operators change", lambda: check_operators_change(client("cloudformation"), config)))
    checks.append(
        (
            "create-only properties",
            lambda: check_create_only(client("cloudformation"), lambda: client("ec2"), config, synthesized, region),
        )
    )
    checks.append(
        ("CDK bootstrap", lambda: check_bootstrap(client("cloudformation"), lambda: client("ssm"), account, region))
    )
    return [_guarded(name, check) for name, check in checks]


def _check_addon(client: ClientFactory, addon: str, version: str, kubernetes_version: str) -> CheckResult:
    return check_addon(client("eks"), addon, version, kubernetes_version)


def pinned_addons(config: TrainingConfig) -> dict[str, str]:
    """The EKS add-on builds the app installs for the config's Kubernetes version (versions.py): each pinned
    add-on that ``config.installs`` names (the EKS node monitoring agent, the HyperPod training operator and
    cert-manager, HyperPod task governance where the mode installs them; on an existing cluster,
    ``install_addons``)."""
    version = config.kubernetes_version
    pins = {
        **EKS_ADDONS.get(version, {}),
        **HYPERPOD_TRAINING_OPERATOR_ADDONS.get(version, {}),
        **HYPERPOD_TASK_GOVERNANCE_ADDONS.get(version, {}),
    }
    installs = config.installs
    return {addon: build for addon, build in pins.items() if addon in installs}


def _guarded(name: str, check: Callable[[], CheckResult]) -> CheckResult:
    """``check()``; an unexpected AWS error becomes a WARN of this check alone."""
    try:
        return check()
    except ClientError as err:
        return api_error_result(name, err)
    except (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError) as err:
        return CheckResult(name, WARN, f"could not reach the service: {err}", "check network access to that endpoint")


def api_error_result(name: str, err: ClientError) -> CheckResult:
    """A WARN for an AWS error a check cannot decide past; AccessDenied names the missing IAM action."""
    code = str(err.response.get("Error", {}).get("Code", ""))
    message = str(err.response.get("Error", {}).get("Message", "")).split("Encoded authorization")[0].strip()
    action = IAM_ACTIONS.get(err.operation_name, err.operation_name)
    if _ACCESS_DENIED.search(code):
        return CheckResult(
            name, WARN, f"not checked: access denied to {action}", f"allow {action} for the credentials you run with"
        )
    return CheckResult(name, WARN, f"not checked: {err.operation_name} failed: {code}: {message}".rstrip(": "))


def _error_code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


# ---- quotas -----------------------------------------------------------------------------------
class QuotaBook:
    """Service Quotas lookups, each service's listing fetched once.

    ``ListServiceQuotas`` returns only quotas with an applied value ("If the applied quota value is not
    available for a quota, the quota is not retrieved", Service Quotas API reference); a quota at its
    AWS default is then found with ``ListAWSDefaultServiceQuotas`` / ``GetAWSDefaultServiceQuota``.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self._listings: dict[tuple[str, str], dict[str, Quota]] = {}

    def by_name(self, service_code: str, quota_name: str) -> Quota | None:
        """The quota named ``quota_name``: the names are what AWS documents (public sources disagree on
        SageMaker's quota codes for the same name)."""
        for operation in ("list_service_quotas", "list_aws_default_service_quotas"):
            found = self._listing(operation, service_code).get(quota_name)
            if found:
                return found
        return None

    def by_code(self, service_code: str, quota_code: str) -> Quota | None:
        for operation in ("get_service_quota", "get_aws_default_service_quota"):
            try:
                quota = getattr(self.client, operation)(ServiceCode=service_code, QuotaCode=quota_code)["Quota"]
            except ClientError as err:
                if _error_code(err) == "NoSuchResourceException":
                    continue
                raise
            return _quota(quota, default=operation == "get_aws_default_service_quota")
        return None

    def _listing(self, operation: str, service_code: str) -> dict[str, Quota]:
        key = (operation, service_code)
        if key not in self._listings:
            pages = self.client.get_paginator(operation).paginate(
                ServiceCode=service_code, PaginationConfig={"PageSize": 100}
            )
            default = operation == "list_aws_default_service_quotas"
            self._listings[key] = {
                q["QuotaName"]: _quota(q, default=default) for page in pages for q in page.get("Quotas", [])
            }
        return self._listings[key]


def _quota(raw: dict[str, Any], *, default: bool) -> Quota:
    value = raw.get("Value")
    return Quota(str(raw.get("QuotaCode", "")), str(raw.get("QuotaName", "")), value, default)


def quota_result(
    name: str, quota: Quota, need: int, *, unit: str, service_code: str, region: str, what: str, need_max: int = 0
) -> CheckResult:
    """PASS when ``quota`` covers ``need``; WARN when it covers ``need`` but not ``need_max`` (scaling up)."""
    source = " (AWS default)" if quota.default else ""
    if quota.value is None:
        return CheckResult(name, WARN, f"Service Quotas returned no value for {quota.name!r}")
    value = int(quota.value)
    increase = (
        f"aws service-quotas request-service-quota-increase --service-code {service_code} "
        f"--quota-code {quota.code} --desired-value {{n}} --region {region}"
    )
    short = [
        (FAIL, need, f"{quota.name!r} is {value}{source}, {need} {unit} needed ({what})"),
        (
            WARN,
            need_max,
            f"{quota.name!r} is {value}{source}: enough for {need} {unit}, not for {need_max} at gpu_nodes_max",
        ),
    ]
    for status, wanted, detail in short:
        if value < wanted:
            return CheckResult(name, status, detail, increase.format(n=wanted))
    return CheckResult(name, PASS, f"{quota.name!r} is {value}{source} >= {max(need, need_max)} {unit} ({what})")


def check_hyperpod_gpu_quota(book: QuotaBook, config: TrainingConfig, region: str) -> CheckResult:
    """SageMaker "ml.<gpu type> for cluster usage" >= gpu_nodes (the GPU instance group's count)."""
    ml_type = _ml(config.gpu_instance_type)
    if config.hyperpod_training_plan_arn:
        # Not verified against AWS docs: whether a training plan's instances draw on this quota.
        return CheckResult(
            f"quota: {ml_type}", SKIP, "the GPU instance group runs on hyperpod_training_plan_arn's reserved capacity"
        )
    quota_name = f"{ml_type} for cluster usage"
    return _hyperpod_quota(book, f"quota: {ml_type}", quota_name, config.gpu_nodes, "gpu_nodes", region)


def check_hyperpod_cpu_quota(book: QuotaBook, config: TrainingConfig, region: str) -> CheckResult:
    """SageMaker "ml.m5.2xlarge for cluster usage" >= the CPU instance group's count."""
    name = f"quota: {HYPERPOD_CPU_INSTANCE_TYPE}"
    quota_name = f"{HYPERPOD_CPU_INSTANCE_TYPE} for cluster usage"
    return _hyperpod_quota(book, name, quota_name, config.hyperpod_cpu_count, "hyperpod_cpu_nodes", region)


def _hyperpod_quota(book: QuotaBook, name: str, quota_name: str, need: int, what: str, region: str) -> CheckResult:
    quota = book.by_name("sagemaker", quota_name)
    if quota is None:
        return CheckResult(
            name,
            FAIL,
            f"SageMaker lists no quota {quota_name!r} in {region}: HyperPod offers no such instance there",
            "choose a region or instance type HyperPod offers (aws service-quotas list-aws-default-service-quotas "
            f"--service-code sagemaker --region {region} "
            "--query \"Quotas[?ends_with(QuotaName, 'for cluster usage')].QuotaName\")",
        )
    return quota_result(name, quota, need, unit="instances", service_code="sagemaker", region=region, what=what)


def check_hyperpod_instance_quotas(book: QuotaBook, config: TrainingConfig, region: str) -> CheckResult:
    """The HyperPod instance-count quotas, per cluster and across clusters, >= GPU + CPU instances."""
    name = "quota: HyperPod instances"
    need = config.gpu_nodes + config.hyperpod_cpu_count
    results = []
    for quota_name in (HYPERPOD_CLUSTER_INSTANCES_QUOTA, HYPERPOD_TOTAL_INSTANCES_QUOTA):
        quota = book.by_name("sagemaker", quota_name)
        if quota is not None:
            what = "gpu_nodes + hyperpod_cpu_nodes"
            results.append(
                quota_result(name, quota, need, unit="instances", service_code="sagemaker", region=region, what=what)
            )
    if not results:
        return CheckResult(name, SKIP, f"SageMaker lists no HyperPod instance-count quota in {region}")
    return _worst(name, results)


def check_ec2_gpu_quota(book: QuotaBook, config: TrainingConfig, region: str) -> CheckResult:
    """EKS GPU nodes: the family's Running On-Demand vCPU quota >= gpu_nodes x vCPUs (on-demand only)."""
    name = "quota: EC2 GPU vCPUs"
    if config.capacity != "on-demand":
        # Assumption, partly from AWS docs: an On-Demand Capacity Reservation is admitted against the
        # On-Demand quota when it is created (API CreateCapacityReservation: "could also fail if the
        # requested quantity exceeds your On-Demand Instance limit"), so launching into it needs no more;
        # instances in a Capacity Block are taken not to count against On-Demand quotas (no AWS page
        # found that says either way).
        return CheckResult(
            name,
            SKIP,
            f"gpu_capacity={config.capacity}: reserved capacity is not drawn from the On-Demand vCPU quota "
            "(see the capacity reservation check)",
        )
    profile = config.gpu_profile
    family = _quota_family(profile.instance_type)
    if family not in ("P", "G"):
        return CheckResult(name, SKIP, f"no known On-Demand quota for {profile.instance_type}")
    code, _ = EC2_ON_DEMAND_QUOTAS[family]
    quota = book.by_code("ec2", code)
    if quota is None:
        return CheckResult(name, WARN, f"Service Quotas has no EC2 quota {code} in {region}")
    return quota_result(
        name,
        quota,
        config.gpu_nodes * profile.vcpus,
        need_max=config.gpu_max * profile.vcpus,
        unit="vCPUs",
        service_code="ec2",
        region=region,
        what=f"gpu_nodes {config.gpu_nodes} x {profile.vcpus} vCPUs of {profile.instance_type}",
    )


def check_ec2_system_quota(book: QuotaBook, ec2: Any, config: TrainingConfig, region: str) -> CheckResult:
    """The EKS system node group's family quota >= system_nodes x vCPUs (vCPUs from DescribeInstanceTypes)."""
    name = "quota: EC2 system vCPUs"
    instance_type = config.system_instance_type
    family = _quota_family(instance_type)
    if family != "Standard":
        return CheckResult(name, SKIP, f"no known On-Demand quota for {instance_type}")
    (info,) = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
    vcpus = int(info["VCpuInfo"]["DefaultVCpus"])
    code, _ = EC2_ON_DEMAND_QUOTAS[family]
    quota = book.by_code("ec2", code)
    if quota is None:
        return CheckResult(name, WARN, f"Service Quotas has no EC2 quota {code} in {region}")
    what = f"system_nodes {config.system_nodes} x {vcpus} vCPUs of {instance_type}"
    return quota_result(
        name, quota, config.system_nodes * vcpus, unit="vCPUs", service_code="ec2", region=region, what=what
    )


def check_hyperpod_ebs_quota(book: QuotaBook, config: TrainingConfig, region: str) -> CheckResult:
    """SageMaker "Maximum size of EBS volume in GB for a SageMaker HyperPod cluster instance" >= the largest
    EBS volume an instance group asks (ClusterEbsVolumeConfig.VolumeSizeInGB)."""
    name = "quota: HyperPod EBS volume"
    sizes = hyperpod_ebs_volumes(config)
    if not sizes:
        return CheckResult(name, SKIP, "no instance group asks for an EBS volume")
    group, need = max(sizes.items(), key=lambda item: item[1])
    quota = book.by_name("sagemaker", HYPERPOD_EBS_VOLUME_QUOTA)
    if quota is None:
        return CheckResult(
            name,
            WARN,
            f"not checked: SageMaker lists no quota {HYPERPOD_EBS_VOLUME_QUOTA!r} in {region}",
            "check by hand that the quota is at least "
            f"{need} GB (gpu_root_volume_gib): aws service-quotas list-aws-default-service-quotas --service-code "
            f"sagemaker --region {region} --query \"Quotas[?contains(QuotaName, 'EBS volume')]\" (and "
            "list-service-quotas for an applied value)",
        )
    what = f"the {group} instance group's EBS volume, gpu_root_volume_gib"
    return quota_result(name, quota, need, unit="GB", service_code="sagemaker", region=region, what=what)


def hyperpod_ebs_volumes(config: TrainingConfig) -> dict[str, int]:
    """The EBS volume (GB) each HyperPod instance group asks for, as stacks/cluster_stack.py ``_hyperpod``
    builds them: the GPU group one of gpu_root_volume_gib, the CPU group none."""
    return {"gpu": config.gpu_root_volume_gib} if config.compute == "hyperpod" else {}


def check_fsx_quota(book: QuotaBook, config: TrainingConfig, region: str) -> CheckResult:
    """FSx "Lustre Persistent_2 storage capacity" (GiB, all PERSISTENT_2 file systems of the region) >=
    fsx_storage_gib and "Lustre Persistent_2 file systems" >= 1, by quota code; a code Service Quotas does
    not know is a WARN with the way to check by hand."""
    name = "quota: FSx for Lustre"
    wanted = [
        (
            FSX_PERSISTENT_2_STORAGE_QUOTA,
            config.fsx_storage_gib,
            "GiB",
            "fsx_storage_gib; shared by all PERSISTENT_2 file systems of the region",
        ),
        (FSX_PERSISTENT_2_FILE_SYSTEMS_QUOTA, 1, "file systems", "the storage stack's one PERSISTENT_2 file system"),
    ]
    results = []
    for (code, quota_name), need, unit, what in wanted:
        quota = book.by_code("fsx", code)
        if quota is None:
            results.append(
                CheckResult(
                    name,
                    WARN,
                    f"not checked: Service Quotas has no FSx quota {code} ({quota_name!r}) in {region}",
                    f"check by hand that {quota_name!r} allows {need} {unit}: aws service-quotas "
                    f"list-service-quotas --service-code fsx --region {region} "
                    "--query \"Quotas[?contains(QuotaName, 'Persistent_2')]\" (list-aws-default-service-quotas "
                    "for the defaults); AWS may have renamed or recoded it",
                )
            )
        else:
            results.append(quota_result(name, quota, need, unit=unit, service_code="fsx", region=region, what=what))
    return _worst(name, results)


def _quota_family(instance_type: str) -> str:
    """The On-Demand quota group of an EC2 instance type (docs: ec2-on-demand-instances, quota table)."""
    family = instance_type.removeprefix("ml.").split(".")[0].lower()
    if not family or family.startswith(("inf", "trn", "dl", "hpc", "u-", "vt", "x", "f")):
        return ""  # families with quotas of their own
    if family[0] in "pg":
        return family[0].upper()
    return "Standard" if family[0] in "acdhimrtz" else ""


def _ml(instance_type: str) -> str:
    return "ml." + instance_type.removeprefix("ml.")


def _worst(name: str, results: list[CheckResult]) -> CheckResult:
    """One result from several: the worst status, every non-PASS detail (all details when all pass)."""
    order = (FAIL, WARN, SKIP, PASS)
    worst = min(results, key=lambda r: order.index(r.status))
    shown = [r for r in results if r.status != PASS] or results
    return CheckResult(name, worst.status, "; ".join(r.detail for r in shown), "; ".join(r.fix for r in shown if r.fix))


# ---- placement: AZ, offering, EFA, reserved capacity --------------------------------------------
def check_availability_zone(ec2: Any, config: TrainingConfig, region: str) -> CheckResult:
    """gpu_az_id lies in the region and is available to the account (EC2 DescribeAvailabilityZones)."""
    name = "availability zone"
    az_id = config.gpu_az_id
    if config.gpu_az_region and config.gpu_az_region != region:
        return CheckResult(
            name,
            FAIL,
            f"gpu_az_id {az_id} lies in {config.gpu_az_region}, the deploy goes to {region}",
            f"run with --region {config.gpu_az_region} (and deploy there), or pick an AZ ID of {region}: "
            f"aws ec2 describe-availability-zones --region {region} --query 'AvailabilityZones[].ZoneId'",
        )
    try:
        zones = ec2.describe_availability_zones(ZoneIds=[az_id])["AvailabilityZones"]
    except ClientError as err:
        if _error_code(err) != "InvalidParameterValue":
            raise
        zones = []
    if not zones:
        return CheckResult(
            name,
            FAIL,
            f"{region} has no availability zone {az_id} for this account",
            f"-c gpu_az_id=<one of: aws ec2 describe-availability-zones --region {region} "
            "--query 'AvailabilityZones[].ZoneId'>",
        )
    zone = zones[0]
    state = zone.get("State", "?")
    detail = f"{az_id} is {zone.get('ZoneName', '?')} in this account, {state}"
    if state != "available":
        return CheckResult(name, FAIL, detail, "pick another gpu_az_id, or wait until AWS reports it available")
    return CheckResult(name, PASS, detail)


def check_instance_offering(ec2: Any, config: TrainingConfig) -> CheckResult:
    """The GPU instance type is offered in gpu_az_id (EC2 DescribeInstanceTypeOfferings by AZ ID).

    HyperPod's ``ml.`` types have no offering API of their own; the EC2 type is a proxy for them.
    """
    name = "instance type offered"
    instance_type = config.gpu_instance_type.removeprefix("ml.")
    az_id = config.gpu_az_id
    proxy = f" (EC2 offering as a proxy for HyperPod's {_ml(instance_type)})" if config.compute == "hyperpod" else ""
    offered = ec2.describe_instance_type_offerings(
        LocationType="availability-zone-id",
        Filters=[{"Name": "location", "Values": [az_id]}, {"Name": "instance-type", "Values": [instance_type]}],
    )["InstanceTypeOfferings"]
    if offered:
        return CheckResult(name, PASS, f"{instance_type} is offered in {az_id}{proxy}")
    elsewhere = sorted(
        {
            o["Location"]
            for page in ec2.get_paginator("describe_instance_type_offerings").paginate(
                LocationType="availability-zone-id", Filters=[{"Name": "instance-type", "Values": [instance_type]}]
            )
            for o in page["InstanceTypeOfferings"]
        }
    )
    fix = (
        f"-c gpu_az_id={elsewhere[0]} (offered in: {', '.join(elsewhere)})"
        if elsewhere
        else f"{instance_type} is offered in no AZ of this region: pick another region or gpu_instance_type"
    )
    return CheckResult(name, FAIL, f"{instance_type} is not offered in {az_id}{proxy}", fix)


def check_efa(ec2: Any, config: TrainingConfig) -> CheckResult:
    """The GPU type takes the EFA interfaces our launch template lays out (EC2 DescribeInstanceTypes
    ``NetworkInfo``: ``EfaInfo.MaximumEfaInterfaces``, ``MaximumNetworkCards``, card 0's interfaces)."""
    name = "EFA interfaces"
    if config.compute == "hyperpod":
        return CheckResult(name, SKIP, "HyperPod attaches the EFA interfaces of its instances itself")
    if not config.efa_enabled:
        return CheckResult(name, SKIP, "efa=false: the GPU nodes get no EFA interfaces")
    profile = config.gpu_profile
    layout = config.nic_layout
    wanted = profile.efa_interfaces  # constructs/nic_layout.py: one EFA interface per network card used
    (info,) = ec2.describe_instance_types(InstanceTypes=[profile.instance_type])["InstanceTypes"]
    network = info.get("NetworkInfo", {})
    if not network.get("EfaSupported"):
        return CheckResult(
            name,
            FAIL,
            f"EC2 reports no EFA support for {profile.instance_type}",
            "-c efa=false, or an EFA instance type",
        )
    max_efa = int(network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0))
    cards = int(network.get("MaximumNetworkCards", 1))
    card0: dict[str, Any] = next((c for c in network.get("NetworkCards", []) if c.get("NetworkCardIndex") == 0), {})
    card0_interfaces = int(card0.get("MaximumNetworkInterfaces", 0))
    problems = []
    if max_efa < wanted:
        problems.append(f"at most {max_efa} EFA interfaces, the {layout} layout attaches {wanted}")
    if cards < wanted:
        problems.append(f"{cards} network cards, the {layout} layout uses {wanted}")
    if layout is EfaLayout.EFA_ONLY and card0_interfaces and card0_interfaces < 2:
        problems.append(f"network card 0 takes {card0_interfaces} interface, efa-only puts ENA + EFA there")
    if problems:
        fix = "update llm_infra/instance_types.py for this type, or -c efa_layout=efa-legacy / -c efa=false"
        return CheckResult(name, FAIL, f"{profile.instance_type}: " + "; ".join(problems), fix)
    return CheckResult(
        name,
        PASS,
        f"{profile.instance_type}: up to {max_efa} EFA interfaces on {cards} network cards; "
        f"the {layout} layout attaches {wanted}",
    )


# DescribeCapacityReservations states (EC2 API CapacityReservation.State) that may still turn active.
_RESERVATION_NOT_YET = ("scheduled", "pending", "payment-pending", "assessing", "delayed")


def check_capacity_reservation(ec2: Any, config: TrainingConfig) -> CheckResult:
    """capacity_reservation_id: active (scheduled: WARN), the GPU type, in gpu_az_id, room for gpu_nodes."""
    name = "capacity reservation"
    reservation_id = str(config.capacity_reservation_id)
    try:
        (found,) = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except ClientError as err:
        if not _error_code(err).startswith("InvalidCapacityReservationId"):
            raise
        return CheckResult(
            name,
            FAIL,
            f"{reservation_id}: no such capacity reservation in this account and region ({_error_code(err)})",
            "set capacity_reservation_id to a reservation of this account in the deploy region "
            "(aws ec2 describe-capacity-reservations)",
        )
    state = found.get("State", "?")
    kind = "capacity-block" if found.get("ReservationType") == "capacity-block" else "capacity-reservation"
    total = int(found.get("TotalInstanceCount", 0))
    available = int(found.get("AvailableInstanceCount", 0))
    start = found.get("StartDate")
    problems: list[tuple[str, str]] = []
    if found.get("InstanceType") != config.gpu_instance_type:
        problems.append(
            (
                f"reserves {found.get('InstanceType')}, not {config.gpu_instance_type}",
                f"-c gpu_instance_type={found.get('InstanceType')}",
            )
        )
    if found.get("AvailabilityZoneId") != config.gpu_az_id:
        problems.append(
            (
                f"lies in {found.get('AvailabilityZoneId')}, not in gpu_az_id {config.gpu_az_id}",
                f"-c gpu_az_id={found.get('AvailabilityZoneId')}",
            )
        )
    if kind != config.capacity:
        problems.append((f"is a {kind}, gpu_capacity is {config.capacity}", f"-c gpu_capacity={kind}"))
    if state == "active" and available < config.gpu_nodes:
        problems.append(
            (
                f"has {available} of {total} instances free, gpu_nodes is {config.gpu_nodes}",
                f"-c gpu_nodes={available}, or free or extend the reservation",
            )
        )
    elif state != "active" and total < config.gpu_nodes:
        problems.append((f"holds {total} instances, gpu_nodes is {config.gpu_nodes}", f"-c gpu_nodes={total}"))
    if state not in ("active", *_RESERVATION_NOT_YET):
        problems.append((f"is {state}", "reserve capacity again and set its id"))
    if problems:
        return CheckResult(
            name,
            FAIL,
            f"{reservation_id} " + "; ".join(p for p, _ in problems),
            "; ".join(f for _, f in problems),
        )
    summary = f"{reservation_id}: {kind} of {found.get('InstanceType')} in {found.get('AvailabilityZoneId')}"
    if state != "active":
        when = start.isoformat() if hasattr(start, "isoformat") else str(start)
        return CheckResult(
            name,
            WARN,
            f"{summary}, {state}: starts {when}, GPU nodes cannot launch before",
            "deploy after the start date (or expect the GPU node group to wait and time out)",
        )
    return CheckResult(name, PASS, f"{summary}, active, {available} of {total} free >= gpu_nodes {config.gpu_nodes}")


# ---- builds AWS serves ----------------------------------------------------------------------------
def check_addon(eks: Any, addon: str, version: str, kubernetes_version: str) -> CheckResult:
    """The pinned add-on build exists for the Kubernetes version (EKS DescribeAddonVersions). For the HyperPod
    training operator, whose documented Kubernetes range and our pin disagree, the result says which one
    AWS's answer backs."""
    name = f"add-on {addon}"
    served = _served_builds(eks, addon, kubernetes_version)
    training_operator = addon == HYPERPOD_TRAINING_OPERATOR_ADDON
    if version in served:
        detail = f"{version} is served for Kubernetes {kubernetes_version}"
        if training_operator and kubernetes_version not in HYPERPOD_TRAINING_OPERATOR_DOCUMENTED:
            documented = _version_range(HYPERPOD_TRAINING_OPERATOR_DOCUMENTED)
            detail += (
                f" (DescribeAddonVersions is the gate: AWS's training operator page lists Kubernetes {documented} "
                "only, AWS serves the build here all the same)"
            )
        return CheckResult(name, PASS, detail)
    if training_operator:
        return _training_operator_not_served(eks, version, kubernetes_version, served)
    offer = ", ".join(_newest(served, 5)) if served else "none"
    return CheckResult(
        name,
        FAIL,
        f"pinned {version} is not served for Kubernetes {kubernetes_version}; AWS serves: {offer}",
        f"pin a served build of {addon} in llm_infra/versions.py (EKS_ADDONS / HYPERPOD_TRAINING_OPERATOR_ADDONS / "
        "HYPERPOD_TASK_GOVERNANCE_ADDONS)"
        if served
        else f"{addon} has no build for Kubernetes {kubernetes_version} here: pick another kubernetes_version",
    )


def _served_builds(eks: Any, addon: str, kubernetes_version: str) -> list[str]:
    """The builds of ``addon`` DescribeAddonVersions lists for ``kubernetes_version``."""
    served: list[str] = []
    try:
        pages = eks.get_paginator("describe_addon_versions").paginate(
            addonName=addon, kubernetesVersion=kubernetes_version
        )
        for page in pages:
            for entry in page.get("addons", []):
                if entry.get("addonName") == addon:
                    served += [v["addonVersion"] for v in entry.get("addonVersions", []) if "addonVersion" in v]
    except ClientError as err:
        if _error_code(err) != "ResourceNotFoundException":
            raise
    return served


def _served_kubernetes_versions(eks: Any, addon: str) -> list[str]:
    """The Kubernetes versions DescribeAddonVersions lists any build of ``addon`` for (its compatibilities)."""
    versions: set[str] = set()
    try:
        for page in eks.get_paginator("describe_addon_versions").paginate(addonName=addon):
            for entry in page.get("addons", []):
                if entry.get("addonName") != addon:
                    continue
                for build in entry.get("addonVersions", []):
                    versions |= {c["clusterVersion"] for c in build.get("compatibilities", []) if "clusterVersion" in c}
    except ClientError as err:
        if _error_code(err) != "ResourceNotFoundException":
            raise
    return _sorted_versions(versions)


def _training_operator_not_served(eks: Any, version: str, kubernetes_version: str, served: list[str]) -> CheckResult:
    """A FAIL that says plainly that AWS's answer and our pin disagree, and the ways through."""
    addon = HYPERPOD_TRAINING_OPERATOR_ADDON
    name = f"add-on {addon}"
    pin = f"our pin {version} for Kubernetes {kubernetes_version} rests on {HYPERPOD_TRAINING_OPERATOR_PIN_SOURCE}"
    if served:
        return CheckResult(
            name,
            FAIL,
            f"AWS serves no {version} of {addon} for Kubernetes {kubernetes_version} (it serves: "
            f"{', '.join(_newest(served, 5))}); {pin}: the deploy would fail creating the add-on",
            "pin a served build in llm_infra/versions.py (HYPERPOD_TRAINING_OPERATOR_ADDONS)",
        )
    elsewhere = _served_kubernetes_versions(eks, addon)
    listed = f"it lists builds for Kubernetes {_version_range(elsewhere)}" if elsewhere else "it lists no build at all"
    documented = _version_range(HYPERPOD_TRAINING_OPERATOR_DOCUMENTED)
    usable = [v for v in KUBERNETES_VERSIONS if v in elsewhere and v != kubernetes_version]
    ways = [f"-c kubernetes_version={usable[-1]} (AWS serves the operator there)"] if usable else []
    ways.append("-c hyperpod_training_operator=false (jobs run as Kubeflow PyTorchJobs on the HyperPod nodes)")
    if not usable:
        ways.append(
            f"or wait until AWS publishes a build for {kubernetes_version} (this app runs Kubernetes "
            f"{', '.join(KUBERNETES_VERSIONS)}; AWS's page lists {documented})"
        )
    return CheckResult(
        name,
        FAIL,
        f"AWS publishes no {addon} build for Kubernetes {kubernetes_version} ({listed}; AWS's page lists "
        f"{documented}); {pin}, and DescribeAddonVersions disagrees: the deploy would fail creating the add-on",
        "; ".join(ways),
    )


def _sorted_versions(versions: set[str] | list[str] | tuple[str, ...]) -> list[str]:
    return sorted(set(versions), key=lambda v: tuple(int(n) for n in re.findall(r"\d+", v)))


def _version_range(versions: set[str] | list[str] | tuple[str, ...]) -> str:
    """A range such as 1.28-1.33 for three or more consecutive minor versions, else the list."""
    ordered = _sorted_versions(versions)
    minors = [tuple(int(n) for n in re.findall(r"\d+", v)[:2]) for v in ordered]
    consecutive = all(b == (a[0], a[1] + 1) for a, b in zip(minors, minors[1:], strict=False))
    if len(ordered) > 2 and consecutive:
        return f"{ordered[0]}-{ordered[-1]}"
    return ", ".join(ordered)


def _newest(versions: list[str], count: int) -> list[str]:
    def key(version: str) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", version))

    return sorted(set(versions), key=key, reverse=True)[:count]


def check_helm_template(s3: Any, region: str) -> CheckResult:
    """AWS publishes the HyperPod Helm stack template in the region (S3 HeadObject)."""
    name = "HyperPod Helm template"
    bucket = HELM_TEMPLATE_BUCKET.format(region=region)
    where = f"s3://{bucket}/{HELM_TEMPLATE_KEY}"
    try:
        s3.head_object(Bucket=bucket, Key=HELM_TEMPLATE_KEY)
    except ClientError as err:
        code = _error_code(err)
        if code in ("404", "NoSuchKey", "NoSuchBucket", "NotFound"):
            return CheckResult(
                name,
                FAIL,
                f"{where} does not exist: AWS's HyperPod Helm stack is not published in {region}",
                "use a region where it is published, or -c operators=none (and install the training operator yourself)",
            )
        if code in ("403", "AccessDenied", "Forbidden"):
            return CheckResult(
                name,
                WARN,
                f"not checked: access denied to {where}",
                f"allow s3:GetObject on arn:aws:s3:::{bucket}/{HELM_TEMPLATE_KEY} for the credentials you run with",
            )
        raise
    return CheckResult(name, PASS, f"{where} exists")


def check_helm_parameters(cloudformation: Any, region: str, synthesized: Synthesized | None) -> CheckResult:
    """The parameters we pass to AWS's Helm-chart template (the synthesized ``AWS::CloudFormation::Stack``'s
    ``Parameters``) against those the template declares (CloudFormation ``GetTemplateSummary`` on its URL):
    a name it does not declare, or a parameter it requires (no default) that we do not pass, fails the deploy
    ("Parameters: [...] do not exist in the template" / "must have values")."""
    name = "HyperPod Helm parameters"
    if synthesized is None:
        return CheckResult(name, WARN, "not checked: no synthesized templates (cdk.out) to read our parameters from")
    passed = helm_stack_parameters(synthesized)
    if passed is None:
        return CheckResult(
            name,
            WARN,
            f"not checked: {synthesized.folder} holds no AWS Helm-chart stack (synthesized with operators=none?)",
            create_only.SYNTH_HINT,
        )
    url = f"https://{HELM_TEMPLATE_BUCKET.format(region=region)}.s3.{region}.amazonaws.com/{HELM_TEMPLATE_KEY}"
    declared = {
        p["ParameterKey"]: p for p in cloudformation.get_template_summary(TemplateURL=url).get("Parameters", [])
    }
    unknown = sorted(set(passed) - set(declared))
    required = sorted(key for key, p in declared.items() if "DefaultValue" not in p and key not in passed)
    problems = []
    if unknown:
        problems.append(
            f"we pass {', '.join(unknown)}, which AWS's template does not declare (it declares: "
            f"{', '.join(sorted(declared))})"
        )
    if required:
        problems.append(f"AWS's template requires {', '.join(required)} (no default), which we do not pass")
    if problems:
        return CheckResult(
            name,
            FAIL,
            "; ".join(problems) + f": creating the nested stack from {url} would fail",
            "update the parameters of constructs/hyperpod_dependencies.py to the template's (aws "
            f"cloudformation get-template-summary --template-url {url}), or -c operators=none",
        )
    return CheckResult(
        name, PASS, f"AWS's template declares all {len(passed)} parameters we pass and requires no other ({url})"
    )


def helm_stack_parameters(synthesized: Synthesized) -> list[str] | None:
    """The parameter names the synthesized app passes to AWS's Helm-chart template (None: no such stack)."""
    for _, _, resource in synthesized.resources("AWS::CloudFormation::Stack"):
        properties = resource.get("Properties", {})
        if HELM_TEMPLATE_KEY in json.dumps(properties.get("TemplateURL")):
            return sorted(properties.get("Parameters", {}))
    return None


def check_operators_change(cloudformation: Any, config: TrainingConfig) -> CheckResult:
    """Whether the deploy would change AWS's Helm-chart stack's inputs (constructs/hyperpod_dependencies.py):
    a new stack then cannot install over the old release, and the deploy rolls back; the way through is
    a deploy with ``operators=none`` first. Reads the deployed cluster stack's resources."""
    from llm_infra.constructs.hyperpod_dependencies import STACK_ID, chart_switches, inputs_digest
    from llm_infra.stacks.cluster_stack import OPERATORS_ID

    name = "operators change"
    stack_name = f"{config.project_name}-cluster"
    try:
        pages = cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack_name)
        resources = [r for page in pages for r in page["StackResourceSummaries"]]
    except ClientError as err:
        if _error_code(err) == "ValidationError" and "does not exist" in str(err):
            return CheckResult(name, PASS, f"{stack_name} is not deployed yet: the operators are installed fresh")
        raise
    prefix = f"{OPERATORS_ID}{STACK_ID}"
    deployed = [
        r["LogicalResourceId"][len(prefix) :]
        for r in resources
        if r["ResourceType"] == "AWS::CloudFormation::Stack" and r["LogicalResourceId"].startswith(prefix)
    ]
    if config.operators != "aws-helm-stack":
        removed = "its stack is deleted and AWS's Lambda uninstalls the release" if deployed else "none is deployed"
        return CheckResult(name, PASS, f"operators=none: {removed}")
    wanted = inputs_digest(chart_switches(hyperpod=config.compute == "hyperpod"))
    if not deployed:
        return CheckResult(name, PASS, f"no operators stack in {stack_name} yet: installed fresh ({wanted})")
    # Logical IDs: <prefix><digest, 8 hex><CDK's hash, 8>; an earlier llm-infra had no digest.
    installed = deployed[0][:8] if len(deployed[0]) == 16 else "an earlier llm-infra's"
    if installed == wanted:
        return CheckResult(name, PASS, f"unchanged ({wanted}): nothing is reinstalled")
    return CheckResult(
        name,
        FAIL,
        f"the deployed operators were installed for other inputs ({installed}, this config: {wanted}, e.g. another "
        "compute mode): AWS's stack cannot install over them, the deploy would fail and roll back",
        "deploy once with -c operators=none (AWS's Lambda uninstalls the old release), then with this config",
    )


# ---- what the deploy would replace -----------------------------------------------------------------
def check_create_only(
    cloudformation: Any, ec2: Callable[[], Any], config: TrainingConfig, synthesized: Synthesized | None, region: str
) -> CheckResult:
    """Compare the deployed stacks (CloudFormation GetTemplate) with the synthesized ones: a create-only property
    (cfn-lint's registry schemas) that changes replaces its resource, which fails outright for a resource
    that keeps its custom name and loses what a data store holds (:mod:`llm_infra.preflight.create_only`). For a
    deployed HyperPod cluster also the subnet it runs in (ListExports / ListStackResources, EC2
    DescribeSubnets): a gpu_az_id other than that subnet's AZ means a new subnet, hence a new VpcConfig."""
    name = "create-only properties"
    if synthesized is None:
        return CheckResult(name, WARN, "not checked: no synthesized templates (cdk.out) to compare with")
    stale = synthesized_for(config, synthesized)
    if stale:
        return CheckResult(
            name,
            WARN,
            f"not checked: {synthesized.folder} was synthesized for other settings ({'; '.join(stale)})",
            f"{create_only.SYNTH_HINT}, then run preflight again",
        )
    stacks = synthesized.project_stacks(config.project_name)
    try:
        deployed = {stack: t for stack in stacks if (t := _deployed_template(cloudformation, stack)) is not None}
    except ValueError as err:
        return CheckResult(name, WARN, f"not checked: {err}")
    if not deployed:
        return CheckResult(name, PASS, f"nothing deployed yet ({', '.join(stacks)}): every resource is created fresh")
    found = create_only.replacements(
        deployed, stacks, lambda resource_type: create_only.resource_schema(resource_type, region)
    )
    by_key = {r.key: r for r in found}
    results = _hyperpod_subnet_results(cloudformation, ec2, config, deployed, stacks, by_key)
    covered = {key for key, r in results if r.status != PASS}  # the subnet explains the replacement
    for replacement in found:
        if replacement.key not in covered and (replacement.data_store or replacement.custom_named):
            results.append((replacement.key, _replacement_result(name, replacement, by_key)))
    failing = [r for _, r in results if r.status != PASS]
    if failing:
        return _worst(name, failing)
    others = sorted(f"{r.stack}/{r.logical_id}" for r in found if not (r.data_store or r.custom_named))
    detail = f"{len(deployed)} deployed stack(s) ({', '.join(deployed)}): no create-only change replaces a "
    detail += f"custom-named resource or a data store ({create_only.SCHEMA_SOURCE})"
    if others:
        detail += f"; replaced, unnamed: {', '.join(others[:5])}{' ...' if len(others) > 5 else ''}"
    detail += "".join(f"; {r.detail}" for _, r in results)
    return CheckResult(name, PASS, detail)


def synthesized_for(config: TrainingConfig, synthesized: Synthesized) -> list[str]:
    """How the synthesized templates differ from ``config`` where the comparison depends on it."""
    stale = []
    stacks = synthesized.project_stacks(config.project_name)
    if not stacks:
        return [f"no stack of project_name {config.project_name} (it holds {', '.join(sorted(synthesized.templates))})"]
    compute = "hyperpod" if any(synthesized.resources("AWS::SageMaker::Cluster")) else "eks"
    if compute != config.compute:
        stale.append(f"compute={compute}, the config says {config.compute}")
    zones = {
        r.get("Properties", {}).get("AvailabilityZoneId")
        for _, _, r in synthesized.resources("AWS::EC2::Subnet")
        if isinstance(r.get("Properties", {}).get("AvailabilityZoneId"), str)
    }
    if zones and config.gpu_az_id not in zones:
        stale.append(f"gpu_az_id={', '.join(sorted(zones))}, the config says {config.gpu_az_id}")
    return stale


def _deployed_template(cloudformation: Any, stack: str) -> dict[str, Any] | None:
    """The template a stack was deployed with (GetTemplate, as submitted); None when it does not exist."""
    try:
        body = cloudformation.get_template(StackName=stack, TemplateStage="Original")["TemplateBody"]
    except ClientError as err:
        if _error_code(err) == "ValidationError" and "does not exist" in str(err):
            return None
        raise
    if isinstance(body, dict):  # botocore decodes a JSON template body
        return body
    try:
        decoded = json.loads(body)
    except ValueError:
        raise ValueError(f"{stack}'s deployed template is not JSON (not deployed by cdk deploy?)") from None
    return decoded if isinstance(decoded, dict) else None


def _hyperpod_subnet_results(
    cloudformation: Any,
    ec2: Callable[[], Any],
    config: TrainingConfig,
    deployed: dict[str, dict[str, Any]],
    synthesized: dict[str, dict[str, Any]],
    found: dict[create_only.Key, Replacement],
) -> list[tuple[create_only.Key, CheckResult]]:
    """Each deployed HyperPod cluster that the deploy keeps: its subnet's AZ ID against gpu_az_id."""
    name = "create-only properties"
    results = []
    resolver = _PhysicalIds(cloudformation)
    for stack, logical_id, cluster, subnets in create_only.hyperpod_subnets(deployed):
        if logical_id not in synthesized.get(stack, {}).get("Resources", {}):
            continue
        ids = [resolver.resolve(stack, subnet) for subnet in subnets]
        known = [i for i in ids if i]
        if not known:
            results.append(
                (
                    (stack, logical_id),
                    CheckResult(
                        name,
                        WARN,
                        f"HyperPod cluster {cluster}: cannot tell the subnet of its VpcConfig "
                        f"({', '.join(create_only.show(s) for s in subnets)})",
                        f"check by hand that its subnet lies in gpu_az_id {config.gpu_az_id}: aws sagemaker "
                        f"describe-cluster --cluster-name {cluster} --query VpcConfig",
                    ),
                )
            )
            continue
        zones = {
            s["SubnetId"]: s.get("AvailabilityZoneId", "?") for s in ec2().describe_subnets(SubnetIds=known)["Subnets"]
        }
        elsewhere = {subnet: zone for subnet, zone in zones.items() if zone != config.gpu_az_id}
        where = ", ".join(f"{subnet} in {zone}" for subnet, zone in zones.items())
        if not elsewhere:
            results.append(
                ((stack, logical_id), CheckResult(name, PASS, f"HyperPod cluster {cluster}: {where} = gpu_az_id"))
            )
            continue
        deployed_zone = sorted(set(elsewhere.values()))[0]
        results.append(
            (
                (stack, logical_id),
                CheckResult(
                    name,
                    FAIL,
                    f"HyperPod cluster {cluster} ({stack}/{logical_id}) runs in {where}, gpu_az_id is "
                    f"{config.gpu_az_id}: the deploy would make a new GPU subnet there and give the cluster a new "
                    "VpcConfig, which is create-only (HyperPod cannot change a cluster's VpcConfig), so "
                    f"CloudFormation would replace the cluster, and its fixed name {cluster} makes the update fail; "
                    "replacing it would destroy every node and every job on it",
                    f"keep -c gpu_az_id={deployed_zone} (as deployed); to move to {config.gpu_az_id}, deploy a second "
                    f"app beside it (-c project_name=<new> -c gpu_az_id={config.gpu_az_id}: new stacks, cluster and "
                    "file system), move the jobs and data over, then cdk destroy the old stacks",
                ),
            )
        )
    return results


class _PhysicalIds:
    """A deployed template value resolved to a physical ID: a literal, Ref of the stack's resource
    (ListStackResources), Fn::ImportValue (ListExports); None when it is none of those."""

    def __init__(self, cloudformation: Any) -> None:
        self.cloudformation = cloudformation
        self._exports: dict[str, str] | None = None
        self._resources: dict[str, dict[str, str]] = {}

    def resolve(self, stack: str, value: Any) -> str | None:
        if isinstance(value, str):
            return value
        if not isinstance(value, dict):
            return None
        if isinstance(value.get("Ref"), str):
            return self._stack_resources(stack).get(value["Ref"])
        if isinstance(value.get("Fn::ImportValue"), str):
            return self._all_exports().get(value["Fn::ImportValue"])
        return None

    def _all_exports(self) -> dict[str, str]:
        if self._exports is None:
            pages = self.cloudformation.get_paginator("list_exports").paginate()
            self._exports = {e["Name"]: e["Value"] for page in pages for e in page.get("Exports", [])}
        return self._exports

    def _stack_resources(self, stack: str) -> dict[str, str]:
        if stack not in self._resources:
            pages = self.cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack)
            self._resources[stack] = {
                r["LogicalResourceId"]: r.get("PhysicalResourceId", "")
                for page in pages
                for r in page["StackResourceSummaries"]
            }
        return self._resources[stack]


def _replacement_result(name: str, replacement: Replacement, found: dict[create_only.Key, Replacement]) -> CheckResult:
    """A replaced data store or custom-named resource: FAIL (WARN for a renamed resource that holds nothing)."""
    change = replacement.changes[0]
    root, cause = create_only.root_change(replacement, found)
    what = f"{', '.join(c.path for c in replacement.changes)} changes"
    if change.because is not None:
        what = (
            f"{change.path} refers to {change.because[0]}/{change.because[1]}, which is replaced "
            f"({root.resource_type} {cause.path}: {_from_to(cause)})"
        )
    elif change.path != "Type":
        what += f" ({change.path}: {_from_to(change)})"
    consequences = []
    if replacement.refused:
        names = ", ".join(f"{k} {create_only.show(new)}" for k, (_, new) in replacement.names.items())
        consequences.append(
            f"create-only, so CloudFormation must replace it, and it keeps its custom name ({names}): "
            "CloudFormation cannot update a stack when a custom-named resource requires replacing"
        )
    elif replacement.renamed:
        renames = ", ".join(
            f"{k} {create_only.show(old)} -> {create_only.show(new)}" for k, (old, new) in replacement.names.items()
        )
        consequences.append(
            f"create-only: CloudFormation creates the renamed one ({renames}) and deletes the deployed one"
        )
    else:
        consequences.append("create-only: CloudFormation creates a new one and deletes the deployed one")
    if replacement.data_store:
        consequences.append(create_only.DATA_STORES[replacement.resource_type])
        if replacement.retained:
            consequences.append("the deployed one is retained (UpdateReplacePolicy Retain) but leaves the stack")
    status = FAIL if replacement.data_store or replacement.refused else WARN
    if root.resource_type == "AWS::EC2::Subnet" and cause.path in ("AvailabilityZoneId", "AvailabilityZone"):
        keep = f"keep -c gpu_az_id={create_only.show(cause.old)} (as deployed)"
    else:
        keep = f"keep {root.resource_type} {cause.path} as deployed ({create_only.show(cause.old, 80)})"
    fix = (
        f"{keep}; to change it, deploy a second app beside this one (-c project_name=<new>), move the jobs and data "
        "over, then cdk destroy the old stacks"
    )
    return CheckResult(name, status, f"{replacement.label()}: {what}: {'; '.join(consequences)}", fix)


def _from_to(change: create_only.Change) -> str:
    return f"{create_only.show(change.old, 60)} -> {create_only.show(change.new, 60)}"


def check_bootstrap(cloudformation: Any, ssm: Callable[[], Any], account: str, region: str) -> CheckResult:
    """The CDK bootstrap stack is usable and its version >= 6 (CloudFormation DescribeStacks, SSM)."""
    name = "CDK bootstrap"
    bootstrap = f"npx cdk bootstrap aws://{account}/{region}"
    try:
        (stack,) = cloudformation.describe_stacks(StackName=CDK_TOOLKIT_STACK)["Stacks"]
    except ClientError as err:
        if _error_code(err) == "ValidationError" and "does not exist" in str(err):
            return CheckResult(name, FAIL, f"no {CDK_TOOLKIT_STACK} stack in {account}/{region}", bootstrap)
        raise
    status = str(stack.get("StackStatus", "?"))
    if status.endswith("_IN_PROGRESS"):
        return CheckResult(name, WARN, f"{CDK_TOOLKIT_STACK} is {status}", "wait until it completes, then rerun")
    if status not in _USABLE_STACK_STATUSES:
        return CheckResult(
            name,
            FAIL,
            f"{CDK_TOOLKIT_STACK} is {status}",
            f"delete the stack (aws cloudformation delete-stack --stack-name {CDK_TOOLKIT_STACK} --region {region}), "
            f"then {bootstrap}",
        )
    version, source = _bootstrap_version(ssm, stack)
    if version is None:
        return CheckResult(
            name, FAIL, f"{CDK_TOOLKIT_STACK} is {status}, but {source}", f"{bootstrap} (rewrites the parameter)"
        )
    if version < CDK_MIN_BOOTSTRAP_VERSION:
        return CheckResult(
            name,
            FAIL,
            f"bootstrap version {version} < {CDK_MIN_BOOTSTRAP_VERSION} (from {source})",
            f"{bootstrap} (with this app's CDK CLI: npx cdk)",
        )
    return CheckResult(name, PASS, f"{CDK_TOOLKIT_STACK} {status}, bootstrap version {version} (from {source})")


def _bootstrap_version(ssm: Callable[[], Any], stack: dict[str, Any]) -> tuple[int | None, str]:
    """The version the templates' CheckBootstrapVersion rule reads (SSM); the stack's output when SSM is
    denied to us."""
    try:
        value = ssm().get_parameter(Name=CDK_BOOTSTRAP_VERSION_PARAMETER)["Parameter"]["Value"]
        return _int(value), CDK_BOOTSTRAP_VERSION_PARAMETER
    except ClientError as err:
        code = _error_code(err)
        if code == "ParameterNotFound":
            return None, f"{CDK_BOOTSTRAP_VERSION_PARAMETER} is missing"
        if not _ACCESS_DENIED.search(code):
            raise
    outputs = {o.get("OutputKey"): o.get("OutputValue") for o in stack.get("Outputs", [])}
    if "BootstrapVersion" in outputs:
        return _int(outputs["BootstrapVersion"]), "the stack's BootstrapVersion output (ssm:GetParameter denied)"
    return None, f"ssm:GetParameter on {CDK_BOOTSTRAP_VERSION_PARAMETER} is denied and the stack has no version output"


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None
