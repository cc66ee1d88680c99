"""The second deploy review's findings, each checked on the synthesized templates against the contract
of the component it meets (sources beside the code): the HyperPod cluster's SageMaker tag, add-on
conflict resolution, the VPC CNI's network policy agent, Lustre's client rules both ways, AWS's
Helm-chart stack keyed by its inputs, HyperPod-only regions, per-group lifecycle settings, and the
execution role's ENI actions."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
import yaml

from conftest import RAY_TEST_IMAGE, hyperpod_config
from llm_infra.config import ConfigError, TrainingConfig
from llm_infra.constructs.hyperpod_dependencies import HELM_RELEASE, HyperPodDependencies, chart_switches
from llm_infra.constructs.lustre_storage import LUSTRE_PORTS
from llm_infra.k8s_manifests.render import write_dist
from llm_infra.rehearsal.deploy_workloads import Templates, flatten, hyperpod_lifecycle_settings
from llm_infra.rehearsal.upstream_charts import VPC_CNI_CONFIGURATION, VPC_CNI_NETWORK_POLICY_SINCE
from llm_infra.service_limits import HYPERPOD_REGIONS

CLUSTER, STORAGE = "-cluster", "-storage"
LUSTRE = sorted((p.to_rule_json()["fromPort"], p.to_rule_json()["toPort"]) for p in LUSTRE_PORTS)
# AWS's helm-chart-template.yaml: FunctionName `${ResourceNamePrefix}helmfunc`; Lambda allows 64 characters.
LAMBDA_NAME_LIMIT = 64


@pytest.fixture(scope="module")
def hyperpod_app(synth):
    return synth(hyperpod_config())


def addons(app) -> dict[str, dict]:
    return {r["Properties"]["AddonName"]: r["Properties"] for r in app.resources(CLUSTER, "AWS::EKS::Addon").values()}


# ---- blocker: the training operator needs the cluster tagged SageMaker=true ------------------------
def test_the_hyperpod_cluster_is_tagged_for_the_training_operator(hyperpod_app) -> None:
    (cluster,) = hyperpod_app.resources(CLUSTER, "AWS::SageMaker::Cluster").values()
    assert {"Key": "SageMaker", "Value": "true"} in cluster["Properties"]["Tags"]


# ---- add-ons ------------------------------------------------------------------------------------
@pytest.mark.parametrize("compute", ["eks", "hyperpod"])
def test_network_policy_is_enforced_by_the_vpc_cni(synth, compute: str) -> None:
    vpc_cni = addons(synth(TrainingConfig(compute=compute)))["vpc-cni"]
    values = json.loads(vpc_cni["ConfigurationValues"])
    assert values == {"enableNetworkPolicy": "true"}
    for key, value in values.items():  # the add-on's schema as the EKS user guide documents it
        assert value in VPC_CNI_CONFIGURATION[key]
    version = tuple(int(x) for x in vpc_cni["AddonVersion"].removeprefix("v").split("-")[0].split("."))
    assert version >= VPC_CNI_NETWORK_POLICY_SINCE


def test_the_redis_network_policy_is_one_the_agent_enforces(synth, tmp_path) -> None:
    """The object the agent exists for: Redis admits only the RayCluster's pods."""
    config = TrainingConfig(ray_image=RAY_TEST_IMAGE)
    outputs = tmp_path / "outputs.json"
    outputs.write_text("{}")
    (kuberay,) = [p for p in write_dist(config, tmp_path, outputs_file=outputs) if p.name.startswith("kuberay")]
    assert "kind: NetworkPolicy" in kuberay.read_text()
    assert "enableNetworkPolicy" in json.dumps(addons(synth(config))["vpc-cni"])


# ---- Lustre: every client group admits the file system's group on 988 and 1018-1023 ---------------
def ingress_from(app, stack: str, source_fragment: str, group_fragment: str) -> list[tuple[int, int]]:
    rules = [r["Properties"] for r in app.resources(stack, "AWS::EC2::SecurityGroupIngress").values()]
    return sorted(
        (r["FromPort"], r["ToPort"])
        for r in rules
        if source_fragment in json.dumps(r.get("SourceSecurityGroupId")) and group_fragment in json.dumps(r["GroupId"])
    )


@pytest.mark.parametrize("compute", ["eks", "hyperpod"])
def test_lustre_servers_reach_their_clients_on_both_client_groups(synth, compute: str) -> None:
    app = synth(TrainingConfig(compute=compute))
    storage = app.template(STORAGE)["Resources"]
    (fsx_sg,) = [lid for lid, r in storage.items() if "Lustre" in lid and r["Type"] == "AWS::EC2::SecurityGroup"]
    # The EFA group (network stack, imported) admits the FSx group: the rule lives in the storage stack.
    assert ingress_from(app, STORAGE, fsx_sg, "Fn::ImportValue") == LUSTRE
    # The EKS cluster group admits the FSx group (imported into the cluster stack).
    assert ingress_from(app, CLUSTER, "Fn::ImportValue", "ClusterSecurityGroupId") == LUSTRE


# ---- AWS's Helm-chart stack: keyed by its inputs, unique names ---------------------------------------
def helm_stack(app) -> tuple[str, dict]:
    ((logical_id, stack),) = app.resources(CLUSTER, "AWS::CloudFormation::Stack").items()
    return logical_id, stack["Properties"]["Parameters"]


def test_a_change_of_mode_is_a_new_helm_stack_with_its_own_release_and_names(default_app, hyperpod_app) -> None:
    eks_id, eks = helm_stack(default_app)
    hyperpod_id, hyperpod = helm_stack(hyperpod_app)
    assert eks["HelmOperators"] != hyperpod["HelmOperators"]
    # A changed input is a new nested stack (AWS's Lambda never reruns Helm on an update) ...
    assert eks_id != hyperpod_id
    # ... with its own release (the failed install's rollback uninstalls only that) and Lambda name.
    assert eks["HelmRelease"] != hyperpod["HelmRelease"]
    assert eks["HelmRelease"].startswith(f"{HELM_RELEASE}-") and len(eks["HelmRelease"]) <= 53  # Helm's limit
    assert flatten(eks["ResourceNamePrefix"]) != flatten(hyperpod["ResourceNamePrefix"])


def test_the_same_inputs_leave_the_helm_stack_alone(default_app, synth) -> None:
    """Another synth of the same config (other keys changed) keeps the nested stack's identity, so an
    update changes nothing in it."""
    logical_id, parameters = helm_stack(default_app)
    other_id, other = helm_stack(synth(TrainingConfig(gpu_nodes=4)))
    assert (other_id, other) == (logical_id, parameters)


def test_helm_stack_names_are_unique_per_deployment_and_fit_lambdas_limit(default_app) -> None:
    _, parameters = helm_stack(default_app)
    prefix = parameters["ResourceNamePrefix"]
    # The parent stack's ID (a UUID per deployment) is part of the prefix.
    separator, (project, stack_uuid_part, digest) = prefix["Fn::Join"]
    assert (separator, project) == ("-", "llm-infra") and "AWS::StackId" in json.dumps(stack_uuid_part)
    assert digest.endswith("-")
    longest_project = "p" * 31  # config: project_name is at most 31 characters
    longest = len(f"{longest_project[:24]}-{'0' * 8}-{digest}helmfunc")  # 8: the UUID's first group
    assert longest <= LAMBDA_NAME_LIMIT


def test_unknown_chart_switches_are_refused() -> None:
    with pytest.raises(ValueError, match="switches: unknown nope"):
        HyperPodDependencies(
            cdk.Stack(cdk.App(), "S"), "Ops", cluster_name="c", switches={"nope": True}, resource_name_prefix="p"
        )
    assert set(chart_switches(hyperpod=True)) == set(chart_switches(hyperpod=False))


# ---- regions: the Helm-chart stack's bucket and HyperPod exist only in HyperPod regions -------------
def test_a_region_without_the_helm_stack_is_a_synth_error_with_the_way_out() -> None:
    with pytest.raises(ConfigError) as error:
        TrainingConfig(region="ca-central-1", gpu_az_id="cac1-az1").validate()
    message = str(error.value)
    assert "operators: aws-helm-stack" in message and "ca-central-1" in message
    assert "operators=none" in message and "us-east-1" in message
    TrainingConfig(region="ca-central-1", gpu_az_id="cac1-az1", operators="none").validate()


def test_the_region_comes_from_the_az_id_when_none_is_set() -> None:
    with pytest.raises(ConfigError, match="not in ca-central-1"):
        TrainingConfig(gpu_az_id="cac1-az1").validate()
    assert TrainingConfig().deploy_region == "us-east-1" in HYPERPOD_REGIONS


def test_hyperpod_outside_its_regions_is_a_synth_error() -> None:
    with pytest.raises(ConfigError, match="compute: hyperpod is not offered in ca-central-1; set compute=eks"):
        TrainingConfig(compute="hyperpod", region="ca-central-1", gpu_az_id="cac1-az1", operators="none").validate()


# ---- HyperPod lifecycle: hugepages only where EFA needs them ---------------------------------------
def test_hugepages_on_the_gpu_group_only(hyperpod_app) -> None:
    settings = hyperpod_lifecycle_settings(Templates(hyperpod_app.templates), hyperpod_app.outdir)
    assert settings == {"gpu": {"HUGEPAGES_2MIB": "5120"}, "cpu": {"HUGEPAGES_2MIB": "0"}}


# ---- the execution role: what AWS's reference role grants for ENIs ---------------------------------
def test_execution_role_can_attach_network_interfaces(hyperpod_app) -> None:
    policies = json.dumps(hyperpod_app.resources(CLUSTER, "AWS::IAM::Policy"))
    assert "ec2:AttachNetworkInterface" in policies


# ---- hyperpodrun comes with the image when the image is ours ----------------------------------------
def hyperpod_job_containers(config: TrainingConfig, tmp_path) -> list[dict]:
    tmp_path.mkdir()
    outputs = tmp_path / "outputs.json"
    outputs.write_text("{}")
    (training,) = [p for p in write_dist(config, tmp_path, outputs_file=outputs) if p.name == "training-job.k8s.yaml"]
    (job,) = [o for o in yaml.safe_load_all(training.read_text()) if o["kind"] == "HyperPodPyTorchJob"]
    return [c for r in job["spec"]["replicaSpecs"] for c in r["template"]["spec"]["containers"]]


def test_hyperpod_jobs_run_on_the_built_image_when_there_is_one(tmp_path) -> None:
    (built,) = hyperpod_job_containers(hyperpod_config(ray_image=RAY_TEST_IMAGE), tmp_path / "built")
    assert built["image"] == RAY_TEST_IMAGE
    (stock,) = hyperpod_job_containers(hyperpod_config(), tmp_path / "stock")
    assert "pytorch-training" in stock["image"]
    # The stock DLC image lacks hyperpodrun: the documented fallback installs it at start.
    assert "command -v hyperpodrun" in stock["command"][2]
