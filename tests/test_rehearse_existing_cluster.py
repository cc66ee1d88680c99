"""``llm-infra rehearse`` of an app on an existing EKS cluster (issue 29, item 12): the cluster's own nodes from
``--existing-nodes`` (``kubectl get nodes -o yaml``), the node groups in the existing cluster security group, the
device plugins install_addons leaves to the owner taken as running, and notes on what a rehearsal cannot know.

The plan is checked without a control plane; one rehearsal runs on a control plane of its own (the command starts
one: that is what is under test) and skips when ``make k8s`` has not built it.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import byo
import pytest
from test_rehearse import app_flags

from conftest import run_cli
from llm_infra.config import TrainingConfig
from llm_infra.input_files import BadInput
from llm_infra.k8s_manifests.render import write_dist
from llm_infra.rehearsal.existing_cluster import notes, owners_devices, quantity
from llm_infra.rehearsal.rehearse import node_object, plan

CONFIG = byo.CONFIGS["byo-vpc-cluster"]  # install_addons unset: none of the add-ons or device plugins are ours
# Two of the cluster's own nodes as `kubectl get nodes -o yaml` lists them (trimmed: conditions, images, etc.).
THEIR_NODES = """
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: ip-10-0-12-34.ec2.internal
    labels:
      eks.amazonaws.com/nodegroup: their-system
      node.kubernetes.io/instance-type: m7i.2xlarge
      kubernetes.io/os: linux
  spec:
    taints:
    - {key: node.kubernetes.io/not-ready, effect: NoSchedule}
  status:
    capacity: {cpu: "8", memory: 32386504Ki, pods: "58", hugepages-2Mi: "0", ephemeral-storage: 83873772Ki}
    allocatable: {cpu: 7910m, memory: 31369672Ki, pods: "58", hugepages-2Mi: "0", ephemeral-storage: "76224326324"}
- apiVersion: v1
  kind: Node
  metadata:
    name: ip-10-1-56-78.ec2.internal
    labels:
      eks.amazonaws.com/nodegroup: their-gpus
      node.kubernetes.io/instance-type: p5.48xlarge
  spec:
    taints:
    - {key: nvidia.com/gpu, value: "true", effect: NoSchedule}
  status:
    capacity: {cpu: "192", memory: 2097152Mi, pods: "110", nvidia.com/gpu: "8", vpc.amazonaws.com/efa: "32"}
    allocatable: {cpu: 191450m, memory: 2054000Mi, pods: "110", nvidia.com/gpu: "8", vpc.amazonaws.com/efa: "32"}
"""


def context_flags(config: TrainingConfig) -> list[str]:
    """``-c KEY=VALUE`` for each bring-your-own key of ``config`` (the CLI reads cdk.json, then these)."""
    keys = {**byo.VPC, **byo.CLUSTER}
    return [flag for key in keys if getattr(config, key) for flag in ("-c", f"{key}={getattr(config, key)}")]


@pytest.fixture
def byo_app(synth):
    app = synth(CONFIG)
    dist = app.outdir / "dist"
    if not dist.is_dir():
        write_dist(CONFIG, dist)
    return app


def test_quantities_are_read_as_the_api_server_writes_them() -> None:
    assert quantity("7910m") == Decimal("7.91")
    assert quantity("31369672Ki") == 31369672 * 1024
    assert quantity("2Gi") == 2**31 and quantity("1.5k") == 1500 and quantity("8") == 8
    with pytest.raises(ValueError, match="not a Kubernetes quantity: '12 cores'"):
        quantity("12 cores")


def test_the_templates_nodes_join_the_existing_cluster_with_its_security_group_and_the_owners_plugins(
    byo_app,
) -> None:
    rehearsal = plan(CONFIG, byo_app.outdir, byo_app.outdir / "dist")

    assert rehearsal.nodes and all(byo.CLUSTER_SG in n.security_groups for n in rehearsal.nodes), rehearsal.nodes
    gpu = [n for n in rehearsal.nodes if n.gpus]
    assert gpu, rehearsal.nodes
    for node in gpu:  # the owner's device plugins advertise from the start: ours are not installed
        status = node_object(node)["status"]
        assert status["allocatable"]["nvidia.com/gpu"] == "8" and status["allocatable"]["vpc.amazonaws.com/efa"] == "32"
    notes = "\n".join(rehearsal.notes)
    assert "only the nodes this app adds are rehearsed" in notes and "--existing-nodes FILE" in notes
    assert "nvidia-device-plugin is not in install_addons" in notes
    assert "aws-efa-k8s-device-plugin is not in install_addons" in notes


def test_our_device_plugins_when_install_addons_names_them() -> None:
    ours = TrainingConfig(**byo.VPC, **byo.CLUSTER, install_addons="nvidia-device-plugin,aws-efa-k8s-device-plugin")
    assert owners_devices(ours) == [] and owners_devices(TrainingConfig()) == []  # our plugins' pods advertise
    assert owners_devices(TrainingConfig(**byo.VPC, **byo.CLUSTER, install_addons="nvidia-device-plugin")) == [
        "vpc.amazonaws.com/efa"
    ]
    assert not [n for n in notes(ours, [], None) if "assumed to run" in n]


def test_existing_nodes_are_added_as_listed(byo_app, tmp_path: Path) -> None:
    (tmp_path / "nodes.yaml").write_text(THEIR_NODES)
    rehearsal = plan(CONFIG, byo_app.outdir, byo_app.outdir / "dist", existing_nodes=tmp_path / "nodes.yaml")

    system, gpu = [n for n in rehearsal.nodes if n.name.startswith("ip-")]
    assert (system.group, system.instance_type, system.gpus) == ("their-system", "m7i.2xlarge", 0)
    assert system.allocatable == {"cpu": 7910, "memory": 31369672 // 1024, "pods": 58, "hugepages-2Mi": 0}
    assert system.taints == []  # the not-ready taint is the node lifecycle's, not the owner's
    assert (gpu.gpus, gpu.efa_devices) == (8, 32)
    node = node_object(gpu)
    assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert node["status"]["allocatable"]["cpu"] == "191450m"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert any("2 of its nodes from --existing-nodes" in note for note in rehearsal.notes)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", "object 0 is a Pod, not a Node"),
        ("apiVersion: v1\nkind: List\nitems: []\n", "no Node in it"),
        ("kind: Node\nmetadata: {name: n}\n", "a Node needs metadata.name and status.allocatable"),
        ("kind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: lots}}\n", "node n: not a Kubernetes quantity"),
        ("kind: [\n", "not YAML"),
    ],
)
def test_a_bad_nodes_file_is_one_line_naming_the_flag(byo_app, tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "nodes.yaml").write_text(text)
    with pytest.raises(BadInput) as raised:
        plan(CONFIG, byo_app.outdir, byo_app.outdir / "dist", existing_nodes=tmp_path / "nodes.yaml")
    said = str(raised.value)
    assert said.startswith(f"--existing-nodes {tmp_path / 'nodes.yaml'}: ") and message in said


def test_existing_nodes_only_for_an_existing_cluster(default_app, tmp_path: Path) -> None:
    (tmp_path / "nodes.yaml").write_text(THEIR_NODES)
    dist = default_app.outdir / "dist"
    if not dist.is_dir():
        write_dist(TrainingConfig(), dist)
    with pytest.raises(BadInput, match="--existing-nodes: only for an app on an existing cluster"):
        plan(TrainingConfig(), default_app.outdir, dist, existing_nodes=tmp_path / "nodes.yaml")


def test_an_app_on_an_existing_cluster_rehearses_with_its_nodes(
    rehearsal_binaries, byo_app, capsys, tmp_path: Path
) -> None:
    (tmp_path / "nodes.yaml").write_text(THEIR_NODES)
    flags = [*app_flags(byo_app, CONFIG), *context_flags(CONFIG), "--existing-nodes", str(tmp_path / "nodes.yaml")]
    code, out, err = run_cli(capsys, "rehearse", *flags, "--output", "json")

    report = json.loads(out)
    not_running = [p for p in report["pods"] if p["phase"] not in ("Running", "Succeeded")]
    assert code == 0 and report["passed"], (err, not_running)
    names = {n["name"] for n in report["nodes"]}
    assert {"ip-10-0-12-34.ec2.internal", "ip-10-1-56-78.ec2.internal"} <= names
    # No add-on, chart or device plugin of ours: only the app's manifests and jobs, placed on GPU nodes as given.
    assert report["modelled_from_pinned_charts"] == []
    assert not [p for p in report["pods"] if p["name"].startswith("nvidia-device-plugin-")]
    workers = [p for p in report["pods"] if "-worker-" in p["name"]]
    if "training-operator" in report["control_plane"]["components"]:
        gpu_nodes = {n["name"] for n in report["nodes"] if n["allocatable"].get("nvidia.com/gpu") == "8"}
        assert workers and {p["node"] for p in workers} <= gpu_nodes
    assert any("of its nodes from --existing-nodes" in note for note in report["notes"])
