"""KubeRayChart: a RayCluster that holds no GPU until work arrives, and a RayJob that resumes from FSx."""

from __future__ import annotations

from typing import Any

import cdk8s
from constructs import Construct

from llm_infra.instance_types import kubelet_reserved_millicpu
from llm_infra.k8s_manifests.objects import api_object
from llm_infra.k8s_manifests.payload import WORKLOADS_MOUNT
from llm_infra.k8s_manifests.pod_spec import (
    container_security_context,
    gpu_node_affinity,
    gpu_pod_spec,
    pod_security_context,
    volume_mounts,
    volumes,
)
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import GPU_TOLERATION, NODE_ROLE_LABEL

RAY_CLUSTER = "ray"
RAY_JOB = "ray-train"
REDIS = "ray-gcs-redis"
REDIS_IMAGE = "public.ecr.aws/docker/library/redis:7.4.2"
REDIS_PORT = 6379
# The Secret you create before applying (README): the Redis password, never written into a manifest.
REDIS_PASSWORD_SECRET = {"name": "ray-gcs-redis", "key": "password"}
REDIS_DATA = "/data"
# The official image's redis user and group (docker-library/redis at e9204996, Dockerfile.template L15-16, from
# which every version's Dockerfile is generated, e.g. 7.4-rc/debian/Dockerfile L11-12: groupadd -r -g 999 redis;
# useradd -r -g redis -u 999 redis), whom its entrypoint, started as root, gives /data and runs redis-server as
# (docker-entrypoint.sh L10-14); started as that user, the entrypoint does neither.
REDIS_UID = 999
# Redis's memory: the container's limit, and maxmemory at half of it, so that the fork of an append-only file
# rewrite (copy-on-write pages, at worst the whole dataset again), client buffers and allocator fragmentation fit
# beside the data. Ray's GCS tables (nodes, actors, jobs, placement groups) take a few MB.
REDIS_MEMORY = "1Gi"
REDIS_MAXMEMORY = "512mb"  # Redis's units: mb = 1024 * 1024 bytes
# Append-only file in /data; the password from the env var (the kubelet expands $(REDIS_PASSWORD)). At maxmemory,
# noeviction refuses writes with an error Ray's GCS reports, rather than deleting keys: an evicting policy would
# drop GCS state (actors, placement groups, the nodes' registrations) silently, and a head restarted from it
# would restore a cluster that does not match what runs.
REDIS_ARGS = [
    "--appendonly",
    "yes",
    "--dir",
    REDIS_DATA,
    "--maxmemory",
    REDIS_MAXMEMORY,
    "--maxmemory-policy",
    "noeviction",
    "--requirepass",
    "$(REDIS_PASSWORD)",
]
# PONG from an authenticated PING. While Redis loads its append-only file it answers LOADING, so the startup probe
# gives it time before the liveness probe may restart it.
REDIS_PING = ["sh", "-c", 'redis-cli -a "$REDIS_PASSWORD" --no-auth-warning ping | grep -q PONG']
# KubeRay labels every pod of a RayCluster (and its Redis cleanup Job) with the cluster's name.
CLUSTER_LABEL = "ray.io/cluster"
RAY_ENV = {"PYTHONPATH": WORKLOADS_MOUNT, "RAY_USAGE_STATS_ENABLED": "0"}
# HyperPod's GPU instance group runs one thread per core (constructs/hyperpod_cluster.py,
# HyperPodInstanceGroup.threads_per_core): its nodes show half the instance's vCPUs.
HYPERPOD_GPU_THREADS_PER_CORE = 1


def gpu_worker_cpus(values: WorkloadValues) -> int:
    """The CPUs Ray counts on a GPU worker: every whole CPU its node allocates to pods.

    The worker takes the whole node and, like the training pods, requests no CPU and has no CPU limit
    (gpu_pod_spec): it may use every vCPU the node shows less what the kubelet reserves, rounded down
    so Ray never plans on a CPU the node lacks. The DaemonSets beside it (about one CPU of requests in
    all, mostly idle) are not subtracted: the count must not depend on which add-ons run. p5.48xlarge:
    191 on EKS (192 vCPUs), 95 on HyperPod (96: ThreadsPerCore=1).
    """
    threads_per_core = HYPERPOD_GPU_THREADS_PER_CORE if values.hyperpod else 2
    vcpus = values.profile.vcpus * threads_per_core // 2
    return int(vcpus * 1000 - kubelet_reserved_millicpu(vcpus)) // 1000


class KubeRayChart(cdk8s.Chart):
    """Ray on the GPU nodes, applied on demand (``kubectl apply``), never at deploy. Under HyperPod task
    governance, the RayJob alone (the RayCluster could not run there: below).

    - ``RayCluster ray``: a long-lived cluster to submit to. Its head runs on the system nodes and
      holds no GPU; its GPU worker group starts at zero and KubeRay's autoscaler (v2) adds whole GPU
      nodes when work asks for GPUs, up to ``gpu_nodes_max``, and removes them ``idle_timeout_seconds``
      after they fall idle. GCS fault tolerance on an in-cluster Redis (append-only file on FSx, the
      password from the Secret ``ray-gcs-redis``, reachable only from this cluster's pods) keeps the
      workers through a head restart. It names no Kueue queue and Kueue leaves it alone (the ray.io/raycluster
      integration is off: docs/cluster-software.md, "Gang admission").
    - ``RayJob ray-train``: ``ray_train.py`` (train.py's loop under Ray Train) on a cluster of its
      own of ``gpu_nodes`` GPU workers, no autoscaler, in the Kueue queue (admitted whole), with the same
      head (under task governance on a GPU node, the submitter a container in it) and workers and no GCS
      fault tolerance (a RayJob's driver dies with its head whatever GCS keeps, and KubeRay does not restart
      the head of a RayJob's cluster). A failed
      worker is retried in place by Ray Train (``max_failures``); a lost head or driver fails the
      job and KubeRay retries it ``backoff_limit`` times on a new cluster; every attempt resumes
      from the checkpoint dir on FSx. The cluster is deleted ``ttl_seconds_after_finished`` after
      the job ends.

    Both pass the GPU workers the NCCL/EFA environment, devices, hugepages, FSx and health-status
    placement of the training jobs; across nodes with EFA the job first checks, as the validation
    suite does, that NCCL runs on EFA and not on sockets.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        values: WorkloadValues,
        preset: str = "8b",
        steps: int = 1000,
        checkpoint_every: int = 100,
        max_failures: int = 3,
        backoff_limit: int = 2,
        ttl_seconds_after_finished: int = 600,
        idle_timeout_seconds: int = 300,
    ) -> None:
        super().__init__(scope, construct_id)
        if values.ray_image is None:
            raise ValueError(
                "ray_image: the Ray head and workers need an image with torch, Ray and the EFA libraries; "
                "set ray_image to workloads/Dockerfile built and pushed, or deploy with image_asset=true"
            )
        counts = {
            "steps": steps,
            "checkpoint_every": checkpoint_every,
            "ttl_seconds_after_finished": ttl_seconds_after_finished,
            "idle_timeout_seconds": idle_timeout_seconds,
        }
        for key, value in counts.items():
            if value < 1:
                raise ValueError(f"{key}: {value} must be >= 1")
        for key, value in {"max_failures": max_failures, "backoff_limit": backoff_limit}.items():
            if value < 0:
                raise ValueError(f"{key}: {value} must be >= 0")
        self.values, self.image, self.idle_timeout_seconds = values, values.ray_image, idle_timeout_seconds
        # Under task governance the team's queue has its GPU instances as its only flavours (gpu_nodes_only), AWS's
        # admission policy refuses an unqueued pod in the team's namespace, and Kueue 0.17 refuses to queue a
        # RayCluster that autoscales: there the always-on RayCluster and its Redis could never run, so the RayJob
        # alone is rendered (docs/hyperpod.md, "What runs in the team namespace").
        gpu_only = values.queues is not None and values.queues.gpu_nodes_only
        if not gpu_only:
            self._redis()
            api_object(
                self,
                "Cluster",
                api_version="ray.io/v1",
                kind="RayCluster",
                name=RAY_CLUSTER,
                namespace=values.namespace,
                body={"spec": self._cluster_spec(fault_tolerant=True)},
            )
        checkpoint_dir = f"{values.fsx_mount_path}/checkpoints/{RAY_JOB}"
        entrypoint = [
            f"python3 {WORKLOADS_MOUNT}/ray_train.py",
            f"--num-workers={values.gpu_nodes * values.profile.gpus}",
            "--use-gpu",
            f"--storage-path={values.fsx_mount_path}/ray/results",
            f"--name={RAY_JOB}",
            f"--max-failures={max_failures}",
            f"--checkpoint-dir={checkpoint_dir}",  # every attempt, every new cluster resumes from here
            f"--preset={preset}",
            f"--steps={steps}",
            f"--checkpoint-every={checkpoint_every}",
            f"--pg-timeout-seconds={values.pg_timeout_seconds}",
        ]
        if values.gpu_nodes > 1 and values.efa_devices:  # one node talks over NVLink: no network channel
            entrypoint.append("--expect-efa-transport")
        # Under task governance the job's head goes to the GPU nodes too, and the submitter runs beside it in the
        # head pod (SidecarMode: no submitter Job, which Kueue would send to a GPU node it does not tolerate;
        # kueue v0.17.0 pkg/controller/jobs/rayjob queues the submitter of K8sJobMode only).
        job_cluster = self._cluster_spec(fault_tolerant=False, workers=values.gpu_nodes, head_on_gpu_nodes=gpu_only)
        # The job's pods carry its queue labels too: task governance's admission policy checks each Pod in a team
        # namespace for one (docs/hyperpod.md, "What runs in the team namespace"); KubeRay copies the templates'.
        if queued := values.queue_labels("training"):
            for group in (job_cluster["headGroupSpec"], *job_cluster["workerGroupSpecs"]):
                group["template"] = {"metadata": {"labels": queued}, **group["template"]}
        api_object(
            self,
            "Job",
            api_version="ray.io/v1",
            kind="RayJob",
            name=RAY_JOB,
            namespace=values.namespace,
            labels=values.queue_labels("training"),
            body={
                "spec": {
                    "entrypoint": " ".join(entrypoint),
                    "backoffLimit": backoff_limit,
                    "shutdownAfterJobFinishes": True,
                    "ttlSecondsAfterFinished": ttl_seconds_after_finished,
                    "rayClusterSpec": job_cluster,
                    **({"submissionMode": "SidecarMode"} if gpu_only else {}),
                }
            },
        )

    def _cluster_spec(
        self, *, fault_tolerant: bool, workers: int | None = None, head_on_gpu_nodes: bool = False
    ) -> dict[str, Any]:
        """The RayCluster's spec (its head on a GPU node with ``head_on_gpu_nodes``, else a system node);
        ``workers``: that many GPU workers from the start and no autoscaler (a
        RayJob's cluster: a gang Kueue admits whole, and Kueue 0.17 refuses a queued RayJob whose cluster
        autoscales: kueue v0.17.0 pkg/controller/jobs/raycluster/raycluster_webhook.go validateCreate), else
        none until work asks for GPUs, up to ``gpu_nodes_max``."""
        values = self.values
        spec: dict[str, Any] = {
            "rayVersion": values.ray_version,
            # The dashboard and job API only for token holders; KubeRay keeps the token in a Secret named
            # after the cluster and hands it to the pods and the submitter (needs Ray >= 2.52: KubeRay v1.7.0
            # ray-operator/controllers/ray/utils/validation.go).
            "authOptions": {"mode": "token"},
            "headGroupSpec": self._head_group(on_gpu_nodes=head_on_gpu_nodes),
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": workers or 0,
                    "minReplicas": workers or 0,
                    "maxReplicas": workers or values.gpu_nodes_max,
                    # Ray 2.60's autoscaler (v1 and v2) reads each group's CPUs from rayStartParams num-cpus,
                    # else the Ray container's CPU limit, else its CPU request, and raises without one
                    # (ray/autoscaler/_private/kuberay/autoscaling_config.py _get_num_cpus, called from
                    # _derive_autoscaling_config_from_ray_cr): the workers have neither, so say it here;
                    # KubeRay passes it to `ray start`, so the raylet registers the same count. GPUs and
                    # memory come from the container's limits (nvidia.com/gpu, memory: _get_num_gpus,
                    # _get_memory), which KubeRay v1.7.0 also passes as --num-gpus and --memory
                    # (ray-operator/controllers/ray/common/pod.go generateRayStartCommand).
                    "rayStartParams": {"num-cpus": str(gpu_worker_cpus(values))},
                    "template": {
                        "spec": gpu_pod_spec(
                            values,
                            container_name="ray-worker",
                            command=None,  # KubeRay's `ray start`
                            image=self.image,
                            restart_policy=None,  # autoscaler v2: Never or unset
                            extra_env=RAY_ENV,
                        )
                    },
                }
            ],
        }
        if workers is None:
            spec["enableInTreeAutoscaling"] = True
            spec["autoscalerOptions"] = {
                "version": "v2",
                "idleTimeoutSeconds": self.idle_timeout_seconds,
                # The autoscaler sidecar KubeRay adds to the head: it calls the Kubernetes API and Ray's GCS and
                # needs no capability (KubeRay v1.7.0 ray-operator/controllers/ray/common/pod.go L1024-1026 sets
                # it on the container).
                "securityContext": container_security_context(),
            }
        if fault_tolerant:
            spec["gcsFaultToleranceOptions"] = {
                "redisAddress": f"{REDIS}.{values.namespace}.svc.cluster.local:{REDIS_PORT}",
                "redisPassword": {"valueFrom": {"secretKeyRef": REDIS_PASSWORD_SECRET}},
            }
        return spec

    def _head_group(self, *, on_gpu_nodes: bool = False) -> dict[str, Any]:
        """On a system node (``on_gpu_nodes``: a GPU node, beside a worker, tolerating the GPU taint), no GPU
        and no CPU for tasks (the workers' place): GCS, the dashboard, the
        driver and Ray Train's controller. No service account: KubeRay gives it one with the autoscaler's
        rights only, and its token stays mounted for the autoscaler sidecar (tests/checkov_accepted.py).
        Like the workers, no capability and the runtime's seccomp filter (pod_spec.container_security_context);
        KubeRay copies the Ray container's security context to the init containers it adds."""
        values = self.values
        placement: dict[str, Any] = (
            {"affinity": gpu_node_affinity(), "tolerations": [GPU_TOLERATION]}
            if on_gpu_nodes
            else {"nodeSelector": {NODE_ROLE_LABEL: "system"}}
        )
        return {
            "rayStartParams": {"num-cpus": "0", "num-gpus": "0", "dashboard-host": "0.0.0.0"},
            "template": {
                "spec": {
                    **placement,
                    "securityContext": pod_security_context(),
                    "volumes": volumes(values),
                    "containers": [
                        {
                            "name": "ray-head",
                            "image": self.image,
                            "env": [{"name": k, "value": v} for k, v in RAY_ENV.items()],
                            # One CPU: it runs no tasks. Two heads (the cluster's and the job's), their
                            # autoscalers and Redis must fit the system nodes beside the operators.
                            "resources": {"requests": {"cpu": "1", "memory": "8Gi"}, "limits": {"memory": "8Gi"}},
                            "securityContext": container_security_context(),
                            "volumeMounts": volume_mounts(values),
                        }
                    ],
                }
            },
        }

    def _redis(self) -> None:
        """Redis for GCS fault tolerance: one pod on the system nodes, its append-only file on FSx,
        the password from the Secret, reachable only from the RayCluster's pods.

        Redis runs as the image's redis user (uid 999), with no capability, a read-only root (it writes only
        its append-only file, in /data) and no Kubernetes API token. The kubelet creates the FSx subPath as
        root, so an init container hands it to uid 999 first: root with CHOWN alone, on that one directory
        (what Redis creates in it is its own; the image's entrypoint used to chown it as root at each start).
        Probes: a startup probe while the append-only file loads, then liveness and readiness, all an
        authenticated PING."""
        values = self.values
        labels = {"app.kubernetes.io/name": REDIS}
        password = {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": REDIS_PASSWORD_SECRET}}
        data = {"name": "fsx", "mountPath": REDIS_DATA, "subPath": "ray/redis"}
        # chown only when needed: an existing directory is Redis's already.
        hand_over = f'[ "$(stat -c %u {REDIS_DATA})" = {REDIS_UID} ] || chown {REDIS_UID}:{REDIS_UID} {REDIS_DATA}'
        as_redis = {"runAsUser": REDIS_UID, "runAsGroup": REDIS_UID, "runAsNonRoot": True}
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
                            "automountServiceAccountToken": False,  # Redis never calls the Kubernetes API
                            "securityContext": pod_security_context(),
                            "initContainers": [
                                {
                                    "name": "data-owner",
                                    "image": REDIS_IMAGE,
                                    "command": ["sh", "-c", hand_over],
                                    "resources": {
                                        "requests": {"cpu": "10m", "memory": "16Mi"},
                                        "limits": {"memory": "32Mi"},
                                    },
                                    "securityContext": container_security_context(
                                        add=("CHOWN",), runAsUser=0, runAsNonRoot=False, readOnlyRootFilesystem=True
                                    ),
                                    "volumeMounts": [data],
                                }
                            ],
                            "containers": [
                                {
                                    "name": "redis",
                                    "image": REDIS_IMAGE,
                                    "args": REDIS_ARGS,
                                    "env": [password],
                                    "ports": [{"containerPort": REDIS_PORT, "name": "redis"}],
                                    "startupProbe": {
                                        "exec": {"command": REDIS_PING},
                                        "periodSeconds": 5,
                                        "timeoutSeconds": 5,
                                        "failureThreshold": 60,  # 5 minutes to load the append-only file
                                    },
                                    "livenessProbe": {
                                        "exec": {"command": REDIS_PING},
                                        "periodSeconds": 10,
                                        "timeoutSeconds": 5,
                                        "failureThreshold": 6,
                                    },
                                    "readinessProbe": {
                                        "exec": {"command": REDIS_PING},
                                        "periodSeconds": 10,
                                        "timeoutSeconds": 5,
                                    },
                                    "resources": {
                                        "requests": {"cpu": "500m", "memory": REDIS_MEMORY},
                                        "limits": {"memory": REDIS_MEMORY},
                                    },
                                    "securityContext": container_security_context(
                                        readOnlyRootFilesystem=True, **as_redis
                                    ),
                                    "volumeMounts": [data],
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
                            "from": [{"podSelector": {"matchLabels": {CLUSTER_LABEL: RAY_CLUSTER}}}],
                            "ports": [{"port": REDIS_PORT, "protocol": "TCP"}],
                        }
                    ],
                }
            },
        )
