"""The KubeRay chart against KubeRay v1.7.0 (its CRDs and its admission rules), what Ray's autoscaler
makes of it on the nodes the templates create, the training jobs' placement and NCCL rules, and the image
its pods run. Where its pods land on the real scheduler (no GPU held at rest, a whole GPU node per worker
when scaled): tests/test_scheduling_real.py."""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
import re
import shlex
import sys
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

import cdk8s
import pytest
from cluster_model import admission_problem, quantity

from conftest import hyperpod_config
from llm_infra.config import ConfigError, TrainingConfig
from llm_infra.k8s_manifests.dlc import dlc_image_uri
from llm_infra.k8s_manifests.kuberay_chart import CLUSTER_LABEL, RAY_CLUSTER, REDIS_PASSWORD_SECRET, KubeRayChart
from llm_infra.k8s_manifests.payload import WORKLOADS_DIR
from llm_infra.k8s_manifests.pod_spec import gpu_node_affinity, nccl_env
from llm_infra.k8s_manifests.training_job_chart import TrainingJobChart
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import HEALTH_STATUS_KEY, NODE_ROLE_LABEL
from llm_infra.rehearsal.deploy_workloads import Templates, template_nodes
from manifest_validation import validate_object

RAY_IMAGE = (
    "123456789012.dkr.ecr.us-east-1.amazonaws.com/llm-infra-training:2.8.0-gpu-py312-cu129-ubuntu22.04-ec2-ray2.60.0"
)
# The modes that render the RayCluster: EKS, and HyperPod without task governance (queueing=none). Under task
# governance, HyperPod's default, the RayJob alone (TASK_GOVERNANCE; docs/hyperpod.md).
CONFIGS = {
    "eks": TrainingConfig(ray_image=RAY_IMAGE),
    "hyperpod": hyperpod_config(ray_image=RAY_IMAGE, queueing="none"),
}
TASK_GOVERNANCE = hyperpod_config(ray_image=RAY_IMAGE)
KUBERNETES_VERSION = TrainingConfig().kubernetes_version
# The AWS DLC pytorch-training images ship torch and numpy (aws/deep-learning-containers release notes,
# "Important Packages"); Ray and the rest come from workloads/Dockerfile's pip installs.
DLC_PACKAGES = {"torch", "numpy"}


def values(config: TrainingConfig) -> WorkloadValues:
    return WorkloadValues.from_config(config)


def chart_objects(config: TrainingConfig, **options: Any) -> list[dict[str, Any]]:
    return KubeRayChart(cdk8s.App(), "kuberay", values=values(config), **options).to_json()


def by_kind(objects: Iterable[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def workers(cluster_spec: dict[str, Any]) -> dict[str, Any]:
    (group,) = cluster_spec["workerGroupSpecs"]
    return group


# ---- KubeRay v1.7.0's admission rules that these objects touch ------------------------------------
# Restated from ray-operator/controllers/ray/utils/validation.go at v1.7.0 (commit 59d663a); KubeRay
# rejects a RayCluster or RayJob that breaks one, after the CRD schema has accepted it.
def kuberay_problems(obj: dict[str, Any]) -> list[str]:
    if obj["kind"] == "RayJob":
        spec = obj["spec"]
        problems = []
        if spec.get("clusterSelector") and spec.get("backoffLimit", 0) > 0:
            problems.append("BackoffLimit is incompatible with ClusterSelector mode")
        if not spec.get("clusterSelector") and not spec.get("rayClusterSpec"):
            problems.append("one of RayClusterSpec or ClusterSelector must be set")
        if spec.get("ttlSecondsAfterFinished", 0) > 0 and not spec.get("shutdownAfterJobFinishes"):
            problems.append("TTLSecondsAfterFinished > 0 requires shutdownAfterJobFinishes")
        cluster = spec.get("rayClusterSpec") or {}
        if (cluster.get("authOptions") or {}).get("enableK8sTokenAuth"):
            problems.append("K8s token auth mode is currently not supported for RayJob")
        return problems + (cluster_problems(cluster) if cluster else [])
    if obj["kind"] == "RayCluster":
        return cluster_problems(obj["spec"])
    return []


def cluster_problems(spec: dict[str, Any]) -> list[str]:
    problems = []
    head = spec["headGroupSpec"]
    head_env = {e["name"] for e in head["template"]["spec"]["containers"][0].get("env", [])}
    by_hand = "redis-password" in head.get("rayStartParams", {}) or head_env & {"REDIS_PASSWORD", "RAY_REDIS_ADDRESS"}
    if spec.get("gcsFaultToleranceOptions") and by_hand:
        problems.append("redis password/address must come from GcsFaultToleranceOptions")
    autoscaling = spec.get("enableInTreeAutoscaling", False)
    if (spec.get("autoscalerOptions") or {}).get("version") == "v2":
        templates = [head["template"], *(g["template"] for g in spec["workerGroupSpecs"])]
        if any(t["spec"].get("restartPolicy", "Never") != "Never" for t in templates):
            problems.append("restartPolicy should be Never or unset when using autoscaler V2")
    for group in spec["workerGroupSpecs"]:
        if not autoscaling and ("minReplicas" not in group or "maxReplicas" not in group):
            problems.append(f"worker group {group['groupName']} must set minReplicas and maxReplicas")
        if group.get("minReplicas", 0) > group.get("maxReplicas", 2**31):
            problems.append(f"worker group {group['groupName']} has minReplicas greater than maxReplicas")
    token = (spec.get("authOptions") or {}).get("mode") == "token"
    if token and tuple(map(int, spec.get("rayVersion", "0.0.0").split("."))) < (2, 52, 0):
        problems.append("authOptions.mode is 'token' but minimum Ray version is 2.52.0")
    return problems


@pytest.mark.parametrize("mode", [*CONFIGS, "task-governance"])
def test_every_object_passes_the_crd_schema_and_kuberays_rules(mode: str) -> None:
    objects = chart_objects(CONFIGS.get(mode, TASK_GOVERNANCE))
    checked = {o["kind"]: validate_object(o, KUBERNETES_VERSION) for o in objects}
    assert checked["RayJob"] == "crd:ray.io_rayjobs.yaml"
    if mode == "task-governance":  # no RayCluster, Redis, its Service or NetworkPolicy: they could not run there
        assert set(checked) == {"RayJob"}
    else:
        assert checked["RayCluster"] == "crd:ray.io_rayclusters.yaml"
        assert set(checked) == {"Deployment", "Service", "NetworkPolicy", "RayCluster", "RayJob"}
    assert [p for o in objects for p in kuberay_problems(o)] == []


def test_the_schema_and_rule_checks_catch_mistakes() -> None:
    job = by_kind(chart_objects(CONFIGS["eks"]), "RayJob")
    typo = copy.deepcopy(job)
    typo["spec"]["backoffLimit"] = "two"
    with pytest.raises(AssertionError, match="'two' is not of type 'integer'"):
        validate_object(typo, KUBERNETES_VERSION)
    mistakes: dict[str, Callable[[dict[str, Any]], None]] = {
        "BackoffLimit is incompatible with ClusterSelector": lambda s: s.update(clusterSelector={CLUSTER_LABEL: "ray"}),
        "requires shutdownAfterJobFinishes": lambda s: s.update(shutdownAfterJobFinishes=False),
        "restartPolicy should be Never": lambda s: (
            s["rayClusterSpec"].update(enableInTreeAutoscaling=True, autoscalerOptions={"version": "v2"}),
            workers(s["rayClusterSpec"])["template"]["spec"].update(restartPolicy="OnFailure"),
        ),
        "minimum Ray version is 2.52.0": lambda s: s["rayClusterSpec"].update(rayVersion="2.50.0"),
    }
    for message, mistake in mistakes.items():
        broken = copy.deepcopy(job)
        mistake(broken["spec"])
        assert any(message in p for p in kuberay_problems(broken)), message


# ---- what Ray's autoscaler sees: Ray's own reading of every rendered cluster ---------------------
@pytest.fixture(scope="module", params=list(CONFIGS))
def deployment(request, synth) -> tuple[TrainingConfig, Any]:
    config = CONFIGS[request.param]
    return config, synth(config)


def ray_cluster_crs(config: TrainingConfig) -> dict[str, dict[str, Any]]:
    """Each RayCluster the chart makes, as the autoscaler in its head fetches it from the API server:
    the RayCluster, and the one KubeRay makes of the RayJob's rayClusterSpec (named after the job)."""
    objects = chart_objects(config)
    job = by_kind(objects, "RayJob")
    job_cluster = {
        "apiVersion": job["apiVersion"],
        "kind": "RayCluster",
        "metadata": {"name": f"{job['metadata']['name']}-raycluster", "namespace": job["metadata"]["namespace"]},
        "spec": job["spec"]["rayClusterSpec"],
    }
    return {"RayCluster": by_kind(objects, "RayCluster"), "RayJob": job_cluster}


def container_memory_bytes(group: dict[str, Any]) -> int:
    """The Ray container's memory limit (cgroup-enforced: what the pod may use), in bytes."""
    (container, *_) = group["template"]["spec"]["containers"]
    return quantity("memory", container["resources"]["limits"]["memory"]) * 2**20


def test_rays_autoscaler_sees_what_the_nodes_and_pods_provide(deployment) -> None:
    """Ray 2.60's autoscaler (v1 and v2 alike) turns the RayCluster CR into node types with
    ray/autoscaler/_private/kuberay/autoscaling_config.py _derive_autoscaling_config_from_ray_cr, which
    raises when a group gives it no CPU count; the numbers must be those of the node and pod."""
    kuberay_config = pytest.importorskip("ray.autoscaler._private.kuberay.autoscaling_config")
    v2_config = pytest.importorskip("ray.autoscaler.v2.instance_manager.config")
    config, app = deployment
    gpu_nodes_max = values(config).gpu_nodes_max
    # A GPU node as its kubelet registers it, from the synthesized templates: allocatable CPU = the
    # vCPUs (HyperPod: after the instance group's ThreadsPerCore) less the kubelet's reservation.
    hugepages = 2 * config.hugepages_2mib if config.compute == "hyperpod" else 0
    (gpu_node, *_) = [n for n in template_nodes(Templates(app.templates), hyperpod_hugepages_mib=hugepages) if n.gpus]
    entrypoint = by_kind(chart_objects(config), "RayJob")["spec"]["entrypoint"]
    for source, cr in ray_cluster_crs(config).items():
        spec = cr["spec"]
        derived = kuberay_config._derive_autoscaling_config_from_ray_cr(cr)
        # What autoscaler v2 (autoscalerOptions.version) builds of it: KubeRayConfigReader.
        node_types = v2_config.AutoscalingConfig(derived).get_node_type_configs()
        head, gpu = derived["available_node_types"]["headgroup"], derived["available_node_types"]["gpu"]
        assert set(derived["available_node_types"]) == {"headgroup", "gpu"}, source
        # The head runs no tasks and holds no GPU; Ray's memory there is its container's limit.
        assert head["resources"] == {
            "CPU": 0,
            "GPU": 0,
            "memory": container_memory_bytes(spec["headGroupSpec"]),
        }, source
        # A GPU worker: every whole CPU the node allocates to pods, every GPU, its container's memory.
        assert gpu["resources"] == {
            "CPU": gpu_node.allocatable["cpu"] // 1000,
            "GPU": gpu_node.gpus,
            "memory": container_memory_bytes(workers(spec)),
        }, source
        assert gpu["resources"]["GPU"] == config.gpu_profile.gpus
        assert gpu["resources"]["memory"] <= gpu_node.allocatable["memory"] * 2**20  # the limit fits the node
        assert gpu["resources"]["CPU"] >= gpu["resources"]["GPU"]  # Ray Train's default worker: 1 CPU + 1 GPU
        # What the raylet registers: KubeRay hands rayStartParams num-cpus to `ray start` (without it the
        # raylet would count every vCPU of the host), and --num-gpus and --memory from the limits read above.
        assert workers(spec)["rayStartParams"]["num-cpus"] == str(gpu["resources"]["CPU"]), source
        # The RayCluster: no GPU node until work asks for one; at most gpu_nodes_max. The RayJob's: gpu_nodes
        # workers from the start, a gang Kueue admits whole (issue 31: no autoscaler under Kueue).
        low, high = (0, gpu_nodes_max) if source == "RayCluster" else (config.gpu_nodes, config.gpu_nodes)
        assert workers(spec)["replicas"] == low, source
        assert (gpu["min_workers"], gpu["max_workers"]) == (low, high), source
        assert derived["max_workers"] == high
        v2_gpu = node_types["gpu"]
        assert (v2_gpu.min_worker_nodes, v2_gpu.max_worker_nodes, v2_gpu.resources) == (
            low,
            high,
            gpu["resources"],
        ), source
        assert node_types["headgroup"].resources == head["resources"], source
        # The RayJob's demand (one worker per GPU, 1 CPU + 1 GPU each) fits gpu_nodes such workers.
        if source == "RayJob":
            (num_workers,) = re.findall(r"--num-workers=(\d+)", entrypoint)
            assert int(num_workers) <= config.gpu_nodes * min(gpu["resources"]["CPU"], gpu["resources"]["GPU"])


# ---- the training jobs' placement, devices and NCCL environment --------------------------------
def test_workers_are_placed_and_equipped_like_the_training_jobs() -> None:
    config = CONFIGS["eks"]
    training = TrainingJobChart(cdk8s.App(), "training-job", values=values(config)).to_json()
    replica = json.dumps(by_kind(training, "PyTorchJob")["spec"])
    for spec in (
        by_kind(chart_objects(config), "RayCluster")["spec"],
        by_kind(chart_objects(config), "RayJob")["spec"]["rayClusterSpec"],
    ):
        pod = workers(spec)["template"]["spec"]
        (container,) = pod["containers"]
        assert pod["affinity"] == gpu_node_affinity() and json.dumps(pod["affinity"])[1:-1] in replica
        assert container["resources"]["limits"]["nvidia.com/gpu"] == config.gpu_profile.gpus
        assert container["resources"]["limits"]["vpc.amazonaws.com/efa"] == config.gpu_profile.efa_interfaces
        assert container["resources"]["limits"]["hugepages-2Mi"] == f"{config.hugepages_2mib * 2}Mi"
        assert {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx-data"}} in pod["volumes"]
        assert all(e in container["env"] for e in nccl_env(values(config)))
        assert "command" not in container  # KubeRay's `ray start`
        head = spec["headGroupSpec"]
        assert head["template"]["spec"]["nodeSelector"] == {NODE_ROLE_LABEL: "system"}
        assert head["rayStartParams"]["num-gpus"] == "0" and "nvidia.com/gpu" not in json.dumps(head)


def test_no_worker_lands_on_a_node_hyperpod_marked_unhealthy(synth) -> None:
    config = CONFIGS["hyperpod"]
    worker = workers(by_kind(chart_objects(config), "RayCluster")["spec"])["template"]["spec"]
    (gpu_node, *_) = [n for n in template_nodes(Templates(synth(config).templates)) if n.gpus]
    assert admission_problem(gpu_node, worker) is None
    for status in ("Unschedulable", "UnschedulablePendingReplacement", "UnschedulablePendingReboot"):
        marked = dataclasses.replace(gpu_node, labels={**gpu_node.labels, HEALTH_STATUS_KEY: status})
        assert admission_problem(marked, worker) == "required node affinity"


# ---- GCS fault tolerance, the RayJob, its entrypoint ---------------------------------------------
def test_gcs_fault_tolerance_on_redis_with_the_password_from_a_secret() -> None:
    objects = chart_objects(CONFIGS["eks"])
    options = by_kind(objects, "RayCluster")["spec"]["gcsFaultToleranceOptions"]
    assert options == {
        "redisAddress": "ray-gcs-redis.training.svc.cluster.local:6379",
        "redisPassword": {"valueFrom": {"secretKeyRef": REDIS_PASSWORD_SECRET}},
    }
    (redis,) = by_kind(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert redis["env"] == [{"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": REDIS_PASSWORD_SECRET}}]
    assert redis["args"][-2:] == ["--requirepass", "$(REDIS_PASSWORD)"] and "--appendonly" in redis["args"]
    assert "Secret" not in {o["kind"] for o in objects}  # no password in any manifest
    policy = by_kind(objects, "NetworkPolicy")["spec"]
    assert policy["ingress"][0]["from"] == [{"podSelector": {"matchLabels": {CLUSTER_LABEL: RAY_CLUSTER}}}]
    # The job's own cluster runs without: its driver dies with its head whatever GCS keeps.
    assert "gcsFaultToleranceOptions" not in by_kind(objects, "RayJob")["spec"]["rayClusterSpec"]


def test_the_rayjob_retries_on_a_new_cluster_and_cleans_up() -> None:
    job = by_kind(chart_objects(CONFIGS["eks"], backoff_limit=3, ttl_seconds_after_finished=900), "RayJob")["spec"]
    assert (job["backoffLimit"], job["shutdownAfterJobFinishes"], job["ttlSecondsAfterFinished"]) == (3, True, 900)
    assert "clusterSelector" not in job  # KubeRay v1.7.0 refuses backoffLimit with clusterSelector


def ray_train_module() -> Any:
    pytest.importorskip("ray.train")
    from llm_infra.workloads import ray_train

    return ray_train


@pytest.mark.parametrize("gpu_nodes", [1, 2])
def test_the_entrypoint_is_ray_trains_and_resumes_from_fsx(gpu_nodes: int) -> None:
    config = TrainingConfig(ray_image=RAY_IMAGE, gpu_nodes=gpu_nodes)
    entrypoint = shlex.split(by_kind(chart_objects(config), "RayJob")["spec"]["entrypoint"])
    assert entrypoint[:2] == ["python3", "/workloads/ray_train.py"]
    args, train_config = ray_train_module().parse_args(entrypoint[2:])  # the real parser accepts it
    assert train_config.checkpoint_dir == "/fsx/checkpoints/ray-train"  # every attempt resumes from there
    assert args.storage_path.startswith("/fsx/") and train_config.checkpoint_every == 100
    assert (args.num_workers, args.use_gpu) == (gpu_nodes * config.gpu_profile.gpus, True)
    assert args.expect_efa_transport is (gpu_nodes > 1)  # across nodes: fail on a socket fallback


# ---- the image: torch and Ray at the cluster's version -------------------------------------------
def imported_modules(path: Path, *, every_level: bool) -> set[str]:
    """Top-level names of the modules ``path`` imports at module level (or anywhere)."""
    tree = ast.parse(path.read_text())
    statements = ast.walk(tree) if every_level else iter(tree.body)
    found: set[str] = set()
    for node in statements:
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found - {"__future__"}


def entrypoint_imports() -> set[str]:
    """What ray_train.py needs: its imports anywhere (the workers run its functions), and the
    module-level imports of every payload module it loads, recursively."""
    payload = {p.stem for p in WORKLOADS_DIR.glob("*.py")}
    needed = imported_modules(WORKLOADS_DIR / "ray_train.py", every_level=True)
    seen: set[str] = set()
    while local := (needed & payload) - seen:
        for name in local:
            seen.add(name)
            needed |= imported_modules(WORKLOADS_DIR / f"{name}.py", every_level=False)
    return needed - payload - set(sys.stdlib_module_names)


def dockerfile_pip_installs(text: str) -> dict[str, str]:
    """Distribution -> the version it is pinned to, from the Dockerfile's `pip install` lines."""
    pins = re.findall(r'"([A-Za-z0-9_.-]+)(?:\[[\w,]+\])?==([^"]+)"', text)
    return {name.lower().replace("_", "-"): version for name, version in pins}


def ray_train_extra_requirements() -> set[str]:
    """What ``ray[train]`` (the Dockerfile's install) brings besides Ray, from Ray's own package metadata."""
    names = set()
    for requirement in metadata.requires("ray") or []:
        if 'extra == "train"' in requirement:
            names.add(re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].replace("-", "_").lower())
    return names


def test_the_image_holds_what_the_entrypoint_imports_at_the_clusters_ray_version(synth) -> None:
    config = TrainingConfig(image_asset=True)
    app = synth(config)
    (image,) = [
        i
        for assets in app.outdir.glob("*.assets.json")
        for i in json.loads(assets.read_text())["dockerImages"].values()
    ]
    build_args = image["source"]["dockerBuildArgs"]
    assert build_args["BASE_IMAGE"] == dlc_image_uri("us-east-1", config.dlc_image_tag)  # torch, numpy, EFA
    assert build_args["RAY_VERSION"] == config.ray_version
    pins = dockerfile_pip_installs((WORKLOADS_DIR / "Dockerfile").read_text())
    assert pins["ray"] == "${RAY_VERSION}"
    provided = DLC_PACKAGES | {name.replace("-", "_") for name in pins} | ray_train_extra_requirements()
    assert entrypoint_imports() <= provided, entrypoint_imports() - provided
    assert {"torch", "ray"} <= entrypoint_imports()
    # The RayCluster and the RayJob's cluster say the Ray they run: the one the build installs.
    objects = chart_objects(TrainingConfig(ray_image=RAY_IMAGE))
    versions = {
        by_kind(objects, "RayCluster")["spec"]["rayVersion"],
        by_kind(objects, "RayJob")["spec"]["rayClusterSpec"]["rayVersion"],
    }
    assert versions == {build_args["RAY_VERSION"]}


# ---- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"ray_image": "registry.example/train:latest"},
            "ray_image: the tag of 'registry.example/train:latest' names no Ray version",
        ),
        (
            {"ray_image": "registry.example/train:2.8.0-ray2.50.0"},
            "names Ray 2.50.0; the cluster runs Ray 2.60.0 (ray_version)",
        ),
        (
            {"ray_image": "rayproject/ray:2.60.0-py312-gpu"},
            "ray_image: 'rayproject/ray:2.60.0-py312-gpu' has neither torch",
        ),
        ({"ray_version": "2.60"}, "ray_version: '2.60' must be a Ray release such as 2.60.0"),
        ({"ray_version": "2.40.0"}, "ray_version: 2.40.0 is older than 2.52.0"),
        ({"gpu_nodes": 0}, "gpu_nodes: 0 must be >= 1"),  # zero Ray workers
    ],
)
def test_bad_ray_input_is_a_clear_error_at_synth(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        TrainingConfig(**changes).validate()


def test_the_chart_refuses_to_run_ray_on_an_unknown_image_or_bad_counts() -> None:
    with pytest.raises(ValueError, match="ray_image: the Ray head and workers need an image with torch"):
        chart_objects(TrainingConfig())
    with pytest.raises(ValueError, match="backoff_limit: -1 must be >= 0"):
        chart_objects(CONFIGS["eks"], backoff_limit=-1)
    with pytest.raises(ValueError, match="ttl_seconds_after_finished: 0 must be >= 1"):
        chart_objects(CONFIGS["eks"], ttl_seconds_after_finished=0)
