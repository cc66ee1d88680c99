"""`llm-infra drill` against the Kubernetes API test double (tests/kube_api_double.py), through the real
`kubernetes` client and a generated kubeconfig.

A training job runs on two GPU nodes; the double's NodeFaultScenario plays the platform's answer to the
fault the command injects (NotReady, pod gone, replacement node, Ready again) on a timeline, and the
payload lines of the resumed attempt are the real payload's (`train.py` under torchrun on CPU with an
injected fault, its `time` fields moved after the drill's fault). AWS: HyperPod's DescribeCluster through
botocore's Stubber on the real service model (moto's answer has no `Orchestrator`); EKS and EC2 (the
terminated instance) in moto, server mode on loopback.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import boto3
import cdk8s
import pytest
from botocore.config import Config
from botocore.stub import Stubber
from kube_api_double import ChartPayload, KubeApiDouble, NodeFaultScenario, RunningJob
from moto.server import ThreadedMotoServer

from llm_infra import cli
from llm_infra.commands import cluster_access
from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.render import build_charts
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.measured_run import read_runs
from llm_infra.node_labels import HEALTH_STATUS_KEY
from llm_infra.validation_run import chart_objects

REPO_ROOT = Path(__file__).resolve().parent.parent
REGION = "us-east-1"
ACCOUNT = "123456789012"
GPU_NODES = ["gpu-a", "gpu-b"]
FAST = ["--poll-seconds", "0.02", "--app-dir", str(REPO_ROOT), "--yes", "--timeout-minutes", "0.5"]
REPORT_KEYS = {
    "kind",
    "version",
    "cluster",
    "compute",
    "fault",
    "node",
    "job",
    "injected_at",
    "phases_seconds",
    "resumed_at_step",
    "recovery_seconds",
}


@pytest.fixture(scope="module")
def aws_endpoint():
    """moto in server mode on loopback, with fake credentials for the clients."""
    with pytest.MonkeyPatch.context() as env:
        for key, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
            env.setenv(key, value)
        env.setenv("AWS_DEFAULT_REGION", REGION)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
        server.stop()


@pytest.fixture(scope="module")
def eks_arn(aws_endpoint) -> str:
    """The EKS cluster "train" in moto (whose backends every in-process moto server shares)."""
    eks = boto3.client("eks", region_name=REGION, endpoint_url=aws_endpoint)
    with contextlib.suppress(eks.exceptions.ResourceInUseException):
        eks.create_cluster(
            name="train",
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks",
            resourcesVpcConfig={"subnetIds": ["subnet-0123456789abcdef0"]},
        )
    return str(eks.describe_cluster(name="train")["cluster"]["arn"])


def app_config(**changes: str) -> TrainingConfig:
    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    return TrainingConfig.from_context({**context, **changes})


@pytest.fixture(scope="module")
def payload_lines() -> tuple[str, list[dict]]:
    """The real payload's log for a run with an injected fault (the ValidationChart's training job, on
    CPU): (rank 0's log up to the fault, the resumed attempt's JSON lines)."""
    config = app_config().with_(gpu_nodes=2, gpu_nodes_min=None, gpu_nodes_max=None)
    training = chart_objects(WorkloadValues.from_config(config)).jobs[2]
    log, code = ChartPayload()(training, 0, "gpu-a")
    assert code == 0, log[-2000:]
    records = [json.loads(line[line.find("{") :]) for line in log.splitlines() if line.lstrip().startswith("{")]
    (fault,) = [r for r in records if r.get("event") == "fault"]
    before = "".join(json.dumps(r) + "\n" for r in records if r["time"] <= fault["time"])
    return before, [r for r in records if r["time"] > fault["time"]]


def training_job(config: TrainingConfig) -> dict:
    """The training-job chart's object for ``config`` (what the drill looks for by default)."""
    charts = build_charts(cdk8s.App(), WorkloadValues.from_config(config), jobs=True, ray=False)
    (job,) = charts["training-job"].to_json()
    return dict(job)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def stub_hyperpod(eks_arn: str, monkeypatch) -> Stubber:
    client = boto3.client(
        "sagemaker",
        region_name=REGION,
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"max_attempts": 1}),
    )
    stub = Stubber(client)
    stub.add_response(
        "describe_cluster",
        {
            "ClusterArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abcdefghijkl",
            "ClusterName": "llm-infra-hyperpod",
            "ClusterStatus": "InService",
            "InstanceGroups": [],
            "Orchestrator": {"Eks": {"ClusterArn": eks_arn}},
        },
        {"ClusterName": "llm-infra-hyperpod"},
    )
    monkeypatch.setattr(cluster_access, "aws_client", lambda args, service: client)
    return stub


def hyperpod_double(config: TrainingConfig, before: str, after: list[dict], *, replace: bool, **timeline):
    api = KubeApiDouble()
    for name in GPU_NODES:
        api.add_node(name, labels={HEALTH_STATUS_KEY: "Schedulable"})
    running = RunningJob(training_job(config), GPU_NODES, before)
    running.start(api)
    api.controllers.append(NodeFaultScenario("gpu-a", running, after, replace=replace, **timeline))
    return api


def within(value: float | None, low: float, slack: float = 1.0) -> bool:
    return value is not None and low <= value <= low + slack


@pytest.mark.torch
def test_hyperpod_replace_times_every_phase(tmp_path, eks_arn, monkeypatch, capsys, payload_lines) -> None:
    """Stubber (DescribeCluster): label gpu-a for replacement; each phase is read from the objects'
    own timestamps and the payload's lines; the report is what `plan --from-run` reads."""
    before, after = payload_lines
    config = app_config(compute="hyperpod")
    out = tmp_path / "drill.json"
    with hyperpod_double(config, before, after, replace=True) as api, stub_hyperpod(eks_arn, monkeypatch):
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        code, stdout, err = run(
            capsys,
            "drill",
            "--cluster",
            "llm-infra-hyperpod",
            "-c",
            "compute=hyperpod",
            "--kubeconfig",
            str(kubeconfig),
            "--out",
            str(out),
            *FAST,
        )
        assert code == 0, err
        assert ("Node", "gpu-a", {"metadata": {"labels": {HEALTH_STATUS_KEY: "UnschedulablePendingReplacement"}}}) in (
            api.patches
        )
    report = json.loads(out.read_text())
    assert set(report) == REPORT_KEYS
    assert report["kind"] == "llm-infra/drill" and report["version"] == 1
    assert (report["cluster"], report["compute"], report["fault"], report["node"], report["job"]) == (
        "llm-infra-hyperpod",
        "hyperpod",
        "replace",
        "gpu-a",
        "train",
    )
    phases = report["phases_seconds"]
    assert within(phases["detected"], 0.1) and within(phases["node_replaced"], 0.2)
    assert within(phases["rejoined"], 0.35) and within(phases["job_resumed"], 0.4)
    assert phases["detected"] < phases["node_replaced"] < phases["rejoined"] < phases["job_resumed"]
    resume = next(r for r in after if r["event"] == "resume")
    first_step = next(r for r in after if r["event"] == "step" and r["time"] > resume["time"])
    assert report["resumed_at_step"] == resume["step"]
    assert phases["first_step_after_resume"] == pytest.approx(
        phases["job_resumed"] + (first_step["time"] - resume["time"]) * 0.1, abs=0.002
    )
    assert report["recovery_seconds"] == phases["first_step_after_resume"]
    assert read_runs([str(out)]).recovery_seconds.value == report["recovery_seconds"]
    assert f"resumed at step {resume['step']}" in stdout


@pytest.mark.torch
def test_hyperpod_reboot_has_no_replacement_node(tmp_path, eks_arn, monkeypatch, capsys, payload_lines) -> None:
    """Stubber (DescribeCluster): the reboot label; the same node comes back, so node_replaced stays null."""
    before, after = payload_lines
    config = app_config(compute="hyperpod")
    out = tmp_path / "drill.json"
    with hyperpod_double(config, before, after, replace=False) as api, stub_hyperpod(eks_arn, monkeypatch):
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        code, _, err = run(
            capsys,
            "drill",
            "--cluster",
            "llm-infra-hyperpod",
            "-c",
            "compute=hyperpod",
            "--fault",
            "reboot",
            "--kubeconfig",
            str(kubeconfig),
            "--out",
            str(out),
            *FAST,
        )
        assert code == 0, err
        labels = api.get("Node", "gpu-a")["metadata"]["labels"]
        assert labels[HEALTH_STATUS_KEY] == "Schedulable"  # HyperPod lifted the reboot label
    report = json.loads(out.read_text())
    assert report["fault"] == "reboot" and report["phases_seconds"]["node_replaced"] is None
    assert within(report["phases_seconds"]["rejoined"], 0.35)


@pytest.mark.torch
def test_eks_terminate_cordons_and_ends_the_instance(tmp_path, eks_arn, aws_endpoint, capsys, payload_lines) -> None:
    """moto (EKS, EC2): the node is cordoned and its instance terminated; the drill's own cordon does not
    count as detection."""
    before, after = payload_lines
    config = app_config()
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=aws_endpoint)
    (instance,) = ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1, InstanceType="p5.48xlarge")[
        "Instances"
    ]
    out = tmp_path / "drill.json"
    with KubeApiDouble() as api:
        api.add_node("gpu-a", provider_id=f"aws:///us-east-1a/{instance['InstanceId']}")
        api.add_node("gpu-b")
        running = RunningJob(training_job(config), GPU_NODES, before)
        running.start(api)
        api.controllers.append(
            NodeFaultScenario("gpu-a", running, after, not_ready_at=0.3, replaced_at=0.4, ready_at=0.5, resume_at=0.6)
        )
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        code, _, err = run(
            capsys,
            "drill",
            "--cluster",
            "train",
            "--kubeconfig",
            str(kubeconfig),
            "--endpoint-url",
            aws_endpoint,
            "--out",
            str(out),
            *FAST,
        )
        assert code == 0, err
        assert ("Node", "gpu-a", {"spec": {"unschedulable": True}}) in api.patches
    (state,) = [
        i["State"]["Name"]
        for r in ec2.describe_instances(InstanceIds=[instance["InstanceId"]])["Reservations"]
        for i in r["Instances"]
    ]
    assert state in ("shutting-down", "terminated")
    report = json.loads(out.read_text())
    assert report["compute"] == "eks" and report["fault"] == "terminate"
    assert within(report["phases_seconds"]["detected"], 0.3)  # NotReady, not the cordon at 0
    assert report["recovery_seconds"] is not None


@pytest.mark.torch
def test_a_resume_never_seen_is_null_and_fails(tmp_path, eks_arn, monkeypatch, capsys, payload_lines) -> None:
    """Stubber (DescribeCluster): the job does not resume before --timeout-minutes: nulls, exit 1."""
    before, after = payload_lines
    config = app_config(compute="hyperpod")
    out = tmp_path / "drill.json"
    double = hyperpod_double(config, before, after, replace=True, resume_at=3600.0)
    with double as api, stub_hyperpod(eks_arn, monkeypatch):
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        code, _, _ = run(
            capsys,
            "drill",
            "--cluster",
            "llm-infra-hyperpod",
            "-c",
            "compute=hyperpod",
            "--kubeconfig",
            str(kubeconfig),
            "--out",
            str(out),
            *FAST[:-1],
            "0.02",
        )
    assert code == 1
    report = json.loads(out.read_text())
    assert report["phases_seconds"]["detected"] is not None
    assert report["phases_seconds"]["job_resumed"] is None and report["recovery_seconds"] is None
    assert report["resumed_at_step"] is None


def test_a_fault_of_the_other_compute_mode_is_bad_input(tmp_path, capsys) -> None:
    """No AWS call: terminate is the EKS fault, not a HyperPod one: exit 2."""
    code, _, err = run(
        capsys,
        "drill",
        "--cluster",
        "x",
        "-c",
        "compute=hyperpod",
        "--fault",
        "terminate",
        "--out",
        str(tmp_path / "r"),
        *FAST,
    )
    assert code == 2 and "--fault: terminate is not a fault for compute=hyperpod; allowed: replace, reboot" in err


def test_an_unknown_cluster_is_bad_input(tmp_path, aws_endpoint, capsys) -> None:
    """moto (EKS): DescribeCluster does not know the name: exit 2."""
    code, _, err = run(
        capsys, "drill", "--cluster", "nope", "--endpoint-url", aws_endpoint, "--out", str(tmp_path / "r"), *FAST
    )
    assert code == 2 and "--cluster: no EKS cluster 'nope'" in err


def test_no_training_job_and_a_node_without_its_pod_are_clear_errors(tmp_path, eks_arn, aws_endpoint, capsys) -> None:
    """moto (EKS): nothing is injected when the job is missing or the named node runs none of its pods."""
    config = app_config()
    with KubeApiDouble() as api:
        for name in (*GPU_NODES, "gpu-c"):
            api.add_node(name)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        argv = ["drill", "--cluster", "train", "--kubeconfig", str(kubeconfig), "--endpoint-url", aws_endpoint]
        code, _, err = run(capsys, *argv, "--out", str(tmp_path / "r"), *FAST)
        assert code == 1 and "no PyTorchJob training/train on the cluster" in err
        RunningJob(training_job(config), GPU_NODES, "").start(api)
        code, _, err = run(capsys, *argv, "--node", "gpu-c", "--out", str(tmp_path / "r"), *FAST)
        assert code == 2 and "--node: gpu-c runs no pod of PyTorchJob training/train; its nodes: gpu-a, gpu-b" in err
        assert api.patches == [] and not (tmp_path / "r").exists()


def test_the_drill_asks_first(tmp_path, eks_arn, aws_endpoint, capsys, monkeypatch) -> None:
    """moto (EKS): a no at the prompt injects nothing."""
    config = app_config()
    monkeypatch.setattr("builtins.input", lambda: "n")
    with KubeApiDouble() as api:
        for name in GPU_NODES:
            api.add_node(name)
        RunningJob(training_job(config), GPU_NODES, "").start(api)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        code, _, err = run(
            capsys,
            "drill",
            "--cluster",
            "train",
            "--kubeconfig",
            str(kubeconfig),
            "--endpoint-url",
            aws_endpoint,
            "--out",
            str(tmp_path / "r"),
            *FAST[:-3],
        )
        assert code == 1 and "terminate node gpu-a under PyTorchJob training/train on train? [y/N]" in err
        assert api.patches == []
