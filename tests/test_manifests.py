"""The cdk8s charts: validated against Kubernetes' and the operators' real schemas, and what users rely on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cluster_model import pod_templates
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from conftest import RAY_TEST_IMAGE, hyperpod_config
from llm_infra.cli.synth_summary import manifests_summary
from llm_infra.config import ConfigError, TrainingConfig
from llm_infra.k8s_manifests.dlc import dlc_image_uri
from llm_infra.k8s_manifests.payload import (
    ANNOTATIONS_LIMIT,
    CONFIGMAP_BUDGET,
    WORKLOADS_DIR,
    payload_configmaps,
    payload_files,
)
from llm_infra.k8s_manifests.pod_spec import TORCHRUN_TEARDOWN_SECONDS
from llm_infra.k8s_manifests.render import write_dist
from llm_infra.k8s_manifests.values import WorkloadValues
from manifest_validation import load_documents, validate_object

OUTPUTS = {
    "llm-infra-storage": {
        "FileSystemId": "fs-0123456789abcdef0",
        "FileSystemDnsName": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        "FileSystemMountName": "abcdefgh",
    }
}
# Every chart of the default config with a Ray image (the recipe's two files: recipe=llama2-7b).
CHARTS = [
    "base",
    "fsx-storage",
    "kuberay",
    "node-monitoring",
    "validation",
    "training-job",
    "llama2-7b-1-data-prep",
    "llama2-7b-2-train",
]
KUBERNETES_VERSION = TrainingConfig().kubernetes_version  # the cluster's version: what kubectl validates against
OBSOLETE_NCCL_ENV = {
    "FI_EFA_USE_DEVICE_RDMA",
    "NCCL_PROTO",
    "NCCL_ALGO",
    "FI_EFA_FORK_SAFE",
    "NCCL_ASYNC_ERROR_HANDLING",
}


def render(tmp_path: Path, config: TrainingConfig) -> dict[str, list[dict]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    outputs = tmp_path / "cdk-outputs.json"
    outputs.write_text(json.dumps(OUTPUTS))
    files = write_dist(config, tmp_path / "dist", outputs_file=outputs)
    return {f.name.removesuffix(".k8s.yaml"): load_documents(f) for f in files}


@pytest.fixture(scope="module")
def eks(tmp_path_factory) -> dict[str, list[dict]]:
    return render(tmp_path_factory.mktemp("eks"), TrainingConfig(ray_image=RAY_TEST_IMAGE))


@pytest.fixture(scope="module")
def hyperpod(tmp_path_factory) -> dict[str, list[dict]]:
    return render(tmp_path_factory.mktemp("hyperpod"), hyperpod_config(ray_image=RAY_TEST_IMAGE))


def by_kind(charts: dict[str, list[dict]], kind: str, name: str | None = None) -> dict:
    found = [
        d
        for docs in charts.values()
        for d in docs
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def pod_spec(obj: dict) -> dict:
    if obj["kind"] == "PyTorchJob":
        return obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    if obj["kind"] == "HyperPodPyTorchJob":
        (replicas,) = obj["spec"]["replicaSpecs"]
        return replicas["template"]["spec"]
    if obj["kind"] == "Job":
        return obj["spec"]["template"]["spec"]
    raise AssertionError(obj["kind"])


# ---- validation against the real schemas ------------------------------------------------------
@pytest.mark.parametrize("mode", ["eks", "hyperpod"])
def test_every_manifest_passes_its_schema(request, mode: str) -> None:
    charts = request.getfixturevalue(mode)
    # Our Kueue's queue objects on plain EKS (task governance's are AWS's); validated in tests/test_queueing.py.
    assert set(charts) == set(CHARTS) | ({"kueue-queues"} if mode == "eks" else set())
    checked = {}
    for name, docs in charts.items():
        for doc in docs:
            if doc["apiVersion"].startswith("kueue.x-k8s.io/"):
                continue
            checked[f"{name}/{doc['kind']}/{doc['metadata']['name']}"] = validate_object(doc, KUBERNETES_VERSION)
    kinds = {key.split("/")[1] for key in checked}
    assert {"RayJob", "Job", "PersistentVolume", "ConfigMap"} <= kinds
    # The always-on RayCluster and Redis (with its NetworkPolicy) on EKS; not under HyperPod's task governance,
    # where they could not run.
    assert ("RayCluster" in kinds) is ("NetworkPolicy" in kinds) is (mode == "eks")
    if mode == "eks":
        assert checked["training-job/PyTorchJob/train"] == "crd:kubeflow.org_pytorchjobs.yaml"
    else:  # the HyperPod training operator's job, on by default with compute=hyperpod
        assert checked["training-job/HyperPodPyTorchJob/train"] == "schema:hyperpodpytorchjob.schema.json"
        assert "PyTorchJob" not in kinds


def test_the_crd_validation_catches_mistakes(eks) -> None:
    job = json.loads(json.dumps(by_kind(eks, "PyTorchJob", "train")))
    job["spec"]["elasticPolicy"]["maxRestarts"] = "three"
    with pytest.raises(AssertionError, match="'three' is not of type 'integer'"):
        validate_object(job, KUBERNETES_VERSION)
    cluster = json.loads(json.dumps(by_kind(eks, "RayCluster")))
    cluster["spec"]["workerGroupSpecs"][0]["maxReplica"] = 4  # typo of maxReplicas
    with pytest.raises(AssertionError, match="Additional properties are not allowed"):
        validate_object(cluster, KUBERNETES_VERSION)


def test_no_unresolved_tokens_or_resolver_errors(tmp_path: Path, eks) -> None:
    text = yaml.safe_dump_all([d for docs in eks.values() for d in docs])
    assert "${Token[" not in text and "Failed fetching" not in text


def test_without_deploy_outputs_the_fsx_volume_is_left_out(tmp_path: Path) -> None:
    files = write_dist(TrainingConfig(ray_image=RAY_TEST_IMAGE), tmp_path, outputs_file=tmp_path / "missing.json")
    assert {f.name for f in files} == {
        "base.k8s.yaml",
        "kuberay.k8s.yaml",
        "kueue-queues.k8s.yaml",
        "node-monitoring.k8s.yaml",
        "validation.k8s.yaml",
        "training-job.k8s.yaml",
        "llama2-7b-1-data-prep.k8s.yaml",
        "llama2-7b-2-train.k8s.yaml",
    }


# ---- what the training job must carry --------------------------------------------------------------
def test_training_job_takes_whole_p5_nodes(eks) -> None:
    job = by_kind(eks, "PyTorchJob", "train")
    spec = pod_spec(job)
    (container,) = spec["containers"]
    assert container["name"] == "pytorch"
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 8 and limits["vpc.amazonaws.com/efa"] == 32
    assert limits["hugepages-2Mi"] == "10240Mi"
    assert container["resources"]["requests"] == limits
    assert (
        container["image"]
        == "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-ec2"
    )
    assert container["command"][:3] == ["torchrun", "--nproc-per-node=8", "/workloads/train.py"]
    assert "--checkpoint-dir=/fsx/checkpoints/train" in container["command"]
    assert job["spec"]["elasticPolicy"] == {
        "rdzvBackend": "c10d",
        "rdzvPort": 29400,
        "minReplicas": 2,
        "maxReplicas": 2,
        "maxRestarts": 3,
    }
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
    assert volumes["fsx"]["persistentVolumeClaim"]["claimName"] == "fsx-data"
    sources = volumes["workloads"]["projected"]["sources"]
    assert [s["configMap"]["name"] for s in sources] == list(payload_configmaps(payload_files()))
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/dev/shm", "/fsx", "/workloads"}
    assert spec["serviceAccountName"] == "training"


def test_nccl_environment_is_minimal_and_current(eks) -> None:
    env = {e["name"]: e["value"] for e in pod_spec(by_kind(eks, "PyTorchJob", "train"))["containers"][0]["env"]}
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert env["NCCL_DEBUG"] == "WARN"
    assert env["FI_PROVIDER"] == "efa"
    assert not OBSOLETE_NCCL_ENV & set(env)


def test_the_kubelet_waits_for_torchruns_shutdown_budget(eks) -> None:
    # SIGTERM reaches torchrun (PID 1); it SIGKILLs the workers after its shutdown timeout, then tears
    # itself down; the kubelet's SIGKILL comes terminationGracePeriodSeconds after SIGTERM. On the DLC's
    # torch 2.8 that timeout is a fixed 30 s (PContext.close(timeout=30)): TORCH_ELASTIC_SHUTDOWN_TIMEOUT is
    # read from torch 2.13 on, so the pods say 30 s, not the 300 s they cannot have.
    for name in ("train", "validation-2-allreduce", "validation-3-training", "llama2-7b"):
        spec = pod_spec(by_kind(eks, "PyTorchJob", name))
        env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
        assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == str(WorkloadValues.shutdown_budget_seconds)
        assert spec["terminationGracePeriodSeconds"] == 30 + TORCHRUN_TEARDOWN_SECONDS
        assert spec["containers"][0]["command"][0] == "torchrun"  # the process the kubelet signals


def test_a_torch_that_reads_the_shutdown_timeout_gets_the_whole_budget() -> None:
    newer = WorkloadValues.from_config(TrainingConfig(dlc_image_tag="2.13.0-gpu-py312-cu130-ubuntu24.04-ec2"))
    assert newer.torchrun_shutdown_seconds == newer.shutdown_budget_seconds == 300
    dlc = WorkloadValues.from_config(TrainingConfig())
    assert (dlc.torch_version, dlc.torchrun_shutdown_seconds) == ((2, 8), 30)


def test_affinity_gpu_nodes_and_away_from_unhealthy_ones(eks) -> None:
    affinity = pod_spec(by_kind(eks, "PyTorchJob", "train"))["affinity"]
    (term,) = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    expressions = {e["key"]: e for e in term["matchExpressions"]}
    assert expressions["llm-infra.aws/node-role"] == {
        "key": "llm-infra.aws/node-role",
        "operator": "In",
        "values": ["gpu"],
    }
    health = expressions["sagemaker.amazonaws.com/node-health-status"]
    assert health["operator"] == "NotIn" and "Schedulable" not in health["values"]
    assert "UnschedulablePendingReplacement" in health["values"]
    anti = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"


def test_hyperpod_pytorchjobs_carry_the_auto_resume_annotations(tmp_path: Path, eks, hyperpod) -> None:
    # HyperPod with hyperpod_training_operator=false keeps Kubeflow PyTorchJobs, resumed by HyperPod's
    # job-auto-resume; the operator's own job retries through runPolicy instead.
    kubeflow = render(tmp_path, hyperpod_config(hyperpod_training_operator=False))
    annotations = by_kind(kubeflow, "PyTorchJob", "train")["metadata"]["annotations"]
    assert annotations == {
        "sagemaker.amazonaws.com/enable-job-auto-resume": "true",
        "sagemaker.amazonaws.com/job-max-retry-count": "3",
    }
    assert "annotations" not in by_kind(eks, "PyTorchJob", "train")["metadata"]
    assert "annotations" not in by_kind(hyperpod, "HyperPodPyTorchJob", "train")["metadata"]


def test_efa_count_comes_from_the_instance_profile(tmp_path: Path) -> None:
    charts = render(tmp_path, TrainingConfig(gpu_instance_type="p4d.24xlarge"))
    limits = pod_spec(by_kind(charts, "PyTorchJob", "train"))["containers"][0]["resources"]["limits"]
    assert limits["vpc.amazonaws.com/efa"] == 4
    no_efa = render(tmp_path / "g5", TrainingConfig(gpu_instance_type="g5.2xlarge"))
    container = pod_spec(by_kind(no_efa, "PyTorchJob", "train"))["containers"][0]
    assert "vpc.amazonaws.com/efa" not in container["resources"]["limits"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "FI_PROVIDER" not in {e["name"] for e in container["env"]}


# ---- storage, payload, validation, Ray -------------------------------------------------------------
def test_fsx_static_volume_and_claim(eks) -> None:
    pv = by_kind(eks, "PersistentVolume")
    assert pv["spec"]["csi"] == {
        "driver": "fsx.csi.aws.com",
        "volumeHandle": "fs-0123456789abcdef0",
        "volumeAttributes": {"dnsname": OUTPUTS["llm-infra-storage"]["FileSystemDnsName"], "mountname": "abcdefgh"},
    }
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    pvc = by_kind(eks, "PersistentVolumeClaim")
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"] and pvc["spec"]["storageClassName"] == ""
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1200Gi"


def test_the_payload_configmaps_together_equal_the_workloads_folder(eks) -> None:
    names = list(payload_configmaps(payload_files()))
    maps = [by_kind(eks, "ConfigMap", name) for name in names]
    data = {key: value for m in maps for key, value in m["data"].items()}
    on_disk = {p.name: p.read_text() for p in WORKLOADS_DIR.iterdir() if p.suffix == ".py"}
    assert data == on_disk == payload_files()
    # Each fits kubectl apply's last-applied-configuration annotation (the API server caps annotations at 256 KiB).
    for m in maps:
        assert len(json.dumps(m, separators=(",", ":"))) < ANNOTATIONS_LIMIT - 10_000, m["metadata"]["name"]
    assert {
        "train.py",
        "health_check.py",
        "allreduce_bench.py",
        "ray_train.py",
        "checkpointing.py",
        "model.py",
        "throughput.py",
        "xid_monitor.py",
    } <= set(data)


def test_the_payload_is_packed_in_name_order_under_the_budget() -> None:
    third = "x" * (CONFIGMAP_BUDGET // 3)
    packed = payload_configmaps({"d.py": third, "a.py": third, "c.py": third, "b.py": "print()"})
    assert {name: sorted(data) for name, data in packed.items()} == {
        "llm-infra-workloads": ["a.py", "b.py", "c.py"],
        "llm-infra-workloads-2": ["d.py"],
    }
    with pytest.raises(ValueError, match=r"workloads/big.py: .* over the 200000 a payload ConfigMap may hold"):
        payload_configmaps({"big.py": "x" * CONFIGMAP_BUDGET})


def test_validation_suite(eks) -> None:
    health = by_kind(eks, "Job", "validation-1-health")
    assert health["spec"]["completionMode"] == "Indexed"
    assert health["spec"]["completions"] == health["spec"]["parallelism"] == 2
    command = pod_spec(health)["containers"][0]["command"]
    assert command[:2] == ["python3", "/workloads/health_check.py"]
    assert "--expected-gpus=8" in command and "--expected-efa=32" in command and "--gpu-name=H100" in command
    assert pod_spec(health)["affinity"]["podAntiAffinity"]  # one pod per node
    # The Xid check reads the node's kernel log and fails closed without it; DCGM is on by default.
    assert "--kmsg=/dev/kmsg" in command and "--dcgm-diag-level=1" in command
    health_pod = pod_spec(health)
    assert health_pod["containers"][0]["securityContext"] == {"privileged": True}
    assert {"name": "kmsg", "hostPath": {"path": "/dev/kmsg", "type": "CharDevice"}} in health_pod["volumes"]
    # The node's last health pass outlives the pod: Xids before it are not judged again.
    state = "/var/lib/llm-infra/health"
    assert f"--state-dir={state}" in command
    assert {"name": "health-state", "hostPath": {"path": state, "type": "DirectoryOrCreate"}} in health_pod["volumes"]
    assert {"name": "health-state", "mountPath": state} in health_pod["containers"][0]["volumeMounts"]
    allreduce = pod_spec(by_kind(eks, "PyTorchJob", "validation-2-allreduce"))["containers"][0]["command"]
    assert "/workloads/allreduce_bench.py" in allreduce and "--min-busbw-gbps=375" in allreduce
    assert "--sizes=8M,64M,512M,2G" in allreduce
    assert "--expect-efa-transport" in allreduce  # two nodes over EFA: no socket fallback may pass
    training_job = by_kind(eks, "PyTorchJob", "validation-3-training")
    training = pod_spec(training_job)["containers"][0]["command"]
    # A failed verdict is final: the operator retries a pod only when a signal ended it (a lost node).
    assert training_job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "ExitCode"
    assert by_kind(eks, "PyTorchJob", "train")["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"
    assert {"--preset=tiny", "--verdict", "--fail-at-step=30"} <= set(training)


def test_one_node_gates_on_nvlink_bandwidth_without_an_efa_transport(tmp_path: Path) -> None:
    charts = render(tmp_path, TrainingConfig(gpu_nodes=1))
    allreduce = pod_spec(by_kind(charts, "PyTorchJob", "validation-2-allreduce"))["containers"][0]["command"]
    assert "--min-busbw-gbps=400" in allreduce and "--expect-efa-transport" not in allreduce


def test_p6_b200_validation_expects_its_gpus_efa_and_bandwidth_floors(tmp_path: Path) -> None:
    charts = render(tmp_path, TrainingConfig(gpu_instance_type="p6-b200.48xlarge"))
    health = pod_spec(by_kind(charts, "Job", "validation-1-health"))["containers"][0]["command"]
    assert {"--expected-gpus=8", "--expected-efa=8", "--gpu-name=B200"} <= set(health)
    allreduce = pod_spec(by_kind(charts, "PyTorchJob", "validation-2-allreduce"))["containers"][0]["command"]
    assert "--min-busbw-gbps=375" in allreduce and "--expect-efa-transport" in allreduce
    limits = pod_spec(by_kind(charts, "PyTorchJob", "train"))["containers"][0]["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == (8, 8)
    one_node = render(tmp_path / "one", TrainingConfig(gpu_instance_type="p6-b200.48xlarge", gpu_nodes=1))
    allreduce = pod_spec(by_kind(one_node, "PyTorchJob", "validation-2-allreduce"))["containers"][0]["command"]
    assert "--min-busbw-gbps=600" in allreduce  # NVLink 5 (instance_types.py)


def test_xid_monitor_runs_on_every_gpu_node_even_unhealthy_ones(eks) -> None:
    daemonset = by_kind(eks, "DaemonSet", "gpu-xid-monitor")
    spec = daemonset["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "llm-infra.aws/node-role", "operator": "In", "values": ["gpu"]}]}]
    assert {t["key"] for t in spec["tolerations"]} == {"nvidia.com/gpu", "sagemaker.amazonaws.com/node-health-status"}
    (container,) = spec["containers"]
    assert container["command"] == ["python3", "/workloads/xid_monitor.py"]
    assert "xid_monitor.py" in payload_files(WORKLOADS_DIR)
    assert "nvidia.com/gpu" not in container["resources"]["requests"]  # it must not take GPUs from the jobs
    kmsg = next(v for v in spec["volumes"] if v["name"] == "kmsg")
    assert kmsg["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    assert {"name": "kmsg", "mountPath": "/dev/kmsg", "readOnly": True} in container["volumeMounts"]


# ---- pod security (issue 28; docs/workloads.md "Pod security") ----------------------------------------
PRIVILEGED_PODS = {"Job/validation-1-health", "DaemonSet/gpu-xid-monitor"}  # kernel log, DCGM: by design
# The heads of the RayCluster and of the RayJob's cluster: KubeRay's autoscaler in them calls the API.
# The Ray heads: the RayCluster's and the Ray job's cluster's; under task governance (HyperPod's default) the Ray
# job's alone (no always-on RayCluster there).
RAY_HEADS_BY_MODE = {
    "eks": {"RayCluster/ray/head", "RayCluster/ray-train-cluster/head"},
    "hyperpod": {"RayCluster/ray-train-cluster/head"},
}


def pods(charts: dict[str, list[dict]]) -> dict[str, dict]:
    """Every pod template of the charts by ``<kind>/<name>[/<replica>]`` (cluster_model.pod_templates)."""
    return {t.name: dict(t.spec) for docs in charts.values() for d in docs for t in pod_templates(d)}


def containers(spec: dict) -> list[dict]:
    return [*spec.get("initContainers", []), *spec["containers"]]


@pytest.mark.parametrize("mode", ["eks", "hyperpod"])
def test_every_pod_not_privileged_by_design_drops_every_capability(request, mode: str) -> None:
    templates = pods(request.getfixturevalue(mode))
    job = "PyTorchJob/train/Worker" if mode == "eks" else "HyperPodPyTorchJob/train/pods"
    assert {job, "Job/llama2-7b-data-prep", *RAY_HEADS_BY_MODE[mode]} <= set(templates)
    assert ("Deployment/ray-gcs-redis" in templates) is (mode == "eks")
    assert set(templates) >= PRIVILEGED_PODS
    added = {}
    for name, spec in templates.items():
        if name in PRIVILEGED_PODS:
            # Privileged runs unconfined whatever a profile says: none is written.
            assert [c["securityContext"]["privileged"] for c in spec["containers"]] == [True], name
            assert "securityContext" not in spec, name
            continue
        assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}, name
        for container in containers(spec):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False and "privileged" not in context, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            if "add" in context["capabilities"]:
                added[f"{name}/{container['name']}"] = context["capabilities"]["add"]
    # The one capability added back: CHOWN, for the init container that hands Redis its FSx directory (EKS).
    assert added == ({"Deployment/ray-gcs-redis/data-owner": ["CHOWN"]} if mode == "eks" else {})
    # The RayJob's cluster has no autoscaler (a fixed gang under Kueue); KubeRay's autoscaler sidecar in the
    # RayCluster's head gets the same as the rest (autoscalerOptions.securityContext).
    charts = request.getfixturevalue(mode)
    assert "autoscalerOptions" not in by_kind(charts, "RayJob")["spec"]["rayClusterSpec"]
    if mode == "eks":
        cluster = by_kind(charts, "RayCluster")["spec"]
        assert cluster["autoscalerOptions"]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


@pytest.mark.parametrize("mode", ["eks", "hyperpod"])
def test_only_the_ray_heads_mount_a_kubernetes_api_token(request, mode: str) -> None:
    # EKS Pod Identity injects its own token volume whatever automountServiceAccountToken says (pod_spec.py).
    mounting = {
        name
        for name, spec in pods(request.getfixturevalue(mode)).items()
        if spec.get("automountServiceAccountToken") is not False
    }
    assert mounting == RAY_HEADS_BY_MODE[mode]


def test_redis_runs_as_its_user_within_a_memory_limit(eks) -> None:
    spec = pods(eks)["Deployment/ray-gcs-redis"]
    (init,), (redis,) = spec["initContainers"], spec["containers"]
    args = redis["args"]
    # maxmemory below the limit, and no eviction: GCS state is refused, never dropped silently.
    assert args[args.index("--maxmemory") + 1] == "512mb" and redis["resources"]["limits"]["memory"] == "1Gi"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    ping = redis["readinessProbe"]["exec"]["command"]
    assert redis["livenessProbe"]["exec"]["command"] == redis["startupProbe"]["exec"]["command"] == ping
    assert redis["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsGroup": 999,
        "runAsNonRoot": True,
        "runAsUser": 999,
    }
    # Redis writes only its append-only file, on FSx; the init container hands that directory to uid 999.
    assert args[args.index("--dir") + 1] == "/data" and args[args.index("--appendonly") + 1] == "yes"
    assert (
        init["volumeMounts"] == redis["volumeMounts"] == [{"name": "fsx", "mountPath": "/data", "subPath": "ray/redis"}]
    )
    assert "chown 999:999 /data" in init["command"][-1] and init["securityContext"]["runAsUser"] == 0


def ray_images(charts: dict[str, list[dict]]) -> set[str]:
    """The images of every Ray pod: the RayCluster's (where rendered) and the RayJob's cluster's head and workers."""
    clusters = [d["spec"] for docs in charts.values() for d in docs if d["kind"] == "RayCluster"]
    specs = [*clusters, by_kind(charts, "RayJob")["spec"]["rayClusterSpec"]]
    templates = [s["headGroupSpec"]["template"] for s in specs] + [
        g["template"] for s in specs for g in s["workerGroupSpecs"]
    ]
    return {c["image"] for t in templates for c in t["spec"]["containers"]}


def test_the_ray_pods_run_the_configured_ray_image(eks, hyperpod) -> None:
    assert ray_images(eks) == ray_images(hyperpod) == {RAY_TEST_IMAGE}


def test_without_a_ray_image_no_ray_manifests_are_rendered(tmp_path: Path) -> None:
    # Deployed without image_asset (no TrainingImageUri output) and no ray_image: no image holds Ray.
    charts = render(tmp_path, TrainingConfig())
    assert set(charts) == set(CHARTS) - {"kuberay"} | {"kueue-queues"}
    assert "ray.io" not in yaml.safe_dump_all([d for docs in charts.values() for d in docs])


def resolve_sub(value: dict, pseudo: dict[str, str]) -> str:
    """What CloudFormation makes of an ``Fn::Sub`` of pseudo parameters (as ``cdk deploy`` outputs it)."""
    text = value["Fn::Sub"]
    for name, resolved in pseudo.items():
        text = text.replace(f"${{AWS::{name}}}", resolved)
    assert "${" not in text, text
    return text


def test_the_image_image_asset_builds_becomes_the_ray_image(synth, tmp_path: Path) -> None:
    # image_asset=true: the cluster stack outputs the image it builds; `cdk deploy --outputs-file` writes
    # it, and the Ray manifests in dist run it (ray_image unset).
    config = TrainingConfig(image_asset=True)
    output = synth(config).template("-cluster")["Outputs"]["TrainingImageUri"]["Value"]
    uri = resolve_sub(output, {"AccountId": "123456789012", "Region": "us-east-1", "URLSuffix": "amazonaws.com"})
    assert uri.rsplit(":", 1)[1].startswith(f"ray{config.ray_version}-")  # the tag names the Ray inside
    outputs = {**OUTPUTS, "llm-infra-cluster": {"ClusterName": "llm-infra", "TrainingImageUri": uri}}
    outputs_file = tmp_path / "cdk-outputs.json"
    outputs_file.write_text(json.dumps(outputs))
    charts = {f.name: load_documents(f) for f in write_dist(config, tmp_path / "dist", outputs_file=outputs_file)}
    assert ray_images(charts) == {uri}
    # The jobs run the built image too (as inside the CDK app), not the stock DLC image.
    job_images = {
        container["image"]
        for name in ("training-job.k8s.yaml", "validation.k8s.yaml")
        for doc in charts[name]
        for pod in pod_templates(doc)
        for container in pod.spec["containers"]
    }
    assert job_images == {uri}
    # An explicit ray_image wins over the deployed one.
    chosen = write_dist(config.with_(ray_image=RAY_TEST_IMAGE), tmp_path / "chosen", outputs_file=outputs_file)
    assert ray_images({f.name: load_documents(f) for f in chosen}) == {RAY_TEST_IMAGE}
    # A deployed image built with another Ray than ray_version now names is refused, naming the output.
    older = {**outputs, "llm-infra-cluster": {"TrainingImageUri": uri.replace("ray2.60.0-", "ray2.52.0-")}}
    outputs_file.write_text(json.dumps(older))
    with pytest.raises(
        ConfigError, match=r"(?s)TrainingImageUri in .*names Ray 2\.52\.0; the cluster runs Ray 2\.60\.0"
    ):
        write_dist(config, tmp_path / "older", outputs_file=outputs_file)


def test_make_synth_tells_how_to_get_the_ray_manifests(tmp_path: Path) -> None:
    without = write_dist(TrainingConfig(), tmp_path / "without", outputs_file=tmp_path / "missing.json")
    (hint,) = [line for line in manifests_summary(tmp_path / "without") if "kuberay.k8s.yaml" in line]
    assert "make synth RAY_IMAGE=" in hint and "image_asset=true" in hint and "--outputs-file cdk-outputs.json" in hint
    assert "kuberay.k8s.yaml" not in {f.name for f in without}
    write_dist(TrainingConfig(ray_image=RAY_TEST_IMAGE), tmp_path / "with", outputs_file=tmp_path / "missing.json")
    (listing,) = manifests_summary(tmp_path / "with")
    assert listing.startswith("kubernetes manifests: ") and "kuberay.k8s.yaml" in listing
    # Under HyperPod task governance the RayJob alone, and the summary says why and how to get the RayCluster.
    hyperpod = hyperpod_config(ray_image=RAY_TEST_IMAGE)
    write_dist(hyperpod, tmp_path / "governed", outputs_file=tmp_path / "missing.json")
    (_, note) = manifests_summary(tmp_path / "governed")
    assert note.startswith("kuberay.k8s.yaml: the RayJob ray-train alone") and "queueing=none" in note


# ---- bad input --------------------------------------------------------------------------------------
def test_bad_input_is_a_clear_error() -> None:
    values = WorkloadValues.from_config(TrainingConfig(gpu_nodes=4, gpu_nodes_min=2, gpu_nodes_max=8))
    with pytest.raises(ValueError, match="gpu_nodes: training jobs need 1 <= gpu_nodes_min <= gpu_nodes"):
        WorkloadValues(**{**values.__dict__, "gpu_nodes": 1})
    with pytest.raises(ValueError, match="dlc_image_tag: required"):
        dlc_image_uri("us-east-1", "")
    with pytest.raises(ValueError, match="efa: g5.2xlarge has no EFA"):
        WorkloadValues.from_config(TrainingConfig(gpu_instance_type="g5.2xlarge")).__class__(
            **{**WorkloadValues.from_config(TrainingConfig(gpu_instance_type="g5.2xlarge")).__dict__, "efa": True}
        )
    with pytest.raises(ValueError, match="region: no AWS Deep Learning Containers registry known for 'xx-east-9'"):
        dlc_image_uri("xx-east-9", "2.8.0-gpu-py312-cu129-ubuntu22.04-ec2")


@pytest.mark.parametrize(
    ("region", "registry"),
    [
        ("us-west-2", "763104351884.dkr.ecr.us-west-2.amazonaws.com"),
        ("ap-east-1", "871362719292.dkr.ecr.ap-east-1.amazonaws.com"),
        ("me-south-1", "217643126080.dkr.ecr.me-south-1.amazonaws.com"),
        ("cn-north-1", "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn"),
    ],
)
def test_dlc_registry_per_region(region: str, registry: str) -> None:
    assert dlc_image_uri(region, "tag").startswith(f"{registry}/pytorch-training:")


# ---- snapshots ----------------------------------------------------------------------------------------
class YamlSnapshot(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "yaml"


@pytest.mark.parametrize("chart", [*CHARTS, "kueue-queues"])
def test_manifest_snapshot(eks, snapshot, chart: str) -> None:
    # ConfigMaps carry the workloads/ and data_prep/ folders (asserted equal elsewhere): snapshot their keys only.
    documents = [dict(d, data=sorted(d["data"])) if d["kind"] == "ConfigMap" else d for d in eks[chart]]
    assert yaml.safe_dump_all(documents, sort_keys=True) == snapshot.use_extension(YamlSnapshot)
