"""ValidationChart: node health checks on every GPU node, an all-reduce gate, a small training run.

Run them in order (see the README): each job's logs end in one JSON verdict line and the job
fails when the verdict does.
"""

from __future__ import annotations

import cdk8s
from constructs import Construct

from llm_infra.k8s_manifests.objects import api_object
from llm_infra.k8s_manifests.payload import WORKLOADS_MOUNT
from llm_infra.k8s_manifests.pod_spec import gpu_pod_spec, one_pod_per_node
from llm_infra.k8s_manifests.pytorch_job import JOB_LABEL
from llm_infra.k8s_manifests.training_job import training_job
from llm_infra.k8s_manifests.training_job_chart import checkpoint_args
from llm_infra.k8s_manifests.values import WorkloadValues

HEALTH_JOB = "validation-1-health"
ALLREDUCE_JOB = "validation-2-allreduce"
TRAINING_JOB = "validation-3-training"
ALLREDUCE_SIZES = "8M,64M,512M,2G"


HEALTH_STATE_DIR = "/var/lib/llm-infra/health"  # a hostPath on each GPU node (health_check.py --state-dir)


class ValidationChart(cdk8s.Chart):
    """(1) ``health_check.py`` on every GPU node (an indexed Job, one pod per node): GPU count,
    Xid/ECC errors, EFA devices = the instance profile; (2) ``allreduce_bench.py`` across all GPU
    nodes, pass when bus bandwidth at 2 GiB reaches the profile's threshold (p5: 375 GB/s);
    (3) ``train.py --preset tiny`` with a checkpoint, an injected fault and a resume: pass when
    the loss falls and the resumed run finishes from a complete checkpoint.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        values: WorkloadValues,
        min_busbw_gbps: float | None = None,
        dcgm_diag_level: int = 1,
    ) -> None:
        super().__init__(scope, construct_id)
        if dcgm_diag_level not in (0, 1, 2, 3):
            raise ValueError(f"dcgm_diag_level: {dcgm_diag_level} is not allowed; allowed: 0 (off), 1, 2, 3")
        self._health_job(values, dcgm_diag_level)
        # One node measures NVLink (or PCIe), more measure EFA: the floor follows the node count.
        multi_node = values.gpu_nodes > 1
        default = values.profile.allreduce_busbw_gbps if multi_node else values.profile.single_node_busbw_gbps
        threshold = default if min_busbw_gbps is None else min_busbw_gbps
        transport = ["--expect-efa-transport"] if multi_node and values.efa_devices else []
        training_job(
            self,
            "AllReduce",
            values=values,
            name=ALLREDUCE_JOB,
            script="allreduce_bench.py",
            args=[f"--sizes={ALLREDUCE_SIZES}", f"--min-busbw-gbps={threshold:g}", "--json", *transport],
            min_nodes=values.gpu_nodes,
            max_nodes=values.gpu_nodes,
            max_restarts=0,
            priority="validation",
        )
        training_job(
            self,
            "Training",
            values=values,
            name=TRAINING_JOB,
            script="train.py",
            args=[
                "--preset=tiny",
                "--steps=60",
                "--checkpoint-every=20",
                *checkpoint_args(
                    values, directory=f"{values.fsx_mount_path}/validation/{TRAINING_JOB}", name=TRAINING_JOB
                ),
                "--fail-at-step=30",
                "--fail-rank=0",
                "--verdict",
            ],
            min_nodes=values.gpu_nodes,
            max_nodes=values.gpu_nodes,
            max_restarts=1,
            priority="validation",
        )

    def _health_job(self, values: WorkloadValues, dcgm_diag_level: int) -> None:
        labels = {JOB_LABEL: HEALTH_JOB}
        queued = {**labels, **values.queue_labels("validation")}
        command = [
            "python3",
            f"{WORKLOADS_MOUNT}/health_check.py",
            f"--expected-gpus={values.profile.gpus}",
            f"--expected-efa={values.efa_devices}",
            f"--gpu-name={values.profile.gpu_model.split('-')[0]}",
            f"--dcgm-diag-level={dcgm_diag_level}",
            "--kmsg=/dev/kmsg",
            f"--state-dir={HEALTH_STATE_DIR}",
        ]
        pod_spec = gpu_pod_spec(
            values,
            container_name="health-check",
            command=command,
            restart_policy="Never",
            affinity=one_pod_per_node(labels),
            # The Xid check reads the kernel log, the node's /dev/kmsg, and DCGM diagnoses the GPUs: privileged
            # (as the Xid monitor).
            privileged=True,
        )
        pod_spec["volumes"].append({"name": "kmsg", "hostPath": {"path": "/dev/kmsg", "type": "CharDevice"}})
        (container,) = pod_spec["containers"]
        # The verdict names the node (health_check.py reads NODE_NAME), not the pod's hostname.
        container["env"].append({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
        container["volumeMounts"].append({"name": "kmsg", "mountPath": "/dev/kmsg", "readOnly": True})
        # Where the node's last health pass is remembered (the kernel-log position and boot id): Xids
        # before it were judged already and no longer fail the node. On the node, so it outlives the pod.
        health_state = {"path": HEALTH_STATE_DIR, "type": "DirectoryOrCreate"}
        pod_spec["volumes"].append({"name": "health-state", "hostPath": health_state})
        container["volumeMounts"].append({"name": "health-state", "mountPath": HEALTH_STATE_DIR})
        api_object(
            self,
            "Health",
            api_version="batch/v1",
            kind="Job",
            name=HEALTH_JOB,
            namespace=values.namespace,
            labels=queued,
            body={
                "spec": {
                    "completionMode": "Indexed",
                    "completions": values.gpu_nodes,
                    "parallelism": values.gpu_nodes,
                    # Per index: one node's failed check must not end the Job while the other nodes'
                    # checks still run (a plain backoffLimit 0 would; Kubernetes >= 1.33, GA).
                    "backoffLimitPerIndex": 0,
                    "maxFailedIndexes": values.gpu_nodes,
                    "ttlSecondsAfterFinished": 86400,
                    "template": {"metadata": {"labels": queued}, "spec": pod_spec},
                }
            },
        )
