"""The constructs as aws-cdk-lib users expect them (issue 29, item 11): the Lustre construct is an
IConnectable whose default port is Lustre's, both ways; validation errors are scoped to the construct and
name the prop and what it allows; tokens pass where a value may be one; cluster-admin comes from
eks.Cluster; defaults live in one place (tests/test_defaults.py)."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from llm_infra.constructs.gpu_node_group import GpuNodeGroup
from llm_infra.constructs.hyperpod_cluster import HyperPodCluster, HyperPodInstanceGroup
from llm_infra.constructs.lustre_storage import (
    LUSTRE_PORT_RANGE,
    LUSTRE_PORTS,
    LustreStorage,
    allow_lustre_from_clients_side,
)
from llm_infra.constructs.training_cluster import TrainingCluster, coredns_configuration
from llm_infra.constructs.training_observability import TrainingObservability
from llm_infra.constructs.training_vpc import TrainingVpc
from llm_infra.constructs.validation import ConstructValidationError
from llm_infra.instance_types import instance_profile

LUSTRE = sorted((p.to_rule_json()["fromPort"], p.to_rule_json()["toPort"]) for p in LUSTRE_PORTS)


def network(scope: cdk.Stack) -> tuple[ec2.Vpc, ec2.ISubnet]:
    vpc = ec2.Vpc(scope, "Vpc", max_azs=2, nat_gateways=1)
    return vpc, vpc.private_subnets[0]


def lustre_in(scope: cdk.Stack, vpc: ec2.IVpc, subnet: ec2.ISubnet, **props: Any) -> LustreStorage:
    return LustreStorage(scope, "Lustre", vpc=vpc, subnet=subnet, data_bucket=s3.Bucket(scope, "Data"), **props)


def rules(template: Template, kind: str) -> list[dict[str, Any]]:
    return [r["Properties"] for r in template.find_resources(f"AWS::EC2::SecurityGroup{kind}").values()]


def ports(found: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return sorted((r["FromPort"], r["ToPort"]) for r in found)


# ---- LustreStorage is an IConnectable ---------------------------------------------------------------
def test_allow_default_port_from_opens_lustres_ports_both_ways() -> None:
    stack = cdk.Stack(cdk.App(), "S")
    vpc, subnet = network(stack)
    lustre = lustre_in(stack, vpc, subnet)
    nodes = ec2.SecurityGroup(stack, "Nodes", vpc=vpc, allow_all_outbound=False)
    lustre.connections.allow_default_port_from(nodes, "GPU nodes")
    template = Template.from_stack(stack)
    nodes_id = stack.resolve(nodes.security_group_id)
    (fsx_group,) = lustre.connections.security_groups
    fsx_id = stack.resolve(fsx_group.security_group_id)
    ingress = rules(template, "Ingress")
    # Clients to servers, and servers back to the clients' group (the FSx guide's client rules).
    assert ports([r for r in ingress if r["GroupId"] == fsx_id and r["SourceSecurityGroupId"] == nodes_id]) == LUSTRE
    assert ports([r for r in ingress if r["GroupId"] == nodes_id and r["SourceSecurityGroupId"] == fsx_id]) == LUSTRE
    # The clients' group restricts egress: it may reach the servers on the same ports.
    assert ports([r for r in rules(template, "Egress") if r["GroupId"] == nodes_id]) == LUSTRE
    assert lustre.connections.default_port.to_rule_json() == LUSTRE_PORT_RANGE.to_rule_json()


def test_the_file_system_is_what_aws_cdk_lib_calls_connectable() -> None:
    stack = cdk.Stack(cdk.App(), "S")
    vpc, subnet = network(stack)
    lustre = lustre_in(stack, vpc, subnet)
    # aws-cdk-lib code that reads the one default port: a client's allow_to_default_port.
    client = ec2.SecurityGroup(stack, "Client", vpc=vpc, allow_all_outbound=False)
    client.connections.allow_to_default_port(lustre, "a client")
    egress = rules(Template.from_stack(stack), "Egress")
    assert ports([r for r in egress if r["GroupId"] == stack.resolve(client.security_group_id)]) == [(988, 1023)]


def test_clients_in_a_later_stack_keep_the_rules_there_without_a_cycle() -> None:
    app = cdk.App()
    storage = cdk.Stack(app, "Storage")
    vpc, subnet = network(storage)
    lustre = lustre_in(storage, vpc, subnet)
    compute = cdk.Stack(app, "Compute")
    nodes = ec2.SecurityGroup(compute, "Nodes", vpc=vpc)
    allow_lustre_from_clients_side(nodes.connections, lustre, "nodes in a later stack")
    assembly = app.synth()  # a rule on each side in the storage stack would be a cycle here
    templates = {s.stack_name: s.template for s in assembly.stacks}
    compute_ingress = [r for r in templates["Compute"]["Resources"].values() if r["Type"].endswith("Ingress")]
    assert len(compute_ingress) == 4  # 988 and 1018-1023, into the file system and back into the nodes
    assert not [r for r in templates["Storage"]["Resources"].values() if "Compute" in str(r)]


# ---- validation: scoped, naming the prop and what it allows ----------------------------------------
def test_a_validation_error_names_the_construct_the_prop_and_the_allowed_values() -> None:
    stack = cdk.Stack(cdk.App(), "S")
    vpc, subnet = network(stack)
    with pytest.raises(ConstructValidationError) as err:
        lustre_in(stack, vpc, subnet, throughput_per_tib=300)
    assert err.value.construct_path == "S/Lustre"
    assert str(err.value) == "S/Lustre: throughput_per_tib: 300 is not allowed; allowed: 125, 250, 500, 1000"
    assert isinstance(err.value, ValueError)  # callers that caught ValueError still do


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda s: TrainingVpc(s, "Net", gpu_az_id="us-east-1a"), "S/Net: gpu_az_id: 'us-east-1a' is not an AZ ID"),
        (
            lambda s: TrainingVpc(s, "Net", gpu_az_id="use1-az4", gpu_subnet_cidr="8.8.0.0/16"),
            r"S/Net: gpu_subnet_cidr: 8.8.0.0/16 is not allowed; allowed: a private \(RFC 1918\) block",
        ),
        (lambda s: TrainingVpc(s, "Net", gpu_az_id="use1-az4", max_azs=1), "S/Net: max_azs: 1 must be >= 2"),
    ],
)
def test_each_construct_raises_scoped_errors(build: Any, message: str) -> None:
    with pytest.raises(ConstructValidationError, match=message):
        build(cdk.Stack(cdk.App(), "S"))


# ---- tokens pass where a value may be one ------------------------------------------------------------
def test_a_hyperpod_cluster_name_may_be_a_token() -> None:
    stack = cdk.Stack(cdk.App(), "S")
    vpc, subnet = network(stack)
    cluster = eks.Cluster(
        stack,
        "Eks",
        version=eks.KubernetesVersion.V1_34,
        vpc=vpc,
        default_capacity=0,
        default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
    )
    name = cdk.CfnParameter(stack, "HyperPodName").value_as_string
    plan = cdk.CfnParameter(stack, "Plan").value_as_string
    count = cdk.CfnParameter(stack, "Count", type="Number").value_as_number
    HyperPodCluster(
        stack,
        "HP",
        cluster=cluster,
        subnet=subnet,
        security_groups=[],
        instance_groups=[HyperPodInstanceGroup(name="gpu", count=count, training_plan_arn=plan)],  # type: ignore[arg-type]
        cluster_name=name,
    )
    props = Template.from_stack(stack).find_resources("AWS::SageMaker::Cluster")
    ((_, resource),) = props.items()
    assert resource["Properties"]["ClusterName"] == {"Ref": "HyperPodName"}
    group = resource["Properties"]["InstanceGroups"][0]
    assert (group["InstanceCount"], group["TrainingPlanArn"]) == ({"Ref": "Count"}, {"Ref": "Plan"})
    # A literal is still checked.
    with pytest.raises(ConstructValidationError, match="cluster_name: 'bad_name' must be 1-63 letters"):
        HyperPodCluster(
            stack,
            "HP2",
            cluster=cluster,
            subnet=subnet,
            security_groups=[],
            instance_groups=[HyperPodInstanceGroup(name="gpu")],
            cluster_name="bad_name",
        )
    with pytest.raises(ConstructValidationError, match=r"training_plan_arn: 'plan' is not a SageMaker training plan"):
        HyperPodCluster(
            stack,
            "HP3",
            cluster=cluster,
            subnet=subnet,
            security_groups=[],
            instance_groups=[HyperPodInstanceGroup(name="gpu", training_plan_arn="plan")],
            cluster_name="ok",
        )


def test_cluster_name_admin_arn_and_gpu_subnet_may_be_tokens() -> None:
    stack = cdk.Stack(cdk.App(), "S")
    az = cdk.CfnParameter(stack, "GpuAz").value_as_string
    net = TrainingVpc(stack, "Net", gpu_az_id=az)
    name = cdk.CfnParameter(stack, "ClusterName").value_as_string
    admin = cdk.Fn.import_value("admin-role-arn")
    training = TrainingCluster(
        stack, "Eks", vpc=net.vpc, subnets=net.private_subnets, cluster_name=name, admin_role_arn=admin
    )
    reservation = cdk.CfnParameter(stack, "Reservation").value_as_string
    size = cdk.CfnParameter(stack, "Nodes", type="Number").value_as_number
    GpuNodeGroup(
        stack,
        "Gpu",
        cluster=training.cluster,
        subnet=net.gpu_subnet,
        profile=instance_profile("p5.48xlarge"),
        security_groups=[training.cluster_security_group],
        capacity="capacity-reservation",
        capacity_reservation_id=reservation,
        desired_size=size,
        placement_group=None,
    )
    template = Template.from_stack(stack)
    template.has_resource_properties("AWS::EKS::Cluster", {"Name": {"Ref": "ClusterName"}})
    template.has_resource_properties("AWS::EKS::AccessEntry", {"PrincipalArn": {"Fn::ImportValue": "admin-role-arn"}})
    template.has_resource_properties("AWS::EC2::Subnet", {"AvailabilityZoneId": {"Ref": "GpuAz"}})
    template.has_resource_properties(
        "AWS::EC2::LaunchTemplate",
        {
            "LaunchTemplateData": {
                "CapacityReservationSpecification": {
                    "CapacityReservationTarget": {"CapacityReservationId": {"Ref": "Reservation"}}
                }
            }
        },
    )


def test_the_data_link_may_take_parameters_and_the_size_may_not() -> None:
    stack = cdk.Stack(cdk.App(), "S")
    vpc, subnet = network(stack)
    prefix = cdk.CfnParameter(stack, "Prefix").value_as_string
    path = cdk.CfnParameter(stack, "Path").value_as_string
    lustre_in(stack, vpc, subnet, data_prefix=prefix, file_system_path=path)
    template = Template.from_stack(stack)
    template.has_resource_properties("AWS::FSx::DataRepositoryAssociation", {"FileSystemPath": {"Ref": "Path"}})
    size = cdk.CfnParameter(stack, "Size", type="Number").value_as_number
    with pytest.raises(ConstructValidationError, match="storage_capacity_gib: must be known at synth, not a token"):
        LustreStorage(
            stack, "Other", vpc=vpc, subnet=subnet, data_bucket=s3.Bucket(stack, "D2"), storage_capacity_gib=size
        )


def test_what_decides_the_template_must_be_known_at_synth() -> None:
    stack = cdk.Stack(cdk.App(), "S")
    size = cdk.CfnParameter(stack, "Size", type="Number").value_as_number
    with pytest.raises(ConstructValidationError, match="fsx_storage_gib: must be known at synth, not a token"):
        TrainingObservability(
            stack,
            "Obs",
            cluster_name="c",
            application_log_group=cdk.aws_logs.LogGroup.from_log_group_name(stack, "Logs", "logs"),
            file_system_id="fs-0123456789abcdef0",
            fsx_storage_gib=size,
            metric_namespace="X",
        )
    version = cdk.CfnParameter(stack, "Version").value_as_string
    vpc, _ = network(stack)
    with pytest.raises(ConstructValidationError, match="kubernetes_version: must be known at synth"):
        TrainingCluster(stack, "Eks", vpc=vpc, subnets=vpc.private_subnets, kubernetes_version=version)


def test_coredns_autoscales_with_the_clusters_largest_size() -> None:
    """EKS's CoreDNS autoscaling (its node term: one replica per 16 nodes, at least 2) bounded by ``max_nodes``;
    a count below the system nodes is refused, naming the field."""
    assert coredns_configuration(4) == {"autoScaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 2}}
    assert coredns_configuration(33)["autoScaling"] == {"enabled": True, "minReplicas": 2, "maxReplicas": 3}
    assert coredns_configuration(258)["autoScaling"]["maxReplicas"] == 17  # type: ignore[index]
    stack = cdk.Stack(cdk.App(), "S")
    vpc, _ = network(stack)
    TrainingCluster(stack, "Eks", vpc=vpc, subnets=vpc.private_subnets, system_nodes=2, max_nodes=258)
    (coredns,) = [
        a["Properties"]
        for a in Template.from_stack(stack).find_resources("AWS::EKS::Addon").values()
        if a["Properties"]["AddonName"] == "coredns"
    ]
    assert json.loads(coredns["ConfigurationValues"]) == coredns_configuration(258)
    with pytest.raises(ConstructValidationError, match=r"max_nodes: 1 must be >= system_nodes \(2\)"):
        TrainingCluster(stack, "Eks2", vpc=vpc, subnets=vpc.private_subnets, system_nodes=2, max_nodes=1)


# ---- cluster-admin: eks.Cluster's own ------------------------------------------------------------------
def test_grant_cluster_admin_is_eks_clusters(monkeypatch: pytest.MonkeyPatch) -> None:
    stack = cdk.Stack(cdk.App(), "S")
    vpc, _ = network(stack)
    training = TrainingCluster(stack, "Eks", vpc=vpc, subnets=vpc.private_subnets)
    entry = training.grant_cluster_admin("Admins", "arn:aws:iam::123456789012:role/admins")
    assert isinstance(entry, eks.AccessEntry)
    assert entry.node.path == "S/Eks/Cluster/Admins"  # made by the cluster, as eks.Cluster.grant_cluster_admin makes it
    Template.from_stack(stack).has_resource_properties(
        "AWS::EKS::AccessEntry",
        {
            "PrincipalArn": "arn:aws:iam::123456789012:role/admins",
            "AccessPolicies": [
                {
                    "AccessScope": {"Type": "cluster"},
                    "PolicyArn": {
                        "Fn::Join": [
                            "",
                            [
                                "arn:",
                                {"Ref": "AWS::Partition"},
                                ":eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
                            ],
                        ]
                    },
                }
            ],
        },
    )
