"""The distributed job every chart starts: a HyperPodPyTorchJob under the HyperPod training operator,
else a Kubeflow PyTorchJob. Charts call :func:`training_job` and never ask which."""

from __future__ import annotations

import cdk8s
from constructs import Construct

from llm_infra.k8s_manifests.hyperpod_job import hyperpod_pytorch_job
from llm_infra.k8s_manifests.pytorch_job import kubeflow_pytorch_job
from llm_infra.k8s_manifests.values import WorkloadValues


def training_job(
    scope: Construct,
    construct_id: str,
    *,
    values: WorkloadValues,
    name: str,
    script: str,
    args: list[str],
    nodes: int | None = None,
    min_nodes: int | None = None,
    max_nodes: int | None = None,
    max_restarts: int | None = None,
    priority: str = "training",
) -> cdk8s.ApiObject:
    """``/workloads/<script>`` on ``nodes`` GPU nodes (default: all), one pod per node.

    ``min_nodes``..``max_nodes`` is the elastic range of a PyTorchJob (a HyperPodPyTorchJob runs at
    ``nodes``); ``max_restarts`` overrides the values' restart budget (see the two builders); ``priority``: the
    Kueue priority class's kind (``training`` or ``validation``).
    """
    nodes = nodes or values.gpu_nodes
    min_nodes = min_nodes or min(values.gpu_nodes_min, nodes)
    max_nodes = max_nodes or max(values.gpu_nodes_max, nodes)
    if not 1 <= min_nodes <= nodes <= max_nodes:
        raise ValueError(f"{name}: nodes must satisfy 1 <= min <= nodes <= max, got {min_nodes}/{nodes}/{max_nodes}")
    if values.hyperpod_training_operator:
        return hyperpod_pytorch_job(
            scope,
            construct_id,
            values=values,
            name=name,
            script=script,
            args=args,
            nodes=nodes,
            max_restarts=max_restarts,
            priority=priority,
        )
    return kubeflow_pytorch_job(
        scope,
        construct_id,
        values=values,
        name=name,
        script=script,
        args=args,
        nodes=nodes,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        max_restarts=values.max_restarts if max_restarts is None else max_restarts,
        priority=priority,
    )
