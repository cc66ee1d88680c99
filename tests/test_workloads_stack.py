"""How the charts reach the cluster with `cdk deploy`: manifests, operators, ordering, the token bridge."""

from __future__ import annotations

import json

import aws_cdk as cdk
from aws_cdk.assertions import Annotations, Match

from conftest import FAKE_HYPERPOD_CHART, hyperpod_config
from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.base_chart import WORKLOADS_DIR
from llm_infra.stacks.training_app import add_training_stacks
from llm_infra.versions import TOKENIZERS_VERSION

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


def test_platform_charts_are_applied_jobs_are_not_by_default(default_app) -> None:
    applied = manifests(default_app)
    assert set(applied) == {"base", "fsxstorage", "kuberay", "nodemonitoring"}
    base_id = [k for k in default_app.resources(CLUSTER, MANIFEST) if k.startswith("EksClusterChartbase")][0]
    for name in ("fsxstorage", "kuberay", "nodemonitoring"):
        assert base_id in applied[name]["DependsOn"]  # the namespace exists first


def test_fsx_ids_cross_from_the_storage_stack_as_tokens(default_app) -> None:
    manifest = json.dumps(manifests(default_app)["fsxstorage"]["Properties"]["Manifest"])
    assert '"volumeHandle\\":\\"", {"Fn::ImportValue": "llm-infra-storage:ExportsOutputRefLustreFileSystem' in manifest
    assert "LustreMountName" in manifest and ".fsx." in manifest


def test_kuberay_operator_is_pinned_and_installed_before_the_cluster(default_app) -> None:
    charts = default_app.resources(CLUSTER, "Custom::AWSCDK-EKS-HelmChart")
    (operator_id,) = [k for k, v in charts.items() if v["Properties"].get("Chart") == "kuberay-operator"]
    assert charts[operator_id]["Properties"]["Version"] == "1.7.0"
    assert charts[operator_id]["Properties"]["Repository"] == "https://ray-project.github.io/kuberay-helm/"
    assert operator_id in manifests(default_app)["kuberay"]["DependsOn"]


def test_apply_jobs_adds_validation_and_training(synth) -> None:
    app = synth(TrainingConfig(apply_jobs=True, training_operator_chart=str(FAKE_HYPERPOD_CHART)))
    applied = manifests(app)
    assert set(applied) == {"base", "fsxstorage", "kuberay", "nodemonitoring", "validation", "trainingjob"}
    charts = app.resources(CLUSTER, "Custom::AWSCDK-EKS-HelmChart")
    (operator_id,) = [k for k, v in charts.items() if v["Properties"].get("Release") == "training-operators"]
    for name in ("validation", "trainingjob"):
        assert operator_id in applied[name]["DependsOn"]


def test_hyperpod_workloads_wait_for_the_hyperpod_dependencies(synth) -> None:
    app = synth(hyperpod_config())
    charts = app.resources(CLUSTER, "Custom::AWSCDK-EKS-HelmChart")
    assert not any(v["Properties"].get("Release") == "training-operators" for v in charts.values())
    (dependencies,) = [k for k, v in charts.items() if v["Properties"].get("Release") == "hyperpod-dependencies"]
    assert all(dependencies in m["DependsOn"] for m in manifests(app).values())


def test_missing_training_operator_chart_is_a_warning(tmp_path) -> None:
    app = cdk.App(outdir=str(tmp_path))
    stacks = add_training_stacks(app, TrainingConfig(training_operator_chart=str(tmp_path / "none")), nag=False)
    Annotations.from_stack(stacks.cluster).has_warning(
        "*", Match.string_like_regexp("need the Kubeflow training operator")
    )


def test_optional_image_asset_bakes_in_the_payload_and_ray(synth) -> None:
    app = synth(TrainingConfig(image_asset=True))
    manifest = json.dumps(manifests(app)["kuberay"]["Properties"]["Manifest"])
    assert "container-assets-" in manifest  # the workers run the image that deploy builds and pushes
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
