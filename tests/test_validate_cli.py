"""`llm-infra validate` where no cluster is needed: bad input (moto's EKS for the unknown cluster), and how
a job's state and pods are read from each kind's objects. The runs themselves are on the real control
plane: tests/test_validate_real_api.py.
"""

from __future__ import annotations

import pytest

from conftest import REPO_ROOT, app_config, run_cli
from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.ops.job_state import Phase, expected_pods, job_state, kueue_admission
from llm_infra.ops.validation_run import chart_objects


def objects_for(config: TrainingConfig, nodes: int):
    return chart_objects(
        WorkloadValues.from_config(config.with_(gpu_nodes=nodes, gpu_nodes_min=None, gpu_nodes_max=None))
    )


def validate(capsys, cluster_flags: list[str], *flags: str) -> tuple[int, str, str]:
    """`llm-infra validate` on the cluster ``cluster_flags`` reach: (exit code, stdout, stderr)."""
    return run_cli(capsys, "validate", *cluster_flags, *flags, "--app-dir", str(REPO_ROOT))


def test_an_unknown_cluster_is_bad_input(aws_endpoint, capsys) -> None:
    """moto (EKS): DescribeCluster does not know the name: exit 2."""
    code, out, err = validate(capsys, ["--cluster", "nope", "--endpoint-url", aws_endpoint])
    assert code == 2 and not out
    assert "--cluster: no EKS cluster 'nope' in us-east-1" in err


def test_replace_failed_is_for_hyperpod_only(capsys) -> None:
    """No AWS call: --replace-failed with compute=eks is bad input."""
    code, _, err = validate(capsys, ["--cluster", "train"], "--replace-failed")
    assert code == 2 and "--replace-failed: only with compute=hyperpod" in err


@pytest.mark.parametrize("command", ["validate", "drill"])
@pytest.mark.parametrize("name", ["Training", "a_b", "x-", "x" * 64, ""])
def test_a_namespace_that_kubernetes_would_refuse_is_bad_input(capsys, command: str, name: str) -> None:
    """No AWS call: --namespace must be a namespace's name (a DNS label), checked before anything runs."""
    out_flag = ["--out", "r.json"] if command == "drill" else []
    with pytest.raises(SystemExit) as exited:
        run_cli(capsys, command, "--cluster", "train", *out_flag, "--namespace", name)
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and not out
    assert f"argument --namespace: {name!r} is not a namespace name" in err


@pytest.mark.parametrize("namespace", [None, "validation-a1"])
def test_the_jobs_and_the_objects_they_need_are_rendered_in_the_namespace(namespace: str | None) -> None:
    """--namespace renders every chart object the commands create or check there (default: the app's, training)."""
    import argparse

    from llm_infra.cli.commands.cluster_access import workload_values
    from llm_infra.cli.commands.drill import _training_job

    args = argparse.Namespace(app_dir=str(REPO_ROOT), outputs_file="cdk-outputs.json", namespace=namespace, job=None)
    values = workload_values(args, app_config())
    assert values.namespace == (namespace or "training") == (namespace or WorkloadValues.namespace)
    objects = chart_objects(values)
    namespaced = [o for o in [*objects.base, *objects.jobs] if o["kind"] not in ("Namespace", "PersistentVolume")]
    assert namespaced and {o["metadata"]["namespace"] for o in namespaced} == {values.namespace}
    assert [o["metadata"]["name"] for o in objects.base if o["kind"] == "Namespace"] == [values.namespace]
    assert _training_job(args, app_config())["metadata"]["namespace"] == values.namespace


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


def test_kueue_admission_names_the_condition_that_decided() -> None:
    """No cluster: a Workload's conditions as Kueue v0.17 writes them (the real Kueue's, in test_kueue_real)."""
    pending = condition("QuotaReserved", "False") | {
        "message": "couldn't assign flavors to pod set main:\n  insufficient quota"
    }
    evicted = condition("Evicted", "True") | {"message": "Exceeded the PodsReady timeout"}
    stale_eviction = condition("Evicted", "False") | {"message": "an old eviction"}
    admitted = [condition("QuotaReserved", "True"), condition("Admitted", "True")]

    assert kueue_admission({"status": {"conditions": admitted}}).admitted
    held = kueue_admission({"status": {"conditions": [pending]}})
    assert not held.admitted and held.reason == "couldn't assign flavors to pod set main: insufficient quota"
    assert kueue_admission({"status": {"conditions": [pending, evicted]}}).reason == "Exceeded the PodsReady timeout"
    assert kueue_admission({"status": {"conditions": [stale_eviction, pending]}}).reason.startswith("couldn't")
    assert kueue_admission({"status": {}}).reason == "not yet decided"
    assert "Kueue made no Workload for it" in kueue_admission(None).reason


def test_expected_pods_of_each_chart_job() -> None:
    """The pods each chart job runs at once, for both compute modes (a Job, a PyTorchJob, a HyperPodPyTorchJob)."""
    for compute in ("eks", "hyperpod"):
        jobs = objects_for(app_config(compute=compute), nodes=3).jobs
        assert [expected_pods(job) for job in jobs] == [3, 3, 3], compute
