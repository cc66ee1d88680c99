"""Bring your own VPC, EKS cluster or FSx for Lustre file system (issue 29, item 12): the default app by
config keys, synthesized offline with cdk-nag on (tests/test_validators.py runs cfn-lint and cdk-nag's
report on the same configurations; tests/test_snapshots.py snapshots them), and each construct's importer."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import byo
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Match, Template

from llm_infra.config import BOOTSTRAP_ADDONS, INSTALLABLE, ConfigError, TrainingConfig
from llm_infra.constructs.efa_security_group import EfaSecurityGroup
from llm_infra.constructs.lustre_storage import LUSTRE_PORTS, ExistingLustreStorage, LustreStorage
from llm_infra.constructs.training_cluster import ExistingTrainingCluster, TrainingCluster
from llm_infra.constructs.training_vpc import ExistingTrainingVpc, TrainingVpc
from llm_infra.constructs.validation import ConstructValidationError

NETWORK, STORAGE, CLUSTER = "-network", "-storage", "-cluster"
LUSTRE = sorted((p.to_rule_json()["fromPort"], p.to_rule_json()["toPort"]) for p in LUSTRE_PORTS)


def types(app, stack: str) -> set[str]:
    return {r["Type"] for r in app.template(stack)["Resources"].values()}


def every_type(app) -> set[str]:
    return {r["Type"] for t in app.templates.values() for r in t["Resources"].values()}


# ---- every combination synthesizes offline, cdk-nag clean, without a warning ---------------------------
@pytest.mark.parametrize("name", byo.CONFIGS)
def test_each_combination_synthesizes_without_a_warning(synth, name: str) -> None:
    # synth() runs cdk-nag's AwsSolutions checks: an unacknowledged finding raises.
    app = synth(byo.CONFIGS[name])
    assert set(app.templates) == {"llm-infra-network", "llm-infra-storage", "llm-infra-cluster"}
    assert app.warnings == []
    assert json.loads((app.outdir / "validation-report.json").read_text())["pluginReports"] == []


# ---- an existing VPC ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n in byo.CONFIGS])
def test_an_existing_vpc_is_not_created_and_its_ids_are_used(synth, name: str) -> None:
    app = synth(byo.CONFIGS[name])
    created = every_type(app)
    for resource_type in ("AWS::EC2::VPC", "AWS::EC2::NatGateway", "AWS::EC2::InternetGateway", "AWS::EC2::FlowLog"):
        assert resource_type not in created
    network = Template.from_json(app.template(NETWORK))
    network.has_resource_properties("AWS::EC2::SecurityGroup", {"VpcId": byo.VPC_ID})  # the EFA group, in their VPC
    assert app.template(NETWORK)["Outputs"]["VpcId"]["Value"] == byo.VPC_ID


def test_the_gpu_subnet_is_created_in_the_existing_vpc(synth) -> None:
    app = synth(byo.CONFIGS["byo-vpc"])
    network = Template.from_json(app.template(NETWORK))
    network.has_resource_properties("AWS::EC2::VPCCidrBlock", {"VpcId": byo.VPC_ID, "CidrBlock": "10.1.0.0/16"})
    network.has_resource_properties(
        "AWS::EC2::Subnet", {"VpcId": byo.VPC_ID, "AvailabilityZoneId": "use1-az4", "CidrBlock": "10.1.0.0/16"}
    )
    network.has_resource_properties(
        "AWS::EC2::Route", {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": byo.NAT_GATEWAY}
    )
    # S3 traffic of the GPU subnet stays off the NAT gateway, as in the VPC the app creates.
    network.has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {"VpcId": byo.VPC_ID, "VpcEndpointType": "Gateway", "RouteTableIds": [Match.any_value()]},
    )
    # The control plane sits in the given private subnets.
    Template.from_json(app.template(CLUSTER)).has_resource_properties(
        "AWS::EKS::Cluster", {"ResourcesVpcConfig": Match.object_like({"SubnetIds": list(byo.PRIVATE_SUBNETS)})}
    )


def test_a_given_gpu_subnet_is_used_as_it_is(synth) -> None:
    app = synth(byo.CONFIGS["byo-vpc-given-gpu-subnet"])
    assert types(app, NETWORK) == {
        "AWS::EC2::SecurityGroup",
        "AWS::EC2::SecurityGroupIngress",
        "AWS::EC2::SecurityGroupEgress",
    }
    assert app.template(NETWORK)["Outputs"]["GpuSubnetId"]["Value"] == byo.GPU_SUBNET
    (fsx,) = app.resources(STORAGE, "AWS::FSx::FileSystem").values()
    assert fsx["Properties"]["SubnetIds"] == [byo.GPU_SUBNET]
    gpu_nodes = [
        n["Properties"]
        for n in app.resources(CLUSTER, "AWS::EKS::Nodegroup").values()
        if "LaunchTemplate" in n["Properties"]
    ]
    assert gpu_nodes[0]["Subnets"] == [byo.GPU_SUBNET]


# ---- an existing EKS cluster ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["byo-vpc-cluster", "byo-all", "byo-all-hyperpod"])
def test_an_existing_cluster_is_not_created_and_nothing_is_installed_over_its_owners(synth, name: str) -> None:
    app = synth(byo.CONFIGS[name])
    created = types(app, CLUSTER)
    assert "AWS::EKS::Cluster" not in created
    # Default: none of the add-ons, device plugins or operators: its owner may run them.
    assert "AWS::EKS::Addon" not in created
    assert "Custom::AWSCDK-EKS-HelmChart" not in created
    assert "AWS::CloudFormation::Stack" not in created  # operators: none on an existing cluster
    assert "AWS::Logs::LogGroup" not in created  # the CloudWatch add-on's group is its owner's
    cluster = app.template(CLUSTER)
    assert cluster["Outputs"]["ClusterName"]["Value"] == byo.CLUSTER_NAME
    for nodegroup in app.resources(CLUSTER, "AWS::EKS::Nodegroup").values():
        assert nodegroup["Properties"]["ClusterName"] == byo.CLUSTER_NAME
    for association in app.resources(CLUSTER, "AWS::EKS::PodIdentityAssociation").values():
        assert association["Properties"]["ClusterName"] == byo.CLUSTER_NAME
    # Only the app's own identities: the training job and data-prep roles.
    assert {
        a["Properties"]["ServiceAccount"] for a in app.resources(CLUSTER, "AWS::EKS::PodIdentityAssociation").values()
    } == {
        "training",
        "data-prep",
    }


def test_the_app_reaches_an_existing_cluster_through_its_own_kubectl_provider(synth) -> None:
    app = synth(byo.CONFIGS["byo-vpc-cluster"])
    resources = app.template(CLUSTER)["Resources"]
    (entry_id, entry) = next(iter(app.resources(CLUSTER, "AWS::EKS::AccessEntry").items()))
    assert entry["Properties"]["ClusterName"] == byo.CLUSTER_NAME
    assert "AmazonEKSClusterAdminPolicy" in json.dumps(entry["Properties"]["AccessPolicies"])
    assert entry["Properties"]["AccessPolicies"][0]["AccessScope"] == {"Type": "cluster"}
    handler_role = entry["Properties"]["PrincipalArn"]["Fn::GetAtt"][0]
    assert "KubectlProviderHandler" in handler_role
    functions = app.resources(CLUSTER, "AWS::Lambda::Function")
    for function in functions.values():  # both in the given private subnets, with the cluster security group
        assert function["Properties"]["VpcConfig"] == {
            "SecurityGroupIds": [byo.CLUSTER_SG],
            "SubnetIds": list(byo.PRIVATE_SUBNETS),
        }
    (framework,) = [f for f in functions if "frameworkonEvent" in f]
    assert entry_id in resources[framework]["DependsOn"]  # every manifest waits for the access entry
    manifests = [r for r in resources.values() if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"]
    assert len(manifests) == 4  # base, FSx, node monitoring, the Kueue queues (their Kueue: owner's or ours)
    assert all(m["Properties"]["ServiceToken"] == {"Fn::GetAtt": [framework, "Arn"]} for m in manifests)
    # The app's system nodes (the Ray head and Redis select them) join it in the given subnets.
    (system,) = [
        n["Properties"]
        for n in app.resources(CLUSTER, "AWS::EKS::Nodegroup").values()
        if n["Properties"]["Labels"]["llm-infra.aws/node-role"] == "system"
    ]
    assert system["Subnets"] == list(byo.PRIVATE_SUBNETS)


def test_the_alarms_read_the_owners_container_insights_log_group(synth) -> None:
    app = synth(byo.CONFIGS["byo-vpc-cluster"])
    groups = {f["Properties"]["LogGroupName"] for f in app.resources(CLUSTER, "AWS::Logs::MetricFilter").values()}
    assert groups == {f"/aws/containerinsights/{byo.CLUSTER_NAME}/application"}


def test_install_addons_names_what_the_app_installs_and_none_overwrites(synth) -> None:
    wanted = (
        "vpc-cni",
        "aws-fsx-csi-driver",
        "amazon-cloudwatch-observability",
        "nvidia-device-plugin",
        "kuberay-operator",
    )
    app = synth(TrainingConfig(**byo.VPC, **byo.CLUSTER, install_addons=",".join(wanted)))
    addons = {a["Properties"]["AddonName"]: a["Properties"] for a in app.resources(CLUSTER, "AWS::EKS::Addon").values()}
    assert set(addons) == {"vpc-cni", "aws-fsx-csi-driver", "amazon-cloudwatch-observability"}
    # Where the owner's self-managed copy differs, the create fails rather than take theirs over.
    assert all("ResolveConflicts" not in addon for addon in addons.values())
    charts = {c["Properties"]["Chart"] for c in app.resources(CLUSTER, "Custom::AWSCDK-EKS-HelmChart").values()}
    assert charts == {"nvidia-device-plugin", "kuberay-operator"}
    # Each installed AWS-calling add-on with its Pod Identity role; the log group is the app's now.
    accounts = {
        a["Properties"]["ServiceAccount"] for a in app.resources(CLUSTER, "AWS::EKS::PodIdentityAssociation").values()
    }
    assert accounts == {"training", "data-prep", "aws-node", "fsx-csi-controller-sa", "cloudwatch-agent"}
    (log_group,) = app.resources(CLUSTER, "AWS::Logs::LogGroup").values()
    assert log_group["Properties"]["LogGroupName"] == f"/aws/containerinsights/{byo.CLUSTER_NAME}/application"


def test_the_hyperpod_training_operator_on_an_existing_cluster_only_when_named(synth) -> None:
    named = synth(
        TrainingConfig(
            **byo.VPC,
            **byo.CLUSTER,
            compute="hyperpod",
            install_addons="cert-manager,amazon-sagemaker-hyperpod-training-operator",
        )
    )
    addons = {a["Properties"]["AddonName"]: a for a in named.resources(CLUSTER, "AWS::EKS::Addon").values()}
    assert set(addons) == {"cert-manager", "amazon-sagemaker-hyperpod-training-operator"}
    assert all("ResolveConflicts" not in a["Properties"] for a in addons.values())
    (sagemaker,) = named.resources(CLUSTER, "AWS::SageMaker::Cluster").values()
    arn = json.dumps(sagemaker["Properties"]["Orchestrator"]["Eks"]["ClusterArn"])
    assert f":cluster/{byo.CLUSTER_NAME}" in arn
    assert byo.CLUSTER_SG in sagemaker["Properties"]["VpcConfig"]["SecurityGroupIds"]
    # Without them named, the jobs still are HyperPodPyTorchJobs: the owner's operator runs them.
    unnamed = synth(byo.CONFIGS["byo-all-hyperpod"])
    assert unnamed.resources(CLUSTER, "AWS::EKS::Addon") == {}


def test_a_cluster_the_app_creates_still_overwrites_every_addon(default_app) -> None:
    Template.from_json(default_app.template(CLUSTER)).all_resources_properties(
        "AWS::EKS::Addon", {"ResolveConflicts": "OVERWRITE"}
    )


def test_operators_follow_the_cluster_unless_set() -> None:
    assert TrainingConfig().operators == "aws-helm-stack"
    existing = TrainingConfig(**byo.VPC, **byo.CLUSTER)
    assert existing.operators == "none"
    assert TrainingConfig().with_(**byo.VPC, **byo.CLUSTER).operators == "none"  # derived again by with_
    assert existing.with_(existing_cluster_name=None, existing_cluster_security_group_id=None).operators == (
        "aws-helm-stack"
    )
    assert TrainingConfig(**byo.VPC, **byo.CLUSTER, operators="aws-helm-stack").operators == "aws-helm-stack"
    context = {**byo.VPC, **byo.CLUSTER}
    assert TrainingConfig.from_context(context).operators == "none"
    assert TrainingConfig.from_context({**context, "operators": "aws-helm-stack"}).operators == "aws-helm-stack"


def test_the_aws_helm_stack_on_an_existing_cluster_when_asked(synth) -> None:
    app = synth(TrainingConfig(**byo.VPC, **byo.CLUSTER, operators="aws-helm-stack"))
    ((_, stack),) = app.resources(CLUSTER, "AWS::CloudFormation::Stack").items()
    assert stack["Properties"]["Parameters"]["EKSClusterName"] == byo.CLUSTER_NAME


# ---- an existing FSx for Lustre file system ------------------------------------------------------------
@pytest.mark.parametrize("name", ["byo-vpc-fsx", "byo-all", "byo-all-hyperpod"])
def test_an_existing_file_system_is_not_created_and_its_group_admits_the_nodes(synth, name: str) -> None:
    app = synth(byo.CONFIGS[name])
    storage = types(app, STORAGE)
    assert "AWS::FSx::FileSystem" not in storage and "AWS::FSx::DataRepositoryAssociation" not in storage
    outputs = app.template(STORAGE)["Outputs"]
    assert (outputs["FileSystemId"]["Value"], outputs["FileSystemDnsName"]["Value"]) == (byo.FSX_ID, byo.FSX_DNS)
    assert outputs["FileSystemMountName"]["Value"] == byo.FSX_MOUNT
    ingress = [r["Properties"] for r in app.resources(STORAGE, "AWS::EC2::SecurityGroupIngress").values()]
    # Both ways with the EFA group (imported from the network stack), as with a file system the app creates.
    into_fsx = sorted((r["FromPort"], r["ToPort"]) for r in ingress if r["GroupId"] == byo.FSX_SG)
    from_fsx = sorted((r["FromPort"], r["ToPort"]) for r in ingress if r.get("SourceSecurityGroupId") == byo.FSX_SG)
    assert into_fsx == LUSTRE and from_fsx == LUSTRE
    cluster_rules = [r["Properties"] for r in app.resources(CLUSTER, "AWS::EC2::SecurityGroupIngress").values()]
    assert sorted((r["FromPort"], r["ToPort"]) for r in cluster_rules if r["GroupId"] == byo.FSX_SG) == LUSTRE
    # The volume the pods mount names it.
    manifests = json.dumps(app.resources(CLUSTER, "Custom::AWSCDK-EKS-KubernetesResource"))
    assert byo.FSX_ID in manifests and byo.FSX_DNS in manifests and byo.FSX_MOUNT in manifests
    alarms = json.dumps(app.resources(CLUSTER, "AWS::CloudWatch::Alarm"))
    assert byo.FSX_ID in alarms


def test_an_existing_file_system_may_have_any_size() -> None:
    assert TrainingConfig(**byo.VPC, **byo.FSX, fsx_storage_gib=4800).fsx_storage_gib == 4800
    TrainingConfig(**byo.VPC, **byo.FSX, fsx_storage_gib=6000).validate()  # an HDD or SCRATCH size
    with pytest.raises(ConfigError, match="fsx_storage_gib: 6000 is not allowed for PERSISTENT_2"):
        TrainingConfig(fsx_storage_gib=6000).validate()


# ---- config errors name the key and what is missing ----------------------------------------------------
@pytest.mark.parametrize(
    ("context", "fragments"),
    [
        (
            {"existing_vpc_id": byo.VPC_ID, "existing_nat_gateway_id": byo.NAT_GATEWAY},
            ["existing_private_subnet_ids: required with existing_vpc_id"],
        ),
        (
            {**byo.VPC, "existing_nat_gateway_id": None},
            ["existing_nat_gateway_id: required with existing_vpc_id", "existing_gpu_subnet_id"],
        ),
        (
            {**byo.VPC, "existing_gpu_subnet_id": byo.GPU_SUBNET},
            ["existing_nat_gateway_id: only for a GPU subnet this app creates"],
        ),
        (
            {**byo.VPC, "existing_private_subnet_ids": byo.PRIVATE_SUBNETS[0]},
            ["existing_private_subnet_ids:", "names 1; give >= 2"],
        ),
        (
            {**byo.VPC, "existing_vpc_id": "vpc-123"},
            ["existing_vpc_id: 'vpc-123' is not an id such as vpc-0123456789abcdef0"],
        ),
        (
            {**byo.VPC, "existing_private_subnet_ids": "subnet-0123456789abcdef0,sn-1"},
            ["existing_private_subnet_ids: 'sn-1' is not a subnet id"],
        ),
        (
            {"existing_private_subnet_ids": ",".join(byo.PRIVATE_SUBNETS)},
            ["existing_vpc_id: required with existing_private_subnet_ids"],
        ),
        (byo.CLUSTER, ["existing_vpc_id: required with existing_cluster_name"]),
        (
            {**byo.VPC, "existing_cluster_name": byo.CLUSTER_NAME},
            ["existing_cluster_security_group_id: required with existing_cluster_name"],
        ),
        (
            {**byo.VPC, "existing_cluster_security_group_id": byo.CLUSTER_SG},
            ["existing_cluster_name: required with existing_cluster_security_group_id"],
        ),
        (
            {**byo.VPC, **byo.CLUSTER, "existing_cluster_name": "-bad"},
            ["existing_cluster_name: '-bad' is not an EKS cluster name"],
        ),
        ({**byo.VPC, "install_addons": "vpc-cni"}, ["install_addons: only with existing_cluster_name"]),
        (
            {**byo.VPC, **byo.CLUSTER, "install_addons": "vpc-cni,istio"},
            ["install_addons: 'istio' is not one this app installs; allowed: vpc-cni"],
        ),
        (
            {**byo.VPC, **byo.CLUSTER, "install_addons": "cert-manager"},
            ["install_addons: cert-manager belong to the HyperPod training operator"],
        ),
        (byo.FSX, ["existing_vpc_id: required with existing_fsx_file_system_id"]),
        (
            {**byo.VPC, "existing_fsx_file_system_id": byo.FSX_ID},
            [
                "existing_fsx_dns_name: required with existing_fsx_file_system_id",
                "existing_fsx_mount_name: required",
                "existing_fsx_security_group_id: required",
            ],
        ),
        (
            {**byo.VPC, "existing_fsx_mount_name": byo.FSX_MOUNT},
            ["existing_fsx_file_system_id: required with existing_fsx_mount_name"],
        ),
        (
            {**byo.VPC, **byo.FSX, "existing_fsx_dns_name": "fsx.example.com"},
            ["existing_fsx_dns_name: 'fsx.example.com' is not a file system's DNS name"],
        ),
        (
            {**byo.VPC, **byo.FSX, "existing_fsx_mount_name": "Mount/Name"},
            ["existing_fsx_mount_name: 'Mount/Name' is not a mount name"],
        ),
        (
            {**byo.VPC, **byo.FSX, "existing_fsx_security_group_id": "sg-x"},
            ["existing_fsx_security_group_id: 'sg-x' is not an id"],
        ),
    ],
)
def test_bring_your_own_config_errors_name_the_key(context: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        TrainingConfig.from_context({k: v for k, v in context.items() if v is not None})
    for fragment in fragments:
        assert fragment in str(err.value), str(err.value)


def test_the_installable_names_are_the_addons_and_charts_the_app_knows() -> None:
    config = TrainingConfig()
    hyperpod_only = {"cert-manager", "amazon-sagemaker-hyperpod-training-operator"}
    hyperpod_only.add("amazon-sagemaker-hyperpod-taskgovernance")
    assert config.installs == frozenset(INSTALLABLE) - hyperpod_only
    assert set(BOOTSTRAP_ADDONS) <= set(INSTALLABLE)
    assert TrainingConfig(**byo.VPC, **byo.CLUSTER).installs == frozenset()


# ---- the importers ----------------------------------------------------------------------------------
def stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(), "Theirs")


def test_the_vpc_importer_has_the_interface_of_a_new_vpc() -> None:
    scope = stack()
    network = TrainingVpc.from_existing(
        scope, "Net", vpc_id=byo.VPC_ID, private_subnet_ids=byo.PRIVATE_SUBNETS, gpu_subnet_id=byo.GPU_SUBNET
    )
    assert isinstance(network, ExistingTrainingVpc)
    assert network.vpc.vpc_id == byo.VPC_ID
    assert [s.subnet_id for s in network.private_subnets] == list(byo.PRIVATE_SUBNETS)
    assert network.gpu_subnet.subnet_id == byo.GPU_SUBNET
    EfaSecurityGroup(scope, "Efa", vpc=network.vpc)
    Template.from_stack(scope).resource_count_is("AWS::EC2::SecurityGroup", 1)


def test_the_vpc_importer_takes_tokens() -> None:
    scope = stack()
    vpc_id = cdk.CfnParameter(scope, "VpcId", type="AWS::EC2::VPC::Id").value_as_string
    subnets = [cdk.Fn.import_value(f"private-{i}") for i in range(2)]
    nat = cdk.CfnParameter(scope, "Nat").value_as_string
    az = cdk.CfnParameter(scope, "AzId").value_as_string
    network = TrainingVpc.from_existing(
        scope, "Net", vpc_id=vpc_id, private_subnet_ids=subnets, gpu_az_id=az, nat_gateway_id=nat
    )
    template = Template.from_stack(scope)
    template.has_resource_properties(
        "AWS::EC2::Subnet", {"VpcId": {"Ref": "VpcId"}, "AvailabilityZoneId": {"Ref": "AzId"}}
    )
    template.has_resource_properties("AWS::EC2::Route", {"NatGatewayId": {"Ref": "Nat"}})
    assert len(network.private_subnets) == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"vpc_id": "vpc-1"}, "vpc_id: 'vpc-1' is not an id such as vpc-0123456789abcdef0"),
        ({"private_subnet_ids": byo.PRIVATE_SUBNETS[:1]}, "private_subnet_ids: 1 given; allowed: >= 2 in two AZs"),
        ({"gpu_subnet_id": None}, "gpu_subnet_id: required unless the GPU subnet is created here"),
        (
            {"gpu_subnet_id": None, "gpu_az_id": "us-east-1a", "nat_gateway_id": byo.NAT_GATEWAY},
            "gpu_az_id: 'us-east-1a' is not an AZ ID",
        ),
        ({"nat_gateway_id": byo.NAT_GATEWAY}, "nat_gateway_id: only for a GPU subnet created here"),
    ],
)
def test_the_vpc_importer_refuses_what_cannot_work(kwargs: dict[str, Any], message: str) -> None:
    props = {"vpc_id": byo.VPC_ID, "private_subnet_ids": byo.PRIVATE_SUBNETS, "gpu_subnet_id": byo.GPU_SUBNET, **kwargs}
    with pytest.raises(ConstructValidationError, match=message) as err:
        TrainingVpc.from_existing(stack(), "Net", **props)
    assert err.value.construct_path == "Theirs/Net"


def test_the_cluster_importer_has_the_interface_of_a_new_cluster() -> None:
    scope = stack()
    vpc = ec2.Vpc.from_vpc_attributes(scope, "Vpc", vpc_id=byo.VPC_ID, availability_zones=["us-east-1a"])
    subnets = [ec2.Subnet.from_subnet_id(scope, f"S{i}", s) for i, s in enumerate(byo.PRIVATE_SUBNETS)]
    cluster = TrainingCluster.from_existing(
        scope,
        "Eks",
        cluster_name=cdk.CfnParameter(scope, "ClusterName").value_as_string,
        cluster_security_group_id=byo.CLUSTER_SG,
        vpc=vpc,
        subnets=subnets,
        install=("eks-pod-identity-agent",),
        admin_role_arn="arn:aws:iam::123456789012:role/admins",
    )
    assert isinstance(cluster, ExistingTrainingCluster)
    assert cluster.cluster_security_group.security_group_id == byo.CLUSTER_SG
    assert set(cluster.addons) == {"eks-pod-identity-agent"}
    assert cluster.nvidia_device_plugin is None and cluster.efa_device_plugin is None
    role = cluster.pod_identity_role("Job", namespace="ns", service_account="sa", description="a job's role")
    assert role.role_arn
    template = Template.from_stack(scope)
    template.resource_count_is("AWS::EKS::Cluster", 0)
    template.resource_count_is("AWS::EKS::AccessEntry", 2)  # kubectl's and the admin's
    template.has_resource_properties(
        "AWS::EKS::AccessEntry",
        {"ClusterName": {"Ref": "ClusterName"}, "PrincipalArn": "arn:aws:iam::123456789012:role/admins"},
    )
    template.has_resource_properties("AWS::EKS::PodIdentityAssociation", {"ClusterName": {"Ref": "ClusterName"}})
    addon = template.find_resources("AWS::EKS::Addon")
    assert [a["Properties"].get("ResolveConflicts") for a in addon.values()] == [None]


def test_the_cluster_importer_refuses_what_cannot_work() -> None:
    scope = stack()
    vpc = ec2.Vpc.from_vpc_attributes(scope, "Vpc", vpc_id=byo.VPC_ID, availability_zones=["us-east-1a"])
    subnets = [ec2.Subnet.from_subnet_id(scope, "S", byo.PRIVATE_SUBNETS[0])]
    common: dict[str, Any] = {"cluster_name": "c", "cluster_security_group_id": byo.CLUSTER_SG, "vpc": vpc}
    with pytest.raises(ConstructValidationError, match="install: istio not allowed; allowed: vpc-cni"):
        TrainingCluster.from_existing(scope, "A", subnets=subnets, install=("istio",), **common)
    with pytest.raises(ConstructValidationError, match="subnets: at least one private subnet"):
        TrainingCluster.from_existing(scope, "B", subnets=[], **common)
    with pytest.raises(ConstructValidationError, match="cluster_security_group_id: 'x' is not an id"):
        TrainingCluster.from_existing(scope, "C", subnets=subnets, **{**common, "cluster_security_group_id": "x"})


def test_the_file_system_importer_has_the_interface_of_a_new_file_system() -> None:
    scope = stack()
    lustre = LustreStorage.from_existing(
        scope,
        "Fsx",
        file_system_id=cdk.Fn.import_value("fs-id"),
        dns_name=cdk.Fn.import_value("fs-dns"),
        mount_name=cdk.Fn.import_value("fs-mount"),
        security_group_id=byo.FSX_SG,
    )
    assert isinstance(lustre, ExistingLustreStorage)
    vpc = ec2.Vpc.from_vpc_attributes(scope, "Vpc", vpc_id=byo.VPC_ID, availability_zones=["us-east-1a"])
    nodes = ec2.SecurityGroup(scope, "Nodes", vpc=vpc, allow_all_outbound=False)
    lustre.connections.allow_default_port_from(nodes, "GPU nodes")
    template = Template.from_stack(scope)
    ingress = [r["Properties"] for r in template.find_resources("AWS::EC2::SecurityGroupIngress").values()]
    assert sorted((r["FromPort"], r["ToPort"]) for r in ingress if r["GroupId"] == byo.FSX_SG) == LUSTRE
    assert (
        sorted((r["FromPort"], r["ToPort"]) for r in ingress if r.get("SourceSecurityGroupId") == byo.FSX_SG) == LUSTRE
    )
    assert cdk.Stack.of(scope).resolve(lustre.file_system_id) == {"Fn::ImportValue": "fs-id"}
    assert cdk.Stack.of(scope).resolve(lustre.mount_name) == {"Fn::ImportValue": "fs-mount"}


def test_the_file_system_importer_refuses_a_wrong_id() -> None:
    with pytest.raises(ConstructValidationError, match="file_system_id: 'fsx-1' is not an id such as fs-"):
        LustreStorage.from_existing(
            stack(),
            "Fsx",
            file_system_id="fsx-1",
            dns_name=byo.FSX_DNS,
            mount_name=byo.FSX_MOUNT,
            security_group_id=byo.FSX_SG,
        )


def test_what_rehearse_must_know_is_in_the_config() -> None:
    """The keys that mean nodes and cluster software exist which the templates do not create: an existing
    cluster (its owner's nodes and whatever is not in install_addons)."""
    config = TrainingConfig(**byo.VPC, **byo.CLUSTER)
    assert config.existing_cluster and not config.installs
    assert not TrainingConfig(**byo.VPC, **byo.FSX).existing_cluster
