"""``llm-infra rehearse`` (issue 22) on the real control plane: the default app's deploy, both compute modes,
runs every pod; a user's pod that cannot fit stays Pending with kube-scheduler's reason and fails the run.

Each rehearsal starts a control plane of its own (the command does: that is what is under test), so these
do not share the session's. The rehearsals skip when ``make k8s`` has not built the control plane
(``k8s_binaries``); bad input is checked without it, on the session's default app.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from conftest import REPO_ROOT, Synthesized, hyperpod_config, run_cli
from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.render import write_dist
from llm_infra.queueing import QUEUE_LABEL
from llm_infra.rehearsal import control_plane
from llm_infra.rehearsal.rehearse import node_object, plan
from llm_infra.rehearsal.whole_node_jobs import batch_job

NINE_GPUS = """
apiVersion: v1
kind: Pod
metadata: {name: wants-nine-gpus, namespace: training}
spec:
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  containers:
  - name: main
    image: example.invalid/train:1
    resources: {limits: {nvidia.com/gpu: 9}}
"""
# The derived HyperPodPyTorchJob CRD closes its objects: the API server's strict field validation refuses this.
UNKNOWN_FIELD_JOB = """
apiVersion: sagemaker.amazonaws.com/v1
kind: HyperPodPyTorchJob
metadata: {name: typo, namespace: training}
spec:
  replicaSpecs: [{name: pods, replicas: 1, replica: 2}]
"""


def app_flags(app: Synthesized, config: TrainingConfig) -> list[str]:
    """``--cdk-out``/``--manifests`` flags for ``app``, synthesized for ``config``, its manifests rendered."""
    dist = app.outdir / "dist"
    if not dist.is_dir():
        write_dist(config, dist)
    return ["--app-dir", str(REPO_ROOT), "--cdk-out", str(app.outdir), "--manifests", str(dist)]


def test_a_pod_that_cannot_fit_is_pending_with_the_schedulers_reason(
    rehearsal_binaries, default_app, capsys, tmp_path: Path
) -> None:
    (tmp_path / "big.yaml").write_text(NINE_GPUS)
    (tmp_path / "typo.yaml").write_text(UNKNOWN_FIELD_JOB)
    flags = [
        *app_flags(default_app, TrainingConfig()),
        "--apply",
        str(tmp_path / "big.yaml"),
        "--apply",
        str(tmp_path / "typo.yaml"),
    ]
    code, out, err = run_cli(capsys, "rehearse", *flags, "--output", "json")
    assert code == 1, err
    report = json.loads(out)
    assert set(report) >= {"pods", "nodes", "unhandled", "refused", "warnings", "passed", "modelled_from_pinned_charts"}
    assert "EKS add-on coredns v1.12.4-eksbuild.1" in report["modelled_from_pinned_charts"]
    assert all(set(pod) >= {"namespace", "name", "node", "phase", "reason"} for pod in report["pods"])
    (big,) = [p for p in report["pods"] if p["name"] == "wants-nine-gpus"]
    assert big["phase"] == "Pending" and not big["node"]
    assert "0/4 nodes are available" in big["reason"] and "Insufficient nvidia.com/gpu" in big["reason"]
    # Everything else, the default app's deploy and its jobs, runs.
    others = [p for p in report["pods"] if p is not big]
    assert others and all(p["phase"] in ("Running", "Succeeded") and p["node"] for p in others), others
    assert not report["passed"]
    (typo,) = report["refused"]
    assert typo["kind"] == "HyperPodPyTorchJob"
    assert typo["reason"].endswith(".spec.replicaSpecs[0].replica: field not declared in schema"), typo

    # The GPU nodes: 8 GPUs and 32 EFA devices advertised where the device plugins run, tainted.
    gpu_nodes = [n for n in report["nodes"] if n["instance_type"] == "p5.48xlarge"]
    assert len(gpu_nodes) == 2
    for node in gpu_nodes:
        assert node["allocatable"]["nvidia.com/gpu"] == "8" and node["allocatable"]["vpc.amazonaws.com/efa"] == "32"
        assert node["allocatable"]["hugepages-2Mi"] == "10Gi" and "nvidia.com/gpu=true:NoSchedule" in node["taints"]
    plugins = [
        p for p in report["pods"] if p["name"].startswith(("nvidia-device-plugin-", "aws-efa-k8s-device-plugin-"))
    ]
    assert sorted(p["node"] for p in plugins) == sorted(2 * [n["name"] for n in gpu_nodes])
    # The PyTorchJobs' workers land on the GPU nodes, when the training operator runs here.
    workers = [p for p in report["pods"] if "-worker-" in p["name"]]
    if "training-operator" in report["control_plane"]["components"]:
        assert workers and {p["node"] for p in workers} == {n["name"] for n in gpu_nodes}
        # ... and the operator takes our PyTorchJobs as they are (it warned about a template restartPolicy once).
        assert not [w for w in report["warnings"] if w["kind"] == "PyTorchJob"], report["warnings"]
    else:
        assert not workers and {u["kind"] for u in report["unhandled"]} == {"PyTorchJob"}


def test_the_hyperpod_app_rehearses_its_jobs_through_task_governances_queue_and_lists_the_rest(
    rehearsal_binaries, synth, capsys, tmp_path: Path
) -> None:
    config = hyperpod_config()
    namespace, queue = config.jobs_namespace, {QUEUE_LABEL: f"{config.jobs_namespace}-localqueue"}
    three = batch_job("three-nodes", namespace, 3, queue)  # the team's quota is the app's two nodes
    hugepages = batch_job("hugepages", namespace, 1, queue, {"hugepages-2Mi": "10Gi", "memory": "640Gi"})
    (tmp_path / "three.yaml").write_text(yaml.safe_dump(three))
    (tmp_path / "hugepages.yaml").write_text(yaml.safe_dump(hugepages))
    flags = [*app_flags(synth(config), config), "-c", "compute=hyperpod"]
    flags += ["--apply", str(tmp_path / "three.yaml"), "--apply", str(tmp_path / "hugepages.yaml")]
    code, out, err = run_cli(capsys, "rehearse", *flags, "--output", "json")
    report = json.loads(out)

    unhandled = {u["name"]: u for u in report["unhandled"] if u["kind"] == "HyperPodPyTorchJob"}
    assert set(unhandled) == {"train", "validation-2-allreduce", "validation-3-training", "llama2-7b"}
    assert all(u["namespace"] == config.jobs_namespace for u in unhandled.values())  # the team's namespace
    assert all("the HyperPod training operator is closed source" in u["reason"] for u in unhandled.values())
    assert {n["instance_type"] for n in report["nodes"]} >= {"ml.p5.48xlarge"}
    big = [p for p in report["pods"] if p["name"].startswith(("three-nodes", "hugepages"))]
    others = [p for p in report["pods"] if p not in big]
    assert others and all(p["phase"] in ("Running", "Succeeded") for p in others), others
    if "kueue" not in report["control_plane"]["components"]:  # no stand-in: the scheduler holds the third pod
        assert code == 1 and any(p["phase"] == "Pending" for p in big), err
        return
    # The real Kueue stands in for task governance's: the app's batch Jobs (health check, data preparation),
    # whose pods request only what AWS's ClusterQueue covers (no hugepages), are admitted through the team's
    # queue; a job bigger than the team's two nodes, or one asking for hugepages (which AWS's ClusterQueue does not
    # cover), is admitted as nothing, with Kueue's reason, and fails the run.
    jobs = {job["name"]: job for job in report["jobs"]}
    hugepages = jobs.pop("hugepages")["reason"]
    assert hugepages == "couldn't assign flavors to pod set main: resource hugepages-2Mi unavailable in ClusterQueue"
    reason = jobs.pop("three-nodes")["reason"]
    assert reason.startswith("couldn't assign flavors to pod set main: insufficient quota for "), reason
    assert "in flavor ml.p5.48xlarge" in reason and "> maximum capacity" in reason, reason
    assert jobs and all(job["admitted"] for job in jobs.values()), jobs
    assert set(jobs) == {"validation-1-health", "llama2-7b-data-prep"}
    assert not big and code == 1 and not report["passed"]


def test_bad_input_is_one_line_and_exit_2(default_app, capsys, tmp_path: Path) -> None:
    flags = app_flags(default_app, TrainingConfig())
    code, out, err = run_cli(capsys, "rehearse", *flags, "--apply", str(tmp_path / "absent.yaml"))
    assert (code, out) == (2, "")
    assert err == (
        f"llm-infra: error: --apply {tmp_path / 'absent.yaml'}: no such file; pass a YAML file of Kubernetes "
        "objects, as kubectl apply -f takes\n"
    )

    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    code, _, err = run_cli(capsys, "rehearse", *flags, "--apply", str(tmp_path / "list.yaml"))
    assert code == 2 and "every document must be a Kubernetes object" in err and err.count("\n") == 1

    code, _, err = run_cli(capsys, "rehearse", *flags, "-c", "compute=hyperpod")
    assert code == 2 and "holds compute=eks templates, the config says hyperpod" in err

    # A size the templates were not synthesized for (issue 31: it once rehearsed the 2-node templates silently).
    code, _, err = run_cli(capsys, "rehearse", *flags, "-c", "gpu_nodes=256")
    assert code == 2 and "creates 2 GPU nodes, the config says gpu_nodes=256: synthesize with the same" in err


def test_without_the_binaries_it_says_make_k8s(default_app, capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(control_plane.BIN_DIR_VARIABLE, str(tmp_path))
    code, out, err = run_cli(capsys, "rehearse", *app_flags(default_app, TrainingConfig()), "--skip-app-jobs")
    assert (code, out) == (1, "")
    assert err.startswith("llm-infra: error: the control plane is not built (etcd, kube-apiserver,")
    assert "run `make k8s`" in err and err.count("\n") == 1


def test_nodes_per_group_caps_each_group_and_says_so(default_app) -> None:
    app = default_app
    dist = app.outdir / "dist"
    if not dist.is_dir():
        write_dist(TrainingConfig(), dist)
    full = plan(TrainingConfig(), app.outdir, dist)
    assert len(full.nodes) == 4 and not full.notes
    capped = plan(TrainingConfig(), app.outdir, dist, nodes_per_group=1)
    assert sorted(n.group for n in capped.nodes) == sorted({n.group for n in full.nodes})
    assert len(capped.notes) == 2 and all("2 nodes in the template, 1 rehearsed" in note for note in capped.notes)

    (gpu,) = [node_object(n) for n in capped.nodes if n.gpus]
    assert gpu["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert gpu["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert gpu["status"]["capacity"] == {
        "cpu": "192000m",
        "memory": "2097152Mi",
        "hugepages-2Mi": "10240Mi",
        "pods": "110",
    }
    assert "nvidia.com/gpu" not in gpu["status"]["allocatable"]  # the device plugin advertises it


def test_skip_app_jobs_deploys_the_manifests_objects_and_runs_only_the_users_files(default_app, tmp_path: Path) -> None:
    dist = default_app.outdir / "dist"
    if not dist.is_dir():
        write_dist(TrainingConfig(), dist)
    (tmp_path / "big.yaml").write_text(NINE_GPUS)
    full = plan(TrainingConfig(), default_app.outdir, dist, [tmp_path / "big.yaml"])
    skipped = plan(TrainingConfig(), default_app.outdir, dist, [tmp_path / "big.yaml"], app_jobs=False)

    deploy, *jobs, users = full.steps
    assert len(jobs) >= 5 and all(step.remove_after for step in jobs)
    assert [s.name for s in skipped.steps] == [deploy.name, users.name]  # the app's jobs are not run ...
    assert [a.ref for a in skipped.steps[0].objects] == [a.ref for a in deploy.objects]  # ... the rest deployed
    assert any(a.origin.startswith("dist/") for a in deploy.objects)  # dist/ has objects other than jobs
    (note,) = skipped.notes
    assert note.startswith(f"dist/: its objects deployed, its {len(jobs)} jobs not run, as asked: ")
    assert all(a.ref in note for step in jobs for a in step.objects)
