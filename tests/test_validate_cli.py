"""`llm-infra validate` against the Kubernetes API test double (tests/kube_api_double.py), through the
real `kubernetes` client and a generated kubeconfig.

AWS: the EKS cluster behind `--cluster` lives in moto (server mode, on loopback); HyperPod's
DescribeCluster is answered by botocore's Stubber against the real service model (moto's answer has no
`Orchestrator`). Pod logs are the real payload's output (`ChartPayload`: torchrun on CPU for the NCCL
gate and the training run, recorded nvidia-smi output for the health check).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber
from kube_api_double import ChartPayload, JobController, KubeApiDouble
from moto.server import ThreadedMotoServer

from llm_infra import cli
from llm_infra.commands import cluster_access
from llm_infra.config import TrainingConfig
from llm_infra.job_state import Phase, expected_pods, job_state
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import HEALTH_STATUS_KEY
from llm_infra.validation_run import chart_objects
from manifest_validation import validate_object

REPO_ROOT = Path(__file__).resolve().parent.parent
REGION = "us-east-1"
ACCOUNT = "123456789012"
GPU_NODES = ["gpu-a", "gpu-b"]
JOB_KINDS = ("Job", "PyTorchJob", "HyperPodPyTorchJob")
FAST = ["--poll-seconds", "0.02", "--app-dir", str(REPO_ROOT)]


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


def app_config(**changes) -> TrainingConfig:
    """The app's config as the command reads it: cdk.json's context, then -c values."""
    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    return TrainingConfig.from_context({**context, **changes})


def objects_for(config: TrainingConfig, nodes: int = len(GPU_NODES)):
    return chart_objects(
        WorkloadValues.from_config(config.with_(gpu_nodes=nodes, gpu_nodes_min=None, gpu_nodes_max=None))
    )


def cluster(api: KubeApiDouble, config: TrainingConfig, *, gpus: int = 8) -> None:
    """What `cdk deploy` leaves: GPU and system nodes, the base chart's objects and the FSx claim."""
    hyperpod = {HEALTH_STATUS_KEY: "Schedulable"} if config.compute == "hyperpod" else {}  # HyperPod labels its nodes
    for name in GPU_NODES:
        api.add_node(name, gpus=gpus, labels=hyperpod)
    api.add_node("system-1", gpus=0, role="system")
    values = WorkloadValues.from_config(config)
    for obj in objects_for(config).base:
        api.put(json.loads(json.dumps(obj)))
    api.put(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": values.pvc_name, "namespace": values.namespace},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1200Gi"}}},
            "status": {"phase": "Bound"},
        }
    )


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def left_running(api: KubeApiDouble) -> list[str]:
    return [
        o["metadata"]["name"]
        for kind in ("Pod", *JOB_KINDS)
        if kind in {r.kind for r in api.resources}
        for o in api.objects(kind)
    ]


def assert_applied_objects_pass_the_chart_schemas(api: KubeApiDouble, config: TrainingConfig) -> None:
    for obj in api.received:
        validate_object(obj, config.kubernetes_version)


@pytest.fixture
def eks_cluster(tmp_path, eks_arn, aws_endpoint):
    """A healthy EKS-mode cluster in the double, its kubeconfig, and the validate command line."""
    config = app_config()
    payload = ChartPayload()
    payload.warm(objects_for(config).jobs, GPU_NODES)
    with KubeApiDouble() as api:
        cluster(api, config)
        api.controllers.append(JobController(payload))
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        argv = ["validate", "--cluster", "train", "--kubeconfig", str(kubeconfig), "--endpoint-url", aws_endpoint]
        yield api, config, argv + FAST


@pytest.mark.torch
def test_a_healthy_cluster_passes_every_stage_and_nothing_is_left(eks_cluster, capsys) -> None:
    """The chart's three jobs run in order, each judged by its payload verdict; exit 0; all deleted."""
    api, config, argv = eks_cluster
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["verdict"] == "pass" and report["nodes"] == GPU_NODES
    assert [(s["stage"], s["outcome"]) for s in report["stages"]] == [
        ("health", "pass"),
        ("allreduce", "pass"),
        ("training", "pass"),
    ]
    health, allreduce, training = report["stages"]
    assert {p["node"] for p in health["pods"]} == set(GPU_NODES)
    assert all(p["verdict"]["verdict"] == "pass" for p in health["pods"])
    assert "2 ranks" in allreduce["detail"]
    assert "resumed from step 2" in training["detail"]  # the injected fault at step 3, the checkpoint at 2
    # The command created exactly the chart's objects, and they pass the charts' schema checks.
    assert api.received == objects_for(config).jobs
    assert_applied_objects_pass_the_chart_schemas(api, config)
    assert left_running(api) == []
    assert "[1/3] Job validation-1-health" in err and "2/2 running" in err


@pytest.mark.torch
def test_the_table_shows_each_node_and_stage(eks_cluster, capsys) -> None:
    """moto (EKS): the table has a row per node and a column per stage."""
    _, _, argv = eks_cluster
    code, out, _ = run(capsys, *argv)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["node", "health", "allreduce", "training", "problems"]
    assert lines[1].split() == ["gpu-a", "pass", "pass", "pass"]
    assert lines[-1] == "validation of train: PASS"


def test_a_faulty_node_fails_the_health_check_and_stops_the_run(tmp_path, eks_arn, aws_endpoint, capsys) -> None:
    """One node answers nvidia-smi with 7 GPUs and ECC errors: health fails on it, the rest is skipped."""
    config = app_config()
    with KubeApiDouble() as api:
        cluster(api, config)
        api.controllers.append(JobController(ChartPayload(faulty_nodes=frozenset({"gpu-b"}))))
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        code, out, _ = run(
            capsys,
            "validate",
            "--cluster",
            "train",
            "--kubeconfig",
            str(kubeconfig),
            "--endpoint-url",
            aws_endpoint,
            *FAST,
        )
        assert code == 1
        rows = {line.split()[0]: line.split() for line in out.splitlines()[1:3]}
        assert rows["gpu-a"][1:4] == ["pass", "skipped", "skipped"]
        assert rows["gpu-b"][1:4] == ["fail", "skipped", "skipped"]
        assert "gpu_count" in rows["gpu-b"][4]
        assert out.splitlines()[-1] == "validation of train: FAIL"
        assert [o["metadata"]["name"] for o in api.received] == ["validation-1-health"]
        assert left_running(api) == []


def test_no_gpu_node_is_a_clear_error_and_starts_nothing(tmp_path, eks_arn, aws_endpoint, capsys) -> None:
    """moto (EKS): a system node and a GPU node that is not Ready: exit 1 before anything is created."""
    with KubeApiDouble() as api:
        api.add_node("system-1", gpus=0, role="system")
        api.add_node("gpu-a", ready=False)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        code, out, err = run(
            capsys,
            "validate",
            "--cluster",
            "train",
            "--kubeconfig",
            str(kubeconfig),
            "--endpoint-url",
            aws_endpoint,
            *FAST,
        )
        assert code == 1 and not out
        assert "no schedulable GPU node" in err and "1 GPU node(s), none that the jobs may use" in err
        assert api.received == [] and left_running(api) == []


def test_a_job_that_never_starts_names_the_likely_cause(tmp_path, eks_arn, aws_endpoint, capsys) -> None:
    """GPU nodes without allocatable GPUs (no device plugin): the pods stay Pending past --start-timeout."""
    config = app_config()
    with KubeApiDouble() as api:
        cluster(api, config, gpus=0)
        api.controllers.append(JobController(ChartPayload()))
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        code, out, _ = run(
            capsys,
            "validate",
            "--cluster",
            "train",
            "--kubeconfig",
            str(kubeconfig),
            "--endpoint-url",
            aws_endpoint,
            "--start-timeout",
            "0.3",
            "--json",
            *FAST,
        )
        assert code == 1
        health = json.loads(out)["stages"][0]
        assert health["outcome"] == "not-started"
        assert "NVIDIA device plugin is not running" in health["detail"]
        assert "Insufficient nvidia.com/gpu" in health["detail"]  # the scheduler's own words
        assert left_running(api) == []


def test_an_unknown_cluster_is_bad_input(tmp_path, aws_endpoint, capsys) -> None:
    """moto (EKS): DescribeCluster does not know the name: exit 2."""
    code, out, err = run(capsys, "validate", "--cluster", "nope", "--endpoint-url", aws_endpoint, *FAST)
    assert code == 2 and not out
    assert "--cluster: no EKS cluster 'nope' in us-east-1" in err


def test_missing_platform_objects_are_named(tmp_path, eks_arn, aws_endpoint, capsys) -> None:
    """Without the base chart (no cdk deploy yet): the missing objects are named, nothing is created."""
    with KubeApiDouble() as api:
        api.add_node("gpu-a")
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        code, _, err = run(
            capsys,
            "validate",
            "--cluster",
            "train",
            "--kubeconfig",
            str(kubeconfig),
            "--endpoint-url",
            aws_endpoint,
            *FAST,
        )
        assert code == 1
        assert "Namespace training, ServiceAccount training/training, ConfigMap training/llm-infra-workloads" in err
        assert "PersistentVolumeClaim training/fsx-data" in err
        assert api.received == []


def test_apply_base_applies_the_base_and_fsx_charts_server_side(tmp_path, eks_arn, aws_endpoint, capsys) -> None:
    """--apply-base: the base and FSx charts' objects (the FSx ids from the outputs file) are applied and
    pass the charts' schema checks; a job that cannot start then ends the run."""
    config = app_config()
    app = tmp_path / "app"
    app.mkdir()
    (app / "cdk.json").write_text((REPO_ROOT / "cdk.json").read_text())
    outputs = {
        "FileSystemId": "fs-0123456789abcdef0",
        "FileSystemDnsName": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        "FileSystemMountName": "abcdefgh",
    }
    (app / "cdk-outputs.json").write_text(json.dumps({"llm-infra-storage": outputs}))
    with KubeApiDouble() as api:
        api.add_node("gpu-a")
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        code, out, err = run(
            capsys,
            "validate",
            "--cluster",
            "train",
            "--kubeconfig",
            str(kubeconfig),
            "--endpoint-url",
            aws_endpoint,
            "--apply-base",
            "--start-timeout",
            "0.1",
            "--poll-seconds",
            "0.02",
            "--app-dir",
            str(app),
        )
        assert code == 1 and "applied PersistentVolume fsx-data-training" in err
        applied = [(o["kind"], o["metadata"]["name"]) for o in api.received]
        assert applied[:6] == [
            ("Namespace", "training"),
            ("ServiceAccount", "training"),
            ("ServiceAccount", "data-prep"),
            ("ConfigMap", "llm-infra-workloads"),
            ("PersistentVolume", "fsx-data-training"),
            ("PersistentVolumeClaim", "fsx-data"),
        ]
        assert (
            api.get("PersistentVolume", "fsx-data-training")["spec"]["csi"]["volumeHandle"] == outputs["FileSystemId"]
        )
        assert_applied_objects_pass_the_chart_schemas(api, config)
        assert "did not start: no pod was created" in out
        assert left_running(api) == []


def test_jobs_left_from_an_earlier_run_are_not_touched(tmp_path, eks_arn, aws_endpoint, capsys) -> None:
    """moto (EKS): a validation job already there is named and left alone (--replace-existing deletes it)."""
    config = app_config()
    with KubeApiDouble() as api:
        cluster(api, config)
        earlier = objects_for(config).jobs[0]
        api.put(json.loads(json.dumps(earlier)))
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        code, _, err = run(
            capsys,
            "validate",
            "--cluster",
            "train",
            "--kubeconfig",
            str(kubeconfig),
            "--endpoint-url",
            aws_endpoint,
            *FAST,
        )
        assert code == 1 and "Job training/validation-1-health already exist" in err and "--replace-existing" in err
        assert api.get("Job", "validation-1-health", "training") is not None and api.received == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_deletes_what_the_run_created(tmp_path, eks_arn, aws_endpoint, capsys, signum) -> None:
    """Ctrl-C (or SIGTERM) while a job runs: the job is deleted before the command exits 130."""
    config = app_config()
    sent: list[int] = []

    def interrupt_once_the_job_exists(api: KubeApiDouble) -> None:
        if api.objects("Job") and not sent:  # no job controller: the job stays as created
            sent.append(signum)
            os.kill(os.getpid(), signum)

    with KubeApiDouble() as api:
        cluster(api, config)
        api.controllers.append(interrupt_once_the_job_exists)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        code, _, err = run(
            capsys,
            "validate",
            "--cluster",
            "train",
            "--kubeconfig",
            str(kubeconfig),
            "--endpoint-url",
            aws_endpoint,
            *FAST,
        )
        assert sent and code == 130 and "deleted Job training/validation-1-health" in err
        assert [o["metadata"]["name"] for o in api.received] == ["validation-1-health"]
        assert left_running(api) == []


# ---- HyperPod: DescribeCluster through the Stubber (moto's answer has no Orchestrator) ----
def stubbed_sagemaker(eks_arn: str, monkeypatch) -> Stubber:
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
    real = cluster_access.aws_client
    monkeypatch.setattr(
        cluster_access, "aws_client", lambda args, service: client if service == "sagemaker" else real(args, service)
    )
    return stub


@pytest.mark.parametrize(("answer", "labelled"), [("y", True), ("n", False)])
def test_replace_failed_labels_failing_hyperpod_nodes_after_asking(
    tmp_path, eks_arn, capsys, monkeypatch, answer, labelled
) -> None:
    """HyperPod mode (the chart's jobs for compute=hyperpod): the node failing its health check gets the
    documented node-health label for replacement, only after a yes."""
    config = app_config(compute="hyperpod")
    monkeypatch.setattr("builtins.input", lambda: answer)
    with KubeApiDouble() as api, stubbed_sagemaker(eks_arn, monkeypatch):
        cluster(api, config)
        api.controllers.append(JobController(ChartPayload(faulty_nodes=frozenset({"gpu-a"}))))
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        code, out, err = run(
            capsys,
            "validate",
            "--cluster",
            "llm-infra-hyperpod",
            "-c",
            "compute=hyperpod",
            "--kubeconfig",
            str(kubeconfig),
            "--replace-failed",
            *FAST,
        )
        assert code == 1
        assert "label 1 node(s) for HyperPod replacement: gpu-a?" in err
        node_label = (api.get("Node", "gpu-a")["metadata"]["labels"]).get(HEALTH_STATUS_KEY)
        assert node_label == ("UnschedulablePendingReplacement" if labelled else "Schedulable")
        assert (("labelled for replacement: gpu-a" in out) is labelled) and "gpu-b" not in str(api.patches)
        assert_applied_objects_pass_the_chart_schemas(api, config)
        assert left_running(api) == []


@pytest.mark.torch
def test_hyperpod_mode_runs_the_hyperpod_pytorch_jobs(tmp_path, eks_arn, capsys, monkeypatch) -> None:
    """Stubber (DescribeCluster): with compute=hyperpod the chart's jobs are HyperPodPyTorchJobs; they run,
    pass, pass the derived schema, and are deleted."""
    config = app_config(compute="hyperpod")
    payload = ChartPayload()
    payload.warm(objects_for(config).jobs, GPU_NODES)
    with KubeApiDouble() as api, stubbed_sagemaker(eks_arn, monkeypatch):
        cluster(api, config)
        api.controllers.append(JobController(payload))
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", name=eks_arn)
        code, out, err = run(
            capsys,
            "validate",
            "--cluster",
            "llm-infra-hyperpod",
            "-c",
            "compute=hyperpod",
            "--kubeconfig",
            str(kubeconfig),
            "--json",
            *FAST,
        )
        assert code == 0, err
        assert [s["kind"] for s in json.loads(out)["stages"]] == ["Job", "HyperPodPyTorchJob", "HyperPodPyTorchJob"]
        assert api.received == objects_for(config).jobs
        assert_applied_objects_pass_the_chart_schemas(api, config)
        assert left_running(api) == []


def test_replace_failed_is_for_hyperpod_only(capsys) -> None:
    """No AWS call: --replace-failed with compute=eks is bad input."""
    code, _, err = run(capsys, "validate", "--cluster", "train", "--replace-failed", *FAST)
    assert code == 2 and "--replace-failed: only with compute=hyperpod" in err


def condition(kind: str, status: str) -> dict:
    return {"type": kind, "status": status, "lastTransitionTime": "2026-12-01T10:00:00Z"}


@pytest.mark.parametrize(
    ("job", "phase"),
    [
        # batch/v1 Job: no condition while it runs; Complete or Failed when it ends.
        ({"kind": "Job", "status": {"active": 2}}, Phase.RUNNING),
        ({"kind": "Job", "status": {"conditions": [condition("Complete", "True")]}}, Phase.SUCCEEDED),
        # Kubeflow PyTorchJob: the operator turns the earlier condition False as it moves on.
        (
            {
                "kind": "PyTorchJob",
                "status": {
                    "conditions": [
                        condition("Created", "False"),
                        condition("Running", "False"),
                        condition("Restarting", "True"),
                    ]
                },
            },
            Phase.RESTARTING,
        ),
        (
            {
                "kind": "PyTorchJob",
                "status": {"conditions": [condition("Running", "False"), condition("Succeeded", "True")]},
            },
            Phase.SUCCEEDED,
        ),
        # HyperPodPyTorchJob: Completed, or Failed, even after a Running that stayed True.
        ({"kind": "HyperPodPyTorchJob", "status": {"conditions": [condition("Created", "True")]}}, Phase.PENDING),
        (
            {
                "kind": "HyperPodPyTorchJob",
                "status": {"conditions": [condition("Created", "True"), condition("Completed", "True")]},
            },
            Phase.SUCCEEDED,
        ),
        (
            {
                "kind": "HyperPodPyTorchJob",
                "status": {"conditions": [condition("Running", "True"), condition("Failed", "True")]},
            },
            Phase.FAILED,
        ),
        ({"kind": "HyperPodPyTorchJob"}, Phase.PENDING),
    ],
)
def test_job_state_reads_each_kinds_conditions(job, phase) -> None:
    """No cluster: the conditions each kind's controller writes (see llm_infra/job_state.py for the sources)."""
    assert job_state(job).phase is phase


def test_expected_pods_of_each_chart_job() -> None:
    """The pods each chart job runs at once, for both compute modes (a Job, a PyTorchJob, a HyperPodPyTorchJob)."""
    for compute in ("eks", "hyperpod"):
        jobs = objects_for(app_config(compute=compute), nodes=3).jobs
        assert [expected_pods(job) for job in jobs] == [3, 3, 3], compute
