"""`llm-infra validate` end to end against the real API server (issue 22): the session's control plane
(etcd, kube-apiserver, kube-scheduler, kube-controller-manager, the Kubeflow training operator) and a
log-serving KWOK playing the kubelet (tests/kwok_cluster.py). The Jobs and PyTorchJobs the command creates
are scheduled by the real scheduler and run by the real Job controller and training operator; pod logs
(the real payload's, tests/chart_payload.py) come through the API server from KWOK. HyperPodPyTorchJobs
are checked by the API server against our schema and run by a stand-in for AWS's closed operator
(tests/hyperpod_operator.py).

AWS: EKS in moto; HyperPod's DescribeCluster through botocore's Stubber. Each test runs the command in a
namespace of its own (``--namespace``, tests/kwok_cluster.py). Without the binaries (``make k8s``) every
test here skips.
"""

from __future__ import annotations

import dataclasses
import json
import signal
from typing import Any

import pytest
from chart_payload import ChartPayload
from kwok_cluster import KwokCluster, PodRuntime, signal_when

from conftest import REPO_ROOT, TorchLaunch, app_config, run_cli
from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.payload import payload_configmaps, payload_files
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import HEALTH_STATUS_KEY
from llm_infra.ops.validation_run import chart_objects

GPU_NODES = ["gpu-a", "gpu-b"]
FAST = ["--poll-seconds", "0.05", "--app-dir", str(REPO_ROOT)]


def objects_for(config: TrainingConfig, namespace: str = WorkloadValues.namespace) -> Any:
    """The chart's objects as the command renders them for GPU_NODES, in ``namespace``."""
    sized = config.with_(gpu_nodes=len(GPU_NODES), gpu_nodes_min=None, gpu_nodes_max=None)
    return chart_objects(dataclasses.replace(WorkloadValues.from_config(sized), namespace=namespace))


def deployed(cluster: KwokCluster, config: TrainingConfig, *, gpus: int = 8) -> None:
    cluster.deploy(config, GPU_NODES, gpus=gpus)


def health_payload(config: TrainingConfig, faulty: frozenset[str] = frozenset()) -> ChartPayload:
    """The health check's real output per node (in-process, computed now, before the command's deadlines start)."""
    payload = ChartPayload(faulty_nodes=faulty)
    payload.warm(objects_for(config).jobs[:1], GPU_NODES)
    return payload


def validate(capsys: pytest.CaptureFixture[str], cluster_flags: list[str], *flags: str) -> tuple[int, str, str]:
    return run_cli(capsys, "validate", *cluster_flags, *flags, *FAST)


def names(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects)


def warmed(config: TrainingConfig, launch: TorchLaunch) -> ChartPayload:
    """Every chart job's real output per pod, computed now (torchrun on CPU), before the command's deadlines start."""
    payload = ChartPayload(launch=launch)
    payload.warm(objects_for(config).jobs, GPU_NODES)
    return payload


def test_a_healthy_cluster_passes_every_stage_and_nothing_is_left(
    eks_cluster, training_operator, torch_launch, capsys
) -> None:
    """The chart's three jobs run in order (a Job, then two PyTorchJobs that the real training operator
    turns into pods), each judged by its payload's verdict; exit 0; all deleted."""
    cluster, flags = eks_cluster
    config = app_config()
    payload = warmed(config, torch_launch)
    deployed(cluster, config)
    with PodRuntime(cluster, payload) as runtime:
        code, out, err = validate(capsys, flags, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["verdict"] == "pass" and report["nodes"] == GPU_NODES
    assert [(s["stage"], s["kind"], s["outcome"]) for s in report["stages"]] == [
        ("health", "Job", "pass"),
        ("allreduce", "PyTorchJob", "pass"),
        ("training", "PyTorchJob", "pass"),
    ]
    health, allreduce, training = report["stages"]
    assert {p["node"] for p in health["pods"]} == set(GPU_NODES)
    assert all(p["verdict"]["verdict"] == "pass" for p in health["pods"])
    assert "2 ranks" in allreduce["detail"]
    assert "resumed from step 2" in training["detail"]  # the injected fault at step 3, the checkpoint at 2
    # The command created exactly the chart's jobs, one after the other; every pod was placed on its own
    # GPU node by the real scheduler; nothing is left.
    assert runtime.jobs == [job["metadata"]["name"] for job in objects_for(config).jobs]
    assert len(runtime.done) == 6
    assert cluster.jobs() == [] and cluster.job_pods() == []
    assert "[1/3] Job validation-1-health" in err and "2/2 running" in err
    assert "[2/3] PyTorchJob validation-2-allreduce" in err


def test_the_table_shows_each_node_and_stage(eks_cluster, training_operator, torch_launch, capsys) -> None:
    """The table has a row per node and a column per stage."""
    cluster, flags = eks_cluster
    config = app_config()
    payload = warmed(config, torch_launch)
    deployed(cluster, config)
    with PodRuntime(cluster, payload):
        code, out, _ = validate(capsys, flags)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["node", "health", "allreduce", "training", "problems"]
    assert lines[1].split() == ["gpu-a", "pass", "pass", "pass"]
    assert lines[-1] == "validation of train: PASS"


def test_hyperpod_mode_runs_the_hyperpod_pytorch_jobs(
    hyperpod_cluster, hyperpod_operator, torch_launch, capsys
) -> None:
    """Stubber (DescribeCluster): with compute=hyperpod the chart's jobs are HyperPodPyTorchJobs; the API
    server accepts them against our schema (strict field validation), they run and pass, and are deleted."""
    cluster, flags = hyperpod_cluster
    config = app_config(compute="hyperpod")
    payload = warmed(config, torch_launch)
    deployed(cluster, config)
    with PodRuntime(cluster, payload) as runtime:
        code, out, err = validate(capsys, flags, "--json")
    assert code == 0, err
    assert [s["kind"] for s in json.loads(out)["stages"]] == ["Job", "HyperPodPyTorchJob", "HyperPodPyTorchJob"]
    assert runtime.jobs == [job["metadata"]["name"] for job in objects_for(config).jobs]
    assert cluster.jobs() == [] and cluster.job_pods() == []


def test_a_faulty_node_fails_the_health_check_and_stops_the_run(eks_cluster, capsys) -> None:
    """One node answers nvidia-smi with 7 GPUs and ECC errors: its pod exits 1 with a failing verdict;
    health fails on it, the rest is skipped; the Job and its pods are gone afterwards."""
    cluster, flags = eks_cluster
    config = app_config()
    deployed(cluster, config)
    with PodRuntime(cluster, health_payload(config, frozenset({"gpu-b"}))) as runtime:
        code, out, err = validate(capsys, flags, "--json")
    assert code == 1, err
    report = json.loads(out)
    health, allreduce, training = report["stages"]
    assert (health["outcome"], allreduce["outcome"], training["outcome"]) == ("fail", "skipped", "skipped")
    assert health["failed_nodes"] == ["gpu-b"] and "gpu_count" in health["detail"]
    # The real scheduler put one pod on each GPU node (anti-affinity), never on the system node.
    assert sorted(p["node"] for p in health["pods"]) == GPU_NODES
    assert sorted(p["exit_code"] for p in health["pods"]) == [0, 1]
    assert len(runtime.done) == 2
    assert "[1/3] Job validation-1-health" in err and f"deleted Job {cluster.namespace}/validation-1-health" in err
    assert cluster.jobs() == [] and cluster.job_pods() == []


def test_the_table_names_the_failing_node(eks_cluster, capsys) -> None:
    """The table: a row per node, the failing checks of the faulty one."""
    cluster, flags = eks_cluster
    config = app_config()
    deployed(cluster, config)
    with PodRuntime(cluster, health_payload(config, frozenset({"gpu-b"}))):
        code, out, _ = validate(capsys, flags)
    assert code == 1
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:3]}
    assert rows["gpu-a"][1:4] == ["pass", "skipped", "skipped"]
    assert rows["gpu-b"][1:4] == ["fail", "skipped", "skipped"]
    assert "gpu_count" in rows["gpu-b"][4]
    assert out.splitlines()[-1] == "validation of train: FAIL"


def test_no_gpu_node_is_a_clear_error_and_starts_nothing(eks_cluster, capsys) -> None:
    """A system node and a GPU node that is not Ready: exit 1 before anything is created."""
    cluster, flags = eks_cluster
    cluster.add_node("system-1", gpus=0, role="system")
    cluster.add_node("gpu-a", ready=False)
    code, out, err = validate(capsys, flags)
    assert code == 1 and not out
    assert "no schedulable GPU node" in err and "1 GPU node(s), none that the jobs may use" in err
    assert cluster.jobs() == []


def test_a_job_that_never_starts_names_the_likely_cause(eks_cluster, capsys) -> None:
    """GPU nodes without allocatable GPUs (no device plugin): the real scheduler leaves the pods Pending,
    and its FailedScheduling event names the cause."""
    cluster, flags = eks_cluster
    deployed(cluster, app_config(), gpus=0)
    code, out, _ = validate(capsys, flags, "--start-timeout", "3", "--json")
    assert code == 1
    health = json.loads(out)["stages"][0]
    assert health["outcome"] == "not-started"
    assert "NVIDIA device plugin is not running" in health["detail"]
    assert "Insufficient nvidia.com/gpu" in health["detail"]  # the scheduler's own words
    assert cluster.jobs() == [] and cluster.job_pods() == []


def test_a_job_kueue_holds_names_kueues_reason(eks_cluster, capsys) -> None:
    """The real Kueue admits a job whole or not at all: with 8 GPUs of quota behind the namespace's queue, the
    health check (8 GPUs on each of 2 nodes) gets no pod, and the stage names Kueue's own reason."""
    from shared_plane import QUEUED_RESOURCES, TESTS_QUEUE, UNLIMITED

    from llm_infra.queueing import DEFAULT_LOCAL_QUEUE, KUEUE_API_VERSION

    cluster, flags = eks_cluster
    if "kueue" not in cluster.plane.running:
        pytest.skip("Kueue does not run on this control plane (make k8s could not build it)")
    deployed(cluster, app_config())
    tight = f"eight-gpus-{cluster.namespace}"
    quotas = [
        {"name": r, "nominalQuota": "8" if r == "nvidia.com/gpu" else UNLIMITED.get(r, "1000")}
        for r in QUEUED_RESOURCES
    ]
    resources = [{"coveredResources": list(QUEUED_RESOURCES), "flavors": [{"name": TESTS_QUEUE, "resources": quotas}]}]
    cluster.kube.apply(
        {
            "apiVersion": KUEUE_API_VERSION,
            "kind": "ClusterQueue",
            "metadata": {"name": tight},
            "spec": {"namespaceSelector": {}, "resourceGroups": resources},
        }
    )
    try:
        # A LocalQueue's ClusterQueue cannot change: the namespace's default queue is made again on the tight one.
        cluster.kube.delete(KUEUE_API_VERSION, "LocalQueue", DEFAULT_LOCAL_QUEUE, cluster.namespace)
        cluster.wait_for(
            "the default LocalQueue deleted",
            lambda: cluster.kube.get(KUEUE_API_VERSION, "LocalQueue", DEFAULT_LOCAL_QUEUE, cluster.namespace) is None,
        )
        local = {"name": DEFAULT_LOCAL_QUEUE, "namespace": cluster.namespace}
        cluster.kube.apply(
            {"apiVersion": KUEUE_API_VERSION, "kind": "LocalQueue", "metadata": local, "spec": {"clusterQueue": tight}}
        )
        code, out, _ = validate(capsys, flags, "--start-timeout", "3", "--json")
    finally:
        cluster.kube.delete(KUEUE_API_VERSION, "LocalQueue", DEFAULT_LOCAL_QUEUE, cluster.namespace)
        cluster.kube.delete(KUEUE_API_VERSION, "ClusterQueue", tight, None)
    assert code == 1
    health = json.loads(out)["stages"][0]
    assert health["outcome"] == "not-started", health
    assert health["detail"].startswith("did not start: Kueue has not admitted the job, so it made no pod: "), health
    assert "insufficient quota for nvidia.com/gpu" in health["detail"] and "(8)" in health["detail"], health
    assert cluster.jobs() == [] and cluster.job_pods() == []


def test_missing_platform_objects_are_named(eks_cluster, capsys) -> None:
    """Without the base chart (no cdk deploy yet): the missing objects are named, nothing is created."""
    cluster, flags = eks_cluster
    cluster.add_node("gpu-a")
    absent = f"{cluster.namespace}-none"  # a namespace nothing creates (the last --namespace wins)
    code, _, err = validate(capsys, flags, "--namespace", absent)
    assert code == 1
    assert f"Namespace {absent}, ServiceAccount {absent}/training, ConfigMap {absent}/llm-infra-workloads" in err
    assert f"PersistentVolumeClaim {absent}/fsx-data" in err
    assert cluster.kube.get("v1", "Namespace", absent) is None and cluster.jobs() == []


def test_apply_base_applies_the_base_and_fsx_charts_server_side(tmp_path, eks_cluster, capsys) -> None:
    """--apply-base: the base and FSx charts' objects (the FSx ids from the outputs file) are applied by
    the real server (server-side apply, its own validation); a job that cannot start then ends the run."""
    cluster, flags = eks_cluster
    app = tmp_path / "app"
    app.mkdir()
    (app / "cdk.json").write_text((REPO_ROOT / "cdk.json").read_text())
    outputs = {
        "FileSystemId": "fs-0123456789abcdef0",
        "FileSystemDnsName": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        "FileSystemMountName": "abcdefgh",
    }
    (app / "cdk-outputs.json").write_text(json.dumps({"llm-infra-storage": outputs}))
    cluster.add_node("gpu-a", gpus=0)  # no device plugin: the job cannot start
    code, out, err = run_cli(
        capsys,
        "validate",
        *flags,
        "--apply-base",
        "--start-timeout",
        "2",
        "--poll-seconds",
        "0.05",
        "--app-dir",
        str(app),
    )
    namespace = cluster.namespace
    assert code == 1 and f"applied PersistentVolume fsx-data-{namespace}" in err
    for applied in (
        f"Namespace {namespace}",
        f"ServiceAccount {namespace}/training",
        f"ServiceAccount {namespace}/data-prep",
        f"ConfigMap {namespace}/llm-infra-workloads",
        f"PersistentVolumeClaim {namespace}/fsx-data",
    ):
        assert f"applied {applied}" in err
    volume = cluster.kube.get("v1", "PersistentVolume", f"fsx-data-{namespace}")
    assert volume is not None and volume["spec"]["csi"]["volumeHandle"] == outputs["FileSystemId"]
    managers = {m["manager"] for m in volume["metadata"]["managedFields"]}
    assert "llm-infra" in managers  # the server-side apply's field manager
    assert "did not start" in out
    assert cluster.jobs() == [] and cluster.job_pods() == []


def test_a_payload_file_that_differs_in_any_of_its_configmaps_is_named(eks_cluster, capsys) -> None:
    """The payload spans several ConfigMaps (llm_infra/k8s_manifests/payload.py): a file changed in the last
    one is named in the warning (an earlier run's job then stops the command before it starts anything)."""
    cluster, flags = eks_cluster
    config = app_config()
    deployed(cluster, config)
    name, files = list(payload_configmaps(payload_files()).items())[-1]
    changed = sorted(files)[0]
    cluster.kube.patch("v1", "ConfigMap", name, {"data": {changed: "# edited on the cluster\n"}}, cluster.namespace)
    cluster.kube.create(objects_for(config, cluster.namespace).jobs[0])
    code, _, err = validate(capsys, flags)
    assert code == 1
    assert f"warning: the cluster's payload differs from this checkout's ({changed})" in err


def test_jobs_left_from_an_earlier_run_are_not_touched(eks_cluster, capsys) -> None:
    """A validation job already there is named and left alone (--replace-existing deletes it)."""
    cluster, flags = eks_cluster
    config = app_config()
    deployed(cluster, config)
    earlier = objects_for(config, cluster.namespace).jobs[0]
    cluster.kube.create(earlier)
    code, _, err = validate(capsys, flags)
    assert code == 1 and f"Job {cluster.namespace}/validation-1-health already exist" in err
    assert "--replace-existing" in err
    before = cluster.jobs()
    assert names(before) == ["validation-1-health"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_deletes_what_the_run_created(eks_cluster, capsys, signum) -> None:
    """Ctrl-C (or SIGTERM) while the job runs: the job and its pods are gone before the command exits 130."""
    cluster, flags = eks_cluster
    deployed(cluster, app_config())
    sent: list[int] = []
    with signal_when(cluster, signum, sent):  # no runtime: the pods run until deleted
        code, _, err = validate(capsys, flags)
    assert sent and code == 130 and f"deleted Job {cluster.namespace}/validation-1-health" in err
    assert cluster.jobs() == [] and cluster.job_pods() == []


@pytest.mark.parametrize(("answer", "labelled"), [("y", True), ("n", False)])
def test_replace_failed_labels_failing_hyperpod_nodes_after_asking(
    hyperpod_cluster, capsys, monkeypatch, answer, labelled
) -> None:
    """HyperPod mode: the node failing its health check gets the documented node-health label for
    replacement, only after a yes; the other keeps its label."""
    cluster, flags = hyperpod_cluster
    config = app_config(compute="hyperpod")
    monkeypatch.setattr("builtins.input", lambda: answer)
    deployed(cluster, config)
    with PodRuntime(cluster, health_payload(config, frozenset({"gpu-a"}))):
        code, out, err = validate(capsys, flags, "--replace-failed")
    assert code == 1, err
    assert "label 1 node(s) for HyperPod replacement: gpu-a?" in err

    def label(node: str) -> str | None:
        found = cluster.kube.get("v1", "Node", node)
        assert found is not None
        return (found["metadata"].get("labels") or {}).get(HEALTH_STATUS_KEY)

    assert label("gpu-a") == ("UnschedulablePendingReplacement" if labelled else "Schedulable")
    assert label("gpu-b") == "Schedulable"
    assert ("labelled for replacement: gpu-a" in out) is labelled
    assert cluster.jobs() == [] and cluster.job_pods() == []
