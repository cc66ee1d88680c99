"""`llm-infra validate` against the Kubernetes API test double (tests/kube_api_double.py), through the
real `kubernetes` client and a generated kubeconfig.

AWS: the EKS cluster behind `--cluster` lives in moto (server mode, on loopback); HyperPod's
DescribeCluster is answered by botocore's Stubber against the real service model (moto's answer has no
`Orchestrator`). Pod logs are the real payload's output (`ChartPayload`: torchrun on CPU for the NCCL
gate and the training run, recorded nvidia-smi output for the health check).
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from kube_api_double import JOB_KINDS, ChartPayload, JobController, KubeApiDouble

from conftest import REPO_ROOT, app_config, run_cli
from llm_infra.config import TrainingConfig
from llm_infra.job_state import Phase, expected_pods, job_state
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import HEALTH_STATUS_KEY
from llm_infra.validation_run import chart_objects
from manifest_validation import validate_object

GPU_NODES = ["gpu-a", "gpu-b"]
FAST = ["--poll-seconds", "0.02", "--app-dir", str(REPO_ROOT)]


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


def validate(capsys, cluster_flags: list[str], *flags: str) -> tuple[int, str, str]:
    """`llm-infra validate` on the cluster ``cluster_flags`` reach, polling fast: (exit code, stdout, stderr)."""
    return run_cli(capsys, "validate", *cluster_flags, *flags, *FAST)


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
def healthy_eks_cluster(eks_double):
    """A healthy EKS-mode cluster in the double (the payload's runs done ahead), and the flags that reach it."""
    api, flags = eks_double
    config = app_config()
    payload = ChartPayload()
    payload.warm(objects_for(config).jobs, GPU_NODES)
    cluster(api, config)
    api.controllers.append(JobController(payload))
    return api, config, flags


@pytest.mark.torch
def test_a_healthy_cluster_passes_every_stage_and_nothing_is_left(healthy_eks_cluster, capsys) -> None:
    """The chart's three jobs run in order, each judged by its payload verdict; exit 0; all deleted."""
    api, config, flags = healthy_eks_cluster
    code, out, err = validate(capsys, flags, "--json")
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
def test_the_table_shows_each_node_and_stage(healthy_eks_cluster, capsys) -> None:
    """moto (EKS): the table has a row per node and a column per stage."""
    _, _, flags = healthy_eks_cluster
    code, out, _ = validate(capsys, flags)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["node", "health", "allreduce", "training", "problems"]
    assert lines[1].split() == ["gpu-a", "pass", "pass", "pass"]
    assert lines[-1] == "validation of train: PASS"


def test_a_faulty_node_fails_the_health_check_and_stops_the_run(eks_double, capsys) -> None:
    """One node answers nvidia-smi with 7 GPUs and ECC errors: health fails on it, the rest is skipped."""
    api, flags = eks_double
    cluster(api, app_config())
    api.controllers.append(JobController(ChartPayload(faulty_nodes=frozenset({"gpu-b"}))))
    code, out, _ = validate(capsys, flags)
    assert code == 1
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:3]}
    assert rows["gpu-a"][1:4] == ["pass", "skipped", "skipped"]
    assert rows["gpu-b"][1:4] == ["fail", "skipped", "skipped"]
    assert "gpu_count" in rows["gpu-b"][4]
    assert out.splitlines()[-1] == "validation of train: FAIL"
    assert [o["metadata"]["name"] for o in api.received] == ["validation-1-health"]
    assert left_running(api) == []


def test_no_gpu_node_is_a_clear_error_and_starts_nothing(eks_double, capsys) -> None:
    """moto (EKS): a system node and a GPU node that is not Ready: exit 1 before anything is created."""
    api, flags = eks_double
    api.add_node("system-1", gpus=0, role="system")
    api.add_node("gpu-a", ready=False)
    code, out, err = validate(capsys, flags)
    assert code == 1 and not out
    assert "no schedulable GPU node" in err and "1 GPU node(s), none that the jobs may use" in err
    assert api.received == [] and left_running(api) == []


def test_a_job_that_never_starts_names_the_likely_cause(eks_double, capsys) -> None:
    """GPU nodes without allocatable GPUs (no device plugin): the pods stay Pending past --start-timeout."""
    api, flags = eks_double
    cluster(api, app_config(), gpus=0)
    api.controllers.append(JobController(ChartPayload()))
    code, out, _ = validate(capsys, flags, "--start-timeout", "0.3", "--json")
    assert code == 1
    health = json.loads(out)["stages"][0]
    assert health["outcome"] == "not-started"
    assert "NVIDIA device plugin is not running" in health["detail"]
    assert "Insufficient nvidia.com/gpu" in health["detail"]  # the scheduler's own words
    assert left_running(api) == []


def test_an_unknown_cluster_is_bad_input(aws_endpoint, capsys) -> None:
    """moto (EKS): DescribeCluster does not know the name: exit 2."""
    code, out, err = validate(capsys, ["--cluster", "nope", "--endpoint-url", aws_endpoint])
    assert code == 2 and not out
    assert "--cluster: no EKS cluster 'nope' in us-east-1" in err


def test_missing_platform_objects_are_named(eks_double, capsys) -> None:
    """Without the base chart (no cdk deploy yet): the missing objects are named, nothing is created."""
    api, flags = eks_double
    api.add_node("gpu-a")
    code, _, err = validate(capsys, flags)
    assert code == 1
    assert "Namespace training, ServiceAccount training/training, ConfigMap training/llm-infra-workloads" in err
    assert "PersistentVolumeClaim training/fsx-data" in err
    assert api.received == []


def test_apply_base_applies_the_base_and_fsx_charts_server_side(tmp_path, eks_double, capsys) -> None:
    """--apply-base: the base and FSx charts' objects (the FSx ids from the outputs file) are applied and
    pass the charts' schema checks; a job that cannot start then ends the run."""
    api, flags = eks_double
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
    api.add_node("gpu-a")
    code, out, err = run_cli(
        capsys,
        "validate",
        *flags,
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
    assert api.get("PersistentVolume", "fsx-data-training")["spec"]["csi"]["volumeHandle"] == outputs["FileSystemId"]
    assert_applied_objects_pass_the_chart_schemas(api, config)
    assert "did not start: no pod was created" in out
    assert left_running(api) == []


def test_jobs_left_from_an_earlier_run_are_not_touched(eks_double, capsys) -> None:
    """moto (EKS): a validation job already there is named and left alone (--replace-existing deletes it)."""
    api, flags = eks_double
    config = app_config()
    cluster(api, config)
    earlier = objects_for(config).jobs[0]
    api.put(json.loads(json.dumps(earlier)))
    code, _, err = validate(capsys, flags)
    assert code == 1 and "Job training/validation-1-health already exist" in err and "--replace-existing" in err
    assert api.get("Job", "validation-1-health", "training") is not None and api.received == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_deletes_what_the_run_created(eks_double, capsys, signum) -> None:
    """Ctrl-C (or SIGTERM) while a job runs: the job is deleted before the command exits 130."""
    api, flags = eks_double
    sent: list[int] = []

    def interrupt_once_the_job_exists(api: KubeApiDouble) -> None:
        if api.objects("Job") and not sent:  # no job controller: the job stays as created
            sent.append(signum)
            os.kill(os.getpid(), signum)

    cluster(api, app_config())
    api.controllers.append(interrupt_once_the_job_exists)
    code, _, err = validate(capsys, flags)
    assert sent and code == 130 and "deleted Job training/validation-1-health" in err
    assert [o["metadata"]["name"] for o in api.received] == ["validation-1-health"]
    assert left_running(api) == []


# ---- HyperPod: DescribeCluster through the Stubber (moto's answer has no Orchestrator) ----
@pytest.mark.parametrize(("answer", "labelled"), [("y", True), ("n", False)])
def test_replace_failed_labels_failing_hyperpod_nodes_after_asking(
    hyperpod_double, capsys, monkeypatch, answer, labelled
) -> None:
    """HyperPod mode (the chart's jobs for compute=hyperpod): the node failing its health check gets the
    documented node-health label for replacement, only after a yes."""
    api, flags = hyperpod_double
    config = app_config(compute="hyperpod")
    monkeypatch.setattr("builtins.input", lambda: answer)
    cluster(api, config)
    api.controllers.append(JobController(ChartPayload(faulty_nodes=frozenset({"gpu-a"}))))
    code, out, err = validate(capsys, flags, "--replace-failed")
    assert code == 1
    assert "label 1 node(s) for HyperPod replacement: gpu-a?" in err
    node_label = (api.get("Node", "gpu-a")["metadata"]["labels"]).get(HEALTH_STATUS_KEY)
    assert node_label == ("UnschedulablePendingReplacement" if labelled else "Schedulable")
    assert (("labelled for replacement: gpu-a" in out) is labelled) and "gpu-b" not in str(api.patches)
    assert_applied_objects_pass_the_chart_schemas(api, config)
    assert left_running(api) == []


@pytest.mark.torch
def test_hyperpod_mode_runs_the_hyperpod_pytorch_jobs(hyperpod_double, capsys) -> None:
    """Stubber (DescribeCluster): with compute=hyperpod the chart's jobs are HyperPodPyTorchJobs; they run,
    pass, pass the derived schema, and are deleted."""
    api, flags = hyperpod_double
    config = app_config(compute="hyperpod")
    payload = ChartPayload()
    payload.warm(objects_for(config).jobs, GPU_NODES)
    cluster(api, config)
    api.controllers.append(JobController(payload))
    code, out, err = validate(capsys, flags, "--json")
    assert code == 0, err
    assert [s["kind"] for s in json.loads(out)["stages"]] == ["Job", "HyperPodPyTorchJob", "HyperPodPyTorchJob"]
    assert api.received == objects_for(config).jobs
    assert_applied_objects_pass_the_chart_schemas(api, config)
    assert left_running(api) == []


def test_replace_failed_is_for_hyperpod_only(capsys) -> None:
    """No AWS call: --replace-failed with compute=eks is bad input."""
    code, _, err = validate(capsys, ["--cluster", "train"], "--replace-failed")
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
