"""Kubernetes node labels, taints and tolerations shared by the stacks and the charts."""

from __future__ import annotations

NODE_ROLE_LABEL = "llm-infra.aws/node-role"  # "system", "gpu" or "cpu"
EFA_LABEL = "llm-infra.aws/efa"  # "true" where the node's EFA interfaces are attached
GPU_TAINT_KEY = "nvidia.com/gpu"  # NoSchedule on GPU nodes: only pods that ask for GPUs land there
# HyperPod labels every node with its health (docs: sagemaker-hyperpod-eks-resiliency-node-labels) and
# taints nodes under deep health checks or awaiting reboot/replacement.
HEALTH_STATUS_KEY = "sagemaker.amazonaws.com/node-health-status"
HEALTH_STATUS_SCHEDULABLE = "Schedulable"

GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
CRITICAL_ADDONS_TOLERATION = {"key": "CriticalAddonsOnly", "operator": "Exists"}
HEALTH_STATUS_TOLERATION = {"key": HEALTH_STATUS_KEY, "operator": "Exists", "effect": "NoSchedule"}
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"  # the kubelet's; ml.-prefixed on HyperPod
