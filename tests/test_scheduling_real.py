"""Scheduling outcomes from the real kube-scheduler, DaemonSet/Job controllers and operators (issue 22), in
place of the Python scheduler model these assertions ran on before (tests/cluster_model.py keeps only the
per-node checks a scheduler cannot answer, and says why).

One rehearsal per compute mode (``llm_infra.rehearsal.rehearse``: the templated nodes as KWOK nodes, the deploy,
each job of ``dist/`` on its own), with steps added for what the tests below read: a HyperPodPyTorchJob's
pods as its closed-source operator would make them (``job_pods`` of tests/hyperpod_operator.py), the Ray
job left at rest, the RayCluster scaled to every GPU node, a validation job while Ray holds them, and
(HyperPod) the training operator add-on's pods under each way the add-on may combine values. Skips
without ``make k8s``.

Each rehearsal has a control plane of its own (``own_control_plane``), not the session's: it deploys the whole
app onto every node the templates create, cluster-wide state (DaemonSets, nodes, their capacity) that the
outcomes read and no other test may add to. It stays up while the module's tests read it, so that a failure
keeps its logs.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_model import installed_pods, pod_requests, pod_templates
from hyperpod_operator import job_pods

from conftest import RAY_TEST_IMAGE, hyperpod_config
from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.render import write_dist
from llm_infra.node_labels import NODE_ROLE_LABEL
from llm_infra.rehearsal import control_plane
from llm_infra.rehearsal.deploy_workloads import EFA, GPU, NodeSpec, Templates
from llm_infra.rehearsal.rehearse import (
    DEPLOY_STEP,
    REQUIRED_COMPONENTS,
    SIMULATION,
    Applied,
    PodResult,
    Report,
    Step,
    plan,
    rehearse,
)
from llm_infra.rehearsal.upstream_charts import (
    HELM_MERGE,
    HYPERPOD_COMPUTE_TYPE_LABEL,
    HYPERPOD_TRAINING_OPERATOR_CONTROLLER,
    REPLACE,
    VALUE_MERGES,
)

BIN_DIR = control_plane.default_bin_dir()
CONFIGS = {"eks": TrainingConfig(ray_image=RAY_TEST_IMAGE), "hyperpod": hyperpod_config(ray_image=RAY_TEST_IMAGE)}
# What stays free on the system nodes once everything that lands there runs: room for a rolling update's
# surge pods and for add-ons that grow with the cluster (CoreDNS, the CloudWatch agent's buffers).
SYSTEM_HEADROOM = 0.2
RAY_JOB_HEAD = "the Ray job's head and submitter (its workers at 0)"
RAY_EVERY_GPU_NODE = "the RayCluster's GPU workers on every GPU node"
BLOCKED = "validation-1-health while Ray holds every GPU node"
VARIANTS = "the training operator add-on's pods, per way of combining values"
VARIANTS_NAMESPACE = "placement-variants"
# The operator add-on's first values (its controller on the system nodes): if the add-on merges them as Helm
# does, the default compute-type key stays, and no node is both a system node and a HyperPod node.
SYSTEM_NODE_VALUES = {"hpTrainingControllerManager": {"nodeSelector": {NODE_ROLE_LABEL: "system"}}}
OPERATOR_ADDON = "amazon-sagemaker-hyperpod-training-operator"
CERT_MANAGER_PODS = ("cert-manager", "cert-manager-webhook", "cert-manager-cainjector")
# job -> (dist file, the object whose pods it is)
ON_DEMAND = {
    "validation-1-health": ("validation", "validation-1-health"),
    "validation-2-allreduce": ("validation", "validation-2-allreduce"),
    "validation-3-training": ("validation", "validation-3-training"),
    "training-job": ("training-job", "train"),
    "recipe-data-prep": ("llama2-7b-1-data-prep", "llama2-7b-data-prep"),
    "recipe-train": ("llama2-7b-2-train", "llama2-7b"),
    "ray": ("kuberay", "ray-train"),
}


@dataclass
class Rehearsed:
    config: TrainingConfig
    dist: Path
    nodes: dict[str, NodeSpec]  # by Node name
    steps: list[Step]
    report: Report
    live: list[dict[str, Any]]  # the pods left at the end (the deploy's and the kept steps')

    def pods(self, step: str) -> list[PodResult]:
        return [p for p in self.report.pods if p.step == step]

    def step_of(self, file: str, name: str) -> Step:
        (step,) = [s for s in self.steps if s.name.startswith(f"{file}.k8s.yaml: ") and s.name.endswith(f"/{name}")]
        return step

    def gpu_nodes(self) -> set[str]:
        return {name for name, node in self.nodes.items() if node.gpus}

    @property
    def ray_cluster(self) -> bool:
        """Whether the always-on RayCluster (and Redis) is rendered: not under HyperPod's task governance."""
        return any(o["kind"] == "RayCluster" for o in dist_objects(self.dist, "kuberay"))

    def role(self, role: str) -> set[str]:
        return {name for name, node in self.nodes.items() if node.labels.get(NODE_ROLE_LABEL) == role}

    def live_pod(self, result: PodResult) -> dict[str, Any]:
        (pod,) = [
            p
            for p in self.live
            if (p["metadata"]["namespace"], p["metadata"]["name"]) == (result.namespace, result.name)
        ]
        return pod


def dist_objects(dist: Path, file: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((dist / f"{file}.k8s.yaml").read_text()) if doc]


def _renamed(obj: dict[str, Any], name: str) -> dict[str, Any]:
    """A copy under another name: a deleted object of the same name may still be finalizing."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["name"] = name
    return obj


def _without_workers(ray_job: dict[str, Any]) -> dict[str, Any]:
    """The Ray job with its worker group at 0: its head and submitter stay (on the system nodes, for the load check;
    under task governance on a GPU node), its GPU workers (a gang, tested in its own step) leave the GPUs to the
    steps after it."""
    for group in ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        group["replicas"] = group["minReplicas"] = 0
    return ray_job


def operator_variants(templates: Templates) -> list[dict[str, Any]]:
    """The HyperPod training operator add-on's controller and cert-manager as Deployments, one per way of
    combining values (our values, and SYSTEM_NODE_VALUES), named ``<pod>--<values>--<merge>``. Without their
    requests: they test where each may go; the deployed copies carry them. (With them, two more 1-CPU controllers
    beside the deployed one left the 4-vCPU HyperPod CPU node 300m free, and in one CI run, where the scheduler
    had put more of the deploy there, a variant stayed Pending.)"""
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": VARIANTS_NAMESPACE}}
    ]
    system_values = copy.deepcopy(templates.templates)
    for template in system_values.values():
        for resource in template["Resources"].values():
            if resource["Type"] == "AWS::EKS::Addon" and resource["Properties"]["AddonName"] == OPERATOR_ADDON:
                resource["Properties"]["ConfigurationValues"] = json.dumps(SYSTEM_NODE_VALUES)
    for values, variant in (("ours", templates), ("system", Templates(system_values))):
        for merge in VALUE_MERGES:
            for pod in installed_pods(variant, merge=merge):
                if pod.name not in (HYPERPOD_TRAINING_OPERATOR_CONTROLLER, *CERT_MANAGER_PODS):
                    continue
                name = f"{pod.name}--{values}--{merge}"
                spec = copy.deepcopy(pod.spec)
                for container in spec["containers"]:
                    container.setdefault("image", "modelled.invalid/variant:1")
                    container.pop("resources", None)
                objects.append(
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "metadata": {"name": name, "namespace": VARIANTS_NAMESPACE},
                        "spec": {
                            "replicas": 1,
                            "selector": {"matchLabels": {"variant": name}},
                            "template": {"metadata": {"labels": {**pod.labels, "variant": name}}, "spec": spec},
                        },
                    }
                )
    return objects


@pytest.fixture(scope="module", params=list(CONFIGS))
def rehearsed(request, synth, own_control_plane, tmp_path_factory) -> Iterator[Rehearsed]:
    operators = ("training-operator", "kuberay-operator")
    absent = control_plane.missing_binaries(BIN_DIR, (*REQUIRED_COMPONENTS, *operators))
    if absent:
        pytest.skip(
            f"real control plane: {', '.join(absent)} not built in {BIN_DIR}; run `make k8s` "
            f"or set {control_plane.BIN_DIR_VARIABLE} to prebuilt binaries"
        )
    config = CONFIGS[request.param]
    app = synth(config)
    dist = tmp_path_factory.mktemp(f"dist-{request.param}")
    write_dist(config, dist)  # no outputs file: the FSx volume is the templates' (a second one would clash)
    rehearsal = plan(config, app.outdir, dist, nodes_per_group=0)
    steps = []
    for step in rehearsal.steps:
        (job, *_) = step.objects
        if job.obj["kind"] == "HyperPodPyTorchJob":
            step = Step(step.name, tuple(Applied(p, job.origin) for p in job_pods(job.obj)), True)
        steps.append(step)
    (ray_job,) = [o for o in dist_objects(dist, "kuberay") if o["kind"] == "RayJob"]
    (health,) = [o for o in dist_objects(dist, "validation") if o["metadata"]["name"] == "validation-1-health"]
    steps.append(
        Step(RAY_JOB_HEAD, (Applied(_without_workers(_renamed(ray_job, "ray-job-head")), "kuberay.k8s.yaml"),))
    )
    # The RayCluster (none under task governance, HyperPod's default): its GPU workers on every GPU node.
    for ray_cluster in [o for o in dist_objects(dist, "kuberay") if o["kind"] == "RayCluster"]:
        scaled = copy.deepcopy(ray_cluster)
        scaled["spec"]["workerGroupSpecs"][0]["replicas"] = config.gpu_nodes  # as the autoscaler does
        steps += [
            Step(RAY_EVERY_GPU_NODE, (Applied(scaled, "kuberay.k8s.yaml, scaled"),)),
            Step(BLOCKED, (Applied(_renamed(health, "validation-1-health-blocked"), "validation.k8s.yaml"),)),
        ]
    if config.compute == "hyperpod":
        steps.append(Step(VARIANTS, tuple(Applied(o, "test") for o in operator_variants(Templates(app.templates)))))
    rehearsal.steps = steps
    # The real Kueue too where the app installs its queues (as llm-infra rehearse runs it) and it can run here.
    queueing = ("kueue",) if rehearsal.queues and not control_plane.kueue_unavailable(BIN_DIR) else ()
    with own_control_plane(components=(*SIMULATION, *operators, *queueing)) as cp:
        report = rehearse(rehearsal, cp, timeout=60.0)
        live = json.loads(cp.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
        yield Rehearsed(config, dist, {n.name.lower(): n for n in rehearsal.nodes}, steps, report, live)


def test_kueue_admits_every_job_of_dist_where_the_app_installs_it(rehearsed: Rehearsed) -> None:
    if "kueue" not in rehearsed.report.control_plane["components"]:
        pytest.skip(f"Kueue does not run in this rehearsal: {control_plane.kueue_unavailable(BIN_DIR) or 'no queue'}")
    added = {"ray-job-head", "validation-1-health-blocked"}  # the steps this module adds, each read by its test
    of_dist = [job for job in rehearsed.report.jobs if job.name not in added]
    assert of_dist, "the jobs of dist/ that Kueue manages are reported"
    assert [job for job in of_dist if not job.admitted] == []


def _named(pods: list[PodResult], prefix: str) -> list[PodResult]:
    """The pods of the workload ``prefix`` (its pods are ``<prefix>-<hash>[-<id>]``)."""
    return [p for p in pods if p.name.startswith(f"{prefix}-") and p.name[len(prefix) + 1 :].count("-") <= 1]


# ---- device plugins and what deploy applies ---------------------------------------------------
def test_device_plugins_run_on_exactly_the_nodes_they_serve(rehearsed: Rehearsed) -> None:
    deploy = rehearsed.pods(DEPLOY_STEP)
    gpu_nodes = rehearsed.gpu_nodes()
    assert len(gpu_nodes) == rehearsed.config.gpu_nodes, "the template creates the GPU nodes"
    nvidia = _named(deploy, "nvidia-device-plugin")
    efa = _named(deploy, "aws-efa-k8s-device-plugin")
    assert sorted(p.node for p in nvidia) == sorted(gpu_nodes)
    assert sorted(p.node for p in efa) == sorted(n for n, spec in rehearsed.nodes.items() if spec.efa_devices)
    assert all(p.phase == "Running" for p in nvidia + efa)
    for node in rehearsed.report.nodes:  # what the plugins then advertise
        allocatable = node["allocatable"]
        if node["name"] in gpu_nodes:
            assert allocatable[GPU] == str(rehearsed.config.gpu_profile.gpus), node
            assert allocatable[EFA] == str(rehearsed.config.gpu_profile.efa_interfaces), node
        else:
            assert GPU not in allocatable and EFA not in allocatable, node


def test_every_deploy_time_pod_runs_and_none_holds_a_gpu(rehearsed: Rehearsed) -> None:
    deploy = rehearsed.pods(DEPLOY_STEP)
    assert deploy and all(p.phase == "Running" and p.node for p in deploy), [p for p in deploy if not p.ok]
    assert not [f for f in rehearsed.report.refused if f.step == DEPLOY_STEP]
    assert not [f for f in rehearsed.report.failed_creates if f.step == DEPLOY_STEP]
    assert _named(deploy, "kuberay-operator") and _named(deploy, "training-operator")
    assert len(_named(deploy, "coredns")) == 2
    for result in deploy:
        requests = pod_requests(rehearsed.live_pod(result)["spec"])
        assert not requests.get(GPU) and not requests.get(EFA), f"{result.name} holds {requests}"
    # and so every GPU of every GPU node is free for a job that wants them all (below).


@pytest.mark.parametrize("job", list(ON_DEMAND))
def test_each_on_demand_job_runs_beside_what_deploy_applied(rehearsed: Rehearsed, job: str) -> None:
    step = rehearsed.step_of(*ON_DEMAND[job])
    pods = rehearsed.pods(step.name)
    assert pods and all(p.ok and p.node for p in pods), pods
    wanted = [
        t
        for a in step.objects
        for t in (pod_templates(a.obj) if a.obj["kind"] != "Pod" else [])
        if pod_requests(t.spec).get(GPU)
    ]
    # A Ray job's head holds no GPU; under task governance (HyperPod) it runs on a GPU node too.
    gpu_pods = [p for p in pods if p.node in rehearsed.gpu_nodes() and "-head-" not in p.name]
    if step.objects[0].obj["kind"] == "Pod":  # a HyperPodPyTorchJob's pods, as its operator makes them
        wanted_count = sum(1 for a in step.objects if pod_requests(a.obj["spec"]).get(GPU))
    else:
        wanted_count = sum(t.replicas for t in wanted)
    # a GPU job takes whole nodes: one pod per GPU node, every GPU
    if wanted_count:
        assert len(gpu_pods) == wanted_count, gpu_pods
        if step.objects[0].obj["kind"] == "Job":
            # KWOK ends a Job's pod as soon as it runs: a pod the scheduler binds after its sibling ended may take the
            # node that one left (seen under load), as it may on a cluster. What is fixed is that two of its pods
            # never share a node while they run: the template's required anti-affinity on the hostname.
            (template,) = pod_templates(step.objects[0].obj)
            (rule,) = template.spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert rule["topologyKey"] == "kubernetes.io/hostname"
            assert rule["labelSelector"]["matchLabels"].items() <= template.labels.items()
        else:
            assert len({p.node for p in gpu_pods}) == wanted_count, gpu_pods
    if job == "ray" and rehearsed.ray_cluster:  # the long-lived RayCluster and Redis are applied at deploy
        deploy = rehearsed.pods(DEPLOY_STEP)
        assert [p for p in deploy if p.name.startswith("ray-head-")] and _named(deploy, "ray-gcs-redis")


# ---- the system nodes --------------------------------------------------------------------------
def system_load(rehearsed: Rehearsed) -> dict[str, int]:
    """Per resource, what the pods the real scheduler bound to the system nodes request: the deploy's,
    both Ray heads (the RayCluster's and the Ray job's cluster), Redis, the submitter (counted though done)."""
    system = rehearsed.role("system")
    load: dict[str, int] = {}
    for pod in rehearsed.live:
        if pod["spec"].get("nodeName") in system and pod["metadata"]["namespace"] != VARIANTS_NAMESPACE:
            for resource, amount in pod_requests(pod["spec"]).items():
                load[resource] = load.get(resource, 0) + amount
    return load


def test_system_nodes_hold_what_lands_there_with_headroom(rehearsed: Rehearsed) -> None:
    names = {p["metadata"]["name"] for p in rehearsed.live if p["spec"].get("nodeName") in rehearsed.role("system")}
    assert any(n.startswith("ray-head-") for n in names) is rehearsed.ray_cluster
    # The Ray job's head: on a system node, except under task governance (on HyperPod), whose queue gives the team's
    # GPU instances only (the head runs beside a worker there).
    assert any(n.startswith("ray-job-head-") for n in names) is (rehearsed.config.compute == "eks")
    load = system_load(rehearsed)
    system = [rehearsed.nodes[n] for n in rehearsed.role("system")]
    for resource in ("cpu", "memory"):
        allocatable = sum(n.allocatable[resource] for n in system)
        assert load[resource] <= (1 - SYSTEM_HEADROOM) * allocatable, (
            f"system nodes: {resource} {load[resource]} of {allocatable} requested; raise system_nodes "
            f"(now {rehearsed.config.system_nodes}) or system_instance_type"
        )


def test_one_system_node_would_not_hold_it(rehearsed: Rehearsed) -> None:
    """The check above can fail: one system node of the default type has less memory than the same pods ask (on
    EKS, where both Ray heads run there)."""
    if rehearsed.config.compute == "hyperpod":
        pytest.skip("on HyperPod the Ray job's head runs on a GPU node (task governance)")
    (one, *_) = [rehearsed.nodes[n] for n in sorted(rehearsed.role("system"))]
    assert system_load(rehearsed)["memory"] > one.allocatable["memory"]


# ---- Ray: the always-on cluster holds no GPU until work arrives; the Ray job is a gang --------------
def test_at_rest_the_ray_cluster_holds_no_gpu_and_the_ray_job_is_a_gang(rehearsed: Rehearsed) -> None:
    deploy_ray = [p for p in rehearsed.pods(DEPLOY_STEP) if p.name.startswith(("ray-head-", "ray-gcs-redis-"))]
    # The RayCluster's head (with KubeRay's autoscaler sidecar) and Redis: on no GPU node, asking no GPU (none
    # under task governance).
    assert len(deploy_ray) == (2 if rehearsed.ray_cluster else 0)
    for pod in deploy_ray:
        assert pod.ok and pod.node not in rehearsed.gpu_nodes(), pod
        assert not pod_requests(rehearsed.live_pod(pod)["spec"]).get(GPU)
    heads = [rehearsed.live_pod(p) for p in deploy_ray if "-head-" in p.name]
    assert all("autoscaler" in [c["name"] for c in head["spec"]["containers"]] for head in heads)
    # The Ray job (Kueue admits it whole: no autoscaler) starts every GPU worker at once, each on a node of its own.
    ray_job = rehearsed.pods(rehearsed.step_of("kuberay", "ray-train").name)
    workers = [p for p in ray_job if "-worker-" in p.name]
    others = [p for p in ray_job if p not in workers]
    # On EKS the head and the submitter Job's pod, on the system nodes; under task governance (HyperPod) the head
    # alone, the submitter a container in it (SidecarMode), on a GPU node: the team's queue has no other flavour.
    on_gpu = rehearsed.config.compute == "hyperpod"
    assert len(workers) == rehearsed.config.gpu_nodes and len(others) == (1 if on_gpu else 2), ray_job
    assert all(p.ok for p in ray_job) and {p.node for p in workers} == rehearsed.gpu_nodes()
    assert all((p.node in rehearsed.gpu_nodes()) is on_gpu for p in others), others
    head_only = rehearsed.pods(RAY_JOB_HEAD)
    assert len(head_only) == len(others), head_only
    assert all(p.ok and (p.node in rehearsed.gpu_nodes()) is on_gpu for p in head_only), head_only


def test_when_work_arrives_each_ray_worker_takes_a_whole_gpu_node(rehearsed: Rehearsed) -> None:
    if not rehearsed.ray_cluster:
        pytest.skip("no always-on RayCluster under task governance (HyperPod)")
    workers = rehearsed.pods(RAY_EVERY_GPU_NODE)
    assert len(workers) == rehearsed.config.gpu_nodes
    assert all(p.phase == "Running" for p in workers) and {p.node for p in workers} == rehearsed.gpu_nodes()
    for pod in workers:
        assert pod_requests(rehearsed.live_pod(pod)["spec"])[GPU] == rehearsed.config.gpu_profile.gpus
    # The Ray job's cluster has the same GPU workers: the RayCluster may grow to every GPU node, no further, and
    # the job's fixed gang is that size.
    (ray_job,) = [o for o in dist_objects(rehearsed.dist, "kuberay") if o["kind"] == "RayJob"]
    (ray_cluster,) = [o for o in dist_objects(rehearsed.dist, "kuberay") if o["kind"] == "RayCluster"]
    (job_group,) = ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    (group,) = ray_cluster["spec"]["workerGroupSpecs"]
    assert job_group["template"]["spec"] == group["template"]["spec"]  # the job's pods also carry its queue labels
    assert job_group["replicas"] == group["maxReplicas"] == rehearsed.config.gpu_nodes


def test_the_validation_job_cannot_run_while_ray_holds_every_gpu_node(rehearsed: Rehearsed) -> None:
    if not rehearsed.ray_cluster:
        pytest.skip("no always-on RayCluster under task governance (HyperPod)")
    blocked = rehearsed.pods(BLOCKED)
    held = [job for job in rehearsed.report.jobs if job.name == "validation-1-health-blocked"]
    if held and not held[0].admitted:  # Kueue holds it (the quota taken, or an admitted gang not yet ready): no pod
        assert not blocked and held[0].reason, held
    else:
        assert blocked and all(p.phase == "Pending" and not p.node for p in blocked), blocked
        assert all("Insufficient nvidia.com/gpu" in p.reason for p in blocked), blocked
    assert not rehearsed.report.passed


# ---- the HyperPod training operator add-on: where its pods land, however it combines values ------
def _variant(rehearsed: Rehearsed, pod: str, values: str, merge: str) -> list[PodResult]:
    """The pods of one variant's Deployment, by their ``variant`` label: a pod's generated name cuts a long
    Deployment name short (``...--system--helm-merg<random>``)."""
    assert not [f for f in rehearsed.report.refused if f.step == VARIANTS], rehearsed.report.refused
    name = f"{pod}--{values}--{merge}"
    return [p for p in rehearsed.pods(VARIANTS) if rehearsed.live_pod(p)["metadata"]["labels"].get("variant") == name]


# The HyperPod training operator add-on (and cert-manager for it) is installed in compute=hyperpod only.
HYPERPOD_ONLY = pytest.mark.parametrize("rehearsed", ["hyperpod"], indirect=True)


def _hyperpod_cpu_nodes(rehearsed: Rehearsed) -> set[str]:
    return {
        n for n, s in rehearsed.nodes.items() if HYPERPOD_COMPUTE_TYPE_LABEL in s.labels and not s.gpus and not s.taints
    }


@HYPERPOD_ONLY
@pytest.mark.parametrize("merge", VALUE_MERGES)
def test_controller_runs_on_the_hyperpod_cpu_group_however_the_addon_combines_values(rehearsed, merge) -> None:
    assert _hyperpod_cpu_nodes(rehearsed), "the HyperPod cluster has a CPU group"
    (pod,) = _variant(rehearsed, HYPERPOD_TRAINING_OPERATOR_CONTROLLER, "ours", merge)
    assert pod.phase == "Running" and pod.node in _hyperpod_cpu_nodes(rehearsed), pod
    if merge == HELM_MERGE:  # as the deploy itself has it
        (deployed,) = _named(rehearsed.pods(DEPLOY_STEP), HYPERPOD_TRAINING_OPERATOR_CONTROLLER)
        assert deployed.node in _hyperpod_cpu_nodes(rehearsed)


@HYPERPOD_ONLY
def test_system_node_values_leave_the_controller_pending_if_the_addon_merges(rehearsed) -> None:
    (replaced,) = _variant(rehearsed, HYPERPOD_TRAINING_OPERATOR_CONTROLLER, "system", REPLACE)
    assert replaced.phase == "Running" and replaced.node in rehearsed.role("system")
    (merged,) = _variant(rehearsed, HYPERPOD_TRAINING_OPERATOR_CONTROLLER, "system", HELM_MERGE)
    assert merged.phase == "Pending" and not merged.node
    assert "didn't match Pod's node affinity/selector" in merged.reason, merged


@HYPERPOD_ONLY
@pytest.mark.parametrize("merge", VALUE_MERGES)
def test_cert_manager_runs_only_on_untainted_nodes(rehearsed, merge) -> None:
    untainted = {n for n, s in rehearsed.nodes.items() if not s.taints}
    assert rehearsed.role("system") and rehearsed.role("system") | _hyperpod_cpu_nodes(rehearsed) == untainted
    for name in CERT_MANAGER_PODS:
        (pod,) = _variant(rehearsed, name, "ours", merge)
        assert pod.phase == "Running" and pod.node in untainted, pod
