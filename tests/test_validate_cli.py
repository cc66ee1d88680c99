"""`llm-infra validate` against the Kubernetes API test double (tests/kube_api_double.py), through the
real `kubernetes` client and a generated kubeconfig: the runs whose PyTorchJob / HyperPodPyTorchJob
stages need a training operator (none runs on the real control plane here yet), plus the checks that
need no cluster. Every run that only creates the health stage's batch/v1 Job runs on the real API
server instead: tests/test_validate_real_api.py.

AWS: the EKS cluster behind `--cluster` lives in moto (server mode, on loopback); HyperPod's
DescribeCluster is answered by botocore's Stubber against the real service model (moto's answer has no
`Orchestrator`). Pod logs are the real payload's output (`ChartPayload`: torchrun on CPU for the NCCL
gate and the training run, recorded nvidia-smi output for the health check).
"""

from __future__ import annotations

import json

import pytest
from kube_api_double import JOB_KINDS, ChartPayload, JobController, KubeApiDouble

from conftest import REPO_ROOT, app_config, run_cli
from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import HEALTH_STATUS_KEY
from llm_infra.ops.job_state import Phase, expected_pods, job_state
from llm_infra.ops.validation_run import chart_objects
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


def test_an_unknown_cluster_is_bad_input(aws_endpoint, capsys) -> None:
    """moto (EKS): DescribeCluster does not know the name: exit 2."""
    code, out, err = validate(capsys, ["--cluster", "nope", "--endpoint-url", aws_endpoint])
    assert code == 2 and not out
    assert "--cluster: no EKS cluster 'nope' in us-east-1" in err


# ---- HyperPod: DescribeCluster through the Stubber (moto's answer has no Orchestrator) ----
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
    """No cluster: the conditions each kind's controller writes (see llm_infra/ops/job_state.py for the sources)."""
    assert job_state(job).phase is phase


def test_expected_pods_of_each_chart_job() -> None:
    """The pods each chart job runs at once, for both compute modes (a Job, a PyTorchJob, a HyperPodPyTorchJob)."""
    for compute in ("eks", "hyperpod"):
        jobs = objects_for(app_config(compute=compute), nodes=3).jobs
        assert [expected_pods(job) for job in jobs] == [3, 3, 3], compute
