"""How the charts reach the cluster with `cdk deploy`: manifests, operators, ordering, the token bridge."""

from __future__ import annotations

import json

import pytest

from conftest import hyperpod_config
from llm_infra.config import ConfigError, TrainingConfig
from llm_infra.k8s_manifests.payload import WORKLOADS_DIR
from llm_infra.versions import KUBERAY_OPERATOR, TOKENIZERS_VERSION

CLUSTER = "-cluster"
MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"


def manifests(app) -> dict[str, dict]:
    """Applied manifests by chart name (from the construct id `Chart-<name>`)."""
    found = {}
    for logical_id, resource in app.resources(CLUSTER, MANIFEST).items():
        name = logical_id.removeprefix("EksClusterChart")[:-8]
        found[name] = resource
    return found


def kinds(resource: dict) -> list[str]:
    text = json.dumps(resource["Properties"]["Manifest"])
    return sorted(
        set(
            k
            for k in ("Namespace", "ConfigMap", "PersistentVolume", "RayCluster", "RayJob", "PyTorchJob", 'Job\\"')
            if f'\\"kind\\":\\"{k}' in text or f'"kind":"{k}' in text
        )
    )


def test_platform_charts_are_applied_jobs_and_ray_are_not_by_default(default_app) -> None:
    applied = manifests(default_app)
    assert set(applied) == {"base", "fsxstorage", "nodemonitoring", "kueuequeues"}  # nothing that holds a GPU
    base_id = [k for k in default_app.resources(CLUSTER, MANIFEST) if k.startswith("EksClusterChartbase")][0]
    for name in ("fsxstorage", "nodemonitoring", "kueuequeues"):
        assert base_id in applied[name]["DependsOn"]  # the namespace exists first


def test_fsx_ids_cross_from_the_storage_stack_as_tokens(default_app) -> None:
    manifest = json.dumps(manifests(default_app)["fsxstorage"]["Properties"]["Manifest"])
    assert '"volumeHandle\\":\\"", {"Fn::ImportValue": "llm-infra-storage:ExportsOutputRefLustreFileSystem' in manifest
    assert "LustreMountName" in manifest and ".fsx." in manifest


def test_kuberay_operator_is_pinned_and_installed_after_the_system_nodes(default_app) -> None:
    charts = default_app.resources(CLUSTER, "Custom::AWSCDK-EKS-HelmChart")
    (operator_id,) = [k for k, v in charts.items() if v["Properties"].get("Chart") == "kuberay-operator"]
    assert charts[operator_id]["Properties"]["Version"] == KUBERAY_OPERATOR.version
    assert charts[operator_id]["Properties"]["Repository"] == "https://ray-project.github.io/kuberay-helm/"
    (system_nodes,) = [
        k
        for k, v in default_app.resources(CLUSTER, "AWS::EKS::Nodegroup").items()
        if v["Properties"]["Labels"]["llm-infra.aws/node-role"] == "system"
    ]
    for chart in charts.values():  # every Helm release (its pods, Helm's wait) needs the system nodes
        assert system_nodes in chart["DependsOn"]


@pytest.mark.parametrize("compute", ["eks", "hyperpod"])
def test_apply_jobs_adds_validation_and_training_after_the_operator(synth, compute: str) -> None:
    app = synth(TrainingConfig(compute=compute, apply_jobs=True))
    applied = manifests(app)
    queues = {"kueuequeues"} if compute == "eks" else set()  # HyperPod: task governance's queues are AWS's
    assert set(applied) == {"base", "fsxstorage", "nodemonitoring", "validation", "trainingjob"} | queues
    (operators_id,) = app.resources(CLUSTER, "AWS::CloudFormation::Stack")
    for name in ("validation", "trainingjob"):
        assert operators_id in applied[name]["DependsOn"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"endpoint_access": "private"},
            "operators: aws-helm-stack installs from a Lambda outside the VPC and needs the public API endpoint",
        ),
        (
            {"operators": "none", "apply_jobs": True},
            "apply_jobs: the jobs are PyTorchJobs and operators=none installs no training operator",
        ),
        ({"operators": "helm"}, "operators: 'helm' is not allowed; allowed: aws-helm-stack, none"),
    ],
)
def test_operator_source_errors_name_the_key(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        TrainingConfig(**changes).validate()
    assert message in str(err.value)


def test_operators_none_installs_no_operator_stack(synth) -> None:
    app = synth(TrainingConfig(operators="none", endpoint_access="private"))
    assert app.resources(CLUSTER, "AWS::CloudFormation::Stack") == {}


def test_hyperpod_operators_differ_from_plain_eks_only_by_hyperpod_components(synth, default_app) -> None:
    def switches(app) -> dict[str, str]:
        (stack,) = app.resources(CLUSTER, "AWS::CloudFormation::Stack").values()
        return dict(pair.split("=") for pair in stack["Properties"]["Parameters"]["HelmOperators"].split(","))

    eks, hyperpod = switches(default_app), switches(synth(hyperpod_config()))
    assert {k for k in eks if eks[k] != hyperpod[k]} == {
        "health-monitoring-agent.enabled",
        "deep-health-check.enabled",
        "job-auto-restart.enabled",
        "hyperpod-patching.enabled",
    }
    assert eks["trainingOperators.enabled"] == "true"


def test_optional_image_asset_bakes_in_the_payload_and_ray(synth) -> None:
    app = synth(TrainingConfig(image_asset=True))
    manifest = json.dumps(manifests(app)["nodemonitoring"]["Properties"]["Manifest"])
    assert "container-assets-" in manifest  # the pods run the image that deploy builds and pushes
    (staged,) = [p for p in app.outdir.glob("asset.*") if (p / "Dockerfile").is_file()]
    assert sorted(p.name for p in staged.iterdir() if p.suffix == ".py") == sorted(
        p.name for p in WORKLOADS_DIR.glob("*.py")
    )
    assert not (staged / "README.md").exists()  # .dockerignore keeps the build context to the payload
    assert "FROM ${BASE_IMAGE}" in (staged / "Dockerfile").read_text()
    assert '"tokenizers==${TOKENIZERS_VERSION}"' in (staged / "Dockerfile").read_text()
    images = [
        image
        for assets in app.outdir.glob("*.assets.json")
        for image in json.loads(assets.read_text()).get("dockerImages", {}).values()
    ]
    (image,) = images
    assert image["source"]["dockerBuildArgs"]["TOKENIZERS_VERSION"] == TOKENIZERS_VERSION
