"""A PyTorchJob (kubeflow.org/v1) that runs torchrun, elastic, one pod per GPU node."""

from __future__ import annotations

from typing import Any

import cdk8s
from constructs import Construct

from llm_infra.k8s_manifests.objects import api_object
from llm_infra.k8s_manifests.payload import WORKLOADS_MOUNT
from llm_infra.k8s_manifests.pod_spec import gpu_pod_spec, one_pod_per_node, resilience_annotations
from llm_infra.k8s_manifests.values import WorkloadValues

JOB_LABEL = "llm-infra.aws/job"
RDZV_PORT = 29400


def worker_restart_policy(args: list[str]) -> str:
    """``OnFailure``, except for a job that ends in a verdict: ``ExitCode``, under which the training operator
    retries a pod only for exit codes 128-255 (a signal: a lost or evicted node) and fails the job for 1-127
    (Kubeflow training operator v1, ``RestartPolicyExitCode``). A failed verdict makes torchrun exit 1 once
    its own restarts are spent, so it is not retried until ``backoffLimit``: a verdict is not a fault a
    restart cures."""
    return "ExitCode" if "--verdict" in args else "OnFailure"


def kubeflow_pytorch_job(
    scope: Construct,
    construct_id: str,
    *,
    values: WorkloadValues,
    name: str,
    script: str,
    args: list[str],
    nodes: int,
    min_nodes: int,
    max_nodes: int,
    max_restarts: int,
    priority: str = "training",
) -> cdk8s.ApiObject:
    """torchrun ``/workloads/<script>`` on ``nodes`` GPU nodes, rendezvous c10d, elastic min..max.

    The training operator passes the rendezvous settings to torchrun as ``PET_*`` variables
    (nnodes ``min:max``, c10d endpoint, max restarts); torchrun restarts failed workers and the
    payload resumes from its last complete checkpoint. In HyperPod mode the job also carries the
    auto-resume annotations. The job and its pods carry the Kueue labels of a ``priority`` job.
    """
    labels = {JOB_LABEL: name}
    queued = {**labels, **values.queue_labels(priority)}
    command = ["torchrun", f"--nproc-per-node={values.profile.gpus}", f"{WORKLOADS_MOUNT}/{script}", *args]
    pod_spec = gpu_pod_spec(
        values,
        container_name="pytorch",  # the training operator looks for this container name
        command=command,
        # The job's identity for the payload's checkpoint lease (workloads/checkpoint_lease.py): the same in
        # every pod of the job and at every restart (a pod's uid changes; a PyTorchJob's uid never reaches it).
        extra_env={"PYTHONPATH": WORKLOADS_MOUNT, "LLM_INFRA_JOB": f"{values.namespace}/{name}"},
        affinity=one_pod_per_node(labels),
        # torchrun on the DLC's torch 2.8 gives its workers 30 s, whatever TORCH_ELASTIC_SHUTDOWN_TIMEOUT says.
        shutdown_seconds=values.torchrun_shutdown_seconds,
        # The replica spec's restartPolicy decides (the operator overwrites the template's, with a warning).
        restart_policy=None,
    )
    template: dict[str, Any] = {"metadata": {"labels": queued}, "spec": pod_spec}
    return api_object(
        scope,
        construct_id,
        api_version="kubeflow.org/v1",
        kind="PyTorchJob",
        name=name,
        namespace=values.namespace,
        labels=queued,
        annotations=resilience_annotations(values),
        body={
            "spec": {
                "elasticPolicy": {
                    "rdzvBackend": "c10d",
                    "rdzvPort": RDZV_PORT,
                    "minReplicas": min_nodes,
                    "maxReplicas": max_nodes,
                    "maxRestarts": max_restarts,
                },
                "nprocPerNode": str(values.profile.gpus),
                "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": values.job_max_retries},
                "pytorchReplicaSpecs": {
                    "Worker": {"replicas": nodes, "restartPolicy": worker_restart_policy(args), "template": template}
                },
            }
        },
    )
