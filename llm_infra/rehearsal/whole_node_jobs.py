"""A user's jobs of whole GPU nodes, to rehearse at scale (``bench/rehearse_scale.py``, the scale and HyperPod
tests): a PyTorchJob or a Job of N pods, each asking for all of one node's GPUs and EFA devices and tolerating
the GPU taint, as a 256-node training job does."""

from __future__ import annotations

from typing import Any

from llm_infra.instance_types import InstanceProfile, instance_profile
from llm_infra.queueing import EFA, GPU

IMAGE = "example.invalid/train:1"  # never pulled: KWOK runs the pods


def whole_node_pod(
    restart: str, profile: InstanceProfile | None = None, extra_limits: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod template of one container asking for every GPU and EFA device of ``profile`` (p5.48xlarge), and
    ``extra_limits`` (memory and hugepages, say)."""
    node = profile or instance_profile("p5.48xlarge")
    limits: dict[str, Any] = {GPU: node.gpus, EFA: node.efa_interfaces, **(extra_limits or {})}
    return {
        "spec": {
            "restartPolicy": restart,
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "pytorch", "image": IMAGE, "resources": {"limits": limits}}],
        }
    }


def pytorch_job(name: str, namespace: str, nodes: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A PyTorchJob of ``nodes`` whole-node pods (one master, the rest workers) with ``labels`` (none: the
    namespace's default queue)."""
    replica = {"restartPolicy": "OnFailure", "template": whole_node_pod("OnFailure")}
    specs = {"Master": {**replica, "replicas": 1}}
    if nodes > 1:
        specs["Worker"] = {**replica, "replicas": nodes - 1}
    metadata = {"name": name, "namespace": namespace, "labels": labels or {}}
    spec = {"pytorchReplicaSpecs": specs}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": metadata, "spec": spec}


def batch_job(
    name: str,
    namespace: str,
    nodes: int,
    labels: dict[str, str] | None = None,
    extra_limits: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Job of ``nodes`` whole-node pods, all at once, with ``labels``."""
    metadata = {"name": name, "namespace": namespace, "labels": labels or {}}
    spec = {"parallelism": nodes, "completions": nodes, "template": whole_node_pod("Never", extra_limits=extra_limits)}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}
