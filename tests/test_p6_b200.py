"""p6-b200.48xlarge on plain EKS and on HyperPod, the profiles against EC2's instance data, the planner's B200
figures, and GB200 UltraServers refused at synth (issue 31, item 6). Two synths: one per compute mode."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import moto.ec2
import pytest
from aws_cdk.assertions import Match, Template
from syrupy.extensions.json import JSONSnapshotExtension

from conftest import Synthesized, hyperpod_config, normalize
from llm_infra.cli import main
from llm_infra.config import ConfigError, TrainingConfig
from llm_infra.constructs.hyperpod_cluster import HYPERPOD_INSTANCE_TYPES, HyperPodInstanceGroup
from llm_infra.constructs.nic_layout import network_interfaces
from llm_infra.instance_types import INSTANCE_PROFILES, instance_profile
from llm_infra.planner import PEAK_TFLOPS_PRESETS, PRICE_PRESETS

B200 = "p6-b200.48xlarge"
CLUSTER = "-cluster"
# moto's copy of EC2's DescribeInstanceTypes answers (moto 5.2.5, pinned in pyproject's dev extras).
EC2_INSTANCE_TYPES = Path(moto.ec2.__file__).parent / "resources" / "instance_types.json.gz"


@pytest.fixture(scope="module")
def eks_app(synth) -> Synthesized:
    return synth(TrainingConfig().with_(gpu_instance_type=B200))


@pytest.fixture(scope="module")
def hyperpod_app(synth) -> Synthesized:
    return synth(hyperpod_config(gpu_instance_type=B200))


@pytest.fixture(scope="module")
def ec2_types() -> dict[str, Any]:
    with gzip.open(EC2_INSTANCE_TYPES) as data:
        return dict(json.load(data))


# ---- the profile -------------------------------------------------------------------------------------------
def test_every_profile_matches_ec2s_instance_data(ec2_types: dict[str, Any]) -> None:
    for name, profile in INSTANCE_PROFILES.items():
        info = ec2_types[name]
        (gpu,) = info["GpuInfo"]["Gpus"]
        network = info["NetworkInfo"]
        assert (profile.vcpus, profile.memory_gib * 1024) == (
            info["VCpuInfo"]["DefaultVCpus"],
            info["MemoryInfo"]["SizeInMiB"],
        ), name
        assert (profile.gpus, profile.gpu_model.split("-")[0]) == (gpu["Count"], gpu["Name"]), name
        efa = network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)
        assert (profile.network_cards, profile.efa_interfaces) == (network["MaximumNetworkCards"], efa), name
    b200 = ec2_types[B200]["GpuInfo"]["Gpus"][0]["MemoryInfo"]["SizeInMiB"]
    assert instance_profile(B200).gpu_memory_gib == b200 // 1024 == 179  # AWS: 8 x 179 GiB


def test_every_efa_layout_uses_interface_types_its_cards_take(ec2_types: dict[str, Any]) -> None:
    for name, profile in INSTANCE_PROFILES.items():
        if not profile.efa_supported:
            continue
        cards = {card["NetworkCardIndex"]: card for card in ec2_types[name]["NetworkInfo"]["NetworkCards"]}
        interfaces = network_interfaces(
            profile, profile.default_efa_layout, primary_security_group_ids=["sg-a"], efa_security_group_id="sg-b"
        )
        for interface in interfaces:
            card = cards[interface["NetworkCardIndex"]]
            assert interface.get("InterfaceType", "interface") in card["InterfaceTypes"], (name, interface)
        per_card = Counter(interface["NetworkCardIndex"] for interface in interfaces)
        assert all(count <= cards[card]["MaximumNetworkInterfaces"] for card, count in per_card.items()), name


# ---- plain EKS ---------------------------------------------------------------------------------------------
def test_the_launch_template_attaches_8_efa_only_interfaces(eks_app: Synthesized) -> None:
    groups = Match.any_value()
    # AWS's EFA guidance for cards that all take EFA: ENA primary on card 0 device 0, efa-only on card 0
    # device 1, then efa-only on device 0 of cards 1-7.
    expected = [
        {"NetworkCardIndex": 0, "DeviceIndex": 0, "Groups": groups, "DeleteOnTermination": True},
        {
            "NetworkCardIndex": 0,
            "DeviceIndex": 1,
            "InterfaceType": "efa-only",
            "Groups": groups,
            "DeleteOnTermination": True,
        },
        *(
            {
                "NetworkCardIndex": card,
                "DeviceIndex": 0,
                "InterfaceType": "efa-only",
                "Groups": groups,
                "DeleteOnTermination": True,
            }
            for card in range(1, 8)
        ),
    ]
    template = Template.from_json(eks_app.template(CLUSTER))
    template.has_resource_properties(
        "AWS::EC2::LaunchTemplate",
        {"LaunchTemplateData": Match.object_like({"InstanceType": B200, "NetworkInterfaces": expected})},
    )
    template.has_resource_properties("AWS::EKS::Nodegroup", {"AmiType": "AL2023_x86_64_NVIDIA"})


def test_the_efa_device_plugin_runs_on_p6_b200_in_both_modes(eks_app: Synthesized, hyperpod_app: Synthesized) -> None:
    for app, instance_type in ((eks_app, B200), (hyperpod_app, f"ml.{B200}")):
        (efa,) = [
            chart["Properties"]
            for chart in app.resources(CLUSTER, "Custom::AWSCDK-EKS-HelmChart").values()
            if chart["Properties"]["Chart"] == "aws-efa-k8s-device-plugin"
        ]
        assert json.loads(efa["Values"])["supportedInstanceLabels"]["values"] == [instance_type]


def test_kueue_admits_8_gpus_and_8_efa_devices_per_p6_b200_node(eks_app: Synthesized) -> None:
    (queue,) = [
        obj
        for resource in eks_app.template(CLUSTER)["Resources"].values()
        if isinstance(manifest := resource.get("Properties", {}).get("Manifest"), str) and "ClusterQueue" in manifest
        for obj in json.loads(manifest)
        if obj["kind"] == "ClusterQueue"
    ]
    flavors = {f["name"]: f["resources"] for group in queue["spec"]["resourceGroups"] for f in group["flavors"]}
    quota = {r["name"]: r["nominalQuota"] for r in flavors["gpu-p6-b200-48xlarge"]}
    assert (quota["nvidia.com/gpu"], quota["vpc.amazonaws.com/efa"]) == ("16", "16")  # 2 nodes


# ---- HyperPod ----------------------------------------------------------------------------------------------
def test_hyperpod_runs_an_ml_p6_b200_group_with_deep_health_checks(hyperpod_app: Synthesized) -> None:
    Template.from_json(hyperpod_app.template(CLUSTER)).has_resource_properties(
        "AWS::SageMaker::Cluster",
        {
            "InstanceGroups": Match.array_with(
                [
                    Match.object_like(
                        {
                            "InstanceGroupName": "gpu",
                            "InstanceType": f"ml.{B200}",
                            "OnStartDeepHealthChecks": ["InstanceStress", "InstanceConnectivity"],
                        }
                    )
                ]
            )
        },
    )


def test_cfn_lint_accepts_both_cluster_templates(
    eks_app: Synthesized, hyperpod_app: Synthesized, tmp_path: Path
) -> None:
    # cfn-lint knows where AWS prices each HyperPod instance type (its AWS::SageMaker::Cluster InstanceType enum).
    paths = []
    for mode, app in (("eks", eks_app), ("hyperpod", hyperpod_app)):
        path = tmp_path / f"{mode}.template.json"
        path.write_text(json.dumps(app.template(CLUSTER)))
        paths.append(str(path))
    lint = Path(sys.executable).parent / "cfn-lint"
    result = subprocess.run(
        [str(lint), "--format", "parseable", "--non-zero-exit-code", "error", *paths], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("mode", ["eks", "hyperpod"])
def test_cluster_template_snapshot(request, snapshot, mode: str) -> None:
    app = request.getfixturevalue(f"{mode}_app")
    assert normalize(app.template(CLUSTER)) == snapshot.use_extension(JSONSnapshotExtension)


# ---- GB200 UltraServers ------------------------------------------------------------------------------------
@pytest.mark.parametrize("compute", ["eks", "hyperpod"])
def test_gb200_ultraservers_are_refused_naming_the_key_and_why(compute: str) -> None:
    with pytest.raises(ConfigError) as err:
        TrainingConfig(compute=compute).with_(gpu_instance_type="p6e-gb200.36xlarge")
    message = str(err.value)
    assert "gpu_instance_type: 'p6e-gb200.36xlarge' is a GB200 UltraServer node" in message
    assert "does not yet support" in message and "IMEX" in message and "NVLink domain" in message
    assert message.endswith("allowed: " + ", ".join(sorted(INSTANCE_PROFILES)))


def test_a_hyperpod_instance_group_refuses_gb200_naming_the_field() -> None:
    with pytest.raises(ValueError) as err:
        HyperPodInstanceGroup(name="gpu", instance_type="ml.p6e-gb200.36xlarge").validate()
    message = str(err.value)
    assert message.startswith(
        "instance_groups[gpu].instance_type: 'ml.p6e-gb200.36xlarge' is a GB200 UltraServer node, which this "
        "library does not yet support"
    )
    assert (
        message.endswith("allowed: " + ", ".join(HYPERPOD_INSTANCE_TYPES)) and f"ml.{B200}" in HYPERPOD_INSTANCE_TYPES
    )


# ---- the planner -------------------------------------------------------------------------------------------
def plan_json(capsys, *argv: str) -> dict[str, Any]:
    code = main(
        ["plan", "--instances", "16", "--failure-rate", "0.05", "--tokens", "1e12", "--params", "8e9", *argv, "--json"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return dict(json.loads(captured.out))


def test_the_planner_prices_and_sizes_a_p6_b200_job(capsys) -> None:
    presets = plan_json(capsys, "--peak-tflops", "b200", "--price-preset", B200)
    numbers = plan_json(capsys, "--peak-tflops", "2250", "--price", "113.9328")
    assert presets == numbers
    ideal_hours = 6 * 1e12 * 8e9 / (0.4 * 2250e12) / 3600 / (16 * 8)  # 6ND FLOPs at MFU 0.4 on 128 B200s
    assert presets["wall_days_ideal"] == pytest.approx(ideal_hours / 24)
    assert presets["cost_ideal"] == pytest.approx(ideal_hours * 16 * 113.9328)
    assert PRICE_PRESETS[B200] == 113.9328 and PEAK_TFLOPS_PRESETS["b200"].value == 2 * 1125
    assert "HGX B200" in PEAK_TFLOPS_PRESETS["b200"].source
