"""`llm-infra drill` end to end against the real control plane (issue 22), through the real `kubernetes`
client and a generated kubeconfig.

A training job runs on two GPU nodes: on EKS a PyTorchJob that the real training operator runs, on
HyperPod a HyperPodPyTorchJob that the stand-in for AWS's closed operator runs (tests/hyperpod_operator.py);
the real scheduler places the pods, KWOK runs them (tests/kwok_cluster.py). After the fault the command
injects, ``NodeRecovery`` (tests/node_recovery.py) plays the machine failing and the platform's answer on
a timeline; the operators create the lost pod again and the scheduler places it on the replacement. The
payload lines of the resumed attempt are the real payload's (`train.py` under torchrun on CPU with an
injected fault, its `time` fields moved after the drill's fault). AWS: HyperPod's DescribeCluster through
botocore's Stubber on the real service model (moto's answer has no `Orchestrator`); EKS and EC2 (the
terminated instance) in moto, server mode on loopback.

Each phase the drill reports is compared with what happened, as ``NodeRecovery`` recorded it (the
timestamps the API server and the payload put on each step), not with its timeline: the timeline only
orders the steps, 1.5 s apart since the API server stamps nodes and conditions in whole seconds. The one
wall-clock bound is the hang guard of the waits (tests/shared_plane.py's ``wait_for``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import boto3
import cdk8s
import pytest
from chart_payload import ChartPayload
from kwok_cluster import KwokCluster, PodRuntime
from node_recovery import NodeRecovery

from conftest import REGION, REPO_ROOT, app_config, run_cli
from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.render import build_charts
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import HEALTH_STATUS_KEY
from llm_infra.ops.validation_run import chart_objects
from llm_infra.planner.measured_run import read_runs

GPU_NODES = ["gpu-a", "gpu-b"]
FAST = ["--poll-seconds", "0.1", "--app-dir", str(REPO_ROOT)]
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
def payload_lines(torch_launch) -> tuple[str, list[dict]]:
    """The real payload's log for a run with an injected fault (the ValidationChart's training job, on
    CPU): (rank 0's log up to the fault, the resumed attempt's JSON lines)."""
    config = app_config().with_(gpu_nodes=2, gpu_nodes_min=None, gpu_nodes_max=None)
    training = chart_objects(WorkloadValues.from_config(config)).jobs[2]
    log, code = ChartPayload(launch=torch_launch)(training, 0, "gpu-a")
    assert code == 0, log[-2000:]
    lines = [json.loads(line[line.find("{") :]) for line in log.splitlines() if line.lstrip().startswith("{")]
    records = [r for r in lines if "time" in r]  # as the drill reads them (the warnings on stderr carry no time)
    (fault,) = [r for r in records if r.get("event") == "fault"]
    before = "".join(json.dumps(r) + "\n" for r in records if r["time"] <= fault["time"])
    return before, [r for r in records if r["time"] > fault["time"]]


def training_job(cluster: KwokCluster, config: TrainingConfig) -> dict:
    """The training-job chart's object for ``config`` in the test's namespace (what the drill looks for)."""
    charts = build_charts(cdk8s.App(), cluster.values(config), jobs=True, ray=False)
    (job,) = charts["training-job"].to_json()
    return dict(job)


def drill(
    capsys, cluster_flags: list[str], out: Path, *flags: str, timeout_minutes: float = 0.5
) -> tuple[int, str, str]:
    """`llm-infra drill` on the cluster ``cluster_flags`` reach, unattended (--yes), polling fast, its
    report written to ``out``: (exit code, stdout, stderr)."""
    unattended = ["--yes", "--timeout-minutes", str(timeout_minutes)]
    return run_cli(capsys, "drill", *cluster_flags, *flags, "--out", str(out), *unattended, *FAST)


@contextlib.contextmanager
def training(
    cluster: KwokCluster,
    config: TrainingConfig,
    log_before: str = "",
    recovery: NodeRecovery | None = None,
    provider_ids: dict[str, str] | None = None,
) -> Iterator[None]:
    """The training job of ``config`` running on GPU_NODES, placed by the real scheduler (its pods' rank 0's
    log so far: ``log_before``; the containers never end), and ``recovery`` watching for the fault."""
    cluster.deploy(config, GPU_NODES, provider_ids=provider_ids)
    runtime = PodRuntime(cluster, lambda job, index, node: (log_before if index == 0 else "", None))
    with runtime, recovery or contextlib.nullcontext():
        job = cluster.kube.create(training_job(cluster, config))
        cluster.wait_for(
            f"the pods of {job['kind']} {cluster.namespace}/{job['metadata']['name']} running on {GPU_NODES}",
            lambda: len(runtime.done) >= len(GPU_NODES),
            component="training-operator" if job["kind"] == "PyTorchJob" else "kube-scheduler",
        )
        yield


def assert_what_happened(report: dict, recovery: NodeRecovery, *, replaced: bool) -> None:
    """Each phase the drill reports is the step NodeRecovery took, at the time the cluster or the payload stamped
    it (``recovery.stamps``): the drill reads the same stamps, never before the injection."""
    injected = datetime.fromisoformat(report["injected_at"])

    def after_injection(step: str) -> float:
        return round((max(recovery.stamps[step], injected) - injected).total_seconds(), 3)

    phases = report["phases_seconds"]
    assert phases["detected"] == pytest.approx(after_injection("not-ready"), abs=0.001)  # NotReady, not the cordon
    if replaced:
        assert phases["node_replaced"] == pytest.approx(after_injection("replaced"), abs=0.001)
    else:
        assert phases["node_replaced"] is None
    assert phases["rejoined"] == pytest.approx(after_injection("ready"), abs=0.001)
    assert phases["job_resumed"] == pytest.approx(after_injection("resumed"), abs=0.001)
    assert phases["first_step_after_resume"] == pytest.approx(after_injection("first-step"), abs=0.001)
    assert report["recovery_seconds"] == phases["first_step_after_resume"]
    # In the order the steps were taken.
    assert recovery.done == ["not-ready", "replaced", "ready", "resumed"]
    assert phases["detected"] < phases["rejoined"] < phases["job_resumed"] < phases["first_step_after_resume"]
    if replaced:
        assert phases["detected"] < phases["node_replaced"] < phases["rejoined"]


def test_hyperpod_replace_times_every_phase(
    tmp_path, hyperpod_cluster, hyperpod_operator, capsys, payload_lines
) -> None:
    """Stubber (DescribeCluster): label gpu-a for replacement; each phase is read from the objects' own
    timestamps and the payload's lines; the report is what `plan --from-run` reads."""
    cluster, flags = hyperpod_cluster
    before, after = payload_lines
    recovery = NodeRecovery(cluster, "gpu-a", "train", after, replace=True)
    out = tmp_path / "drill.json"
    with training(cluster, app_config(compute="hyperpod"), before, recovery):
        code, stdout, err = drill(capsys, flags, out)
    assert code == 0, err
    assert recovery.fault == "UnschedulablePendingReplacement"
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
    assert_what_happened(report, recovery, replaced=True)
    resume = next(r for r in after if r["event"] == "resume")
    assert report["resumed_at_step"] == resume["step"]
    assert read_runs([str(out)]).recovery_seconds.value == report["recovery_seconds"]
    assert f"resumed at step {resume['step']}" in stdout
    # The stand-in operator created the lost pod again and the real scheduler put it on the replacement.
    assert sorted(p["spec"]["nodeName"] for p in cluster.job_pods()) == ["gpu-a-replacement", "gpu-b"]


def test_hyperpod_reboot_has_no_replacement_node(
    tmp_path, hyperpod_cluster, hyperpod_operator, capsys, payload_lines
) -> None:
    """Stubber (DescribeCluster): the reboot label; the same node comes back, so node_replaced stays null."""
    cluster, flags = hyperpod_cluster
    before, after = payload_lines
    recovery = NodeRecovery(cluster, "gpu-a", "train", after, replace=False)
    out = tmp_path / "drill.json"
    with training(cluster, app_config(compute="hyperpod"), before, recovery):
        code, _, err = drill(capsys, flags, out, "--fault", "reboot")
    assert code == 0, err
    assert recovery.fault == "UnschedulablePendingReboot"
    node = cluster.kube.get("v1", "Node", "gpu-a")
    assert node["metadata"]["labels"][HEALTH_STATUS_KEY] == "Schedulable"  # HyperPod lifted the reboot label
    report = json.loads(out.read_text())
    assert report["fault"] == "reboot"
    assert_what_happened(report, recovery, replaced=False)
    assert sorted(p["spec"]["nodeName"] for p in cluster.job_pods()) == GPU_NODES


def test_eks_terminate_cordons_and_ends_the_instance(
    tmp_path, eks_cluster, training_operator, aws_endpoint, capsys, payload_lines
) -> None:
    """moto (EKS, EC2): the node is cordoned and its instance terminated; the drill's own cordon does not
    count as detection; the real training operator creates the lost pod again on the replacement."""
    cluster, flags = eks_cluster
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=aws_endpoint)
    (instance,) = ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1, InstanceType="p5.48xlarge")[
        "Instances"
    ]
    before, after = payload_lines
    recovery = NodeRecovery(cluster, "gpu-a", "train", after, replace=True)
    out = tmp_path / "drill.json"
    with training(cluster, app_config(), before, recovery, {"gpu-a": f"aws:///us-east-1a/{instance['InstanceId']}"}):
        code, _, err = drill(capsys, flags, out)
    assert code == 0, err
    assert recovery.fault == "cordon"
    (state,) = [
        i["State"]["Name"]
        for r in ec2.describe_instances(InstanceIds=[instance["InstanceId"]])["Reservations"]
        for i in r["Instances"]
    ]
    assert state in ("shutting-down", "terminated")
    report = json.loads(out.read_text())
    assert report["compute"] == "eks" and report["fault"] == "terminate"
    assert_what_happened(report, recovery, replaced=True)  # detected: NotReady, not the drill's own cordon
    assert sorted(p["spec"]["nodeName"] for p in cluster.job_pods()) == ["gpu-a-replacement", "gpu-b"]


def test_eks_gpu_xid_is_repaired_by_node_auto_repair(
    tmp_path, eks_cluster, training_operator, capsys, payload_lines
) -> None:
    """Issue 31, item 5: the EKS node monitoring agent's condition for a GPU that fell off the bus
    (AcceleratedHardwareReady=False, NvidiaXID79Error) on gpu-a; the agent's heartbeat writes its own view back
    and the drill sets the fault again with the injection's transition time; node auto repair (played, its
    10 minutes compressed) cordons and replaces the node once the condition has held; the real training
    operator creates the lost pod on the replacement and the job resumes from its checkpoint. No EC2 call."""
    cluster, flags = eks_cluster
    before, after = payload_lines
    timeline = {"not_ready_at": 1.5, "replaced_at": 3.0, "ready_at": 4.5, "resume_at": 6.0}
    recovery = NodeRecovery(cluster, "gpu-a", "train", after, replace=True, **timeline)
    out = tmp_path / "drill.json"
    with training(cluster, app_config(), before, recovery):
        code, stdout, err = drill(capsys, flags, out, "--fault", "gpu-xid")
    assert code == 0, err
    assert recovery.fault == "NvidiaXID79Error"
    report = json.loads(out.read_text())
    assert report["compute"] == "eks" and report["fault"] == "gpu-xid"
    injected = datetime.fromisoformat(report["injected_at"])
    # The heartbeat undid the fault as first injected, and the repair acted on the fault the drill held since.
    assert recovery.heartbeat_undid == injected.replace(microsecond=0)
    assert "AcceleratedHardwareReady=False (NvidiaXID79Error)" in err and "10 minutes" in err
    assert_what_happened(report, recovery, replaced=True)  # detected: the repair, not the injected condition
    assert report["resumed_at_step"] == next(r for r in after if r["event"] == "resume")["step"]
    assert f"resumed at step {report['resumed_at_step']}" in stdout
    assert sorted(p["spec"]["nodeName"] for p in cluster.job_pods()) == ["gpu-a-replacement", "gpu-b"]


def test_an_unknown_fault_is_a_usage_error(tmp_path, capsys) -> None:
    """No cluster, no AWS: a fault the drill does not know is refused with the ones it does, and no traceback."""
    with pytest.raises(SystemExit) as exited:
        drill(capsys, ["--cluster", "x"], tmp_path / "r", "--fault", "gpu-ecc")
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "--fault: invalid choice: 'gpu-ecc'" in err and "'gpu-xid'" in err
    assert "Traceback" not in err


def test_a_resume_never_seen_is_null_and_fails(
    tmp_path, hyperpod_cluster, hyperpod_operator, capsys, payload_lines
) -> None:
    """Stubber (DescribeCluster): the job does not resume before --timeout-minutes: nulls, exit 1."""
    cluster, flags = hyperpod_cluster
    before, after = payload_lines
    recovery = NodeRecovery(cluster, "gpu-a", "train", after, replace=True, resume_at=3600.0)
    out = tmp_path / "drill.json"
    with training(cluster, app_config(compute="hyperpod"), before, recovery):
        code, _, _ = drill(capsys, flags, out, timeout_minutes=0.1)
    assert code == 1
    report = json.loads(out.read_text())
    injected = datetime.fromisoformat(report["injected_at"])
    assert report["phases_seconds"]["detected"] == pytest.approx(
        (max(recovery.stamps["not-ready"], injected) - injected).total_seconds(), abs=0.001
    )
    assert "resumed" not in recovery.done
    assert report["phases_seconds"]["job_resumed"] is None and report["recovery_seconds"] is None
    assert report["resumed_at_step"] is None


def test_a_fault_of_the_other_compute_mode_is_bad_input(tmp_path, capsys) -> None:
    """No AWS call: terminate is the EKS fault, not a HyperPod one: exit 2."""
    code, _, err = drill(capsys, ["--cluster", "x", "-c", "compute=hyperpod"], tmp_path / "r", "--fault", "terminate")
    assert code == 2 and "--fault: terminate is not a fault for compute=hyperpod; allowed: replace, reboot" in err
    code, _, err = drill(capsys, ["--cluster", "x", "-c", "compute=hyperpod"], tmp_path / "r", "--fault", "gpu-xid")
    assert code == 2 and "--fault: gpu-xid is not a fault for compute=hyperpod" in err


def test_an_unknown_cluster_is_bad_input(tmp_path, aws_endpoint, capsys) -> None:
    """moto (EKS): DescribeCluster does not know the name: exit 2."""
    code, _, err = drill(capsys, ["--cluster", "nope", "--endpoint-url", aws_endpoint], tmp_path / "r")
    assert code == 2 and "--cluster: no EKS cluster 'nope'" in err


def test_no_training_job_and_a_node_without_its_pod_are_clear_errors(
    tmp_path, eks_cluster, training_operator, capsys
) -> None:
    """moto (EKS): nothing is injected when the job is missing or the named node runs none of its pods."""
    cluster, flags = eks_cluster
    cluster.add_node("gpu-c", gpus=0)  # no GPU free there: the scheduler puts no pod of the job on it
    code, _, err = drill(capsys, flags, tmp_path / "r")
    job = f"PyTorchJob {cluster.namespace}/train"
    assert code == 1 and f"no {job} on the cluster" in err
    with training(cluster, app_config()):
        code, _, err = drill(capsys, flags, tmp_path / "r", "--node", "gpu-c")
        assert code == 2 and f"--node: gpu-c runs no pod of {job}; its nodes: gpu-a, gpu-b" in err
        assert not any(n["spec"].get("unschedulable") for n in cluster.kube.list("v1", "Node"))
    assert not (tmp_path / "r").exists()


def test_the_drill_asks_first(tmp_path, eks_cluster, training_operator, capsys, monkeypatch) -> None:
    """moto (EKS): a no at the prompt injects nothing."""
    cluster, flags = eks_cluster
    monkeypatch.setattr("builtins.input", lambda: "n")
    with training(cluster, app_config()):
        code, _, err = run_cli(capsys, "drill", *flags, "--out", str(tmp_path / "r"), *FAST)
        assert code == 1 and f"terminate node gpu-a under PyTorchJob {cluster.namespace}/train on train? [y/N]" in err
        assert not any(n["spec"].get("unschedulable") for n in cluster.kube.list("v1", "Node"))
