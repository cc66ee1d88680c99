"""KubeRayChart: a fault-tolerant RayCluster (GCS in Redis) and a RayJob running Ray Train."""

from __future__ import annotations

from typing import Any

import cdk8s
from constructs import Construct

from llm_infra.k8s_manifests.objects import api_object
from llm_infra.k8s_manifests.pod_spec import WORKLOADS_MOUNT, gpu_pod_spec, volume_mounts, volumes
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import NODE_ROLE_LABEL

RAY_CLUSTER = "ray"
RAY_JOB = "ray-train"
REDIS = "ray-gcs-redis"
REDIS_IMAGE = "public.ecr.aws/docker/library/redis:7.4.2"
REDIS_PORT = 6379


class KubeRayChart(cdk8s.Chart):
    """Ray on the GPU nodes, surviving a head restart.

    - Redis (external GCS storage) on the FSx volume, reachable only from Ray pods (NetworkPolicy);
    - a RayCluster: the head on system nodes, a GPU worker group with the same GPU/EFA/shm/FSx
      settings as the training jobs, autoscaling between ``gpu_nodes_min`` and ``gpu_nodes_max``,
      ``gcsFaultToleranceOptions`` pointing at Redis, so workers keep running while the head
      restarts;
    - a RayJob that runs ``workloads/ray_train.py`` (TorchTrainer, ``storage_path`` on FSx,
      ``FailureConfig(max_failures)``) on that cluster and resumes from its latest checkpoint.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        values: WorkloadValues,
        max_failures: int = 3,
        steps: int = 200,
    ) -> None:
        super().__init__(scope, construct_id)
        if max_failures < 0:
            raise ValueError(f"max_failures: {max_failures} must be >= 0")
        self._redis(values)
        self._cluster(values)
        entrypoint = " ".join(
            [
                f"python {WORKLOADS_MOUNT}/ray_train.py",
                f"--storage-path={values.fsx_mount_path}/ray/results",
                f"--name={RAY_JOB}",
                f"--num-workers={values.gpu_nodes * values.profile.gpus}",
                "--use-gpu",
                f"--max-failures={max_failures}",
                f"--steps={steps}",
            ]
        )
        api_object(
            self,
            "Job",
            api_version="ray.io/v1",
            kind="RayJob",
            name=RAY_JOB,
            namespace=values.namespace,
            body={"spec": {"clusterSelector": {"ray.io/cluster": RAY_CLUSTER}, "entrypoint": entrypoint}},
        )

    def _redis(self, values: WorkloadValues) -> None:
        labels = {"app.kubernetes.io/name": REDIS}
        api_object(
            self,
            "Redis",
            api_version="apps/v1",
            kind="Deployment",
            name=REDIS,
            namespace=values.namespace,
            labels=labels,
            body={
                "spec": {
                    "replicas": 1,
                    "strategy": {"type": "Recreate"},
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "nodeSelector": {NODE_ROLE_LABEL: "system"},
                            "containers": [
                                {
                                    "name": "redis",
                                    "image": REDIS_IMAGE,
                                    "args": ["--appendonly", "yes", "--dir", "/data"],
                                    "ports": [{"containerPort": REDIS_PORT, "name": "redis"}],
                                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                                    "volumeMounts": [{"name": "fsx", "mountPath": "/data", "subPath": "ray/redis"}],
                                }
                            ],
                            "volumes": [{"name": "fsx", "persistentVolumeClaim": {"claimName": values.pvc_name}}],
                        },
                    },
                }
            },
        )
        api_object(
            self,
            "RedisService",
            api_version="v1",
            kind="Service",
            name=REDIS,
            namespace=values.namespace,
            body={
                "spec": {"selector": labels, "ports": [{"port": REDIS_PORT, "targetPort": "redis", "name": "redis"}]}
            },
        )
        api_object(
            self,
            "RedisPolicy",
            api_version="networking.k8s.io/v1",
            kind="NetworkPolicy",
            name=REDIS,
            namespace=values.namespace,
            body={
                "spec": {
                    "podSelector": {"matchLabels": labels},
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [{"podSelector": {"matchLabels": {"ray.io/cluster": RAY_CLUSTER}}}],
                            "ports": [{"port": REDIS_PORT, "protocol": "TCP"}],
                        }
                    ],
                }
            },
        )

    def _cluster(self, values: WorkloadValues) -> None:
        env = [{"name": "PYTHONPATH", "value": WORKLOADS_MOUNT}, {"name": "RAY_USAGE_STATS_ENABLED", "value": "0"}]
        head: dict[str, Any] = {
            "rayStartParams": {"num-gpus": "0", "dashboard-host": "0.0.0.0"},
            "template": {
                "spec": {
                    "serviceAccountName": values.service_account,
                    "nodeSelector": {NODE_ROLE_LABEL: "system"},
                    "volumes": volumes(values),
                    "containers": [
                        {
                            "name": "ray-head",
                            "image": values.ray_image,
                            "env": env,
                            "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "8Gi"}},
                            "volumeMounts": volume_mounts(values),
                        }
                    ],
                }
            },
        }
        worker_spec = gpu_pod_spec(
            values,
            container_name="ray-worker",
            command=None,
            image=values.ray_image,
            restart_policy=None,
            extra_env={"PYTHONPATH": WORKLOADS_MOUNT, "RAY_USAGE_STATS_ENABLED": "0"},
        )
        api_object(
            self,
            "Cluster",
            api_version="ray.io/v1",
            kind="RayCluster",
            name=RAY_CLUSTER,
            namespace=values.namespace,
            body={
                "spec": {
                    "rayVersion": values.ray_version,
                    "enableInTreeAutoscaling": True,
                    "gcsFaultToleranceOptions": {
                        "redisAddress": f"{REDIS}.{values.namespace}.svc.cluster.local:{REDIS_PORT}"
                    },
                    "headGroupSpec": head,
                    "workerGroupSpecs": [
                        {
                            "groupName": "gpu",
                            "replicas": values.gpu_nodes,
                            "minReplicas": values.gpu_nodes_min,
                            "maxReplicas": values.gpu_nodes_max,
                            "rayStartParams": {},
                            "template": {"spec": worker_spec},
                        }
                    ],
                }
            },
        )
