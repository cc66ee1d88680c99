"""What the pinned upstream Helm charts and EKS add-ons do with the values we pass: their defaults and
templates, as pod specs the scheduler sees, and the CRDs they install.

Each model was read from the chart's source at the version pinned in ``llm_infra/versions.py`` (paths and
commits below); a chart or version without a model raises :class:`NoModel`. The models are keyed by those
pins, and each section below names the version it was read at: after a bump, ``tests/test_version_pins.py``
names every such citation that no longer matches the pin, so a version bump means reading the new source. Only
what scheduling and CRD presence depend on is modelled: affinity, nodeSelector, tolerations, resource
requests, replicas, DaemonSet or not. Used by ``llm-infra rehearse`` and the contract tests.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llm_infra.instance_types import INSTANCE_PROFILES
from llm_infra.node_labels import INSTANCE_TYPE_LABEL
from llm_infra.service_limits import HYPERPOD_TRAINING_OPERATOR_NAMESPACE
from llm_infra.versions import EFA_DEVICE_PLUGIN, KUBERAY_OPERATOR, KUEUE, NVIDIA_DEVICE_PLUGIN

CRITICAL_ADDONS_ONLY = {"key": "CriticalAddonsOnly", "operator": "Exists"}
# HyperPod labels each of its nodes with this (value as in published listings of HyperPod nodes, e.g.
# awslabs/awsome-distributed-ai 4.validation_and_observability/5.nsight/EKS/llama3_2_1b-fsdp-nsight.yaml:
# "sagemaker.amazonaws.com/compute-type: hyperpod  # For HyperPod EKS").
HYPERPOD_COMPUTE_TYPE_LABEL = "sagemaker.amazonaws.com/compute-type"
HYPERPOD_COMPUTE_TYPE = "hyperpod"
# How an EKS add-on may combine configuration values with its defaults: a given map replaces the
# default one, or Helm coalesces them (given keys are added to the default map; only null deletes one).
REPLACE = "replace"
HELM_MERGE = "helm-merge"
VALUE_MERGES = (REPLACE, HELM_MERGE)


class NoModel(LookupError):
    """A chart, add-on or configuration value that no model here was read for."""


def helm_coalesce(defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's merge of user values into a chart's values.yaml: maps merge key by key, anything else
    (lists included) is replaced, and ``null`` deletes the default."""
    merged = copy.deepcopy(dict(defaults))
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = helm_coalesce(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def combine(default: Any, given: Any, merge: str) -> Any:
    """One value as the chart renders it: ``given`` (None: not given) combined with ``default``."""
    if merge not in VALUE_MERGES:
        raise ValueError(f"merge {merge!r}: one of {VALUE_MERGES}")
    if given is None:
        return copy.deepcopy(default)
    if merge == HELM_MERGE and isinstance(default, Mapping) and isinstance(given, Mapping):
        return helm_coalesce(default, given)
    return copy.deepcopy(given)


@dataclass(frozen=True)
class PodTemplate:
    """A workload's pods as the scheduler sees them."""

    name: str
    spec: dict[str, Any]
    replicas: int = 1
    daemon: bool = False  # one pod on every node the spec admits
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ChartModel:
    source: str
    render: Callable[[dict[str, Any]], list[PodTemplate]]
    crds: frozenset[tuple[str, str]] = frozenset()


def _pod(
    *,
    affinity: Any = None,
    node_selector: Any = None,
    tolerations: Any = None,
    requests: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": dict(requests or {})}}]}
    if affinity:
        spec["affinity"] = affinity
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    return spec


# ---- NVIDIA/k8s-device-plugin v0.18.2 (commit fb1242a), deployments/helm/nvidia-device-plugin ----
NVIDIA_DEFAULTS: dict[str, Any] = {
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In", "values": ["true"]}
                        ]
                    },
                    {
                        "matchExpressions": [
                            {
                                "key": "feature.node.kubernetes.io/cpu-model.vendor_id",
                                "operator": "In",
                                "values": ["NVIDIA"],
                            }
                        ]
                    },
                    {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]},
                ]
            }
        }
    },
    "nodeSelector": {},
    "tolerations": [CRITICAL_ADDONS_ONLY, {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "resources": {},
}


def _nvidia_device_plugin(values: dict[str, Any]) -> list[PodTemplate]:
    # templates/daemonset-device-plugin.yml renders nodeSelector, affinity, tolerations as given
    # (each only when non-empty); NFD and GFD are off by default (gfd.enabled=false). The MPS control
    # daemon (templates/daemonset-mps-control-daemon.yml) adds nodeSelector nvidia.com/mps.capable=true.
    v = helm_coalesce(NVIDIA_DEFAULTS, values)
    requests = (v.get("resources") or {}).get("requests", {})
    plugin = _pod(affinity=v.get("affinity"), node_selector=v.get("nodeSelector"), tolerations=v.get("tolerations"))
    plugin["containers"][0]["resources"]["requests"] = requests
    mps = copy.deepcopy(plugin)
    mps["nodeSelector"] = {"nvidia.com/mps.capable": "true", **(v.get("nodeSelector") or {})}
    return [
        PodTemplate("nvidia-device-plugin", plugin, daemon=True),
        PodTemplate("nvidia-device-plugin-mps-control-daemon", mps, daemon=True),
    ]


# ---- aws/eks-charts stable/aws-efa-k8s-device-plugin v0.5.21 (commit d5fd92a) ----------------------
# values.yaml supportedInstanceLabels.values has 158 EC2 types and no ml.* (SageMaker) type; of our GPU
# profiles it lists these (g5.2xlarge and g6e.2xlarge have no EFA and are absent).
EFA_DEFAULT_INSTANCE_TYPES = [
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "g5.12xlarge",
    "g5.48xlarge",
    "g6e.12xlarge",
    "g6e.48xlarge",
]
EFA_DEFAULTS: dict[str, Any] = {
    "supportedInstanceLabels": {"keys": [INSTANCE_TYPE_LABEL], "values": EFA_DEFAULT_INSTANCE_TYPES},
    "nodeSelector": {},
    "tolerations": [],
    "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}},
}


def _efa_device_plugin(values: dict[str, Any]) -> list[PodTemplate]:
    # templates/daemonset.yaml: the affinity is hard-coded (.Values.affinity is never read): one term per
    # supportedInstanceLabels key, `In` the values list, and `eks.amazonaws.com/compute-type NotIn [auto]`
    # appended to the last term; tolerations = CriticalAddonsOnly + .Values.tolerations.
    v = helm_coalesce(EFA_DEFAULTS, values)
    labels = v["supportedInstanceLabels"]
    terms = [
        {"matchExpressions": [{"key": key, "operator": "In", "values": labels["values"]}]} for key in labels["keys"]
    ]
    terms[-1]["matchExpressions"].append(
        {"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["auto"]}
    )
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    spec = _pod(
        affinity=affinity,
        node_selector=v.get("nodeSelector"),
        tolerations=[CRITICAL_ADDONS_ONLY, *(v.get("tolerations") or [])],
        requests=(v.get("resources") or {}).get("requests"),
    )
    return [PodTemplate("aws-efa-k8s-device-plugin", spec, daemon=True)]


# ---- ray-project/kuberay v1.7.0 (commit 59d663a), helm-chart/kuberay-operator --------------------
KUBERAY_DEFAULTS: dict[str, Any] = {
    "nodeSelector": {},
    "affinity": {},
    "tolerations": [],
    "resources": {"limits": {"cpu": "100m", "memory": "512Mi"}},  # no requests: they default to the limits
}


def _kuberay_operator(values: dict[str, Any]) -> list[PodTemplate]:
    v = helm_coalesce(KUBERAY_DEFAULTS, values)
    resources = v.get("resources") or {}
    spec = _pod(
        affinity=v.get("affinity"),
        node_selector=v.get("nodeSelector"),
        tolerations=v.get("tolerations"),
        requests=resources.get("requests") or resources.get("limits"),
    )
    return [PodTemplate("kuberay-operator", spec)]


# sigs.k8s.io/kueue v0.17.0 charts/kueue: values.yaml (controllerManager.replicas 1, manager.resources requests
# 500m/512Mi, nodeSelector {}, tolerations []) and templates/manager/manager.yaml (one Deployment,
# kueue-controller-manager, taking those). The chart's CRDs (crds/) come with it.
KUEUE_DEFAULTS: dict[str, Any] = {"replicas": 1, "nodeSelector": {}, "tolerations": [], "affinity": {}}
KUEUE_MANAGER_REQUESTS = {"cpu": "500m", "memory": "512Mi"}
KUEUE_KINDS = frozenset(
    ("kueue.x-k8s.io", kind)
    for kind in ("ResourceFlavor", "ClusterQueue", "LocalQueue", "Workload", "WorkloadPriorityClass", "Cohort")
)


def _kueue_manager(values: Mapping[str, Any]) -> PodTemplate:
    v = helm_coalesce(KUEUE_DEFAULTS, values.get("controllerManager") or {})
    requests = ((v.get("manager") or {}).get("resources") or {}).get("requests") or KUEUE_MANAGER_REQUESTS
    spec = _pod(
        affinity=v.get("affinity"),
        node_selector=v.get("nodeSelector"),
        tolerations=v.get("tolerations"),
        requests=requests,
    )
    return PodTemplate("kueue-controller-manager", spec, replicas=int(v["replicas"]))


def _kueue(values: dict[str, Any]) -> list[PodTemplate]:
    return [_kueue_manager(values)]


PINNED_CHARTS: dict[tuple[str, str], ChartModel] = {
    (NVIDIA_DEVICE_PLUGIN.chart, NVIDIA_DEVICE_PLUGIN.version): ChartModel(
        f"NVIDIA/k8s-device-plugin v{NVIDIA_DEVICE_PLUGIN.version} deployments/helm/nvidia-device-plugin",
        _nvidia_device_plugin,
    ),
    (EFA_DEVICE_PLUGIN.chart, EFA_DEVICE_PLUGIN.version): ChartModel(
        f"aws/eks-charts stable/aws-efa-k8s-device-plugin {EFA_DEVICE_PLUGIN.version}", _efa_device_plugin
    ),
    (KUBERAY_OPERATOR.chart, KUBERAY_OPERATOR.version): ChartModel(
        f"ray-project/kuberay v{KUBERAY_OPERATOR.version} helm-chart/kuberay-operator (crds/)",
        _kuberay_operator,
        frozenset({("ray.io", "RayCluster"), ("ray.io", "RayJob"), ("ray.io", "RayService"), ("ray.io", "RayCronJob")}),
    ),
    (KUEUE.chart, KUEUE.version): ChartModel(
        f"kubernetes-sigs/kueue v{KUEUE.version} charts/kueue", _kueue, KUEUE_KINDS
    ),
}


def chart_model(chart: str, version: str) -> ChartModel:
    try:
        return PINNED_CHARTS[(chart, version)]
    except KeyError:
        raise NoModel(
            f"no model of Helm chart {chart} {version}: read its values.yaml and templates at that "
            "version and add one to llm_infra/rehearsal/upstream_charts.py"
        ) from None


# ---- AWS's HyperPod dependencies chart, as AWS's Helm-chart stack installs it ------------------------
# aws/sagemaker-hyperpod-cli 011ca92 (2026-06-22), helm_chart/HyperPodHelmChart; AWS's stack clones the
# default branch at deploy time, so this is the version read, not a pin.
# charts/health-monitoring-agent lists ml.<type> for every GPU type of our instance profiles.
HYPERPOD_HEALTH_AGENT_TYPES = [f"ml.{name}" for name in INSTANCE_PROFILES]


def hyperpod_chart(switches: Mapping[str, bool]) -> tuple[list[PodTemplate], frozenset[tuple[str, str]]]:
    """Pods and CRDs of the chart for the ``HelmOperators`` switches."""
    pods: list[PodTemplate] = []
    crds: set[tuple[str, str]] = set()
    if switches.get("trainingOperators.enabled"):
        # charts/training-operators: crds/ has PyTorchJob, TFJob, MXJob, XGBoostJob, PaddleJob; the
        # Deployment (namespace kubeflow, hard-coded) sets no affinity, tolerations or resources.
        crds |= {("kubeflow.org", kind) for kind in ("PyTorchJob", "TFJob", "MXJob", "XGBoostJob", "PaddleJob")}
        pods.append(PodTemplate("training-operator", _pod()))
    if switches.get("mpi-operator.enabled"):
        # charts/mpi-operator: templates/mpijob-crd.yaml; tolerates HyperPod's Unschedulable taint.
        crds.add(("kubeflow.org", "MPIJob"))
        tolerations = [
            {
                "key": "sagemaker.amazonaws.com/node-health-status",
                "operator": "Equal",
                "value": "Unschedulable",
                "effect": "NoSchedule",
            }
        ]
        pods.append(PodTemplate("mpi-operator", _pod(tolerations=tolerations)))
    if switches.get("health-monitoring-agent.enabled"):
        # charts/health-monitoring-agent: a DaemonSet on ml.* GPU instance types, tolerating every taint,
        # requests 500m / 512Mi.
        affinity = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": INSTANCE_TYPE_LABEL,
                                    "operator": "In",
                                    "values": HYPERPOD_HEALTH_AGENT_TYPES,
                                }
                            ]
                        }
                    ]
                }
            }
        }
        tolerations = [{"operator": "Exists", "effect": "NoSchedule"}, {"operator": "Exists", "effect": "NoExecute"}]
        spec = _pod(affinity=affinity, tolerations=tolerations, requests={"cpu": "500m", "memory": "512Mi"})
        pods.append(PodTemplate("health-monitoring-agent", spec, daemon=True))
    return pods, frozenset(crds)


# ---- EKS add-ons: the pods each runs (the add-on build is made from this upstream source) ----------
TOLERATE_ALL = [{"operator": "Exists"}]
NOT_FARGATE = {"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["fargate"]}
LINUX_NODES = [
    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
]


def _required(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(expressions)}]
            }
        }
    }


# The vpc-cni add-on's configuration keys this model reads, with their allowed values. EKS user guide,
# "Restrict Pod network traffic with Kubernetes network policies": {"enableNetworkPolicy": "true"} (a
# string) turns on the network policy agent, which needs vpc-cni v1.14.0 or later.
VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": ("true", "false")}
VPC_CNI_NETWORK_POLICY_SINCE = (1, 14, 0)


def _vpc_cni(values: dict[str, Any], merge: str) -> list[PodTemplate]:
    # amazon-vpc-cni-k8s v1.20.4 charts/aws-vpc-cni: aws-node (+ node agent) 25m each, init 25m. The node
    # agent container is there either way (enableNetworkPolicy sets its --enable-network-policy flag), so
    # the pods' requests and placement do not depend on it.
    for key, value in values.items():
        allowed = VPC_CNI_CONFIGURATION.get(key)
        if allowed is None:
            raise NoModel(f"vpc-cni: the model reads no configuration key {key!r}")
        if value not in allowed:
            raise NoModel(f"vpc-cni: {key}={value!r}; modelled: {allowed}")
    not_elsewhere = {**NOT_FARGATE, "values": ["fargate", "hybrid", "auto"]}
    spec = _pod(affinity=_required(*LINUX_NODES, not_elsewhere), tolerations=TOLERATE_ALL, requests={"cpu": "50m"})
    return [PodTemplate("aws-node", spec, daemon=True)]


def _coredns(values: dict[str, Any], merge: str) -> list[PodTemplate]:
    # EKS's CoreDNS manifest (eksctl's copy of the EKS default, image v1.12.4-eksbuild.1): 2 replicas. With the
    # add-on's autoScaling on (AWS, "Scale CoreDNS Pods for high DNS traffic"), EKS's control plane keeps between
    # minReplicas and maxReplicas: modelled at maxReplicas, the most it may run, which the nodes must hold.
    unread = sorted(set(values) - {"autoScaling"})
    if unread:
        raise NoModel(f"the model reads autoScaling only, got {', '.join(unread)}")
    replicas = 2
    scaling = values.get("autoScaling") or {}
    if scaling.get("enabled"):
        if "maxReplicas" not in scaling:
            raise NoModel("autoScaling without maxReplicas: EKS's default bound is not published")
        replicas = int(scaling["maxReplicas"])
    tolerations = [
        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
        CRITICAL_ADDONS_ONLY,
    ]
    spec = _pod(affinity=_required(*LINUX_NODES), tolerations=tolerations, requests={"cpu": "100m", "memory": "70Mi"})
    return [PodTemplate("coredns", spec, replicas=replicas)]


def _kube_proxy() -> list[PodTemplate]:
    # EKS's kube-proxy DaemonSet (eksctl's dump of an EKS cluster; read at a 1.25 build): 100m.
    spec = _pod(affinity=_required(*LINUX_NODES, NOT_FARGATE), tolerations=TOLERATE_ALL, requests={"cpu": "100m"})
    return [PodTemplate("kube-proxy", spec, daemon=True)]


def _pod_identity_agent() -> list[PodTemplate]:
    # aws/eks-pod-identity-agent v0.1.37 charts/eks-pod-identity-agent: no requests.
    not_elsewhere = {**NOT_FARGATE, "values": ["fargate", "hybrid", "auto"]}
    spec = _pod(affinity=_required(*LINUX_NODES, not_elsewhere), tolerations=TOLERATE_ALL)
    return [PodTemplate("eks-pod-identity-agent", spec, daemon=True)]


def _fsx_csi_driver() -> list[PodTemplate]:
    # kubernetes-sigs/aws-fsx-csi-driver v1.7.0 charts/aws-fsx-csi-driver: the node plugin tolerates every
    # taint (tolerateAllTaints: true), so it runs wherever a pod may mount FSx.
    linux = {"kubernetes.io/os": "linux"}
    node = _pod(affinity=_required(NOT_FARGATE), node_selector=linux, tolerations=TOLERATE_ALL)
    node["containers"][0]["resources"]["requests"] = {"cpu": "30m", "memory": "104Mi"}
    controller = _pod(
        node_selector=linux,
        tolerations=[CRITICAL_ADDONS_ONLY, {"effect": "NoExecute", "operator": "Exists", "tolerationSeconds": 300}],
        requests={"cpu": "40m", "memory": "136Mi"},
    )
    return [PodTemplate("fsx-csi-node", node, daemon=True), PodTemplate("fsx-csi-controller", controller, replicas=2)]


def _cloudwatch_observability() -> list[PodTemplate]:
    # aws-observability/helm-charts amazon-cloudwatch-observability 4.6.0 (operator 3.3.0): the agent and
    # Fluent Bit on every node, the DCGM exporter on NVIDIA instance types (plain and ml., ours included),
    # the operator without tolerations.
    linux = {"kubernetes.io/os": "linux"}
    gpu_types = [name for profile in INSTANCE_PROFILES for name in (profile, f"ml.{profile}")]
    instance_type = {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": gpu_types}

    def daemon(name: str, requests: dict[str, str], *expressions: dict[str, Any]) -> PodTemplate:
        spec = _pod(
            affinity=_required(*expressions, NOT_FARGATE),
            node_selector=linux,
            tolerations=TOLERATE_ALL,
            requests=requests,
        )
        return PodTemplate(name, spec, daemon=True)

    return [
        daemon("cloudwatch-agent", {"cpu": "250m", "memory": "128Mi"}),
        daemon("fluent-bit", {"cpu": "50m", "memory": "25Mi"}),
        daemon("dcgm-exporter", {"cpu": "250m", "memory": "128Mi"}, instance_type),
        PodTemplate("cloudwatch-operator", _pod(node_selector=linux, requests={"cpu": "100m", "memory": "64Mi"})),
    ]


# aws/eks-node-monitoring-agent v1.7.0, charts/eks-node-monitoring-agent (values.yaml, templates/daemonset.yaml,
# dcgm-daemonset.yaml): the agent on every amd64/arm64 node but Fargate, Auto Mode, hybrid and HyperPod ones,
# 10m/30Mi, tolerating every taint; the DCGM host engine (dcgm-server) on NVIDIA instance types only (the
# chart's list names every EC2 GPU type of INSTANCE_PROFILES; none ml.-prefixed), amd64, no requests, no
# tolerations. Configuration values read: each DaemonSet's tolerations (a list: Helm replaces it).
NODE_MONITORING_AGENT_DEFAULTS: dict[str, Any] = {
    "nodeAgent": {"tolerations": TOLERATE_ALL},
    "dcgmAgent": {"tolerations": []},
}


def _node_monitoring_agent(values: dict[str, Any], merge: str) -> list[PodTemplate]:
    for part, given in values.items():
        if part not in NODE_MONITORING_AGENT_DEFAULTS or set(given) - {"tolerations"}:
            raise NoModel(
                f"eks-node-monitoring-agent: the model reads only nodeAgent/dcgmAgent tolerations, got {part}"
            )
    v = {part: combine(default, values.get(part), merge) for part, default in NODE_MONITORING_AGENT_DEFAULTS.items()}
    elsewhere = {**NOT_FARGATE, "values": ["fargate", "auto", "hybrid"]}
    not_hyperpod = {"key": HYPERPOD_COMPUTE_TYPE_LABEL, "operator": "NotIn", "values": [HYPERPOD_COMPUTE_TYPE]}
    agent = _pod(
        affinity=_required(elsewhere, not_hyperpod, LINUX_NODES[1]),
        tolerations=v["nodeAgent"]["tolerations"],
        requests={"cpu": "10m", "memory": "30Mi"},
    )
    nvidia = {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": list(INSTANCE_PROFILES)}
    amd64 = {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
    dcgm = _pod(affinity=_required(nvidia, elsewhere, not_hyperpod, amd64), tolerations=v["dcgmAgent"]["tolerations"])
    return [
        PodTemplate("eks-node-monitoring-agent", agent, daemon=True),
        PodTemplate("dcgm-server", dcgm, daemon=True),
    ]


CERT_MANAGER_DEFAULTS: dict[str, Any] = {"nodeSelector": {"kubernetes.io/os": "linux"}, "tolerations": []}


def _cert_manager(values: dict[str, Any], merge: str) -> list[PodTemplate]:
    # cert-manager/cert-manager v1.19.1 (commit a22e21e), deploy/charts/cert-manager: the controller, the
    # webhook and the cainjector, one replica each, nodeSelector kubernetes.io/os=linux, no affinity,
    # tolerations or resources (values.yaml; templates/*deployment.yaml render them as given). The
    # startupapicheck Job is a Helm hook that ends; it holds no node.
    components = {
        "cert-manager": values,
        "cert-manager-webhook": values.get("webhook") or {},
        "cert-manager-cainjector": values.get("cainjector") or {},
    }
    pods = []
    for name, given in components.items():
        v = {key: combine(default, given.get(key), merge) for key, default in CERT_MANAGER_DEFAULTS.items()}
        pods.append(PodTemplate(name, _pod(node_selector=v["nodeSelector"], tolerations=v["tolerations"])))
    return pods


HYPERPOD_TRAINING_OPERATOR_CONTROLLER = "hp-training-operator-controller-manager"


def _hyperpod_training_operator(values: dict[str, Any], merge: str) -> list[PodTemplate]:
    # amazon-sagemaker-hyperpod-training-operator: no public chart. AWS documents its parameters (docs:
    # sagemaker-eks-operator-install, "The table below describes all parameters"): the controller
    # requests 1 CPU and 2Gi, and hpTrainingControllerManager.nodeSelector, by default the HyperPod nodes
    # (sagemaker.amazonaws.com/compute-type). Modelled: one replica, no tolerations; how the add-on
    # combines a given nodeSelector with that default is not published, hence ``merge``.
    manager = values.get("hpTrainingControllerManager") or {}
    default = {HYPERPOD_COMPUTE_TYPE_LABEL: HYPERPOD_COMPUTE_TYPE}
    node_selector = combine(default, manager.get("nodeSelector"), merge)
    spec = _pod(node_selector=node_selector, requests={"cpu": "1", "memory": "2Gi"})
    return [PodTemplate(HYPERPOD_TRAINING_OPERATOR_CONTROLLER, spec)]


def _task_governance() -> list[PodTemplate]:
    # amazon-sagemaker-hyperpod-taskgovernance: no public chart. AWS's upgrade guide says the add-on packages a
    # Kueue release of AWS's choice, configured in kueue-system; modelled as Kueue's own controller manager at
    # its chart's defaults (one replica, 500m/512Mi, no node selector): what the add-on adds is not published.
    return [_kueue_manager({})]


# The namespace each add-on's workloads run in; kube-system unless named here.
ADDON_NAMESPACES = {
    "amazon-cloudwatch-observability": "amazon-cloudwatch",
    "cert-manager": "cert-manager",
    "amazon-sagemaker-hyperpod-training-operator": HYPERPOD_TRAINING_OPERATOR_NAMESPACE,
    "amazon-sagemaker-hyperpod-taskgovernance": KUEUE.namespace,
}
# AWS's HyperPod chart installs into its stack's Namespace parameter, but for these (hard-coded).
HYPERPOD_CHART_NAMESPACES = {"training-operator": "kubeflow"}

AddonRender = Callable[[dict[str, Any], str], list[PodTemplate]]


def _unconfigurable(render: Callable[[], list[PodTemplate]]) -> AddonRender:
    """A model that reads no configuration values: given some, it fails rather than ignore them."""

    def checked(values: dict[str, Any], merge: str) -> list[PodTemplate]:
        if values:
            raise NoModel(f"the model reads no configuration values, got {values}")
        return render()

    return checked


# add-on name -> (the version prefix the model was read at, its pods for the add-on's configuration values
# and the way they combine with its defaults)
EKS_ADDONS: dict[str, tuple[str, AddonRender]] = {
    "vpc-cni": ("v1.20", _vpc_cni),
    "coredns": ("v1.12", _coredns),
    "kube-proxy": ("v1.", _unconfigurable(_kube_proxy)),
    "eks-pod-identity-agent": ("v1.3", _unconfigurable(_pod_identity_agent)),
    "aws-fsx-csi-driver": ("v1.7", _unconfigurable(_fsx_csi_driver)),
    "amazon-cloudwatch-observability": ("v4.6", _unconfigurable(_cloudwatch_observability)),
    "eks-node-monitoring-agent": ("v1.7", _node_monitoring_agent),
    "cert-manager": ("v1.19", _cert_manager),
    "amazon-sagemaker-hyperpod-training-operator": ("v1.2", _hyperpod_training_operator),
    "amazon-sagemaker-hyperpod-taskgovernance": ("v1.6", _unconfigurable(_task_governance)),
}


def addon_pods(
    name: str, version: str, configuration_values: str | None = None, *, merge: str = HELM_MERGE
) -> list[PodTemplate]:
    """The pods of an EKS add-on; ``configuration_values`` as in ``AWS::EKS::Addon`` (a JSON string),
    combined with the add-on's defaults by ``merge`` (EKS applies them as Helm values: ``HELM_MERGE``,
    unless the add-on's packaging does otherwise)."""
    read_at, render = EKS_ADDONS.get(name, ("", None))
    if render is None or not version.startswith(read_at):
        raise NoModel(
            f"no model of EKS add-on {name} {version}: read its upstream chart or manifest at that "
            "version and add one to llm_infra/rehearsal/upstream_charts.py"
        )
    return render(json.loads(configuration_values) if configuration_values else {}, merge)
