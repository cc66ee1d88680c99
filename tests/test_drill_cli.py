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

import json
from pathlib import Path

import boto3
import cdk8s
import pytest
from kube_api_double import ChartPayload, KubeApiDouble, NodeFaultScenario, RunningJob

from conftest import REGION, REPO_ROOT, app_config, run_cli
from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.render import build_charts
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import HEALTH_STATUS_KEY
from llm_infra.ops.validation_run import chart_objects
from llm_infra.planner.measured_run import read_runs

GPU_NODES = ["gpu-a", "gpu-b"]
FAST = ["--poll-seconds", "0.02", "--app-dir", str(REPO_ROOT)]
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


def drill(
    capsys, cluster_flags: list[str], out: Path, *flags: str, timeout_minutes: float = 0.5
) -> tuple[int, str, str]:
    """`llm-infra drill` on the cluster ``cluster_flags`` reach, unattended (--yes), polling fast, its
    report written to ``out``: (exit code, stdout, stderr)."""
    unattended = ["--yes", "--timeout-minutes", str(timeout_minutes)]
    return run_cli(capsys, "drill", *cluster_flags, *flags, "--out", str(out), *unattended, *FAST)


def fault_under_training(
    api: KubeApiDouble, config: TrainingConfig, payload_lines: tuple[str, list[dict]], **timeline: float
) -> None:
    """The training job running on GPU_NODES (rank 0's log so far from ``payload_lines``); once the
    command injects its fault, gpu-a fails and recovers on ``timeline`` and the job resumes."""
    before, after = payload_lines
    running = RunningJob(training_job(config), GPU_NODES, before)
    running.start(api)
    api.controllers.append(NodeFaultScenario("gpu-a", running, after, **timeline))


def hyperpod_nodes(api: KubeApiDouble) -> None:
    """GPU_NODES as HyperPod registers them: health checks passed."""
    for name in GPU_NODES:
        api.add_node(name, labels={HEALTH_STATUS_KEY: "Schedulable"})


def within(value: float | None, low: float, slack: float = 1.0) -> bool:
    return value is not None and low <= value <= low + slack


@pytest.mark.torch
def test_hyperpod_replace_times_every_phase(tmp_path, hyperpod_double, capsys, payload_lines) -> None:
    """Stubber (DescribeCluster): label gpu-a for replacement; each phase is read from the objects'
    own timestamps and the payload's lines; the report is what `plan --from-run` reads."""
    api, flags = hyperpod_double
    hyperpod_nodes(api)
    fault_under_training(api, app_config(compute="hyperpod"), payload_lines, replace=True)
    out = tmp_path / "drill.json"
    code, stdout, err = drill(capsys, flags, out)
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
    _, after = payload_lines
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
def test_hyperpod_reboot_has_no_replacement_node(tmp_path, hyperpod_double, capsys, payload_lines) -> None:
    """Stubber (DescribeCluster): the reboot label; the same node comes back, so node_replaced stays null."""
    api, flags = hyperpod_double
    hyperpod_nodes(api)
    fault_under_training(api, app_config(compute="hyperpod"), payload_lines, replace=False)
    out = tmp_path / "drill.json"
    code, _, err = drill(capsys, flags, out, "--fault", "reboot")
    assert code == 0, err
    labels = api.get("Node", "gpu-a")["metadata"]["labels"]
    assert labels[HEALTH_STATUS_KEY] == "Schedulable"  # HyperPod lifted the reboot label
    report = json.loads(out.read_text())
    assert report["fault"] == "reboot" and report["phases_seconds"]["node_replaced"] is None
    assert within(report["phases_seconds"]["rejoined"], 0.35)


@pytest.mark.torch
def test_eks_terminate_cordons_and_ends_the_instance(tmp_path, eks_double, aws_endpoint, capsys, payload_lines) -> None:
    """moto (EKS, EC2): the node is cordoned and its instance terminated; the drill's own cordon does not
    count as detection."""
    api, flags = eks_double
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=aws_endpoint)
    (instance,) = ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1, InstanceType="p5.48xlarge")[
        "Instances"
    ]
    api.add_node("gpu-a", provider_id=f"aws:///us-east-1a/{instance['InstanceId']}")
    api.add_node("gpu-b")
    timeline = {"not_ready_at": 0.3, "replaced_at": 0.4, "ready_at": 0.5, "resume_at": 0.6}
    fault_under_training(api, app_config(), payload_lines, **timeline)
    out = tmp_path / "drill.json"
    code, _, err = drill(capsys, flags, out)
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
def test_a_resume_never_seen_is_null_and_fails(tmp_path, hyperpod_double, capsys, payload_lines) -> None:
    """Stubber (DescribeCluster): the job does not resume before --timeout-minutes: nulls, exit 1."""
    api, flags = hyperpod_double
    hyperpod_nodes(api)
    fault_under_training(api, app_config(compute="hyperpod"), payload_lines, replace=True, resume_at=3600.0)
    out = tmp_path / "drill.json"
    code, _, _ = drill(capsys, flags, out, timeout_minutes=0.02)
    assert code == 1
    report = json.loads(out.read_text())
    assert report["phases_seconds"]["detected"] is not None
    assert report["phases_seconds"]["job_resumed"] is None and report["recovery_seconds"] is None
    assert report["resumed_at_step"] is None


def test_a_fault_of_the_other_compute_mode_is_bad_input(tmp_path, capsys) -> None:
    """No AWS call: terminate is the EKS fault, not a HyperPod one: exit 2."""
    code, _, err = drill(capsys, ["--cluster", "x", "-c", "compute=hyperpod"], tmp_path / "r", "--fault", "terminate")
    assert code == 2 and "--fault: terminate is not a fault for compute=hyperpod; allowed: replace, reboot" in err


def test_an_unknown_cluster_is_bad_input(tmp_path, aws_endpoint, capsys) -> None:
    """moto (EKS): DescribeCluster does not know the name: exit 2."""
    code, _, err = drill(capsys, ["--cluster", "nope", "--endpoint-url", aws_endpoint], tmp_path / "r")
    assert code == 2 and "--cluster: no EKS cluster 'nope'" in err


def test_no_training_job_and_a_node_without_its_pod_are_clear_errors(tmp_path, eks_double, capsys) -> None:
    """moto (EKS): nothing is injected when the job is missing or the named node runs none of its pods."""
    api, flags = eks_double
    for name in (*GPU_NODES, "gpu-c"):
        api.add_node(name)
    code, _, err = drill(capsys, flags, tmp_path / "r")
    assert code == 1 and "no PyTorchJob training/train on the cluster" in err
    RunningJob(training_job(app_config()), GPU_NODES, "").start(api)
    code, _, err = drill(capsys, flags, tmp_path / "r", "--node", "gpu-c")
    assert code == 2 and "--node: gpu-c runs no pod of PyTorchJob training/train; its nodes: gpu-a, gpu-b" in err
    assert api.patches == [] and not (tmp_path / "r").exists()


def test_the_drill_asks_first(tmp_path, eks_double, capsys, monkeypatch) -> None:
    """moto (EKS): a no at the prompt injects nothing."""
    api, flags = eks_double
    monkeypatch.setattr("builtins.input", lambda: "n")
    for name in GPU_NODES:
        api.add_node(name)
    RunningJob(training_job(app_config()), GPU_NODES, "").start(api)
    code, _, err = run_cli(capsys, "drill", *flags, "--out", str(tmp_path / "r"), *FAST)
    assert code == 1 and "terminate node gpu-a under PyTorchJob training/train on train? [y/N]" in err
    assert api.patches == []
