"""compute=hyperpod: the HyperPod training operator add-on with its prerequisites (standalone Pod Identity
association, cert-manager, Pod Identity agent, EKS Auth endpoint), the nodes cert-manager is admitted on,
continuous provisioning, and the config checks that keep the operator to the Kubernetes and PyTorch
versions it supports and give it a CPU group. Where its pods land on the real scheduler (its controller on
the HyperPod CPU instance group, whichever way the add-on combines our values with its defaults):
tests/test_scheduling_real.py."""

from __future__ import annotations

import dataclasses
import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Match, Template
from cluster_model import admission_problem, installed_pods

from conftest import hyperpod_config
from llm_infra import config as config_module
from llm_infra.config import KUBERNETES_VERSIONS, ConfigError, TrainingConfig
from llm_infra.constructs import hyperpod_training_operator as operator_module
from llm_infra.constructs.hyperpod_cluster import HyperPodCluster, HyperPodInstanceGroup
from llm_infra.constructs.hyperpod_training_operator import HyperPodTrainingOperator
from llm_infra.constructs.training_cluster import TrainingCluster
from llm_infra.node_labels import NODE_ROLE_LABEL
from llm_infra.rehearsal.deploy_workloads import NodeSpec, Templates, applied_objects, template_nodes
from llm_infra.rehearsal.upstream_charts import HYPERPOD_COMPUTE_TYPE_LABEL, VALUE_MERGES
from llm_infra.versions import HYPERPOD_TRAINING_OPERATOR_ADDONS

OPERATOR = "amazon-sagemaker-hyperpod-training-operator"
# AWS's install instructions (docs: sagemaker-eks-operator-install, CLI step 3) associate the role
# with this service account in this namespace; the add-on's controller runs as it.
OPERATOR_NAMESPACE = "aws-hyperpod"
OPERATOR_SERVICE_ACCOUNT = "hp-training-operator-controller-manager"


@pytest.fixture(scope="module")
def hyperpod_app(synth):
    return synth(hyperpod_config())


@pytest.fixture(scope="module")
def without_operator(synth):
    return synth(hyperpod_config(hyperpod_training_operator=False, hyperpod_node_provisioning="standard"))


def cluster_template(app) -> Template:
    return Template.from_json(app.template("-cluster"))


def addon_id(app, name: str) -> str:
    (logical_id,) = [
        lid for lid, r in app.resources("-cluster", "AWS::EKS::Addon").items() if r["Properties"]["AddonName"] == name
    ]
    return logical_id


# ---- the add-on and its identity ----------------------------------------------------------------
def test_addon_is_pinned_for_the_clusters_kubernetes_version(hyperpod_app) -> None:
    config = hyperpod_config()
    pins = HYPERPOD_TRAINING_OPERATOR_ADDONS[config.kubernetes_version]
    template = cluster_template(hyperpod_app)
    template.has_resource_properties("AWS::EKS::Cluster", {"Version": config.kubernetes_version})
    for name in (OPERATOR, "cert-manager"):
        template.has_resource_properties("AWS::EKS::Addon", {"AddonName": name, "AddonVersion": pins[name]})


def test_the_role_reaches_the_controller_through_a_standalone_association(hyperpod_app) -> None:
    template = cluster_template(hyperpod_app)
    # No inline association on the add-on: EKS rejects it for builds that do not advertise
    # requiresIamPermissions, as v1.2.1-eksbuild.1 does not (awslabs/awsome-distributed-ai #1075).
    template.has_resource_properties(
        "AWS::EKS::Addon", {"AddonName": OPERATOR, "PodIdentityAssociations": Match.absent()}
    )
    roles = template.find_resources(
        "AWS::IAM::Role", {"Properties": {"Description": Match.string_like_regexp("HyperPod training operator")}}
    )
    (role_id,) = roles
    template.has_resource_properties(
        "AWS::EKS::PodIdentityAssociation",
        {
            "Namespace": OPERATOR_NAMESPACE,
            "ServiceAccount": OPERATOR_SERVICE_ACCOUNT,
            "RoleArn": {"Fn::GetAtt": [role_id, "Arn"]},
        },
    )


def test_operator_role_is_the_documented_managed_policy_for_pod_identity(hyperpod_app) -> None:
    template = cluster_template(hyperpod_app)
    (role,) = template.find_resources(
        "AWS::IAM::Role", {"Properties": {"Description": Match.string_like_regexp("HyperPod training operator")}}
    ).values()
    props = role["Properties"]
    (statement,) = props["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    (policy,) = props["ManagedPolicyArns"]
    assert json.dumps(policy).endswith(':iam::aws:policy/AmazonSageMakerHyperPodTrainingOperatorAccess"]]}')
    assert "Policies" not in props


def test_addon_waits_for_its_association_prerequisites_and_the_hyperpod_nodes(hyperpod_app) -> None:
    resources = hyperpod_app.template("-cluster")["Resources"]
    depends_on = set(resources[addon_id(hyperpod_app, OPERATOR)]["DependsOn"])
    (association,) = [
        lid
        for lid, r in hyperpod_app.resources("-cluster", "AWS::EKS::PodIdentityAssociation").items()
        if r["Properties"]["ServiceAccount"] == OPERATOR_SERVICE_ACCOUNT
    ]
    (hyperpod,) = hyperpod_app.resources("-cluster", "AWS::SageMaker::Cluster")
    prerequisites = {
        association,
        addon_id(hyperpod_app, "cert-manager"),
        addon_id(hyperpod_app, "eks-pod-identity-agent"),
        hyperpod,
    }
    assert prerequisites <= depends_on


def test_kubeflow_operator_stays_beside_the_hyperpod_operator(hyperpod_app) -> None:
    # HyperPod's own deep health checks run as PyTorchJobs (aws/sagemaker-hyperpod-cli #449), and
    # job-auto-restart only acts on kubeflow.org PyTorchJobs (its ClusterRole), never on
    # HyperPodPyTorchJobs: both stay on.
    (stack,) = hyperpod_app.resources("-cluster", "AWS::CloudFormation::Stack").values()
    switches = dict(pair.split("=") for pair in stack["Properties"]["Parameters"]["HelmOperators"].split(","))
    assert switches["trainingOperators.enabled"] == "true"
    assert switches["job-auto-restart.enabled"] == "true"


def test_operator_off_installs_neither_it_nor_cert_manager(without_operator) -> None:
    names = {r["Properties"]["AddonName"] for r in without_operator.resources("-cluster", "AWS::EKS::Addon").values()}
    assert OPERATOR not in names and "cert-manager" not in names
    associations = without_operator.resources("-cluster", "AWS::EKS::PodIdentityAssociation").values()
    assert OPERATOR_NAMESPACE not in {a["Properties"]["Namespace"] for a in associations}


# ---- where cert-manager may run -------------------------------------------------------------------
CERT_MANAGER_PODS = ("cert-manager", "cert-manager-webhook", "cert-manager-cainjector")


def hyperpod_cpu_nodes(cluster: list[NodeSpec]) -> set[str]:
    return {n.name for n in cluster if HYPERPOD_COMPUTE_TYPE_LABEL in n.labels and not n.gpus and not n.taints}


@pytest.mark.parametrize("merge", VALUE_MERGES)
def test_cert_manager_is_admitted_only_on_untainted_nodes(hyperpod_app, merge) -> None:
    templates = Templates(hyperpod_app.templates)
    cluster = template_nodes(templates)
    pods = installed_pods(templates, merge=merge)
    untainted = {n.name for n in cluster if not n.taints}
    system = {n.name for n in cluster if n.labels.get(NODE_ROLE_LABEL) == "system"}
    assert system and system | hyperpod_cpu_nodes(cluster) == untainted
    cert_manager = [pod for pod in pods if pod.name in CERT_MANAGER_PODS]
    assert {pod.name for pod in cert_manager} == set(CERT_MANAGER_PODS)
    for pod in cert_manager:
        assert {n.name for n in cluster if admission_problem(n, pod.spec) is None} == untainted, pod.name


def test_jobs_applied_at_deploy_wait_for_the_operator(synth) -> None:
    app = synth(hyperpod_config(apply_jobs=True))
    templates = Templates(app.templates)
    operator = addon_id(app, OPERATOR)
    job_manifests = {
        lid
        for stack, lid, obj in applied_objects(templates)
        if obj["kind"] in ("HyperPodPyTorchJob", "PyTorchJob") and stack.endswith("-cluster")
    }
    assert job_manifests
    resources = app.template("-cluster")["Resources"]
    for lid in job_manifests:
        assert operator in resources[lid]["DependsOn"], lid


# ---- the network -----------------------------------------------------------------------------------
def test_eks_auth_endpoint_serves_every_node(hyperpod_app) -> None:
    network = Template.from_json(hyperpod_app.template("-network"))
    endpoints = network.find_resources(
        "AWS::EC2::VPCEndpoint",
        {"Properties": {"ServiceName": {"Fn::Join": ["", ["com.amazonaws.", {"Ref": "AWS::Region"}, ".eks-auth"]]}}},
    )
    ((endpoint_id, endpoint),) = endpoints.items()
    assert endpoint["Properties"]["PrivateDnsEnabled"] is True
    (group_ref,) = endpoint["Properties"]["SecurityGroupIds"]
    group = network.to_json()["Resources"][group_ref["Fn::GetAtt"][0]]
    sources = [rule.get("CidrIp") for rule in group["Properties"]["SecurityGroupIngress"] if rule["FromPort"] == 443]
    assert hyperpod_config().gpu_subnet_cidr in sources, endpoint_id


# ---- provisioning ----------------------------------------------------------------------------------
def test_continuous_provisioning_by_default_standard_on_request(hyperpod_app, without_operator) -> None:
    cluster_template(hyperpod_app).has_resource_properties(
        "AWS::SageMaker::Cluster", {"NodeProvisioningMode": "Continuous"}
    )
    cluster_template(without_operator).has_resource_properties(
        "AWS::SageMaker::Cluster", {"NodeProvisioningMode": Match.absent()}
    )


# ---- config ----------------------------------------------------------------------------------------
def test_every_supported_kubernetes_version_has_the_operator_pinned() -> None:
    for version in KUBERNETES_VERSIONS:
        assert hyperpod_config(kubernetes_version=version).uses_hyperpod_training_operator


def test_a_kubernetes_version_without_the_operator_is_a_synth_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_module, "HYPERPOD_TRAINING_OPERATOR_ADDONS", {"1.34": {}})
    with pytest.raises(ConfigError) as err:
        TrainingConfig.from_context({"compute": "hyperpod", "kubernetes_version": "1.35"})
    message = str(err.value)
    assert "kubernetes_version: '1.35'" in message and "allowed: 1.34" in message
    assert "hyperpod_training_operator=false" in message
    config = TrainingConfig.from_context(
        {"compute": "hyperpod", "kubernetes_version": "1.35", "hyperpod_training_operator": "false"}
    )
    assert not config.uses_hyperpod_training_operator


@pytest.mark.parametrize(
    ("tag", "supported"),
    [
        ("2.8.0-gpu-py312-cu129-ubuntu22.04-ec2", True),
        ("2.4.0-gpu-py311-cu124-ubuntu22.04-ec2", True),
        ("2.11-gpu-py312-cu130-ubuntu24.04-ec2", True),
        ("2.12.0-gpu-py312-cu130-ubuntu24.04-ec2", False),
        ("2.3.0-gpu-py311-cu121-ubuntu20.04-ec2", False),
    ],
)
def test_dlc_torch_must_suit_the_elastic_agent(tag: str, supported: bool) -> None:
    context = {"compute": "hyperpod", "dlc_image_tag": tag}
    if supported:
        TrainingConfig.from_context(context)
    else:
        with pytest.raises(ConfigError, match=r"dlc_image_tag: .*PyTorch 2\.4 up to, not including, 2\.12"):
            TrainingConfig.from_context(context)
        TrainingConfig.from_context({**context, "hyperpod_training_operator": "false"})


def test_the_cpu_group_has_one_instance_by_default_with_the_operator() -> None:
    assert hyperpod_config().hyperpod_cpu_count == 1
    assert hyperpod_config(hyperpod_training_operator=False).hyperpod_cpu_count == 0
    assert TrainingConfig.from_context({"compute": "hyperpod", "hyperpod_cpu_nodes": "3"}).hyperpod_cpu_count == 3
    context = {"compute": "hyperpod", "hyperpod_cpu_nodes": "0"}
    with pytest.raises(ConfigError) as err:
        TrainingConfig.from_context(context)
    assert "hyperpod_cpu_nodes: 0" in str(err.value) and "hyperpod_training_operator=false" in str(err.value)
    assert TrainingConfig.from_context({**context, "hyperpod_training_operator": "false"}).hyperpod_cpu_count == 0


def operator_on(stack: cdk.Stack, groups: list[HyperPodInstanceGroup]) -> HyperPodTrainingOperator:
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    cluster = TrainingCluster(stack, "Eks", vpc=vpc, subnets=vpc.private_subnets, kubernetes_version="1.34")
    hyperpod = HyperPodCluster(
        stack,
        "HyperPod",
        cluster=cluster.cluster,
        subnet=vpc.private_subnets[0],
        security_groups=[],
        instance_groups=groups,
        cluster_name="hp",
    )
    return HyperPodTrainingOperator(stack, "Operator", training_cluster=cluster, hyperpod=hyperpod)


GPU_GROUP = HyperPodInstanceGroup(name="gpu")
CPU_GROUP = HyperPodInstanceGroup(
    name="cpu", instance_type="ml.m5.2xlarge", count=1, storage_volumes_gib=(), deep_health_checks=(), gpu=False
)


def test_the_construct_puts_the_controller_on_the_cpu_groups_role() -> None:
    stack = cdk.Stack(cdk.App(), "S")
    group = dataclasses.replace(CPU_GROUP, labels={NODE_ROLE_LABEL: "controllers"})
    operator = operator_on(stack, [GPU_GROUP, group])
    addon = operator.addon.node.default_child
    assert isinstance(addon, eks.CfnAddon)
    values = json.loads(stack.resolve(addon.configuration_values))
    assert values == {"hpTrainingControllerManager": {"nodeSelector": {NODE_ROLE_LABEL: "controllers"}}}


def test_the_construct_refuses_a_hyperpod_cluster_without_a_cpu_group() -> None:
    with pytest.raises(ValueError, match=r"hyperpod: .* CPU instance group and there is none \(groups: gpu\)"):
        operator_on(cdk.Stack(cdk.App(), "S"), [GPU_GROUP])


def test_the_construct_refuses_a_kubernetes_version_without_pins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(operator_module, "HYPERPOD_TRAINING_OPERATOR_ADDONS", {"1.35": {}})
    with pytest.raises(ValueError, match="kubernetes_version: '1.34' has no pinned .* allowed: 1.35"):
        operator_on(cdk.Stack(cdk.App(), "S"), [GPU_GROUP, CPU_GROUP])
