"""Gang admission (issue 31, items 1-2): this app's Kueue on plain EKS (the chart's values, the queue objects
against the pinned release's CRDs, the quota), AWS's task governance on HyperPod (the add-on, the cluster
policy, the compute allocation, no Kueue chart), and the queue labels on our jobs in both modes."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import cdk8s
import jsonschema
import pytest
import yaml
from aws_cdk.assertions import Match, Template

from conftest import RAY_TEST_IMAGE, hyperpod_config
from llm_infra.config import ConfigError, TrainingConfig
from llm_infra.k8s_manifests.render import QUEUES_CHART, build_charts
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.queueing import (
    GPU_NODE_DAEMONSETS,
    KUEUE_INTEGRATIONS,
    MAX_PODS,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    SYSTEM_NODE_DAEMONSETS,
    TASK_GOVERNANCE_RESOURCES,
    XID_MONITOR_REQUESTS,
    kubelet_reserved_memory_mib,
    node_group_quota,
)
from llm_infra.rehearsal.deploy_workloads import Templates
from llm_infra.rehearsal.rehearse import read_templates
from llm_infra.rehearsal.task_governance import instance_quota, stand_in_objects
from llm_infra.rehearsal.upstream_charts import NoModel
from llm_infra.versions import EKS_ADDONS, HYPERPOD_TASK_GOVERNANCE_ADDONS, KUEUE, KUEUE_VERSION

JOB_KINDS = ("PyTorchJob", "HyperPodPyTorchJob", "Job", "RayJob")
HELM_CHART = "Custom::AWSCDK-EKS-HelmChart"


def charts(config: TrainingConfig) -> dict[str, list[dict[str, Any]]]:
    built = build_charts(cdk8s.App(), WorkloadValues.from_config(config), recipe=True)
    return {name: chart.to_json() for name, chart in built.items()}


@pytest.fixture(scope="module")
def eks_charts() -> dict[str, list[dict[str, Any]]]:
    return charts(TrainingConfig(ray_image=RAY_TEST_IMAGE))


@pytest.fixture(scope="module")
def hyperpod_charts() -> dict[str, list[dict[str, Any]]]:
    return charts(hyperpod_config(ray_image=RAY_TEST_IMAGE))


def of_kind(built: dict[str, list[dict[str, Any]]], *kinds: str) -> list[dict[str, Any]]:
    return [doc for docs in built.values() for doc in docs if doc["kind"] in kinds]


def pod_templates(job: dict[str, Any]) -> list[dict[str, Any]]:
    spec = job["spec"]
    if job["kind"] == "PyTorchJob":
        return [r["template"] for r in spec["pytorchReplicaSpecs"].values()]
    if job["kind"] == "HyperPodPyTorchJob":
        return [r["template"] for r in spec["replicaSpecs"]]
    if job["kind"] == "Job":
        return [spec["template"]]
    return []  # RayJob: KubeRay makes the pods of its cluster


# ---- the quota --------------------------------------------------------------------------------------
def test_the_quota_is_the_nodes_allocatable_less_the_daemonsets() -> None:
    """Per node: the vCPUs less the AMI's kube-reserved CPU, the memory less 11 MiB x 110 pods + 255 MiB and the
    100 MiB eviction threshold, less the hugepages, less the DaemonSets; GPUs and EFA devices whole; x nodes."""
    quota = node_group_quota(
        vcpus=192, memory_gib=2048, nodes=2, daemonsets=(760, 487), gpus=8, efa_devices=32, hugepages_mib=10240
    )
    reserved_cpu = 60 + 10 + 2 * 5 + 188 * 2.5
    assert quota["cpu"] == f"{2 * int(192_000 - reserved_cpu - 760)}m"
    assert quota["memory"] == f"{2 * (2048 * 1024 - (11 * 110 + 255 + 100) - 10240 - 487)}Mi"
    assert (quota["nvidia.com/gpu"], quota["vpc.amazonaws.com/efa"], quota["hugepages-2Mi"]) == ("16", "64", "20480Mi")
    with pytest.raises(ValueError, match="take a whole node"):
        node_group_quota(vcpus=1, memory_gib=4, nodes=1, daemonsets=(2000, 0))


def test_the_cluster_queue_quota_follows_the_config() -> None:
    """The default app: the system flavour first, without GPUs; the GPU node group's with every add-on a new
    cluster installs and our Xid monitor taken off; 256 nodes scale it; efa=false takes no EFA device."""
    config = TrainingConfig()
    system, gpu = WorkloadValues.from_config(config).queues.flavors  # type: ignore[union-attr]
    assert system.quota["nvidia.com/gpu"] == "0" and system.node_labels == {"llm-infra.aws/node-role": "system"}
    daemonsets = [GPU_NODE_DAEMONSETS[name] for name in config.installs if name in GPU_NODE_DAEMONSETS]
    cpu = sum(c for c, _ in daemonsets) + XID_MONITOR_REQUESTS[0]
    memory = sum(m for _, m in daemonsets) + XID_MONITOR_REQUESTS[1]
    expected = node_group_quota(
        vcpus=192,
        memory_gib=2048,
        nodes=config.gpu_nodes,
        daemonsets=(cpu, memory),
        gpus=8,
        efa_devices=32,
        hugepages_mib=2 * config.hugepages_2mib,
    )
    assert gpu.quota == expected and gpu.node_taints == ({"key": "nvidia.com/gpu", "effect": "NoSchedule"},)
    big = WorkloadValues.from_config(config.with_(gpu_nodes=256, efa=False)).queues.flavors[1].quota  # type: ignore[union-attr]
    assert big["nvidia.com/gpu"] == "2048" and big["vpc.amazonaws.com/efa"] == "0"


def _millicpu(value: str) -> int:
    return int(value[:-1]) if value.endswith("m") else int(float(value) * 1000)


def _mib(value: str) -> int:
    return int(value[:-2]) * (1024 if value.endswith("Gi") else 1)


def _requests(templates: list[Any]) -> tuple[int, int]:
    cpu = memory = 0
    for template in templates:
        for container in template.spec["containers"]:
            wanted = container.get("resources", {}).get("requests", {})
            cpu += _millicpu(str(wanted.get("cpu", "0")))
            memory += _mib(str(wanted.get("memory", "0Mi")))
    return cpu, memory


def test_the_figures_are_the_rehearsals() -> None:
    """The nodes' reservations and the add-ons' DaemonSet requests are those of the rehearsal's models (one
    reading of the upstream sources: llm_infra/rehearsal/deploy_workloads.py and upstream_charts.py)."""
    from llm_infra.rehearsal import deploy_workloads, upstream_charts

    capacity, allocatable = deploy_workloads._resources("p5.48xlarge", 192, 2048, 10240)
    assert deploy_workloads.MAX_PODS.get("p5.48xlarge", 110) == MAX_PODS
    assert capacity["memory"] - allocatable["memory"] == kubelet_reserved_memory_mib(MAX_PODS) + 10240
    for name, version in EKS_ADDONS[TrainingConfig().kubernetes_version].items():
        if name == "coredns":
            continue
        daemons = [t for t in upstream_charts.addon_pods(name, version) if t.daemon]
        assert _requests(daemons) == GPU_NODE_DAEMONSETS[name], name
        # The DCGM pieces go to NVIDIA instance types only.
        assert _requests([t for t in daemons if "dcgm" not in t.name]) == SYSTEM_NODE_DAEMONSETS[name], name


# ---- this app's Kueue (plain EKS) -------------------------------------------------------------------
def test_eks_installs_the_pinned_kueue_chart(default_app) -> None:
    template = Template.from_json(default_app.template("cluster"))
    template.has_resource_properties(
        HELM_CHART,
        {
            "Chart": KUEUE.chart,
            "Repository": "oci://registry.k8s.io/kueue/charts/kueue",
            "Version": KUEUE_VERSION.removeprefix("v"),
            "Namespace": "kueue-system",
            "CreateNamespace": True,
        },
    )
    (kueue,) = [r for r in default_app.resources("cluster", HELM_CHART).values() if r["Properties"]["Chart"] == "kueue"]
    values = json.loads(kueue["Properties"]["Values"])
    assert values["controllerManager"]["nodeSelector"] == {"llm-infra.aws/node-role": "system"}
    configuration = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert configuration["waitForPodsReady"] == {
        "timeout": "15m",
        "blockAdmission": True,
        "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 1800},
    }
    assert configuration["manageJobsWithoutQueueName"] is True
    (excluded,) = configuration["managedJobsNamespaceSelector"]["matchExpressions"]
    assert excluded["operator"] == "NotIn" and {"kube-system", "kueue-system", "kuberay-system"} <= set(
        excluded["values"]
    )
    assert "training" not in excluded["values"]
    assert configuration["integrations"]["frameworks"] == ["batch/job", "kubeflow.org/pytorchjob", "ray.io/rayjob"]
    # The queue objects wait for the chart (its CRDs, its webhook); the jobs for the queue objects.
    resources = default_app.template("cluster")["Resources"]
    (kueue_id,) = [k for k, r in resources.items() if r["Type"] == HELM_CHART and r["Properties"]["Chart"] == "kueue"]
    queues_id = next(k for k in resources if k.startswith(f"EksClusterChart{QUEUES_CHART.replace('-', '')}"))
    assert kueue_id in resources[queues_id]["DependsOn"]
    for job_chart in ("validation", "trainingjob"):
        job_id = next((k for k in resources if k.startswith(f"EksClusterChart{job_chart}")), None)
        if job_id is not None:  # apply_jobs: the jobs are applied at deploy
            assert queues_id in resources[job_id]["DependsOn"]


def test_kueue_configuration_is_valid_for_the_pinned_release() -> None:
    """The Configuration's fields as kueue v0.17.0 apis/config/v1beta2 names them (the chart templates read
    ``integrations`` and ``managedJobsNamespaceSelector`` from it for the webhooks)."""
    from llm_infra.constructs.kueue import kueue_configuration

    configuration = kueue_configuration()
    assert configuration["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert "ray.io/raycluster" not in KUEUE_INTEGRATIONS  # the always-on RayCluster stays outside Kueue
    types = _kueue_file("apis/config/v1beta2/configuration_types.go")
    for key in ("waitForPodsReady", "manageJobsWithoutQueueName", "managedJobsNamespaceSelector", "integrations"):
        assert f'json:"{key}' in types, key
    for key in ("blockAdmission", "requeuingStrategy", "backoffBaseSeconds", "backoffMaxSeconds", "timestamp"):
        assert f'json:"{key}' in types, key


def test_queue_objects_pass_the_kueue_crds(eks_charts) -> None:
    docs = eks_charts[QUEUES_CHART]
    kinds = sorted(doc["kind"] for doc in docs)
    assert kinds == ["ClusterQueue", "LocalQueue", "ResourceFlavor", "ResourceFlavor"] + ["WorkloadPriorityClass"] * 2
    for doc in docs:
        errors = sorted(_crd_validator(doc["kind"]).iter_errors(doc), key=str)
        assert not errors, f"{doc['kind']}/{doc['metadata']['name']}: {errors[0].message} at {list(errors[0].path)}"
    (queue,) = [d for d in docs if d["kind"] == "ClusterQueue"]
    (group,) = queue["spec"]["resourceGroups"]
    assert [f["name"] for f in group["flavors"]] == ["system", "gpu-p5-48xlarge"]
    assert set(group["coveredResources"]) >= {"cpu", "memory", "nvidia.com/gpu", "vpc.amazonaws.com/efa"}
    (local,) = [d for d in docs if d["kind"] == "LocalQueue"]
    assert (local["metadata"]["name"], local["metadata"]["namespace"]) == ("default", "training")
    assert local["spec"]["clusterQueue"] == queue["metadata"]["name"]
    # The CRD check catches a mistake.
    broken = copy.deepcopy(queue)
    broken["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuotaa"] = "1"
    assert list(_crd_validator("ClusterQueue").iter_errors(broken))


def test_our_jobs_name_the_queue_on_eks(eks_charts) -> None:
    jobs = of_kind(eks_charts, *JOB_KINDS)
    assert {j["kind"] for j in jobs} == {"PyTorchJob", "Job", "RayJob"}
    for job in jobs:
        labels = job["metadata"]["labels"]
        assert labels[QUEUE_LABEL] == "default", job["metadata"]["name"]
        validation = job["metadata"]["name"].startswith("validation-")
        assert labels[PRIORITY_LABEL] == ("validation-priority" if validation else "training-priority")
        for template in pod_templates(job):
            assert template["metadata"]["labels"][QUEUE_LABEL] == "default"


def test_the_always_on_raycluster_stays_outside_kueue_and_the_rayjob_is_a_gang(eks_charts) -> None:
    """The RayCluster autoscales (Kueue 0.17 would refuse it: the raycluster integration is off and it names no
    queue); the RayJob's cluster is fixed, as Kueue's RayJob webhook demands of a queued one (kueue v0.17.0
    pkg/controller/jobs/rayjob/rayjob_webhook.go validateCreate: shutdownAfterJobFinishes, no clusterSelector,
    no autoscaling, at most 7 worker groups, none named head)."""
    (cluster,) = of_kind(eks_charts, "RayCluster")
    assert cluster["spec"]["enableInTreeAutoscaling"] is True
    assert QUEUE_LABEL not in cluster["metadata"].get("labels", {})
    (job,) = of_kind(eks_charts, "RayJob")
    spec = job["spec"]
    assert spec["shutdownAfterJobFinishes"] is True and "clusterSelector" not in spec
    assert not spec["rayClusterSpec"].get("enableInTreeAutoscaling", False)
    (workers,) = spec["rayClusterSpec"]["workerGroupSpecs"]
    nodes = TrainingConfig().gpu_nodes
    assert (workers["replicas"], workers["minReplicas"], workers["maxReplicas"]) == (nodes, nodes, nodes)
    assert workers["groupName"] != "head"
    webhook = _kueue_file("pkg/controller/jobs/raycluster/raycluster_webhook.go")
    assert "a kueue managed job can use autoscaling only when the ElasticJobsViaWorkloadSlices" in webhook


def test_queueing_none_renders_no_queue() -> None:
    built = charts(TrainingConfig(queueing="none", ray_image=RAY_TEST_IMAGE))
    assert QUEUES_CHART not in built
    for job in of_kind(built, *JOB_KINDS):
        assert QUEUE_LABEL not in job["metadata"]["labels"]
    assert "kueue" not in TrainingConfig(queueing="none").installs


# ---- HyperPod: task governance ----------------------------------------------------------------------
def test_hyperpod_jobs_run_in_the_team_namespace_with_its_labels(hyperpod_charts) -> None:
    assert QUEUES_CHART not in hyperpod_charts  # AWS's queues
    jobs = of_kind(hyperpod_charts, *JOB_KINDS)
    assert "HyperPodPyTorchJob" in {j["kind"] for j in jobs}
    for job in jobs:
        assert job["metadata"]["namespace"] == "hyperpod-ns-training"
        labels = job["metadata"]["labels"]
        assert labels[QUEUE_LABEL] == "hyperpod-ns-training-localqueue"
        assert labels[PRIORITY_LABEL] in ("training-priority", "validation-priority")
        for template in pod_templates(job):
            assert template["metadata"]["labels"][QUEUE_LABEL] == labels[QUEUE_LABEL]
    (namespace,) = of_kind(hyperpod_charts, "Namespace")
    assert namespace["metadata"]["name"] == "hyperpod-ns-training"
    team = charts(hyperpod_config(hyperpod_team="vision"))
    assert {j["metadata"]["labels"][QUEUE_LABEL] for j in of_kind(team, *JOB_KINDS)} == {
        "hyperpod-ns-vision-localqueue"
    }


def test_hyperpod_installs_task_governance_not_our_kueue(synth) -> None:
    config = hyperpod_config()
    app = synth(config)
    cluster = app.template("cluster")
    template = Template.from_json(cluster)
    assert all(r["Properties"]["Chart"] != "kueue" for r in app.resources("cluster", HELM_CHART).values())
    addon_version = HYPERPOD_TASK_GOVERNANCE_ADDONS[config.kubernetes_version][
        "amazon-sagemaker-hyperpod-taskgovernance"
    ]
    template.has_resource_properties(
        "AWS::EKS::Addon",
        {
            "AddonName": "amazon-sagemaker-hyperpod-taskgovernance",
            "AddonVersion": addon_version,
            "ResolveConflicts": "OVERWRITE",
        },
    )
    template.has_resource_properties(
        "AWS::SageMaker::ClusterSchedulerConfig",
        {
            "ClusterArn": {"Fn::GetAtt": [Match.any_value(), "ClusterArn"]},
            "SchedulerConfig": {
                "PriorityClasses": [{"Name": "validation", "Weight": 90}, {"Name": "training", "Weight": 70}],
                "FairShare": "Disabled",
            },
        },
    )
    template.has_resource_properties(
        "AWS::SageMaker::ComputeQuota",
        {
            "ClusterArn": {"Fn::GetAtt": [Match.any_value(), "ClusterArn"]},
            "ComputeQuotaTarget": {"TeamName": "training"},
            "ComputeQuotaConfig": {
                "ComputeQuotaResources": [{"InstanceType": "ml.p5.48xlarge", "Count": config.gpu_nodes}],
                "ResourceSharingConfig": {"Strategy": "DontLend"},
                "PreemptTeamTasks": "Never",
            },
        },
    )
    resources = cluster["Resources"]
    (quota_id,) = [k for k, r in resources.items() if r["Type"] == "AWS::SageMaker::ComputeQuota"]
    (addon_id,) = [
        k
        for k, r in resources.items()
        if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"].endswith("taskgovernance")
    ]
    assert addon_id in resources[quota_id]["DependsOn"]
    base_id = next(k for k in resources if k.startswith("EksClusterChartbase"))
    assert quota_id in resources[base_id]["DependsOn"]


# ---- config ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"queueing": "volcano"}, "queueing: 'volcano' is not allowed; allowed: kueue, none"),
        ({"hyperpod_team": "Team_A"}, "hyperpod_team: 'Team_A' is not allowed; allowed: 1-41 of a-z"),
        ({"hyperpod_team": "vision"}, "hyperpod_team: only with compute=hyperpod and queueing=kueue"),
        ({"system_instance_type": "m6i.large"}, "system_instance_type: 'm6i.large' has no vCPU and memory"),
    ],
)
def test_bad_queueing_config_names_the_key(changes: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TrainingConfig(**changes).validate()


def test_existing_cluster_brings_its_own_kueue_or_installs_ours() -> None:
    existing = {
        "existing_vpc_id": "vpc-0123456789abcdef0",
        "existing_private_subnet_ids": "subnet-0123456789abcdef0,subnet-0123456789abcdef1",
        "existing_nat_gateway_id": "nat-0123456789abcdef0",
        "existing_cluster_name": "theirs",
        "existing_cluster_security_group_id": "sg-0123456789abcdef0",
    }
    assert "kueue" not in TrainingConfig(**existing).installs  # theirs: our queue objects only
    assert WorkloadValues.from_config(TrainingConfig(**existing)).queues is not None
    assert "kueue" in TrainingConfig(**existing, install_addons="kueue").installs
    with pytest.raises(ConfigError, match="install_addons: kueue is this app's Kueue for compute=eks"):
        TrainingConfig(**existing, compute="hyperpod", install_addons="kueue").validate()
    with pytest.raises(ConfigError, match="install_addons: amazon-sagemaker-hyperpod-taskgovernance needs"):
        TrainingConfig(**existing, install_addons="amazon-sagemaker-hyperpod-taskgovernance").validate()


# ---- what runs where: the team namespace's admission, the jobs-only integrations ------------------------
# Every kind we render that makes pods, with where its pod templates sit (RayCluster, RayJob: KubeRay's groups).
POD_MAKERS = ("Pod", "Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "CronJob", "RayCluster", *JOB_KINDS)
# Task governance's pod-making frameworks that are not jobs (kueue v0.17.0 pkg/controller/jobs: pod, deployment,
# statefulset, leaderworkerset, ray.io/raycluster and ray.io/rayservice FrameworkName): none may be on in ours.
NOT_JOB_INTEGRATIONS = (
    "pod",
    "deployment",
    "statefulset",
    "leaderworkerset.x-k8s.io/leaderworkerset",
    "ray.io/raycluster",
    "ray.io/rayservice",
)


def all_pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates of any pod-making object we render (a Pod is its own)."""
    if obj["kind"] == "Pod":
        return [obj]
    if obj["kind"] in ("RayCluster", "RayJob"):
        spec = obj["spec"] if obj["kind"] == "RayCluster" else obj["spec"]["rayClusterSpec"]
        return [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]
    if obj["kind"] == "CronJob":
        return [obj["spec"]["jobTemplate"]["spec"]["template"]]
    if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet"):
        return [obj["spec"]["template"]]
    return pod_templates(obj)


def test_only_queued_jobs_run_in_the_hyperpod_team_namespace(hyperpod_charts) -> None:
    """Task governance's admission policy refuses a Pod or Deployment without a queue label in a team namespace
    (a ``hyperpod-ns-*`` namespace labelled as SageMaker-managed: AWS's "AI on SageMaker HyperPod",
    Spaces-Node-Overprovisioning/namespace-and-priorityclass), and its Kueue would queue what carries one. So there:
    only our queued jobs, each with the team's queue and one of our priority classes, down to its pod templates;
    the node agents elsewhere (the Xid monitor in kube-system with its own scripts)."""
    team = "hyperpod-ns-training"
    unqueued = set()
    for chart, docs in hyperpod_charts.items():
        for obj in docs:
            if obj["kind"] not in POD_MAKERS or not obj["metadata"].get("namespace", "").startswith("hyperpod-ns-"):
                continue
            labels = obj["metadata"].get("labels", {})
            if obj["kind"] not in JOB_KINDS or QUEUE_LABEL not in labels:
                unqueued.add(f"{obj['kind']}/{obj['metadata']['name']}")
                continue
            assert labels[QUEUE_LABEL] == f"{team}-localqueue", (chart, obj["metadata"]["name"])
            assert labels[PRIORITY_LABEL] in ("training-priority", "validation-priority"), obj["metadata"]["name"]
            for template in all_pod_templates(obj):
                pod_labels = template.get("metadata", {}).get("labels", {})
                assert pod_labels.get(QUEUE_LABEL) == labels[QUEUE_LABEL], (obj["metadata"]["name"], pod_labels)
                assert pod_labels.get(PRIORITY_LABEL) == labels[PRIORITY_LABEL], (obj["metadata"]["name"], pod_labels)
    # The always-on RayCluster and its Redis are not rendered there (docs/hyperpod.md, "What runs in the team
    # namespace"): nothing unqueued is left.
    assert unqueued == set()
    (monitor,) = [o for o in of_kind(hyperpod_charts, "DaemonSet") if o["metadata"]["name"] == "gpu-xid-monitor"]
    assert monitor["metadata"]["namespace"] == "kube-system"
    (scripts,) = [v["configMap"]["name"] for v in monitor["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    (configmap,) = [o for o in of_kind(hyperpod_charts, "ConfigMap") if o["metadata"]["name"] == scripts]
    assert configmap["metadata"]["namespace"] == "kube-system"
    assert {"xid_monitor.py", "health_check.py"} <= set(configmap["data"])


def test_on_eks_kueue_manages_jobs_only_so_our_deployments_and_daemonsets_run_as_they_are(eks_charts) -> None:
    """manageJobsWithoutQueueName queues every unlabelled object of an enabled integration in the jobs' namespace:
    with no pod, deployment or statefulset integration, our Deployments and DaemonSets there (Redis, the Xid
    monitor) are none of Kueue's business, and carry no queue label."""
    from llm_infra.constructs.kueue import kueue_configuration

    configuration = kueue_configuration()
    assert configuration["manageJobsWithoutQueueName"] is True
    frameworks = configuration["integrations"]["frameworks"]  # type: ignore[index]
    assert set(frameworks) == set(KUEUE_INTEGRATIONS) == {"batch/job", "kubeflow.org/pytorchjob", "ray.io/rayjob"}
    assert not set(frameworks) & set(NOT_JOB_INTEGRATIONS)
    assert "podOptions" not in configuration["integrations"]  # type: ignore[operator]
    others = [o for o in of_kind(eks_charts, *POD_MAKERS) if o["kind"] not in JOB_KINDS]
    assert {(o["kind"], o["metadata"]["namespace"]) for o in others} >= {
        ("Deployment", "training"),
        ("DaemonSet", "training"),
    }
    for obj in others:
        assert QUEUE_LABEL not in obj["metadata"].get("labels", {}), obj["metadata"]["name"]


def test_hyperpod_pods_request_only_what_task_governances_queue_covers(hyperpod_charts, eks_charts) -> None:
    """AWS's ClusterQueue covers TASK_GOVERNANCE_RESOURCES, no hugepages: a pod that requests another resource is
    never admitted there (Kueue: "resource hugepages-2Mi unavailable in ClusterQueue"). So under task governance
    our pods request none, and tell libfabric not to take its buffers from hugepages; on EKS our own ClusterQueue
    covers them, and the GPU pods keep them."""
    checked = 0
    for obj in of_kind(hyperpod_charts, *JOB_KINDS):
        for template in all_pod_templates(obj):
            for container in template["spec"]["containers"]:
                resources = container.get("resources", {})
                requested = {*resources.get("requests", {}), *resources.get("limits", {})}
                assert requested <= set(TASK_GOVERNANCE_RESOURCES), (obj["metadata"]["name"], requested)
                if "vpc.amazonaws.com/efa" in requested:
                    env = {e["name"]: e.get("value") for e in container.get("env", [])}
                    assert env.get("FI_EFA_USE_HUGE_PAGE") == "0", obj["metadata"]["name"]
                    checked += 1
    assert checked >= 4  # the health check, the training and validation HyperPodPyTorchJobs
    eks_gpu = [
        container
        for obj in of_kind(eks_charts, *JOB_KINDS)
        for template in all_pod_templates(obj)
        for container in template["spec"]["containers"]
        if "vpc.amazonaws.com/efa" in container.get("resources", {}).get("limits", {})
    ]
    assert eks_gpu and all(c["resources"]["limits"]["hugepages-2Mi"] == "10240Mi" for c in eks_gpu)
    assert not [c for c in eks_gpu if any(e["name"] == "FI_EFA_USE_HUGE_PAGE" for e in c.get("env", []))]


def test_under_task_governance_every_queued_pod_goes_to_the_teams_gpu_nodes(hyperpod_charts, eks_charts) -> None:
    """Task governance's flavours are the team's GPU instance types, whose node label Kueue adds to every pod it
    admits: a queued pod that selected the system nodes would match no node (the HyperPod rehearsal showed the
    Ray job's head Pending so). So there every queued pod tolerates the GPU taint and selects the GPU nodes, and
    the Ray job's submitter is a container in its head (SidecarMode) rather than a Job of its own; on EKS the
    head stays on the system nodes, which our ClusterQueue's system flavour covers."""
    for obj in of_kind(hyperpod_charts, *JOB_KINDS):
        for template in all_pod_templates(obj):
            spec = template["spec"]
            assert "nodeSelector" not in spec, obj["metadata"]["name"]
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
            (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"
            ]
            assert {"key": "llm-infra.aws/node-role", "operator": "In", "values": ["gpu"]} in term["matchExpressions"]
    (ray_job,) = of_kind(hyperpod_charts, "RayJob")
    assert ray_job["spec"]["submissionMode"] == "SidecarMode"
    (eks_ray_job,) = of_kind(eks_charts, "RayJob")
    assert "submissionMode" not in eks_ray_job["spec"]  # KubeRay's default, K8sJobMode
    head = eks_ray_job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["nodeSelector"] == {"llm-infra.aws/node-role": "system"}


def test_the_task_governance_stand_in_makes_the_queues_aws_makes_for_the_compute_allocation(synth) -> None:
    """What the real Kueue runs with in a HyperPod rehearsal (llm_infra/rehearsal/task_governance.py): AWS's names,
    one flavour per instance type, whole instances' figures as the quota; each object passes Kueue's CRDs."""
    app = synth(hyperpod_config())
    templates = read_templates(app.outdir)
    objects = stand_in_objects(templates)
    for obj in objects:
        if obj["kind"] != "Namespace":
            errors = sorted(_crd_validator(obj["kind"]).iter_errors(obj), key=str)
            assert not errors, f"{obj['kind']}: {errors[0].message} at {list(errors[0].path)}"
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    priorities = {o["metadata"]["name"]: o["value"] for o in by_kind["WorkloadPriorityClass"]}
    assert priorities == {"validation-priority": 90, "training-priority": 70}
    (namespace,) = by_kind["Namespace"]
    assert namespace["metadata"] == {
        "name": "hyperpod-ns-training",
        "labels": {
            "sagemaker.amazonaws.com/sagemaker-managed-queue": "true",
            "sagemaker.amazonaws.com/quota-allocation-id": "training",
        },
    }
    (flavor,) = by_kind["ResourceFlavor"]
    assert flavor["metadata"]["name"] == "ml.p5.48xlarge"
    assert flavor["spec"]["nodeLabels"] == {"node.kubernetes.io/instance-type": "ml.p5.48xlarge"}
    (queue,) = by_kind["ClusterQueue"]
    assert queue["metadata"]["name"] == "hyperpod-ns-training-clusterqueue"
    assert queue["spec"]["preemption"] == {"withinClusterQueue": "Never"}  # PreemptTeamTasks: Never
    (group,) = queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == list(TASK_GOVERNANCE_RESOURCES)
    (p5,) = group["flavors"]
    quota = {r["name"]: r["nominalQuota"] for r in p5["resources"]}
    assert quota == {
        "aws.amazon.com/neurondevice": "0",
        "cpu": "384",
        "memory": "4096Gi",
        "nvidia.com/gpu": "16",
        "vpc.amazonaws.com/efa": "64",
    }  # the app's 2 p5.48xlarge, whole
    (local,) = by_kind["LocalQueue"]
    assert (local["metadata"], local["spec"]) == (
        {"name": "hyperpod-ns-training-localqueue", "namespace": "hyperpod-ns-training"},
        {"clusterQueue": "hyperpod-ns-training-clusterqueue"},
    )
    # AWS's walkthrough: a team given one ml.g5.12xlarge has 48 cpu, 192Gi and 4 GPUs of quota.
    g5 = instance_quota("ml.g5.12xlarge", 1)
    assert (g5["cpu"], g5["memory"], g5["nvidia.com/gpu"]) == ("48", "192Gi", "4")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ResourceSharingConfig": {"Strategy": "LendAndBorrow"}}, "ResourceSharingConfig LendAndBorrow"),
        ({"ComputeQuotaResources": [{"InstanceType": "ml.p5.48xlarge", "Accelerators": 8}]}, "Accelerators"),
        ({"PreemptTeamTasks": "Always"}, "PreemptTeamTasks Always"),
    ],
)
def test_the_stand_in_refuses_an_allocation_it_does_not_model(synth, change: dict[str, Any], message: str) -> None:
    templates = read_templates(synth(hyperpod_config()).outdir)
    edited = copy.deepcopy(templates.templates)
    for template in edited.values():
        for resource in template["Resources"].values():
            if resource["Type"] == "AWS::SageMaker::ComputeQuota":
                resource["Properties"]["ComputeQuotaConfig"].update(change)
    with pytest.raises(NoModel, match=message):
        stand_in_objects(Templates(edited))


# ---- the pinned release's sources --------------------------------------------------------------------
@cache
def _kueue_module() -> Path:
    """The sigs.k8s.io/kueue module at the pin, from Go's module cache (``make k8s`` puts it there)."""
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    try:
        cache_dir = subprocess.run(
            ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True, env=env
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no Go toolchain: the Kueue module's CRDs are read from Go's module cache")
    module = Path(cache_dir) / f"sigs.k8s.io/kueue@{KUEUE_VERSION}"
    if not module.is_dir():
        pytest.skip(f"{module} is not there: `go mod download sigs.k8s.io/kueue@{KUEUE_VERSION}` (or make k8s)")
    return module


def _kueue_file(path: str) -> str:
    return (_kueue_module() / path).read_text()


@cache
def _crd_validator(kind: str) -> jsonschema.Draft7Validator:
    from manifest_validation import _structural_to_jsonschema

    plural = f"{kind.lower()}es" if kind.endswith("s") else f"{kind.lower()}s"
    (crd,) = [d for d in yaml.safe_load_all(_kueue_file(f"config/components/crd/bases/kueue.x-k8s.io_{plural}.yaml"))]
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2" and v.get("served")]
    schema = _structural_to_jsonschema(copy.deepcopy(served["schema"]["openAPIV3Schema"]))
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft7Validator(schema)
