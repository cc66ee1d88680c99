"""What the pinned upstream Helm charts do with the values we pass: their defaults and templates, as
pod specs the scheduler sees, and the CRDs they install.

Each model was read from the chart's source at the pinned version (paths and commits below); a test
that meets a chart or version without a model fails, so a version bump means reading the new source.
Only what scheduling and CRD presence depend on is modelled: affinity, nodeSelector, tolerations,
resource requests, replicas, DaemonSet or not.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llm_infra.instance_types import INSTANCE_PROFILES

CRITICAL_ADDONS_ONLY = {"key": "CriticalAddonsOnly", "operator": "Exists"}
HYPERPOD_INSTANCE_TYPE_TERM = "node.kubernetes.io/instance-type"


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
    "g5.12xlarge",
    "g5.48xlarge",
    "g6e.12xlarge",
    "g6e.48xlarge",
]
EFA_DEFAULTS: dict[str, Any] = {
    "supportedInstanceLabels": {"keys": [HYPERPOD_INSTANCE_TYPE_TERM], "values": EFA_DEFAULT_INSTANCE_TYPES},
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


PINNED_CHARTS: dict[tuple[str, str], ChartModel] = {
    ("nvidia-device-plugin", "0.18.2"): ChartModel(
        "NVIDIA/k8s-device-plugin v0.18.2 deployments/helm/nvidia-device-plugin", _nvidia_device_plugin
    ),
    ("aws-efa-k8s-device-plugin", "v0.5.21"): ChartModel(
        "aws/eks-charts stable/aws-efa-k8s-device-plugin v0.5.21", _efa_device_plugin
    ),
    ("kuberay-operator", "1.7.0"): ChartModel(
        "ray-project/kuberay v1.7.0 helm-chart/kuberay-operator (crds/)",
        _kuberay_operator,
        frozenset({("ray.io", "RayCluster"), ("ray.io", "RayJob"), ("ray.io", "RayService"), ("ray.io", "RayCronJob")}),
    ),
}


def chart_model(chart: str, version: str) -> ChartModel:
    try:
        return PINNED_CHARTS[(chart, version)]
    except KeyError:
        raise AssertionError(
            f"no contract model for Helm chart {chart} {version}: read its values.yaml and templates at that "
            "version and add one to tests/upstream_charts.py"
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
                                    "key": HYPERPOD_INSTANCE_TYPE_TERM,
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
